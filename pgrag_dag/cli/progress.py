"""What ``pgrag index`` and ``pgrag demo`` show while they run (issue 16 items 3 and 6): a rich progress bar
per stage (on a terminal) or one line per finished stage (in a log), warnings printed once each, and a
failure as one line naming the stage or asset, the partition and the cause, with the stack trace in a
log file the line names.

Everything goes to stderr, so stdout holds only the summary (or ``--json``'s document).
"""

from __future__ import annotations

import contextlib
import logging
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from pgrag_dag import progress
from pgrag_dag.errors import RunFailedError
from pgrag_dag.operate.summary import counted


def _rate(done: int, seconds: float, unit: str) -> str:
    return f"{done / max(seconds, 1e-6):,.1f} {unit}/s" if done else ""


def _left(seconds: float) -> str:
    """``"1h02m"``, ``"4m05s"``, ``"12s"``: a time left, to the second."""
    s = int(round(seconds))
    return (
        f"{s // 3600}h{s % 3600 // 60:02d}m"
        if s >= 3600
        else f"{s // 60}m{s % 60:02d}s"
        if s >= 60
        else f"{s}s"
    )


class CountColumn(ProgressColumn):
    """``1,204/2,051 chunks``: a task's done of total in its ``unit`` field, thousands separated; ``done``
    for a finished task that counted nothing, blank while its total is not known yet."""

    def render(self, task: Task) -> Text:
        unit = task.fields.get("unit", "")
        if not unit:
            return Text("done" if task.finished else "", style="progress.download")
        total = f"{int(task.total):,}" if task.total is not None else "?"
        return Text(f"{int(task.completed):,}/{total} {unit}", style="progress.download")


class RateColumn(ProgressColumn):
    """A task's rate in its own unit (``12.3 chunks/s``): rich's moving estimate over the last
    ``speed_estimate_period`` seconds while it runs (done over elapsed while rich has too few samples); once
    finished, done over the whole time it took (what the next run of the same size may expect). Blank
    before the first unit is through. The unit is the task's ``unit`` field."""

    def render(self, task: Task) -> Text:
        seconds = task.finished_time or task.elapsed
        speed = None if task.finished_time else task.speed
        if speed is None and task.completed and seconds:
            speed = task.completed / seconds
        unit = task.fields.get("unit", "")
        return Text(f"{speed:,.1f} {unit}/s" if speed and unit else "", style="progress.data.speed")


class StageLine(ProgressColumn):
    """A stage's whole line, fitted to the terminal's width (read at each refresh): ``wiki.demo embeddings
    ━━━━╸──── 1,204/2,051 texts 12.3 texts/s 14 model calls 0:01:02 elapsed, 1:05 left``. The counts, the
    rate and the times are always whole; what does not fit goes first — the bar, then the model calls, then
    the description's end (an ellipsis). A table of separate columns instead shrinks every column alike, and
    at 80 columns left nothing readable (a trial's ``trial30docs.trial30docs embeddings``)."""

    BAR = 20
    """The bar's width in columns, shown only when the line has room for it."""

    def __init__(self, console: Console) -> None:
        super().__init__()
        self.console = console
        self.parts = (CountColumn(), RateColumn(), TimeElapsedColumn(), TimeRemainingColumn(compact=True))

    def render(self, task: Task) -> Text:
        count, rate, elapsed, left = (str(c.render(task)) for c in self.parts)
        seconds = task.finished_time or task.elapsed
        if not task.finished and seconds and (estimate := time_left(task.fields, seconds)) is not None:
            minutes, secs = divmod(int(round(estimate)), 60)  # as rich writes it: 04:05, 1:02:03
            left = (
                f"{minutes // 60}:{minutes % 60:02d}:{secs:02d}"
                if minutes >= 60
                else f"{minutes:02d}:{secs:02d}"
            )
        times = f"{elapsed} elapsed, {left or '--:--'} left"  # rich leaves it blank before the total is known
        calls = str(task.fields.get("calls") or "")
        tail = " ".join(t for t in (count, rate, times) if t)
        width = self.console.width - 1
        description = Text.from_markup(task.description).plain
        stage, partition = task.fields.get("stage"), task.fields.get("partition")
        if stage and partition and len(description) > width - len(tail) - 1:
            description = f"{stage} {partition}"  # cut short, the partition's end goes, never the stage
        if calls and len(description) + len(tail) + len(calls) + 2 <= width:
            tail = " ".join(t for t in (count, rate, calls, times) if t)
        line = Text(no_wrap=True, overflow="ellipsis")
        # never less than the stage's name: too narrow for it and the counts, the line's end goes instead
        room = max(width - len(tail) - 1, len(stage or "") + 1)
        line.append(description if len(description) <= room else description[: max(room - 1, 0)] + "…")
        if room - len(description) > self.BAR + 1 and task.total:
            done = round(self.BAR * min(task.completed / task.total, 1.0))
            line.append(" ")
            line.append("━" * done, style="bar.complete")
            line.append("─" * (self.BAR - done), style="bar.back")
        line.append(" ")
        line.append(tail, style="progress.download")
        return line


