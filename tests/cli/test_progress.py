"""Progress and one-line failures of ``pgrag index`` / ``pgrag demo`` (issue 16 items 3 and 6): the stages
report to the sink of their context — in the plain pipeline and inside a Dagster run alike — the CLI draws
them and ends with the human summary, and a failure is one line naming the stage (or asset), the partition
and the cause, with the stack trace in the log file it names."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import yaml
from rich.console import Console
from typer.testing import CliRunner

from pgrag_dag import progress
from pgrag_dag.assets.partitions import add_partitions
from pgrag_dag.assets.stages import ASSETS
from pgrag_dag.cli import app
from pgrag_dag.cli import progress as cli_progress
from pgrag_dag.pipeline import index_documents
from pgrag_dag.resources.engine import PgragResource
from tests.fix_corpus import SmallCorpus

STAGES = [
    "chunks",
    "raw_extractions",
    "gated_triples",
    "resolved_entities",
    "relations",
    "embeddings",
    "communities",
    "community_hierarchy",
]


class Recorder:
    """A :class:`pgrag_dag.progress.Sink` keeping every report."""

    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []

    def started(self, stage: str, partition: str) -> None:
        self.events.append(("started", stage, partition))

    def advanced(
        self, stage: str, partition: str, done: int, total: int, unit: str, fields: dict[str, Any]
    ) -> None:
        self.events.append(("advanced", stage, partition, done, total, unit, fields))

    def finished(
        self, stage: str, partition: str, metadata: dict[str, Any] | None, error: BaseException | None
    ) -> None:
        self.events.append(("finished", stage, partition, metadata, error))

    def ends(self) -> list[str]:
        return [e[1] for e in self.events if e[0] == "finished" and e[4] is None]

    def last_advance(self, stage: str) -> tuple[Any, ...]:
        return [e for e in self.events if e[0] == "advanced" and e[1] == stage][-1]


def _chunks(engine: Any, realm: str) -> int:
    with engine.connect() as conn:
        return conn.execute(f"SELECT count(*) FROM pgrag_{realm}.documents WHERE space = 'main'").fetchone()[
            0
        ]


def test_every_stage_reports_its_start_progress_and_end_to_the_context_sink(
    small_corpus: SmallCorpus, realm: str
) -> None:
    engine = small_corpus.engine()
    rec = Recorder()
    with progress.reporting(rec):
        results = index_documents(engine, realm, "main")
    assert [e[1] for e in rec.events if e[0] == "started"] == STAGES == rec.ends()
    chunks = _chunks(engine, realm)
    _, _, partition, done, total, unit, fields = rec.last_advance("raw_extractions")
    assert (partition, done, total, unit) == (f"{realm}.main", chunks, chunks, "chunks") and chunks > 1
    assert fields["model_calls"] == results[1].metadata["model_calls"] > 0  # extraction + gleaning calls
    embedded = results[5].metadata
    _, _, _, done, total, unit, _ = rec.last_advance("embeddings")
    assert unit == "texts" and done == total == embedded["rows_changed"] > chunks
    finished = {e[1]: e[3] for e in rec.events if e[0] == "finished"}
    assert finished["relations"] == results[4].metadata  # the stage's result metadata
    rec2 = Recorder()  # outside the block nothing reports; a second context has its own sink
    index_documents(engine, realm, "main")
    assert rec2.events == [] and len(rec.ends()) == len(STAGES)
    engine.close()


@pytest.mark.dagster
def test_a_dagster_run_in_process_reports_to_the_sink_of_its_caller(
    small_corpus: SmallCorpus, realm: str
) -> None:
    key = f"{realm}.main"
    rec = Recorder()
    with dg.instance_for_test() as instance, progress.reporting(rec):
        add_partitions(instance, [key])
        result = dg.materialize(
            ASSETS,
            partition_key=key,
            instance=instance,
            resources={"pgrag": PgragResource(config_path=str(small_corpus.config))},
        )
    assert result.success and rec.ends() == STAGES
    assert rec.last_advance("raw_extractions")[3:6] == (_chunks(small_corpus.engine(), realm),) * 2 + (
        "chunks",
    )


def test_pgrag_index_shows_stage_lines_then_the_summary_and_json_on_request(
    small_corpus: SmallCorpus, realm: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PGRAG_CONFIG", str(small_corpus.config))
    out = CliRunner().invoke(app, ["index", f"{realm}.main"])
    assert out.exit_code == 0, out.output
    engine = small_corpus.engine()
    chunks = _chunks(engine, realm)
    with engine.connect() as conn:
        relations = conn.execute(
            f"SELECT count(*) FROM pgrag_{realm}.relations WHERE space = 'main'"
        ).fetchone()[0]
    engine.close()
    err = out.stderr.splitlines()
    # not a terminal: one line per finished stage, in order, the extractor's with its rate and model calls
    done = [line for line in err if line.startswith(f"{realm}.main ")]
    assert [line.split()[1].rstrip(":") for line in done] == STAGES
    calls = sum(
        not r["body"]["messages"][0]["content"].startswith("You write a report")
        for r in small_corpus.chat_requests()
    )
    assert f"{chunks} chunks (" in done[1] and " chunks/s), " in done[1] and f"{calls} model calls" in done[1]
    assert (
        err.count(next(line for line in err if line.startswith("warning: the embedder is hashing-sha256")))
        == 1
    )
    summary = out.stdout.splitlines()
    assert summary[0] == f"partition {realm}.main  (plain pipeline run, no Dagster)"
    assert f"  chunks           {chunks}  ({chunks} inserted this run)" in summary
    assert any(line.startswith(f"  relations        {relations}  (") for line in summary)
    assert any(line.startswith("  checks           ") and "passed" in line for line in summary)
    again = CliRunner().invoke(app, ["index", f"{realm}.main", "--json"])
    data = json.loads(again.stdout)
    assert data["partition"] == f"{realm}.main" and list(data["stages"]) == STAGES
    assert (
        data["stages"]["raw_extractions"]["chunks_extracted"] == 0
        and data["checks"]["relations:contract"] is True
    )
    assert (
        isinstance(data["graph_quality"]["orphan_entities"], int)
        and "pronoun_entities" in data["graph_quality"]
    )


def test_a_failed_stage_is_one_line_naming_stage_partition_cause_and_the_log_file(
    small_corpus: SmallCorpus, realm: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PGRAG_CONFIG", str(small_corpus.config))
    small_corpus.server.answer = lambda messages: "I cannot help with that."  # no chunk parses
    out = CliRunner().invoke(app, ["index", f"{realm}.main"])
    assert out.exit_code == 2 and out.stdout == ""
    errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, out.stderr
    line = errors[0]
    log = small_corpus.root / "data" / "logs" / "pgrag-errors.log"
    assert line.startswith(f"error: stage raw_extractions of {realm}.main: ExtractionError: every one of ")
    assert line.endswith(f"(stack trace in {log})")
    text = log.read_text()
    assert (
        "Traceback (most recent call last)" in text
        and "ExtractionError" in text
        and "stage_raw_extractions" in text
    )


@pytest.mark.dagster
def test_the_demo_reports_a_failed_partition_in_one_line_and_goes_on(
    small_corpus: SmallCorpus, realm: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from pgrag_dag.assets.demo import run_demo

    cfg = yaml.safe_load(small_corpus.config.read_text())
    spaces = cfg["realms"][realm]["spaces"]
    spaces["broken"] = {"sources": [{"path": "no_such_folder", "glob": "*.txt"}]}
    spaces["zlast"] = dict(spaces["main"])  # after the broken one: still indexed
    small_corpus.config.write_text(yaml.safe_dump(cfg))
    monkeypatch.setenv("PGRAG_CONFIG", str(small_corpus.config))
    failed = run_demo()
    out, err = capsys.readouterr()
    assert failed == [f"{realm}.broken"]
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(f"error: asset chunks of {realm}.broken: Dagster run ")
    assert "chunks: ConfigurationError: source path " in errors[0] and "does not exist" in errors[0]
    log = Path(errors[0].rsplit("stack trace in ", 1)[1].rstrip(")"))
    assert "--- chunks" in log.read_text() and "ConfigurationError" in log.read_text()
    assert (
        f"partition {realm}.main  (Dagster run " in out and f"partition {realm}.zlast  (Dagster run " in out
    )
    assert f"1 of 3 partitions failed: {realm}.broken" in out


ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _final_frame(stderr: str) -> dict[str, str]:
    """The last drawn line of each stage's bar in a terminal's stderr (escape codes stripped)."""
    lines = ANSI.sub("", stderr).replace("\r", "\n").splitlines()
    return {line.split()[1]: " ".join(line.split()) for line in lines if len(line.split()) > 1}


def test_a_terminal_shows_each_stage_as_done_of_its_total_with_a_rate_and_time_left(
    small_corpus: SmallCorpus, realm: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PGRAG_CONFIG", str(small_corpus.config))
    monkeypatch.setenv("TTY_COMPATIBLE", "1")  # rich draws its live bars as on a terminal
    monkeypatch.setenv("COLUMNS", "240")
    out = CliRunner().invoke(app, ["index", f"{realm}.main"])
    assert out.exit_code == 0, out.output
    engine = small_corpus.engine()
    chunks = _chunks(engine, realm)
    engine.close()
    data = json.loads(CliRunner().invoke(app, ["index", f"{realm}.main", "--json"]).stdout)
    texts = data["stages"]["embeddings"]  # the second run embeds nothing; the first run's count is below
    assert texts["rows_changed"] == 0
    bars = _final_frame(out.stderr)
    assert set(STAGES) <= set(bars), out.stderr
    rate = r"\d[\d,]*\.\d {unit}/s"
    extraction = bars["raw_extractions"]
    assert f" {chunks}/{chunks} chunks " in extraction and re.search(rate.format(unit="chunks"), extraction)
    assert " model calls " in extraction and extraction.endswith(" elapsed, 00:00 left")
    embedded = re.search(r" (\d+)/(\d+) texts ", bars["embeddings"])
    assert embedded and embedded.group(1) == embedded.group(2) and int(embedded.group(1)) > chunks
    assert re.search(rate.format(unit="texts"), bars["embeddings"])
    assert " 2/2 documents " in bars["chunks"]  # a quick stage: its count from the metadata, not "1/1"
    assert f" {chunks}/{chunks} chunks " in bars["gated_triples"]
    assert re.search(r" \d+/\d+ edges ", bars["relations"])
    assert all(re.search(r" \d[\d,]*/\d[\d,]* [a-z]+ |\sdone\s", bars[s]) for s in STAGES), bars


def test_a_log_gets_a_progress_line_with_total_rate_and_time_left_while_a_stage_runs(
    small_corpus: SmallCorpus, realm: str
) -> None:
    buffer = io.StringIO()
    console = Console(file=buffer, width=200)  # not a terminal: lines, not bars
    engine = small_corpus.engine()
    with cli_progress.watching(console, every_s=0.0):
        index_documents(engine, realm, "main")
    chunks = _chunks(engine, realm)
    engine.close()
    lines = buffer.getvalue().splitlines()
    running = [line for line in lines if re.match(rf"{realm}\.main raw_extractions: \d+/", line)]
    assert running, lines
    pattern = re.compile(
        rf"^{realm}\.main raw_extractions: (\d+)/{chunks} chunks, [\d,]+\.\d chunks/s, about \d+s left$"
    )
    done = [int(m.group(1)) for line in running if (m := pattern.match(line))]
    assert done and len(done) == len(running) and all(0 < d < chunks for d in done)
    assert done == sorted(done)
    assert any(
        line.startswith(f"{realm}.main embeddings: ") and re.search(r"\d+/\d+ texts, ", line)
        for line in lines
    )


@pytest.mark.parametrize("width", [50, 80, 200])
def test_a_narrow_terminal_keeps_the_stage_counts_rate_and_times_whole_and_cuts_the_partition(
    width: int,
) -> None:
    """A trial's 80-column terminal showed ``trial30docs.trial30docs embeddings    1,… 3… 0:… elapsed, -…``:
    every column shrunk alike. The line now fits the width and cuts only the partition's end (then the
    bar and the model calls go first)."""
    console = Console(file=io.StringIO(), width=width, force_terminal=True, color_system=None)
    display = cli_progress.StageDisplay(console)
    display.started("embeddings", "trial30docs.trial30docs")
    display.advanced("embeddings", "trial30docs.trial30docs", 1204, 20510, "texts", {"model_calls": 12})
    task = display.bars.tasks[0]
    line = cli_progress.StageLine(console).render(task).plain
    assert len(line) <= width - 1 or width == 50, line  # at 50 the counts alone do not fit: the end goes
    assert "  " not in line  # no blank estimate before the first texts are through
    assert " 1,204/20,510 texts " in line and line.endswith(" left") and " elapsed, " in line
    wide = width == 200
    assert line.startswith("trial30docs.trial30docs embeddings ━" if wide else "embeddings"), line
    assert ("12 model calls" in line) == wide
