"""Chat-model access through litellm: failover, deadline-bounded retries, PostgreSQL cache, replay (§3.5).

:class:`ModelClient` is the one injected client every model-calling operator uses. Each call:

1. for each model of the failover list, in order:
   - ``replay``: serve the newest recorded response for these exact messages and parameters, from any
     model; a miss moves on to the next model, or raises :class:`ReplayMissError` if none is left;
   - any litellm model: serve a cached response for (model, messages, parameters) if there is one;
     otherwise call litellm, retrying with backoff until the per-call wall-clock deadline, and cache
     the response — except errors retrying cannot fix (:mod:`pgrag_dag.providers.model_errors`): a model that
     refuses its configuration (API key, access, name) raises :class:`ModelAccessError` at once and is
     not called again by this client; a request refused as invalid fails at once;
2. raise :class:`ModelError` when every model failed.

When the cache's database goes away the client fails closed and fast: cache access waits at most a
few seconds (:data:`DB_WAIT_S`), the failure is a one-line :class:`DatabaseError` naming the server,
and from then on every :meth:`ModelClient.complete`, in any thread, raises it at once without calling
a model. A response the model gave that could not be cached is kept (:attr:`ModelClient.unsaved`)
and, with a spool directory, written there as a one-line cassette; the next client of that directory
loads it into the cache on first use, so a rerun serves it instead of asking the model again.

Streaming (``complete(..., on_text=...)``, what ``pgrag query --stream`` uses): a live model is asked with
``stream=True`` and each piece of text is handed to ``on_text`` as it arrives; the whole text is cached under
the same key as an unstreamed call (streaming is not a request parameter), so a streamed answer is served
later to an unstreamed call and back. A cached or replayed response is handed to ``on_text`` whole, at once.
A stream that fails before its first piece is retried and failed over as any call; one that breaks after
text was shown raises :class:`StreamInterruptedError` at once (no retry, no failover: the text shown cannot
be taken back) and caches nothing.

Usage (calls, cache hits, tokens, estimated cost) is counted on the client for asset metadata.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import psycopg
from psycopg_pool import ConnectionPool, PoolClosed

from pgrag_dag.config.sections import LLMSettings
from pgrag_dag.errors import (
    DatabaseError,
    ModelAccessError,
    ModelError,
    ReplayMissError,
    StreamInterruptedError,
)
from pgrag_dag.providers import model_errors
from pgrag_dag.storable import escape_unstorable
from pgrag_dag.store import cache, db

log = logging.getLogger(__name__)

REPLAY = "replay"
DB_WAIT_S = 3.0
"""Seconds a cache access waits for a connection (and a new connection for the server) before the
client declares the database gone."""

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class Completion:
    """One chat response: ``text``; which ``model`` answered; token counts; whether it was a cache hit;
    ``key`` (its cache key), ``replayed`` (served by the ``replay`` model) and ``prompt_key`` (what
    ``pgrag cache evict --prompt-key`` takes)."""

    text: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    cache_hit: bool
    key: str = ""
    replayed: bool = False
    prompt_key: str = ""


@dataclass
class Usage:
    """Counters over a client's lifetime: model calls made, cache hits, tokens, estimated cost (USD)."""

    model_calls: int = 0
    cache_hits: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def as_dict(self) -> dict[str, float | int]:
        """The counters as a plain dict (cost rounded to 6 decimals), for asset metadata."""
        return {
            "model_calls": self.model_calls,
            "cache_hits": self.cache_hits,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cost_usd": round(self.cost_usd, 6),
        }


