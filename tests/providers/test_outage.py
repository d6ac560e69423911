"""Operations that never hang or quietly lose work (issue 11): the database going away mid-extraction
or mid-query, and a dead embedding endpoint during queries.

The database "goes away" through a real TCP proxy in front of the test PostgreSQL
(:class:`tests.db_proxy.DbProxy`); models are real litellm calls against the local stub server.
"""

from __future__ import annotations

import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from pgrag_dag import names
from pgrag_dag.config import EmbeddingSettings, ExtractionSettings, LLMSettings
from pgrag_dag.errors import DatabaseError, ModelError, PgragError
from pgrag_dag.extract.model_extraction import extract_chunks
from pgrag_dag.graph.community_reports import write_reports
from pgrag_dag.providers.embedding import SYMMETRIC, HashingEmbedder, InputKind, make_embedder
from pgrag_dag.providers.llm import ModelClient, cache_key, import_litellm
from pgrag_dag.query import QueryParam, query_data
from pgrag_dag.store import cache, db, schema
from pgrag_dag.store.identifiers import qualified
from pgrag_dag.testing.stub_server import StubServer
from tests.db_proxy import DbProxy
from tests.query.test_query_modes import GraphBuilder

EMBEDDING_MODEL = "openai/text-embedding-3-small"
EMPTY = '{"entities": [], "triples": []}'


