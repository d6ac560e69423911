"""Merging and re-ranking retrieved evidence (paper §7.2–7.4): pure functions over lists of dicts.

Relation channels (:data:`CHANNELS`, in precedence order) each give a ranked list of relation rows
(``subject``, ``predicate``, ``object``, ``negated``, ``hop``, ...); the chunk channels
(:data:`CHUNK_CHANNELS`, after them in precedence) ranked chunk rows. They are merged by

- :func:`rrf` — reciprocal rank fusion, the default: ``score = Σ_c 1 / (k + r_c)`` over the
  channels ``c`` that returned the triple at 1-based rank ``r_c`` (``k = 60``);
- :func:`quota` — the fixed-share interleave: traversal against similarity so that every prefix
  gives the similarity channel ``floor(share · n)`` of its ``n`` slots, then the other channels.

Both de-duplicate on ``key`` — by default :func:`triple_key`: (subject, predicate, object)
case-insensitively, a denial keeping its ``NOT`` so it never merges with the assertion; chunks by
their ``id`` — and give every merged row ``ranks`` (``{channel: rank}``), ``channel`` (the channel
that ranked it best; ties go to the earlier channel in precedence, so a walked row keeps its true
``hop`` and a chunk both channels ranked alike is the vector channel's) and ``score`` (the RRF
score, or ``None`` under the quota). Input rows are never mutated.

Then, off by default: :func:`mmr` (maximal marginal relevance, λ = 0.7) and
:func:`node_distance_rerank` (graph distance from the matched entities, §7.4);
:func:`rank_communities` blends similarity, rating and size (§7.1); :func:`interleave` merges the
results of decomposed sub-questions.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

import numpy as np

from pgrag_dag.query_param import MMR_LAMBDA, RRF_K

Row = dict[str, Any]
CHANNELS: tuple[str, ...] = ("traversal", "similarity", "lexical", "ranked")
"""Relation channels: k-hop traversal, relation-embedding similarity, full-text, global ranking."""
CHUNK_CHANNELS: tuple[str, ...] = ("vector", "fulltext")
"""Chunk channels, in precedence order: chunk-embedding similarity, full-text over title and text.
:func:`rrf` fuses them like relation channels, keyed by chunk id."""


def triple_key(rel: Mapping[str, Any]) -> tuple[str, str, str]:
    """``(subject, predicate, object)`` case-folded; a denial's predicate reads ``not <p>``."""
    pred = f"NOT {rel['predicate']}" if rel.get("negated") else str(rel["predicate"])
    return (str(rel["subject"]).casefold(), pred.casefold(), str(rel["object"]).casefold())


def dedupe(items: Sequence[Row], key: Callable[[Row], Hashable] = triple_key) -> list[Row]:
    """``items`` without later duplicates under ``key`` (the first occurrence is kept)."""
    seen: set[Hashable] = set()
    out = []
    for item in items:
        k = key(item)
        if k not in seen:
            seen.add(k)
            out.append(item)
    return out


_PRECEDENCE = CHANNELS + CHUNK_CHANNELS


def _order(channels: Mapping[str, Sequence[Row]]) -> list[str]:
    return [c for c in _PRECEDENCE if c in channels] + sorted(c for c in channels if c not in _PRECEDENCE)


def _pool(channels: Mapping[str, Sequence[Row]], key: Callable[[Row], Hashable]) -> dict[Hashable, Row]:
    """Every distinct triple once: the row of the earliest channel, with ``ranks`` over all channels
    (a triple's rank in a channel is that of its first occurrence there) and ``channel``, the one
    ranking it best (ties: the earlier channel)."""
    pool: dict[Hashable, Row] = {}
    order = _order(channels)
    for name in order:
        rank = 0
        for row in channels[name]:
            k = key(row)
            entry = pool.get(k)
            if entry is not None and name in entry["ranks"]:
                continue  # a later duplicate within the channel
            rank += 1
            if entry is None:
                entry = pool[k] = {**row, "ranks": {}}
            entry["ranks"][name] = rank
    position = {name: i for i, name in enumerate(order)}
    for row in pool.values():
        ranks = row["ranks"]
        row["channel"] = min(ranks, key=lambda c: (ranks[c], position[c]))
    return pool


