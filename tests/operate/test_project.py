"""pgrag init and pgrag add (issue 16 item 1): a commented configuration for a folder of documents that
loads and indexes offline, sources registered without hand-editing YAML (comments kept)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from psycopg import sql
from typer.testing import CliRunner

from pgrag_dag.cli import app
from pgrag_dag.config import load_settings
from pgrag_dag.errors import ConfigurationError, InvalidNameError
from pgrag_dag.operate.project import add_source, choose_globs, init_project, slug
from pgrag_dag.store import db
from pgrag_dag.store.schema import schema_for

runner = CliRunner()


def _folder(root: Path) -> Path:
    """Three small documents, one nested, of two kinds; a tool directory that holds no documents of ours."""
    (root / "sub").mkdir(parents=True)
    (root / "ada.md").write_text(
        "# Ada\n\nAda Lovelace worked with Charles Babbage in London.\n", encoding="utf-8"
    )
    (root / "sub" / "engine.md").write_text(
        "Charles Babbage designed the Analytical Engine in London.\n", encoding="utf-8"
    )
    (root / "somerville.txt").write_text(
        "Mary Somerville introduced Ada Lovelace to Charles Babbage.\n", encoding="utf-8"
    )
    (root / ".venv" / "lib").mkdir(parents=True)
    (root / ".venv" / "lib" / "LICENSE.txt").write_text("Not a document.\n", encoding="utf-8")
    return root


def test_slug_and_globs_follow_the_folder() -> None:
    assert slug("My Notes-2024") == "my_notes_2024" and slug("2024 minutes") == "docs_2024_minutes"
    assert (
        slug("Ünïcode!!") == "unicode"
        and slug("Mes Dóc ü 文档") == "mes_doc_u"
        and slug("___") == "docs"
        and len(slug("x" * 80)) == 40
    )


def test_init_writes_a_commented_configuration_that_loads_and_refuses_to_overwrite(tmp_path: Path) -> None:
    folder = _folder(tmp_path / "Lovelace Papers")
    (folder / ".gitignore").write_text("*.pyc", encoding="utf-8")  # no final newline
    assert choose_globs(folder) == ["**/*.md", "**/*.txt"]
    done = init_project(folder)
    assert (done.realm, done.space) == ("lovelace_papers", "lovelace_papers")
    text = done.config.read_text(encoding="utf-8")
    assert "extractor: nlp" in text and "models: [replay]" in text and "local/all-MiniLM-L6-v2" in text
    assert (
        "# models: [openai/gpt-4o-mini]" in text and "OPENAI_API_KEY" in text
    )  # the live model, spelled out
    settings = load_settings(done.config)
    spec = settings.space_spec("lovelace_papers", "lovelace_papers")
    assert [(s.glob, s.exclude) for s in spec.sources] == [
        ("**/*.md", [".pgrag/**", ".venv/**"]),
        ("**/*.txt", [".pgrag/**", ".venv/**"]),
    ]
    assert settings.llm.models == ["replay"] and spec.extractor is not None and spec.extractor.name == "nlp"
    assert [n for _, _, n in done.sources] == [2, 1]  # .venv/lib/LICENSE.txt is no document
    assert (
        (folder / ".gitignore").read_text()
        == "*.pyc\n\n# pgrag: the embedded PostgreSQL and the Dagster instance "
        "(pgrag init)\n.pgrag/\n"
    )
    with pytest.raises(ConfigurationError, match="exists already.*--force"):
        init_project(folder)
    again = init_project(folder, realm="papers", space="Lovelace: letters", glob="**/*.md", force=True)
    assert load_settings(again.config).space_spec("papers", "Lovelace: letters").sources[0].glob == "**/*.md"
    assert (folder / ".gitignore").read_text().count(".pgrag/") == 1  # not appended twice
    with pytest.raises(InvalidNameError):
        init_project(folder, realm="Bad Realm", force=True)
    with pytest.raises(ConfigurationError, match="not a directory"):
        init_project(folder / "ada.md")


def test_add_registers_sources_keeping_comments_and_refuses_what_it_cannot_add(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = _folder(tmp_path / "notes")
    config = init_project(folder).config
    (tmp_path / "handbook").mkdir()
    (tmp_path / "handbook" / "ada.md").write_text("Ada Lovelace wrote the notes.\n", encoding="utf-8")
    (folder / "extra").mkdir()
    (folder / "extra" / "ada.md").write_text("Another Ada.\n", encoding="utf-8")
    monkeypatch.chdir(folder)
    done = add_source(config, Path("../handbook"), "notes.handbook")
    assert done.notes == [
        "created space notes.handbook",
        f"{(tmp_path / 'handbook').resolve()} lies outside {folder.resolve()}: written as an absolute path "
        "(the configuration can move; that folder cannot)",
    ] and done.sources == [(str(tmp_path / "handbook"), "**/*.md", 1)]
    with pytest.raises(ConfigurationError, match="already a source of notes.handbook"):
        add_source(config, tmp_path / "handbook", "notes.handbook")
    with pytest.raises(ConfigurationError, match="would have the doc_key.*'ada.md'.*--key-prefix extra/"):
        add_source(config, Path("extra"), "notes.handbook")
    add_source(config, Path("extra"), "notes.handbook", key_prefix="extra/")
    (folder / "team").mkdir()
    (folder / "team" / "ada.md").write_text("A third Ada.\n", encoding="utf-8")
    with pytest.raises(
        ConfigurationError, match=r"--key-prefix team/$"
    ):  # a file's folder, not the file's name
        add_source(config, Path("team/ada.md"), "notes.handbook")
    add_source(config, Path("somerville.txt"), "letters.main")
    with pytest.raises(ConfigurationError, match="does not exist"):
        add_source(config, Path("missing"), "notes.handbook")
    with pytest.raises(ConfigurationError, match="run `pgrag init` first"):
        add_source(tmp_path / "none.yaml", Path("extra"), "notes.handbook")
    text = config.read_text(encoding="utf-8")
    assert (
        "# Models. As written, everything runs offline" in text and "# needs OPENAI_API_KEY" in text
    )  # comments kept
    settings = load_settings(config)
    hb = settings.space_spec("notes", "handbook")
    assert [(str(s.path), s.key_prefix) for s in hb.sources] == [
        (str(tmp_path / "handbook"), ""),
        ("extra", "extra/"),
    ]
    assert hb.extractor is not None and hb.extractor.name == "nlp"  # offline, as the configuration is
    assert [str(s.path) for s in settings.space_spec("letters", "main").sources] == ["somerville.txt"]
    from pgrag_dag.ingest.sources import load_documents

    assert load_documents(settings, "notes", "handbook")["doc_key"].to_list() == ["ada.md", "extra/ada.md"]


def test_add_refuses_a_folder_a_source_of_the_space_covers_and_one_that_would_cover_a_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A trial: ``pgrag add sub`` beside the ``path: .`` sources ``pgrag init`` writes indexed sub's files
    twice (``sub/engine.md`` and ``engine.md``). Refused, naming the source that covers it, the file left
    as it was; another space may hold it; ``.`` beside a subfolder's source is refused too."""
    folder = _folder(tmp_path / "notes")
    config = init_project(folder).config
    monkeypatch.chdir(folder)
    monkeypatch.delenv("PGRAG_CONFIG", raising=False)
    before = config.read_text(encoding="utf-8")
    out = runner.invoke(app, ["add", "sub", "--space", "notes.notes"])
    assert out.exit_code == 2 and out.stdout == ""
    assert out.stderr == (
        "error: ConfigurationError: sub is covered by source . (glob '**/*.md') of notes.notes: 1 file(s) "
        "(e.g. 'sub/engine.md') would be indexed twice, under two doc_keys; leave it out (that source "
        "indexes its files), add it to another space, or give that source an exclude for it\n"
    )
    assert config.read_text(encoding="utf-8") == before
    out = runner.invoke(app, ["add", "sub", "--space", "notes.engines"])  # a space of its own
    assert out.exit_code == 0, out.output
    out = runner.invoke(app, ["add", ".", "--space", "notes.engines"])
    assert out.exit_code == 2 and out.stderr == (
        "error: ConfigurationError: . would cover source sub (glob '**/*.md') of notes.engines: 1 file(s) "
        "(e.g. 'engine.md') would be indexed twice, under two doc_keys; remove that source from the "
        "configuration first, or add this one to another space\n"
    )
    settings = load_settings(config)
    assert [(str(s.path), s.glob) for s in settings.space_spec("notes", "notes").sources] == [
        (".", "**/*.md"),
        (".", "**/*.txt"),
    ]
    assert [str(s.path) for s in settings.space_spec("notes", "engines").sources] == ["sub"]
    # a folder only another kind of document of it covers: nothing named twice, added
    (folder / "letters").mkdir()
    (folder / "letters" / "mary.rst").write_text("Mary Somerville wrote.\n", encoding="utf-8")
    assert runner.invoke(app, ["add", "letters", "--space", "notes.notes"]).exit_code == 0


