"""Scaffolding a configuration for a folder of documents (issue 16 item 1): ``pgrag init`` and ``pgrag add``.

:func:`init_project` writes a commented ``pgrag.yaml`` (one realm, one space, the sources' globs chosen from
what the folder holds) that indexes offline as written — the ``nlp`` extractor, the local
all-MiniLM-L6-v2 embedder, ``llm.models: [replay]`` — with the switch to a live litellm model spelled out
in comments, and ``.gitignore`` lines for the data directory. :func:`add_source` registers a source in an
existing configuration through a round-trip YAML edit (ruamel.yaml), so the file keeps its comments and
layout. Both check that what they wrote loads (:func:`pgrag_dag.config.load_settings`).
"""

from __future__ import annotations

import io
import json
import os
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pgrag_dag.config.load import load_settings
from pgrag_dag.config.sections import Settings, SourceSpec
from pgrag_dag.errors import ConfigurationError, PgragError
from pgrag_dag.ingest.listing import list_source_files
from pgrag_dag.names import parse_partition, validate_realm, validate_space

CONFIG_NAME = "pgrag.yaml"
DATA_DIR = ".pgrag"
TEXT_SUFFIXES = (".md", ".txt", ".markdown", ".rst", ".jsonl")
"""The file kinds :func:`choose_globs` looks for, in the order their globs are listed."""
SKIPPED_DIRS = (DATA_DIR, ".git", ".hg", ".venv", "venv", "node_modules", "__pycache__")
"""Directories never searched for documents (their files are no one's documents); each present one is
excluded."""
GITIGNORE_LINES = ("# pgrag: the embedded PostgreSQL and the Dagster instance (pgrag init)", f"{DATA_DIR}/")


@dataclass
class Written:
    """What :func:`init_project` or :func:`add_source` did: ``config`` (the file), ``realm``, ``space``, the
    ``sources`` registered (path as written, glob, files it names now), ``gitignore`` (the file, when lines
    were appended; ``None`` when it already had them) and ``notes`` (human lines)."""

    config: Path
    realm: str
    space: str
    sources: list[tuple[str, str, int]] = field(default_factory=list)
    gitignore: Path | None = None
    notes: list[str] = field(default_factory=list)


def slug(name: str) -> str:
    """A realm name (:func:`pgrag_dag.names.validate_realm`) from a folder name: accents folded (``Ünï`` →
    ``uni``), lowercase ASCII letters, digits and ``_`` (anything else becomes ``_``), starting with a letter
    (``docs_`` prepended otherwise), at most 40 bytes; ``docs`` when nothing is left."""
    folded = "".join(c for c in unicodedata.normalize("NFKD", name) if not unicodedata.combining(c))
    out = re.sub(r"_+", "_", re.sub(r"[^a-z0-9_]", "_", folded.lower())).strip("_")
    if out and not out[0].isalpha():
        out = f"docs_{out}"
    return validate_realm(out[:40].rstrip("_") or "docs")


def _documents(folder: Path) -> Counter[str]:
    """How many files of each :data:`TEXT_SUFFIXES` suffix lie under ``folder``, outside
    :data:`SKIPPED_DIRS`."""
    found: Counter[str] = Counter()
    for _, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if d not in SKIPPED_DIRS]
        found.update(s for s in (Path(f).suffix.lower() for f in files) if s in TEXT_SUFFIXES)
    return found


def choose_globs(folder: Path) -> list[str]:
    """One ``**/*<suffix>`` glob per kind of document ``folder`` holds (:data:`TEXT_SUFFIXES`), in that order;
    ``["**/*.md", "**/*.txt"]`` when it holds none yet."""
    found = _documents(folder)
    return [f"**/*{s}" for s in TEXT_SUFFIXES if found[s]] or ["**/*.md", "**/*.txt"]


def _excluded(folder: Path) -> list[str]:
    """The ``exclude`` globs of a source over ``folder``: the data directory and every present
    :data:`SKIPPED_DIRS`."""
    return [f"{d}/**" for d in SKIPPED_DIRS if d == DATA_DIR or (folder / d).is_dir()]


def _q(text: str) -> str:
    """``text`` as a YAML scalar: as it is when plain and unambiguous, else double-quoted (JSON is valid
    YAML)."""
    plain = re.fullmatch(r"[A-Za-z][A-Za-z0-9_./-]*", text) and text.lower() not in {
        "true",
        "false",
        "yes",
        "no",
        "on",
        "off",
        "null",
        "y",
        "n",
    }
    return text if plain else json.dumps(text, ensure_ascii=False)


