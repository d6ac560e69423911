"""Column metadata of the stage assets, where the Dagster UI shows it (issue 16 item 9):

- :func:`column_schema` — ``dagster/column_schema`` of an asset definition, from its stage's Pandera contract
  (:mod:`pgrag_dag.operators.contracts`): each column with its type, nullability, uniqueness and field checks,
  the frame-level checks as table constraints.
- :data:`COLUMN_LINEAGE` — ``dagster/column_lineage`` of each stage's materialisations: which upstream asset
  columns each stored column derives from (column names of the stored tables; ``table.column`` for a column of
  a table the stage writes beside its own). Row-level lineage of community reports lives in the
  ``community_lineage`` view (``pgrag lineage``).
"""

from __future__ import annotations

from typing import Any

import dagster as dg
import pandera.polars as pa


def _constraint(check: Any) -> str:
    stats = {k: v for k, v in (check.statistics or {}).items() if v is not None}
    return f"{check.name}({', '.join(f'{k}={v!r}' for k, v in stats.items())})" if stats else str(check.name)


def column_schema(model: type[pa.DataFrameModel]) -> dg.TableSchema:
    """The :class:`dagster.TableSchema` of a Pandera polars model: one column per model field (type the polars
    dtype, e.g. ``Int64``; constraints nullable, unique and the field's checks such as ``isin(...)``), and the
    model's frame-level checks (``name: docstring``) and ``unique`` column sets as table constraints."""
    schema = model.to_schema()
    columns = [
        dg.TableColumn(
            name,
            str(col.dtype),
            description=col.description,
            constraints=dg.TableColumnConstraints(
                nullable=bool(col.nullable),
                unique=bool(col.unique),
                other=[_constraint(c) for c in col.checks],
            ),
        )
        for name, col in schema.columns.items()
    ]
    other = [f"{c.name}: {' '.join((c.description or '').split())}" for c in schema.checks]
    if schema.unique:
        other.append(f"unique ({', '.join(schema.unique)})")
    return dg.TableSchema(columns=columns, constraints=dg.TableConstraints(other=other))


def _deps(*cols: str) -> list[dg.TableColumnDep]:
    """``"asset.column"`` strings as column deps."""
    return [dg.TableColumnDep(dg.AssetKey(c.split(".", 1)[0]), c.split(".", 1)[1]) for c in cols]


_LINEAGE: dict[str, dict[str, tuple[str, ...]]] = {
    "raw_extractions": {
        "chunk_id": ("chunks.chunk_id",),
        "raw_text": ("chunks.text", "chunks.title"),
        "parsed": ("chunks.text", "chunks.title"),
    },
    "gated_triples": {
        "chunk_id": ("raw_extractions.chunk_id",),
        "pass": ("raw_extractions.pass",),
        **{
            c: ("raw_extractions.parsed",)
            for c in (
                "name",
                "entity_type",
                "description",
                "aliases",
                "subject",
                "raw_predicate",
                "object",
                "negated",
                "confidence",
                "valid_from",
                "valid_to",
            )
        },
        "predicate": ("raw_extractions.parsed",),  # normalised through the space's vocabulary
        "accepted": ("raw_extractions.parsed",),
        "gate": ("raw_extractions.parsed",),
        "offending_value": ("raw_extractions.parsed",),
    },
    "resolved_entities": {
        "name": ("gated_triples.name", "gated_triples.aliases"),
        "entity_type": ("gated_triples.entity_type",),
        "description": ("gated_triples.description",),
        "aliases": ("gated_triples.aliases", "gated_triples.name"),
        "doc_mentions.chunk_id": ("gated_triples.chunk_id",),
    },
    "relations": {
        "source_id": ("resolved_entities.id", "resolved_entities.name", "gated_triples.subject"),
        "target_id": ("resolved_entities.id", "resolved_entities.name", "gated_triples.object"),
        "predicate": ("gated_triples.predicate",),
        "negated": ("gated_triples.negated",),
        "description": ("gated_triples.description",),
        "confidence": ("gated_triples.confidence",),
        "chunk_ids": ("gated_triples.chunk_id",),
        "weight": ("gated_triples.chunk_id",),
        "valid_from": ("gated_triples.valid_from",),
        "valid_to": ("gated_triples.valid_to",),
        "superseded_by": ("gated_triples.predicate", "gated_triples.negated", "chunks.doc_order"),
        "rendered": ("resolved_entities.name", "gated_triples.predicate", "gated_triples.description"),
    },
    "embeddings": {
        "documents.embedding": ("chunks.title", "chunks.text"),
        "entities.embedding": ("resolved_entities.name", "resolved_entities.description"),
        "relations.embedding": ("relations.rendered",),
    },
    "communities": {
        "report": ("relations.rendered", "resolved_entities.description"),
        "community_members.entity_id": ("resolved_entities.id",),
        "community_lineage.chunk_id": ("relations.chunk_ids", "chunks.chunk_id"),
    },
    "community_hierarchy": {
        "report": ("communities.report",),
        "community_children.child_id": ("communities.id",),
    },
}

COLUMN_LINEAGE: dict[str, dg.TableColumnLineage] = {
    stage: dg.TableColumnLineage(deps_by_column={col: _deps(*deps) for col, deps in cols.items()})
    for stage, cols in _LINEAGE.items()
}
"""Stage asset name → its ``dagster/column_lineage`` (``chunks`` has none: it reads the source files)."""
