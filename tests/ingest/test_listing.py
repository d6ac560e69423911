"""Tests for pgrag_dag.ingest.listing: a one-level glob is one ``os.scandir`` (issue 30) that names exactly
what ``Path.glob`` names, and the stat it takes is the file's."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from pgrag_dag.config import RealmSpec, Settings, SourceSpec, SpaceSpec
from pgrag_dag.ingest.listing import list_source_files, scan_source
from pgrag_dag.ingest.sources import read_sources
from pgrag_dag.store.work_queue import fingerprint, fingerprint_strings


def _space(root: Path) -> None:
    for name in ("b.txt", "a.txt", ".hidden.txt", "upper.TXT", "ca[t].txt", "x.md", "ab.txt"):
        (root / name).write_text(f"{name} holds text\n", encoding="utf-8")
    (root / "folder.txt").mkdir()  # a directory the glob matches: no document
    (root / "folder.txt" / "inner.txt").write_text("below the one level\n", encoding="utf-8")
    (root / "broken.txt").symlink_to(root / "missing.txt")  # named, so reading it says why it failed
    (root / "linked.txt").symlink_to(root / "a.txt")
    (root / "dirlink.txt").symlink_to(root / "folder.txt")


@pytest.mark.parametrize("pattern", ["*.txt", "*", "[ab].txt", "?.txt", "*.TXT", "ca[[]t].txt"])
def test_a_one_level_glob_names_what_path_glob_names_in_its_order(tmp_path: Path, pattern: str) -> None:
    _space(tmp_path)
    spec = SpaceSpec(sources=[SourceSpec(path=tmp_path, glob=pattern)], order="listed")
    settings = Settings(config_dir=tmp_path, realms={"r": RealmSpec(spaces={"s": spec})})
    expected = sorted(
        (p for p in tmp_path.glob(pattern) if p.is_file() or (p.is_symlink() and not p.exists())),
        key=lambda p: p.parts,
    )
    assert expected  # every pattern names something here
    assert list_source_files(settings, spec) == expected
    scanned = scan_source(settings, spec.sources[0])
    assert [Path(p) for p, _, _ in scanned] == expected
    for path, rel, st in scanned:
        assert rel == Path(path).name
        if Path(path).exists():
            assert st is not None and (st.st_size, st.st_ino) == (os.stat(path).st_size, os.stat(path).st_ino)
        else:
            assert st is None  # the broken link


def test_a_scanned_space_reads_as_before_titles_metadata_keys_and_prints(tmp_path: Path) -> None:
    (tmp_path / "Ada_Lovelace.txt").write_text("Ada wrote notes.\n", encoding="utf-8")
    (tmp_path / 'café "quoted" .txt').write_text("A name JSON must escape.\n", encoding="utf-8")
    (tmp_path / ".txt").write_text("A dot file: no suffix, no stem.\n", encoding="utf-8")
    spec = SpaceSpec(sources=[SourceSpec(path=tmp_path, glob="*.txt", key_prefix="k/")])
    settings = Settings(config_dir=tmp_path, realms={"r": RealmSpec(spaces={"s": spec})})
    docs = read_sources(settings, "r", "s").documents
    rows = {r["doc_key"]: r for r in docs.iter_rows(named=True)}
    assert rows["k/Ada_Lovelace.txt"]["title"] == "Ada Lovelace"
    assert rows["k/.txt"]["title"] == ".txt"  # as Path(".txt").stem
    quoted = rows['k/café "quoted" .txt']
    assert quoted["title"] == 'café "quoted"'
    assert quoted["metadata"] == json.dumps({"file_name": 'café "quoted" .txt'})
    assert json.loads(quoted["metadata"]) == {"file_name": 'café "quoted" .txt'}


@pytest.mark.parametrize(
    "values",
    [("a", "b"), ("café", 'say "hi"\\', "tab\there\nnew"), ("\udcff lone", "\x00nul", "\u2028", "")],
)
def test_fingerprint_strings_is_fingerprint_of_the_same_strings(values: tuple[str, ...]) -> None:
    assert fingerprint_strings(values) == fingerprint(list(values))
    assert fingerprint_strings(values) != fingerprint_strings((*values, "x"))
