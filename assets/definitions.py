"""The Dagster code location: the eight assets (made from the configured operator composition), their checks,
the community lag check, the source sensor, the automation sensor, the nightly refresh schedule, the
``retention`` job (§6.1, dry run by default) with the sensor rebuilding communities after it archived (and
its ``communities_rebuild`` job), and the resources.

Loaded by ``workspace.yaml`` (``dg dev -w workspace.yaml``, what ``pgrag ui`` runs). Partitions are dynamic;
``pgrag demo`` and ``pgrag partitions sync`` add one per realm/space declared in the configuration.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import dagster as dg

from pgrag_dag.assets.automation import build_automation_sensor, build_nightly_refresh, build_source_sensor
from pgrag_dag.assets.changes import COMMUNITY_CHECKS
from pgrag_dag.assets.retention import build_rebuild_after_retention, communities_rebuild, retention_job
from pgrag_dag.assets.stages import build_assets
from pgrag_dag.resources.engine import PgragResource
from pgrag_dag.resources.query import QueryResource


def build_defs(
    *,
    pgrag: PgragResource | None = None,
    query_realm: str | None = None,
    executor: dg.ExecutorDefinition | None = None,
    jobs: Sequence[Any] = (),
) -> dg.Definitions:
    """Definitions with the given engine resource (default: settings from ``PGRAG_CONFIG``/``pgrag.yaml``).

    The ``query`` resource reads ``query_realm``, default the first realm the configuration declares.
    ``executor`` (default: ``dagster.executor`` of the settings, Dagster's multiprocess executor unless it
    says ``in_process``) runs every job's steps; ``jobs`` are added to
    the ``retention`` job (e.g. an asset job over the eight stages: :mod:`pgrag_dag.assets.distributed`).
    """
    pgrag = pgrag or PgragResource()
    settings = pgrag.settings()
    realm = query_realm or next(iter(settings.realms), "default")
    assets = build_assets(settings)
    if executor is None and settings.dagster.executor == "in_process":
        executor = dg.in_process_executor
    roots = [a for a in assets if a.key == dg.AssetKey("chunks")]
    return dg.Definitions(
        assets=assets,
        asset_checks=COMMUNITY_CHECKS,
        sensors=[
            build_source_sensor(settings, assets),
            build_automation_sensor(settings),
            build_rebuild_after_retention(settings),
        ],
        schedules=[build_nightly_refresh(settings, roots)],
        jobs=[retention_job, communities_rebuild, *jobs],
        executor=executor,
        resources={
            "pgrag": pgrag,
            "query": QueryResource(
                realm=realm, config_path=pgrag.config_path, database_url=pgrag.database_url
            ),
        },
    )


defs = build_defs()
