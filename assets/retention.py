"""The ``retention`` job (paper §6.1; issue 14 item 3): retention as demotion for one partition, from the
UI or a schedule of your own. Config ``dry_run`` (default ``True``): list what would be archived, change
nothing; ``False`` archives (:func:`pgrag_dag.operate.retention.apply`; reversible with ``pgrag unarchive``).

A job, not an asset: it derives no data, it demotes rows of the graph; the next ``communities``
materialisation sees the change (its fingerprint moves) and leaves the archived entities out.
"""

from typing import Any  # no `from __future__ import annotations`: Dagster reads the config annotation

import dagster as dg

from pgrag_dag.assets.partitions import SPACES
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
