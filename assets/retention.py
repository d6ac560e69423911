"""The ``retention`` job (paper §6.1; issue 14 item 3): retention as demotion for one partition, from the
UI or a schedule of your own. Config ``dry_run`` (default ``True``): list what would be archived, change
nothing; ``False`` archives (:func:`pgrag_dag.operate.retention.apply`; reversible with ``pgrag unarchive``).

A job, not an asset: it derives no data, it demotes rows of the graph. Archiving writes no relation, so no
upstream data version moves for automation to follow; :func:`build_rebuild_after_retention` (a run-status
sensor) requests the ``communities_rebuild`` job — ``communities`` and ``community_hierarchy`` — for the
partition of every retention run that archived (not a dry run), and that materialisation sees the change
(its fingerprint moves), leaves the archived entities out and clears the community lag (issue 28).
"""

from typing import Any  # no `from __future__ import annotations`: Dagster reads the config annotation

import dagster as dg

from pgrag_dag.assets.partitions import SPACES
from pgrag_dag.config.sections import Settings
from pgrag_dag.errors import PgragError
from pgrag_dag.names import split_partition_key
from pgrag_dag.operate import retention
from pgrag_dag.resources.engine import PgragResource


class RetentionConfig(dg.Config):
    """``dry_run``: only list what would be archived (the default)."""

    dry_run: bool = True


def _records(result: dict[str, Any]) -> list[dg.TableRecord]:
    return [
        dg.TableRecord({"name": e["name"], "score": e["score"], **e["components"]}) for e in result["archive"]
    ]


@dg.op(
    name="retention_op",
    description="Score live entities and archive the least valuable (§6.1); dry_run lists them.",
)
def retention_op(
    context: dg.OpExecutionContext, config: RetentionConfig, pgrag: PgragResource
) -> dg.Output[dict]:  # type: ignore[type-arg]
    """Run :func:`pgrag_dag.operate.retention.plan` (dry run) or :func:`~pgrag_dag.operate.retention.apply`
    for the run's partition; the output's metadata names every entity with its score and components. A refusal
    (no telemetry, no event yet) fails the step with its one-line reason."""
    realm, space = split_partition_key(context.partition_key)
    engine = pgrag.engine()
    try:
        result = (
            retention.plan(engine, realm, space) if config.dry_run else retention.apply(engine, realm, space)
        )
    except PgragError as exc:
        raise dg.Failure(
            description=f"retention {context.partition_key}: {type(exc).__name__}: {exc}"
        ) from exc
    columns = [
        dg.TableColumn("name", "string"),
        dg.TableColumn("score", "float"),
        *(dg.TableColumn(c, "float") for c in retention.COMPONENTS),
    ]
    return dg.Output(
        result,
        metadata={
            "dry_run": config.dry_run,
            "live": result["live"],
            "events": result["events"],
            "archived" if not config.dry_run else "would_archive": len(result["archive"]),
            "entities": dg.MetadataValue.table(_records(result), schema=dg.TableSchema(columns=columns)),
        },
    )


@dg.job(
    name="retention",
    partitions_def=SPACES,
    description="Retention as demotion for one partition (§6.1): dry_run (default) lists, false archives.",
)
def retention_job() -> None:
    """The one-op retention job."""
    retention_op()


communities_rebuild = dg.define_asset_job(
    "communities_rebuild",
    selection=dg.AssetSelection.assets("communities", "community_hierarchy"),
    partitions_def=SPACES,
    description="Rebuild one partition's communities and topic hierarchy (after retention archived).",
)


def rebuild_request(run: dg.DagsterRun) -> dg.RunRequest | None:
    """The ``communities_rebuild`` request a finished ``retention`` run calls for: one for its partition
    when it archived (``dry_run: false``), keyed by the run so each is requested once; ``None`` for a dry
    run (it changed nothing) or a run without a partition."""
    partition = run.tags.get("dagster/partition")
    op_config = run.run_config.get("ops", {}).get("retention_op", {}).get("config", {})
    if partition is None or op_config.get("dry_run", True):
        return None
    return dg.RunRequest(partition_key=partition, run_key=f"after-retention:{run.run_id}")


def build_rebuild_after_retention(settings: Settings) -> dg.SensorDefinition:
    """The run-status sensor following every successful ``retention`` run with :func:`rebuild_request`
    (running by default when ``dagster.sensors`` is on, every ``dagster.sensor_interval_s``, like the other
    sensors)."""

    @dg.run_status_sensor(
        name="communities_after_retention",
        run_status=dg.DagsterRunStatus.SUCCESS,
        monitored_jobs=[retention_job],
        request_job=communities_rebuild,
        minimum_interval_seconds=settings.dagster.sensor_interval_s,
        default_status=dg.DefaultSensorStatus.RUNNING
        if settings.dagster.sensors
        else dg.DefaultSensorStatus.STOPPED,
    )
    def communities_after_retention(context: dg.RunStatusSensorContext):  # type: ignore[no-untyped-def]
        request = rebuild_request(context.dagster_run)
        if request is None:
            return dg.SkipReason(f"retention run {context.dagster_run.run_id} archived nothing (dry run)")
        return request

    return communities_after_retention
