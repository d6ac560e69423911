"""Reading a space's document sources into a documents frame (paper §3.2, §5.5).

Frame ``documents``: doc_key (str: a text file's path relative to its source's root — the source's
directory, or for a single-file source its file name — after the source's ``key_prefix``; for a JSONL
record its ``key_field`` (URL or id), else its title, made composite with the file's relative path and
line when titles repeat — §5.5, §8.11; issue 16: no key depends on where the configuration lives),
title (str), source (str, the same stable string, shown to the model), doc_order (int, 0-based, from the
space's order rule), text (str, UTF-8, LF line ends), doc_hash (str, SHA-256 hex of text), metadata (str,
JSON).

One bad document never costs the others (issue 13): :func:`read_sources` reads what it can and reports
every file or JSONL line it refused (:class:`SkippedDocument`: empty, binary, undecodable, unreadable,
not a JSON object, no text, a title or metadata too large) and every record whose strings it had to
clean (NUL removed, lone surrogates replaced — :mod:`pgrag_dag.storable`). A leading byte-order mark
is stripped from every file, every JSONL line and every JSONL text.
"""

from __future__ import annotations

import codecs
import contextlib
import functools
import gc
import hashlib
import json
import os
import time
from collections import Counter
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from pgrag_dag.config.sections import Settings, SourceSpec, SpaceSpec
from pgrag_dag.errors import ConfigurationError, SourceError
from pgrag_dag.ingest.listing import is_jsonl, scan_source
from pgrag_dag.ingest.listing import list_source_files as list_source_files  # re-exported: its old home
from pgrag_dag.ingest.listing import text_keys as text_keys
from pgrag_dag.ingest.listing import without_last_file as without_last_file
from pgrag_dag.storable import clean_json, clean_key, clean_text
from pgrag_dag.store.source_files import FileStat

DOCUMENT_COLUMNS = ["doc_key", "title", "source", "doc_order", "text", "doc_hash", "metadata"]
MAX_TITLE_CHARS = 1_000
"""Longest title a document may have, in characters: it is part of every prompt of its chunks and of their
full-text index (``to_tsvector`` refuses more than 1 MB). A longer one refuses the record."""
MAX_METADATA_BYTES = 1_000_000
"""Largest document metadata, in bytes of JSON (stored with every chunk). Larger refuses the record."""
_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)


@dataclass(frozen=True)
class SkippedDocument:
    """A document the run refused: ``where`` (its file, or ``file:line``), ``reason``, and ``doc_key`` —
    the key it has or would have, or ``None`` when it cannot be known (a JSONL file that cannot be read,
    a line that is no JSON object). An indexed document that is skipped is kept as it is stored."""

    where: str
    reason: str
    doc_key: str | None


@dataclass(frozen=True)
class CleanedDocument:
    """A document indexed after its strings were made storable: ``doc_key``, ``where``, what was done."""

    doc_key: str
    where: str
    reason: str


@dataclass
class Sources:
    """What :func:`read_sources` found: the ``documents`` frame, and the documents it skipped or cleaned."""

    documents: pl.DataFrame
    skipped: list[SkippedDocument] = field(default_factory=list)
    cleaned: list[CleanedDocument] = field(default_factory=list)
    earlier_keys: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """doc_key → the keys the same document may be stored under from before (issue 16: the rule of keys
    relative to the configuration's directory or absolute, and the key without the source's ``key_prefix``),
    for every document read or skipped with a known key; :mod:`pgrag_dag.pipeline.doc_keys` renames them in
    place."""
    empty_sources: list[str] = field(default_factory=list)
    """One line per source whose glob matches no file while other sources of the space name documents (its
    last file deleted: its documents leave the index like any deleted document's)."""
    files: dict[str, FileStat] = field(default_factory=dict)
    """path → :class:`~pgrag_dag.store.source_files.FileStat` of every text file read or trusted this run
    whose stat can be trusted next time (not modified within :data:`RACY_NS` of being read)."""
    unread: dict[str, str] = field(default_factory=dict)
    """doc_key → file of the documents whose text was not read, their stat matching ``known``
    (:func:`read_sources`): their ``text`` is null until :func:`read_unread` fills it."""


