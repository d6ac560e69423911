"""Refreshing sources and propagating real change (issue 6; dagster-guide §3–4).

- :func:`source_sensor`: per space, one hash per stage of what that stage depends on (sources and
  chunker, extractor, gates and vocabulary, enrichers, community settings) in its cursor; requests,
  for a space where any changed, a run of exactly the changed stages (downstream follows by
  automation), adding partitions for spaces new to the configuration.
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
from pgrag_dag.operators import compose
from pgrag_dag.sources import list_source_files

AC = dg.AutomationCondition
ON_UPSTREAM_CHANGE = (
    AC.eager().replace(
        "any_deps_updated",
        AC.any_deps_match(AC.data_version_changed() | AC.will_be_requested()).with_label("upstream data version changed"),
    )
    & AC.all_deps_blocking_checks_passed()
)


def _digest(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def stage_hashes(settings: Settings, partition: str) -> dict[str, str]:
    """What each stage's output depends on in the configuration, hashed per stage (asset name → hex):
    ``chunks`` the source files, source declarations, ordering and chunker; ``raw_extractions`` the
    extractor; ``gated_triples`` the gate settings, vocabulary and extra gates; ``resolved_entities``
    the enrichers; ``communities`` the community settings and report writer.

    A source file that cannot be read hashes as such (the chunks stage skips and reports it). Raises
    :class:`ConfigurationError` when the composition does not resolve or a source path is missing.
    """
    realm, space = split_partition_key(partition)
    spec = settings.space_spec(realm, space)
    comp = compose(settings, realm, space)
    h = hashlib.sha256(json.dumps([s.model_dump(mode="json") for s in spec.sources], sort_keys=True).encode())
    h.update(f"{spec.order}:{spec.order_field}:{comp.chunker.identity}".encode())
    for path in list_source_files(settings, spec):
        try:
            data = path.read_bytes()
        except OSError as exc:  # a file that cannot be read is a change too: the run reports and skips it
            data = f"\0unreadable: {exc.strerror or exc}".encode()
        h.update(str(path).encode("utf-8", "surrogateescape") + b"\0" + data)
    vocabulary = json.dumps([spec.preset, spec.vocabulary, spec.predicate_aliases, spec.exclusive_groups], sort_keys=True)
    return {
        "chunks": h.hexdigest(),
        "raw_extractions": _digest(comp.extractor.identity),
        "gated_triples": _digest(settings.gates.model_dump_json(), vocabulary, *(g.identity for g in comp.gates)),
        "resolved_entities": _digest(*(e.identity for e in comp.enrichers)),
        "communities": _digest(settings.communities.model_dump_json(), spec.reports),
    }


def build_source_sensor(settings: Settings, target: list[dg.AssetsDefinition]) -> dg.SensorDefinition:
    """The sensor over the configured sources and compositions (running unless ``dagster.sensors`` is
    false). ``target`` must hold the stage assets it may request (:func:`stage_hashes`' keys)."""

    @dg.sensor(name="source_sensor", target=target, minimum_interval_seconds=30,
               default_status=dg.DefaultSensorStatus.RUNNING if settings.dagster.sensors else dg.DefaultSensorStatus.STOPPED,
               description="Requests a run for each realm/space whose document sources or operator composition "
                           "changed, of exactly the stages whose inputs changed (automation takes the rest).")
    def source_sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult | dg.SkipReason:
        seen = json.loads(context.cursor) if context.cursor else {}
        now: dict[str, dict[str, str]] = {}
        broken = []
        for key in settings.partitions():
            try:
                now[key] = stage_hashes(settings, key)
            except (PgragError, OSError) as exc:  # one unreadable space must not stop the others
                broken.append(f"{key}: {exc}")
                if key in seen:
                    now[key] = seen[key]
        requests, changed = [], []
        for key, hashes in sorted(now.items()):
            before = seen.get(key)
            before = before if isinstance(before, dict) else {}  # a cursor of an older version: run it all
            stages = [stage for stage, h in hashes.items() if before.get(stage) != h]
            if stages:
                changed.append(key)
                requests.append(dg.RunRequest(partition_key=key, asset_selection=[dg.AssetKey(s) for s in stages],
                                              run_key=f"{key}:{_digest(*hashes.values())[:16]}"))
        if not requests:
            return dg.SkipReason("no document source or composition changed" + (f"; unreadable: {broken}" if broken else ""))
        known = set(context.instance.get_dynamic_partitions(SPACES.name))
        new = [k for k in changed if k not in known]
        return dg.SensorResult(
            dynamic_partitions_requests=[SPACES.build_add_request(new)] if new else [],
            run_requests=requests, cursor=json.dumps(now, sort_keys=True),
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