def rrf(
    channels: Mapping[str, Sequence[Row]], *, k: int = RRF_K, key: Callable[[Row], Hashable] = triple_key
) -> list[Row]:
    """Reciprocal rank fusion of the channel lists (§7.3), best first.

    Ties (equal score) go to the better best rank, then the earlier channel, then first seen.
    Raises :class:`ValueError` for ``k < 0``.
    """
    if k < 0:
        raise ValueError(f"the RRF constant k must be >= 0, got {k}")
    pool = _pool(channels, key)
    for row in pool.values():
        row["score"] = sum(1.0 / (k + r) for r in row["ranks"].values())
    position = {name: i for i, name in enumerate(_order(channels))}
    ranked = sorted(
        enumerate(pool.values()),
        key=lambda ir: (-ir[1]["score"], min(ir[1]["ranks"].values()), position[ir[1]["channel"]], ir[0]),
    )
    return [row for _, row in ranked]


def quota(
    channels: Mapping[str, Sequence[Row]], *, share: float = 0.5, key: Callable[[Row], Hashable] = triple_key
) -> list[Row]:
    """Fixed-share interleave (§7.3): similarity takes slot ``n`` (1-based) whenever it holds fewer
    than ``floor(share · n)`` of the first ``n``; traversal takes the others; the one left
    continues alone when the other runs out; lexical and ranked results follow, in that order.

    ``share = 0``: traversal first; ``1``: similarity first. Raises :class:`ValueError` outside [0, 1].
    """
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"quota share must lie in [0, 1], got {share}")
    pool = _pool(channels, key)
    trav = [key(r) for r in channels.get("traversal", [])]
    sim = [key(r) for r in channels.get("similarity", [])]
    out: list[Hashable] = []
    placed: set[Hashable] = set()
    took_sim = 0
    while trav or sim:
        trav = [t for t in trav if t not in placed]
        sim = [s for s in sim if s not in placed]
        if not (trav or sim):
            break
        use_sim = bool(sim) and (not trav or took_sim < math.floor(share * (len(out) + 1) + 1e-9))
        pick = (sim if use_sim else trav).pop(0)
        took_sim += use_sim
        out.append(pick)
        placed.add(pick)
    for name in _order(channels):
        for row in channels[name]:
            if key(row) not in placed:
                out.append(key(row))
                placed.add(key(row))
    return [{**pool[k], "score": None} for k in out]


def mmr(
    items: Sequence[Row],
    vectors: Mapping[int, np.ndarray],
    *,
    lam: float = MMR_LAMBDA,
    relevance: Sequence[float] | None = None,
) -> list[Row]:
    """Maximal marginal relevance (§7.4): repeatedly pick ``argmax λ·rel(i) − (1−λ)·max_j sim(i, j)``
    over the already selected ``j``.

    ``relevance`` defaults to the fused position, ``(n − i) / n`` — the fused ranking already
    weighs incommensurable channels, so MMR only trades it for coverage. ``sim`` is the cosine of
    the relations' embeddings (``vectors`` keyed by row ``id``); a row without one is never
    penalised. Returns every item, reordered. Raises :class:`ValueError` outside ``0 <= λ <= 1``.
    """
    if not 0.0 <= lam <= 1.0:
        raise ValueError(f"MMR lambda must lie in [0, 1], got {lam}")
    n = len(items)
    rel = list(relevance) if relevance is not None else [(n - i) / n for i in range(n)]
    unit: list[np.ndarray | None] = []
    for item in items:
        v = vectors.get(item.get("id"))  # type: ignore[arg-type]
        norm = float(np.linalg.norm(v)) if v is not None else 0.0
        unit.append(np.asarray(v, dtype=np.float64) / norm if v is not None and norm > 0 else None)
    chosen: list[int] = []
    redundancy = [0.0] * n
    left = list(range(n))
    while left:
        best = max(left, key=lambda i: (lam * rel[i] - (1 - lam) * redundancy[i], -i))
        chosen.append(best)
        left.remove(best)
        if unit[best] is not None:
            for i in left:
                if unit[i] is not None:
                    redundancy[i] = max(redundancy[i], float(unit[i] @ unit[best]))  # type: ignore[operator]
    return [items[i] for i in chosen]


