"""Progress of the indexing stages, for whoever shows it (issue 16 item 3).

A stage does not know whether a terminal, Dagster or a test is watching. It says where it is through
this module: :func:`pgrag_dag.pipeline.common.writing_stage` reports a stage's start and end, and the long
loops inside a stage (the extractor's model calls, the embedder's batches) call :func:`advance`. The
reports go to the :class:`Sink` installed for the current context by :func:`reporting` (the CLI installs
a rich progress display, :mod:`pgrag_dag.cli.progress`); with none installed every call is a no-op.

The sink lives in a :class:`contextvars.ContextVar`, not in module state: two runs in two threads of one
process report to their own sinks, and a Dagster step process has none unless it installs one. Worker
threads (the model calls of :func:`pgrag_dag.providers.llm.map_calls`) do not report; the thread that waits on
them does.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Protocol


class Sink(Protocol):
    """Receives the progress of stages. ``stage`` is the stage's name (``chunks`` … ``community_hierarchy``),
    ``partition`` ``"<realm>.<space>"``."""

    def started(self, stage: str, partition: str) -> None:
        """The stage began (it holds the partition's stage lock)."""

    def advanced(
        self, stage: str, partition: str, done: int, total: int, unit: str, fields: dict[str, Any]
    ) -> None:
        """``done`` of ``total`` ``unit`` (``chunks``, ``texts``) are through; ``fields`` carry counters such
        as ``model_calls`` (calls made by the stage's model client so far)."""

    def finished(
        self, stage: str, partition: str, metadata: dict[str, Any] | None, error: BaseException | None
    ) -> None:
        """The stage ended: with its result's ``metadata``, or with ``error`` (then ``metadata`` is None)."""


_sink: ContextVar[Sink | None] = ContextVar("pgrag_progress_sink", default=None)
_where: ContextVar[tuple[str, str] | None] = ContextVar("pgrag_progress_stage", default=None)
_part: ContextVar[tuple[int, int] | None] = ContextVar("pgrag_progress_part", default=None)


@contextmanager
def reporting(sink: Sink) -> Iterator[Sink]:
    """Send the progress of every stage run in this context (thread or task) to ``sink`` inside the block."""
    token = _sink.set(sink)
    try:
        yield sink
    finally:
        _sink.reset(token)


@contextmanager
def stage(name: str, realm: str, space: str) -> Iterator[None]:
    """Report stage ``name`` of ``realm.space`` started; inside the block :func:`advance` reports to it. An
    exception leaving the block is reported as the stage's end (and re-raised); a stage that returns
    reports its end with :func:`finish`."""
    sink = _sink.get()
    partition = f"{realm}.{space}"
    token = _where.set((name, partition))
    if sink is not None:
        sink.started(name, partition)
    try:
        yield
    except BaseException as exc:
        if sink is not None:
            sink.finished(name, partition, None, exc)
        raise
    finally:
        _where.reset(token)


def finish(name: str, realm: str, space: str, metadata: dict[str, Any]) -> None:
    """Report stage ``name`` of ``realm.space`` finished with ``metadata`` (its result's)."""
    sink = _sink.get()
    if sink is not None:
        sink.finished(name, f"{realm}.{space}", metadata, None)


@contextmanager
def part(before: int, total: int) -> Iterator[None]:
    """Inside the block, the loop reporting is one part of a stage's work (a batch of a run extracted in
    batches, issue 30): its ``done`` counts after the ``before`` units of the earlier parts, of the run's
    ``total``."""
    token = _part.set((before, total))
    try:
        yield
    finally:
        _part.reset(token)


def advance(done: int, total: int, unit: str = "chunks", **fields: Any) -> None:
    """Report ``done`` of ``total`` ``unit`` through in the stage running in this context (within a
    :func:`part`, of the whole run); a no-op outside a stage or without a sink."""
    sink, where, within = _sink.get(), _where.get(), _part.get()
    if within is not None:
        done, total = within[0] + done, within[1]
    if sink is not None and where is not None:
        sink.advanced(where[0], where[1], done, total, unit, fields)
