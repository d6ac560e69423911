"""Materialising the eight assets through Dagster into the project's persistent instance.

The instance lives under ``<data_dir>/dagster`` (``DAGSTER_HOME``), with a ``dagster.yaml`` written from
the settings (:func:`dagster_home`), so ``dg dev -w workspace.yaml`` (``pgrag ui``) afterwards shows the same
materialisations and checks, and its daemon applies the same limits: the ``llm`` pool, at most
``max_concurrent_runs`` runs, one run per partition at a time (later ones wait in the queue), and run
monitoring (runs that do not start, or run too long, are failed; slots of ended runs are freed).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import dagster as dg

from pgrag_dag.assets import slots
from pgrag_dag.assets.changes import COMMUNITY_CHECKS
from pgrag_dag.assets.partitions import add_partitions
from pgrag_dag.assets.stages import build_assets
from pgrag_dag.config.sections import Settings
from pgrag_dag.errors import PgragError, RunFailedError
from pgrag_dag.resources.engine import PgragResource
from pgrag_dag.store import db

DAGSTER_YAML = """# written by pgrag-dag from its settings (the dagster section of pgrag.yaml)
telemetry:
  enabled: false
python_logs:
  managed_python_loggers: [pgrag_dag]
  python_log_level: INFO
concurrency:
  pools:
    default_limit: {pool_limit}
  runs:
    max_concurrent_runs: {max_runs}
    tag_concurrency_limits:
      - key: dagster/partition
        value: {{applyLimitPerUniqueValue: true}}
        limit: 1
