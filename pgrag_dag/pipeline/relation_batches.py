"""A full ``relations`` run in bounded memory (issue 30 item 3): the edges of §4.7 and the supersession of
§5.2 built one range of source entities at a time, the same edges and decisions a whole-space pass makes.

Every decision that needs a whole group sees it in one batch: an edge's triples share its source; an exclusive
group and a negation flip are decided on one ordered pair, and a predicate single-valued on its object (one
object per subject) on one subject — all inside the source's batch. A predicate single-valued on its subject
(one subject per object) spans sources: its ends are decided after every batch, over the incoming edges read
in (predicate, object) order (:func:`pgrag_dag.graph.supersession.single_valued_replaces` merges the verdict
with the batch's). Contradiction detection (off by default) judges only edges of one subject and predicate,
within a batch; its call budget runs across the batches in row order.

The accepted triples are streamed from ``gate_decisions`` in document order, their endpoints resolved and
parked in a temporary table by source (:mod:`pgrag_dag.store.incoming`); the built edges and supersession
decisions wait in temporary tables too and are merged into ``relations`` once. Python holds the space's entity
forms (identity key → entity, id → name) and one batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import polars as pl
import psycopg

from pgrag_dag.engine import Engine
from pgrag_dag.gate_rules import identity_key
from pgrag_dag.graph.relations import SELF_LOOP_SCHEMA, build_relations
from pgrag_dag.graph.supersession import (
    SUPERSESSION_SCHEMA,
    contradiction_candidates,
    detect_contradictions,
    single_valued_replaces,
    supersede,
)
from pgrag_dag.operators import contracts
from pgrag_dag.store import documents, graph, incoming, staging
from pgrag_dag.vocabulary import Vocabulary

RELATION_BATCH = 20_000
"""Accepted triples per batch of a full ``relations`` run (a range of source entities; one source holding
more is one batch)."""
READ_BATCH = 20_000
"""Decision rows per fetch from ``gate_decisions``."""
EXAMPLES = 5
"""Self-loops and supersessions named in the stage's metadata."""


@dataclass
class FullRelations:
    """What a full run built and wrote: ``edges`` (edges built) in ``batches``, ``counts``
    (:func:`~pgrag_dag.store.incoming.merge_relations`), ``sup_counts``
    (:func:`~pgrag_dag.store.incoming.apply_incoming_supersession`), ``by_reason`` and ``examples`` of the
    supersessions, and ``self_loops`` (every triple refused as a self-loop after resolution, in document
    order)."""

    edges: int = 0
    batches: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    sup_counts: dict[str, Any] = field(default_factory=dict)
    by_reason: dict[str, int] = field(default_factory=dict)
    examples: list[str] = field(default_factory=list)
    self_loops: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=SELF_LOOP_SCHEMA))


def build_full(
    conn: psycopg.Connection,
    realm: str,
    space: str,
    engine: Engine,
    vocabulary: Vocabulary,
    *,
    batch: int | None = None,
) -> FullRelations:
    """Rebuild every edge of ``realm.space`` and its supersession, ``batch`` triples (default
    :data:`RELATION_BATCH`) at a time, and write them (see the module docstring), in the caller's transaction
    — which holds the partition lock. Endpoints resolve through the space's entity forms
    (:func:`pgrag_dag.store.graph.form_lookup`).

    Raises :class:`KeyError` naming a triple endpoint that resolves to no entity (the first in document
    order), :class:`~pgrag_dag.errors.ContractError` when a batch's edges or supersession break their
    contracts."""
    lookup, names = graph.form_lookup(conn, realm, space)
    incoming.open_incoming(conn)
    incoming.open_triples(conn)
    _park_triples(conn, realm, space, lookup)
    single = vocabulary.single_valued or {}
    by_object = {p: side for p, side in single.items() if side == "object"}
    budget = engine.settings.temporal.contradiction_max_pairs
    out, loops = FullRelations(), []
    for triples in incoming.triples_by_source(conn, batch or RELATION_BATCH):
        order = documents.chunk_order(conn, realm, space, set(triples["chunk_id"].to_list()))
        built = build_relations(triples, lookup, names, order)
        contracts.validate(contracts.RelationContract, built.relations)
        superseded, used = decide_supersession(
            engine, built.relations, vocabulary, declared=by_object, max_pairs=budget
        )
        budget -= used
        incoming.add_relations(conn, built.relations)
        incoming.add_supersession(conn, built.relations, superseded)
        seq = triples.filter(pl.col("source_id") == pl.col("target_id"))["seq"]
        loops.append(built.self_loops.with_columns(seq=seq))
        out.edges += built.relations.height
        out.batches += 1
    _single_subject_ends(conn, vocabulary, {p for p, side in single.items() if side == "subject"})
    out.counts = incoming.merge_relations(conn, realm, space)
    out.sup_counts = incoming.apply_incoming_supersession(conn, realm, space)
    out.by_reason, out.examples = incoming.supersession_summary(conn, EXAMPLES)
    if loops:
        out.self_loops = pl.concat(loops).sort("seq").drop("seq")
    return out


