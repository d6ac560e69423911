"""The LLM response cache (control schema) and its cassette files (JSONL).

A cassette line: ``{"key", "prompt_key", "model", "purpose", "request", "response",
"prompt_tokens", "completion_tokens"}`` — ``request`` holds the exact messages and parameters.

A *spool* is a directory of one-line cassettes (:func:`spool`): responses a model gave while the
cache could not be written, loaded into the cache by the next client (:func:`import_spool`).
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from pathlib import Path
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from pgrag_dag.errors import ConfigurationError

log = logging.getLogger(__name__)

CASSETTE_FIELDS = ("key", "prompt_key", "model", "purpose", "request", "response", "prompt_tokens", "completion_tokens")


def get_by_key(conn: psycopg.Connection, key: str) -> dict[str, Any] | None:
    """The cached response for (model, messages, parameters) ``key``, or ``None``."""
    return _one(conn, "WHERE key = %s", key)


def get_by_prompt(conn: psycopg.Connection, prompt_key: str) -> dict[str, Any] | None:
    """The newest cached response for ``prompt_key`` (messages, parameters) from any model, or ``None``."""
    return _one(conn, "WHERE prompt_key = %s ORDER BY created_at DESC, key LIMIT 1", prompt_key)


def _one(conn: psycopg.Connection, where: str, value: str) -> dict[str, Any] | None:
    from psycopg import sql

    cur = conn.execute(
        sql.SQL(
            "SELECT key, prompt_key, model, purpose, request, response, prompt_tokens, completion_tokens"
            " FROM pgrag__control.llm_cache "
        )
        + sql.SQL(where),  # type: ignore[arg-type]  # literal fragments only
        (value,),
    )
    row = cur.fetchone()
    return dict(zip(CASSETTE_FIELDS, row)) if row else None


def put(conn: psycopg.Connection, entry: dict[str, Any]) -> None:
    """Insert one cache entry (a cassette line's fields); an existing key is left as it is."""
    conn.execute(
        """INSERT INTO pgrag__control.llm_cache
               (key, prompt_key, model, purpose, request, response, prompt_tokens, completion_tokens)
           VALUES (%s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (key) DO NOTHING""",
        (
            entry["key"], entry["prompt_key"], entry["model"], entry.get("purpose", ""),
            Jsonb(entry["request"]), entry["response"],
            int(entry.get("prompt_tokens", 0)), int(entry.get("completion_tokens", 0)),
        ),
    )


def delete(conn: psycopg.Connection, key: str) -> None:
    """Remove one cache entry by its key."""
    conn.execute("DELETE FROM pgrag__control.llm_cache WHERE key = %s", (key,))


def export_cassette(conn: psycopg.Connection, path: Path, *, purpose_prefix: str | None = None) -> int:
    """Write every cache entry (optionally those whose purpose starts with a prefix) to ``path``.

    Lines are sorted by key so that a re-export of the same cache is byte-identical. Returns the count.
    """
    rows = conn.execute(
        "SELECT key, prompt_key, model, purpose, request, response, prompt_tokens, completion_tokens"
        " FROM pgrag__control.llm_cache WHERE purpose LIKE %s ORDER BY key",
        ((purpose_prefix or "") + "%",),
    ).fetchall()
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(cassette_line(dict(zip(CASSETTE_FIELDS, row))))
    return len(rows)


def cassette_line(entry: dict[str, Any]) -> str:
    """One cassette line (canonical JSON of a cache entry, keys sorted, ending in a newline)."""
    return json.dumps(entry, ensure_ascii=False, sort_keys=True) + "\n"


def spool(entry: dict[str, Any], directory: Path) -> Path:
    """Write one cache entry (a cassette line's fields) to its own cassette ``<key>.jsonl`` under
    ``directory`` (created if needed), atomically: a reader sees the whole file or none. Returns it.

    Raises :class:`OSError` when the file cannot be written.
    """
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{entry['key']}.jsonl"
    tmp = directory / f".{entry['key']}.{uuid.uuid4().hex}.tmp"
    with tmp.open("w", encoding="utf-8") as fh:
        fh.write(cassette_line({k: entry.get(k) for k in CASSETTE_FIELDS}))
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    return path


def import_spool(conn: psycopg.Connection, directory: Path) -> int:
    """Load every spooled cassette (``*.jsonl``) of ``directory`` into the cache and remove it; an entry
    whose key is cached already is left as it is (idempotent: two importers may race). A file that is
    not a cassette is renamed ``*.bad`` and logged, never retried. Returns the entries read.

    Raises psycopg errors as the cache raises them (the file then stays for the next import).
    """
    n = 0
    for path in sorted(directory.glob("*.jsonl")) if directory.is_dir() else []:
        try:
            n += import_cassette(conn, path)
        except ConfigurationError as exc:
            if path.exists():  # another importer may have taken it meanwhile
                log.warning("spooled response %s is unreadable and was set aside: %s", path, exc)
                path.replace(path.with_suffix(".bad"))
            continue
        path.unlink(missing_ok=True)
    return n


def import_cassette(conn: psycopg.Connection, path: Path) -> int:
    """Load a cassette into the cache (idempotent); returns the number of lines read.

    Raises :class:`ConfigurationError` naming the file and line when a line is not a cassette entry.
    """
    if not path.is_file():
        raise ConfigurationError(f"cassette {path} does not exist")
    n = 0
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ConfigurationError(f"cassette {path}:{lineno}: not JSON ({exc})") from exc
            if not isinstance(entry, dict):
                raise ConfigurationError(f"cassette {path}:{lineno}: not a JSON object")
            missing = [f for f in ("key", "prompt_key", "model", "request", "response") if f not in entry]
            if missing:
                raise ConfigurationError(f"cassette {path}:{lineno}: missing fields {missing}")
            put(conn, entry)
            n += 1
    return n