def collapse_duplicates(
    items: Sequence[Row], vectors: Mapping[int, np.ndarray], *, threshold: float, keep: int | None = None
) -> list[Row]:
    """``items`` (ranked chunk rows with ``id``, ``doc_key``, ``chunk_index``) with every near-duplicate of
    an earlier kept row removed (issue 26 item 3): a row whose stored vector (``vectors`` keyed by ``id``)
    has cosine similarity ≥ ``threshold`` with a kept one's, or whose text is the same, is dropped and named
    in that row's ``duplicates`` (``[{id, doc_key, chunk_index}]``, in rank order). A row without a vector is
    compared by text only. Returns copies, at most ``keep`` of them. Raises :class:`ValueError` outside
    ``0 <= threshold <= 1``."""
    if not 0.0 <= threshold <= 1.0:
        raise ValueError(f"duplicate similarity threshold must lie in [0, 1], got {threshold}")
    kept: list[Row] = []
    units: list[np.ndarray | None] = []
    texts: dict[str, int] = {}
    for item in items:
        v = vectors.get(item.get("id"))  # type: ignore[arg-type]
        norm = float(np.linalg.norm(v)) if v is not None else 0.0
        unit = np.asarray(v, dtype=np.float64) / norm if v is not None and norm > 0 else None
        twin = texts.get(str(item.get("text", "")).strip()) if item.get("text") else None
        if twin is None and unit is not None:
            for i, other in enumerate(units):
                if other is not None and float(unit @ other) >= threshold:
                    twin = i
                    break
        if twin is not None:
            kept[twin]["duplicates"].append(
                {"id": item.get("id"), "doc_key": item.get("doc_key"), "chunk_index": item.get("chunk_index")}
            )
            continue
        if keep is not None and len(kept) >= keep:
            continue  # still compared above, so a later copy of a kept row is counted as its duplicate
        if item.get("text"):
            texts[str(item["text"]).strip()] = len(kept)
        kept.append({**item, "duplicates": []})
        units.append(unit)
    return kept


def node_distance_rerank(items: Sequence[Row], distances: Mapping[int, int]) -> list[Row]:
    """Rank relations by graph distance from the matched entities (§7.4), stably.

    A relation the traversal walked keeps its ``hop``; any other gets ``1 + min(distance of its
    endpoints)`` from ``distances`` (entity id → edges from the nearest matched entity), or
    ``None`` — farther than the search bound, or unconnected — and sorts last. Returned rows are
    copies; the resolved ones carry ``hop_resolved = True``.
    """
    out: list[Row] = []
    for item in items:
        row = dict(item)
        if "traversal" not in row.get("ranks", {"traversal": 0}):
            ends = [
                distances[e]
                for e in (row.get("subject_id"), row.get("object_id"))
                if isinstance(e, int) and e in distances
            ]
            row["hop"] = 1 + min(ends) if ends else None
            row["hop_resolved"] = True
        out.append(row)
    return sorted(out, key=lambda r: math.inf if r["hop"] is None else r["hop"])


def rank_communities(
    rows: Sequence[Row], *, k: int, w_similarity: float = 0.6, w_rating: float = 0.2, w_size: float = 0.2
) -> list[Row]:
    """The ``k`` best community reports by ``w_similarity·score + w_rating·rating/10 +
    w_size·log(1+size)/log(1+max size)`` (§7.1), ``max size`` over ``rows`` (the over-fetched
    candidates); ties keep the similarity order. With ``w_rating = w_size = 0`` this is the
    similarity order. Rows gain ``rank_score``. Raises :class:`ValueError` for a negative weight.
    """
    if min(w_similarity, w_rating, w_size) < 0:
        raise ValueError("community ranking weights must be non-negative")
    biggest = max((int(r.get("size") or 0) for r in rows), default=0)
    scored = []
    for i, row in enumerate(rows):
        size = math.log1p(max(int(row.get("size") or 0), 0)) / math.log1p(biggest) if biggest > 0 else 0.0
        rating = min(max(float(row.get("rating") or 0.0), 0.0), 10.0) / 10.0
        value = w_similarity * float(row.get("score") or 0.0) + w_rating * rating + w_size * size
        scored.append((-value, i, {**row, "rank_score": value}))
    return [row for _, _, row in sorted(scored, key=lambda t: (t[0], t[1]))][:k]


def interleave(lists: Sequence[Sequence[Row]], key: Callable[[Row], Hashable]) -> list[Row]:
    """Round-robin merge of ranked lists (one per sub-question), first occurrence kept."""
    out: list[Row] = []
    seen: set[Hashable] = set()
    for i in range(max((len(x) for x in lists), default=0)):
        for lst in lists:
            if i < len(lst):
                k = key(lst[i])
                if k not in seen:
                    seen.add(k)
                    out.append(lst[i])
    return out


__all__ = [
    "CHANNELS",
    "CHUNK_CHANNELS",
    "MMR_LAMBDA",
    "RRF_K",
    "collapse_duplicates",
    "dedupe",
    "interleave",
    "mmr",
    "node_distance_rerank",
    "quota",
    "rank_communities",
    "rrf",
    "triple_key",
]
