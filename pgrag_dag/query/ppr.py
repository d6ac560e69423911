"""Relevance-ranked graph retrieval: personalised PageRank over the space's graph (issue 26; the paper's
§9 names it as what would "prune by relevance instead" of a fixed traversal budget; HippoRAG 2,
Gutiérrez et al. 2025, without its query-time model).

The walk graph (:class:`WalkGraph`) has one vertex per live entity and per chunk of the space, and the
edges of :data:`~pgrag_dag.store.walk_graph.EDGE_KINDS`: chunk–entity mentions, entity–entity relations
weighted by corroboration, chunk–entity title edges. A query restarts the walk

- on **the question's own names** (:func:`question_keys`: the offline extractor's phrase finder on the
  question; only when none of them names an entity, every 1–6-word n-gram of it that is not all stop
  words — on the tuning questions, n-grams beside the names added wrong seeds and lost 0.08 r@5) linked
  to vertices by identity key or alias key (:func:`~pgrag_dag.store.walk_graph.link_keys`) — never by
  ``name: description`` vectors, the seeding HippoRAG 2 measured worst — each weighted
  ``1 / (chunks mentioning it)`` (node specificity);
- plus ``prior_weight ×`` the min-max-normalised dense score of the top ``prior_k`` chunks (the dense
  index is kept inside the walk, not fused after it);

and ranks chunks, entities and relations by the stationary mass (damping ``d``: the walker follows an
edge with probability ``d`` and restarts with ``1 − d``). A question with no linkable name is answered by
the dense path, as HippoRAG falls back when no fact survives.

Graphs are cached per process (:class:`WalkCache`), keyed by database, realm, space, the temporal
predicates, relation types and edge kinds, and valid for one data version of the space
(:func:`~pgrag_dag.store.graph_version.read_version`, read in the query's snapshot): a query whose snapshot
shows another version builds the graph again from that snapshot, so it never walks a graph other than the
state it reads.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import psycopg
from scipy import sparse
from scipy.sparse import linalg as splinalg

from pgrag_dag.extract.cooccurrence import CooccurrenceOptions, extract_chunk_cooccurrence
from pgrag_dag.gate_rules import identity_key
from pgrag_dag.query.keywords import STOPWORDS
from pgrag_dag.store import graph_version, walk_graph
from pgrag_dag.store.walk_graph import WalkEdges
from pgrag_dag.temporal import Temporal

_WORD = re.compile(r"[\w&][\w'’.\-&]*", re.UNICODE)
_OPTIONS = CooccurrenceOptions()
MAX_NGRAM = 6
"""The longest n-gram of the question looked up as a name (words)."""


def question_keys(question: str, *, names: bool = True, ngrams: bool = False) -> dict[str, float]:
    """The identity keys the walk may restart on, each with its link score in (0, 1]: with ``names`` the
    names (and aliases) the offline extractor finds in ``question``; with ``ngrams`` every
    1–:data:`MAX_NGRAM`-word n-gram of its words not made only of stop words
    (:data:`~pgrag_dag.query.keywords.STOPWORDS`) — what a lowercase question names that the
    capitalisation rules miss. Every key scores 1 (an exact identity-key link)."""
    keys: dict[str, float] = {}
    if names:
        for record in extract_chunk_cooccurrence(question, "", _OPTIONS)["entities"]:
            for name in [record["name"], *record.get("aliases", [])]:
                keys[identity_key(name)] = 1.0
    if ngrams:
        words = [w.rstrip(".'’-") for w in _WORD.findall(question)]
        words = [w[:-2] if w.lower().endswith(("'s", "’s")) else w for w in words if w]
        for n in range(1, MAX_NGRAM + 1):
            for i in range(len(words) - n + 1):
                gram = words[i : i + n]
                if all(w.lower() in STOPWORDS for w in gram):
                    continue
                keys.setdefault(identity_key(" ".join(gram)), 1.0)
    keys.pop("", None)
    return keys


@dataclass
class Walk:
    """One walk's result: the stationary mass of every entity vertex (``entity_mass``, aligned with
    ``graph.entity_ids``) and chunk vertex (``chunk_mass``, with ``graph.chunk_ids``), summing to 1 with
    it; ``seeds`` the restart entities (id → weight before normalisation)."""

    entity_mass: np.ndarray
    chunk_mass: np.ndarray
    graph: WalkGraph
    seeds: dict[int, float]

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
        at = g._index(np.asarray(list(entity_ids), dtype=np.int64), g.entity_ids)
        pool = np.zeros(len(g.entity_ids), dtype=bool)
        pool[at[at >= 0]] = True
        ends = g.relation_ends
        inside = np.flatnonzero(pool[ends[:, 0]] & pool[ends[:, 1]]) if len(ends) else np.zeros(0, dtype=int)
        score = self.entity_mass[ends[inside, 0]] + self.entity_mass[ends[inside, 1]]
        ranked = sorted(zip(g.relation_ids[inside].tolist(), score.tolist()), key=lambda t: (-t[1], t[0]))
        return [(int(r), float(m)) for r, m in ranked[:limit] if r >= 0]

    def entity_score(self, entity_id: int) -> float:
        """The mass of one entity (0 when not a vertex)."""
        at = int(self.graph._index(np.asarray([entity_id], dtype=np.int64), self.graph.entity_ids)[0])
        return 0.0 if at < 0 else float(self.entity_mass[at])


class WalkGraph:
    """One space's walk graph in memory: the walker's transition matrix, sparse.

    Vertices ``0 … m−1`` are the entities of ``entity_ids`` (sorted int64), ``m … m+c−1`` the chunks of
    ``chunk_ids`` (sorted: every chunk of the space, mentioned or not, so the dense prior reaches chunks
    without names too). ``step`` is the ``n × n`` CSR matrix (scipy, float32) whose entry ``[v, u]`` is the
    probability that the walker at ``u`` moves to ``v``: the weight of the undirected edge ``u–v`` over
    ``u``'s weighted degree (parallel edges add up); row ``v`` lists ``v``'s neighbours. ``sink`` holds the
    vertices without edges. ``chunks_of[i]`` counts the distinct chunks mentioning entity ``i`` (the node
    specificity's denominator). ``relation_ids`` (int64, ``(r,)``) and ``relation_ends`` (their endpoints'
    vertex indices, ``(r, 2)``) let a walk pick the relations among its best entities without a read.
    Build with :meth:`from_edges`.
    """

    def __init__(
        self,
        entity_ids: np.ndarray,
        chunk_ids: np.ndarray,
        step: sparse.csr_matrix,
        chunks_of: np.ndarray,
        relation_ids: np.ndarray | None = None,
        relation_ends: np.ndarray | None = None,
    ) -> None:
        self.entity_ids, self.chunk_ids, self.step, self.chunks_of = entity_ids, chunk_ids, step, chunks_of
        self.n = len(entity_ids) + len(chunk_ids)
        self.sink = np.flatnonzero(np.diff(step.indptr) == 0)
        self.relation_ids = np.zeros(0, dtype=np.int64) if relation_ids is None else relation_ids
        self.relation_ends = np.zeros((0, 2), dtype=np.int64) if relation_ends is None else relation_ends

    @classmethod
    def from_edges(cls, edges: WalkEdges, chunk_ids: np.ndarray) -> WalkGraph:
        """The graph of ``edges`` over the chunks ``chunk_ids`` (int64, any order) and every entity an
        edge names; parallel edges (a pair related by several predicates) add up."""
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
        w = np.concatenate(
            [np.ones(len(mention) + len(edges.titles)), edges.relation_weight.astype(np.float64)]
        )
        tail, head, both = np.concatenate([a, b]), np.concatenate([b, a]), np.concatenate([w, w])
        degree = np.bincount(tail, weights=both, minlength=n)
        share = (both / np.where(degree[tail] > 0, degree[tail], 1.0)).astype(np.float32)
        step = sparse.csr_matrix((share, (head, tail)), shape=(n, n), dtype=np.float32)
        step.sum_duplicates()
        chunks_of = np.bincount(np.searchsorted(ents, mention[:, 1]), minlength=m).astype(np.float64)
        ends = np.column_stack(parts[2]).astype(np.int64).reshape(-1, 2)
        rel_ids = edges.relation_ids if len(edges.relation_ids) == len(ends) else np.full(len(ends), -1)
        return cls(ents, chunks, step, chunks_of, rel_ids.astype(np.int64), ends)

    @property
    def edge_count(self) -> int:
        """Undirected edges (parallel ones merged)."""
        return int(self.step.nnz) // 2

    @property
    def nbytes(self) -> int:
        """The memory its arrays hold, in bytes (≈ 16 per undirected edge and 24 per vertex)."""
        arrays = (
            self.entity_ids,
            self.chunk_ids,
            self.chunks_of,
            self.sink,
            self.relation_ids,
            self.relation_ends,
        )
        matrix = self.step.data.nbytes + self.step.indices.nbytes + self.step.indptr.nbytes
        return sum(x.nbytes for x in arrays) + matrix

    def _index(self, ids: np.ndarray, ids_of: np.ndarray) -> np.ndarray:
        if not len(ids_of):
            return np.full(len(ids), -1, dtype=np.int64)
        pos = np.minimum(np.searchsorted(ids_of, ids), len(ids_of) - 1)
        return np.where(ids_of[pos] == ids, pos, -1)

    def walk(
        self,
        seeds: Mapping[int, float],
        prior: Mapping[int, float],
        *,
        damping: float,
        prior_weight: float,
        tolerance: float = 1e-7,
        max_iterations: int = 100,
    ) -> Walk | None:
        """Personalised PageRank with restart on ``seeds`` (entity id → link score in (0, 1], divided here
        by the chunks mentioning the entity) and ``prior_weight ×`` the min-max-normalised ``prior`` (chunk
        id → dense score; a single score, or all equal, normalise to 1). Ids not in the graph are ignored.
        Returns ``None`` when no seed is in the graph (the caller falls back to dense retrieval).

        ``damping`` in [0, 1): the probability of following an edge (HippoRAG 2: 0.5); the walker restarts
        by the normalised reset vector otherwise, and always from a vertex without edges (as igraph's
        ``personalized_pagerank`` does). The stationary mass solves the linear system
        ``(I − d·P − d·reset·sinkᵀ) x = (1 − d)·reset``, solved in float32 by BiCGSTAB (scipy) to a relative
        residual of ``tolerance``: at 100k relations and damping 0.7, 17–19 sparse matrix–vector products
        (~7.7 ms) where power iteration needed ~30 for an L1 change below 1e-6 (~10.4 ms), with the same
        top 24 chunks on 40 of 40 restart vectors and a smaller error (L1 4e-7 against 7e-7 from the
        converged mass). Should the solver not converge, power iteration (``max_iterations`` steps, until
        the L1 change is below ``tolerance``) gives the mass instead. Negative round-off is clipped."""
        m = len(self.entity_ids)
        reset = np.zeros(self.n, dtype=np.float64)
        if seeds:
            ids = np.fromiter(seeds.keys(), dtype=np.int64, count=len(seeds))
            at = self._index(ids, self.entity_ids)
            for i, score in zip(at, seeds.values()):
                if i >= 0:
                    reset[i] = max(reset[i], score / max(self.chunks_of[i], 1.0))
        seeded = {int(self.entity_ids[i]): float(reset[i]) for i in np.flatnonzero(reset[:m])}
        if not seeded:
            return None
        if prior and prior_weight > 0:
            ids = np.fromiter(prior.keys(), dtype=np.int64, count=len(prior))
            scores = np.fromiter(prior.values(), dtype=np.float64, count=len(prior))
            lo, hi = float(scores.min()), float(scores.max())
            norm = np.ones_like(scores) if hi <= lo else (scores - lo) / (hi - lo)
            at = self._index(ids, self.chunk_ids)
            keep = at >= 0
            reset[m + at[keep]] += prior_weight * norm[keep]
        reset = (reset / reset.sum()).astype(np.float32)
        mass = self._solve(reset, damping, tolerance, max_iterations)
        mass = np.maximum(mass, 0, out=mass)
        mass /= mass.sum()
        return Walk(entity_mass=mass[:m], chunk_mass=mass[m:], graph=self, seeds=seeded)

    def _stuck(self, mass: np.ndarray) -> float:
        return float(mass[self.sink].sum()) if len(self.sink) else 0.0

    def _solve(self, reset: np.ndarray, damping: float, tolerance: float, max_iterations: int) -> np.ndarray:
        d = np.float32(damping)

        def apply(v: np.ndarray) -> np.ndarray:
            v = v.astype(np.float32, copy=False).ravel()
            return v - d * (self.step @ v) - np.float32(damping * self._stuck(v)) * reset

        op = splinalg.LinearOperator((self.n, self.n), matvec=apply, dtype=np.float32)
        b = np.float32(1.0 - damping) * reset
        x, info = splinalg.bicgstab(op, b, x0=reset.copy(), rtol=tolerance, atol=0.0, maxiter=max_iterations)
        if info == 0 and np.isfinite(x).all() and x.sum() > 0:
            return np.asarray(x, dtype=np.float32)
        mass = reset.copy()  # not converged (or broke down): power iteration, which always does
        for _ in range(max_iterations):
            nxt = (
                damping * (self.step @ mass)
                + np.float32((1.0 - damping) + damping * self._stuck(mass)) * reset
            )
            done = float(np.abs(nxt - mass).sum()) < tolerance
            mass = nxt
            if done:
                break
        return mass

    def mentioned(self, chunk_id: int, entity_ids: Sequence[int]) -> list[int]:
        """Which of ``entity_ids`` the chunk is joined to (mention or title edge), ascending."""
        at = int(self._index(np.asarray([chunk_id], dtype=np.int64), self.chunk_ids)[0])
        if at < 0:
            return []
        v, m = len(self.entity_ids) + at, len(self.entity_ids)
        near = self.step.indices[self.step.indptr[v] : self.step.indptr[v + 1]]
        return sorted({int(self.entity_ids[u]) for u in near if u < m} & set(entity_ids))


class WalkCache:
    """Walk graphs by key, each valid for one data version (thread-safe; least recently used first out).

    :meth:`get` returns the cached graph when its version equals the one the caller read, else builds one
    with the caller's ``build`` (outside the lock, so a slow build never blocks other keys' readers) and
    keeps it. Bounded by ``max_graphs`` graphs and ``max_bytes`` (estimated, :attr:`WalkGraph.nbytes`): a
    graph larger than ``max_bytes`` is used and not kept.
    """

    def __init__(self, max_graphs: int = 8, max_bytes: int = 1 << 30):
        self.max_graphs, self.max_bytes = max_graphs, max_bytes
        self._graphs: OrderedDict[Hashable, tuple[Hashable, WalkGraph]] = OrderedDict()
        self._lock = threading.Lock()
        self.builds = 0

    def get(self, key: Hashable, version: Hashable | None, build: Callable[[], WalkGraph]) -> WalkGraph:
        """The graph for ``key`` at ``version``, built by ``build()`` when not cached at that version; a
        ``None`` version (unknown) is never cached."""
        with self._lock:
            hit = self._graphs.get(key)
            if hit is not None and version is not None and hit[0] == version:
                self._graphs.move_to_end(key)
                return hit[1]
        graph = build()
        with self._lock:
            self.builds += 1
            self._graphs.pop(key, None)
            if version is not None and graph.nbytes <= self.max_bytes:
                self._graphs[key] = (version, graph)
            while len(self._graphs) > self.max_graphs or self.nbytes > self.max_bytes:
                self._graphs.popitem(last=False)
        return graph

    @property
    def nbytes(self) -> int:
        """The estimated bytes of the graphs kept."""
        return sum(g.nbytes for _, g in self._graphs.values())

    def clear(self) -> None:
        """Forget every graph."""
        with self._lock:
            self._graphs.clear()


CACHE = WalkCache()
"""The query process's walk graphs (:class:`WalkCache`)."""