def time_left(fields: dict[str, Any], seconds: float) -> float | None:
    """Seconds left by the work a stage reports beside its count (``work`` of ``work_total``: the
    embeddings stage's characters, :func:`pgrag_dag.pipeline.embeddings.embed_pending`), ``seconds`` into
    it; ``None`` when it reports none (the count then says it)."""
    work, whole = fields.get("work"), fields.get("work_total")
    if not work or not whole:
        return None
    return max(whole - work, 0) * seconds / work


@dataclass
class _Stage:
    task: TaskID
    start: float
    done: int = 0
    total: int = 0
    unit: str = "chunks"
    fields: dict[str, Any] = field(default_factory=dict)
    said: float = 0.0
    """When its last progress line was printed (not on a terminal)."""


FINAL_COUNTS: dict[str, tuple[str, str]] = {
    "chunks": ("documents", "documents"),
    "gated_triples": ("chunks_gated", "chunks"),
    "resolved_entities": ("chunks_resolved", "chunks"),
    "relations": ("edges_rebuilt", "edges"),
    "communities": ("communities", "reports"),
    "community_hierarchy": ("parents", "reports"),
}
"""For a stage that finished without reporting progress (it was quick): the metadata key whose count its
finished bar shows, and the unit — so no bar reads "1/1"."""