def _wait_for(condition: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


def _chat_requests(server: StubServer) -> list[dict[str, Any]]:
    return [r for r in list(server.requests) if r["path"].endswith("/chat/completions")]


def _asks_about(request: dict[str, Any], tag: str) -> bool:
    return any(tag in (m.get("content") or "") for m in request["body"]["messages"])


def _in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    """Run ``fn`` on a daemon thread; the box gets ``value`` or ``error`` and ``at`` (monotonic end)."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:
            box["error"] = exc
        box["at"] = time.monotonic()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, box


def _names_the_server(exc: BaseException, proxy: DbProxy) -> None:
    message = str(exc)
    assert "\n" not in message, message
    assert "127.0.0.1" in message and f"port={proxy.port}" in message, message


# -- the database dying mid-extraction (bullet 6) -----------------------------------------------


def _chunks(tag: str, n: int) -> pl.DataFrame:
    return pl.DataFrame(
        [
            {
                "chunk_id": i + 1,
                "doc_key": f"doc{i}",
                "chunk_index": 0,
                "title": f"Doc {i}",
                "source": f"doc{i}.txt",
                "text": f"Ada Lovelace wrote note {i}. [{tag}-{i}]",
            }
            for i in range(n)
        ]
    )


def _slow_answer(seconds: float) -> Callable[[list[dict[str, str]]], str]:
    def answer(messages: list[dict[str, str]]) -> str:
        time.sleep(seconds)
        return EMPTY

    return answer


@pytest.mark.live
def test_the_database_dying_mid_extraction_stops_the_run_in_seconds_and_keeps_every_response(
    pg_dsn: str, conn: psycopg.Connection, stub_llm: StubServer, tmp_path: Path
) -> None:
    import_litellm()  # its 3–5 s import must not count as the run's time
    tag, n, concurrency = uuid.uuid4().hex[:12], 12, 4
    stub_llm.answer = _slow_answer(1.0)  # every call is in flight for a second
    settings = LLMSettings(
        models=[f"openai/outage-{tag}"], api_base=stub_llm.base_url, api_key="x", deadline_s=30, max_retries=0
    )
    extraction = ExtractionSettings(gleaning_passes=0, concurrency=concurrency, batch_size=8)
    spool = tmp_path / "spool"
    chunks = _chunks(tag, n)
    with DbProxy(pg_dsn) as proxy:
        client = ModelClient(proxy.dsn, settings, spool_dir=spool)
        try:
            thread, box = _in_thread(lambda: extract_chunks(chunks, client, extraction))
            assert _wait_for(lambda: len(_chat_requests(stub_llm)) >= concurrency, 10)
            proxy.cut()
            cut_at, in_flight = time.monotonic(), len(_chat_requests(stub_llm))
            thread.join(20)
            assert not thread.is_alive(), "extraction still running 20 s after the database went away"
            assert isinstance(box.get("error"), DatabaseError), box
            assert box["at"] - cut_at < 6.0, f"the outage surfaced {box['at'] - cut_at:.1f} s after the cut"
            _names_the_server(box["error"], proxy)
            assert in_flight == concurrency
            # the calls in flight at the cut were answered; each answer was spooled, none was re-asked
            assert _wait_for(lambda: len(list(spool.glob("*.jsonl"))) == in_flight, 10)
            assert len(_chat_requests(stub_llm)) == in_flight, "model calls were made after the cut"
            assert len(client.unsaved) == in_flight and client.usage.model_calls == in_flight

            # the client stays down: any later call, from any thread, raises at once and calls no model
            started = time.monotonic()
            later, later_box = _in_thread(
                lambda: client.complete([{"role": "user", "content": tag}], purpose="x")
            )
            later.join(5)
            assert isinstance(later_box.get("error"), DatabaseError) and str(later_box["error"]) == str(
                box["error"]
            )
            assert later_box["at"] - started < 0.5 and len(_chat_requests(stub_llm)) == in_flight
        finally:
            client.close()

    spooled_tags = {
        f"{tag}-{i}"
        for i in range(n)
        if any(_asks_about(r, f"[{tag}-{i}]") for r in _chat_requests(stub_llm))
    }
    assert len(spooled_tags) == in_flight
    stub_llm.answer = lambda messages: EMPTY
    before = len(_chat_requests(stub_llm))
    rerun = ModelClient(pg_dsn, settings, spool_dir=spool)
    try:
        frame = extract_chunks(chunks, rerun, extraction)
    finally:
        rerun.close()
    asked = _chat_requests(stub_llm)[before:]
    assert not [r for r in asked if any(_asks_about(r, f"[{t}]") for t in spooled_tags)], (
        "a spooled prompt was re-asked"
    )
    assert len(asked) == n - in_flight and rerun.usage.cache_hits == in_flight
    assert frame.filter(pl.col("cache_hit"))["chunk_id"].len() == in_flight
    assert list(spool.glob("*.jsonl")) == []  # imported, then removed


@pytest.mark.live
def test_write_reports_stops_at_once_when_the_database_is_gone(
    pg_dsn: str, conn: psycopg.Connection, stub_llm: StubServer
) -> None:
    import_litellm()
    settings = LLMSettings(
        models=[f"openai/reports-{uuid.uuid4().hex}"],
        api_base=stub_llm.base_url,
        api_key="x",
        deadline_s=30,
        max_retries=0,
    )
    entities = pl.DataFrame(
        {
            "id": list(range(1, 13)),
            "name": [f"Person {i}" for i in range(1, 13)],
            "entity_type": ["Person"] * 12,
            "description": [""] * 12,
        }
    )
    clusters = pl.DataFrame({"cluster": [i // 2 for i in range(12)], "entity_id": list(range(1, 13))})
    relations = pl.DataFrame(
        {
            "source_id": list(range(1, 13, 2)),
            "target_id": list(range(2, 13, 2)),
            "predicate": ["knows"] * 6,
            "description": [""] * 6,
            "negated": [False] * 6,
            "valid_from": [None] * 6,
            "valid_to": [None] * 6,
        },
        schema_overrides={"valid_from": pl.String, "valid_to": pl.String},
    )
    with DbProxy(pg_dsn) as proxy:
        client = ModelClient(proxy.dsn, settings)
        try:
            client.complete(
                [{"role": "user", "content": uuid.uuid4().hex}], purpose="warm-up"
            )  # a pooled connection
            proxy.cut()
            calls = len(_chat_requests(stub_llm))
            started = time.monotonic()
            with pytest.raises(DatabaseError) as info:
                write_reports(clusters, entities, relations, client, concurrency=3)
            assert time.monotonic() - started < 5.0
            _names_the_server(info.value, proxy)
            assert len(_chat_requests(stub_llm)) == calls  # not one report was asked for
        finally:
            client.close()


def test_a_spooled_response_is_imported_once_and_never_overwrites_the_cache(
    conn: psycopg.Connection, tmp_path: Path
) -> None:
    pkey = uuid.uuid4().hex
    entry = {
        "key": cache_key("openai/spool", pkey),
        "prompt_key": pkey,
        "model": "openai/spool",
        "purpose": "extract",
        "request": {"messages": [], "params": {}},
        "response": "cached",
        "prompt_tokens": 1,
        "completion_tokens": 1,
    }
    cache.put(conn, entry)
    cache.spool({**entry, "response": "spooled"}, tmp_path)
    other = {**entry, "key": cache_key("openai/spool-2", pkey), "model": "openai/spool-2", "response": "new"}
    cache.spool(other, tmp_path)
    (tmp_path / "broken.jsonl").write_text("{not json\n", encoding="utf-8")
    assert cache.import_spool(conn, tmp_path) == 2
    assert cache.get_by_key(conn, entry["key"])["response"] == "cached"  # type: ignore[index]
    assert cache.get_by_key(conn, other["key"])["response"] == "new"  # type: ignore[index]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["broken.bad"]
    assert cache.import_spool(conn, tmp_path) == 0
    conn.execute("DELETE FROM pgrag__control.llm_cache WHERE prompt_key = %s", (pkey,))


# -- the query path: a dead embedding endpoint, the database going away (bullets 7, 8) -------------


class SlowEmbedder:
    """The hashing embedder's vectors under the litellm model's name, each call taking ``seconds``."""

    def __init__(self, seconds: float, before: Callable[[], None] | None = None) -> None:
        self.model, self.dim, self.seconds, self.before = EMBEDDING_MODEL, 384, seconds, before
        self.convention = SYMMETRIC
        self._hashing = HashingEmbedder(384)

    def embed(self, texts: list[str], kind: InputKind = "passage") -> list[np.ndarray]:
        if self.before is not None:
            self.before()
        time.sleep(self.seconds)
        return self._hashing.embed(texts)


@pytest.fixture
def litellm_realm(conn: psycopg.Connection) -> Iterator[str]:
    """A realm indexed with the litellm embedding model (width 384) holding one small graph in ``alpha``."""
    name = f"o{uuid.uuid4().hex[:10]}"
    schema.init_realm(conn, name, embedding_model=EMBEDDING_MODEL, dim=384)
    g = GraphBuilder(conn, name)
    g.rel("Ada Lovelace", "worked_with", "Charles Babbage")
    g.rel("Charles Babbage", "designed", "Analytical Engine")
    g.chunk("notes", "Ada Lovelace wrote notes on the Analytical Engine.", mentions=("Ada Lovelace",))
    yield name
    conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(names.schema_for(name))))
    conn.execute("DELETE FROM pgrag__control.realms WHERE realm = %s", (name,))


@pytest.fixture
def own_dsn(pg_dsn: str) -> Iterator[str]:
    """The test database under an application name of its own: a read pool no other test shares, whose
    connections pg_stat_activity can count."""
    dsn = make_conninfo(pg_dsn, application_name=f"pgrag-outage-{uuid.uuid4().hex[:8]}")
    yield dsn
    db.close_read_pools()


def _dead_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _ask(dsn: str, realm: str, embedder: Any) -> Any:
    return query_data(
        "Who worked with Ada Lovelace?", QueryParam(space="alpha"), dsn=dsn, realm=realm, embedder=embedder
    )


@pytest.mark.live
def test_a_dead_embedding_endpoint_fails_the_query_within_its_deadline_holding_no_read_connection(
    own_dsn: str, litellm_realm: str
) -> None:
    import_litellm()
    embedder = make_embedder(
        EmbeddingSettings(
            model=EMBEDDING_MODEL,
            dim=384,
            api_key="x",
            deadline_s=2.0,
            api_base=f"http://127.0.0.1:{_dead_port()}/v1",
        )
    )
    assert _ask(own_dsn, litellm_realm, SlowEmbedder(0)).entities  # the pool exists and the realm answers
    started = time.monotonic()
    thread, box = _in_thread(lambda: _ask(own_dsn, litellm_realm, embedder))
    held = []  # read connections out while the embedder is waited for (after the scope check's few ms)
    while thread.is_alive() and time.monotonic() - started < 10:
        if time.monotonic() - started > 0.3:
            held.append(db.read_pool_stats(own_dsn)["checked_out"])
        time.sleep(0.05)
    thread.join(1)
    assert not thread.is_alive(), "the query outlived its embedding deadline by far"
    assert isinstance(box.get("error"), ModelError), box
    assert EMBEDDING_MODEL in str(box["error"]) and "\n" not in str(box["error"])
    assert 1.9 < box["at"] - started < 4.0
    assert len(held) > 20 and max(held) == 0, "a read connection was held while the embedder was waited for"


def _backends(conn: psycopg.Connection, application_name: str) -> int:
    row = conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (application_name,)
    ).fetchone()
    return int(row[0])  # type: ignore[index]


def test_concurrent_queries_behind_a_slow_embedder_never_exceed_the_read_pool(
    own_dsn: str, litellm_realm: str, conn: psycopg.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PGRAG_READ_POOL_MAX", "2")
    app = own_dsn.split("application_name=")[1].split()[0]
    embedder = SlowEmbedder(3.0)
    started = time.monotonic()
    queries = [_in_thread(lambda: _ask(own_dsn, litellm_realm, embedder)) for _ in range(16)]
    seen = []
    while any(t.is_alive() for t, _ in queries) and time.monotonic() - started < 40:
        seen.append((_backends(conn, app), db.read_pool_stats(own_dsn)["open"]))
        time.sleep(0.05)
    for t, _ in queries:
        t.join(1)
    errors = [box["error"] for _, box in queries if "error" in box]
    assert errors == [], errors[:2]
    assert all(box["value"].entities for _, box in queries)
    assert max(b for b, _ in seen) <= 2 and max(o for _, o in seen) <= 2, max(seen)
    assert time.monotonic() - started < 10  # the embedding waits overlap; no query queued behind another's


def test_a_query_whose_database_goes_away_raises_database_error_and_recovers(
    pg_dsn: str, litellm_realm: str
) -> None:
    with DbProxy(pg_dsn) as proxy:
        dsn = make_conninfo(proxy.dsn, application_name=f"pgrag-outage-{uuid.uuid4().hex[:8]}")
        try:
            assert _ask(dsn, litellm_realm, SlowEmbedder(0)).entities
            with pytest.raises(DatabaseError) as info:  # gone between the scope check and the reads
                _ask(dsn, litellm_realm, SlowEmbedder(0, before=proxy.cut))
            _names_the_server(info.value, proxy)
            started = time.monotonic()
            with pytest.raises(DatabaseError) as again:  # still away: at once, not after the pool's wait
                _ask(dsn, litellm_realm, SlowEmbedder(0))
            assert time.monotonic() - started < 2.0
            _names_the_server(again.value, proxy)
            proxy.restore()
            assert _ask(dsn, litellm_realm, SlowEmbedder(0)).entities  # the same pool reconnects
            assert db.read_pool_stats(dsn)["open"] <= db.read_pool_settings()[0]
        finally:
            db.close_read_pools()


def test_a_statement_the_database_refuses_is_a_database_error(
    pg_dsn: str, litellm_realm: str, conn: psycopg.Connection
) -> None:
    conn.execute(sql.SQL("DROP TABLE {} CASCADE").format(qualified(litellm_realm, "relations")))
    with pytest.raises(PgragError) as info:
        _ask(pg_dsn, litellm_realm, SlowEmbedder(0))
    assert isinstance(info.value, DatabaseError) and not isinstance(info.value, psycopg.Error)
    assert "UndefinedTable" in str(info.value) and "\n" not in str(info.value)


def test_the_engine_spools_under_its_data_directory(pg_dsn: str, tmp_path: Path) -> None:
    from pgrag_dag.config import Settings
    from pgrag_dag.engine import Engine

    engine = Engine(Settings(config_dir=tmp_path, data_dir=Path("state")), pg_dsn)
    try:
        assert engine.client().spool_dir == (tmp_path / "state" / "spool").resolve()
    finally:
        engine.close()
