"""Stable document keys (issue 16): a file's doc_key is its path relative to its source's root, whatever
the configuration's place or the way the source path is written; a store keyed by the earlier rule is
re-keyed in place by the next chunks run — ids, extractions and graph kept, no model call, history kept."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from psycopg import sql

from pgrag_dag import changes_since
from pgrag_dag.config import RealmSpec, Settings, SourceSpec, SpaceSpec, load_settings
from pgrag_dag.errors import ConfigurationError
from pgrag_dag.ingest.sources import load_documents, without_last_file
from pgrag_dag.pipeline import index_documents, stage_chunks
from pgrag_dag.pipeline.doc_keys import migrate_keys
from pgrag_dag.store import db, history
from pgrag_dag.store.schema import schema_for
from tests.fix_corpus import SmallCorpus


def _settings(config_dir: Path, *sources: SourceSpec, order: str = "filename") -> Settings:
    return Settings(
        config_dir=config_dir,
        realms={"r": RealmSpec(spaces={"s": SpaceSpec(sources=list(sources), order=order)})},
    )  # type: ignore[arg-type]


def _tree(root: Path, *rels: str) -> None:
    for rel in rels:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(f"Text of {rel}.\n", encoding="utf-8")


def _keys(settings: Settings) -> list[tuple[str, str, int]]:
    return load_documents(settings, "r", "s").select("doc_key", "source", "doc_order").rows()


def test_keys_are_relative_to_the_source_root_wherever_the_configuration_is(tmp_path: Path) -> None:
    _tree(tmp_path / "corpus", "a.md", "sub/b.md", "sub/deeper/c.md", "x.txt")
    rel = _settings(tmp_path, SourceSpec(path=Path("corpus"), glob="**/*.md"))
    expected = [("a.md", "a.md", 0), ("sub/b.md", "sub/b.md", 1), ("sub/deeper/c.md", "sub/deeper/c.md", 2)]
    assert _keys(rel) == expected
    # the same source written absolutely, and read from a configuration elsewhere: the same keys
    elsewhere = tmp_path / "elsewhere" / "conf"
    elsewhere.mkdir(parents=True)
    assert _keys(_settings(elsewhere, SourceSpec(path=tmp_path / "corpus", glob="**/*.md"))) == expected
    assert _keys(_settings(elsewhere, SourceSpec(path=Path("../../corpus"), glob="**/*.md"))) == expected
    # a single-file source: its file name
    assert _keys(_settings(elsewhere, SourceSpec(path=tmp_path / "corpus" / "sub" / "b.md"))) == [
        ("b.md", "b.md", 0)
    ]


def test_jsonl_composite_keys_use_the_file_path_relative_to_the_source(tmp_path: Path) -> None:
    (tmp_path / "data" / "2024").mkdir(parents=True)
    lines = [{"title": "Earnings", "text": "Up."}, {"title": "Earnings", "text": "Down."}]
    (tmp_path / "data" / "2024" / "news.jsonl").write_text(
        "\n".join(json.dumps(x) for x in lines) + "\n", encoding="utf-8"
    )
    for conf in (tmp_path, tmp_path / "data"):
        settings = _settings(conf, SourceSpec(path=tmp_path / "data", glob="**/*.jsonl"))
        assert [k for k, _, _ in _keys(settings)] == [
            "Earnings#2024/news.jsonl:1",
            "Earnings#2024/news.jsonl:2",
        ]


def test_two_sources_with_the_same_relative_key_are_refused_naming_them_until_a_key_prefix_tells_them_apart(
    tmp_path: Path,
) -> None:
    _tree(tmp_path, "handbook/intro.md", "wiki/intro.md", "wiki/other.md")
    clash = _settings(
        tmp_path, SourceSpec(path=Path("handbook"), glob="*.md"), SourceSpec(path=Path("wiki"), glob="*.md")
    )
    with pytest.raises(ConfigurationError) as err:
        load_documents(clash, "r", "s")
    message = str(err.value)
    assert "'intro.md'" in message and "handbook (glob '*.md')" in message and "wiki (glob '*.md')" in message
    assert "key_prefix" in message
    fixed = _settings(
        tmp_path,
        SourceSpec(path=Path("handbook"), glob="*.md", key_prefix="handbook/"),
        SourceSpec(path=Path("wiki"), glob="*.md"),
    )
    assert [k for k, _, _ in _keys(fixed)] == ["handbook/intro.md", "intro.md", "other.md"]


def test_exclude_leaves_files_out_and_without_last_file_keeps_nested_keys_and_order(tmp_path: Path) -> None:
    _tree(tmp_path / "c", "a/1.md", "b/2.md", "b/3.md", "notes/skip.md")
    spec = SourceSpec(path=Path("c"), glob="**/*.md", exclude=["notes/**"])
    settings = _settings(tmp_path, spec)
    assert [k for k, _, _ in _keys(settings)] == ["a/1.md", "b/2.md", "b/3.md"]
    first, withheld = without_last_file(settings, settings.space_spec("r", "s"))
    assert withheld == "b/3.md" and first.sources[0].exclude == ["notes/**", "b/3.md"]
    fewer = settings.model_copy(update={"realms": {"r": RealmSpec(spaces={"s": first})}})
    assert _keys(fewer) == _keys(settings)[:-1] == [("a/1.md", "a/1.md", 0), ("b/2.md", "b/2.md", 1)]
    # a single-file source holding the last file is dropped; a file name with glob metacharacters is escaped
    _tree(tmp_path / "d", "[x].txt", "y.txt")
    two = _settings(
        tmp_path,
        SourceSpec(path=Path("d"), glob="*.txt", exclude=["y.txt"]),
        SourceSpec(path=Path("d/y.txt")),
        order="listed",
    )
    first, withheld = without_last_file(two, two.space_spec("r", "s"))
    assert withheld == "y.txt" and len(first.sources) == 1
    left = _settings(tmp_path, SourceSpec(path=Path("d"), glob="*.txt"), order="listed")
    first, withheld = without_last_file(left, left.space_spec("r", "s"))
    assert withheld == "y.txt" and first.sources[0].exclude == ["y.txt"]
    left.realms["r"].spaces["s"] = SpaceSpec(
        sources=[SourceSpec(path=Path("d"), glob="*.txt", exclude=["[[]x].txt"])]
    )
    assert [k for k, _, _ in _keys(left)] == ["y.txt"]


# -- migration of a store keyed by the earlier rule ----------------------------------------------------


def _rows(dsn: str, realm: str, query: str, params: tuple = ()) -> list[tuple]:
    with db.connect(dsn) as conn:
        return conn.execute(sql.SQL(query).format(s=sql.Identifier(schema_for(realm))), params).fetchall()  # type: ignore[arg-type]


def _configure(corpus: SmallCorpus, **source: object) -> None:
    cfg = yaml.safe_load(corpus.config.read_text())
    [space] = next(iter(cfg["realms"].values()))["spaces"].values()
    space["sources"] = [{"path": "docs", "glob": "*.txt", **source}]
    corpus.config.write_text(yaml.safe_dump(cfg), encoding="utf-8")


def test_a_store_keyed_by_the_configuration_directory_is_renamed_in_place_with_no_model_call(
    small_corpus: SmallCorpus, realm: str
) -> None:
    """Before issue 16 the chunks stage stored ``doc_key`` = ``source`` = the path relative to the
    configuration's directory (``docs/01_babbage.txt``). That store is built here by the real pipeline:
    ``key_prefix: docs/`` gives exactly those keys, sources and prompts. Without it, the next run renames."""
    _configure(small_corpus, key_prefix="docs/")
    engine = small_corpus.engine()
    index_documents(engine, realm, "main", communities=False)
    # a replaced document leaves archived chunks under its old key
    doc2 = small_corpus.root / "docs" / "02_lovelace.txt"
    doc2.write_text(
        doc2.read_text(encoding="utf-8") + "\n\nAda Lovelace was born in London.", encoding="utf-8"
    )
    index_documents(engine, realm, "main", communities=False)
    old_keys = {"docs/01_babbage.txt", "docs/02_lovelace.txt"}
    dsn = engine.dsn
    assert {k for (k,) in _rows(dsn, realm, "SELECT DISTINCT source FROM {s}.documents")} == old_keys
    assert {k for (k,) in _rows(dsn, realm, "SELECT DISTINCT doc_key FROM {s}.documents_removed")} == {
        "docs/02_lovelace.txt"
    }
    chunks = _rows(
        dsn, realm, "SELECT id, doc_key, chunk_index, content_hash, embed_hash FROM {s}.documents ORDER BY id"
    )
    raw = _rows(dsn, realm, "SELECT id, chunk_id, pass, raw_text FROM {s}.raw_extractions ORDER BY id")
    graph = _rows(
        dsn,
        realm,
        "SELECT id, source_id, predicate, target_id, chunk_ids, t_created FROM {s}.relations ORDER BY id",
    )
    with db.connect(dsn) as conn:
        added_at = history.before_added(conn, realm, "main", "docs/02_lovelace.txt")
    watermark = changes_since(engine, realm, "main", None).watermark
    calls = len(small_corpus.chat_requests())
    assert calls > 0 and added_at is not None

    _configure(small_corpus)  # the configuration of today: keys relative to docs/
    engine = small_corpus.engine()
    meta = stage_chunks(engine, realm, "main").metadata
    assert meta["documents_renamed"] == 2 and meta["documents_chunked"] == 0 and meta["chunks_inserted"] == 0
    assert meta["documents_added"] == meta["documents_removed"] == meta["documents_replaced"] == 0
    renamed = {k: k.removeprefix("docs/") for k in old_keys}
    assert _rows(
        dsn, realm, "SELECT id, doc_key, chunk_index, content_hash, embed_hash FROM {s}.documents ORDER BY id"
    ) == [(i, renamed[k], c, h, e) for i, k, c, h, e in chunks]  # same rows, same ids, new keys
    assert {k for (k,) in _rows(dsn, realm, "SELECT DISTINCT source FROM {s}.documents")} == set(
        renamed.values()
    )
    assert {k for (k,) in _rows(dsn, realm, "SELECT DISTINCT doc_key FROM {s}.documents_removed")} == {
        "02_lovelace.txt"
    }
    results = index_documents(
        engine, realm, "main", communities=False
    )  # the rest of the pipeline: nothing to do
    assert len(small_corpus.chat_requests()) == calls  # no model call
    assert (
        _rows(dsn, realm, "SELECT id, chunk_id, pass, raw_text FROM {s}.raw_extractions ORDER BY id") == raw
    )
    assert (
        _rows(
            dsn,
            realm,
            "SELECT id, source_id, predicate, target_id, chunk_ids, t_created FROM {s}.relations ORDER BY id",
        )
        == graph
    )
    assert all(r.metadata.get("rows_changed", 0) == 0 for r in results), [
        (r.stage, r.metadata.get("rows_changed")) for r in results
    ]
    # the change feed: two renames, nothing removed, added or changed in the graph
    feed = changes_since(engine, realm, "main", watermark)
    assert {k: n for k, n in feed.counts().items() if n} == {"documents_renamed": 2}
    assert sorted((e["renamed_from"], e["doc_key"]) for e in feed.documents_renamed) == sorted(
        renamed.items()
    )
    assert "docs/01_babbage.txt → 01_babbage.txt" in "\n".join(feed.summary())
    with db.connect(dsn) as conn:  # the history of the document follows its new key
        assert history.before_added(conn, realm, "main", "02_lovelace.txt") == added_at
    # the same source written absolutely, and the configuration moved: nothing re-keyed again
    moved = small_corpus.root / "conf"
    moved.mkdir()
    cfg = yaml.safe_load(small_corpus.config.read_text())
    next(iter(cfg["realms"].values()))["spaces"]["main"]["sources"] = [
        {"path": str(small_corpus.root / "docs")}
    ]
    (moved / "pgrag.yaml").write_text(yaml.safe_dump(cfg), encoding="utf-8")
    meta = stage_chunks(
        type(engine).from_settings(load_settings(moved / "pgrag.yaml")), realm, "main"
    ).metadata
    assert meta["documents_renamed"] == 0 and meta["documents_unchanged"] == 2 and meta["rows_changed"] == 0


def test_a_renamed_document_that_also_changed_is_renamed_then_replaced(
    small_corpus: SmallCorpus, realm: str
) -> None:
    _configure(small_corpus, key_prefix="docs/")
    engine = small_corpus.engine()
    stage_chunks(engine, realm, "main")
    _configure(small_corpus)
    doc1 = small_corpus.root / "docs" / "01_babbage.txt"
    doc1.write_text("Charles Babbage was born in London.", encoding="utf-8")
    shutil.copy(doc1, small_corpus.root / "docs" / "03_copy.txt")
    watermark = changes_since(engine, realm, "main", None).watermark
    meta = stage_chunks(small_corpus.engine(), realm, "main").metadata
    assert (meta["documents_renamed"], meta["documents_replaced"], meta["documents_added"]) == (2, 1, 1)
    feed = changes_since(engine, realm, "main", watermark)
    assert [e["doc_key"] for e in feed.documents_replaced] == ["01_babbage.txt"]
    assert [e["doc_key"] for e in feed.documents_added] == ["03_copy.txt"] and not feed.documents_removed


def test_migrate_keys_renames_before_any_stage_runs_and_a_second_call_does_nothing(
    small_corpus: SmallCorpus, realm: str
) -> None:
    """What the demo calls before it looks for its last document by key (a data dir of an earlier release)."""
    _configure(small_corpus, key_prefix="docs/")
    stage_chunks(small_corpus.engine(), realm, "main")
    _configure(small_corpus)
    engine = small_corpus.engine()
    done = migrate_keys(engine, realm, "main")
    assert sorted((r.old, r.new) for r in done) == [
        ("docs/01_babbage.txt", "01_babbage.txt"),
        ("docs/02_lovelace.txt", "02_lovelace.txt"),
    ]
    assert migrate_keys(engine, realm, "main") == []
    meta = stage_chunks(engine, realm, "main").metadata
    assert (meta["documents_renamed"], meta["documents_unchanged"], meta["rows_changed"]) == (0, 2, 0)
    with db.connect(engine.dsn) as conn:
        events = conn.execute(
            sql.SQL(
                "SELECT doc_key, event, renamed_from FROM {}.belief_log WHERE kind = 'document' ORDER BY seq"
            ).format(sql.Identifier(schema_for(realm)))
        ).fetchall()
    assert events == [
        ("docs/01_babbage.txt", "added", None),
        ("docs/02_lovelace.txt", "added", None),
        ("01_babbage.txt", "renamed", "docs/01_babbage.txt"),
        ("02_lovelace.txt", "renamed", "docs/02_lovelace.txt"),
    ]