def prompt_key(messages: list[dict[str, str]], params: dict[str, Any]) -> str:
    """SHA-256 hex of the canonical JSON of (messages, parameters): the model-independent cache key."""
    blob = json.dumps({"messages": messages, "params": params}, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def cache_key(model: str, pkey: str) -> str:
    """SHA-256 hex of (model, prompt key): the cache's primary key."""
    return hashlib.sha256(f"{model}\n{pkey}".encode()).hexdigest()


def import_litellm() -> Any:
    """Import litellm lazily (3–5 s), with the local cost map so it never reaches for the network."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    litellm.telemetry = False
    litellm.suppress_debug_info = True
    return litellm


NEVER_RECORDED_HINT = (
    "this prompt was never recorded; add a live model to llm.models or import a cassette that has it"
)
ERASED_HINT = (
    "its recorded response was erased (pgrag purge of a document it quotes, or pgrag cache evict) and no "
    "cassette can bring it back; take that document out of the sources too, or add a live model to llm.models"
)
"""What a replay miss says: a prompt never recorded, or one whose response an erasure removed."""


class ModelClient:
    """The chat client injected into model-calling operators.

    Args:
        dsn: PostgreSQL DSN holding the ``pgrag__control.llm_cache`` table.
        settings: failover list, deadline (seconds), retries, temperature, ``api_base``.
        spool_dir: where responses that could not be cached are written (one cassette file each) and
            from where earlier ones are loaded into the cache on first use; ``None`` keeps them in
            memory only (:attr:`unsaved`).
        db_wait_s: seconds a cache access waits for a connection before the database counts as gone.
        cached_only: serve every model of the failover list from the cache only, never calling one: a
            recorded run replayed under its models' own names (the evaluation harness's ``--replay``);
            a miss raises :class:`ReplayMissError`.

    Thread-safe: operators call :meth:`complete` from a bounded thread pool.
    """

    def __init__(
        self,
        dsn: str,
        settings: LLMSettings,
        *,
        spool_dir: Path | None = None,
        db_wait_s: float = DB_WAIT_S,
        cached_only: bool = False,
    ) -> None:
        if not settings.models:
            raise ModelError("the model failover list is empty")
        self.dsn = dsn
        self.settings = settings
        self.usage = Usage()
        self.spool_dir = spool_dir
        self.db_wait_s = db_wait_s
        self.unsaved: list[dict[str, Any]] = []
        """Responses received whose cache write failed (cassette entries), in arrival order."""
        self._pool: ConnectionPool | None = None
        self._pool_lock = threading.Lock()
        self._down: str | None = None  # the DatabaseError message, once the database went away
        self._spool_loaded = spool_dir is None
        self._refused: dict[str, str] = {}  # model → why it refused its configuration (never called again)
        self.cached_only = cached_only

    # -- cache access -------------------------------------------------------------------------
    def _check_up(self) -> None:
        if self._down is not None:
            raise DatabaseError(self._down)

    def _went_down(self, exc: DatabaseError) -> DatabaseError:
        """Record that the database is gone (first error wins) and stop the pool's reconnecting."""
        with self._pool_lock:
            if self._down is None:
                kept = f"in {self.spool_dir}" if self.spool_dir is not None else "in memory"
                self._down = (
                    f"response cache unavailable: {exc}; no further model calls "
                    f"(responses received are kept {kept})"
                )
                log.error("%s", self._down)
                if self._pool is not None:  # off this thread: closing waits for the pool's workers
                    threading.Thread(target=self._pool.close, daemon=True, name="pgrag-cache-close").start()
        return DatabaseError(self._down)

    @contextlib.contextmanager
    def _cache(self) -> Iterator[psycopg.Connection]:
        """A cache connection; a database that is gone, or any psycopg error, is a
        :class:`DatabaseError` (and the client is down from then on)."""
        self._check_up()
        try:
            with self._pool_lock:
                if self._pool is None:
                    self._pool = ConnectionPool(
                        self.dsn,
                        min_size=1,
                        max_size=4,
                        open=True,
                        timeout=self.db_wait_s,
                        name="pgrag-cache",
                        kwargs={"autocommit": True, "connect_timeout": max(1, round(self.db_wait_s))},
                    )
                pool = self._pool
            conn = db.pooled_connection(
                pool, self.dsn, timeout_s=self.db_wait_s, connect_timeout=self.db_wait_s
            )
        except DatabaseError as exc:
            raise self._went_down(exc) from None
        except PoolClosed:  # another thread found the database gone and closed the pool meanwhile
            self._check_up()
            raise
        try:
            with db.database_errors(self.dsn):
                if not self._spool_loaded:
                    self._load_spool(conn)
                yield conn
        except DatabaseError as exc:
            raise self._went_down(exc) from None
        finally:
            pool.putconn(conn)

    def _load_spool(self, conn: psycopg.Connection) -> None:
        with self._pool_lock:  # every thread's first lookup waits until the spool is in the cache
            if not self._spool_loaded:
                n = cache.import_spool(conn, self.spool_dir)  # type: ignore[arg-type]
                if n:
                    log.info("loaded %d spooled response(s) from %s into the cache", n, self.spool_dir)
                self._spool_loaded = True

    def _keep(self, entry: dict[str, Any]) -> None:
        """Keep a response whose cache write failed: in memory, and in the spool directory if any."""
        with self.usage.lock:
            self.unsaved.append(entry)
        if self.spool_dir is not None:
            try:
                cache.spool(entry, self.spool_dir)
            except OSError as exc:
                log.error(
                    "could not spool response %s to %s (kept in memory only): %s",
                    entry["key"][:16],
                    self.spool_dir,
                    exc,
                )

    def close(self) -> None:
        """Close the cache connection pool."""
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    # -- calls --------------------------------------------------------------------------------
    def params(self, *, json_mode: bool) -> dict[str, Any]:
        """The request parameters that, with the messages, key the cache."""
        p: dict[str, Any] = {"temperature": self.settings.temperature, "max_tokens": self.settings.max_tokens}
        if json_mode:
            p["response_format"] = {"type": "json_object"}
        return p

    def complete(
        self,
        messages: list[dict[str, str]],
        *,
        purpose: str,
        json_mode: bool = True,
        on_text: Callable[[str], None] | None = None,
    ) -> Completion:
        """Answer ``messages`` (OpenAI chat format) for ``purpose`` (``extract``, ``glean``, ...).

        ``on_text``: stream the answer — each piece of a live model's text is passed to it as it arrives,
        a cached or replayed response whole, once (see the module docstring); the returned
        :class:`Completion` holds the whole text either way.

        Raises :class:`ReplayMissError` when only ``replay`` was available and it missed,
        :class:`ModelAccessError` (one line naming the model and the setting or environment variable to
        fix) when every live model of the failover list refused its configuration — a missing or refused
        API key, no access, an unknown model (:mod:`pgrag_dag.providers.model_errors`): such a model is not
        retried, and this client calls it no more — :class:`ModelError` when every model of the failover
        list failed within its deadline (a request the provider refuses as invalid is not retried), and
        :class:`DatabaseError` (one line naming the server) when the cache's database is gone — now or
        earlier in this client's life; no model is called then. A response received before the cache
        write failed is kept (:attr:`unsaved`, the spool directory) and the call raises. A stream that broke
        after ``on_text`` got text raises :class:`StreamInterruptedError`.
        """
        params = self.params(json_mode=json_mode)
        pkey = prompt_key(messages, params)
        errors: list[str] = []
        replay_miss: ReplayMissError | None = None
        refused: list[str] = []
        for model in self.settings.models:
            if model == REPLAY:
                with self._cache() as conn:
                    hit = cache.get_by_prompt(conn, pkey)
                    evicted = hit is None and cache.was_evicted(conn, pkey)
                if hit is None:
                    replay_miss = ReplayMissError(
                        pkey, purpose, ERASED_HINT if evicted else NEVER_RECORDED_HINT
                    )
                    errors.append(str(replay_miss))
                    continue
                return self._hit(hit, replayed=True, on_text=on_text)
            with self._cache() as conn:
                hit = cache.get_by_key(conn, cache_key(model, pkey))
            if hit is not None:
                return self._hit(hit, replayed=False, on_text=on_text)
            if self.cached_only:
                replay_miss = ReplayMissError(
                    pkey, purpose, f"the run is replayed and {model} has no recorded response for it"
                )
                errors.append(str(replay_miss))
                continue
            if model in self._refused:  # refused its configuration earlier: never asked again
                errors.append(self._refused[model])
                refused.append(model)
                continue
            try:
                return self._call(model, messages, params, pkey, purpose, on_text)
            except StreamInterruptedError:
                raise
            except ModelAccessError as exc:
                errors.append(str(exc))
                refused.append(model)
            except ModelError as exc:
                errors.append(f"{model}: {exc}")
        if replay_miss is not None and len(errors) == 1:
            raise replay_miss
        if refused and len(refused) == len([m for m in self.settings.models if m != REPLAY]):
            raise ModelAccessError("; ".join(errors), tuple(refused))
        raise ModelError(f"every model failed for {purpose} prompt {pkey[:16]}: " + "; ".join(errors))

    def _hit(
        self, hit: dict[str, Any], *, replayed: bool, on_text: Callable[[str], None] | None = None
    ) -> Completion:
        with self.usage.lock:
            self.usage.cache_hits += 1
        if on_text is not None:
            on_text(hit["response"])
        return Completion(
            hit["response"],
            hit["model"],
            hit["prompt_tokens"],
            hit["completion_tokens"],
            True,
            hit["key"],
            replayed,
            hit["prompt_key"],
        )

    def forget(self, completion: Completion) -> None:
        """Drop a live model's cached response that proved unusable, so a retry asks the model again.

        Replayed responses are recorded evidence and are never dropped.
        """
        if completion.key and not completion.replayed:
            with self._cache() as conn:
                cache.delete(conn, completion.key)

    def _call(
        self,
        model: str,
        messages: list[dict[str, str]],
        params: dict[str, Any],
        pkey: str,
        purpose: str,
        on_text: Callable[[str], None] | None = None,
    ) -> Completion:
        litellm = import_litellm()
        shown: list[str] = []  # streamed pieces passed to on_text in this call
        deadline = time.monotonic() + self.settings.deadline_s
        attempt, last = 0, "no attempt made"
        while attempt <= self.settings.max_retries:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            self._check_up()  # the database went away meanwhile: no more paid calls
            attempt += 1
            try:
                request = dict(
                    model=model,
                    messages=messages,
                    api_base=self.settings.api_base,
                    api_key=self.settings.api_key,
                    timeout=min(self.settings.request_timeout_s, remaining),
                    num_retries=0,
                    **params,
                )
                resp = (
                    litellm.completion(**request)
                    if on_text is None
                    else _streamed(litellm, request, on_text, shown)
                )
                text = escape_unstorable(
                    resp.choices[0].message.content or ""
                )  # NUL, lone surrogates: as JSON escapes
                usage = getattr(resp, "usage", None)
                pt = int(getattr(usage, "prompt_tokens", 0) or 0)
                ct = int(getattr(usage, "completion_tokens", 0) or 0)
                try:
                    cost = float(litellm.completion_cost(completion_response=resp) or 0.0)
                except Exception:  # unknown models have no price in the local cost map
                    cost = 0.0
            except Exception as exc:  # litellm maps provider errors onto many exception types
                if shown:
                    raise StreamInterruptedError(
                        f"{model}: the answer's stream broke after {sum(map(len, shown))} "
                        f"characters: {type(exc).__name__}: {db.one_line(exc, 200)}"
                    ) from exc
                refusal = model_errors.refusal(
                    exc,
                    model=model,
                    kind="chat",
                    api_key_set=self.settings.api_key is not None,
                    api_base=self.settings.api_base,
                )
                if refusal is not None and refusal.scope == "model":
                    with self.usage.lock:
                        self._refused.setdefault(model, refusal.message)
                    log.error("%s", refusal.message)
                    raise ModelAccessError(refusal.message, (model,)) from exc
                if refusal is not None:
                    raise ModelError(refusal.message) from exc
                last = f"{type(exc).__name__}: {exc}"
                pause = min(2.0 ** (attempt - 1) * 0.5, max(0.0, deadline - time.monotonic()))
                if pause > 0 and attempt <= self.settings.max_retries:
                    time.sleep(pause)
                continue
            with self.usage.lock:
                self.usage.model_calls += 1
                self.usage.prompt_tokens += pt
                self.usage.completion_tokens += ct
                self.usage.cost_usd += cost
            entry: dict[str, Any] = {
                "key": cache_key(model, pkey),
                "prompt_key": pkey,
                "model": model,
                "purpose": purpose,
                "request": {"messages": messages, "params": params},
                "response": text,
                "prompt_tokens": pt,
                "completion_tokens": ct,
            }
            try:
                with self._cache() as conn:
                    cache.put(conn, entry)
            except DatabaseError:
                self._keep(entry)
                raise
            return Completion(text, model, pt, ct, False, entry["key"], False, pkey)
        raise ModelError(
            f"{model} failed after {attempt} attempt(s) within {self.settings.deadline_s:.0f}s: {last}"
        )


