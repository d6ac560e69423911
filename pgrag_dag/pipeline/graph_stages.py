"""The graph stages: gated triples (Table 2, §4.3), resolved entities (§4.6) and relations with
supersession (§4.7, §5.2) — each on what changed since its last run (issue 15), or the whole space.

Called by the Dagster assets and :func:`pgrag_dag.pipeline.index_documents` (which re-exports them)."""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import polars as pl
import psycopg

from pgrag_dag.engine import Engine
from pgrag_dag.extract.gates import apply_extra_gates, apply_gates
from pgrag_dag.frames import Resolution
from pgrag_dag.gate_rules import identity_key, normalise_predicate
from pgrag_dag.graph.quality import judge_quality, measure_quality, quality_passed
from pgrag_dag.graph.rederive import rederive_attributes, split_unsupported
from pgrag_dag.graph.relations import build_relations
from pgrag_dag.graph.resolution import apply_enrichers, merge_race_loser, resolve_entities
from pgrag_dag.operators import contracts
from pgrag_dag.operators.core import BoundOperator
from pgrag_dag.pipeline.checks import YIELD_CHECK, GateTally, logged, require_yield
from pgrag_dag.pipeline.common import (
    StageResult,
    empty_runs_allowed,
    frame_hash,
    operator_checks,
    operator_context,
    space_yield,
    writing_stage,
)
from pgrag_dag.pipeline.composition import compose
from pgrag_dag.pipeline.relation_batches import READ_BATCH, build_full, decide_supersession
from pgrag_dag.pipeline.relation_delta import relation_delta
from pgrag_dag.store import documents, graph, locks, staging, tallies, work_queue
from pgrag_dag.store import relations as relation_store
from pgrag_dag.vocabulary import Vocabulary, off_vocabulary


def gate_fingerprint(
    engine: Engine, realm: str, space: str, gates: tuple[BoundOperator, ...] | list[BoundOperator]
) -> str:
    """What the stored gate decisions of ``realm.space`` depend on besides the raw extractions: the gate
    settings, the space's vocabulary and its extra gates (name and options). A change re-gates the space."""
    vocabulary = engine.settings.space_spec(realm, space).vocabulary_model()
    return work_queue.fingerprint(
        {
            "gates": engine.settings.gates.model_dump(mode="json"),
            "vocabulary": dataclasses.asdict(vocabulary),
            "extra": [g.describe() for g in gates],
        }
    )


