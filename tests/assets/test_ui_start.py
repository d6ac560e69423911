"""Starting the UI does not launch runs of unchanged partitions (issue 16 item 9): on the daemon's first tick
— an empty sensor cursor, no automation cursor — neither the source sensor nor the automation conditions
request a partition whose inputs did not change since it was materialised; a change made while the daemon was
down is still picked up."""

from __future__ import annotations

import json

import dagster as dg
import pytest

from pgrag_dag.assets.automation import INPUTS_KEY, stage_hashes
from pgrag_dag.assets.changes import COMMUNITY_CHECKS
from pgrag_dag.assets.definitions import build_defs
from pgrag_dag.assets.partitions import add_partitions
from pgrag_dag.assets.stages import ASSETS
from pgrag_dag.resources.engine import PgragResource
from tests.fix_corpus import SmallCorpus

pytestmark = [pytest.mark.dagster, pytest.mark.filterwarnings("ignore::dagster.BetaWarning")]


def test_the_daemons_first_tick_requests_nothing_for_a_materialised_partition(
    small_corpus: SmallCorpus, realm: str
) -> None:
    key = f"{realm}.main"
    resource = PgragResource(config_path=str(small_corpus.config))
    defs = build_defs(pgrag=resource)
    with dg.instance_for_test() as instance:
        sensor = defs.get_sensor_def(
            "source_sensor"
        )  # inside: resolving defs reads the current instance's state
        add_partitions(instance, [key])
        run = dg.materialize(
            [*ASSETS, *COMMUNITY_CHECKS], partition_key=key, instance=instance, resources={"pgrag": resource}
        )
        assert run.success
        recorded = {
            e.asset_key.to_user_string(): e.materialization.metadata[INPUTS_KEY].value  # type: ignore[union-attr]
            for e in run.get_asset_materialization_events()
            if INPUTS_KEY in e.materialization.metadata
        }  # type: ignore[union-attr]
        assert recorded == stage_hashes(small_corpus.settings(), key)

        # automation, as the daemon evaluates it first (no cursor): nothing is requested, nor on the next tick
        tick = dg.evaluate_automation_conditions(defs=defs, instance=instance)
        assert tick.total_requested == 0, [a.key for a in ASSETS if tick.get_requested_partitions(a.key)]
        assert (
            dg.evaluate_automation_conditions(
                defs=defs, instance=instance, cursor=tick.cursor
            ).total_requested
            == 0
        )

        # the source sensor's first tick (empty cursor): no run, and the cursor is kept for the next tick
        first = sensor(dg.build_sensor_context(instance=instance, cursor=None, definitions=defs))
        assert isinstance(first, dg.SensorResult) and not first.run_requests and first.skip_reason is not None
        assert first.cursor is not None and json.loads(first.cursor)[key] == recorded
        again = sensor(dg.build_sensor_context(instance=instance, cursor=first.cursor, definitions=defs))
        assert isinstance(again, dg.SkipReason)

        # a document changed while the daemon was down: the first tick requests that partition's chunks only
        (small_corpus.root / "docs" / "02_lovelace.txt").write_text(
            "Ada Lovelace met Charles Babbage in 1833."
        )
        changed = sensor(dg.build_sensor_context(instance=instance, cursor=None, definitions=defs))
        assert isinstance(changed, dg.SensorResult)
        assert [(r.partition_key, r.asset_selection) for r in changed.run_requests] == [
            (key, [dg.AssetKey("chunks")])
        ]
