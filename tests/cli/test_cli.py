"""The ``pgrag`` command line on a real database: index, query --json, cassette round trip, errors."""

from __future__ import annotations

import json
import re
from pathlib import Path

import psycopg
import pytest
import yaml
from typer.testing import CliRunner

from pgrag_dag.cli import app
from pgrag_dag.query.extractive import SOURCES_HEADER
from pgrag_dag.store.schema import schema_for
from tests.fix_corpus import SmallCorpus

runner = CliRunner()


@pytest.fixture
def cli_env(small_corpus: SmallCorpus, monkeypatch: pytest.MonkeyPatch) -> SmallCorpus:
    monkeypatch.setenv("PGRAG_CONFIG", str(small_corpus.config))
    return small_corpus


def test_index_then_query_json_returns_the_walked_graph(cli_env: SmallCorpus, realm: str) -> None:
    out = runner.invoke(app, ["index", f"{realm}.main"])
    assert out.exit_code == 0, out.output
    assert f"partition {realm}.main  (plain pipeline run, no Dagster)" in out.stdout
    out = runner.invoke(
        app, ["query", "Who worked with Charles Babbage?", "--realm", realm, "--space", "main", "--json"]
    )
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert data["keywords"]["source"] == "lexical" and "Charles Babbage" in data["keywords"]["low_level"]
    names = {e["name"] for e in data["entities"]}
    assert "Charles Babbage" in names
    triples = {(r["subject"], r["predicate"], r["object"]) for r in data["relations"]}
    assert ("Ada Lovelace", "worked_with", "Charles Babbage") in triples
    assert data["assembly"]["total"]["chars_placed"] == data["assembly"]["total"]["chars_retrieved"] > 0


def test_cassette_export_and_import_round_trip(cli_env: SmallCorpus, realm: str, tmp_path: Path) -> None:
    assert runner.invoke(app, ["index", f"{realm}.main"]).exit_code == 0
    path = tmp_path / "cassette.jsonl"
    out = runner.invoke(app, ["cassette", "export", str(path), "--purpose", "extract"])
    assert out.exit_code == 0, out.output
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines and all(e["purpose"] == "extract" for e in lines)
    assert any(e["model"] == cli_env.model for e in lines)
    out = runner.invoke(app, ["cassette", "import", str(path)])
    assert out.exit_code == 0 and f"{len(lines)} responses read" in out.output


def test_engine_errors_exit_2_with_one_line(cli_env: SmallCorpus) -> None:
    out = runner.invoke(app, ["index", 'x"; drop schema public; --.main'])
    assert out.exit_code == 2
    assert "InvalidNameError" in out.output
    out = runner.invoke(app, ["query", "anything", "--realm", "nosuchrealm", "--space", "main", "--json"])
    assert out.exit_code == 2 and "QueryError" in out.output


