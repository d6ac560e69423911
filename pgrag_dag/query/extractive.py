"""Answers a user can see without a model (issue 26 item 4): the offline stand-in for synthesis (paper §7.5).

With no model to write an answer (``llm.models: [replay]`` and a question never recorded), what retrieval
found is still the answer there is — but a passage's first characters rarely show whether it answers the
question. :func:`extractive_answer` picks, in every passage the context numbered, the sentences closest to
the question by the query's own embedder (question embedded as ``"query"``, sentences as ``"passage"``,
cosine), and orders the passages by their best sentence, so the likeliest answer comes first.
:func:`extractive_lines` renders those rows; :func:`report_lines` renders what global mode found instead of
passages — community reports and ranked relations (§6, §7.1). ``pgrag query`` prints them when no model
answer is available; from Python they work on any :class:`~pgrag_dag.query_param.QueryResult`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from pgrag_dag.extract.cooccurrence import sentences_of
from pgrag_dag.ingest.splitting import unwrap_hard_wraps
from pgrag_dag.providers.embedding import Embedder
from pgrag_dag.query.assembly import clip, render_relation
from pgrag_dag.query.citations import sources
from pgrag_dag.query_param import QueryResult

SENTENCES_PER_CHUNK = 16
"""Candidate sentences read from one passage, its first ones: bounds the embedder's work to at most
``16 × passages`` short texts (a 2,000-character chunk holds about that many sentences)."""

MIN_WORDS = 3
"""Pieces of fewer words (a heading line, a caption) are no candidates while the passage has a longer one:
a bare name scores high against a question naming it, yet answers nothing."""

LIKELY_MARGIN = 0.02
"""Passages whose best sentence is within this much cosine similarity of the best passage's are marked
``likely`` with it (the same sentence in two overlapping chunks scores the same)."""

LIKELY_FLOOR = 0.3
"""No passage is marked ``likely`` when its best sentence is less similar than this to the question (the
local MiniLM model's cosine; on the earnings-call transcripts a question about nothing in them scored
0.22): nothing answers closely, and the mark would say it does."""

_SPEAKER = re.compile(r"^[A-Z][A-Z .'’\-]{1,40}:\s+")
"""A transcript's speaker label (``AMY HOOD: ``), not counted as words of the sentence it opens."""

SENTENCE_CHARS = 400
"""Characters of a sentence as printed (clipped at a word); the full sentence is in the row."""

FINDINGS_SHOWN = 3
RELATIONS_SHOWN = 5
"""Relations listed after the passages when a query found both (the rest are in ``--json``)."""
"""Findings of a community report :func:`report_lines` prints under its summary."""


def extractive_answer(
    result: QueryResult,
    embedder: Embedder,
    k: int = 2,
    *,
    max_sentences: int = SENTENCES_PER_CHUNK,
    margin: float = LIKELY_MARGIN,
) -> list[dict[str, Any]]:
    """The ``k`` sentences of each passage of ``result`` closest to its question, passages best first.

    The passages are those the context numbered (:func:`~pgrag_dag.query.citations.sources`: placed in the
    prompt, under their ``[n]``). Each is split with :func:`pgrag_dag.extract.cooccurrence.sentences_of`;
    its first ``max_sentences`` pieces of at least :data:`MIN_WORDS` words are the candidates (all its
    pieces when none is that long; the whole text when it has no sentence end). The question is embedded
    once as ``"query"``, the distinct candidates of all passages in one call as ``"passage"`` — two
    ``embedder`` calls in all, none when no passage was placed (``embedder`` should be the one the query
    used, so the vectors mean what the realm's do) — and each candidate scored by cosine similarity.

    Returns one row per passage with text, ordered by ``score`` (descending), then ``ref``: ``ref`` (the
    ``[n]``), ``doc_key``, ``title``, ``chunk_index``, ``space``; ``sentences`` — up to ``k`` dicts
    ``{"text", "score", "position"}`` (the sentence with whitespace collapsed, its cosine similarity in
    [-1, 1], its 0-based index among the passage's candidates), best first; ``score`` — the best
    sentence's similarity; ``likely`` — ``True`` for the passages whose score is within ``margin`` of the
    first row's and at least :data:`LIKELY_FLOOR` (none when nothing scores that close). ``[]`` when no
    passage was placed (global and bypass modes).

    Raises:
        ValueError: ``k`` or ``max_sentences`` below 1, or ``margin`` negative.
        ModelError: the embedder failed within its deadline (a litellm embedder names its model).
    """
    if k < 1 or max_sentences < 1 or margin < 0:
        raise ValueError(
            f"need k >= 1, max_sentences >= 1 and margin >= 0 (got {k}, {max_sentences}, {margin})"
        )
    placed = [(s, c) for s, c in zip(sources(result), result.chunks) if str(c["text"]).strip()]
    if not placed:
        return []
    candidates = [_candidates(str(c["text"]), max_sentences) for _, c in placed]
    unique = list(dict.fromkeys(t for texts in candidates for t in texts))
    question = _unit(embedder.embed([result.question], "query"))[0]
    similarity: dict[str, float] = dict(
        zip(unique, (_unit(embedder.embed(unique, "passage")) @ question).tolist())
    )
    rows: list[dict[str, Any]] = []
    for (source, _), texts in zip(placed, candidates):
        best = sorted(range(len(texts)), key=lambda i: (-similarity[texts[i]], i))[:k]
        rows.append(
            {
                **{key: source[key] for key in ("ref", "doc_key", "title", "chunk_index", "space")},
                "sentences": [{"text": texts[i], "score": similarity[texts[i]], "position": i} for i in best],
                "score": similarity[texts[best[0]]],
            }
        )
    rows.sort(key=lambda r: (-r["score"], r["ref"]))
    for row in rows:
        row["likely"] = row["score"] >= max(rows[0]["score"] - margin, LIKELY_FLOOR)
    return rows


