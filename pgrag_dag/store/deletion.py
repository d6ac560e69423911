"""Explicit deletion (paper §6.1; issue 14 item 4): the statements that remove an entity, a space or a realm
for good, history included. Never the default: :mod:`pgrag_dag.operate.deletion` runs them under the partition
locks and inside :func:`pgrag_dag.store.history.forgetting`, which alone lets history rows be deleted (and
chunks be deleted without being archived).

Deleting ``relations`` or ``entities`` rows fires the history triggers, which append one ``deleted`` event
per row to ``belief_log`` *after* the object's own history was removed: that event (no name, no text) is
the tombstone a change-feed reader sees. Deleting a whole space removes those tombstones too.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql

from pgrag_dag.names import schema_for
from pgrag_dag.store import telemetry
from pgrag_dag.store.identifiers import qualified

SPACE_ORDER = (
    "stage_pending",
    "community_children",
    "community_sources",
    "community_members",
    "communities",
    "doc_mentions",
    "resolution_rejections",
    "gate_decisions",
    "raw_extractions",
    "relations",
    "documents",
    "entity_keys",
    "entities",
)
"""Tables of a space's graph, in the order their rows are deleted (rows referring to others go first)."""
HISTORY_TABLES = ("belief_log", "relation_belief", "entity_belief", "documents_removed", "query_events")
"""History and telemetry tables, deleted last (the graph deletes above write tombstones into
``belief_log``)."""


TRIGGER_APPENDED = (
    "stage_work",
    "graph_writes",
    "graph_touched",
    "graph_tallies",
    "predicate_tallies",
    "entity_degree",
    "entity_keys_owed",
)
"""Tables the graph's triggers append to while a space's rows are deleted (:func:`delete_space_rows`): queued
work, graph versions, and the counts kept by delta (:mod:`pgrag_dag.store.tallies`)."""


def space_tables(conn: psycopg.Connection, realm: str) -> list[str]:
    """Every base table of the realm's schema with a ``space`` column, in deletion order: :data:`SPACE_ORDER`,
    then any other (a table added later), then :data:`HISTORY_TABLES`."""
    rows = conn.execute(
        """SELECT c.table_name FROM information_schema.columns c
                             JOIN information_schema.tables t USING (table_schema, table_name)
                            WHERE c.table_schema = %s AND c.column_name = 'space'
                                AND t.table_type = 'BASE TABLE'""",
        (schema_for(realm),),
    ).fetchall()
    present = {r[0] for r in rows}
    known = (*SPACE_ORDER, *HISTORY_TABLES)
    return (
        [t for t in SPACE_ORDER if t in present]
        + sorted(present - set(known))
        + [t for t in HISTORY_TABLES if t in present]
    )


def count_rows(conn: psycopg.Connection, realm: str, space: str | None) -> dict[str, int]:
    """Rows per table of :func:`space_tables` — of ``space``, or of every space when ``None``."""
    out = {}
    for table in space_tables(conn, realm):
        where = sql.SQL("") if space is None else sql.SQL(" WHERE space = %s")
        row = conn.execute(
            sql.SQL("SELECT count(*) FROM {}").format(qualified(realm, table)) + where,
            () if space is None else (space,),
        ).fetchone()
        out[table] = int(row[0]) if row else 0
    return out


def delete_space_rows(conn: psycopg.Connection, realm: str, space: str) -> dict[str, int]:
    """Delete every row of ``space`` from every table of :func:`space_tables`, in that order, in the caller's
    forgetting transaction. Returns rows removed per table, ``belief_log`` and :data:`TRIGGER_APPENDED`
    counting only the rows that were there before (not the tombstones, queued work and graph versions the
    graph deletes appended and this removed again)."""
    out: dict[str, int] = {}
    tables = space_tables(conn, realm)
    # the graph deletes below append to these by triggers (queued work, graph data versions): removed again,
    # last, and reported as the rows that were there before
    appended = [t for t in TRIGGER_APPENDED if t in tables]
    tables = [t for t in tables if t not in appended] + appended
    before = {}
    for table in appended:
        row = conn.execute(
            sql.SQL("SELECT count(*) FROM {} WHERE space = %s").format(qualified(realm, table)), (space,)
        ).fetchone()
        before[table] = int(row[0]) if row else 0
    for table in tables:
        out[table] = conn.execute(
            sql.SQL("DELETE FROM {} WHERE space = %s").format(qualified(realm, table)), (space,)
        ).rowcount
    out.update(before)
    if "belief_log" in out:
        out["belief_log"] -= out.get("relations", 0) + out.get("entities", 0)
    return out


def document_counts(conn: psycopg.Connection, realm: str, space: str, doc_key: str) -> dict[str, int]:
    """Rows that removing document ``doc_key`` of ``space`` deletes (``documents``: its chunks, then the rows
    cascading from them: ``raw_extractions``, ``gate_decisions``, ``resolution_rejections``,
    ``doc_mentions``); all zero when the space has no such document."""
    chunks = sql.SQL(
        "SELECT id FROM {} WHERE space = %(space)s AND md5(doc_key) = md5(%(key)s) AND doc_key = %(key)s"
    ).format(qualified(realm, "documents"))
    out = {}
    for table in ("documents", "raw_extractions", "gate_decisions", "resolution_rejections", "doc_mentions"):
        column = sql.Identifier("id" if table == "documents" else "chunk_id")
        row = conn.execute(
            sql.SQL("SELECT count(*) FROM {} WHERE {} IN (").format(qualified(realm, table), column)
            + chunks
            + sql.SQL(")"),
            {"space": space, "key": doc_key},
        ).fetchone()
        out[table] = int(row[0]) if row else 0
    return out


