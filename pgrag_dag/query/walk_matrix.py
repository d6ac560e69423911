"""The walk graph in memory and the personalised-PageRank solvers over it (issue 26; issue 30 item 6 for the
local push and the patch by changed vertices). :mod:`pgrag_dag.query.ppr` reads, caches and seeds it.

One space's graph is a symmetric sparse matrix of edge weights ``W`` (float32 CSR) and the weighted degree
of every vertex. A vertex is an entity or a chunk at a *position* ``0 … n−1``; positions are given once and
never move, so a patch (:meth:`WalkGraph.patched`) appends the vertices it adds and leaves a removed one
as a position without edges that no walk can reach.

Two solvers give the same stationary mass (:meth:`WalkGraph.walk`):

- **exact** — the linear system solved by BiCGSTAB over the whole matrix, for graphs of at most
  :data:`EXACT_MAX_EDGES` edges (every benchmark of the paper's §8 is below it);
- **local push** (Andersen, Chung and Lang 2006, forward push) — residual mass moved from the restart
  vertices along their edges until no vertex holds more than ``ε × its degree``: its work depends on the
  mass near the seeds, not on the size of the graph (:data:`PUSH_EPSILON` says what it gives at 1M).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import sparse
from scipy.sparse import linalg as splinalg

from pgrag_dag.store.walk_graph import WalkEdges

EXACT_MAX_EDGES = 250_000
"""Graphs with at most this many undirected edges are walked by the exact solver (a few milliseconds);
larger ones by local push."""

PUSH_EPSILON = 1e-6
"""Local push stops when no vertex holds residual mass above ``PUSH_EPSILON × max(degree, 1)``. Measured at
1M relations (1.4M edges, damping 0.7, prior weight 0.05, 20 random restarts of 3 entities and 30 prior
chunks): the top 24 chunks the same set as the exact solver's 20 of 20 times (same order 16 of 20), the top
60 entities sharing at least 53; 12.7 ms a walk (22.8 at most) against the exact solver's 76.5. At 1e-7:
same order 20 of 20, 68 ms."""


@dataclass
class Walk:
    """One walk's result: the stationary mass of every entity vertex (``entity_mass``, aligned with
    ``graph.entity_ids``) and chunk vertex (``chunk_mass``, with ``graph.chunk_ids``), summing to 1 with
    it; ``seeds`` the restart entities (id → weight before normalisation)."""

    entity_mass: np.ndarray
    chunk_mass: np.ndarray
    graph: WalkGraph
    seeds: dict[int, float]
    mass: np.ndarray | None = None  # by vertex position

    @staticmethod
    def _top(mass: np.ndarray, ids: np.ndarray, k: int) -> list[tuple[int, float]]:
        k = min(k, int(np.count_nonzero(mass > 0)))
        if k <= 0:
            return []
        part = np.argpartition(-mass, k - 1)[:k] if k < len(mass) else np.arange(len(mass))
        best = sorted(part.tolist(), key=lambda i: (-mass[i], ids[i]))
        return [(int(ids[i]), float(mass[i])) for i in best]

    def top_chunks(self, k: int) -> list[tuple[int, float]]:
        """The ``k`` chunks of most mass (above zero), ties by id."""
        return self._top(self.chunk_mass, self.graph.chunk_ids, k)

    def top_entities(self, k: int) -> list[tuple[int, float]]:
        """The ``k`` entities of most mass (above zero), ties by id."""
        return self._top(self.entity_mass, self.graph.entity_ids, k)

    def relations_among(self, entity_ids: Sequence[int], limit: int) -> list[tuple[int, float]]:
        """The ``limit`` relations of the graph with both ends among ``entity_ids``, by the mass of their
        two ends (most first, ties by id): ``(relation id, mass)``."""
        g = self.graph
        at = g.entity_positions(np.asarray(list(entity_ids), dtype=np.int64))
        pool = np.zeros(g.n, dtype=bool)
        pool[at[at >= 0]] = True
        ends = g.relation_ends
        inside = np.flatnonzero(pool[ends[:, 0]] & pool[ends[:, 1]]) if len(ends) else np.zeros(0, dtype=int)
        mass = self.mass if self.mass is not None else np.zeros(g.n)
        score = mass[ends[inside, 0]] + mass[ends[inside, 1]]
        ranked = sorted(zip(g.relation_ids[inside].tolist(), score.tolist()), key=lambda t: (-t[1], t[0]))
        return [(int(r), float(m)) for r, m in ranked[:limit] if r >= 0]

    def entity_score(self, entity_id: int) -> float:
        """The mass of one entity (0 when not a vertex)."""
        at = int(self.graph.index(np.asarray([entity_id], dtype=np.int64), self.graph.entity_ids)[0])
        return 0.0 if at < 0 else float(self.entity_mass[at])


def _symmetric(a: np.ndarray, b: np.ndarray, w: np.ndarray, n: int) -> sparse.csr_matrix:
    """The ``n × n`` symmetric CSR matrix holding weight ``w`` at ``[a, b]`` and ``[b, a]`` (parallel
    edges add up; a loop ``a == b`` counts twice, as it adds to its vertex's degree from both ends)."""
    both = np.concatenate([w, w]).astype(np.float32)
    matrix = sparse.csr_matrix(
        (both, (np.concatenate([a, b]), np.concatenate([b, a]))), shape=(n, n), dtype=np.float32
    )
    matrix.sum_duplicates()
    return matrix


def _merged(
    ids: np.ndarray, at: np.ndarray, new_ids: np.ndarray, new_at: np.ndarray, gone: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The sorted ``ids`` and their positions ``at`` without ``gone`` (a few), with ``new_ids`` (sorted,
    none in ``ids``) at ``new_at``; and for each id kept or added where it stood in ``ids`` (−1 for a new
    one). In O(len(ids)), no sort unless a new id is below the largest kept one."""
    keep = np.ones(len(ids), dtype=bool)
    if len(gone) and len(ids):
        where = WalkGraph.index(gone, ids)
        keep[where[where >= 0]] = False
    source = np.flatnonzero(keep)
    ids, at = ids[keep], at[keep]
    if not len(new_ids):
        return ids, at, source
    both = np.concatenate([ids, new_ids])
    where = np.concatenate([at, new_at])
    source = np.concatenate([source, np.full(len(new_ids), -1)])
    if len(ids) and new_ids[0] < ids[-1]:  # ids only grow, usually: then the order holds already
        order = np.argsort(both, kind="stable")
        both, where, source = both[order], where[order], source[order]
    return both, where, source


class WalkGraph:
    """One space's walk graph in memory (see the module docstring).

    ``entity_ids`` and ``chunk_ids`` (sorted int64) are the vertices; ``entity_at`` / ``chunk_at`` (int64,
    aligned with them) their positions. ``weights`` is the ``n × n`` symmetric CSR matrix (float32) of edge
    weights, parallel edges added up; ``degree`` (float64, ``(n,)``) its row sums — a vertex of degree 0
    (``sink``) restarts the walker. ``chunks_of[i]`` counts the distinct chunks mentioning entity
    ``entity_ids[i]`` (the node specificity's denominator). ``relation_ids`` (int64, ``(r,)``) and
    ``relation_ends`` (their endpoints' positions, ``(r, 2)``) let a walk pick the relations among its best
    entities without a read. Build with :meth:`from_edges`; update with :meth:`patched`.
    """

    def __init__(
        self,
        entity_ids: np.ndarray,
        chunk_ids: np.ndarray,
        weights: sparse.csr_matrix,
        chunks_of: np.ndarray,
        relation_ids: np.ndarray | None = None,
        relation_ends: np.ndarray | None = None,
        *,
        entity_at: np.ndarray | None = None,
        chunk_at: np.ndarray | None = None,
    ) -> None:
        m = len(entity_ids)
        self.entity_ids, self.chunk_ids = entity_ids, chunk_ids
        self.weights, self.chunks_of = weights, chunks_of
        self.entity_at = np.arange(m, dtype=np.int64) if entity_at is None else entity_at
        self.chunk_at = m + np.arange(len(chunk_ids), dtype=np.int64) if chunk_at is None else chunk_at
        self.n = int(weights.shape[0])
        self.degree = np.asarray(weights.sum(axis=1), dtype=np.float64).ravel()
        self.sink = np.flatnonzero(self.degree == 0)
        self.relation_ids = np.zeros(0, dtype=np.int64) if relation_ids is None else relation_ids
        self.relation_ends = np.zeros((0, 2), dtype=np.int64) if relation_ends is None else relation_ends
        self.is_entity = np.zeros(self.n, dtype=bool)
        self.is_entity[self.entity_at] = True
        self.vertex_ids = np.zeros(self.n, dtype=np.int64)
        self.vertex_ids[self.entity_at] = self.entity_ids
        self.vertex_ids[self.chunk_at] = self.chunk_ids
        self.writes: frozenset[int] | None = None
        """The graph writes (transaction ids) of the state it holds, when its reader records them
        (:func:`pgrag_dag.query.ppr.space_graph`): what a later state's patch starts from."""

    @classmethod
    def from_edges(cls, edges: WalkEdges, chunk_ids: np.ndarray) -> WalkGraph:
        """The graph of ``edges`` over the chunks ``chunk_ids`` (int64, any order) and every entity an
        edge names; parallel edges (a pair related by several predicates) add up. Entities take positions
        ``0 … m−1`` in id order, chunks ``m …`` after them."""
        ents = np.unique(
            np.concatenate([edges.mentions[:, 1], edges.titles[:, 1], edges.relations.ravel()])
        ).astype(np.int64)
        chunks = np.unique(
            np.concatenate([chunk_ids.astype(np.int64), edges.mentions[:, 0], edges.titles[:, 0]])
        ).astype(np.int64)
        m, n = len(ents), len(ents) + len(chunks)
        mention = np.unique(edges.mentions, axis=0) if len(edges.mentions) else edges.mentions
        parts = [
            (m + np.searchsorted(chunks, mention[:, 0]), np.searchsorted(ents, mention[:, 1])),
            (m + np.searchsorted(chunks, edges.titles[:, 0]), np.searchsorted(ents, edges.titles[:, 1])),
            (np.searchsorted(ents, edges.relations[:, 0]), np.searchsorted(ents, edges.relations[:, 1])),
        ]
        a = np.concatenate([x for x, _ in parts]).astype(np.int64)
        b = np.concatenate([y for _, y in parts]).astype(np.int64)
        w = np.concatenate([np.ones(len(mention) + len(edges.titles)), edges.relation_weight])
        chunks_of = np.bincount(np.searchsorted(ents, mention[:, 1]), minlength=m).astype(np.float64)
        ends = np.column_stack(parts[2]).astype(np.int64).reshape(-1, 2)
        rel_ids = edges.relation_ids if len(edges.relation_ids) == len(ends) else np.full(len(ends), -1)
        return cls(ents, chunks, _symmetric(a, b, w, n), chunks_of, rel_ids.astype(np.int64), ends)

    def patched(
        self, entity_ids: np.ndarray, chunk_ids: np.ndarray, edges: WalkEdges, live_chunks: np.ndarray
    ) -> WalkGraph:
        """The graph after writes that touched the entities ``entity_ids`` and the chunks ``chunk_ids``
        (int64): ``edges`` holds every edge of the new state with an end among them (of the kinds this graph
        walks), ``live_chunks`` which of ``chunk_ids`` are chunks of the space in it. Equal, as a walk sees
        it, to :meth:`from_edges` over the new state whenever every edge that changed has a touched end
        (what :mod:`pgrag_dag.store.graph_version` records).

        A new graph (this one is left as it is, for the walks still reading it): the entries of ``W`` at
        touched vertices replaced — ``W − R + A``, ``R`` their old entries (rows and, by symmetry, columns),
        ``A`` the new ones — in one pass over ``W`` instead of a read of the whole graph. New vertices take
        new positions; a vertex left without edges (an entity no longer live, a chunk removed) leaves the id
        lists and keeps its position, unreachable (:attr:`unused` counts them)."""
        ent_ends = np.unique(
            np.concatenate([edges.mentions[:, 1], edges.titles[:, 1], edges.relations.ravel()])
        )
        chunk_ends = np.unique(np.concatenate([edges.mentions[:, 0], edges.titles[:, 0], live_chunks]))
        new_ents = ent_ends[self.index(ent_ends, self.entity_ids) < 0].astype(np.int64)
        new_chunks = chunk_ends[self.index(chunk_ends, self.chunk_ids) < 0].astype(np.int64)
        n = self.n + len(new_ents) + len(new_chunks)
        new_ent_at = self.n + np.arange(len(new_ents), dtype=np.int64)
        new_chunk_at = self.n + len(new_ents) + np.arange(len(new_chunks), dtype=np.int64)
        gone_ents = np.setdiff1d(entity_ids, ent_ends)
        gone_chunks = np.setdiff1d(chunk_ids, chunk_ends)
        ents, ent_at, ent_source = _merged(self.entity_ids, self.entity_at, new_ents, new_ent_at, gone_ents)
        chunks, chunk_at, _ = _merged(self.chunk_ids, self.chunk_at, new_chunks, new_chunk_at, gone_chunks)
        touched = np.zeros(n, dtype=bool)
        old = np.concatenate([self.entity_positions(entity_ids), self.chunk_positions(chunk_ids)])
        old = np.unique(old[old >= 0])
        touched[old] = True
        touched[self.n :] = True
        # R: the old entries at touched vertices — their rows, and the same entries mirrored into the rows of
        # untouched neighbours (an entry between two touched vertices is already in both rows)
        rows = self.weights[old].tocoo()
        r_row, r_col, r_val = old[rows.row], rows.col.astype(np.int64), rows.data
        mirror = ~touched[r_col]
        removed = _symmetric(r_row[mirror], r_col[mirror], r_val[mirror], n) + sparse.csr_matrix(
            (r_val[~mirror], (r_row[~mirror], r_col[~mirror])), shape=(n, n), dtype=np.float32
        )
        mention = np.unique(edges.mentions, axis=0) if len(edges.mentions) else edges.mentions
        e_at = lambda ids: ent_at[np.searchsorted(ents, ids)]  # noqa: E731 - every id is in ents
        c_at = lambda ids: chunk_at[np.searchsorted(chunks, ids)]  # noqa: E731
        a = np.concatenate([c_at(mention[:, 0]), c_at(edges.titles[:, 0]), e_at(edges.relations[:, 0])])
        b = np.concatenate([e_at(mention[:, 1]), e_at(edges.titles[:, 1]), e_at(edges.relations[:, 1])])
        w = np.concatenate([np.ones(len(mention) + len(edges.titles)), edges.relation_weight])
        base = sparse.csr_matrix(
            (
                self.weights.data,
                self.weights.indices,
                np.concatenate([self.weights.indptr, np.full(n - self.n, self.weights.indptr[-1])]),
            ),
            shape=(n, n),
        )
        weights = (base - removed + _symmetric(a.astype(np.int64), b.astype(np.int64), w, n)).tocsr()
        weights.eliminate_zeros()
        # chunks_of: recounted for the touched entities (a mention added or removed touches its entity)
        chunks_of = np.where(ent_source >= 0, self.chunks_of[np.maximum(ent_source, 0)], 0.0)
        recount = np.flatnonzero(touched[ent_at])
        chunks_of[recount] = 0.0
        if len(mention):  # every mention of a touched entity is in ``edges`` (an edge at a touched end)
            mentioned = mention[touched[e_at(mention[:, 1])], 1]
            np.add.at(chunks_of, np.searchsorted(ents, mentioned), 1.0)
        keep = ~(touched[self.relation_ends[:, 0]] | touched[self.relation_ends[:, 1]])
        rel_ids = edges.relation_ids if len(edges.relation_ids) == len(edges.relations) else None
        rel_ids = np.full(len(edges.relations), -1) if rel_ids is None else rel_ids
        relation_ends = np.concatenate(
            [self.relation_ends[keep], np.column_stack([a, b])[len(mention) + len(edges.titles) :]]
        ).astype(np.int64)
        relation_ids = np.concatenate([self.relation_ids[keep], rel_ids]).astype(np.int64)
        return WalkGraph(
            ents, chunks, weights, chunks_of, relation_ids, relation_ends, entity_at=ent_at, chunk_at=chunk_at
        )

    @property
    def unused(self) -> int:
        """Positions no vertex holds any more (left by :meth:`patched`)."""
        return self.n - len(self.entity_ids) - len(self.chunk_ids)

    @property
    def edge_count(self) -> int:
        """Undirected edges (parallel ones merged)."""
        return int(self.weights.nnz) // 2

    @property
    def nbytes(self) -> int:
        """The memory its arrays hold, in bytes (≈ 16 per undirected edge and 50 per vertex)."""
        arrays = (
            self.entity_ids,
            self.chunk_ids,
            self.entity_at,
            self.chunk_at,
            self.chunks_of,
            self.degree,
            self.sink,
            self.is_entity,
            self.vertex_ids,
            self.relation_ids,
            self.relation_ends,
        )
        w = self.weights
        return sum(x.nbytes for x in arrays) + w.data.nbytes + w.indices.nbytes + w.indptr.nbytes

    @staticmethod
    def index(ids: np.ndarray, ids_of: np.ndarray) -> np.ndarray:
        """Where each of ``ids`` stands in the sorted ``ids_of`` (−1 when absent)."""
        if not len(ids_of):
            return np.full(len(ids), -1, dtype=np.int64)
        pos = np.minimum(np.searchsorted(ids_of, ids), len(ids_of) - 1)
        return np.where(ids_of[pos] == ids, pos, -1)

    def entity_positions(self, ids: np.ndarray) -> np.ndarray:
        """The vertex positions of the entities ``ids`` (−1 for one not in the graph)."""
        at = self.index(ids, self.entity_ids)
        return np.where(at >= 0, self.entity_at[np.maximum(at, 0)] if len(self.entity_at) else -1, -1)

    def chunk_positions(self, ids: np.ndarray) -> np.ndarray:
        """The vertex positions of the chunks ``ids`` (−1 for one not in the graph)."""
        at = self.index(ids, self.chunk_ids)
        return np.where(at >= 0, self.chunk_at[np.maximum(at, 0)] if len(self.chunk_at) else -1, -1)

    def walk(
        self,
        seeds: Mapping[int, float],
        prior: Mapping[int, float],
        *,
        damping: float,
        prior_weight: float,
        tolerance: float = 1e-7,
        max_iterations: int = 100,
        method: str = "auto",
        epsilon: float = PUSH_EPSILON,
    ) -> Walk | None:
        """Personalised PageRank with restart on ``seeds`` (entity id → link score in (0, 1], divided here
        by the chunks mentioning the entity) and ``prior_weight ×`` the min-max-normalised ``prior`` (chunk
        id → dense score; a single score, or all equal, normalise to 1). Ids not in the graph are ignored.
        Returns ``None`` when no seed is in the graph (the caller falls back to dense retrieval).

        ``damping`` in [0, 1): the probability of following an edge (HippoRAG 2: 0.5); the walker restarts
        by the normalised reset vector otherwise, and always from a vertex without edges (as igraph's
        ``personalized_pagerank`` does). The stationary mass solves ``x = (1 − d)·reset + d·M x`` where
        ``M`` moves a vertex's mass to its neighbours by edge weight over its degree, or to ``reset`` from
        a vertex without edges. ``method``: ``"exact"`` solves it in float32 by BiCGSTAB (scipy) to a
        relative residual of ``tolerance`` (power iteration, ``max_iterations`` steps, should it not
        converge); ``"push"`` by local push to ``epsilon``; ``"auto"`` takes exact up to
        :data:`EXACT_MAX_EDGES` edges and push above. The mass is clipped at 0 and normalised to sum 1.
        Raises :class:`ValueError` for another ``method``."""
        if method not in ("auto", "exact", "push"):
            raise ValueError(f"unknown walk method {method!r}; expected auto, exact or push")
        reset = np.zeros(self.n, dtype=np.float64)
        if seeds:
            ids = np.fromiter(seeds.keys(), dtype=np.int64, count=len(seeds))
            at = self.index(ids, self.entity_ids)
            for i, score in zip(at, seeds.values()):
                if i >= 0:
                    v = self.entity_at[i]
                    reset[v] = max(reset[v], score / max(self.chunks_of[i], 1.0))
        seeded = {int(self.vertex_ids[v]): float(reset[v]) for v in np.flatnonzero(reset)}
        if not seeded:
            return None
        if prior and prior_weight > 0:
            ids = np.fromiter(prior.keys(), dtype=np.int64, count=len(prior))
            scores = np.fromiter(prior.values(), dtype=np.float64, count=len(prior))
            lo, hi = float(scores.min()), float(scores.max())
            norm = np.ones_like(scores) if hi <= lo else (scores - lo) / (hi - lo)
            at = self.chunk_positions(ids)
            keep = at >= 0
            np.add.at(reset, at[keep], prior_weight * norm[keep])
        reset /= reset.sum()
        if method == "push" or (method == "auto" and self.edge_count > EXACT_MAX_EDGES):
            mass = self._push(reset, damping, epsilon)
        else:
            mass = self._solve(reset.astype(np.float32), damping, tolerance, max_iterations)
        mass = np.maximum(mass, 0, out=mass)
        mass /= mass.sum()
        return Walk(
            entity_mass=mass[self.entity_at],
            chunk_mass=mass[self.chunk_at],
            graph=self,
            seeds=seeded,
            mass=mass,
        )

    def _stuck(self, mass: np.ndarray) -> float:
        return float(mass[self.sink].sum()) if len(self.sink) else 0.0

    def _solve(self, reset: np.ndarray, damping: float, tolerance: float, max_iterations: int) -> np.ndarray:
        d = np.float32(damping)
        inv = np.divide(1.0, self.degree, out=np.zeros_like(self.degree), where=self.degree > 0)
        inv32 = inv.astype(np.float32)

        def apply(v: np.ndarray) -> np.ndarray:
            v = v.astype(np.float32, copy=False).ravel()
            return v - d * (self.weights @ (v * inv32)) - np.float32(damping * self._stuck(v)) * reset

        op = splinalg.LinearOperator((self.n, self.n), matvec=apply, dtype=np.float32)
        b = np.float32(1.0 - damping) * reset
        x, info = splinalg.bicgstab(op, b, x0=reset.copy(), rtol=tolerance, atol=0.0, maxiter=max_iterations)
        if info == 0 and np.isfinite(x).all() and x.sum() > 0:
            return np.asarray(x, dtype=np.float32)
        mass = reset.copy()  # not converged (or broke down): power iteration, which always does
        for _ in range(max_iterations):
            nxt = (
                damping * (self.weights @ (mass * inv32))
                + np.float32((1.0 - damping) + damping * self._stuck(mass)) * reset
            )
            done = float(np.abs(nxt - mass).sum()) < tolerance
            mass = nxt
            if done:
                break
        return mass

    def _push(self, reset: np.ndarray, damping: float, epsilon: float) -> np.ndarray:
        """Forward push: every round settles ``1 − d`` of the residual of each vertex holding more than
        ``epsilon × max(degree, 1)`` and moves the rest to its neighbours (to ``reset`` from a vertex without
        edges). Each round costs the edges of the vertices it pushes, never the whole graph."""
        w, degree = self.weights, self.degree
        p = np.zeros(self.n, dtype=np.float64)
        r = reset.copy()
        origin = np.flatnonzero(reset)
        candidates = origin
        last = np.zeros(self.n, dtype=np.int64)
        while True:
            # a vertex reached from several pushed ones repeats: keep its last occurrence (no sort)
            order = np.arange(len(candidates))
            last[candidates] = order
            candidates = candidates[last[candidates] == order]
            act = candidates[r[candidates] > epsilon * np.maximum(degree[candidates], 1.0)]
            if not len(act):
                break
            mass = r[act]
            r[act] = 0.0
            p[act] += (1.0 - damping) * mass
            stuck = degree[act] == 0
            reached = []
            if stuck.any():
                r[origin] += damping * float(mass[stuck].sum()) * reset[origin]
                reached.append(origin)
                act, mass = act[~stuck], mass[~stuck]
            if len(act):
                start, stop = w.indptr[act], w.indptr[act + 1]
                count = stop - start
                at = np.repeat(start - np.cumsum(count) + count, count) + np.arange(int(count.sum()))
                near = w.indices[at]
                np.add.at(r, near, np.repeat(damping * mass / degree[act], count) * w.data[at])
                reached.append(near)
            candidates = np.concatenate(reached) if len(reached) > 1 else reached[0]
        return p

    def mentioned(self, chunk_id: int, entity_ids: Sequence[int]) -> list[int]:
        """Which of ``entity_ids`` the chunk is joined to (mention or title edge), ascending."""
        v = int(self.chunk_positions(np.asarray([chunk_id], dtype=np.int64))[0])
        if v < 0:
            return []
        near = self.weights.indices[self.weights.indptr[v] : self.weights.indptr[v + 1]]
        near = near[self.is_entity[near]]
        return sorted({int(i) for i in self.vertex_ids[near]} & set(entity_ids))
