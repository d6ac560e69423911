"""The eight indexing assets, partitioned per realm/space, made by a factory from the configured
composition (:func:`build_assets`). Thin: resolve the partition, call the engine's stage function,
report. Each carries a blocking ``contract`` check (its Pandera model), and each user operator a
blocking ``operator_<name>`` check on its stage: a frame that breaks a contract records the failed
check with its offending rows, and nothing is written."""

import functools
import json
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import dagster as dg

from pgrag_dag.assets import checks
from pgrag_dag.assets.automation import HASHED_STAGES, INPUTS_KEY, ON_UPSTREAM_CHANGE, stage_hashes
from pgrag_dag.assets.columns import COLUMN_LINEAGE, column_schema
from pgrag_dag.assets.graph_export import build_graph_export, view_metadata
from pgrag_dag.assets.partitions import SPACES
from pgrag_dag.config.sections import Settings
from pgrag_dag.errors import ContractError, PgragError
from pgrag_dag.names import split_partition_key
from pgrag_dag.operators import contracts
from pgrag_dag.operators.core import BoundOperator, Composition, operator_check_name
from pgrag_dag.pipeline.checks import YIELD_CHECK, YIELD_DESCRIPTION
from pgrag_dag.pipeline.chunks import stage_chunks
from pgrag_dag.pipeline.common import PENDING_CHECK, SKIPPED_CHECK, StageResult
from pgrag_dag.pipeline.community_stages import stage_communities, stage_community_hierarchy
from pgrag_dag.pipeline.composition import compose_all
from pgrag_dag.pipeline.embeddings import stage_embeddings
from pgrag_dag.pipeline.extractions import stage_raw_extractions
from pgrag_dag.pipeline.graph_stages import stage_gated_triples, stage_relations, stage_resolved_entities
from pgrag_dag.pipeline.run import FULL_STAGES
from pgrag_dag.resources.engine import PgragResource
from pgrag_dag.store import db
from pgrag_dag.store.row_counts import HELD_ROWS, held_rows

Stage = Callable[..., StageResult]

FULL_TAG = "pgrag/full"
"""A run tag: ``pgrag/full=true`` makes the stages of :data:`~pgrag_dag.pipeline.FULL_STAGES` recompute their
whole partition instead of what changed (the result is the same; issue 15) — e.g. on a backfill launched from
the UI after editing stored data by hand."""


def _metadata(result: StageResult, held: int) -> dict[str, Any]:
    """A materialisation's metadata: ``dagster/row_count`` = ``held``, the rows the asset holds for the
    partition, with ``row_count_counts`` saying what they are (:data:`~pgrag_dag.store.row_counts.HELD_ROWS`);
    ``rows_checked`` the rows its contract checked in this run; the stage's own metadata (``rows_changed``
    among it); sample lists as tables; and the stage's ``dagster/column_lineage``."""
    out: dict[str, Any] = {
        "dagster/row_count": held,
        "row_count_counts": HELD_ROWS[result.stage],
        "rows_checked": result.rows_checked,
    }
    for key, value in result.metadata.items():
        if key.endswith("_sample") and isinstance(value, list) and value and isinstance(value[0], dict):
            out[key] = dg.MetadataValue.table(
                records=[
                    dg.TableRecord(
                        {
                            k: v if isinstance(v, (int, float, bool)) or v is None else str(v)
                            for k, v in r.items()
                        }
                    )
                    for r in value
                ],
                schema=dg.TableSchema(
                    columns=[
                        dg.TableColumn(c, "int" if isinstance(value[0][c], int) else "string")
                        for c in value[0]
                    ]
                ),
            )
        else:
            out[key] = dg.MetadataValue.json(value) if isinstance(value, (dict, list)) else value
    if result.stage in COLUMN_LINEAGE:
        out["dagster/column_lineage"] = COLUMN_LINEAGE[result.stage]
    if result.stage == "communities":
        out["lineage_query"] = dg.MetadataValue.md(
            "Row-level lineage: `SELECT * FROM pgrag_<realm>.community_lineage WHERE community_id = …` "
            "or `pgrag lineage <community_id> --realm <realm>`"
        )
    return out


