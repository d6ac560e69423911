"""Query telemetry (paper §6.1 "Coverage"; issue 14 item 3): recording what each query touched.

With ``telemetry.coverage`` on (:class:`~pgrag_dag.config.TelemetrySettings`), :func:`record_query` is
called by :func:`pgrag_dag.query.query_data` after retrieval: it hashes the normalised question
(:func:`question_hash` — the text is never stored), collects the ids of the entities and communities the
result returned (matched entities and the endpoints of its relations; community reports) and hands the
event to a per-process background :class:`EventWriter`. The writer owns its own connection and a bounded
queue: a full queue drops the event (counted, with a warning), a failed write is logged and swallowed —
the one declared exception to fail-closed (§3.5): read-side bookkeeping never fails, nor slows, the query
it describes. Events still queued at interpreter exit get up to :data:`EXIT_FLUSH_S` seconds.

Two questions rest on the events (:func:`pgrag_dag.operate.coverage.coverage`): the communities with
least retrieval attention and the live entities never retrieved. The SQL is in
:mod:`pgrag_dag.store.telemetry`.
"""

from __future__ import annotations

import atexit
import hashlib
import logging
import queue
import threading
import time
import unicodedata
from dataclasses import dataclass

import psycopg

from pgrag_dag.config.sections import TelemetrySettings
from pgrag_dag.query_param import QueryResult
from pgrag_dag.store import db
from pgrag_dag.store import telemetry as store

log = logging.getLogger(__name__)

EXIT_FLUSH_S = 2.0
"""Seconds the interpreter's exit waits for queued events (a CLI query records its event before it ends)."""


def question_hash(question: str) -> str:
    """Hex SHA-256 of the normalised question: Unicode NFKC, case-folded, whitespace runs collapsed to one
    blank, trimmed — so ``"Who  was Ada?"`` and ``"who was ada?"`` hash alike.

    >>> question_hash("Who  was ADA? ") == question_hash("who was ada?")
    True
    """
    text = " ".join(unicodedata.normalize("NFKC", question).casefold().split())
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def touched(result: QueryResult) -> tuple[list[int], list[int]]:
    """``(entity ids, community ids)`` a query result returned, each sorted and distinct: its matched
    entities and both endpoints of each relation; its community reports."""
    entities = {int(e["id"]) for e in result.entities}
    entities |= {int(r[k]) for r in result.relations for k in ("subject_id", "object_id")}
    return sorted(entities), sorted({int(c["id"]) for c in result.communities})


@dataclass
class WriterStats:
    """What a writer did so far: events ``written``, ``dropped`` (queue full), ``failed`` (write errors)."""

    written: int = 0
    dropped: int = 0
    failed: int = 0


class EventWriter:
    """A background writer of ``query_events`` rows for one DSN: a daemon thread draining a bounded queue
    (``queue_size`` events) into the realm's table over its own autocommit connection (opened on first use,
    reopened after an error). :meth:`submit` never blocks and never raises."""

    def __init__(self, dsn: str, queue_size: int) -> None:
        self.dsn = dsn
        self.stats = WriterStats()
        self._queue: queue.Queue[tuple[str, store.Event]] = queue.Queue(maxsize=queue_size)
        self._conn: psycopg.Connection | None = None
        self._thread = threading.Thread(target=self._run, name="pgrag-telemetry", daemon=True)
        self._thread.start()

    def submit(self, realm: str, event: store.Event) -> bool:
        """Queue one event of ``realm``; ``False`` (and a warning with the running count) when the queue is
        full and the event is dropped."""
        try:
            self._queue.put_nowait((realm, event))
            return True
        except queue.Full:
            self.stats.dropped += 1
            log.warning(
                "coverage telemetry: queue full (%d events), event dropped (%d dropped so far)",
                self._queue.maxsize,
                self.stats.dropped,
            )
            return False

    def flush(self, timeout_s: float = 5.0) -> bool:
        """Wait up to ``timeout_s`` seconds until every queued event was written or failed; whether it was."""
        deadline = time.monotonic() + timeout_s
        while self._queue.unfinished_tasks:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.005)
        return True

    def _run(self) -> None:
        while True:
            batch = [self._queue.get()]
            while len(batch) < 100:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            try:
                self._write(batch)
            finally:
                for _ in batch:
                    self._queue.task_done()

    def _write(self, batch: list[tuple[str, store.Event]]) -> None:
        by_realm: dict[str, list[store.Event]] = {}
        for realm, event in batch:
            by_realm.setdefault(realm, []).append(event)
        for realm, events in by_realm.items():
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = db.connect(self.dsn, autocommit=True, vector=False, connect_timeout=5)
                self.stats.written += store.record_events(self._conn, realm, events)
            except Exception as exc:  # noqa: BLE001 - telemetry never fails the query it describes (§6.1)
                self.stats.failed += len(events)
                log.warning(
                    "coverage telemetry: %d event(s) of realm %s not recorded (%d failed so far): %s",
                    len(events),
                    realm,
                    self.stats.failed,
                    db.scrub(db.one_line(exc), self.dsn),
                )
                if self._conn is not None:
                    self._conn.close()
                    self._conn = None


_writers: dict[str, EventWriter] = {}
_writers_lock = threading.Lock()


def writer_for(dsn: str, *, queue_size: int = 1000) -> EventWriter:
    """The process's :class:`EventWriter` for ``dsn`` (made on first use with ``queue_size``)."""
    with _writers_lock:
        writer = _writers.get(dsn)
        if writer is None:
            writer = _writers[dsn] = EventWriter(dsn, queue_size)
        return writer


def flush_all(timeout_s: float = EXIT_FLUSH_S) -> None:
    """Wait (up to ``timeout_s`` seconds in all) for every writer of the process to drain its queue."""
    deadline = time.monotonic() + timeout_s
    for writer in list(_writers.values()):
        writer.flush(max(0.0, deadline - time.monotonic()))


atexit.register(flush_all)


def record_query(result: QueryResult, *, dsn: str, realm: str, telemetry: TelemetrySettings | None) -> None:
    """Hand one event for ``result`` to the background writer when ``telemetry.coverage`` is on; else
    nothing. Never raises (an unexpected error is logged): the query has already succeeded."""
    if telemetry is None or not telemetry.coverage or result.param.mode == "bypass":
        return
    try:
        entities, communities = touched(result)
        event = (result.param.space, question_hash(result.question), result.param.mode, entities, communities)
        writer_for(dsn, queue_size=telemetry.queue_size).submit(realm, event)
    except Exception as exc:  # noqa: BLE001 - see the module docstring
        log.warning("coverage telemetry: event not queued: %s", exc)
