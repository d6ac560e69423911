"""Pool slots and the runs holding them: who holds each slot, which holders are gone, and reclaiming them.

A Dagster run claims one slot of a pool (``llm``) for each step of that pool while the step runs, and
frees it when the step ends. A run whose process is killed (``kill -9``, OOM, a closed laptop) never
frees it and stays ``STARTED``: with the ``llm`` limit of 2, two such runs block every later run at its
first model-calling step, forever. Dagster's run monitoring (on in the generated ``dagster.yaml``) frees
the slots of *finished* runs, but only while ``dagster dev`` / ``dagster-daemon`` runs, and it cannot
tell that an in-process run's process is gone. So every run that :func:`~pgrag_dag.assets.runner.
materialize_partition` launches is tagged with its host and process (:func:`process_tags`), and:

- :func:`inspect_pools` lists each pool's limit and every claimed or waiting slot with its run, the
  run's status and whether the holder is *orphaned*: the run is finished or unknown to the instance, or
  it is a pgrag run on this host whose process is gone;
- :func:`reclaim` marks each gone run of this host failed (``instance.report_run_failed``) and frees the
  slots of every orphaned holder (``event_log_storage.free_concurrency_slots_for_run``, what the UI's
  "free concurrency slots" does);
- :class:`SlotWatch` repeats that while a run waits for a slot, and says once who it is waiting for.

A run of another host, or one launched by ``dagster dev`` (no pgrag tags), is never judged: its slots
stay until it finishes or is freed in the UI.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import dagster as dg

log = logging.getLogger(__name__)

HOST_TAG, PID_TAG, START_TAG = "pgrag/host", "pgrag/pid", "pgrag/process_start"
"""Run tags naming the process that executes a run: host name, process id, and the process's start
time in clock ticks since boot (Linux ``/proc``; absent elsewhere), so a reused pid is not taken for
the run's process."""

POOLS = ("llm",)
"""Pools the assets declare (listed even before a step first claimed a slot of them)."""

UNFINISHED = [
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
    dg.DagsterRunStatus.CANCELING,
    dg.DagsterRunStatus.SUSPENDED,
]


def _process_start(pid: int) -> str | None:
    """Start time of process ``pid`` in clock ticks since boot (``/proc/<pid>/stat`` field 22), or None."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def process_tags() -> dict[str, str]:
    """The run tags naming this process: ``{HOST_TAG: hostname, PID_TAG: pid, START_TAG: start}``
    (``START_TAG`` only where ``/proc`` gives it). Strings, as Dagster requires of tag values."""
    tags = {HOST_TAG: socket.gethostname(), PID_TAG: str(os.getpid())}
    start = _process_start(os.getpid())
    if start is not None:
        tags[START_TAG] = start
    return tags


def process_alive(tags: dict[str, str]) -> bool | None:
    """Whether the process a run's tags name is running: None when it cannot be told (no pgrag tags, or
    another host), False when no process has that pid or the pid now belongs to a later process."""
    host, pid = tags.get(HOST_TAG), tags.get(PID_TAG)
    if host is None or pid is None or not pid.isdigit():
        return None
    if host != socket.gethostname():
        return None
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # a process of another user has that pid: not ours unless it started then
        pass
    start = tags.get(START_TAG)
    return start is None or _process_start(int(pid)) == start


@dataclass(frozen=True)
class Holder:
    """One claimed or waiting slot of a pool.

    ``state``: ``claimed`` (holds a slot), ``assigned`` (a freed slot is reserved for it; it takes it at
    its next try) or ``waiting`` (queued for one). ``status``: the run's Dagster
    status (``DagsterRunStatus`` value) or ``UNKNOWN`` when the instance has no such run. ``alive``: what
    :func:`process_alive` says of the run's process. ``orphaned`` with its ``reason`` when the slot will
    never be freed by its run.
    """

    pool: str
    run_id: str
    step_key: str
    state: Literal["claimed", "assigned", "waiting"]
    status: str
    host: str | None
    pid: str | None
    alive: bool | None
    orphaned: bool
    reason: str


@dataclass(frozen=True)
class PoolState:
    """A pool's limit (None: no limit configured), whether it is the instance default, and its holders."""

    pool: str
    limit: int | None
    from_default: bool
    holders: list[Holder] = field(default_factory=list)

    @property
    def in_use(self) -> int:
        """Slots in use or reserved (``claimed`` and ``assigned`` holders)."""
        return sum(h.state != "waiting" for h in self.holders)


def _judge(record: Any) -> tuple[str, dict[str, str], bool | None, bool, str]:
    """(status, tags, alive, orphaned, reason) of the run behind a slot; ``record`` a RunRecord or None."""
    if record is None:
        return "UNKNOWN", {}, None, True, "run not in this instance"
    run = record.dagster_run
    status = run.status.value
    if run.is_finished:
        return status, dict(run.tags), None, True, f"run ended ({status})"
    alive = process_alive(run.tags)
    if alive is False:
        return (
            status,
            dict(run.tags),
            alive,
            True,
            (f"process {run.tags.get(PID_TAG)} on host {run.tags.get(HOST_TAG)} is gone"),
        )
    if alive is None:
        who = (
            f"on host {run.tags[HOST_TAG]}, not checked"
            if HOST_TAG in run.tags
            else "launched outside pgrag, process unknown"
        )
        return status, dict(run.tags), alive, False, who
    return status, dict(run.tags), alive, False, "running"


