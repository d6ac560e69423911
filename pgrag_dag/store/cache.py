"""The LLM response cache (control schema) and its cassette files (JSONL).

A cassette line: ``{"key", "prompt_key", "model", "purpose", "request", "response",
"prompt_tokens", "completion_tokens"}`` — ``request`` holds the exact messages and parameters.

A *spool* is a directory of one-line cassettes (:func:`spool`): responses a model gave while the
cache could not be written, loaded into the cache by the next client (:func:`import_spool`).

An *evicted* response (:func:`evict_prompt`, :func:`evict_responses`; ``pgrag cache evict``) is
deleted and remembered in ``pgrag__control.llm_evicted`` by (key, SHA-256 of its text), so re-importing
the cassette it came from never brings it back; another response for the same prompt is admitted.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import uuid
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from pgrag_dag.errors import ConfigurationError

log = logging.getLogger(__name__)

CASSETTE_FIELDS = (
    "key",
    "prompt_key",
    "model",
    "purpose",
    "request",
    "response",
    "prompt_tokens",
    "completion_tokens",
)


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
        + sql.SQL(where),  # literal fragments only
        (value,),
    )
    row = cur.fetchone()
    return dict(zip(CASSETTE_FIELDS, row)) if row else None


def put(conn: psycopg.Connection, entry: dict[str, Any]) -> None:
    """Insert one cache entry (a cassette line's fields); an existing key is left as it is, and an
    evicted response (same key, same text) is not admitted again."""
    conn.execute(
        """INSERT INTO pgrag__control.llm_cache
               (key, prompt_key, model, purpose, request, response, prompt_tokens, completion_tokens)
           SELECT %s::text, %s::text, %s::text, %s::text, %s::jsonb, %s::text, %s::int, %s::int
            WHERE NOT EXISTS (SELECT 1 FROM pgrag__control.llm_evicted e WHERE e.key = %s
                AND e.response_sha256 = %s)
           ON CONFLICT (key) DO NOTHING""",
        (
            entry["key"],
            entry["prompt_key"],
            entry["model"],
            entry.get("purpose", ""),
            Jsonb(entry["request"]),
            entry["response"],
            int(entry.get("prompt_tokens", 0)),
            int(entry.get("completion_tokens", 0)),
            entry["key"],
            hashlib.sha256(str(entry["response"]).encode("utf-8")).hexdigest(),
        ),
    )


def was_evicted(conn: psycopg.Connection, prompt_key: str) -> bool:
    """Whether a response to the prompt ``prompt_key`` was evicted (``pgrag purge``, ``pgrag cache evict``):
    it is remembered in ``llm_evicted``, and a cassette cannot bring it back."""
    return (
        conn.execute(
            "SELECT EXISTS (SELECT 1 FROM pgrag__control.llm_evicted WHERE prompt_key = %s)", (prompt_key,)
        ).fetchone()
        or (False,)
    )[0] is True


def delete(conn: psycopg.Connection, key: str) -> None:
    """Remove one cache entry by its key."""
    conn.execute("DELETE FROM pgrag__control.llm_cache WHERE key = %s", (key,))


EVICTED_FIELDS = ("key", "prompt_key", "model", "purpose", "created_at", "response")

_EVICT = sql.SQL("""
WITH gone AS (DELETE FROM pgrag__control.llm_cache c {using} WHERE {where}
              RETURNING c.key, c.prompt_key, c.model, c.purpose, c.created_at, c.response),
     kept AS (INSERT INTO pgrag__control.llm_evicted (key, response_sha256, prompt_key, model, purpose)
              SELECT key, encode(sha256(convert_to(response, 'UTF8')), 'hex'), prompt_key, model, purpose
                  FROM gone
              ON CONFLICT DO NOTHING)
SELECT key, prompt_key, model, purpose, created_at, response FROM gone ORDER BY created_at, key""")


def evict_prompt(conn: psycopg.Connection, prefix: str) -> list[dict[str, Any]]:
    """Evict every cached response (any model) whose prompt key starts with ``prefix`` (lowercase hex,
    at least 8 digits — error messages show 16). Returns what was removed (:data:`EVICTED_FIELDS`).

    Raises :class:`ConfigurationError` for a prefix that is not 8–64 hexadecimal digits.
    """
    if not 8 <= len(prefix) <= 64 or any(c not in "0123456789abcdef" for c in prefix):
        raise ConfigurationError(
            f"prompt key {prefix!r}: give at least 8 of its lowercase hexadecimal digits "
            "(as an error message shows it)"
        )
    query = _EVICT.format(using=sql.SQL(""), where=sql.SQL("c.prompt_key LIKE %s"))
    return [dict(zip(EVICTED_FIELDS, r)) for r in conn.execute(query, (prefix + "%",)).fetchall()]


def evict_responses(
    conn: psycopg.Connection, responses: list[tuple[str, str]], *, purposes: tuple[str, ...]
) -> list[dict[str, Any]]:
    """Evict the cached responses whose (model, response text) is one of ``responses`` and whose
    purpose is one of ``purposes``. Returns what was removed (:data:`EVICTED_FIELDS`)."""
    if not responses:
        return []
    query = _EVICT.format(
        using=sql.SQL("USING unnest(%s::text[], %s::text[]) AS u(model, response)"),
        where=sql.SQL("c.model = u.model AND c.response = u.response AND c.purpose = ANY(%s)"),
    )
    params = ([m for m, _ in responses], [r for _, r in responses], list(purposes))
    return [dict(zip(EVICTED_FIELDS, r)) for r in conn.execute(query, params).fetchall()]


def export_cassette(conn: psycopg.Connection, path: Path, *, purpose_prefix: str | None = None) -> int:
    """Write every cache entry (optionally those whose purpose starts with a prefix) to ``path``.

    Lines are sorted by key so that a re-export of the same cache is byte-identical. Returns the count.
    Raises :class:`ConfigurationError` naming ``path``'s directory when it does not exist (it is never
    created: a mistyped directory is refused, not made), and naming ``path`` when it is a directory.
    """
    if not path.parent.is_dir():
        raise ConfigurationError(
            f"directory {path.parent} does not exist; create it first or write the cassette elsewhere"
        )
    if path.is_dir():
        raise ConfigurationError(
            f"{path} is a directory; name the cassette file to write, e.g. {path / 'cassette.jsonl'}"
        )
    rows = conn.execute(
        "SELECT key, prompt_key, model, purpose, request, response, prompt_tokens, completion_tokens"
        " FROM pgrag__control.llm_cache WHERE purpose LIKE %s ORDER BY key",
        ((purpose_prefix or "") + "%",),
    ).fetchall()
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

    Raises :class:`ConfigurationError` naming the file and line when a line is not a cassette entry, and
    naming ``path`` when it is missing or a directory.
    """
    if path.is_dir():
        raise ConfigurationError(f"cassette {path} is a directory, not a JSONL file")
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


