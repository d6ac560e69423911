"""The ``raw_extractions`` stage: run the space's extractor on chunks without a current extraction,
keep every response (paper §4.1–4.2, §3.5)."""

from __future__ import annotations

import logging
import time
from typing import Any

import polars as pl

from pgrag_dag.engine import Engine
from pgrag_dag.errors import ContractError, ExtractionError
from pgrag_dag.extract.model_extraction import DocumentContext
from pgrag_dag.frames import RAW_SCHEMA
from pgrag_dag.operators.core import BoundOperator
from pgrag_dag.pipeline.checks import YIELD_CHECK, extraction_yield, logged, require_yield
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

    Raises :class:`ExtractionError` when there were chunks and every first pass failed, or when no chunk
    this run extracted yielded an entity or a triple (§3.5, :func:`~pgrag_dag.pipeline.checks.require_yield`;
    unless the space allows empty runs — a run with no chunk to extract never raises), and
    :class:`ContractError` when the extractor's frame breaks its contract or names a chunk it was
    not given — nothing is written then.
    """
    t0 = time.perf_counter()
    before = engine.usage()
    extractor = compose(engine.settings, realm, space).extractor
    with engine.connect() as conn:
        recovered = _reparsed(
            staging.parse_failures(conn, realm, space, extractor=extractor.identity), extractor
        )
        todo = staging.chunks_needing_extraction(
            conn, realm, space, extractor=extractor.identity, also=sorted(recovered)
        )
        seed = staging.document_names(
            conn, realm, space, sorted(set(todo["doc_key"].to_list())), extractor=extractor.identity
        )
        completed = staging.completed_passes(
            conn, realm, space, todo["chunk_id"].to_list(), extractor=extractor.identity
        )
    for (
        cid,
        row,
    ) in recovered.items():  # a recovered pass resumes its chunk after it, with no model call for it
        if row["pass"] == len(completed.get(cid, [])):
            completed.setdefault(cid, []).append(row)
    state: dict[str, Any] = {"identity": extractor.identity, "completed": completed}
    if extractor.op.calls_model:
        cap = getattr(extractor.options, "context_names_cap", engine.settings.extraction.context_names_cap)
        state["document_context"] = DocumentContext(cap, seed)
    raw = pl.DataFrame(schema=RAW_SCHEMA)
    if todo.height:
        raw = extractor.run(todo, operator_context(engine, realm, space, extractor, **state))
        raw = _complete_raw(raw, extractor)
        _check_extraction(extractor, todo, raw)
        # judged on this run's chunks (§3.5): a space's earlier graph does not make an empty run green
        require_yield(
            extraction_yield(raw),
            stage="raw_extractions",
            where=f"{realm}.{space}",
            allowed=empty_runs_allowed(engine, realm, space),
            documents=todo["doc_key"].to_list(),
            offline=not extractor.op.calls_model,
        )
    with engine.connect() as conn, conn.transaction():
        locks.lock_partition(conn, realm, space)
        written = staging.write_raw(conn, realm, space, raw)
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
        extraction_yield(raw),
        held["extracted"] or not held["chunks"],
        "no chunk of the space holds an extraction with an entity or a triple: check the extractor's "
        "model, prompt and the documents",
    )
    firsts = raw.filter(pl.col("pass") == 0)
    failed = firsts.filter(pl.col("parse_status") != "ok")
    for error in failed["error"].to_list():
        log.warning("chunk skipped: %s", error)
    return StageResult(
        "raw_extractions",
        {
            "chunks_extracted": todo.height,
            "chunks_resumed": len(completed),
            "parse_errors_recovered": len(recovered),
            "chunks_failed": failed.height,
            "failures": failed["error"].to_list()[:20],
            "passes_written": raw.height,
            "gleaning_failures": raw.filter((pl.col("pass") > 0) & (pl.col("parse_status") != "ok")).height,
            "operators": {"extractor": extractor.describe()},
            **usage_delta(engine, before),
            "seconds": round(time.perf_counter() - t0, 3),
            "rows_changed": written,
        },
        version,
        raw.height,
        checks={
            **operator_checks([extractor], {"chunks_extracted": todo.height, "passes_written": raw.height}),
            PENDING_CHECK: (pending["pending"] == 0, pending),
            YIELD_CHECK: logged(check, stage="raw_extractions", realm=realm, space=space),
        },
    )


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
    """An extractor writes rows only for chunks it was given, and a first pass for each of them;
    when every first pass failed the run raises (§3.5: an outage is never an empty corpus)."""
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
    firsts = raw.filter(pl.col("pass") == 0)
    if firsts.filter(pl.col("parse_status") == "ok").height == 0:
        errors = firsts["error"].drop_nulls().head(3).to_list()
        raise ExtractionError(
            f"every one of {todo.height} chunk(s) failed extraction; first errors: {errors}"
        )
