"""The LLM response cache (control schema) and its cassette files (JSONL).

A cassette line: ``{"key", "prompt_key", "model", "purpose", "request", "response",
"prompt_tokens", "completion_tokens"}`` — ``request`` holds the exact messages and parameters.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from pgrag_dag.errors import ConfigurationError

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
            fh.write(json.dumps(dict(zip(CASSETTE_FIELDS, row)), ensure_ascii=False, sort_keys=True) + "\n")
    return len(rows)


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
