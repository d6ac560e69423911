"""The evidence of the personalised-PageRank graph ranking for one (sub-)question (issue 26 item 1): the
chunks, entities and relations the walk (:mod:`pgrag_dag.query.ppr`) ranks, as the rows the rest of the
query path reads. :mod:`pgrag_dag.query.retrieve` calls :func:`link_seeds` among the entity-anchored reads
and :func:`walk_evidence` when it combines them with the independent ones (the dense prior).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import psycopg

from pgrag_dag.query import fusion as fuse
from pgrag_dag.query import ppr
from pgrag_dag.query_param import QueryParam
from pgrag_dag.store import walk_graph

ENTITY_POOL = 30
"""At least this many of the walk's best entities (and 3 × ``top_k``) bound the relations it ranks."""


def link_seeds(conn: psycopg.Connection, realm: str, p: QueryParam, question: str) -> dict[int, float]:
    """The question's names (:func:`~pgrag_dag.query.ppr.question_keys`) linked to live entities of
    ``p.space`` by identity or alias key: entity id → link score (the best of its keys). The names the
    offline extractor finds first; only when none links, the question's n-grams (a lowercase question)."""
    for tier in ({"names": True, "ngrams": False}, {"names": False, "ngrams": True}):
        keys = ppr.question_keys(question, **tier)
        seeds: dict[int, float] = {}
        for key, ids in walk_graph.link_keys(conn, realm, p.space, list(keys), temporal=p.temporal).items():
            for entity_id in ids:
                seeds[entity_id] = max(seeds.get(entity_id, 0.0), keys[key])
        if seeds:
            return seeds
    return {}


@dataclass
class WalkEvidence:
    """What one walk ranked: ``chunks`` (best first, cut to ``chunk_top_k``), ``entities`` (the ``top_k``
    of most mass), ``traversal`` (the relation list the relation fusion takes as its traversal channel),
    ``seeds`` (the restart entities), ``channels`` (counts)."""

    chunks: list[dict[str, Any]] = field(default_factory=list)
    entities: list[dict[str, Any]] = field(default_factory=list)
    traversal: list[dict[str, Any]] | None = None
    seeds: list[int] = field(default_factory=list)
    channels: dict[str, int] = field(default_factory=dict)


def walk_evidence(
    conn: psycopg.Connection,
    dsn: str,
    realm: str,
    p: QueryParam,
    seeds: dict[int, float],
    prior: list[dict[str, Any]],
    fulltext: list[dict[str, Any]] | None = None,
) -> WalkEvidence | None:
    """Walk ``p.space``'s graph from ``seeds`` (entity id → link score) and the dense ``prior`` (chunk rows
    with ``id`` and cosine ``score``, best first) and rank the evidence by the stationary mass; ``None`` when
    no seed is a vertex of the graph read (the caller falls back to the dense path).

    Chunks: the ``chunk_top_k`` of most mass — ``via = "ppr"``, ``ranks`` (``ppr`` and, when the prior held
    it, ``vector``), ``ppr_score`` (mass), ``score`` (cosine when in the prior, else ``None``), ``mentions``
    (seeds it names, or ``None``); with ``fulltext`` rows (the full-text chunk channel) the two lists are
    fused by RRF. Near-duplicates collapse when ``p.collapse_duplicates``. Entities: ``score`` = mass,
    ``seed``. Relations: those among the walk's best entities (:data:`ENTITY_POOL`), within ``max_hops`` of a
    seed over themselves, by the mass of their two ends, at most ``max_relation_edges`` — a traversal pruned
    by relevance rather than by a fixed budget; none when traversal is not asked for."""
    graph = ppr.space_graph(
        conn,
        dsn,
        realm,
        p.space,
        temporal=p.temporal,
        relation_types=p.relation_types,
        kinds=p.ppr_edges,
    )
    cosine = {int(c["id"]): float(c["score"]) for c in prior}
    walk = graph.walk(seeds, cosine, damping=p.ppr_damping, prior_weight=p.ppr_prior_weight)
    if walk is None:
        return None
    seed_ids = sorted(walk.seeds)
    vector_rank = {int(c["id"]): i for i, c in enumerate(prior, 1)}
    want = p.chunk_top_k * (3 if p.collapse_duplicates else 1)
    top = walk.top_chunks(want)
    rows = walk_graph.chunk_rows(conn, realm, [cid for cid, _ in top], temporal=p.temporal)
    chunks: list[dict[str, Any]] = []
    for cid, mass in top:
        if cid not in rows:
            continue
        named = graph.mentioned(cid, seed_ids)
        ranks = {"ppr": len(chunks) + 1, **({"vector": vector_rank[cid]} if cid in vector_rank else {})}
        chunks.append(
            {
                **rows[cid],
                "via": "ppr",
                "ranks": ranks,
                "rrf_score": None,
                "score": cosine.get(cid),
                "ppr_score": mass,
                "mentions": len(named) or None,
            }
        )
    if fulltext:
        fused = fuse.rrf({"ppr": chunks, "fulltext": fulltext}, k=p.rrf_k, key=lambda r: r["id"])
        chunks = [
            {
                **row,
                "via": "+".join(c for c in ("ppr", "fulltext") if c in row["ranks"]),
                "rrf_score": row["score"],
                "score": cosine.get(int(row["id"])),
                "mentions": row.get("mentions"),
            }
            for row in fused
        ]
    if p.collapse_duplicates:
        vectors = walk_graph.chunk_vectors(conn, realm, [c["id"] for c in chunks], temporal=p.temporal)
        chunks = fuse.collapse_duplicates(
            chunks, vectors, threshold=p.duplicate_similarity, keep=p.chunk_top_k
        )
    out = WalkEvidence(chunks=chunks[: p.chunk_top_k], seeds=seed_ids)
    best = walk.top_entities(max(p.top_k, 3 * p.top_k, ENTITY_POOL))
    ents = walk_graph.entity_rows(conn, realm, [e for e, _ in best[: p.top_k]], temporal=p.temporal)
    out.entities = [
        {**ents[e], "score": mass, "seed": e in walk.seeds} for e, mass in best[: p.top_k] if e in ents
    ]
    if "traversal" in p.relation_channels and p.max_hops > 0 and p.max_relation_edges > 0:
        pool = sorted({e for e, _ in best} | set(seed_ids))
        # over-fetch: some fall beyond max_hops of a seed; the rows are read again under every filter
        picked = walk.relations_among(pool, 4 * p.max_relation_edges)
        rows = walk_graph.relation_rows(
            conn, realm, [r for r, _ in picked], temporal=p.temporal, relation_types=p.relation_types
        )
        rels = [rows[r] for r, _ in picked if r in rows]
        hops = ppr.relation_hops(seed_ids, rels)
        edge_mass = dict(picked)
        ranked = [
            {**r, "hop": hops[r["id"]], "seeds": [], "ppr_score": edge_mass[r["id"]]}
            for r in rels
            if r["id"] in hops and hops[r["id"]] <= p.max_hops
        ]
        ranked.sort(key=lambda r: (-r["ppr_score"], r["hop"], r["id"]))
        out.traversal = ranked[: p.max_relation_edges]
    out.channels = {"ppr_seeds": len(seed_ids), "ppr_chunks": len(out.chunks)}
    return out
