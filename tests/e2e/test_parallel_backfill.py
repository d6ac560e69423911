"""Parallel partitions (issue 18 item 2).

- A backfill of four spaces launched over GraphQL (``launchPartitionBackfill``) against ``pgrag ui``'s daemon
  runs as one run per partition under the queued run coordinator: at most ``dagster.max_concurrent_runs``
  at once (more than one when the limit allows it, observed from the runs' start and end times), the
  ``llm`` pool's steps never more than ``dagster.llm_pool_limit`` at once across runs, and the stub model
  never more requests in flight than that pool allows (the limit × ``extraction.concurrency``). Run with
  the limit at 1 and at 2, the wall times of the two (serial vs parallel) are printed.
- Dagster's multiprocess executor runs one partition's steps each in a subprocess against the embedded
  PostgreSQL, and builds the graph the in-process run builds.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import dagster as dg
import pytest
import yaml

from pgrag_dag.assets.runner import dagster_home, materialize_partition, run_job_partition
from pgrag_dag.config import load_settings
from pgrag_dag.store import db
from tests.fix_corpus import DOCS, SmallCorpus
from tests.fix_daemon import (  # noqa: F401  (storage_db: a fixture)
    ACTIVE,
    STAGES,
    max_overlap,
    pgrag_ui,
    storage_db,
    wait_until,
    write_project,
)
from tests.fix_pg import drop_realm
from tests.graph_snapshot import graph_snapshot

pytestmark = [pytest.mark.dagster, pytest.mark.slow]

SPACES = ["s1", "s2", "s3", "s4"]
LLM_STEPS = {"raw_extractions", "communities", "community_hierarchy"}
"""The stages in the ``llm`` pool."""
POOL_LIMIT, EXTRACTION_CONCURRENCY = 1, 2


def _volume(i: int) -> dict[str, str]:
    """The fixture's two documents, every paragraph marked with the volume ``i`` (prompts differ per space, so
    no space is answered from another's model cache)."""
    return {name: "\n\n".join(f"Volume {i}. {p}" for p in text.split("\n\n")) for name, text in DOCS.items()}


@pytest.mark.parametrize("max_runs", [1, 2], ids=["serial", "parallel"])
def test_a_backfill_of_four_spaces_runs_in_parallel_within_the_run_and_pool_limits(
    small_corpus: SmallCorpus,
    realm: str,
    storage_db: str,
    tmp_path: Path,
    max_runs: int,
) -> None:
    keys = [f"{realm}.{s}" for s in SPACES]
    config = write_project(
        small_corpus.config,
        realm,
        {s: _volume(i) for i, s in enumerate(SPACES, 1)},
        extraction={"concurrency": EXTRACTION_CONCURRENCY},
        dagster={
            "instance_storage": "postgres",
            "storage_database": storage_db,
            "sensors": False,
            "max_concurrent_runs": max_runs,
            "llm_pool_limit": POOL_LIMIT,
            "executor": "in_process",
        },
    )
    server = small_corpus.server
    server.chat_delay_s = 0.2  # calls last long enough to overlap when two steps make them at once
    with pgrag_ui(config, tmp_path / "ui.log") as daemon:
        daemon.add_partitions(keys)
        server.reset_peak()
        launched_at = time.time()
        launched = daemon.gql(
            """mutation($p: LaunchBackfillParams!) { launchPartitionBackfill(backfillParams: $p) {
                                   __typename ... on LaunchBackfillSuccess { backfillId }
                                   ... on PythonError { message } } }""",
            {"p": {"assetSelection": [{"path": [s]} for s in STAGES], "partitionNames": keys}},
        )
        assert launched["launchPartitionBackfill"]["__typename"] == "LaunchBackfillSuccess", launched
        backfill = launched["launchPartitionBackfill"]["backfillId"]

        def finished() -> str | None:
            status = daemon.gql(
                "query($id: String!) { partitionBackfillOrError(backfillId: $id) { ... on PartitionBackfill "
                "{ status } } }",
                {"id": backfill},
            )["partitionBackfillOrError"]["status"]
            runs = [r for r in daemon.runs() if r["tags"].get("dagster/backfill") == backfill]
            ended = len(runs) >= len(keys) and not [r for r in runs if r["status"] in ACTIVE]
            return status if ended and status not in ("REQUESTED", "CANCELING", "FAILING") else None

        status = wait_until("the backfill", finished, 600, interval=2, log=daemon.log)
        runs = [r for r in daemon.runs() if r["tags"].get("dagster/backfill") == backfill]
        steps = {r["runId"]: daemon.steps(r["runId"]) for r in runs}
    peak = server.peak_in_flight

    assert status.startswith("COMPLETED") and all(r["status"] == "SUCCESS" for r in runs), (status, runs)
    # one run per partition, each of the whole chain
    assert sorted(r["tags"]["dagster/partition"] for r in runs) == sorted(keys)
    assert all(r["assets"] == sorted(STAGES) for r in runs), [r["assets"] for r in runs]
    # the queue held the runs to max_concurrent_runs, and ran more than one at once when it allowed it
    concurrent = max_overlap([(r["startTime"], r["endTime"]) for r in runs])
    assert concurrent <= max_runs and (concurrent > 1 if max_runs > 1 else concurrent == 1), concurrent
    # the llm pool held its steps to its limit across runs, and the model never had more calls than it allows
    llm = [(s["startTime"], s["endTime"]) for run in steps.values() for s in run if s["stepKey"] in LLM_STEPS]
    assert len(llm) == len(LLM_STEPS) * len(keys) and max_overlap(llm) <= POOL_LIMIT
    assert 1 <= peak <= POOL_LIMIT * EXTRACTION_CONCURRENCY, peak
    wall = max(r["endTime"] for r in runs) - launched_at
    busy = sum(r["endTime"] - r["startTime"] for r in runs)
    print(
        f"\nbackfill of {len(keys)} partitions, max_concurrent_runs={max_runs}: {wall:.0f} s wall "
        f"(runs {busy:.0f} s in total, at most {concurrent} at once; model calls at most {peak} in flight)"
    )


