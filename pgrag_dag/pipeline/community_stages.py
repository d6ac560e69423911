"""The two community stages: Leiden communities with reports, and the topic hierarchy (paper §6, §6.1).

Same shape as :mod:`pgrag_dag.pipeline`'s stages. Both skip the rebuild — no model call, no write —
when the graph (and the community settings) are unchanged since the stored build and no report of it
failed. The communities stage commits its build batch by batch, largest clusters first, so a build cut
short (a deadline, a budget, a killed run) covers the largest clusters. A failed or deadline-cut report
is recorded as pending work (``stage_pending``, naming the cluster's members), reported in the
non-blocking ``pending_work`` check, and retried by the next run; the reports that succeeded come from
the response cache then, with no model call. With coverage telemetry on, the communities stage's
metadata also answers §6.1's coverage questions for the new build
(:func:`pgrag_dag.pipeline.community_stages.coverage_metadata`).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import time
from collections.abc import Generator
from typing import Any, cast

import polars as pl
import psycopg

from pgrag_dag import progress
from pgrag_dag.config.sections import TelemetrySettings
from pgrag_dag.engine import Engine
from pgrag_dag.errors import ModelError
from pgrag_dag.graph.communities import build_hierarchy, detect_communities, graph_fingerprint, member_label
from pgrag_dag.graph.community_reports import ReportBatch, SkippedReport, report_batches
from pgrag_dag.operators import contracts
from pgrag_dag.pipeline.common import PENDING_CHECK, StageResult, usage_delta, writing_stage
from pgrag_dag.pipeline.composition import compose
from pgrag_dag.store import communities as store
from pgrag_dag.store import db, graph_version, history, locks, staging, vectors
from pgrag_dag.store import telemetry as telemetry_store
from pgrag_dag.store.lineage import lineage_summary

log = logging.getLogger(__name__)


def report_writer(engine: Engine, realm: str, space: str) -> str:
    """Who writes the space's community reports: ``model`` or ``extractive`` (the space's ``reports``;
    ``auto`` = extractive when its extractor calls no model and the only model is ``replay``)."""
    choice = engine.settings.space_spec(realm, space).reports
    if choice != "auto":
        return choice
    offline = not compose(
        engine.settings, realm, space
    ).extractor.op.calls_model and engine.settings.llm.models == ["replay"]
    return "extractive" if offline else "model"


def _fingerprint(engine: Engine, entities: pl.DataFrame, relations: pl.DataFrame, writer: str) -> str:
    """Graph fingerprint combined with the community settings and the report writer, so a change of
    either rebuilds."""
    settings = engine.settings.communities.model_dump_json() + ("" if writer == "model" else writer)
    return hashlib.sha256((graph_fingerprint(entities, relations) + settings).encode()).hexdigest()


def _embed_reports(engine: Engine, conn: psycopg.Connection, realm: str, space: str) -> int:
    rows = vectors.pending(conn, realm, space, "communities")
    return vectors.write(
        conn, realm, "communities", rows, engine.embedder().embed([t for _, t, _ in rows]) if rows else []
    )


@writing_stage("communities")
def stage_communities(engine: Engine, realm: str, space: str) -> StageResult:
    """Snapshot the live graph → Leiden → drop clusters under ``min_size`` → one report each, largest first
    (model-written, or extractive where the space has no model: :func:`report_writer`).

    Rebuild replaces the space's communities, committed batch by batch as the reports come in, largest
    clusters first (:func:`~pgrag_dag.graph.community_reports.report_batches`), so a build cut short by
    ``communities.report_deadline_s``, ``communities.max_reports`` or a killed run still covers the
    largest clusters. Every skipped report is named with its members in the log and in the metadata
    (``skipped_reports``); failed and deadline-cut ones are owed (``pending_work``) and asked again by
    the next run. Raises :class:`ModelError` when there were clusters and no report was written (an
    outage must not replace a build with nothing).
    """
    t0 = time.perf_counter()
    before = engine.usage()
    cs = engine.settings.communities
    with engine.connect() as conn:
        # one snapshot for the clock, the data version and the graph: the lag check counts what changed
        # after this read (issues 14, 28), and a write committing while it runs is after it, not lost
        conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        read_at = history.graph_clock(conn)
        version = graph_version.read_version(conn, realm, space)
        read_version = version[0][1] if version else None
        entities, relations = store.load_graph(conn, realm, space)
        stored = store.current_fingerprint(conn, realm, space)
        owed = staging.load_pending(conn, realm, space, "communities")
    writer = report_writer(engine, realm, space)
    fp = _fingerprint(engine, entities, relations, writer)
    if stored == fp and not owed:
        with engine.connect() as conn:
            with conn.transaction():
                history.mark_checked(conn, realm, space, "communities", read_at, read_version)
            members, reports, _ = store.load_base(conn, realm, space)
            lineage = lineage_summary(conn, realm, space)
            attention = coverage_metadata(conn, realm, space, engine.settings.telemetry)
        return StageResult(
            "communities",
            {
                "skipped": "graph unchanged since the last build",
                "communities": reports.height,
                "report_writer": writer,
                **lineage,
                **attention,
                **usage_delta(engine, before),
            },
            fp[:16],
            members.height,
            checks={PENDING_CHECK: _pending_check([])},
        )
    clusters = detect_communities(entities, relations, settings=cs)
    client = engine.client() if writer == "model" else None
    names = dict(zip(entities["id"].to_list(), entities["name"].to_list()))
    left = {
        int(c): [names.get(e, str(e)) for e in g]
        for c, g in clusters.group_by("cluster").agg(pl.col("entity_id").sort()).iter_rows()
    }
    skipped: list[SkippedReport] = []
    done: dict[str, int] = {"communities": 0, "members": 0, "embedded": 0, "checked": 0, "largest": 0}
    batches = report_batches(
        clusters,
        entities,
        relations,
        client,
        concurrency=engine.settings.extraction.concurrency,
        deadline_s=cs.report_deadline_s,
        max_reports=cs.max_reports,
    )
    total = len(left)
    progress.advance(0, total, "reports")
    with contextlib.closing(cast("Generator[ReportBatch, None, None]", batches)):
        for batch in batches:  # committed as they come, largest clusters first
            skipped += batch.skipped
            for skip in batch.skipped:
                left.pop(skip.cluster, None)
            if batch.reports:
                _commit(engine, realm, space, fp, batch.frame(), clusters, entities, left, skipped, done)
            progress.advance(total - len(left), total, "reports")
    if clusters.height and done["communities"] == 0:
        raise ModelError(
            f"every one of {clusters['cluster'].n_unique()} community report(s) failed or was cut: "
            f"{[s.line() for s in skipped[:3]]}"
        )
    failures = [s.line() for s in skipped if s.owed]
    with engine.connect() as conn, conn.transaction():
        locks.lock_partition(conn, realm, space)
        if not clusters.height:  # an empty graph: the build is nothing
            store.replace_communities(
                conn, realm, space, fingerprint=fp, reports=ReportBatch().frame(), members=clusters
            )
        staging.record_pending(conn, realm, space, "communities", failures)
        history.mark_checked(conn, realm, space, "communities", read_at, read_version)
        lineage = lineage_summary(conn, realm, space)
    with engine.connect() as conn:
        attention = coverage_metadata(conn, realm, space, engine.settings.telemetry)
    return StageResult(
        "communities",
        {
            "communities": done["communities"],
            "members": done["members"],
            "clusters_found": int(clusters["cluster"].n_unique()),
            "reports_failed": sum(s.kind == "failed" for s in skipped),
            "report_failures": failures[:20],
            "reports_cut": {k: sum(s.kind == k for s in skipped) for k in ("deadline", "budget")},
            "skipped_reports": [s.record() for s in skipped[:20]],
            "reports_retried": len(owed),
            "embedded": done["embedded"],
            "report_writer": writer,
            "model_written": writer == "model",
            "largest": done["largest"],
            **lineage,
            **attention,
            **usage_delta(engine, before),
            "seconds": round(time.perf_counter() - t0, 3),
        },
        fp[:16],
        done["checked"],
        checks={PENDING_CHECK: _pending_check(failures)},
    )


def _commit(
    engine: Engine,
    realm: str,
    space: str,
    fp: str,
    reports: pl.DataFrame,
    clusters: pl.DataFrame,
    entities: pl.DataFrame,
    left: dict[int, list[str]],
    skipped: list[SkippedReport],
    done: dict[str, int],
) -> None:
    """Commit one batch of a build (§6): the first replaces the stored build, later ones add to it; the
    reports are embedded, and what a run killed now would leave undone is recorded as pending (the
    owed skips so far and every cluster not committed yet). Updates ``left`` and ``done`` in place."""
    cs = engine.settings.communities
    kept = clusters.filter(pl.col("cluster").is_in(reports["cluster"].implode()))
    sizes = kept.group_by("cluster").len("size").with_columns(pl.col("size").cast(pl.Int64))
    audit = kept.join(sizes, on="cluster").with_columns(
        community_id=pl.col("cluster"),
        entity_exists=pl.col("entity_id").is_in(entities["id"].implode()),
        min_size=pl.lit(cs.min_size, pl.Int64),
    )
    contracts.validate(contracts.CommunityMemberContract, audit)
    for c in reports["cluster"].to_list():
        left.pop(int(c), None)
    owed = [s.line() for s in skipped if s.owed] + [
        f"cluster {c}: not written yet, the build was cut short [members: {member_label(n)}]"
        for c, n in sorted(left.items())
    ]
    with engine.connect() as conn, conn.transaction():
        locks.lock_partition(conn, realm, space)
        write = store.append_communities if done["communities"] else store.replace_communities
        counts = write(conn, realm, space, fingerprint=fp, reports=reports, members=kept)
        staging.record_pending(conn, realm, space, "communities", owed)
        done["embedded"] += _embed_reports(engine, conn, realm, space)
    done["communities"] += counts["communities"]
    done["members"] += counts["members"]
    done["checked"] += audit.height
    done["largest"] = max(done["largest"], int(cast("int | None", sizes["size"].max()) or 0))


def _pending_check(failures: list[str]) -> tuple[bool, dict[str, object]]:
    """The ``pending_work`` check of a community stage: passed when no report failed."""
    return not failures, {"pending": len(failures), "failures": failures[:20]}


@writing_stage("community_hierarchy")
def stage_community_hierarchy(engine: Engine, realm: str, space: str) -> StageResult:
    """Cluster the stored communities' supergraph into parent topics; parent reports from child reports."""
    t0 = time.perf_counter()
    before = engine.usage()
    with engine.connect() as conn:
        members, reports, fp = store.load_base(conn, realm, space)
        entities, relations = store.load_graph(conn, realm, space)
        built = store.parents_fingerprint(conn, realm, space)
        owed = staging.load_pending(conn, realm, space, "community_hierarchy")
    if fp is not None and built == fp and not owed:
        with engine.connect() as conn:
            stored_parents = store.count_parents(conn, realm, space)
        return StageResult(
            "community_hierarchy",
            {
                "skipped": "communities unchanged since the last build",
                "parents": stored_parents,
                **usage_delta(engine, before),
            },
            fp[:16] + f":{stored_parents}",
            0,
            checks={PENDING_CHECK: _pending_check([])},
        )
    if fp is None or engine.settings.communities.levels < 1:
        return StageResult(
            "community_hierarchy",
            {"parents": 0, "reason": "no communities or levels = 0"},
            "empty",
            0,
            checks={PENDING_CHECK: _pending_check([])},
        )
    writer = report_writer(engine, realm, space)
    failures: list[str] = []
    parents, children = build_hierarchy(
        members,
        relations,
        reports,
        engine.client() if writer == "model" else None,
        settings=engine.settings.communities,
        entities=entities,
        failures=failures,
    )
    edges = children.rename({"parent": "parent_id", "cluster": "child_id"}).with_columns(
        pl.all().cast(pl.Int64)
    )
    contracts.validate(contracts.HierarchyContract, edges)
    with engine.connect() as conn, conn.transaction():
        locks.lock_partition(conn, realm, space)
        counts = store.replace_parents(conn, realm, space, fingerprint=fp, parents=parents, children=children)
        staging.record_pending(conn, realm, space, "community_hierarchy", failures)
        embedded = _embed_reports(engine, conn, realm, space)
    return StageResult(
        "community_hierarchy",
        {
            "parents": counts["parents"],
            "children": counts["children"],
            "embedded": embedded,
            "report_writer": writer,
            "reports_failed": len(failures),
            "report_failures": failures[:20],
            "reports_retried": len(owed),
            **usage_delta(engine, before),
            "seconds": round(time.perf_counter() - t0, 3),
        },
        fp[:16] + f":{counts['parents']}",
        edges.height,
        checks={PENDING_CHECK: _pending_check(failures)},
    )


