"""Dagster operations (issue 11): run monitoring and a one-run-per-partition queue in the generated
``dagster.yaml``, failure reasons that are never empty, and pool slots of killed runs reclaimed."""

from __future__ import annotations

import fnmatch
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import yaml

from pgrag_dag.assets.runner import FREE_SLOTS_AFTER_RUN_END_S, dagster_home, run_failure_reasons
from pgrag_dag.config import load_settings
from tests.fix_corpus import SmallCorpus

pytestmark = pytest.mark.dagster


@pytest.fixture(autouse=True)
def _restore_dagster_home(monkeypatch: pytest.MonkeyPatch) -> None:
    """:func:`dagster_home` exports ``DAGSTER_HOME``; put back what was there after each test."""
    monkeypatch.setenv("DAGSTER_HOME", "unset-by-test")
    monkeypatch.delenv("DAGSTER_HOME")


ROOT = Path(__file__).resolve().parents[2]
PER_PARTITION = {"key": "dagster/partition", "value": {"applyLimitPerUniqueValue": True}, "limit": 1}


def _home(tmp_path: Path, **dagster: object) -> Path:
    """A Dagster home written from settings with sqlite instance storage (no database needed)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    cfg = tmp_path / "pgrag.yaml"
    cfg.write_text(yaml.safe_dump({"data_dir": "data", "dagster": {"instance_storage": "sqlite", **dagster}}))
    return dagster_home(load_settings(cfg))


def test_dagster_yaml_turns_on_run_monitoring_and_allows_one_run_per_partition(tmp_path: Path) -> None:
    home = _home(tmp_path / "a", run_start_timeout_s=12.5, run_timeout_s=3600, max_concurrent_runs=3)
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert instance.run_monitoring_enabled
        assert instance.run_monitoring_start_timeout_seconds == 13  # whole seconds, rounded up
        assert instance.run_monitoring_max_runtime_seconds == 3600
        assert (
            instance.run_monitoring_settings["free_slots_after_run_end_seconds"] == FREE_SLOTS_AFTER_RUN_END_S
        )
        # the queued run coordinator (Dagster's default) carries the per-partition limit; dagster dev's
        # daemon runs the queue and run monitoring because of these settings
        assert type(instance.run_coordinator).__name__ == "QueuedRunCoordinator"
        queue = instance.get_concurrency_config().run_queue_config
        assert queue is not None and queue.max_concurrent_runs == 3
        assert list(queue.tag_concurrency_limits) == [PER_PARTITION]
        assert {"QUEUED_RUN_COORDINATOR", "MONITORING"} <= set(instance.get_required_daemon_types())
    home = _home(tmp_path / "b")  # run_timeout_s 0: no limit, so no max_runtime_seconds at all
    assert "max_runtime_seconds" not in (home / "dagster.yaml").read_text()
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert instance.run_monitoring_max_runtime_seconds == 0
        assert instance.run_monitoring_start_timeout_seconds == 180


def test_the_run_queue_starts_one_run_per_partition(tmp_path: Path) -> None:
    # Dagster's own queued-run daemon, one iteration at a time, on the instance the generated
    # dagster.yaml gives, with a real code server (tests/queue_defs.py) launching what it dequeues.
    from dagster._core.workspace.context import WorkspaceProcessContext
    from dagster._core.workspace.load_target import ModuleTarget
    from dagster._daemon.run_coordinator.queued_run_coordinator_daemon import QueuedRunCoordinatorDaemon

    from tests.queue_defs import noop_job

    home = _home(tmp_path)
    target = ModuleTarget(
        module_name="tests.queue_defs",
        attribute="defs",
        working_directory=str(ROOT),
        location_name="queue_test",
    )
    with (
        dg.DagsterInstance.from_config(str(home)) as instance,
        WorkspaceProcessContext(instance, target) as ctx,
    ):
        location = ctx.create_request_context().get_code_location("queue_test")
        remote = location.get_repository("__repository__").get_full_job("noop_job")

        def run(partition: str, status: dg.DagsterRunStatus) -> str:
            return instance.create_run_for_job(
                noop_job,
                status=status,
                tags={"dagster/partition": partition},
                remote_job_origin=remote.get_remote_origin(),
                job_code_origin=remote.get_python_origin(),
            ).run_id

        def status(run_id: str) -> str:
            return instance.get_run_by_id(run_id).status.value  # type: ignore[union-attr]

        def iterate() -> None:
            list(QueuedRunCoordinatorDaemon(interval_seconds=1).run_iteration(ctx))

        running = run("acme.docs", dg.DagsterRunStatus.STARTED)  # e.g. a materialisation from the CLI
        second, other, third = (
            run(p, dg.DagsterRunStatus.QUEUED) for p in ("acme.docs", "acme.wiki", "acme.docs")
        )
        iterate()
        assert status(second) == status(third) == "QUEUED"  # acme.docs has a run in progress
        assert status(other) != "QUEUED"  # another partition starts at once
        instance.report_run_failed(instance.get_run_by_id(running))  # type: ignore[arg-type]
        iterate()
        assert status(second) != "QUEUED" and status(third) == "QUEUED"  # one at a time, in order
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and {status(other), status(second)} != {"SUCCESS"}:
            time.sleep(0.5)
        assert status(other) == status(second) == "SUCCESS"


class _Busy(dg.ConfigurableResource):  # type: ignore[type-arg]
    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        raise OSError()


class PartitionBusy(Exception):
    pass


@dg.asset
def resource_fails(busy: _Busy) -> None:
    pass


@dg.asset
def empty_message() -> None:
    raise TimeoutError()


@dg.asset
def empty_while_handling() -> None:
    try:
        {}["partition"]
    except KeyError:
        raise PartitionBusy()  # noqa: B904 (the implicit context is the point)


@dg.asset
def failure_without_description() -> None:
    raise dg.Failure()


@dg.asset
def wrapped_empty() -> None:
    try:
        raise TimeoutError()
    except TimeoutError as exc:
        raise RuntimeError("stage relations: lock wait over") from exc


def test_a_failed_runs_reason_is_never_empty() -> None:
    quiet = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}
    expected = {
        resource_fails: "resource_fails: Initialization of resources [*] failed: OSError (no message)",
        empty_message: "empty_message: TimeoutError (no message)",
        empty_while_handling: "empty_while_handling: PartitionBusy (no message), "
        "raised while handling KeyError: 'partition'",
        failure_without_description: "failure_without_description: Failure (no message)",
        wrapped_empty: "wrapped_empty: TimeoutError (no message), "
        "within RuntimeError: stage relations: lock wait over",
    }
    with dg.instance_for_test() as instance:
        for asset, reason in expected.items():
            result = dg.materialize(
                [asset],
                instance=instance,
                resources={"busy": _Busy()},
                raise_on_error=False,
                run_config=quiet,
            )
            reasons = run_failure_reasons(result)
            assert len(reasons) == 1 and fnmatch.fnmatchcase(reasons[0], reason.replace("[*]", "[[]*[]]")), (
                reasons
            )
        ok = dg.materialize([dg.asset(name="fine")(lambda: None)], instance=instance, run_config=quiet)
        assert run_failure_reasons(ok) == []


def test_pgrag_slots_lists_each_holder_and_frees_only_the_orphaned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # real runs in a real instance, each claiming an llm slot through the event log storage as a step
    # does; what differs is the process each run's tags name
    import socket

    from typer.testing import CliRunner

    from pgrag_dag.assets import slots
    from pgrag_dag.cli import app
    from tests.queue_defs import noop_job

    home = _home(tmp_path, llm_pool_limit=5)
    monkeypatch.setenv("PGRAG_CONFIG", str(tmp_path / "pgrag.yaml"))
    dead = subprocess.Popen(["true"])
    dead.wait()  # a pid whose process is gone
    me = slots.process_tags()
    cases = {
        "gone": ({**me, slots.PID_TAG: str(dead.pid), slots.START_TAG: "1"}, dg.DagsterRunStatus.STARTED),
        "reused_pid": (
            {**me, slots.START_TAG: "1"},
            dg.DagsterRunStatus.STARTED,
        ),  # this pid, an earlier process
        "ended": (me, dg.DagsterRunStatus.SUCCESS),
        "live": (me, dg.DagsterRunStatus.STARTED),
        "other_host": (
            {**me, slots.HOST_TAG: socket.gethostname() + "-elsewhere"},
            dg.DagsterRunStatus.STARTED,
        ),
        "no_tags": ({}, dg.DagsterRunStatus.STARTED),
    }
    with dg.DagsterInstance.from_config(str(home)) as instance:
        ids = {
            name: instance.create_run_for_job(noop_job, status=status, tags=tags).run_id
            for name, (tags, status) in cases.items()
        }
        storage = instance.event_log_storage
        storage.initialize_concurrency_limit_to_default("llm")
        for name in [*cases, "deleted"]:  # "deleted": a run the instance no longer has
            storage.claim_concurrency_slot("llm", ids.get(name, "0" * 36), "raw_extractions")
        runner = CliRunner()
        listed = runner.invoke(app, ["slots", "--json"])
        assert listed.exit_code == 0, listed.output
        (llm,) = [p for p in json.loads(listed.output)["pools"] if p["pool"] == "llm"]
        assert llm["limit"] == 5 and llm["in_use"] == 5
        holders = {h["run_id"]: h for h in llm["holders"]}
        name_of = {v: k for k, v in ids.items()} | {"0" * 36: "deleted"}
        judged = {name_of[r]: (h["state"], h["orphaned"]) for r, h in holders.items()}
        assert judged == {
            "gone": ("claimed", True),
            "reused_pid": ("claimed", True),
            "ended": ("claimed", True),
            "live": ("claimed", False),
            "other_host": ("claimed", False),
            "no_tags": ("waiting", False),
            "deleted": ("waiting", True),
        }
        assert holders[ids["gone"]]["reason"] == f"process {dead.pid} on host {socket.gethostname()} is gone"
        text = runner.invoke(app, ["slots"]).output
        assert "pool llm: limit 5 (default), 5 in use, 2 waiting" in text and "4 orphaned" in text

        freed = runner.invoke(app, ["slots", "--free"])
        assert freed.exit_code == 0, freed.output
        assert (
            f"freed 1 llm slot of run {ids['gone']} (process {dead.pid} "
            f"on host {socket.gethostname()} is gone); "
            "marked the run failed (was STARTED)"
        ) in freed.output
        assert f"freed 1 llm slot of run {ids['ended']} (run ended (SUCCESS))" in freed.output
        assert f"freed 1 waiting llm step of run {'0' * 36} (run not in this instance)" in freed.output
        status = {n: instance.get_run_by_id(r).status.value for n, r in ids.items()}  # type: ignore[union-attr]
        assert status == {
            "gone": "FAILURE",
            "reused_pid": "FAILURE",
            "ended": "SUCCESS",
            "live": "STARTED",
            "other_host": "STARTED",
            "no_tags": "STARTED",
        }
        failure = instance.get_records_for_run(ids["gone"], of_type=dg.DagsterEventType.RUN_FAILURE).records
        assert "is gone; the run can never finish" in failure[0].event_log_entry.dagster_event.message  # type: ignore[union-attr]
        after = json.loads(runner.invoke(app, ["slots", "--json"]).output)
        (llm,) = [p for p in after["pools"] if p["pool"] == "llm"]
        # a freed slot went to the waiting run (it takes it at its next try); nothing orphaned is left
        judged = {name_of[h["run_id"]]: h["state"] for h in llm["holders"]}
        assert judged == {"live": "claimed", "other_host": "claimed", "no_tags": "assigned"}
        assert not any(h["orphaned"] for h in llm["holders"]) and llm["in_use"] == 3
        assert runner.invoke(app, ["slots", "--free"]).output.startswith("nothing orphaned to free\n")
    assert os.environ.get("DAGSTER_HOME") == str(home)


# --- killed runs, end to end: materialize_partition in subprocesses, SIGKILLed while they hold llm slots


MATERIALIZE = (
    "import json, sys\n"
    "from pgrag_dag.assets.runner import materialize_partition\n"
    "from pgrag_dag.config import load_settings\n"
    "out = materialize_partition(load_settings(sys.argv[1]), sys.argv[2], config_path=sys.argv[1])\n"
    "print(json.dumps(out['_run']))\n"
)


@dataclass
class Killable:
    """The small corpus with a second space ``other``, Dagster storage in its own PostgreSQL database,
    and a model that answers nothing until :attr:`gate` is set (so a run stays in raw_extractions)."""

    corpus: SmallCorpus
    gate: threading.Event
    instance: dg.DagsterInstance
    logs: Path

    def launch(self, partition: str, name: str) -> subprocess.Popen[str]:
        """``materialize_partition(partition)`` in a fresh interpreter; stdout/stderr to
        ``<name>.out/.err``."""
        env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "PGRAG_CONFIG": str(self.corpus.config)}
        env.pop("DAGSTER_HOME", None)
        return subprocess.Popen(
            [sys.executable, "-c", MATERIALIZE, str(self.corpus.config), partition],
            cwd=ROOT,
            env=env,
            text=True,
            stdout=(self.logs / f"{name}.out").open("w"),
            stderr=(self.logs / f"{name}.err").open("w"),
        )

    def err(self, name: str) -> str:
        return (self.logs / f"{name}.err").read_text()

    def holders(self) -> list[Any]:
        from pgrag_dag.assets import slots

        return [h for p in slots.inspect_pools(self.instance) if p.pool == "llm" for h in p.holders]

    def wait_until(
        self, what: str, fn: Callable[[], Any], procs: dict[str, subprocess.Popen[str]], timeout: float = 180
    ) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = fn()
            if got:
                return got
            for name, p in procs.items():
                assert p.poll() is None, (
                    f"{name} exited {p.returncode} before {what}: {self.err(name)[-3000:]}"
                )
            time.sleep(0.3)
        raise AssertionError(f"timed out waiting for {what}")

    def run_id_of(self, proc: subprocess.Popen[str]) -> str:
        from pgrag_dag.assets import slots

        (record,) = self.instance.get_run_records(dg.RunsFilter(tags={slots.PID_TAG: str(proc.pid)}))
        return record.dagster_run.run_id


@pytest.fixture
def killable(
    small_corpus: SmallCorpus, realm: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Killable]:
    from psycopg import sql

    from pgrag_dag.store import db
    from tests.fix_corpus import extraction_answer

    gate = threading.Event()
    small_corpus.server.answer = lambda messages: (gate.wait(300), extraction_answer(messages))[1]
    cfg = yaml.safe_load(small_corpus.config.read_text())
    spaces = cfg["realms"][realm]["spaces"]
    spaces["other"] = dict(spaces["main"])
    cfg["llm"]["deadline_s"] = 300
    name = f"dagster_{realm}"
    cfg["dagster"] = {"instance_storage": "postgres", "storage_database": name, "sensors": False}
    small_corpus.config.write_text(yaml.safe_dump(cfg))
    monkeypatch.setenv("PGRAG_CONFIG", str(small_corpus.config))
    logs = tmp_path / "logs"
    logs.mkdir()
    home = dagster_home(small_corpus.settings())  # creates the storage database and its tables once
    with dg.DagsterInstance.from_config(str(home)) as instance:
        try:
            yield Killable(small_corpus, gate, instance, logs)
        finally:
            gate.set()
    with db.connect(small_corpus.settings().database_url, autocommit=True, vector=False) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def _kill(proc: subprocess.Popen[str]) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


@pytest.mark.slow
def test_two_runs_killed_holding_the_llm_slots_do_not_block_the_next_materialisation(
    killable: Killable, realm: str
) -> None:
    from typer.testing import CliRunner

    from pgrag_dag.cli import app

    procs = {"a": killable.launch(f"{realm}.main", "a"), "b": killable.launch(f"{realm}.other", "b")}
    pids = {str(p.pid) for p in procs.values()}
    # both runs are inside raw_extractions, each holding one of the pool's two slots
    killable.wait_until(
        "both llm slots claimed",
        lambda: {h.pid for h in killable.holders() if h.state == "claimed"} == pids,
        procs,
    )
    ids = {n: killable.run_id_of(p) for n, p in procs.items()}
    for p in procs.values():
        _kill(p)
    listed = CliRunner().invoke(app, ["slots"])
    assert listed.exit_code == 0, listed.output
    assert "pool llm: limit 2 (default), 2 in use, 0 waiting" in listed.output
    for run_id in ids.values():
        assert f"claimed  run {run_id} step raw_extractions STARTED: ORPHANED (process " in listed.output

    killable.gate.set()
    started = time.monotonic()
    c = killable.launch(f"{realm}.main", "c")
    try:
        assert c.wait(timeout=240) == 0, killable.err("c")[-3000:]
    finally:
        if c.poll() is None:
            _kill(c)
    elapsed = time.monotonic() - started
    reclaimed = json.loads((killable.logs / "c.out").read_text().splitlines()[-1])["reclaimed"]
    assert {r["run_id"]: (r["slots"], r["marked_failed"]) for r in reclaimed} == {
        run_id: ({"llm": 1}, True) for run_id in ids.values()
    }
    for run_id in ids.values():  # and the user was told
        assert f"freed 1 llm slot of run {run_id} (process " in killable.err("c")
        assert killable.instance.get_run_by_id(run_id).status == dg.DagsterRunStatus.FAILURE  # type: ignore[union-attr]
    assert killable.holders() == [] and elapsed < 240


@pytest.mark.slow
def test_a_run_waiting_for_a_slot_says_who_holds_it_and_takes_it_when_the_holder_is_killed(
    killable: Killable, realm: str
) -> None:
    cfg = yaml.safe_load(killable.corpus.config.read_text())
    cfg["dagster"]["llm_pool_limit"] = 1
    killable.corpus.config.write_text(yaml.safe_dump(cfg))
    a = killable.launch(f"{realm}.main", "a")
    killable.wait_until(
        "a holding the llm slot", lambda: [h for h in killable.holders() if h.pid == str(a.pid)], {"a": a}
    )
    holder = killable.run_id_of(a)
    b = killable.launch(f"{realm}.other", "b")
    try:
        procs = {"a": a, "b": b}
        killable.wait_until(
            "b waiting",
            lambda: [h for h in killable.holders() if h.pid == str(b.pid) and h.state == "waiting"],
            procs,
        )
        said = (
            f"waiting for a slot of pool llm (limit 1), held by run {holder} "
            "step raw_extractions (STARTED, running)"
        )
        killable.wait_until("b saying who it waits for", lambda: said in killable.err("b"), procs, timeout=60)
        _kill(a)
        killable.gate.set()
        assert b.wait(timeout=240) == 0, killable.err("b")[-3000:]
    finally:
        for p in (a, b):
            if p.poll() is None:
                _kill(p)
    reclaimed = json.loads((killable.logs / "b.out").read_text().splitlines()[-1])["reclaimed"]
    assert [(r["run_id"], r["slots"], r["marked_failed"]) for r in reclaimed] == [(holder, {"llm": 1}, True)]
    assert f"freed 1 llm slot of run {holder} (process {a.pid} on host " in killable.err("b")
    assert killable.instance.get_run_by_id(holder).status == dg.DagsterRunStatus.FAILURE  # type: ignore[union-attr]


def test_runs_starting_together_never_race_on_a_pool_s_first_limit(pg_dsn: str, tmp_path: Path) -> None:
    """Dagster creates a pool's limit row at a run's first claim; two runs making it at once on PostgreSQL
    storage failed one of them with InFailedSqlTransaction. materialize_partition now creates it first,
    once, under a lock — eight processes' worth of instances doing so at once all succeed."""
    import threading

    from psycopg import sql

    from pgrag_dag.assets import slots
    from pgrag_dag.store import db

    name = f"dagster_pools_{os.getpid()}"
    cfg = tmp_path / "pgrag.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "database_url": pg_dsn,
                "data_dir": "data",
                "dagster": {"instance_storage": "postgres", "storage_database": name, "llm_pool_limit": 3},
            }
        )
    )
    home = dagster_home(load_settings(cfg))
    try:
        with dg.DagsterInstance.from_config(str(home)):
            pass  # the storage's tables are created once, before the race under test
        errors: list[BaseException] = []
        done: list[list[str]] = []
        start = threading.Barrier(8, timeout=60)  # a thread that fails early never strands the others

        def first_claim() -> None:
            try:
                with dg.DagsterInstance.from_config(str(home)) as instance:
                    start.wait()
                    done.append(slots.ensure_pool_limits(instance, pg_dsn))
            except BaseException as exc:  # collected and asserted below
                errors.append(exc)

        threads = [threading.Thread(target=first_claim, daemon=True) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert errors == []
        assert sorted(done) == [[]] * 7 + [["llm"]]  # exactly one initialised it
        with dg.DagsterInstance.from_config(str(home)) as instance:
            limits = {p.name: (p.limit, p.from_default) for p in instance.event_log_storage.get_pool_limits()}
            assert limits == {"llm": (3, True)}
            assert slots.ensure_pool_limits(instance, pg_dsn) == []
        # a changed llm_pool_limit is applied (Dagster's own re-initialisation aborted the run on PostgreSQL)
        cfg.write_text(cfg.read_text().replace("llm_pool_limit: 3", "llm_pool_limit: 1"))
        home = dagster_home(load_settings(cfg))
        with dg.DagsterInstance.from_config(str(home)) as instance:
            assert slots.ensure_pool_limits(instance, pg_dsn) == ["llm"]
            assert {p.name: p.limit for p in instance.event_log_storage.get_pool_limits()} == {"llm": 1}
            assert slots.ensure_pool_limits(instance, pg_dsn) == []
    finally:
        with db.connect(pg_dsn, autocommit=True, vector=False) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