_TEMPLATE = """\
# pgrag configuration for the documents of this folder, written by `pgrag init`.
# Relative paths resolve against this file's directory. Environment variables PGRAG_… (nested with __,
# e.g. PGRAG_LLM__MODELS='["openai/gpt-4o-mini"]') override any value here.

# The embedded PostgreSQL (and the Dagster instance) live here; .gitignore leaves them out.
# Set database_url: postgresql://… (PostgreSQL ≥ 15 with pgvector ≥ 0.8) to use your own server instead.
data_dir: {data_dir}

# Models. As written, everything runs offline, with no model and no API key:
#   - extraction: the space's `extractor: nlp` — spaCy's English pipeline, installed with pgrag: typed
#     entities (people, organisations, places …) and relations read from each sentence's grammar, with
#     negation and dates — no model. `extractor: cooccurrence` is lighter still (names and one untyped
#     edge per pair named in one sentence);
#   - embeddings: the local all-MiniLM-L6-v2 model, installed with pgrag and run in-process;
#   - llm.models [replay] serves recorded responses only, so community reports are extractive.
# To extract with a live model through litellm instead:
#   1. export OPENAI_API_KEY=sk-...          (the key of the provider you choose)
#   2. below, replace `models: [replay]` by `models: [openai/gpt-4o-mini]`
#   3. delete the `extractor: nlp` line of the space (the default extractor asks llm.models)
# Any litellm model works, e.g. anthropic/claude-3-5-haiku-latest (ANTHROPIC_API_KEY) or ollama/llama3.1.
llm:
  models: [replay]
  # models: [openai/gpt-4o-mini]   # needs OPENAI_API_KEY in the environment

# Any litellm embedding model works too (e.g. model: openai/text-embedding-3-small, dim: 1536, with
# OPENAI_API_KEY); switch an indexed realm with `pgrag reembed REALM`.
embedding:
  model: local/all-MiniLM-L6-v2
  dim: 384

realms:
  {realm}:                      # realm: lowercase letters, digits and _ (one PostgreSQL schema)
    spaces:
      {space}:
        extractor: nlp              # offline: spaCy, no model. Delete this line to extract with llm.models
        # Each file's doc_key is its path relative to the source's `path` (e.g. notes/a.md), so moving this
        # file or the folder re-keys nothing. `pgrag add PATH --space {partition}` adds a source.
        sources:
{sources}"""


def init_project(
    folder: Path,
    *,
    realm: str | None = None,
    space: str | None = None,
    glob: str | None = None,
    force: bool = False,
) -> Written:
    """Write ``folder/pgrag.yaml`` for the documents of ``folder`` and append the data directory to
    ``folder/.gitignore`` (created if missing; lines already there are not repeated).

    ``realm`` and ``space`` default to :func:`slug` of the folder's name; ``glob`` (one source) defaults to
    :func:`choose_globs` (one source per kind of document found). Every source excludes the data directory
    and the tool directories present (:data:`SKIPPED_DIRS`). Raises :class:`ConfigurationError` when
    ``folder`` is no directory, or ``pgrag.yaml`` exists and ``force`` is not set;
    :class:`~pgrag_dag.errors.InvalidNameError` for an invalid realm or space name.
    """
    folder = folder.expanduser()
    if not folder.is_dir():
        raise ConfigurationError(
            f"{folder} is not a directory: pgrag init writes a configuration for a folder of documents"
        )
    config = folder / CONFIG_NAME
    if config.exists() and not force:
        raise ConfigurationError(
            f"{config} exists already; edit it (or `pgrag add PATH --space REALM.SPACE`), "
            "or overwrite it with `pgrag init --force`"
        )
    name = folder.resolve().name
    realm = validate_realm(realm) if realm is not None else slug(name)
    space = validate_space(space) if space is not None else slug(name)
    globs = [glob] if glob else choose_globs(folder)
    exclude = ", ".join(_q(e) for e in _excluded(folder))
    sources = "".join(
        f"          - path: .\n            glob: {_q(g)}\n            exclude: [{exclude}]\n" for g in globs
    )
    text = _TEMPLATE.format(
        data_dir=DATA_DIR, realm=realm, space=_q(space), sources=sources, partition=f"{realm}.{space}"
    )
    previous = config.read_text(encoding="utf-8") if config.exists() else None
    config.write_text(text, encoding="utf-8")
    try:
        settings = load_settings(config)
    except PgragError:
        _restore(config, previous)
        raise
    written = Written(
        config, realm, space, notes=[f"overwrote {config} (--force)"] if previous is not None else []
    )
    spec = settings.space_spec(realm, space)
    written.sources = [(".", src.glob, _count(settings, src)) for src in spec.sources]
    written.gitignore = _gitignore(folder / ".gitignore")
    return written


