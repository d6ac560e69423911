"""The change feed on the Dagster side (paper §6.1 "Change"; issue 14 items 2 and 5).

- :func:`build_change_sensor`: a sensor whose cursor is a :func:`~pgrag_dag.operate.changes.changes_since`
  watermark; each tick that finds changes in its realm/space requests one run of the user's job, tagged
  with the window and its counts.
- :data:`COMMUNITY_LAG_CHECK` (:func:`build_community_lag_check`): a non-blocking check on
  ``communities`` reporting ``changed_relations_since_communities`` per partition, WARN while > 0. It
  depends on ``relations`` too and is automated on either updating, so the UI shows the lag after a
  graph change without anyone running a query, and the pass once the communities are rebuilt.
"""

import json
import re
import warnings
from typing import Any

import dagster as dg

from pgrag_dag.assets.partitions import SPACES
from pgrag_dag.errors import UnknownSpaceError
from pgrag_dag.names import split_partition_key, validate_realm, validate_space
from pgrag_dag.operate.changes import changes_since, community_lag
from pgrag_dag.resources.engine import PgragResource

COMMUNITY_LAG_CHECK = "communities_current"
COMMUNITY_LAG_DESCRIPTION = (
    "Relation events (asserted, superseded, restored, dormant, revived) of the space after its latest "
    "level-0 community build: changed_relations_since_communities; graph writes (archival, dormancy, merges, "
    "changed descriptions or types as well) after the data version it read: graph_writes_since_communities. "
    "WARN while either is > 0 or while relations exist without communities; evaluated after relations and "
    "after communities materialise (§6.1). Non-blocking."
)
TAG_PREFIX = "pgrag/"
"""Tags of a change run: ``pgrag/partition``, ``pgrag/since``, ``pgrag/watermark``, ``pgrag/events`` and
``pgrag/changes`` (JSON: the non-zero counts per :class:`~pgrag_dag.operate.changes.ChangeSet` field)."""


def build_community_lag_check() -> dg.AssetChecksDefinition:
    """The ``communities_current`` check (partitioned like the assets; WARN severity, non-blocking),
    requested by automation when ``relations`` or ``communities`` of a partition updates."""
    with warnings.catch_warnings():  # a partitioned check is a preview feature of Dagster 1.13
        warnings.simplefilter("ignore", dg.PreviewWarning)

        @dg.asset_check(
            asset="communities",
            name=COMMUNITY_LAG_CHECK,
            additional_deps=["relations"],
            partitions_def=SPACES,
            blocking=False,
            description=COMMUNITY_LAG_DESCRIPTION,
            automation_condition=dg.AutomationCondition.any_deps_updated(),
        )
        def communities_current(
            context: dg.AssetCheckExecutionContext, pgrag: PgragResource
        ) -> dg.AssetCheckResult:
            realm, space = split_partition_key(context.partition_key)
            lag = community_lag(pgrag.engine(), realm, space)
            return dg.AssetCheckResult(
                passed=not lag.communities_stale,
                severity=dg.AssetCheckSeverity.WARN,
                metadata={
                    "partition": context.partition_key,
                    "changed_relations_since_communities": lag.changed_relations_since_communities,
                    "graph_writes_since_communities": lag.graph_writes_since_communities,
                    "communities_built_at": lag.communities_built_at or "never",
                },
                description=context.partition_key
                + ": "
                + (
                    f"{lag.changed_relations_since_communities} relation change(s), "
                    f"{lag.graph_writes_since_communities} graph write(s) since the communities were built"
                    if lag.communities_stale
                    else "communities are current"
                ),
            )

    return communities_current


def _sensor_name(realm: str, space: str) -> str:
    return "changes_" + re.sub(r"[^A-Za-z0-9_]", "_", f"{realm}_{space}")


def build_change_sensor(
    realm: str,
    space: str,
    *,
    job: Any,
    name: str | None = None,
    minimum_interval_seconds: int = 30,
    default_status: dg.DefaultSensorStatus = dg.DefaultSensorStatus.STOPPED,
) -> dg.SensorDefinition:
    """A sensor over ``realm``/``space``'s change feed that runs ``job`` (a job definition, or an asset
    job from ``dg.define_asset_job``) once per tick with changes.

    Its cursor is the watermark: each tick calls :func:`~pgrag_dag.operate.changes.changes_since` with it and
    advances it, so every change triggers exactly one run (its ``run_key`` is the watermark); a tick
    without changes skips. The run's tags (:data:`TAG_PREFIX`) carry the window and the counts: an op
    reads ``context.run.tags["pgrag/changes"]``. Needs the ``pgrag`` resource (:class:`PgragResource`).
    The name defaults to ``changes_<realm>_<space>``. Raises :class:`InvalidNameError` for a bad name.
    """
    validate_realm(realm)
    validate_space(space)

    @dg.sensor(
        name=name or _sensor_name(realm, space),
        job=job,
        minimum_interval_seconds=minimum_interval_seconds,
        default_status=default_status,
        description=f"Runs {getattr(job, 'name', 'the job')} when {realm}.{space}'s graph "
        "or documents change.",
    )
    def change_sensor(context: dg.SensorEvaluationContext, pgrag: PgragResource) -> dg.SensorResult:
        engine = pgrag.engine()
        try:
            cs = changes_since(engine, realm, space, context.cursor or None)
        except UnknownSpaceError:  # a configured space not indexed yet waits; a mistyped one is an error
            if realm in engine.settings.realms and space in engine.settings.realms[realm].spaces:
                return dg.SensorResult(
                    skip_reason=f"{realm}.{space} has not been indexed yet", cursor=context.cursor
                )
            raise
        if not cs.events:
            return dg.SensorResult(skip_reason=f"no change in {realm}.{space}", cursor=cs.watermark)
        counts = {k: n for k, n in cs.counts().items() if n}
        tags = {
            "partition": f"{realm}.{space}",
            "since": cs.since or "",
            "watermark": cs.watermark,
            "events": str(cs.events),
            "changes": json.dumps(counts, sort_keys=True),
        }
        return dg.SensorResult(
            run_requests=[
                dg.RunRequest(
                    run_key=f"{realm}.{space}@{cs.watermark}",
                    tags={TAG_PREFIX + k: v for k, v in tags.items()},
                )
            ],
            cursor=cs.watermark,
        )

    return change_sensor


COMMUNITY_CHECKS = [build_community_lag_check()]
"""The asset checks defined outside the stage assets (added to the code location by ``build_defs``)."""
