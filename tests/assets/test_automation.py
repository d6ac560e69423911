"""The source sensor, the nightly schedule and automation on real change (issue 6, dagster-guide §3–4)."""

from __future__ import annotations

import contextlib
import datetime
import json
from collections.abc import Iterator
from typing import Any

import dagster as dg
import pytest
import yaml

from pgrag_dag.assets.automation import build_nightly_refresh, build_source_sensor
from pgrag_dag.assets.definitions import build_defs
from pgrag_dag.assets.partitions import add_partitions
from pgrag_dag.assets.stages import ASSETS
from pgrag_dag.resources.engine import PgragResource
from tests.fix_corpus import SmallCorpus

pytestmark = [pytest.mark.dagster, pytest.mark.filterwarnings("ignore::dagster.BetaWarning")]


STAGES = [
    "chunks",
    "raw_extractions",
    "gated_triples",
    "resolved_entities",
    "relations",
    "embeddings",
    "communities",
    "community_hierarchy",
]


def _roots() -> list[dg.AssetsDefinition]:
    return [a for a in ASSETS if a.key == dg.AssetKey("chunks")]


def test_the_sensor_requests_runs_only_for_new_or_changed_spaces(
    small_corpus: SmallCorpus, realm: str
) -> None:
    sensor = build_source_sensor(small_corpus.settings(), ASSETS)
    key = f"{realm}.main"
    with dg.instance_for_test() as instance:
        first = sensor(dg.build_sensor_context(instance=instance, cursor=None))
        assert isinstance(first, dg.SensorResult)
        assert [r.partition_key for r in first.run_requests] == [key]
        # a new space: every hashed stage changed, so one run from chunks to communities, in order (relations
        # and embeddings between them too: communities must not be built before them); automation takes the
        # hierarchy
        assert first.run_requests[0].asset_selection == [dg.AssetKey(s) for s in STAGES[:-1]]
        assert first.dynamic_partitions_requests[0].partition_keys == [key]  # a new space adds its partition
        add_partitions(instance, [key])
        unchanged = sensor(dg.build_sensor_context(instance=instance, cursor=first.cursor))
        assert isinstance(unchanged, dg.SkipReason)
        (small_corpus.root / "docs" / "02_lovelace.txt").write_text(
            "Ada Lovelace met Charles Babbage in 1833."
        )
        changed = sensor(dg.build_sensor_context(instance=instance, cursor=first.cursor))
        assert isinstance(changed, dg.SensorResult)
        assert [r.partition_key for r in changed.run_requests] == [
            key
        ] and not changed.dynamic_partitions_requests
        assert changed.run_requests[0].asset_selection == [dg.AssetKey("chunks")]  # only the sources changed
        assert json.loads(changed.cursor)[key] != json.loads(first.cursor)[key]


def test_the_sensor_runs_a_space_one_of_whose_init_written_globs_matches_nothing(
    small_corpus: SmallCorpus, realm: str
) -> None:
    """``pgrag init`` writes one source per kind of document (``**/*.md`` and ``**/*.txt``); a folder of .txt
    files only is a space to run, not an unreadable one (issue 31 trial on the 10-K filings)."""
    cfg = yaml.safe_load(small_corpus.config.read_text())
    space = cfg["realms"][realm]["spaces"]["main"]
    space["sources"] = [{**space["sources"][0], "glob": "**/*.md"}, *space["sources"]]
    small_corpus.config.write_text(yaml.safe_dump(cfg))
    sensor = build_source_sensor(small_corpus.settings(), ASSETS)
    with dg.instance_for_test() as instance:
        first = sensor(dg.build_sensor_context(instance=instance, cursor=None))
    assert isinstance(first, dg.SensorResult), first
    assert [r.partition_key for r in first.run_requests] == [f"{realm}.main"]


def test_the_nightly_schedule_refreshes_every_known_space(small_corpus: SmallCorpus, realm: str) -> None:
    schedule = build_nightly_refresh(small_corpus.settings(), _roots())
    assert schedule.cron_schedule == "0 3 * * *"
    with dg.instance_for_test() as instance:
        add_partitions(instance, [f"{realm}.main"])
        ctx = dg.build_schedule_context(
            instance=instance, scheduled_execution_time=datetime.datetime(2026, 1, 1, 3)
        )
        requests = list(schedule(ctx))  # type: ignore[call-overload]
    assert [(r.partition_key, r.run_key) for r in requests] == [
        (f"{realm}.main", f"{realm}.main:202601010300")
    ]


@contextlib.contextmanager
def _indexed(
    corpus: SmallCorpus, key: str
) -> Iterator[tuple[dg.DagsterInstance, dg.Definitions, dict[str, Any], Any]]:
    """A test instance with ``key`` fully materialised and a first automation tick evaluated."""
    defs = build_defs(pgrag=PgragResource(config_path=str(corpus.config)))
    resources: dict[str, Any] = {"pgrag": PgragResource(config_path=str(corpus.config))}
    with dg.instance_for_test() as instance:
        add_partitions(instance, [key])
        assert dg.materialize(ASSETS, partition_key=key, instance=instance, resources=resources).success
        yield instance, defs, resources, dg.evaluate_automation_conditions(defs=defs, instance=instance)


