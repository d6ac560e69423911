"""Read SQL of the personalised-PageRank walk (issue 26; paper §7.2 with §9's relevance-pruned
traversal): the walk graph's edges, the question's names linked to vertices, and the rows the walk ranks.

Every read applies what the k-hop traversal applies (:mod:`pgrag_dag.store.retrieval`): the realm's
schema, the space (or every space under the wildcard, never another realm), and the query's
:class:`~pgrag_dag.temporal.Temporal` — a relation not valid at ``as_of``, not believed at
``as_believed_at`` or superseded (unless ``include_superseded``) is no edge; dormant and archived entities
are no vertex; at a belief instant the chunks and mentions the system had then are read (removed ones from
the archive). An edge between spaces cannot exist: every mention and relation joins its endpoints in its
own space.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import psycopg
from psycopg import sql

from pgrag_dag.store.identifiers import qualified
from pgrag_dag.store.retrieval import (
    Row,
    belief_columns,
    chunks_read,
    created_by,
    entity_live,
    fetch,
    in_space,
    mentions_read,
    relation_filter,
    scope_params,
)
from pgrag_dag.temporal import CURRENT, Temporal

EDGE_KINDS: tuple[str, ...] = ("mentions", "relations", "titles")
"""The edges a walk graph may hold: ``mentions`` — chunk–entity, weight 1 (``doc_mentions``);
``relations`` — entity–entity, weight = corroboration (``relations.weight``, at least 1), one edge per live
relation; ``titles`` — chunk–entity, weight 1, where the chunk's document title is the entity's canonical
name (identity key; HippoRAG's passage–title edge)."""


@dataclass(frozen=True)
class WalkEdges:
    """The edges of one space's walk graph, as int64 arrays of shape ``(k, 2)`` (and ``relation_weight``
    float64, ``relation_ids`` int64, of shape ``(k,)``): ``mentions`` and ``titles`` are ``(chunk_id,
    entity_id)``, ``relations`` ``(source_id, target_id)``. Empty arrays for a kind not read."""

    mentions: np.ndarray
    relations: np.ndarray
    relation_weight: np.ndarray
    titles: np.ndarray
    relation_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))


def _pairs(rows: Sequence[tuple[Any, ...]]) -> np.ndarray:
    return np.asarray([(int(a), int(b)) for a, b, *_ in rows], dtype=np.int64).reshape(-1, 2)


def _titled(
    conn: psycopg.Connection, realm: str, space: str, temporal: Temporal, params: dict[str, Any]
) -> np.ndarray:
    """The title edges ``(chunk_id, entity_id)`` of the live entities ``params["near_entities"]``: their name
    keys, then the chunks titled so (by the ``documents_title_key`` index). Two reads: in one join the planner
    expects a few hundred chunks per title and reads every title instead (100 ms at 1M relations)."""
    keys = conn.execute(
        sql.SQL("""
            SELECT k.name_key, k.entity_id
              FROM {k} AS k JOIN {e} AS e ON e.id = k.entity_id AND e.space = k.space
             WHERE {in_space} AND k.entity_id = ANY(%(near_entities)s) AND {live}""").format(
            k=qualified(realm, "entity_keys"),
            e=qualified(realm, "entities"),
            in_space=in_space("k", space),
            live=entity_live("e", temporal, realm=realm),
        ),
        params,
    ).fetchall()
    if not keys:
        return np.zeros((0, 2), dtype=np.int64)
    entities_of: dict[str, list[int]] = {}
    for key, entity_id in keys:
        entities_of.setdefault(str(key), []).append(int(entity_id))
    chunks = conn.execute(
        sql.SQL("""
            SELECT d.id, lower(btrim(d.title)) FROM {d} AS d
             WHERE {in_space} AND {known} AND d.title <> ''
               AND lower(btrim(d.title)) = ANY(%(keys)s)""").format(
            d=chunks_read(realm, temporal), in_space=in_space("d", space), known=created_by("d", temporal)
        ),
        {**params, "keys": list(entities_of)},
    ).fetchall()
    return _pairs([(chunk_id, entity_id) for chunk_id, key in chunks for entity_id in entities_of[str(key)]])


