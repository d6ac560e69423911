"""The indexing stages as plain functions: load → operator → contract → write → report.

Each ``stage_*`` function runs one stage for one realm/space and returns a :class:`StageResult`;
the Dagster assets call exactly these, and :func:`index_documents` composes them for notebooks and
tests. A stage validates its frame against its Pandera contract *before* writing, so a frame that
breaks its contract raises :class:`ContractError` and nothing is written (§3.5). This module holds the
chunks, raw-extraction and embeddings stages; the graph stages are in :mod:`pgrag_dag.graph_stages` and
what all share in :mod:`pgrag_dag.stage_common` (both re-exported here).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import polars as pl

from pgrag_dag import bulk_index, contracts, doc_keys
from pgrag_dag.chunking import CHUNK_SCHEMA, assemble_chunks
from pgrag_dag.engine import Engine
from pgrag_dag.embedding import HashingEmbedder
from pgrag_dag.embedding_runs import describe, embed_pending, pending_check
from pgrag_dag.errors import ConfigurationError, ContractError, EmbeddingIncompleteError, ExtractionError, SourceError
from pgrag_dag.extraction import RAW_SCHEMA, DocumentContext
from pgrag_dag.graph_stages import (  # re-exported (__all__): callers import the stages from here
    gate_fingerprint, relations_fingerprint, stage_gated_triples, stage_relations, stage_resolved_entities,
    supersession_audit,
)
from pgrag_dag.names import validate_realm, validate_space
from pgrag_dag.operators import Bound, compose
from pgrag_dag.sources import read_sources, source_report
from pgrag_dag.stage_common import (  # re-exported (__all__)
    PENDING_CHECK, SKIPPED_CHECK, Stage, StageResult, frame_hash, operator_checks, operator_context, space_yield,
    usage_delta, writing_stage,
)
from pgrag_dag.store import db, documents, history, locks, staging, vectors, work
from pgrag_dag.yield_checks import YIELD_CHECK, extraction_yield, logged

__all__ = [
    "FULL_STAGES", "INDEX_STAGES", "PENDING_CHECK", "SKIPPED_CHECK", "Stage", "StageResult", "delete_document",
    "frame_hash", "gate_fingerprint", "index_documents", "operator_checks", "operator_context", "relations_fingerprint",
    "space_yield", "stage_chunks", "stage_embeddings", "stage_gated_triples", "stage_raw_extractions", "stage_relations",
    "stage_resolved_entities", "supersession_audit", "usage_delta", "writing_stage",
]

log = logging.getLogger(__name__)


@writing_stage("chunks")
def stage_chunks(engine: Engine, realm: str, space: str) -> StageResult:
    """Read sources, run the space's chunker, and replace changed documents' chunks (§4.1, §5.5).

    A document that cannot be read (empty, binary, undecodable, unreadable, a bad JSONL line) is
    skipped and reported in the metadata and the non-blocking ``skipped_documents`` check, with its
    doc_key and reason; every other document is indexed. A skipped document that is indexed keeps its
    stored chunks (nothing is lost to an unreadable file), and when a skipped record's doc_key cannot be
    known (a JSONL file that cannot be read, a line that is no JSON object) no document is removed.
    A document stored under the key an earlier rule gave it is first renamed in place, in the same
    transaction — chunk ids, extractions and graph kept, no model call (:mod:`pgrag_dag.doc_keys`,
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
    allow_empty = engine.settings.operations.allow_empty or engine.settings.space_spec(realm, space).allow_empty
    read = read_sources(engine.settings, realm, space, allow_empty=allow_empty)
    docs = read.documents
    if read.skipped and docs.height == 0:  # §3.5: a run in which every document fails raises
        first = read.skipped[0]
        raise SourceError(first.where, f"{first.reason}; every document of space {realm}.{space} was refused "
                                       f"({len(read.skipped)}), nothing was changed — fix the sources and run again")
    for s in read.skipped:
        log.warning("document skipped: %s: %s", s.where, s.reason)
    for line in read.empty_sources:
        log.warning("%s: its documents leave the index", line)
    chunker_print = work.fingerprint(chunker.describe())
    prints = doc_keys.document_prints(docs, chunker_print)
    with engine.connect() as conn:  # a document read as it was chunked before is not chunked again (issue 15)
        stored_prints = documents.document_fingerprints(conn, realm, space)
        renames = doc_keys.plan_renames(conn, realm, space, read, prints, chunker_print,  # issue 16: re-key in place
                                        stored=stored_prints.keys())
    for r in renames:
        old_print = stored_prints.pop(r.old, None)
        if old_print is not None:
            stored_prints[r.new] = r.new_print if old_print == r.old_print else old_print
    same = {k for k, p in prints.items() if stored_prints.get(k) == p}
    todo = docs.filter(~pl.col("doc_key").is_in(sorted(same))) if same else docs
    pieces = chunker.run(todo, operator_context(engine, realm, space, chunker)) if todo.height else None
    chunks = assemble_chunks(todo, pieces, operator=chunker.op.name) if pieces is not None else \
        pl.DataFrame(schema={**CHUNK_SCHEMA, "metadata": pl.String})
    contracts.validate(contracts.ChunkContract, chunks.with_columns(chunk_id=pl.lit(None, pl.Int64)))
    meta = dict(zip(todo["doc_key"].to_list(), todo["metadata"].to_list()))
    with engine.connect() as conn, conn.transaction():
        locks.lock_partition(conn, realm, space)
        indexed = documents.count_documents(conn, realm, space) if docs.height == 0 else 0
        if indexed and not allow_empty:
            raise ConfigurationError(
                f"space {realm}.{space}: its sources name no document, but it holds {indexed} indexed document(s); "
                "indexing would remove them all. Fix the sources, or allow it to remove them: `pgrag index --allow-empty`, "
                "PGRAG_OPERATIONS__ALLOW_EMPTY=true (e.g. for pgrag demo or Dagster), or allow_empty: true on the space")
        renamed = documents.rename_documents(conn, realm, space, renames)
        sync = documents.sync_chunks(conn, realm, space, chunks, metadata=meta,
                                     keep={s.doc_key for s in read.skipped if s.doc_key is not None},
                                     keep_all=any(s.doc_key is None for s in read.skipped),
                                     fingerprints=prints, unchanged_docs=same,
                                     orders=dict(zip(docs["doc_key"].to_list(), docs["doc_order"].to_list())))
        changed = len(renamed) + len(sync.added) + len(sync.replaced) + len(sync.removed) + sync.restamped
        work.finish(conn, realm, space, "chunks", work.Work(full=False), chunker_print, changed=changed)
        held = documents.count_chunks(conn, realm, space)
        version = work.data_version(conn, realm, space, "chunks")
    skipped = source_report(read, kept=sync.kept, withheld=sync.withheld)
    return StageResult("chunks", {
        "documents": docs.height, "chunks": held, "documents_chunked": todo.height, "documents_added": len(sync.added),
        "documents_replaced": len(sync.replaced), "documents_removed": len(sync.removed),
        "documents_unchanged": len(sync.unchanged), "documents_renamed": len(renamed),
        "chunks_inserted": sync.chunks_inserted, **skipped,
        "rows_changed": changed, "operators": {"chunker": chunker.describe()},
        "seconds": round(time.perf_counter() - t0, 3),
    }, version, chunks.height,
        checks={**operator_checks([chunker], {"documents": todo.height, "chunks": chunks.height}),
                SKIPPED_CHECK: (not read.skipped, skipped)})


@writing_stage("raw_extractions")
def stage_raw_extractions(engine: Engine, realm: str, space: str) -> StageResult:
    """Run the space's extractor on every chunk without a successful first pass by that extractor
    (new, changed, failed before, or extracted by another extractor), and resume chunks whose gleaning
    pass failed on the model at that pass (§4.1–4.2, §3.5). Stored responses that failed to parse are
    parsed again from their raw text first (the extractor's ``reparse``, no model call): one that parses
    now is kept and its chunk resumes after it. What is still pending afterwards is reported in the
    non-blocking ``pending_work`` check; the non-blocking ``yield`` check fails when no chunk of the
    space yielded an entity or a triple.

    Raises :class:`ExtractionError` when there were chunks and every first pass failed, and
    :class:`ContractError` when the extractor's frame breaks its contract or names a chunk it was
    not given — nothing is written then.
    """
    t0 = time.perf_counter()
    before = engine.usage()
    extractor = compose(engine.settings, realm, space).extractor
    with engine.connect() as conn:
        recovered = _reparsed(staging.parse_failures(conn, realm, space, extractor=extractor.identity), extractor)
        todo = staging.chunks_needing_extraction(conn, realm, space, extractor=extractor.identity, also=sorted(recovered))
        seed = staging.document_names(conn, realm, space, sorted(set(todo["doc_key"].to_list())),
                                      extractor=extractor.identity)
        completed = staging.completed_passes(conn, realm, space, todo["chunk_id"].to_list(), extractor=extractor.identity)
    for cid, row in recovered.items():  # a recovered pass resumes its chunk after it, with no model call for it
        if row["pass"] == len(completed.get(cid, [])):
            completed.setdefault(cid, []).append(row)
    state: dict[str, Any] = {"identity": extractor.identity, "completed": completed}
    if extractor.op.calls_model:
        cap = getattr(extractor.options, "context_names_cap", engine.settings.extraction.context_names_cap)
        state["document_context"] = DocumentContext(cap, seed)
    raw = pl.DataFrame(schema=RAW_SCHEMA)
    if todo.height:
        raw = extractor.run(todo, operator_context(engine, realm, space, extractor, **state))
        raw = _complete_raw(raw, extractor)
        _check_extraction(extractor, todo, raw)
    with engine.connect() as conn, conn.transaction():
        locks.lock_partition(conn, realm, space)
        written = staging.write_raw(conn, realm, space, raw)
        work.finish(conn, realm, space, "raw_extractions", work.Work(full=False), work.fingerprint(extractor.identity),
                    changed=written)
        version = work.data_version(conn, realm, space, "raw_extractions")
        held = staging.space_yield(conn, realm, space)
        pending = staging.pending_extraction(conn, realm, space, extractor=extractor.identity)
    check = space_yield(extraction_yield(raw), held["extracted"] or not held["chunks"],
                         "no chunk of the space holds an extraction with an entity or a triple: check the extractor's "
                         "model, prompt and the documents")
    firsts = raw.filter(pl.col("pass") == 0)
    failed = firsts.filter(pl.col("parse_status") != "ok")
    for error in failed["error"].to_list():
        log.warning("chunk skipped: %s", error)
    return StageResult("raw_extractions", {
        "chunks_extracted": todo.height, "chunks_resumed": len(completed), "parse_errors_recovered": len(recovered),
        "chunks_failed": failed.height,
        "failures": failed["error"].to_list()[:20], "passes_written": raw.height,
        "gleaning_failures": raw.filter((pl.col("pass") > 0) & (pl.col("parse_status") != "ok")).height,
        "operators": {"extractor": extractor.describe()},
        **usage_delta(engine, before), "seconds": round(time.perf_counter() - t0, 3),
        "rows_changed": written,
    }, version, raw.height,
        checks={**operator_checks([extractor], {"chunks_extracted": todo.height, "passes_written": raw.height}),
                PENDING_CHECK: (pending["pending"] == 0, pending),
                YIELD_CHECK: logged(check, stage="raw_extractions", realm=realm, space=space)})


def _complete_raw(raw: pl.DataFrame, extractor: Bound) -> pl.DataFrame:
    """An extractor's frame in ``RAW_SCHEMA``: bookkeeping columns it left out get their defaults
    (model = the operator's name, raw_text = parsed, no error, 0 tokens, no cache hit), and every row
    carries the extractor's identity as ``prompt_version``."""
    defaults = {"model": pl.lit(extractor.op.name), "raw_text": pl.col("parsed"), "error": pl.lit(None, pl.String),
                "prompt_tokens": pl.lit(0), "completion_tokens": pl.lit(0), "cache_hit": pl.lit(False)}
    raw = raw.with_columns(**{c: e for c, e in defaults.items() if c not in raw.columns})
    return raw.with_columns(prompt_version=pl.lit(extractor.identity)).select(
        [pl.col(c).cast(t) for c, t in RAW_SCHEMA.items()])


def _reparsed(failures: pl.DataFrame, extractor: Bound) -> dict[int, dict[str, Any]]:
    """The stored ``parse_error`` rows (``failures``, one per chunk at most: gleaning stops at one) that
    the extractor's :attr:`~pgrag_dag.operators.Operator.reparse` parses now, as ``ok`` rows by chunk
    id — a fixed parser re-evaluates what failed before, with no model call (issue 13)."""
    if extractor.op.reparse is None:
        return {}
    out: dict[int, dict[str, Any]] = {}
    for row in failures.iter_rows(named=True):
        try:
            parsed = extractor.op.reparse(row["raw_text"])
        except ValueError:
            continue
        out[int(row["chunk_id"])] = {**row, "parsed": parsed, "parse_status": "ok", "error": None}
    if out:
        log.info("%d stored response(s) that failed to parse parse now; their chunks resume after them", len(out))
    return out


def _check_extraction(extractor: Bound, todo: pl.DataFrame, raw: pl.DataFrame) -> None:
    """An extractor writes rows only for chunks it was given, and a first pass for each of them;
    when every first pass failed the run raises (§3.5: an outage is never an empty corpus)."""
    label = f"RawExtractionContract (operator {extractor.op.name})"
    given = set(todo["chunk_id"].to_list())
    strays = raw.filter(~pl.col("chunk_id").is_in(list(given)))
    if strays.height:
        raise ContractError(label, f"rows for {strays['chunk_id'].n_unique()} chunk(s) it was not given",
                            strays.select("chunk_id", "pass"))
    missing = given - set(raw.filter(pl.col("pass") == 0)["chunk_id"].to_list())
    if missing:
        raise ContractError(label, f"no first pass (pass 0) for {len(missing)} chunk(s), e.g. chunk_id {min(missing)}")
    firsts = raw.filter(pl.col("pass") == 0)
    if firsts.filter(pl.col("parse_status") == "ok").height == 0:
        errors = firsts["error"].drop_nulls().head(3).to_list()
        raise ExtractionError(f"every one of {todo.height} chunk(s) failed extraction; first errors: {errors}")


@writing_stage("embeddings")
def stage_embeddings(engine: Engine, realm: str, space: str, *, full: bool = False) -> StageResult:
    """Embed chunks, entities and relations without a vector or whose text changed since (§3.5, §7.3).

    The embedding model is called outside any transaction (:func:`~pgrag_dag.embedding_runs.embed_pending`);
    the vectors are written in one (a row whose text changed meanwhile keeps a stale hash and is embedded
    again next run). When the model fails, what it embedded is written and the rest is left for the next
    run: the non-blocking ``pending_work`` check and every query of the space report the rows without a
    vector, and the stage raises :class:`EmbeddingIncompleteError` — unless ``embedding.fallback:
    hashing``, which embeds those rows apart, flagged, outside every vector search (never mixed with
    the model's vectors). The audit frame of the vectors this run wrote (of every stored vector when
    ``full``) is checked against :class:`EmbeddingContract` (width = the realm's, no NaN). A first load of
    a table builds its HNSW index after the vectors (:mod:`pgrag_dag.bulk_index`).
    """
    t0 = time.perf_counter()
    embedder = engine.embedder()
    settings = engine.settings.embedding
    fallback = HashingEmbedder(settings.dim) if settings.fallback == "hashing" else None
    with engine.connect() as conn:
        todo = {table: vectors.pending(conn, realm, space, table) for table in vectors.UNEMBEDDED_TABLES}
        bulk = [t for t, rows in todo.items()
                if bulk_index.first_load(conn, realm, t, len(rows), settings.bulk_load_rows)]
        unindexed = bulk_index.missing(conn, realm)
    run = embed_pending(embedder, todo, batch_size=settings.batch_size, fallback=fallback)
    counts: dict[str, int] = {}
    with engine.connect() as conn, conn.transaction():
        locks.lock_partition(conn, realm, space)
        bulk_index.drop(conn, realm, bulk)  # a first load: the index is built once after the vectors
        for table, done in run.tables.items():
            counts[f"{table}_embedded"] = vectors.write(conn, realm, table, done.rows, done.vectors)
            if fallback is not None:
                counts[f"{table}_fallback"] = vectors.write(conn, realm, table, done.fallback_rows,
                                                            done.fallback_vectors, fallback=fallback.model)
        # community reports are embedded by the communities stage, after this one
        written = None if full else {t: [r[0] for r in d.rows + d.fallback_rows] for t, d in run.tables.items()}
        audit = vectors.audit(conn, realm, space, settings.dim, written).filter(pl.col("table") != "communities")
        contracts.validate(contracts.EmbeddingContract, audit.filter(~pl.col("missing")))  # rows left: pending_work
        left = vectors.unembedded(conn, realm, space)
        changed = sum(counts.values())
        work.finish(conn, realm, space, "embeddings", work.Work(full=False),
                    work.fingerprint([embedder.model, embedder.dim, embedder.convention]), changed=changed)
        version = work.data_version(conn, realm, space, "embeddings")
    index_s = None
    if bulk or unindexed:  # after the commit; an index a killed build left missing is built here too
        index_s = round(bulk_index.build(engine.dsn, realm, sorted(set(bulk) | set(unindexed)),
                                         memory=settings.index_build_memory), 3)
    passed, pending = pending_check(left, run.error)
    if run.error is not None:
        log.warning("embeddings %s.%s: %s; %s", realm, space, run.error, pending)
        if fallback is None:
            raise EmbeddingIncompleteError(
                f"embeddings {realm}.{space}: {run.error}; {describe(pending['without_vector']) or 'no row'} "
                "left without a vector (vector search cannot find them; queries warn) — the next run embeds them, "
                "or set embedding.fallback: hashing", pending)
    return StageResult("embeddings", {
        **counts, "vectors_checked": audit.height, "model": embedder.model, "dim": embedder.dim,
        "convention": embedder.convention, "unembedded": left, "model_error": run.error, "rows_changed": changed,
        "hnsw_built_after_load": sorted(set(bulk) | set(unindexed)), "hnsw_build_seconds": index_s,
        "seconds": round(time.perf_counter() - t0, 3),
    }, version, audit.height, checks={PENDING_CHECK: (passed, pending)})


INDEX_STAGES = ("chunks", "raw_extractions", "gated_triples", "resolved_entities", "relations", "embeddings")


FULL_STAGES = ("gated_triples", "resolved_entities", "relations", "embeddings")
"""The stages that work on what changed and can be asked to recompute the whole space (``full``, issue 15)."""


def index_documents(engine: Engine, realm: str, space: str, *, communities: bool = True,
                    full: bool = False) -> list[StageResult]:
    """Run every stage for one realm/space in order, outside Dagster (notebooks, tests, benchmarks).

    Each stage works on what changed since its last run; ``full`` recomputes the whole space in the
    stages of :data:`FULL_STAGES` (the result is the same — ``tests/test_incremental.py`` — it only
    costs more). Returns one :class:`StageResult` per stage. Raises the first stage's error unchanged.
    """
    stages = [stage_chunks, stage_raw_extractions, stage_gated_triples, stage_resolved_entities,
              stage_relations, stage_embeddings]
    if communities:
        from pgrag_dag.community_stages import stage_communities, stage_community_hierarchy

        stages += [stage_communities, stage_community_hierarchy]
    results = []
    for stage in stages:
        result = stage(engine, realm, space, **({"full": True} if full and stage.__name__.removeprefix("stage_")
                                                in FULL_STAGES else {}))
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
    from pgrag_dag.store import deletion

    validate_realm(realm)
    validate_space(space)
    with db.database_errors(engine.dsn), locks.stage_lock(engine.dsn, realm, space, "delete_document",
                                                          wait_s=engine.settings.operations.lock_wait_s):
        with engine.connect() as conn, conn.transaction():
            locks.lock_partition(conn, realm, space)
            removed = deletion.document_counts(conn, realm, space, doc_key)
            if documents.delete_document_chunks(conn, realm, space, doc_key) == 0:
                raise ConfigurationError(f"space {realm}.{space} has no document {doc_key!r}")
            logged = history.log_documents(conn, realm, space, [(doc_key, "removed")])
    done = StageResult("delete_document", {"doc_key": doc_key, "removed": removed, "history": {
        "documents_removed": removed["documents"], "belief_log": logged}}, rows_checked=removed["documents"])
    return [done] + [stage(engine, realm, space) for stage in
                     (stage_gated_triples, stage_resolved_entities, stage_relations, stage_embeddings)]