def _candidates(text: str, limit: int) -> list[str]:
    """The passage's candidate sentences (see :func:`extractive_answer`), whitespace collapsed."""
    pieces = [" ".join(s.split()) for s in sentences_of(unwrap_hard_wraps(text))]
    pieces = [p for p in pieces if p]
    long = [p for p in pieces if len(_SPEAKER.sub("", p).split()) >= MIN_WORDS]
    return (long or pieces or [" ".join(text.split())])[:limit]


def _unit(vectors: Sequence[np.ndarray]) -> np.ndarray:
    """Rows of ``vectors`` (shape ``(n, dim)``) scaled to length 1; a zero vector stays zero."""
    m = np.asarray(np.stack([np.asarray(v, dtype=np.float32) for v in vectors]), dtype=np.float32)
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    return np.divide(m, norms, out=np.zeros_like(m), where=norms > 0)


SOURCES_HEADER = "Sources, closest sentence first ([n]: the passage's number in the context):"
"""The first line of :func:`extractive_lines`: the rows are ordered by their best sentence's similarity, so
the context numbers ``[n]`` (retrieval's order) need not ascend."""


def extractive_lines(rows: Sequence[Mapping[str, Any]]) -> Iterator[str]:
    """:data:`SOURCES_HEADER` then per row of :func:`extractive_answer` a line
    ``[n] doc_key · title · chunk i · similarity 0.71`` (``· best match`` when ``likely``) and each of its
    sentences on an indented line (:data:`SENTENCE_CHARS` at most); nothing for no rows."""
    if not rows:
        return
    yield SOURCES_HEADER
    for row in rows:
        title = f" · {row['title']}" if row["title"] and row["title"] != row["doc_key"] else ""
        mark = " · best match" if row["likely"] else ""
        where = f"{row['doc_key']}{title} · chunk {row['chunk_index']}"
        yield f"[{row['ref']}] {where} · similarity {row['score']:.2f}{mark}"
        for sentence in row["sentences"]:
            yield f"    {clip(sentence['text'], SENTENCE_CHARS)}"


def report_lines(result: QueryResult) -> Iterator[str]:
    """What global (and hybrid) mode found besides passages, for a reader with no model answer.

    ``Community reports:`` then per report of ``result.communities`` (best first) a line
    ``title · rating r · level l``, its summary (:data:`SENTENCE_CHARS`) and its first
    :data:`FINDINGS_SHOWN` findings as ``- ...`` lines; then, only when ``result`` placed no passage,
    ``Relations:`` and ``result.relations`` in rank order, one numbered
    :func:`~pgrag_dag.query.assembly.render_relation` line each, with its corroboration ``weight``.
    Nothing when there is neither."""
    if result.communities:
        yield "Community reports:"
        for com in result.communities:
            rating = float(com.get("rating") or 0)
            yield f"{com.get('title') or '(untitled)'} · rating {rating:g} · level {com.get('level')}"
            if com.get("summary"):
                yield f"    {clip(' '.join(str(com['summary']).split()), SENTENCE_CHARS)}"
            for finding in _findings(com.get("findings"))[:FINDINGS_SHOWN]:
                yield f"    - {clip(finding, SENTENCE_CHARS)}"
    if result.relations and not sources(result):
        yield "Relations:"
        yield from relation_lines(result, len(result.relations))


def relation_lines(result: QueryResult, limit: int) -> Iterator[str]:
    """The first ``limit`` of ``result.relations`` in rank order, one numbered
    :func:`~pgrag_dag.query.assembly.render_relation` line each with its corroboration ``weight`` — a fact
    the graph holds ("(Amy Hood) --[cfo_of]--> (Microsoft)") that no passage may state as plainly."""
    validity = result.param.render_relation_validity
    for i, rel in enumerate(result.relations[:limit], 1):
        yield f"{i:>3}. {render_relation(rel, validity=validity)} · weight {rel.get('weight')}"


def _findings(raw: Any) -> list[str]:
    """A report's findings (jsonb: a list of ``{"summary", "explanation"}`` or of strings; or its JSON
    text) as one-line texts, the summary of each when it has one."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            return [raw] if raw.strip() else []
    out = []
    for f in raw if isinstance(raw, list) else []:
        text = (f.get("summary") or f.get("explanation") or "") if isinstance(f, dict) else str(f)
        if str(text).strip():
            out.append(" ".join(str(text).split()))
    return out


__all__ = [
    "FINDINGS_SHOWN",
    "LIKELY_FLOOR",
    "LIKELY_MARGIN",
    "MIN_WORDS",
    "SENTENCES_PER_CHUNK",
    "SENTENCE_CHARS",
    "extractive_answer",
    "extractive_lines",
    "report_lines",
]