@writing_stage("gated_triples")
def stage_gated_triples(engine: Engine, realm: str, space: str, *, full: bool = False) -> StageResult:
    """Gate the raw extractions (Table 2, then the space's extra gates) — no model call.

    Incremental (issue 15): only the chunks whose raw extractions were written since the last run are
    gated again (the ``stage_work`` queue); the whole space when ``full``, on the first run, or when the
    gate settings, the vocabulary or the extra gates changed (:func:`gate_fingerprint`). Table 2's gates
    decide each extraction on its own; an extra gate sees the accepted rows of the chunks being gated,
    :data:`GATE_BATCH` chunks at a time (issue 30: bounded memory), gated and written under the partition
    lock in one transaction.

    Raises :class:`~pgrag_dag.errors.ExtractionError` when the chunks this run gated hold candidates and a
    gate refused every one, or hold none (§3.5, :func:`~pgrag_dag.pipeline.checks.require_yield`), unless
    the space allows empty runs — nothing is written and the chunks stay queued; a run with nothing to
    gate never raises. :class:`~pgrag_dag.errors.ContractError` when the decisions break their contract.
    """
    t0 = time.perf_counter()
    vocabulary = engine.settings.space_spec(realm, space).vocabulary_model()
    gates = compose(engine.settings, realm, space).gates
    print_ = gate_fingerprint(engine, realm, space, gates)
    contexts = [operator_context(engine, realm, space, g) for g in gates]
    with engine.connect() as conn, conn.transaction():
        todo = work_queue.take(conn, realm, space, "gated_triples", print_, full=full)
        # gated and written GATE_BATCH chunks at a time, in document order (issue 30): a run that fails its
        # yield check below rolls every batch back, so it writes nothing and its chunks stay queued
        locks.lock_partition(conn, realm, space)
        chunks = staging.raw_chunks(conn, realm, space) if todo.full else sorted(todo.chunks)
        tally, predicates = GateTally(), _PredicateTally(vocabulary)
        changed = batches = 0
        for at in range(0, len(chunks), GATE_BATCH):
            batches += 1
            batch = chunks[at : at + GATE_BATCH]
            raw = staging.load_raw(conn, realm, space, batch)
            decisions = apply_gates(raw, engine.settings.gates, vocabulary)
            for g, ctx in zip(gates, contexts, strict=True):
                decisions = apply_extra_gates(decisions, [g], ctx)
            contracts.validate(contracts.gate_contract(engine.settings.gates), decisions)
            tally.add(raw, decisions)
            predicates.add(decisions)
            stored = staging.load_decisions(conn, realm, space, accepted_only=False, chunk_ids=batch)
            if frame_hash(stored) != frame_hash(decisions):  # an identical re-gate writes nothing
                changed += staging.replace_decisions(conn, realm, space, decisions, chunk_ids=batch)
        if todo.full:
            changed += staging.delete_decisions_without_raw(conn, realm, space)
        # judged on the chunks this run gated (§3.5); raising rolls back what the batches wrote, so the
        # next run judges them again until the settings change or the space opts out
        require_yield(
            tally.result(),
            stage="gated_triples",
            where=f"{realm}.{space}",
            allowed=empty_runs_allowed(engine, realm, space),
        )
        work_queue.finish(conn, realm, space, "gated_triples", todo, print_, changed=changed)
        held = staging.space_yield(conn, realm, space)
        version = work_queue.data_version(conn, realm, space, "gated_triples")
    check = space_yield(
        tally.result(),
        held["accepted"] or not held["raw"],
        "no candidate of the space passed the gates",
    )
    return StageResult(
        "gated_triples",
        {
            "mode": "full" if todo.full else "unchanged" if todo.empty else "incremental",
            "chunks_gated": len(tally.chunks),
            "batches": batches,
            "entities_accepted": tally.entities_accepted,
            "triples_accepted": tally.triples_accepted,
            "rejected": tally.candidates - tally.accepted,
            "rejections_per_gate": dict(tally.per_gate),
            "rewritten": changed > 0,
            "rows_changed": changed,
            **predicates.report(),
            "operators": {"gates": [g.describe() for g in gates]},
            "seconds": round(time.perf_counter() - t0, 3),
        },
        version,
        tally.candidates,
        checks={
            **operator_checks(gates, {"decisions": tally.candidates}),
            YIELD_CHECK: logged(check, stage="gated_triples", realm=realm, space=space),
        },
    )


GATE_BATCH = 250
"""Chunks gated and written per batch by ``gated_triples`` (issue 30: a full run holds one batch's raw
extractions and decisions, not the space's)."""


