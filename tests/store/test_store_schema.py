"""Schema initialisation: idempotent, concurrency-safe, fails closed on width (§3.5)."""

from __future__ import annotations

import hashlib
import re
import threading

import psycopg
import pytest
from psycopg import sql

from pgrag_dag.errors import InvalidNameError, SchemaMismatchError
from pgrag_dag.store import db, embedding_columns, schema
from pgrag_dag.store.identifiers import qualified


def test_init_realm_is_idempotent_and_registers_model(conn: psycopg.Connection, realm: str) -> None:
    schema.init_realm(conn, realm, embedding_model="hashing-sha256", dim=384)
    row = conn.execute(
        "SELECT embedding_model, embedding_dim FROM pgrag__control.realms WHERE realm=%s", (realm,)
    ).fetchone()
    assert row == ("hashing-sha256", 384)


def test_a_realm_from_an_older_version_is_upgraded_in_place(conn: psycopg.Connection, realm: str) -> None:
    """Columns, constraints and indexes added since a realm was created appear at its next init."""
    s = sql.Identifier(schema.schema_for(realm))
    for table in embedding_columns.EMBEDDED_TABLES:
        conn.execute(sql.SQL("ALTER TABLE {}.{} DROP COLUMN embed_hash").format(s, sql.Identifier(table)))
    for name in ("relations_source_in_space", "relations_target_in_space"):
        conn.execute(sql.SQL("ALTER TABLE {}.relations DROP CONSTRAINT {}").format(s, sql.Identifier(name)))
    conn.execute(sql.SQL("DROP INDEX {}.relations_walk_out").format(s))
    conn.execute(
        "UPDATE pgrag__control.realms SET schema_version = 0 WHERE realm = %s", (realm,)
    )  # as an older release left it
    assert schema.init_realm(conn, realm, embedding_model="hashing-sha256", dim=384) is True
    assert (
        schema.init_realm(conn, realm, embedding_model="hashing-sha256", dim=384) is False
    )  # and again: no DDL
    assert conn.execute(
        "SELECT schema_version FROM pgrag__control.realms WHERE realm = %s", (realm,)
    ).fetchone() == (schema.SCHEMA_VERSION,)
    cols = conn.execute(
        "SELECT table_name FROM information_schema.columns WHERE table_schema = %s "
        "AND column_name = 'embed_hash' ORDER BY 1",
        (schema.schema_for(realm),),
    ).fetchall()
    assert [c[0] for c in cols] == sorted(
        (*embedding_columns.EMBEDDED_TABLES, *embedding_columns.ARCHIVE_TABLES)
    )
    fks = conn.execute(
        "SELECT conname FROM pg_constraint WHERE conrelid = %s::regclass AND contype = 'f' "
        "AND conname LIKE '%%in_space' ORDER BY 1",
        (f"{schema.schema_for(realm)}.relations",),
    ).fetchall()
    assert [f[0] for f in fks] == ["relations_source_in_space", "relations_target_in_space"]
    assert conn.execute(
        "SELECT to_regclass(%s)", (f"{schema.schema_for(realm)}.relations_walk_out",)
    ).fetchone() != (None,)


def test_a_current_realm_takes_no_table_lock_beside_a_live_reader(
    conn: psycopg.Connection, pg_dsn: str, realm: str
) -> None:
    """Issue 11: a routine run's initialisation must not queue behind (or deadlock with) a query's
    ACCESS SHARE locks — it runs no DDL when the realm is at the current schema version."""
    with db.connect(pg_dsn) as reader:
        reader.execute(sql.SQL("SELECT count(*) FROM {}").format(qualified(realm, "relations"))).fetchone()
        reader.execute(sql.SQL("SELECT count(*) FROM {}").format(qualified(realm, "documents"))).fetchone()
        # the reader's transaction stays open, holding ACCESS SHARE on both tables
        conn.execute("SET lock_timeout = '1s'")
        try:
            assert schema.init_realm(conn, realm, embedding_model="hashing-sha256", dim=384) is False
        finally:
            conn.execute("RESET lock_timeout")
        held = reader.execute(
            "SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid() AND mode = 'AccessShareLock' "
            "AND relation = ANY(%s::regclass[])",
            ([f"{schema.schema_for(realm)}.relations", f"{schema.schema_for(realm)}.documents"],),
        ).fetchone()
        assert held == (2,)


