"""Validation gates: deterministic refusals of extractor output (paper §4.3, Table 2; §4.5).

Input: the ``raw_extractions`` frame (rows with ``parse_status == "ok"``).

Output frame ``gate_decisions`` — one row per extracted entity or triple: chunk_id, pass, kind
(``entity`` | ``triple``), name, entity_type, description, aliases (list[str]), subject, predicate,
object, negated, confidence, valid_from, valid_to, accepted (bool), gate (a :class:`Gate` value, null
when accepted), offending_value (the value the gate refused).

Gates reject; they never repair. An entity or triple that held a lone surrogate (text no database can
store, replaced by U+FFFD and marked :data:`UNENCODABLE` by the parser) is refused as
``unencodable_text`` with the escaped original as offending value. A triple endpoint the extractor did not
list becomes a bare ``Concept`` stub entity unless its name fails a name gate, in which case the triple is
rejected as an orphaned endpoint and no stub vertex is made for it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import polars as pl

from pgrag_dag.config.sections import GateSettings
from pgrag_dag.frames import DECISION_SCHEMA
from pgrag_dag.gate_rules import (
    UNENCODABLE,
    VAGUE_PREDICATES,
    Gate,
    clean_name,
    identity_key,
    name_gate,
    normalise_predicate,
)
from pgrag_dag.temporal import normalise_date
from pgrag_dag.vocabulary import Vocabulary

if TYPE_CHECKING:
    from pgrag_dag.operators.core import BoundOperator, OperatorContext


def _flag(value: Any) -> bool | None:
    """A model's negation flag: a boolean, 0/1, or "true"/"false"/"yes"/"no" (any case); ``None`` for
    anything else (the triple is then malformed). Missing or null means not negated."""
    if value is None or isinstance(value, bool):
        return bool(value)
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in ("true", "yes", "false", "no"):
        return value.strip().lower() in ("true", "yes")
    return None


def _confidence(value: Any) -> float | None:
    try:
        c = float(value)
    except (TypeError, ValueError):
        return None
    return c if 0.0 <= c <= 1.0 else None


def _date(value: Any) -> str | None:
    """A stated period bound, normalised (§5.1); vague or impossible dates are discarded."""
    return normalise_date(value)


def gate_extraction(
    chunk_id: int,
    p: int,
    parsed: dict[str, Any],
    settings: GateSettings,
    vocabulary: Vocabulary | None = None,
) -> list[dict[str, Any]]:
    """Gate one parsed extraction (one chunk, one pass) → decision rows (schema above).

    Predicates are normalised, then snapped onto ``vocabulary`` (§4.5); ``raw_predicate`` keeps what
    the model wrote.
    """
    vocabulary = vocabulary or Vocabulary()
    rows: list[dict[str, Any]] = []
    accepted: dict[str, str] = {}  # identity key -> cleaned name
    refused: set[str] = set()
    base = {"chunk_id": chunk_id, "pass": p}
    known = frozenset(identity_key(clean_name(e.get("name"))) for e in parsed.get("entities", []))
    for ent in parsed.get("entities", []):
        name = clean_name(ent.get("name"))
        given = ent.get("aliases") or []
        given = (
            [given] if isinstance(given, str) else given if isinstance(given, list) else []
        )  # "Ada" is one alias
        aliases = [a for a in (clean_name(x) for x in given if isinstance(x, str)) if a]
        row = (
            dict.fromkeys(DECISION_SCHEMA)
            | base
            | {
                "kind": "entity",
                "name": name,
                "entity_type": clean_name(ent.get("type")) or "Concept",
                "description": (ent.get("description") or "").strip()
                if isinstance(ent.get("description"), str)
                else "",
                "aliases": [
                    a
                    for a in aliases
                    if identity_key(a) != identity_key(name) and name_gate(a, settings) is None
                ],
            }
        )
        gate = (
            Gate.UNENCODABLE_TEXT
            if UNENCODABLE in ent
            else name_gate(name, settings, known, row["entity_type"])
        )
        if gate is None:
            accepted.setdefault(identity_key(name), name)
        else:
            refused.add(identity_key(name))
        rows.append(row | _verdict(gate, ent[UNENCODABLE] if gate is Gate.UNENCODABLE_TEXT else name))
    for tri in parsed.get("triples", []):
        subj, obj = clean_name(tri.get("subject")), clean_name(tri.get("object"))
        raw_pred = tri.get("predicate") if isinstance(tri.get("predicate"), str) else None
        pred = normalise_predicate(raw_pred)
        if pred not in VAGUE_PREDICATES:
            pred = vocabulary.snap(pred)
        conf = _confidence(tri.get("confidence", 1.0))
        row = (
            dict.fromkeys(DECISION_SCHEMA)
            | base
            | {
                "kind": "triple",
                "subject": subj,
                "predicate": pred,
                "raw_predicate": raw_pred,
                "object": obj,
                "description": tri.get("description").strip()
                if isinstance(tri.get("description"), str)
                else "",
                "negated": _flag(tri.get("negated", False)),
                "confidence": conf,
                "valid_from": _date(tri.get("valid_from")),
                "valid_to": _date(tri.get("valid_to")),
            }
        )
        gate, value = (
            (Gate.UNENCODABLE_TEXT, tri[UNENCODABLE])
            if UNENCODABLE in tri
            else _triple_gate(subj, pred, obj, conf, refused, set(accepted), settings)
        )
        if gate is None and row["negated"] is None:  # "negated": "perhaps" is no assertion either way
            gate, value = Gate.MALFORMED, f"negated={tri.get('negated')!r}"
        if gate is None:
            for end in (subj, obj):  # endpoint not listed as an entity: a bare Concept stub
                if identity_key(end) not in accepted:
                    accepted[identity_key(end)] = end
                    rows.append(
                        dict.fromkeys(DECISION_SCHEMA)
                        | base
                        | {
                            "kind": "entity",
                            "name": end,
                            "entity_type": "Concept",
                            "description": "",
                            "aliases": [],
                            "accepted": True,
                        }
                    )
        rows.append(row | _verdict(gate, value))
    return rows


def _triple_gate(
    subj: str,
    pred: str,
    obj: str,
    conf: float | None,
    refused: set[str],
    listed: set[str],
    settings: GateSettings,
) -> tuple[Gate | None, str | None]:
    if not subj or not obj or not pred or conf is None:
        return Gate.MALFORMED, f"{subj!r} {pred!r} {obj!r} confidence={conf}"
    if pred in VAGUE_PREDICATES:
        return Gate.VAGUE_PREDICATE, pred
    for end in (subj, obj):  # a listed entity was gated with its type; an unlisted endpoint is gated here
        key = identity_key(end)
        if key in refused or (key not in listed and name_gate(end, settings) is not None):
            return Gate.ORPHANED_ENDPOINT, end
    if identity_key(subj) == identity_key(obj):
        return Gate.SELF_LOOP, subj
    if conf < settings.confidence_floor:
        return Gate.CONFIDENCE_FLOOR, str(conf)
    return None, None


def _verdict(gate: Gate | None, value: str | None) -> dict[str, Any]:
    if gate is None:
        return {"accepted": True, "gate": None, "offending_value": None}
    return {"accepted": False, "gate": gate.value, "offending_value": value}


def apply_gates(
    raw: pl.DataFrame, settings: GateSettings, vocabulary: Vocabulary | None = None
) -> pl.DataFrame:
    """Gate every ``ok`` row of a ``raw_extractions`` frame → the ``gate_decisions`` frame, keeping the
    input's order (document order, then pass)."""
    rows: list[dict[str, Any]] = []
    for r in raw.filter(pl.col("parse_status") == "ok").iter_rows(named=True):
        rows.extend(
            gate_extraction(int(r["chunk_id"]), int(r["pass"]), json.loads(r["parsed"]), settings, vocabulary)
        )
    return pl.DataFrame(rows, schema=DECISION_SCHEMA)