run_monitoring:
  enabled: true
  start_timeout_seconds: {start_timeout}
{max_runtime}  free_slots_after_run_end_seconds: {free_slots}
{storage}"""

FREE_SLOTS_AFTER_RUN_END_S = 60
"""Seconds after a run ended before run monitoring frees the pool slots it still holds (a grace period
for step processes that outlive their run's end)."""


def instance_storage_url(settings: Settings) -> str:
    """SQLAlchemy URL of Dagster's instance storage: database ``dagster.storage_database`` on the graph's
    PostgreSQL server, as the graph's role (user and password percent-encoded), over the same host —
    a unix socket directory (the embedded server) or a TCP host and port.

    An existing database is used as it is, so a role without ``CREATEDB`` (an external server's
    application role) works once a DBA created it (``CREATE DATABASE <name> OWNER <role>``); a missing
    one is created. Raises :class:`PgragError` when it is missing and cannot be created, saying what to
    ask the DBA for."""
    from urllib.parse import quote

    from psycopg import sql
    from psycopg.conninfo import conninfo_to_dict

    dsn = db.resolve_dsn(settings.database_url, settings.resolve(settings.data_dir))
    name = settings.dagster.storage_database
    with db.connect(dsn, autocommit=True, vector=False) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is None:
            try:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            except Exception as exc:  # a concurrent creator, or no CREATEDB right
                if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is None:
                    owner = sql.Identifier(conn.info.user).as_string(conn)
                    raise PgragError(
                        f"cannot create Dagster's storage database {name!r} ({db.one_line(exc)}): ask the "
                        f"DBA to run CREATE DATABASE {sql.Identifier(name).as_string(conn)} OWNER {owner}; "
                        "(or grant the role CREATEDB), or set dagster.instance_storage: sqlite"
                    ) from exc
    parts = {k: v for k, v in conninfo_to_dict(dsn).items() if v is not None}
    host, port = parts.get("host", "localhost"), parts.get("port", "5432")
    user, password = quote(parts.get("user", "postgres"), safe=""), quote(parts.get("password", ""), safe="")
    if host.startswith("/"):  # unix socket (the embedded server)
        return (
            f"postgresql+psycopg2://{user}:{password}@/{quote(name, safe='')}?host={quote(host)}&port={port}"
        )
    host = f"[{host}]" if ":" in host else host  # an IPv6 literal
    return f"postgresql+psycopg2://{user}:{password}@{host}:{port}/{quote(name, safe='')}"


def dagster_home(settings: Settings) -> Path:
    """``<data_dir>/dagster`` (absolute) with a ``dagster.yaml`` written from the settings; also exported
    as ``DAGSTER_HOME``. With PostgreSQL storage the URL is passed through ``PGRAG_DAGSTER_STORAGE_URL``.

    The file sets: telemetry off; the default pool limit (``dagster.llm_pool_limit``, the ``llm`` pool);
    ``dagster.max_concurrent_runs``; a run-queue limit of one run per value of the ``dagster/partition``
    tag, so a second run of a partition waits in the queue (runs submitted through the queue: the UI,
    sensors, schedules, backfills; in-process runs of :func:`materialize_partition` are not queued but
    count as in progress); run monitoring on, with ``start_timeout_seconds`` = ``dagster.run_start_timeout_s``
    and ``max_runtime_seconds`` = ``dagster.run_timeout_s`` (only when > 0), both rounded up to whole
    seconds, and ``free_slots_after_run_end_seconds`` = :data:`FREE_SLOTS_AFTER_RUN_END_S`. Queueing
    and monitoring are done by Dagster's daemon (``dagster dev``). Raises :class:`PgragError` when
    PostgreSQL storage is configured and its database cannot be created."""
    home = settings.resolve(settings.data_dir) / "dagster"
    home.mkdir(parents=True, exist_ok=True)
    storage = ""
    if settings.dagster.instance_storage == "postgres":
        os.environ["PGRAG_DAGSTER_STORAGE_URL"] = instance_storage_url(settings)
        storage = "storage:\n  postgres:\n    postgres_url:\n      env: PGRAG_DAGSTER_STORAGE_URL\n"
    d = settings.dagster
    max_runtime = f"  max_runtime_seconds: {math.ceil(d.run_timeout_s)}\n" if d.run_timeout_s > 0 else ""
    text = DAGSTER_YAML.format(
        pool_limit=d.llm_pool_limit,
        max_runs=d.max_concurrent_runs,
        start_timeout=math.ceil(d.run_start_timeout_s),
        max_runtime=max_runtime,
        free_slots=FREE_SLOTS_AFTER_RUN_END_S,
        storage=storage,
    )
    cfg = home / "dagster.yaml"
    if not cfg.exists() or cfg.read_text(encoding="utf-8") != text:
        cfg.write_text(text, encoding="utf-8")
    os.environ["DAGSTER_HOME"] = str(home)
    return home


def ui_argv(host: str, port: int, *, workspace: str = "workspace.yaml", exe: str = "dg") -> list[str]:
    """The command ``pgrag ui`` execs: ``dg dev -w <workspace> -h <host> -p <port>``, the Dagster UI and
    daemon on the code location of ``workspace`` (``dagster dev`` is superseded by ``dg dev`` in Dagster 1.13
    and warns so on every start; ``dg dev`` with a workspace file starts the same services without a dg
    project)."""
    return [exe, "dev", "-w", workspace, "-h", host, "-p", str(port)]


_BOILERPLATE = {"DagsterExecutionStepExecutionError"}
"""Wrappers whose message ("Error occurred while executing op ...") says nothing the step key does not."""


def _text(error: Any) -> str:
    """An error's message without its leading class name (``"mod.Cls: text"`` → ``"text"``), whitespace
    collapsed; ``""`` when it has none (``raise TimeoutError()``; ``dg.Failure()`` renders ``"None"``)."""
    text = " ".join((getattr(error, "message", None) or "").split())
    text = re.sub(rf"^(?:[\w.]*\.)?{re.escape(error.cls_name)}(?::\s*|$)", "", text)
    return "" if text in ("None", error.cls_name) else text


def _root_cause(error: Any) -> str:
    """The cause of a failure from Dagster's serialisable error chain (``SerializableErrorInfo``): the
    innermost error along ``cause`` links, as ``"Class: message"``. When that message is empty, the class
    name with ``(no message)`` and the innermost non-empty message of the chain — what it was raised while
    handling (``context``), or what wrapped it. Never empty."""
    if error is None:
        return "no error recorded"
    chain = [error]
    while chain[-1].cause is not None or chain[-1].context is not None:
        chain.append(chain[-1].cause if chain[-1].cause is not None else chain[-1].context)
    primary = 0
    while primary + 1 < len(chain) and chain[primary].cause is chain[primary + 1]:
        primary += 1
    cause = chain[primary]
    if _text(cause):
        return f"{cause.cls_name}: {_text(cause)}"
    below = [e for e in chain[primary + 1 :] if _text(e)]
    above = [e for e in chain[:primary] if _text(e) and e.cls_name not in _BOILERPLATE]
    if below:
        return (
            f"{cause.cls_name} (no message), raised while handling {below[-1].cls_name}: {_text(below[-1])}"
        )
    if above:
        return f"{cause.cls_name} (no message), within {above[-1].cls_name}: {_text(above[-1])}"
    return f"{cause.cls_name} (no message)"


def run_failure_reasons(result: dg.ExecuteInProcessResult) -> list[str]:
    """Why a failed run failed: one ``"<step key>: <cause>"`` per failed step (:func:`_root_cause`); when
    no step failed, one per step whose resources failed to initialise (``PgragResource`` could not load
    its settings or reach PostgreSQL), else ``"run: <cause>"`` from the run's failure event, else the
    run's final status. Empty only for a successful run; no entry is ever empty."""
    if result.success:
        return []
    reasons = [
        f"{ev.step_key or 'run'}: {_root_cause(ev.step_failure_data.error)}"
        for ev in result.all_events
        if ev.is_step_failure
    ]
    if not reasons:
        reasons = [
            f"{ev.step_key or 'run'}: {(ev.message or 'resource initialisation failed').rstrip('.')}: "
            f"{_root_cause(ev.engine_event_data.error)}"
            for ev in result.all_events
            if ev.event_type == dg.DagsterEventType.RESOURCE_INIT_FAILURE
        ]
    if reasons:
        return reasons
    failure = next((ev for ev in result.all_events if ev.is_run_failure), None)
    data = failure.event_specific_data if failure is not None else None
    if data is not None and getattr(data, "error", None) is not None:
        return [f"run: {_root_cause(data.error)}"]
    if failure is not None and failure.message:
        return [f"run: {' '.join(failure.message.split())}"]
    return [f"run: ended {result.dagster_run.status.value} with no step failure recorded"]


def run_failure_details(result: dg.ExecuteInProcessResult) -> str:
    """The stack traces of a failed run's failed steps (and of a failed resource or run failure), as
    Dagster recorded them, one block per step headed by its key; ``""`` for a successful run."""
    blocks = []
    for ev in result.all_events:
        error = (
            ev.step_failure_data.error
            if ev.is_step_failure
            else getattr(ev.event_specific_data, "error", None)
            if ev.event_type in (dg.DagsterEventType.RESOURCE_INIT_FAILURE, dg.DagsterEventType.RUN_FAILURE)
            else None
        )
        if error is not None:
            blocks.append(f"--- {ev.step_key or 'run'} ({ev.event_type_value})\n{error.to_string()}")
    return "\n".join(blocks)


def materialize_partition(
    settings: Settings,
    partition: str,
    *,
    config_path: str | None = None,
    assets: Sequence[str] | None = None,
    console_level: str = "WARNING",
) -> dict[str, dict[str, Any]]:
    """Materialise every asset (with its checks, and the community lag check) for ``partition`` in the
    persistent instance; with ``assets`` (asset names, e.g. ``["chunks", …, "embeddings"]``) only those and
    their checks.

    The assets read their settings from ``config_path`` (default ``PGRAG_CONFIG`` or ``./pgrag.yaml``).
    Each pool's limit is created first, once (:func:`~pgrag_dag.assets.slots.ensure_pool_limits`: two runs
    starting together would race on it). The run is tagged with this host and process
    (:func:`~pgrag_dag.assets.slots.process_tags`). Before it starts, runs of this host whose process is gone
    are marked failed and the pool slots of those and of ended runs are freed
    (:func:`~pgrag_dag.assets.slots.reclaim`, each logged at WARNING); while a step waits for a pool slot the
    same is repeated every few seconds and who holds the slots is logged once
    (:class:`~pgrag_dag.assets.slots.SlotWatch`). A slot held by a live run is waited for.

    Returns each asset's materialisation metadata (plain values), plus ``_checks`` (check → passed),
    ``_quality`` (the graph_quality check's metadata) and ``_run`` (``run_id``; ``reclaimed``: what was
    freed, :meth:`~pgrag_dag.assets.slots.Reclaimed.as_dict` each). Raises :class:`RunFailedError` naming
    each failed step and its cause (:func:`run_failure_reasons`, the traces in its ``details``) when the run
    fails. ``console_level`` is the level of Dagster's console logger for the run (``WARNING``; the CLI,
    which prints warnings itself, passes ``CRITICAL``).
    """
    dagster_home(settings)
    with dg.DagsterInstance.get() as instance:
        add_partitions(instance, [partition])
        slots.ensure_pool_limits(
            instance, db.resolve_dsn(settings.database_url, settings.resolve(settings.data_dir))
        )
        reclaimed = slots.reclaim(instance)
        with slots.SlotWatch(instance) as watch:
            result = dg.materialize(
                [*build_assets(settings), *COMMUNITY_CHECKS],
                partition_key=partition,
                instance=instance,
                selection=list(assets) if assets is not None else None,
                resources={
                    "pgrag": PgragResource(config_path=config_path, database_url=settings.database_url)
                },
                raise_on_error=False,
                tags=slots.process_tags(),
                run_config={"loggers": {"console": {"config": {"log_level": console_level}}}},
            )
        reclaimed += watch.reclaimed
        if not result.success:
            raise RunFailedError(
                partition, result.run_id, run_failure_reasons(result), run_failure_details(result)
            )
        out: dict[str, dict[str, Any]] = {}
        for ev in result.get_asset_materialization_events():
            mat = ev.materialization
            out[mat.asset_key.to_user_string()] = {k: getattr(v, "value", v) for k, v in mat.metadata.items()}
        evaluations = result.get_asset_check_evaluations()
        out["_checks"] = {f"{e.asset_key.to_user_string()}:{e.check_name}": e.passed for e in evaluations}
        out["_quality"] = next(
            (
                {k: getattr(v, "value", v) for k, v in e.metadata.items()}
                for e in evaluations
                if e.check_name == "graph_quality"
            ),
            {},
        )
        out["_run"] = {"run_id": result.run_id, "reclaimed": [r.as_dict() for r in reclaimed]}
        return out


def run_job_partition(instance: dg.DagsterInstance, partition: str, job: Any) -> dg.DagsterRun:
    """Run the reconstructable job ``job`` (``dg.reconstructable(fn)``: its steps may run in other processes,
    which rebuild it from its code pointer) for ``partition`` in this process as the run worker; returns the
    finished run (``status`` SUCCESS or FAILURE; its events are in ``instance``, which must be persistent).

    The partition is added and the pool limits set first (as :func:`materialize_partition` does, settings
    from ``PGRAG_CONFIG``/``pgrag.yaml``); the run is tagged with this process
    (:func:`~pgrag_dag.assets.slots.process_tags`). Raises :class:`~pgrag_dag.errors.ConfigurationError` for
    invalid settings."""
    from pgrag_dag.config.load import load_settings

    settings = load_settings()
    add_partitions(instance, [partition])
    slots.ensure_pool_limits(
        instance, db.resolve_dsn(settings.database_url, settings.resolve(settings.data_dir))
    )
    with dg.execute_job(
        job,
        instance=instance,
        tags={"dagster/partition": partition, **slots.process_tags()},
        raise_on_error=False,
    ) as result:
        run = instance.get_run_by_id(result.run_id)
    assert run is not None
    return run