def cache_size(conn: psycopg.Connection) -> tuple[int, int]:
    """``(rows, bytes)`` of the response cache: its entries and the table's size on disk with its indexes
    and TOAST (``pg_total_relation_size``); ``(0, 0)`` when no control schema exists (nothing was cached)."""
    row = conn.execute("SELECT pg_total_relation_size(to_regclass('pgrag__control.llm_cache'))").fetchone()
    if row is None or row[0] is None:
        return 0, 0
    count = conn.execute("SELECT count(*) FROM pgrag__control.llm_cache").fetchone()
    return int(count[0]) if count else 0, int(row[0])


def evict_quoting(conn: psycopg.Connection, needles: list[str]) -> list[dict[str, Any]]:
    """Evict every cached response (any model, any purpose) whose request or response contains one of
    ``needles`` (compared as given: pass each text in every form it may be stored in — the request is
    JSON, so as a JSON string's content too; :func:`pgrag_dag.store.purge.json_forms`). Erasure (issue 28):
    the prompts that carried a removed document's text, and the answers built on them. Like
    :func:`evict_responses`, each is remembered in ``llm_evicted`` (key and SHA-256 only), so re-importing a
    cassette never brings it back. Returns what was removed (:data:`EVICTED_FIELDS`)."""
    if not needles:
        return []
    query = _EVICT.format(
        using=sql.SQL(""),
        where=sql.SQL(
            "EXISTS (SELECT 1 FROM unnest(%s::text[]) AS n(t)"
            " WHERE strpos(c.request::text, n.t) > 0 OR strpos(c.response, n.t) > 0)"
        ),
    )
    return [dict(zip(EVICTED_FIELDS, r)) for r in conn.execute(query, (needles,)).fetchall()]
