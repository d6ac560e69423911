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
from pgrag_dag.assets.stages import ASSETS
from pgrag_dag.config import Settings
from pgrag_dag.errors import PgragError
from pgrag_dag.resources.engine import PgragResource

DAGSTER_YAML = """# written by pgrag-dag from its settings (dagster.llm_pool_limit, dagster.max_concurrent_runs)
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
"""


def dagster_home(settings: Settings) -> Path:
    """``<data_dir>/dagster`` (absolute) with a ``dagster.yaml`` written from the settings (telemetry off,
    the ``llm`` pool limit, run concurrency); also exported as ``DAGSTER_HOME``."""
    home = settings.resolve(settings.data_dir) / "dagster"
    home.mkdir(parents=True, exist_ok=True)
    text = DAGSTER_YAML.format(pool_limit=settings.dagster.llm_pool_limit, max_runs=settings.dagster.max_concurrent_runs)
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


def materialize_partition(settings: Settings, partition: str) -> dict[str, dict[str, Any]]:
    """Materialise every asset (and its blocking check) for ``partition`` in the persistent instance.

    Returns each asset's materialisation metadata (plain values). Raises :class:`PgragError` naming the
    failed step when the run fails.
    """
    dagster_home(settings)
    with dg.DagsterInstance.get() as instance:
        add_partitions(instance, [partition])
        result = dg.materialize(
            ASSETS, partition_key=partition, instance=instance,
            resources={"pgrag": PgragResource(database_url=settings.database_url)}, raise_on_error=False,
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
