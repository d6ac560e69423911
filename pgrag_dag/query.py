"""The query path: modes, conditioning, retrieval, fusion, assembly and synthesis (paper §7, §8.3).

:func:`query_data` retrieves and assembles; :func:`query` adds one synthesis call through the
injected :class:`~pgrag_dag.llm.ModelClient`. The six modes of Table 3 consult exactly the
evidence of :data:`EVIDENCE`:

========  ========  ======  ====================================  ===========
mode      entities  chunks  relations                             communities
========  ========  ======  ====================================  ===========
mix       ✓         ✓       traversal + similarity + lexical      —
local     ✓         ✓       traversal + similarity + lexical      —
global    —         —       ranked                                ✓
hybrid    ✓         ✓       traversal + similarity + lexical      ✓
                            + ranked
naive     —         ✓       —                                     —
bypass    —         —       —                                     —
========  ========  ======  ====================================  ===========

"chunks" means chunk vector search, plus mention expansion wherever entities are matched. An
unknown mode raises :class:`QueryError` — a query never silently runs in another mode (§7.1).

Conditioning (§7.2, :mod:`pgrag_dag.keywords`): low-level keywords are appended to the question for
the entity query vector; high-level keywords to it for the global vector (``ranked`` relations and
communities); both form the full-text query. Relations arrive by up to four channels
(:mod:`pgrag_dag.store.retrieval`, :mod:`pgrag_dag.store.retrieval_channels`) — traversal up to
``max_hops``, similarity over relation embeddings, full-text over the rendered relation, and the
global ranking (relation similarity to the global vector, or keyword overlap then weight when no
relation is embedded) — and are fused by RRF or the fixed-share quota (:mod:`pgrag_dag.fusion`).
Every relation read applies the temporal predicates and ``relation_types`` inside the read — within
each traversal step, never to the walk's result.

Assembly (:mod:`pgrag_dag.assembly`): community reports, passages, entities, relations; no cap by
default; the assembly report (characters retrieved vs placed per block) is returned and logged.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any, Literal, get_args

import numpy as np
import psycopg

from pgrag_dag import fusion as fuse
from pgrag_dag import keywords as kw
from pgrag_dag.assembly import BLOCKS, assemble, render_relation, render_validity, summary
from pgrag_dag.config import RetrievalSettings
from pgrag_dag.embedding import Embedder
from pgrag_dag.errors import QueryError, SchemaMismatchError
from pgrag_dag.llm import ModelClient
from pgrag_dag.names import WILDCARD_SPACE, validate_realm, validate_space
from pgrag_dag.prompts import SYNTHESIS_SYSTEM, SYNTHESIS_USER
from pgrag_dag.store import db, retrieval
from pgrag_dag.store import retrieval_channels as channels

logger = logging.getLogger(__name__)

Mode = Literal["mix", "local", "global", "hybrid", "naive", "bypass"]
MODES: tuple[str, ...] = get_args(Mode)
KeywordMode = Literal["model", "lexical", "off"]
Fusion = Literal["rrf", "quota"]
RelationChannel = Literal["traversal", "similarity", "lexical"]
RELATION_CHANNELS: tuple[RelationChannel, ...] = ("traversal", "similarity", "lexical")

_LOCAL = frozenset({"entities", "chunks", "mentions", "traversal", "similarity", "lexical"})
_GLOBAL = frozenset({"ranked", "communities"})
EVIDENCE: dict[str, frozenset[str]] = {
    "mix": _LOCAL, "local": _LOCAL, "global": _GLOBAL, "hybrid": _LOCAL | _GLOBAL,
    "naive": frozenset({"chunks"}), "bypass": frozenset(),
}
"""Evidence sources each mode consults (Table 3): ``entities`` (entity seeds), ``chunks`` (chunk
vector search), ``mentions`` (mention expansion), the relation channels ``traversal``,
``similarity``, ``lexical``, ``ranked``, and ``communities``."""

_CAP_FIELDS = {"communities": "max_community_tokens", "passages": "max_passage_tokens",
               "entities": "max_entity_tokens", "relations": "max_relation_tokens"}


@dataclass(frozen=True, kw_only=True)
class QueryParam:
    """How to answer one question (§7.1–7.5, §5.4). Keyword-only; validated on construction.

    Args:
        space: the space to read, or ``"*"`` to read across every space of the realm (read-only).
        mode: one of :data:`MODES` (Table 3, :data:`EVIDENCE`); ``mix`` is the default.
        top_k: entities matched by vector search (traversal seeds, mention-expansion anchors).
        chunk_top_k: chunks by vector search; mention expansion adds up to as many again.
        max_hops: traversal depth ``k`` (0 disables traversal).
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
        keywords: ``"lexical"`` (default; no model call), ``"model"`` (one call when a client is
            given to :func:`query_data` / :func:`query`, lexical fallback otherwise) or ``"off"``.
        fusion: ``"rrf"`` (default, constant ``rrf_k``) or ``"quota"`` (similarity's share
            ``quota_share`` of the interleave).
        mmr: maximal marginal relevance over the fused relations (``mmr_lambda``), off by default.
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
        QueryError: unknown mode, keyword mode, fusion or channel; a negative count or cap; a
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
    keywords: KeywordMode = "lexical"
    fusion: Fusion = "rrf"
    rrf_k: int = fuse.RRF_K
    quota_share: float = 0.5
    mmr: bool = False
    mmr_lambda: float = fuse.MMR_LAMBDA
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
        counts = ("top_k", "chunk_top_k", "max_hops", "max_relation_edges", "relation_top_k", "community_top_k",
                  "rrf_k", *_CAP_FIELDS.values())
        for name in counts:
            value = getattr(self, name)
            if value is None and name in _CAP_FIELDS.values():
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise QueryError(f"{name} must be a non-negative integer, got {value!r}")
        for name in ("include_superseded", "mmr", "node_distance_rerank", "decompose", "render_relation_validity"):
            if not isinstance(getattr(self, name), bool):
                raise QueryError(f"{name} must be a bool, got {getattr(self, name)!r}")
        for name, allowed in (("keywords", get_args(KeywordMode)), ("fusion", get_args(Fusion))):
            if getattr(self, name) not in allowed:
                raise QueryError(f"{name} must be one of {', '.join(allowed)}, got {getattr(self, name)!r}")
        for name in ("quota_share", "mmr_lambda", "community_w_similarity", "community_w_rating", "community_w_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
                raise QueryError(f"{name} must be a number in [0, 1], got {value!r}")
        chans = tuple(dict.fromkeys(_as_tuple(self.relation_channels, "relation_channels")))
        if not set(chans) <= set(RELATION_CHANNELS):
            raise QueryError(f"relation_channels must be among {', '.join(RELATION_CHANNELS)}, got {chans!r}")
        object.__setattr__(self, "relation_channels", chans)
        if self.relation_types is not None:
            types = tuple(t.strip() for t in _as_tuple(self.relation_types, "relation_types"))
            if not types or not all(types):
                raise QueryError("relation_types must name at least one predicate (None: no restriction)")
            object.__setattr__(self, "relation_types", types)
        if self.as_of is not None:
            retrieval.as_of_bounds(self.as_of)
        if self.as_believed_at is not None:
            object.__setattr__(self, "as_believed_at", retrieval.belief_instant(self.as_believed_at))

    @property
    def temporal(self) -> retrieval.Temporal:
        """The temporal predicates this query reads under (:class:`~pgrag_dag.store.retrieval.Temporal`)."""
        believed = self.as_believed_at
        assert believed is None or isinstance(believed, datetime)  # normalised in __post_init__
        return retrieval.Temporal(as_of=self.as_of, believed_at=believed, include_superseded=self.include_superseded)

    @property
    def caps(self) -> dict[str, int | None]:
        """Per-block token caps, by block of :data:`~pgrag_dag.assembly.BLOCKS`."""
        return {block: getattr(self, name) for block, name in _CAP_FIELDS.items()}

    @classmethod
    def from_settings(cls, settings: RetrievalSettings, *, space: str, **overrides: Any) -> QueryParam:
        """Defaults from the configured :class:`RetrievalSettings`, then ``overrides``."""
        names = {f.name for f in fields(cls)}
        values = {k: v for k, v in settings.model_dump().items() if k in names}
        return cls(space=space, **{**values, **overrides})


def _as_tuple(value: Any, name: str) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise QueryError(f"{name} must be a list of strings, got {value!r}")
    return tuple(value)


@dataclass
class QueryResult:
    """What :func:`query_data` retrieved and what reached the prompt.

    Attributes:
        question: the question as asked.
        param: the :class:`QueryParam` used.
        entities: matched entities, nearest first — ``id, space, name, entity_type, description,
            score`` (cosine similarity), ``rank`` (1-based).
        relations: fused, best first — ``id, space, subject, predicate, object, subject_id,
            object_id, description, negated, valid_from, valid_to, weight, confidence, t_created,
            t_expired, superseded_by`` (the current superseder), ``superseded`` (in the state read),
            ``hop`` (traversal: the walked hop; other channels 1 unless node-distance reranking
            resolved it — ``None`` when farther than its bound), ``channel`` (the channel that ranked
            it best), ``ranks`` (``{channel: 1-based rank}``), ``score`` (RRF score; ``None`` under
            the quota), ``rank``.
        chunks: ``id, space, doc_key, title, chunk_index, text, t_created, via`` (``"vector"`` |
            ``"mention"``), ``score`` (cosine similarity, ``None`` via mention), ``mentions``
            (matched entities mentioned, ``None`` via vector), ``rank``, ``ref`` (its ``[n]``).
        communities: ``id, space, level, title, summary, findings, rating, size, report,
            built_at, score`` (similarity), ``rank_score`` (the blend), ``rank``.
        channels: candidates each consulted evidence source returned (keys of :data:`EVIDENCE`).
        keywords: ``low_level``, ``high_level`` and ``source`` (``model``/``lexical``/``off``).
        subqueries: the sub-questions retrieved for, when ``decompose`` split the question.
        warnings: e.g. community reports older than the last graph write; also logged.
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


def query_data(
    question: str, param: QueryParam, *, dsn: str, realm: str, embedder: Embedder, client: ModelClient | None = None
) -> QueryResult:
    """Retrieve evidence for ``question`` from ``realm`` and assemble the context (§7.1–7.5).

    Keywords come from ``client`` only when ``param.keywords == "model"`` (else no model call).
    The question, and the keyword-conditioned entity and global texts, are embedded in one
    ``embedder`` call (float32 vectors of the realm's width); every read runs in one read-only
    transaction. Returns a :class:`QueryResult`; the assembly report and any warning are logged.

    Raises:
        QueryError: an empty question, or a realm or space that does not exist.
        SchemaMismatchError: ``embedder`` is not the model or width the realm was indexed with (§3.5).
        InvalidNameError: an invalid realm name.
    """
    check_mode(param.mode)
    validate_realm(realm)
    if not isinstance(question, str) or not question.strip():
        raise QueryError("the question is empty")
    result = QueryResult(question=question, param=param)
    if param.mode != "bypass":
        with db.connect(dsn, autocommit=True) as conn:
            conn.read_only = True
            _check_realm(conn, realm, embedder)
            if param.space != WILDCARD_SPACE and not retrieval.space_exists(conn, realm, param.space):
                raise QueryError(f"space {param.space!r} does not exist in realm {realm!r} (nothing was indexed into it)")
            parts = (kw.decompose(question) if param.decompose else []) or [question]
            result.subqueries = parts if len(parts) > 1 else []
            probes = [_Probe.conditioned(text, param, client) for text in parts]
            result.keywords = {
                "low_level": list(dict.fromkeys(w for p in probes for w in p.keywords.low_level)),
                "high_level": list(dict.fromkeys(w for p in probes for w in p.keywords.high_level)),
                "source": probes[0].keywords.source,
            }
            vectors = _embed_all(embedder, [t for p in probes for t in p.texts(EVIDENCE[param.mode])])
            with conn.transaction():
                found = [_retrieve(conn, realm, param, p, vectors) for p in probes]
        _merge(found, result)
    _assemble(result)
    return result


def query(
    question: str, param: QueryParam, *, dsn: str, realm: str, embedder: Embedder, client: ModelClient
) -> tuple[str, QueryResult]:
    """Answer ``question``: :func:`query_data` (keywords from ``client`` when
    ``param.keywords == "model"``), then one synthesis call (§7.5).

    The model receives :data:`~pgrag_dag.prompts.SYNTHESIS_SYSTEM` and
    :data:`~pgrag_dag.prompts.SYNTHESIS_USER` filled with the question and the assembled context,
    through ``client.complete(..., purpose="synthesis", json_mode=False)``. Returns
    ``(answer text, QueryResult)``.

    Raises: as :func:`query_data`, plus :class:`ModelError` / :class:`ReplayMissError` from synthesis.
    """
    result = query_data(question, param, dsn=dsn, realm=realm, embedder=embedder, client=client)
    completion = client.complete(synthesis_messages(question, result.context, param), purpose="synthesis", json_mode=False)
    return completion.text, result


def synthesis_messages(question: str, context: str, param: QueryParam | None = None) -> list[dict[str, str]]:
    """The chat messages of the synthesis call (OpenAI format); a valid-time or belief-time filter is
    stated to the model beside the question, so it answers for that date."""
    when = []
    if param is not None and param.as_of:
        when.append(f"as of {param.as_of} (valid time)")
    if param is not None and isinstance(param.as_believed_at, datetime):
        when.append(f"as the graph believed at {param.as_believed_at.isoformat()}")
    asked = question + (f"\n(Answer {' and '.join(when)}.)" if when else "")
    return [
        {"role": "system", "content": SYNTHESIS_SYSTEM},
        {"role": "user", "content": SYNTHESIS_USER.format(question=asked, context=context)},
    ]


def check_mode(mode: str) -> None:
    """Raise :class:`QueryError` unless ``mode`` is one of :data:`MODES` (§7.1)."""
    if mode not in MODES:
        raise QueryError(f"unknown query mode {mode!r}; expected one of {', '.join(MODES)}")


# -- conditioning ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Probe:
    """One (sub-)question and its conditioning (§7.2)."""

    text: str
    keywords: kw.Keywords

    @classmethod
    def conditioned(cls, text: str, param: QueryParam, client: ModelClient | None) -> _Probe:
        if param.keywords == "off" or param.mode in ("naive", "bypass"):
            return cls(text, kw.Keywords(source="off"))
        return cls(text, kw.extract(text, client if param.keywords == "model" else None))

    @property
    def entity_text(self) -> str:
        """The question with its low-level keywords appended: the entity query text."""
        return " ".join([self.text, *self.keywords.low_level])

    @property
    def global_text(self) -> str:
        """The question with its high-level keywords appended: the ranked-relation and community text."""
        return " ".join([self.text, *self.keywords.high_level])

    @property
    def fulltext(self) -> str:
        """The lexical channel's ``websearch_to_tsquery`` text: the low-level keywords (the exact names and
        terms it exists for, §7.3), else the high-level ones, else the question's words. Themes are the
        similarity and ranking channels' work; on a large graph they match thousands of relations."""
        terms = list(self.keywords.low_level) or list(self.keywords.high_level) or self.text.split()
        return channels.fulltext_query(terms)

    def texts(self, evidence: frozenset[str]) -> list[str]:
        out = [self.text]
        if "entities" in evidence:
            out.append(self.entity_text)
        if evidence & {"ranked", "communities"}:
            out.append(self.global_text)
        return out


# -- retrieval ------------------------------------------------------------------------------------


def _check_realm(conn: psycopg.Connection, realm: str, embedder: Embedder) -> None:
    registered = retrieval.realm_embedding(conn, realm)
    if registered is None:
        raise QueryError(f"realm {realm!r} does not exist (it has never been indexed)")
    if registered != (embedder.model, embedder.dim):
        raise SchemaMismatchError(
            f"realm {realm!r} embedding", f"{registered[0]} ({registered[1]})", f"{embedder.model} ({embedder.dim})",
            "query with the embedding model the realm was indexed with",
        )


def _embed_all(embedder: Embedder, texts: list[str]) -> dict[str, np.ndarray]:
    unique = list(dict.fromkeys(texts))
    out: dict[str, np.ndarray] = {}
    for text, raw in zip(unique, embedder.embed(unique)):
        vec = np.asarray(raw, dtype=np.float32)
        if vec.shape != (embedder.dim,):
            raise SchemaMismatchError(f"embedding model {embedder.model}", embedder.dim, int(vec.shape[0]))
        out[text] = vec
    return out


@dataclass
class _Found:
    entities: list[dict[str, Any]] = field(default_factory=list)
    chunks: list[dict[str, Any]] = field(default_factory=list)
    relations: list[dict[str, Any]] = field(default_factory=list)
    communities: list[dict[str, Any]] = field(default_factory=list)
    channels: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def _retrieve(conn: psycopg.Connection, realm: str, p: QueryParam, probe: _Probe, vecs: dict[str, np.ndarray]) -> _Found:
    """Consult exactly the evidence of ``EVIDENCE[p.mode]`` for one probe; the caller holds the transaction."""
    ev = EVIDENCE[p.mode]
    temporal, types, space = p.temporal, p.relation_types, p.space
    out = _Found()
    if "entities" in ev:
        seeds = retrieval.entity_search(conn, realm, space, vecs[probe.entity_text], p.top_k, temporal=temporal)
        out.entities = [_entity(row) for row in seeds]
        out.channels["entities"] = len(seeds)
    seed_ids = [e["id"] for e in out.entities]
    if "chunks" in ev:
        found = retrieval.chunk_search(conn, realm, space, vecs[probe.text], p.chunk_top_k, temporal=temporal)
        out.chunks = [{**row, "via": "vector", "mentions": None} for row in found]
        out.channels["chunks"] = len(found)
    if "mentions" in ev:
        mentioned = retrieval.mention_chunks(conn, realm, space, seed_ids, p.chunk_top_k,
                                             exclude=[c["id"] for c in out.chunks], temporal=temporal)
        out.chunks += [{**row, "via": "mention", "score": None} for row in mentioned]
        out.channels["mentions"] = len(mentioned)
    lists: dict[str, list[dict[str, Any]]] = {}
    if "traversal" in ev and "traversal" in p.relation_channels:
        walked = retrieval.traverse(conn, realm, space, seed_ids, max_hops=p.max_hops,
                                    max_relation_edges=p.max_relation_edges, temporal=temporal, relation_types=types)
        names = retrieval.entity_names(conn, realm, [i for r in walked for i in (r["source_id"], r["target_id"])])
        lists["traversal"] = [{**r, "subject": names.get(r["source_id"], f"#{r['source_id']}"),
                               "object": names.get(r["target_id"], f"#{r['target_id']}")} for r in walked]
    if "similarity" in ev and "similarity" in p.relation_channels:
        lists["similarity"] = channels.relation_similarity(conn, realm, space, vecs[probe.text], p.relation_top_k,
                                                           temporal=temporal, relation_types=types)
    if "lexical" in ev and "lexical" in p.relation_channels:
        lists["lexical"] = channels.relation_fulltext(conn, realm, space, probe.fulltext, p.relation_top_k,
                                                      temporal=temporal, relation_types=types)
    if "ranked" in ev:
        lists["ranked"] = channels.relation_similarity(conn, realm, space, vecs[probe.global_text], p.relation_top_k,
                                                       temporal=temporal, relation_types=types)
        if not lists["ranked"]:  # no relation embedding: keyword overlap, then corroboration weight (§7.2)
            terms = [*probe.keywords.high_level, *probe.keywords.low_level] or probe.text.split()
            lists["ranked"] = channels.relation_keyword_overlap(conn, realm, space, terms, p.relation_top_k,
                                                                temporal=temporal, relation_types=types)
    out.channels.update({name: len(rows) for name, rows in lists.items()})
    out.relations = _fuse(conn, realm, p, lists, seed_ids)
    if "communities" in ev:
        _communities(conn, realm, p, vecs[probe.global_text], out)
    return out


def _fuse(conn: psycopg.Connection, realm: str, p: QueryParam, lists: dict[str, list[dict[str, Any]]],
          seed_ids: list[int]) -> list[dict[str, Any]]:
    """Fuse the relation channels (§7.3), then the optional diversification (§7.4)."""
    if not lists:
        return []
    fused = fuse.rrf(lists, k=p.rrf_k) if p.fusion == "rrf" else fuse.quota(lists, share=p.quota_share)
    if p.mmr and len(fused) > 1:
        fused = fuse.mmr(fused, channels.relation_embeddings(conn, realm, [r["id"] for r in fused]), lam=p.mmr_lambda)
    if p.node_distance_rerank and seed_ids:
        ends = {e for r in fused if "traversal" not in r["ranks"] for e in (r["source_id"], r["target_id"])}
        distances = channels.entity_distances(conn, realm, p.space, seed_ids, ends, max_depth=p.max_hops + 1,
                                              temporal=p.temporal, relation_types=p.relation_types)
        fused = fuse.node_distance_rerank([{**r, "subject_id": r["source_id"], "object_id": r["target_id"]}
                                           for r in fused], distances)
    return [_relation(row) for row in fused]


def _communities(conn: psycopg.Connection, realm: str, p: QueryParam, qvec: np.ndarray, out: _Found) -> None:
    """Community reports by the similarity/rating/size blend; a staleness warning (§6, §7.1)."""
    found = channels.community_search(conn, realm, p.space, qvec, p.community_top_k * 3, temporal=p.temporal)
    out.channels["communities"] = len(found)
    out.communities = fuse.rank_communities(found, k=p.community_top_k, w_similarity=p.community_w_similarity,
                                            w_rating=p.community_w_rating, w_size=p.community_w_size)
    if not out.communities:
        out.warnings.append(f"no community report in space {p.space!r}: relations are ranked instead")
        return
    spaces = sorted({c["space"] for c in out.communities})
    written = channels.last_graph_write(conn, realm, spaces)
    for space in spaces:
        oldest = min(c["built_at"] for c in out.communities if c["space"] == space)
        if space in written and oldest < written[space]:
            out.warnings.append(
                f"community reports of space {space!r} are stale: the oldest was built {oldest.isoformat()}, "
                f"the graph was last written {written[space].isoformat()}; rebuild the communities")


def _entity(row: dict[str, Any]) -> dict[str, Any]:
    return {k: row[k] for k in ("id", "space", "name", "entity_type", "description", "score")}


def _relation(row: dict[str, Any]) -> dict[str, Any]:
    keys = ("id", "space", "subject", "predicate", "object", "description", "negated", "valid_from", "valid_to",
            "weight", "confidence", "t_created", "t_expired", "superseded_by")
    out = {k: row[k] for k in keys}
    out.update(subject_id=row["source_id"], object_id=row["target_id"], superseded=bool(row["superseded"]),
               hop=row["hop"], channel=row["channel"], ranks=dict(row["ranks"]), score=row["score"])
    if row.get("hop_resolved"):
        out["hop_resolved"] = True
    return out


def _merge(found: list[_Found], result: QueryResult) -> None:
    """One probe's evidence as is; several (decomposed) interleaved round-robin, de-duplicated."""
    def by_id(row: dict[str, Any]) -> Any:
        return row["id"]

    result.entities = fuse.interleave([f.entities for f in found], by_id)
    result.relations = fuse.interleave([f.relations for f in found], fuse.triple_key)
    result.communities = fuse.interleave([f.communities for f in found], by_id)
    vector = fuse.interleave([[c for c in f.chunks if c["via"] == "vector"] for f in found], by_id)
    seen = {c["id"] for c in vector}
    mention = [c for c in fuse.interleave([[c for c in f.chunks if c["via"] == "mention"] for f in found], by_id)
               if c["id"] not in seen]
    result.chunks = [{**c, "rank": rank, "ref": rank} for rank, c in enumerate(vector + mention, 1)]
    for rows in (result.entities, result.relations, result.communities):
        for rank, row in enumerate(rows, 1):
            row["rank"] = rank
    for f in found:
        for name, n in f.channels.items():
            result.channels[name] = result.channels.get(name, 0) + n
        result.warnings += [w for w in f.warnings if w not in result.warnings]
    for warning in result.warnings:
        logger.warning("query: %s", warning)


def _assemble(result: QueryResult) -> None:
    """Build ``result.context`` and ``result.assembly`` (§7.5, §8.3) and log the report."""
    p = result.param
    chunk_keys = ("id", "space", "doc_key", "title", "chunk_index", "text", "t_created", "via", "score", "mentions",
                  "rank", "ref")
    result.chunks = [{k: c[k] for k in chunk_keys} for c in result.chunks]
    built = assemble(communities=result.communities, chunks=result.chunks, entities=result.entities,
                     relations=result.relations, caps=p.caps, validity=p.render_relation_validity)
    believed = p.as_believed_at.isoformat() if isinstance(p.as_believed_at, datetime) else p.as_believed_at
    report = built.report
    report["filters"] = {"as_of": p.as_of, "as_believed_at": believed, "include_superseded": p.include_superseded,
                         "relation_types": list(p.relation_types) if p.relation_types is not None else None}
    result.context, result.assembly = built.context, report
    logger.info(
        "query assembly mode=%s space=%s as_of=%s as_believed_at=%s include_superseded=%s keywords=%s %s channels=%s",
        p.mode, p.space, p.as_of or "-", believed or "-", p.include_superseded, result.keywords.get("source", "-"),
        summary(report), ",".join(f"{k}:{v}" for k, v in result.channels.items()) or "-",
    )


__all__ = [
    "BLOCKS", "EVIDENCE", "MODES", "RELATION_CHANNELS", "Fusion", "KeywordMode", "Mode", "QueryParam", "QueryResult",
    "RelationChannel", "check_mode", "query", "query_data", "render_relation", "render_validity", "synthesis_messages",
]
