"""Materialising the eight assets through Dagster into the project's persistent instance.

The instance lives under ``<data_dir>/dagster`` (``DAGSTER_HOME``), with a ``dagster.yaml`` that turns
telemetry off, so ``dagster dev -w workspace.yaml`` afterwards shows the same materialisations and checks.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import dagster as dg

from pgrag_dag.assets.partitions import add_partitions
from pgrag_dag.assets.stages import build_assets
from pgrag_dag.config import Settings
from pgrag_dag.errors import PgragError
from pgrag_dag.resources.engine import PgragResource

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
{storage}"""


def instance_storage_url(settings: Settings) -> str:
    """SQLAlchemy URL of Dagster's instance storage: database ``dagster.storage_database`` on the graph's
    PostgreSQL server (created when missing). Raises :class:`DatabaseError` when it cannot be created."""
    from psycopg import sql
    from psycopg.conninfo import conninfo_to_dict

    from pgrag_dag.store import db

    dsn = db.resolve_dsn(settings.database_url, settings.resolve(settings.data_dir))
    name = settings.dagster.storage_database
    with db.connect(dsn, autocommit=True, vector=False) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is None:
            try:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            except Exception as exc:  # a concurrent creator, or no CREATEDB right
                if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is None:
                    raise PgragError(f"cannot create Dagster's storage database {name!r}: {exc}") from exc
    parts = {k: v for k, v in conninfo_to_dict(dsn).items() if v is not None}
    host, user, password = parts.get("host", "localhost"), parts.get("user", "postgres"), parts.get("password", "")
    port = parts.get("port", "5432")
    if host.startswith("/"):  # unix socket (the embedded server)
        return f"postgresql+psycopg2://{user}:{password}@/{name}?host={host}&port={port}"
    return f"postgresql+psycopg2://{user}:{password}@{host}:{port}/{name}"


def dagster_home(settings: Settings) -> Path:
    """``<data_dir>/dagster`` (absolute) with a ``dagster.yaml`` written from the settings (telemetry off,
    the ``llm`` pool limit, run concurrency, instance storage); also exported as ``DAGSTER_HOME``.
    With PostgreSQL storage the URL is passed through the ``PGRAG_DAGSTER_STORAGE_URL`` variable."""
    home = settings.resolve(settings.data_dir) / "dagster"
    home.mkdir(parents=True, exist_ok=True)
    storage = ""
    if settings.dagster.instance_storage == "postgres":
        os.environ["PGRAG_DAGSTER_STORAGE_URL"] = instance_storage_url(settings)
        storage = "storage:\n  postgres:\n    postgres_url:\n      env: PGRAG_DAGSTER_STORAGE_URL\n"
    text = DAGSTER_YAML.format(pool_limit=settings.dagster.llm_pool_limit, max_runs=settings.dagster.max_concurrent_runs,
                               storage=storage)
    cfg = home / "dagster.yaml"
    if not cfg.exists() or cfg.read_text(encoding="utf-8") != text:
        cfg.write_text(text, encoding="utf-8")
    os.environ["DAGSTER_HOME"] = str(home)
    return home


def _root_cause(error: Any) -> str:
    """The innermost error's class and message from Dagster's serialisable error chain."""
    while getattr(error, "cause", None) is not None:
        error = error.cause
    return f"{error.cls_name}: {' '.join(error.message.split())}"


def materialize_partition(settings: Settings, partition: str, *, config_path: str | None = None) -> dict[str, dict[str, Any]]:
    """Materialise every asset (and its blocking check) for ``partition`` in the persistent instance.

    The assets read their settings from ``config_path`` (default ``PGRAG_CONFIG`` or ``./pgrag.yaml``).

    Returns each asset's materialisation metadata (plain values). Raises :class:`PgragError` naming the
    failed step when the run fails.
    """
    dagster_home(settings)
    with dg.DagsterInstance.get() as instance:
        add_partitions(instance, [partition])
        result = dg.materialize(
            build_assets(settings), partition_key=partition, instance=instance,
            resources={"pgrag": PgragResource(config_path=config_path, database_url=settings.database_url)},
            raise_on_error=False,
            run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}},
        )
        if not result.success:
            errors = [f"{ev.step_key}: {_root_cause(ev.event_specific_data.error)}"  # type: ignore[union-attr]
                      for ev in result.all_events if ev.is_step_failure]
            raise PgragError(f"Dagster run {result.run_id} for {partition} failed: " + " | ".join(errors))
        out: dict[str, dict[str, Any]] = {}
        for ev in result.get_asset_materialization_events():
            mat = ev.materialization
            out[mat.asset_key.to_user_string()] = {k: getattr(v, "value", v) for k, v in mat.metadata.items()}
        evaluations = result.get_asset_check_evaluations()
        out["_checks"] = {f"{e.asset_key.to_user_string()}:{e.check_name}": e.passed for e in evaluations}
        out["_quality"] = next(({k: getattr(v, "value", v) for k, v in e.metadata.items()}
                                for e in evaluations if e.check_name == "graph_quality"), {})
        out["_run"] = {"run_id": result.run_id}
        return out
