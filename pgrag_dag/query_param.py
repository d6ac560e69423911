"""What a query asks and what it returns: :class:`QueryParam`, :class:`QueryResult` and the
evidence each mode consults (paper §7.1, Table 3). The query path itself is :mod:`pgrag_dag.query`.

A leaf, because :class:`QueryParam`'s fields are the one declaration of a query's knobs: the
``retrieval:`` settings (:class:`~pgrag_dag.config.sections.RetrievalSettings`) and the ``pgrag query``
options are derived from them (:func:`setting_fields`, :func:`field_help`), never written out again.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol, get_args, get_origin

from pgrag_dag.errors import QueryError
from pgrag_dag.names import validate_space
from pgrag_dag.temporal import Temporal, as_of_bounds, belief_instant

Mode = Literal["mix", "local", "global", "hybrid", "naive", "bypass"]
MODES: tuple[str, ...] = get_args(Mode)
KeywordMode = Literal["model", "lexical", "off"]
Fusion = Literal["rrf", "quota"]
RelationChannel = Literal["traversal", "similarity", "lexical"]
RELATION_CHANNELS: tuple[RelationChannel, ...] = ("traversal", "similarity", "lexical")
ChunkChannel = Literal["vector", "fulltext"]
CHUNK_CHANNELS: tuple[ChunkChannel, ...] = ("vector", "fulltext")
"""Chunk search channels (§7.3 applied to chunks): ``vector`` — HNSW over chunk embeddings
(:func:`~pgrag_dag.store.retrieval.chunk_search`); ``fulltext`` — PostgreSQL full-text over title and
text (:func:`~pgrag_dag.store.retrieval.chunk_fulltext`). Where both run they are fused by RRF."""
GraphRanking = Literal["ppr", "mentions"]
WalkEdge = Literal["mentions", "relations", "titles"]
WALK_EDGES: tuple[WalkEdge, ...] = ("mentions", "relations", "titles")
"""The edges the personalised-PageRank walk may cross (:data:`pgrag_dag.store.walk_graph.EDGE_KINDS`)."""
DEFAULT_CHUNK_CHANNELS: tuple[ChunkChannel, ...] = ("vector",)
"""The chunk channels a query runs unless told otherwise (see evaluation/README.md, "Chunk recall")."""

_LOCAL = frozenset({"entities", "chunks", "mentions", "traversal", "similarity", "lexical"})
_GLOBAL = frozenset({"ranked", "communities"})
EVIDENCE: dict[str, frozenset[str]] = {
    "mix": _LOCAL,
    "local": _LOCAL,
    "global": _GLOBAL,
    "hybrid": _LOCAL | _GLOBAL,
    "naive": frozenset({"chunks"}),
    "bypass": frozenset(),
}
"""Evidence sources each mode consults (Table 3): ``entities`` (entity seeds), ``chunks`` (chunk
search by the ``chunk_channels``), ``mentions`` (mention expansion), the relation channels ``traversal``,
``similarity``, ``lexical``, ``ranked``, and ``communities``."""

RRF_K = 60
"""The RRF constant ``k`` (Cormack et al.): a list's item at rank ``r`` scores ``1 / (k + r)`` (§7.3)."""

MMR_LAMBDA = 0.7
"""MMR's relevance weight λ: ``λ·relevance − (1 − λ)·max similarity to what was already picked`` (§7.4)."""

PER_QUESTION = ("space", "as_of", "as_believed_at")
"""The :class:`QueryParam` fields a configuration cannot preset: they belong to one question."""

MAX_HOPS = 4
"""The deepest walk a query may ask for. Paths fan out by up to ``2 × max_relation_edges`` per hop; on
the 100k-relation benchmark graph a mix query takes ~35 ms at 2 hops, ~0.3 s at 3 and ~8 s at 4."""

MAX_PRIOR_K = 10_000
"""The most dense top chunks the walk's prior may read (an HNSW search that deep is already slow)."""

_CAP_FIELDS = {
    "communities": "max_community_tokens",
    "passages": "max_passage_tokens",
    "entities": "max_entity_tokens",
    "relations": "max_relation_tokens",
}


class Preset(Protocol):
    """What :meth:`QueryParam.from_settings` reads: configured defaults as keyword arguments."""

    def preset(self) -> dict[str, Any]: ...


