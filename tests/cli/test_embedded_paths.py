"""The embedded PostgreSQL in a data directory whose path holds blanks and non-ASCII letters (a folder such as
``~/Mes Dóc ü 文档``): it starts, serves and stops — its unix socket lives in a blank-free directory."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from pgrag_dag.cli import app
from pgrag_dag.errors import DatabaseError
from pgrag_dag.store import db


def test_a_data_directory_with_blanks_and_unicode_in_its_path_starts_and_stops(tmp_path: Path) -> None:
    data = tmp_path / "Mes Dóc ü 文档" / ".pgrag"
    dsn = db.embedded_dsn(data)
    try:
        host = dsn.split("host=", 1)[1]
        assert not any(c.isspace() for c in host)
        with db.connect(dsn) as conn:
            assert conn.execute(
                "SELECT default_version FROM pg_available_extensions WHERE name = 'vector'"
            ).fetchone()
        assert db.embedded_dsn(data) == dsn  # a second caller finds the same server
    finally:
        assert db.stop_embedded(data) is True
    assert (data / "pgdata" / "PG_VERSION").is_file() and not (data / "pgdata" / "postmaster.pid").exists()


def test_a_data_directory_that_cannot_be_created_is_one_line_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "notes.md").write_text("Ada Lovelace.\n", encoding="utf-8")
    (tmp_path / "pgrag.yaml").write_text(
        "data_dir: notes.md\nrealms:\n  dd:\n    spaces:\n      s:\n"
        "        sources: [{path: ., glob: '*.md'}]\n",
        encoding="utf-8",
    )
    monkeypatch.setenv("PGRAG_CONFIG", str(tmp_path / "pgrag.yaml"))
    monkeypatch.delenv("PGRAG_DATABASE_URL", raising=False)
    with pytest.raises(
        DatabaseError, match=r"could not create the embedded PostgreSQL's directory .*notes\.md/pgdata"
    ):
        db.embedded_dsn(tmp_path / "notes.md")
    out = CliRunner().invoke(app, ["index", "dd.s"])  # a file where the data directory should be
    assert out.exit_code == 2 and out.output.strip().splitlines() == [
        "error: DatabaseError: could not create the embedded PostgreSQL's directory "
        f"{tmp_path}/notes.md/pgdata "
        f"(data_dir {tmp_path}/notes.md): Not a directory"
    ], out.output