def apply_extra_gates(
    decisions: pl.DataFrame, gates: Sequence[BoundOperator], ctx: OperatorContext
) -> pl.DataFrame:
    """Run a space's extra gates (user or built-in :mod:`pgrag_dag.operators` gates) after Table 2's.

    Each gate sees the rows still accepted (``gate_decisions`` columns, in order) and returns one verdict
    row per input row (:class:`~pgrag_dag.operators.contracts.GateVerdictContract`); a refused row is stored
    with the gate's name as its reason and ``offending_value`` (the gate's, else the name or subject). Gates
    only add refusals: rows already refused stay as they were. A triple whose endpoint entity a gate
    refused is then refused as an orphaned endpoint. Returns the decisions frame (same rows and order).

    Raises :class:`ContractError` when a gate's verdict breaks its contract or has a different row count.
    """
    from pgrag_dag.errors import ContractError

    for g in gates:
        keyed = decisions.with_row_index("_row")
        open_rows = keyed.filter(pl.col("accepted"))
        verdict = g.run(open_rows.drop("_row"), ctx)
        if verdict.height != open_rows.height:
            raise ContractError(
                f"GateVerdictContract (operator {g.op.name})",
                f"returned {verdict.height} verdicts for {open_rows.height} accepted rows",
            )
        given = (
            verdict["offending_value"].cast(pl.String)
            if "offending_value" in verdict.columns
            else pl.Series([None] * verdict.height, dtype=pl.String)
        )
        hits = (
            open_rows.select("_row", "kind", "name", "subject")
            .with_columns(_refused=verdict["refused"], _value=given)
            .filter(pl.col("_refused"))
        )
        hits = hits.with_columns(
            _value=pl.coalesce(
                "_value",
                pl.when(pl.col("kind") == "entity").then(pl.col("name")).otherwise(pl.col("subject")),
            )
        )
        decisions = _refuse(keyed, hits.select("_row", "_value"), g.op.name)
        decisions = _refuse_orphans(decisions)
    return decisions


