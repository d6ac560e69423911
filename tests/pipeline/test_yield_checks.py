"""A run that produced nothing is loud and fails closed (issue 13 item 4, issue 28 item 3; paper §3.5): a
run whose chunks all came back empty, or whose every candidate a gate refused, raises ``ExtractionError``
naming the counts per gate — judged on the run's own chunks, not the space's — and writes nothing of
that stage; ``pgrag index`` exits non-zero and the Dagster step fails with the message. A space that opts
out (``extraction.allow_empty_runs``, or the space's ``allow_empty_runs``) completes such a run, its
``yield`` checks red (in the StageResult and the log). Real PostgreSQL, real litellm calls to the stub
server."""

from __future__ import annotations

import json
import logging
import re

import dagster as dg
import pytest
import yaml
from psycopg import sql
from typer.testing import CliRunner

from pgrag_dag.assets.partitions import add_partitions
from pgrag_dag.assets.stages import ASSETS
from pgrag_dag.cli import app
from pgrag_dag.errors import ExtractionError
from pgrag_dag.pipeline import index_documents, stage_chunks, stage_gated_triples, stage_raw_extractions
from pgrag_dag.pipeline.checks import YIELD_CHECK, require_yield
from pgrag_dag.resources.engine import PgragResource
from pgrag_dag.store import db
from pgrag_dag.store.schema import schema_for
from tests.fix_corpus import SmallCorpus

EMPTY = '{"entities": [], "triples": []}'
OPT_OUT = (
    "set extraction.allow_empty_runs: true (or allow_empty_runs: true on the space) for a corpus where "
    "that is expected"
)


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


def _count(corpus: SmallCorpus, realm: str, table: str) -> int:
    with db.connect(corpus.settings().database_url) as conn:
        row = conn.execute(
            sql.SQL("SELECT count(*) FROM {}.{} WHERE space = 'main'").format(
                sql.Identifier(schema_for(realm)), sql.Identifier(table)
            )
        ).fetchone()
    assert row is not None
    return int(row[0])


def _chunks(corpus: SmallCorpus, realm: str) -> int:
    return _count(corpus, realm, "documents")


def _opt_out(corpus: SmallCorpus, realm: str, *, on_space: bool = False) -> None:
    cfg = yaml.safe_load(corpus.config.read_text())
    if on_space:
        cfg["realms"][realm]["spaces"]["main"]["allow_empty_runs"] = True
    else:
        cfg["extraction"]["allow_empty_runs"] = True
    corpus.config.write_text(yaml.safe_dump(cfg))


# -- failing closed ---------------------------------------------------------------------------------


def test_a_run_whose_chunks_all_came_back_empty_raises_and_writes_no_extraction(
    small_corpus: SmallCorpus, realm: str
) -> None:
    small_corpus.server.answer = lambda messages: EMPTY
    with pytest.raises(ExtractionError) as info:
        index_documents(small_corpus.engine(), realm, "main", communities=False)
    n = _chunks(small_corpus, realm)
    assert n > 0
    assert str(info.value) == (
        f"run of {realm}.main: every one of {n} chunk(s) this run extracted (documents 01_babbage.txt, "
        "02_lovelace.txt) came back with no entity and "
        f"no triple ({n} empty, 0 without a usable first pass), so no candidate reached the gates: check the "
        f"extractor's model, prompt and the documents; nothing was written by raw_extractions — or {OPT_OUT}"
    )
    assert _count(small_corpus, realm, "raw_extractions") == 0  # nothing written: the next run asks again
    with pytest.raises(ExtractionError, match="came back with no entity"):
        index_documents(small_corpus.engine(), realm, "main", communities=False)


