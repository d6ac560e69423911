"""The composed pipeline in Dagster: assets from the composition, user operator checks that block
downstream, composition changes that re-materialise exactly what is downstream, and the offline
extractor on the demo's Wikipedia articles with zero model calls (real Dagster, real PostgreSQL)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import yaml
from psycopg import sql

from pgrag_dag.assets.automation import build_source_sensor
from pgrag_dag.assets.definitions import build_defs
from pgrag_dag.assets.partitions import add_partitions
from pgrag_dag.assets.stages import build_assets
from pgrag_dag.graph.communities import EXTRACTIVE_MARK
from pgrag_dag.resources.engine import PgragResource
from pgrag_dag.store import db
from pgrag_dag.store.schema import schema_for
from tests.fix_corpus import SmallCorpus
from tests.pipeline.test_operators import compose_space

pytestmark = [pytest.mark.dagster, pytest.mark.filterwarnings("ignore::dagster.BetaWarning")]
ROOT = Path(__file__).resolve().parents[2]
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


def _materialize(
    config: Path, instance: dg.DagsterInstance, key: str, selection: Any = None
) -> dg.ExecuteInProcessResult:
    from pgrag_dag.config import load_settings

    return dg.materialize(
        build_assets(load_settings(config)),
        partition_key=key,
        instance=instance,
        selection=selection,
        resources={"pgrag": PgragResource(config_path=str(config))},
        raise_on_error=False,
    )


def _rows(dsn: str, realm: str, query: str) -> list[tuple]:
    with db.connect(dsn) as conn:
        return conn.execute(sql.SQL(query).format(s=sql.Identifier(schema_for(realm)))).fetchall()


def test_user_operators_show_in_the_asset_graph_with_their_description_and_check(
    small_corpus: SmallCorpus, realm: str
) -> None:
    compose_space(
        small_corpus,
        realm,
        gates=["tests.user_operators:full_names"],
        chunker={"name": "tests.user_operators:sentence_chunker", "options": {"per_chunk": 3}},
    )
    defs = build_defs(pgrag=PgragResource(config_path=str(small_corpus.config)))
    by_key = {a.key.to_user_string(): a for a in defs.assets}  # type: ignore[union-attr]
    gated = by_key["gated_triples"]
    specs = {s.name: s for s in gated.check_specs}
    assert (
        set(specs) == {"contract", "operator_full_names", "yield"} and specs["operator_full_names"].blocking
    )
    assert specs["operator_full_names"].description.startswith("Refuses one-word entity names")
    assert f"composed in {realm}.main" in specs["operator_full_names"].description
    chunks = by_key["chunks"]
    assert f"- {realm}.main: `tests.user_operators:sentence_chunker` (per_chunk=3)" in (
        chunks.descriptions_by_key[chunks.key] or ""
    )
    assert {s.name for s in chunks.check_specs} == {
        "contract",
        "operator_sentence_chunker",
        "skipped_documents",
    }
    # lineage is the same eight-stage chain
    assert by_key["raw_extractions"].dependency_keys == {dg.AssetKey("chunks")}


def test_a_user_operator_that_breaks_its_contract_blocks_downstream(
    small_corpus: SmallCorpus, realm: str
) -> None:
    compose_space(small_corpus, realm, chunker="tests.user_operators:blank_chunker")
    key = f"{realm}.main"
    with dg.instance_for_test() as instance:
        add_partitions(instance, [key])
        result = _materialize(small_corpus.config, instance, key)
        assert not result.success
        checks = {
            (e.asset_key.to_user_string(), e.check_name): e for e in result.get_asset_check_evaluations()
        }
        assert set(checks) == {("chunks", "contract"), ("chunks", "operator_blank_chunker")}
        assert not any(e.passed for e in checks.values())
        failure = checks[("chunks", "operator_blank_chunker")].metadata
        assert failure["contract"].value == "ChunkerOutputContract (operator blank_chunker)"
        assert "text_not_blank" in failure["failure_cases"].value
        assert result.get_asset_materialization_events() == []
    assert _rows(small_corpus.settings().database_url, realm, "SELECT count(*) FROM {s}.documents") == [(0,)]
    assert small_corpus.chat_requests() == []


def test_a_composition_change_rematerialises_exactly_the_stages_downstream(
    small_corpus: SmallCorpus, realm: str
) -> None:
    """The source sensor requests the stage whose composition changed; automation takes its downstream."""
    compose_space(small_corpus, realm, extractor="cooccurrence", reports="extractive")
    key = f"{realm}.main"
    defs = build_defs(pgrag=PgragResource(config_path=str(small_corpus.config)))
    assets = build_assets(small_corpus.settings())
    with dg.instance_for_test() as instance:
        add_partitions(instance, [key])
        cursor = build_source_sensor(small_corpus.settings(), assets)(
            dg.build_sensor_context(instance=instance)
        ).cursor
        assert _materialize(small_corpus.config, instance, key).success
        tick = dg.evaluate_automation_conditions(defs=defs, instance=instance)

        def change(stage: str, **space: object) -> Any:
            """Recompose the space, check the sensor requests ``stage`` alone, materialise it, tick
            automation."""
            nonlocal cursor, tick
            compose_space(small_corpus, realm, **space)
            sensed = build_source_sensor(small_corpus.settings(), assets)(
                dg.build_sensor_context(instance=instance, cursor=cursor)
            )
            assert [r.asset_selection for r in sensed.run_requests] == [[dg.AssetKey(stage)]]
            cursor = sensed.cursor
            assert _materialize(small_corpus.config, instance, key, dg.AssetSelection.assets(stage)).success
            tick = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=tick.cursor)
            return tick

        tick = change("gated_triples", gates=[{"name": "name_stoplist", "options": {"names": ["London"]}}])
        assert tick.get_requested_partitions(dg.AssetKey("resolved_entities")) == {key}
        assert all(
            tick.get_requested_partitions(dg.AssetKey(s)) == set()
            for s in ("chunks", "raw_extractions", "gated_triples")
        )
        assert ("London",) in _rows(
            small_corpus.settings().database_url,
            realm,
            "SELECT offending_value FROM {s}.gate_decisions WHERE gate = 'name_stoplist'",
        )
        tick = change("chunks", chunker="paragraph")
        assert tick.get_requested_partitions(dg.AssetKey("raw_extractions")) == {key}
    assert small_corpus.chat_requests() == []  # the offline extractor and extractive reports call no model


def test_the_offline_extractor_indexes_the_demo_articles_with_zero_model_calls(
    pg_dsn: str, realm: str, tmp_path: Path
) -> None:
    cfg = {
        "database_url": pg_dsn,
        "data_dir": str(tmp_path / "data"),
        "llm": {"models": ["replay"]},
        "realms": {
            realm: {
                "spaces": {
                    "wiki": {
                        "extractor": "cooccurrence",
                        "preset": "biography",
                        "sources": [{"path": str(ROOT / "corpus" / "wikipedia"), "glob": "*.txt"}],
                    }
                }
            }
        },
    }
    config = tmp_path / "pgrag.yaml"
    config.write_text(yaml.safe_dump(cfg))
    key = f"{realm}.wiki"
    with dg.instance_for_test() as instance:
        add_partitions(instance, [key])
        result = _materialize(config, instance, key)
        assert result.success
        evaluations = result.get_asset_check_evaluations()
        assert all(e.passed for e in evaluations)
        quality = next(e for e in evaluations if e.check_name == "graph_quality").metadata
        assert quality["pronoun_entities"].value == 0 and quality["duplicate_edge_rows"].value == 0
        mats = {
            e.asset_key.to_user_string(): e.materialization.metadata
            for e in result.get_asset_materialization_events()
        }  # type: ignore[union-attr]
    assert sorted(mats) == sorted(STAGES)
    for stage in ("raw_extractions", "communities", "community_hierarchy"):
        assert mats[stage]["model_calls"].value == 0, stage
    assert (
        mats["communities"]["report_writer"].value == "extractive"
        and mats["communities"]["communities"].value >= 3
    )
    names = {n for (n,) in _rows(pg_dsn, realm, "SELECT name FROM {s}.entities WHERE dormant_since IS NULL")}
    assert {"Charles Babbage", "Ada Lovelace", "Analytical Engine", "Difference Engine"} <= names
    assert not names & {"He", "She", "The", "However"}
    edge = _rows(
        pg_dsn,
        realm,
        """SELECT r.predicate, r.weight FROM {s}.relations r
                                     JOIN {s}.entities a ON a.id = r.source_id
                                     JOIN {s}.entities b ON b.id = r.target_id
                                    WHERE a.name = 'Ada Lovelace' AND b.name = 'Charles Babbage'""",
    )
    assert (
        edge and edge[0][0] == "co_occurs_in_sentence" and edge[0][1] >= 3
    )  # stated together in many chunks
    summaries = [s for (s,) in _rows(pg_dsn, realm, "SELECT summary FROM {s}.communities")]
    assert summaries and all(s.startswith(EXTRACTIVE_MARK) for s in summaries)