def _decode(path: Path) -> str:
    """A file's text: UTF-8 (BOM stripped), or UTF-16/32 when its byte-order mark says so; CRLF/CR → LF.

    Raises :class:`SourceError` naming the file when it is unreadable, a broken link or not UTF-8.
    """
    where = clean_key(str(path))
    if path.is_symlink() and not path.exists():
        raise SourceError(where, "cannot be read (a broken symbolic link)")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SourceError(where, f"cannot be read ({exc.strerror or exc})") from exc
    encoding = next((enc for bom, enc in _BOMS if data.startswith(bom)), "utf-8-sig")
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as exc:
        raise SourceError(
            where,
            f"is not valid {'UTF-8' if encoding == 'utf-8-sig' else encoding.upper()} "
            f"text (byte {exc.start})",
        ) from exc
    return text.lstrip("\ufeff").replace("\r\n", "\n").replace("\r", "\n")


def read_document(path: Path) -> str:
    """Read one text document: UTF-8 (BOM stripped; UTF-16/32 with a BOM), CRLF/CR normalised to LF.

    Raises :class:`SourceError` naming the file when it is unreadable, binary (holds NUL), not UTF-8 or empty.
    """
    text = _decode(path)
    if "\x00" in text:
        raise SourceError(clean_key(str(path)), "is binary (contains NUL bytes), not a text document")
    if not text.strip():
        raise SourceError(clean_key(str(path)), "is empty")
    return text


def title_for(path: Path) -> str:
    """A document title from its file name: ``Ada_Lovelace.txt`` → ``Ada Lovelace``."""
    return _title(path.name)


def _title(name: str) -> str:
    """:func:`title_for` of a file name (its stem as :attr:`pathlib.PurePath.stem` takes it)."""
    dot = name.rfind(".")
    stem = name[:dot] if 0 < dot < len(name) - 1 else name
    return clean_key(stem.replace("_", " ").strip())


def config_relative_key(settings: Settings, path: Path) -> str:
    """The doc_key a file had before issue 16: its path relative to the configuration's directory, else
    absolute — what stores indexed then hold (:mod:`pgrag_dag.pipeline.doc_keys` renames them)."""
    try:
        return clean_key(str(path.relative_to(_resolved(settings.config_dir))))
    except ValueError:
        return clean_key(str(path))


@functools.lru_cache(maxsize=16)
def _resolved(directory: Path) -> Path:
    # resolving walks every component with lstat: once per directory, not once per file of a 50k-file
    # source (0.7 s of an unchanged run at 100k relations, issue 30)
    return directory.resolve()


RACY_NS = 2_000_000_000
"""A file modified less than this long (ns, 2 s) before it was read may be written again within the same
modification time and size: its stat is not recorded, so the next run reads it again."""


def _text_document(
    settings: Settings,
    src: SourceSpec,
    found: tuple[str, str, os.stat_result | None],
    name: str,
    known: Mapping[str, FileStat] | None,
    number: int,
) -> dict[str, Any]:
    """One text file (``(path, relative path, stat)`` of :func:`~pgrag_dag.ingest.listing.scan_source`, its
    ``name``, and ``number``: its source's index in the space) as a found entry (see
    :func:`read_sources`); refused with its reason when bad. With ``known``, a file whose size, modification
    time and inode equal its recorded ones is not read: the entry has no text and the recorded hash — and,
    recorded under the same doc_key, no earlier keys either (it is stored under its key: issue 16's renames
    were done when it was recorded). Per file only string work and one dict (issue 30: 50k files)."""
    path, rel, st = found
    key = clean_key(src.key_prefix + rel)
    file_name = clean_key(name)
    entry: dict[str, Any] = {
        "key": key,
        "title": _title(name),
        "metadata": {"file_name": file_name},
        "meta_json": f'{{"file_name": {_json_string(file_name)}}}',  # json.dumps of ``metadata``
        "name": name,
        "path": path,
        "src": number,
    }
    if st is not None and known is not None and (seen := known.get(path)) is not None:
        if seen.size == st.st_size and seen.mtime_ns == st.st_mtime_ns and seen.inode == st.st_ino:
            entry.update(text=None, hash=seen.doc_hash)
            if seen.doc_key == key:
                entry["stat"] = seen
                return entry
            entry["stat"] = seen._replace(doc_key=key)
            entry["earlier"] = _earlier_keys(settings, path, rel)
            return entry
    entry["earlier"] = _earlier_keys(settings, path, rel)
    try:
        text = read_document(Path(path))
    except SourceError as exc:
        return entry | {"skipped": exc.reason, "where": clean_key(path)}
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    trusted = st is not None and time.time_ns() - st.st_mtime_ns >= RACY_NS
    stat = FileStat(key, st.st_size, st.st_mtime_ns, st.st_ino, digest) if trusted and st else None
    return entry | {"text": text, "hash": digest, "stat": stat}


