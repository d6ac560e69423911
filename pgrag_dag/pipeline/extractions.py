"""The ``raw_extractions`` stage: run the space's extractor on chunks without a current extraction,
keep every response (paper §4.1–4.2, §3.5)."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import polars as pl
import psycopg

from pgrag_dag import progress
from pgrag_dag.engine import Engine
from pgrag_dag.errors import ContractError, ExtractionError
from pgrag_dag.extract.model_extraction import DocumentContext
from pgrag_dag.frames import RAW_SCHEMA
from pgrag_dag.operators.core import BoundOperator
from pgrag_dag.pipeline.checks import YIELD_CHECK, ExtractionTally, logged, require_yield
from pgrag_dag.pipeline.common import (
    PENDING_CHECK,
    StageResult,
    empty_runs_allowed,
    operator_checks,
    operator_context,
    space_yield,
    usage_delta,
    writing_stage,
)
from pgrag_dag.pipeline.composition import compose
from pgrag_dag.store import locks, staging, work_queue

log = logging.getLogger(__name__)


@writing_stage("raw_extractions")
def stage_raw_extractions(engine: Engine, realm: str, space: str) -> StageResult:
    """Run the space's extractor on every chunk without a successful first pass by that extractor
    (new, changed, failed before, or extracted by another extractor), and resume chunks whose gleaning
    pass failed on the model at that pass (§4.1–4.2, §3.5). Stored responses that failed to parse are
    parsed again from their raw text first (the extractor's ``reparse``, no model call): one that parses
    now is kept and its chunk resumes after it. What is still pending afterwards is reported in the
    non-blocking ``pending_work`` check; the non-blocking ``yield`` check fails when no chunk of the
    space yielded an entity or a triple.

    The extractor runs on :data:`EXTRACT_BATCH` chunks of whole documents at a time (issue 30: bounded
    memory); each batch's rows wait in a temporary table of the run's session
    (:func:`~pgrag_dag.store.staging.open_incoming_raw`) and are written in one transaction once the run's
    checks, judged over every batch, pass.

    Raises :class:`ExtractionError` when there were chunks and every first pass failed, or when no chunk
    this run extracted yielded an entity or a triple (§3.5, :func:`~pgrag_dag.pipeline.checks.require_yield`;
    unless the space allows empty runs — a run with no chunk to extract never raises), and
    :class:`ContractError` when the extractor's frame breaks its contract or names a chunk it was
    not given — nothing is written then.
    """
    t0 = time.perf_counter()
    before = engine.usage()
    extractor = compose(engine.settings, realm, space).extractor
    run = _Run()
    # one session for the run: each batch's rows wait in its temporary table, outside any transaction
    # while the model is asked, and are written under the partition lock at the end — or not at all
    with engine.connect(autocommit=True) as conn:
        recovered = _reparsed(
            staging.parse_failures(conn, realm, space, extractor=extractor.identity), extractor
        )
        todo = staging.chunks_needing_extraction(
            conn, realm, space, extractor=extractor.identity, also=sorted(recovered)
        )
        staging.open_incoming_raw(conn)
        for chunks in document_batches(todo, EXTRACT_BATCH):
            with progress.part(run.chunks, todo.height):  # the run's progress, not the batch's
                raw = _extract_batch(engine, conn, realm, space, extractor, chunks, recovered, run)
            run.seq = staging.add_raw(conn, raw, run.seq)
        if todo.height:
            if run.ok_firsts == 0:  # §3.5: an outage is never an empty corpus
                raise ExtractionError(
                    f"every one of {todo.height} chunk(s) failed extraction; first errors: {run.first_errors}"
                )
            # judged on this run's chunks (§3.5): a space's earlier graph does not make an empty run green
            require_yield(
                run.yields.result(),
                stage="raw_extractions",
                where=f"{realm}.{space}",
                allowed=empty_runs_allowed(engine, realm, space),
                documents=todo["doc_key"].to_list(),
                offline=not extractor.op.calls_model,
            )
        with conn.transaction():
            locks.lock_partition(conn, realm, space)
            written = staging.merge_raw(conn, realm, space)
            work_queue.finish(
                conn,
                realm,
                space,
                "raw_extractions",
                work_queue.Work(full=False),
                work_queue.fingerprint(extractor.identity),
                changed=written,
            )
            version = work_queue.data_version(conn, realm, space, "raw_extractions")
            held = staging.space_yield(conn, realm, space)
            pending = staging.pending_extraction(conn, realm, space, extractor=extractor.identity)
    check = space_yield(
        run.yields.result(),
        held["extracted"] or not held["chunks"],
        "no chunk of the space holds an extraction with an entity or a triple: check the extractor's "
        "model, prompt and the documents",
    )
    return StageResult(
        "raw_extractions",
        {
            "chunks_extracted": todo.height,
            "chunks_resumed": run.resumed,
            "parse_errors_recovered": len(recovered),
            "chunks_failed": run.failed,
            "failures": run.failures,
            "passes_written": run.seq,
            "gleaning_failures": run.gleaning_failures,
            "batches": run.batches,
            "operators": {"extractor": extractor.describe()},
            **usage_delta(engine, before),
            "seconds": round(time.perf_counter() - t0, 3),
            "rows_changed": written,
        },
        version,
        run.seq,
        checks={
            **operator_checks([extractor], {"chunks_extracted": todo.height, "passes_written": run.seq}),
            PENDING_CHECK: (pending["pending"] == 0, pending),
            YIELD_CHECK: logged(check, stage="raw_extractions", realm=realm, space=space),
        },
    )


EXTRACT_BATCH = 500
"""Chunks extracted per batch by ``raw_extractions`` (issue 30: a run holds one batch's responses, not the
space's): whole documents, at most this many chunks unless one document holds more. Large enough that an
extractor's concurrent model calls (:attr:`~pgrag_dag.config.ExtractionSettings.concurrency`) stay busy."""


@dataclass
class _Run:
    """What a ``raw_extractions`` run has extracted so far, batch by batch: the rows added (``seq``, the
    next row's number), the ``chunks`` and ``batches`` extracted, ``resumed`` chunks, first passes ``ok``
    (``ok_firsts``) and not (``failed``; the first three errors and the first twenty), the
    ``gleaning_failures`` and the ``yields``."""

    seq: int = 0
    chunks: int = 0
    batches: int = 0
    resumed: int = 0
    ok_firsts: int = 0
    failed: int = 0
    first_errors: list[str] = field(default_factory=list)
    failures: list[str | None] = field(default_factory=list)
    gleaning_failures: int = 0
    yields: ExtractionTally = field(default_factory=ExtractionTally)

    def add(self, raw: pl.DataFrame) -> None:
        """Count one batch's rows (``RAW_SCHEMA``); log each chunk whose first pass failed."""
        firsts = raw.filter(pl.col("pass") == 0)
        failed = firsts.filter(pl.col("parse_status") != "ok")
        self.batches += 1
        self.ok_firsts += firsts.height - failed.height
        self.failed += failed.height
        self.first_errors += firsts["error"].drop_nulls().head(3 - len(self.first_errors)).to_list()
        self.failures += failed["error"].head(20 - len(self.failures)).to_list()
        self.gleaning_failures += raw.filter((pl.col("pass") > 0) & (pl.col("parse_status") != "ok")).height
        self.yields.add(raw)
        for error in failed["error"].to_list():
            log.warning("chunk skipped: %s", error)


def document_batches(todo: pl.DataFrame, size: int) -> Iterator[pl.DataFrame]:
    """``todo`` (chunks in document order, a ``doc_key`` column) in slices of whole documents: as many
    documents as fit in ``size`` chunks, or one document holding more (§4.1: the document context runs
    across a document's chunks, so a document is never split)."""
    keys = todo["doc_key"].to_list()
    ends = [i for i in range(1, len(keys)) if keys[i] != keys[i - 1]] + [len(keys)]
    start = prev = 0  # the batch holds the documents in [start, prev)
    for end in ends:  # the next document is [prev, end)
        if end - start > size and prev > start:
            yield todo.slice(start, prev - start)
            start = prev
        prev = end
    if prev > start:
        yield todo.slice(start, prev - start)


def _extract_batch(
    engine: Engine,
    conn: psycopg.Connection,
    realm: str,
    space: str,
    extractor: BoundOperator,
    chunks: pl.DataFrame,
    recovered: dict[int, dict[str, Any]],
    run: _Run,
) -> pl.DataFrame:
    """Run the extractor on one batch of whole documents (``chunks``), seeded with the names their stored
    extractions hold and resuming their completed passes; the batch's checked ``RAW_SCHEMA`` rows,
    counted in ``run``. Raises :class:`ContractError` as :func:`_check_extraction` does."""
    ids = chunks["chunk_id"].to_list()
    completed = staging.completed_passes(conn, realm, space, ids, extractor=extractor.identity)
    for cid in set(ids) & set(recovered):  # a recovered pass resumes its chunk after it, no model call
        row = recovered[cid]
        if row["pass"] == len(completed.get(cid, [])):
            completed.setdefault(cid, []).append(row)
    # the run judges every first pass failing over all its batches, not each batch (§3.5)
    state: dict[str, Any] = {
        "identity": extractor.identity,
        "completed": completed,
        "all_failed_raises": False,
    }
    if extractor.op.calls_model:
        cap = getattr(extractor.options, "context_names_cap", engine.settings.extraction.context_names_cap)
        seed = staging.document_names(
            conn, realm, space, sorted(set(chunks["doc_key"].to_list())), extractor=extractor.identity
        )
        state["document_context"] = DocumentContext(cap, seed)
    raw = _complete_raw(
        extractor.run(chunks, operator_context(engine, realm, space, extractor, **state)), extractor
    )
    _check_extraction(extractor, chunks, raw)
    run.resumed += len(completed)
    run.chunks += chunks.height
    run.add(raw)
    return raw


def _complete_raw(raw: pl.DataFrame, extractor: BoundOperator) -> pl.DataFrame:
    """An extractor's frame in ``RAW_SCHEMA``: bookkeeping columns it left out get their defaults
    (model = the operator's name, raw_text = parsed, no error, 0 tokens, no cache hit), and every row
    carries the extractor's identity as ``prompt_version``."""
    defaults = {
        "model": pl.lit(extractor.op.name),
        "raw_text": pl.col("parsed"),
        "error": pl.lit(None, pl.String),
        "prompt_tokens": pl.lit(0),
        "completion_tokens": pl.lit(0),
        "cache_hit": pl.lit(False),
    }
    raw = raw.with_columns(**{c: e for c, e in defaults.items() if c not in raw.columns})
    return raw.with_columns(prompt_version=pl.lit(extractor.identity)).select(
        [pl.col(c).cast(t) for c, t in RAW_SCHEMA.items()]
    )


def _reparsed(failures: pl.DataFrame, extractor: BoundOperator) -> dict[int, dict[str, Any]]:
    """The stored ``parse_error`` rows (``failures``, one per chunk at most: gleaning stops at one) that
    the extractor's :attr:`~pgrag_dag.operators.Operator.reparse` parses now, as ``ok`` rows by chunk
    id — a fixed parser re-evaluates what failed before, with no model call (issue 13)."""
    if extractor.op.reparse is None:
        return {}
    out: dict[int, dict[str, Any]] = {}
    for row in failures.iter_rows(named=True):
        try:
            parsed = extractor.op.reparse(row["raw_text"])
        except ValueError:
            continue
        out[int(row["chunk_id"])] = {**row, "parsed": parsed, "parse_status": "ok", "error": None}
    if out:
        log.info(
            "%d stored response(s) that failed to parse parse now; their chunks resume after them", len(out)
        )
    return out


def _check_extraction(extractor: BoundOperator, todo: pl.DataFrame, raw: pl.DataFrame) -> None:
    """An extractor writes rows only for chunks it was given, and a first pass for each of them."""
    label = f"RawExtractionContract (operator {extractor.op.name})"
    given = set(todo["chunk_id"].to_list())
    strays = raw.filter(~pl.col("chunk_id").is_in(list(given)))
    if strays.height:
        raise ContractError(
            label,
            f"rows for {strays['chunk_id'].n_unique()} chunk(s) it was not given",
            strays.select("chunk_id", "pass"),
        )
    missing = given - set(raw.filter(pl.col("pass") == 0)["chunk_id"].to_list())
    if missing:
        raise ContractError(
            label, f"no first pass (pass 0) for {len(missing)} chunk(s), e.g. chunk_id {min(missing)}"
        )
