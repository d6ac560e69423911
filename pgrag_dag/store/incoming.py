"""The temporary tables a ``relations`` run writes through (paper §4.7, §5.2; issue 30 item 3: bounded
memory).

- ``pgrag_incoming_rel``: the edges the run built (one row per (source, predicate, target, negated), with
  the latest assertion in document order), merged into ``relations`` set-based (:func:`merge_relations`);
- ``pgrag_incoming_sup``: the run's supersession decisions by edge key (loser, winner, reason,
  explanation), applied set-based (:func:`apply_incoming_supersession`);
- ``pgrag_triples_by_source``: a full run's accepted triples with their resolved endpoints, read back sorted
  by source, a batch of whole source entities at a time (:func:`triples_by_source`), so the edges of a
  source are built together without the space's triples in memory.

All three live until the caller's transaction ends (``ON COMMIT DROP``) and are emptied when opened, so a run
may add to them batch by batch and merge once: the space's edges and decisions wait in PostgreSQL, not in
Python.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterator
from typing import Any

import polars as pl
import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from pgrag_dag.store.identifiers import qualified

EDGE_KEY = ("source_id", "target_id", "predicate", "negated")
"""The columns naming one edge (the unique key of ``relations`` per space)."""


def open_incoming(conn: psycopg.Connection) -> None:
    """Create (when missing) and empty ``pgrag_incoming_rel`` and ``pgrag_incoming_sup`` in the caller's
    transaction."""
    conn.execute("""CREATE TEMP TABLE IF NOT EXISTS pgrag_incoming_rel (
                        source_id bigint, target_id bigint, predicate text, negated boolean, description text,
                        chunk_ids bigint[], weight integer, confidence double precision, payload jsonb,
                        rendered text, asserted_doc_order bigint, asserted_chunk_index bigint)
                    ON COMMIT DROP""")
    conn.execute("""CREATE TEMP TABLE IF NOT EXISTS pgrag_incoming_sup (
                        source_id bigint, target_id bigint, predicate text, negated boolean,
                        w_source_id bigint, w_target_id bigint, w_predicate text, w_negated boolean,
                        reason text, explanation text)
                    ON COMMIT DROP""")
    conn.execute("TRUNCATE pgrag_incoming_rel, pgrag_incoming_sup")


def add_relations(conn: psycopg.Connection, relations: pl.DataFrame) -> None:
    """Copy the ``relations`` frame (:data:`pgrag_dag.graph.relations.RELATION_SCHEMA`) into
    ``pgrag_incoming_rel``; the validity period goes to ``payload``."""
    with (
        conn.cursor() as cur,
        cur.copy(
            "COPY pgrag_incoming_rel (source_id, target_id, predicate, negated, description, chunk_ids,"
            " weight, confidence, payload, rendered, asserted_doc_order, asserted_chunk_index) FROM STDIN"
        ) as copy,
    ):
        for r in relations.iter_rows(named=True):
            payload = {k: r[k] for k in ("valid_from", "valid_to") if r[k]}
            copy.write_row(
                (
                    r["source_id"],
                    r["target_id"],
                    r["predicate"],
                    r["negated"],
                    r["description"],
                    r["chunk_ids"],
                    r["weight"],
                    r["confidence"],
                    Jsonb(payload),
                    r["rendered"],
                    r["asserted_doc_order"],
                    r["asserted_chunk_index"],
                )
            )


def merge_relations(
    conn: psycopg.Connection, realm: str, space: str, pairs: Collection[tuple[int, int]] | None = None
) -> dict[str, int]:
    """Merge ``pgrag_incoming_rel`` into the space's ``relations``: one edge per (source, predicate, target,
    negated), set-based.

    Unchanged edges are not touched; a stored validity period is never erased by an observation without
    one; a stored edge absent from the incoming rows (no contributing chunk left) becomes dormant; a present
    dormant one revives. The incoming rows hold every edge of the space, or — with ``pairs`` (source_id,
    target_id), an incremental run — every edge of those pairs, and only their stored edges can become
    dormant. New edges take ids in (source, predicate, target, negated) order. Returns counts ``inserted``,
    ``updated``, ``dormant``."""
    table = qualified(realm, "relations")
    # a temporary table has no statistics until analysed: without them the planner may nest-loop a
    # million incoming rows
    conn.execute("ANALYZE pgrag_incoming_rel")
    same_edge = sql.SQL(
        "(r.source_id, r.predicate, r.target_id, r.negated)"
        " = (i.source_id, i.predicate, i.target_id, i.negated)"
    )
    updated = conn.execute(
        sql.SQL("""UPDATE {t} r SET description = i.description, chunk_ids = i.chunk_ids, weight = i.weight,
                          confidence = i.confidence, payload = r.payload || i.payload, rendered = i.rendered,
                          dormant_since = NULL
                     FROM pgrag_incoming_rel i
                    WHERE r.space = %s AND {same}
                      AND ((r.description, r.chunk_ids, r.weight, r.confidence, r.rendered, r.dormant_since)
                           IS DISTINCT FROM (i.description, i.chunk_ids, i.weight, i.confidence, i.rendered,
                               NULL::timestamptz)
                           OR NOT (r.payload @> i.payload))""").format(t=table, same=same_edge),
        (space,),
    ).rowcount
    # new edges only: no sequence value is spent on edges that already exist
    inserted = conn.execute(
        sql.SQL("""INSERT INTO {t} (space, source_id, target_id, predicate, negated, description, chunk_ids,
                                   weight,
                                   confidence, payload, rendered)
                   SELECT %s, i.source_id, i.target_id, i.predicate, i.negated, i.description, i.chunk_ids,
                          i.weight,
                          i.confidence, i.payload, i.rendered FROM pgrag_incoming_rel i
                    WHERE NOT EXISTS (SELECT 1 FROM {t} r WHERE r.space = %s AND {same})
                    ORDER BY i.source_id, i.predicate, i.target_id, i.negated
                   ON CONFLICT (space, source_id, predicate, target_id, negated) DO NOTHING""").format(
            t=table, same=same_edge
        ),
        (space, space),
    ).rowcount
    only = sql.SQL("")
    args: list[Any] = [space]
    if pairs is not None:
        only = sql.SQL(
            " AND (r.source_id, r.target_id) IN (SELECT * FROM unnest(%s::bigint[], %s::bigint[]))"
        )
        args += [[a for a, _ in pairs], [b for _, b in pairs]]
    dormant = conn.execute(
        sql.SQL("""UPDATE {t} r SET dormant_since = now() WHERE r.space = %s AND r.dormant_since IS NULL{only}
                   AND NOT EXISTS (
                   SELECT 1 FROM pgrag_incoming_rel i WHERE (i.source_id, i.target_id, i.predicate, i.negated)
                                                          = (r.source_id, r.target_id, r.predicate,
                                                              r.negated))""").format(t=table, only=only),
        args,
    ).rowcount
    return {"inserted": inserted, "updated": updated, "dormant": dormant}


_COPY_SUP = (
    "COPY pgrag_incoming_sup (source_id, target_id, predicate, negated, w_source_id, w_target_id,"
    " w_predicate, w_negated, reason, explanation) FROM STDIN"
)
"""The one way rows enter ``pgrag_incoming_sup``: loser's edge key, winner's edge key, reason, explanation."""


def add_supersession(conn: psycopg.Connection, relations: pl.DataFrame, supersession: pl.DataFrame) -> None:
    """Copy the ``supersession`` frame (row, superseded_by_row, reason, explanation; rows address
    ``relations`` by position) into ``pgrag_incoming_sup`` by edge key."""
    keys = relations.select(*EDGE_KEY)
    with (
        conn.cursor() as cur,
        cur.copy(_COPY_SUP) as copy,
    ):
        for r, w, reason, expl in supersession.select(
            "row", "superseded_by_row", "reason", "explanation"
        ).iter_rows():
            copy.write_row((*keys.row(r), *keys.row(w), reason, expl))


def apply_incoming_supersession(conn: psycopg.Connection, realm: str, space: str) -> dict[str, Any]:
    """Mark superseded edges (§5.2–5.3) from ``pgrag_incoming_sup``: ``superseded_by`` and ``t_expired``
    (database clock), never delete. Of the edges in ``pgrag_incoming_rel`` (written just before, the
    space's or an incremental run's pairs), one the decisions supersede — newly, or by another edge than
    stored — gets its superseder, ``t_expired = now()`` and the reason (and a contradiction's explanation)
    in its payload; one stored as superseded that no decision supersedes is current again. Returns counts
    ``superseded`` (now), ``newly_superseded``, ``restored``, and ``newly_by_reason`` (reason → how many of
    the newly superseded edges it superseded: this run's supersessions, which the decisions — re-decided
    pairs included — need not be)."""
    table = qualified(realm, "relations")
    conn.execute("ANALYZE pgrag_incoming_sup")
    newly = conn.execute(
        sql.SQL("""WITH w AS (
                       SELECT l.id AS edge, v.id AS by, s.reason, s.explanation FROM pgrag_incoming_sup s
                         JOIN {t} l ON l.space = %(space)s
                          AND (l.source_id, l.predicate, l.target_id, l.negated)
                            = (s.source_id, s.predicate, s.target_id, s.negated)
                         JOIN {t} v ON v.space = %(space)s
                          AND (v.source_id, v.predicate, v.target_id, v.negated)
                            = (s.w_source_id, s.w_predicate, s.w_target_id, s.w_negated))
                   UPDATE {t} r SET superseded_by = w.by, t_expired = now(),
                          payload = r.payload || jsonb_build_object('supersession',
                              CASE WHEN coalesce(w.explanation, '') = ''
                                   THEN jsonb_build_object('reason', w.reason)
                                   ELSE jsonb_build_object('reason', w.reason, 'explanation', w.explanation)
                              END)
                     FROM w WHERE r.id = w.edge AND r.superseded_by IS DISTINCT FROM w.by
                RETURNING w.reason""").format(t=table),
        {"space": space},
    ).fetchall()
    restored = conn.execute(
        sql.SQL("""UPDATE {t} r SET superseded_by = NULL, t_expired = NULL,
                          payload = r.payload - 'supersession'
                     FROM pgrag_incoming_rel i
                    WHERE r.space = %s AND r.superseded_by IS NOT NULL
                      AND (r.source_id, r.predicate, r.target_id, r.negated)
                        = (i.source_id, i.predicate, i.target_id, i.negated)
                      AND NOT EXISTS (SELECT 1 FROM pgrag_incoming_sup s
                                       WHERE (s.source_id, s.predicate, s.target_id, s.negated)
                                           = (r.source_id, r.predicate, r.target_id, r.negated))""").format(
            t=table
        ),
        (space,),
    ).rowcount
    row = conn.execute(
        "SELECT count(*) FROM (SELECT DISTINCT source_id, target_id, predicate, negated"
        " FROM pgrag_incoming_sup) s"
    ).fetchone()
    assert row is not None
    return {
        "superseded": int(row[0]),
        "newly_superseded": len(newly),
        "restored": restored,
        "newly_by_reason": dict(Counter(str(r) for (r,) in newly)),
    }


def single_end_edges(conn: psycopg.Connection, predicates: Collection[str]) -> Iterator[tuple[Any, ...]]:
    """The asserted (not negated) incoming edges whose predicate is one of ``predicates`` — single-valued on
    the subject: one subject per object — by predicate, target, then source (the order of the run's rows
    within one (predicate, target)): (source_id, target_id, predicate, asserted_doc_order,
    asserted_chunk_index, its superseder decided so far as (w_source_id, w_target_id, w_predicate,
    w_negated, reason) or five nulls, and the superseder's asserted_doc_order, asserted_chunk_index).
    Streamed through a server-side cursor in the caller's transaction."""
    with conn.cursor(name="pgrag_single_end") as cur:
        cur.itersize = 5000
        cur.execute(
            """SELECT i.source_id, i.target_id, i.predicate, i.asserted_doc_order, i.asserted_chunk_index,
                      s.w_source_id, s.w_target_id, s.w_predicate, s.w_negated, s.reason,
                      w.asserted_doc_order, w.asserted_chunk_index
                 FROM pgrag_incoming_rel i
                 LEFT JOIN pgrag_incoming_sup s
                   ON (s.source_id, s.predicate, s.target_id, s.negated)
                    = (i.source_id, i.predicate, i.target_id, i.negated)
                 LEFT JOIN pgrag_incoming_rel w
                   ON (w.source_id, w.predicate, w.target_id, w.negated)
                    = (s.w_source_id, s.w_predicate, s.w_target_id, s.w_negated)
                WHERE NOT i.negated AND i.predicate = ANY(%s)
                ORDER BY i.predicate, i.target_id, i.source_id""",
            (sorted(predicates),),
        )
        yield from cur


def replace_superseders(conn: psycopg.Connection, rows: list[tuple[Any, ...]]) -> None:
    """Set the superseder of edges in ``pgrag_incoming_sup``: ``rows`` of (source_id, target_id, predicate,
    negated, w_source_id, w_target_id, w_predicate, w_negated, reason, explanation) replace any decision
    stored for the same superseded edge."""
    if not rows:
        return
    conn.execute(
        """DELETE FROM pgrag_incoming_sup s USING unnest(%s::bigint[], %s::bigint[], %s::text[],
                                                                %s::boolean[]) AS k(s, t, p, n)
                     WHERE (s.source_id, s.target_id, s.predicate, s.negated) = (k.s, k.t, k.p, k.n)""",
        [[r[i] for r in rows] for i in range(4)],
    )
    with (
        conn.cursor() as cur,
        cur.copy(_COPY_SUP) as copy,
    ):
        for r in rows:
            copy.write_row(r)


def supersession_summary(conn: psycopg.Connection, examples: int) -> tuple[dict[str, int], list[str]]:
    """Of ``pgrag_incoming_sup``: how many edges each reason supersedes (reasons in the order of their first
    superseded edge by key, as the run's rows are ordered: predicates by code point), and the first
    ``examples`` pairs by the superseded edge's key as ``"loser  ⟶ superseded by ⟶  winner"`` (each the
    rendered edge up to its description)."""
    reasons = conn.execute(
        """SELECT reason, count(*) FROM pgrag_incoming_sup GROUP BY reason
            ORDER BY min(ROW(source_id, predicate COLLATE "C", target_id, negated))"""
    ).fetchall()
    pairs = conn.execute(
        """SELECT l.rendered, w.rendered FROM pgrag_incoming_sup s
             JOIN pgrag_incoming_rel l ON (l.source_id, l.predicate, l.target_id, l.negated)
                                        = (s.source_id, s.predicate, s.target_id, s.negated)
             JOIN pgrag_incoming_rel w ON (w.source_id, w.predicate, w.target_id, w.negated)
                                        = (s.w_source_id, s.w_predicate, s.w_target_id, s.w_negated)
            ORDER BY s.source_id, s.predicate COLLATE "C", s.target_id, s.negated LIMIT %s""",
        (examples,),
    ).fetchall()
    return (
        {str(r): int(n) for r, n in reasons},
        [f"{a.split(':')[0]}  ⟶ superseded by ⟶  {b.split(':')[0]}" for a, b in pairs],
    )


TRIPLE_COLUMNS = (
    "seq",
    "source_id",
    "target_id",
    "chunk_id",
    "subject",
    "predicate",
    "object",
    "description",
    "negated",
    "confidence",
    "valid_from",
    "valid_to",
)
"""The columns of ``pgrag_triples_by_source``: ``seq`` is the triple's position in document order."""
TRIPLE_SCHEMA: dict[str, Any] = {
    "seq": pl.Int64,
    "source_id": pl.Int64,
    "target_id": pl.Int64,
    "chunk_id": pl.Int64,
    "subject": pl.String,
    "predicate": pl.String,
    "object": pl.String,
    "description": pl.String,
    "negated": pl.Boolean,
    "confidence": pl.Float64,
    "valid_from": pl.String,
    "valid_to": pl.String,
}


def open_triples(conn: psycopg.Connection) -> None:
    """Create (when missing) and empty ``pgrag_triples_by_source`` in the caller's transaction."""
    conn.execute("""CREATE TEMP TABLE IF NOT EXISTS pgrag_triples_by_source (
                        seq bigint, source_id bigint, target_id bigint, chunk_id bigint, subject text,
                        predicate text, object text, description text, negated boolean,
                        confidence double precision, valid_from text, valid_to text)
                    ON COMMIT DROP""")
    conn.execute("TRUNCATE pgrag_triples_by_source")


def add_triples(conn: psycopg.Connection, triples: pl.DataFrame) -> None:
    """Copy ``triples`` (:data:`TRIPLE_SCHEMA`) into ``pgrag_triples_by_source``."""
    with (
        conn.cursor() as cur,
        cur.copy(
            sql.SQL("COPY pgrag_triples_by_source ({}) FROM STDIN").format(
                sql.SQL(", ").join(sql.Identifier(c) for c in TRIPLE_COLUMNS)
            )
        ) as copy,
    ):
        for r in triples.select(*TRIPLE_COLUMNS).iter_rows():
            copy.write_row(r)


def triples_by_source(conn: psycopg.Connection, rows: int) -> Iterator[pl.DataFrame]:
    """The rows of ``pgrag_triples_by_source`` as frames (:data:`TRIPLE_SCHEMA`) of whole source entities, in
    ascending source order, each in document order (``seq``) and holding at most ``rows`` triples unless one
    source alone holds more — one sorted read through a server-side cursor in the caller's transaction."""
    cols = sql.SQL(", ").join(sql.Identifier(c) for c in TRIPLE_COLUMNS)
    held: list[tuple[Any, ...]] = []
    with conn.cursor(name="pgrag_triples_by_source") as cur:
        cur.execute(sql.SQL("SELECT {} FROM pgrag_triples_by_source ORDER BY source_id, seq").format(cols))
        while fetched := cur.fetchmany(min(rows, 10_000)):
            for row in fetched:
                if len(held) >= rows and row[1] != held[-1][1]:  # a batch ends between two sources
                    yield _by_seq(held)
                    held = []
                held.append(row)
    if held:
        yield _by_seq(held)


def _by_seq(rows: list[tuple[Any, ...]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=TRIPLE_SCHEMA, orient="row").sort("seq")
