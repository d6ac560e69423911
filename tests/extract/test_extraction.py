"""Tests for pgrag_dag.extract.model_extraction: tolerant-but-strict parsing of model text, extraction through
real litellm calls to the stub server, gleaning, and the all-chunks-failed rule (paper §3.5, §4.1–4.2)."""

from __future__ import annotations

import json
import logging
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import polars as pl
import psycopg
import pytest

from pgrag_dag.config import ExtractionSettings, LLMSettings
from pgrag_dag.errors import ExtractionError
from pgrag_dag.extract.model_extraction import (
    extract_chunks,
    extraction_messages,
    parse_extraction,
    system_prompt,
)
from pgrag_dag.frames import RAW_SCHEMA
from pgrag_dag.operators.contracts import RawExtractionContract, validate
from pgrag_dag.providers.json_reply import parse_json_object
from pgrag_dag.providers.llm import ModelClient, prompt_key
from pgrag_dag.testing.stub_server import StubServer

CHUNK = re.compile(r"<<<CHUNK\n(.*)\nCHUNK>>>", re.DOTALL)
GLEAN_OPENING = "Some entities and triples were missed"
EMPTY = '{"entities": [], "triples": []}'


# -- parsing ------------------------------------------------------------------------------------------


def test_parse_json_object_accepts_a_bare_object() -> None:
    assert parse_json_object('{"entities": [], "triples": []}') == {"entities": [], "triples": []}


def test_parse_json_object_accepts_a_json_code_fence() -> None:
    text = 'Here you go:\n```json\n{"entities": [{"name": "Ada Lovelace"}]}\n```\nDone.'
    assert parse_json_object(text) == {"entities": [{"name": "Ada Lovelace"}]}
    assert parse_json_object('```\n{"a": 1}\n```') == {"a": 1}


def test_parse_json_object_accepts_leading_prose() -> None:
    assert parse_json_object('Sure! The extraction is: {"triples": [], "entities": []}') == {
        "triples": [],
        "entities": [],
    }