_json_string = json.encoder.encode_basestring_ascii
"""A string as ``json.dumps`` writes it (ASCII, escaped)."""


def _earlier_keys(settings: Settings, path: str, rel: str) -> list[str]:
    """The keys a text file may be stored under from before (:attr:`Sources.earlier_keys`)."""
    return [config_relative_key(settings, Path(path)), clean_key(rel)]


def read_unread(read: Sources, docs: pl.DataFrame) -> pl.DataFrame:
    """``docs`` (rows of ``read.documents``) with the text of those :func:`read_sources` trusted unread
    (:attr:`Sources.unread`) read now and their ``doc_hash`` taken from it — a file changed without its
    size, modification time or inode changing gets its real hash here — and ``read.files`` updated to
    match. Raises :class:`SourceError` for a file that can no longer be read."""
    missing = [k for k in docs.filter(pl.col("text").is_null())["doc_key"].to_list() if k in read.unread]
    if not missing:
        return docs
    texts = {k: read_document(Path(read.unread[k])) for k in missing}
    hashes = {k: hashlib.sha256(t.encode("utf-8")).hexdigest() for k, t in texts.items()}
    for key, stat in list(read.files.items()):
        if stat.doc_key in hashes:
            read.files[key] = stat._replace(doc_hash=hashes[stat.doc_key])
    return docs.with_columns(
        text=pl.coalesce(pl.col("text"), pl.col("doc_key").replace_strict(texts, default=None)),
        doc_hash=pl.col("doc_key").replace_strict(hashes, default=pl.col("doc_hash")),
    )


def _storable(value: Any, what: str, notes: list[str]) -> Any:
    """``value`` with every string cleaned (:func:`clean_text`); what was done is added to ``notes``."""

    def clean(s: str) -> str:
        out, done = clean_text(s)
        notes.extend(f"{what}: {d}" for d in done)
        return out

    return clean_json(value, clean)


def _record(src: SourceSpec, path: Path, lineno: int, rec: dict[str, Any]) -> dict[str, Any]:
    """One JSONL record as a found entry, its strings cleaned; ``skipped`` set when it must be refused."""
    notes: list[str] = []
    raw_title = rec.get(src.title_field)
    title = _storable(str(raw_title) if raw_title else f"{clean_key(path.stem)} {lineno}", "title", notes)
    key = rec.get(src.key_field) if src.key_field else None
    entry: dict[str, Any] = {
        "key": clean_key(str(key)) if key else None,
        "title": title,
        "file": path,
        "cleaned": notes,
        "where": f"{clean_key(str(path))}:{lineno}",
        "metadata": _storable({f: rec.get(f) for f in src.metadata_fields if f in rec}, "metadata", notes)
        | {"line": lineno},
    }
    body = rec.get(src.text_field)
    if not isinstance(body, str) or not body.lstrip("\ufeff").strip():
        return entry | {"skipped": f"has no text in field {src.text_field!r}"}
    if len(title) > MAX_TITLE_CHARS:
        return entry | {
            "skipped": f"has a title of {len(title):,} characters (at most {MAX_TITLE_CHARS:,}; "
            f"is title_field {src.title_field!r} the right field?)"
        }
    size = len(json.dumps(entry["metadata"], default=str).encode("utf-8"))
    if size > MAX_METADATA_BYTES:
        return entry | {"skipped": f"has {size:,} bytes of metadata (at most {MAX_METADATA_BYTES:,})"}
    text = _storable(body.lstrip("\ufeff").replace("\r\n", "\n").replace("\r", "\n"), "text", notes)
    return entry | {"text": text}


