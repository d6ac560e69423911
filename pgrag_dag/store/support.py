"""SQL of attribute re-derivation (paper §4.6, §4.7; issue 28): the support an entity or a relation has left,
and writing the attributes :mod:`pgrag_dag.graph.rederive` derives from it.

An entity's support is the accepted gate decisions of the live chunks that mention it (``doc_mentions``); a
relation's, the accepted triple decisions of the live chunks among its ``chunk_ids``. Writing a changed
attribute clears the row's vectors (``embedding``, ``fallback_embedding``, ``embed_hash``): a vector of
the old text must not outlive it, and the embeddings stage embeds the new text on its next run.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from pgrag_dag.store import quality
from pgrag_dag.store.identifiers import qualified

_CLEAR_VECTORS = "embedding = NULL, embed_hash = NULL, fallback_embedding = NULL, embed_fallback = NULL"


def entities(conn: psycopg.Connection, realm: str, space: str, ids: Sequence[int]) -> list[dict[str, Any]]:
    """``id, name, entity_type, description, aliases`` of the entities ``ids`` of ``space``, by id."""
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(
            sql.SQL("""SELECT id, name, entity_type, description, aliases FROM {}
                        WHERE space = %s AND id = ANY(%s) ORDER BY id""").format(
                qualified(realm, "entities")
            ),
            (space, list(ids)),
        ).fetchall()


def entity_decisions(
    conn: psycopg.Connection,
    realm: str,
    space: str,
    ids: Sequence[int],
    without: Sequence[int] = (),
    *,
    entities_only: bool = False,
) -> list[dict[str, Any]]:
    """The accepted decisions (``kind`` entity and triple; entity only with ``entities_only``) of the live
    chunks that mention one of the entities ``ids``, chunks ``without`` left out: ``entity_id, chunk_id,
    kind, name, entity_type, description, aliases, subject, object``, in (entity, document order, pass,
    decision) order — the order resolution reads records in."""
    kinds = ["entity"] if entities_only else ["entity", "triple"]
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(
            sql.SQL("""SELECT m.entity_id, g.chunk_id, g.kind, g.name, g.entity_type, g.description,
                              g.aliases,
                              g.subject, g.object
                         FROM {m} m JOIN {d} d ON d.id = m.chunk_id
                         JOIN {g} g ON g.chunk_id = m.chunk_id AND g.accepted
                        WHERE m.space = %s AND m.entity_id = ANY(%s) AND NOT m.chunk_id = ANY(%s)
                          AND g.kind = ANY(%s)
                        ORDER BY m.entity_id, d.doc_order, d.doc_key, d.chunk_index, g.pass, g.id""").format(
                m=qualified(realm, "doc_mentions"),
                d=qualified(realm, "documents"),
                g=qualified(realm, "gate_decisions"),
            ),
            (space, list(ids), list(without), kinds),
        ).fetchall()


def relations(conn: psycopg.Connection, realm: str, space: str, ids: Sequence[int]) -> list[dict[str, Any]]:
    """``id, source_id, target_id, predicate, negated, chunk_ids, confidence, payload`` of relations
    ``ids``."""
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(
            sql.SQL("""SELECT id, source_id, target_id, predicate, negated, chunk_ids, confidence, payload
                         FROM {} WHERE space = %s AND id = ANY(%s) ORDER BY id""").format(
                qualified(realm, "relations")
            ),
            (space, list(ids)),
        ).fetchall()


def relations_touching(
    conn: psycopg.Connection, realm: str, space: str, entity_ids: Sequence[int]
) -> list[int]:
    """Ids of the relations of ``space`` with an endpoint among ``entity_ids``."""
    rows = conn.execute(
        sql.SQL("""SELECT id FROM {} WHERE space = %(space)s
                      AND (source_id = ANY(%(ids)s) OR target_id = ANY(%(ids)s)) ORDER BY id""").format(
            qualified(realm, "relations")
        ),
        {"space": space, "ids": list(entity_ids)},
    ).fetchall()
    return [int(r[0]) for r in rows]


def triple_decisions(
    conn: psycopg.Connection, realm: str, space: str, chunks: Sequence[int]
) -> list[dict[str, Any]]:
    """The accepted triple decisions of the live chunks ``chunks`` in document order: ``chunk_id, pass,
    subject, predicate, object, description, negated, confidence, valid_from, valid_to`` (the relations
    stage's input, :mod:`pgrag_dag.graph.relations`)."""
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(
            sql.SQL("""SELECT g.chunk_id, g.pass, g.subject, g.predicate, g.object, g.description, g.negated,
                              g.confidence, g.valid_from, g.valid_to
                         FROM {g} g JOIN {d} d ON d.id = g.chunk_id
                        WHERE g.space = %s AND g.chunk_id = ANY(%s) AND g.kind = 'triple' AND g.accepted
                        ORDER BY d.doc_order, d.doc_key, d.chunk_index, g.pass, g.id""").format(
                g=qualified(realm, "gate_decisions"), d=qualified(realm, "documents")
            ),
            (space, list(chunks)),
        ).fetchall()


def taken_names(conn: psycopg.Connection, realm: str, space: str, names: Sequence[str]) -> dict[str, int]:
    """``lower(name)`` → id of the entities of ``space`` whose canonical name is one of ``names``
    (case-insensitive): who holds a name the unique index allows once."""
    rows = conn.execute(
        sql.SQL("SELECT lower(name), id FROM {} WHERE space = %s AND lower(name) = ANY(%s)").format(
            qualified(realm, "entities")
        ),
        (space, [n.lower() for n in names]),
    ).fetchall()
    return {str(n): int(i) for n, i in rows}


def write_entities(conn: psycopg.Connection, realm: str, space: str, rows: Sequence[dict[str, Any]]) -> int:
    """Set ``name, entity_type, description, aliases`` of each entity of ``rows`` (by ``id``) where one
    differs, clearing what an enricher had decided apart (``resolved_type``, ``resolved_description``) and
    the vectors; then store the identity keys of renamed ones. Returns entities changed."""
    changed = 0
    for r in rows:
        changed += conn.execute(
            sql.SQL(
                "UPDATE {} SET name = %(name)s, entity_type = %(entity_type)s, description = %(description)s,"
                " aliases = %(aliases)s, resolved_type = NULL, resolved_description = NULL,"
                " t_updated = now(), "
                + _CLEAR_VECTORS
                + """ WHERE space = %(space)s AND id = %(id)s
                     AND (name, entity_type, description, aliases, resolved_type, resolved_description)
                         IS DISTINCT FROM (%(name)s, %(entity_type)s, %(description)s, %(aliases)s::text[],
                                           NULL, NULL)"""
            ).format(qualified(realm, "entities")),
            {**r, "space": space},
        ).rowcount
    quality.fill_identity_keys(conn, realm, space)
    return changed


def write_relations(conn: psycopg.Connection, realm: str, space: str, rows: Sequence[dict[str, Any]]) -> int:
    """Set ``description, chunk_ids, weight, confidence, payload, rendered`` of each relation of ``rows``
    (by ``id``) where one differs, clearing its vectors. Returns relations changed."""
    changed = 0
    for r in rows:
        changed += conn.execute(
            sql.SQL(
                "UPDATE {} SET description = %(description)s, chunk_ids = %(chunk_ids)s, weight = %(weight)s,"
                " confidence = %(confidence)s, payload = %(payload)s, rendered = %(rendered)s, "
                + _CLEAR_VECTORS
                + """ WHERE space = %(space)s AND id = %(id)s
                     AND (description, chunk_ids, weight, confidence, payload, rendered)
                         IS DISTINCT FROM (%(description)s, %(chunk_ids)s::bigint[], %(weight)s,
                                           %(confidence)s::double precision, %(payload)s, %(rendered)s)"""
            ).format(qualified(realm, "relations")),
            {**r, "payload": Jsonb(r["payload"]), "space": space},
        ).rowcount
    return changed
