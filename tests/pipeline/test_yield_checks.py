"""A run that produced nothing is loud (issue 13 item 4): a space whose chunks all came back empty, or
whose every candidate a gate refused, fails the ``yield`` check — in the StageResult, the log, the
``pgrag index`` output and as a non-blocking Dagster asset check of severity ERROR. Real PostgreSQL,
real litellm calls to the stub server."""

from __future__ import annotations

import json
import logging

import dagster as dg
import pytest
from typer.testing import CliRunner

from pgrag_dag.assets.partitions import add_partitions
from pgrag_dag.assets.stages import ASSETS
from pgrag_dag.cli import app
from pgrag_dag.pipeline import index_documents
from pgrag_dag.pipeline.checks import YIELD_CHECK
from pgrag_dag.resources.engine import PgragResource
from tests.fix_corpus import SmallCorpus

EMPTY = '{"entities": [], "triples": []}'


def _refused_everything(messages: list[dict[str, str]]) -> str:
    """A model whose every candidate some gate refuses: pronouns, a vague predicate, a bare quantity."""
    if messages[-1]["content"].startswith("Some entities and triples were missed"):
        return EMPTY
    return json.dumps(
        {
            "entities": [
                {"name": "She", "type": "Person"},
                {"name": "It", "type": "Concept"},
                {"name": "$5 million", "type": "Concept"},
            ],
            "triples": [
                {
                    "subject": "Charles Babbage",
                    "predicate": "relates_to",
                    "object": "London",
                    "confidence": 0.9,
                }
            ],
        }
    )


def _by_stage(engine: object, realm: str) -> dict[str, object]:
    return {r.stage: r for r in index_documents(engine, realm, "main", communities=False)}  # type: ignore[arg-type]


def test_a_space_whose_chunks_all_came_back_empty_fails_the_yield_checks(
    small_corpus: SmallCorpus, realm: str, caplog: pytest.LogCaptureFixture
) -> None:
    small_corpus.server.answer = lambda messages: EMPTY
    with caplog.at_level(logging.WARNING, logger="pgrag_dag.pipeline.checks"):
        results = _by_stage(small_corpus.engine(), realm)
    ok, meta = results["raw_extractions"].checks[YIELD_CHECK]  # type: ignore[attr-defined]
    assert ok is False
    assert meta["chunks"] > 0 and meta["chunks_empty"] == meta["chunks"] and meta["chunks_with_output"] == 0
    assert meta["entities"] == meta["triples"] == 0
    assert f"every one of {meta['chunks']} chunk(s) came back with no entity and no triple" in meta["reason"]
    gated_ok, gated = results["gated_triples"].checks[YIELD_CHECK]  # type: ignore[attr-defined]
    assert gated_ok is False and gated["candidates"] == 0 and "nothing was extracted" in gated["reason"]
    logged = [r.getMessage() for r in caplog.records]
    assert any(f"raw_extractions {realm}.main: check yield failed: every one of" in m for m in logged)
    assert results["resolved_entities"].metadata["entities"] == 0  # type: ignore[attr-defined]


def test_a_space_whose_every_candidate_was_refused_fails_with_the_count_per_gate(
    small_corpus: SmallCorpus, realm: str
) -> None:
    small_corpus.server.answer = _refused_everything
    results = _by_stage(small_corpus.engine(), realm)
    assert results["raw_extractions"].checks[YIELD_CHECK][0] is True  # type: ignore[attr-defined]  # something was extracted
    ok, meta = results["gated_triples"].checks[YIELD_CHECK]  # type: ignore[attr-defined]
    chunks = results["raw_extractions"].checks[YIELD_CHECK][1]["chunks"]  # type: ignore[attr-defined]
    assert ok is False and meta["entities_accepted"] == meta["triples_accepted"] == 0
    assert meta["rejections_per_gate"] == {
        "pronominal_name": 2 * chunks,
        "bare_quantity": chunks,
        "vague_predicate": chunks,
    }
    assert meta["candidates"] == 4 * chunks
    assert meta["reason"].startswith(
        f"every one of {4 * chunks} candidate(s) was refused by a gate "
        f"(pronominal_name {2 * chunks}, bare_quantity {chunks}, vague_predicate {chunks})"
    )
    assert "pronominal_name: She" in meta["examples"]


def test_a_space_that_yields_a_graph_passes_the_yield_checks(small_corpus: SmallCorpus, realm: str) -> None:
    results = _by_stage(small_corpus.engine(), realm)
    ok, meta = results["raw_extractions"].checks[YIELD_CHECK]  # type: ignore[attr-defined]
    assert ok is True and meta["chunks_with_output"] == meta["chunks"] > 0 and "reason" not in meta
    ok, meta = results["gated_triples"].checks[YIELD_CHECK]  # type: ignore[attr-defined]
    assert (
        ok is True
        and meta["entities_accepted"] > 0
        and meta["rejections_per_gate"] == {"pronominal_name": 1, "vague_predicate": 1}
    )


def test_pgrag_index_says_which_check_failed(
    small_corpus: SmallCorpus, realm: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PGRAG_CONFIG", str(small_corpus.config))
    small_corpus.server.answer = _refused_everything
    out = CliRunner().invoke(app, ["index", f"{realm}.main"])
    assert out.exit_code == 0, out.output
    assert "check gated_triples:yield failed: every one of" in out.stderr
    assert "check raw_extractions:yield failed" not in out.stderr


@pytest.mark.dagster
def test_the_yield_check_is_a_non_blocking_error_in_dagster(small_corpus: SmallCorpus, realm: str) -> None:
    small_corpus.server.answer = lambda messages: EMPTY
    key = f"{realm}.main"
    with dg.instance_for_test() as instance:
        add_partitions(instance, [key])
        result = dg.materialize(
            ASSETS,
            partition_key=key,
            instance=instance,
            selection=dg.AssetSelection.assets(
                "chunks", "raw_extractions", "gated_triples", "resolved_entities"
            ),
            resources={"pgrag": PgragResource(config_path=str(small_corpus.config))},
            raise_on_error=False,
        )
        assert result.success  # non-blocking: downstream stages still ran
        assert {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()} == {
            "chunks",
            "raw_extractions",
            "gated_triples",
            "resolved_entities",
        }
        failed = {
            (e.asset_key.to_user_string(), e.check_name): e
            for e in result.get_asset_check_evaluations()
            if not e.passed
        }
        assert set(failed) == {("raw_extractions", YIELD_CHECK), ("gated_triples", YIELD_CHECK)}
        assert all(e.severity == dg.AssetCheckSeverity.ERROR for e in failed.values())
        assert failed[("raw_extractions", YIELD_CHECK)].metadata["chunks_with_output"].value == 0
