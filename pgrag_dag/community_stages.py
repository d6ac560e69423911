"""The two community stages: Leiden communities with reports, and the topic hierarchy (paper §6, §6.1).

Same shape as :mod:`pgrag_dag.pipeline`'s stages. Both skip the rebuild — no model call, no write —
when the graph (and the community settings) are unchanged since the stored build and no report of it
failed. A failed report is recorded as pending work (``stage_pending``), reported in the non-blocking
``pending_work`` check, and retried by the next run; the reports that succeeded come from the response
cache then, with no model call.
"""

from __future__ import annotations

import hashlib
import time

import polars as pl

from pgrag_dag import contracts
from pgrag_dag.communities import build_hierarchy, detect_communities, graph_fingerprint, write_reports
from pgrag_dag.engine import Engine
from pgrag_dag.errors import ModelError
from pgrag_dag.operators import compose
from pgrag_dag.pipeline import PENDING_CHECK, StageResult, usage_delta, writing_stage
from pgrag_dag.store import communities as store
from pgrag_dag.store import locks, staging, vectors
from pgrag_dag.store.lineage import lineage_summary


def report_writer(engine: Engine, realm: str, space: str) -> str:
    """Who writes the space's community reports: ``model`` or ``extractive`` (the space's ``reports``;
    ``auto`` = extractive when its extractor calls no model and the only model is ``replay``)."""
    choice = engine.settings.space_spec(realm, space).reports
    if choice != "auto":
        return choice
    offline = not compose(engine.settings, realm, space).extractor.op.calls_model and engine.settings.llm.models == ["replay"]
    return "extractive" if offline else "model"


def _fingerprint(engine: Engine, entities: pl.DataFrame, relations: pl.DataFrame, writer: str) -> str:
    """Graph fingerprint combined with the community settings and the report writer, so a change of
    either rebuilds."""
    settings = engine.settings.communities.model_dump_json() + ("" if writer == "model" else writer)
    return hashlib.sha256((graph_fingerprint(entities, relations) + settings).encode()).hexdigest()


def _embed_reports(engine: Engine, conn: object, realm: str, space: str) -> int:
    rows = vectors.pending(conn, realm, space, "communities")  # type: ignore[arg-type]
    return vectors.write(conn, realm, "communities", rows, engine.embedder().embed([t for _, t, _ in rows]) if rows else [])  # type: ignore[arg-type]


@writing_stage("communities")
def stage_communities(engine: Engine, realm: str, space: str) -> StageResult:
    """Snapshot the live graph → Leiden → drop clusters under ``min_size`` → one report each, largest first
    (model-written, or extractive where the space has no model: :func:`report_writer`).

    Rebuild replaces the space's communities. Raises :class:`ModelError` when there were clusters and
    every report failed (an outage must not replace a build with nothing).
    """
    t0 = time.perf_counter()
    before = engine.usage()
    cs = engine.settings.communities
    with engine.connect() as conn:
        entities, relations = store.load_graph(conn, realm, space)
        stored = store.current_fingerprint(conn, realm, space)
        owed = staging.load_pending(conn, realm, space, "communities")
    writer = report_writer(engine, realm, space)
    fp = _fingerprint(engine, entities, relations, writer)
    if stored == fp and not owed:
        with engine.connect() as conn:
            members, reports, _ = store.load_base(conn, realm, space)
            lineage = lineage_summary(conn, realm, space)
        return StageResult("communities", {"skipped": "graph unchanged since the last build", "communities": reports.height,
                                           "report_writer": writer, **lineage, **usage_delta(engine, before)}, fp[:16], members.height,
                           checks={PENDING_CHECK: _pending_check([])})
    clusters = detect_communities(entities, relations, settings=cs)
    client = engine.client() if writer == "model" else None
    reports, failures = write_reports(clusters, entities, relations, client,
                                      concurrency=engine.settings.extraction.concurrency)
    if clusters.height and reports.height == 0:
        raise ModelError(f"every one of {clusters['cluster'].n_unique()} community report(s) failed: {failures[:3]}")
    kept = clusters.filter(pl.col("cluster").is_in(reports["cluster"].implode()))
    sizes = kept.group_by("cluster").len("size").with_columns(pl.col("size").cast(pl.Int64))
    audit = kept.join(sizes, on="cluster").with_columns(
        community_id=pl.col("cluster"), entity_exists=pl.col("entity_id").is_in(entities["id"].implode()),
        min_size=pl.lit(cs.min_size, pl.Int64),
    )
    contracts.validate(contracts.CommunityMemberContract, audit)
    with engine.connect() as conn, conn.transaction():
        locks.lock_partition(conn, realm, space)
        counts = store.replace_communities(conn, realm, space, fingerprint=fp, reports=reports, members=kept)
        staging.record_pending(conn, realm, space, "communities", failures)
        embedded = _embed_reports(engine, conn, realm, space)
        lineage = lineage_summary(conn, realm, space)
    return StageResult("communities", {
        "communities": counts["communities"], "members": counts["members"], "clusters_found": int(clusters["cluster"].n_unique()),
        "reports_failed": len(failures), "report_failures": failures[:20], "reports_retried": len(owed), "embedded": embedded,
        "report_writer": writer, "model_written": writer == "model",
        "largest": int(sizes["size"].max() or 0) if sizes.height else 0,
        **lineage,
        **usage_delta(engine, before), "seconds": round(time.perf_counter() - t0, 3),
    }, fp[:16], audit.height, checks={PENDING_CHECK: _pending_check(failures)})


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
            parents = store.count_parents(conn, realm, space)
        return StageResult("community_hierarchy", {"skipped": "communities unchanged since the last build",
                                                   "parents": parents, **usage_delta(engine, before)},
                           fp[:16] + f":{parents}", 0, checks={PENDING_CHECK: _pending_check([])})
    if fp is None or engine.settings.communities.levels < 1:
        return StageResult("community_hierarchy", {"parents": 0, "reason": "no communities or levels = 0"}, "empty", 0,
                           checks={PENDING_CHECK: _pending_check([])})
    writer = report_writer(engine, realm, space)
    failures: list[str] = []
    parents, children = build_hierarchy(members, relations, reports, engine.client() if writer == "model" else None,
                                        settings=engine.settings.communities, entities=entities, failures=failures)
    edges = children.rename({"parent": "parent_id", "cluster": "child_id"}).with_columns(pl.all().cast(pl.Int64))
    contracts.validate(contracts.HierarchyContract, edges)
    with engine.connect() as conn, conn.transaction():
        locks.lock_partition(conn, realm, space)
        counts = store.replace_parents(conn, realm, space, fingerprint=fp, parents=parents, children=children)
        staging.record_pending(conn, realm, space, "community_hierarchy", failures)
        embedded = _embed_reports(engine, conn, realm, space)
    return StageResult("community_hierarchy", {
        "parents": counts["parents"], "children": counts["children"], "embedded": embedded, "report_writer": writer,
        "reports_failed": len(failures), "report_failures": failures[:20], "reports_retried": len(owed),
        **usage_delta(engine, before), "seconds": round(time.perf_counter() - t0, 3),
    }, fp[:16] + f":{counts['parents']}", edges.height, checks={PENDING_CHECK: _pending_check(failures)})
