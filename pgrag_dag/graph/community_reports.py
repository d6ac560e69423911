"""Community reports (paper §6): one per cluster, largest first, in batches a stage commits as they come.

:func:`report_batches` asks the model for every cluster's report concurrently, in cluster order
(0 = largest), and yields them in batches — the next cluster in order and every later one already in —
so a build cut short (a deadline, a budget, a killed run) has committed the largest clusters. A
report that cannot be used, or that a deadline or budget cut, is skipped, never fabricated, and named
with the cluster's member entities (:class:`SkippedReport`). :func:`write_reports` is all of it at
once. Extractive reports (no model) come from :func:`pgrag_dag.graph.communities.extractive_report`.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from pgrag_dag.errors import ModelError
from pgrag_dag.graph.communities import (
    ask_report,
    extractive_report,
    member_label,
    qualify_title,
    render_community,
    report_row,
    reports_frame,
)
from pgrag_dag.providers.llm import ModelClient
from pgrag_dag.providers.prompts import REPORT_SYSTEM

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SkippedReport:
    """A cluster left without a report: ``cluster`` (local id), ``size``, ``members`` (names, highest
    internal degree first), ``kind`` (``failed`` | ``deadline`` | ``budget``) and ``reason``."""

    cluster: int
    size: int
    members: list[str]
    kind: str
    reason: str

    @property
    def owed(self) -> bool:
        """A failed or deadline-cut report is work still to do; a budget cut is what was configured."""
        return self.kind != "budget"

    def line(self) -> str:
        """``cluster N: reason [members: N entities: A, B, …]``, as logs and ``pending_work`` show it."""
        return f"cluster {self.cluster}: {self.reason} [members: {member_label(self.members)}]"

    def record(self) -> dict[str, Any]:
        """The skip as asset metadata: cluster, size, kind, reason and up to 12 member names."""
        return {
            "cluster": self.cluster,
            "size": self.size,
            "kind": self.kind,
            "reason": self.reason,
            "members": self.members[:12]
            + ([f"… {len(self.members) - 12} more"] if len(self.members) > 12 else []),
        }


@dataclass
class ReportBatch:
    """Reports ready to commit (rows as :func:`write_reports` frames them, cluster order) and the
    clusters skipped meanwhile."""

    reports: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[SkippedReport] = field(default_factory=list)

    def frame(self) -> pl.DataFrame:
        """The batch's reports as a frame (``cluster`` + report columns)."""
        return reports_frame(self.reports, "cluster")


def report_batches(
    clusters: pl.DataFrame,
    entities: pl.DataFrame,
    relations: pl.DataFrame,
    client: ModelClient | None,
    *,
    purpose: str = "community_report",
    concurrency: int = 4,
    deadline_s: float | None = None,
    max_reports: int | None = None,
) -> Iterator[ReportBatch]:
    """One report per cluster (§6), yielded in batches largest cluster first, so a caller can commit
    each batch as it comes and a build cut short still holds the largest clusters.

    Arguments as for :func:`write_reports`, plus:
        deadline_s: wall-clock seconds for the model-written reports of this build (``None``: no
            limit). At the deadline, every report already in is yielded and the clusters whose report
            is not are skipped (``deadline``); calls in flight finish in the background and their
            responses are cached for the next build.
        max_reports: ask the model for the ``max_reports`` largest clusters only; the others are
            skipped (``budget``) without a call.

    Calls run concurrently (at most ``concurrency``), asked in cluster order; a batch is the next
    cluster in order and every later one whose report is already in. Extractive reports
    (``client=None``) come as one batch and ignore ``deadline_s`` and ``max_reports``. Every skip is
    logged naming the cluster's member entities.

    Raises:
        DatabaseError: the response cache's database went away; raised as soon as a call meets it.
    """
    names = {int(i): str(n) for i, n in entities.select("id", "name").iter_rows()}
    members: dict[int, list[int]] = defaultdict(list)
    for c, e in clusters.select("cluster", "entity_id").sort("cluster", "entity_id").iter_rows():
        members[int(c)].append(int(e))
    order = sorted(members, key=lambda c: (-len(members[c]), c))
    named = relations.with_columns(
        pl.col("source_id").replace_strict(names, default=None, return_dtype=pl.String).alias("source"),
        pl.col("target_id").replace_strict(names, default=None, return_dtype=pl.String).alias("target"),
    )
    inners: list[pl.DataFrame] = []
    ranked: dict[int, list[str]] = {}  # cluster -> member names, highest internal degree first
    for c in order:
        ids = members[c]
        inner = named.filter(pl.col("source_id").is_in(ids) & pl.col("target_id").is_in(ids))
        inners.append(inner)
        ends = pl.concat([inner["source_id"], inner["target_id"]]).value_counts(name="n")
        degree = {int(e): int(n) for e, n in ends.iter_rows()}
        ranked[c] = [
            names[e] for e in sorted(ids, key=lambda e: (-degree.get(e, 0), names.get(e, ""))) if e in names
        ]
    seen: set[str] = set()
    position = {c: k for k, c in enumerate(order)}

    def batch(
        done: list[tuple[int, dict[str, Any] | str]],
        cut: list[int] | None = None,
        kind: str = "",
        why: str = "",
    ) -> ReportBatch:
        out = ReportBatch()
        for c, result in sorted(done, key=lambda cr: position[cr[0]]):
            if isinstance(result, str):
                out.skipped.append(SkippedReport(c, len(members[c]), ranked[c], "failed", result))
                continue
            result["title"] = qualify_title(result["title"], ranked[c], seen)
            seen.add(result["title"].lower())
            out.reports.append(report_row("cluster", c, result, len(members[c])))
        out.skipped += [SkippedReport(c, len(members[c]), ranked[c], kind, why) for c in cut or []]
        for skip in out.skipped:
            log.warning("community report skipped: %s", skip.line())
        return out

    if client is None:
        yield batch(
            [(c, extractive_report(ranked[c], inner)) for c, inner in zip(order, inners, strict=True)]
        )
        return
    asked = order if max_reports is None else order[:max_reports]
    prompts = [
        render_community(entities.filter(pl.col("id").is_in(members[c])), inner)
        for c, inner in zip(asked, inners, strict=False)
    ]

    def one(prompt: str) -> dict[str, Any] | str:
        try:
            return ask_report(client, REPORT_SYSTEM, prompt, purpose)
        except (ValueError, ModelError) as exc:
            return f"{type(exc).__name__}: {exc}"

    deadline = None if deadline_s is None else time.monotonic() + deadline_s
    pool = ThreadPoolExecutor(max_workers=max(1, concurrency), thread_name_prefix="pgrag-report")
    try:
        futures = [pool.submit(one, p) for p in prompts]
        i = 0
        while i < len(futures):
            if not _next_ready(futures, i, deadline):
                ready = [j for j in range(i, len(futures)) if futures[j].done()]
                yield batch(
                    [(asked[j], futures[j].result()) for j in ready],
                    [asked[j] for j in range(i, len(futures)) if j not in ready],
                    "deadline",
                    f"cut by the deadline (communities.report_deadline_s = {deadline_s:g} s)",
                )
                break
            j = i
            while j < len(futures) and futures[j].done():
                j += 1
            yield batch([(asked[k], futures[k].result()) for k in range(i, j)])
            i = j
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    if len(asked) < len(order):
        yield batch(
            [], order[len(asked) :], "budget", f"cut by the budget (communities.max_reports = {max_reports})"
        )