class _PredicateTally:
    """The predicate report of a run's accepted triples, batch by batch: ``distinct_predicates``,
    ``predicates_snapped`` (a predicate other than its raw predicate normalised: snapped to the
    vocabulary) and ``off_vocabulary_top`` (§4.5's feedback loop)."""

    def __init__(self, vocabulary: Vocabulary) -> None:
        self.vocabulary = vocabulary
        self.counts: Counter[str] = Counter()
        self.snapped = 0

    def add(self, decisions: pl.DataFrame) -> None:
        preds = decisions.filter(pl.col("accepted") & (pl.col("kind") == "triple"))
        self.counts.update(preds["predicate"].to_list())
        self.snapped += preds.filter(
            pl.col("predicate")
            != pl.col("raw_predicate").map_elements(normalise_predicate, return_dtype=pl.String)
        ).height

    def report(self) -> dict[str, Any]:
        return {
            "distinct_predicates": len(self.counts),
            "predicates_snapped": self.snapped,
            "off_vocabulary_top": [
                f"{p} ({n})" for p, n in off_vocabulary(self.counts.elements(), self.vocabulary)
            ],
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

    Attributes follow support (issue 28, §4.6): merging only ever grows a vertex (a longer description
    wins), so every live entity whose support shrank — a mention this run did not write again, or one lost
    to a chunk removed since the last run; the same in a full run — has its name, type, description and
    aliases derived again from the records that remain
    (:func:`pgrag_dag.graph.rederive.rederive_attributes`), and the relations of a renamed one re-rendered:
    no text of a removed or replaced document stays in a live entity. A re-derived entity loses what an
    enricher had stored for it until the enrichers next see it.

    One name is one vertex (§4.6, issue 28): a vertex that gains, as an alias, another's canonical name is
    merged with it (:func:`pgrag_dag.graph.resolution.resolve_entities`) — the fragment's row records
    ``merged_into``, its mentions resolve anew to the survivor and it goes dormant; the relations stage
    moves its edges (``entities_merged`` counts the merges). A merge follows its support: a vertex whose
    remaining records no longer link its forms (a linking document removed or changed) splits before
    resolving, an un-merged fragment is a vertex again, and their chunks resolve anew
    (:func:`pgrag_dag.graph.rederive.split_unsupported`; ``entities_split`` counts the vertices split and
    un-merged), so the graph is the one a fresh index of the remaining documents builds.
    """
    t0 = time.perf_counter()
    enrichers = compose(engine.settings, realm, space).enrichers
    print_ = work_queue.fingerprint({"enrichers": [e.describe() for e in enrichers]})
    contexts = [operator_context(engine, realm, space, e) for e in enrichers]
    with engine.connect() as conn, conn.transaction():
        locks.lock_partition(conn, realm, space)
        work_queue.mark_stage(conn, "resolved_entities")
        todo = work_queue.take(conn, realm, space, "resolved_entities", print_, full=full)
        only = None if todo.full else sorted(todo.chunks)
        accepted = (  # a full run streams the space's decisions instead (issue 30)
            staging.load_decisions(conn, realm, space, chunk_ids=only)
            if only
            else pl.DataFrame(schema=staging.DECISION_SCHEMA)
        )
        # a vertex whose support no longer links its forms splits before resolving (issue 28)
        candidates = (
            None
            if todo.full
            else sorted(set(todo.entities) | {e for _, e in graph.mention_pairs(conn, realm, space, only)})
        )
        split = (
            split_unsupported(
                conn,
                realm,
                space,
                candidates=candidates,
                # a full run's chunks all have their mentions: the records come with them
                pending=[]
                if todo.full
                else list(accepted.filter(pl.col("kind") == "entity").iter_rows(named=True)),
            )
            if candidates is None or candidates
            else []
        )
        if split and only is not None:  # the split vertices' records resolve anew
            extra = sorted(set(graph.chunks_mentioning(conn, realm, space, split)) - set(only))
            only = sorted(set(only) | set(extra))
            accepted = pl.concat([accepted, staging.load_decisions(conn, realm, space, chunk_ids=extra)])
        records = accepted.filter(pl.col("kind") == "entity")
        holding = (
            None
            if todo.full
            else {
                identity_key(n)
                for ns in records.select(pl.concat_list(pl.col("name"), pl.col("aliases").fill_null([])))
                .to_series()
                .to_list()
                for n in ns
                if n
            }
        )
        existing = (
            graph.load_entities(conn, realm, space, resolved=True, holding=holding)
            if records.height or todo.full
            else None
        )
        streamed = _Streamed()
        res = (
            None
            if existing is None
            else resolve_entities(existing, streamed.rows(conn, realm, space, "entity"))
            if todo.full
            else resolve_entities(existing, records)
        )
        resolved_records = streamed.records if todo.full else records.height
        existing = None  # resolution holds what it needs of the stored vertices
        enriched, counts, merged = 0, {"inserted": 0, "updated": 0}, 0
        if res is not None:
            touched = res.standing() if todo.full else res.touched()
            enriched = apply_enrichers(touched, enrichers, contexts)
            if todo.full:  # what the enrichers store may differ from what is stored (an enricher changed)
                _mark_unlike_stored(conn, realm, space, touched)
            contracts.validate(
                contracts.EntityContract,
                touched.entities().with_row_index("row").with_columns(id=pl.col("row").cast(pl.Int64)),
            )
            counts = graph.write_entities(conn, realm, space, touched, merge=merge_race_loser)
            merged = graph.write_merges(
                conn, realm, space, [(f.id, v.id) for f, v in res.merges() if f.id and v.id]
            )
        if (
            not todo.full and res is not None and res.moved
        ):  # a form now resolves elsewhere: its mentions move too
            owners = sorted({vid for i in res.moved.values() if (vid := res.vertices[i].id) is not None})
            extra = sorted(set(graph.chunks_mentioning(conn, realm, space, owners)) - set(only or []))
            if extra:
                only = sorted(set(only or []) | set(extra))
                accepted = pl.concat([accepted, staging.load_decisions(conn, realm, space, chunk_ids=extra)])
        if todo.full and res is not None:
            mentions = pl.concat(
                [
                    pl.DataFrame(schema=graph.MENTION_SCHEMA),
                    *(_mentions(f, res.index_of, res) for f in streamed.frames(conn, realm, space, None)),
                ]
            )
        else:  # resolved against the stored vertices (just written):
            # res holds only those its records could meet
            forms = graph.EntityForms(conn, realm, space)
            forms.load({identity_key(n) for n in _mentioned_names(accepted)})
            mentions = _mentions(accepted, lambda n: forms.resolve(identity_key(n)), None)
        # entities whose support may have shrunk — a mention of theirs not rewritten now, or lost to a chunk
        # removed since the last run (its cascade named them) — are derived again from what remains
        if todo.full:  # set-based: the space's mentions as two compact frames, not tuples
            lost = set(
                graph.mention_frame(conn, realm, space)
                .join(mentions.unique(), on=["chunk_id", "entity_id"], how="anti")["entity_id"]
                .to_list()
            )
        else:
            before = graph.mention_pairs(conn, realm, space, only or [])
        if todo.full:
            dormancy = graph.replace_mentions(conn, realm, space, mentions)
        else:
            dormancy = graph.replace_chunk_mentions(
                conn, realm, space, only or [], mentions, also=sorted(todo.entities)
            )
        if not todo.full:
            kept = set(mentions.select("chunk_id", "entity_id").iter_rows())
            lost = {e for c, e in before if (c, e) not in kept}
        shrunk = sorted(set(todo.entities) | lost | set(split))
        live = graph.live_among(conn, realm, space, shrunk) if shrunk else []
        rederived = rederive_attributes(conn, realm, space, entity_ids=live, relation_ids=[]) if live else {}
        changed = (
            counts["inserted"]
            + counts["updated"]
            + dormancy["dormant"]
            + dormancy["revived"]
            + dormancy.get("rewritten", 0)
            + rederived.get("entities", 0)
            + merged
            + len(split)
        )
        work_queue.finish(conn, realm, space, "resolved_entities", todo, print_, changed=changed)
        entities = relation_store.entity_count(conn, realm, space)
        version = work_queue.data_version(conn, realm, space, "resolved_entities")
    return StageResult(
        "resolved_entities",
        {
            "mode": "full" if todo.full else "unchanged" if todo.empty else "incremental",
            "chunks_resolved": len(streamed.chunks) if todo.full else accepted["chunk_id"].n_unique(),
            "entities": entities,
            "entities_inserted": counts["inserted"],
            "entities_updated": counts["updated"],
            "records_resolved": resolved_records,
            **dormancy,
            "entities_rederived": rederived.get("entities", 0),
            "entities_merged": merged,
            "entities_split": len(split),
            "rows_changed": changed,
            "entities_enriched": enriched,
            "operators": {"enrichers": [e.describe() for e in enrichers]},
            "seconds": round(time.perf_counter() - t0, 3),
        },
        version,
        resolved_records,
        checks=operator_checks(enrichers, {"entities": resolved_records}),
    )


def _mark_unlike_stored(conn: psycopg.Connection, realm: str, space: str, res: Resolution) -> None:
    """Mark changed each stored vertex of ``res`` whose type or description is not what the store holds
    (or that the store holds no more as a vertex) — compared as two frames, not a dict of the space."""
    at = [i for i, v in enumerate(res.vertices) if v.id is not None]
    ours = pl.DataFrame(
        {
            "at": at,
            "id": [res.vertices[i].id for i in at],
            "entity_type": [res.vertices[i].entity_type for i in at],
            "description": [res.vertices[i].description for i in at],
        },
        schema={"at": pl.Int64, "id": pl.Int64, "entity_type": pl.String, "description": pl.String},
    )
    stored = graph.load_entities(conn, realm, space).select("id", "entity_type", "description")
    unlike = ours.join(stored, on="id", how="left", suffix="_stored").filter(
        pl.col("entity_type").ne_missing(pl.col("entity_type_stored"))
        | pl.col("description").ne_missing(pl.col("description_stored"))
    )
    for i in unlike["at"].to_list():
        res.vertices[i].changed = True


class _Streamed:
    """A full resolution's reads of the space's accepted decisions in document order, batch by batch
    (issue 30): what it counted of them — entity ``records`` and the ``chunks`` holding a decision."""

    def __init__(self) -> None:
        self.records = 0
        self.chunks: set[int] = set()

    def frames(
        self, conn: psycopg.Connection, realm: str, space: str, kind: str | None
    ) -> Iterator[pl.DataFrame]:
        for frame in staging.iter_decisions(conn, realm, space, kind=kind, batch=READ_BATCH):
            self.chunks.update(frame["chunk_id"].unique().to_list())
            yield frame

    def rows(self, conn: psycopg.Connection, realm: str, space: str, kind: str) -> Iterator[dict[str, Any]]:
        for frame in self.frames(conn, realm, space, kind):
            self.records += frame.height
            yield from frame.iter_rows(named=True)


def _mentioned_names(accepted: pl.DataFrame) -> list[str]:
    """Every name an accepted record of ``accepted`` mentions: an entity's name, a triple's subject and
    object."""
    return [
        n
        for r in accepted.select("kind", "name", "subject", "object").iter_rows()
        for n in ((r[1],) if r[0] == "entity" else (r[2], r[3]))
        if n
    ]


def _mentions(
    accepted: pl.DataFrame, resolve: Callable[[str], int | None], res: Resolution | None
) -> pl.DataFrame:
    """(chunk_id, entity_id) for every name an accepted record of ``accepted`` mentions that ``resolve``
    finds: an index into ``res`` (a resolution) or, without ``res``, an entity id."""
    mentions = []
    for r in accepted.select("chunk_id", "kind", "name", "subject", "object").iter_rows():
        for n in (r[2],) if r[1] == "entity" else (r[3], r[4]):
            found = resolve(n) if n else None
            if found is not None:
                mentions.append((r[0], res.vertices[found].id if res is not None else found))
    return pl.DataFrame(mentions, schema={"chunk_id": pl.Int64, "entity_id": pl.Int64}, orient="row")


def relations_fingerprint(engine: Engine, realm: str, space: str) -> str:
    """What the stored edges of ``realm.space`` depend on besides triples and entities: the vocabulary's
    exclusive groups, single-valued predicates and the temporal settings (contradiction detection). A change
    rebuilds the space."""
    vocabulary = engine.settings.space_spec(realm, space).vocabulary_model()
    return work_queue.fingerprint(
        {
            "groups": vocabulary.groups,
            "terms": vocabulary.terms,
            **({"single_valued": vocabulary.single_valued} if vocabulary.single_valued else {}),
            "temporal": engine.settings.temporal.model_dump(mode="json"),
        }
    )


@writing_stage("relations")
def stage_relations(engine: Engine, realm: str, space: str, *, full: bool = False) -> StageResult:
    """One edge per (subject, predicate, object, negated) weighted by distinct chunks (§4.7), supersession
    (§5.2), and the graph-quality check (§8.6).

    Incremental (issue 15): only the entity pairs the queued work touches are rebuilt
    (:mod:`pgrag_dag.pipeline.relation_delta`) — their edges from their complete support, supersession
    re-decided for them; the whole space when ``full``, on the first run, when the vocabulary or temporal
    settings changed, or when contradiction detection is on (its candidate pairs and call budget span the
    space). A run with nothing queued writes nothing and reports the stored quality measurements.
    """
    t0 = time.perf_counter()
    vocabulary = engine.settings.space_spec(realm, space).vocabulary_model()
    print_ = relations_fingerprint(engine, realm, space)
    with engine.connect() as conn, conn.transaction():
        locks.lock_partition(conn, realm, space)
        todo = work_queue.take(
            conn,
            realm,
            space,
            "relations",
            print_,
            full=full or engine.settings.temporal.contradiction_detection,
        )
        if todo.empty and (stored := work_queue.report(conn, realm, space, "relations")) is not None:
            nothing = dict.fromkeys(
                (
                    "pairs_rebuilt",
                    "chunks_read",
                    "edges_rebuilt",
                    "relations_inserted",
                    "relations_updated",
                    "relations_newly_dormant",
                    "newly_superseded",
                    "restored",
                    "rows_changed",
                ),
                0,
            )
            return StageResult(
                "relations",
                {
                    "mode": "unchanged",
                    **relation_store.graph_counts(conn, realm, space),
                    **nothing,
                    "newly_superseded_by_reason": {},
                    "seconds": round(time.perf_counter() - t0, 3),
                },
                work_queue.data_version(conn, realm, space, "relations"),
                0,
                checks={"graph_quality": _quality_check(engine, realm, space, stored)},
            )
        if todo.full:  # the space in batches of source entities (issue 30)
            tallies.suspend(conn)  # recounted below, in this transaction
            done = build_full(conn, realm, space, engine, vocabulary)
            counts, sup_counts, self_loops, edges = done.counts, done.sup_counts, done.self_loops, done.edges
            by_reason, examples, pairs, chunks = done.by_reason, done.examples, None, None
            batches = done.batches
        else:
            forms = graph.EntityForms(conn, realm, space)
            delta = relation_delta(conn, realm, space, todo, forms, vocabulary.single_valued)
            built = build_relations(
                delta.triples,
                forms.lookup,
                forms.names,
                documents.chunk_order(conn, realm, space, delta.chunks),
            )
            relations, pairs, chunks = delta.of_pairs(built.relations), delta.pairs, sorted(delta.chunks)
            contracts.validate(contracts.RelationContract, relations)
            superseded, _ = decide_supersession(engine, relations, vocabulary)
            counts = relation_store.write_relations(conn, realm, space, relations, pairs)
            sup_counts = relation_store.apply_supersession(conn, realm, space, relations, superseded)
            self_loops, edges, batches = built.self_loops, relations.height, 1
            by_reason = dict(Counter(superseded["reason"].to_list()))
            examples = [
                f"{relations['rendered'][r].split(':')[0]}  ⟶ superseded by ⟶  "
                f"{relations['rendered'][w].split(':')[0]}"
                for r, w in superseded.select("row", "superseded_by_row").head(5).iter_rows()
            ]
        staging.replace_resolution_rejections(conn, realm, space, self_loops, chunks)
        # kept by delta (issue 30); a full run counts the space, mends the tallies with its recount and
        # measures every quality aggregate in SQL
        kept = tallies.reset(conn, realm, space) if todo.full else tallies.read(conn, realm, space)
        totals = {k: kept[k] for k in tallies.KEYS}
        tallies.compact(conn, realm, space)
        quality = measure_quality(conn, realm, space, vocabulary, kept=None if todo.full else kept)
        changed = (
            counts["inserted"]
            + counts["updated"]
            + counts["dormant"]
            + sup_counts["newly_superseded"]
            + sup_counts["restored"]
        )
        metadata = {
            "mode": "full" if todo.full else "unchanged" if todo.empty else "incremental",
            "pairs_rebuilt": None if pairs is None else len(pairs),
            "chunks_read": None if chunks is None else len(chunks),
            "edges_rebuilt": edges,
            "batches": batches,
            **totals,
            "relations_inserted": counts["inserted"],
            "relations_updated": counts["updated"],
            "relations_newly_dormant": counts["dormant"],
            "self_loops_after_resolution": self_loops.height,
            "self_loop_examples": self_loops["offending_value"].head(5).to_list(),
            "newly_superseded": sup_counts["newly_superseded"],
            "restored": sup_counts["restored"],
            "supersessions_by_reason": by_reason,  # decided this run, re-decided pairs included
            "newly_superseded_by_reason": sup_counts["newly_by_reason"],  # of newly_superseded
            "supersession_examples": examples,
            "rows_changed": changed,
        }
        work_queue.finish(conn, realm, space, "relations", todo, print_, changed=changed, report=quality)
        version = work_queue.data_version(conn, realm, space, "relations")
    return StageResult(
        "relations",
        {**metadata, "seconds": round(time.perf_counter() - t0, 3)},
        version,
        edges,
        checks={"graph_quality": _quality_check(engine, realm, space, quality)},
    )


def _quality_check(
    engine: Engine, realm: str, space: str, metrics: dict[str, Any]
) -> tuple[bool, dict[str, Any]]:
    """The ``graph_quality`` check: passed unless a blocking measure is nonzero; the metadata judged for the
    space's extractor (:func:`~pgrag_dag.graph.quality.judge_quality`: ``blocking``, ``warnings``)."""
    judged = judge_quality(metrics, compose(engine.settings, realm, space).extractor.op.name)
    return quality_passed(judged), judged
