"""The smaller surprises of a newcomer's first day (issue 31 item 7), each on a real indexed space: ``pgrag
index`` without the partition when one space is declared, ``pgrag coverage`` saying telemetry is off,
``pgrag add`` keeping a linked folder relative (the project can move), ``list documents`` counting a
document's characters once, ``pgrag lineage`` of an id an earlier build had, and ``status`` writing every
count one way."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml
from psycopg import sql
from typer.testing import CliRunner

from pgrag_dag.cli import app
from pgrag_dag.config import load_settings
from pgrag_dag.ingest.sources import list_source_files
from pgrag_dag.operate.project import add_source, init_project
from pgrag_dag.operate.status import store_status, summary_lines
from pgrag_dag.store import locks
from pgrag_dag.store.identifiers import qualified
from tests.fix_corpus import DOCS, SmallCorpus

runner = CliRunner()


@pytest.fixture
def indexed(small_corpus: SmallCorpus, realm: str, monkeypatch: pytest.MonkeyPatch) -> SmallCorpus:
    """The small corpus (one space declared) indexed by ``pgrag index`` with no partition argument."""
    monkeypatch.setenv("PGRAG_CONFIG", str(small_corpus.config))
    out = runner.invoke(app, ["index"])
    assert out.exit_code == 0, out.output
    assert out.stdout.splitlines()[0] == f"partition {realm}.main  (plain pipeline run, no Dagster)"
    return small_corpus


def test_index_without_a_partition_takes_the_only_space_and_names_them_when_there_are_two(
    indexed: SmallCorpus, realm: str
) -> None:
    cfg = yaml.safe_load(indexed.config.read_text())
    cfg["realms"][realm]["spaces"]["second"] = dict(cfg["realms"][realm]["spaces"]["main"])
    indexed.config.write_text(yaml.safe_dump(cfg))
    out = runner.invoke(app, ["index"])
    assert out.exit_code == 2 and out.stdout == ""
    assert out.stderr == (
        "error: ConfigurationError: name the space: the configuration declares 2 "
        f"({realm}.main, {realm}.second)\n"
    )


def test_listings_and_the_view_without_a_partition_read_the_only_space(
    indexed: SmallCorpus, realm: str, tmp_path: Path
) -> None:
    for command in (["list", "entities"], ["list", "documents"], ["coverage"]):
        bare, named = runner.invoke(app, command), runner.invoke(app, [*command, f"{realm}.main"])
        assert bare.exit_code == 0, bare.output
        assert bare.stdout == named.stdout and bare.stdout.strip()
    out = runner.invoke(app, ["view", "--out", str(tmp_path / "g.html")])
    assert out.exit_code == 0, out.output
    assert (tmp_path / "g.html").read_text(encoding="utf-8").count("<svg") >= 1


def test_coverage_with_telemetry_off_says_so_and_how_to_turn_it_on(indexed: SmallCorpus, realm: str) -> None:
    assert load_settings(indexed.config).telemetry.coverage is False  # the default
    out = runner.invoke(app, ["coverage", f"{realm}.main"])
    assert out.exit_code == 0, out.output
    first = out.stdout.splitlines()[0]
    assert first.startswith(
        f"{realm}.main: 0 recorded queries — telemetry is off (telemetry.coverage: false)"
    )
    assert "`telemetry: {coverage: true}`" in first and "PGRAG_TELEMETRY__COVERAGE=true" in first
    assert (
        json.loads(runner.invoke(app, ["coverage", f"{realm}.main", "--json"]).stdout)["recording"] is False
    )
    on = CliRunner(env={"PGRAG_TELEMETRY__COVERAGE": "true"}).invoke(app, ["coverage", f"{realm}.main"])
    assert on.exit_code == 0 and on.stdout.splitlines()[0] == f"{realm}.main: 0 recorded queries"


LONG = " ".join(f"Ada Lovelace wrote note {i}." for i in range(30))
"""One paragraph longer than ``chunking.chunk_chars`` (200): cut into chunks that overlap by up to 60."""


def test_list_documents_counts_each_character_of_a_document_once(
    indexed: SmallCorpus, realm: str, conn: psycopg.Connection
) -> None:
    (indexed.root / "docs" / "03_long.txt").write_text(LONG, encoding="utf-8")
    assert runner.invoke(app, ["index"]).exit_code == 0
    sources = {**DOCS, "03_long.txt": LONG}
    docs = json.loads(runner.invoke(app, ["list", "documents", f"{realm}.main", "--json"]).stdout)["items"]
    summed = dict(
        conn.execute(
            sql.SQL("SELECT doc_key, sum(length(text)) FROM {} GROUP BY doc_key").format(
                qualified(realm, "documents")
            )
        ).fetchall()
    )
    assert [d["doc_key"] for d in docs] == sorted(sources)
    for d in docs:
        assert d["chars"] == len(sources[d["doc_key"]].rstrip())
    long = next(d for d in docs if d["doc_key"] == "03_long.txt")
    assert long["chunks"] > 1 and summed["03_long.txt"] > long["chars"] == len(
        LONG
    )  # its chunks overlap (overlap_chars: 60)
    human = runner.invoke(app, ["list", "documents", f"{realm}.main"]).stdout
    assert f", {len(DOCS['01_babbage.txt'].rstrip())} characters" in human


def test_lineage_of_an_id_an_earlier_build_had_names_the_current_report(
    indexed: SmallCorpus, realm: str, conn: psycopg.Connection
) -> None:
    part = f"{realm}.main"
    before = json.loads(runner.invoke(app, ["list", "communities", part, "--json"]).stdout)["items"]
    old = before[0]
    # the graph is as it was, but the stored build claims another one: the next run rebuilds every report
    conn.execute(
        sql.SQL("UPDATE {} SET graph_fingerprint = 'earlier'").format(qualified(realm, "communities"))
    )
    assert runner.invoke(app, ["index", part]).exit_code == 0
    after = json.loads(runner.invoke(app, ["list", "communities", part, "--json"]).stdout)["items"]
    assert old["id"] not in {c["id"] for c in after}  # ids change with every rebuild
    now = [c["id"] for c in after if (c["title"], c["level"]) == (old["title"], old["level"])]
    assert now
    out = runner.invoke(app, ["lineage", str(old["id"]), "--realm", realm])
    assert out.exit_code == 2 and out.stdout == ""
    said = out.stderr
    assert said.startswith(
        f"error: QueryError: community {old['id']} of {part} ({old['title']!r}, level {old['level']}) "
        "is from an earlier build, replaced at "
    )
    assert said.rstrip().endswith(
        "community ids change with every rebuild; the current build's report of that title is community "
        f"{', '.join(map(str, now))} (`pgrag lineage {now[0]}`)"
    )
    assert runner.invoke(app, ["lineage", str(now[0]), "--realm", realm]).exit_code == 0
    never = runner.invoke(app, ["lineage", "987654321", "--realm", realm])
    assert never.exit_code == 2 and "has no community 987654321, now or in an earlier build" in never.stderr
    assert f"`pgrag list communities {realm}.SPACE`" in never.stderr


def test_status_writes_every_count_with_thousands_separators(indexed: SmallCorpus, realm: str) -> None:
    status = store_status(load_settings(indexed.config))
    space: dict[str, Any] = next(r for r in status["realms"] if r["realm"] == realm)["spaces"][0]
    # the real status of the space, its counts raised past a thousand as a large space's are
    space.update(documents=1204, chunks=2091)
    space["entities"].update(live=1271, dormant=1000)
    space["relations"].update(current=3089, superseded=1001, negated=1002, dormant=1003)
    space["communities"]["levels"] = {0: 1100, 1: 12}
    space["communities"]["total"] = 1112
    status["llm_cache"]["rows"] = 4096
    text = "\n".join(summary_lines(status))
    for shown in ("1,204 documents", "2,091 chunks", "1,271 live, 1,000 dormant", "3,089 current"):
        assert shown in text
    assert "1,001 superseded, 1,002 negated, 1,003 dormant" in text
    assert "communities: 1,112 (level 0: 1,100, level 1: 12)" in text and "4,096 responses" in text
    counts = [
        line
        for line in text.splitlines()
        if not line.startswith("database:") and "last run" not in line and "built" not in line
    ]
    assert not [line for line in counts if re.search(r"(?<![\w,.:-])\d{4,}(?![\w,.:-])", line)]


def test_status_says_a_run_is_indexing_the_space_and_which_stage(indexed: SmallCorpus, realm: str) -> None:
    """A trial's ``pgrag status`` did not say that an index was running: the space's stage lock, held by a
    run, is named with its stage and process; released, the line goes."""

    def running() -> list[str]:
        return [
            line
            for line in summary_lines(store_status(load_settings(indexed.config)))
            if "running now" in line
        ]

    assert running() == []
    engine = indexed.engine()
    try:
        with locks.stage_lock(engine.dsn, realm, "main", "embeddings", wait_s=0):
            said = running()
            assert len(said) == 1 and said[0].startswith("    running now: pgrag embeddings pid "), said
    finally:
        engine.close()
    assert running() == []


def test_status_leaves_the_vectors_to_the_run_in_progress(
    indexed: SmallCorpus, realm: str, conn: psycopg.Connection
) -> None:
    """Rows without a vector while a run indexes the space: that run embeds them — ``status`` does not advise
    starting another ``pgrag index`` (a trial's status did, mid-run); with no run, it names the command."""

    def vectors() -> list[str]:
        return [
            line
            for line in summary_lines(store_status(load_settings(indexed.config)))
            if line.startswith("    vectors:")
        ]

    table = qualified(realm, "entities")
    conn.execute(
        sql.SQL("UPDATE {} SET embedding = NULL WHERE id IN (SELECT id FROM {} ORDER BY id LIMIT 2)").format(
            table, table
        )
    )
    idle = f"`pgrag index {realm}.main` embeds them"
    assert vectors() == [f"    vectors: 2 entities have none yet — vector search cannot find them; {idle}"]
    engine = indexed.engine()
    try:
        with locks.stage_lock(engine.dsn, realm, "main", "embeddings", wait_s=0):
            assert vectors() == [
                "    vectors: 2 entities have none yet — vector search cannot find them; the run in "
                "progress (running now, below) embeds them"
            ]
    finally:
        engine.close()
    assert vectors() == [f"    vectors: 2 entities have none yet — vector search cannot find them; {idle}"]


def test_add_keeps_a_linked_folder_relative_so_the_project_can_move(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "notes.md").write_text("Ada Lovelace worked with Charles Babbage.\n", encoding="utf-8")
    config = init_project(project).config
    elsewhere = tmp_path / "shared" / "corpus"
    elsewhere.mkdir(parents=True)
    (elsewhere / "talk.txt").write_text("Mary Somerville met Ada Lovelace.\n", encoding="utf-8")
    (project / "corpus").symlink_to(elsewhere, target_is_directory=True)
    done = add_source(config, project / "corpus", "project.talks")
    assert [s[0] for s in done.sources] == ["corpus"] and done.notes == ["created space project.talks"]
    outside = add_source(config, elsewhere, "project.more")  # not under the folder: absolute, and said
    assert outside.sources[0][0] == str(elsewhere)
    assert outside.notes[-1] == (
        f"{elsewhere} lies outside {project}: written as an absolute path "
        "(the configuration can move; that folder cannot)"
    )
    moved = project.rename(tmp_path / "moved")  # the folder moves with its configuration and its link
    settings = load_settings(moved / "pgrag.yaml")
    (src,) = settings.space_spec("project", "talks").sources
    assert str(src.path) == "corpus"
    files = list_source_files(settings, settings.space_spec("project", "talks"))
    assert [Path(f).name for f in files] == ["talk.txt"]