def walk_edges(
    conn: psycopg.Connection,
    realm: str,
    space: str,
    *,
    temporal: Temporal = CURRENT,
    relation_types: Sequence[str] | None = None,
    kinds: Sequence[str] = EDGE_KINDS,
    near: tuple[Sequence[int], Sequence[int]] | None = None,
) -> WalkEdges:
    """The ``kinds`` of edges (:data:`EDGE_KINDS`) of ``space``'s walk graph in the state ``temporal``
    reads, in the caller's snapshot. ``relation_types`` restricts relation edges to those predicates
    (case-insensitive). With ``near = (entity ids, chunk ids)`` only the edges with an end among them (by
    index: what a patch of the graph re-reads). Raises :class:`ValueError` for an unknown kind."""
    unknown = sorted(set(kinds) - set(EDGE_KINDS))
    if unknown:
        raise ValueError(f"unknown walk edge kind(s) {unknown}; expected some of {', '.join(EDGE_KINDS)}")
    params = {"space": space, **scope_params(temporal, relation_types)}
    if near is not None:
        params |= {"near_entities": [int(i) for i in near[0]], "near_chunks": [int(i) for i in near[1]]}

    def at(*ends: str) -> sql.Composable:
        if near is None:
            return sql.SQL("true")
        kinds_of = {"entity": "%(near_entities)s", "chunk": "%(near_chunks)s"}
        return sql.SQL(
            "("
            + " OR ".join(f"{column} = ANY({kinds_of[kind]})" for column, kind in map(str.split, ends))
            + ")"
        )

    e = qualified(realm, "entities")
    empty = np.zeros((0, 2), dtype=np.int64)
    mentions = titles = relations = empty
    weight = np.zeros(0, dtype=np.float64)
    if "mentions" in kinds:
        query = sql.SQL("""
            SELECT m.chunk_id, m.entity_id
              FROM {m} AS m JOIN {d} AS d ON d.id = m.chunk_id AND d.space = m.space
              JOIN {e} AS e ON e.id = m.entity_id AND e.space = m.space
             WHERE {in_space} AND {known} AND {live} AND {near}""").format(
            m=mentions_read(realm, temporal),
            d=chunks_read(realm, temporal),
            e=e,
            near=at("m.chunk_id chunk", "m.entity_id entity"),
            in_space=in_space("m", space),
            known=created_by("d", temporal),
            live=entity_live("e", temporal, realm=realm),
        )
        chunk, entity = _arrays(conn, query, params, 2)
        mentions = np.column_stack([chunk, entity]).astype(np.int64).reshape(-1, 2)
    if "titles" in kinds:
        title = """
            SELECT d.id, k.entity_id
              FROM {d} AS d JOIN {k} AS k ON k.space = d.space AND k.name_key = lower(btrim(d.title))
              JOIN {e} AS e ON e.id = k.entity_id AND e.space = k.space
             WHERE {in_space} AND {known} AND {live} AND d.title <> '' AND """
        query = sql.SQL(title + ("true" if near is None else "d.id = ANY(%(near_chunks)s)")).format(
            d=chunks_read(realm, temporal),
            k=qualified(realm, "entity_keys"),
            e=e,
            in_space=in_space("d", space),
            known=created_by("d", temporal),
            live=entity_live("e", temporal, realm=realm),
        )
        titles = _pairs(conn.execute(query, params).fetchall())
        if near is not None and len(near[0]):
            titles = np.unique(
                np.concatenate([titles, _titled(conn, realm, space, temporal, params)]), axis=0
            )
    if "relations" in kinds:
        typed = relation_types is not None
        if temporal.believed_at is None:
            # present time: both ends share the relation's space (foreign keys), so liveness is the one
            # join left — done here against the space's few dormant entities, not by joining every
            # relation to every entity twice (at 1M relations 0.6 s instead of 2.9)
            query = sql.SQL("""
                SELECT r.source_id, r.target_id, greatest(r.weight, 1)::float8, r.id FROM {r} AS r
                 WHERE {in_space} AND {edge_ok} AND {near}""").format(
                r=qualified(realm, "relations"),
                near=at("r.source_id entity", "r.target_id entity"),
                in_space=in_space("r", space),
                edge_ok=relation_filter("r", temporal, typed=typed, realm=realm),
            )
            source, target, weight, ids = _arrays(conn, query, params, 4)
            dormant = sql.SQL("SELECT e.id FROM {e} AS e WHERE {in_space} AND e.dormant_since IS NOT NULL")
            rows = conn.execute(dormant.format(e=e, in_space=in_space("e", space)), params).fetchall()
            gone = np.asarray([int(r[0]) for r in rows], dtype=np.int64)
            keep = ~(np.isin(source, gone) | np.isin(target, gone)) if len(gone) else slice(None)
            relations = np.column_stack([source[keep], target[keep]]).astype(np.int64).reshape(-1, 2)
            return WalkEdges(mentions, relations, weight[keep].astype(np.float64), titles, ids[keep])
        query = sql.SQL("""
            SELECT r.source_id, r.target_id, greatest(r.weight, 1)::float8, r.id
              FROM {r} AS r
              JOIN {e} AS a ON a.id = r.source_id AND a.space = r.space
              JOIN {e} AS b ON b.id = r.target_id AND b.space = r.space
             WHERE {in_space} AND {edge_ok} AND {a_live} AND {b_live} AND {near}""").format(
            r=qualified(realm, "relations"),
            e=e,
            near=at("r.source_id entity", "r.target_id entity"),
            in_space=in_space("r", space),
            edge_ok=relation_filter("r", temporal, typed=typed, realm=realm),
            a_live=entity_live("a", temporal, realm=realm),
            b_live=entity_live("b", temporal, realm=realm),
        )
        source, target, weight, ids = _arrays(conn, query, params, 4)
        relations = np.column_stack([source, target]).astype(np.int64).reshape(-1, 2)
        return WalkEdges(mentions, relations, weight.astype(np.float64), titles, ids.astype(np.int64))
    return WalkEdges(mentions=mentions, relations=relations, relation_weight=weight, titles=titles)


