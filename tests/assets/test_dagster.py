"""Real Dagster materialisations of the eight partitioned assets and their blocking checks."""

from __future__ import annotations

from collections.abc import Iterator

import dagster as dg
import pytest
from psycopg import sql

from pgrag_dag.assets.changes import COMMUNITY_CHECKS
from pgrag_dag.assets.partitions import SPACES, add_partitions
from pgrag_dag.assets.stages import ASSETS
from pgrag_dag.errors import InvalidNameError
from pgrag_dag.resources.engine import PgragResource
from pgrag_dag.store import db
from pgrag_dag.store.schema import schema_for
from tests.fix_corpus import LONG_NAME, SmallCorpus, admit_long_names

pytestmark = pytest.mark.dagster
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
    corpus: SmallCorpus, instance: dg.DagsterInstance, key: str, selection: dg.AssetSelection | None = None
) -> dg.ExecuteInProcessResult:
    return dg.materialize(
        [*ASSETS, *COMMUNITY_CHECKS],
        partition_key=key,
        instance=instance,
        selection=selection,
        resources={"pgrag": PgragResource(config_path=str(corpus.config))},
        raise_on_error=False,
    )


@pytest.fixture
def indexed(small_corpus: SmallCorpus, realm: str) -> Iterator[tuple[dg.DagsterInstance, str]]:
    """A test instance on which the small corpus's partition ``<realm>.main`` was materialised once."""
    key = f"{realm}.main"
    with dg.instance_for_test() as instance:
        add_partitions(instance, [key])
        assert _materialize(small_corpus, instance, key).success
        yield instance, key


def test_all_eight_assets_materialise_for_a_partition_with_checks_passing(
    small_corpus: SmallCorpus, realm: str
) -> None:
    key = f"{realm}.main"
    with dg.instance_for_test() as instance:
        assert add_partitions(instance, [key]) == [key]
        result = _materialize(small_corpus, instance, key)
        assert result.success
        mats = {e.asset_key.to_user_string(): e for e in result.get_asset_materialization_events()}
        assert sorted(mats) == sorted(STAGES)
        evaluations = result.get_asset_check_evaluations()
        # 8 contracts + graph_quality + 4 pending_work + 2 yield + skipped_documents + communities_current
        assert len(evaluations) == 17 and all(e.passed for e in evaluations)
        lag = next(e for e in evaluations if e.check_name == "communities_current")
        assert lag.partition == key and lag.metadata["changed_relations_since_communities"].value == 0
        quality = next(e for e in evaluations if e.check_name == "graph_quality").metadata
        assert quality["pronoun_entities"].value == 0 and quality["fragmented_short_form_vertices"].value == 0
        assert quality["duplicate_edge_rows"].value == 0 and quality["entities"].value > 0
        rel_meta = mats["relations"].materialization.metadata  # type: ignore[union-attr]
        assert rel_meta["relations"].value > 0 and rel_meta["negated"].value == 1
        gate_meta = mats["gated_triples"].materialization.metadata  # type: ignore[union-attr]
        assert gate_meta["rejections_per_gate"].value == {"pronominal_name": 1, "vague_predicate": 1}
        comm = mats["communities"].materialization.metadata  # type: ignore[union-attr]
        assert comm["communities"].value >= 1
        # each materialisation records the data version of what the stage now holds
        record = instance.get_latest_materialization_event(dg.AssetKey("relations"))
        assert record is not None and record.asset_materialization.tags.get("dagster/data_version")  # type: ignore[union-attr]
        # a second run calls no model and writes the same data versions
        calls = len(small_corpus.chat_requests())
        again = _materialize(small_corpus, instance, key)
        assert again.success and len(small_corpus.chat_requests()) == calls

        def versions(res: dg.ExecuteInProcessResult) -> dict[str, str]:
            return {
                e.asset_key.to_user_string(): e.materialization.tags["dagster/data_version"]  # type: ignore[union-attr]
                for e in res.get_asset_materialization_events()
            }

        assert versions(again) == versions(result)


def test_a_leaking_gate_fails_its_blocking_check_and_stops_downstream(
    small_corpus: SmallCorpus, realm: str
) -> None:
    admit_long_names(
        small_corpus
    )  # the configured gate admits 500 characters; the contract holds the paper's 200
    key = f"{realm}.main"
    with dg.instance_for_test() as instance:
        add_partitions(instance, [key])
        result = _materialize(small_corpus, instance, key)
        assert not result.success
        failed = [e for e in result.get_asset_check_evaluations() if not e.passed]
        assert [e.asset_key.to_user_string() for e in failed] == ["gated_triples"]
        meta = failed[0].metadata
        assert meta["num_failures"].value >= 1 and LONG_NAME[:40] in meta["failure_cases"].value
        materialised = {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()}
        assert materialised == {"chunks", "raw_extractions"}
    with db.connect(small_corpus.settings().database_url) as conn:  # nothing written by the refused stage
        n = conn.execute(
            sql.SQL("SELECT count(*) FROM {}.gate_decisions").format(sql.Identifier(schema_for(realm)))
        ).fetchone()
    assert n == (0,)