def _next_ready(futures: list[Future[Any]], i: int, deadline: float | None) -> bool:
    """Wait until ``futures[i]`` is done (``True``) or the deadline passed (``False``); the first
    exception a done future holds is raised at once."""
    while True:
        for f in futures[i:]:
            if f.done() and f.exception() is not None:
                raise f.exception()  # type: ignore[misc]
        if futures[i].done():
            return True
        remaining = None if deadline is None else deadline - time.monotonic()
        if remaining is not None and remaining <= 0:
            return False
        wait([f for f in futures[i:] if not f.done()], timeout=remaining, return_when=FIRST_COMPLETED)


def write_reports(
    clusters: pl.DataFrame,
    entities: pl.DataFrame,
    relations: pl.DataFrame,
    client: ModelClient | None,
    *,
    purpose: str = "community_report",
    concurrency: int = 4,
    deadline_s: float | None = None,
    max_reports: int | None = None,
) -> tuple[pl.DataFrame, list[str]]:
    """One report per cluster, largest cluster first (§6): model-written, or — with ``client=None``
    — an :func:`extractive_report` (no model). All of :func:`report_batches` at once.

    Args:
        clusters: output of :func:`detect_communities` (``cluster``, ``entity_id``).
        entities: ``id``, ``name``, ``entity_type``, ``description``.
        relations: ``source_id``, ``target_id``, ``predicate``, ``description``, ``negated``,
            ``valid_from``, ``valid_to``; only relations with both endpoints in a cluster are rendered.
        client: the chat client; one call per cluster with :data:`REPORT_SYSTEM` (JSON mode); ``None``
            writes extractive reports, marked as not model-written.
        concurrency: parallel model calls; results keep cluster order.
        deadline_s, max_reports: see :func:`report_batches`.

    Returns:
        ``(reports, failures)``: reports with ``cluster`` (Int64), ``title``, ``summary``,
        ``findings`` (JSON text), ``rating`` (0–10), ``size`` (member entities), ``report`` (flattened
        text for embedding); failures as ``"cluster N: reason [members: …]"`` (:meth:`SkippedReport.line`).
        A report that cannot be parsed, or whose call raised :class:`ModelError`, is logged and skipped —
        never fabricated. A title equal (case-insensitively) to an earlier one is qualified with a
        member entity name not in it.

    Raises:
        DatabaseError: the response cache's database went away; raised at once, no further report is
            asked for.
    """
    batches = list(
        report_batches(
            clusters,
            entities,
            relations,
            client,
            purpose=purpose,
            concurrency=concurrency,
            deadline_s=deadline_s,
            max_reports=max_reports,
        )
    )
    rows = [r for b in batches for r in b.reports]
    return reports_frame(rows, "cluster"), [s.line() for b in batches for s in b.skipped]
