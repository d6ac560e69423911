"""Retention as demotion (paper §6.1; issue 14 item 3): the statements that read an entity's structure and
archive or unarchive entities. Scoring is :mod:`pgrag_dag.operate.retention`; retrieval counts come from
:mod:`pgrag_dag.store.telemetry`.

Archiving sets ``archived_at = now()`` and ``dormant_since = COALESCE(dormant_since, now())``: the history
triggers (:mod:`pgrag_dag.store.history`) record ``archived`` and close the entity's belief interval, and
every read that withholds dormant entities — retrieval, traversal, community construction — withholds it.
``graph.replace_mentions`` never revives an archived entity; unarchiving clears ``archived_at`` (event
``unarchived``) and revives it (``dormant_since = NULL``, a new interval) when a chunk still mentions it.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from pgrag_dag.store.identifiers import qualified

_STRUCTURE = """
SELECT e.id, e.name, e.entity_type,
       (SELECT count(*) FROM {r} r
          JOIN {e} o ON o.id = CASE WHEN r.source_id = e.id THEN r.target_id ELSE r.source_id END
                    AND o.dormant_since IS NULL
         WHERE r.space = e.space AND (r.source_id = e.id OR r.target_id = e.id)
           AND r.dormant_since IS NULL AND r.superseded_by IS NULL) AS degree,
       COALESCE((SELECT min(l.at) FROM {l} l WHERE l.kind = 'entity' AND l.object_id = e.id
                AND l.event = 'created'),
                e.t_created) AS created_at
  FROM {e} e
 WHERE e.space = %s AND e.dormant_since IS NULL
 ORDER BY e.id"""


def live_structure(conn: psycopg.Connection, realm: str, space: str) -> list[dict[str, Any]]:
    """Every live entity of ``space`` (neither dormant nor archived), by id: ``id, name, entity_type``,
    ``degree`` (current relations — not dormant, not superseded — to another live entity) and
    ``created_at`` (belief time: its ``created`` event in ``belief_log``, else its ``t_created``)."""
    query = sql.SQL(_STRUCTURE).format(
        e=qualified(realm, "entities"), r=qualified(realm, "relations"), l=qualified(realm, "belief_log")
    )
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(query, (space,)).fetchall()


def clock(conn: psycopg.Connection) -> datetime:
    """The database clock: the current transaction's ``now()``."""
    row = conn.execute("SELECT now()").fetchone()
    assert row is not None
    return row[0]


def archive(conn: psycopg.Connection, realm: str, space: str, ids: Sequence[int]) -> list[tuple[int, str]]:
    """Archive the live entities ``ids`` of ``space`` (see the module docstring); ``(id, name)`` of each
    archived, by id — an id already dormant or archived is left as it is."""
    if not ids:
        return []
    rows = conn.execute(
        sql.SQL("""UPDATE {e} SET archived_at = now(), dormant_since = COALESCE(dormant_since, now())
                                    WHERE space = %s AND id = ANY(%s) AND archived_at IS NULL
                                        AND dormant_since IS NULL
                                    RETURNING id, name""").format(e=qualified(realm, "entities")),
        (space, list(ids)),
    ).fetchall()
    return sorted((int(i), str(n)) for i, n in rows)


def find_by_name(
    conn: psycopg.Connection, realm: str, space: str, names: Sequence[str]
) -> dict[str, dict[str, Any]]:
    """Lower-cased name → ``id, name, archived`` (bool) of the entities of ``space`` called one of ``names``
    (case-insensitive, as entity names are unique); names not found are absent."""
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(
            sql.SQL("""SELECT id, name, archived_at IS NOT NULL AS archived FROM {e}
                                       WHERE space = %s AND lower(name) = ANY(%s)""").format(
                e=qualified(realm, "entities")
            ),
            (space, [n.lower() for n in names]),
        ).fetchall()
    return {r["name"].lower(): r for r in rows}


def unarchive(conn: psycopg.Connection, realm: str, space: str, ids: Sequence[int]) -> list[dict[str, Any]]:
    """Unarchive the archived entities ``ids`` of ``space``: ``archived_at = NULL``, and ``dormant_since =
    NULL`` where a chunk still mentions the entity. Returns ``id, name, revived`` of each, by id."""
    if not ids:
        return []
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(
            sql.SQL("""
            UPDATE {e} e SET archived_at = NULL,
                   dormant_since = CASE WHEN EXISTS (SELECT 1 FROM {m} m WHERE m.entity_id = e.id) THEN NULL
                                        ELSE e.dormant_since END
             WHERE e.space = %s AND e.id = ANY(%s) AND e.archived_at IS NOT NULL
            RETURNING e.id, e.name, e.dormant_since IS NULL AS revived""").format(
                e=qualified(realm, "entities"), m=qualified(realm, "doc_mentions")
            ),
            (space, list(ids)),
        ).fetchall()
    return sorted(rows, key=lambda r: r["id"])
