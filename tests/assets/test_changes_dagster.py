"""The change feed in Dagster (issue 14 items 2 and 5): the change sensor's cursor is the watermark, and the
community lag is a check the UI shows after a graph change and clears after the communities are rebuilt."""

from __future__ import annotations

import json
from typing import Any

import dagster as dg
import pytest

from pgrag_dag import changes_since
from pgrag_dag.assets.changes import COMMUNITY_CHECKS, COMMUNITY_LAG_CHECK, build_change_sensor
from pgrag_dag.assets.definitions import build_defs
from pgrag_dag.assets.partitions import add_partitions
from pgrag_dag.assets.stages import ASSETS
from pgrag_dag.pipeline import index_documents
from pgrag_dag.resources.engine import PgragResource
from pgrag_dag.resources.query import QueryResource
from tests.fix_corpus import SmallCorpus

pytestmark = [pytest.mark.dagster, pytest.mark.filterwarnings("ignore::dagster.BetaWarning")]
LAG = dg.AssetCheckKey(dg.AssetKey("communities"), COMMUNITY_LAG_CHECK)
CHANGED = (
    "Ada Lovelace met Charles Babbage in 1833. Ada Lovelace wrote notes on the Analytical Engine in 1843."
)

SEEN: list[dict[str, str]] = []


@dg.op
def consume_changes(context) -> None:  # type: ignore[no-untyped-def]  (Dagster reads no string annotation)
    SEEN.append({k: v for k, v in context.run.tags.items() if k.startswith("pgrag/")})


@dg.job
def on_change() -> None:
    consume_changes()


def _tick(
    sensor: dg.SensorDefinition, instance: dg.DagsterInstance, cursor: str | None, resources: dict[str, Any]
) -> Any:
    """One evaluation of ``sensor`` (the engine resource is set up and torn down around it, as the daemon
    does)."""
    with dg.build_sensor_context(instance=instance, cursor=cursor, resources=resources) as context:
        return sensor(context)


def test_the_change_sensor_runs_the_job_once_per_change_and_keeps_the_watermark_as_cursor(
    small_corpus: SmallCorpus, realm: str
) -> None:
    engine = small_corpus.engine()
    index_documents(engine, realm, "main", communities=False)
    sensor = build_change_sensor(realm, "main", job=on_change)
    assert sensor.name == f"changes_{realm}_main" and sensor.minimum_interval_seconds == 30
    resources = {"pgrag": PgragResource(config_path=str(small_corpus.config))}
    with dg.instance_for_test() as instance:
        first = _tick(sensor, instance, None, resources)
        assert isinstance(first, dg.SensorResult) and len(first.run_requests) == 1
        everything = changes_since(engine, realm, "main", None)
        [req] = first.run_requests
        assert json.loads(req.tags["pgrag/changes"]) == {k: n for k, n in everything.counts().items() if n}
        assert req.tags["pgrag/events"] == str(everything.events) and req.tags["pgrag/since"] == ""
        assert req.run_key == f"{realm}.main@{first.cursor}" and req.tags["pgrag/watermark"] == first.cursor
        # the user's op reads the counts from its run's tags
        SEEN.clear()
        assert on_change.execute_in_process(instance=instance, tags=req.tags).success
        assert json.loads(SEEN[0]["pgrag/changes"])["relations_added"] == len(everything.relations_added) > 0
        # nothing changed: the tick skips, and the cursor still moves to the database's newer snapshot
        index_documents(engine, realm, "main", communities=False)
        idle = _tick(sensor, instance, first.cursor, resources)
        assert isinstance(idle, dg.SensorResult) and not idle.run_requests and idle.skip_reason is not None
        assert idle.cursor and idle.cursor != first.cursor
        # a changed document: one run for exactly the new window
        (small_corpus.root / "docs" / "02_lovelace.txt").write_text(CHANGED)
        index_documents(engine, realm, "main", communities=False)
        changed = _tick(sensor, instance, idle.cursor, resources)
        assert isinstance(changed, dg.SensorResult) and len(changed.run_requests) == 1
        tags = changed.run_requests[0].tags
        assert (
            tags["pgrag/since"] == idle.cursor
            and json.loads(tags["pgrag/changes"])["documents_replaced"] == 1
        )
        assert changed.run_requests[0].run_key != req.run_key
        # the same window through the query resource
        window = QueryResource(realm=realm, config_path=str(small_corpus.config)).changes_since(
            "main", idle.cursor
        )
        assert str(window.events) == tags["pgrag/events"]


def _lag_result(result: dg.ExecuteInProcessResult) -> Any:
    [ev] = [e for e in result.get_asset_check_evaluations() if e.check_name == COMMUNITY_LAG_CHECK]
    return ev