@dataclass(frozen=True, kw_only=True)
class QueryParam:
    """How to answer one question (§7.1–7.5, §5.4). Keyword-only; validated on construction.

    Args:
        space: the space to read, or ``"*"`` to read across every space of the realm (read-only).
        mode: one of :data:`MODES` (Table 3, :data:`EVIDENCE`); ``mix`` is the default.
        top_k: entities matched by vector search (traversal seeds, mention-expansion anchors).
        chunk_top_k: chunks by chunk search (each chunk channel returns as many, the fused list is cut
            to as many); mention expansion adds up to as many again.
        max_hops: traversal depth ``k`` (0 disables traversal; at most :data:`MAX_HOPS`).
        max_relation_edges: relations any single matched entity may contribute by traversal.
        relation_top_k: relations each of the similarity, full-text and ranked channels returns.
        community_top_k: community reports placed (global, hybrid); three times as many are
            fetched by similarity, then re-ranked by the ``community_w_*`` blend.
        include_superseded: read superseded relations too (§5.2); rendered ``[superseded]``.
        as_of: valid time (§5.4) — ``YYYY``, ``YYYY-MM`` or ``YYYY-MM-DD``; only relations whose
            validity interval overlaps it are read (undated relations always match).
        as_believed_at: belief time (§5.3) — an ISO-8601 instant (naive = UTC; normalised to an
            aware ``datetime``); relations, chunks, seed entities and community reports the graph
            did not hold yet at that instant are not read, nor relations retracted by then.
        relation_types: predicates (case-insensitive) every relation channel and every traversal
            step is restricted to; ``None``: no restriction. Stored as a tuple.
        relation_channels: which of traversal, similarity and lexical run where the mode has them
            (stored as a tuple).
        chunk_channels: which of :data:`CHUNK_CHANNELS` chunk search runs where the mode has it
            (naive, mix, local, hybrid), default :data:`DEFAULT_CHUNK_CHANNELS`; two are fused by RRF
            (``rrf_k``) keyed by chunk id. The full-text channel searches the low-level keywords, else
            the high-level ones, else (``keywords="off"``) the question's words — the relation lexical
            channel's text; naive mode extracts keywords for it. Empty: no chunk search (mention
            expansion still runs). Stored as a tuple.
        graph_ranking: how the entity modes (local, mix, hybrid) rank what the graph finds: ``"ppr"`` —
            personalised PageRank restarting on the question's own names and the dense top chunks ranks the
            chunks, entities and relations (:mod:`pgrag_dag.query.ppr`; a question naming nothing indexed
            falls back to ``"mentions"``); ``"mentions"`` — searched chunks first, then chunks mentioning
            the vector-matched entities, and the k-hop traversal from them.
        ppr_damping: the walk's probability of following an edge rather than restarting, in [0, 1).
        ppr_prior_k: how many dense top chunks carry restart mass (the vector channel's search depth).
        ppr_prior_weight: the dense prior's weight beside the question's names (their min-max-normalised
            similarity times this).
        ppr_edges: which edges the walk crosses: ``mentions`` (chunk–entity), ``relations`` (weighted by
            corroboration), ``titles`` (a chunk and the entity its document is named after). Stored as a
            tuple.
        collapse_duplicates: near-duplicate chunks (stored vectors at least ``duplicate_similarity``
            apart) count once in the chunk ranking; the later ones are listed in the kept row's
            ``duplicates``.
        duplicate_similarity: the cosine similarity at which two chunks are near-duplicates, in [0, 1].
        keywords: ``"lexical"`` (default; no model call), ``"model"`` (one call when a client is
            given to :func:`query_data` / :func:`query`, lexical fallback otherwise) or ``"off"``.
        fusion: ``"rrf"`` (default, constant ``rrf_k``) or ``"quota"`` (similarity's share
            ``quota_share`` of the interleave).
        rrf_k: the RRF constant ``k``: a channel's item at rank ``r`` scores ``1 / (k + r)``
            (:data:`RRF_K`).
        quota_share: the similarity channel's share of the quota interleave, in [0, 1].
        mmr: maximal marginal relevance over the fused relations (``mmr_lambda``), off by default.
        mmr_lambda: MMR's relevance weight λ in [0, 1] (:data:`MMR_LAMBDA`); 1 ranks by relevance alone.
        node_distance_rerank: re-rank relations by real graph distance from the matched entities
            (BFS bounded by ``max_hops + 1``), off by default.
        decompose: split a two-event question into two sub-queries and merge, off by default.
        community_w_similarity, community_w_rating, community_w_size: community ranking weights
            (similarity, rating/10, log-normalised size); rating and size 0 give pure similarity.
        max_community_tokens, max_passage_tokens, max_entity_tokens, max_relation_tokens:
            per-block caps in tokens (1 token = 4 characters of evidence text); ``None`` (the
            default) places everything retrieved. An overflowing passage or report is clipped.
        render_relation_validity: render ``[from X]`` / ``[valid X to Y]`` beside relations (§8.4).

    Raises:
        QueryError: unknown mode, keyword mode, fusion, relation or chunk channel; a negative count or cap;
            ``max_hops`` above :data:`MAX_HOPS`; a
            weight, share or λ out of range; an invalid ``as_of`` / ``as_believed_at``; an empty
            ``relation_types``.
        InvalidNameError: a space name that may not reach SQL.
    """

    space: str
    mode: Mode = "mix"
    top_k: int = 10
    chunk_top_k: int = 8
    max_hops: int = 2
    max_relation_edges: int = 50
    relation_top_k: int = 20
    community_top_k: int = 5
    include_superseded: bool = False
    as_of: str | None = None
    as_believed_at: str | datetime | None = None
    relation_types: Sequence[str] | None = None
    relation_channels: Sequence[RelationChannel] = RELATION_CHANNELS
    chunk_channels: Sequence[ChunkChannel] = DEFAULT_CHUNK_CHANNELS
    graph_ranking: GraphRanking = "ppr"
    ppr_damping: float = 0.7
    ppr_prior_k: int = 200
    ppr_prior_weight: float = 0.05
    ppr_edges: Sequence[WalkEdge] = WALK_EDGES
    collapse_duplicates: bool = True
    duplicate_similarity: float = 0.95
    keywords: KeywordMode = "lexical"
    fusion: Fusion = "rrf"
    rrf_k: int = RRF_K
    quota_share: float = 0.5
    mmr: bool = False
    mmr_lambda: float = MMR_LAMBDA
    node_distance_rerank: bool = False
    decompose: bool = False
    community_w_similarity: float = 0.6
    community_w_rating: float = 0.2
    community_w_size: float = 0.2
    max_community_tokens: int | None = None
    max_passage_tokens: int | None = None
    max_entity_tokens: int | None = None
    max_relation_tokens: int | None = None
    render_relation_validity: bool = True

    def __post_init__(self) -> None:
        check_mode(self.mode)
        validate_space(self.space, for_write=False)
        counts = (
            "top_k",
            "chunk_top_k",
            "max_hops",
            "max_relation_edges",
            "relation_top_k",
            "community_top_k",
            "rrf_k",
            "ppr_prior_k",
            *_CAP_FIELDS.values(),
        )
        for name in counts:
            value = getattr(self, name)
            if value is None and name in _CAP_FIELDS.values():
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise QueryError(f"{name} must be a non-negative integer, got {value!r}")
        if self.max_hops > MAX_HOPS:
            raise QueryError(
                f"max_hops must be at most {MAX_HOPS}, got {self.max_hops}: the walk's fan-out compounds "
                "with every hop (§7.2)"
            )
        for name in (
            "include_superseded",
            "mmr",
            "node_distance_rerank",
            "decompose",
            "render_relation_validity",
            "collapse_duplicates",
        ):
            if not isinstance(getattr(self, name), bool):
                raise QueryError(f"{name} must be a bool, got {getattr(self, name)!r}")
        for name, allowed in (
            ("keywords", get_args(KeywordMode)),
            ("fusion", get_args(Fusion)),
            ("graph_ranking", get_args(GraphRanking)),
        ):
            if getattr(self, name) not in allowed:
                raise QueryError(f"{name} must be one of {', '.join(allowed)}, got {getattr(self, name)!r}")
        for name in (
            "quota_share",
            "mmr_lambda",
            "community_w_similarity",
            "community_w_rating",
            "community_w_size",
            "ppr_damping",
            "ppr_prior_weight",
            "duplicate_similarity",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
                raise QueryError(f"{name} must be a number in [0, 1], got {value!r}")
        chans = tuple(dict.fromkeys(_as_tuple(self.relation_channels, "relation_channels")))
        if not set(chans) <= set(RELATION_CHANNELS):
            raise QueryError(f"relation_channels must be among {', '.join(RELATION_CHANNELS)}, got {chans!r}")
        object.__setattr__(self, "relation_channels", chans)
        chunk_chans = tuple(dict.fromkeys(_as_tuple(self.chunk_channels, "chunk_channels")))
        if not set(chunk_chans) <= set(CHUNK_CHANNELS):
            raise QueryError(f"chunk_channels must be among {', '.join(CHUNK_CHANNELS)}, got {chunk_chans!r}")
        object.__setattr__(self, "chunk_channels", chunk_chans)
        if self.ppr_prior_k > MAX_PRIOR_K:
            raise QueryError(f"ppr_prior_k must be at most {MAX_PRIOR_K}, got {self.ppr_prior_k}")
        if self.ppr_damping >= 1.0:
            raise QueryError(f"ppr_damping must be below 1 (the walk must restart), got {self.ppr_damping!r}")
        edges = tuple(dict.fromkeys(_as_tuple(self.ppr_edges, "ppr_edges")))
        if not set(edges) <= set(WALK_EDGES):
            raise QueryError(f"ppr_edges must be among {', '.join(WALK_EDGES)}, got {edges!r}")
        object.__setattr__(self, "ppr_edges", edges)
        if self.relation_types is not None:
            types = tuple(t.strip() for t in _as_tuple(self.relation_types, "relation_types"))
            if not types or not all(types):
                raise QueryError("relation_types must name at least one predicate (None: no restriction)")
            object.__setattr__(self, "relation_types", types)
        if self.as_of is not None:
            as_of_bounds(self.as_of)
        if self.as_believed_at is not None:
            object.__setattr__(self, "as_believed_at", belief_instant(self.as_believed_at))

    @property
    def temporal(self) -> Temporal:
        """The temporal predicates this query reads under (:class:`~pgrag_dag.temporal.Temporal`)."""
        believed = self.as_believed_at
        assert believed is None or isinstance(believed, datetime)  # normalised in __post_init__
        return Temporal(as_of=self.as_of, believed_at=believed, include_superseded=self.include_superseded)

    @property
    def caps(self) -> dict[str, int | None]:
        """Per-block token caps, by block of :data:`~pgrag_dag.query.assembly.BLOCKS`."""
        return {block: getattr(self, name) for block, name in _CAP_FIELDS.items()}

    @classmethod
    def from_settings(cls, settings: Preset, *, space: str, **overrides: Any) -> QueryParam:
        """QueryParam's defaults, then the configured
        :class:`~pgrag_dag.config.sections.RetrievalSettings` (fields not ``None``), then ``overrides``.
        Raises as the constructor."""
        return cls(space=space, **{**settings.preset(), **overrides})


def _as_tuple(value: Any, name: str) -> tuple[str, ...]:
    if (
        isinstance(value, str)
        or not isinstance(value, (list, tuple))
        or not all(isinstance(v, str) for v in value)
    ):
        raise QueryError(f"{name} must be a list of strings, got {value!r}")
    return tuple(value)


@dataclass
class QueryResult:
    """What :func:`query_data` retrieved and what reached the prompt.

    Attributes:
        question: the question as asked.
        param: the :class:`QueryParam` used.
        entities: matched entities, nearest first — ``id, space, name, entity_type, description,
            score`` (cosine similarity; under the walk, its stationary mass, with ``seed``: whether the
            question named it), ``rank`` (1-based).
        relations: fused, best first — ``id, space, subject, predicate, object, subject_id,
            object_id, description, negated, valid_from, valid_to, weight, confidence, t_created,
            t_expired, superseded_by`` (the current superseder), ``superseded`` (in the state read),
            ``hop`` (traversal: the walked hop; other channels 1 unless node-distance reranking
            resolved it — ``None`` when farther than its bound; under the walk, the distance from the
            question's names over the relations it ranked), ``channel`` (the channel that ranked it best),
            ``ranks`` (``{channel: 1-based rank}``; under the walk ``traversal`` is its rank by the mass of
            its two ends, ``ppr_score``), ``score`` (RRF score; ``None`` under the quota), ``rank``.
        chunks: searched chunks (fused, best first), then mention-expanded ones — ``id, space, doc_key,
            title, chunk_index, text, t_created, via`` (the chunk channels that found it, joined by
            ``+`` in :data:`CHUNK_CHANNELS` order: ``"vector"``, ``"fulltext"``,
            ``"vector+fulltext"``; or ``"mention"``; under the walk ``"ppr"``, or ``"ppr+fulltext"`` /
            ``"fulltext"`` when the full-text channel also ran), ``ranks`` (``{channel: 1-based rank}``;
            ``{}`` via mention; under the walk ``ppr`` and, when the dense prior held it, ``vector``),
            ``rrf_score`` (the RRF score over ``ranks``; ``None`` via mention or the walk alone),
            ``score`` (cosine similarity when the vector channel found it, else ``None``),
            ``ppr_score`` (the walk's stationary mass, under the walk), ``mentions`` (matched entities —
            under the walk, the question's linked names — mentioned, else ``None``), ``duplicates`` (with
            ``collapse_duplicates``: ``[{id, doc_key, chunk_index}]`` of the near-duplicates it stands for),
            ``rank``, ``ref`` (its ``[n]``).
        communities: ``id, space, level, title, summary, findings, rating, size, report,
            built_at, score`` (similarity), ``rank_score`` (the blend), ``rank``.
        channels: candidates each consulted evidence source returned (keys of :data:`EVIDENCE`;
            ``chunks`` counts the fused chunk list), and per chunk channel that ran,
            ``chunks_vector`` / ``chunks_fulltext``: candidates it returned before fusion (the vector
            channel's over-fetch for the walk's prior and the duplicate collapse included); under the
            walk ``ppr_seeds`` (entities the question's names linked; 0: the dense path answered) and
            ``ppr_chunks``.
        keywords: ``low_level``, ``high_level`` and ``source`` (``model``/``lexical``/``off``).
        subqueries: the sub-questions retrieved for, when ``decompose`` split the question.
        warnings: e.g. community reports older than the last graph write, or chunks, entities and
            relations of the space without a vector (the embeddings stage failed or has not run; or
            only a fallback vector) — vector search cannot find them; also logged.
        assembly: per block of :data:`BLOCKS` — ``items_retrieved``, ``items_placed``,
            ``items_clipped``, ``chars_retrieved``, ``chars_placed`` (characters) — then ``total``,
            ``caps`` (tokens per block or ``None``) and ``filters`` (``as_of``, ``as_believed_at``
            as ISO-8601 UTC, ``include_superseded``, ``relation_types``).
        context: the assembled context text sent to the model.
    """

    question: str
    param: QueryParam
    entities: list[dict[str, Any]] = field(default_factory=list)
    relations: list[dict[str, Any]] = field(default_factory=list)
    chunks: list[dict[str, Any]] = field(default_factory=list)
    communities: list[dict[str, Any]] = field(default_factory=list)
    channels: dict[str, int] = field(default_factory=dict)
    keywords: dict[str, Any] = field(default_factory=dict)
    subqueries: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    assembly: dict[str, dict[str, Any]] = field(default_factory=dict)
    context: str = ""


def check_mode(mode: str) -> None:
    """Raise :class:`QueryError` unless ``mode`` is one of :data:`MODES` (§7.1)."""
    if mode not in MODES:
        raise QueryError(f"unknown query mode {mode!r}; expected one of {', '.join(MODES)}")


def field_help() -> dict[str, str]:
    """Each :class:`QueryParam` field → the first sentence of its entry in the class docstring's
    ``Args:`` (reStructuredText marks turned into plain text): the help of its ``pgrag query`` option
    and the description of its ``retrieval:`` setting. A line naming several fields documents each."""
    entries: dict[str, str] = {}
    current: list[str] = []
    doc = (QueryParam.__doc__ or "").split("Args:", 1)[-1].split("Raises:", 1)[0]
    for line in doc.splitlines():
        head = re.match(r"^ {8}([a-z_][a-z_0-9, ]*):(?: (.*))?$", line)
        if head:
            current = [n.strip() for n in head.group(1).split(",")]
            for name in current:
                entries[name] = head.group(2) or ""
        elif line.startswith(" " * 12) and current:
            for name in current:
                entries[name] += " " + line.strip()
    return {name: _first_sentence(text) for name, text in entries.items()}


def _first_sentence(text: str) -> str:
    plain = re.sub(r":[a-z]+:`~?(?:[\w.]+\.)?([\w]+)`", r"\1", text).replace("``", "")
    return re.split(r"(?<=[a-z0-9)])\. ", plain.strip(), maxsplit=1)[0].rstrip(".")


def setting_fields() -> dict[str, tuple[Any, str]]:
    """Every field a configuration may preset (all but :data:`PER_QUESTION`) → ``(type, help)``, the
    type as a setting takes it: a ``Literal`` as ``str`` and a sequence as ``list[str]``, so that
    :class:`QueryParam` itself judges the value and refuses it with its own message."""
    hints = typing.get_type_hints(QueryParam)
    helps = field_help()
    return {
        f.name: (_setting_type(hints[f.name]), helps.get(f.name, ""))
        for f in dataclasses.fields(QueryParam)
        if f.name not in PER_QUESTION
    }


def _setting_type(annotation: Any) -> Any:
    args = [a for a in get_args(annotation) if a is not type(None)]
    if get_origin(annotation) in (typing.Union, types.UnionType) and len(args) == 1:
        return _setting_type(args[0])
    if get_origin(annotation) is Literal:
        return str
    if get_origin(annotation) is Sequence:
        return list[str]
    return annotation