def _count(settings: Settings, src: SourceSpec) -> int:
    """How many files ``src`` names now (0 when none or its path is missing)."""
    from pgrag_dag.config.sections import SpaceSpec

    try:
        return len(list_source_files(settings, SpaceSpec(sources=[src])))
    except ConfigurationError:
        return 0


def _restore(config: Path, previous: str | None) -> None:
    if previous is None:
        config.unlink(missing_ok=True)
    else:
        config.write_text(previous, encoding="utf-8")


def _gitignore(path: Path) -> Path | None:
    """Append :data:`GITIGNORE_LINES` to ``path`` unless it ignores the data directory already; the file
    when it was written, else ``None``."""
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    if {line.strip().strip("/") for line in text.splitlines()} & {DATA_DIR}:
        return None
    sep = "" if not text or text.endswith("\n") else "\n"
    path.write_text(
        text + sep + ("\n" if text.strip() else "") + "\n".join(GITIGNORE_LINES) + "\n", encoding="utf-8"
    )
    return path


def _round_trip() -> Any:
    from ruamel.yaml import YAML

    yaml = YAML()  # round trip: comments, order and quoting are kept
    yaml.preserve_quotes = True
    yaml.indent(mapping=2, sequence=4, offset=2)
    yaml.width = 4096
    return yaml


def add_source(
    config: Path, path: Path, partition: str, *, glob: str | None = None, key_prefix: str | None = None
) -> Written:
    """Register ``path`` (a directory or a file, relative to the working directory or absolute) as a
    source of ``partition`` (``"<realm>.<space>"``) in ``config``, creating the realm and space when they
    are new, keeping the file's comments and layout. The path is written relative to the configuration's
    directory when it lies under it, a symbolic link there included (:func:`_as_written`); else absolute,
    with a note saying so. A directory's ``glob`` defaults to :func:`choose_globs` (one source per
    kind of document). A new space in a configuration whose only model is ``replay`` gets
    ``extractor: nlp`` (it indexes offline).

    Raises :class:`ConfigurationError` when ``config`` does not exist or does not load, ``path`` does not
    exist, the space has this path (and glob) as a source already, another source of the space names some
    of its files already (a subfolder of a ``path: .`` source, or ``.`` beside a subfolder's source: each
    file would be indexed twice, under two doc_keys), or the new source's files would have the doc_key of
    another source's (give ``key_prefix``); :class:`~pgrag_dag.errors.InvalidNameError` for an invalid realm
    or space name. Nothing is written then.
    """
    if not config.is_file():
        raise ConfigurationError(f"no configuration at {config}: run `pgrag init` first, or set PGRAG_CONFIG")
    settings = load_settings(config)
    declared = [(r, s) for r, spec in settings.realms.items() for s in spec.spaces]
    realm, space = parse_partition(partition, declared)
    target = path.expanduser().resolve()
    if not target.exists():
        raise ConfigurationError(f"source path {path} does not exist")
    written_path = _as_written(path, target, settings.config_dir.resolve())
    globs = [None] if target.is_file() else [glob] if glob else choose_globs(target)
    existing = settings.realms[realm].spaces[space].sources if (realm, space) in declared else []
    new = [_source(written_path, g, key_prefix, target) for g in globs]
    for entry in new:
        spec = SourceSpec.model_validate(entry)
        same = [
            s
            for s in existing
            if settings.resolve(s.path) == target and (target.is_file() or s.glob == spec.glob)
        ]
        if same:
            raise ConfigurationError(
                f"{path} is already a source of {realm}.{space}"
                + ("" if target.is_file() else f" with glob {spec.glob!r}")
            )
        _refuse_overlap(settings, existing, spec, f"{realm}.{space}")
        _refuse_clash(settings, existing, spec, f"{realm}.{space}")
    yaml = _round_trip()
    original = config.read_text(encoding="utf-8")
    doc = yaml.load(original) or {}
    _insert(doc, realm, space, new, offline=settings.llm.models == ["replay"])
    out = io.StringIO()
    yaml.dump(doc, out)
    config.write_text(out.getvalue(), encoding="utf-8")
    try:
        after = load_settings(config)
    except PgragError:
        config.write_text(original, encoding="utf-8")
        raise
    written = Written(config, realm, space)
    written.sources = [
        (e["path"], e.get("glob", ""), _count(after, SourceSpec.model_validate(e))) for e in new
    ]
    if (realm, space) not in declared:
        written.notes.append(
            f"created {'space' if realm in settings.realms else 'realm and space'} {realm}.{space}"
        )
    if Path(written_path).is_absolute():
        written.notes.append(
            f"{written_path} lies outside {settings.config_dir.resolve()}: written as an absolute path "
            "(the configuration can move; that folder cannot)"
        )
    return written


