"""Refreshing sources and propagating real change (issue 6; dagster-guide §3–4).

- :func:`source_sensor`: per space, one hash per stage of what that stage depends on (sources and
  chunker, extractor, gates and vocabulary, enrichers, community settings) in its cursor; requests,
  for a space where any changed, a run of the changed stages and those between them (downstream
  follows by automation; a new space's run is ``chunks`` to ``communities``), adding partitions for
  spaces new to the configuration. Each stage's materialisation
  records the hash it ran under (:data:`INPUTS_KEY`), so a space missing from the cursor — the first
  tick after ``pgrag ui`` starts the daemon, or a cursor of an older version — is compared with what
  its last materialisations ran on, and an unchanged space is not run again.
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
from pgrag_dag.config.sections import Settings, SpaceSpec
from pgrag_dag.errors import PgragError
from pgrag_dag.ingest.sources import list_source_files
from pgrag_dag.names import split_partition_key
from pgrag_dag.operators.core import Composition
from pgrag_dag.pipeline.composition import compose

AC = dg.AutomationCondition
ON_UPSTREAM_CHANGE = (
    AC.eager().replace(
        "any_deps_updated",
        AC.any_deps_match(AC.data_version_changed() | AC.will_be_requested()).with_label(
            "upstream data version changed"
        ),
    )
    & AC.all_deps_blocking_checks_passed()
)


def _digest(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


HASHED_STAGES = ("chunks", "raw_extractions", "gated_triples", "resolved_entities", "communities")
"""The stages :func:`stage_hashes` hashes the inputs of (the source sensor may request them)."""
INPUTS_KEY = "pgrag/inputs_hash"
"""Materialisation metadata of a :data:`HASHED_STAGES` asset: its :func:`stage_hashes` value when the run
began."""


def stage_hashes(
    settings: Settings, partition: str, stages: tuple[str, ...] = HASHED_STAGES
) -> dict[str, str]:
    """What each stage's output depends on in the configuration, hashed per stage (asset name → hex, for
    the ``stages`` asked, of :data:`HASHED_STAGES`): ``chunks`` the source files, source declarations,
    ordering and chunker; ``raw_extractions`` the extractor; ``gated_triples`` the gate settings,
    vocabulary and extra gates; ``resolved_entities`` the enrichers; ``communities`` the community
    settings and report writer. Only ``chunks`` reads the source files.

    A source file that cannot be read hashes as such (the chunks stage skips and reports it). Raises
    :class:`ConfigurationError` when the composition does not resolve or a source path is missing.
    """
    realm, space = split_partition_key(partition)
    spec = settings.space_spec(realm, space)
    comp = compose(settings, realm, space)
    vocabulary = json.dumps(
        [spec.preset, spec.vocabulary, spec.predicate_aliases, spec.exclusive_groups], sort_keys=True
    )
    cheap = {
        "raw_extractions": lambda: _digest(comp.extractor.identity),
        "gated_triples": lambda: _digest(
            settings.gates.model_dump_json(), vocabulary, *(g.identity for g in comp.gates)
        ),
        "resolved_entities": lambda: _digest(*(e.identity for e in comp.enrichers)),
        "communities": lambda: _digest(settings.communities.model_dump_json(), spec.reports),
    }
    return {
        stage: _source_hash(settings, spec, comp) if stage == "chunks" else cheap[stage]() for stage in stages
    }


def _source_hash(settings: Settings, spec: SpaceSpec, comp: Composition) -> str:
    """The ``chunks`` hash: source declarations, ordering, chunker and every source file's path and bytes."""
    h = hashlib.sha256(json.dumps([s.model_dump(mode="json") for s in spec.sources], sort_keys=True).encode())
    h.update(f"{spec.order}:{spec.order_field}:{comp.chunker.identity}".encode())
    for path in list_source_files(settings, spec):
        try:
            data = path.read_bytes()
        except OSError as exc:  # a file that cannot be read is a change too: the run reports and skips it
            data = f"\0unreadable: {exc.strerror or exc}".encode()
        h.update(str(path).encode("utf-8", "surrogateescape") + b"\0" + data)
    return h.hexdigest()


def recorded_hashes(instance: dg.DagsterInstance, partition: str) -> dict[str, str]:
    """The :data:`INPUTS_KEY` each of :data:`HASHED_STAGES` recorded on its latest materialisation of
    ``partition`` (stage → hex; a stage never materialised, or materialised before the hash was recorded,
    is absent)."""
    out = {}
    for stage in HASHED_STAGES:
        found = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=dg.AssetKey(stage), asset_partitions=[partition]), limit=1
        ).records
        mat = found[0].asset_materialization if found else None
        value = mat.metadata.get(INPUTS_KEY) if mat is not None else None
        if value is not None and isinstance(value.value, str):
            out[stage] = value.value
    return out


