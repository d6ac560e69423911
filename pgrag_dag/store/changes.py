"""SQL of the change feed (paper §6.1 "Change"; issue 14 item 2): what the belief log gained between two
database snapshots, and how far the space's communities lag behind its relations.

A watermark is the text of ``pg_current_snapshot()`` (``xmin:xmax:xip,...``) taken by the reading
transaction itself. The rows of a window are those whose writing transaction (``belief_log.xid``) is
visible in the new snapshot and was not in the old one; a transaction that began before another and
commits after it is in the old snapshot's in-progress list, so the next window picks it up: every row
is returned by exactly one window of a poller that chains the watermarks. Every read here must run in
one ``REPEATABLE READ`` transaction, so that the rows, their rendered text and the new snapshot agree.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from pgrag_dag.names import schema_for

# the window: visible now, not visible in the old snapshot; ``xid >= xmin(old)`` lets the
# (space, xid) index bound the scan (every xid below xmin(old) was visible in it, or never committed)
_WINDOW = sql.SQL("""l.space = %(space)s
   AND (%(old)s::pg_snapshot IS NULL
        OR (l.xid >= pg_snapshot_xmin(%(old)s::pg_snapshot) AND NOT pg_visible_in_snapshot(l.xid,
            %(old)s::pg_snapshot)))
   AND pg_visible_in_snapshot(l.xid, pg_current_snapshot())""")

_EVENTS = """
SELECT l.seq, l.kind, l.event, l.object_id, l.doc_key, l.renamed_from, l.superseded_by, l.at,
       r.rendered, s.name AS subject, r.predicate, r.negated, o.name AS object,
       sup.rendered AS superseded_by_rendered, e.name AS entity, e.entity_type
  FROM {s}.belief_log l
  LEFT JOIN {s}.relations r ON l.kind = 'relation' AND r.id = l.object_id
  LEFT JOIN {s}.entities s ON s.id = r.source_id
  LEFT JOIN {s}.entities o ON o.id = r.target_id
  LEFT JOIN {s}.relations sup ON sup.id = l.superseded_by
  LEFT JOIN {s}.entities e ON l.kind = 'entity' AND e.id = l.object_id
 WHERE {window}
 ORDER BY l.seq"""

_STALENESS = """
WITH built AS (SELECT max(built_at) AS at FROM {s}.communities WHERE space = %(space)s AND level = 0),
checked AS (SELECT greatest((SELECT at FROM built),
                            (SELECT checked_at FROM {s}.graph_checked WHERE space = %(space)s
                                AND stage = 'communities')) AS at)
SELECT (SELECT at FROM built),
       (SELECT count(*) FROM {s}.belief_log l
         WHERE l.space = %(space)s AND l.kind = 'relation'
           AND ((SELECT at FROM checked) IS NULL OR l.at > (SELECT at FROM checked))),
       EXISTS (SELECT 1 FROM {s}.relations WHERE space = %(space)s) AND (SELECT at FROM checked) IS NULL"""

_WRITES_SINCE = """
SELECT (SELECT count(*) FROM {s}.graph_writes WHERE space = %(space)s)
       - (SELECT graph_version FROM {s}.graph_checked WHERE space = %(space)s AND stage = 'communities')"""


def space_known(conn: psycopg.Connection, realm: str, space: str) -> bool:
    """Whether ``space`` of ``realm`` has any history or chunk (a space never indexed, mistyped or deleted
    has neither)."""
    s = sql.Identifier(schema_for(realm))
    row = conn.execute(
        sql.SQL(
            "SELECT EXISTS (SELECT 1 FROM {s}.belief_log WHERE space = %(space)s)"
            " OR EXISTS (SELECT 1 FROM {s}.documents WHERE space = %(space)s)"
        ).format(s=s),
        {"space": space},
    ).fetchone()
    return bool(row and row[0])


def current_snapshot(conn: psycopg.Connection) -> str:
    """The text of ``pg_current_snapshot()`` — in a ``REPEATABLE READ`` transaction, its own snapshot."""
    row = conn.execute("SELECT pg_current_snapshot()::text").fetchone()
    assert row is not None
    return str(row[0])


def events_since(conn: psycopg.Connection, realm: str, space: str, old: str | None) -> list[dict[str, Any]]:
    """The ``belief_log`` rows of ``space`` written by transactions that committed after snapshot ``old``
    (``None``: every row) and before this transaction's snapshot, in ``seq`` order, each with the
    relation's ``rendered`` text, ``subject``, ``predicate``, ``negated``, ``object``, the superseder's
    ``superseded_by_rendered``, or the entity's ``entity`` name and ``entity_type`` (``None`` where the
    row is gone: explicitly deleted). Raises ``psycopg.errors.InvalidTextRepresentation`` for an ``old``
    that is not a snapshot."""
    query = sql.SQL(_EVENTS).format(s=sql.Identifier(schema_for(realm)), window=_WINDOW)
    with conn.cursor(row_factory=dict_row) as cur:
        return list(cur.execute(query, {"space": space, "old": old}).fetchall())


def community_lag(conn: psycopg.Connection, realm: str, space: str) -> tuple[Any, int, bool, int]:
    """``(built_at, relation_events, never_checked, graph_writes)``: the latest level-0 community ``built_at``
    of ``space`` (``None`` without communities); how many relation events of the space the belief log holds
    after the communities stage last read the graph — the later of that ``built_at`` and its
    ``graph_checked`` stamp, which a run that found the graph unchanged (or too small for a community) also
    records — all of them when it never did; whether the space has relations but the stage never read them;
    and how many transactions wrote the space's graph after the data version the stage read
    (:mod:`pgrag_dag.store.graph_version`: archival, dormancy, merges, attribute changes as well as
    relations; counted in the stage's own snapshot, so no write is missed by a clock; 0 when no version was
    recorded yet)."""
    s = sql.Identifier(schema_for(realm))
    row = conn.execute(sql.SQL(_STALENESS).format(s=s), {"space": space}).fetchone()
    assert row is not None
    versioned = conn.execute(
        "SELECT to_regclass(%s) IS NOT NULL", (f'"{schema_for(realm)}".graph_writes',)
    ).fetchone()
    writes = None
    if versioned and versioned[0]:  # a realm from before schema version 19 has no data version yet
        found = conn.execute(sql.SQL(_WRITES_SINCE).format(s=s), {"space": space}).fetchone()
        writes = found[0] if found else None
    return row[0], int(row[1]), bool(row[2]), max(0, int(writes or 0))
