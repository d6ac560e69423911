"""Tests for pgrag_dag.extract.gates: one test per gate of the paper's Table 2 (§4.3), predicate normalisation
(§4.5), Concept stubs, and the GateDecisionContract that holds the line."""

from __future__ import annotations

import json
from typing import Any

import polars as pl
import pytest

from pgrag_dag.config import GateSettings
from pgrag_dag.errors import ContractError
from pgrag_dag.extract.gates import apply_gates, gate_extraction
from pgrag_dag.frames import DECISION_SCHEMA
from pgrag_dag.gate_rules import Gate, name_gate, normalise_predicate
from pgrag_dag.operators.contracts import GateDecisionContract, validate

DEFAULT = GateSettings()


def _ent(name: str, etype: str = "Person", **kw: Any) -> dict[str, Any]:
    return {
        "name": name,
        "type": etype,
        "description": kw.get("description", ""),
        "aliases": kw.get("aliases", []),
    }


def _tri(s: str, p: str, o: str, **kw: Any) -> dict[str, Any]:
    return {
        "subject": s,
        "predicate": p,
        "object": o,
        "description": "",
        "negated": False,
        "confidence": kw.get("confidence", 0.9),
        "valid_from": None,
        "valid_to": None,
    }


def _gate(parsed: dict[str, Any], settings: GateSettings = DEFAULT) -> pl.DataFrame:
    return pl.DataFrame(gate_extraction(7, 0, parsed, settings), schema=DECISION_SCHEMA)


def _triple_verdicts(frame: pl.DataFrame) -> list[tuple[Any, ...]]:
    return (
        frame.filter(pl.col("kind") == "triple")
        .select("subject", "predicate", "object", "accepted", "gate", "offending_value")
        .rows()
    )


def _accepted_entity_names(frame: pl.DataFrame) -> list[str]:
    return frame.filter((pl.col("kind") == "entity") & pl.col("accepted"))["name"].to_list()


LOVELACE, BABBAGE, ENGINE = "Ada Lovelace", "Charles Babbage", "Analytical Engine"


@pytest.mark.parametrize(
    "predicate", ["relates_to", "associated_with", "see_also", "connected_to", "Related To"]
)
def test_vague_predicates_are_rejected(predicate: str) -> None:
    frame = _gate(
        {"entities": [_ent(LOVELACE), _ent(BABBAGE)], "triples": [_tri(LOVELACE, predicate, BABBAGE)]}
    )
    (row,) = _triple_verdicts(frame)
    assert row[3] is False and row[4] == Gate.VAGUE_PREDICATE.value
    assert row[5] == row[1] and row[1] in {
        "relates_to",
        "associated_with",
        "see_also",
        "connected_to",
        "related_to",
    }


def test_a_specific_predicate_between_listed_entities_is_accepted() -> None:
    frame = _gate(
        {"entities": [_ent(LOVELACE), _ent(BABBAGE)], "triples": [_tri(LOVELACE, "worked_with", BABBAGE)]}
    )
    assert _triple_verdicts(frame) == [(LOVELACE, "worked_with", BABBAGE, True, None, None)]
    assert _accepted_entity_names(frame) == [LOVELACE, BABBAGE]  # no extra stubs


@pytest.mark.parametrize("name", ["he", "they", "his father", "the company", "She", "Their estate"])
def test_pronominal_names_are_rejected(name: str) -> None:
    assert name_gate(name, DEFAULT) is Gate.PRONOMINAL_NAME
    frame = _gate({"entities": [_ent(name)], "triples": []})
    assert frame.select("accepted", "gate", "offending_value").rows() == [(False, "pronominal_name", name)]


@pytest.mark.parametrize(
    "name", ["The Manhattan Project", "The Manchester Guardian", "The Authority", "The Firmament"]
)
def test_proper_names_that_merely_begin_like_a_relative_description_survive(name: str) -> None:
    assert name_gate(name, DEFAULT) is None


def test_a_bare_conjunction_of_proper_names_is_rejected() -> None:
    assert name_gate("Ada Lovelace and Charles Babbage", DEFAULT) is Gate.CONJUNCTIVE_NAME
    frame = _gate({"entities": [_ent("Ada Lovelace and Charles Babbage")], "triples": []})
    assert frame.select("accepted", "gate").rows() == [(False, "conjunctive_name")]


