"""Operations that never hang or quietly lose work (issue 11): the database going away mid-query, and
a dead embedding endpoint during queries.

The database "goes away" through a real TCP proxy in front of the test PostgreSQL
(:class:`tests.db_proxy.DbProxy`); models are real litellm calls against the local stub server.
"""

from __future__ import annotations

import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from pgrag_dag import names
from pgrag_dag.config import EmbeddingSettings
from pgrag_dag.embedding import HashingEmbedder, make_embedder
from pgrag_dag.errors import DatabaseError, ModelError, PgragError
from pgrag_dag.llm import import_litellm
from pgrag_dag.query import QueryParam, query_data
from pgrag_dag.store import db, schema
from tests.db_proxy import DbProxy
from tests.test_query_modes import GraphBuilder

EMBEDDING_MODEL = "openai/text-embedding-3-small"


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


# -- the query path: a dead embedding endpoint, the database going away (bullets 7, 8) -------------


class SlowEmbedder:
    """The hashing embedder's vectors under the litellm model's name, each call taking ``seconds``."""

    def __init__(self, seconds: float, before: Callable[[], None] | None = None) -> None:
        self.model, self.dim, self.seconds, self.before = EMBEDDING_MODEL, 384, seconds, before
        self._hashing = HashingEmbedder(384)

    def embed(self, texts: list[str]) -> list[np.ndarray]:
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
    return query_data("Who worked with Ada Lovelace?", QueryParam(space="alpha"), dsn=dsn, realm=realm,
                      embedder=embedder)


@pytest.mark.live
def test_a_dead_embedding_endpoint_fails_the_query_within_its_deadline_holding_no_read_connection(
    own_dsn: str, litellm_realm: str
) -> None:
    import_litellm()
    embedder = make_embedder(EmbeddingSettings(model=EMBEDDING_MODEL, dim=384, api_key="x", deadline_s=2.0,
                                               api_base=f"http://127.0.0.1:{_dead_port()}/v1"))
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
    row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
                       (application_name,)).fetchone()
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


def test_a_query_whose_database_goes_away_raises_database_error_and_recovers(pg_dsn: str, litellm_realm: str) -> None:
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
    conn.execute(sql.SQL("DROP TABLE {} CASCADE").format(schema.qualified(litellm_realm, "relations")))
    with pytest.raises(PgragError) as info:
        _ask(pg_dsn, litellm_realm, SlowEmbedder(0))
    assert isinstance(info.value, DatabaseError) and not isinstance(info.value, psycopg.Error)
    assert "UndefinedTable" in str(info.value) and "\n" not in str(info.value)
