"""The ``embeddings`` stage's operator: embed what earlier stages committed, and what happens when the
model fails (paper §3.5; issue 13 item 9).

The chunks, entities and relations an earlier stage committed have no vector until this stage embeds
them, and no vector search can find a row without one. So a failure never leaves them silently
invisible:

- :func:`embed_pending` embeds the pending rows in batches; at the model's first failure it stops
  asking the model (a dead provider costs one deadline, not one per batch), keeps every vector it
  already has, and leaves the rest to the fallback or to the next run;
- the stage writes what was embedded, reports the rows still without a vector (metadata and the
  non-blocking ``pending_work`` check) and, without a fallback, raises
  :class:`~pgrag_dag.errors.EmbeddingIncompleteError` after committing — its next run embeds them;
- every query of the space warns while rows lack a vector (:func:`query_warnings`).

``embedding.fallback: hashing`` embeds what the model refused with the SHA-256 feature-hashing
embedder (§3.5) instead. Those vectors live in another geometry than the model's: the cosine between a
MiniLM (or any model's) query vector and a hashing vector is noise, so ranking them together would
corrupt retrieval rather than degrade it. They are therefore stored apart (``fallback_embedding``,
flagged ``embed_fallback``), never in the indexed column: every vector channel ignores those rows;
full-text, the graph walk and mention expansion still reach them; queries say how many there are;
the next run embeds them with the model and drops the fallback vectors.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pgrag_dag import progress
from pgrag_dag.embedding import Embedder
from pgrag_dag.errors import ModelError
from pgrag_dag.reembed import embed_distinct

Row = tuple[int, str, str]
"""``(id, text, sha256 of text)`` as :func:`pgrag_dag.store.vectors.pending` returns it."""

_LABELS = {"documents": ("chunk", "chunks"), "entities": ("entity", "entities"), "relations": ("relation", "relations"),
           "communities": ("community report", "community reports")}


@dataclass
class TableRun:
    """One table's outcome: rows the model embedded (with their vectors, in order), rows the fallback
    embedded, and rows left without a new vector."""

    rows: list[Row] = field(default_factory=list)
    vectors: list[np.ndarray] = field(default_factory=list)
    fallback_rows: list[Row] = field(default_factory=list)
    fallback_vectors: list[np.ndarray] = field(default_factory=list)
    left: list[Row] = field(default_factory=list)


@dataclass
class EmbeddingRun:
    """:func:`embed_pending`'s result: a :class:`TableRun` per table, and ``error`` — the model's
    failure on one line, or ``None`` when it embedded everything."""

    tables: dict[str, TableRun]
    error: str | None = None


def embed_pending(embedder: Embedder, todo: dict[str, list[Row]], *, batch_size: int,
                  fallback: Embedder | None = None) -> EmbeddingRun:
    """Embed ``todo`` (table → pending rows) as passages, ``batch_size`` texts per ``embedder`` call,
    table by table in the given order.

    Each batch is checked as ``pgrag reembed`` checks it (:func:`pgrag_dag.reembed.embed_distinct`:
    one finite vector of the embedder's width per text). At the first :class:`ModelError` — the model
    failed, or returned too few or non-finite vectors — the model is not called again in this run: the
    failed batch and every later one go to ``fallback`` (an embedder of the same width) when given,
    else are left. Raises :class:`~pgrag_dag.errors.SchemaMismatchError` (a vector of another width)
    and any other error unchanged: those are not a model outage.
    """
    run = EmbeddingRun({table: TableRun() for table in todo})
    total, through = sum(len(rows) for rows in todo.values()), 0
    for table, rows in todo.items():
        out = run.tables[table]
        for start in range(0, len(rows), batch_size):
            progress.advance(through, total, "texts")
            through += len(rows[start:start + batch_size])
            batch = rows[start:start + batch_size]
            texts = [t for _, t, _ in batch]
            if run.error is None:
                try:
                    by_text = embed_distinct(embedder, texts, batch_size=batch_size, progress=None)
                except ModelError as exc:
                    run.error = str(exc)
                else:
                    out.rows += batch
                    out.vectors += [by_text[t] for t in texts]
                    continue
            if fallback is not None:
                by_text = embed_distinct(fallback, texts, batch_size=batch_size, progress=None)
                out.fallback_rows += batch
                out.fallback_vectors += [by_text[t] for t in texts]
            else:
                out.left += batch
    if total:
        progress.advance(total, total, "texts")
    return run


def describe(counts: dict[str, int]) -> str:
    """``{"documents": 3, "entities": 1, "relations": 0}`` → ``"3 chunks and 1 entity"`` (zeros left out)."""
    parts = [f"{n} {_LABELS[t][0] if n == 1 else _LABELS[t][1]}" for t, n in counts.items() if n]
    return ", ".join(parts[:-1]) + " and " + parts[-1] if len(parts) > 1 else "".join(parts)


def pending_check(unembedded: dict[str, dict[str, int]], error: str | None) -> tuple[bool, dict[str, Any]]:
    """The ``embeddings`` stage's ``pending_work`` check from :func:`pgrag_dag.store.vectors.unembedded`:
    passed when every row has a vector of the model; else the counts — ``pending`` (rows without one),
    ``without_vector`` and ``fallback_only`` per table — and the model's ``error``."""
    missing = {t: c["missing"] - c["fallback"] for t, c in unembedded.items()}
    fallback = {t: c["fallback"] for t, c in unembedded.items()}
    total = sum(c["missing"] for c in unembedded.values())
    return total == 0, {"pending": total, "without_vector": missing, "fallback_only": fallback, "model_error": error}


def query_warnings(unembedded: dict[str, dict[str, int]], space: str, model: str) -> list[str]:
    """The warnings a query on ``space`` gives while rows lack a vector of the realm's ``model``
    (:func:`pgrag_dag.store.vectors.unembedded`): none when every row has one."""
    where = "every space" if space == "*" else f"space {space!r}"
    out = []
    missing = describe({t: c["missing"] - c["fallback"] for t, c in unembedded.items()})
    if missing:
        out.append(f"{missing} of {where} have no vector (the embeddings stage failed or has not run since they "
                   "were written): vector search cannot find them; run the embeddings stage again (pgrag index) "
                   "to embed them")
    fallback = describe({t: c["fallback"] for t, c in unembedded.items()})
    if fallback:
        out.append(f"{fallback} of {where} have only a fallback vector (embedding.fallback: hashing; {model} failed "
                   f"on them): they are kept out of vector search, since hashing vectors are not comparable with "
                   f"{model}'s, and found only by full-text, the graph walk and mention expansion until the next "
                   "run of the embeddings stage embeds them with the model")
    return out
