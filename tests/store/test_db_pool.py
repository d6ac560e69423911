"""The query path's read pool (pgrag_dag/store/db.py): every connection it hands out starts clean."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import IsolationLevel
from psycopg.conninfo import make_conninfo
from psycopg.rows import dict_row

from pgrag_dag.store import db

SETTINGS = (
    "enable_indexscan",
    "enable_seqscan",
    "random_page_cost",
    "work_mem",
    "search_path",
    "hnsw.ef_search",
    "hnsw.iterative_scan",
    "statement_timeout",
    "lock_timeout",
    "default_transaction_read_only",
    "transaction_isolation",
)


def _session(conn: psycopg.Connection) -> dict[str, str]:
    """The settings a reader's queries run under (pgvector loaded first, so its hnsw.* settings exist)."""
    conn.execute("SELECT '[1]'::public.vector")
    row = conn.execute(
        "SELECT current_user = session_user, "
        "(SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()), "
        + ", ".join(f"current_setting('{s}')" for s in SETTINGS)
    ).fetchone()
    assert row is not None
    return {"own role": str(row[0]), "advisory locks": str(row[1]), **dict(zip(SETTINGS, map(str, row[2:])))}


@pytest.fixture
def own_dsn(pg_dsn: str, conn: psycopg.Connection) -> Iterator[str]:
    """The test database under an application name of its own: a read pool no other test shares."""
    yield make_conninfo(pg_dsn, application_name=f"pgrag-pool-{uuid.uuid4().hex[:8]}")
    db.close_read_pools()


def _idle(dsn: str, n: int) -> None:
    deadline = time.monotonic() + 5
    while db.read_pool_stats(dsn)["idle"] < n:  # the pool resets a returned connection in its worker
        assert time.monotonic() < deadline, "the returned connection never came back to the pool"
        time.sleep(0.01)


def test_a_pooled_reader_has_the_engines_session_whatever_the_last_borrower_set(
    own_dsn: str, pg_dsn: str
) -> None:
    """Issue 13 item 12: planner switches, ef_search, search_path, timeouts, read-only, a role, a lock and
    the client-side state a borrower changed are all undone before the next borrower gets the connection."""
    fresh = db.connect(pg_dsn, autocommit=True)
    server = _session(fresh)  # the server's defaults, as a new session sees them
    fresh.close()
    engine = {
        **server,
        "hnsw.iterative_scan": "relaxed_order",
        "statement_timeout": "30s",
        "default_transaction_read_only": "on",
        "transaction_isolation": "read committed",
    }

    with db.read_connection(own_dsn) as conn:
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]  # type: ignore[index]
        assert _session(conn) == engine
        conn.execute(
            "SET enable_indexscan = off; SET enable_seqscan = off; SET random_page_cost = 99; "
            "SET work_mem = '64kB'; SET search_path = pg_catalog; SET hnsw.ef_search = 1; "
            "SET hnsw.iterative_scan = off; SET statement_timeout = 0; SET lock_timeout = '1ms'; "
            "SET default_transaction_read_only = off; SET SESSION CHARACTERISTICS AS TRANSACTION "
            "ISOLATION LEVEL SERIALIZABLE; SELECT pg_advisory_lock(4242); SET ROLE pg_monitor"
        )
        conn.autocommit, conn.read_only, conn.row_factory = False, False, dict_row  # type: ignore[assignment]
        conn.isolation_level = IsolationLevel.SERIALIZABLE
        conn.execute("SELECT 1")  # and left inside a transaction
    _idle(own_dsn, 1)

    with db.read_connection(own_dsn) as conn:
        assert conn.execute("SELECT pg_backend_pid()").fetchone() == (pid,)  # the same session, tuples again
        assert _session(conn) == engine
        assert (conn.autocommit, conn.read_only, conn.isolation_level) == (
            True,
            True,
            IsolationLevel.REPEATABLE_READ,
        )
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            conn.execute(
                "CREATE TEMP TABLE written_by_a_reader (x int)"
            )  # autocommit statements are read-only too
