"""Reading a space's document sources into a documents frame (paper §3.2, §5.5).

Frame ``documents``: doc_key (str, the source path relative to the configuration directory),
title (str), source (str, the same relative path, shown to the model), doc_order (int, 0-based, from the space's order rule),
text (str, UTF-8, LF line ends), doc_hash (str, SHA-256 hex of text), metadata (str, JSON).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import polars as pl

from pgrag_dag.config import Settings, SpaceSpec
from pgrag_dag.errors import ConfigurationError, SourceError

DOCUMENT_COLUMNS = ["doc_key", "title", "source", "doc_order", "text", "doc_hash", "metadata"]


def list_source_files(settings: Settings, spec: SpaceSpec) -> list[Path]:
    """Every file a space's sources name, in document order (§5.2).

    ``order="filename"`` sorts by file name across all sources; ``"listed"`` keeps the sources' order
    and sorts within each. Raises :class:`ConfigurationError` for a missing path or an empty glob.
    """
    files: list[Path] = []
    for src in spec.sources:
        path = settings.resolve(src.path)
        if path.is_file():
            found = [path]
        elif path.is_dir():
            matched = sorted(path.glob(src.glob))
            broken = [p for p in matched if p.is_symlink() and not p.exists()]
            if broken:
                raise SourceError(str(broken[0]), "is a broken symbolic link")
            found = [p for p in matched if p.is_file()]
            if not found:
                raise ConfigurationError(f"source {path} matches no file for glob {src.glob!r}")
        else:
            raise ConfigurationError(f"source path {path} does not exist")
        files.extend(found)
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


def load_documents(settings: Settings, realm: str, space: str) -> pl.DataFrame:
    """Read every document of ``realm``/``space`` into the ``documents`` frame (columns above).

    All files are read before anything is written, so a bad file fails the run with nothing changed.
    """
    spec = settings.space_spec(realm, space)
    rows = []
    for order, path in enumerate(list_source_files(settings, spec)):
        text = read_document(path)
        try:
            key = str(path.relative_to(settings.config_dir.resolve()))
        except ValueError:
            key = str(path)
        rows.append(
            {
                "doc_key": key,
                "title": title_for(path),
                "source": key,
                "doc_order": order,
                "text": text,
                "doc_hash": hashlib.sha256(text.encode("utf-8")).hexdigest(),
                "metadata": json.dumps({"file_name": path.name}),
            }
        )
    return pl.DataFrame(rows, schema={c: pl.Int64 if c == "doc_order" else pl.String for c in DOCUMENT_COLUMNS})
