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

# Lineage of community reports (issues 6, 28): report → the relations it was built from (community_sources,
# written with the build) → their chunks then → documents (a chunk removed since is read from
# documents_removed). Parent communities reach their sources through community_children.
LINEAGE_DDL = (
    "DROP VIEW IF EXISTS {s}.community_lineage",
    """CREATE VIEW {s}.community_lineage AS
WITH RECURSIVE under(root, community_id) AS (
    SELECT id, id FROM {s}.communities
    UNION ALL
    SELECT u.root, ch.child_id FROM under u JOIN {s}.community_children ch ON ch.parent_id = u.community_id
), sources AS (
    SELECT DISTINCT u.root AS community_id, cs.relation_id, cs.chunk_id FROM under u
      JOIN {s}.community_sources cs ON cs.community_id = u.community_id
)
SELECT c.space, c.id AS community_id, c.level, c.title, r.id AS relation_id, r.source_id, r.target_id,
       r.predicate, r.negated, src.chunk_id, coalesce(d.doc_key, dr.doc_key) AS doc_key,
       coalesce(d.title, dr.title) AS document_title, coalesce(d.chunk_index, dr.chunk_index) AS chunk_index
  FROM {s}.communities c
  JOIN sources src ON src.community_id = c.id
  JOIN {s}.relations r ON r.id = src.relation_id
  LEFT JOIN {s}.documents d ON d.id = src.chunk_id
  LEFT JOIN {s}.documents_removed dr ON dr.id = src.chunk_id
 WHERE d.id IS NOT NULL OR dr.id IS NOT NULL""",
)

# Realms built before issue 28 gain the sources of their current reports: the relations inside each cluster
# now (what the old view showed), once, when the schema is upgraded.
SOURCES_BACKFILL = """
INSERT INTO {s}.community_sources (space, community_id, relation_id, chunk_id)
SELECT c.space, c.id, r.id, cid.chunk_id
  FROM {s}.communities c
  JOIN {s}.community_members m ON m.community_id = c.id
  JOIN {s}.relations r ON r.space = c.space AND r.source_id = m.entity_id AND r.dormant_since IS NULL
                      AND r.superseded_by IS NULL
  JOIN {s}.community_members m2 ON m2.community_id = c.id AND m2.entity_id = r.target_id
  CROSS JOIN LATERAL unnest(r.chunk_ids) AS cid(chunk_id)
 WHERE c.level = 0 AND NOT EXISTS (SELECT 1 FROM {s}.community_sources x WHERE x.community_id = c.id)
ON CONFLICT DO NOTHING
"""


def create_lineage(conn: psycopg.Connection, schema: str) -> None:
    """(Re)create the ``community_lineage`` view of realm schema ``schema`` and fill ``community_sources``
    for reports built before it existed; inside the caller's DDL transaction
    (:func:`pgrag_dag.store.schema.init_realm`). Idempotent."""
    for stmt in (*LINEAGE_DDL, SOURCES_BACKFILL):
        conn.execute(sql.SQL(stmt).format(s=sql.Identifier(schema)))


def lineage(conn: psycopg.Connection, realm: str, community_id: int) -> dict[str, Any]:
    """The report's lineage: ``community`` (id, space, level, title, built_at), ``entities`` (id, name),
    ``relations`` (id, subject, predicate, object, negated, chunk_ids), ``chunks`` (id, doc_key,
    chunk_index) and ``documents`` (doc_key, title, chunks). Raises :class:`QueryError` for an id the
    current build does not hold, saying what became of it (:func:`missing_community`)."""
    with conn.cursor(row_factory=dict_row) as cur:
        head = cur.execute(
            sql.SQL("SELECT id, space, level, title, built_at FROM {} WHERE id = %s").format(
                qualified(realm, "communities")
            ),
            (community_id,),
        ).fetchone()
        if head is None:
            raise QueryError(missing_community(conn, realm, community_id))
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


def missing_community(conn: psycopg.Connection, realm: str, community_id: int) -> str:
    """Why ``community_id`` is not a community of ``realm`` now, for a user who copied it from an earlier
    listing: community ids change with every rebuild (each build inserts its reports anew), so an id a
    rebuild replaced is found in ``communities_expired`` and the message names the current report of the
    same space, level and title when there is one; an id never built says so. Either way it names the
    command listing the current ids."""
    with conn.cursor(row_factory=dict_row) as cur:
        old = cur.execute(
            sql.SQL("SELECT space, level, title, t_expired FROM {} WHERE id = %s").format(
                qualified(realm, "communities_expired")
            ),
            (community_id,),
        ).fetchone()
        if old is None:
            return (
                f"realm {realm!r} has no community {community_id}, now or in an earlier build (community ids "
                f"change with every rebuild: `pgrag list communities {realm}.SPACE` lists the current ones)"
            )
        same = [
            int(r["id"])
            for r in cur.execute(
                sql.SQL(
                    "SELECT id FROM {} WHERE space = %s AND level = %s AND title = %s ORDER BY id"
                ).format(qualified(realm, "communities")),
                (old["space"], old["level"], old["title"]),
            ).fetchall()
        ]
    listing = f"pgrag list communities {realm}.{old['space']}"
    now = (
        f"the current build's report of that title is community {', '.join(map(str, same))} "
        f"(`pgrag lineage {same[0]}`)"
        if same
        else f"no current report has that title; `{listing}` lists the current ones"
    )
    return (
        f"community {community_id} of {realm}.{old['space']} ({old['title']!r}, level {old['level']}) "
        f"is from an earlier build, replaced at {old['t_expired']:%Y-%m-%d %H:%M:%S %Z}: "
        f"community ids change with every rebuild; {now}"
    )


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