def _park_triples(conn: psycopg.Connection, realm: str, space: str, lookup: dict[str, int]) -> None:
    """Stream the space's accepted triples in document order into ``pgrag_triples_by_source`` with their
    position and resolved endpoints; raise :class:`KeyError` for the first endpoint that resolves to none
    (as :func:`~pgrag_dag.graph.relations.build_relations` words it)."""
    seq = 0
    for frame in staging.iter_decisions(conn, realm, space, kind="triple", batch=READ_BATCH):
        ends = []
        for chunk, s, o in frame.select("chunk_id", "subject", "object").iter_rows():
            try:
                ends.append((lookup[identity_key(s)], lookup[identity_key(o)]))
            except KeyError as exc:
                raise KeyError(
                    f"triple endpoint {exc.args[0]!r} of chunk {chunk} is not a resolved entity"
                ) from None
        incoming.add_triples(
            conn,
            frame.with_columns(
                seq=pl.int_range(seq, seq + frame.height, dtype=pl.Int64),
                source_id=pl.Series([s for s, _ in ends], dtype=pl.Int64),
                target_id=pl.Series([o for _, o in ends], dtype=pl.Int64),
            ),
        )
        seq += frame.height


def _single_subject_ends(conn: psycopg.Connection, vocabulary: Vocabulary, predicates: set[str]) -> None:
    """Decide the ends of the predicates single-valued on their subject (one subject per object) over the
    incoming edges of every batch: among the asserted edges of one (predicate, object), the one asserted
    latest in document order (the first by source on a tie) supersedes the earlier ones unless their batch's
    superseder stands (:func:`single_valued_replaces`); the verdicts are audited as a batch's are."""
    if not predicates:
        return
    replaced: list[tuple[Any, ...]] = []
    audit_rel: list[tuple[Any, ...]] = []
    audit_sup: list[tuple[int, int, str, None]] = []
    group: list[tuple[Any, ...]] = []

    def decide() -> None:
        whens = [(r[3], r[4]) for r in group]
        latest = max(range(len(group)), key=lambda i: whens[i])  # the first of the latest
        base = len(audit_rel)
        added = False
        for i, r in enumerate(group):
            prior = None if r[5] is None else ((r[10], r[11]), r[9])
            if i != latest and single_valued_replaces(whens[i], whens[latest], prior):
                w = group[latest]
                replaced.append((r[0], r[1], r[2], False, w[0], w[1], w[2], False, "single_valued", None))
                audit_sup.append((base + i, base + latest, "single_valued", None))
                added = True
        if added:
            audit_rel.extend((r[0], r[1], r[2], r[3], r[4]) for r in group)

    for row in incoming.single_end_edges(conn, predicates):
        if group and (row[2], row[1]) != (group[0][2], group[0][1]):
            decide()
            group = []
        group.append(row)
    if group:
        decide()
    if audit_sup:
        rel = pl.DataFrame(
            audit_rel,
            schema={
                "source_id": pl.Int64,
                "target_id": pl.Int64,
                "predicate": pl.String,
                "asserted_doc_order": pl.Int64,
                "asserted_chunk_index": pl.Int64,
            },
            orient="row",
        )
        sup = pl.DataFrame(audit_sup, schema=SUPERSESSION_SCHEMA, orient="row")
        contracts.validate(
            contracts.SupersessionContract,
            supersession_audit(rel, sup, vocabulary.groups, vocabulary.single_valued),
        )
    incoming.replace_superseders(conn, replaced)


