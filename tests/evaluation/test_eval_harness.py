"""The evaluation run record (issue 17 item 6): JSON and Markdown beside each other, the git revision and the
configuration with every result, and a run with an excluded item marked not reportable (§9)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from evaluation.benchmarks import RunGuard
from evaluation.harness import RunRecord, Table, git_revision, progress, timed_run, write_run


def test_a_run_record_is_written_as_json_and_markdown_with_revision_config_and_guard(tmp_path: Path) -> None:
    guard = RunGuard("longmemeval", 3)
    record = RunRecord(
        "recall demo", config={"k": [2, 5]}, models={"answering": ["a", "b"], "extraction": "x"}, guard=guard
    )
    with timed_run(record):
        record.results["recall@2"] = 0.5
        record.tables.append(Table("Recall", ["arm", "r@2"], [["dense", 0.5], ["bm|25", None]], note="k = 2"))
        (tmp_path / "chart.png").write_bytes(b"png")
        record.plots.append(tmp_path / "chart.png")
    assert (
        re.fullmatch(r"[0-9a-f]{40}(-dirty)?", record.git_revision) and record.git_revision == git_revision()
    )
    js, md = write_run(record, tmp_path)
    data = json.loads(js.read_text())
    assert (js.name, md.name) == ("recall_demo.json", "recall_demo.md")
    assert (
        data["reportable"] is True
        and data["config"] == {"k": [2, 5]}
        and data["results"] == {"recall@2": 0.5}
    )
    assert (
        data["git_revision"] == record.git_revision
        and data["plots"] == ["chart.png"]
        and data["seconds"] >= 0
    )
    text = md.read_text()
    assert "Reportable: yes" in text and "| dense | 0.500 |" in text and "| bm\\|25 |  |" in text
    assert "Models: answering: a, b; extraction: x." in text and "![chart](chart.png)" in text

    guard.exclude("q7", "both extraction prompts refused")
    assert not record.reportable
    js, md = write_run(record, tmp_path)
    assert json.loads(js.read_text())["guard"]["excluded"] == {"q7": "both extraction prompts refused"}
    assert "**Not reportable**: longmemeval: NOT reportable — 1 of 3 items excluded: q7" in md.read_text()


def test_progress_yields_every_item_in_order() -> None:
    assert list(progress(iter(range(5)), "counting", total=5)) == [0, 1, 2, 3, 4]