@pytest.mark.parametrize(
    "name", ["Pride and Prejudice", "Leopold II, Grand Duke of Tuscany", "War and Peace", "Marks & Spencer"]
)
def test_titles_containing_and_or_commas_survive_the_conjunction_gate(name: str) -> None:
    assert name_gate(name, DEFAULT) is None
    frame = _gate({"entities": [_ent(name, "Work")], "triples": []})
    assert frame.select("name", "accepted", "gate").rows() == [(name, True, None)]


def test_a_conjunction_of_single_word_names_listed_separately_is_rejected() -> None:
    known = frozenset({"babbage", "lovelace"})
    assert name_gate("Babbage and Lovelace", DEFAULT) is None
    assert name_gate("Babbage and Lovelace", DEFAULT, known) is Gate.CONJUNCTIVE_NAME


@pytest.mark.parametrize("name", ["$18.4 billion", "2.5%", "$1,326", "12 million units", "€3bn", "about $40"])
def test_bare_quantities_are_rejected(name: str) -> None:
    assert name_gate(name, DEFAULT) is Gate.BARE_QUANTITY
    frame = _gate({"entities": [_ent(name, "Concept")], "triples": []})
    assert frame.select("accepted", "gate", "offending_value").rows() == [(False, "bare_quantity", name)]


@pytest.mark.parametrize("name", ["Apollo 11", "Boeing 737", "Windows 95"])
def test_names_containing_numbers_are_not_bare_quantities(name: str) -> None:
    assert name_gate(name, DEFAULT) is None


def test_names_over_200_characters_are_rejected_and_200_are_kept() -> None:
    at_limit = "A" + "b" * 199
    over = "A" + "b" * 200
    assert name_gate(at_limit, DEFAULT) is None
    frame = _gate({"entities": [_ent(over, "Concept"), _ent(at_limit, "Concept")], "triples": []})
    assert frame.select("accepted", "gate").rows() == [(False, "overlong_name"), (True, None)]
    assert name_gate("A" + "b" * 50, GateSettings(max_name_chars=40)) is Gate.OVERLONG_NAME


def test_possessive_role_gate_is_off_by_default_and_rejects_when_enabled() -> None:
    parsed = {"entities": [_ent("Babbage's father"), _ent("Ampère’s force law", "Concept")], "triples": []}
    assert _gate(parsed).select("accepted", "gate").rows() == [(True, None), (True, None)]
    on = GateSettings(possessive_gate=True)
    frame = _gate(parsed, on)
    assert frame.select("name", "accepted", "gate").rows() == [
        ("Babbage's father", False, "possessive_role"),
        ("Ampère’s force law", False, "possessive_role"),  # the documented false positive (Table 2)
    ]


def test_self_loops_are_rejected() -> None:
    frame = _gate(
        {"entities": [_ent(BABBAGE)], "triples": [_tri(BABBAGE, "corresponded_with", "charles  babbage")]}
    )
    assert _triple_verdicts(frame) == [
        (BABBAGE, "corresponded_with", "charles babbage", False, "self_loop", BABBAGE)
    ]


def test_relations_below_the_confidence_floor_are_rejected() -> None:
    parsed = {
        "entities": [_ent(LOVELACE), _ent(BABBAGE)],
        "triples": [
            _tri(LOVELACE, "met", BABBAGE, confidence=0.3),
            _tri(BABBAGE, "admired", LOVELACE, confidence=0.5),
        ],
    }
    assert [r[3:] for r in _triple_verdicts(_gate(parsed))] == [
        (False, "confidence_floor", "0.3"),
        (True, None, None),
    ]
    strict = GateSettings(confidence_floor=0.6)
    assert [r[4] for r in _triple_verdicts(_gate(parsed, strict))] == ["confidence_floor", "confidence_floor"]


def test_confidence_outside_zero_to_one_is_malformed() -> None:
    parsed = {
        "entities": [_ent(LOVELACE), _ent(BABBAGE)],
        "triples": [
            _tri(LOVELACE, "met", BABBAGE, confidence=7),
            _tri(LOVELACE, "met", BABBAGE, confidence="high"),
        ],
    }
    assert [r[4] for r in _triple_verdicts(_gate(parsed))] == ["malformed", "malformed"]


def test_a_triple_whose_endpoint_was_rejected_is_orphaned_and_makes_no_stub() -> None:
    parsed = {
        "entities": [_ent("he"), _ent(ENGINE, "Artifact")],
        "triples": [_tri("he", "designed", ENGINE), _tri("his father", "funded", "Difference Engine")],
    }
    frame = _gate(parsed)
    assert [r[3:] for r in _triple_verdicts(frame)] == [
        (False, "orphaned_endpoint", "he"),
        (False, "orphaned_endpoint", "his father"),
    ]
    # neither the rejected names nor the other endpoint of a refused triple became a vertex
    assert _accepted_entity_names(frame) == [ENGINE]
    assert frame.filter(pl.col("kind") == "entity").height == 2


