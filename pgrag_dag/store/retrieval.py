"""Read SQL for the query path (paper §3.3, §5.4, §7.2).

Every function reads one realm schema (``pgrag_<realm>``, composed with ``psycopg.sql.Identifier``)
and is scoped to one space, or to every space when ``space`` is the read-only wildcard ``"*"``.
Values always travel as parameters. Vector searches run with
``SET LOCAL hnsw.iterative_scan = relaxed_order`` (pgvector >= 0.8) inside their own transaction or
savepoint, so a space filter does not starve an HNSW scan of rows; results are re-sorted by
distance afterwards, as pgvector recommends for relaxed ordering.

Rows are returned as lists of dicts; distances are cosine distances (``<=>``, 0..2) and ``score``
is cosine similarity ``1 - distance``. Query vectors must have the realm's embedding width.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from pgrag_dag.names import WILDCARD_SPACE, schema_for, validate_space

Row = dict[str, Any]


def _table(realm: str, name: str) -> sql.Composed:
    return sql.SQL("{}.{}").format(sql.Identifier(schema_for(realm)), sql.Identifier(name))


def _in_space(alias: str, space: str) -> sql.Composable:
    """``alias.space = %(space)s``, or ``TRUE`` for the wildcard (read across spaces)."""
    if validate_space(space, for_write=False) == WILDCARD_SPACE:
        return sql.SQL("TRUE")
    return sql.SQL("{}.space = %(space)s").format(sql.Identifier(alias))


def _fetch(
    conn: psycopg.Connection, query: sql.Composable, params: dict[str, Any], *, vector: bool = False
) -> list[Row]:
    with conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
        if vector:
            cur.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
        cur.execute(query, params)
        return cur.fetchall()


def realm_embedding(conn: psycopg.Connection, realm: str) -> tuple[str, int] | None:
    """The realm's registered ``(embedding_model, embedding_dim)``, or ``None`` if it is not registered."""
    if conn.execute("SELECT to_regclass('pgrag__control.realms')").fetchone() == (None,):
        return None  # a database nothing was ever indexed into
    row = conn.execute(
        "SELECT embedding_model, embedding_dim FROM pgrag__control.realms WHERE realm = %s", (realm,)
    ).fetchone()
    return None if row is None else (str(row[0]), int(row[1]))


def space_exists(conn: psycopg.Connection, realm: str, space: str) -> bool:
    """Whether any chunk was ever indexed into ``space`` of ``realm``."""
    row = conn.execute(
        sql.SQL("SELECT EXISTS (SELECT 1 FROM {}.documents WHERE space = %s)").format(sql.Identifier(schema_for(realm))),
        (space,),
    ).fetchone()
    return bool(row and row[0])


def entity_search(conn: psycopg.Connection, realm: str, space: str, qvec: np.ndarray, k: int) -> list[Row]:
    """The ``k`` non-dormant entities nearest ``qvec`` (shape ``(dim,)``) in ``space`` (§7.2 seeds).

    Rows: ``id, space, name, entity_type, description, distance, score``, nearest first.
    """
    if k <= 0:
        return []
    query = sql.SQL("""
        WITH hits AS MATERIALIZED (
            SELECT e.id, e.space, e.name, e.entity_type, e.description, e.embedding <=> %(q)s AS distance
              FROM {e} AS e
             WHERE {in_space} AND e.dormant_since IS NULL AND e.embedding IS NOT NULL
             ORDER BY e.embedding <=> %(q)s
             LIMIT %(k)s)
        SELECT *, 1 - distance AS score FROM hits ORDER BY distance, id""").format(
        e=_table(realm, "entities"), in_space=_in_space("e", space)
    )
    return _fetch(conn, query, {"q": qvec, "k": k, "space": space}, vector=True)


def chunk_search(conn: psycopg.Connection, realm: str, space: str, qvec: np.ndarray, k: int) -> list[Row]:
    """The ``k`` embedded chunks nearest ``qvec`` (shape ``(dim,)``) in ``space``.

    Rows: ``id, space, doc_key, title, chunk_index, text, distance, score``, nearest first. Chunks
    not yet embedded are never returned by this search (mention expansion can still reach them).
    """
    if k <= 0:
        return []
    query = sql.SQL("""
        WITH hits AS MATERIALIZED (
            SELECT d.id, d.space, d.doc_key, d.title, d.chunk_index, d.text, d.embedding <=> %(q)s AS distance
              FROM {d} AS d
             WHERE {in_space} AND d.embedding IS NOT NULL
             ORDER BY d.embedding <=> %(q)s
             LIMIT %(k)s)
        SELECT *, 1 - distance AS score FROM hits ORDER BY distance, id""").format(
        d=_table(realm, "documents"), in_space=_in_space("d", space)
    )
    return _fetch(conn, query, {"q": qvec, "k": k, "space": space}, vector=True)


