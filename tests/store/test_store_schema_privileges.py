"""Schema initialisation on a database pgrag does not own (issue 13 item 6): the realm name is checked
before any DDL, and a privilege the role lacks is one line saying what to ask the DBA for."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from pgrag_dag.errors import DatabaseError, InvalidNameError
from pgrag_dag.store import db, schema


@contextlib.contextmanager
def _fresh_database(conn: psycopg.Connection) -> Iterator[str]:
    """A new, empty database (no pgvector, no pgrag schema) on the test server; dropped afterwards."""
    name = f"pgrag_fresh_{uuid.uuid4().hex[:8]}"
    conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield name
    finally:
        conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.fixture
def plain_role(conn: psycopg.Connection) -> Iterator[tuple[str, str]]:
    """A role that may log in and nothing more (no superuser, no CREATEDB): ``(name, password)``."""
    name, password = f"pgrag_plain_{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    conn.execute(
        sql.SQL("CREATE ROLE {} LOGIN NOSUPERUSER NOCREATEDB PASSWORD {}").format(
            sql.Identifier(name), sql.Literal(password)
        )
    )
    yield name, password
    conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


def _schemas(dsn: str) -> tuple[bool, list[str]]:
    with db.connect(dsn, autocommit=True, vector=False) as c:
        vector = c.execute("SELECT count(*) FROM pg_extension WHERE extname = 'vector'").fetchone() == (1,)
        names = [
            r[0] for r in c.execute("SELECT nspname FROM pg_namespace WHERE nspname LIKE 'pgrag%' ORDER BY 1")
        ]
    return vector, names


def test_init_realm_refuses_an_invalid_realm_before_any_ddl(pg_dsn: str, conn: psycopg.Connection) -> None:
    with _fresh_database(conn) as name:
        dsn = make_conninfo(pg_dsn, dbname=name)
        with db.connect(dsn, autocommit=True) as fresh:
            for bad in ["Bad-Realm", 'x"; drop schema public; --', "a.b"]:
                with pytest.raises(InvalidNameError):
                    schema.init_realm(fresh, bad, embedding_model="hashing-sha256", dim=384)
        assert _schemas(dsn) == (False, [])  # neither the extension nor the control schema was created


def test_a_missing_privilege_is_one_line_saying_what_to_ask_the_dba_for(
    pg_dsn: str, conn: psycopg.Connection, plain_role: tuple[str, str]
) -> None:
    role, password = plain_role
    with _fresh_database(conn) as name:
        as_role = make_conninfo(pg_dsn, dbname=name, user=role, password=password)
        with db.connect(make_conninfo(pg_dsn, dbname=name), autocommit=True) as admin:
            admin.execute(
                sql.SQL("GRANT CREATE ON DATABASE {} TO {}").format(
                    sql.Identifier(name), sql.Identifier(role)
                )
            )
            with db.connect(as_role, autocommit=True) as c:  # pgvector is not a trusted extension
                with pytest.raises(DatabaseError) as no_extension:
                    schema.init_realm(c, "acme", embedding_model="hashing-sha256", dim=384)
            message = str(no_extension.value)
            assert "\n" not in message and role in message and name in message
            assert "superuser" in message and "CREATE EXTENSION vector" in message
            assert _schemas(as_role) == (False, [])

            admin.execute(
                "CREATE EXTENSION vector"
            )  # what the DBA was asked for; CREATE on the database taken away
            admin.execute(
                sql.SQL("REVOKE CREATE ON DATABASE {} FROM {}").format(
                    sql.Identifier(name), sql.Identifier(role)
                )
            )
            with db.connect(as_role, autocommit=True) as c:
                with pytest.raises(DatabaseError) as no_create:
                    schema.init_realm(c, "acme", embedding_model="hashing-sha256", dim=384)
            message = str(no_create.value)
            assert "\n" not in message and f'GRANT CREATE ON DATABASE "{name}" TO "{role}"' in message

            admin.execute(
                sql.SQL("GRANT CREATE ON DATABASE {} TO {}").format(
                    sql.Identifier(name), sql.Identifier(role)
                )
            )
            with db.connect(
                as_role, autocommit=True
            ) as c:  # with both, the role initialises the realm itself
                assert schema.init_realm(c, "acme", embedding_model="hashing-sha256", dim=384) is True
            assert _schemas(as_role) == (True, ["pgrag__control", "pgrag_acme"])
            admin.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