def test_a_folder_initialised_and_indexed_offline_keys_documents_relative_to_it(
    tmp_path: Path, pg_dsn: str, realm: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = _folder(tmp_path / "papers")
    monkeypatch.chdir(folder)
    out = runner.invoke(app, ["init", "--realm", realm, "--space", "papers"])
    assert out.exit_code == 0, out.output
    assert f"pgrag index {realm}.papers" in out.output and "appended .pgrag/ to" in out.output
    out = runner.invoke(app, ["init"])
    assert out.exit_code == 2 and "exists already" in out.output
    (tmp_path / "later").mkdir()
    (tmp_path / "later" / "note.md").write_text("Charles Babbage met Mary Somerville.\n", encoding="utf-8")
    out = runner.invoke(app, ["add", str(tmp_path / "later"), "--space", f"{realm}.papers"])
    assert out.exit_code == 0, out.output
    assert "(1 file(s) now)" in out.output and "warning" not in out.output
    out = runner.invoke(
        app, ["add", str(tmp_path / "later"), "--glob", "**/*.rst", "--space", f"{realm}.drafts"]
    )
    assert out.exit_code == 0 and "(0 file(s) now)  warning: no file matches yet" in out.output, out.output
    monkeypatch.setenv("PGRAG_DATABASE_URL", pg_dsn)
    monkeypatch.chdir(tmp_path)  # from elsewhere, through PGRAG_CONFIG: the same keys
    monkeypatch.setenv("PGRAG_CONFIG", str(folder / "pgrag.yaml"))
    out = runner.invoke(app, ["index", f"{realm}.papers"])
    assert out.exit_code == 0, out.output
    with db.connect(pg_dsn) as conn:
        rows = conn.execute(
            sql.SQL("SELECT DISTINCT doc_key, source FROM {}.documents ORDER BY 1").format(
                sql.Identifier(schema_for(realm))
            )
        ).fetchall()
        extractors = conn.execute(
            sql.SQL("SELECT DISTINCT model FROM {}.raw_extractions").format(sql.Identifier(schema_for(realm)))
        ).fetchall()
    assert rows == [(k, k) for k in ["ada.md", "note.md", "somerville.txt", "sub/engine.md"]]
    assert extractors == [("offline-nlp",)]  # no model
    out = runner.invoke(
        app, ["query", "Who worked with Charles Babbage?", "--realm", realm, "--space", "papers", "--json"]
    )
    assert out.exit_code == 0, out.output
    assert "Charles Babbage" in {e["name"] for e in json.loads(out.output)["entities"]}