def _arrays(
    conn: psycopg.Connection, query: sql.Composable, params: dict[str, Any], width: int
) -> list[np.ndarray]:
    """The ``width`` columns of ``query``'s rows as arrays (int64, or float64 for a float column), read as
    one row of ``array_agg`` in binary: a million rows in a fraction of the time tuples take."""
    names = [f"c{i}" for i in range(width)]
    wrapped = sql.SQL("SELECT {aggs} FROM ({q}) AS x({cols})").format(
        aggs=sql.SQL(", ").join(sql.SQL("array_agg({})").format(sql.Identifier(c)) for c in names),
        q=query,
        cols=sql.SQL(", ").join(sql.Identifier(c) for c in names),
    )
    with conn.cursor(binary=True) as cur:
        cur.execute(wrapped, params)
        row = cur.fetchone()
    if row is None or row[0] is None:
        return [np.zeros(0, dtype=np.int64) for _ in names]
    return [np.asarray(col) for col in row]


def space_chunks(
    conn: psycopg.Connection,
    realm: str,
    space: str,
    *,
    temporal: Temporal = CURRENT,
    among: Sequence[int] | None = None,
) -> np.ndarray:
    """The ids (int64, ascending) of every chunk of ``space`` in the state ``temporal`` reads: the walk
    graph's chunk vertices, mentioned or not; with ``among``, only those of these ids."""
    query = sql.SQL(
        "SELECT d.id FROM {d} AS d WHERE {in_space} AND {known} AND {among} ORDER BY d.id"
    ).format(
        d=chunks_read(realm, temporal),
        in_space=in_space("d", space),
        known=created_by("d", temporal),
        among=sql.SQL("true" if among is None else "d.id = ANY(%(among)s)"),
    )
    params = {"space": space, **temporal.params(), "among": [] if among is None else [int(i) for i in among]}
    rows = conn.execute(query, params).fetchall()
    return np.asarray([int(r[0]) for r in rows], dtype=np.int64)


def link_keys(
    conn: psycopg.Connection, realm: str, space: str, keys: Sequence[str], *, temporal: Temporal = CURRENT
) -> dict[str, list[int]]:
    """Each of ``keys`` (identity keys, :func:`~pgrag_dag.gate_rules.identity_key`) that is the canonical
    name or an alias of live entities of ``space`` → their ids (ascending); keys naming nothing are absent.
    Two indexed reads: the keys' entities (``entity_keys``: name key, GIN over alias keys; and
    ``lower(name)`` for entities whose keys are not stored yet), then which of them are live, by id — in one
    statement the planner, expecting ~1,400 entities per alias key, joined a scan of every entity (300 ms
    for a question's 60 n-grams at 1M relations, against ~5 ms)."""
    if not keys:
        return {}
    candidates = sql.SQL("""
        SELECT q.key, x.id
          FROM unnest(%(keys)s::text[]) AS q(key)
          CROSS JOIN LATERAL (
                SELECT k.entity_id AS id FROM {k} AS k
                 WHERE {k_in_space} AND (k.name_key = q.key OR k.alias_keys @> ARRAY[q.key])
                UNION
                -- entities whose keys are not stored yet (written since the last quality measurement)
                SELECT n.id FROM {e} AS n WHERE {n_in_space} AND lower(n.name) = q.key) AS x""").format(
        k=qualified(realm, "entity_keys"),
        e=qualified(realm, "entities"),
        k_in_space=in_space("k", space),
        n_in_space=in_space("n", space),
    )
    pairs = conn.execute(candidates, {"keys": list(dict.fromkeys(keys)), "space": space}).fetchall()
    if not pairs:
        return {}
    alive = sql.SQL("SELECT e.id FROM {e} AS e WHERE e.id = ANY(%(ids)s) AND {live}").format(
        e=qualified(realm, "entities"), live=entity_live("e", temporal, realm=realm)
    )
    ids = sorted({int(i) for _, i in pairs})
    live = {int(r[0]) for r in conn.execute(alive, {"ids": ids, **temporal.params()}).fetchall()}
    out: dict[str, set[int]] = {}
    for key, entity_id in pairs:
        if int(entity_id) in live:
            out.setdefault(str(key), set()).add(int(entity_id))
    return {key: sorted(found) for key, found in out.items()}


