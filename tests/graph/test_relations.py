"""Tests for pgrag_dag.graph.relations: corroboration by distinct chunks, negation as a flag, validity carried
(paper §4.7, §5.1), and the RelationContract."""

from __future__ import annotations

from typing import Any

import polars as pl
import pytest

from pgrag_dag.errors import ContractError
from pgrag_dag.graph.relations import RELATION_SCHEMA, build_relations, render_relation
from pgrag_dag.operators.contracts import RelationContract, validate

TRIPLE_SCHEMA = {
    "chunk_id": pl.Int64,
    "pass": pl.Int64,
    "subject": pl.String,
    "predicate": pl.String,
    "object": pl.String,
    "description": pl.String,
    "negated": pl.Boolean,
    "confidence": pl.Float64,
    "valid_from": pl.String,
    "valid_to": pl.String,
}
ADA, BABBAGE, ENGINE = 1, 2, 3
NAMES = {ADA: "Ada Lovelace", BABBAGE: "Charles Babbage", ENGINE: "Analytical Engine"}
LOOKUP = {
    "ada lovelace": ADA,
    "lovelace": ADA,
    "charles babbage": BABBAGE,
    "babbage": BABBAGE,
    "analytical engine": ENGINE,
}


def _t(chunk_id: int, subject: str, predicate: str, obj: str, **kw: Any) -> dict[str, Any]:
    return {
        "chunk_id": chunk_id,
        "pass": kw.get("pass_", 0),
        "subject": subject,
        "predicate": predicate,
        "object": obj,
        "description": kw.get("description", ""),
        "negated": kw.get("negated", False),
        "confidence": kw.get("confidence", 0.9),
        "valid_from": kw.get("valid_from"),
        "valid_to": kw.get("valid_to"),
    }


def _build(*triples: dict[str, Any]) -> Any:
    return build_relations(pl.DataFrame(list(triples), schema=TRIPLE_SCHEMA), LOOKUP, NAMES)


def test_the_same_triple_from_two_chunks_is_one_edge_of_weight_two() -> None:
    built = _build(
        _t(11, "Ada Lovelace", "worked_with", "Charles Babbage", description="corresponded", confidence=0.7),
        _t(
            12, "Lovelace", "worked_with", "Babbage", description="collaborated on the Notes", confidence=0.95
        ),
    )
    rel = built.relations
    assert rel.height == 1
    row = rel.row(0, named=True)
    assert (row["source_id"], row["predicate"], row["target_id"], row["negated"]) == (
        ADA,
        "worked_with",
        BABBAGE,
        False,
    )
    assert row["chunk_ids"] == [11, 12] and row["weight"] == 2
    assert row["description"] == "collaborated on the Notes"  # the longest seen
    assert row["confidence"] == 0.95  # the highest seen
    assert row["rendered"] == "Ada Lovelace worked_with Charles Babbage: collaborated on the Notes"
    assert validate(RelationContract, rel).height == 1


def test_the_same_chunk_twice_counts_once() -> None:
    built = _build(
        _t(11, "Ada Lovelace", "worked_with", "Charles Babbage"),
        _t(11, "Ada Lovelace", "worked_with", "Charles Babbage", pass_=1),
        _t(11, "Lovelace", "worked_with", "Babbage"),
    )
    assert built.relations.select("chunk_ids", "weight").rows() == [([11], 1)]


def test_a_negated_triple_is_a_separate_edge_with_the_positive_predicate() -> None:
    built = _build(
        _t(11, "Ada Lovelace", "designed", "Analytical Engine", negated=True),
        _t(12, "Charles Babbage", "designed", "Analytical Engine"),
        _t(13, "Ada Lovelace", "designed", "Analytical Engine"),
    )
    rows = built.relations.select("source_id", "predicate", "target_id", "negated", "weight").rows()
    assert rows == [
        (ADA, "designed", ENGINE, False, 1),
        (ADA, "designed", ENGINE, True, 1),
        (BABBAGE, "designed", ENGINE, False, 1),
    ]
    denied = built.relations.filter(pl.col("negated")).row(0, named=True)
    assert denied["rendered"] == "Ada Lovelace NOT designed Analytical Engine"
    assert validate(RelationContract, built.relations).height == 3


