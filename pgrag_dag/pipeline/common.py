"""What every indexing stage shares (:mod:`pgrag_dag.pipeline`, :mod:`pgrag_dag.pipeline.graph_stages`,
:mod:`pgrag_dag.pipeline.community_stages`): the :class:`StageResult` it returns, the :func:`writing_stage`
wrapper (partition lock, one-line database errors), its operators' context and checks, and the ``yield``
judgement of an incremental run and whether a space may have runs that yield nothing."""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from pgrag_dag import progress
from pgrag_dag.engine import Engine
from pgrag_dag.names import validate_realm, validate_space
from pgrag_dag.operators.core import BoundOperator, OperatorContext, compose_user, operator_check_name
from pgrag_dag.store import db, locks


@dataclass
class StageResult:
    """What a stage did: ``metadata`` (counts, per-gate rejections, model usage, seconds), the
    ``data_version`` (SHA-256 prefix of what the stage's table now holds for the space), the
    number of rows its contract checked, and further ``checks`` of the stored result."""

    stage: str
    metadata: dict[str, Any] = field(default_factory=dict)
    data_version: str = ""
    rows_checked: int = 0
    checks: dict[str, tuple[bool, dict[str, Any]]] = field(default_factory=dict)
    """Further checks on what the stage wrote: name → (passed, metadata), e.g. ``graph_quality``."""


Stage = Callable[..., StageResult]

PENDING_CHECK = "pending_work"
"""The non-blocking check a stage reports its unfinished work in: red until a later run clears it."""
SKIPPED_CHECK = "skipped_documents"
"""The chunks stage's non-blocking check (WARN): documents it could not read, with doc_key and reason."""


def writing_stage(name: str) -> Callable[[Stage], Stage]:
    """Decorate a stage function that writes ``realm.space``: the realm and space are validated, the
    stage runs holding the partition's stage lock (:func:`~pgrag_dag.store.locks.stage_lock`; a second
    run waits up to ``operations.lock_wait_s`` seconds, then :class:`PartitionBusyError`), and every
    PostgreSQL error leaving it is a one-line :class:`DatabaseError` (issue 11). Its start, progress and end
    go to the :mod:`pgrag_dag.progress` sink of the context, if any."""

    def wrap(fn: Stage) -> Stage:
        @functools.wraps(fn)
        def run(engine: Engine, realm: str, space: str, **options: Any) -> StageResult:
            validate_realm(realm)
            validate_space(space)
            with (
                db.database_errors(engine.dsn),
                locks.stage_lock(
                    engine.dsn, realm, space, name, wait_s=engine.settings.operations.lock_wait_s
                ),
                progress.stage(name, realm, space),
            ):
                result = fn(engine, realm, space, **options)
            progress.finish(name, realm, space, result.metadata)
            return result

        return run

    return wrap


def frame_hash(frame: pl.DataFrame) -> str:
    """A stable 16-hex-digit hash of a frame's rows (sorted), for data versions."""
    h = hashlib.sha256()
    lines = frame.select(sorted(frame.columns)).write_ndjson().splitlines() if frame.height else []
    for line in sorted(lines):
        h.update(line.encode())
    return h.hexdigest()[:16]


def usage_delta(engine: Engine, before: dict[str, Any]) -> dict[str, Any]:
    """Model usage (calls, cache hits, tokens, cost) since ``before`` (an earlier ``engine.usage()``)."""
    after = engine.usage()
    return {
        k: round(after[k] - before.get(k, 0), 6)
        if isinstance(after[k], float)
        else after[k] - before.get(k, 0)
        for k in after
    }


def operator_context(
    engine: Engine, realm: str, space: str, bound: BoundOperator, **state: Any
) -> OperatorContext:
    """The :class:`OperatorContext` for ``bound`` in ``realm.space``: the space's vocabulary, a copy of
    the gate settings (an operator cannot change the engine's), the model client only when the
    operator is declared ``calls_model``; ``state`` passed through."""
    spec = engine.settings.space_spec(realm, space)
    return OperatorContext(
        realm,
        space,
        spec.vocabulary_model(),
        engine.settings.gates.model_copy(deep=True),
        client=engine.client() if bound.op.calls_model else None,
        state=dict(state),
    )


def operator_checks(
    bounds: tuple[BoundOperator, ...] | list[BoundOperator], rows: dict[str, int]
) -> dict[str, tuple[bool, dict[str, Any]]]:
    """One passed check per user operator the stage ran (its frame met its contract)."""
    user = {id(b) for b in compose_user(bounds)}
    return {
        operator_check_name(b.op.name): (True, {**b.describe(), "contract": b.op.contract.__name__, **rows})
        for b in bounds
        if id(b) in user
    }


def space_yield(batch: tuple[bool, dict[str, Any]], passed: bool, reason: str) -> tuple[bool, dict[str, Any]]:
    """The ``yield`` check of a run: the counts of what this run processed (``batch``, all of the space
    in a full run), judged by what the whole space holds (``passed``, from index look-ups) — an
    incremental run over one empty document does not turn a productive space red."""
    meta = dict(batch[1])
    if passed:
        meta.pop("reason", None)
    else:
        meta.setdefault("reason", reason)
    return passed, meta


def empty_runs_allowed(engine: Engine, realm: str, space: str) -> bool:
    """Whether ``realm.space`` opted out of failing a run that yields nothing (§3.5): the ``extraction``
    section's ``allow_empty_runs``, or the space's own. Raises :class:`ConfigurationError` when the space
    is not declared."""
    spec = engine.settings.space_spec(realm, space)
    return engine.settings.extraction.allow_empty_runs or spec.allow_empty_runs
