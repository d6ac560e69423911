"""Read-only SQL for exporting and viewing one space's whole graph (issue 16 items 7–8): every entity,
relation, community and mention, dormant, archived and superseded rows included and marked.

The other readers of these tables serve a stage and read what it needs
(:func:`pgrag_dag.store.graph.load_entities`: no dormancy; :func:`pgrag_dag.store.communities.load_graph`: the
live graph only); an export must show everything, with the state of each row. Each function returns a polars
frame with the schema given beside it (timestamps are UTC ``Datetime("us", "UTC")``); the realm and space are
validated (:class:`~pgrag_dag.errors.InvalidNameError`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl
import psycopg
from psycopg import sql

from pgrag_dag.names import validate_space
from pgrag_dag.store.identifiers import qualified

_TS = pl.Datetime("us", "UTC")

ENTITY_SCHEMA: dict[str, Any] = {
    "id": pl.Int64,
    "name": pl.String,
    "entity_type": pl.String,
    "description": pl.String,
    "aliases": pl.List(pl.String),
    "dormant": pl.Boolean,
    "dormant_since": _TS,
    "archived": pl.Boolean,
    "archived_at": _TS,
    "t_created": _TS,
}
RELATION_SCHEMA: dict[str, Any] = {
    "id": pl.Int64,
    "source_id": pl.Int64,
    "target_id": pl.Int64,
    "subject": pl.String,
    "object": pl.String,
    "predicate": pl.String,
    "description": pl.String,
    "weight": pl.Int64,
    "confidence": pl.Float64,
    "negated": pl.Boolean,
    "valid_from": pl.String,
    "valid_to": pl.String,
    "t_created": _TS,
    "t_expired": _TS,
    "superseded_by": pl.Int64,
    "superseded": pl.Boolean,
    "dormant": pl.Boolean,
    "dormant_since": _TS,
    "chunk_ids": pl.List(pl.Int64),
}
COMMUNITY_SCHEMA: dict[str, Any] = {
    "id": pl.Int64,
    "level": pl.Int64,
    "title": pl.String,
    "rating": pl.Float64,
    "size": pl.Int64,
    "summary": pl.String,
    "parent_id": pl.Int64,
    "child_ids": pl.List(pl.Int64),
    "member_entity_ids": pl.List(pl.Int64),
    "built_at": _TS,
}
MENTION_SCHEMA: dict[str, Any] = {
    "entity_id": pl.Int64,
    "chunk_id": pl.Int64,
    "doc_key": pl.String,
    "chunk_index": pl.Int64,
}

_ENTITIES = """
SELECT id, name, entity_type, description, aliases, dormant_since IS NOT NULL, dormant_since,
       archived_at IS NOT NULL, archived_at, t_created
  FROM {e} WHERE space = %s ORDER BY id"""

_RELATIONS = """
SELECT r.id, r.source_id, r.target_id, a.name, b.name, r.predicate, r.description, r.weight, r.confidence,
       r.negated, r.valid_from, r.valid_to, r.t_created, r.t_expired, r.superseded_by,
           r.superseded_by IS NOT NULL,
       r.dormant_since IS NOT NULL, r.dormant_since, r.chunk_ids
  FROM {r} r JOIN {e} a ON a.id = r.source_id JOIN {e} b ON b.id = r.target_id
 WHERE r.space = %s ORDER BY r.id"""

# every community with its member entities: level 0 from community_members, a parent level the union of its
# descendants' (community_children down to level 0)
_COMMUNITIES = """
WITH RECURSIVE down (top, cid) AS (
    SELECT id, id FROM {c} WHERE space = %(s)s
    UNION SELECT d.top, ch.child_id FROM down d JOIN {ch} ch ON ch.parent_id = d.cid
)
SELECT c.id, c.level, c.title, c.rating, c.size, c.summary, c.parent_id,
       COALESCE((SELECT array_agg(child_id ORDER BY child_id) FROM {ch} WHERE parent_id = c.id), '{{}}'),
       COALESCE((SELECT array_agg(DISTINCT m.entity_id ORDER BY m.entity_id) FROM down d
                   JOIN {m} m ON m.community_id = d.cid WHERE d.top = c.id), '{{}}'),
       c.built_at
  FROM {c} c WHERE c.space = %(s)s ORDER BY c.level, c.id"""

_MENTIONS = """
SELECT m.entity_id, m.chunk_id, d.doc_key, d.chunk_index
  FROM {m} m JOIN {d} d ON d.id = m.chunk_id
 WHERE m.space = %s ORDER BY m.entity_id, m.chunk_id"""


def _frame(
    conn: psycopg.Connection,
    query: sql.Composed,
    args: Sequence[Any] | Mapping[str, Any],
    schema: dict[str, Any],
) -> pl.DataFrame:
    rows = conn.execute(query, args).fetchall()
    return pl.DataFrame(rows, schema=schema, orient="row")


def export_entities(conn: psycopg.Connection, realm: str, space: str) -> pl.DataFrame:
    """Every entity of the space by id (:data:`ENTITY_SCHEMA`): ``dormant`` (no chunk mentions it, or
    archived) with ``dormant_since``, ``archived`` (retention, §6.1) with ``archived_at``."""
    return _frame(
        conn,
        sql.SQL(_ENTITIES).format(e=qualified(realm, "entities")),
        (validate_space(space),),
        ENTITY_SCHEMA,
    )


def export_relations(conn: psycopg.Connection, realm: str, space: str) -> pl.DataFrame:
    """Every relation of the space by id (:data:`RELATION_SCHEMA`), with its endpoints' canonical names as
    ``subject``/``object``: ``weight`` = distinct corroborating chunks (§4.7), ``chunk_ids`` its provenance,
    valid time as stated (``valid_from``/``valid_to`` text, §5.1), belief time ``t_created``/``t_expired``
    (§5.3), ``superseded_by`` (the superseding relation's id), ``dormant``."""
    return _frame(
        conn,
        sql.SQL(_RELATIONS).format(r=qualified(realm, "relations"), e=qualified(realm, "entities")),
        (validate_space(space),),
        RELATION_SCHEMA,
    )


def export_communities(conn: psycopg.Connection, realm: str, space: str) -> pl.DataFrame:
    """Every community report of the space, by level then id (:data:`COMMUNITY_SCHEMA`): ``child_ids``
    (the next level down, §6.1) and ``member_entity_ids`` — for a parent, every entity of its descendants."""
    return _frame(
        conn,
        sql.SQL(_COMMUNITIES).format(
            c=qualified(realm, "communities"),
            ch=qualified(realm, "community_children"),
            m=qualified(realm, "community_members"),
        ),
        {"s": validate_space(space)},
        COMMUNITY_SCHEMA,
    )


def export_mentions(conn: psycopg.Connection, realm: str, space: str) -> pl.DataFrame:
    """Every entity ↔ chunk mention of the space (:data:`MENTION_SCHEMA`), with the chunk's document key
    and index, by entity then chunk."""
    return _frame(
        conn,
        sql.SQL(_MENTIONS).format(m=qualified(realm, "doc_mentions"), d=qualified(realm, "documents")),
        (validate_space(space),),
        MENTION_SCHEMA,
    )
