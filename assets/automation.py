"""Refreshing sources and propagating real change (issue 6; dagster-guide §3–4).

- :func:`source_sensor`: one content hash per space in its cursor; requests a ``chunks`` run only for
  spaces whose sources changed, adding partitions for spaces new to the configuration.
- :func:`nightly_refresh`: a schedule (cron from ``dagster.refresh_cron``) refreshing every space.
- :data:`ON_UPSTREAM_CHANGE`: downstream stages re-materialise only when an upstream *data version*
  changed (or is about to, in the same tick), never after a failed blocking check, and not on a code
  version bump (which would re-request every partition's model calls).
"""

from __future__ import annotations

import hashlib
import json

import dagster as dg

from pgrag_dag.assets.partitions import SPACES
from pgrag_dag.config import Settings
from pgrag_dag.errors import PgragError
from pgrag_dag.names import split_partition_key
from pgrag_dag.sources import list_source_files

AC = dg.AutomationCondition
ON_UPSTREAM_CHANGE = (
    AC.eager().replace(
        "any_deps_updated",
        AC.any_deps_match(AC.data_version_changed() | AC.will_be_requested()).with_label("upstream data version changed"),
    )
    & AC.all_deps_blocking_checks_passed()
)


def space_hash(settings: Settings, partition: str) -> str:
    """SHA-256 over the space's source files (paths and bytes) and its configuration."""
    realm, space = split_partition_key(partition)
    spec = settings.space_spec(realm, space)
    h = hashlib.sha256(spec.model_dump_json().encode())
    for path in list_source_files(settings, spec):
        h.update(str(path).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def build_source_sensor(settings: Settings, target: list[dg.AssetsDefinition]) -> dg.SensorDefinition:
    """The sensor over the configured sources (running unless ``dagster.sensors`` is false)."""

    @dg.sensor(name="source_sensor", target=target, minimum_interval_seconds=30,
               default_status=dg.DefaultSensorStatus.RUNNING if settings.dagster.sensors else dg.DefaultSensorStatus.STOPPED,
               description="Requests a run for each realm/space whose document sources changed.")
    def source_sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult | dg.SkipReason:
        seen = json.loads(context.cursor) if context.cursor else {}
        now, broken = {}, []
        for key in settings.partitions():
            try:
                now[key] = space_hash(settings, key)
            except (PgragError, OSError) as exc:  # one unreadable space must not stop the others
                broken.append(f"{key}: {exc}")
                now[key] = seen.get(key, "")
        changed = sorted(k for k, h in now.items() if h and seen.get(k) != h)
        if not changed:
            return dg.SkipReason("no document source changed" + (f"; unreadable: {broken}" if broken else ""))
        known = set(context.instance.get_dynamic_partitions(SPACES.name))
        new = [k for k in changed if k not in known]
        return dg.SensorResult(
            dynamic_partitions_requests=[SPACES.build_add_request(new)] if new else [],
            run_requests=[dg.RunRequest(partition_key=k, run_key=f"{k}:{now[k][:16]}") for k in changed],
            cursor=json.dumps(now, sort_keys=True),
        )

    return source_sensor


def build_nightly_refresh(settings: Settings, target: list[dg.AssetsDefinition]) -> dg.ScheduleDefinition:
    """The schedule refreshing every space (its runs are cheap when nothing changed: no model call)."""

    @dg.schedule(name="nightly_refresh", cron_schedule=settings.dagster.refresh_cron, target=target,
                 execution_timezone="UTC",
                 default_status=dg.DefaultScheduleStatus.RUNNING if settings.dagster.sensors else dg.DefaultScheduleStatus.STOPPED)
    def nightly_refresh(context: dg.ScheduleEvaluationContext):  # type: ignore[no-untyped-def]
        known = set(context.instance.get_dynamic_partitions(SPACES.name))
        stamp = context.scheduled_execution_time.strftime("%Y%m%d%H%M")
        for key in settings.partitions():
            if key in known:
                yield dg.RunRequest(partition_key=key, run_key=f"{key}:{stamp}")

    return nightly_refresh


def build_automation_sensor(settings: Settings) -> dg.AutomationConditionSensorDefinition:
    """The automation-condition sensor (the implicit default one starts stopped)."""
    return dg.AutomationConditionSensorDefinition(
        "pgrag_automation", target=dg.AssetSelection.all(),
        default_status=dg.DefaultSensorStatus.RUNNING if settings.dagster.sensors else dg.DefaultSensorStatus.STOPPED,
    )