def test_a_run_whose_every_candidate_was_refused_raises_with_the_count_per_gate(
    small_corpus: SmallCorpus, realm: str
) -> None:
    small_corpus.server.answer = _refused_everything
    with pytest.raises(ExtractionError) as info:
        index_documents(small_corpus.engine(), realm, "main", communities=False)
    n = _chunks(small_corpus, realm)
    assert str(info.value) == (
        f"run of {realm}.main: no candidate of the {n} chunk(s) this run gated survived the gates: "
        f"{4 * n} candidate(s), 0 entities and 0 triples accepted; refused per gate: "
        f"pronominal_name {2 * n}, bare_quantity {n}, vague_predicate {n} (e.g. pronominal_name: She; "
        "pronominal_name: It; bare_quantity: $5 million; vague_predicate: relates_to; pronominal_name: She): "
        "check the gate "
        f"settings and extra gates; nothing was written by gated_triples — or {OPT_OUT}"
    )
    # the extractions are kept (they were usable), the decisions are not: the chunks stay queued, so the
    # next run — with nothing new to extract — judges them again and raises again
    assert _count(small_corpus, realm, "raw_extractions") > 0
    assert _count(small_corpus, realm, "gate_decisions") == 0
    calls = len(small_corpus.chat_requests())
    with pytest.raises(ExtractionError, match=f"refused per gate: pronominal_name {2 * n},"):
        index_documents(small_corpus.engine(), realm, "main", communities=False)
    assert len(small_corpus.chat_requests()) == calls


def test_gating_chunks_that_hold_no_candidate_raises_too(small_corpus: SmallCorpus, realm: str) -> None:
    """Empty extractions stored while the space allowed empty runs (or before this rule) are judged again
    when gated under settings that do not: the gate stage fails closed on them and they stay queued."""
    small_corpus.server.answer = lambda messages: EMPTY
    allowing = small_corpus.engine(extraction={"concurrency": 2, "allow_empty_runs": True})
    stage_chunks(allowing, realm, "main")
    stage_raw_extractions(allowing, realm, "main")
    n = _chunks(small_corpus, realm)
    for _ in range(2):
        with pytest.raises(ExtractionError) as info:
            stage_gated_triples(small_corpus.engine(), realm, "main")
        assert str(info.value) == (
            f"run of {realm}.main: the {n} chunk(s) this run gated hold no entity and no triple, so no "
            "candidate reached the gates: check the extractor's model, prompt and the documents; nothing was "
            f"written by gated_triples — or {OPT_OUT}"
        )
    result = stage_gated_triples(allowing, realm, "main")
    assert result.metadata["chunks_gated"] == n and result.checks[YIELD_CHECK][0] is False


def test_a_run_is_judged_on_its_own_chunks_not_on_the_graph_the_space_already_holds(
    small_corpus: SmallCorpus, realm: str
) -> None:
    """A space with a graph gains a document whose chunks all come back empty: that run raises; a run
    in which no chunk changed extracts nothing and passes."""
    _by_stage(small_corpus.engine(), realm)
    entities = _count(small_corpus, realm, "entities")
    assert entities > 0
    small_corpus.server.answer = lambda messages: EMPTY
    again = _by_stage(small_corpus.engine(), realm)  # incremental no-op: nothing extracted, nothing raised
    assert again["raw_extractions"].metadata["chunks_extracted"] == 0  # type: ignore[attr-defined]
    assert again["gated_triples"].metadata["mode"] == "unchanged"  # type: ignore[attr-defined]
    (small_corpus.root / "docs" / "03_notes.txt").write_text("Notes kept by a clerk.\n", encoding="utf-8")
    with pytest.raises(
        ExtractionError,
        match=r"every one of 1 chunk\(s\) this run extracted \(documents 03_notes.txt\) came back with no "
        r"entity.*check the extractor.s model",
    ):
        index_documents(small_corpus.engine(), realm, "main", communities=False)
    assert _count(small_corpus, realm, "entities") == entities


def test_a_mixed_run_passes_with_its_refusals_counted(small_corpus: SmallCorpus, realm: str) -> None:
    (small_corpus.root / "docs" / "03_notes.txt").write_text("Notes kept by a clerk.\n", encoding="utf-8")
    results = _by_stage(small_corpus.engine(), realm)  # one chunk of three documents yields nothing: fine
    ok, meta = results["raw_extractions"].checks[YIELD_CHECK]  # type: ignore[attr-defined]
    assert ok is True and meta["chunks_empty"] == 1 and meta["chunks_with_output"] == meta["chunks"] - 1 > 0
    ok, meta = results["gated_triples"].checks[YIELD_CHECK]  # type: ignore[attr-defined]
    assert (
        ok is True
        and meta["entities_accepted"] > 0
        and meta["rejections_per_gate"] == {"pronominal_name": 1, "vague_predicate": 1}
        and "reason" not in meta
    )


