"""Listing a space's source files (paper §3.2, §5.5): which files each source names, in order, with the stat
the chunks stage compares with what it recorded (issue 30: a stat scan, no ``Path`` per file, for the common
one-level glob). Reading them is :mod:`pgrag_dag.ingest.sources`."""

from __future__ import annotations

import fnmatch
import glob
import operator
import os
import re
from pathlib import Path

from pgrag_dag.config.sections import Settings, SourceSpec, SpaceSpec
from pgrag_dag.errors import ConfigurationError
from pgrag_dag.storable import clean_key


def scan_source(
    settings: Settings, src: SourceSpec, *, allow_empty: bool = False
) -> list[tuple[str, str, os.stat_result | None]]:
    """``(file, its path relative to the source's root, POSIX, its os.stat or None)`` for every file ``src``
    names, sorted (broken links included, without a stat: reading them fails, naming them; files an
    ``exclude`` glob matches, or lying in a directory one matches, left out); a single-file source's relative
    path is its file name. With ``allow_empty`` a missing path or an empty glob names none; otherwise each
    raises :class:`ConfigurationError`.

    A one-level wildcard glob (``*.txt``, the default) without ``exclude`` is one ``os.scandir`` of the
    directory, matched as :meth:`pathlib.Path.glob` matches it, its entries' stats taken from the scan: a
    stat scan of 50k files costs no ``Path`` per file (issue 30); other globs go through ``Path.glob``."""
    path = settings.resolve(src.path)
    if path.is_file():
        return [(str(path), path.name, _stat(str(path)))]
    if not path.is_dir():
        if allow_empty:
            return []
        raise ConfigurationError(f"source path {clean_key(str(path))} does not exist")
    if not src.exclude and "/" not in src.glob and "**" not in src.glob and _WILDCARD.search(src.glob):
        match = re.compile(fnmatch.translate(src.glob)).fullmatch  # case-sensitive, dot files too: as pathlib
        found: list[tuple[str, str, os.stat_result | None]] = []
        try:
            listed = list(os.scandir(path))
        except PermissionError:  # an unreadable directory matches nothing, as in ``Path.glob``
            listed = []
        for e in listed:
            if not match(e.name):
                continue
            if e.is_file():
                try:
                    found.append((e.path, e.name, e.stat()))
                except OSError:  # gone since it was listed: reading it names the reason
                    found.append((e.path, e.name, None))
            elif e.is_symlink() and not os.path.exists(e.path):
                found.append((e.path, e.name, None))
        found.sort(key=operator.itemgetter(1))  # one directory: by name, as ``Path.parts`` sorts them
    else:
        found = [(str(p), rel, _stat(str(p))) for p, rel in _globbed(path, src)]
    if not found and not allow_empty:
        raise ConfigurationError(
            f"source {clean_key(str(path))} matches no file for glob {src.glob!r}"
            + (f" outside exclude {src.exclude!r}" if src.exclude else "")
        )
    return found


_WILDCARD = re.compile(r"[*?\[]")


def _stat(path: str) -> os.stat_result | None:
    try:
        return os.stat(path)
    except OSError:
        return None  # a broken link or a file gone: reading it names the reason


def _globbed(path: Path, src: SourceSpec) -> list[tuple[Path, str]]:
    """``(file, relative path)`` for every file below directory ``path`` that ``src``'s glob matches and no
    ``exclude`` glob does, sorted by parts (:func:`scan_source`)."""
    left_out = {
        p for pattern in src.exclude for p in path.glob(pattern)
    }  # files, or directories and all below
    # sorted by parts (Path's own order, without a Python-level comparison per pair) and made relative by
    # slicing: glob yields paths below ``path``
    root = len(str(path).rstrip("/")) + 1
    return [
        (p, str(p)[root:])
        for p in sorted(path.glob(src.glob), key=lambda p: p.parts)
        if (p.is_file() or (p.is_symlink() and not p.exists()))
        and not (left_out and (p in left_out or not left_out.isdisjoint(p.parents)))
    ]


def named_files(settings: Settings, src: SourceSpec, *, allow_empty: bool = False) -> list[tuple[Path, str]]:
    """``(file, its path relative to the source's root, POSIX)`` for every file ``src`` names
    (:func:`scan_source`)."""
    return [(Path(p), rel) for p, rel, _ in scan_source(settings, src, allow_empty=allow_empty)]


def _files(settings: Settings, src: SourceSpec, *, allow_empty: bool = False) -> list[Path]:
    """The files ``src`` names (:func:`named_files`)."""
    return [p for p, _ in named_files(settings, src, allow_empty=allow_empty)]


def is_jsonl(src: SourceSpec, path: Path | str) -> bool:
    # ``Path.suffix == ".jsonl"`` on the name (or a path), without a Path per file
    name = path.name if isinstance(path, Path) else path[path.rfind("/") + 1 :]
    return src.format == "jsonl" or (src.format == "auto" and name[1:].endswith(".jsonl"))


def text_keys(settings: Settings, src: SourceSpec) -> set[str]:
    """The doc_keys of the text files ``src`` names now, without reading them (JSONL files left out: their
    keys are in their records); none when its path is missing or its glob matches nothing."""
    return {
        clean_key(src.key_prefix + rel)
        for p, rel in named_files(settings, src, allow_empty=True)
        if not is_jsonl(src, p)
    }


def list_source_files(settings: Settings, spec: SpaceSpec) -> list[Path]:
    """Every file a space's sources name: by file name across all sources for ``order="filename"``,
    else in the sources' order (sorted within each); broken links included. A glob matching nothing beside
    sources that name files is no error — as in :func:`pgrag_dag.ingest.sources.read_sources` (``pgrag init``
    writes one source per kind of document, and a folder may hold one kind only). Raises
    :class:`ConfigurationError` for a missing path, or an empty glob when no source names a file."""
    per_source = [_files(settings, src, allow_empty=True) for src in spec.sources]
    for src, named in zip(spec.sources, per_source):
        if not named and (not settings.resolve(src.path).exists() or not any(per_source)):
            _files(settings, src)  # raises, naming the missing path or the empty glob
    files = [p for named in per_source for p in named]
    if spec.order == "filename":
        files.sort(key=lambda p: (p.name, str(p)))
    return files


def without_last_file(settings: Settings, spec: SpaceSpec) -> tuple[SpaceSpec, str]:
    """``spec`` with its last file left out, and that file's ``doc_key``: the source naming the last file of
    :func:`list_source_files` gains an ``exclude`` glob matching only it (a source naming nothing else is
    dropped) — for ``order`` ``filename`` or ``listed`` the last document of a space of text files, so the
    others keep their ``doc_key`` and ``doc_order``. Raises :class:`ConfigurationError` for a missing path
    or an empty glob, or when the space's order is ``metadata`` or it names fewer than two files."""
    files = list_source_files(settings, spec)
    if spec.order == "metadata" or len(files) < 2:
        raise ConfigurationError(
            f"cannot leave out a space's last file: it orders by {spec.order} and names "
            f"{len(files)} file(s); it needs order filename or listed and two files or more"
        )
    last, kept, key = files[-1], [], ""
    for src in spec.sources:
        named = named_files(settings, src)
        rel = next((r for p, r in named if p == last), None)
        if rel is None:
            kept.append(src)
            continue
        key = clean_key(src.key_prefix + rel)
        if len(named) > 1:  # the file's own name as a glob (metacharacters escaped) matches only it
            kept.append(src.model_copy(update={"exclude": [*src.exclude, glob.escape(rel)]}))
    return spec.model_copy(update={"sources": kept}), key
