"""``pgrag purge document | space`` (issue 28 item 2): a dry run by default (the report, exit 1, nothing
changed), ``--yes`` to act (exit 0), one ``error:`` line and exit 2 for a document the space does not hold."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pgrag_dag.cli import app
from pgrag_dag.engine import Engine
from pgrag_dag.operate.purge import UNREACHABLE
from pgrag_dag.store import db
from tests.operate.test_purge import CANARY, SECRET, corpus, data_rows  # noqa: F401 (the fixture)

runner = CliRunner()


@pytest.fixture
def cli_env(corpus: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Engine:  # noqa: F811
    monkeypatch.setenv("PGRAG_CONFIG", str(tmp_path / "pgrag.yaml"))
    return corpus


def test_purge_document_dry_run_then_yes(cli_env: Engine, realm: str, pg_dsn: str) -> None:
    conn = db.connect(pg_dsn, autocommit=True)
    before = data_rows(conn, realm)
    out = runner.invoke(app, ["purge", "document", f"{realm}.main", SECRET])
    assert out.exit_code == 1, out.output
    lines = out.stdout.splitlines()
    assert lines[0].startswith("would purge document (sha256 ") and lines[0].endswith(" s:")
    assert "  documents                                1" in lines
    assert any(line.startswith("  pgrag__control.llm_cache ") for line in lines)
    assert "not reached by a purge:" in lines and all(f"  - {u}" in lines for u in UNREACHABLE)
    assert lines[-1] == "nothing changed; add --yes to purge"
    assert SECRET not in out.stdout and CANARY not in out.stdout
    assert data_rows(conn, realm) == before

    out = runner.invoke(app, ["purge", "document", f"{realm}.main", SECRET, "--yes", "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert data["dry_run"] is False and data["removed"]["documents"] == 1
    out = runner.invoke(app, ["purge", "document", f"{realm}.main", SECRET, "--yes"])
    assert out.exit_code == 2 and out.stderr.startswith("error: ConfigurationError: ")
    assert "has no document" in out.stderr
    conn.close()


def test_purge_space_dry_run_then_yes(cli_env: Engine, realm: str) -> None:
    out = runner.invoke(app, ["purge", "space", f"{realm}.main"])
    assert out.exit_code == 1 and out.stdout.startswith(f"would purge space {realm}.main in ")
    out = runner.invoke(app, ["purge", "space", f"{realm}.main", "--yes"])
    assert out.exit_code == 0 and out.stdout.startswith(f"purged space {realm}.main in "), out.output
    assert out.stdout.splitlines()[-1].startswith("recorded in pgrag__control.purges")
    out = runner.invoke(app, ["purge", "space", f"{realm}.main", "--yes"])
    assert out.exit_code == 2 and "holds nothing to purge" in out.stderr


def test_the_purge_help_reads_as_a_users_text() -> None:
    for command in (["purge"], ["purge", "document"], ["purge", "space"]):
        out = runner.invoke(app, [*command, "--help"], terminal_width=200)
        assert out.exit_code == 0 and "``" not in out.output and ":func:" not in out.output, command
    top = runner.invoke(app, ["--help"]).output
    assert "│ purge      Erase a document (its text and everything derived from it," in top
