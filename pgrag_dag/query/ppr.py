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
shows another version patches the cached graph by the vertices the writes since touched, re-reading only the
edges at them (:data:`~pgrag_dag.store.graph_version` records them; :meth:`WalkGraph.patched`), or reads
the whole graph again when they cannot be known or are too many — either way from that snapshot, so it never
walks a graph other than the state it reads.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping, Sequence

import psycopg

from pgrag_dag.extract.cooccurrence import CooccurrenceOptions, extract_chunk_cooccurrence
from pgrag_dag.gate_rules import identity_key
from pgrag_dag.names import WILDCARD_SPACE
from pgrag_dag.query.keywords import STOPWORDS
from pgrag_dag.query.walk_matrix import WalkGraph
from pgrag_dag.store import graph_version, walk_graph
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
        self.patches = 0

    def get(
        self,
        key: Hashable,
        version: Hashable | None,
        build: Callable[[], WalkGraph],
        patch: Callable[[WalkGraph], WalkGraph | None] | None = None,
    ) -> WalkGraph:
        """The graph for ``key`` at ``version``, built by ``build()`` when not cached at that version —
        or, when a graph of another version is cached and ``patch`` is given, ``patch(that graph)`` unless
        it returns ``None`` (it cannot say what changed); a ``None`` version (unknown) is never cached."""
        with self._lock:
            hit = self._graphs.get(key)
            if hit is not None and version is not None and hit[0] == version:
                self._graphs.move_to_end(key)
                return hit[1]
        graph = patch(hit[1]) if hit is not None and patch is not None and version is not None else None
        if graph is None:
            graph = build()
            with self._lock:
                self.builds += 1
        else:
            with self._lock:
                self.patches += 1
        with self._lock:
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


PATCH_MAX_SHARE = 0.05
"""A cached graph is patched (:meth:`WalkGraph.patched`) when the writes since touched at most this share
of its vertices, and at most this share of its positions are unused; else the whole graph is read again."""

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
    # a belief instant also reads the belief history, which records no touched vertices; the wildcard
    # space would need every space's
    patchable = version is not None and space != WILDCARD_SPACE and temporal.believed_at is None
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
        graph = WalkGraph.from_edges(edges, walk_graph.space_chunks(conn, realm, space, temporal=temporal))
        if patchable:
            graph.writes = graph_version.writes(conn, realm, space)
        return graph

    def patch(old: WalkGraph) -> WalkGraph | None:
        if not patchable or old.writes is None:
            return None
        now = graph_version.writes(conn, realm, space)
        if not old.writes <= now:  # a snapshot older than the graph's, or the space deleted since
            return None
        touched = graph_version.touched(conn, realm, space, sorted(now - old.writes))
        if touched is None:
            return None
        ents, chunks = touched
        if len(ents) + len(chunks) > PATCH_MAX_SHARE * old.n or old.unused > PATCH_MAX_SHARE * old.n:
            return None
        edges = walk_graph.walk_edges(
            conn,
            realm,
            space,
            temporal=temporal,
            relation_types=relation_types,
            kinds=kinds,
            near=(ents.tolist(), chunks.tolist()),
        )
        live = walk_graph.space_chunks(conn, realm, space, temporal=temporal, among=chunks.tolist())
        graph = old.patched(ents, chunks, edges, live)
        graph.writes = now
        return graph

    return cache.get(key, version, build, patch)


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
