"""The chunks stage on real PostgreSQL (issue 13): bad documents are contained to themselves, chunks
carry citable offsets, keys and titles of any size and content are stored or refused with a reason."""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import pytest
import yaml
from psycopg import sql

from pgrag_dag.errors import SourceError
from pgrag_dag.pipeline import stage_chunks
from pgrag_dag.store import db
from pgrag_dag.store.schema import schema_for
from tests.fix_corpus import SmallCorpus

SKIPPED_CHECK = (
    "skipped_documents"  # the chunks asset's non-blocking check (pgrag_dag.pipeline.SKIPPED_CHECK)
)


def _rows(dsn: str, realm: str, query: str, params: tuple = ()) -> list[tuple]:
    with db.connect(dsn) as conn:
        return conn.execute(sql.SQL(query).format(s=sql.Identifier(schema_for(realm))), params).fetchall()  # type: ignore[arg-type]


def _texts(corpus: SmallCorpus) -> dict[str, str]:
    return {p.name: p.read_text(encoding="utf-8") for p in (corpus.root / "docs").iterdir() if p.is_file()}


def test_issue13_stored_chunks_are_substrings_with_their_offsets(
    small_corpus: SmallCorpus, realm: str
) -> None:
    engine = small_corpus.engine()
    stage_chunks(engine, realm, "main")
    texts = _texts(small_corpus)
    rows = _rows(engine.dsn, realm, "SELECT doc_key, text, metadata FROM {s}.documents")
    assert len(rows) >= 3
    for doc_key, text, meta in rows:
        assert texts[doc_key][meta["char_start"] : meta["char_end"]] == text
        assert meta["file_name"] == doc_key.split("/")[-1]  # the document's own metadata is kept beside them


def test_issue13_chunks_indexed_before_offsets_gain_them_without_being_replaced(
    small_corpus: SmallCorpus, realm: str
) -> None:
    engine = small_corpus.engine()
    stage_chunks(engine, realm, "main")
    with db.connect(engine.dsn) as conn:  # as an earlier release stored them
        conn.execute(
            sql.SQL(
                "UPDATE {}.documents SET metadata = metadata - 'char_start' - 'char_end', "
                "doc_fingerprint = NULL"
            ).format(sql.Identifier(schema_for(realm)))
        )
    ids = _rows(engine.dsn, realm, "SELECT id FROM {s}.documents ORDER BY id")
    meta = stage_chunks(engine, realm, "main").metadata
    assert meta["documents_unchanged"] == 2 and meta["chunks_inserted"] == 0
    assert _rows(engine.dsn, realm, "SELECT id FROM {s}.documents ORDER BY id") == ids  # nothing re-extracted
    assert all("char_start" in m for (m,) in _rows(engine.dsn, realm, "SELECT metadata FROM {s}.documents"))


# -- issue 13, item 2: one bad document never blocks the others ----------------------------------------


def _spoil(corpus: SmallCorpus) -> dict[str, str]:
    """Four bad files beside the two good ones: doc_key → the reason's keyword."""
    docs = corpus.root / "docs"
    (docs / "03_empty.txt").write_text("  \n\n", encoding="utf-8")
    (docs / "04_image.txt").write_bytes(b"GIF89a\x00\x01\x02binary")
    (docs / "05_latin1.txt").write_bytes("café au lait".encode("latin-1"))
    (docs / "06_moved.txt").symlink_to(docs / "moved-away.txt")
    return {
        "03_empty.txt": "empty",
        "04_image.txt": "binary",
        "05_latin1.txt": "UTF-8",
        "06_moved.txt": "cannot be read",
    }


def test_issue13_bad_documents_are_reported_and_skipped_and_every_other_is_indexed(
    small_corpus: SmallCorpus, realm: str
) -> None:
    bad = _spoil(small_corpus)
    result = stage_chunks(small_corpus.engine(), realm, "main")
    meta = result.metadata
    assert meta["documents"] == 2 and meta["documents_added"] == 2 and meta["documents_skipped"] == 4
    reasons = {r["doc_key"]: r["reason"] for r in meta["skipped_documents_sample"]}
    assert set(reasons) == set(bad)
    assert all(word in reasons[key] for key, word in bad.items()), reasons
    passed, check = result.checks[SKIPPED_CHECK]
    assert not passed and check["documents_skipped"] == 4
    keys = {
        k for (k,) in _rows(small_corpus.engine().dsn, realm, "SELECT DISTINCT doc_key FROM {s}.documents")
    }
    assert keys == {"01_babbage.txt", "02_lovelace.txt"}


