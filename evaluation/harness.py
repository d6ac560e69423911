"""What every evaluation harness of issue 17 shares: the record of a run — its name, the configuration and
models it ran with, the git revision of the code, the time it took, whether it is reportable (§9: a run with
excluded items is not, until that count is zero) — written as JSON beside a Markdown report with its tables
and plots, and a progress bar for long loops.

A harness builds a :class:`RunRecord`, fills ``results`` (any JSON-able values), ``tables`` and ``plots``,
and calls :func:`write_run`; ``evaluation/README.md`` says which harness writes which table.
"""

from __future__ import annotations

import json
import platform
import subprocess
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from evaluation.benchmarks import RunGuard

ROOT = Path(__file__).resolve().parents[1]


def git_revision(root: Path = ROOT) -> str:
    """The commit the code under ``root`` is at, with ``-dirty`` when tracked files differ from it, or
    ``"unknown"`` outside a git checkout."""
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + ("-dirty" if dirty else "")


@dataclass
class Table:
    """A Markdown table of a report: ``title``, ``headers`` and ``rows`` (cells any value: floats are written
    with ``digits`` decimals), and an optional ``note`` under it."""

    title: str
    headers: Sequence[str]
    rows: Sequence[Sequence[Any]]
    note: str = ""
    digits: int = 3

    def markdown(self) -> str:
        """The table as GitHub Markdown, under a ``###`` heading."""

        def cell(v: Any) -> str:
            if isinstance(v, float):
                return f"{v:.{self.digits}f}"
            return "" if v is None else str(v).replace("|", "\\|").replace("\n", " ")

        lines = [
            f"### {self.title}",
            "",
            "| " + " | ".join(self.headers) + " |",
            "|" + "|".join("---" for _ in self.headers) + "|",
        ]
        lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in self.rows]
        return "\n".join(lines + ([f"\n{self.note}"] if self.note else [])) + "\n"


@dataclass
class RunRecord:
    """One evaluation run. ``config`` holds what decides its result (settings, arms, k values, seeds),
    ``models`` the model names per role (``{"extraction": …, "answering": […], "judges": […]}``), ``guard``
    the items excluded (:class:`~evaluation.benchmarks.RunGuard`, ``None`` for a run over no benchmark);
    ``git_revision``, ``started_at`` (UTC, ISO-8601), ``host`` and ``seconds`` are filled in by
    :func:`timed_run`."""

    name: str
    config: dict[str, Any] = field(default_factory=dict)
    models: dict[str, Any] = field(default_factory=dict)
    results: dict[str, Any] = field(default_factory=dict)
    tables: list[Table] = field(default_factory=list)
    plots: list[Path] = field(default_factory=list)
    guard: RunGuard | None = None
    git_revision: str = ""
    started_at: str = ""
    host: str = ""
    seconds: float = 0.0

    @property
    def reportable(self) -> bool:
        """Whether the run may be reported: no item was excluded, no document count differs."""
        return self.guard is None or self.guard.reportable

    def as_dict(self) -> dict[str, Any]:
        """The record as JSON-able values (tables as lists, plots as paths relative to the result file)."""
        return {
            "name": self.name,
            "reportable": self.reportable,
            "guard": self.guard.report() if self.guard else None,
            "git_revision": self.git_revision,
            "started_at": self.started_at,
            "host": self.host,
            "seconds": round(self.seconds, 3),
            "config": self.config,
            "models": self.models,
            "results": self.results,
            "tables": [asdict(t) for t in self.tables],
            "plots": [p.name for p in self.plots],
        }

    def markdown(self) -> str:
        """The report: title, the reportable verdict (with what was excluded), revision and models, the tables
        and the plots (linked by file name, written beside the report)."""
        head = [
            f"# {self.name}",
            "",
            (
                "Reportable: yes (no item excluded)."
                if self.reportable
                else f"**Not reportable**: {self.guard.summary() if self.guard else ''}"
            ),
            "",
            f"Code revision `{self.git_revision}`, started {self.started_at} on {self.host}, "
            f"{self.seconds:.1f} s.",
            "",
        ]
        if self.models:
            head += [
                "Models: " + "; ".join(f"{role}: {_names(m)}" for role, m in self.models.items()) + ".",
                "",
            ]
        body = [t.markdown() for t in self.tables] + [f"![{p.stem}]({p.name})\n" for p in self.plots]
        return "\n".join(head) + "\n".join(body)


def _names(models: Any) -> str:
    return ", ".join(models) if isinstance(models, (list, tuple)) else str(models)


@contextmanager
def timed_run(record: RunRecord) -> Iterator[RunRecord]:
    """Stamp ``record`` with the git revision, the start instant and host, and (when the block ends, also by
    an error) the seconds it took."""
    record.git_revision = record.git_revision or git_revision()
    record.started_at = datetime.now(UTC).isoformat(timespec="seconds")
    record.host = f"{platform.node()} ({platform.machine()}, {platform.python_version()})"
    t0 = time.perf_counter()
    try:
        yield record
    finally:
        record.seconds = time.perf_counter() - t0


def write_run(record: RunRecord, out_dir: Path) -> tuple[Path, Path]:
    """Write ``<out_dir>/<name>.json`` and ``<out_dir>/<name>.md`` (the directory is created; plots must be
    in it already) and return both paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = record.name.replace(" ", "_").replace("/", "_")
    js, md = out_dir / f"{stem}.json", out_dir / f"{stem}.md"
    js.write_text(json.dumps(record.as_dict(), indent=2, default=str) + "\n", encoding="utf-8")
    md.write_text(record.markdown(), encoding="utf-8")
    return js, md


def progress(items: Iterable[Any], description: str, total: int | None = None) -> Iterator[Any]:
    """``items``, drawing a rich progress bar on stderr (done of ``total``, rate, elapsed) while they are
    consumed."""
    from rich.progress import track

    yield from track(items, description=description, total=total, transient=False)
