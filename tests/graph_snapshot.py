"""The graph one partition holds, as plain comparable values: the same corpus indexed on two servers, or by
two executors, must give equal snapshots (issue 18 items 3 and 4). Ids, timestamps and vectors differ
between builds and are left out; what the stages decided — rows, names, relations, weights, communities
and which rows carry an embedding — is kept."""

from __future__ import annotations

from typing import Any

from psycopg import sql

from pgrag_dag.store import db
from pgrag_dag.store.schema import schema_for

_COUNTED = (
    "documents",
    "raw_extractions",
    "gate_decisions",
    "entities",
    "relations",
    "doc_mentions",
    "communities",
    "community_members",
    "community_children",
)
_EMBEDDED = ("documents", "entities", "relations", "communities")
_ROWS = {
    "documents": "SELECT doc_key, chunk_index, content_hash FROM {s}.documents "
    "WHERE space = %(space)s ORDER BY 1, 2",
    "entities": """SELECT name, entity_type, ARRAY(SELECT unnest(aliases) ORDER BY 1),
                     dormant_since IS NOT NULL
                     FROM {s}.entities WHERE space = %(space)s ORDER BY 1""",
    "relations": """SELECT s.name, r.predicate, o.name, r.negated, r.weight, r.superseded_by IS NOT NULL,
                      r.rendered
                      FROM {s}.relations r JOIN {s}.entities s ON s.id = r.source_id
                      JOIN {s}.entities o ON o.id = r.target_id
                     WHERE r.space = %(space)s ORDER BY 1, 2, 3, 4""",
    "communities": """SELECT c.level, c.title, c.size,
                             ARRAY(SELECT e.name FROM {s}.community_members m
                             JOIN {s}.entities e ON e.id = m.entity_id
                                    WHERE m.community_id = c.id ORDER BY 1)
                        FROM {s}.communities c WHERE c.space = %(space)s ORDER BY 1, 2, 4""",
}


def graph_snapshot(dsn: str, realm: str, space: str) -> dict[str, Any]:
    """``{"counts": {table: rows}, "embedded": {table: rows with an embedding}, <table>: [row tuples]}`` of
    ``realm``'s space ``space`` on the server of ``dsn`` (read through a plain connection)."""
    s = sql.Identifier(schema_for(realm))
    out: dict[str, Any] = {}
    with db.connect(dsn, autocommit=True) as conn:

        def q(text: str, table: str = "") -> list[tuple]:
            query = sql.SQL(text).format(s=s, t=sql.Identifier(table))  # type: ignore[arg-type]
            return [tuple(r) for r in conn.execute(query, {"space": space}).fetchall()]

        out["counts"] = {
            t: q("SELECT count(*) FROM {s}.{t} WHERE space = %(space)s", t)[0][0] for t in _COUNTED
        }
        out["embedded"] = {
            t: q("SELECT count(*) FROM {s}.{t} WHERE space = %(space)s AND embedding IS NOT NULL", t)[0][0]
            for t in _EMBEDDED
        }
        out.update({name: q(text) for name, text in _ROWS.items()})
    return out