def test_the_community_lag_check_warns_after_a_graph_change_and_passes_after_the_rebuild(
    small_corpus: SmallCorpus, realm: str
) -> None:
    key = f"{realm}.main"
    defs = build_defs(pgrag=PgragResource(config_path=str(small_corpus.config)))
    resources: dict[str, Any] = {"pgrag": PgragResource(config_path=str(small_corpus.config))}
    everything = [*ASSETS, *COMMUNITY_CHECKS]
    with dg.instance_for_test() as instance:
        add_partitions(instance, [key])
        built = dg.materialize(everything, partition_key=key, instance=instance, resources=resources)
        ok = _lag_result(built)
        assert (
            ok.passed
            and ok.partition == key
            and ok.metadata["changed_relations_since_communities"].value == 0
        )
        tick = dg.evaluate_automation_conditions(defs=defs, instance=instance)
        # a graph change: the stages up to relations re-materialise (as the source sensor's run does)
        (small_corpus.root / "docs" / "02_lovelace.txt").write_text(CHANGED)
        upto = dg.AssetSelection.assets(
            "chunks", "raw_extractions", "gated_triples", "resolved_entities", "relations"
        )
        assert dg.materialize(
            everything, partition_key=key, instance=instance, resources=resources, selection=upto
        ).success
        tick = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=tick.cursor)
        requested = {r.key: r.true_subset.size for r in tick.results}
        assert requested[LAG] == 1 and tick.get_requested_partitions(dg.AssetKey("communities")) == {key}
        # the daemon would run the check alone first if the communities could not follow: it shows the lag
        alone = dg.materialize(
            everything,
            instance=instance,
            resources=resources,
            selection=dg.AssetSelection.checks(LAG),
            tags={"dagster/partition": key},
        )
        stale = _lag_result(alone)
        lag = stale.metadata["changed_relations_since_communities"].value
        assert not stale.passed and stale.severity == dg.AssetCheckSeverity.WARN and stale.partition == key
        assert (
            lag
            == changes_since(
                small_corpus.settings().database_url, realm, "main", None
            ).changed_relations_since_communities
            > 0
        )
        # the automation-requested run rebuilds the communities: the check passes
        rest = dg.AssetSelection.assets(
            "embeddings", "communities", "community_hierarchy"
        ) | dg.AssetSelection.checks(LAG)
        rebuilt = dg.materialize(
            everything, partition_key=key, instance=instance, resources=resources, selection=rest
        )
        assert rebuilt.success and _lag_result(rebuilt).passed
        record = instance.event_log_storage.get_latest_asset_check_execution_by_key([LAG])[LAG]
        assert record.event is not None and record.event.dagster_event is not None
        assert record.event.dagster_event.event_specific_data.passed  # type: ignore[union-attr]


def test_the_cli_prints_counts_examples_and_the_next_watermark_last(
    small_corpus: SmallCorpus, realm: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from pgrag_dag.cli import app

    monkeypatch.setenv("PGRAG_CONFIG", str(small_corpus.config))
    index_documents(small_corpus.engine(), realm, "main", communities=False)
    runner = CliRunner()
    out = runner.invoke(app, ["changes", f"{realm}.main"])
    assert out.exit_code == 0, out.output
    lines = out.output.strip().splitlines()
    first = changes_since(small_corpus.engine(), realm, "main", None)
    assert lines[0] == f"{realm}.main: {first.events} change(s) since the beginning"
    assert any(line.startswith(f"  relations added: {len(first.relations_added)}  (") for line in lines)
    assert "communities: stale" in out.output and lines[-1].startswith("next watermark: ")
    mark = lines[-1].removeprefix("next watermark: ")
    again = runner.invoke(app, ["changes", f"{realm}.main", "--since", mark, "--json"])
    assert again.exit_code == 0 and json.loads(again.output)["events"] == 0
    assert json.loads(again.output)["since"] == mark
    bad = runner.invoke(app, ["changes", f"{realm}.main", "--since", "last tuesday"])
    assert bad.exit_code == 2 and "malformed watermark 'last tuesday'" in bad.output


def test_the_change_sensor_waits_for_a_configured_space_and_refuses_a_mistyped_one(
    small_corpus: SmallCorpus, realm: str
) -> None:
    from pgrag_dag.errors import UnknownSpaceError
    from pgrag_dag.operate.deletion import delete_space

    engine = small_corpus.engine()
    index_documents(engine, realm, "main", communities=False)
    delete_space(engine, realm, "main")  # configured, but nothing indexed (and no history) any more
    assert "main" in engine.settings.realms[realm].spaces
    resources = {"pgrag": PgragResource(config_path=str(small_corpus.config))}
    with dg.instance_for_test() as instance:
        waiting = _tick(build_change_sensor(realm, "main", job=on_change), instance, None, resources)
        assert waiting.run_requests == [] and waiting.cursor is None
        assert (
            waiting.skip_reason is not None
            and "main has not been indexed yet" in waiting.skip_reason.skip_message
        )
        with pytest.raises(UnknownSpaceError, match="space 'mian' does not exist in realm"):
            _tick(build_change_sensor(realm, "mian", job=on_change), instance, None, resources)