def test_the_multiprocess_executor_runs_a_partitions_steps_in_subprocesses_and_builds_the_in_process_graph(
    small_corpus: SmallCorpus,
    realm: str,
    pg_dsn: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))  # restored afterwards (the runner sets it)
    base = materialize_partition(
        small_corpus.settings(data_dir=str(tmp_path / "inproc"), dagster={"instance_storage": "sqlite"}),
        f"{realm}.main",
        config_path=str(small_corpus.config),
    )
    assert all(base["_checks"].values())
    expected = graph_snapshot(pg_dsn, realm, "main")

    # the same documents as a second realm, each step in a subprocess of Dagster's multiprocess executor
    other = f"{realm}m"
    cfg = yaml.safe_load(small_corpus.config.read_text(encoding="utf-8"))
    cfg["realms"][other] = cfg["realms"][realm]
    cfg["data_dir"] = str(tmp_path / "multiprocess")
    cfg["dagster"] = {"instance_storage": "sqlite"}
    config = tmp_path / "multiprocess.yaml"
    config.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    monkeypatch.setenv("PGRAG_CONFIG", str(config))
    dagster_home(load_settings(config))
    from tests.multiprocess_defs import index_job

    try:
        started = time.monotonic()
        with dg.DagsterInstance.get() as instance:
            run = run_job_partition(instance, f"{other}.main", dg.reconstructable(index_job))
            records = instance.all_logs(run.run_id)
            assert run.status == dg.DagsterRunStatus.SUCCESS, "\n".join(
                r.dagster_event.message or ""
                for r in records
                if r.dagster_event and r.dagster_event.is_failure
            )
        elapsed = time.monotonic() - started
        built = graph_snapshot(pg_dsn, other, "main")
    finally:
        with db.connect(pg_dsn, autocommit=True) as conn:
            drop_realm(conn, other)

    starts = {
        r.step_key: r.dagster_event.pid
        for r in records
        if r.dagster_event and r.dagster_event.event_type == dg.DagsterEventType.STEP_START
    }
    assert set(starts) >= set(STAGES)
    # every step in a process of its own, none in this one (the run worker)
    assert os.getpid() not in starts.values() and len(set(starts.values())) == len(starts), starts
    materialized = {
        r.dagster_event.asset_key.to_user_string()
        for r in records
        if r.dagster_event and r.dagster_event.event_type == dg.DagsterEventType.ASSET_MATERIALIZATION
    }
    assert materialized == set(STAGES)
    assert built == expected
    print(
        f"\nmultiprocess run: {elapsed:.1f} s for {len(starts)} steps "
        f"in {len(set(starts.values()))} processes"
    )