def coverage_metadata(
    conn: psycopg.Connection, realm: str, space: str, telemetry: TelemetrySettings, *, limit: int = 5
) -> dict[str, Any]:
    """The coverage part of the ``communities`` asset's metadata, read on ``conn`` after the build:
    ``coverage_events``, ``least_attended_communities`` (up to ``limit``, as
    :func:`pgrag_dag.operate.coverage.coverage`, ``last_at`` as ISO-8601 text) and
    ``never_retrieved_entities`` (how many); with telemetry off only ``coverage`` saying so. A realm without
    ``query_events`` (or any read error) gives ``coverage`` naming the error — read-side bookkeeping never
    fails the stage."""
    if not telemetry.coverage:
        return {"coverage": "telemetry off (telemetry.coverage)"}
    try:
        with conn.transaction():
            events, _ = telemetry_store.events_for_space(conn, realm, space)
            least = telemetry_store.least_attended_communities(conn, realm, space, limit)
            never, _ = telemetry_store.never_retrieved_entities(conn, realm, space, 0)
    except psycopg.Error as exc:
        log.warning("coverage metadata of %s.%s not read: %s", realm, space, db.one_line(exc))
        return {"coverage": f"not read: {db.one_line(exc)}"}
    return {
        "coverage_events": events,
        "never_retrieved_entities": never,
        "least_attended_communities": [
            {**c, "last_at": c["last_at"].isoformat() if c["last_at"] else None} for c in least
        ],
    }