def test_partition_keys_are_validated_before_they_reach_the_instance() -> None:
    with dg.instance_for_test() as instance:
        for bad in ['x"; drop schema public; --.s', "a|b.c", "a...b", "acme/docs", "Acme.docs"]:
            with pytest.raises(InvalidNameError):
                add_partitions(instance, [bad])
        assert instance.get_dynamic_partitions(SPACES.name) == []


def test_code_location_loads() -> None:
    # in a fresh interpreter, as the code server loads it (module-level definitions, no test state)
    import subprocess
    import sys

    code = (
        "import dagster as dg; from pgrag_dag.assets.definitions import defs; "
        "dg.Definitions.validate_loadable(defs); "
        "print(sorted(k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys())); "
        "print(sorted(s.name for s in defs.sensors), sorted(s.name for s in defs.schedules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    assert out.splitlines()[0] == str(sorted(STAGES))
    assert (
        out.splitlines()[1]
        == "['communities_after_retention', 'pgrag_automation', 'source_sensor'] ['nightly_refresh']"
    )


def test_changing_the_vocabulary_rematerialises_gated_triples_and_downstream_without_a_model_call(
    small_corpus: SmallCorpus, realm: str, indexed: tuple[dg.DagsterInstance, str]
) -> None:
    instance, key = indexed
    calls = len(small_corpus.chat_requests())
    text = small_corpus.config.read_text().replace(
        "sources:",
        "predicate_aliases: {wrote_notes_on: wrote}\n        vocabulary: [wrote]\n        sources:",
        1,
    )
    small_corpus.config.write_text(text)
    result = _materialize(small_corpus, instance, key, dg.AssetSelection.assets("gated_triples").downstream())
    assert result.success
    # raw extractions are replayed from PostgreSQL: no extraction or gleaning call; the only model
    # calls are reports of communities whose relations changed
    new = small_corpus.chat_requests()[calls:]
    assert all(r["body"]["messages"][0]["content"].startswith("You write a report") for r in new)
    comm = next(
        e for e in result.get_asset_materialization_events() if e.asset_key.to_user_string() == "communities"
    )
    assert len(new) <= comm.materialization.metadata["communities"].value  # type: ignore[union-attr]
    assert {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()} == set(
        STAGES[2:]
    )
    with db.connect(small_corpus.settings().database_url) as conn:
        rows = conn.execute(
            sql.SQL(
                "SELECT predicate, dormant_since IS NOT NULL FROM {}.relations WHERE predicate IN"
                " ('wrote', 'wrote_notes_on') ORDER BY 1"
            ).format(sql.Identifier(schema_for(realm)))
        ).fetchall()
    assert rows == [("wrote", False), ("wrote_notes_on", True)]


def test_a_changed_source_rematerialises_its_partition_and_only_its_chunks_reach_the_model(
    small_corpus: SmallCorpus, indexed: tuple[dg.DagsterInstance, str]
) -> None:
    instance, key = indexed
    before = small_corpus.chat_requests()
    (small_corpus.root / "docs" / "02_lovelace.txt").write_text("Ada Lovelace worked with Charles Babbage.")
    result = _materialize(small_corpus, instance, key)
    assert result.success
    new = small_corpus.chat_requests()[len(before) :]
    extracted = [r for r in new if "<<<CHUNK" in r["body"]["messages"][-1]["content"]]
    assert extracted and all("02_lovelace.txt" in r["body"]["messages"][-1]["content"] for r in extracted)
    chunks = next(
        e for e in result.get_asset_materialization_events() if e.asset_key.to_user_string() == "chunks"
    )
    meta = chunks.materialization.metadata  # type: ignore[union-attr]
    assert meta["documents_replaced"].value == 1 and meta["documents_unchanged"].value == 1


def test_a_run_tagged_pgrag_full_recomputes_the_graph_stages_and_an_untagged_one_works_on_what_changed(
    small_corpus: SmallCorpus, indexed: tuple[dg.DagsterInstance, str]
) -> None:
    """Issue 15: the run tag ``pgrag/full=true`` makes gated_triples, resolved_entities and relations
    recompute their partition (metadata mode ``full``); without it a run with nothing changed says
    ``unchanged`` and keeps every data version."""
    instance, key = indexed
    graph = dg.AssetSelection.assets("gated_triples", "resolved_entities", "relations")

    def run(tags: dict[str, str]) -> dict[str, tuple[str, str | None]]:
        result = dg.materialize(
            [*ASSETS, *COMMUNITY_CHECKS],
            partition_key=key,
            instance=instance,
            selection=graph,
            resources={"pgrag": PgragResource(config_path=str(small_corpus.config))},
            tags=tags,
        )
        assert result.success
        out = {}
        for m in (
            result.asset_materializations_for_node("gated_triples")
            + result.asset_materializations_for_node("resolved_entities")
            + result.asset_materializations_for_node("relations")
        ):
            out[m.asset_key.path[-1]] = (m.metadata["mode"].value, m.tags.get("dagster/data_version"))
        return out

    plain = run({})
    assert {mode for mode, _ in plain.values()} == {"unchanged"}
    assert {mode for mode, _ in run({"pgrag/full": "true"}).values()} == {"full"}
    assert run({}) == plain  # a full recompute of an unchanged space changes nothing: the same data versions