def entity_id(conn: psycopg.Connection, realm: str, space: str, name: str) -> tuple[int, str] | None:
    """``(id, canonical name)`` of the entity of ``space`` called ``name`` (case-insensitive), or ``None``."""
    row = conn.execute(
        sql.SQL("SELECT id, name FROM {} WHERE space = %s AND lower(name) = lower(%s)").format(
            qualified(realm, "entities")
        ),
        (space, name),
    ).fetchone()
    return None if row is None else (int(row[0]), str(row[1]))


def mentioning_documents(
    conn: psycopg.Connection, realm: str, space: str, entity: int, limit: int = 5
) -> tuple[int, list[str]]:
    """``(how many documents, up to `limit` of their doc_keys, sorted)`` whose chunks mention ``entity``."""
    rows = conn.execute(
        sql.SQL("""SELECT DISTINCT d.doc_key FROM {m} m JOIN {d} d ON d.id = m.chunk_id
                                    WHERE m.space = %s AND m.entity_id = %s ORDER BY 1""").format(
            m=qualified(realm, "doc_mentions"), d=qualified(realm, "documents")
        ),
        (space, entity),
    ).fetchall()
    return len(rows), [r[0] for r in rows[:limit]]


def delete_entity_rows(conn: psycopg.Connection, realm: str, space: str, entity: int) -> dict[str, Any]:
    """Delete ``entity`` of ``space`` with its relations (every state), mentions, community memberships and
    their history, in the caller's forgetting transaction; its id is also taken out of archived chunks'
    ``entity_ids`` and of ``query_events``. A relation that one of its relations superseded is restored
    (``superseded_by`` and ``t_expired`` cleared; history: ``restored``).

    Returns ``{"removed": {table: rows deleted; ``documents_removed.entity_ids`` and
    ``query_events.entity_ids``: rows the id was taken out of}, "restored": relations restored, "tombstones":
    deleted events appended to belief_log}``.
    """
    args = {"space": space, "id": entity}
    rel_ids = [
        r[0]
        for r in conn.execute(
            sql.SQL("""SELECT id FROM {} WHERE space = %(space)s
                                                     AND (source_id = %(id)s OR target_id =
                                                         %(id)s)""").format(qualified(realm, "relations")),
            args,
        ).fetchall()
    ]
    args["rels"] = rel_ids
    removed: dict[str, int] = {}

    def run(key: str, stmt: str, table: str) -> int:
        n = conn.execute(sql.SQL(stmt).format(t=qualified(realm, table)), args).rowcount
        removed[key] = removed.get(key, 0) + n
        return n

    run(
        "belief_log",
        """DELETE FROM {t} WHERE space = %(space)s AND ((kind = 'entity' AND object_id = %(id)s)
                          OR (kind = 'relation' AND object_id = ANY(%(rels)s)))""",
        "belief_log",
    )
    run(
        "relation_belief",
        "DELETE FROM {t} WHERE space = %(space)s AND relation_id = ANY(%(rels)s)",
        "relation_belief",
    )
    run("entity_belief", "DELETE FROM {t} WHERE space = %(space)s AND entity_id = %(id)s", "entity_belief")
    run(
        "documents_removed.entity_ids",
        """UPDATE {t} SET entity_ids = array_remove(entity_ids, %(id)s::bigint)
                                 WHERE space = %(space)s AND entity_ids @> ARRAY[%(id)s::bigint]""",
        "documents_removed",
    )
    removed["query_events.entity_ids"] = telemetry.forget_entities(conn, realm, [entity])
    restored = conn.execute(
        sql.SQL("""UPDATE {t} SET superseded_by = NULL, t_expired = NULL
                                        WHERE space = %(space)s AND superseded_by = ANY(%(rels)s)
                                          AND NOT id = ANY(%(rels)s)""").format(
            t=qualified(realm, "relations")
        ),
        args,
    ).rowcount
    run(
        "community_members",
        "DELETE FROM {t} WHERE space = %(space)s AND entity_id = %(id)s",
        "community_members",
    )
    run("doc_mentions", "DELETE FROM {t} WHERE space = %(space)s AND entity_id = %(id)s", "doc_mentions")
    run("relations", "DELETE FROM {t} WHERE space = %(space)s AND id = ANY(%(rels)s)", "relations")
    run("entities", "DELETE FROM {t} WHERE space = %(space)s AND id = %(id)s", "entities")
    return {
        "removed": removed,
        "restored": restored,
        "tombstones": removed["relations"] + removed["entities"],
    }


def drop_realm(conn: psycopg.Connection, realm: str) -> None:
    """Drop the realm's schema with every table (``CASCADE``) and its registry row, in the caller's
    transaction (which holds the schema lock)."""
    conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema_for(realm))))
    conn.execute("DELETE FROM pgrag__control.realms WHERE realm = %s", (realm,))
