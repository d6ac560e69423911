"""A running Dagster UI and daemon for end-to-end tests (issue 18 items 1–2; the UI test, issue 6 item 7):
a free loopback port, GraphQL over HTTP, bounded waits, a project file with several spaces, and
``pgrag ui`` started as a user starts it (it writes the Dagster home from the settings, sets the pool
limits, then execs ``dg dev -w workspace.yaml``), stopped by its process group.

GraphQL answers are plain dicts; run timestamps are seconds since the epoch (floats)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from psycopg import sql

from pgrag_dag.store import db

ROOT = Path(__file__).resolve().parents[1]
REPO = {"repositoryLocationName": "pgrag", "repositoryName": "__repository__"}
"""The repository selector of the project's code location (``workspace.yaml``)."""
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
"""The eight stage assets, in pipeline order."""
ACTIVE = ("QUEUED", "NOT_STARTED", "MANAGED", "STARTING", "STARTED", "CANCELING")
"""Run statuses of a run not yet ended."""


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def gql(port: int, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
    """POST ``query`` to the UI's ``/graphql`` on ``port``; returns ``data``. Fails the test on GraphQL
    errors; raises ``OSError`` while the server is not up."""
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/graphql",
        method="POST",
        data=json.dumps({"query": query, "variables": variables or {}}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        out = json.loads(resp.read())
    assert "errors" not in out, out
    return out["data"]


def wait_until(
    what: str, fn: Callable[[], Any], timeout: float, *, interval: float = 1.0, log: Path | None = None
) -> Any:
    """Call ``fn`` every ``interval`` seconds until it returns something truthy (returned); ``OSError`` counts
    as not yet. Fails with ``what``, the last value and the tail of ``log`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = fn()
            if last:
                return last
        except OSError as exc:  # the server is still starting
            last = exc
        time.sleep(interval)
    tail = log.read_text(errors="replace")[-4000:] if log is not None and log.exists() else ""
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}: {last!r}\n{tail}")


def location_loaded(port: int) -> bool:
    """Whether the UI on ``port`` has loaded a code location."""
    data = gql(port, "{ workspaceOrError { ... on Workspace { locationEntries { name loadStatus } } } }")
    return any(e["loadStatus"] == "LOADED" for e in data["workspaceOrError"]["locationEntries"])


def stop_group(proc: subprocess.Popen, timeout: float = 30) -> None:
    """SIGINT to the process group ``proc`` leads (started with ``start_new_session``; ``dg dev`` shuts its
    webserver, daemon and code server down on it), then — once it exited, or after ``timeout`` seconds —
    SIGKILL to what is left of the group (a code server still running a run's worker outlives ``dg dev``)."""
    try:
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout)
    except ProcessLookupError:
        return
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    proc.wait(10)


RUN_FIELDS = "runId status startTime endTime creationTime tags { key value } assetSelection { path }"


@dataclass
class Daemon:
    """A running ``pgrag ui``: its port, process and log file."""

    port: int
    proc: subprocess.Popen
    log: Path

    def gql(self, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
        """:func:`gql` against this UI."""
        return gql(self.port, query, variables)

    def runs(self) -> list[dict[str, Any]]:
        """Every run of the instance, oldest first: ``runId``, ``status``,
        ``startTime``/``endTime``/``creationTime`` (epoch seconds or ``None``), ``tags`` as a dict, ``assets``
        (asset names selected)."""
        data = self.gql(f"{{ runsOrError {{ ... on Runs {{ results {{ {RUN_FIELDS} }} }} }} }}")
        out = []
        for r in data["runsOrError"]["results"]:
            r["tags"] = {t["key"]: t["value"] for t in r["tags"]}
            r["assets"] = sorted("/".join(a["path"]) for a in r.pop("assetSelection") or [])
            out.append(r)
        return sorted(out, key=lambda r: r["creationTime"])

    def materializations(self, asset: str, partition: str) -> list[dict[str, Any]]:
        """The materialisations of ``asset`` for ``partition``: ``runId``, ``timestamp`` (epoch milliseconds,
        a string)."""
        data = self.gql(
            """query($k: AssetKeyInput!, $p: [String!]) { assetOrError(assetKey: $k) { ... on Asset {
                             assetMaterializations(partitions: $p) { runId timestamp partition } } } }""",
            {"k": {"path": [asset]}, "p": [partition]},
        )
        return data["assetOrError"].get("assetMaterializations", [])

    def steps(self, run_id: str) -> list[dict[str, Any]]:
        """The steps of run ``run_id``: ``stepKey``, ``status``, ``startTime``/``endTime`` (epoch seconds or
        ``None``)."""
        data = self.gql(
            """query($id: ID!) { runOrError(runId: $id) { ... on Run {
                             stepStats { stepKey status startTime endTime } } } }""",
            {"id": run_id},
        )
        return data["runOrError"]["stepStats"]

    def add_partitions(self, keys: list[str]) -> None:
        """Add the dynamic partitions ``keys`` over GraphQL, as the UI does (an existing key is an error)."""
        for key in keys:
            added = self.gql(
                """mutation($r: RepositorySelector!, $k: String!) { addDynamicPartition(
                                  repositorySelector: $r, partitionsDefName: "space", partitionKey: $k) {
                                  __typename } }""",
                {"r": REPO, "k": key},
            )
            assert added["addDynamicPartition"]["__typename"] == "AddDynamicPartitionSuccess", added

    def idle(self) -> bool:
        """No run queued or in progress."""
        return not [r for r in self.runs() if r["status"] in ACTIVE]

    def wait_idle(self, settle: float, timeout: float, *, done: Callable[[], bool] = lambda: True) -> None:
        """Wait until ``done()`` holds and no run is queued or in progress, continuously for ``settle``
        seconds (long enough for the sensors to have ticked again and requested nothing); fails after
        ``timeout``."""
        since: list[float] = []

        def settled() -> bool:
            quiet = done() and self.idle()
            if not quiet:
                since.clear()
                return False
            since.append(time.monotonic())
            return since[-1] - since[0] >= settle

        wait_until(f"the daemon idle for {settle:.0f} s", settled, timeout, log=self.log)


def max_overlap(intervals: list[tuple[float, float]]) -> int:
    """The most of ``intervals`` (start, end) open at one instant (an end and a start at the same instant do
    not overlap); 0 for none."""
    edges = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


@pytest.fixture
def storage_db(pg_dsn: str, realm: str) -> Iterator[str]:
    """The name of a Dagster storage database of this test's own on the test server
    (``dagster.storage_database``; ``pgrag ui`` creates it), dropped afterwards. Import it into a test module
    to use it."""
    name = f"dagster_{realm}"
    yield name
    with db.connect(pg_dsn, autocommit=True, vector=False) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def write_project(config: Path, realm: str, spaces: dict[str, dict[str, str]], **sections: Any) -> Path:
    """Rewrite the project file ``config`` (a :class:`~tests.fix_corpus.SmallCorpus` one: database, model,
    chunking) to declare, in ``realm``, one space per ``spaces`` key, each reading ``*.txt`` from its own
    folder ``<config dir>/<space>/`` holding the given files (name → text); ``sections`` replace top-level
    sections (e.g. ``dagster={...}``). Returns ``config``."""
    cfg = yaml.safe_load(config.read_text(encoding="utf-8"))
    cfg["realms"] = {realm: {"spaces": {}}}
    for space, files in spaces.items():
        folder = config.parent / space
        folder.mkdir(exist_ok=True)
        for name, text in files.items():
            (folder / name).write_text(text, encoding="utf-8")
        cfg["realms"][realm]["spaces"][space] = {"sources": [{"path": space, "glob": "*.txt"}]}
    cfg.update(sections)
    config.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    return config


@contextmanager
def pgrag_ui(config: Path, log: Path, *, timeout: float = 180) -> Iterator[Daemon]:
    """Run ``pgrag ui --host 127.0.0.1 --port <free>`` on ``config`` (``PGRAG_CONFIG``) from the repository
    root, with this venv's ``dg`` first on ``PATH``, its output in ``log``; yields once the code location is
    loaded, and stops the process group afterwards. The daemon's sensors run as the file says."""
    port = free_port()
    bin_dir = Path(sys.executable).parent
    env = {
        **os.environ,
        "PGRAG_CONFIG": str(config),
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "DAGSTER_DISABLE_TELEMETRY": "1",
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    env.pop("DAGSTER_HOME", None)  # pgrag ui sets its own, under the project's data_dir
    out = log.open("w")
    proc = subprocess.Popen(
        [str(bin_dir / "pgrag"), "ui", "--host", "127.0.0.1", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        daemon = Daemon(port, proc, log)
        wait_until(
            "the code location",
            lambda: proc.poll() is None and location_loaded(port) or proc.poll() is not None,
            timeout,
            log=log,
        )
        assert proc.poll() is None, (
            f"pgrag ui exited ({proc.returncode}):\n{log.read_text(errors='replace')[-4000:]}"
        )
        yield daemon
    finally:
        stop_group(proc)
        out.close()
