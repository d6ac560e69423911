"""The graph's counts kept by delta (issue 30, :mod:`pgrag_dag.store.tallies`): after every kind of write —
rows inserted and deleted by statement, several rows of one entity changed by one statement, dormancy,
supersession, a foreign-key cascade, compaction — the kept counts equal a recount of the rows, space by
space."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from pgrag_dag.store import tallies
from pgrag_dag.store.identifiers import qualified


def _counted_predicates(conn: psycopg.Connection, realm: str, space: str) -> list[tuple[str, int]]:
    return [
        (p, int(n))
        for p, n in conn.execute(
            sql.SQL("""SELECT predicate, count(*) FROM {} WHERE space = %s AND dormant_since IS NULL
                          AND superseded_by IS NULL GROUP BY predicate ORDER BY predicate""").format(
                qualified(realm, "relations")
            ),
            (space,),
        ).fetchall()
    ]


def _check(conn: psycopg.Connection, realm: str) -> dict[str, dict[str, int]]:
    kept = {}
    for space in ("s", "t"):
        kept[space] = tallies.read(conn, realm, space)
        assert kept[space] == tallies.recount(conn, realm, space), space
        assert tallies.predicates(conn, realm, space) == _counted_predicates(conn, realm, space), space
    return kept


def test_kept_counts_equal_a_recount_after_every_kind_of_write(conn: psycopg.Connection, realm: str) -> None:
    e, r, d, m = (qualified(realm, t) for t in ("entities", "relations", "documents", "doc_mentions"))

    def run(query: str, *args: Any) -> list[tuple[Any, ...]]:
        cur = conn.execute(sql.SQL(query).format(e=e, r=r, d=d, m=m), args)
        return cur.fetchall() if cur.description else []

    ids = dict(
        run("""INSERT INTO {e} (space, name, dormant_since)
               VALUES ('s', 'Ada', NULL), ('s', 'Babbage', NULL), ('s', 'Byron', NULL),
                      ('s', 'Somerville', now()),
                      ('t', 'Ada', NULL)
               RETURNING name || '@' || space, id""")
    )
    a, b, c, dd, ta = (ids[k] for k in ("Ada@s", "Babbage@s", "Byron@s", "Somerville@s", "Ada@t"))
    assert _check(conn, realm)["s"] == {
        "entities": 3,
        "entities_dormant": 1,
        "relations": 0,
        "relations_dormant": 0,
        "mentions": 0,
        "negated": 0,
        "with_validity": 0,
        "superseded": 0,
        "orphans": 3,
    }
    rel = dict(
        run(
            """INSERT INTO {r} (space, source_id, target_id, predicate, negated, payload) VALUES
               ('s', %s, %s, 'knew', false, '{{}}'), ('s', %s, %s, 'daughter_of', false, %s),
               ('s', %s, %s, 'knew', true, '{{}}')
               RETURNING predicate || negated::text, id""",
            a,
            b,
            a,
            c,
            Jsonb({"valid_from": "1815"}),
            b,
            c,
        )
    )
    kept = _check(conn, realm)["s"]
    assert (kept["relations"], kept["negated"], kept["with_validity"], kept["orphans"]) == (3, 1, 1, 0)
    # one statement makes both of Ada's edges dormant: she is an orphan once, not twice
    run("UPDATE {r} SET dormant_since = now() WHERE source_id = %s", a)
    assert _check(conn, realm)["s"]["orphans"] == 1
    run("UPDATE {r} SET dormant_since = NULL WHERE source_id = %s", a)
    run(
        "UPDATE {r} SET superseded_by = %s, t_expired = now() WHERE id = %s",
        rel["knewfalse"],
        rel["knewtrue"],
    )
    assert _check(conn, realm)["s"]["superseded"] == 1
    run("UPDATE {r} SET predicate = 'met', payload = '{{}}' WHERE id = %s", rel["daughter_offalse"])
    run("UPDATE {e} SET dormant_since = CASE WHEN id = %s THEN now() END WHERE id IN (%s, %s)", c, c, dd)
    assert _check(conn, realm)["s"]["orphans"] == 1  # Somerville revived without an edge; Byron dormant
    (chunk,) = run(
        """INSERT INTO {d} (space, doc_key, chunk_index, title, source, doc_order, text, content_hash,
                           doc_hash)
           VALUES ('s', 'a.txt', 0, 'a', 'a.txt', 0, 'Ada met Babbage.', 'h', 'h') RETURNING id"""
    )
    run(
        "INSERT INTO {m} (space, chunk_id, entity_id) VALUES ('s', %s, %s), ('s', %s, %s)",
        chunk[0],
        a,
        chunk[0],
        b,
    )
    assert _check(conn, realm)["s"]["mentions"] == 2
    run("DELETE FROM {d} WHERE id = %s", chunk[0])  # the mentions go by cascade
    assert _check(conn, realm)["s"]["mentions"] == 0
    # purged: Ada's edges, then Ada (the negated edge Babbage-Byron it superseded is current again)
    run(
        "UPDATE {r} SET superseded_by = NULL"
        " WHERE superseded_by IN (SELECT id FROM {r} WHERE source_id = %s)",
        a,
    )
    run("DELETE FROM {r} WHERE source_id = %s", a)
    run("DELETE FROM {e} WHERE id = %s", a)
    kept = _check(conn, realm)
    assert (kept["s"]["entities"], kept["s"]["relations"], kept["t"]["entities"]) == (2, 1, 1)
    assert ta and kept["t"]["orphans"] == 1
    with conn.transaction():
        assert tallies.compact(conn, realm, "s", above=1)
        assert tallies.reset(conn, realm, "t") == kept["t"]
    assert _check(conn, realm) == kept
    folded = conn.execute(
        sql.SQL("SELECT count(*) FROM {} WHERE space = 's'").format(qualified(realm, "graph_tallies"))
    ).fetchone()
    assert folded == (1,)  # compacted into one row


def test_a_full_run_recounts_with_the_statistics_of_the_rows_it_wrote(
    conn: psycopg.Connection, realm: str
) -> None:
    """A full relations run writes the space's relations and recounts in one transaction: the recount must
    plan with statistics of those rows, not of the table before (its orphan anti-joins ran as nested loops
    over every relation per entity — a 100k build hung in it)."""
    e, r = qualified(realm, "entities"), qualified(realm, "relations")
    with conn.transaction():
        tallies.suspend(conn)
        conn.execute(
            sql.SQL("""INSERT INTO {} (space, name, entity_type, description, t_created, t_updated)
                       SELECT 's', 'E' || i, 'Concept', '', now(), now()
                         FROM generate_series(1, 200) i""").format(e)
        )
        conn.execute(
            sql.SQL("""INSERT INTO {r} (space, source_id, target_id, predicate, t_created)
                       SELECT 's', a.id, b.id, 'p' || i, now()
                         FROM generate_series(1, 3000) i
                         JOIN {e} a ON a.name = 'E' || (1 + i % 200)
                         JOIN {e} b ON b.name = 'E' || (1 + (i * 7 + 1) % 200)
                        WHERE a.id <> b.id""").format(r=r, e=e)
        )
        counts = tallies.reset(conn, realm, "s")
        estimated = conn.execute(
            "SELECT reltuples FROM pg_class WHERE oid = %s::regclass", (r.as_string(conn),)
        )
        row = estimated.fetchone()
    assert counts["relations"] > 2900 and counts == tallies.recount(conn, realm, "s")
    assert row is not None and row[0] > 2900  # the planner knows the rows this transaction wrote