@pytest.mark.parametrize(
    ("raw", "normalised"),
    [
        ("was_appointed_knight_of", "appointed_knight_of"),
        ("Has Been Elected To", "elected_to"),
        ("is being_considered_for", "considered_for"),
        ("Worked-With", "worked_with"),
        ("was", "was"),  # never stripped to nothing
    ],
)
def test_predicates_are_normalised(raw: str, normalised: str) -> None:
    assert normalise_predicate(raw) == normalised


def test_accepted_triples_carry_the_normalised_predicate() -> None:
    frame = _gate(
        {
            "entities": [_ent(LOVELACE), _ent(BABBAGE)],
            "triples": [_tri(BABBAGE, "was_appointed_knight_of", LOVELACE)],
        }
    )
    assert _triple_verdicts(frame)[0][1:4] == ("appointed_knight_of", LOVELACE, True)


def test_an_endpoint_not_listed_becomes_a_concept_stub() -> None:
    frame = _gate(
        {
            "entities": [_ent(LOVELACE, description="Mathematician")],
            "triples": [
                _tri(LOVELACE, "wrote_about", ENGINE),
                _tri(LOVELACE, "translated", "Menabrea’s memoir"),
            ],
        }
    )
    stubs = frame.filter((pl.col("kind") == "entity") & (pl.col("entity_type") == "Concept"))
    assert stubs.select("name", "description", "aliases", "accepted", "gate").rows() == [
        (ENGINE, "", [], True, None),
        ("Menabrea’s memoir", "", [], True, None),
    ]
    assert frame.filter(pl.col("kind") == "entity")["name"].to_list() == [
        LOVELACE,
        ENGINE,
        "Menabrea’s memoir",
    ]


def test_rejected_aliases_are_dropped_but_the_entity_kept() -> None:
    frame = _gate(
        {"entities": [_ent(BABBAGE, aliases=["Babbage", "he", "$5", "charles babbage"])], "triples": []}
    )
    assert frame.select("name", "aliases", "accepted").rows() == [(BABBAGE, ["Babbage"], True)]


def test_apply_gates_reads_only_ok_rows_keeping_document_order() -> None:
    # chunk 2 precedes chunk 1 in document order (a re-inserted document gets new ids): input order rules
    ok1 = json.dumps({"entities": [_ent("Second")], "triples": []})
    ok0 = json.dumps({"entities": [_ent("First")], "triples": []})
    raw = pl.DataFrame(
        {
            "chunk_id": [2, 1, 3],
            "pass": [0, 0, 0],
            "parse_status": ["ok", "ok", "parse_error"],
            "parsed": [ok1, ok0, None],
        }
    )
    frame = apply_gates(raw, DEFAULT)
    assert frame.select("chunk_id", "name").rows() == [(2, "Second"), (1, "First")]
    assert validate(GateDecisionContract, frame).height == 2


def test_gate_output_satisfies_the_contract() -> None:
    parsed = {
        "entities": [_ent(LOVELACE), _ent("he"), _ent("$18.4 billion")],
        "triples": [
            _tri(LOVELACE, "relates_to", BABBAGE),
            _tri(LOVELACE, "met", BABBAGE),
            _tri("he", "met", LOVELACE),
        ],
    }
    frame = _gate(parsed)
    assert frame.filter(~pl.col("accepted")).height == 4
    assert validate(GateDecisionContract, frame).height == frame.height


def _hand_row(**kw: Any) -> dict[str, Any]:
    return (
        dict.fromkeys(DECISION_SCHEMA)
        | {"chunk_id": 1, "pass": 0, "aliases": [], "gate": None, "offending_value": None}
        | kw
    )