def _inputs_hash(settings: Settings, name: str, key: str) -> str | None:
    """The source sensor's hash of what stage ``name`` reads in partition ``key``, taken before the stage runs
    (recorded as :data:`~pgrag_dag.assets.automation.INPUTS_KEY`); ``None`` for a stage it does not hash or
    when the configuration does not resolve (the stage reports that itself)."""
    if name not in HASHED_STAGES:
        return None
    try:
        return stage_hashes(settings, key, (name,))[name]
    except (PgragError, OSError):
        return None


EXTRA_CHECKS = {
    "graph_quality": "Table 6 measurements (§8.6). Blocking, red, for every extractor: duplicate edge rows, "
    "fragmented short-form vertices and pronoun entities must be zero (each would corrupt the graph). A "
    "warning, yellow and never blocking: an orphan-entity share above the extractor's own ceiling, with the "
    "measured value and the setting that would lower it.",
}
SOFT_CHECKS = {
    YIELD_CHECK: (YIELD_DESCRIPTION, dg.AssetCheckSeverity.ERROR),
    SKIPPED_CHECK: (
        "Documents of the space that could not be read (empty, binary, undecodable, unreadable, a bad "
        "JSONL line), each with its doc_key and reason: skipped, every other document indexed, an indexed "
        "one kept as stored. Non-blocking; WARN until the sources are fixed.",
        dg.AssetCheckSeverity.WARN,
    ),
}
"""Non-blocking checks a stage may report (``soft_checks``): name → (description, severity when failed)."""
PENDING_DESCRIPTION = (
    "Work this stage still owes the partition (failed first or gleaning passes, failed or "
    "deadline-cut community reports, named by their members, rows left without a vector); retried "
    "by the next run, red until it clears. Non-blocking."
)


STAGE_SLOTS = {
    "chunks": "chunker",
    "raw_extractions": "extractor",
    "gated_triples": "gate",
    "resolved_entities": "enricher",
}
"""The stage asset each operator slot runs in."""


@dataclass(frozen=True)
class OperatorCheck:
    """The asset check of one user operator: its check name, operator name and UI description."""

    check: str
    operator: str
    description: str