def chunk_rows(
    conn: psycopg.Connection, realm: str, ids: Sequence[int], *, temporal: Temporal = CURRENT
) -> dict[int, Row]:
    """Chunk id → ``id, space, doc_key, title, chunk_index, text, t_created`` for ``ids`` the state read
    holds (at a belief instant, removed chunks from the archive)."""
    if not ids:
        return {}
    query = sql.SQL("""
        SELECT d.id, d.space, d.doc_key, d.title, d.chunk_index, d.text, d.t_created
          FROM {d} AS d WHERE d.id = ANY(%(ids)s) AND {known}""").format(
        d=chunks_read(realm, temporal), known=created_by("d", temporal)
    )
    return {int(r["id"]): r for r in fetch(conn, query, {"ids": list(ids), **temporal.params()})}


def chunk_vectors(
    conn: psycopg.Connection, realm: str, ids: Sequence[int], *, temporal: Temporal = CURRENT
) -> dict[int, np.ndarray]:
    """Chunk id → its stored vector (float32, the realm's width) for the embedded ones of ``ids``."""
    if not ids:
        return {}
    query = sql.SQL(
        "SELECT d.id, d.embedding FROM {d} AS d WHERE d.id = ANY(%(ids)s) AND d.embedding IS NOT NULL"
    ).format(d=chunks_read(realm, temporal))
    # binary: pgvector's binary loader reads 384 floats ~8x faster than parsing their text (measured 0.5 ms
    # against 4.3 ms for 24 chunks)
    with conn.cursor(binary=True) as cur:
        cur.execute(query, {"ids": list(ids), **temporal.params()})
        return {int(i): np.asarray(v.to_numpy(), dtype=np.float32) for i, v in cur.fetchall()}


def entity_rows(
    conn: psycopg.Connection, realm: str, ids: Sequence[int], *, temporal: Temporal = CURRENT
) -> dict[int, Row]:
    """Entity id → ``id, space, name, entity_type, description`` for the ids of ``ids`` live in the state
    read."""
    if not ids:
        return {}
    query = sql.SQL("""
        SELECT e.id, e.space, e.name, e.entity_type, e.description
          FROM {e} AS e WHERE e.id = ANY(%(ids)s) AND {live}""").format(
        e=qualified(realm, "entities"), live=entity_live("e", temporal, realm=realm)
    )
    return {int(r["id"]): r for r in fetch(conn, query, {"ids": list(ids), **temporal.params()})}


def relation_rows(
    conn: psycopg.Connection,
    realm: str,
    ids: Sequence[int],
    *,
    temporal: Temporal = CURRENT,
    relation_types: Sequence[str] | None = None,
) -> dict[int, Row]:
    """Relation id → its row for the ``ids`` readable under ``temporal`` / ``relation_types`` (the
    predicate every relation read applies, checked again on the rows themselves) with both ends live: the
    columns of :func:`~pgrag_dag.store.retrieval.traverse` but ``hop`` and ``seeds`` — ``id, space,
    source_id, target_id, subject, object, predicate, description, negated, valid_from, valid_to, weight,
    confidence, t_created, t_expired, superseded_by, superseded``."""
    if not ids:
        return {}
    query = sql.SQL("""
        SELECT r.id, r.space, r.source_id, r.target_id, a.name AS subject, b.name AS object, r.predicate,
               r.description, r.negated, r.valid_from, r.valid_to, r.weight, r.confidence, r.t_created,
               {belief}
          FROM {r} AS r
          JOIN {e} AS a ON a.id = r.source_id AND a.space = r.space
          JOIN {e} AS b ON b.id = r.target_id AND b.space = r.space
         WHERE r.id = ANY(%(ids)s) AND {edge_ok} AND {a_live} AND {b_live}""").format(
        r=qualified(realm, "relations"),
        e=qualified(realm, "entities"),
        belief=belief_columns("r", temporal, realm=realm),
        edge_ok=relation_filter("r", temporal, typed=relation_types is not None, realm=realm),
        a_live=entity_live("a", temporal, realm=realm),
        b_live=entity_live("b", temporal, realm=realm),
    )
    params = {"ids": list(ids), **scope_params(temporal, relation_types)}
    return {int(r["id"]): r for r in fetch(conn, query, params)}