def _refuse(keyed: pl.DataFrame, hits: pl.DataFrame, gate: str) -> pl.DataFrame:
    """``keyed`` (with ``_row``) with the rows of ``hits`` (``_row``, ``_value``) refused by ``gate``."""
    out = keyed.join(hits, on="_row", how="left")
    hit = pl.col("_row").is_in(hits["_row"].implode())
    return (
        out.with_columns(
            accepted=pl.when(hit).then(False).otherwise(pl.col("accepted")),
            gate=pl.when(hit).then(pl.lit(gate)).otherwise(pl.col("gate")),
            offending_value=pl.when(hit).then(pl.col("_value")).otherwise(pl.col("offending_value")),
        )
        .sort("_row")
        .drop("_row", "_value")
    )


def _refuse_orphans(decisions: pl.DataFrame) -> pl.DataFrame:
    """Accepted triples whose subject or object is no accepted entity of their chunk and pass → refused
    as :attr:`Gate.ORPHANED_ENDPOINT` with the missing endpoint as offending value."""
    keyed = decisions.with_row_index("_row")
    ents = {
        (c, p, identity_key(n))
        for c, p, n in keyed.filter((pl.col("kind") == "entity") & pl.col("accepted"))
        .select("chunk_id", "pass", "name")
        .iter_rows()
    }
    rows, values = [], []
    for r in keyed.filter((pl.col("kind") == "triple") & pl.col("accepted")).iter_rows(named=True):
        missing = next(
            (
                e
                for e in (r["subject"], r["object"])
                if (r["chunk_id"], r["pass"], identity_key(e)) not in ents
            ),
            None,
        )
        if missing is not None:
            rows.append(r["_row"])
            values.append(missing)
    if not rows:
        return decisions
    return _refuse(
        keyed,
        pl.DataFrame({"_row": rows, "_value": values}, schema={"_row": pl.UInt32, "_value": pl.String}),
        Gate.ORPHANED_ENDPOINT.value,
    )