def inspect_pools(instance: dg.DagsterInstance) -> list[PoolState]:
    """Every pool the instance knows (and :data:`POOLS`), sorted by name, with its limit and one
    :class:`Holder` per claimed, assigned or waiting step. A holder is orphaned when its run ended, is
    not in the instance, or is a pgrag run of this host whose process is gone; a run of another host or
    one without pgrag tags is never orphaned while unfinished. Empty when the instance's storage has no
    global concurrency (an in-memory instance). Reads only; storage errors propagate."""
    storage = instance.event_log_storage
    if not storage.supports_global_concurrency_limits:
        return []
    limits = {p.name: p for p in storage.get_pool_limits()}
    keys = sorted(set(storage.get_concurrency_keys()) | set(limits) | set(POOLS))
    infos = storage.get_concurrency_infos(keys)
    run_ids = {s.run_id for i in infos.values() for s in i.claimed_slots}
    run_ids |= {p.run_id for i in infos.values() for p in i.pending_steps}
    records = (
        {r.dagster_run.run_id: r for r in instance.get_run_records(dg.RunsFilter(run_ids=sorted(run_ids)))}
        if run_ids
        else {}
    )
    out = []
    for key in keys:
        info = infos[key]
        limit = limits[key].limit if key in limits else info.limit
        default = limits[key].from_default if key in limits else True  # not yet claimed: the instance default
        holders = []
        entries = [(s.run_id, s.step_key, "claimed") for s in info.claimed_slots]
        claimed = {(r, k) for r, k, _ in entries}
        entries += [
            (p.run_id, p.step_key, "waiting" if p.assigned_timestamp is None else "assigned")
            for p in info.pending_steps
            if (p.run_id, p.step_key) not in claimed
        ]
        for run_id, step_key, state in entries:
            status, tags, alive, orphaned, reason = _judge(records.get(run_id))
            holders.append(
                Holder(
                    key,
                    run_id,
                    step_key,
                    state,
                    status,
                    tags.get(HOST_TAG),
                    tags.get(PID_TAG),
                    alive,
                    orphaned,
                    reason,
                )
            )
        out.append(PoolState(key, limit, default, holders))
    return out


@dataclass(frozen=True)
class Reclaimed:
    """What :func:`reclaim` did for one run: the slots it freed and the waiting steps it dropped, per
    pool; whether the run was marked failed (``failed_status``: its status before); and why."""

    run_id: str
    slots: dict[str, int]
    waiting: dict[str, int]
    marked_failed: bool
    failed_status: str | None
    reason: str

    def describe(self) -> str:
        """One line for a user, e.g. ``freed 1 llm slot of run 3f2a… (process 123 on host h is gone);
        marked the run failed (was STARTED)``."""
        parts = [f"{n} {pool} slot{'s' if n != 1 else ''}" for pool, n in sorted(self.slots.items()) if n]
        parts += [
            f"{n} waiting {pool} step{'s' if n != 1 else ''}" for pool, n in sorted(self.waiting.items()) if n
        ]
        text = f"freed {' and '.join(parts) or 'no slots'} of run {self.run_id} ({self.reason})"
        return text + (f"; marked the run failed (was {self.failed_status})" if self.marked_failed else "")

    def as_dict(self) -> dict[str, Any]:
        """Plain values (JSON-ready)."""
        return asdict(self)


def gone_runs(instance: dg.DagsterInstance) -> list[dg.DagsterRun]:
    """Unfinished runs tagged with this host whose process is gone (never to finish by themselves)."""
    records = instance.get_run_records(
        dg.RunsFilter(statuses=UNFINISHED, tags={HOST_TAG: socket.gethostname()})
    )
    return [r.dagster_run for r in records if process_alive(r.dagster_run.tags) is False]


