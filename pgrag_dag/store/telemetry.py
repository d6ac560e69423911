"""Coverage telemetry of a realm (paper §6.1 "Coverage"; issue 14 item 3): DDL and every statement on
``query_events``.

``query_events`` holds one row per recorded query: ``space`` (as asked; ``*`` for the wildcard),
``question_sha256`` (hex SHA-256 of the normalised question — never its text), ``mode``, ``entity_ids``
and ``community_ids`` (what it returned: matched entities and the endpoints of its relations; community
reports), ``at`` (database clock: the writing statement's ``now()``). Entity and community ids are unique
in the realm, so an event of any space counts for the rows it names.

A community's *attention* is the number of events that returned it or returned one of its member entities
(a parent community's members are its descendants' members): communities are rebuilt with new ids, their
entities persist, so attention survives a rebuild.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from pgrag_dag.store.identifiers import qualified

TELEMETRY_DDL: tuple[str, ...] = (
    """CREATE TABLE IF NOT EXISTS {s}.query_events (
        id bigserial PRIMARY KEY,
        space text NOT NULL,
        question_sha256 text NOT NULL CHECK (question_sha256 ~ '^[0-9a-f]{{64}}$'),
        mode text NOT NULL,
        entity_ids bigint[] NOT NULL DEFAULT '{{}}',
        community_ids bigint[] NOT NULL DEFAULT '{{}}',
        at timestamptz NOT NULL DEFAULT now()
    )""",
    """CREATE INDEX IF NOT EXISTS query_events_space_at ON {s}.query_events (space, at)""",
    """CREATE INDEX IF NOT EXISTS query_events_entities ON {s}.query_events USING gin (entity_ids)""",
    """CREATE INDEX IF NOT EXISTS query_events_communities ON {s}.query_events USING gin (community_ids)""",
)

Event = tuple[str, str, str, list[int], list[int]]
"""``(space, question_sha256, mode, entity_ids, community_ids)``: one row of ``query_events``."""


def create_telemetry(conn: psycopg.Connection, schema: str) -> None:
    """Run :data:`TELEMETRY_DDL` in realm schema ``schema``, inside the caller's DDL transaction
    (:func:`pgrag_dag.store.schema.init_realm`). Idempotent."""
    for stmt in TELEMETRY_DDL:
        conn.execute(sql.SQL(stmt).format(s=sql.Identifier(schema)))


def record_events(conn: psycopg.Connection, realm: str, events: Sequence[Event]) -> int:
    """Insert ``events`` into ``realm``'s ``query_events`` (one statement; ``at`` = its ``now()``).
    Returns how many were written. Raises psycopg errors unchanged (the writer logs and swallows them)."""
    if not events:
        return 0
    with conn.cursor() as cur:
        cur.executemany(
            sql.SQL("""INSERT INTO {} (space, question_sha256, mode, entity_ids, community_ids)
                                   VALUES (%s, %s, %s, %s, %s)""").format(qualified(realm, "query_events")),
            list(events),
        )
    return len(events)


def events_for_space(conn: psycopg.Connection, realm: str, space: str) -> tuple[int, datetime | None]:
    """``(events, first at)`` of the queries that could have touched ``space``: asked of it, or of every
    space (``*``)."""
    row = conn.execute(
        sql.SQL("SELECT count(*), min(at) FROM {} WHERE space = %s OR space = '*'").format(
            qualified(realm, "query_events")
        ),
        (space,),
    ).fetchone()
    return (int(row[0]), row[1]) if row else (0, None)


_COMMUNITY_ATTENTION = """
WITH RECURSIVE under(root, community_id) AS (
    SELECT id, id FROM {c} WHERE space = %(space)s
    UNION ALL
    SELECT u.root, ch.child_id FROM under u JOIN {ch} ch ON ch.parent_id = u.community_id
), members AS (
    SELECT u.root, array_agg(DISTINCT m.entity_id) AS ids
      FROM under u JOIN {m} m ON m.community_id = u.community_id GROUP BY u.root
)
SELECT c.id, c.level, c.title, c.size, a.events, a.last_at
  FROM {c} c LEFT JOIN members ms ON ms.root = c.id
  CROSS JOIN LATERAL (SELECT count(*) AS events, max(q.at) AS last_at FROM {q} q
                       WHERE q.community_ids @> ARRAY[c.id] OR q.entity_ids && COALESCE(ms.ids, '{{}}')) a
 WHERE c.space = %(space)s
 ORDER BY a.events, c.id
 LIMIT %(limit)s"""


def least_attended_communities(
    conn: psycopg.Connection, realm: str, space: str, limit: int
) -> list[dict[str, Any]]:
    """The space's communities (every level) with least retrieval attention, fewest events first, ties
    by id: ``id, level, title, size, events`` (events that returned it or one of its members),
    ``last_at`` (the latest such event, ``None`` when none). At most ``limit`` rows."""
    query = sql.SQL(_COMMUNITY_ATTENTION).format(
        c=qualified(realm, "communities"),
        ch=qualified(realm, "community_children"),
        m=qualified(realm, "community_members"),
        q=qualified(realm, "query_events"),
    )
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(query, {"space": space, "limit": limit}).fetchall()


def never_retrieved_entities(
    conn: psycopg.Connection, realm: str, space: str, limit: int
) -> tuple[int, list[dict[str, Any]]]:
    """``(how many, the first `limit` by id)`` of the space's live entities (not dormant, not archived) no
    recorded event returned: ``id, name, entity_type``."""
    where = sql.SQL("""FROM {e} e WHERE e.space = %(space)s AND e.dormant_since IS NULL
                         AND NOT EXISTS (SELECT 1 FROM {q} q WHERE q.entity_ids @> ARRAY[e.id])""").format(
        e=qualified(realm, "entities"), q=qualified(realm, "query_events")
    )
    with conn.cursor(row_factory=dict_row) as cur:
        total = cur.execute(sql.SQL("SELECT count(*) AS n ") + where, {"space": space}).fetchone()
        rows = cur.execute(
            sql.SQL("SELECT e.id, e.name, e.entity_type ")
            + where
            + sql.SQL(" ORDER BY e.id LIMIT %(limit)s"),
            {"space": space, "limit": limit},
        ).fetchall()
    return (int(total["n"]) if total else 0), rows


def entity_attention(conn: psycopg.Connection, realm: str, space: str) -> dict[int, tuple[int, datetime]]:
    """Live entity id of ``space`` → ``(events that returned it, the latest one's at)``; entities never
    returned are absent."""
    rows = conn.execute(
        sql.SQL("""
        SELECT x.entity_id, count(*), max(q.at) FROM {q} q CROSS JOIN LATERAL unnest(q.entity_ids)
          AS x(entity_id)
          JOIN {e} e ON e.id = x.entity_id AND e.space = %s AND e.dormant_since IS NULL
         GROUP BY x.entity_id""").format(q=qualified(realm, "query_events"), e=qualified(realm, "entities")),
        (space,),
    ).fetchall()
    return {int(i): (int(n), at) for i, n, at in rows}


def forget_entities(conn: psycopg.Connection, realm: str, entity_ids: Sequence[int]) -> int:
    """Remove ``entity_ids`` from every event that names them (explicit deletion); returns events changed."""
    if not entity_ids:
        return 0
    return conn.execute(
        sql.SQL("""UPDATE {q} SET entity_ids = ARRAY(SELECT x FROM unnest(entity_ids) AS x
                                                                      WHERE x <> ALL (%(ids)s::bigint[]))
                                    WHERE entity_ids && %(ids)s::bigint[]""").format(
            q=qualified(realm, "query_events")
        ),
        {"ids": list(entity_ids)},
    ).rowcount


def forget_communities(conn: psycopg.Connection, realm: str, community_ids: Sequence[int]) -> int:
    """Remove ``community_ids`` from every event that names them (erasure); returns events changed."""
    if not community_ids:
        return 0
    return conn.execute(
        sql.SQL("""UPDATE {q} SET community_ids = ARRAY(SELECT x FROM unnest(community_ids) AS x
                                                         WHERE x <> ALL (%(ids)s::bigint[]))
                    WHERE community_ids && %(ids)s::bigint[]""").format(q=qualified(realm, "query_events")),
        {"ids": list(community_ids)},
    ).rowcount
