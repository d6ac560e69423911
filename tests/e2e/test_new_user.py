"""The first day of a new user (issue 16, "Done when"): ``pgrag init`` on a folder of three documents, the
configuration switched to a live model as its comments say (here the local OpenAI-compatible stub, reached
through litellm), ``pgrag index``, ``status``, ``list``, ``query`` with its numbered sources, ``export``
(GraphML re-read with igraph, Parquet with polars) and ``view`` checked in headless Chromium — every step
through the command line, every value checked against the database."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import igraph as ig
import polars as pl
import pytest
from psycopg import sql
from typer.testing import CliRunner

from pgrag_dag.cli import app
from pgrag_dag.store.identifiers import qualified
from pgrag_dag.testing.stub_server import StubServer
from tests.fix_browser import CHROMIUM, chromium_dom
from tests.fix_corpus import DOCS, extraction_answer

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts" / "new-user"
NOTES = {
    "babbage.txt": DOCS["01_babbage.txt"],
    "lovelace.md": "# Ada Lovelace\n\n" + DOCS["02_lovelace.txt"],
    "travels/london.md": "# London\n\nCharles Babbage lived in London. The British government funded the "
    "Difference Engine from London for a decade.",
}
QUESTION = "How did Ada Lovelace work with Charles Babbage?"


def answer(messages: list[dict[str, str]]) -> str:
    """The stub model: :func:`extraction_answer` for extraction and reports; an answer citing the first two
    numbered passages for the synthesis prompt."""
    if messages[0]["content"].startswith("You answer a question from retrieved context"):
        return (
            "Ada Lovelace worked with Charles Babbage on the Analytical Engine [1], "
            "and wrote notes on it [2]."
        )
    return extraction_answer(messages)


@pytest.fixture
def stub() -> Iterator[StubServer]:
    with StubServer(answer) as server:
        yield server


def _rows(dsn: str, realm: str, query: str, *args: object) -> list[tuple]:
    import psycopg

    with psycopg.connect(dsn) as conn:
        return conn.execute(
            sql.SQL(query).format(
                e=qualified(realm, "entities"),
                r=qualified(realm, "relations"),
                d=qualified(realm, "documents"),
            ),
            args,
        ).fetchall()


@pytest.mark.slow
def test_a_new_user_inits_indexes_inspects_asks_exports_and_views_a_folder(
    tmp_path: Path, pg_dsn: str, realm: str, stub: StubServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "my-notes"
    for name, text in NOTES.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text, encoding="utf-8")
    runner = CliRunner()
    monkeypatch.setenv(
        "PGRAG_DATABASE_URL", pg_dsn
    )  # the suite's embedded server instead of a new one in .pgrag
    monkeypatch.chdir(tmp_path)

    # 1. init: a commented configuration and the .gitignore line
    out = runner.invoke(app, ["init", "my-notes", "--realm", realm, "--space", "notes"])
    assert out.exit_code == 0, out.output
    config = folder / "pgrag.yaml"
    text = config.read_text()
    assert (
        "OPENAI_API_KEY" in text
        and "extractor: nlp" in text
        and ".pgrag/" in (folder / ".gitignore").read_text()
    )
    assert f"pgrag index {realm}.notes" in out.output
    # 2. a live model, as the file's comments say: models, and the extractor line deleted
    live = text.replace(
        "  models: [replay]\n",
        f"  models: [openai/notes-model]\n  api_base: {stub.base_url}\n  api_key: x\n  max_retries: 0\n",
    )
    live = re.sub(r"\n *extractor: nlp[^\n]*", "", live)
    config.write_text(live)
    monkeypatch.setenv("PGRAG_CONFIG", str(config))
    from pgrag_dag.config import load_settings

    assert load_settings().llm.models == ["openai/notes-model"]
    assert (
        load_settings().space_spec(realm, "notes").extractor is None
    )  # the default extractor: asks llm.models

    # 3. index: the summary, documents keyed relative to the folder
    out = runner.invoke(app, ["index", f"{realm}.notes"])
    assert out.exit_code == 0, out.output
    assert f"partition {realm}.notes  (plain pipeline run, no Dagster)" in out.stdout
    assert "  documents        3  (3 added, 0 replaced, 0 removed, 0 unchanged)" in out.stdout
    keys = {k for (k,) in _rows(pg_dsn, realm, "SELECT DISTINCT doc_key FROM {d}")}
    assert keys == {"babbage.txt", "lovelace.md", "travels/london.md"}
    extract_calls = [r for r in stub.requests if r["path"].endswith("/chat/completions")]
    assert extract_calls and all(r["body"]["model"] == "notes-model" for r in extract_calls)

    # 4. status and list agree with the database
    status = json.loads(runner.invoke(app, ["status", "--json"]).stdout)
    entities = _rows(pg_dsn, realm, "SELECT count(*) FROM {e} WHERE dormant_since IS NULL")[0][0]
    relations = _rows(pg_dsn, realm, "SELECT count(*) FROM {r}")[0][0]
    assert json.dumps(status).count(f'"{realm}"') >= 1
    listed = json.loads(
        runner.invoke(app, ["list", "entities", f"{realm}.notes", "--json", "--limit", "500"]).stdout
    )
    assert listed["total"] == entities > 0 and "Charles Babbage" in {e["name"] for e in listed["items"]}
    rels = json.loads(
        runner.invoke(
            app, ["list", "relations", f"{realm}.notes", "--predicate", "worked_with", "--json"]
        ).stdout
    )
    assert [(r["subject"], r["object"]) for r in rels["items"]] == [("Ada Lovelace", "Charles Babbage")]

    # 5. query: the answer, then numbered sources so every [n] resolves
    out = runner.invoke(app, ["query", QUESTION, "--realm", realm, "--space", "notes"])
    assert out.exit_code == 0, out.output
    answer_text, sources = out.stdout.split("Sources:", 1)
    assert "worked with Charles Babbage on the Analytical Engine [1]" in answer_text
    numbered = dict(re.findall(r"^\s*\[(\d+)\] (\S+) · ", sources, flags=re.M))
    assert {"1", "2"} <= set(numbered) and set(numbered.values()) <= keys

    # 6. export: GraphML through igraph, Parquet through polars, equal to the database
    out = runner.invoke(
        app,
        [
            "export",
            f"{realm}.notes",
            "--format",
            "graphml",
            "--format",
            "parquet",
            "--out",
            str(tmp_path / "export"),
        ],
    )
    assert out.exit_code == 0, out.output
    graph = ig.Graph.Read_GraphML(str(tmp_path / "export" / "graph.graphml"))
    all_entities = _rows(pg_dsn, realm, "SELECT count(*) FROM {e}")[0][0]
    assert (graph.vcount(), graph.ecount()) == (all_entities, relations)
    edge = next(e for e in graph.es if e["predicate"] == "worked_with")
    assert (graph.vs[edge.source]["name"], graph.vs[edge.target]["name"]) == (
        "Ada Lovelace",
        "Charles Babbage",
    )
    frame = pl.read_parquet(tmp_path / "export" / "relations.parquet")
    assert frame.height == relations and frame.filter(pl.col("predicate") == "worked_with")[
        "object"
    ].to_list() == ["Charles Babbage"]

    # 7. view: the page, searched for Ada Lovelace in Chromium
    out = runner.invoke(app, ["view", f"{realm}.notes", "--no-open"])
    assert out.exit_code == 0, out.output
    page = Path(out.stdout.split()[0])
    assert page.is_file() and page.parent == folder / ".pgrag" / "views"
    if CHROMIUM is None:
        pytest.skip(
            "Debian's chromium is not installed (.ci/run installs it): the page was written, not looked at"
        )
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "ada-lovelace.png"
    shot.unlink(missing_ok=True)
    dom = chromium_dom(page.as_uri() + "#q=" + quote("Ada Lovelace"), tmp_path / "profile", screenshot=shot)
    assert shot.is_file() and shot.stat().st_size > 10_000
    assert re.search(r"<h3[^>]*>\s*Ada Lovelace\s*</h3>", dom)
    neighbours = set(re.findall(r'data-neighbour="([^"]+)"', dom))
    assert {"Charles Babbage", "Analytical Engine"} <= neighbours