def test_the_first_stated_validity_is_kept_and_never_erased() -> None:
    built = _build(
        _t(10, "Ada Lovelace", "worked_with", "Charles Babbage"),  # no period
        _t(11, "Ada Lovelace", "worked_with", "Charles Babbage", valid_from="1833", valid_to="1852"),
        _t(12, "Ada Lovelace", "worked_with", "Charles Babbage"),  # no period: must not erase it
        _t(
            13, "Ada Lovelace", "worked_with", "Charles Babbage", valid_from="1840"
        ),  # later: first one stands
    )
    assert built.relations.select("valid_from", "valid_to", "weight").rows() == [("1833", "1852", 4)]


def test_validity_is_the_hull_of_the_stated_periods() -> None:
    built = _build(
        _t(20, "Ada Lovelace", "worked_with", "Charles Babbage", valid_from="1840", valid_to="1843-06"),
        _t(5, "Ada Lovelace", "worked_with", "Charles Babbage", valid_from="1833"),
        _t(7, "Ada Lovelace", "worked_with", "Charles Babbage"),
    )
    assert built.relations.select("valid_from", "valid_to", "chunk_ids").rows() == [
        ("1833", "1843-06", [5, 7, 20])
    ]


def test_endpoints_resolving_to_one_vertex_go_to_the_self_loops_frame() -> None:
    built = _build(
        _t(11, "Babbage", "corresponded_with", "Charles Babbage"),
        _t(12, "Ada Lovelace", "met", "Charles Babbage"),
    )
    assert built.self_loops.rows() == [
        (
            11,
            "Babbage",
            "corresponded_with",
            "Charles Babbage",
            "self_loop",
            "Babbage = Charles Babbage = Charles Babbage after resolution",
        )
    ]
    assert built.relations.select("source_id", "target_id").rows() == [(ADA, BABBAGE)]


def test_an_unresolved_endpoint_raises_naming_the_endpoint_and_chunk() -> None:
    # the message carries the endpoint's identity key (lowercased), not its surface form
    with pytest.raises(KeyError, match="'difference engine' of chunk 11"):
        _build(_t(11, "Charles Babbage", "designed", "Difference Engine"))


def test_render_relation_reads_as_a_sentence() -> None:
    assert render_relation("A", "met", "B", negated=False) == "A met B"
    assert render_relation("A", "met", "B", negated=True, description="never") == "A NOT met B: never"


def _relation(**kw: Any) -> dict[str, Any]:
    return {
        "source_id": ADA,
        "target_id": BABBAGE,
        "predicate": "worked_with",
        "negated": False,
        "description": "",
        "chunk_ids": [11],
        "weight": 1,
        "confidence": 0.9,
        "valid_from": None,
        "valid_to": None,
        "rendered": "x",
    } | kw


@pytest.mark.parametrize(
    ("bad", "check"),
    [
        (_relation(chunk_ids=[11, 12], weight=1), "weight_is_distinct_chunks"),
        (_relation(chunk_ids=[11, 11], weight=2), "weight_is_distinct_chunks"),
        (_relation(chunk_ids=[11], weight=3), "weight_is_distinct_chunks"),
        (_relation(target_id=ADA), "no_self_loop"),
    ],
    ids=["undercounted", "duplicate-chunk", "overcounted", "self-loop"],
)
def test_relation_contract_rejects_weight_not_equal_to_distinct_chunks(
    bad: dict[str, Any], check: str
) -> None:
    good = _relation(source_id=BABBAGE, target_id=ENGINE, predicate="designed", chunk_ids=[11, 12], weight=2)
    frame = pl.DataFrame([good, bad], schema=RELATION_SCHEMA)
    with pytest.raises(ContractError) as info:
        validate(RelationContract, frame)
    cases = info.value.failure_cases
    assert isinstance(cases, pl.DataFrame)
    assert cases.select("check", "index").rows() == [(check, 1)]