def decide_supersession(
    engine: Engine,
    relations: pl.DataFrame,
    vocabulary: Vocabulary,
    *,
    declared: dict[str, str] | None = None,
    max_pairs: int | None = None,
) -> tuple[pl.DataFrame, int]:
    """Declarative supersession of ``relations`` (its single-valued predicates ``declared``, default the
    vocabulary's), then — when enabled — contradiction detection over the residue with at most
    ``max_pairs`` candidate pairs (default the settings'); validated by :func:`supersession_audit`. Returns
    the ``supersession`` frame and how many candidate pairs contradiction detection took of the budget."""
    declarative = supersede(
        relations, vocabulary.groups, vocabulary.single_valued if declared is None else declared
    )
    frames, used = [declarative], 0
    temporal = engine.settings.temporal
    budget = temporal.contradiction_max_pairs if max_pairs is None else max_pairs
    if temporal.contradiction_detection and budget > 0:
        used = len(
            contradiction_candidates(
                relations,
                set(declarative["row"].to_list()),
                vocabulary.groups,
                max_pairs=budget,
                single_valued=vocabulary.single_valued,
            )
        )
        frames.append(
            detect_contradictions(
                relations,
                declarative,
                vocabulary.groups,
                engine.client(),
                max_pairs=budget,
                single_valued=vocabulary.single_valued,
            )
        )
    result = pl.concat(frames)
    contracts.validate(
        contracts.SupersessionContract,
        supersession_audit(relations, result, vocabulary.groups, vocabulary.single_valued),
    )
    return result, used


def supersession_audit(
    relations: pl.DataFrame,
    supersession: pl.DataFrame,
    groups: tuple[tuple[str, ...], ...],
    single_valued: dict[str, str] | None = None,
) -> pl.DataFrame:
    """The ``supersession`` frame (row, superseded_by_row, reason, explanation; rows address ``relations``
    by position) with what :class:`~pgrag_dag.operators.contracts.SupersessionContract` checks, set-based (two
    joins, no per-row Python): ``later`` — the superseding edge's latest assertion comes later in document
    order (doc_order, then chunk_index) — ``same_pair`` (source and target), ``same_group`` (both
    predicates in one exclusive group; an ungrouped predicate is in none) and ``same_single_end`` (one
    predicate, single-valued in ``single_valued``, and the same subject when it holds one object, the same
    object when it holds one subject). §5.2, issue 27."""
    group_of = {p: i for i, g in enumerate(groups) for p in g}
    single = single_valued or {}

    def side(default: str) -> pl.Expr:
        if not single:
            return pl.lit(default, pl.String)
        return pl.col("predicate").replace_strict(single, default=default, return_dtype=pl.String)

    def group(default: int) -> pl.Expr:
        if not group_of:
            return pl.lit(default, pl.Int64)
        return pl.col("predicate").replace_strict(group_of, default=default, return_dtype=pl.Int64)

    edges = (
        relations.select("asserted_doc_order", "asserted_chunk_index", "source_id", "target_id", "predicate")
        .with_row_index("row")
        .with_columns(pl.col("row").cast(pl.Int64))
    )
    loser = edges.with_columns(group=group(-1), side=side(""))
    winner = edges.with_columns(group=group(-2)).rename(lambda c: f"w_{c}")
    joined = supersession.join(loser, on="row", how="left").join(
        winner, left_on="superseded_by_row", right_on="w_row", how="left"
    )
    return joined.select(
        *supersession.columns,
        later=(pl.col("asserted_doc_order") < pl.col("w_asserted_doc_order"))
        | (
            (pl.col("asserted_doc_order") == pl.col("w_asserted_doc_order"))
            & (pl.col("asserted_chunk_index") < pl.col("w_asserted_chunk_index"))
        ),
        same_pair=(pl.col("source_id") == pl.col("w_source_id"))
        & (pl.col("target_id") == pl.col("w_target_id")),
        same_group=pl.col("group") == pl.col("w_group"),
        same_single_end=(pl.col("predicate") == pl.col("w_predicate"))
        & (
            ((pl.col("side") == "object") & (pl.col("source_id") == pl.col("w_source_id")))
            | ((pl.col("side") == "subject") & (pl.col("target_id") == pl.col("w_target_id")))
        ),
    )