def test_index_refuses_to_empty_an_indexed_space_without_allow_empty(
    cli_env: SmallCorpus, realm: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import yaml

    monkeypatch.setenv(
        "PGRAG_OPERATIONS__ALLOW_EMPTY", "false"
    )  # restored after the test; --allow-empty sets it
    assert runner.invoke(app, ["index", f"{realm}.main"]).exit_code == 0
    cfg = yaml.safe_load(cli_env.config.read_text())
    cfg["realms"][realm]["spaces"]["main"]["sources"] = []
    cli_env.config.write_text(yaml.safe_dump(cfg))
    out = runner.invoke(app, ["index", f"{realm}.main"])
    lines = [
        line for line in out.output.splitlines() if not line.startswith("warning: the embedder is hashing")
    ]
    assert out.exit_code == 2 and len(lines) == 1 and out.stdout == ""  # one line, on stderr
    assert lines[0].startswith(f"error: stage chunks of {realm}.main: ConfigurationError: ")
    assert "--allow-empty" in lines[0] and lines[0].endswith("pgrag-errors.log)")
    out = runner.invoke(app, ["index", f"{realm}.main", "--allow-empty", "--json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout)["stages"]["chunks"]["documents_removed"] == 2


def test_query_options_reach_query_param(cli_env: SmallCorpus, realm: str) -> None:
    assert runner.invoke(app, ["index", f"{realm}.main"]).exit_code == 0
    out = runner.invoke(
        app,
        [
            "query",
            "Who worked with Charles Babbage?",
            "--realm",
            realm,
            "--space",
            "main",
            "--json",
            "--mode",
            "local",
            "--relation-type",
            "worked_with",
            "--fusion",
            "quota",
        ],
    )
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert data["relations"] and {r["predicate"] for r in data["relations"]} == {"worked_with"}
    assert data["assembly"]["filters"]["relation_types"] == ["worked_with"]
    bad = runner.invoke(
        app, ["query", "x", "--realm", realm, "--space", "main", "--json", "--mode", "sideways"]
    )
    assert bad.exit_code == 2 and "unknown query mode 'sideways'" in bad.output
    lexical = runner.invoke(
        app,
        [
            "query",
            "Who worked with Charles Babbage?",
            "--realm",
            realm,
            "--space",
            "main",
            "--json",
            "--mode",
            "naive",
            "--chunk-channel",
            "fulltext",
        ],
    )
    assert lexical.exit_code == 0, lexical.output
    assert {c["via"] for c in json.loads(lexical.output)["chunks"]} == {"fulltext"}
    bad = runner.invoke(
        app, ["query", "x", "--realm", realm, "--space", "main", "--json", "--chunk-channel", "bm25"]
    )
    assert bad.exit_code == 2 and "chunk_channels must be among vector, fulltext" in bad.output


def test_configured_retrieval_defaults_apply_unless_an_option_is_given(
    cli_env: SmallCorpus, realm: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert runner.invoke(app, ["index", f"{realm}.main"]).exit_code == 0
    ask = ["query", "Who worked with Charles Babbage?", "--realm", realm, "--space", "main", "--json"]
    monkeypatch.setenv("PGRAG_RETRIEVAL__MODE", "naive")
    monkeypatch.setenv("PGRAG_RETRIEVAL__CHUNK_TOP_K", "1")
    naive = json.loads(runner.invoke(app, ask).output)
    assert naive["entities"] == [] and naive["relations"] == [] and len(naive["chunks"]) == 1
    mixed = json.loads(runner.invoke(app, [*ask, "--mode", "mix"]).output)
    assert mixed["entities"] and mixed["relations"]
    # chunk_top_k still configured: the walk (the entity modes' default ranking) returns that many
    assert [c["via"] for c in mixed["chunks"]] == ["ppr"]
    monkeypatch.setenv("PGRAG_RETRIEVAL__MODE", "fancy")
    bad = runner.invoke(app, ask)
    assert (
        bad.exit_code == 2
        and "ConfigurationError" in bad.output
        and "unknown query mode 'fancy'" in bad.output
    )
    assert (
        len(bad.output.strip().splitlines()) == 1 and "retrieval:" in bad.output
    )  # one line, naming the field


def test_reembed_switches_a_realm_with_a_progress_bar_and_a_one_line_summary(
    cli_env: SmallCorpus, realm: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert runner.invoke(app, ["index", f"{realm}.main"]).exit_code == 0
    monkeypatch.setenv("PGRAG_EMBEDDING__DIM", "64")
    question = ["query", "Who worked with Charles Babbage?", "--realm", realm, "--space", "main", "--json"]
    out = runner.invoke(app, question)
    assert (
        out.exit_code == 2 and "SchemaMismatchError" in out.output and f"pgrag reembed {realm}" in out.output
    )
    out = runner.invoke(app, ["reembed", realm])
    assert out.exit_code == 0, out.output
    lines = out.stdout.splitlines()
    assert (
        len(lines) == 1 and lines[0].startswith(f"realm {realm}: re-embedded ") and "(3 chunks, " in lines[0]
    )
    assert "from hashing-sha256 (384) to hashing-sha256 (64) in " in lines[0] and lines[0].endswith(
        " texts/s)"
    )
    assert f"re-embedding {realm}" in out.stderr and "texts/s" in out.stderr  # the progress bar
    out = runner.invoke(app, ["reembed", realm, "--json"])
    assert out.exit_code == 0 and json.loads(out.stdout)["reembedded"] is False
    out = runner.invoke(app, ["reembed", realm, "--force", "--json"])
    data = json.loads(out.stdout)
    assert out.exit_code == 0 and data["reembedded"] is True and data["rows"]["documents"] == 3
    assert runner.invoke(app, question).exit_code == 0


def test_a_query_of_a_declared_space_never_indexed_names_the_command_that_indexes_it(
    cli_env: SmallCorpus, realm: str
) -> None:
    """A trial's ``pgrag query --space dumas`` on a space the configuration declares but no run indexed said
    only "nothing was indexed into it": it names ``pgrag index <realm>.<space>``, as the rest of the CLI
    does."""
    cfg = yaml.safe_load(cli_env.config.read_text(encoding="utf-8"))
    cfg["realms"][realm]["spaces"]["later"] = {"sources": [{"path": "docs", "glob": "*.txt"}]}
    cli_env.config.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    assert runner.invoke(app, ["index", f"{realm}.main"]).exit_code == 0
    out = runner.invoke(
        app, ["query", "Who worked with Charles Babbage?", "--realm", realm, "--space", "later"]
    )
    assert out.exit_code == 2 and len(out.output.strip().splitlines()) == 1, out.output
    assert out.output.strip().endswith(f"; run pgrag index {realm}.later"), out.output


def test_reembed_of_an_unknown_realm_exits_2_with_one_line(cli_env: SmallCorpus) -> None:
    out = runner.invoke(app, ["reembed", "nosuchrealm"])
    assert out.exit_code == 2 and out.output.count("\n") == 1
    assert out.output.startswith("error: ConfigurationError: realm 'nosuchrealm' does not exist")


def test_index_full_recomputes_and_an_undeclared_space_names_the_declared_ones(
    small_corpus: SmallCorpus, realm: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PGRAG_CONFIG", str(small_corpus.config))
    assert runner.invoke(app, ["index", f"{realm}.main"]).exit_code == 0
    out = runner.invoke(app, ["index", f"{realm}.main", "--full", "--json"])
    assert out.exit_code == 0, out.output
    stages = json.loads(out.stdout)["stages"]
    modes = {s: stages[s].get("mode") for s in ("gated_triples", "resolved_entities", "relations")}
    assert modes == {"gated_triples": "full", "resolved_entities": "full", "relations": "full"}
    out = runner.invoke(app, ["index", f"{realm}.nosuch", "--full"])
    assert (
        out.exit_code == 2
        and f"{realm}.nosuch is not in the configuration (declared: {realm}.main)" in out.output
        and "chunks" not in out.output  # refused before any stage starts
    )
    # a mistyped realm is refused before anything is created for it
    typo = f"{realm}x"
    out = runner.invoke(app, ["index", f"{typo}.main"])
    assert out.exit_code == 2 and f"{typo}.main is not in the configuration" in out.output
    with psycopg.connect(small_corpus.engine().dsn) as conn:
        assert conn.execute(
            "SELECT count(*) FROM pgrag__control.realms WHERE realm = %s", (typo,)
        ).fetchone() == (0,)
        assert conn.execute(
            "SELECT count(*) FROM pg_namespace WHERE nspname = %s", (schema_for(typo),)
        ).fetchone() == (0,)


def test_the_pgrag_command_prints_a_query_warning_once_on_stderr(cli_env: SmallCorpus, realm: str) -> None:
    """Issue 16: through the installed entry point (logging configured as for a user), a warning is printed
    once, plainly — not also logged — and stdout stays the JSON."""
    import os
    import subprocess
    import sys

    assert runner.invoke(app, ["index", f"{realm}.main"]).exit_code == 0
    pgrag = Path(sys.executable).with_name("pgrag")
    done = subprocess.run(
        [
            str(pgrag),
            "query",
            "Who worked with Charles Babbage?",
            "--realm",
            realm,
            "--space",
            "main",
            "--json",
            "--relation-type",
            "nosuch",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PGRAG_CONFIG": str(cli_env.config)},
    )
    assert done.returncode == 0, done.stderr
    mentions = [line for line in done.stderr.splitlines() if "nosuch" in line]
    assert mentions == [
        "warning: relation type 'nosuch' matches no relation of space 'main' (its most frequent: "
        "designed, built, funded, worked_with, wrote_notes_on)"
    ]
    assert json.loads(done.stdout)["relations"] == []


def test_query_reads_the_first_declared_space_and_says_its_warnings_before_a_replay_miss(
    cli_env: SmallCorpus, realm: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert runner.invoke(app, ["index", f"{realm}.main"]).exit_code == 0
    out = runner.invoke(
        app, ["query", "Who worked with Charles Babbage?", "--json"]
    )  # no --realm, no --space
    assert out.exit_code == 0, out.output
    assert "Charles Babbage" in {e["name"] for e in json.loads(out.stdout)["entities"]}
    monkeypatch.setenv("PGRAG_LLM__MODELS", '["replay"]')  # offline, nothing recorded: synthesis misses
    out = runner.invoke(app, ["query", "Who worked with Charles Babbage?", "--relation-type", "nonsense"])
    assert out.exit_code == 0, out.output
    lines = out.stderr.splitlines()
    assert lines[0].startswith("warning: ") and "nonsense" in lines[0]  # said before the model was asked
    assert lines[-1].startswith("warning: no model answer is available: no model writes answers offline")
    printed = out.stdout.splitlines()  # what retrieval found, numbered as a prompt would have numbered it
    assert printed[0] == SOURCES_HEADER and re.match(r"\[\d+\] ", printed[1]) and len(printed) >= 3
    assert printed[1].endswith(" · best match") and printed[2].startswith("    ")
    # global mode has no passage: its reports and relations are shown instead (tests/cli/test_cli_offline.py)
    out = runner.invoke(app, ["query", "Who worked with Charles Babbage?", "--mode", "global"])
    assert out.exit_code == 0 and "Relations:" in out.stdout.splitlines(), out.output
    # nothing retrieved to show (bypass mode retrieves nothing): the miss is the error it is
    out = runner.invoke(app, ["query", "Who worked with Charles Babbage?", "--mode", "bypass"])
    assert out.exit_code == 2 and out.stdout == ""
    assert out.stderr.splitlines()[-1].startswith("error: ReplayMissError: ") and out.stderr.endswith(
        "(`pgrag query --json` shows what retrieval found, with no model)\n"
    )


def test_a_sigterm_the_code_it_lands_in_turns_into_another_error_is_still_an_interrupt(
    cli_env: SmallCorpus, realm: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new user's trial: SIGTERM landing in onnxruntime's import came out as ``ImportError: initialization
    failed`` and exit 2. The run says it was interrupted, as for any SIGTERM, and exits 143."""
    import os
    import signal
    import time

    from pgrag_dag.pipeline import run

    def cut_short(*_args: object, **_kwargs: object) -> None:
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler raises here
        except KeyboardInterrupt as exc:  # what an extension module's init does with it
            raise ImportError("initialization failed") from exc
        raise AssertionError("no SIGTERM arrived")

    monkeypatch.setattr(run, "index_documents", cut_short)
    out = runner.invoke(app, ["index", f"{realm}.main"])
    assert out.exit_code == 143, out.output
    assert "interrupted: the stages that had finished are kept" in out.stderr, out.stderr
    assert "ImportError" not in out.output


@pytest.mark.parametrize(
    ("signum", "status", "terminal"),
    [("SIGINT", 130, False), ("SIGTERM", 143, True)],
    ids=["ctrl-c-in-a-log", "sigterm-on-a-terminal"],
)
def test_an_interrupted_pgrag_index_says_what_is_kept_and_the_rerun_goes_on(
    cli_env: SmallCorpus, realm: str, conn: psycopg.Connection, signum: str, status: int, terminal: bool
) -> None:
    """Ctrl-C (SIGINT) or SIGTERM while the model is extracting: one line naming the stage, saying what was
    kept — not the chunks extracted this run, but the model's responses received — and the command to go
    on with, exit 130 / 143; on a terminal the line comes below the bars' last frame. The rerun finishes the
    space from the cached responses (trials: a Ctrl-C printed nothing, then spoke only of vectors; a SIGTERM
    exited silently; the line came above the bars)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from tests.fix_corpus import extraction_answer

    def slow(messages: list[dict[str, str]]) -> str:
        time.sleep(1.5)  # the extraction still running when the signal comes
        return extraction_answer(messages)

    def cached() -> int:
        row = conn.execute(
            "SELECT count(*) FROM pgrag__control.llm_cache WHERE model = %s", (cli_env.model,)
        ).fetchone()
        return int(row[0]) if row else 0

    cli_env.server.answer = slow
    pgrag = Path(sys.executable).with_name("pgrag")
    # rich draws live bars when it takes stderr for an interactive terminal
    shown = {"TTY_COMPATIBLE": "1", "TTY_INTERACTIVE": "1", "TERM": "xterm"} if terminal else {}
    proc = subprocess.Popen(
        [str(pgrag), "index", f"{realm}.main"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PGRAG_CONFIG": str(cli_env.config), **shown},
    )
    assert proc.stderr is not None
    deadline = time.monotonic() + 60
    while not cached() and time.monotonic() < deadline:  # the extraction has begun, a response is kept
        time.sleep(0.1)
    before = cached()
    assert before > 0 and proc.poll() is None
    proc.send_signal(getattr(signal, signum))
    rest = proc.stderr.read()
    assert proc.wait(60) == status, (rest, proc.stdout.read() if proc.stdout else "")
    # the chunks were written, no vector yet, no extraction kept: the message says which stage was cut
    said = re.search(
        r"interrupted during raw_extractions: the stages that had finished are kept; the chunks this run "
        r"had extracted are not \(raw_extractions writes a run's extractions together when it ends, once "
        r"its checks have passed over every batch\); the model's responses already received are cached: "
        rf"the rerun does not pay for them again; \d+ chunks still without a vector; `pgrag index "
        rf"{realm}\.main` goes on from there\n",
        rest,
    )
    assert said, rest
    assert "Traceback" not in rest
    if terminal:  # below the bars' last frame, not above it
        assert f"{realm}.main raw_extractions" in rest[: said.start()]
        assert f"{realm}.main raw_extractions" not in rest[said.start() :], rest[said.start() :]
    cli_env.server.answer = extraction_answer
    again = runner.invoke(app, ["index", f"{realm}.main", "--json"])
    assert again.exit_code == 0, again.output
    extracted = json.loads(again.stdout)["stages"]["raw_extractions"]
    assert extracted["rows_changed"] > 0  # what the interrupted run had not written
    assert extracted["cache_hits"] >= before  # what it had received, not asked again


def test_the_help_reads_as_a_users_text() -> None:
    """No module names, no reStructuredText marks: the help a user reads is not the code's docstring
    markup."""
    top = runner.invoke(app, ["--help"])
    assert top.exit_code == 0 and "cli_project" not in top.output and "pgrag init DIR" in top.output
    for command in (["index"], ["query"], ["view"], ["delete", "document"], ["list", "entities"]):
        out = runner.invoke(app, [*command, "--help"], terminal_width=200)
        assert out.exit_code == 0 and "``" not in out.output, (command, out.output)
    assert (
        "`--full` recomputes the whole space"
        in runner.invoke(app, ["index", "--help"], terminal_width=200).output
    )


def test_a_failed_check_is_one_plain_warning_line(cli_env: SmallCorpus, realm: str) -> None:
    (cli_env.root / "docs" / "03_scan.txt").write_bytes(b"scan \x80\x81\x00 page")  # skipped: not UTF-8 text
    out = runner.invoke(app, ["index", f"{realm}.main"])
    assert out.exit_code == 0, out.output
    (line,) = [
        w for w in out.stderr.splitlines() if w.startswith("warning: check chunks:skipped_documents failed: ")
    ]
    facts = line.split(" failed: ", 1)[1]
    assert facts.startswith("documents_skipped 1; ") and "03_scan.txt" in facts and not facts.startswith("{")


def test_the_ui_workspace_written_outside_the_repository_is_the_repositorys() -> None:
    from pgrag_dag.cli.operations import WORKSPACE

    assert WORKSPACE == (Path(__file__).resolve().parents[2] / "workspace.yaml").read_text(encoding="utf-8")


def test_stop_db_with_a_bad_configuration_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PGRAG_CONFIG", str(tmp_path / "missing.yaml"))
    out = runner.invoke(app, ["stop-db"])
    assert out.exit_code == 2 and out.output.strip().splitlines() == [
        f"error: ConfigurationError: configuration file {tmp_path / 'missing.yaml'} "
        "(PGRAG_CONFIG) does not exist"
    ]


def test_a_keyword_fallback_is_said_once_in_the_commands_own_words(cli_env: SmallCorpus, realm: str) -> None:
    """Through the entry point (the root logger configured as for a user): offline, ``--keywords model`` falls
    back to lexical keywords and says so once — never also as a ``WARNING:pgrag_dag.query.keywords:`` log
    line."""
    import os
    import subprocess
    import sys

    assert runner.invoke(app, ["index", f"{realm}.main"]).exit_code == 0
    pgrag = Path(sys.executable).with_name("pgrag")
    done = subprocess.run(
        [str(pgrag), "query", "Who worked with Charles Babbage?", "--json", "--keywords", "model"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PGRAG_CONFIG": str(cli_env.config), "PGRAG_LLM__MODELS": '["replay"]'},
    )
    assert done.returncode == 0, done.stderr
    assert "WARNING:" not in done.stderr, done.stderr
    said = [line for line in done.stderr.splitlines() if "keywords" in line]
    assert len(said) == 1 and said[0].startswith("warning: model keywords were asked for but "), done.stderr