def _jsonl_documents(settings: Settings, src: SourceSpec, path: Path, rel: str) -> list[dict[str, Any]]:
    """One found entry per line of a JSONL file (a bad line is an entry refused with ``file:line`` and its
    reason); a file that cannot be read or is empty is one refused entry without a key."""
    where = clean_key(str(path))
    try:
        text = _decode(path)
    except SourceError as exc:
        return [
            {"key": None, "file": path, "where": where, "metadata": {}, "cleaned": [], "skipped": exc.reason}
        ]
    if not text.strip():
        return [
            {"key": None, "file": path, "where": where, "metadata": {}, "cleaned": [], "skipped": "is empty"}
        ]
    docs: list[dict[str, Any]] = []
    titles = Counter[str]()
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.lstrip("\ufeff")  # concatenated files carry their byte-order marks along
        if not line.strip():
            continue
        bad: dict[str, Any] = {
            "key": None,
            "file": path,
            "where": f"{where}:{lineno}",
            "metadata": {"line": lineno},
            "cleaned": [],
        }
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            docs.append(bad | {"skipped": f"is not JSON ({exc.msg})"})
            continue
        if not isinstance(rec, dict):
            docs.append(bad | {"skipped": "is not a JSON object"})
            continue
        entry = _record(src, path, lineno, rec)
        titles[entry["title"]] += 1
        docs.append(entry)
    for d in docs:  # §5.5/§8.11: the URL or id, else the title — made composite when titles repeat
        if d["key"] is None and "title" in d:
            if titles[d["title"]] == 1:
                d["key"] = d["title"]
            else:
                line = d["metadata"]["line"]
                d["key"] = f"{d['title']}#{clean_key(rel)}:{line}"
                d["earlier"] = [f"{d['title']}#{config_relative_key(settings, path)}:{line}"]
        if d["key"] is not None and src.key_prefix:
            d["earlier"] = [*d.get("earlier", []), d["key"]]
            d["key"] = clean_key(src.key_prefix + d["key"])
    return docs


