"""Relations: corroboration by distinct chunks, negation as a flag, validity carried (paper §4.7, §5.1).

Input ``triples``: the accepted triple rows of ``gate_decisions`` in document order (chunk_id, pass, subject,
predicate, object, description, negated, confidence, valid_from, valid_to) and ``lookup``: identity
key of every entity surface form (canonical names and aliases) → entity id.

Output frame ``relations``: source_id, target_id, predicate, negated, description (the longest
seen), chunk_ids (sorted distinct contributing chunks), weight (= number of chunk_ids), confidence
(the highest seen), valid_from, valid_to (the hull of every stated period — earliest start, latest
end; an observation without a period never erases one), rendered (the surface form embedded and
searched), asserted_doc_order / asserted_chunk_index (the latest assertion in document order).
A triple whose endpoints resolve to one vertex is refused as a self-loop (``self_loops`` frame).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl

from pgrag_dag.gate_rules import Gate, identity_key
from pgrag_dag.temporal import lower_bound, upper_bound

RELATION_SCHEMA: dict[str, Any] = {
    "source_id": pl.Int64,
    "target_id": pl.Int64,
    "predicate": pl.String,
    "negated": pl.Boolean,
    "description": pl.String,
    "chunk_ids": pl.List(pl.Int64),
    "weight": pl.Int64,
    "confidence": pl.Float64,
    "valid_from": pl.String,
    "valid_to": pl.String,
    "rendered": pl.String,
    "asserted_doc_order": pl.Int64,
    "asserted_chunk_index": pl.Int64,
}


SELF_LOOP_SCHEMA: dict[str, Any] = {
    "chunk_id": pl.Int64,
    "subject": pl.String,
    "predicate": pl.String,
    "object": pl.String,
    "gate": pl.String,
    "offending_value": pl.String,
}
"""The ``self_loops`` frame of :class:`RelationBuild`."""


@dataclass
class RelationBuild:
    """``relations`` (schema above) and ``self_loops`` (chunk_id, subject, predicate, object, gate,
    offending_value): triples whose two endpoints resolved to one vertex."""

    relations: pl.DataFrame
    self_loops: pl.DataFrame


def render_relation(subject: str, predicate: str, obj: str, *, negated: bool, description: str = "") -> str:
    """The relation's surface form: ``Ada Lovelace worked_with Charles Babbage: description``;
    a denial reads ``NOT worked_with``."""
    pred = f"NOT {predicate}" if negated else predicate
    return f"{subject} {pred} {obj}" + (f": {description}" if description else "")


def build_relations(
    triples: pl.DataFrame,
    lookup: dict[str, int],
    names: dict[int, str],
    order: dict[int, tuple[int, int]] | None = None,
) -> RelationBuild:
    """Group accepted triples into one edge per (subject, predicate, object, negated) — see module doc.

    ``names`` maps entity id → canonical name (for ``rendered``); ``order`` maps chunk id →
    (doc_order, chunk_index), giving each edge its latest assertion in document order
    (``asserted_doc_order``, ``asserted_chunk_index``), which supersession compares (§5.2). Raises
    :class:`KeyError` naming the endpoint when it does not resolve (the resolver must have run first).
    """
    order = order or {}
    groups: dict[tuple[int, str, int, bool], dict[str, Any]] = {}
    loops: list[dict[str, Any]] = []
    for t in triples.iter_rows(named=True):  # document order: the first stated period wins
        try:
            s, o = lookup[identity_key(t["subject"])], lookup[identity_key(t["object"])]
        except KeyError as exc:
            raise KeyError(
                f"triple endpoint {exc.args[0]!r} of chunk {t['chunk_id']} is not a resolved entity"
            ) from None
        if s == o:
            loops.append(
                {
                    "chunk_id": t["chunk_id"],
                    "subject": t["subject"],
                    "predicate": t["predicate"],
                    "object": t["object"],
                    "gate": Gate.SELF_LOOP.value,
                    "offending_value": f"{t['subject']} = {t['object']} = {names[s]} after resolution",
                }
            )
            continue
        key = (s, t["predicate"], o, bool(t["negated"]))
        g = groups.setdefault(
            key,
            {
                "chunk_ids": set(),
                "description": "",
                "confidence": 0.0,
                "valid_from": None,
                "valid_to": None,
                "asserted": (-1, -1),
            },
        )
        g["chunk_ids"].add(int(t["chunk_id"]))
        g["asserted"] = max(g["asserted"], order.get(int(t["chunk_id"]), (-1, -1)))
        if len(t["description"] or "") > len(g["description"]):
            g["description"] = t["description"] or ""
        g["confidence"] = max(g["confidence"], float(t["confidence"] or 0.0))
        # the hull of the stated periods; an observation without a period never erases one
        if t["valid_from"] and (
            g["valid_from"] is None or lower_bound(t["valid_from"]) < lower_bound(g["valid_from"])
        ):
            g["valid_from"] = t["valid_from"]
        if t["valid_to"] and (
            g["valid_to"] is None or upper_bound(t["valid_to"]) > upper_bound(g["valid_to"])
        ):
            g["valid_to"] = t["valid_to"]
    rows = []
    for (s, p, o, neg), g in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2], kv[0][3])):
        chunk_ids = sorted(g["chunk_ids"])
        rows.append(
            {
                "source_id": s,
                "target_id": o,
                "predicate": p,
                "negated": neg,
                "description": g["description"],
                "chunk_ids": chunk_ids,
                "weight": len(chunk_ids),
                "confidence": g["confidence"],
                "valid_from": g["valid_from"],
                "valid_to": g["valid_to"],
                "rendered": render_relation(names[s], p, names[o], negated=neg, description=g["description"]),
                "asserted_doc_order": g["asserted"][0],
                "asserted_chunk_index": g["asserted"][1],
            }
        )
    return RelationBuild(
        pl.DataFrame(rows, schema=RELATION_SCHEMA), pl.DataFrame(loops, schema=SELF_LOOP_SCHEMA)
    )