@pytest.mark.parametrize(
    ("row", "check"),
    [
        (_hand_row(kind="entity", name="his father", accepted=True), "accepted_entities_pass_name_gates"),
        (_hand_row(kind="entity", name="$1,326", accepted=True), "accepted_entities_pass_name_gates"),
        (
            _hand_row(kind="entity", name="Ada Lovelace and Charles Babbage", accepted=True),
            "accepted_entities_pass_name_gates",
        ),
        (
            _hand_row(
                kind="triple", subject=LOVELACE, predicate="associated_with", object=BABBAGE, accepted=True
            ),
            "accepted_triples_pass_triple_gates",
        ),
        (
            _hand_row(
                kind="triple", subject=BABBAGE, predicate="met", object="charles babbage", accepted=True
            ),
            "accepted_triples_pass_triple_gates",
        ),
        (
            _hand_row(kind="triple", subject="they", predicate="met", object=BABBAGE, accepted=True),
            "accepted_triples_pass_triple_gates",
        ),
        (
            _hand_row(
                kind="triple",
                subject=LOVELACE,
                predicate="met",
                object=BABBAGE,
                confidence=0.2,
                accepted=True,
            ),
            "accepted_triples_pass_triple_gates",
        ),
        (
            _hand_row(
                kind="triple",
                subject=LOVELACE,
                predicate="met",
                object="Mary Somerville",
                confidence=0.9,
                accepted=True,
            ),
            "accepted_triples_have_accepted_endpoints",
        ),
        (_hand_row(kind="entity", name=LOVELACE, accepted=False), "rejection_names_gate"),
        (
            _hand_row(kind="entity", name=LOVELACE, accepted=True, gate="pronominal_name"),
            "rejection_names_gate",
        ),
    ],
    ids=[
        "pronominal",
        "quantity",
        "conjunctive",
        "vague",
        "self-loop",
        "pronominal-endpoint",
        "below-floor",
        "orphan-endpoint",
        "no-gate",
        "gate-on-accepted",
    ],
)
def test_gate_decision_contract_rejects_a_leaked_row_naming_the_check(
    row: dict[str, Any], check: str
) -> None:
    good = _hand_row(kind="entity", name=LOVELACE, accepted=True)
    frame = pl.DataFrame([good, row], schema=DECISION_SCHEMA)
    with pytest.raises(ContractError) as info:
        validate(GateDecisionContract, frame)
    assert info.value.contract == "GateDecisionContract"
    cases = info.value.failure_cases
    assert isinstance(cases, pl.DataFrame)
    assert (check, 1) in cases.select("check", "index").rows()
    assert {i for (i,) in cases.select("index").rows()} == {1}  # the good row is never blamed


@pytest.mark.parametrize(
    ("flag", "negated", "accepted"),
    [
        ("no", False, True),
        ("False", False, True),
        ("yes", True, True),
        (1, True, True),
        (None, False, True),
        ("perhaps", None, False),
        (2, None, False),
    ],
)
def test_a_negation_flag_is_read_not_coerced(flag: Any, negated: bool | None, accepted: bool) -> None:
    """``bool("no")`` is True: a string flag is read as what it says, anything else is malformed."""
    tri = {**_tri(LOVELACE, "knew", BABBAGE), "negated": flag}
    frame = _gate({"entities": [_ent(LOVELACE), _ent(BABBAGE)], "triples": [tri]}).filter(
        pl.col("kind") == "triple"
    )
    assert frame["accepted"].to_list() == [accepted] and frame["negated"].to_list() == [negated]
    if not accepted:
        assert frame["gate"].to_list() == [Gate.MALFORMED.value]


def test_a_single_alias_given_as_a_string_is_one_alias() -> None:
    frame = _gate({"entities": [{**_ent(LOVELACE), "aliases": "Ada"}], "triples": []})
    assert frame["aliases"].to_list() == [["Ada"]]


@pytest.mark.parametrize(
    ("raw", "stored", "identity"),
    [
        ("👩\u200d🔬 Lab", "👩\u200d🔬 Lab", "👩🔬 lab"),  # a ZWJ emoji sequence is stored whole
        ("❤️\u200d🔥", "❤️\u200d🔥", "❤️🔥"),
        ("کتاب\u200cخانه", "کتاب\u200cخانه", "کتابخانه"),  # a Persian ZWNJ too
        ("\u200dAda\u200b Love\u200dlace\u2060", "Ada Lovelace", "ada lovelace"),  # stray joiners go
        ("\u200fמשה\u200e", "\u200fמשה\u200e", "משה"),  # bidirectional marks: not part of the identity
        ("李白", "李白", "李白"),
    ],
)
def test_issue13_zero_width_characters_leave_the_identity_but_an_emoji_joiner_stays_in_the_stored_name(
    raw: str, stored: str, identity: str
) -> None:
    from pgrag_dag.gate_rules import clean_name, identity_key

    assert clean_name(raw) == stored
    assert identity_key(raw) == identity_key(stored) == identity