def test_issue13_an_indexed_document_whose_file_becomes_unreadable_keeps_its_chunks(
    small_corpus: SmallCorpus, realm: str, caplog: pytest.LogCaptureFixture
) -> None:
    engine = small_corpus.engine()
    stage_chunks(engine, realm, "main")
    before = _rows(
        engine.dsn, realm, "SELECT id, text FROM {s}.documents WHERE doc_key = '02_lovelace.txt' ORDER BY id"
    )
    lovelace = small_corpus.root / "docs" / "02_lovelace.txt"
    lovelace.write_bytes(b"\x80\x81 no longer UTF-8")
    with caplog.at_level(logging.WARNING):
        meta = stage_chunks(engine, realm, "main").metadata
    assert meta["documents_removed"] == 0 and meta["skipped_documents_kept"] == 1
    # a trial read "documents 3 (... 1 kept)" of a space holding 4 and "document skipped" of one kept
    assert meta["documents"] == 2 and meta["documents_unchanged"] == 1
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert [m.split(": ")[0] for m in said if str(lovelace) in m] == ["document unreadable, kept as indexed"]
    assert meta["skipped_documents_sample"][0]["kept"] is True
    assert (
        _rows(
            engine.dsn,
            realm,
            "SELECT id, text FROM {s}.documents WHERE doc_key = '02_lovelace.txt' ORDER BY id",
        )
        == before
    )
    lovelace.unlink()  # gone from the sources: now it is removed
    meta = stage_chunks(engine, realm, "main").metadata
    assert meta["documents_removed"] == 1 and meta["documents_skipped"] == 0


def test_issue13_a_run_in_which_every_document_is_refused_raises_and_changes_nothing(
    small_corpus: SmallCorpus, realm: str
) -> None:
    engine = small_corpus.engine()
    stage_chunks(engine, realm, "main")
    for p in (small_corpus.root / "docs").iterdir():
        p.write_bytes(b"")
    with pytest.raises(SourceError, match=r"every document of space .* was refused \(2\)"):
        stage_chunks(engine, realm, "main")
    assert len(_rows(engine.dsn, realm, "SELECT DISTINCT doc_key FROM {s}.documents")) == 2


def _jsonl_space(corpus: SmallCorpus, realm: str, lines: list[str]) -> Path:
    path = corpus.root / "news.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    cfg = yaml.safe_load(corpus.config.read_text())
    cfg["realms"][realm]["spaces"]["news"] = {"sources": [{"path": "news.jsonl", "key_field": "url"}]}
    corpus.config.write_text(yaml.safe_dump(cfg))
    return path


def test_issue13_a_bad_jsonl_line_is_skipped_and_an_unknown_key_withholds_removals(
    small_corpus: SmallCorpus, realm: str
) -> None:
    good = [
        json.dumps(
            {"url": f"https://example.org/{i}", "title": f"Note {i}", "text": f"Ada Lovelace wrote note {i}."}
        )
        for i in range(3)
    ]
    path = _jsonl_space(small_corpus, realm, good)
    engine = small_corpus.engine()
    assert stage_chunks(engine, realm, "news").metadata["documents_added"] == 3
    path.write_text(
        "\n".join(
            [
                good[0],
                '{"url": "https://example.org/1", "title": "Note 1", "text": ',
                good[2],
                '["not", "an", "object"]',
                json.dumps({"url": "https://example.org/9", "title": "Empty"}),
            ]
        )
        + "\n"
    )
    meta = stage_chunks(engine, realm, "news").metadata
    assert meta["documents"] == 2 and meta["documents_skipped"] == 3
    assert (
        meta["documents_removed"] == 0 and meta["removals_withheld"] == 1
    )  # line 2's key cannot be known: kept
    where = {
        r["where"].rsplit("/", 1)[-1]: (r["doc_key"], r["reason"]) for r in meta["skipped_documents_sample"]
    }
    assert where["news.jsonl:2"] == (None, "is not JSON (Expecting value)")
    assert where["news.jsonl:4"] == (None, "is not a JSON object")
    assert where["news.jsonl:5"] == ("https://example.org/9", "has no text in field 'text'")
    assert (
        len(_rows(engine.dsn, realm, "SELECT DISTINCT doc_key FROM {s}.documents WHERE space = 'news'")) == 3
    )