def read_sources(
    settings: Settings,
    realm: str,
    space: str,
    *,
    allow_empty: bool = False,
    known: Mapping[str, FileStat] | None = None,
) -> Sources:
    """Read every document of ``realm``/``space``: the ``documents`` frame (columns above) of those that
    could be read, and the ones skipped (with their reasons) or cleaned. Nothing is written.

    Sources read by change (issue 30): with ``known`` (path → :class:`FileStat` recorded by an earlier run,
    :func:`pgrag_dag.store.source_files.load_stats`), a text file whose size, modification time and inode are
    unchanged is not read — its row has a null ``text`` and the recorded ``doc_hash``, listed in
    :attr:`Sources.unread` (:func:`read_unread` reads them where needed). JSONL files are always read.

    Skipped documents keep their place in the order (``order`` ``filename`` or ``listed``), so the
    others' ``doc_order`` does not shift. With ``allow_empty`` a source whose path is missing or whose
    glob matches nothing names no document; without it, a glob matching nothing is refused only when no
    source of the space names a document (else it is listed in ``empty_sources``). Raises
    :class:`ConfigurationError` for a bad source (a missing path), a space whose sources name nothing, a
    duplicate doc_key or a missing order field.
    """
    with _gc_paused():  # 50k entries: the collector's passes over them cost a third of the run (issue 30)
        return _read_sources(settings, realm, space, allow_empty=allow_empty, known=known)


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """The cyclic garbage collector off for the block (what it builds holds no cycles), back on after."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _read_sources(
    settings: Settings,
    realm: str,
    space: str,
    *,
    allow_empty: bool,
    known: Mapping[str, FileStat] | None,
) -> Sources:
    """:func:`read_sources`, with the collector as the caller left it."""
    spec = settings.space_spec(realm, space)
    named = [scan_source(settings, src, allow_empty=True) for src in spec.sources]
    empty: list[str] = []
    for src, files in zip(spec.sources, named):
        if files or allow_empty:
            continue
        try:  # the error a source naming nothing raises on its own
            scan_source(settings, src)
        except ConfigurationError as exc:
            # a glob matching nothing beside sources that name documents: its last file was deleted (normal);
            # a missing path, or a space whose every source names nothing, is refused
            if not settings.resolve(src.path).exists():  # a moved folder, or a registered file since deleted
                raise ConfigurationError(
                    f"{exc}; if it was removed on purpose, take the source out of the configuration "
                    "(its documents then leave the index; for the space's last source, "
                    "`pgrag index --allow-empty` too)"
                ) from None
            if not any(named):
                raise ConfigurationError(
                    f"{exc}; if its documents were removed on purpose, `pgrag index --allow-empty` "
                    "(or allow_empty: true on the space) removes them from the index"
                ) from None
            empty.append(str(exc))
    found: list[dict[str, Any]] = []
    for number, (src, files) in enumerate(zip(spec.sources, named)):
        for file in files:
            name = file[1][file[1].rfind("/") + 1 :]
            if is_jsonl(src, name):
                entries = _jsonl_documents(settings, src, Path(file[0]), file[1])
                for e in entries:
                    e.update(name=name, path=file[0], src=number)
                found += entries
            else:
                found.append(_text_document(settings, src, file, name, known, number))
    if spec.order == "filename":
        found.sort(key=lambda d: (d["name"], d["path"], d["metadata"].get("line", 0)))
    elif spec.order == "metadata":
        missing = [
            d["key"] for d in found if "skipped" not in d and d["metadata"].get(spec.order_field) is None
        ]
        if missing:
            raise ConfigurationError(
                f"order_field {spec.order_field!r} is missing for documents {missing[:3]}"
            )
        found = sorted(
            (d for d in found if "skipped" not in d),
            key=lambda d: (
                str(d["metadata"][spec.order_field]),
                d["name"],
                d["metadata"].get("line", 0),
            ),
        ) + [d for d in found if "skipped" in d]
    good = [(order, d) for order, d in enumerate(found) if "skipped" not in d]
    _refuse_duplicates(realm, space, spec, [d for _, d in good])
    # built column by column: a frame of 50k row dicts costs more than the rest of an unchanged run
    columns: dict[str, list[Any]] = {
        "doc_key": [d["key"] for _, d in good],
        "title": [d["title"] for _, d in good],
        "source": [d["key"] for _, d in good],
        "doc_order": [order for order, _ in good],
        "text": [d["text"] for _, d in good],
        "doc_hash": [d.get("hash") or hashlib.sha256(d["text"].encode("utf-8")).hexdigest() for _, d in good],
        "metadata": [d.get("meta_json") or json.dumps(d["metadata"], default=str) for _, d in good],
    }
    frame = pl.DataFrame(
        columns, schema={c: pl.Int64 if c == "doc_order" else pl.String for c in DOCUMENT_COLUMNS}
    )
    earlier = {
        d["key"]: tuple(dict.fromkeys(k for k in d["earlier"] if k != d["key"]))
        for d in found
        if d["key"] is not None and d.get("earlier")
    }
    return Sources(
        frame,
        [SkippedDocument(d["where"], d["skipped"], d["key"]) for d in found if "skipped" in d],
        [CleanedDocument(d["key"], d["where"], "; ".join(d["cleaned"])) for _, d in good if d.get("cleaned")],
        {k: v for k, v in earlier.items() if v},
        empty,
        {d["path"]: d["stat"] for _, d in good if d.get("stat") is not None},
        {d["key"]: d["path"] for _, d in good if d["text"] is None},
    )


def _refuse_duplicates(realm: str, space: str, spec: SpaceSpec, docs: list[dict[str, Any]]) -> None:
    """Raise :class:`ConfigurationError` when two documents read share a doc_key, naming the key, the
    sources (as written) and files they come from, and the fix: a ``key_prefix`` per source (two sources
    holding the same relative paths), or distinct ``key_field`` values (one source)."""
    if len({d["key"] for d in docs}) == len(docs):
        return
    by_key: dict[str, list[dict[str, Any]]] = {}
    for d in docs:
        by_key.setdefault(d["key"], []).append(d)
    dupes = {k: ds for k, ds in by_key.items() if len(ds) > 1}
    if not dupes:
        return
    key, ds = next(iter(dupes.items()))
    sources = sorted({d["src"] for d in ds})
    named = ", ".join(f"{spec.sources[i].path} (glob {spec.sources[i].glob!r})" for i in sources)
    where = ", ".join(d.get("where") or clean_key(d["path"]) for d in ds[:3])
    fix = (
        "give each source its own key_prefix, e.g. `key_prefix: handbook/` (doc_keys are relative to their "
        "source's root, so two sources holding the same relative path collide)"
        if len(sources) > 1
        else "make the records' key_field values distinct, or leave key_field out (keys by title, made "
        "composite with file and line when titles repeat)"
    )
    more = f" (and {len(dupes) - 1} more duplicate key(s))" if len(dupes) > 1 else ""
    raise ConfigurationError(
        f"space {realm}.{space}: {len(ds)} documents have the same doc_key {key!r}{more}, from "
        f"source(s) {named}: {where}; {fix}"
    )


def load_documents(settings: Settings, realm: str, space: str, *, allow_empty: bool = False) -> pl.DataFrame:
    """Read every document of ``realm``/``space`` into the ``documents`` frame (columns above), strictly:
    one bad file or line fails the whole load (the chunks stage uses :func:`read_sources`, which skips it).

    With ``allow_empty`` a source whose path is missing or whose glob matches nothing names no document.
    Raises :class:`SourceError` (the first bad file or line) or :class:`ConfigurationError` (a bad
    source, a duplicate doc_key, a missing order field).
    """
    read = read_sources(settings, realm, space, allow_empty=allow_empty)
    if read.skipped:
        raise SourceError(read.skipped[0].where, read.skipped[0].reason)
    return read.documents


def _short(text: str | None, limit: int = 200) -> str | None:
    return text if text is None or len(text) <= limit else text[: limit - 1] + "…"


def source_report(
    read: Sources, *, kept: Collection[str] = (), withheld: Collection[str] = (), limit: int = 20
) -> dict[str, Any]:
    """Asset metadata of what :func:`read_sources` skipped and cleaned: ``documents_skipped`` (count),
    ``skipped_documents_sample`` (up to ``limit`` rows: doc_key, where, reason, ``kept`` — whether its
    stored chunks were kept), ``skipped_documents_kept`` (indexed documents skipped and kept),
    ``removals_withheld`` (documents not removed because a skipped record's key is unknown),
    ``documents_cleaned`` and ``cleaned_documents_sample`` (doc_key, where, what was done). Long keys
    are cut to 200 characters for display."""
    return {
        "documents_skipped": len(read.skipped),
        "skipped_documents_sample": [
            {
                "doc_key": _short(s.doc_key),
                "where": _short(s.where),
                "reason": s.reason,
                "kept": s.doc_key in kept,
            }
            for s in read.skipped[:limit]
        ],
        "skipped_documents_kept": len(kept),
        "removals_withheld": len(withheld),
        "documents_cleaned": len(read.cleaned),
        "cleaned_documents_sample": [
            {"doc_key": _short(c.doc_key), "where": _short(c.where), "reason": c.reason}
            for c in read.cleaned[:limit]
        ],
    }