def test_downstream_rematerialises_only_on_a_changed_data_version(
    small_corpus: SmallCorpus, realm: str
) -> None:
    key = f"{realm}.main"
    with _indexed(small_corpus, key) as (instance, defs, resources, tick):
        # chunks re-materialised with an identical data version: nothing downstream is requested
        assert dg.materialize(
            ASSETS,
            partition_key=key,
            instance=instance,
            resources=resources,
            selection=dg.AssetSelection.assets("chunks"),
        ).success
        tick = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=tick.cursor)
        assert tick.total_requested == 0
        # a changed document gives chunks a new data version: the whole chain is requested, this partition
        # only
        (small_corpus.root / "docs" / "02_lovelace.txt").write_text(
            "Ada Lovelace met Charles Babbage in 1833."
        )
        assert dg.materialize(
            ASSETS,
            partition_key=key,
            instance=instance,
            resources=resources,
            selection=dg.AssetSelection.assets("chunks"),
        ).success
        tick = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=tick.cursor)
        assert tick.get_requested_partitions(dg.AssetKey("raw_extractions")) == {key}
        assert tick.get_requested_partitions(dg.AssetKey("communities")) == {key}
        assert tick.get_requested_partitions(dg.AssetKey("chunks")) == set()


def test_a_failed_blocking_check_stops_automation_downstream(small_corpus: SmallCorpus, realm: str) -> None:
    from tests.fix_corpus import admit_long_names

    key = f"{realm}.main"
    with _indexed(small_corpus, key) as (instance, defs, resources, tick):
        admit_long_names(small_corpus)  # a leaking gate: an over-long name the configured gate lets through
        (small_corpus.root / "docs" / "02_lovelace.txt").write_text(
            "Ada Lovelace met Charles Babbage in 1833."
        )
        run = dg.materialize(
            ASSETS,
            partition_key=key,
            instance=instance,
            resources=resources,
            raise_on_error=False,
            selection=dg.AssetSelection.assets("chunks", "raw_extractions", "gated_triples"),
        )
        assert not run.success
        assert [
            e.passed for e in run.get_asset_check_evaluations() if e.asset_key == dg.AssetKey("gated_triples")
        ] == [False]
        # the checks are partitioned: downstream of the failed gate is requested only together with the gate's
        # own retry, in one run (Dagster's all_deps_blocking_checks_passed: passed, or requested in the same
        # tick) ...
        tick = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=tick.cursor)
        requested = [s for s in STAGES if tick.get_requested_partitions(dg.AssetKey(s))]
        assert requested[0] == "gated_triples" and all(
            tick.get_requested_partitions(dg.AssetKey(s)) == {key} for s in requested
        ), requested
        # ... where the gate fails again and stops everything downstream: nothing past raw_extractions
        # materialises
        retry = dg.materialize(
            ASSETS,
            partition_key=key,
            instance=instance,
            resources=resources,
            raise_on_error=False,
            selection=dg.AssetSelection.assets(*requested),
        )
        assert not retry.success and not retry.get_asset_materialization_events()
        assert [
            e.passed
            for e in retry.get_asset_check_evaluations()
            if e.asset_key == dg.AssetKey("gated_triples")
        ] == [False]
        # and the failed retry is not requested again until something upstream changes
        tick = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=tick.cursor)
        assert tick.total_requested == 0


def test_the_run_the_sensor_requests_for_a_space_the_cli_indexed_offline_succeeds(
    small_corpus: SmallCorpus, realm: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 31 item 1: ``pgrag index`` with the ``nlp`` extractor ``pgrag init`` writes, then the run
    ``pgrag ui``'s source sensor requests for that space (never materialised in Dagster), materialised as the
    daemon would: it succeeds, every check of ``relations`` included."""
    from typer.testing import CliRunner

    from pgrag_dag.assets.changes import COMMUNITY_CHECKS
    from pgrag_dag.assets.stages import build_assets
    from pgrag_dag.cli import app

    text = small_corpus.config.read_text(encoding="utf-8")
    small_corpus.config.write_text(text.replace("      main:\n", "      main:\n        extractor: nlp\n"))
    assert small_corpus.settings().space_spec(realm, "main").extractor is not None
    monkeypatch.setenv("PGRAG_CONFIG", str(small_corpus.config))
    key = f"{realm}.main"
    out = CliRunner().invoke(app, ["index", key])
    assert out.exit_code == 0 and "(all green)" in out.stdout, out.output
    settings = small_corpus.settings()
    assets = build_assets(settings)
    sensor = build_source_sensor(settings, assets)
    with dg.instance_for_test() as instance:
        tick = sensor(dg.build_sensor_context(instance=instance, cursor=None))
        assert isinstance(tick, dg.SensorResult) and [r.partition_key for r in tick.run_requests] == [key]
        add_partitions(instance, [key])
        result = dg.materialize(
            [*assets, *COMMUNITY_CHECKS],
            partition_key=key,
            instance=instance,
            selection=tick.run_requests[0].asset_selection,
            resources={"pgrag": PgragResource(config_path=str(small_corpus.config))},
            raise_on_error=False,
        )
        assert result.success
        evaluations = {
            (e.asset_key.to_user_string(), e.check_name): e for e in result.get_asset_check_evaluations()
        }
    assert evaluations[("relations", "graph_quality")].passed
    assert all(e.passed for e in evaluations.values()), [k for k, e in evaluations.items() if not e.passed]
    materialised = {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()}
    assert {"relations", "embeddings", "communities"} <= materialised