def _span(order: list[str], changed: list[str]) -> list[str]:
    """The stages of ``order`` (the pipeline, first to last) from the first of ``changed`` to its last: one
    run materialises them in order. Stages between two changed ones are included — a run of ``chunks`` and
    ``communities`` alone would build the communities before their relations (a new space's first run)."""
    if not changed:
        return []
    at = [order.index(stage) for stage in changed]
    return order[min(at) : max(at) + 1]


def build_source_sensor(settings: Settings, target: list[dg.AssetsDefinition]) -> dg.SensorDefinition:
    """The sensor over the configured sources and compositions (running unless ``dagster.sensors`` is
    false). ``target`` must hold the stage assets in pipeline order
    (:func:`~pgrag_dag.assets.stages.build_assets`): a space's run request selects the stages from its first
    changed one to its last (:func:`_span`)."""

    @dg.sensor(
        name="source_sensor",
        target=target,
        minimum_interval_seconds=settings.dagster.sensor_interval_s,
        default_status=dg.DefaultSensorStatus.RUNNING
        if settings.dagster.sensors
        else dg.DefaultSensorStatus.STOPPED,
        description="Requests a run for each realm/space whose document sources or operator composition "
        "changed, of the stages whose inputs changed and those between them (automation takes the rest).",
    )
    def source_sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult | dg.SkipReason:
        order = [a.key.to_user_string() for a in target]
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
        known = set(context.instance.get_dynamic_partitions(SPACES.name))
        for key, hashes in sorted(now.items()):
            before = seen.get(key)
            if not isinstance(
                before, dict
            ):  # first tick, a new space or an older cursor: what its runs ran on
                before = recorded_hashes(context.instance, key) if key in known else {}
            stages = _span(order, [stage for stage, h in hashes.items() if before.get(stage) != h])
            if stages:
                changed.append(key)
                requests.append(
                    dg.RunRequest(
                        partition_key=key,
                        asset_selection=[dg.AssetKey(s) for s in stages],
                        run_key=f"{key}:{_digest(*hashes.values())[:16]}",
                    )
                )
        cursor = json.dumps(now, sort_keys=True)
        if not requests:
            skip = "no document source or composition changed" + (f"; unreadable: {broken}" if broken else "")
            return (
                dg.SkipReason(skip)
                if cursor == context.cursor
                else dg.SensorResult(skip_reason=skip, cursor=cursor)
            )
        new = [k for k in changed if k not in known]
        return dg.SensorResult(
            dynamic_partitions_requests=[SPACES.build_add_request(new)] if new else [],
            run_requests=requests,
            cursor=cursor,
        )

    return source_sensor


def build_nightly_refresh(settings: Settings, target: list[dg.AssetsDefinition]) -> dg.ScheduleDefinition:
    """The schedule refreshing every space (its runs are cheap when nothing changed: no model call)."""

    @dg.schedule(
        name="nightly_refresh",
        cron_schedule=settings.dagster.refresh_cron,
        target=target,
        execution_timezone="UTC",
        default_status=dg.DefaultScheduleStatus.RUNNING
        if settings.dagster.sensors
        else dg.DefaultScheduleStatus.STOPPED,
    )
    def nightly_refresh(context: dg.ScheduleEvaluationContext):  # type: ignore[no-untyped-def]
        known = set(context.instance.get_dynamic_partitions(SPACES.name))
        stamp = context.scheduled_execution_time.strftime("%Y%m%d%H%M")
        for key in settings.partitions():
            if key in known:
                yield dg.RunRequest(partition_key=key, run_key=f"{key}:{stamp}")

    return nightly_refresh


def build_automation_sensor(settings: Settings) -> dg.AutomationConditionSensorDefinition:
    """The automation-condition sensor (the implicit default one starts stopped), evaluated at most every
    ``dagster.sensor_interval_s`` seconds."""
    return dg.AutomationConditionSensorDefinition(
        "pgrag_automation",
        target=dg.AssetSelection.all(),
        minimum_interval_seconds=settings.dagster.sensor_interval_s,
        default_status=dg.DefaultSensorStatus.RUNNING
        if settings.dagster.sensors
        else dg.DefaultSensorStatus.STOPPED,
    )
