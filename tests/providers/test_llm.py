"""Tests for pgrag_dag.providers.llm and store.cache: the PostgreSQL response cache, failover, the wall-clock
deadline, replay and cassettes (paper §3.5). Real litellm calls against the local stub server."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pgrag_dag.config import LLMSettings
from pgrag_dag.errors import ConfigurationError, ModelError, ReplayMissError, StreamInterruptedError
from pgrag_dag.providers.llm import REPLAY, ModelClient, cache_key, prompt_key
from pgrag_dag.store import cache
from pgrag_dag.testing.stub_server import StubServer, StubStatus

pytestmark = pytest.mark.live

Factory = Callable[..., ModelClient]


@pytest.fixture
def make_client(pg_dsn: str, conn: psycopg.Connection) -> Iterator[Factory]:
    """ModelClient factory (the ``conn`` fixture creates the cache table); every client is closed after."""
    made: list[ModelClient] = []

    def make(models: list[str], server: StubServer | None = None, **kw: Any) -> ModelClient:
        cached_only = kw.pop("cached_only", False)
        client = ModelClient(
            pg_dsn,
            LLMSettings(
                models=models,
                api_base=server.base_url if server else None,
                api_key="x",
                deadline_s=kw.pop("deadline_s", 5.0),
                max_retries=kw.pop("max_retries", 0),
                **kw,
            ),
            cached_only=cached_only,
        )
        made.append(client)
        return client

    yield make
    for c in made:
        c.close()


def _model(prefix: str = "stub") -> str:
    return f"openai/{prefix}-{uuid.uuid4().hex}"


def _messages(tag: str | None = None) -> list[dict[str, str]]:
    """A prompt no other test sends: replay keys are model-independent."""
    return [
        {"role": "system", "content": "Return JSON."},
        {"role": "user", "content": f"Who designed the Analytical Engine? [{tag or uuid.uuid4().hex}]"},
    ]


def _chat_requests(server: StubServer) -> list[dict[str, Any]]:
    return [r for r in server.requests if r["path"].endswith("/chat/completions")]


def _cached_rows(conn: psycopg.Connection, pkey: str) -> list[tuple[Any, ...]]:
    return conn.execute(
        "SELECT model, purpose, response, request FROM pgrag__control.llm_cache WHERE prompt_key = %s "
        "ORDER BY model",
        (pkey,),
    ).fetchall()


def test_a_response_is_cached_in_postgresql_and_served_without_a_request(
    stub_llm: StubServer, make_client: Factory, conn: psycopg.Connection
) -> None:
    stub_llm.answer = lambda messages: '{"answer": "Charles Babbage"}'
    model, messages = _model(), _messages()
    first_client = make_client([model], stub_llm)

    first = first_client.complete(messages, purpose="extract")
    assert (first.text, first.model, first.cache_hit) == ('{"answer": "Charles Babbage"}', model, False)
    assert first.prompt_tokens > 0 and first.completion_tokens > 0
    assert first_client.usage.model_calls == 1 and first_client.usage.cache_hits == 0
    assert len(_chat_requests(stub_llm)) == 1
    assert _chat_requests(stub_llm)[0]["body"]["model"] == model.removeprefix("openai/")

    pkey = prompt_key(messages, first_client.params(json_mode=True))
    rows = _cached_rows(conn, pkey)
    assert [(r[0], r[1], r[2]) for r in rows] == [(model, "extract", '{"answer": "Charles Babbage"}')]
    assert rows[0][3]["messages"] == messages
    assert first.key == cache_key(model, pkey)

    # the same call again, from the same client and from a fresh one: no request reaches the model
    again = first_client.complete(messages, purpose="extract")
    fresh_client = make_client([model], stub_llm)
    fresh = fresh_client.complete(messages, purpose="extract")
    for hit in (again, fresh):
        assert (hit.text, hit.model, hit.cache_hit) == (first.text, model, True)
        assert (hit.prompt_tokens, hit.completion_tokens) == (first.prompt_tokens, first.completion_tokens)
    assert len(_chat_requests(stub_llm)) == 1
    assert first_client.usage.model_calls == 1 and first_client.usage.cache_hits == 1
    assert fresh_client.usage.model_calls == 0 and fresh_client.usage.cache_hits == 1


def test_the_cache_key_separates_models_and_parameters(stub_llm: StubServer, make_client: Factory) -> None:
    calls = iter(["one", "two", "three"])
    stub_llm.answer = lambda messages: next(calls)
    messages = _messages()
    a, b = make_client([_model()], stub_llm), make_client([_model()], stub_llm)
    assert a.complete(messages, purpose="x").text == "one"
    assert b.complete(messages, purpose="x").text == "two"  # another model is not served a's answer
    assert a.complete(messages, purpose="x", json_mode=False).text == "three"  # other parameters: another key
    assert len(_chat_requests(stub_llm)) == 3


def test_failover_answers_from_the_next_model_when_the_first_fails(
    stub_llm: StubServer, make_client: Factory, conn: psycopg.Connection
) -> None:
    first, second = _model("a"), _model("b")

    def answer(messages: list[dict[str, str]]) -> str:
        # the handler appends the request before it asks for an answer; calls here are sequential
        if stub_llm.requests[-1]["body"]["model"].startswith("a-"):
            raise RuntimeError("provider a is down")
        return '{"answer": "from b"}'

    stub_llm.answer = answer
    client = make_client([first, second], stub_llm, deadline_s=1.0, max_retries=0)
    messages = _messages()
    got = client.complete(messages, purpose="extract")
    assert (got.text, got.model, got.cache_hit) == ('{"answer": "from b"}', second, False)
    assert [r["body"]["model"] for r in _chat_requests(stub_llm)] == [
        first.removeprefix("openai/"),
        second.removeprefix("openai/"),
    ]
    # only the model that answered is cached
    pkey = prompt_key(messages, client.params(json_mode=True))
    assert [r[0] for r in _cached_rows(conn, pkey)] == [second]


def test_every_model_failing_raises_model_error_naming_each(
    stub_llm: StubServer, make_client: Factory
) -> None:
    def down(messages: list[dict[str, str]]) -> str:
        raise RuntimeError("outage")

    stub_llm.answer = down
    first, second = _model("a"), _model("b")
    client = make_client([first, second], stub_llm, deadline_s=1.0, max_retries=0)
    with pytest.raises(ModelError) as info:
        client.complete(_messages(), purpose="community_report")
    assert not isinstance(info.value, ReplayMissError)
    message = str(info.value)
    assert first in message and second in message and "community_report" in message
    assert client.usage.model_calls == 0


def test_the_deadline_bounds_retries(stub_llm: StubServer, make_client: Factory) -> None:
    def down(messages: list[dict[str, str]]) -> str:
        raise RuntimeError("sustained outage")

    stub_llm.answer = down
    model = _model()
    client = make_client([model], stub_llm, deadline_s=2.0, max_retries=50)
    started = time.monotonic()
    with pytest.raises(ModelError) as info:
        client.complete(_messages(), purpose="extract")
    elapsed = time.monotonic() - started
    assert 1.5 <= elapsed < 6.0
    attempts = len(_chat_requests(stub_llm))
    assert 2 <= attempts <= 8  # it did retry, and far fewer than max_retries
    assert model in str(info.value) and f"after {attempts} attempt(s)" in str(info.value)


def test_max_retries_bounds_attempts_within_the_deadline(stub_llm: StubServer, make_client: Factory) -> None:
    def down(messages: list[dict[str, str]]) -> str:
        raise RuntimeError("outage")

    stub_llm.answer = down
    client = make_client([_model()], stub_llm, deadline_s=30.0, max_retries=1)
    started = time.monotonic()
    with pytest.raises(ModelError, match=r"after 2 attempt\(s\)"):
        client.complete(_messages(), purpose="extract")
    assert len(_chat_requests(stub_llm)) == 2
    assert time.monotonic() - started < 5.0


def test_replay_serves_a_recorded_response_without_any_request(
    stub_llm: StubServer, make_client: Factory
) -> None:
    stub_llm.answer = lambda messages: '{"answer": "recorded"}'
    live_model, messages = _model(), _messages()
    recorded = make_client([live_model], stub_llm).complete(messages, purpose="extract")
    assert len(_chat_requests(stub_llm)) == 1

    replay = make_client([REPLAY])  # no api_base: it could not reach a model if it tried
    got = replay.complete(messages, purpose="extract")
    assert (got.text, got.model, got.cache_hit, got.replayed) == (
        '{"answer": "recorded"}',
        live_model,
        True,
        True,
    )
    assert (got.prompt_tokens, got.completion_tokens) == (recorded.prompt_tokens, recorded.completion_tokens)
    assert len(_chat_requests(stub_llm)) == 1
    assert replay.usage.model_calls == 0 and replay.usage.cache_hits == 1


def test_a_replay_miss_raises_naming_the_purpose(make_client: Factory) -> None:
    client = make_client([REPLAY])
    messages = _messages()
    with pytest.raises(ReplayMissError) as info:
        client.complete(messages, purpose="community_report")
    assert info.value.purpose == "community_report"
    assert "community_report" in str(info.value)
    assert info.value.prompt_key == prompt_key(messages, client.params(json_mode=True))


def test_a_replay_miss_of_an_erased_response_says_it_was_erased_not_never_recorded(
    stub_llm: StubServer, make_client: Factory, conn: psycopg.Connection
) -> None:
    stub_llm.answer = lambda messages: '{"answer": "recorded"}'
    messages = _messages()
    make_client([_model()], stub_llm).complete(messages, purpose="extract")
    replay = make_client([REPLAY])
    key = prompt_key(messages, replay.params(json_mode=True))
    assert len(cache.evict_prompt(conn, key[:16])) == 1  # as a purge of a document it quotes evicts it
    with pytest.raises(ReplayMissError) as info:
        replay.complete(messages, purpose="extract")
    assert "its recorded response was erased (pgrag purge" in str(info.value)
    assert "never recorded" not in str(info.value)
    with pytest.raises(ReplayMissError, match="this prompt was never recorded"):
        replay.complete(_messages(), purpose="extract")


def test_a_replay_miss_falls_over_to_a_live_model(stub_llm: StubServer, make_client: Factory) -> None:
    stub_llm.answer = lambda messages: "live answer"
    model = _model()
    got = make_client([REPLAY, model], stub_llm).complete(_messages(), purpose="extract")
    assert (got.text, got.model, got.cache_hit, got.replayed) == ("live answer", model, False, False)


def test_a_cassette_roundtrips_through_export_and_import(
    stub_llm: StubServer, make_client: Factory, conn: psycopg.Connection, tmp_path: Path
) -> None:
    purpose = f"cassette-{uuid.uuid4().hex}"
    answers = iter(['{"n": 1}', '{"n": 2}'])
    stub_llm.answer = lambda messages: next(answers)
    live = make_client([_model()], stub_llm)
    prompts = [_messages(), _messages()]
    recorded = [live.complete(m, purpose=purpose).text for m in prompts]

    path = tmp_path / "sub" / "cassette.jsonl"
    with pytest.raises(ConfigurationError, match=f"directory {path.parent} does not exist"):
        cache.export_cassette(conn, path, purpose_prefix=purpose)  # issue 16: a missing directory is refused
    assert not path.parent.exists()
    path.parent.mkdir()
    assert cache.export_cassette(conn, path, purpose_prefix=purpose) == 2
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert sorted(line["response"] for line in lines) == sorted(recorded)
    assert [line["key"] for line in lines] == sorted(line["key"] for line in lines)
    assert all(set(line) == set(cache.CASSETTE_FIELDS) for line in lines)

    conn.execute("DELETE FROM pgrag__control.llm_cache WHERE purpose = %s", (purpose,))
    replay = make_client([REPLAY])
    with pytest.raises(ReplayMissError):
        replay.complete(prompts[0], purpose=purpose)

    assert cache.import_cassette(conn, path) == 2
    assert cache.import_cassette(conn, path) == 2  # idempotent
    assert conn.execute(
        "SELECT count(*) FROM pgrag__control.llm_cache WHERE purpose = %s", (purpose,)
    ).fetchone() == (2,)
    assert [replay.complete(m, purpose=purpose).text for m in prompts] == recorded
    assert len(_chat_requests(stub_llm)) == 2

    again = tmp_path / "again.jsonl"
    cache.export_cassette(conn, again, purpose_prefix=purpose)
    assert again.read_bytes() == path.read_bytes()  # a re-export is byte-identical


def _valid_line(purpose: str) -> str:
    return json.dumps(
        {
            "key": uuid.uuid4().hex,
            "prompt_key": uuid.uuid4().hex,
            "model": "openai/x",
            "purpose": purpose,
            "request": {"messages": []},
            "response": "ok",
        }
    )


@pytest.mark.parametrize(
    ("bad", "reason"),
    [("{not json", "not JSON"), ('{"key": "k", "model": "m"}', "missing fields")],
    ids=["not-json", "missing-fields"],
)
def test_a_malformed_cassette_line_raises_configuration_error_naming_file_and_line(
    conn: psycopg.Connection, tmp_path: Path, bad: str, reason: str
) -> None:
    path = tmp_path / "broken.jsonl"
    path.write_text(_valid_line(f"broken-{uuid.uuid4().hex}") + "\n\n" + bad + "\n", encoding="utf-8")
    with pytest.raises(ConfigurationError) as info:
        cache.import_cassette(conn, path)
    assert f"{path}:3" in str(info.value) and reason in str(info.value)


@pytest.mark.parametrize("bad", ["null", "5"])
def test_a_cassette_line_that_is_not_an_object_raises_configuration_error(
    conn: psycopg.Connection, tmp_path: Path, bad: str
) -> None:
    path = tmp_path / "scalar.jsonl"
    path.write_text(bad + "\n", encoding="utf-8")
    with pytest.raises(ConfigurationError, match=f"{path}:1"):
        cache.import_cassette(conn, path)


def test_importing_a_missing_cassette_raises_configuration_error(
    conn: psycopg.Connection, tmp_path: Path
) -> None:
    with pytest.raises(ConfigurationError, match="does not exist"):
        cache.import_cassette(conn, tmp_path / "absent.jsonl")


def test_a_streamed_answer_arrives_in_pieces_is_cached_whole_and_replays_at_once(
    stub_llm: StubServer, make_client: Factory, conn: psycopg.Connection
) -> None:
    """Issue 16 item 4: ``complete(..., on_text=...)`` streams a live model's answer through real litellm (the
    stub's server-sent events), caches the whole text under the unstreamed key, and hands a cached or
    replayed answer over whole, once."""
    answer = "Charles Babbage designed the Analytical Engine; Ada Lovelace wrote notes on it [1]."
    stub_llm.answer = lambda messages: answer
    model, messages = _model(), _messages()
    live = make_client([model], stub_llm)
    pieces: list[str] = []
    streamed = live.complete(messages, purpose="synthesis", json_mode=False, on_text=pieces.append)
    assert len(pieces) > 1 and "".join(pieces) == streamed.text == answer and not streamed.cache_hit
    assert _chat_requests(stub_llm)[-1]["body"]["stream"] is True
    assert streamed.prompt_tokens > 0 and streamed.completion_tokens > 0 and live.usage.model_calls == 1
    pkey = prompt_key(messages, live.params(json_mode=False))
    assert [(r[0], r[2]) for r in _cached_rows(conn, pkey)] == [(model, answer)]
    # the unstreamed call is served the streamed answer from the cache, and a streamed one gets it whole
    assert (
        make_client([model], stub_llm).complete(messages, purpose="synthesis", json_mode=False).text == answer
    )
    again: list[str] = []
    hit = make_client([model], stub_llm).complete(
        messages, purpose="synthesis", json_mode=False, on_text=again.append
    )
    replayed: list[str] = []
    make_client([REPLAY]).complete(messages, purpose="synthesis", json_mode=False, on_text=replayed.append)
    assert hit.cache_hit and again == [answer] and replayed == [answer]
    assert len(_chat_requests(stub_llm)) == 1


def test_a_stream_fails_over_before_its_first_piece_and_stops_after_it(
    stub_llm: StubServer, make_client: Factory, conn: psycopg.Connection
) -> None:
    calls = iter([StubStatus(500, "overloaded")])

    def answer(messages: list[dict[str, str]]) -> str:
        refusal = next(calls, None)
        if refusal is not None:
            raise refusal
        return "the second model answers in pieces"

    stub_llm.answer = answer
    down, up = _model("down"), _model("up")
    pieces: list[str] = []
    out = make_client([down, up], stub_llm).complete(
        _messages(), purpose="synthesis", json_mode=False, on_text=pieces.append
    )
    assert (
        out.model == up and "".join(pieces) == "the second model answers in pieces"
    )  # nothing shown of `down`
    # broken after three pieces: raised at once, neither retried nor failed over, nothing cached
    stub_llm.cut_streams_after = 3
    shown: list[str] = []
    messages = _messages()
    client = make_client([up, _model("spare")], stub_llm, max_retries=2)
    sent = len(_chat_requests(stub_llm))
    with pytest.raises(StreamInterruptedError, match="stream broke after 17 characters"):
        client.complete(messages, purpose="synthesis", json_mode=False, on_text=shown.append)
    assert shown == ["the ", "second ", "model "] and len(_chat_requests(stub_llm)) == sent + 1
    assert _cached_rows(conn, prompt_key(messages, client.params(json_mode=False))) == []


def test_a_cached_only_client_serves_recorded_responses_under_their_models_name_and_never_calls_one(
    stub_llm: StubServer, make_client: Factory
) -> None:
    model, recorded, missing = _model(), _messages(), _messages()
    assert make_client([model], stub_llm).complete(recorded, purpose="extract").text == stub_llm.answer(
        recorded
    )
    calls = len(_chat_requests(stub_llm))
    replayed = make_client([model], stub_llm, cached_only=True)
    hit = replayed.complete(recorded, purpose="extract")
    assert (hit.text, hit.model, hit.cache_hit) == (stub_llm.answer(recorded), model, True)
    with pytest.raises(ReplayMissError, match=f"the run is replayed and {model} has no recorded response"):
        replayed.complete(missing, purpose="answer")
    assert len(_chat_requests(stub_llm)) == calls  # the miss reached no model