def test_issue13_the_skipped_documents_check_warns_without_blocking_the_run(
    small_corpus: SmallCorpus, realm: str
) -> None:
    import dagster as dg

    from pgrag_dag.assets.partitions import add_partitions
    from pgrag_dag.assets.stages import build_assets
    from pgrag_dag.resources.engine import PgragResource

    _spoil(small_corpus)
    key = f"{realm}.main"
    with dg.instance_for_test() as instance:
        add_partitions(instance, [key])
        result = dg.materialize(
            build_assets(small_corpus.settings()),
            partition_key=key,
            instance=instance,
            selection=dg.AssetSelection.assets("chunks"),
            resources={"pgrag": PgragResource(config_path=str(small_corpus.config))},
            raise_on_error=False,
        )
        assert result.success
        check = next(e for e in result.get_asset_check_evaluations() if e.check_name == SKIPPED_CHECK)
        assert not check.passed and check.severity == dg.AssetCheckSeverity.WARN
        assert check.metadata["documents_skipped"].value == 4
        mat = result.get_asset_materialization_events()[0].materialization.metadata  # type: ignore[union-attr]
        assert mat["documents_skipped"].value == 4 and "skipped_documents_sample" in mat


# -- issue 13, items 1 and 7: keys, titles, texts and metadata of any size and content ----------------

LONG_URL = "https://example.org/?q=" + "".join(
    hashlib.sha256(str(i).encode()).hexdigest() for i in range(200)
)


def test_issue13_a_doc_key_past_the_btree_limit_is_indexed_re_indexed_and_deleted(
    small_corpus: SmallCorpus, realm: str
) -> None:
    from pgrag_dag.pipeline import delete_document

    _jsonl_space(
        small_corpus,
        realm,
        [
            json.dumps({"url": LONG_URL, "title": "漢字 " * 300, "text": "Ada Lovelace wrote."}),
            json.dumps({"url": "https://example.org/short", "title": "Short", "text": "Babbage."}),
        ],
    )
    engine = small_corpus.engine()
    assert stage_chunks(engine, realm, "news").metadata["documents_added"] == 2
    assert _rows(
        engine.dsn,
        realm,
        "SELECT doc_key FROM {s}.documents WHERE space = 'news' AND doc_key = %s",
        (LONG_URL,),
    )
    again = stage_chunks(engine, realm, "news").metadata
    assert again["documents_unchanged"] == 2 and again["chunks_inserted"] == 0
    delete_document(engine, realm, "news", LONG_URL)
    assert _rows(engine.dsn, realm, "SELECT DISTINCT doc_key FROM {s}.documents WHERE space = 'news'") == [
        ("https://example.org/short",)
    ]


def test_issue13_nul_and_lone_surrogates_in_a_jsonl_record_never_reach_postgresql(
    small_corpus: SmallCorpus, realm: str
) -> None:
    rec = {
        "url": "https://example.org/\u0000x\ud800",
        "title": "Ada\u0000 \ud800Lovelace",
        "text": "Ada\u0000 Lovelace wrote \udfffnotes.",
        "tag": "a\u0000b",
    }
    path = _jsonl_space(small_corpus, realm, [json.dumps(rec)])
    cfg = yaml.safe_load(small_corpus.config.read_text())
    cfg["realms"][realm]["spaces"]["news"]["sources"][0]["metadata_fields"] = ["tag"]
    small_corpus.config.write_text(yaml.safe_dump(cfg))
    meta = stage_chunks(small_corpus.engine(), realm, "news").metadata
    assert meta["documents_added"] == 1 and meta["documents_cleaned"] == 1 and path.exists()
    ((key, title, text, stored),) = _rows(
        small_corpus.engine().dsn,
        realm,
        "SELECT doc_key, title, text, metadata FROM {s}.documents WHERE space = 'news'",
    )
    assert (key, title, text) == (
        "https://example.org/x\\ud800",
        "Ada \ufffdLovelace",
        "Ada Lovelace wrote \ufffdnotes.",
    )
    assert stored["tag"] == "ab"
    assert "NUL (U+0000) removed" in meta["cleaned_documents_sample"][0]["reason"]


def test_issue15_a_document_read_as_it_was_chunked_is_not_chunked_again(
    small_corpus: SmallCorpus, realm: str
) -> None:
    engine = small_corpus.engine()
    stage_chunks(engine, realm, "main")
    meta = stage_chunks(engine, realm, "main").metadata
    assert meta["documents"] == 2 and meta["documents_chunked"] == 0 and meta["documents_unchanged"] == 2
    assert meta["chunks"] > 0 and meta["rows_changed"] == 0
    first = sorted(small_corpus.root.joinpath("docs").iterdir())[0]
    first.write_text(
        first.read_text(encoding="utf-8") + "\n\nBabbage also studied ciphers.", encoding="utf-8"
    )
    meta = stage_chunks(engine, realm, "main").metadata
    assert (
        meta["documents_chunked"] == 1
        and meta["documents_replaced"] == 1
        and meta["documents_unchanged"] == 1
    )
