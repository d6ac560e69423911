"""The query path: retrieval modes, context assembly and synthesis (paper §7, §3.3, §5.4, §8.3).

:func:`query_data` retrieves and assembles; :func:`query` adds synthesis through the injected
:class:`~pgrag_dag.llm.ModelClient`. This depth implements three of the six modes of Table 3:

- ``mix``: entity vector search (non-dormant seeds) + chunk vector search + traversal up to
  ``max_hops`` from the seeds (every step scoped to the space; dormant relations, relations not
  valid at ``as_of``, not believed at ``as_believed_at`` and — unless ``include_superseded`` —
  superseded relations never walked) + mention expansion (chunks that mention the seeds, ranked by
  how many seeds they mention);
- ``naive``: chunk vector search only;
- ``bypass``: no retrieval; the question goes to the model with an empty context.

``local``, ``global`` and ``hybrid`` are valid names that raise :class:`QueryError` until built;
any other name raises :class:`QueryError` too — a query never silently runs in another mode (§7.1).

Temporal filters (§5.3–5.4) compose and are applied inside every traversal step, never to the
walk's result (§7.2): ``as_of`` keeps relations whose validity interval overlaps the date (undated
relations always match); ``as_believed_at`` reconstructs the state of belief at an instant —
relations created by then and not yet retracted, chunks indexed by then — and judges supersession
by ``t_expired`` at that instant; ``include_superseded`` keeps the history too.

The context has four blocks in this order — community reports, passages, entities, relations —
and nothing retrieved is dropped by default (§7.5, §8.3). The assembly report records, per block,
the characters retrieved and the characters placed in the prompt, and is logged.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any, Literal, get_args

import numpy as np
import psycopg

from pgrag_dag.config import RetrievalSettings
from pgrag_dag.embedding import Embedder
from pgrag_dag.errors import QueryError, SchemaMismatchError
from pgrag_dag.llm import ModelClient
from pgrag_dag.names import WILDCARD_SPACE, validate_realm, validate_space
from pgrag_dag.prompts import SYNTHESIS_SYSTEM, SYNTHESIS_USER
from pgrag_dag.store import db, retrieval

logger = logging.getLogger(__name__)

Mode = Literal["mix", "local", "global", "hybrid", "naive", "bypass"]
MODES: tuple[str, ...] = get_args(Mode)
IMPLEMENTED_MODES: frozenset[str] = frozenset({"mix", "naive", "bypass"})
BLOCKS: tuple[str, ...] = ("communities", "passages", "entities", "relations")
"""Context blocks, in prompt order (§7.5)."""

_BLOCK_TITLES = {
    "communities": "Community reports",
    "passages": "Document passages",
    "entities": "Entities",
    "relations": "Relations",
}


@dataclass(frozen=True, kw_only=True)
class QueryParam:
    """How to answer one question (§7.1–7.2, §5.4). Keyword-only; validated on construction.

    Args:
        space: the space to read, or ``"*"`` to read across every space of the realm (read-only).
        mode: one of :data:`MODES`; ``mix`` is the default.
        top_k: entities matched by vector search (traversal seeds).
        chunk_top_k: chunks by vector search; mention expansion adds up to as many again.
        max_hops: traversal depth ``k`` (0 disables traversal).
        max_relation_edges: relations any single matched entity may contribute.
        include_superseded: walk and return superseded relations too (§5.2); they are rendered
            ``[superseded]``.
        as_of: valid time (§5.4) — a date ``YYYY``, ``YYYY-MM`` or ``YYYY-MM-DD``; only relations
            whose validity interval overlaps it are walked and returned (``2016`` covers
            2016-01-01..2016-12-31; undated relations always match). ``None``: no filter.
        as_believed_at: belief time (§5.3) — an ISO-8601 instant (string or :class:`datetime`;
            naive means UTC; normalised to an aware ``datetime`` on construction). Only relations
            created at or before it (or undated in belief time) and not retracted by it
            (``t_expired`` later or null) are walked — an edge superseded after it is kept — and
            only chunks indexed at or before it are retrieved. ``None``: the current state.

    Raises:
        QueryError: unknown mode, a negative count, an ``as_of`` that is not a ``YYYY``,
            ``YYYY-MM`` or ``YYYY-MM-DD`` calendar date, or an ``as_believed_at`` that is not an
            ISO-8601 instant.
        InvalidNameError: a space name that may not reach SQL.
    """

    space: str
    mode: Mode = "mix"
    top_k: int = 10
    chunk_top_k: int = 8
    max_hops: int = 2
    max_relation_edges: int = 50
    include_superseded: bool = False
    as_of: str | None = None
    as_believed_at: str | datetime | None = None

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise QueryError(f"unknown query mode {self.mode!r}; expected one of {', '.join(MODES)}")
        validate_space(self.space, for_write=False)
        for name in ("top_k", "chunk_top_k", "max_hops", "max_relation_edges"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise QueryError(f"{name} must be a non-negative integer, got {value!r}")
        if not isinstance(self.include_superseded, bool):
            raise QueryError(f"include_superseded must be a bool, got {self.include_superseded!r}")
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

    @classmethod
    def from_settings(cls, settings: RetrievalSettings, *, space: str, **overrides: Any) -> QueryParam:
        """Defaults from the configured :class:`RetrievalSettings`, then ``overrides``."""
        names = {f.name for f in fields(cls)}
        values = {k: v for k, v in settings.model_dump().items() if k in names}
        return cls(space=space, **{**values, **overrides})


@dataclass
class QueryResult:
    """What :func:`query_data` retrieved and what reached the prompt.

    Attributes:
        question: the question as asked.
        param: the :class:`QueryParam` used.
        entities: matched entities, nearest first — ``id, space, name, entity_type, description,
            score`` (cosine similarity), ``rank`` (1-based).
        relations: ``id, space, subject, predicate, object, subject_id, object_id, description,
            negated, valid_from, valid_to, weight, confidence, t_created, t_expired, superseded_by``
            (the current superseder, if any), ``superseded`` (whether superseded in the state read:
            at ``as_believed_at`` when set, else now), ``hop, channel`` (``"traversal"``), ``rank``;
            hop-major, newest first within a hop.
        chunks: ``id, space, doc_key, title, chunk_index, text, t_created, via`` (``"vector"`` | ``"mention"``),
            ``rank``, ``score`` (cosine similarity, ``None`` via mention), ``mentions`` (matched
            entities the chunk mentions, ``None`` via vector), ``ref`` (its ``[n]`` in the prompt).
        communities: community reports (``title, report``); empty for the modes built so far.
        assembly: per block of :data:`BLOCKS` — ``items_retrieved``, ``items_placed``,
            ``chars_retrieved``, ``chars_placed`` (characters) — plus ``total``, and ``filters``:
            the temporal filters read under — ``as_of`` (the date or ``None``), ``as_believed_at``
            (ISO-8601 UTC or ``None``), ``include_superseded``.
        context: the assembled context text sent to the model.
    """

    question: str
    param: QueryParam
    entities: list[dict[str, Any]] = field(default_factory=list)
    relations: list[dict[str, Any]] = field(default_factory=list)
    chunks: list[dict[str, Any]] = field(default_factory=list)
    communities: list[dict[str, Any]] = field(default_factory=list)
    assembly: dict[str, dict[str, Any]] = field(default_factory=dict)
    context: str = ""


def query_data(question: str, param: QueryParam, *, dsn: str, realm: str, embedder: Embedder) -> QueryResult:
    """Retrieve evidence for ``question`` from ``realm`` and assemble the context (§7.2, §7.5).

    The question is embedded once by ``embedder`` (one float32 vector of the realm's width); every
    read runs in one read-only transaction. Returns a :class:`QueryResult`.

    Raises:
        QueryError: a mode not implemented yet, an empty question, or a realm or space that does not exist.
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
            qvec = _embed(embedder, question)
            with conn.transaction():
                _retrieve(conn, realm, param, qvec, result)
    _assemble(result)
    return result


def query(
    question: str, param: QueryParam, *, dsn: str, realm: str, embedder: Embedder, client: ModelClient
) -> tuple[str, QueryResult]:
    """Answer ``question``: :func:`query_data`, then one synthesis call (§7.5).

    The model receives :data:`~pgrag_dag.prompts.SYNTHESIS_SYSTEM` and
    :data:`~pgrag_dag.prompts.SYNTHESIS_USER` filled with the question and the assembled context,
    through ``client.complete(..., purpose="synthesis", json_mode=False)``. Returns
    ``(answer text, QueryResult)``.

    Raises: as :func:`query_data`, plus :class:`ModelError` / :class:`ReplayMissError` from the client.
    """
    result = query_data(question, param, dsn=dsn, realm=realm, embedder=embedder)
    completion = client.complete(synthesis_messages(question, result.context, param), purpose="synthesis", json_mode=False)
    return completion.text, result


def synthesis_messages(question: str, context: str, param: QueryParam | None = None) -> list[dict[str, str]]:
    """The chat messages of the synthesis call (OpenAI format); a valid-time or belief-time filter is
    stated to the model beside the question, so it answers for that date."""
    when = []
    if param is not None and param.as_of:
        when.append(f"as of {param.as_of} (valid time)")
    if param is not None and param.as_believed_at:
        when.append(f"as the graph believed at {param.as_believed_at.isoformat()}")
    asked = question + (f"\n(Answer {' and '.join(when)}.)" if when else "")
    return [
        {"role": "system", "content": SYNTHESIS_SYSTEM},
        {"role": "user", "content": SYNTHESIS_USER.format(question=asked, context=context)},
    ]


def check_mode(mode: str) -> None:
    """Raise :class:`QueryError` unless ``mode`` is known and implemented (§7.1)."""
    if mode not in MODES:
        raise QueryError(f"unknown query mode {mode!r}; available: {', '.join(sorted(IMPLEMENTED_MODES))}"
                         f" (planned: {', '.join(m for m in MODES if m not in IMPLEMENTED_MODES)})")
    if mode not in IMPLEMENTED_MODES:
        raise QueryError(
            f"query mode {mode!r} is not implemented yet; available: {', '.join(sorted(IMPLEMENTED_MODES))}"
        )


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


def _embed(embedder: Embedder, text: str) -> np.ndarray:
    vec = np.asarray(embedder.embed([text])[0], dtype=np.float32)
    if vec.shape != (embedder.dim,):
        raise SchemaMismatchError(f"embedding model {embedder.model}", embedder.dim, int(vec.shape[0]))
    return vec


def _retrieve(conn: psycopg.Connection, realm: str, p: QueryParam, qvec: np.ndarray, out: QueryResult) -> None:
    """Fill ``out`` for mode ``mix`` or ``naive``; the caller holds the transaction."""
    temporal = p.temporal
    found = retrieval.chunk_search(conn, realm, p.space, qvec, p.chunk_top_k, temporal=temporal)
    chunks = [{**row, "via": "vector", "mentions": None} for row in found]
    if p.mode == "mix":
        seeds = retrieval.entity_search(conn, realm, p.space, qvec, p.top_k)
        out.entities = [_entity(row, rank) for rank, row in enumerate(seeds, 1)]
        seed_ids = [e["id"] for e in out.entities]
        walked = retrieval.traverse(
            conn, realm, p.space, seed_ids, max_hops=p.max_hops,
            max_relation_edges=p.max_relation_edges, temporal=temporal,
        )
        names = retrieval.entity_names(conn, realm, [i for r in walked for i in (r["source_id"], r["target_id"])])
        out.relations = [_relation(row, names, rank, channel="traversal") for rank, row in enumerate(walked, 1)]
        mentioned = retrieval.mention_chunks(
            conn, realm, p.space, seed_ids, p.chunk_top_k, exclude=[c["id"] for c in chunks], temporal=temporal
        )
        chunks += [{**row, "via": "mention", "score": None} for row in mentioned]
    out.chunks = [_chunk(row, rank) for rank, row in enumerate(chunks, 1)]


def _entity(row: dict[str, Any], rank: int) -> dict[str, Any]:
    keys = ("id", "space", "name", "entity_type", "description", "score")
    return {**{k: row[k] for k in keys}, "rank": rank}


def _relation(row: dict[str, Any], names: dict[int, str], rank: int, *, channel: str) -> dict[str, Any]:
    return {
        "id": row["id"], "space": row["space"],
        "subject": names.get(row["source_id"], f"#{row['source_id']}"), "predicate": row["predicate"],
        "object": names.get(row["target_id"], f"#{row['target_id']}"),
        "subject_id": row["source_id"], "object_id": row["target_id"], "description": row["description"],
        "negated": row["negated"], "valid_from": row["valid_from"], "valid_to": row["valid_to"],
        "weight": row["weight"], "confidence": row["confidence"], "t_created": row["t_created"],
        "t_expired": row["t_expired"], "superseded_by": row["superseded_by"], "superseded": bool(row["superseded"]),
        "hop": row["hop"], "channel": channel, "rank": rank,
    }


def _chunk(row: dict[str, Any], rank: int) -> dict[str, Any]:
    keys = ("id", "space", "doc_key", "title", "chunk_index", "text", "t_created", "via", "score", "mentions")
    return {**{k: row[k] for k in keys}, "rank": rank, "ref": rank}


# -- rendering and assembly -----------------------------------------------------------------------


def render_relation(rel: dict[str, Any]) -> str:
    """One relation as a prompt line (§7.5).

    ``(A) --[p]--> (B)``, or ``(A) --[NOT p]--> (B)`` for a denial; validity follows as
    ``[from X]``, ``[until Y]`` or ``[valid X to Y]``; a superseded relation (only present with
    ``include_superseded``) is marked ``[superseded]`` — judged by ``superseded`` when present (the
    state at ``as_believed_at``: an edge superseded only later is not marked), else by
    ``superseded_by``; the description follows a colon.
    """
    predicate = f"NOT {rel['predicate']}" if rel["negated"] else rel["predicate"]
    line = f"({rel['subject']}) --[{predicate}]--> ({rel['object']})"
    validity = render_validity(rel.get("valid_from"), rel.get("valid_to"))
    if validity:
        line += f" {validity}"
    superseded = rel["superseded"] if "superseded" in rel else rel.get("superseded_by") is not None
    if superseded:
        line += " [superseded]"
    if rel.get("description"):
        line += f": {rel['description']}"
    return line


def render_validity(valid_from: str | None, valid_to: str | None) -> str:
    """``[from X]``, ``[until Y]``, ``[valid X to Y]``, or ``""`` when no period was stated (§5.1)."""
    if valid_from and valid_to:
        return f"[valid {valid_from} to {valid_to}]"
    if valid_from:
        return f"[from {valid_from}]"
    if valid_to:
        return f"[until {valid_to}]"
    return ""


def _render_entity(ent: dict[str, Any]) -> str:
    line = f"- {ent['name']} ({ent['entity_type']})"
    return line + (f": {ent['description']}" if ent.get("description") else "")


def _render_community(com: dict[str, Any]) -> str:
    return f"### {com.get('title', '')}\n{com.get('report', '')}".strip()


def _assemble(result: QueryResult) -> None:
    """Build ``result.context`` and ``result.assembly``; nothing retrieved is dropped (§7.5, §8.3).

    Characters are counted over each item's rendered evidence text (report, passage text, entity
    line, relation line), excluding headers, passage numbers and the reference list.
    """
    items: dict[str, list[str]] = {
        "communities": [_render_community(c) for c in result.communities],
        "passages": [c["text"] for c in result.chunks],
        "entities": [_render_entity(e) for e in result.entities],
        "relations": [render_relation(r) for r in result.relations],
    }
    sections: list[str] = []
    report: dict[str, dict[str, int]] = {}
    for block in BLOCKS:
        retrieved = items[block]
        placed = list(retrieved)  # no per-block cap by default: every retrieved item is placed whole
        report[block] = {
            "items_retrieved": len(retrieved), "items_placed": len(placed),
            "chars_retrieved": sum(map(len, retrieved)), "chars_placed": sum(map(len, placed)),
        }
        if placed:
            sections.append(_section(block, placed, result.chunks))
    report["total"] = {k: sum(report[b][k] for b in BLOCKS) for k in report[BLOCKS[0]]}
    p = result.param
    believed = p.as_believed_at.isoformat() if isinstance(p.as_believed_at, datetime) else p.as_believed_at
    report["filters"] = {"as_of": p.as_of, "as_believed_at": believed, "include_superseded": p.include_superseded}
    result.context = "\n\n".join(sections)
    result.assembly = report
    logger.info(
        "query assembly mode=%s space=%s as_of=%s as_believed_at=%s include_superseded=%s %s",
        p.mode, p.space, p.as_of or "-", believed or "-", p.include_superseded,
        " ".join(f"{b}={report[b]['chars_placed']}/{report[b]['chars_retrieved']}chars" for b in BLOCKS),
    )


def _section(block: str, placed: list[str], chunks: list[dict[str, Any]]) -> str:
    header = f"-----{_BLOCK_TITLES[block]}-----"
    if block != "passages":
        return "\n".join([header, *placed])
    body = [f"[{c['ref']}] {text}" for c, text in zip(chunks, placed)]
    refs = [f"[{c['ref']}] {c['title']} ({c['doc_key']}, chunk {c['chunk_index']})" for c in chunks[: len(placed)]]
    return "\n\n".join([header, *body, "References:\n" + "\n".join(refs)])


__all__ = [
    "BLOCKS", "IMPLEMENTED_MODES", "MODES", "Mode", "QueryParam", "QueryResult",
    "check_mode", "query", "query_data", "render_relation", "render_validity", "synthesis_messages",
]
