"""The indexing stages as plain functions: load → operator → contract → write → report.

Each ``stage_*`` function runs one stage for one realm/space and returns a :class:`StageResult`;
the Dagster assets call exactly these, and :func:`index_documents` composes them for notebooks and
tests. A stage validates its frame against its Pandera contract *before* writing, so a frame that
breaks its contract raises :class:`ContractError` and nothing is written (§3.5).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from pgrag_dag import bulk_index, contracts
from pgrag_dag.chunking import CHUNK_SCHEMA, assemble_chunks
from pgrag_dag.engine import Engine
from pgrag_dag.embedding import HashingEmbedder
from pgrag_dag.embedding_runs import describe, embed_pending, pending_check
from pgrag_dag.errors import ConfigurationError, ContractError, EmbeddingIncompleteError, ExtractionError, SourceError
from pgrag_dag.extraction import RAW_SCHEMA, DocumentContext
from pgrag_dag.gates import apply_extra_gates, apply_gates, identity_key, normalise_predicate
from pgrag_dag.names import validate_realm, validate_space
from pgrag_dag.operators import Bound, OperatorContext, compose, compose_user, operator_check_name
from pgrag_dag.quality import measure_quality, quality_passed
from pgrag_dag.relation_delta import relation_delta
from pgrag_dag.relations import build_relations
from pgrag_dag.resolution import Resolution, apply_enrichers, resolve_entities
from pgrag_dag.supersession import detect_contradictions, supersede
from pgrag_dag.sources import read_sources, source_report
from pgrag_dag.store import db, documents, graph, history, locks, staging, vectors, work
from pgrag_dag.vocabulary import Vocabulary, off_vocabulary
from pgrag_dag.yield_checks import YIELD_CHECK, extraction_yield, gate_yield, logged

log = logging.getLogger(__name__)


@dataclass
class StageResult:
    """What a stage did: ``metadata`` (counts, per-gate rejections, model usage, seconds), the
    ``data_version`` (SHA-256 prefix of what the stage's table now holds for the space), the
    number of rows its contract checked, and further ``checks`` of the stored result."""

    stage: str
    metadata: dict[str, Any] = field(default_factory=dict)
    data_version: str = ""
    rows_checked: int = 0
    checks: dict[str, tuple[bool, dict[str, Any]]] = field(default_factory=dict)
    """Further checks on what the stage wrote: name → (passed, metadata), e.g. ``graph_quality``."""


Stage = Callable[[Engine, str, str], StageResult]

PENDING_CHECK = "pending_work"
"""The non-blocking check a stage reports its unfinished work in: red until a later run clears it."""
SKIPPED_CHECK = "skipped_documents"
"""The chunks stage's non-blocking check (WARN): documents it could not read, with doc_key and reason."""


def writing_stage(name: str) -> Callable[[Stage], Stage]:
    """Decorate a stage function that writes ``realm.space``: the realm and space are validated, the
    stage runs holding the partition's stage lock (:func:`~pgrag_dag.store.locks.stage_lock`; a second
    run waits up to ``operations.lock_wait_s`` seconds, then :class:`PartitionBusyError`), and every
    PostgreSQL error leaving it is a one-line :class:`DatabaseError` (issue 11)."""

    def wrap(fn: Stage) -> Stage:
        @functools.wraps(fn)
        def run(engine: Engine, realm: str, space: str, **options: Any) -> StageResult:
            validate_realm(realm)
            validate_space(space)
            with db.database_errors(engine.dsn), locks.stage_lock(
                    engine.dsn, realm, space, name, wait_s=engine.settings.operations.lock_wait_s):
                return fn(engine, realm, space, **options)

        return run

    return wrap


def frame_hash(frame: pl.DataFrame) -> str:
    """A stable 16-hex-digit hash of a frame's rows (sorted), for data versions."""
    h = hashlib.sha256()
    lines = frame.select(sorted(frame.columns)).write_ndjson().splitlines() if frame.height else []
    for line in sorted(lines):
        h.update(line.encode())
    return h.hexdigest()[:16]


def usage_delta(engine: Engine, before: dict[str, Any]) -> dict[str, Any]:
    """Model usage (calls, cache hits, tokens, cost) since ``before`` (an earlier ``engine.usage()``)."""
    after = engine.usage()
    return {k: round(after[k] - before.get(k, 0), 6) if isinstance(after[k], float) else after[k] - before.get(k, 0)
            for k in after}


def operator_context(engine: Engine, realm: str, space: str, bound: Bound, **state: Any) -> OperatorContext:
    """The :class:`OperatorContext` for ``bound`` in ``realm.space``: the space's vocabulary, a copy of
    the gate settings (an operator cannot change the engine's), the model client only when the
    operator is declared ``calls_model``; ``state`` passed through."""
    spec = engine.settings.space_spec(realm, space)
    return OperatorContext(realm, space, spec.vocabulary_model(), engine.settings.gates.model_copy(deep=True),
                           client=engine.client() if bound.op.calls_model else None, state=dict(state))


def _operator_checks(bounds: tuple[Bound, ...] | list[Bound], rows: dict[str, int]) -> dict[str, tuple[bool, dict[str, Any]]]:
    """One passed check per user operator the stage ran (its frame met its contract)."""
    user = {id(b) for b in compose_user(bounds)}
    return {operator_check_name(b.op.name): (True, {**b.describe(), "contract": b.op.contract.__name__, **rows})
            for b in bounds if id(b) in user}


@writing_stage("chunks")
def stage_chunks(engine: Engine, realm: str, space: str) -> StageResult:
    """Read sources, run the space's chunker, and replace changed documents' chunks (§4.1, §5.5).

    A document that cannot be read (empty, binary, undecodable, unreadable, a bad JSONL line) is
    skipped and reported in the metadata and the non-blocking ``skipped_documents`` check, with its
    doc_key and reason; every other document is indexed. A skipped document that is indexed keeps its
    stored chunks (nothing is lost to an unreadable file), and when a skipped record's doc_key cannot be
    known (a JSONL file that cannot be read, a line that is no JSON object) no document is removed.

    Raises :class:`SourceError` when every document of the space was skipped (nothing is changed), and
    :class:`ConfigurationError` when the sources now name no document but the space holds an
    index (``sources: []``, a glob matching nothing, a moved folder) — nothing is removed — unless
    ``operations.allow_empty`` or the space's ``allow_empty`` is set.
    """
    t0 = time.perf_counter()
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
    chunker_print = work.fingerprint(chunker.describe())
    prints = {k: work.fingerprint([chunker_print, *rest]) for k, *rest in
              docs.select("doc_key", "doc_hash", "title", "source", "metadata").iter_rows()}
    with engine.connect() as conn:  # a document read as it was chunked before is not chunked again (issue 15)
        stored_prints = documents.document_fingerprints(conn, realm, space)
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
        sync = documents.sync_chunks(conn, realm, space, chunks, metadata=meta,
                                     keep={s.doc_key for s in read.skipped if s.doc_key is not None},
                                     keep_all=any(s.doc_key is None for s in read.skipped),
                                     fingerprints=prints, unchanged_docs=same,
                                     orders=dict(zip(docs["doc_key"].to_list(), docs["doc_order"].to_list())))
        changed = len(sync.added) + len(sync.replaced) + len(sync.removed) + sync.restamped
        work.finish(conn, realm, space, "chunks", work.Work(full=False), chunker_print, changed=changed)
        held = documents.count_chunks(conn, realm, space)
        version = work.data_version(conn, realm, space, "chunks")
    skipped = source_report(read, kept=sync.kept, withheld=sync.withheld)
    return StageResult("chunks", {
        "documents": docs.height, "chunks": held, "documents_chunked": todo.height, "documents_added": len(sync.added),
        "documents_replaced": len(sync.replaced), "documents_removed": len(sync.removed),
        "documents_unchanged": len(sync.unchanged), "chunks_inserted": sync.chunks_inserted, **skipped,
        "rows_changed": changed, "operators": {"chunker": chunker.describe()},
        "seconds": round(time.perf_counter() - t0, 3),
    }, version, chunks.height,
        checks={**_operator_checks([chunker], {"documents": todo.height, "chunks": chunks.height}),
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
    check = _space_yield(extraction_yield(raw), held["extracted"] or not held["chunks"],
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
        checks={**_operator_checks([extractor], {"chunks_extracted": todo.height, "passes_written": raw.height}),
                PENDING_CHECK: (pending["pending"] == 0, pending),
                YIELD_CHECK: logged(check, stage="raw_extractions", realm=realm, space=space)})


def _space_yield(batch: tuple[bool, dict[str, Any]], passed: bool, reason: str) -> tuple[bool, dict[str, Any]]:
    """The ``yield`` check of a run: the counts of what this run processed (``batch``, all of the space
    in a full run), judged by what the whole space holds (``passed``, from index look-ups) — an
    incremental run over one empty document does not turn a productive space red."""
    meta = dict(batch[1])
    if passed:
        meta.pop("reason", None)
    else:
        meta.setdefault("reason", reason)
    return passed, meta


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


def gate_fingerprint(engine: Engine, realm: str, space: str, gates: tuple[Bound, ...] | list[Bound]) -> str:
    """What the stored gate decisions of ``realm.space`` depend on besides the raw extractions: the gate
    settings, the space's vocabulary and its extra gates (name and options). A change re-gates the space."""
    vocabulary = engine.settings.space_spec(realm, space).vocabulary_model()
    return work.fingerprint({"gates": engine.settings.gates.model_dump(mode="json"),
                             "vocabulary": dataclasses.asdict(vocabulary), "extra": [g.describe() for g in gates]})


@writing_stage("gated_triples")
def stage_gated_triples(engine: Engine, realm: str, space: str, *, full: bool = False) -> StageResult:
    """Gate the raw extractions (Table 2, then the space's extra gates) — no model call.

    Incremental (issue 15): only the chunks whose raw extractions were written since the last run are
    gated again (the ``stage_work`` queue); the whole space when ``full``, on the first run, or when the
    gate settings, the vocabulary or the extra gates changed (:func:`gate_fingerprint`). Table 2's gates
    decide each extraction on its own; an extra gate sees the accepted rows of the chunks being gated.
    """
    t0 = time.perf_counter()
    vocabulary = engine.settings.space_spec(realm, space).vocabulary_model()
    gates = compose(engine.settings, realm, space).gates
    print_ = gate_fingerprint(engine, realm, space, gates)
    with engine.connect() as conn:
        todo = work.take(conn, realm, space, "gated_triples", print_, full=full)
        only = None if todo.full else sorted(todo.chunks)
        raw = staging.load_raw(conn, realm, space, only) if todo.full or only else pl.DataFrame(schema=RAW_SCHEMA)
    decisions = apply_gates(raw, engine.settings.gates, vocabulary)
    for g in gates:
        decisions = apply_extra_gates(decisions, [g], operator_context(engine, realm, space, g))
    contracts.validate(contracts.gate_contract(engine.settings.gates), decisions)
    with engine.connect() as conn, conn.transaction():
        locks.lock_partition(conn, realm, space)
        changed = 0
        if todo.full or only:
            stored = staging.load_decisions(conn, realm, space, accepted_only=False, chunk_ids=only)
            if frame_hash(stored) != frame_hash(decisions):  # an identical re-gate writes nothing
                changed = staging.replace_decisions(conn, realm, space, decisions, chunk_ids=only)
        work.finish(conn, realm, space, "gated_triples", todo, print_, changed=changed)
        held = staging.space_yield(conn, realm, space)
        version = work.data_version(conn, realm, space, "gated_triples")
    rejected = decisions.filter(~pl.col("accepted"))
    per_gate = dict(Counter(rejected["gate"].to_list()))
    check = _space_yield(gate_yield(raw, decisions), held["accepted"] or not held["raw"],
                         "no candidate of the space passed the gates")
    return StageResult("gated_triples", {
        "mode": "full" if todo.full else "incremental", "chunks_gated": raw["chunk_id"].n_unique(),
        "entities_accepted": decisions.filter(pl.col("accepted") & (pl.col("kind") == "entity")).height,
        "triples_accepted": decisions.filter(pl.col("accepted") & (pl.col("kind") == "triple")).height,
        "rejected": rejected.height, "rejections_per_gate": per_gate, "rewritten": changed > 0, "rows_changed": changed,
        **_predicate_report(decisions, vocabulary), "operators": {"gates": [g.describe() for g in gates]},
        "seconds": round(time.perf_counter() - t0, 3),
    }, version, decisions.height,
        checks={**_operator_checks(gates, {"decisions": decisions.height}),
                YIELD_CHECK: logged(check, stage="gated_triples", realm=realm, space=space)})


def _predicate_report(decisions: pl.DataFrame, vocabulary: Vocabulary) -> dict[str, Any]:
    preds = decisions.filter(pl.col("accepted") & (pl.col("kind") == "triple"))
    snapped = preds.filter(pl.col("predicate") != pl.col("raw_predicate").map_elements(
        normalise_predicate, return_dtype=pl.String))
    return {
        "distinct_predicates": preds["predicate"].n_unique(),
        "predicates_snapped": snapped.height,
        "off_vocabulary_top": [f"{p} ({n})" for p, n in off_vocabulary(preds["predicate"].to_list(), vocabulary)],
    }


@writing_stage("resolved_entities")
def stage_resolved_entities(engine: Engine, realm: str, space: str, *, full: bool = False) -> StageResult:
    """Resolve accepted entities onto vertices (§4.6), run the space's enrichers; rewrite mentions and
    dormancy (§5.5).

    Incremental (issue 15): only the accepted entity records of chunks whose gate decisions changed since
    the last run are resolved (against the stored vertices — merging a record again is a no-op, so this is
    what a full pass decides), their mentions rewritten, and dormancy decided for the entities that gained
    or lost a mention or were (un)archived. The whole space when ``full``, on the first run, or when the
    space's enrichers changed; the enrichers see the vertices resolution touched.
    """
    t0 = time.perf_counter()
    enrichers = compose(engine.settings, realm, space).enrichers
    print_ = work.fingerprint({"enrichers": [e.describe() for e in enrichers]})
    contexts = [operator_context(engine, realm, space, e) for e in enrichers]
    with engine.connect() as conn, conn.transaction():
        locks.lock_partition(conn, realm, space)
        work.mark_stage(conn, "resolved_entities")
        todo = work.take(conn, realm, space, "resolved_entities", print_, full=full)
        only = None if todo.full else sorted(todo.chunks)
        accepted = staging.load_decisions(conn, realm, space, chunk_ids=only) if todo.full or only else \
            pl.DataFrame(schema=staging.DECISION_SCHEMA)
        records = accepted.filter(pl.col("kind") == "entity")
        holding = None if todo.full else {identity_key(n) for ns in records.select(
            pl.concat_list(pl.col("name"), pl.col("aliases").fill_null([]))).to_series().to_list() for n in ns if n}
        existing = graph.load_entities(conn, realm, space, resolved=True, holding=holding) \
            if records.height or todo.full else None
        res = resolve_entities(existing, records) if existing is not None else None
        enriched, counts = 0, {"inserted": 0, "updated": 0}
        if res is not None:
            touched = res if todo.full else res.touched()
            enriched = apply_enrichers(touched, enrichers, contexts)
            if todo.full:  # what the enrichers store may differ from what is stored (an enricher changed)
                as_stored = {i: (t, d) for i, t, d in graph.load_entities(conn, realm, space).select(
                    "id", "entity_type", "description").iter_rows()}
                for v in res.vertices:
                    if v.id is not None and as_stored.get(v.id) != (v.entity_type, v.description):
                        v.changed = True
            contracts.validate(contracts.EntityContract, touched.entities().with_row_index("row").with_columns(
                id=pl.col("row").cast(pl.Int64)))
            counts = graph.write_entities(conn, realm, space, touched)
        if not todo.full and res is not None and res.moved:  # a form now resolves elsewhere: its mentions move too
            owners = sorted({res.vertices[i].id for i in res.moved.values() if res.vertices[i].id is not None})
            extra = sorted(set(graph.chunks_mentioning(conn, realm, space, owners)) - set(only or []))
            if extra:
                only = sorted(set(only or []) | set(extra))
                accepted = pl.concat([accepted, staging.load_decisions(conn, realm, space, chunk_ids=extra)])
        if todo.full:
            mentions = _mentions(accepted, res.index_of if res is not None else lambda _: None, res)
        else:  # resolved against the stored vertices (just written): res holds only those its records could meet
            forms = graph.EntityForms(conn, realm, space)
            forms.load({identity_key(n) for n in _mentioned_names(accepted)})
            mentions = _mentions(accepted, lambda n: forms.resolve(identity_key(n)), None)
        if todo.full:
            dormancy = graph.replace_mentions(conn, realm, space, mentions)
        else:
            dormancy = graph.replace_chunk_mentions(conn, realm, space, only or [], mentions, also=sorted(todo.entities))
        changed = counts["inserted"] + counts["updated"] + dormancy["dormant"] + dormancy["revived"] + dormancy.get("rewritten", 0)
        work.finish(conn, realm, space, "resolved_entities", todo, print_, changed=changed)
        totals = graph.graph_counts(conn, realm, space)
        version = work.data_version(conn, realm, space, "resolved_entities")
    return StageResult("resolved_entities", {
        "mode": "full" if todo.full else "incremental", "chunks_resolved": accepted["chunk_id"].n_unique(),
        "entities": totals["entities"] + totals["entities_dormant"], "entities_inserted": counts["inserted"],
        "entities_updated": counts["updated"], "records_resolved": records.height, **dormancy, "rows_changed": changed,
        "entities_enriched": enriched, "operators": {"enrichers": [e.describe() for e in enrichers]},
        "seconds": round(time.perf_counter() - t0, 3),
    }, version, records.height, checks=_operator_checks(enrichers, {"entities": records.height}))


def _mentioned_names(accepted: pl.DataFrame) -> list[str]:
    """Every name an accepted record of ``accepted`` mentions: an entity's name, a triple's subject and object."""
    return [n for r in accepted.select("kind", "name", "subject", "object").iter_rows()
            for n in ((r[1],) if r[0] == "entity" else (r[2], r[3])) if n]


def _mentions(accepted: pl.DataFrame, resolve: Callable[[str], int | None], res: Resolution | None) -> pl.DataFrame:
    """(chunk_id, entity_id) for every name an accepted record of ``accepted`` mentions that ``resolve`` finds:
    an index into ``res`` (a resolution) or, without ``res``, an entity id."""
    mentions = []
    for r in accepted.select("chunk_id", "kind", "name", "subject", "object").iter_rows():
        for n in ((r[2],) if r[1] == "entity" else (r[3], r[4])):
            found = resolve(n) if n else None
            if found is not None:
                mentions.append((r[0], res.vertices[found].id if res is not None else found))
    return pl.DataFrame(mentions, schema={"chunk_id": pl.Int64, "entity_id": pl.Int64}, orient="row")


def relations_fingerprint(engine: Engine, realm: str, space: str) -> str:
    """What the stored edges of ``realm.space`` depend on besides triples and entities: the vocabulary's
    exclusive groups and the temporal settings (contradiction detection). A change rebuilds the space."""
    vocabulary = engine.settings.space_spec(realm, space).vocabulary_model()
    return work.fingerprint({"groups": vocabulary.groups, "terms": vocabulary.terms,
                             "temporal": engine.settings.temporal.model_dump(mode="json")})


@writing_stage("relations")
def stage_relations(engine: Engine, realm: str, space: str, *, full: bool = False) -> StageResult:
    """One edge per (subject, predicate, object, negated) weighted by distinct chunks (§4.7), supersession
    (§5.2), and the graph-quality check (§8.6).

    Incremental (issue 15): only the entity pairs the queued work touches are rebuilt
    (:mod:`pgrag_dag.relation_delta`) — their edges from their complete support, supersession re-decided
    for them; the whole space when ``full``, on the first run, when the vocabulary or temporal settings
    changed, or when contradiction detection is on (its candidate pairs and call budget span the space).
    A run with nothing queued writes nothing and reports the stored quality measurements.
    """
    t0 = time.perf_counter()
    vocabulary = engine.settings.space_spec(realm, space).vocabulary_model()
    print_ = relations_fingerprint(engine, realm, space)
    with engine.connect() as conn, conn.transaction():
        locks.lock_partition(conn, realm, space)
        todo = work.take(conn, realm, space, "relations", print_,
                         full=full or engine.settings.temporal.contradiction_detection)
        if todo.empty and (stored := work.report(conn, realm, space, "relations")) is not None:
            nothing = dict.fromkeys(("pairs_rebuilt", "chunks_read", "edges_rebuilt", "relations_inserted", "relations_updated",
                                     "relations_newly_dormant", "newly_superseded", "restored", "rows_changed"), 0)
            return StageResult("relations", {"mode": "unchanged", **graph.graph_counts(conn, realm, space), **nothing,
                                             "seconds": round(time.perf_counter() - t0, 3)},
                               work.data_version(conn, realm, space, "relations"), 0,
                               checks={"graph_quality": (quality_passed(stored), stored)})
        forms = graph.EntityForms(conn, realm, space, everything=todo.full)
        if todo.full:
            triples = staging.load_decisions(conn, realm, space).filter(pl.col("kind") == "triple")
            built = build_relations(triples, forms.lookup, forms.names, documents.chunk_order(conn, realm, space))
            relations, pairs, chunks = built.relations, None, None
        else:
            delta = relation_delta(conn, realm, space, todo, forms)
            built = build_relations(delta.triples, forms.lookup, forms.names,
                                    documents.chunk_order(conn, realm, space, delta.chunks))
            relations, pairs, chunks = delta.of_pairs(built.relations), delta.pairs, sorted(delta.chunks)
        contracts.validate(contracts.RelationContract, relations)
        superseded = _supersession(engine, relations, vocabulary)
        counts = graph.write_relations(conn, realm, space, relations, pairs)
        sup_counts = graph.apply_supersession(conn, realm, space, relations, superseded)
        staging.replace_resolution_rejections(conn, realm, space, built.self_loops, chunks)
        totals = graph.graph_counts(conn, realm, space)
        quality = measure_quality(conn, realm, space, vocabulary)
        changed = counts["inserted"] + counts["updated"] + counts["dormant"] + sup_counts["newly_superseded"] + \
            sup_counts["restored"]
        metadata = {
            "mode": "full" if todo.full else "incremental", "pairs_rebuilt": None if pairs is None else len(pairs),
            "chunks_read": None if chunks is None else len(chunks), "edges_rebuilt": relations.height,
            **totals, "relations_inserted": counts["inserted"], "relations_updated": counts["updated"],
            "relations_newly_dormant": counts["dormant"], "self_loops_after_resolution": built.self_loops.height,
            "self_loop_examples": built.self_loops["offending_value"].head(5).to_list(),
            "newly_superseded": sup_counts["newly_superseded"], "restored": sup_counts["restored"],
            "supersessions_by_reason": dict(Counter(superseded["reason"].to_list())),
            "supersession_examples": [
                f"{relations['rendered'][r].split(':')[0]}  ⟶ superseded by ⟶  {relations['rendered'][w].split(':')[0]}"
                for r, w in superseded.select("row", "superseded_by_row").head(5).iter_rows()],
            "rows_changed": changed,
        }
        work.finish(conn, realm, space, "relations", todo, print_, changed=changed, report=quality)
        version = work.data_version(conn, realm, space, "relations")
    return StageResult("relations", {**metadata, "seconds": round(time.perf_counter() - t0, 3)}, version,
                       relations.height, checks={"graph_quality": (quality_passed(quality), quality)})


def _supersession(engine: Engine, relations: pl.DataFrame, vocabulary: Vocabulary) -> pl.DataFrame:
    """Declarative supersession, then (when enabled) contradiction detection over the residue; validated."""
    declarative = supersede(relations, vocabulary.groups)
    frames = [declarative]
    temporal = engine.settings.temporal
    if temporal.contradiction_detection:
        frames.append(detect_contradictions(relations, declarative, vocabulary.groups, engine.client(),
                                            max_pairs=temporal.contradiction_max_pairs))
    result = pl.concat(frames)
    contracts.validate(contracts.SupersessionContract, supersession_audit(relations, result, vocabulary.groups))
    return result


def supersession_audit(relations: pl.DataFrame, supersession: pl.DataFrame,
                       groups: tuple[tuple[str, ...], ...]) -> pl.DataFrame:
    """The ``supersession`` frame (row, superseded_by_row, reason, explanation; rows address ``relations``
    by position) with what :class:`~pgrag_dag.contracts.SupersessionContract` checks, set-based (two joins,
    no per-row Python): ``later`` — the superseding edge's latest assertion comes later in document order
    (doc_order, then chunk_index) — ``same_pair`` (source and target) and ``same_group`` (both predicates in
    one exclusive group; an ungrouped predicate is in none). §5.2."""
    group_of = {p: i for i, g in enumerate(groups) for p in g}

    def group(default: int) -> pl.Expr:
        if not group_of:
            return pl.lit(default, pl.Int64)
        return pl.col("predicate").replace_strict(group_of, default=default, return_dtype=pl.Int64)

    edges = relations.select("asserted_doc_order", "asserted_chunk_index", "source_id", "target_id", "predicate") \
        .with_row_index("row").with_columns(pl.col("row").cast(pl.Int64))
    loser = edges.with_columns(group=group(-1)).drop("predicate")
    winner = edges.with_columns(group=group(-2)).drop("predicate").rename(lambda c: f"w_{c}")
    joined = supersession.join(loser, on="row", how="left").join(winner, left_on="superseded_by_row",
                                                                   right_on="w_row", how="left")
    return joined.select(
        *supersession.columns,
        later=(pl.col("asserted_doc_order") < pl.col("w_asserted_doc_order"))
        | ((pl.col("asserted_doc_order") == pl.col("w_asserted_doc_order"))
           & (pl.col("asserted_chunk_index") < pl.col("w_asserted_chunk_index"))),
        same_pair=(pl.col("source_id") == pl.col("w_source_id")) & (pl.col("target_id") == pl.col("w_target_id")),
        same_group=pl.col("group") == pl.col("w_group"),
    )


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