def _streamed(litellm: Any, request: dict[str, Any], on_text: Callable[[str], None], shown: list[str]) -> Any:
    """Ask with ``stream=True``, pass each piece of text to ``on_text`` (and append it to ``shown``) as it
    arrives, and return the whole response as litellm builds it from the chunks (``choices``, ``usage`` —
    the provider's counts, asked for with ``stream_options.include_usage``, or litellm's estimate when it
    sends none)."""
    chunks = []
    for chunk in litellm.completion(**request, stream=True, stream_options={"include_usage": True}):
        chunks.append(chunk)
        piece = chunk.choices[0].delta.content if chunk.choices else None
        if piece:
            shown.append(piece)
            on_text(piece)
    built = litellm.stream_chunk_builder(chunks, messages=request["messages"])
    if built is None:
        raise ModelError(f"{request['model']} streamed no response")
    return built


def map_calls(
    fn: Callable[[T], R],
    items: Sequence[T],
    *,
    concurrency: int,
    on_done: Callable[[int], None] | None = None,
) -> list[R]:
    """``[fn(item) for item in items]`` on at most ``concurrency`` threads, results in order.

    The first exception ``fn`` raises (e.g. :class:`DatabaseError` once the cache is gone) is raised
    at once: items not yet started are cancelled, and calls in flight finish in the background (a
    response they receive is kept by the client) instead of being waited for. ``on_done(n)`` is called in
    the calling thread each time more items are through (``n`` of ``len(items)``).
    """
    pool = ThreadPoolExecutor(max_workers=max(1, concurrency), thread_name_prefix="pgrag-model")
    try:
        futures = [pool.submit(fn, item) for item in items]
        pending = set(futures)
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            failed = next((f for f in futures if f in done and f.exception() is not None), None)
            if failed is not None:
                raise failed.exception()  # type: ignore[misc]
            if on_done is not None:
                on_done(len(futures) - len(pending))
        return [future.result() for future in futures]
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
