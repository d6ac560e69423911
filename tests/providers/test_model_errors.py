"""Errors that retrying cannot fix fail fast (issue 13 item 10, paper §3.5): authentication and
permission errors, a missing API key, an unknown model and malformed requests are not retried — by the
chat client (with its failover list) or by the litellm embedder — and say in one line which model and
which setting or environment variable to fix; rate limits and timeouts keep their deadline-bounded
retries. Real litellm calls against the local stub server, and against a real provider name whose key
is absent (no request may leave the machine)."""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
import yaml

from pgrag_dag.config import EmbeddingSettings, LLMSettings
from pgrag_dag.errors import ModelAccessError, ModelError
from pgrag_dag.pipeline import stage_chunks, stage_raw_extractions
from pgrag_dag.providers.embedding import LiteLLMEmbedder
from pgrag_dag.providers.llm import ModelClient, import_litellm
from pgrag_dag.testing.stub_server import StubServer, StubStatus
from tests.fix_corpus import SmallCorpus

pytestmark = pytest.mark.live

Factory = Callable[..., ModelClient]
DEADLINE_S = 8.0  # what a retried error would cost; a refusal must take a small part of it


@pytest.fixture(scope="module", autouse=True)
def litellm_imported() -> None:
    """Import litellm (3–5 s) before any test times a call."""
    import_litellm()


