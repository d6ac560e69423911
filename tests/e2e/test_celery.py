"""A real distributed executor (issue 18 item 3): a partitioned run of the eight assets whose steps execute in
a Celery worker's processes (``dagster-celery``, a Redis broker from Debian's ``redis-server``), launched
from this process as the run worker against PostgreSQL instance storage; the graph equals the in-process
run's. Skipped, saying why, only when ``redis-server`` or the ``celery`` extra is not installed."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import psutil
import pytest
import yaml
from psycopg import sql

from pgrag_dag.assets.runner import dagster_home, materialize_partition
from pgrag_dag.config import load_settings
from pgrag_dag.store import db, schema
from tests.fix_corpus import SmallCorpus
from tests.graph_snapshot import graph_snapshot

pytestmark = [pytest.mark.dagster, pytest.mark.slow]

REDIS = shutil.which("redis-server")
STAGES = [
    "chunks",
    "raw_extractions",
    "gated_triples",
    "resolved_entities",
    "relations",
    "embeddings",
    "communities",
    "community_hierarchy",
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(proc: subprocess.Popen, timeout: float = 20) -> None:
    """SIGTERM to the process group ``proc`` leads (started with ``start_new_session``), SIGKILL after
    ``timeout``."""
    if proc.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _wait_for(path: Path, text: str, proc: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            pytest.fail(
                f"{proc.args[0]} exited ({proc.returncode}) before {text!r}:\n"
                f"{path.read_text(errors='replace')[-3000:]}"
            )
        time.sleep(0.3)
    pytest.fail(f"no {text!r} within {timeout} s:\n{path.read_text(errors='replace')[-3000:]}")


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    """A redis-server of its own on a free loopback port (no persistence); stopped by its process group."""
    if REDIS is None:
        pytest.skip("redis-server is not installed (Debian package redis-server; .ci/run installs it)")
    pytest.importorskip(
        "dagster_celery", reason="the celery extra is not installed (pip install -e '.[celery]')"
    )
    port = _free_port()
    log = tmp_path / "redis.log"
    proc = subprocess.Popen(
        [
            REDIS,
            "--bind",
            "127.0.0.1",
            "--port",
            str(port),
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(tmp_path),
            "--logfile",
            str(log),
        ],
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_for(log, "Ready to accept connections", proc, 20)
        yield f"redis://127.0.0.1:{port}"
    finally:
        _stop(proc)


def test_a_partition_runs_step_by_step_on_celery_workers_and_builds_the_in_process_graph(
    small_corpus: SmallCorpus,
    realm: str,
    pg_dsn: str,
    redis_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))  # restored afterwards (the runner sets it)
    monkeypatch.setenv("PGRAG_DAGSTER_STORAGE_URL", "")
    # the in-process baseline in the fixture's realm
    base = materialize_partition(
        small_corpus.settings(data_dir=str(tmp_path / "inproc"), dagster={"instance_storage": "sqlite"}),
        f"{realm}.main",
        config_path=str(small_corpus.config),
    )
    assert all(base["_checks"].values())
    expected = graph_snapshot(pg_dsn, realm, "main")

    # the same documents as a second realm, indexed on Celery; Dagster's storage in PostgreSQL (the workers
    # write to it)
    other, storage = f"{realm}c", f"dagster_{realm}c"
    cfg = yaml.safe_load(small_corpus.config.read_text(encoding="utf-8"))
    cfg["realms"][other] = cfg["realms"][realm]
    cfg["data_dir"] = str(tmp_path / "celery")
    cfg["dagster"] = {"instance_storage": "postgres", "storage_database": storage}
    config = tmp_path / "celery.yaml"
    config.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    broker, backend = f"{redis_url}/0", f"{redis_url}/1"
    for name, value in {
        "PGRAG_CONFIG": str(config),
        "PGRAG_CELERY_BROKER": broker,
        "PGRAG_CELERY_BACKEND": backend,
    }.items():
        monkeypatch.setenv(name, value)
    home = dagster_home(load_settings(config))

    worker_yaml = tmp_path / "worker.yaml"
    worker_yaml.write_text(yaml.safe_dump({"execution": {"config": {"broker": broker, "backend": backend}}}))
    worker_log = tmp_path / "worker.log"
    cli = Path(sys.executable).parent / "dagster-celery"
    with worker_log.open("w") as out:
        worker = subprocess.Popen(
            [
                str(cli),
                "worker",
                "start",
                "-A",
                "dagster_celery.app",
                "-y",
                str(worker_yaml),
                "-n",
                "pgrag-test",
                "-l",
                "INFO",
                "--",
                "--concurrency=2",
            ],
            start_new_session=True,
            stdout=out,
            stderr=subprocess.STDOUT,  # it runs `celery` from PATH
            env=dict(os.environ, PATH=f"{cli.parent}{os.pathsep}{os.environ.get('PATH', '')}"),
        )
    try:
        _wait_for(worker_log, "ready.", worker, 90)
        workers = {p.pid for p in psutil.Process(worker.pid).children(recursive=True)}
        from pgrag_dag.assets.distributed import run_partition

        started = time.monotonic()
        with dg.DagsterInstance.get() as instance:
            run = run_partition(instance, f"{other}.main")
            records = instance.all_logs(run.run_id)
            assert run.status == dg.DagsterRunStatus.SUCCESS, "\n".join(
                r.dagster_event.message or ""
                for r in records
                if r.dagster_event and r.dagster_event.is_failure
            )
            assert "postgres" in type(instance.run_storage).__module__
        elapsed = time.monotonic() - started
        workers |= {p.pid for p in psutil.Process(worker.pid).children(recursive=True)}
        built = graph_snapshot(pg_dsn, other, "main")
    finally:
        _stop(worker)
        with db.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema.schema_for(other)))
            )
            conn.execute("DELETE FROM pgrag__control.realms WHERE realm = %s", (other,))
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(storage)))

    starts = [
        r.dagster_event
        for r in records
        if r.dagster_event and r.dagster_event.event_type == dg.DagsterEventType.STEP_START
    ]
    assert {e.step_key for e in starts} >= set(STAGES)
    # every step started in a process of the Celery worker (its pool's children), none in this one
    pids = {e.step_key: e.pid for e in starts}
    assert os.getpid() not in pids.values()
    assert set(pids.values()) <= workers, (pids, workers)
    delegated = [
        r for r in records if r.dagster_event and "in celery worker" in (r.dagster_event.message or "")
    ]
    assert {r.step_key for r in delegated} == set(pids)
    materialized = {
        r.dagster_event.asset_key.to_user_string()
        for r in records
        if r.dagster_event and r.dagster_event.event_type == dg.DagsterEventType.ASSET_MATERIALIZATION
    }
    assert materialized == set(STAGES)
    # nothing passed between steps through a local file: no IO manager output was written (only the compute
    # logs)
    assert not [p for p in (home / "storage").rglob("*") if p.is_file() and "compute_logs" not in p.parts]
    assert built == expected
    print(
        f"celery run: {elapsed:.1f} s for {len(pids)} steps on worker processes {sorted(set(pids.values()))}"
    )
