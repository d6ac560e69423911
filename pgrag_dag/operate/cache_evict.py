"""``pgrag cache evict``: remove poison responses from the LLM response cache (issue 13 item 4; §3.5).

A response that can never be used — an extraction that does not parse, a community report without a
title — is dropped from the cache at once when a live model gave it, but a *replayed* one is recorded
evidence and stays, so every run would replay it again. Two ways to evict it:

- :func:`evict_prompt`: every cached response to one prompt (the prompt key, or its first 16 digits,
  that the error message shows);
- :func:`evict_parse_errors`: the responses behind a space's stored extraction passes that still do
  not parse with today's parser; those passes are then owed (asked again by the next run).

Either way the removed responses are remembered (:mod:`pgrag_dag.store.cache`), so re-importing the
cassette they came from does not bring them back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pgrag_dag.engine import Engine
from pgrag_dag.names import validate_realm, validate_space
from pgrag_dag.pipeline.composition import compose
from pgrag_dag.store import cache, db, locks, schema, staging

EXTRACTION_PURPOSES = ("extract", "glean")
EVICTED_REASON = "its response was evicted (pgrag cache evict); asked again by the next run"


@dataclass
class Eviction:
    """What an eviction did: ``removed`` cache entries (key, prompt_key, model, purpose, created_at,
    response), ``owed`` extraction passes marked to be asked again, and the ``partition`` they are of."""

    removed: list[dict[str, Any]] = field(default_factory=list)
    owed: int = 0
    partition: str | None = None

    def lines(self) -> list[str]:
        """One line per removed response, then a summary line."""
        out = [
            f"removed {e['purpose'] or 'response'} response {e['key'][:16]} (prompt {e['prompt_key'][:16]}, "
            f"model {e['model']}, cached {e['created_at']:%Y-%m-%d %H:%M:%S}): {_head(e['response'])}"
            for e in self.removed
        ]
        summary = (
            f"{len(self.removed)} cached response(s) removed"
            if self.removed
            else "no cached response matched; nothing removed"
        )
        if self.partition is not None:
            summary += (
                f"; {self.owed} extraction pass(es) of {self.partition} will be asked again by the next run"
            )
        return [*out, summary]


def _head(text: str, limit: int = 80) -> str:
    flat = " ".join(str(text).split())
    return repr(flat if len(flat) <= limit else flat[: limit - 1] + "…")


def evict_prompt(engine: Engine, prompt_key: str) -> Eviction:
    """Evict every cached response to the prompt whose key starts with ``prompt_key`` (≥ 8 lowercase
    hex digits), whichever model gave it.

    Raises :class:`ConfigurationError` for a malformed key and :class:`DatabaseError` (one line) when
    PostgreSQL fails.
    """
    with db.database_errors(engine.dsn), engine.connect(autocommit=True) as conn:
        schema.init_control(conn)
        with conn.transaction():
            return Eviction(cache.evict_prompt(conn, prompt_key.strip().lower()))


def evict_parse_errors(engine: Engine, realm: str, space: str) -> Eviction:
    """Evict the cached responses behind ``realm.space``'s stored extraction passes that still fail to
    parse (by the space's extractor's ``reparse``; every ``parse_error`` pass when it has none), and
    mark those passes owed, so the next run asks for them again — a first pass, or gleaning resumed at
    that pass. Holds the partition's stage lock (waits like a stage, ``operations.lock_wait_s``).

    Raises :class:`ConfigurationError` when the space is not declared, :class:`PartitionBusyError` when
    another run holds the partition, :class:`DatabaseError` when PostgreSQL fails.
    """
    validate_realm(realm)
    validate_space(space)
    extractor = compose(
        engine.settings, realm, space
    ).extractor  # an undeclared space is a ConfigurationError
    engine.init_realm(realm)
    with (
        db.database_errors(engine.dsn),
        locks.stage_lock(
            engine.dsn, realm, space, "cache evict", wait_s=engine.settings.operations.lock_wait_s
        ),
    ):
        with engine.connect() as conn, conn.transaction():
            locks.lock_partition(conn, realm, space)
            poison = [
                r
                for r in staging.parse_failures(conn, realm, space, extractor=extractor.identity).iter_rows(
                    named=True
                )
                if not _parses(extractor.op.reparse, r["raw_text"])
            ]
            removed = cache.evict_responses(
                conn, sorted({(r["model"], r["raw_text"]) for r in poison}), purposes=EXTRACTION_PURPOSES
            )
            owed = staging.owe_again(
                conn, realm, space, [(r["chunk_id"], r["pass"]) for r in poison], EVICTED_REASON
            )
    return Eviction(removed, owed, f"{realm}.{space}")


def _parses(reparse: Any, text: str) -> bool:
    if reparse is None:
        return False
    try:
        reparse(text)
    except ValueError:
        return False
    return True
