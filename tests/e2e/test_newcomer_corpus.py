"""The newcomer's first day on a real folder (issue 31, "Done when"): three of the Microsoft earnings-call
transcripts of ``../shared/corpora`` copied into a folder, ``pgrag init`` on it as written (the offline
``nlp`` extractor), ``pgrag index`` green with its progress (totals, the embeddings' rate), ``pgrag status``,
the listing most mentioned first and the stoplist hint of a refused deletion, then ``pgrag ui`` — the real
``dg dev``, webserver and daemon — whose source sensor launches a run for the space the CLI indexed: that
run, and any run automation launches after it, succeeds; last ``pgrag view``, whose overview is kept as
``test-artifacts/view/newcomer-overview.png`` (headless Chromium, when installed). Every step through the
command line as a user types it.

Runtime: three transcripts (~90 chunks), the hashing embedder (``tests/fix_pg.py``), ~2-3 minutes with the
UI's start.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pgrag_dag.cli import app
from tests.fix_browser import CHROMIUM, chromium_dom
from tests.fix_corpus import SHARED_CORPORA
from tests.fix_daemon import pgrag_ui, storage_db  # noqa: F401  (storage_db: a fixture)

pytestmark = [pytest.mark.dagster, pytest.mark.slow]

TRANSCRIPTS = SHARED_CORPORA / "msft_earnings_calls_graphrag" / "transcripts"
CHOSEN = ("TranscriptFY15Q1.txt", "TranscriptFY18Q4.txt", "TranscriptFY20Q1.txt")
"""The three shortest transcripts (~45 kB each), three years apart."""
SENSOR_INTERVAL_S = 5
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "view"


@pytest.mark.skipif(not TRANSCRIPTS.is_dir(), reason="needs ../shared/corpora (PGRAG_SHARED_DIR)")
def test_a_newcomer_indexes_earnings_calls_and_the_sensor_launched_dagster_run_is_green(
    tmp_path: Path, pg_dsn: str, realm: str, storage_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "earnings-calls"
    folder.mkdir()
    for name in CHOSEN:
        shutil.copy(TRANSCRIPTS / name, folder / name)
    runner = CliRunner()
    monkeypatch.setenv("PGRAG_DATABASE_URL", pg_dsn)  # the suite's server instead of one in .pgrag
    monkeypatch.delenv("PGRAG_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    key = f"{realm}.calls"

    # 1. init, as the README says: the offline nlp extractor, nothing to edit
    out = runner.invoke(app, ["init", "earnings-calls", "--realm", realm, "--space", "calls"])
    assert out.exit_code == 0, out.output
    config = folder / "pgrag.yaml"
    assert "extractor: nlp" in config.read_text(encoding="utf-8")
    monkeypatch.setenv("PGRAG_CONFIG", str(config))

    # 2. index: every stage done with totals, the summary all green, no warning to puzzle over
    out = runner.invoke(app, ["index", key])
    assert out.exit_code == 0, out.output
    assert "  documents        3  (3 added, 0 replaced, 0 removed, 0 unchanged)" in out.stdout
    assert "0 duplicate edges, 0 fragmented vertices, 0 pronoun entities" in out.stdout
    assert "(all green)" in out.stdout and "check relations:graph_quality failed" not in out.output
    assert "relations:graph_quality" not in out.output  # nlp's orphan share is within its ceiling
    assert f"{key} raw_extractions: done in" in out.output  # the progress, one line per stage off a terminal
    # each stage ends on its total in its own unit, the embeddings with their rate
    assert re.search(rf"{re.escape(key)} chunks: done in [\d.]+ s, \d+ chunks in 3 documents", out.output)
    assert re.search(
        rf"{re.escape(key)} embeddings: done in [\d.]+ s, [\d,]+ texts \([\d,.]+ texts/s\)", out.output
    )
    indexed = json.loads(runner.invoke(app, ["status", "--json"]).stdout)
    space = next(
        s for r in indexed["realms"] if r["realm"] == realm for s in r["spaces"] if s["space"] == "calls"
    )
    assert space["documents"] == 3 and space["entities"]["live"] > 100 and space["relations"]["live"] > 10
    # the listing a user scans: most mentioned first; deleting one says how to stop the name instead
    listed = json.loads(runner.invoke(app, ["list", "entities", "--json"]).stdout)["items"]
    mentions = [e["mentions"] for e in listed]
    assert len(mentions) > 10 and mentions == sorted(mentions, reverse=True)
    refused = runner.invoke(app, ["delete", "entity", key, listed[0]["name"]])
    assert refused.exit_code == 2 and 'gates: [{name: "name_stoplist", options: {names: [' in refused.stderr

    # 3. pgrag ui: its source sensor launches a run for the space the CLI indexed; it and any run automation
    # launches after it succeed (the graph_quality check blocks nothing on what nlp built)
    text = config.read_text(encoding="utf-8")
    config.write_text(
        text
        + "\ndagster:\n  instance_storage: postgres\n"
        + f"  storage_database: {storage_db}\n  sensor_interval_s: {SENSOR_INTERVAL_S}\n"
        + "  executor: in_process\n",
        encoding="utf-8",
    )
    with pgrag_ui(config, tmp_path / "ui.log") as daemon:
        daemon.wait_idle(
            2 * SENSOR_INTERVAL_S + 5,
            300,
            done=lambda: bool(daemon.materializations("communities", key)),
        )
        runs = daemon.runs()
    assert runs, (tmp_path / "ui.log").read_text()
    assert runs[0]["tags"].get("dagster/sensor_name") == "source_sensor"
    assert runs[0]["tags"].get("dagster/partition") == key
    assert "relations" in runs[0]["assets"] and "communities" in runs[0]["assets"]
    assert [r["status"] for r in runs] == ["SUCCESS"] * len(runs), runs

    # 4. the graph view of the space: its overview, kept as a test artifact for a reviewer to look at
    page = tmp_path / "view.html"
    out = runner.invoke(app, ["view", "--out", str(page)])
    assert out.exit_code == 0, out.output
    if CHROMIUM is not None:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        shot = ARTIFACTS / "newcomer-overview.png"
        shot.unlink(missing_ok=True)
        dom = chromium_dom(page.as_uri(), tmp_path / "profile", screenshot=shot)
        assert shot.is_file() and shot.stat().st_size > 20_000
        assert dom.count('class="community-node"') >= 3