def traverse(
    conn: psycopg.Connection,
    realm: str,
    space: str,
    seeds: Sequence[int],
    *,
    max_hops: int,
    max_relation_edges: int,
    include_superseded: bool = False,
) -> list[Row]:
    """Relations within ``max_hops`` of the seed entities, walked in both edge directions (§3.3, §7.2).

    The filters are applied at every step of the walk (a recursive CTE), never to its result: each
    step stays in the seed's space (edge *and* neighbour), never crosses a dormant relation or a
    dormant entity, and never crosses a superseded relation unless ``include_superseded`` — so a
    vertex reachable only through such an edge is never reached. Seeds outside ``space`` or dormant
    are ignored. Paths do not revisit a vertex.

    Each seed contributes at most ``max_relation_edges`` relations, nearest hop first, then newest
    ``t_created`` first (unknown ``t_created`` last). A relation reached from several seeds keeps
    its smallest hop. Rows: ``id, space, source_id, target_id, predicate, description, negated,
    valid_from, valid_to, weight, confidence, t_created, superseded_by, hop, seeds`` (the seed ids
    that kept it), ordered by ``hop``, then ``t_created`` descending, then ``id``.
    """
    if not seeds or max_hops <= 0 or max_relation_edges <= 0:
        return []
    edge_ok = sql.SQL("r.dormant_since IS NULL")
    if not include_superseded:
        edge_ok = sql.SQL("r.dormant_since IS NULL AND r.superseded_by IS NULL")
    query = sql.SQL("""
        WITH RECURSIVE walk (seed, space, entity_id, rel_id, hop, path) AS (
            SELECT e.id, e.space, e.id, NULL::bigint, 0, ARRAY[e.id]
              FROM {e} AS e
             WHERE e.id = ANY(%(seeds)s) AND {in_space} AND e.dormant_since IS NULL
          UNION ALL
            SELECT w.seed, w.space, adj.neighbour, adj.rel_id, w.hop + 1, w.path || adj.neighbour
              FROM walk AS w
              CROSS JOIN LATERAL (
                    SELECT r.id AS rel_id, r.target_id AS neighbour FROM {r} AS r
                     WHERE r.space = w.space AND r.source_id = w.entity_id AND {edge_ok}
                    UNION ALL
                    SELECT r.id, r.source_id FROM {r} AS r
                     WHERE r.space = w.space AND r.target_id = w.entity_id AND {edge_ok}
              ) AS adj
              JOIN {e} AS n ON n.id = adj.neighbour
             WHERE w.hop < %(max_hops)s
               AND n.space = w.space AND n.dormant_since IS NULL
               AND n.id <> ALL (w.path)
        ),
        reached AS (
            SELECT seed, rel_id, min(hop) AS hop FROM walk WHERE rel_id IS NOT NULL GROUP BY seed, rel_id
        ),
        ranked AS (
            SELECT x.seed, x.rel_id, x.hop,
                   row_number() OVER (PARTITION BY x.seed
                                      ORDER BY x.hop, r.t_created DESC NULLS LAST, r.id) AS rn
              FROM reached AS x JOIN {r} AS r ON r.id = x.rel_id
        ),
        kept AS (
            SELECT rel_id, min(hop) AS hop, array_agg(DISTINCT seed ORDER BY seed) AS seeds
              FROM ranked WHERE rn <= %(cap)s GROUP BY rel_id
        )
        SELECT r.id, r.space, r.source_id, r.target_id, r.predicate, r.description, r.negated,
               r.valid_from, r.valid_to, r.weight, r.confidence, r.t_created, r.superseded_by,
               k.hop, k.seeds
          FROM kept AS k JOIN {r} AS r ON r.id = k.rel_id
         ORDER BY k.hop, r.t_created DESC NULLS LAST, r.id""").format(
        e=_table(realm, "entities"), r=_table(realm, "relations"), in_space=_in_space("e", space), edge_ok=edge_ok
    )
    params = {"seeds": list(seeds), "space": space, "max_hops": max_hops, "cap": max_relation_edges}
    return _fetch(conn, query, params)


def mention_chunks(
    conn: psycopg.Connection,
    realm: str,
    space: str,
    entity_ids: Sequence[int],
    k: int,
    *,
    exclude: Sequence[int] = (),
) -> list[Row]:
    """Chunks mentioning the matched entities, through ``doc_mentions`` (§7.2 mention expansion).

    Ranked by how many distinct matched entities each chunk mentions (most first), then document
    order. The mention edge and the chunk must both lie in ``space`` (and in one space under the
    wildcard). Chunk ids in ``exclude`` (already retrieved) are skipped. Rows: ``id, space, doc_key,
    title, chunk_index, text, mentions, entity_ids``; at most ``k``.
    """
    if not entity_ids or k <= 0:
        return []
    query = sql.SQL("""
        SELECT d.id, d.space, d.doc_key, d.title, d.chunk_index, d.text,
               count(DISTINCT m.entity_id) AS mentions,
               array_agg(DISTINCT m.entity_id ORDER BY m.entity_id) AS entity_ids
          FROM {m} AS m JOIN {d} AS d ON d.id = m.chunk_id AND d.space = m.space
         WHERE m.entity_id = ANY(%(ids)s) AND {in_space} AND NOT (d.id = ANY(%(exclude)s))
         GROUP BY d.id
         ORDER BY mentions DESC, d.doc_order, d.doc_key, d.chunk_index, d.id
         LIMIT %(k)s""").format(
        m=_table(realm, "doc_mentions"), d=_table(realm, "documents"), in_space=_in_space("m", space)
    )
    params = {"ids": list(entity_ids), "space": space, "exclude": list(exclude), "k": k}
    return _fetch(conn, query, params)


def entity_names(conn: psycopg.Connection, realm: str, ids: Sequence[int]) -> dict[int, str]:
    """Canonical names of entity ids (e.g. relation endpoints), as ``{id: name}``; unknown ids are absent."""
    if not ids:
        return {}
    query = sql.SQL("SELECT id, name FROM {e} WHERE id = ANY(%(ids)s)").format(e=_table(realm, "entities"))
    return {int(r["id"]): str(r["name"]) for r in _fetch(conn, query, {"ids": sorted(set(ids))})}