class StageDisplay:
    """A :class:`pgrag_dag.progress.Sink` drawing one rich progress bar per stage on ``console`` when the
    console is a terminal — done of total chunks or texts, their rate (rich's moving estimate), the model
    calls made, the time elapsed and the time left. Else (a log, CI) one line per finished stage
    (``wiki.demo relations: done in 0.41 s, 1,204 rows changed``) and, for a long stage, a progress line
    every ``every_s`` seconds (``wiki.demo embeddings: 320/1,036 texts, 6.8 texts/s, about 1m45s left``).
    A failed or interrupted stage is remembered in :attr:`failed` as ``(stage, partition)``. :meth:`close`
    ends the display (the bars' last frame drawn) before what is printed after it."""

    def __init__(self, console: Console, *, every_s: float = 10.0) -> None:
        self.console = console
        self.live = console.is_terminal
        self.every_s = every_s
        self.bars = Progress(StageLine(console), console=console, disable=not self.live)
        self.stages: dict[tuple[str, str], _Stage] = {}
        self.failed: tuple[str, str] | None = None

    def __enter__(self) -> StageDisplay:
        self.bars.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the display, once: the bars' last frame stays where it is and what the console prints next
        goes below it (printed while the bars run, it would go above them). Closing again does nothing."""
        if self.bars.live.is_started:
            self.bars.stop()

    def started(self, stage: str, partition: str) -> None:
        task = self.bars.add_task(
            escape(f"{partition} {stage}"), total=None, unit="", calls="", stage=stage, partition=partition
        )
        now = time.monotonic()
        self.stages[(stage, partition)] = _Stage(task, now, said=now)

    def advanced(
        self, stage: str, partition: str, done: int, total: int, unit: str, fields: dict[str, Any]
    ) -> None:
        s = self.stages.get((stage, partition))
        if s is None:
            return
        s.done, s.total, s.unit, s.fields = done, total, unit, fields
        calls = f"{fields['model_calls']:,} model calls" if "model_calls" in fields else ""
        self.bars.update(
            s.task,
            completed=done,
            total=total,
            unit=unit,
            calls=calls,
            work=fields.get("work"),
            work_total=fields.get("work_total"),
        )
        now = time.monotonic()
        if not self.live and now - s.said >= self.every_s and done < total:
            s.said = now
            self.console.print(
                escape(f"{partition} {stage}: {self.line(s, now)}"), highlight=False, soft_wrap=True
            )

    def line(self, s: _Stage, now: float) -> str:
        """``"320/1,036 texts, 6.8 texts/s, about 1m45s left"``: a running stage's progress in words, its
        rate over the stage so far."""
        seconds = now - s.start
        text = f"{s.done:,}/{s.total:,} {s.unit}"
        if s.done:
            left = time_left(s.fields, seconds)
            left = (s.total - s.done) * seconds / s.done if left is None else left
            text += f", {_rate(s.done, seconds, s.unit)}, about {_left(left)} left"
        return text

    def finished(
        self, stage: str, partition: str, metadata: dict[str, Any] | None, error: BaseException | None
    ) -> None:
        s = self.stages.pop((stage, partition), None)
        seconds = time.monotonic() - s.start if s is not None else 0.0
        if s is not None and s.task is not None:
            if error is None:  # a failed stage's bar stays where it stopped
                key, unit = FINAL_COUNTS.get(stage, ("", s.unit))
                quick = int((metadata or {}).get(key) or 0) if not s.total else 0
                n = max(s.done, s.total, quick, 1)
                # a quick stage shows its count from the metadata; one that counted nothing, "done"
                self.bars.update(
                    s.task, total=n, completed=n, unit=unit if quick else s.unit if s.total else ""
                )
            self.bars.stop_task(s.task)
        if error is not None:
            self.failed = (stage, partition)
        if self.live or error is not None:
            return
        self.console.print(
            escape(
                f"{partition} {stage}: done in {seconds:.2f} s{_outcome(stage, metadata or {}, s, seconds)}"
            ),
            highlight=False,
            soft_wrap=True,
        )


def _outcome(stage: str, meta: dict[str, Any], s: _Stage | None, seconds: float) -> str:
    """``", 58 chunks (12.0 chunks/s), 0 model calls, 7 rows changed"`` — what a finished stage's line
    adds."""
    parts = []
    if s is not None and s.done:
        parts.append(f"{s.done:,} {s.unit} ({_rate(s.done, seconds, s.unit)})")
    elif stage == "chunks" and "chunks" in meta:
        parts.append(f"{counted(meta['chunks'], 'chunk')} in {counted(meta.get('documents', 0), 'document')}")
    if meta.get("model_calls") or meta.get("cache_hits"):
        parts.append(
            f"{counted(meta.get('model_calls', 0), 'model call')}, "
            f"{counted(meta.get('cache_hits', 0), 'cache hit')}"
        )
    if "rows_changed" in meta:
        parts.append(f"{counted(meta['rows_changed'], 'row')} changed")
    return "".join(", " + p for p in parts)


class OnceHandler(logging.Handler):
    """Prints each distinct WARNING (or worse) record of the ``pgrag_dag`` loggers once, as
    ``warning: <message>`` on the console; repeats are counted in :attr:`repeats`."""

    def __init__(self, console: Console) -> None:
        super().__init__(logging.WARNING)
        self.console, self.seen, self.repeats = console, set[str](), 0

    def emit(self, record: logging.LogRecord) -> None:
        self.say(record.getMessage(), "error" if record.levelno >= logging.ERROR else "warning")

    def say(self, message: str, level: str = "warning") -> None:
        """Print ``level: message`` unless the same message was said before."""
        text = " ".join(message.split())
        if text in self.seen:
            self.repeats += 1
            return
        self.seen.add(text)
        self.console.print(escape(f"{level}: {text}"), highlight=False, soft_wrap=True)


@contextlib.contextmanager
def watching(
    console: Console | None = None, *, every_s: float = 10.0
) -> Iterator[tuple[StageDisplay, OnceHandler]]:
    """Inside the block: stage progress to a :class:`StageDisplay` (a progress line every ``every_s``
    seconds when ``console`` is no terminal), and the ``pgrag_dag`` loggers' warnings through a
    :class:`OnceHandler` (instead of the root logger's ``WARNING:name:`` lines), on ``console`` (default:
    stderr). Both are yielded; the logger is restored after."""
    console = console or Console(stderr=True)
    logger = logging.getLogger("pgrag_dag")
    handler = OnceHandler(console)
    before = logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    try:
        with StageDisplay(console, every_s=every_s) as display, progress.reporting(display):
            yield display, handler
    finally:
        logger.removeHandler(handler)
        logger.propagate = before


def log_failure(data_dir: Path, exc: BaseException) -> Path | None:
    """Append ``exc``'s stack trace (a :class:`RunFailedError`'s steps' traces as Dagster recorded them) to
    ``<data_dir>/logs/pgrag-errors.log`` with a time stamp; returns the file, or ``None`` when it cannot be
    written (a read-only data directory: the line then says so)."""
    path = data_dir / "logs" / "pgrag-errors.log"
    trace = (
        exc.details
        if isinstance(exc, RunFailedError) and exc.details
        else "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    )
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as f:
            f.write(f"=== {datetime.now(UTC).isoformat()} {type(exc).__name__}: {exc}\n{trace}\n")
    except OSError:
        return None
    return path


def failure_line(exc: BaseException, where: str, log: Path | None) -> str:
    """One line for a failed run: ``error: <where>: <Class>: <message> (stack trace: <log>)``. ``where`` names
    the failed stage or asset and the partition; a :class:`RunFailedError`'s steps and causes are its
    message. Newlines in the message are folded."""
    text = " ".join(str(exc).split()) or "(no message)"
    cause = text if isinstance(exc, RunFailedError) else f"{type(exc).__name__}: {text}"
    return (
        f"error: {where}: {cause} ({'stack trace in ' + str(log) if log else 'no log file could be written'})"
    )


def report_failure(console: Console, data_dir: Path, exc: BaseException, where: str) -> None:
    """:func:`log_failure` then print :func:`failure_line` on ``console``."""
    console.print(
        escape(failure_line(exc, where, log_failure(data_dir, exc))), highlight=False, soft_wrap=True
    )


def run_failure_where(exc: BaseException, display: StageDisplay, partition: str) -> str:
    """Where a run failed, for :func:`failure_line`: the failed assets of a :class:`RunFailedError`
    (``assets relations of wiki.demo``), else the stage the display saw fail, else the partition."""
    if isinstance(exc, RunFailedError):
        steps = sorted({r.split(":", 1)[0] for r in exc.reasons})
        return f"asset{'s' if len(steps) > 1 else ''} {', '.join(steps)} of {partition}"
    if display.failed is not None:
        return f"stage {display.failed[0]} of {display.failed[1]}"
    return f"partition {partition}"


@contextlib.contextmanager
def reembed_progress(realm: str) -> Iterator[Callable[[int, int], None]]:
    """A rich progress bar on stderr for :func:`pgrag_dag.operate.reembed.reembed_realm` (texts embedded of
    the total, texts/s), shown from the first call of the ``progress(done, total)`` callback it yields
    (a command that embeds nothing prints nothing)."""
    bar = Progress(
        TextColumn(f"re-embedding {escape(realm)}"),
        BarColumn(),
        CountColumn(),
        RateColumn(),
        TimeElapsedColumn(),
        TextColumn("elapsed,"),
        TimeRemainingColumn(compact=True),
        TextColumn("left"),
        console=Console(stderr=True),
    )
    task: TaskID | None = None

    def update(done: int, total: int) -> None:
        nonlocal task
        if task is None:
            bar.start()
            task = bar.add_task(realm, total=total, unit="texts")
        bar.update(task, completed=done)

    try:
        yield update
    finally:
        if task is not None:
            bar.stop()
