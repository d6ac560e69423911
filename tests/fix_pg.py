"""PostgreSQL fixture plugin: ``PGRAG_TEST_DATABASE_URL`` if set, else the embedded server.

One embedded server per test session (under a temporary directory); each test that asks for
``realm`` gets a fresh realm schema, dropped afterwards.
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from pgrag_dag.store import db, schema

_counter = itertools.count()

# Tests embed with the deterministic hashing embedder (fast, identical in every process) unless a test is
# about the local model: those remove this variable (monkeypatch.delenv) or configure the model explicitly.
# Subprocesses (the CLI, Dagster runs) inherit it. The environment overrides pgrag.yaml, not keyword
# arguments.
os.environ["PGRAG_EMBEDDING__MODEL"] = "hashing-sha256"


@pytest.fixture(scope="session")
def pg_dsn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """DSN of a real PostgreSQL with pgvector; an embedded server is stopped at the end of the session."""
    url = os.environ.get("PGRAG_TEST_DATABASE_URL")
    if url:
        yield url
        return
    # Not under pytest's base temp: a later pytest session of the same user resets that tree to mode 0700,
    # which locks the server (running as its own OS user) out of its own files mid-session.
    home = Path(tempfile.mkdtemp(prefix="pgrag-test-pg-"))
    home.chmod(0o755)
    server = db.embedded_server(home)
    try:
        yield str(server.get_uri())
    finally:
        server.stop()
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture
def conn(pg_dsn: str) -> Iterator[psycopg.Connection]:
    """An autocommit connection with pgvector registered and the control schema created."""
    c = db.connect(pg_dsn, autocommit=True)
    schema.init_control(c)
    yield c
    c.close()


@pytest.fixture
def realm(conn: psycopg.Connection) -> Iterator[str]:
    """A fresh realm (``t<pid>_<n>``) initialised with the hashing embedder at width 384; dropped after."""
    name = f"t{os.getpid()}_{next(_counter)}"
    schema.init_realm(conn, name, embedding_model="hashing-sha256", dim=384)
    yield name
    drop_realm(conn, name)


def drop_realm(conn: psycopg.Connection, name: str) -> None:
    """Drop realm ``name``'s schema and its control row, if there (``conn`` in autocommit)."""
    conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema.schema_for(name))))
    conn.execute("DELETE FROM pgrag__control.realms WHERE realm = %s", (name,))
