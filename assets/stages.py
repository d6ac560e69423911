"""The eight indexing assets, partitioned per realm/space. Thin: resolve the partition, call the
engine's stage function, report. Each carries a blocking ``contract`` check (its Pandera model): a
frame that breaks it records the failed check with its offending rows, and nothing is written."""



from collections.abc import Callable, Iterator
from typing import Any

import dagster as dg

from pgrag_dag.assets import checks
from pgrag_dag.assets.automation import ON_UPSTREAM_CHANGE
from pgrag_dag.assets.partitions import SPACES
from pgrag_dag.engine import Engine
from pgrag_dag.errors import ContractError
from pgrag_dag.names import split_partition_key
from pgrag_dag.pipeline import (
    StageResult, stage_chunks, stage_embeddings, stage_gated_triples, stage_raw_extractions,
    stage_relations, stage_resolved_entities,
)
from pgrag_dag.community_stages import stage_communities, stage_community_hierarchy
from pgrag_dag.resources.engine import PgragResource

Stage = Callable[[Engine, str, str], StageResult]


# column lineage of the community reports (row-level lineage lives in the community_lineage view)
REPORT_LINEAGE = dg.TableColumnLineage(deps_by_column={
    "report": [dg.TableColumnDep(dg.AssetKey("relations"), "rendered"), dg.TableColumnDep(dg.AssetKey("resolved_entities"), "description")],
    "community_members.entity_id": [dg.TableColumnDep(dg.AssetKey("resolved_entities"), "id")],
    "community_lineage.chunk_id": [dg.TableColumnDep(dg.AssetKey("relations"), "chunk_ids"), dg.TableColumnDep(dg.AssetKey("chunks"), "id")],
})


def _metadata(result: StageResult) -> dict[str, Any]:
    out: dict[str, Any] = {"dagster/row_count": result.rows_checked}
    for key, value in result.metadata.items():
        if key.endswith("_sample") and isinstance(value, list) and value and isinstance(value[0], dict):
            out[key] = dg.MetadataValue.table(
                records=[dg.TableRecord({k: v if isinstance(v, (int, float, bool)) or v is None else str(v)
                                         for k, v in r.items()}) for r in value],
                schema=dg.TableSchema(columns=[dg.TableColumn(c, "int" if isinstance(value[0][c], int) else "string")
                                               for c in value[0]]))
        else:
            out[key] = dg.MetadataValue.json(value) if isinstance(value, (dict, list)) else value
    if result.stage == "communities":
        out["dagster/column_lineage"] = REPORT_LINEAGE
        out["lineage_query"] = dg.MetadataValue.md(
            "Row-level lineage: `SELECT * FROM pgrag_<realm>.community_lineage WHERE community_id = …` "
            "or `pgrag lineage <community_id> --realm <realm>`")
    return out


EXTRA_CHECKS = {
    "graph_quality": "Table 6 measurements; duplicate edge rows, fragmented short-form vertices and pronoun "
                     "entities must be zero (§8.6)",
}


def stage_asset(name: str, stage: Stage, contract: str, deps: list[str], *, pool: str | None = None,
                description: str, extra_checks: tuple[str, ...] = ()) -> dg.AssetsDefinition:
    """An asset running ``stage`` for its partition, with a blocking check named ``contract`` and the
    blocking ``extra_checks`` the stage reports on what it wrote."""

    specs = [dg.AssetCheckSpec(checks.CHECK_NAME, asset=name, blocking=True, description=f"Pandera contract {contract}")]
    specs += [dg.AssetCheckSpec(c, asset=name, blocking=True, description=EXTRA_CHECKS[c]) for c in extra_checks]

    @dg.asset(
        name=name, partitions_def=SPACES, deps=deps, pool=pool, group_name="index",
        kinds={"postgres", "polars"}, description=description, check_specs=specs,
        automation_condition=ON_UPSTREAM_CHANGE if deps else None,
    )
    def _asset(context: dg.AssetExecutionContext, pgrag: PgragResource) -> Iterator[Any]:
        realm, space = split_partition_key(context.partition_key)
        try:
            result = stage(pgrag.engine(), realm, space)
        except ContractError as exc:
            yield checks.failed(name, exc)
            raise dg.Failure(description=f"{name}: contract {exc.contract} broken; nothing was written",
                             metadata={"contract": exc.contract}) from exc
        extra = [checks.measured(name, c, *result.checks[c]) for c in extra_checks]
        yield dg.MaterializeResult(
            metadata=_metadata(result), data_version=dg.DataVersion(result.data_version),
            check_results=[checks.passed(name, result.rows_checked, contract), *extra],
        )

    return _asset


chunks = stage_asset("chunks", stage_chunks, "ChunkContract", [],
                     description="Documents read from the space's sources, split into overlapping chunks (§4.1, §5.5).")
raw_extractions = stage_asset("raw_extractions", stage_raw_extractions, "RawExtractionContract", ["chunks"], pool="llm",
                              description="Model extraction and gleaning per new or changed chunk (§4.1–4.2).")
gated_triples = stage_asset("gated_triples", stage_gated_triples, "GateDecisionContract", ["raw_extractions"],
                            description="Every extracted entity and triple, accepted or refused by a gate (Table 2).")
resolved_entities = stage_asset("resolved_entities", stage_resolved_entities, "EntityContract", ["gated_triples"],
                                description="Entities resolved to one vertex per canonical name, mentions, dormancy (§4.6).")
relations = stage_asset("relations", stage_relations, "RelationContract", ["resolved_entities"],
                        description="Edges with corroboration weight, negation and validity (§4.7, §5.1).",
                        extra_checks=("graph_quality",))
embeddings = stage_asset("embeddings", stage_embeddings, "EmbeddingContract", ["relations"],
                         description="Vectors for chunks, entities and relations (HNSW-indexed).")
communities = stage_asset("communities", stage_communities, "CommunityMemberContract", ["embeddings"], pool="llm",
                          description="Leiden communities with one model-written report each (§6).")
community_hierarchy = stage_asset("community_hierarchy", stage_community_hierarchy, "HierarchyContract", ["communities"],
                                  pool="llm", description="Parent topics clustered from communities, reports from child reports (§6.1).")

ASSETS = [chunks, raw_extractions, gated_triples, resolved_entities, relations, embeddings, communities, community_hierarchy]
