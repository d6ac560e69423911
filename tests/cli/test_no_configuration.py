"""No command starts or leaves a database it was not asked to (issue 31 item 5): without a configuration a
command fails before it touches the disk, and the embedded server a command started stays up on purpose,
shown by ``pgrag status`` until ``pgrag stop-db``."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pgrag_dag.cli import app
from pgrag_dag.store import db, locks

PGRAG = str(Path(sys.executable).with_name("pgrag"))
COMMANDS = [
    ["query", "Who worked with Charles Babbage?"],
    ["status"],
    ["index", "notes.notes"],
    ["list", "entities", "notes.notes"],
    ["export", "notes.notes"],
    ["cypher", "MATCH (n) RETURN n LIMIT 1"],
    ["ui"],
    ["demo"],
    ["stop-db"],
    ["changes", "notes.notes"],
]


def _gone(data_dir: Path, wait_s: float = 20.0) -> bool:
    """Whether no server runs under ``data_dir`` within ``wait_s`` (a stop that had to kill waits for it)."""
    deadline = time.monotonic() + wait_s
    while db.embedded_pid(data_dir) is not None and time.monotonic() < deadline:
        time.sleep(0.2)
    return db.embedded_pid(data_dir) is None


@pytest.fixture
def bare(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder with a document but no pgrag.yaml, as the working directory, with no PGRAG_ settings."""
    (tmp_path / "notes.md").write_text("Ada Lovelace worked with Charles Babbage.\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    for var in ("PGRAG_CONFIG", "PGRAG_DATABASE_URL", "PGRAG_REALMS", "PGRAG_DATA_DIR"):
        monkeypatch.delenv(var, raising=False)
    return tmp_path


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: a[0] if a[0] != "list" else "list")
def test_a_command_without_a_configuration_fails_before_touching_the_disk(
    bare: Path, args: list[str]
) -> None:
    out = CliRunner().invoke(app, args)
    assert out.exit_code == 2, out.output
    assert out.output.strip().splitlines() == [
        f"error: ConfigurationError: no configuration: PGRAG_CONFIG is not set and {bare} has no pgrag.yaml; "
        "write one with `pgrag init DIR` or export PGRAG_CONFIG=path/to/pgrag.yaml"
    ]
    assert sorted(p.name for p in bare.iterdir()) == ["notes.md"]  # no .pgrag, no pgdata


def test_init_still_writes_a_configuration_there(bare: Path) -> None:
    out = CliRunner().invoke(app, ["init", "."])
    assert out.exit_code == 0, out.output
    assert (bare / "pgrag.yaml").is_file() and not (bare / ".pgrag").exists()


def test_the_embedded_server_a_command_started_stays_up_and_status_says_so(bare: Path) -> None:
    runner = CliRunner()
    assert runner.invoke(app, ["init", "."]).exit_code == 0
    data_dir = bare / ".pgrag"
    db.embedded_dsn(data_dir)  # a first command made the database and left its server running
    try:
        pid = db.embedded_pid(data_dir)
        assert pid is not None
        out = runner.invoke(app, ["status"])
        assert out.exit_code == 0, out.output
        assert out.output.splitlines()[1] == (
            f"  embedded PostgreSQL: running, pid {pid}; it stays up for the next command and the Dagster UI "
            "— `pgrag stop-db` stops it"
        )
        # a run indexing: refused, naming it, and the server stays up (a trial's stop-db failed such a run)
        with locks.stage_lock(db.embedded_dsn(data_dir), "notes", "main", "embeddings", wait_s=0):
            refused = runner.invoke(app, ["stop-db"])
            assert refused.exit_code == 1 and "not stopped: a run is indexing (pgrag embeddings pid " in (
                refused.output
            ), refused.output
            assert db.embedded_pid(data_dir) == pid
        stopped = runner.invoke(app, ["stop-db"])
        assert stopped.output.strip() == "embedded PostgreSQL stopped" and _gone(data_dir)
        # status reads, so it starts the server, and says so; in a process of its own, as a user runs it (this
        # process keeps a handle on the server it stopped)
        again = subprocess.run(
            [PGRAG, "status", "--json"],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        server = json.loads(again.stdout)["embedded_server"]
        assert (
            server == {"pid": db.embedded_pid(data_dir), "was_running": False} and server["pid"] is not None
        )
    finally:  # by a process of its own too: this one's handle is on the server it stopped
        subprocess.run([PGRAG, "stop-db"], capture_output=True, timeout=120, check=False)
    assert _gone(data_dir)