def test_mixing_embedding_models_in_one_realm_raises(conn: psycopg.Connection, realm: str) -> None:
    with pytest.raises(SchemaMismatchError) as info:
        schema.init_realm(conn, realm, embedding_model="openai/text-embedding-3-small", dim=1536)
    s = f"pgrag_{realm}"
    # the widths differ: the message names the columns that hold the stored width (§3.5 checks them)
    assert str(info.value) == (
        f"realm {realm!r} is embedded with hashing-sha256 (384) but the configuration says "
        f"openai/text-embedding-3-small (1536); its columns {s}.entities.embedding, {s}.documents.embedding, "
        f"{s}.relations.embedding, {s}.communities.embedding hold vector(384): configure the realm's model "
        f"again, or switch every vector deliberately with `pgrag reembed {realm}`"
    )
    assert (info.value.table, info.value.expected, info.value.found) == (
        f"{s}.entities.embedding",
        "hashing-sha256 (384)",
        "openai/text-embedding-3-small (1536)",
    )
    with pytest.raises(SchemaMismatchError) as info:  # same width, another model: no column to blame
        schema.init_realm(conn, realm, embedding_model="openai/text-embedding-3-small", dim=384)
    assert "columns" not in str(info.value) and info.value.table == f"realm {realm!r} embedding"


def test_changing_the_query_passage_convention_of_a_realm_raises(
    conn: psycopg.Connection, realm: str
) -> None:
    """The registry records the mode convention beside the model (issue 12): same model, same width,
    other prefixes is a mismatch, as a width change is."""
    e5 = "prefix(query='query: ', passage='passage: ')"
    with pytest.raises(
        SchemaMismatchError, match=re.escape(f"the configuration says hashing-sha256 (384) {e5}:")
    ):
        schema.init_realm(conn, realm, embedding_model="hashing-sha256", dim=384, convention=e5)
    other = f"{realm}_e5"
    try:
        assert schema.init_realm(conn, other, embedding_model="openai/e5", dim=384, convention=e5) is True
        assert schema.init_realm(conn, other, embedding_model="openai/e5", dim=384, convention=e5) is False
        with pytest.raises(
            SchemaMismatchError,
            match=r"embedded with openai/e5 \(384\) prefix.*configuration says openai/e5 \(384\): configure",
        ):
            schema.init_realm(conn, other, embedding_model="openai/e5", dim=384)
    finally:
        conn.execute(
            sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema.schema_for(other)))
        )
        conn.execute("DELETE FROM pgrag__control.realms WHERE realm = %s", (other,))


def test_wrong_embedding_width_fails_closed(conn: psycopg.Connection, realm: str) -> None:
    s = schema.schema_for(realm)
    conn.execute(sql.SQL("ALTER TABLE {}.entities DROP COLUMN embedding CASCADE").format(sql.Identifier(s)))
    conn.execute(sql.SQL("ALTER TABLE {}.entities ADD COLUMN embedding vector(8)").format(sql.Identifier(s)))
    with pytest.raises(
        SchemaMismatchError, match=r"entities\.embedding: expected vector\(384\), found vector\(8\)"
    ):
        embedding_columns.verify_embedding_columns(conn, realm, 384)


def test_missing_embedding_column_fails_closed(conn: psycopg.Connection, realm: str) -> None:
    s = schema.schema_for(realm)
    conn.execute(sql.SQL("ALTER TABLE {}.relations DROP COLUMN embedding CASCADE").format(sql.Identifier(s)))
    with pytest.raises(SchemaMismatchError, match="found None"):
        schema.init_realm(conn, realm, embedding_model="hashing-sha256", dim=384)


