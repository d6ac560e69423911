"""The ``embeddings`` stage: embed what earlier stages committed, and what happens when the
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

import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from pgrag_dag import progress
from pgrag_dag.engine import Engine
from pgrag_dag.errors import EmbeddingIncompleteError, ModelError
from pgrag_dag.operators import contracts
from pgrag_dag.pipeline.common import PENDING_CHECK, StageResult, writing_stage
from pgrag_dag.providers.embedding import Embedder, HashingEmbedder, embed_distinct
from pgrag_dag.store import bulk_index, locks, vectors, work_queue

log = logging.getLogger(__name__)

Row = tuple[int, str, str]
"""``(id, text, sha256 of text)`` as :func:`pgrag_dag.store.vectors.pending` returns it."""

_LABELS = {
    "documents": ("chunk", "chunks"),
    "entities": ("entity", "entities"),
    "relations": ("relation", "relations"),
    "communities": ("community report", "community reports"),
}


@dataclass
class TableRun:
    """One table's outcome, in rows: embedded by the model, embedded by the fallback, and left without a
    new vector (the vectors themselves went to the sink)."""

    embedded: int = 0
    fallback: int = 0
    left: int = 0


@dataclass
class EmbeddingRun:
    """:func:`embed_pending`'s result: a :class:`TableRun` per table, and ``error`` — the model's
    failure on one line, or ``None`` when it embedded everything."""

    tables: dict[str, TableRun]
    error: str | None = None


Sink = Callable[[str, list[Row], list[np.ndarray], bool], None]
"""``sink(table, rows, vectors, fallback)``: stores vectors :func:`embed_pending` made (``fallback``: by the
fallback embedder), so that they outlive the run."""

FLUSH_ROWS = 2_048
"""Vectors :func:`embed_pending` hands its sink at a time: one short transaction per this many rows keeps what
an interrupted run embedded (issue 30) without a commit per model batch."""
FLUSH_SECONDS = 10.0
"""…or after this many seconds of embedding, whichever comes first: 2,048 long chunks are minutes of a local
model's work, which an interrupt would otherwise lose (a new user's trial lost 256 chunks to a Ctrl-C)."""


class WriteBehind:
    """A :data:`Sink` that stores on a thread of its own, so the embedder computes the next batch while
    PostgreSQL writes the last (issue 30: the two take comparable time with the hashing embedder, and run
    on different cores).

    ``open_writer()`` is called once, on the writer thread, and returns ``write(table, rows, vectors,
    fallback)`` (e.g. bound to one connection) and a ``close()``. At most ``depth`` flushes wait in line, so
    memory stays bounded when the writes are slower than the embedder. Used as a context manager: leaving
    it — normally, by an error or by Ctrl-C — writes every flush already handed over before returning, so
    what was embedded is kept; an error of a write is raised by the next call or on leaving, and no later
    flush is written after it."""

    def __init__(
        self,
        open_writer: Callable[[], tuple[Sink, Callable[[], None]]],
        depth: int = 2,
    ) -> None:
        self._open = open_writer
        self._queue: queue.Queue[tuple[str, list[Row], list[np.ndarray], bool] | None] = queue.Queue(depth)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="pgrag-embeddings-writer", daemon=True)

    def __enter__(self) -> WriteBehind:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._queue.put(None)
        self._thread.join()
        if self._error is not None and exc[0] is None:
            raise self._error

    def __call__(self, table: str, rows: list[Row], vectors: list[np.ndarray], fallback: bool) -> None:
        if self._error is not None:
            raise self._error
        self._queue.put((table, rows, vectors, fallback))

    def _run(self) -> None:
        try:
            write, close = self._open()
        except BaseException as exc:  # noqa: BLE001 — raised on the caller's thread
            self._error = exc
            write = close = None  # type: ignore[assignment]
        try:
            while (item := self._queue.get()) is not None:
                if self._error is None and write is not None:
                    try:
                        write(*item)
                    except BaseException as exc:  # noqa: BLE001 — raised on the caller's thread
                        self._error = exc
        finally:
            if close is not None:
                close()


def embed_pending(
    embedder: Embedder,
    todo: Mapping[str, Iterable[Row]],
    *,
    totals: Mapping[str, int],
    chars: Mapping[str, float] | None = None,
    batch_size: int,
    sink: Sink,
    fallback: Embedder | None = None,
    flush_rows: int = FLUSH_ROWS,
    flush_seconds: float = FLUSH_SECONDS,
) -> EmbeddingRun:
    """Embed ``todo`` (table → its pending rows, read as they come: a stream keeps memory bounded at any
    size, issue 30) as passages, ``batch_size`` texts per ``embedder`` call, table by table in the given
    order; ``totals`` (table → rows) and ``chars`` (table → mean characters of its pending texts,
    :func:`~pgrag_dag.store.vectors.mean_pending_chars`) only feed the progress display: the texts through
    are counted, the time left is estimated in characters (``work`` of ``work_total``), since a run embeds
    the long chunk texts first and a count of texts would make its first estimate several times too long.

    The vectors are handed to ``sink`` every ``flush_rows`` rows of a table or ``flush_seconds`` of embedding
    (and at each table's end), model and fallback vectors apart, and not kept: the result counts rows.

    Each batch is checked as ``pgrag reembed`` checks it
    (:func:`pgrag_dag.providers.embedding.embed_distinct`: one finite vector of the embedder's width per
    text). At the first :class:`ModelError` — the model failed, or returned too few or non-finite vectors —
    the model is not called again in this run: the failed batch and every later one go to ``fallback`` (an
    embedder of the same width) when given, else are left. Raises
    :class:`~pgrag_dag.errors.SchemaMismatchError` (a vector of another width) and any other error unchanged:
    those are not a model outage.
    """
    run = EmbeddingRun({table: TableRun() for table in todo})
    total, through = sum(totals.values()), 0
    work = {"work": 0, "work_total": round(sum(n * (chars or {}).get(t, 0.0) for t, n in totals.items()))}
    if total:  # the total is shown from the start, each batch's texts once they are through
        progress.advance(0, total, "texts", **work)
    for table, stream in todo.items():
        out = run.tables[table]
        held: list[tuple[list[Row], list[np.ndarray]]] = [([], []), ([], [])]  # model, fallback

        last = [time.monotonic()]

        def flush(
            table: str = table,
            held: list[tuple[list[Row], list[np.ndarray]]] = held,
            at_least: int = 1,
            last: list[float] = last,
        ) -> None:
            due = time.monotonic() - last[0] >= flush_seconds
            for fb, (rows, vecs) in enumerate(held):
                if len(rows) >= at_least or (due and rows):
                    sink(table, rows, vecs, bool(fb))
                    held[fb] = ([], [])  # handed over: a long run holds one flush of vectors, not all
                    last[0] = time.monotonic()

        pending = iter(stream)
        while batch := list(itertools.islice(pending, batch_size)):
            if through:
                progress.advance(min(through, total), total, "texts", **work)
            through += len(batch)
            texts = [t for _, t, _ in batch]
            work["work"] += sum(map(len, texts))
            if run.error is None:
                try:
                    by_text = embed_distinct(embedder, texts, batch_size=batch_size, progress=None)
                except ModelError as exc:
                    run.error = str(exc)
                else:
                    held[0][0].extend(batch)
                    held[0][1].extend(by_text[t] for t in texts)
                    out.embedded += len(batch)
                    flush(at_least=flush_rows)
                    continue
            if fallback is not None:
                by_text = embed_distinct(fallback, texts, batch_size=batch_size, progress=None)
                held[1][0].extend(batch)
                held[1][1].extend(by_text[t] for t in texts)
                out.fallback += len(batch)
                flush(at_least=flush_rows)
            else:
                out.left += len(batch)
        flush()
    if total:
        progress.advance(total, total, "texts", **work)
    return run


def describe(counts: dict[str, int]) -> str:
    """``{"documents": 3, "entities": 1, "relations": 0}`` → ``"3 chunks and 1 entity"`` (zeros left out)."""
    parts = [f"{n:,} {_LABELS[t][0] if n == 1 else _LABELS[t][1]}" for t, n in counts.items() if n]
    return ", ".join(parts[:-1]) + " and " + parts[-1] if len(parts) > 1 else "".join(parts)


def pending_check(unembedded: dict[str, dict[str, int]], error: str | None) -> tuple[bool, dict[str, Any]]:
    """The ``embeddings`` stage's ``pending_work`` check from :func:`pgrag_dag.store.vectors.unembedded`:
    passed when every row has a vector of the model; else the counts — ``pending`` (rows without one),
    ``without_vector`` and ``fallback_only`` per table — and the model's ``error``."""
    missing = {t: c["missing"] - c["fallback"] for t, c in unembedded.items()}
    fallback = {t: c["fallback"] for t, c in unembedded.items()}
    total = sum(c["missing"] for c in unembedded.values())
    return total == 0, {
        "pending": total,
        "without_vector": missing,
        "fallback_only": fallback,
        "model_error": error,
    }


def query_warnings(unembedded: dict[str, dict[str, int]], space: str, model: str) -> list[str]:
    """The warnings a query on ``space`` gives while rows lack a vector of the realm's ``model``
    (:func:`pgrag_dag.store.vectors.unembedded`): none when every row has one."""
    where = "every space" if space == "*" else f"space {space!r}"
    out = []
    missing = describe({t: c["missing"] - c["fallback"] for t, c in unembedded.items()})
    if missing:
        out.append(
            f"{missing} of {where} have no vector (the embeddings stage failed or has not run since they "
            "were written): vector search cannot find them; run the embeddings stage again (pgrag index) "
            "to embed them"
        )
    fallback = describe({t: c["fallback"] for t, c in unembedded.items()})
    if fallback:
        out.append(
            f"{fallback} of {where} have only a fallback vector (embedding.fallback: hashing; {model} failed "
            f"on them): they are kept out of vector search, since hashing vectors are not comparable with "
            f"{model}'s, and found only by full-text, the graph walk and mention expansion until the next "
            "run of the embeddings stage embeds them with the model"
        )
    return out


@writing_stage("embeddings")
def stage_embeddings(engine: Engine, realm: str, space: str, *, full: bool = False) -> StageResult:
    """Embed chunks, entities and relations without a vector or whose text changed since (§3.5, §7.3).

    The embedding model is called outside any transaction
    (:func:`~pgrag_dag.pipeline.embeddings.embed_pending`); the vectors are committed as they come,
    :data:`FLUSH_ROWS` at a time, so a run interrupted or killed keeps what it embedded and the next one
    embeds only the rest (issue 30; a row whose text changed meanwhile keeps a stale hash and is embedded
    again next run). When the model fails, what it
    embedded is written and the rest is left for the next run: the non-blocking ``pending_work`` check and
    every query of the space report the rows without a vector, and the stage raises
    :class:`EmbeddingIncompleteError` — unless ``embedding.fallback: hashing``, which embeds those rows apart,
    flagged, outside every vector search (never mixed with the model's vectors). Each flush's vectors are
    audited as stored, inside its transaction, against :class:`EmbeddingContract` (width = the realm's, no
    NaN); with ``full``, every stored vector too, a page at a time. The pending rows are read as they are
    embedded, so memory holds a page of texts and a flush of vectors at any size (issue 30). A first load
    of a table builds its HNSW index after the vectors (:mod:`pgrag_dag.store.bulk_index`).
    """
    t0 = time.perf_counter()
    embedder = engine.embedder()
    settings = engine.settings.embedding
    fallback = HashingEmbedder(settings.dim) if settings.fallback == "hashing" else None
    tables = vectors.UNEMBEDDED_TABLES
    with engine.connect() as conn:
        totals = {table: vectors.count_pending(conn, realm, space, table) for table in tables}
        chars = {t: vectors.mean_pending_chars(conn, realm, space, t) for t, n in totals.items() if n}
        bulk = [
            t for t, n in totals.items() if bulk_index.first_load(conn, realm, t, n, settings.bulk_load_rows)
        ]
        unindexed = bulk_index.missing(conn, realm)
    counts: dict[str, int] = {f"{t}_{k}": 0 for t in tables for k in ("embedded", "fallback")}
    if fallback is None:
        counts = {k: v for k, v in counts.items() if k.endswith("_embedded")}
    checked = [0]
    if bulk:
        with engine.connect() as conn, conn.transaction():
            locks.lock_partition(conn, realm, space)
            bulk_index.drop(conn, realm, bulk)  # a first load: the index is built once after the vectors

    def open_writer() -> tuple[Sink, Callable[[], None]]:
        # one connection for the whole run, a short transaction per flush: vectors commit as they come (issue
        # 30), so an interrupted run keeps them and the next embeds only the rest
        conn = engine.connect()

        def write(table: str, rows: list[Row], found: list[np.ndarray], by_fallback: bool) -> None:
            with conn.transaction():
                locks.lock_partition(conn, realm, space)
                model = fallback.model if by_fallback and fallback is not None else None
                # audited as stored (the UPDATE's RETURNING), before the commit: a vector the contract
                # refuses is never kept
                audit = vectors.write_audited(conn, realm, table, rows, found, settings.dim, fallback=model)
                counts[f"{table}_{'fallback' if by_fallback else 'embedded'}"] += audit.height
                contracts.validate(contracts.EmbeddingContract, audit.filter(~pl.col("missing")))
                checked[0] += audit.height

        return write, conn.close

    # the pending rows are read as they are embedded (one page in memory), on a connection of their own
    with engine.connect() as reader, WriteBehind(open_writer) as sink:
        todo = {t: vectors.stream_pending(reader, realm, space, t) if totals[t] else () for t in tables}
        run = embed_pending(
            embedder,
            todo,
            totals=totals,
            chars=chars,
            batch_size=settings.batch_size,
            fallback=fallback,
            sink=sink,
            flush_rows=FLUSH_ROWS,
        )
    with engine.connect() as conn, conn.transaction():
        locks.lock_partition(conn, realm, space)
        if full:  # every stored vector, a page at a time (community reports: the communities stage's)
            checked[0] = 0  # what this run wrote is among them
            for audit in vectors.audit_pages(conn, realm, space, settings.dim, tables):
                contracts.validate(contracts.EmbeddingContract, audit.filter(~pl.col("missing")))
                checked[0] += audit.height
        left = vectors.unembedded(conn, realm, space)
        changed = sum(counts.values())
        work_queue.finish(
            conn,
            realm,
            space,
            "embeddings",
            work_queue.Work(full=False),
            work_queue.fingerprint([embedder.model, embedder.dim, embedder.convention]),
            changed=changed,
        )
        version = work_queue.data_version(conn, realm, space, "embeddings")
    index_s = None
    if bulk or unindexed:  # after the commit; an index a killed build left missing is built here too
        index_s = round(
            bulk_index.build(
                engine.dsn, realm, sorted(set(bulk) | set(unindexed)), memory=settings.index_build_memory
            ),
            3,
        )
    passed, pending = pending_check(left, run.error)
    if run.error is not None:
        log.warning("embeddings %s.%s: %s; %s", realm, space, run.error, pending)
        if fallback is None:
            raise EmbeddingIncompleteError(
                f"embeddings {realm}.{space}: {run.error}; {describe(pending['without_vector']) or 'no row'} "
                "left without a vector (vector search cannot find them; queries warn) — "
                "the next run embeds them, "
                "or set embedding.fallback: hashing",
                pending,
            )
    return StageResult(
        "embeddings",
        {
            **counts,
            "vectors_checked": checked[0],
            "model": embedder.model,
            "dim": embedder.dim,
            "convention": embedder.convention,
            "unembedded": left,
            "model_error": run.error,
            "rows_changed": changed,
            "hnsw_built_after_load": sorted(set(bulk) | set(unindexed)),
            "hnsw_build_seconds": index_s,
            "seconds": round(time.perf_counter() - t0, 3),
        },
        version,
        checked[0],
        checks={PENDING_CHECK: (passed, pending)},
    )