def _as_written(path: Path, target: Path, base: Path) -> str:
    """How a source ``path`` (resolved: ``target``) is written into a configuration in ``base``: relative to
    ``base`` when it lies under it — as typed, so a link inside the folder to documents elsewhere stays a
    relative path (``corpus``, not the link's target) and the folder can move with its configuration —
    else absolute."""
    typed = Path(os.path.abspath(path.expanduser()))  # not resolved: links kept
    for candidate in (typed, target):
        if candidate.is_relative_to(base):
            return candidate.relative_to(base).as_posix() or "."
    return str(target)


def _source(path: str, glob: str | None, key_prefix: str | None, target: Path) -> dict[str, Any]:
    entry: dict[str, Any] = {"path": path}
    if glob is not None:
        entry["glob"] = glob
        if excluded := _excluded(target):
            entry["exclude"] = excluded
    if key_prefix:
        entry["key_prefix"] = key_prefix
    return entry


def _refuse_overlap(settings: Settings, existing: list[SourceSpec], new: SourceSpec, partition: str) -> None:
    """Raise :class:`ConfigurationError` when a source of ``existing`` names a file ``new`` names too (the
    same file once links are resolved): the space would index it twice, under two doc_keys — a subfolder
    added beside a ``path: .`` source (covered by it), or ``.`` beside a subfolder's source (covering it)."""
    from pgrag_dag.ingest.listing import named_files

    mine = {os.path.realpath(p) for p, _ in named_files(settings, new, allow_empty=True)}
    root = settings.resolve(new.path).resolve()
    for src in existing:
        theirs = {os.path.realpath(p): rel for p, rel in named_files(settings, src, allow_empty=True)}
        shared = sorted(mine & theirs.keys())
        if not shared:
            continue
        other = settings.resolve(src.path).resolve()
        where = (
            f"source {src.path}" + (f" (glob {src.glob!r})" if other.is_dir() else "") + f" of {partition}"
        )
        said, way = (
            (
                f"{new.path} is covered by {where}",
                "leave it out (that source indexes its files), add it to "
                "another space, or give that source an exclude for it",
            )
            if root.is_relative_to(other)
            else (
                f"{new.path} would cover {where}",
                "remove that source from the configuration first, or add this one to another space",
            )
        )
        raise ConfigurationError(
            f"{said}: {len(shared)} file(s) (e.g. {theirs[shared[0]]!r}) would be indexed twice, under two "
            f"doc_keys; {way}"
        )


def _refuse_clash(settings: Settings, existing: list[SourceSpec], new: SourceSpec, partition: str) -> None:
    """Raise :class:`ConfigurationError` when a text file of ``new`` would have the doc_key of a text file
    of ``existing`` (keys are relative to each source's root), suggesting a ``--key-prefix``."""
    from pgrag_dag.ingest.listing import text_keys

    mine = text_keys(settings, new)
    for src in existing:
        shared = sorted(mine & text_keys(settings, src))
        if shared:
            root = settings.resolve(new.path)  # a folder's name, or a single file's folder's
            hint = f"{(root if root.is_dir() else root.parent).name or 'extra'}/"
            raise ConfigurationError(
                f"{len(shared)} file(s) of {new.path} would have the doc_key of a file of source "
                f"{src.path} of {partition} (e.g. {shared[0]!r}): doc_keys are relative to each "
                f"source's root; give this one a prefix, e.g. --key-prefix {hint}"
            )


def _insert(doc: Any, realm: str, space: str, entries: list[dict[str, Any]], *, offline: bool) -> None:
    """Add ``entries`` to ``doc`` (a ruamel round-trip mapping) under realms → realm → spaces → space →
    sources, creating what is missing."""
    from ruamel.yaml.comments import CommentedMap, CommentedSeq

    def child(parent: Any, key: str) -> Any:
        if parent.get(key) is None:
            parent[key] = CommentedMap()
        return parent[key]

    spaces = child(child(child(doc, "realms"), realm), "spaces")
    if space not in spaces or spaces[space] is None:
        spaces[space] = CommentedMap()
        if offline:
            spaces[space]["extractor"] = "nlp"
            spaces[space].yaml_add_eol_comment(
                "offline: spaCy, no model (llm.models is [replay])", "extractor"
            )
    target = spaces[space]
    if target.get("sources") is None:
        target["sources"] = CommentedSeq()
    for entry in entries:
        item = CommentedMap(entry)
        if "exclude" in item:
            seq = CommentedSeq(item["exclude"])
            seq.fa.set_flow_style()
            item["exclude"] = seq
        target["sources"].append(item)