def space_graph(
    conn: psycopg.Connection,
    dsn: str,
    realm: str,
    space: str,
    *,
    temporal: Temporal,
    relation_types: Sequence[str] | None,
    kinds: Sequence[str],
    cache: WalkCache = CACHE,
) -> WalkGraph:
    """``space``'s walk graph in the state the caller's snapshot (``conn``'s open transaction) reads under
    ``temporal`` / ``relation_types``, with the edge ``kinds``: from ``cache`` when it holds the version
    read now, else read (:func:`~pgrag_dag.store.walk_graph.walk_edges`) and kept — not kept for a realm
    whose schema has no graph version yet (built before schema version 19: its next index run adds it)."""
    version = graph_version.read_version(conn, realm, space)
    types = None if relation_types is None else tuple(sorted({t.lower() for t in relation_types}))
    key = (
        dsn,
        realm,
        space,
        temporal.as_of,
        temporal.believed_at,
        temporal.include_superseded,
        types,
        tuple(sorted(kinds)),
    )

    def build() -> WalkGraph:
        edges = walk_graph.walk_edges(
            conn, realm, space, temporal=temporal, relation_types=relation_types, kinds=kinds
        )
        return WalkGraph.from_edges(edges, walk_graph.space_chunks(conn, realm, space, temporal=temporal))

    return cache.get(key, version, build)


def relation_hops(seeds: Sequence[int], relations: Sequence[Mapping[str, object]]) -> dict[int, int]:
    """Relation id → its hop from the nearest seed over ``relations`` themselves (rows with ``id``,
    ``source_id``, ``target_id``): 1 for a relation touching a seed, ``1 + n`` for one whose nearer end is
    ``n`` relations from a seed; relations not connected to a seed are absent."""
    adjacency: dict[int, set[int]] = {}
    for r in relations:
        a, b = int(r["source_id"]), int(r["target_id"])  # type: ignore[call-overload]
        adjacency.setdefault(a, set()).add(b)
        adjacency.setdefault(b, set()).add(a)
    dist = {int(s): 0 for s in seeds if int(s) in adjacency}
    frontier = list(dist)
    while frontier:
        nxt = []
        for v in frontier:
            for w in adjacency[v]:
                if w not in dist:
                    dist[w] = dist[v] + 1
                    nxt.append(w)
        frontier = nxt
    out = {}
    for r in relations:
        ends = [dist[e] for e in (int(r["source_id"]), int(r["target_id"])) if e in dist]  # type: ignore[call-overload]
        if ends:
            out[int(r["id"])] = 1 + min(ends)  # type: ignore[call-overload]
    return out
