"""The Makefile's demo targets work on the demo's configuration whatever the shell exports (issue 31 item 6).

Each target runs for real, with a venv whose ``pgrag`` and ``python`` are scripts that print the
configuration they were handed (``PGRAG_CONFIG``) and their arguments, so the recipe's environment is what is
checked, not its text."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DEMO_CONFIG = str(ROOT / "pgrag.yaml")

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


@pytest.fixture
def venv(tmp_path: Path) -> Path:
    """A venv directory the Makefile takes as installed, whose tools echo ``PGRAG_CONFIG`` and their args."""
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    for tool in ("pgrag", "python"):
        script = bin_dir / tool
        script.write_text(f'#!/bin/sh\necho "{tool} config=${{PGRAG_CONFIG-unset}} args=$*"\n')
        script.chmod(0o755)
    stamp = tmp_path / "venv" / ".installed"
    stamp.touch()
    later = (ROOT / "pyproject.toml").stat().st_mtime + 60  # newer than pyproject.toml: no reinstall
    os.utime(stamp, (later, later))
    return tmp_path / "venv"


def _make(venv: Path, *args: str, environ: dict[str, str] | None = None) -> str:
    env = {**os.environ, **(environ or {})}
    env.pop("MAKEFLAGS", None)
    done = subprocess.run(
        ["make", "-s", "--no-print-directory", "-C", str(ROOT), f"VENV={venv}", *args],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=60,
    )
    return done.stdout


@pytest.mark.parametrize("target", ["demo", "ui", "stop"])
def test_demo_targets_use_the_demo_config_whatever_pgrag_config_says(venv: Path, target: str) -> None:
    exported = _make(venv, target, environ={"PGRAG_CONFIG": "/elsewhere/pgrag.yaml"})
    on_command_line = _make(venv, target, "PGRAG_CONFIG=/elsewhere/pgrag.yaml")
    expected = {"demo": "args=demo", "ui": "args=ui --port 3000", "stop": "args=stop-db"}[target]
    assert exported.splitlines() == [f"pgrag config={DEMO_CONFIG} {expected}"]
    assert on_command_line == exported


def test_make_stop_without_an_install_installs_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "no-venv"
    assert _make(missing, "stop").splitlines() == ["not installed: no database to stop"]
    assert not missing.exists()


def test_make_ui_takes_a_port(venv: Path) -> None:
    assert _make(venv, "ui", "PORT=3999").splitlines() == [f"pgrag config={DEMO_CONFIG} args=ui --port 3999"]


@pytest.mark.parametrize("target", ["test", "test-slow", "test-all"])
def test_the_test_targets_run_without_the_users_pgrag_config(venv: Path, target: str) -> None:
    out = _make(venv, target, environ={"PGRAG_CONFIG": "/elsewhere/pgrag.yaml"})
    assert out.splitlines()[0].startswith("python config=unset args=-m pytest -q")
