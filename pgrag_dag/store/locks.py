"""Partition locks: who may write a realm/space, and in what order (issue 11; the order is documented in
:mod:`pgrag_dag.store.schema`).

- :func:`stage_lock`  a session-level advisory lock on its own connection, held for a whole stage
  (model calls included), so a second run of a partition waits for the first one's stage — at most
  ``operations.lock_wait_s`` seconds — and is then refused with :class:`PartitionBusyError` naming the
  holder. A killed holder's connection closes and PostgreSQL releases its lock at once.
  :func:`stage_locks` holds those of several spaces at once (``pgrag reembed``: every space of a realm).
- :func:`lock_partition`  the transaction-level advisory lock every write transaction of a partition
  takes first, so writes of different stages (and :func:`~pgrag_dag.pipeline.delete_document`) never
  interleave.

The two use different keys: a stage holding its stage lock takes the partition lock on another
connection without waiting on itself.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import socket
import time
from collections.abc import Iterable, Iterator

import psycopg

from pgrag_dag.errors import PartitionBusyError
from pgrag_dag.store import db

log = logging.getLogger(__name__)


def _key(kind: str, realm: str, space: str) -> int:
    """A signed 64-bit advisory lock key for ``kind`` of ``realm.space``: SHA-256 of the text, unambiguous
    for any space (a realm holds neither ``.`` nor ``:``)."""
    text = f"{realm}.{space}" if kind == "partition" else f"{kind}:{realm}.{space}"
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big", signed=True)


def lock_partition(conn: psycopg.Connection, realm: str, space: str) -> None:
    """Serialise writes to one realm/space until the current transaction ends (waits while another
    write transaction of the partition is open; those are short — no model call runs inside one)."""
    conn.execute("SELECT pg_advisory_xact_lock(%s)", (_key("partition", realm, space),))


def holder(conn: psycopg.Connection, key: int) -> str:
    """Who holds advisory lock ``key``: its application name (stage, process and host), PostgreSQL
    backend pid and since when; ``"unknown holder"`` when it was released meanwhile."""
    unsigned = key & 0xFFFF_FFFF_FFFF_FFFF
    row = conn.execute(
        """SELECT a.application_name, a.pid, to_char(a.backend_start AT TIME ZONE 'UTC',
             'YYYY-MM-DD HH24:MI:SS')
             FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
            WHERE l.locktype = 'advisory' AND l.granted AND l.classid = %s AND l.objid = %s AND l.objsubid = 1
            LIMIT 1""",
        (unsigned >> 32, unsigned & 0xFFFF_FFFF),
    ).fetchone()
    if row is None:
        return "unknown holder"
    name, pid, since = row
    return f"{name or 'a client'}, PostgreSQL backend {pid}, connected since {since} UTC"


def running(conn: psycopg.Connection, realm: str, space: str) -> str | None:
    """Who holds the stage lock of ``realm.space`` now — a run indexing it, as :func:`holder` names it
    (``pgrag embeddings pid 4242@host, PostgreSQL backend 77, connected since …``) — or ``None``. Reads
    ``pg_locks`` only: it never takes or waits for the lock."""
    said = holder(conn, _key("stage", realm, space))
    return None if said == "unknown holder" else said


def indexing(conn: psycopg.Connection) -> list[str]:
    """Every session of the database that holds a stage lock now — a run indexing some space, named as its
    :func:`stage_locks` connection named itself (``pgrag embeddings pid 4242@host``) — sorted. Reads
    ``pg_locks`` and ``pg_stat_activity`` only."""
    rows = conn.execute(
        """SELECT DISTINCT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
            WHERE l.locktype = 'advisory' AND l.granted AND a.application_name LIKE 'pgrag %'
            ORDER BY 1"""
    ).fetchall()
    return [str(r[0]) for r in rows]


@contextlib.contextmanager
def stage_lock(dsn: str, realm: str, space: str, stage: str, *, wait_s: float) -> Iterator[None]:
    """Hold the stage lock of ``realm.space`` for the duration of the ``with`` block.

    The lock lives on a dedicated autocommit connection whose ``application_name`` names the stage,
    this process and host (so a waiting run can say who holds it). Polls every 0.2 s for up to
    ``wait_s`` seconds (0: one try), saying once (a warning of this module's logger) who it waits for.

    Raises:
        PartitionBusyError: another run still holds it after ``wait_s`` seconds.
        DatabaseError: the server is unreachable.
    """
    with stage_locks(dsn, realm, [space], stage, wait_s=wait_s):
        yield


@contextlib.contextmanager
def stage_locks(dsn: str, realm: str, spaces: Iterable[str], stage: str, *, wait_s: float) -> Iterator[None]:
    """Hold the stage locks of every ``realm.<space>`` of ``spaces`` for the ``with`` block, as
    :func:`stage_lock` does for one: on one connection, taken in sorted space order (two holders of
    several never deadlock), waiting at most ``wait_s`` seconds in all (``pgrag reembed`` holds every
    space of a realm this way, so no stage of the realm runs while its vectors are switched).

    Raises:
        PartitionBusyError: a space's lock is still held by another run after ``wait_s`` seconds (the
            locks taken so far are released).
        DatabaseError: the server is unreachable.
    """
    conn = db.connect(dsn, autocommit=True, vector=False)
    try:
        label = f"pgrag {stage} pid {os.getpid()}@{socket.gethostname()}"
        conn.execute("SELECT set_config('application_name', %s, false)", (label[:63],))
        start = time.monotonic()
        for space in sorted(set(spaces)):
            key = _key("stage", realm, space)
            said = False
            while not conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()[0]:  # type: ignore[index]
                waited = time.monotonic() - start
                if waited >= wait_s:
                    raise PartitionBusyError(f"{realm}.{space}", holder(conn, key), round(waited, 1))
                if not said:  # a wait is said once, with who is waited for (not a silent minute)
                    log.warning(
                        "%s.%s: the %s stage waits up to %g s (operations.lock_wait_s) for another run "
                        "of the space to finish: %s",
                        realm,
                        space,
                        stage,
                        wait_s,
                        holder(conn, key),
                    )
                    said = True
                time.sleep(min(0.2, wait_s - waited))
        yield
    finally:
        with contextlib.suppress(
            psycopg.Error
        ):  # released now, not when the server notices the closed session:
            conn.execute("SELECT pg_advisory_unlock_all()")  # the next stage of this run must not wait for it
        conn.close()  # closing the session releases the locks (if the unlock could not be sent)
