"""``pgrag cache evict`` (issue 13 item 4): a poison response that replay would serve on every run is
evicted by a CLI command that says what it removed; a cassette import never brings it back, and the
next run asks for what it answered again. Real PostgreSQL, real litellm calls to the stub server."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from pgrag_dag.cli import app
from pgrag_dag.errors import ExtractionError
from pgrag_dag.pipeline import PENDING_CHECK, index_documents
from pgrag_dag.store import cache, db
from tests.fix_corpus import SmallCorpus, extraction_answer

POISON = "I am sorry, I cannot help with that."
GLEAN = "Some entities and triples were missed"
runner = CliRunner()


def _raw(engine: Any, realm: str, space: str) -> Any:
    return {r.stage: r for r in index_documents(engine, realm, space, communities=False)}["raw_extractions"]


@pytest.fixture
def poisoned(small_corpus: SmallCorpus, realm: str, monkeypatch: pytest.MonkeyPatch) -> SmallCorpus:
    """Space ``copy`` (the same documents as ``main``) served by ``replay`` from a cassette in which the
    first pass of the chunk saying "never built" was recorded as a refusal; the live model stays
    second in the failover list."""
    engine = small_corpus.engine()
    index_documents(engine, realm, "main", communities=False)  # records every prompt's answer
    cassette = small_corpus.root / "recorded.jsonl"
    with db.connect(engine.dsn, autocommit=True) as conn:
        cache.export_cassette(conn, cassette)
        lines = [
            e for e in map(json.loads, cassette.read_text().splitlines()) if e["model"] == small_corpus.model
        ]
        # only the cassette answers these prompts (earlier tests' models recorded the same ones)
        conn.execute(
            "DELETE FROM pgrag__control.llm_cache WHERE prompt_key = ANY(%s)",
            ([e["prompt_key"] for e in lines],),
        )
    poisoned = [
        e
        for e in lines
        if e["purpose"] == "extract" and "never built" in e["request"]["messages"][-1]["content"]
    ]
    assert len(poisoned) == 1
    poisoned[0]["response"] = POISON
    cassette.write_text("".join(cache.cassette_line(e) for e in lines))
    cfg = yaml.safe_load(small_corpus.config.read_text())
    cfg["realms"][realm]["spaces"]["copy"] = cfg["realms"][realm]["spaces"]["main"]
    cfg["llm"]["models"] = ["replay", small_corpus.model]
    cfg["cassettes"] = [str(cassette)]
    small_corpus.config.write_text(yaml.safe_dump(cfg))
    monkeypatch.setenv("PGRAG_CONFIG", str(small_corpus.config))
    small_corpus.engine().import_cassettes()
    return small_corpus


def test_a_replayed_poison_response_is_replayed_every_run_until_evicted(
    poisoned: SmallCorpus, realm: str
) -> None:
    calls = len(poisoned.chat_requests())
    first = _raw(poisoned.engine(), realm, "copy")
    assert first.metadata["chunks_failed"] == 1 and first.metadata["model_calls"] == 0
    with pytest.raises(
        ExtractionError, match="replayed response to prompt"
    ):  # the same refusal, replayed again:
        _raw(poisoned.engine(), realm, "copy")  # the run's only chunk failed
    assert len(poisoned.chat_requests()) == calls

    out = runner.invoke(app, ["cache", "evict", "--parse-errors", "--space", f"{realm}.copy"])
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert len(lines) == 2
    assert re.fullmatch(
        rf"removed extract response [0-9a-f]{{16}} \(prompt [0-9a-f]{{16}}, "
        rf"model {re.escape(poisoned.model)}, "
        rf"cached [0-9: -]+\): '{POISON}'",
        lines[0],
    ), lines[0]
    assert (
        lines[1] == f"1 cached response(s) removed; 1 extraction pass(es) of {realm}.copy "
        "will be asked again by the next run"
    )
    poisoned.engine().import_cassettes()  # what `pgrag index` and the demo do first: the poison stays out
    with db.connect(poisoned.engine().dsn) as conn:
        assert conn.execute(
            "SELECT count(*) FROM pgrag__control.llm_cache WHERE response = %s", (POISON,)
        ).fetchone() == (0,)

    fixed = _raw(poisoned.engine(), realm, "copy")  # replay misses that prompt now: the live model answers it
    assert fixed.metadata["chunks_failed"] == 0 and fixed.checks[PENDING_CHECK][0] is True
    asked = [r["body"]["messages"][-1]["content"] for r in poisoned.chat_requests()[calls:]]
    assert len(asked) == 1 and "never built" in asked[0]
    # nothing left to evict
    out = runner.invoke(app, ["cache", "evict", "--parse-errors", "--space", f"{realm}.copy"])
    assert out.exit_code == 0 and out.output.splitlines() == [
        f"no cached response matched; nothing removed; 0 extraction pass(es) of {realm}.copy "
        "will be asked again by the next run"
    ]


def test_the_error_of_a_replayed_poison_response_names_the_prompt_key_to_evict(
    poisoned: SmallCorpus, realm: str
) -> None:
    first = _raw(poisoned.engine(), realm, "copy")
    error = first.metadata["failures"][0]
    assert "no JSON object in the response" in error
    hint = re.search(r"`pgrag cache evict --prompt-key ([0-9a-f]{16})` removes it", error)
    assert hint is not None and hint.group(1) in first.checks[PENDING_CHECK][1]["examples"][0]
    out = runner.invoke(app, ["cache", "evict", "--prompt-key", hint.group(1)])
    assert out.exit_code == 0, out.output
    *removed, summary = out.output.splitlines()  # every model's response to that prompt
    assert summary == f"{len(removed)} cached response(s) removed"
    assert any(
        f"(prompt {hint.group(1)}, model {poisoned.model}" in line and POISON in line for line in removed
    )
    again = _raw(poisoned.engine(), realm, "copy")
    assert again.metadata["chunks_failed"] == 0 and again.metadata["model_calls"] == 1


def test_an_evicted_gleaning_pass_is_asked_again_by_the_next_run(
    small_corpus: SmallCorpus, realm: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PGRAG_CONFIG", str(small_corpus.config))
    small_corpus.server.answer = lambda m: (
        "Nothing else, I think." if m[-1]["content"].startswith(GLEAN) else extraction_answer(m)
    )
    chunks = _raw(small_corpus.engine(), realm, "main").metadata["chunks_extracted"]
    out = runner.invoke(app, ["cache", "evict", "--parse-errors", "--space", f"{realm}.main"])
    assert out.exit_code == 0, out.output
    # a live model's unusable answer was never kept in the cache; the passes are owed all the same
    assert out.output.splitlines() == [
        f"no cached response matched; nothing removed; {chunks} extraction pass(es) "
        f"of {realm}.main will be asked again by the next run"
    ]
    small_corpus.server.answer = extraction_answer
    calls = len(small_corpus.chat_requests())
    again = _raw(small_corpus.engine(), realm, "main")
    asked = [r["body"]["messages"][-1]["content"] for r in small_corpus.chat_requests()[calls:]]
    assert len(asked) == chunks and all(a.startswith(GLEAN) for a in asked)
    assert again.metadata["chunks_resumed"] == chunks and again.checks[PENDING_CHECK][0] is True


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "give either --prompt-key KEY or --parse-errors --space REALM.SPACE"),
        (["--parse-errors"], "give either --prompt-key KEY or --parse-errors --space REALM.SPACE"),
        (["--prompt-key", "abc"], "give at least 8 of its lowercase hexadecimal digits"),
        (["--prompt-key", "0123456789abcdef", "--parse-errors", "--space", "x.y"], "give either"),
    ],
)
def test_cache_evict_refuses_unclear_requests_in_one_line(
    small_corpus: SmallCorpus, monkeypatch: pytest.MonkeyPatch, args: list[str], message: str
) -> None:
    monkeypatch.setenv("PGRAG_CONFIG", str(small_corpus.config))
    out = runner.invoke(app, ["cache", "evict", *args])
    assert out.exit_code == 2 and message in out.output and len(out.output.strip().splitlines()) == 1


def test_an_evicted_response_is_not_admitted_again_but_another_answer_to_its_prompt_is(
    small_corpus: SmallCorpus, tmp_path: Path
) -> None:
    entry = {
        "key": "k" * 64,
        "prompt_key": "ab" * 32,
        "model": "m",
        "purpose": "extract",
        "request": {"messages": [], "params": {}},
        "response": POISON,
    }
    with db.connect(small_corpus.settings().database_url, autocommit=True) as conn:
        from pgrag_dag.store.schema import init_control

        init_control(conn)
        conn.execute("DELETE FROM pgrag__control.llm_cache WHERE key = %s", (entry["key"],))
        cache.put(conn, entry)
        removed = cache.evict_prompt(conn, "abababab")
        assert [(r["key"], r["response"]) for r in removed] == [(entry["key"], POISON)]
        cache.put(conn, entry)  # a cassette import of the same response
        assert cache.get_by_key(conn, entry["key"]) is None
        cache.put(conn, {**entry, "response": '{"entities": [], "triples": []}'})  # a fixed recording
        assert cache.get_by_key(conn, entry["key"])["response"] == '{"entities": [], "triples": []}'  # type: ignore[index]
        conn.execute("DELETE FROM pgrag__control.llm_cache WHERE key = %s", (entry["key"],))