def stage_asset(
    name: str,
    stage: Stage,
    contract: str,
    deps: list[str],
    *,
    pool: str | None = None,
    description: str,
    extra_checks: tuple[str, ...] = (),
    operator_checks: tuple[OperatorCheck, ...] = (),
    pending: bool = False,
    soft_checks: tuple[str, ...] = (),
    extra_metadata: Callable[..., dict[str, Any]] | None = None,
) -> dg.AssetsDefinition:
    """An asset running ``stage`` for its partition, with a blocking check named ``contract``, the
    blocking ``extra_checks`` the stage reports on what it wrote, one blocking check per user
    operator composed into this stage in any space (``operator_checks``), and with ``pending`` the
    non-blocking ``pending_work`` check (WARN while the stage owes work); ``soft_checks`` are
    further non-blocking checks, each with its own severity (:data:`SOFT_CHECKS`: ``yield`` ERROR,
    ``skipped_documents`` WARN). ``extra_metadata(engine, realm, space, log)`` adds to the metadata of a
    materialisation (the ``communities`` asset's link to the graph view,
    :mod:`pgrag_dag.assets.graph_export`).

    A stage error fails the step with a description naming the asset, the partition and the error."""

    with warnings.catch_warnings():  # a partitioned check is a preview feature of Dagster 1.13
        warnings.simplefilter("ignore", dg.PreviewWarning)
        spec = functools.partial(dg.AssetCheckSpec, asset=name, partitions_def=SPACES)
        specs = [spec(checks.CHECK_NAME, blocking=True, description=f"Pandera contract {contract}")]
        specs += [spec(c, blocking=True, description=EXTRA_CHECKS[c]) for c in extra_checks]
        if pending:
            specs.append(spec(PENDING_CHECK, blocking=False, description=PENDING_DESCRIPTION))
        specs += [spec(c, blocking=False, description=SOFT_CHECKS[c][0]) for c in soft_checks]
        specs += [spec(o.check, blocking=True, description=o.description) for o in operator_checks]

    @dg.asset(
        name=name,
        partitions_def=SPACES,
        deps=deps,
        pool=pool,
        group_name="index",
        kinds={"postgres", "polars"},
        description=f"{description}\n\nRow count: {HELD_ROWS[name]}.",
        check_specs=specs,
        metadata={"dagster/column_schema": column_schema(getattr(contracts, contract))},
        automation_condition=ON_UPSTREAM_CHANGE if deps else None,
    )
    def _asset(context: dg.AssetExecutionContext, pgrag: PgragResource) -> Iterator[Any]:
        key = context.partition_key
        realm, space = split_partition_key(key)
        try:
            full = name in FULL_STAGES and context.run.tags.get(FULL_TAG, "").lower() == "true"
            engine = pgrag.engine()
            inputs = _inputs_hash(engine.settings, name, key)
            result = stage(engine, realm, space, **({"full": True} if full else {}))
        except ContractError as exc:
            yield checks.failed(name, key, exc)
            for o in operator_checks:
                if exc.contract.endswith(f"(operator {o.operator})"):
                    yield checks.failed(name, key, exc, check=o.check)
            raise dg.Failure(
                description=f"{name}: contract {exc.contract} broken; nothing was written",
                metadata={"contract": exc.contract},
            ) from exc
        except PgragError as exc:
            owed = getattr(
                exc, "pending", None
            )  # work the failed stage leaves behind (EmbeddingIncompleteError)
            if pending and isinstance(owed, dict):
                yield checks.measured(
                    name, key, PENDING_CHECK, False, owed, severity=dg.AssetCheckSeverity.WARN
                )
            raise dg.Failure(
                description=f"{name} {context.partition_key}: {type(exc).__name__}: {exc}",
                metadata={
                    "error": type(exc).__name__,
                    **({"pending": dg.MetadataValue.json(owed)} if isinstance(owed, dict) else {}),
                },
            ) from exc
        extra = [checks.graded(name, key, c, *result.checks[c]) for c in extra_checks]
        extra += [
            checks.measured(
                name,
                key,
                o.check,
                *result.checks.get(o.check, (True, {"composed": f"not composed in space {realm}.{space}"})),
            )
            for o in operator_checks
        ]
        if pending:
            extra.append(
                checks.measured(
                    name,
                    key,
                    PENDING_CHECK,
                    *result.checks[PENDING_CHECK],
                    severity=dg.AssetCheckSeverity.WARN,
                )
            )
        extra += [
            checks.measured(name, key, c, *result.checks[c], severity=SOFT_CHECKS[c][1]) for c in soft_checks
        ]
        with db.database_errors(engine.dsn), engine.connect(autocommit=True) as conn:
            held = held_rows(conn, realm, space, name)
        metadata = {**_metadata(result, held), **({INPUTS_KEY: inputs} if inputs else {})}
        if extra_metadata is not None:
            metadata.update(extra_metadata(engine, realm, space, context.log))
        yield dg.MaterializeResult(
            metadata=metadata,
            data_version=dg.DataVersion(result.data_version),
            check_results=[checks.passed(name, key, result.rows_checked, contract), *extra],
        )

    return _asset


def _operator_checks(compositions: dict[str, Composition], slot: str) -> tuple[OperatorCheck, ...]:
    """One check per distinct user operator of ``slot`` across the spaces, naming where it is composed."""
    where: dict[str, tuple[BoundOperator, list[str]]] = {}
    for key, comp in compositions.items():
        for b in comp.user_operators():
            if b.op.slot == slot:
                where.setdefault(b.op.name, (b, []))[1].append(key)
    return tuple(
        OperatorCheck(
            operator_check_name(n),
            n,
            f"{b.op.description or n} — user {slot} {b.configured_as}, contract "
            f"{b.op.contract.__name__}; composed in {', '.join(keys)}",
        )
        for n, (b, keys) in sorted(where.items())
    )


def _options(b: BoundOperator) -> str:
    """``key=value`` pairs of a bound operator's options (long values cut), for descriptions."""
    pairs = [f"{k}={json.dumps(v, default=str)}" for k, v in b.options.model_dump(mode="json").items()]
    return ", ".join(p if len(p) <= 60 else p[:57] + "..." for p in pairs) or "no options"