def test_parse_json_object_accepts_trailing_commas() -> None:
    text = '{"entities": [{"name": "Ada", "aliases": ["A. L.",],},], "triples": [],}'
    assert parse_json_object(text) == {"entities": [{"name": "Ada", "aliases": ["A. L."]}], "triples": []}


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("I could not find any entities in this passage.", "no JSON object"),
        ("[1, 2, 3]", "an array, not an object"),
        ('["entities", "triples"]', "an array, not an object"),
        (
            '```json\n{"entities": []}\n```\nand also\n```json\n{"triples": []}\n```',
            "more than one fenced block",
        ),
        ('{"entities": [}', "invalid JSON"),
        ("", "no JSON object"),
    ],
    ids=["prose-only", "array", "array-of-strings", "two-fences", "broken", "empty"],
)
def test_parse_json_object_rejects_anything_but_one_object(text: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        parse_json_object(text)


def test_parse_json_object_rejects_an_array_holding_one_object() -> None:
    with pytest.raises(ValueError):
        parse_json_object('[{"entities": [], "triples": []}]')


def test_parse_extraction_rejects_an_object_with_neither_key() -> None:
    with pytest.raises(ValueError, match="neither 'entities' nor 'triples'"):
        parse_extraction('{"nodes": [], "edges": []}')


def test_parse_extraction_fills_a_missing_list_and_rejects_a_non_list() -> None:
    assert parse_extraction('{"entities": [{"name": "Ada"}]}') == {
        "entities": [{"name": "Ada"}],
        "triples": [],
    }
    with pytest.raises(ValueError, match="'triples' is not a list of objects"):
        parse_extraction('{"entities": [], "triples": ["Ada met Babbage"]}')


# -- extraction through the stub server -------------------------------------------------------------

Factory = Callable[..., ModelClient]


@pytest.fixture
def make_client(pg_dsn: str, conn: psycopg.Connection) -> Iterator[Factory]:
    made: list[ModelClient] = []

    def make(server: StubServer, **kw: Any) -> ModelClient:
        client = ModelClient(
            pg_dsn,
            LLMSettings(
                models=[f"openai/stub-{uuid.uuid4().hex}"],
                api_base=server.base_url,
                api_key="x",
                deadline_s=kw.get("deadline_s", 5.0),
                max_retries=kw.get("max_retries", 0),
            ),
        )
        made.append(client)
        return client

    yield make
    for c in made:
        c.close()


def _chunks(*texts: str, doc_key: str = "corpus/lovelace.txt") -> pl.DataFrame:
    """Chunks of one document; the uuid keeps every prompt (and so every cache key) unique to the test."""
    tag = uuid.uuid4().hex[:8]
    return pl.DataFrame(
        {
            "chunk_id": [100 + i for i in range(len(texts))],
            "doc_key": [doc_key] * len(texts),
            "chunk_index": list(range(len(texts))),
            "title": ["Ada Lovelace"] * len(texts),
            "source": [doc_key] * len(texts),
            "text": [f"{t} [{tag}]" for t in texts],
        }
    )


def _chunk_text(messages: list[dict[str, str]]) -> str:
    m = CHUNK.search(messages[-1]["content"])
    assert m is not None
    return m.group(1)


def _entity_answer(name: str) -> str:
    return json.dumps(
        {"entities": [{"name": name, "type": "Person", "description": "", "aliases": []}], "triples": []}
    )


def _chat(server: StubServer) -> list[dict[str, Any]]:
    return [r["body"] for r in server.requests if r["path"].endswith("/chat/completions")]


@pytest.mark.live
def test_the_prompt_carries_title_source_and_the_framed_chunk(
    stub_llm: StubServer, make_client: Factory
) -> None:
    chunks = _chunks("Ada Lovelace wrote notes on the Analytical Engine in 1843.")
    raw = extract_chunks(chunks, make_client(stub_llm), ExtractionSettings(gleaning_passes=0))
    (body,) = _chat(stub_llm)
    system, user = body["messages"]
    assert system == {"role": "system", "content": system_prompt(None)}
    assert (
        "{vocabulary_rule}" not in system["content"]
        and "Use one of these predicates" not in system["content"]
    )
    assert user["role"] == "user"
    assert "Document title: Ada Lovelace\n" in user["content"]
    assert "Source: corpus/lovelace.txt\n" in user["content"]
    assert f"<<<CHUNK\n{chunks['text'][0]}\nCHUNK>>>" in user["content"]
    assert body["response_format"] == {"type": "json_object"}
    assert raw.select("chunk_id", "pass", "parse_status", "parsed").rows() == [
        (100, 0, "ok", json.dumps({"entities": [], "triples": []}))
    ]


@pytest.mark.live
def test_a_malformed_response_fails_only_its_chunk_and_keeps_the_raw_text(
    stub_llm: StubServer, make_client: Factory, conn: psycopg.Connection
) -> None:
    refusal = "Sorry, I can't help with GARBLED text."
    stub_llm.answer = lambda messages: (
        refusal if "GARBLED" in _chunk_text(messages) else _entity_answer("Ada Lovelace")
    )
    chunks = _chunks("Ada Lovelace was a mathematician.", "GARBLED ### text", "Ada Lovelace met Babbage.")
    client = make_client(stub_llm)
    settings = ExtractionSettings(gleaning_passes=0)
    raw = extract_chunks(chunks, client, settings)

    assert raw.schema == pl.Schema(RAW_SCHEMA)
    assert raw.select("chunk_id", "parse_status").rows() == [(100, "ok"), (101, "parse_error"), (102, "ok")]
    bad = raw.row(1, named=True)
    assert bad["raw_text"] == refusal and bad["parsed"] is None
    assert bad["error"].startswith("corpus/lovelace.txt#1: ")
    assert "no JSON object" in bad["error"]
    assert bad["model"] == client.settings.models[0]
    assert json.loads(raw["parsed"][0])["entities"][0]["name"] == "Ada Lovelace"
    assert validate(RawExtractionContract, raw).height == 3

    # the unusable response is not cached, so a re-run asks the model again; the good ones are
    params = client.params(json_mode=True)
    keys = [prompt_key(extraction_messages(c), params) for c in chunks.iter_rows(named=True)]
    cached = {
        k
        for (k,) in conn.execute(
            "SELECT prompt_key FROM pgrag__control.llm_cache WHERE prompt_key = ANY(%s)", (keys,)
        ).fetchall()
    }
    assert cached == {keys[0], keys[2]}


@pytest.mark.live
@pytest.mark.parametrize("outage", ["prose", "http-500"])
def test_every_chunk_failing_raises_extraction_error(
    stub_llm: StubServer, make_client: Factory, outage: str
) -> None:
    def answer(messages: list[dict[str, str]]) -> str:
        if outage == "http-500":
            raise RuntimeError("provider outage")
        return "I am unable to comply."

    stub_llm.answer = answer
    chunks = _chunks("First chunk.", "Second chunk.")
    with pytest.raises(ExtractionError) as info:
        extract_chunks(chunks, make_client(stub_llm, deadline_s=0.5), ExtractionSettings(gleaning_passes=0))
    message = str(info.value)
    assert "every one of 2 chunk(s) failed" in message
    assert "corpus/lovelace.txt#0" in message and "corpus/lovelace.txt#1" in message


@pytest.mark.live
def test_no_chunks_is_not_an_error(stub_llm: StubServer, make_client: Factory) -> None:
    raw = extract_chunks(_chunks(), make_client(stub_llm), ExtractionSettings())
    assert raw.height == 0 and raw.schema == pl.Schema(RAW_SCHEMA)
    assert _chat(stub_llm) == []


def _previous(glean_prompt: str) -> str:
    """The "Already extracted" JSON of a gleaning prompt."""
    return glean_prompt.split("Already extracted:\n", 1)[1].split("\n\nReturn, in the same", 1)[0]


@pytest.mark.live
def test_gleaning_merges_each_pass_into_the_next_prompt(stub_llm: StubServer, make_client: Factory) -> None:
    def answer(messages: list[dict[str, str]]) -> str:
        user = messages[-1]["content"]
        if not user.startswith(GLEAN_OPENING):
            return _entity_answer("Ada Lovelace")
        if "Charles Babbage" not in _previous(user):
            return _entity_answer("Charles Babbage")
        return EMPTY

    stub_llm.answer = answer
    raw = extract_chunks(
        _chunks("Ada Lovelace worked with Charles Babbage."),
        make_client(stub_llm),
        ExtractionSettings(gleaning_passes=3),
    )
    assert raw.select("pass", "parse_status").rows() == [(0, "ok"), (1, "ok"), (2, "ok")]
    assert [[e["name"] for e in json.loads(p)["entities"]] for p in raw["parsed"]] == [
        ["Ada Lovelace"],
        ["Charles Babbage"],
        [],
    ]
    bodies = _chat(stub_llm)
    assert len(bodies) == 3  # the empty third pass stopped a fourth
    first_glean, second_glean = (json.loads(_previous(b["messages"][-1]["content"])) for b in bodies[1:])
    assert [e["name"] for e in first_glean["entities"]] == ["Ada Lovelace"]
    assert [e["name"] for e in second_glean["entities"]] == ["Ada Lovelace", "Charles Babbage"]


@pytest.mark.live
def test_an_empty_gleaning_response_stops_further_passes(stub_llm: StubServer, make_client: Factory) -> None:
    stub_llm.answer = lambda m: (
        EMPTY if m[-1]["content"].startswith(GLEAN_OPENING) else _entity_answer("Ada Lovelace")
    )
    raw = extract_chunks(
        _chunks("Ada Lovelace."), make_client(stub_llm), ExtractionSettings(gleaning_passes=2)
    )
    assert raw.select("pass", "parse_status").rows() == [(0, "ok"), (1, "ok")]
    assert len(_chat(stub_llm)) == 2


@pytest.mark.live
def test_an_unparseable_gleaning_pass_is_logged_and_the_first_pass_kept(
    stub_llm: StubServer, make_client: Factory, caplog: pytest.LogCaptureFixture
) -> None:
    first = _entity_answer("Ada Lovelace")
    stub_llm.answer = lambda m: (
        "Nothing else, I think." if m[-1]["content"].startswith(GLEAN_OPENING) else first
    )
    with caplog.at_level(logging.WARNING, logger="pgrag_dag.extract.model_extraction"):
        raw = extract_chunks(
            _chunks("Ada Lovelace."), make_client(stub_llm), ExtractionSettings(gleaning_passes=2)
        )
    assert raw.select("pass", "parse_status").rows() == [(0, "ok"), (1, "parse_error")]
    assert json.loads(raw["parsed"][0]) == json.loads(first)
    assert raw["raw_text"][1] == "Nothing else, I think."
    assert len(_chat(stub_llm)) == 2  # no further pass after the failure
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("gleaning pass 1 of corpus/lovelace.txt#0 unparseable; first pass kept" in w for w in warnings)


@pytest.mark.live
def test_a_failed_gleaning_call_keeps_the_first_pass(stub_llm: StubServer, make_client: Factory) -> None:
    def answer(messages: list[dict[str, str]]) -> str:
        if messages[-1]["content"].startswith(GLEAN_OPENING):
            raise RuntimeError("outage during gleaning")
        return _entity_answer("Ada Lovelace")

    stub_llm.answer = answer
    raw = extract_chunks(
        _chunks("Ada Lovelace."), make_client(stub_llm, deadline_s=0.5), ExtractionSettings(gleaning_passes=2)
    )
    assert raw.select("pass", "parse_status").rows() == [(0, "ok"), (1, "model_error")]
    assert raw["error"][1].startswith("corpus/lovelace.txt#0: ")


@pytest.mark.live
@pytest.mark.parametrize("concurrency", [1, 3])
def test_concurrency_is_bounded_and_rows_keep_chunk_order(
    stub_llm: StubServer, make_client: Factory, concurrency: int
) -> None:
    lock = threading.Lock()
    in_flight = peak = arrived = 0
    # the first `concurrency` calls wait for one another (bounded), so the peak reaches the limit however
    # slowly the calls start when the machine is busy — a sleep would only make the overlap likely; a
    # client that never had them in flight at once breaks the barrier and fails the call
    first = threading.Barrier(concurrency, timeout=10)

    def answer(messages: list[dict[str, str]]) -> str:
        nonlocal in_flight, peak, arrived
        n = int(re.search(r"Chunk number (\d+)", _chunk_text(messages)).group(1))  # type: ignore[union-attr]
        with lock:
            in_flight += 1
            peak = max(peak, in_flight)
            arrived += 1
            meet = arrived <= concurrency
        if meet:
            first.wait()
        time.sleep(0.05 + 0.03 * (6 - n))  # earlier chunks answer later
        with lock:
            in_flight -= 1
        return _entity_answer(f"Entity {n}")

    stub_llm.answer = answer
    chunks = _chunks(*[f"Chunk number {i}." for i in range(6)])
    raw = extract_chunks(
        chunks,
        make_client(stub_llm, deadline_s=15),  # the barrier's wait is within the call's deadline
        ExtractionSettings(gleaning_passes=0, concurrency=concurrency),
    )
    assert peak == concurrency
    assert raw["chunk_id"].to_list() == chunks["chunk_id"].to_list()
    assert [json.loads(p)["entities"][0]["name"] for p in raw["parsed"]] == [f"Entity {i}" for i in range(6)]
