"""Tests for pgrag_dag.ingest.sources: reading document sources fail-closed (paper §3.2, §3.5, §5.2)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from pgrag_dag.config import RealmSpec, Settings, SourceSpec, SpaceSpec
from pgrag_dag.errors import ConfigurationError, SourceError
from pgrag_dag.ingest.sources import (
    DOCUMENT_COLUMNS,
    list_source_files,
    load_documents,
    read_document,
    without_last_file,
)


def _settings(tmp_path: Path, *sources: SourceSpec, order: str = "filename") -> Settings:
    return Settings(
        config_dir=tmp_path,
        realms={"r1": RealmSpec(spaces={"s1": SpaceSpec(sources=list(sources), order=order)})},  # type: ignore[arg-type]
    )


def test_crlf_cr_and_bom_are_normalised(tmp_path: Path) -> None:
    p = tmp_path / "doc.txt"
    p.write_bytes(b"\xef\xbb\xbfLine one\r\nLine two\rLine three\r\n")
    assert read_document(p) == "Line one\nLine two\nLine three\n"


def test_utf8_text_is_kept_verbatim(tmp_path: Path) -> None:
    p = tmp_path / "doc.txt"
    p.write_text("Ampère’s law\n\nnaïve café\n", encoding="utf-8")
    assert read_document(p) == "Ampère’s law\n\nnaïve café\n"


def test_a_binary_file_raises_source_error_naming_it(tmp_path: Path) -> None:
    p = tmp_path / "image.txt"
    p.write_bytes(b"GIF89a\x00\x01\x02text")
    with pytest.raises(SourceError) as info:
        read_document(p)
    assert info.value.path == str(p)
    assert str(p) in str(info.value) and "binary" in str(info.value)


def test_non_utf8_text_raises_source_error_naming_it_and_the_byte(tmp_path: Path) -> None:
    p = tmp_path / "latin1.txt"
    p.write_bytes("café au lait".encode("latin-1"))
    with pytest.raises(SourceError) as info:
        read_document(p)
    assert info.value.path == str(p)
    assert "UTF-8" in str(info.value) and "byte 3" in str(info.value)


@pytest.mark.parametrize(
    "content", [b"", b"   \r\n\t\n  ", b"\xef\xbb\xbf\n\n"], ids=["empty", "whitespace", "bom-only"]
)
def test_an_empty_or_blank_document_raises_source_error(tmp_path: Path, content: bytes) -> None:
    p = tmp_path / "blank.txt"
    p.write_bytes(content)
    with pytest.raises(SourceError) as info:
        read_document(p)
    assert info.value.path == str(p)
    assert "empty" in str(info.value)


def test_an_unreadable_path_raises_source_error_naming_it(tmp_path: Path) -> None:
    # tests run as root, so chmod 000 would not block a read: a dangling symlink and a directory really fail
    dangling = tmp_path / "gone.txt"
    dangling.symlink_to(tmp_path / "never-written.txt")
    with pytest.raises(SourceError) as info:
        read_document(dangling)
    assert info.value.path == str(dangling) and "cannot be read" in str(info.value)

    directory = tmp_path / "folder.txt"
    directory.mkdir()
    with pytest.raises(SourceError) as info:
        read_document(directory)
    assert info.value.path == str(directory) and "cannot be read" in str(info.value)


def test_a_dangling_symlink_named_as_a_source_raises_configuration_error_naming_its_target(
    tmp_path: Path,
) -> None:
    # Settings.resolve() follows the link, so the error names the missing target, not the link
    dangling = tmp_path / "gone.txt"
    dangling.symlink_to(tmp_path / "never-written.txt")
    settings = _settings(tmp_path, SourceSpec(path=Path("gone.txt")))
    with pytest.raises(ConfigurationError) as info:
        list_source_files(settings, settings.space_spec("r1", "s1"))
    assert str(tmp_path / "never-written.txt") in str(info.value) and "does not exist" in str(info.value)


def test_a_dangling_symlink_matched_by_the_glob_fails_the_run_naming_it(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text("Ada Lovelace.\n", encoding="utf-8")
    (corpus / "b.txt").symlink_to(corpus / "moved-away.txt")
    settings = _settings(tmp_path, SourceSpec(path=Path("corpus")))
    with pytest.raises((SourceError, ConfigurationError), match="b.txt"):
        load_documents(settings, "r1", "s1")


def test_a_missing_source_path_raises_configuration_error_naming_it(tmp_path: Path) -> None:
    settings = _settings(tmp_path, SourceSpec(path=Path("no-such-dir")))
    with pytest.raises(ConfigurationError) as info:
        list_source_files(settings, settings.space_spec("r1", "s1"))
    assert str(tmp_path / "no-such-dir") in str(info.value) and "does not exist" in str(info.value)


def test_a_glob_matching_nothing_raises_configuration_error_naming_it(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "notes.md").write_text("# not matched\n", encoding="utf-8")
    (corpus / "sub.txt").mkdir()  # a directory matching the glob is not a file
    settings = _settings(tmp_path, SourceSpec(path=Path("corpus"), glob="*.txt"))
    with pytest.raises(ConfigurationError) as info:
        list_source_files(settings, settings.space_spec("r1", "s1"))
    assert str(corpus) in str(info.value) and "'*.txt'" in str(info.value)


def test_documents_are_ordered_by_file_name_across_sources(tmp_path: Path) -> None:
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    (tmp_path / "one" / "b_second.txt").write_text("Second.\n", encoding="utf-8")
    (tmp_path / "one" / "d_fourth.txt").write_text("Fourth.\n", encoding="utf-8")
    (tmp_path / "two" / "a_first.txt").write_text("First.\n", encoding="utf-8")
    (tmp_path / "two" / "c_third.txt").write_text("Third.\r\n", encoding="utf-8")
    settings = _settings(tmp_path, SourceSpec(path=Path("one")), SourceSpec(path=Path("two")))

    docs = load_documents(settings, "r1", "s1")
    assert docs.columns == DOCUMENT_COLUMNS
    assert docs.select("doc_key", "doc_order", "title", "text").rows() == [
        ("a_first.txt", 0, "a first", "First.\n"),  # issue 16: keys relative to their source's directory
        ("b_second.txt", 1, "b second", "Second.\n"),
        ("c_third.txt", 2, "c third", "Third.\n"),
        ("d_fourth.txt", 3, "d fourth", "Fourth.\n"),
    ]
    assert docs["source"].to_list() == docs["doc_key"].to_list()
    assert docs["doc_hash"].to_list() == [hashlib.sha256(t.encode()).hexdigest() for t in docs["text"]]
    assert json.loads(docs["metadata"][0]) == {"file_name": "a_first.txt"}


def test_listed_order_keeps_the_sources_order_and_sorts_within_each(tmp_path: Path) -> None:
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    (tmp_path / "one" / "z.txt").write_text("Z.\n", encoding="utf-8")
    (tmp_path / "one" / "y.txt").write_text("Y.\n", encoding="utf-8")
    (tmp_path / "two" / "a.txt").write_text("A.\n", encoding="utf-8")
    settings = _settings(tmp_path, SourceSpec(path=Path("one")), SourceSpec(path=Path("two")), order="listed")
    files = list_source_files(settings, settings.space_spec("r1", "s1"))
    assert [os.path.relpath(f, tmp_path) for f in files] == ["one/y.txt", "one/z.txt", "two/a.txt"]


def test_without_last_file_keeps_the_other_documents_keys_and_order(tmp_path: Path) -> None:
    """Issue 14 (the demo's belief instant): a space read without its last file gives the same doc_key
    and doc_order to every other document, across sources, and names the left-out file's doc_key."""
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    for rel in ("one/b.txt", "one/d.txt", "two/a.txt", "two/c.txt"):
        (tmp_path / rel).write_text(f"Text of {rel}.\n", encoding="utf-8")
    settings = _settings(tmp_path, SourceSpec(path=Path("one")), SourceSpec(path=Path("two")))
    first, withheld = without_last_file(settings, settings.space_spec("r1", "s1"))
    assert withheld == "d.txt"
    assert [src.exclude for src in first.sources] == [["d.txt"], []] and first.order == "filename"
    fewer = settings.model_copy(update={"realms": {"r1": RealmSpec(spaces={"s1": first})}})
    assert (
        load_documents(fewer, "r1", "s1").select("doc_key", "doc_order").rows()
        == load_documents(settings, "r1", "s1").select("doc_key", "doc_order").rows()[:-1]
        == [("a.txt", 0), ("b.txt", 1), ("c.txt", 2)]
    )
    by_field = SpaceSpec(sources=[SourceSpec(path=Path("one"))], order="metadata", order_field="year")
    with pytest.raises(ConfigurationError, match="orders by metadata"):
        without_last_file(settings, by_field)
    with pytest.raises(ConfigurationError, match="names 1 file"):
        without_last_file(settings, SpaceSpec(sources=[SourceSpec(path=Path("two/a.txt"))]))


def test_one_bad_file_fails_the_whole_load(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text("Fine.\n", encoding="utf-8")
    (corpus / "b.txt").write_bytes(b"\x00\x01binary")
    settings = _settings(tmp_path, SourceSpec(path=Path("corpus")))
    with pytest.raises(SourceError) as info:
        load_documents(settings, "r1", "s1")
    assert info.value.path == str(corpus / "b.txt")


# -- issue 13: any Unicode, any bytes; one bad document never costs the others ------------------------


def test_issue13_read_sources_skips_bad_files_with_their_reasons_and_keeps_the_order_of_the_rest(
    tmp_path: Path,
) -> None:
    from pgrag_dag.ingest.sources import read_sources

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text("First.\n", encoding="utf-8")
    (corpus / "b.txt").write_bytes(b"\x00\x01binary")
    (corpus / "c.txt").write_text("Third.\n", encoding="utf-8")
    (corpus / "d.txt").symlink_to(corpus / "gone.txt")
    read = read_sources(_settings(tmp_path, SourceSpec(path=Path("corpus"))), "r1", "s1")
    assert read.documents.select("doc_key", "doc_order").rows() == [("a.txt", 0), ("c.txt", 2)]
    assert [(s.doc_key, s.reason) for s in read.skipped] == [
        ("b.txt", "is binary (contains NUL bytes), not a text document"),
        ("d.txt", "cannot be read (a broken symbolic link)"),
    ]


@pytest.mark.parametrize("encoding", ["utf-8-sig", "utf-16", "utf-32"])
def test_issue13_a_leading_byte_order_mark_is_stripped_from_text_files(tmp_path: Path, encoding: str) -> None:
    p = tmp_path / "doc.txt"
    p.write_bytes("Ampère’s law\r\n\r\n李白 שלום 👩‍🔬\r\n".encode(encoding))
    assert read_document(p) == "Ampère’s law\n\n李白 שלום 👩‍🔬\n"


def test_issue13_a_leading_byte_order_mark_is_stripped_from_jsonl_files_lines_and_texts(
    tmp_path: Path,
) -> None:
    lines = [
        json.dumps({"title": "A", "text": "\ufeffAlpha."}),
        "\ufeff" + json.dumps({"title": "B", "text": "Beta."}),
    ]
    (tmp_path / "n.jsonl").write_bytes(b"\xef\xbb\xbf" + "\n".join(lines).encode("utf-8"))
    docs = load_documents(_settings(tmp_path, SourceSpec(path=Path("n.jsonl"))), "r1", "s1")
    assert docs.select("doc_key", "text").rows() == [("A", "Alpha."), ("B", "Beta.")]


def test_issue13_nul_and_lone_surrogates_in_jsonl_keys_titles_texts_and_metadata_are_cleaned(
    tmp_path: Path,
) -> None:
    from pgrag_dag.ingest.sources import read_sources

    rec = {
        "url": "https://example.org/a\u0000b\ud800",
        "title": "Ada\u0000 Lovelace",
        "text": "Ada\u0000 wrote \udc80notes.",
        "tags": {"k\u0000ey": ["v\ud83d", "ok"]},
    }
    (tmp_path / "n.jsonl").write_text(
        json.dumps(rec) + "\n", encoding="utf-8"
    )  # json escapes: \u0000, \ud800
    src = SourceSpec(path=Path("n.jsonl"), key_field="url", metadata_fields=["tags"])
    read = read_sources(_settings(tmp_path, src), "r1", "s1")
    row = read.documents.row(0, named=True)
    assert row["doc_key"] == "https://example.org/ab\\ud800"  # a key stays distinct: escaped, not replaced
    assert row["title"] == "Ada Lovelace" and row["text"] == "Ada wrote \ufffdnotes."
    assert json.loads(row["metadata"]) == {"tags": {"key": ["v\ufffd", "ok"]}, "line": 1}
    for value in row.values():
        str(value).encode("utf-8")  # storable: no lone surrogate left
        assert "\x00" not in str(value)
    assert [c.doc_key for c in read.cleaned] == [row["doc_key"]]
    assert "NUL (U+0000) removed" in read.cleaned[0].reason and "text" in read.cleaned[0].reason


def test_issue13_a_file_name_that_is_not_utf8_becomes_an_escaped_doc_key(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / os.fsdecode(b"caf\xe9.txt")).write_text("Coffee.\n", encoding="utf-8")
    docs = load_documents(_settings(tmp_path, SourceSpec(path=Path("corpus"))), "r1", "s1")
    assert docs.select("doc_key", "title").rows() == [("caf\\xe9.txt", "caf\\xe9")]
    assert json.loads(docs["metadata"][0]) == {"file_name": "caf\\xe9.txt"}


def test_issue13_an_overlong_title_or_metadata_refuses_its_record_with_the_reason(tmp_path: Path) -> None:
    from pgrag_dag.ingest.sources import MAX_METADATA_BYTES, MAX_TITLE_CHARS, read_sources

    lines = [
        json.dumps({"title": "T" * (MAX_TITLE_CHARS + 1), "text": "Long title."}),
        json.dumps({"title": "Fat", "text": "Big metadata.", "blob": "x" * MAX_METADATA_BYTES}),
        json.dumps({"title": "Fine", "text": "Kept."}),
    ]
    (tmp_path / "n.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    read = read_sources(
        _settings(tmp_path, SourceSpec(path=Path("n.jsonl"), metadata_fields=["blob"])), "r1", "s1"
    )
    assert read.documents["doc_key"].to_list() == ["Fine"]
    assert [s.where.rsplit("/", 1)[-1] for s in read.skipped] == ["n.jsonl:1", "n.jsonl:2"]
    assert "title of 1,001 characters (at most 1,000" in read.skipped[0].reason
    assert read.skipped[1].reason.startswith("has 1,000,") and "bytes of metadata" in read.skipped[1].reason


def test_a_glob_matching_nothing_beside_one_that_names_files_lists_those(tmp_path: Path) -> None:
    """``pgrag init`` writes a source per kind (``**/*.md``, ``**/*.txt``); a folder of .txt files only must
    not make the source sensor skip the space (issue 31 trial)."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text("Ada Lovelace.\n", encoding="utf-8")
    both = (SourceSpec(path=Path("corpus"), glob="**/*.md"), SourceSpec(path=Path("corpus"), glob="**/*.txt"))
    settings = _settings(tmp_path, *both)
    assert list_source_files(settings, settings.space_spec("r1", "s1")) == [corpus / "a.txt"]
    (corpus / "a.txt").unlink()
    with pytest.raises(ConfigurationError, match="matches no file"):
        list_source_files(settings, settings.space_spec("r1", "s1"))
