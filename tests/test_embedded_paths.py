"""The embedded PostgreSQL in a data directory whose path holds blanks and non-ASCII letters (a folder such as
``~/Mes Dóc ü 文档``): it starts, serves and stops — its unix socket lives in a blank-free directory."""

from __future__ import annotations

from pathlib import Path

from pgrag_dag.store import db


def test_a_data_directory_with_blanks_and_unicode_in_its_path_starts_and_stops(tmp_path: Path) -> None:
    data = tmp_path / "Mes Dóc ü 文档" / ".pgrag"
    dsn = db.embedded_dsn(data)
    try:
        host = dsn.split("host=", 1)[1]
        assert not any(c.isspace() for c in host)
        with db.connect(dsn) as conn:
            assert conn.execute("SELECT default_version FROM pg_available_extensions WHERE name = 'vector'").fetchone()
        assert db.embedded_dsn(data) == dsn  # a second caller finds the same server
    finally:
        assert db.stop_embedded(data) is True
    assert (data / "pgdata" / "PG_VERSION").is_file() and not (data / "pgdata" / "postmaster.pid").exists()