def _composed(compositions: dict[str, Composition], slot: str) -> str:
    """The description lines naming which operators each space composes into ``slot``."""
    if not compositions:
        return ""
    lines = []
    for key, comp in sorted(compositions.items()):
        bounds = {
            "chunker": [comp.chunker],
            "extractor": [comp.extractor],
            "gate": list(comp.gates),
            "enricher": list(comp.enrichers),
        }[slot]
        names = ", ".join(f"`{b.configured_as}` ({_options(b)})" for b in bounds) or (
            "Table 2 gates only" if slot == "gate" else "none"
        )
        lines.append(f"- {key}: {names}")
    return f"\n\n{slot.capitalize()} per space:\n" + "\n".join(lines)


def build_assets(settings: Settings | None = None) -> list[dg.AssetsDefinition]:
    """The eight stage assets for ``settings``' compositions (:mod:`pgrag_dag.operators`): each
    description names the operators every space composes, and every user operator gets a blocking
    asset check on its stage (``operator_<name>``). Without settings: the built-in pipeline.

    With ``export.asset`` the optional ``graph_export`` asset follows them
    (:mod:`pgrag_dag.assets.graph_export`).

    Raises :class:`ConfigurationError` when a space's composition does not resolve.
    """
    comps = compose_all(settings) if settings is not None else {}

    def make(
        name: str, stage: Stage, contract: str, deps: list[str], description: str, **kw: Any
    ) -> dg.AssetsDefinition:
        slot = STAGE_SLOTS.get(name)
        if slot is not None:
            description += _composed(comps, slot)
            kw["operator_checks"] = _operator_checks(comps, slot)
        return stage_asset(name, stage, contract, deps, description=description, **kw)

    return [
        *[
            make(
                "chunks",
                stage_chunks,
                "ChunkContract",
                [],
                soft_checks=(SKIPPED_CHECK,),
                description="Documents read from the space's sources, split into chunks by the space's "
                "chunker (§4.1, §5.5).",
            ),
            make(
                "raw_extractions",
                stage_raw_extractions,
                "RawExtractionContract",
                ["chunks"],
                pool="llm",
                pending=True,
                soft_checks=(YIELD_CHECK,),
                description="The space's extractor per new or changed chunk: model extraction and gleaning, "
                "or an extractor that calls no model (§4.1–4.2).",
            ),
            make(
                "gated_triples",
                stage_gated_triples,
                "GateDecisionContract",
                ["raw_extractions"],
                "Every extracted entity and triple, accepted or refused by a gate (Table 2, then the "
                "space's extra gates).",
                soft_checks=(YIELD_CHECK,),
            ),
            make(
                "resolved_entities",
                stage_resolved_entities,
                "EntityContract",
                ["gated_triples"],
                "Entities resolved to one vertex per canonical name, then the space's enrichers; "
                "mentions, dormancy (§4.6).",
            ),
            make(
                "relations",
                stage_relations,
                "RelationContract",
                ["resolved_entities"],
                "Edges with corroboration weight, negation and validity (§4.7, §5.1).",
                extra_checks=("graph_quality",),
            ),
            make(
                "embeddings",
                stage_embeddings,
                "EmbeddingContract",
                ["relations"],
                "Vectors for chunks, entities and relations (HNSW-indexed); rows left without "
                "one are pending work.",
                pending=True,
            ),
            make(
                "communities",
                stage_communities,
                "CommunityMemberContract",
                ["embeddings"],
                pool="llm",
                pending=True,
                extra_metadata=view_metadata,
                description="Leiden communities with one report each: model-written, or extractive where "
                "the space has no model (§6); its metadata links the space's graph view (graph_view).",
            ),
            make(
                "community_hierarchy",
                stage_community_hierarchy,
                "HierarchyContract",
                ["communities"],
                pool="llm",
                pending=True,
                description="Parent topics clustered from communities, reports from child reports (§6.1).",
            ),
        ],
        *([build_graph_export(settings)] if settings is not None and settings.export.asset else []),
    ]


ASSETS = build_assets()
"""The built-in pipeline's assets (no user operator checks); :func:`build_assets` for a configuration."""
