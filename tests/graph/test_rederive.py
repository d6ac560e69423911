"""Attributes follow support (issue 28): :func:`rederive_entity` and :func:`rederive_relation` fold the
records that remain with resolution's and the relations stage's rules, so nothing only removed support gave
survives."""

from __future__ import annotations

from typing import Any

from pgrag_dag.graph.rederive import entity_keys, rederive_entity, rederive_relation

BABBAGE = {
    "id": 7,
    "name": "Charles Babbage",
    "entity_type": "Person",
    "description": "Charles Babbage whispered the secret passphrase to Elena.",  # the removed document's
    "aliases": ["Babbage", "Chas. Babbage"],
}


def _ent(name: str, etype: str, description: str, *aliases: str) -> dict[str, Any]:
    return {"kind": "entity", "name": name, "entity_type": etype, "description": description,
            "aliases": list(aliases), "subject": None, "object": None}  # fmt: skip


def _tri(subject: str, obj: str) -> dict[str, Any]:
    return {"kind": "triple", "name": None, "entity_type": None, "description": None, "aliases": None,
            "subject": subject, "object": obj}  # fmt: skip


def test_an_entity_is_folded_again_from_the_records_that_remain() -> None:
    v = rederive_entity(
        BABBAGE,
        [
            _ent("Babbage", "Concept", "Babbage lived in London."),
            _ent(
                "Charles Babbage",
                "Person",
                "Charles Babbage designed the Analytical Engine in London.",
                "Babbage",
            ),
            _ent("Ada Lovelace", "Person", "Not about him."),  # another entity named in the same chunk
        ],
    )
    assert (v.id, v.name, v.entity_type) == (7, "Charles Babbage", "Person")
    assert v.description == "Charles Babbage designed the Analytical Engine in London."
    assert v.aliases == ["Babbage"] and v.changed  # "Chas. Babbage" came from the removed support only


def test_an_entity_only_a_triple_still_names_keeps_its_name_and_loses_its_description() -> None:
    v = rederive_entity(BABBAGE, [_tri("Babbage", "London"), _tri("Ada Lovelace", "Charles Babbage")])
    assert (v.name, v.entity_type, v.description, v.aliases) == ("Charles Babbage", "Person", "", ["Babbage"])
    unchanged = {**BABBAGE, "description": "", "aliases": ["Babbage"]}
    assert not rederive_entity(unchanged, [_tri("Charles Babbage", "X"), _tri("Babbage", "Y")]).changed
    # the full name came only from removed support: the remaining short form becomes canonical
    short = rederive_entity(BABBAGE, [_tri("Babbage", "London")])
    assert (short.name, short.aliases, short.description, short.changed) == ("Babbage", [], "", True)


def test_a_relation_is_grouped_again_from_its_remaining_triples() -> None:
    current = {"id": 3, "source_id": 1, "target_id": 2, "predicate": "worked_with", "negated": False,
               "confidence": 0.99, "payload": {"valid_from": "1830", "valid_to": "1852"}}  # fmt: skip
    triples = [
        {"chunk_id": 11, "pass": 0, "subject": "Ada", "predicate": "worked_with", "object": "Babbage",
         "description": "Ada worked with Babbage.", "negated": False, "confidence": 0.7, "valid_from": "1833",
         "valid_to": None},
        {"chunk_id": 12, "pass": 0, "subject": "Ada Lovelace", "predicate": "worked_with",
         "object": "Charles Babbage", "description": "Ada Lovelace worked with Charles Babbage for years.",
         "negated": False, "confidence": 0.8, "valid_from": None, "valid_to": "1843"},
        {"chunk_id": 12, "pass": 0, "subject": "Ada Lovelace", "predicate": "met",
         "object": "Charles Babbage", "description": "Another edge.", "negated": False, "confidence": 1.0,
         "valid_from": None, "valid_to": None},
    ]  # fmt: skip
    out = rederive_relation(
        current,
        [11, 12],
        triples,
        (entity_keys("Ada Lovelace", ["Ada"]), entity_keys("Charles Babbage", ["Babbage"])),
        ("Ada Lovelace", "Charles Babbage"),
    )
    assert out == {
        "id": 3,
        "description": "Ada Lovelace worked with Charles Babbage for years.",
        "chunk_ids": [11, 12],
        "weight": 2,
        "confidence": 0.8,
        "payload": {"valid_from": "1833", "valid_to": "1843"},
        "rendered": "Ada Lovelace worked_with Charles Babbage: "
        "Ada Lovelace worked with Charles Babbage for years.",
    }
    bare = rederive_relation(current, [99], [], ({"x"}, {"y"}), ("A", "B"))
    assert (bare["description"], bare["weight"], bare["rendered"]) == ("", 1, "A worked_with B")
