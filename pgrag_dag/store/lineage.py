"""What a community report derives from (issues 6, 28): its member entities, the relations it was built
from (its snapshot, ``community_sources``: the relations inside the cluster when it was built, not today's),
their chunks then and the documents those came from — read from the ``community_lineage`` view.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from pgrag_dag.errors import QueryError
from pgrag_dag.store.identifiers import qualified


def lineage(conn: psycopg.Connection, realm: str, community_id: int) -> dict[str, Any]:
    """The report's lineage: ``community`` (id, space, level, title, built_at), ``entities`` (id, name),
    ``relations`` (id, subject, predicate, object, negated, chunk_ids), ``chunks`` (id, doc_key,
    chunk_index) and ``documents`` (doc_key, title, chunks). Raises :class:`QueryError` for an unknown id."""
    with conn.cursor(row_factory=dict_row) as cur:
        head = cur.execute(
            sql.SQL("SELECT id, space, level, title, built_at FROM {} WHERE id = %s").format(
                qualified(realm, "communities")
            ),
            (community_id,),
        ).fetchone()
        if head is None:
            raise QueryError(f"realm {realm!r} has no community {community_id}")
        rows = cur.execute(
            sql.SQL(
                """SELECT l.relation_id, s.name AS subject, l.predicate, o.name AS object, l.negated,
                      l.chunk_id, l.doc_key, l.document_title, l.chunk_index
                 FROM {lin} l JOIN {e} s ON s.id = l.source_id JOIN {e} o ON o.id = l.target_id
                WHERE l.community_id = %s ORDER BY l.doc_key, l.chunk_index, l.relation_id"""
            ).format(lin=qualified(realm, "community_lineage"), e=qualified(realm, "entities")),
            (community_id,),
        ).fetchall()
        members = cur.execute(
            sql.SQL(
                """WITH RECURSIVE under(id) AS (SELECT %s::bigint UNION ALL
                   SELECT ch.child_id FROM under u JOIN {ch} ch ON ch.parent_id = u.id)
               SELECT DISTINCT e.id, e.name FROM under u JOIN {m} m ON m.community_id = u.id
                 JOIN {e} e ON e.id = m.entity_id ORDER BY e.name"""
            ).format(
                ch=qualified(realm, "community_children"),
                m=qualified(realm, "community_members"),
                e=qualified(realm, "entities"),
            ),
            (community_id,),
        ).fetchall()
    relations: dict[int, dict[str, Any]] = {}
    chunks: dict[int, dict[str, Any]] = {}
    documents: dict[str, dict[str, Any]] = {}
    for r in rows:
        rel = relations.setdefault(
            r["relation_id"],
            {
                "id": r["relation_id"],
                "subject": r["subject"],
                "predicate": r["predicate"],
                "object": r["object"],
                "negated": r["negated"],
                "chunk_ids": [],
            },
        )
        rel["chunk_ids"].append(r["chunk_id"])
        chunks.setdefault(
            r["chunk_id"], {"id": r["chunk_id"], "doc_key": r["doc_key"], "chunk_index": r["chunk_index"]}
        )
        doc = documents.setdefault(
            r["doc_key"], {"doc_key": r["doc_key"], "title": r["document_title"], "chunks": set()}
        )
        doc["chunks"].add(r["chunk_id"])
    return {
        "community": dict(head),
        "entities": [dict(m) for m in members],
        "relations": list(relations.values()),
        "chunks": list(chunks.values()),
        "documents": [{**d, "chunks": sorted(d["chunks"])} for d in documents.values()],
    }


_LEVEL0 = """
WITH l AS (SELECT cs.community_id, cs.relation_id, cs.chunk_id, coalesce(d.doc_key, dr.doc_key) AS doc_key
             FROM {sources} cs JOIN {c} c ON c.id = cs.community_id
             LEFT JOIN {docs} d ON d.id = cs.chunk_id
             LEFT JOIN {removed} dr ON dr.id = cs.chunk_id
            WHERE cs.space = %(space)s AND c.space = %(space)s AND c.level = 0
              AND (d.id IS NOT NULL OR dr.id IS NOT NULL))
"""


def lineage_summary(conn: psycopg.Connection, realm: str, space: str, *, sample: int = 5) -> dict[str, Any]:
    """Counts over the space's communities (relations, chunks, documents they derive from) and a sample
    of the largest reports with their counts — the ``communities`` asset's lineage metadata.

    Reads the level-0 lineage of this space directly (what ``community_lineage`` gives for it), so its
    cost follows the space, not the realm's other spaces. The community tables' statistics are refreshed
    first: their rows were usually written a moment ago, and a plan made on the statistics of before (an
    empty table) took minutes on a graph of 300 communities and 17,600 relations instead of 85 ms."""
    tables = {
        "sources": qualified(realm, "community_sources"),
        "c": qualified(realm, "communities"),
        "docs": qualified(realm, "documents"),
        "removed": qualified(realm, "documents_removed"),
    }
    conn.execute(sql.SQL("ANALYZE {sources}, {c}").format(**tables))
    level0 = sql.SQL(_LEVEL0).format(**tables)
    rows = conn.execute(
        level0
        + sql.SQL(
            """SELECT c.id, c.title, c.size, count(DISTINCT l.relation_id), count(DISTINCT l.chunk_id),
             count(DISTINCT l.doc_key)
             FROM {c} c LEFT JOIN l ON l.community_id = c.id
            WHERE c.space = %(space)s AND c.level = 0 GROUP BY c.id, c.title, c.size ORDER BY c.size DESC,
                c.id"""
        ).format(**tables),
        {"space": space},
    ).fetchall()
    totals = conn.execute(
        level0
        + sql.SQL(
            "SELECT count(DISTINCT relation_id), count(DISTINCT chunk_id), count(DISTINCT doc_key) FROM l"
        ),
        {"space": space},
    ).fetchone()
    assert totals is not None
    return {
        "lineage_relations": totals[0],
        "lineage_chunks": totals[1],
        "lineage_documents": totals[2],
        "lineage_sample": [
            {"community_id": i, "title": t, "entities": n, "relations": r, "chunks": ch, "documents": d}
            for i, t, n, r, ch, d in rows[:sample]
        ],
    }
