"""Running the indexing stages outside Dagster: every stage of a space in order, and removing one
document (paper §5.5). The Dagster assets call the same ``stage_*`` functions one by one."""

from __future__ import annotations

import logging

from pgrag_dag.engine import Engine
from pgrag_dag.names import validate_realm, validate_space
from pgrag_dag.pipeline.chunks import stage_chunks
from pgrag_dag.pipeline.common import (
    StageResult,
)
from pgrag_dag.pipeline.community_stages import stage_communities, stage_community_hierarchy
from pgrag_dag.pipeline.embeddings import stage_embeddings
from pgrag_dag.pipeline.extractions import stage_raw_extractions
from pgrag_dag.pipeline.graph_stages import (
    stage_gated_triples,
    stage_relations,
    stage_resolved_entities,
)
from pgrag_dag.store import db, deletion, documents, history, inventory, locks

log = logging.getLogger(__name__)


INDEX_STAGES = ("chunks", "raw_extractions", "gated_triples", "resolved_entities", "relations", "embeddings")


FULL_STAGES = ("chunks", "gated_triples", "resolved_entities", "relations", "embeddings")
"""The stages that work on what changed and can be asked to recompute the whole space (``full``, issue 15)."""


def index_documents(
    engine: Engine,
    realm: str,
    space: str,
    *,
    communities: bool = True,
    full: bool = False,
    verify: bool = False,
) -> list[StageResult]:
    """Run every stage for one realm/space in order, outside Dagster (notebooks, tests, benchmarks).

    Each stage works on what changed since its last run; ``full`` recomputes the whole space in the
    stages of :data:`FULL_STAGES` (the result is the same — ``tests/pipeline/test_incremental.py`` — it only
    costs more); ``verify`` only makes ``chunks`` read and hash every source file (issue 30: an unchanged
    size, modification time and inode is otherwise trusted). Returns one :class:`StageResult` per stage.
    Raises the first stage's error unchanged.
    """
    stages = [
        stage_chunks,
        stage_raw_extractions,
        stage_gated_triples,
        stage_resolved_entities,
        stage_relations,
        stage_embeddings,
    ]
    if communities:
        stages += [stage_communities, stage_community_hierarchy]
    results = []
    for stage in stages:
        result = stage(
            engine,
            realm,
            space,
            **(
                {"full": True}
                if (full and stage.__name__.removeprefix("stage_") in FULL_STAGES)
                or (verify and stage is stage_chunks)
                else {}
            ),
        )
        log.info("%s %s.%s: %s", result.stage, realm, space, result.metadata)
        results.append(result)
    return results


def delete_document(engine: Engine, realm: str, space: str, doc_key: str) -> list[StageResult]:
    """Remove one document from the index (§5.5) and replace its contribution — no model call.

    Its chunks go (with their extractions, gate decisions and mentions); the graph stages then run
    again from the stored extractions, so an entity no other document mentions goes dormant, a relation
    left with no contributing chunk goes dormant, and supersession is recomputed. Nothing is deleted from
    the graph itself. Remove the file from the sources too, or the next ``chunks`` run indexes it again.
    The first result (stage ``delete_document``) says what was removed: ``removed`` (rows per table — the
    chunks in ``documents``, and what cascaded from them) and ``history`` (rows added: the chunks archived
    in ``documents_removed``, the ``removed`` event in ``belief_log``); the graph stages' results follow.
    Raises :class:`ConfigurationError` when the space has no such document.
    """
    validate_realm(realm)
    validate_space(space)
    with (
        db.database_errors(engine.dsn),
        locks.stage_lock(
            engine.dsn, realm, space, "delete_document", wait_s=engine.settings.operations.lock_wait_s
        ),
    ):
        with engine.connect() as conn, conn.transaction():
            locks.lock_partition(conn, realm, space)
            removed = deletion.document_counts(conn, realm, space, doc_key)
            if documents.delete_document_chunks(conn, realm, space, doc_key) == 0:
                raise inventory.no_such_document(conn, realm, space, doc_key)
            logged = history.log_documents(conn, realm, space, [(doc_key, "removed")])
    done = StageResult(
        "delete_document",
        {
            "doc_key": doc_key,
            "removed": removed,
            "history": {"documents_removed": removed["documents"], "belief_log": logged},
        },
        rows_checked=removed["documents"],
    )
    return [done] + [
        stage(engine, realm, space)
        for stage in (stage_gated_triples, stage_resolved_entities, stage_relations, stage_embeddings)
    ]
