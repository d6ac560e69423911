"""Reading a space's document sources into a documents frame (paper §3.2, §5.5).

Frame ``documents``: doc_key (str: a text file's path relative to the configuration directory; for a
JSONL record its ``key_field`` (URL or id), else its title, made composite with file and line when
titles repeat — §5.5, §8.11),
title (str), source (str, the same relative path, shown to the model), doc_order (int, 0-based, from the space's order rule),
text (str, UTF-8, LF line ends), doc_hash (str, SHA-256 hex of text), metadata (str, JSON).
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from typing import Any
from pathlib import Path

import polars as pl

from pgrag_dag.config import Settings, SourceSpec, SpaceSpec
from pgrag_dag.errors import ConfigurationError, SourceError

DOCUMENT_COLUMNS = ["doc_key", "title", "source", "doc_order", "text", "doc_hash", "metadata"]


def _files(settings: Settings, src: SourceSpec, *, allow_empty: bool = False) -> list[Path]:
    """The files ``src`` names; with ``allow_empty`` a missing path or an empty glob names none."""
    path = settings.resolve(src.path)
    if path.is_file():
        return [path]
    if not path.is_dir():
        if allow_empty:
            return []
        raise ConfigurationError(f"source path {path} does not exist")
    matched = sorted(path.glob(src.glob))
    broken = [p for p in matched if p.is_symlink() and not p.exists()]
    if broken:
        raise SourceError(str(broken[0]), "is a broken symbolic link")
    found = [p for p in matched if p.is_file()]
    if not found and not allow_empty:
        raise ConfigurationError(f"source {path} matches no file for glob {src.glob!r}")
    return found


def list_source_files(settings: Settings, spec: SpaceSpec) -> list[Path]:
    """Every file a space's sources name: by file name across all sources for ``order="filename"``,
    else in the sources' order (sorted within each). Raises :class:`ConfigurationError` for a missing
    path or an empty glob, :class:`SourceError` for a broken link."""
    files = [p for src in spec.sources for p in _files(settings, src)]
    if spec.order == "filename":
        files.sort(key=lambda p: (p.name, str(p)))
    return files


def read_document(path: Path) -> str:
    """Read one text document: UTF-8 (BOM stripped), CRLF/CR normalised to LF.

    Raises :class:`SourceError` naming the file when it is unreadable, binary, not UTF-8 or empty.
    """
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SourceError(str(path), f"cannot be read ({exc.strerror or exc})") from exc
    if b"\x00" in data:
        raise SourceError(str(path), "is binary (contains NUL bytes), not a text document")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise SourceError(str(path), f"is not valid UTF-8 text (byte {exc.start})") from exc
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if not text.strip():
        raise SourceError(str(path), "is empty")
    return text


def title_for(path: Path) -> str:
    """A document title from its file name: ``Ada_Lovelace.txt`` → ``Ada Lovelace``."""
    return path.stem.replace("_", " ").strip()


def _key(settings: Settings, path: Path) -> str:
    try:
        return str(path.relative_to(settings.config_dir.resolve()))
    except ValueError:
        return str(path)


def _jsonl_documents(settings: Settings, src: SourceSpec, path: Path) -> list[dict[str, Any]]:
    """One document per line of a JSONL file; raises :class:`SourceError` naming ``file:line``."""
    docs, titles = [], Counter[str]()
    text = read_document(path)
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            raise SourceError(where, f"is not JSON ({exc.msg})") from None
        if not isinstance(rec, dict):
            raise SourceError(where, "is not a JSON object")
        body = rec.get(src.text_field)
        if not isinstance(body, str) or not body.strip():
            raise SourceError(where, f"has no text in field {src.text_field!r}")
        title = str(rec.get(src.title_field) or f"{path.stem} {lineno}")
        titles[title] += 1
        key = rec.get(src.key_field) if src.key_field else None
        docs.append({"key": str(key) if key else None, "title": title, "text": body.replace("\r\n", "\n"),
                     "metadata": {f: rec.get(f) for f in src.metadata_fields if f in rec} | {"line": lineno},
                     "file": path})
    for d in docs:  # §5.5/§8.11: the URL or id, else the title — made composite when titles repeat
        if d["key"] is None:
            d["key"] = d["title"] if titles[d["title"]] == 1 else f"{d['title']}#{_key(settings, path)}:{d['metadata']['line']}"
    return docs


def load_documents(settings: Settings, realm: str, space: str, *, allow_empty: bool = False) -> pl.DataFrame:
    """Read every document of ``realm``/``space`` into the ``documents`` frame (columns above).

    All files are read before anything is written, so a bad file fails the run with nothing changed.
    With ``allow_empty`` a source whose path is missing or whose glob matches nothing names no document.
    Raises :class:`SourceError` (a bad file or line) or :class:`ConfigurationError` (a bad source, a
    duplicate doc_key, a missing order field).
    """
    spec = settings.space_spec(realm, space)
    found: list[dict[str, Any]] = []
    for src in spec.sources:
        for path in _files(settings, src, allow_empty=allow_empty):
            if src.format == "jsonl" or (src.format == "auto" and path.suffix == ".jsonl"):
                found += _jsonl_documents(settings, src, path)
            else:
                found.append({"key": _key(settings, path), "title": title_for(path), "text": read_document(path),
                              "metadata": {"file_name": path.name}, "file": path})
    if spec.order == "filename":
        found.sort(key=lambda d: (d["file"].name, str(d["file"]), d["metadata"].get("line", 0)))
    elif spec.order == "metadata":
        missing = [d["key"] for d in found if d["metadata"].get(spec.order_field) is None]
        if missing:
            raise ConfigurationError(f"order_field {spec.order_field!r} is missing for documents {missing[:3]}")
        found.sort(key=lambda d: (str(d["metadata"][spec.order_field]), d["file"].name, d["metadata"].get("line", 0)))
    keys = Counter(d["key"] for d in found)
    dupes = [k for k, n in keys.items() if n > 1]
    if dupes:
        raise ConfigurationError(f"space {realm}.{space} has documents with the same doc_key: {dupes[:3]}")
    rows = [{"doc_key": d["key"], "title": d["title"], "source": d["key"], "doc_order": order, "text": d["text"],
             "doc_hash": hashlib.sha256(d["text"].encode("utf-8")).hexdigest(),
             "metadata": json.dumps(d["metadata"], default=str)} for order, d in enumerate(found)]
    return pl.DataFrame(rows, schema={c: pl.Int64 if c == "doc_order" else pl.String for c in DOCUMENT_COLUMNS})