def test_concurrent_initialisation_converges(pg_dsn: str) -> None:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            c = db.connect(pg_dsn, autocommit=True)
            schema.init_realm(c, "tconcurrent", embedding_model="hashing-sha256", dim=384)
            c.close()
        except BaseException as exc:  # collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    c = db.connect(pg_dsn, autocommit=True)
    n = c.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'pgrag_tconcurrent'").fetchone()
    assert (
        n is not None and n[0] == 30
    )  # twelve graph tables (community_sources, communities_expired among them), stage_pending, the four
    # of the belief history, graph_checked, query_events, the work queue and stage state of incremental
    # indexing, entity_keys and entity_keys_owed, graph_writes and graph_touched, the counts kept by delta
    # (graph_tallies, predicate_tallies, entity_degree), source_files, deferred_indexes
    c.execute("DROP SCHEMA pgrag_tconcurrent CASCADE")
    c.execute("DELETE FROM pgrag__control.realms WHERE realm = 'tconcurrent'")
    c.close()


@pytest.mark.parametrize(
    "name",
    ['x"; drop schema public; --', "a.b", "semi;colon", "Ünïcode", "x" * 64, "", "UPPER", "1abc", "*"],
)
def test_hostile_realm_names_never_reach_sql(conn: psycopg.Connection, name: str) -> None:
    with pytest.raises(InvalidNameError):
        schema.init_realm(conn, name, embedding_model="hashing-sha256", dim=384)
    assert conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname = 'public'").fetchone() == (1,)


LONG_KEY = "https://example.org/?q=" + "".join(
    hashlib.sha256(str(i).encode()).hexdigest() for i in range(200)
)
"""A 12,823-character URL that compresses poorly: past the btree limit even as a compressed index entry."""


def test_issue13_a_realm_of_schema_4_indexes_doc_keys_by_md5_after_its_upgrade(
    conn: psycopg.Connection, realm: str
) -> None:
    """Issue 13: a doc_key past the btree limit (~2,700 bytes) raised ProgramLimitExceeded on the old unique
    constraint; the upgrade replaces it by a unique index on md5(doc_key), in place, keeping the rows."""
    s = sql.Identifier(schema.schema_for(realm))
    conn.execute(sql.SQL("DROP INDEX {}.documents_space_key_chunk").format(s))  # as schema 4 left it
    conn.execute(
        sql.SQL(
            "ALTER TABLE {}.documents ADD CONSTRAINT documents_space_doc_key_chunk_index_key "
            "UNIQUE (space, doc_key, chunk_index)"
        ).format(s)
    )
    insert = sql.SQL(
        "INSERT INTO {}.documents (space, doc_key, chunk_index, title, source, doc_order, "
        "text, content_hash, "
        "doc_hash) VALUES ('s', %s, 0, 't', 's', 0, 'x', 'h', 'h')"
    ).format(s)
    conn.execute(insert, ("short.txt",))
    long_key = LONG_KEY
    with pytest.raises(psycopg.errors.ProgramLimitExceeded):
        conn.execute(insert, (long_key,))
    conn.execute("UPDATE pgrag__control.realms SET schema_version = 4 WHERE realm = %s", (realm,))
    assert schema.init_realm(conn, realm, embedding_model="hashing-sha256", dim=384) is True
    conn.execute(insert, (long_key,))
    with pytest.raises(psycopg.errors.UniqueViolation):  # still one row per (space, doc_key, chunk_index)
        conn.execute(insert, (long_key,))
    assert conn.execute(sql.SQL("SELECT count(*) FROM {}.documents").format(s)).fetchone() == (2,)
    cons = conn.execute(
        "SELECT conname FROM pg_constraint WHERE conrelid = %s::regclass AND contype = 'u'",
        (f"{schema.schema_for(realm)}.documents",),
    ).fetchall()
    assert cons == []
