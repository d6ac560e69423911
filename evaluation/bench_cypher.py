#!/usr/bin/env python
"""Cypher benchmark (issue 29 "Done when"): compile and run time of a 2-hop pattern and of a ``*1..3``
path at 10k and 100k relations. On demand, not a test.

For each size in ``--sizes`` (relations) a fresh realm ``bench_cy<size>`` gets one space ``bench`` written
directly in SQL — no extraction, no embeddings (a Cypher read touches neither): ``size / 2`` entities
``E1`` … named and typed in turn (Person, Organization, Place, Concept), and ``size`` relations between
uniformly random distinct entities (``setseed(0.29)``) over 20 predicates, 30 % dated (``valid_from``
1990–2019), 2 % superseded by another; then ``ANALYZE``. So the mean degree is 4, as in the scale
benchmark's 100k graph (100k relations, ~50k entities).

Each query runs ``--runs`` times with a random named start vertex (the same seeded sequence per size),
after ``--warmup`` runs:

- ``2-hop``: ``MATCH (a {name: $a})-[r1]->(m)-[r2]->(c) RETURN m.name, type(r2), c.name``
- ``2-hop as_of``: the same with ``as_of = "2005"`` (the validity filter inside both hops)
- ``*1..3``: ``MATCH (a {name: $a})-[p*1..3]-(b {name: $b}) RETURN size(p)`` with ``b`` a vertex two hops
  away from ``a`` (so a path exists)

Reported per query, in milliseconds (p50 / p95): ``compile`` (parse + compile, no database), ``read`` (the
compiled SQL on a pooled read connection: the read-only transaction, its statement timeout, execute and
fetch) and ``total`` (:func:`pgrag_dag.cypher`, end to end: compile, the realm/space check, the read, the
polars frame). ``--parse-only`` times the parser alone on three queries of the subset (the lark row of
``evaluation/README.md`` "Cypher parser").

    .venv/bin/python evaluation/bench_cypher.py                      # 10k and 100k: about a minute
    .venv/bin/python evaluation/bench_cypher.py --sizes 1000 --runs 50
    .venv/bin/python evaluation/bench_cypher.py --parse-only

The database is ``PGRAG_DATABASE_URL`` when set, else an embedded PostgreSQL in a temporary directory.
JSON goes to ``evaluation/results/bench_cypher.json`` (``--results``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from psycopg import sql

from pgrag_dag.cypher import CypherOptions, cypher
from pgrag_dag.cypher.parse import parse
from pgrag_dag.cypher.run import compile_text, run
from pgrag_dag.store import db, schema
from pgrag_dag.temporal import Temporal

TWO_HOP = "MATCH (a {name: $a})-[r1]->(m)-[r2]->(c) RETURN m.name, type(r2), c.name"
PATH = "MATCH (a {name: $a})-[p*1..3]-(b {name: $b}) RETURN size(p) AS hops"
PARSED = [
    "MATCH (p:Person {name: $name})-[r:works_at|employed_by]->(o:Organization) WHERE r.weight > 1 AND NOT "
    "o.name STARTS WITH 'A' RETURN DISTINCT p.name AS who, count(o) ORDER BY who SKIP 1 LIMIT 5",
    "MATCH (a {name: 'Ada Lovelace'})-[p*1..3]-(b {name: 'Analytical Engine'}) RETURN size(p) AS hops "
    "ORDER BY hops",
    "MATCH (x:Artifact) OPTIONAL MATCH (x)<-[r:wrote_notes_on]-(p) WHERE r.valid_from >= '2015' "
    "RETURN x.name AS thing, collect(p.name) AS by",
]


def ms(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))]
    return {"p50": round(statistics.median(ordered) * 1000, 2), "p95": round(p95 * 1000, 2)}


def build(dsn: str, realm: str, size: int) -> dict[str, int]:
    """The synthetic space of the module docstring in a fresh ``realm``; its row counts."""
    conn = db.connect(dsn, autocommit=True)
    try:
        conn.execute(
            sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema.schema_for(realm)))
        )
        conn.execute("DELETE FROM pgrag__control.realms WHERE realm = %s", (realm,))
        schema.init_realm(conn, realm, embedding_model="hashing-sha256", dim=384)
        s = sql.Identifier(schema.schema_for(realm))
        conn.execute(
            sql.SQL("""INSERT INTO {}.documents (space, doc_key, chunk_index, title, source, doc_order, text,
                                                  content_hash, doc_hash)
                       VALUES ('bench', 'doc', 0, 'Doc', 'doc.txt', 0, 'text', 'h', 'd')""").format(s)
        )
        conn.execute(
            sql.SQL("""INSERT INTO {}.entities (space, name, entity_type)
                       SELECT 'bench', 'E' || i,
                              (ARRAY['Person', 'Organization', 'Place', 'Concept'])[1 + i %% 4]
                         FROM generate_series(1, %(n)s) AS i""").format(s),
            {"n": size // 2},
        )
        conn.execute("SELECT setseed(0.29)")
        conn.execute(
            sql.SQL("""INSERT INTO {s}.relations (space, source_id, target_id, predicate, payload, weight)
                       SELECT 'bench', e.lo + x.a, e.lo + x.b, 'p' || x.k,
                              CASE WHEN x.k %% 10 < 3
                                   THEN jsonb_build_object('valid_from', (1990 + x.a %% 30)::text)
                                   ELSE '{{}}'::jsonb END, 1
                         FROM (SELECT min(id) AS lo FROM {s}.entities) AS e,
                              (SELECT floor(random() * %(n)s)::bigint AS a,
                                      floor(random() * %(n)s)::bigint AS b, floor(random() * 20)::int AS k
                                 FROM generate_series(1, %(m)s)) AS x
                        WHERE x.a <> x.b
                       ON CONFLICT DO NOTHING""").format(s=s),
            {"n": size // 2, "m": size + size // 50},
        )
        conn.execute(
            sql.SQL("""UPDATE {s}.relations AS r SET superseded_by = n.id, t_expired = now()
                         FROM {s}.relations AS n WHERE n.id = r.id + 1 AND r.id % 50 = 0""").format(s=s)
        )
        conn.execute(sql.SQL("ANALYZE {}.entities").format(s))
        conn.execute(sql.SQL("ANALYZE {}.relations").format(s))
        counts = conn.execute(
            sql.SQL(
                "SELECT (SELECT count(*) FROM {s}.relations), (SELECT count(*) FROM {s}.entities)"
            ).format(s=s)
        ).fetchone()
        assert counts is not None
        return {"relations": int(counts[0]), "entities": int(counts[1])}
    finally:
        conn.close()


def pairs(dsn: str, realm: str, runs: int) -> list[tuple[str, str]]:
    """``runs`` (start, vertex two hops from it) name pairs, seeded."""
    s = sql.Identifier(schema.schema_for(realm))
    conn = db.connect(dsn, autocommit=True)
    try:
        rows = conn.execute(
            sql.SQL("""SELECT a.name, c.name
                         FROM {s}.relations r1 JOIN {s}.relations r2 ON r2.source_id = r1.target_id
                         JOIN {s}.entities a ON a.id = r1.source_id JOIN {s}.entities c ON c.id = r2.target_id
                        WHERE r1.superseded_by IS NULL AND r2.superseded_by IS NULL AND a.id <> c.id
                        ORDER BY r1.id, r2.id LIMIT 5000""").format(s=s)
        ).fetchall()
    finally:
        conn.close()
    rng = random.Random(29)
    return [(str(a), str(c)) for a, c in rng.sample(rows, min(runs, len(rows)))]


def timed(fn: Callable[[], Any]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def measure(
    dsn: str, realm: str, text: str, args: list[dict[str, Any]], warmup: int, **kw: Any
) -> dict[str, Any]:
    compile_s, read_s, total_s, rows = [], [], [], []
    options = CypherOptions(realm, "bench", Temporal(**kw))
    for i, params in enumerate(args[:warmup] + args):
        compiled = compile_text(text, params, options)
        c = timed(lambda: compile_text(text, params, options))  # noqa: B023
        with db.read_connection(dsn) as conn:
            r = timed(lambda: run(conn, compiled))  # noqa: B023
        frame: list[Any] = []
        t = timed(lambda: frame.append(cypher(text, params, dsn=dsn, realm=realm, space="bench", **kw)))  # noqa: B023
        if i >= warmup:
            compile_s.append(c)
            read_s.append(r)
            total_s.append(t)
            rows.append(frame[0].height)
    return {
        "compile_ms": ms(compile_s),
        "read_ms": ms(read_s),
        "total_ms": ms(total_s),
        "rows_mean": round(statistics.mean(rows), 1),
    }


def parse_only(runs: int) -> dict[str, Any]:
    setup = timed(lambda: parse(PARSED[0]))  # the first parse builds the LALR tables
    times = [timed(lambda: parse(q)) for _ in range(runs) for q in PARSED]  # noqa: B023
    return {"setup_ms": round(setup * 1000, 1), **ms(times)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="10000,100000", help="relations per size, comma-separated")
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--parse-only", action="store_true")
    ap.add_argument("--results", default="evaluation/results/bench_cypher.json")
    opts = ap.parse_args()
    if opts.parse_only:
        print(json.dumps({"parse": parse_only(opts.runs)}, indent=2))
        return 0
    url = os.environ.get("PGRAG_DATABASE_URL")
    server = None
    if url is None:
        home = Path(tempfile.mkdtemp(prefix="pgrag-bench-cypher-"))
        home.chmod(0o755)
        server = db.embedded_server(home)
        url = str(server.get_uri())
    try:
        conn = db.connect(url, autocommit=True)
        schema.init_control(conn)
        conn.close()
        results: list[dict[str, Any]] = []
        for size in [int(s) for s in opts.sizes.split(",")]:
            realm = f"bench_cy{size}"
            t = time.perf_counter()
            counts = build(url, realm, size)
            built = round(time.perf_counter() - t, 1)
            named = pairs(url, realm, opts.runs + opts.warmup)
            starts = [{"a": a} for a, _ in named]
            ends = [{"a": a, "b": b} for a, b in named]
            row = {"size": size, **counts, "build_s": built}
            row["2-hop"] = measure(url, realm, TWO_HOP, starts, opts.warmup)
            row["2-hop as_of"] = measure(url, realm, TWO_HOP, starts, opts.warmup, as_of="2005")
            row["*1..3"] = measure(url, realm, PATH, ends, opts.warmup)
            results.append(row)
            print(json.dumps(row), file=sys.stderr)
        print("| relations | query | compile p50 / p95 ms | read p50 / p95 ms | total p50 / p95 ms | rows |")
        print("|---:|---|---:|---:|---:|---:|")
        for row in results:
            for q in ("2-hop", "2-hop as_of", "*1..3"):
                m = row[q]
                print(
                    f"| {row['relations']:,} | {q} | {m['compile_ms']['p50']} / {m['compile_ms']['p95']} | "
                    f"{m['read_ms']['p50']} / {m['read_ms']['p95']} | {m['total_ms']['p50']} / "
                    f"{m['total_ms']['p95']} | {m['rows_mean']} |"
                )
        Path(opts.results).parent.mkdir(parents=True, exist_ok=True)
        Path(opts.results).write_text(json.dumps({"parse": parse_only(100), "sizes": results}, indent=2))
        return 0
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    sys.exit(main())
