"""An external PostgreSQL over TCP (issue 18 item 4): the eight stages materialised through Dagster, with
Dagster's instance storage on the same server, reached through ``PGRAG_DATABASE_URL`` only — a TCP-only,
password-only server (tests/fix_tcp_pg.py) as a NON-superuser role without CREATEDB that owns one database
in which the DBA pre-created ``vector``. The graph equals the one built on the embedded server."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import psycopg
import pytest
import yaml
from psycopg import sql

from pgrag_dag.assets.runner import dagster_home, materialize_partition
from pgrag_dag.config import load_settings
from pgrag_dag.errors import PgragError
from tests.fix_corpus import SmallCorpus
from tests.fix_tcp_pg import TcpPostgres
from tests.graph_snapshot import graph_snapshot

pytestmark = [pytest.mark.dagster, pytest.mark.slow]


def test_the_external_server_is_tcp_only_password_only_with_a_plain_role(tcp_pg: TcpPostgres) -> None:
    with tcp_pg.admin() as admin:
        assert admin.execute("SHOW unix_socket_directories").fetchone() == ("",)
        assert admin.execute("SELECT DISTINCT auth_method FROM pg_hba_file_rules").fetchall() == [
            ("scram-sha-256",)
        ]
        assert admin.execute(
            "SELECT rolsuper, rolcreatedb, rolcreaterole FROM pg_roles WHERE rolname = %s", (tcp_pg.role,)
        ).fetchone() == (False, False, False)
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(tcp_pg.url(password="not-the-password"), connect_timeout=5).close()
    with psycopg.connect(tcp_pg.url(), autocommit=True) as conn:
        assert conn.execute(
            "SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = current_database()"
        ).fetchone() == (tcp_pg.role,)
        assert conn.execute("SELECT extname FROM pg_extension WHERE extname = 'vector'").fetchone() == (
            "vector",
        )
        assert conn.execute("SELECT inet_client_addr()::text").fetchone() == ("127.0.0.1/32",)


def test_eight_stages_through_dagster_on_an_external_server_by_its_dsn_only(
    small_corpus: SmallCorpus,
    realm: str,
    pg_dsn: str,
    tcp_pg: TcpPostgres,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))  # restored afterwards (the runner sets it)
    monkeypatch.setenv("PGRAG_DAGSTER_STORAGE_URL", "")
    partition = f"{realm}.main"

    # the baseline: the embedded server (the fixture's YAML names it), SQLite instance storage
    calls = len(small_corpus.chat_requests())
    embedded = small_corpus.settings(
        data_dir=str(tmp_path / "embedded"), dagster={"instance_storage": "sqlite"}
    )
    base = materialize_partition(embedded, partition, config_path=str(small_corpus.config))
    assert all(base["_checks"].values()) and base["relations"]["relations"] > 0
    baseline_calls = len(small_corpus.chat_requests()) - calls
    expected = graph_snapshot(pg_dsn, realm, "main")
    assert expected["counts"]["communities"] > 0 and expected["embedded"]["relations"] > 0

    # the same configuration file without a database: PGRAG_DATABASE_URL is the only pointer, Dagster's
    # storage on that server too, and a data directory of its own (no embedded server may start there)
    cfg = yaml.safe_load(small_corpus.config.read_text(encoding="utf-8"))
    del cfg["database_url"]
    storage = f"dagster_{realm}"
    cfg["data_dir"] = str(tmp_path / "external")
    cfg["dagster"] = {"instance_storage": "postgres", "storage_database": storage}
    config = tmp_path / "external.yaml"
    config.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    monkeypatch.setenv("PGRAG_DATABASE_URL", tcp_pg.url())
    settings = load_settings(config)
    assert settings.database_url == tcp_pg.url()

    # the role may not CREATE DATABASE: a missing storage database is one line saying what to ask for ...
    with pytest.raises(PgragError) as refused:
        dagster_home(settings)
    message = str(refused.value)
    assert "\n" not in message and "permission denied to create database" in message
    assert f'CREATE DATABASE "{storage}" OWNER "{tcp_pg.role}"' in message and tcp_pg.password not in message
    # ... which the DBA does once; the code then uses it as it is (no CREATE DATABASE attempted)
    with tcp_pg.admin() as admin:
        admin.execute(
            sql.SQL("CREATE DATABASE {} OWNER {}").format(
                sql.Identifier(storage), sql.Identifier(tcp_pg.role)
            )
        )

    calls = len(small_corpus.chat_requests())
    metas = materialize_partition(settings, partition, config_path=str(config))
    assert metas["_checks"] and all(metas["_checks"].values()), metas["_checks"]
    assert {k for k in metas if not k.startswith("_")} == {
        "chunks",
        "raw_extractions",
        "gated_triples",
        "resolved_entities",
        "relations",
        "embeddings",
        "communities",
        "community_hierarchy",
    }
    # the model cache lives in the DSN's database: the external server asked the model what the embedded one
    # did
    assert len(small_corpus.chat_requests()) - calls == baseline_calls

    assert graph_snapshot(tcp_pg.url(), realm, "main") == expected
    with dg.DagsterInstance.get() as instance:
        assert "postgres" in type(instance.run_storage).__module__
        run = instance.get_run_by_id(metas["_run"]["run_id"])
        assert run is not None and run.status == dg.DagsterRunStatus.SUCCESS
    with psycopg.connect(
        tcp_pg.url(database=storage), autocommit=True
    ) as conn:  # Dagster's rows, as the role
        assert conn.execute(
            "SELECT status FROM runs WHERE run_id = %s", (metas["_run"]["run_id"],)
        ).fetchone() == ("SUCCESS",)
    with tcp_pg.admin(tcp_pg.database) as admin:  # the role owns what pgrag created
        owners = admin.execute(
            "SELECT DISTINCT pg_get_userbyid(nspowner) FROM pg_namespace WHERE nspname LIKE 'pgrag%'"
        ).fetchall()
        assert owners == [(tcp_pg.role,)]
    assert not (tmp_path / "external" / "pgdata").exists()  # no embedded server was started for it
