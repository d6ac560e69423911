"""The indexing pipeline (paper §3–§5): the stages as plain functions, load → operator → contract →
write → report, for one realm/space each.

Each ``stage_*`` function returns a :class:`StageResult`; the Dagster assets call exactly these, and
:func:`index_documents` runs them in order for notebooks and tests. A stage validates its frame
against its Pandera contract *before* writing, so a frame that breaks its contract raises
:class:`~pgrag_dag.errors.ContractError` and nothing is written (§3.5).

Modules: :mod:`.composition` and :mod:`.builtin_operators` (which operator fills each slot),
:mod:`.common` (what every stage shares), :mod:`.chunks` with :mod:`.doc_keys` (documents
stored under a key an earlier rule gave them are renamed in place), :mod:`.extractions`,
:mod:`.graph_stages` (gated triples, resolved entities, relations) with :mod:`.relation_delta` and
:mod:`.relation_batches` (a full relations run in bounded memory),
:mod:`.embeddings`, :mod:`.community_stages`, :mod:`.checks` (yield checks)
and :mod:`.run` (every stage in order; removing a document).
"""

from pgrag_dag.pipeline.chunks import stage_chunks
from pgrag_dag.pipeline.common import PENDING_CHECK, SKIPPED_CHECK, Stage, StageResult
from pgrag_dag.pipeline.community_stages import stage_communities, stage_community_hierarchy
from pgrag_dag.pipeline.embeddings import stage_embeddings
from pgrag_dag.pipeline.extractions import stage_raw_extractions
from pgrag_dag.pipeline.graph_stages import (
    stage_gated_triples,
    stage_relations,
    stage_resolved_entities,
)
from pgrag_dag.pipeline.relation_batches import supersession_audit
from pgrag_dag.pipeline.run import FULL_STAGES, INDEX_STAGES, delete_document, index_documents

__all__ = [
    "FULL_STAGES",
    "INDEX_STAGES",
    "PENDING_CHECK",
    "SKIPPED_CHECK",
    "Stage",
    "StageResult",
    "delete_document",
    "index_documents",
    "stage_chunks",
    "stage_communities",
    "stage_community_hierarchy",
    "stage_embeddings",
    "stage_gated_triples",
    "stage_raw_extractions",
    "stage_relations",
    "stage_resolved_entities",
    "supersession_audit",
]