# -- opting out -------------------------------------------------------------------------------------


def test_a_space_that_allows_empty_runs_completes_with_its_yield_checks_red(
    small_corpus: SmallCorpus, realm: str, caplog: pytest.LogCaptureFixture
) -> None:
    _opt_out(small_corpus, realm)
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
    # written, the run completed: a first pass and one gleaning pass per chunk
    assert _count(small_corpus, realm, "raw_extractions") == 2 * meta["chunks"]


def test_a_space_of_its_own_may_allow_runs_whose_every_candidate_is_refused(
    small_corpus: SmallCorpus, realm: str
) -> None:
    _opt_out(small_corpus, realm, on_space=True)
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
    assert meta["candidates"] == 4 * chunks == _count(small_corpus, realm, "gate_decisions")
    assert meta["reason"].startswith(
        f"every one of {4 * chunks} candidate(s) was refused by a gate "
        f"(pronominal_name {2 * chunks}, bare_quantity {chunks}, vague_predicate {chunks})"
    )
    assert "pronominal_name: She" in meta["examples"]


# -- the command line and Dagster -------------------------------------------------------------------


def test_pgrag_index_exits_non_zero_naming_the_counts_per_gate(
    small_corpus: SmallCorpus, realm: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PGRAG_CONFIG", str(small_corpus.config))
    small_corpus.server.answer = _refused_everything
    out = CliRunner().invoke(app, ["index", f"{realm}.main"])
    assert out.exit_code == 2, out.output
    line = " ".join(out.stderr.split())  # the console wraps long lines
    assert f"stage gated_triples of {realm}.main" in line
    assert re.search(
        r"ExtractionError: run of \S+: no candidate of the (\d+) chunk\(s\) this run gated survived the "
        r"gates: \d+ candidate\(s\), 0 entities and 0 triples accepted; refused per gate: "
        r"pronominal_name \d+, bare_quantity \d+, vague_predicate \d+",
        line,
    ), line
    assert "allow_empty_runs" in line
    _opt_out(small_corpus, realm)  # the same run, opted out: exit 0, the failed check said once
    out = CliRunner().invoke(app, ["index", f"{realm}.main"])
    assert out.exit_code == 0, out.output
    assert "check gated_triples:yield failed: every one of" in out.stderr
    assert "check raw_extractions:yield failed" not in out.stderr


@pytest.mark.dagster
def test_the_dagster_step_fails_with_the_message(small_corpus: SmallCorpus, realm: str) -> None:
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
        assert not result.success
        assert {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()} == {"chunks"}
        failures = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
        assert [e.step_key for e in failures] == ["raw_extractions"]
        description = failures[0].step_failure_data.user_failure_data.description  # type: ignore[union-attr]
        assert description.startswith(f"raw_extractions {key}: ExtractionError: run of {key}: every one of ")
        assert "came back with no entity and no triple" in description and "allow_empty_runs" in description


def test_an_empty_offline_run_names_its_documents_and_blames_their_text_not_a_model() -> None:
    empty = {"chunks": 7, "chunks_empty": 7, "chunks_failed": 0}
    keys = ["scan.pdf", *(f"n{i}.txt" for i in range(6)), "scan.pdf"]
    with pytest.raises(ExtractionError) as info:
        require_yield((False, empty), stage="raw_extractions", where="r.s", allowed=False, documents=keys,
                      offline=True)  # fmt: skip
    message = str(info.value)
    assert "(documents n0.txt, n1.txt, n2.txt, n3.txt, n4.txt and 2 more)" in message
    assert "the offline extractor found no name in them" in message and "prompt" not in message
    require_yield((False, empty), stage="raw_extractions", where="r.s", allowed=True, offline=True)
