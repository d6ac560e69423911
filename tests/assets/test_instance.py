"""The project's Dagster instance: dagster.yaml from settings, pools, PostgreSQL storage (issue 6 item 5)."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest
from psycopg import sql

from pgrag_dag.assets.runner import dagster_home, materialize_partition
from pgrag_dag.assets.stages import ASSETS
from pgrag_dag.store import db
from tests.fix_corpus import SmallCorpus

pytestmark = pytest.mark.dagster


def test_model_calling_assets_share_the_llm_pool_whose_limit_comes_from_settings(
    small_corpus: SmallCorpus, tmp_path: Path
) -> None:
    settings = small_corpus.settings(
        dagster={"llm_pool_limit": 1, "max_concurrent_runs": 3, "instance_storage": "sqlite"},
        data_dir=str(tmp_path / "data"),
    )
    home = dagster_home(settings)
    text = (home / "dagster.yaml").read_text()
    assert "telemetry:\n  enabled: false" in text
    # as a context manager: the instance sets the thread's current defs-state storage and resets it on exit
    # (a bare dispose() left it pointing at a dead instance, failing later tests that resolve definitions)
    with dg.DagsterInstance.from_config(str(home)) as instance:
        config = instance.get_concurrency_config()
    assert config.pool_config.default_pool_limit == 1 and config.run_queue_config.max_concurrent_runs == 3
    pools = {a.key.to_user_string(): a.op.pool for a in ASSETS}
    assert {k for k, p in pools.items() if p == "llm"} == {
        "raw_extractions",
        "communities",
        "community_hierarchy",
    }


def test_dagster_instance_storage_lives_in_the_graphs_postgresql(
    small_corpus: SmallCorpus, realm: str, tmp_path: Path
) -> None:
    name = f"dagster_{realm}"
    settings = small_corpus.settings(
        dagster={"instance_storage": "postgres", "storage_database": name}, data_dir=str(tmp_path / "data")
    )
    metas = materialize_partition(settings, f"{realm}.main", config_path=str(small_corpus.config))
    assert all(metas["_checks"].values()) and metas["relations"]["relations"] > 0
    dsn = settings.database_url
    with db.connect(dsn, autocommit=True, vector=False) as conn:
        assert conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() == (1,)
    with dg.DagsterInstance.get() as instance:  # DAGSTER_HOME was set by the runner
        runs = instance.get_runs()
        assert runs and runs[0].status == dg.DagsterRunStatus.SUCCESS
        assert "postgres" in type(instance.run_storage).__module__
    with db.connect(dsn, autocommit=True, vector=False) as conn:
        conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


def test_the_sensor_interval_and_the_executor_come_from_settings(
    small_corpus: SmallCorpus, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pgrag_dag.assets.definitions import build_defs
    from pgrag_dag.resources.engine import PgragResource

    def defs() -> dg.Definitions:
        return build_defs(pgrag=PgragResource(config_path=str(small_corpus.config)))

    # inside an instance: resolving definitions reads the current instance's defs-state storage (an instance
    # an earlier test left out of order would otherwise be found dead)
    with dg.instance_for_test():
        default = defs()
        assert {s.name: s.minimum_interval_seconds for s in default.sensors} == {
            "source_sensor": 30,
            "pgrag_automation": 30,
            "communities_after_retention": 30,
        }
        assert (
            default.resolve_job_def("retention").executor_def.name == "multi_or_in_process_executor"
        )  # Dagster's
        rebuild = default.resolve_job_def(
            "communities_rebuild"
        )  # what a retention run that archived asks for
        assert sorted(k.to_user_string() for k in rebuild.asset_layer.selected_asset_keys) == [
            "communities",
            "community_hierarchy",
        ]
        monkeypatch.setenv("PGRAG_DAGSTER__SENSOR_INTERVAL_S", "5")
        monkeypatch.setenv("PGRAG_DAGSTER__EXECUTOR", "in_process")
        tuned = defs()
        assert {s.name: s.minimum_interval_seconds for s in tuned.sensors} == {
            "source_sensor": 5,
            "pgrag_automation": 5,
            "communities_after_retention": 5,
        }
        assert tuned.resolve_job_def("retention").executor_def.name == "in_process"


def test_a_retention_run_that_archived_requests_its_partition_s_community_rebuild() -> None:
    """Archiving moves no upstream data version, so a run-status sensor follows each retention run that
    archived with a ``communities_rebuild`` run of its partition (issue 28); a dry run requests nothing."""
    from pgrag_dag.assets.retention import rebuild_request

    def run(dry_run: bool | None, partition: str | None = "books.main") -> dg.DagsterRun:
        config = {} if dry_run is None else {"ops": {"retention_op": {"config": {"dry_run": dry_run}}}}
        tags = {"dagster/partition": partition} if partition else {}
        return dg.DagsterRun(
            job_name="retention", run_id=f"r-{dry_run}-{partition}", run_config=config, tags=tags
        )

    request = rebuild_request(run(False))
    assert request is not None and request.partition_key == "books.main"
    assert request.run_key == "after-retention:r-False-books.main"
    assert (
        rebuild_request(run(True)) is None and rebuild_request(run(None)) is None
    )  # the default is a dry run
    assert rebuild_request(run(False, None)) is None