def reclaim(instance: dg.DagsterInstance, *, log_each: bool = True) -> list[Reclaimed]:
    """Mark every gone run of this host failed and free the slots of every orphaned holder.

    A gone run is failed with Dagster's ``UNEXPECTED_TERMINATION`` reason and a message naming its
    process, which also releases it from the run queue's per-partition limit. Freeing a slot hands it to
    the next waiting step. Returns one :class:`Reclaimed` per run acted on (empty when nothing was
    orphaned) and, with ``log_each``, logs each at WARNING. Live runs, runs of other hosts and runs
    without pgrag tags are left alone. Storage errors propagate.
    """
    from dagster._core.events import JobFailureData, RunFailureReason  # what run monitoring reports

    acted: dict[str, Reclaimed] = {}
    for run in gone_runs(instance):
        reason = f"process {run.tags.get(PID_TAG)} on host {run.tags.get(HOST_TAG)} is gone"
        instance.report_run_failed(
            run,
            f"pgrag: {reason}; the run can never finish, so it is marked failed "
            "and its pool slots are freed.",
            JobFailureData(error=None, failure_reason=RunFailureReason.UNEXPECTED_TERMINATION),
        )
        acted[run.run_id] = Reclaimed(run.run_id, {}, {}, True, run.status.value, reason)
    orphans: dict[str, list[Holder]] = {}
    for pool in inspect_pools(instance):
        for h in pool.holders:
            if h.orphaned:
                orphans.setdefault(h.run_id, []).append(h)
    for run_id, held in orphans.items():
        instance.event_log_storage.free_concurrency_slots_for_run(run_id)
        count = {
            st: {h.pool: sum(x.pool == h.pool and x.state in sts for x in held) for h in held}
            for st, sts in (("claimed", ("claimed", "assigned")), ("waiting", ("waiting",)))
        }
        prior = acted.get(run_id)
        acted[run_id] = Reclaimed(
            run_id,
            count["claimed"],
            count["waiting"],
            prior is not None,
            prior.failed_status if prior else None,
            prior.reason if prior else held[0].reason,
        )
    for r in acted.values() if log_each else ():
        log.warning("pgrag: %s", r.describe())
    return list(acted.values())


POOL_INIT_LOCK = 727_274_002
"""PostgreSQL advisory lock key serialising :func:`ensure_pool_limits` across processes."""


def ensure_pool_limits(instance: dg.DagsterInstance, dsn: str) -> list[str]:
    """Set the limit of every pool in :data:`POOLS` to the instance's default pool limit (the settings'
    ``dagster.llm_pool_limit``) before any run claims a slot — returns the pools it set.

    Dagster creates the limit lazily at a run's first claim, and re-creates it when the default changed;
    on PostgreSQL storage both fail (two runs making the first claim at once: the loser's insert hits the
    unique key; a changed default: the insert always does) and the transaction aborts, failing the run
    with ``InFailedSqlTransaction``. Here a missing limit is created and a different one set
    (``set_concurrency_slots``: Dagster then leaves it alone), under an advisory lock on ``dsn`` (the
    graph's server) so processes starting together do it once. The settings own these pools' limits:
    one set by hand (``dagster instance concurrency set``) is reset to the settings'.
    Raises :class:`~pgrag_dag.errors.DatabaseError` when the server is unreachable.
    """
    from pgrag_dag.store import db

    storage = instance.event_log_storage
    default = storage.get_pool_config().default_pool_limit
    if not storage.supports_global_concurrency_limits or default is None:
        return []

    def stale() -> dict[str, bool]:  # pool -> whether a limit row exists
        limits = {p.name: p.limit for p in storage.get_pool_limits()}
        return {pool: pool in limits for pool in POOLS if limits.get(pool) != default}

    if not stale():
        return []
    with db.connect(dsn, autocommit=True, vector=False) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (POOL_INIT_LOCK,))
        todo = stale()
        for pool, exists in todo.items():
            if exists:
                storage.set_concurrency_slots(pool, default)
            else:
                storage.initialize_concurrency_limit_to_default(pool)
    return sorted(todo)


class SlotWatch:
    """While a run of this process waits for a pool slot: reclaim orphaned slots every ``interval_s``
    seconds, and log once per set of holders who it is waiting for (so a wait is never silent).

    A context manager running a daemon thread on ``instance``; :attr:`reclaimed` collects what it freed.
    """

    def __init__(self, instance: dg.DagsterInstance, *, interval_s: float = 5.0) -> None:
        self.instance = instance
        self.interval_s = interval_s
        self.reclaimed: list[Reclaimed] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="pgrag-slot-watch", daemon=True)
        self._said: set[tuple[str, ...]] = set()
        self._mine = process_tags()

    def __enter__(self) -> SlotWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.check()
            except Exception:  # never let the watch break the run it watches
                log.debug("slot watch check failed", exc_info=True)

    def check(self) -> None:
        """One round: when a run of this process waits for a slot, reclaim orphans, then report the
        holders."""
        pools = inspect_pools(self.instance)
        mine = {
            h.run_id
            for p in pools
            for h in p.holders
            if h.state == "waiting" and h.pid == self._mine[PID_TAG] and h.host == self._mine[HOST_TAG]
        }
        if not mine:
            return
        if any(h.orphaned for p in pools for h in p.holders):
            self.reclaimed += reclaim(self.instance)
            pools = inspect_pools(self.instance)
        for p in pools:
            if not any(h.state == "waiting" and h.run_id in mine for h in p.holders):
                continue
            held = [h for h in p.holders if h.state == "claimed"]
            said = tuple(sorted(f"{h.run_id}/{h.step_key}" for h in held))
            if said in self._said:
                continue
            self._said.add(said)
            who = (
                "; ".join(f"run {h.run_id} step {h.step_key} ({h.status}, {h.reason})" for h in held)
                or "nobody"
            )
            log.warning(
                "pgrag: waiting for a slot of pool %s (limit %s), held by %s — `pgrag slots` lists them, "
                "`pgrag slots --free` frees those whose run is gone",
                p.pool,
                p.limit,
                who,
            )
