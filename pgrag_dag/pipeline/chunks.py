"""The ``chunks`` stage: read the sources, run the space's chunker, replace changed documents'
chunks (paper §4.1, §5.5)."""

from __future__ import annotations

import logging
import time

import polars as pl

from pgrag_dag.engine import Engine
from pgrag_dag.errors import ConfigurationError, SourceError
from pgrag_dag.ingest.sources import read_sources, read_unread, source_report
from pgrag_dag.ingest.splitting import CHUNK_SCHEMA, assemble_chunks
from pgrag_dag.operators import contracts
from pgrag_dag.pipeline import doc_keys
from pgrag_dag.pipeline.common import (
    SKIPPED_CHECK,
    StageResult,
    operator_checks,
    operator_context,
    writing_stage,
)
from pgrag_dag.pipeline.composition import compose
from pgrag_dag.store import documents, locks, source_files, work_queue

log = logging.getLogger(__name__)


@writing_stage("chunks")
def stage_chunks(engine: Engine, realm: str, space: str, *, full: bool = False) -> StageResult:
    """Read sources, run the space's chunker, and replace changed documents' chunks (§4.1, §5.5).

    Sources are read by change (issue 30): a text file whose size, modification time and inode equal what
    the last run recorded (``source_files``) is not read unless its document must be chunked again;
    ``full`` (``pgrag index --verify`` or ``--full``) reads and hashes every file — the way to catch an edit
    that kept all three. ``documents_read`` and ``documents_trusted`` count both kinds.

    A document that cannot be read (empty, binary, undecodable, unreadable, a bad JSONL line) is
    skipped and reported in the metadata and the non-blocking ``skipped_documents`` check, with its
    doc_key and reason; every other document is indexed. A skipped document that is indexed keeps its
    stored chunks (nothing is lost to an unreadable file; the log says it was kept as indexed, and
    ``documents`` — the space's documents — counts it), and when a skipped record's doc_key cannot be
    known (a JSONL file that cannot be read, a line that is no JSON object) no document is removed.
    A document stored under the key an earlier rule gave it is first renamed in place, in the same
    transaction — chunk ids, extractions and graph kept, no model call (:mod:`pgrag_dag.pipeline.doc_keys`,
    ``documents_renamed``).

    Raises :class:`SourceError` when every document of the space was skipped (nothing is changed), and
    :class:`ConfigurationError` when the sources now name no document but the space holds an
    index (``sources: []``, a glob matching nothing, a moved folder) — nothing is removed — unless
    ``operations.allow_empty`` or the space's ``allow_empty`` is set.
    """
    t0 = time.perf_counter()
    engine.settings.space_spec(realm, space)  # an undeclared space is refused before its realm is created
    engine.init_realm(realm)
    chunker = compose(engine.settings, realm, space).chunker
    allow_empty = (
        engine.settings.operations.allow_empty or engine.settings.space_spec(realm, space).allow_empty
    )
    with engine.connect() as conn:
        known = source_files.load_stats(conn, realm, space)
        stored = documents.stored_documents(conn, realm, space)
    read = read_sources(engine.settings, realm, space, allow_empty=allow_empty, known=None if full else known)
    docs = read.documents
    if read.skipped and docs.height == 0:  # §3.5: a run in which every document fails raises
        first = read.skipped[0]
        raise SourceError(
            first.where,
            f"{first.reason}; every document of space {realm}.{space} was refused "
            f"({len(read.skipped)}), nothing was changed — fix the sources and run again",
        )
    for s in read.skipped:  # an indexed document is not skipped from the space: its stored chunks stay
        if s.doc_key in stored.orders:
            log.warning("document unreadable, kept as indexed: %s: %s", s.where, s.reason)
        else:
            log.warning("document skipped: %s: %s", s.where, s.reason)
    for line in read.empty_sources:
        log.warning("%s: no document comes from it (any it named before leaves the index)", line)
    chunker_print = work_queue.fingerprint(chunker.describe())
    prints = doc_keys.document_prints(docs, chunker_print)
    stored_prints: dict[str, str | None] = dict(stored.fingerprints)
    stored_orders = dict(stored.orders)
    with engine.connect() as conn:  # a document read as it was chunked before is not chunked again (issue 15)
        renames = doc_keys.plan_renames(
            conn,
            realm,
            space,
            read,
            prints,
            chunker_print,  # issue 16: re-key in place
            stored=stored_orders.keys(),
        )
    for r in renames:
        old_print = stored_prints.pop(r.old, None)
        if old_print is not None:
            stored_prints[r.new] = r.new_print if old_print == r.old_print else old_print
        if r.old in stored_orders:
            stored_orders[r.new] = stored_orders.pop(r.old)
    # sparse order keys (issue 30): a document added or removed early in the order moves no other's key
    ranked = docs.sort("doc_order")["doc_key"].to_list()
    orders = documents.sparse_orders(ranked, stored_orders)
    docs = docs.with_columns(doc_order=pl.col("doc_key").replace_strict(orders, return_dtype=pl.Int64))
    same = {k for k, p in prints.items() if stored_prints.get(k) == p}
    todo = read_unread(read, docs.filter(~pl.col("doc_key").is_in(list(same))) if same else docs)
    prints.update(doc_keys.document_prints(todo, chunker_print))  # a trusted file read now may differ
    trusted = len(set(read.unread) - set(todo["doc_key"].to_list()))
    pieces = chunker.run(todo, operator_context(engine, realm, space, chunker)) if todo.height else None
    chunks = (
        assemble_chunks(todo, pieces, operator=chunker.op.name)
        if pieces is not None
        else pl.DataFrame(schema={**CHUNK_SCHEMA, "metadata": pl.String})
    )
    contracts.validate(contracts.ChunkContract, chunks.with_columns(chunk_id=pl.lit(None, pl.Int64)))
    meta = dict(zip(todo["doc_key"].to_list(), todo["metadata"].to_list()))
    with engine.connect() as conn, conn.transaction():
        locks.lock_partition(conn, realm, space)
        indexed = documents.count_documents(conn, realm, space) if docs.height == 0 else 0
        if indexed and not allow_empty:
            raise ConfigurationError(
                f"space {realm}.{space}: its sources name no document, but it holds {indexed} "
                "indexed document(s); "
                "indexing would remove them all. Fix the sources, or allow it to remove them: "
                "`pgrag index --allow-empty`, "
                "PGRAG_OPERATIONS__ALLOW_EMPTY=true (e.g. for pgrag demo or Dagster), "
                "or allow_empty: true on the space"
            )
        # what was read before the lock is what is stored unless a purge (or deletion) ran meanwhile
        current = documents.state_version(conn, realm, space) == stored.version
        renamed = documents.rename_documents(conn, realm, space, renames)
        sync = documents.sync_chunks(
            conn,
            realm,
            space,
            chunks,
            metadata=meta,
            keep={s.doc_key for s in read.skipped if s.doc_key is not None},
            keep_all=any(s.doc_key is None for s in read.skipped),
            fingerprints=prints,
            unchanged_docs=same,
            orders=orders,
            stored_orders=stored_orders if current and len(renamed) == len(renames) else None,
        )
        changed = len(renamed) + len(sync.added) + len(sync.replaced) + len(sync.removed) + sync.restamped
        source_files.write_stats(conn, realm, space, read.files, before=known)
        work_queue.finish(
            conn, realm, space, "chunks", work_queue.Work(full=False), chunker_print, changed=changed
        )
        held = documents.count_chunks(conn, realm, space)
        version = work_queue.data_version(conn, realm, space, "chunks")
    skipped = source_report(read, kept=sync.kept, withheld=sync.withheld)
    return StageResult(
        "chunks",
        {
            # the space's documents: those read and those unreadable now but kept as indexed
            "documents": docs.height + len(sync.kept),
            "chunks": held,
            "documents_chunked": todo.height,
            "documents_added": len(sync.added),
            "documents_replaced": len(sync.replaced),
            "documents_removed": len(sync.removed),
            "documents_unchanged": len(sync.unchanged),
            "documents_renamed": len(renamed),
            "documents_read": docs.height - trusted,
            "documents_trusted": trusted,
            "chunks_inserted": sync.chunks_inserted,
            **skipped,
            "rows_changed": changed,
            "operators": {"chunker": chunker.describe()},
            "seconds": round(time.perf_counter() - t0, 3),
        },
        version,
        chunks.height,
        checks={
            **operator_checks([chunker], {"documents": todo.height, "chunks": chunks.height}),
            SKIPPED_CHECK: (not read.skipped, skipped),
        },
    )