@pytest.fixture
def make_client(pg_dsn: str, conn: psycopg.Connection) -> Iterator[Factory]:
    made: list[ModelClient] = []

    def make(models: list[str], **kw: Any) -> ModelClient:
        settings = LLMSettings(
            models=models,
            deadline_s=kw.pop("deadline_s", DEADLINE_S),
            max_retries=kw.pop("max_retries", 20),
            **kw,
        )
        made.append(ModelClient(pg_dsn, settings))
        return made[-1]

    yield make
    for c in made:
        c.close()


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Record (and refuse) every name look-up or TCP connection Python code attempts; PostgreSQL
    (libpq, C) is unaffected."""
    attempts: list[Any] = []

    def refuse(*args: Any, **kw: Any) -> Any:
        target = args[:2]
        host = target[1][0] if isinstance(target[0], socket.socket) else target[0]
        # a loopback look-up comes from another test's leftover client of its local stub server (seen once
        # in a full run), never from the provider: refused like the rest, not counted as a network attempt
        if host not in ("127.0.0.1", "::1", "localhost"):
            attempts.append(target)
        raise OSError("network disabled by the test")

    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    for var in ("OPENAI_API_KEY", "OPENAI_ADMIN_KEY", "OPENAI_BASE_URL", "OPENAI_API_BASE"):
        monkeypatch.delenv(var, raising=False)
    return attempts


def _model() -> str:
    return f"openai/stub-{uuid.uuid4().hex}"


def _messages() -> list[dict[str, str]]:
    return [{"role": "user", "content": f"Who designed the Analytical Engine? [{uuid.uuid4().hex}]"}]


def _chat(server: StubServer) -> list[dict[str, Any]]:
    return [r for r in server.requests if r["path"].endswith("/chat/completions")]


def _embeds(server: StubServer) -> list[dict[str, Any]]:
    return [r for r in server.requests if r["path"].endswith("/embeddings")]


@pytest.mark.parametrize(
    ("status", "names"),
    [
        (401, ["llm.api_key", "PGRAG_LLM__API_KEY", "credentials"]),
        (403, ["llm.api_key", "denied access"]),
        (404, ["llm.models", "llm.api_base", "unknown model"]),
    ],
)
def test_a_refused_configuration_is_not_retried_and_the_model_is_not_called_again(
    stub_llm: StubServer, make_client: Factory, status: int, names: list[str]
) -> None:
    stub_llm.refuse(status, f"refused with {status}", route="chat")
    model = _model()
    client = make_client([model], api_base=stub_llm.base_url, api_key="x")
    started = time.monotonic()
    with pytest.raises(ModelAccessError) as info:
        client.complete(_messages(), purpose="extract")
    assert time.monotonic() - started < 2.0 and len(_chat(stub_llm)) == 1
    message = str(info.value)
    assert "\n" not in message and model in message and "not retried" in message
    assert all(n in message for n in names), message
    assert info.value.models == (model,)
    with pytest.raises(ModelAccessError):  # the client remembers: no second request
        client.complete(_messages(), purpose="glean")
    assert len(_chat(stub_llm)) == 1


def test_a_malformed_request_fails_at_once_but_the_model_is_asked_again_next_time(
    stub_llm: StubServer, make_client: Factory
) -> None:
    stub_llm.refuse(400, "Invalid value for 'response_format'", route="chat")
    client = make_client([_model()], api_base=stub_llm.base_url, api_key="x")
    started = time.monotonic()
    with pytest.raises(ModelError) as info:
        client.complete(_messages(), purpose="extract")
    assert not isinstance(info.value, ModelAccessError)
    assert time.monotonic() - started < 2.0 and len(_chat(stub_llm)) == 1
    assert "refused the request as invalid" in str(info.value) and "response_format" in str(info.value)
    stub_llm.accept()
    stub_llm.answer = lambda messages: '{"ok": true}'
    assert client.complete(_messages(), purpose="extract").text == '{"ok": true}'


@pytest.mark.parametrize("status", [429, 500, 503])
def test_rate_limits_and_server_errors_keep_their_deadline_bounded_retries(
    stub_llm: StubServer, make_client: Factory, status: int
) -> None:
    stub_llm.refuse(status, "slow down", route="chat")
    client = make_client([_model()], api_base=stub_llm.base_url, api_key="x", deadline_s=2.0)
    started = time.monotonic()
    with pytest.raises(ModelError) as info:
        client.complete(_messages(), purpose="extract")
    assert not isinstance(info.value, ModelAccessError)
    assert 1.5 <= time.monotonic() - started < 6.0 and len(_chat(stub_llm)) >= 2


def test_failover_skips_a_refused_model_and_never_calls_it_again(
    stub_llm: StubServer, make_client: Factory
) -> None:
    first, second = _model(), _model()

    def answer(messages: list[dict[str, str]]) -> str:
        if stub_llm.requests[-1]["body"]["model"] == first.removeprefix("openai/"):
            raise StubStatus(401, "Incorrect API key provided")
        return '{"answer": "from the second"}'

    stub_llm.answer = answer
    client = make_client([first, second], api_base=stub_llm.base_url, api_key="x")
    started = time.monotonic()
    assert client.complete(_messages(), purpose="extract").model == second
    assert client.complete(_messages(), purpose="extract").model == second
    assert time.monotonic() - started < 3.0
    assert [r["body"]["model"] for r in _chat(stub_llm)] == [first.removeprefix("openai/")] + [
        second.removeprefix("openai/")
    ] * 2


def test_a_missing_api_key_of_a_real_provider_fails_at_once_naming_the_variable(
    make_client: Factory, no_network: list[Any]
) -> None:
    client = make_client(["replay", "openai/gpt-4o-mini"])  # no api_key, no api_base, no OPENAI_API_KEY
    started = time.monotonic()
    with pytest.raises(ModelAccessError) as info:
        client.complete(_messages(), purpose="extract")
    assert time.monotonic() - started < 2.0
    message = str(info.value)
    assert "\n" not in message and "openai/gpt-4o-mini" in message and "no API key" in message
    assert "OPENAI_API_KEY" in message and "llm.api_key" in message and "Internal" not in message
    assert no_network == []  # refused before any request


def test_the_extraction_stage_stops_at_once_on_a_missing_key(
    small_corpus: SmallCorpus, realm: str, no_network: list[Any]
) -> None:
    cfg = yaml.safe_load(small_corpus.config.read_text())
    cfg["llm"] = {"models": ["openai/gpt-4o-mini"], "deadline_s": DEADLINE_S, "max_retries": 20}
    small_corpus.config.write_text(yaml.safe_dump(cfg))
    engine = small_corpus.engine()
    stage_chunks(engine, realm, "main")
    started = time.monotonic()
    with pytest.raises(
        ModelAccessError, match=r"chat model openai/gpt-4o-mini: no API key — set OPENAI_API_KEY"
    ):
        stage_raw_extractions(engine, realm, "main")
    assert time.monotonic() - started < 3.0 and no_network == []


# -- the litellm embedder -----------------------------------------------------------------------


def _embedder(server: StubServer | None, **kw: Any) -> LiteLLMEmbedder:
    settings = EmbeddingSettings(
        model=kw.pop("model", "openai/stub-embed"),
        dim=384,
        api_base=server.base_url if server else None,
        api_key=kw.pop("api_key", "x" if server else None),
        **kw,
    )
    return LiteLLMEmbedder(settings, deadline_s=kw.get("deadline_s", DEADLINE_S))


@pytest.mark.parametrize(
    ("status", "names"),
    [
        (401, ["embedding.api_key", "PGRAG_EMBEDDING__API_KEY"]),
        (403, ["embedding.api_key"]),
        (404, ["embedding.model", "embedding.api_base"]),
    ],
)
def test_the_embedder_does_not_retry_a_refused_configuration(
    stub_llm: StubServer, status: int, names: list[str]
) -> None:
    stub_llm.refuse(status, f"refused with {status}", route="embeddings")
    started = time.monotonic()
    with pytest.raises(ModelAccessError) as info:
        _embedder(stub_llm).embed(["Charles Babbage"])
    assert time.monotonic() - started < 2.0 and len(_embeds(stub_llm)) == 1
    message = str(info.value)
    assert "embedding model openai/stub-embed" in message and all(n in message for n in names), message


def test_the_embedder_does_not_retry_a_malformed_request(stub_llm: StubServer) -> None:
    stub_llm.refuse(400, "This model's maximum context length is 8192 tokens", route="embeddings")
    started = time.monotonic()
    with pytest.raises(ModelError, match="refused the request as invalid") as info:
        _embedder(stub_llm).embed(["Charles Babbage"])
    assert not isinstance(info.value, ModelAccessError)
    assert time.monotonic() - started < 2.0 and len(_embeds(stub_llm)) == 1


def test_the_embedder_retries_a_rate_limit_until_its_deadline(stub_llm: StubServer) -> None:
    stub_llm.refuse(429, "Rate limit reached", route="embeddings")
    started = time.monotonic()
    with pytest.raises(ModelError, match="failed after .* attempt") as info:
        LiteLLMEmbedder(
            EmbeddingSettings(model="openai/stub-embed", dim=384, api_base=stub_llm.base_url, api_key="x"),
            deadline_s=2.0,
        ).embed(["Charles Babbage"])
    assert not isinstance(info.value, ModelAccessError)
    assert 1.5 <= time.monotonic() - started < 6.0 and len(_embeds(stub_llm)) >= 2


def test_the_embedder_fails_at_once_without_the_providers_key(no_network: list[Any]) -> None:
    started = time.monotonic()
    with pytest.raises(ModelAccessError) as info:
        _embedder(None, model="openai/text-embedding-3-small").embed(["Charles Babbage"])
    assert time.monotonic() - started < 2.0 and no_network == []
    message = str(info.value)
    assert message.startswith("embedding model openai/text-embedding-3-small: no API key")
    assert "OPENAI_API_KEY" in message and "embedding.api_key" in message
