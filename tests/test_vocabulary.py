"""Predicate vocabulary: presets, snapping, aliases, inverses, configuration errors (paper §4.5, §5.2)."""

from __future__ import annotations

import pytest

from pgrag_dag.config import load_settings
from pgrag_dag.errors import ConfigurationError
from pgrag_dag.gate_rules import normalise_predicate
from pgrag_dag.vocabulary import PRESETS, Vocabulary, off_vocabulary

BIO = Vocabulary.build(preset="biography")


def test_presets_have_the_sizes_and_groups_the_paper_describes() -> None:
    assert len(PRESETS["biography"].terms) == 35
    assert len(PRESETS["finance"].terms) == 32 and len(PRESETS["finance"].groups) == 8
    assert ("generates_cash_flow", "consumes_cash") in PRESETS["finance"].groups
    assert ("grounds", "certifies") in PRESETS["finance"].groups
    assert set(PRESETS["narrative"].groups[0]) == {
        "friend_of",
        "enemy_of",
        "rival_of",
        "ally_of",
        "opponent_of",
    }


@pytest.mark.parametrize(
    ("extracted", "snapped"),
    [
        ("design", "designed"),
        ("designs", "designed"),
        ("designed", "designed"),
        ("works_with", "worked_with"),
        ("marries", "married"),
        ("was_born_in", "born_in"),
        ("collaborated_with", "worked_with"),  # the explicit alias map
    ],
)
def test_predicates_snap_onto_the_vocabulary(extracted: str, snapped: str) -> None:
    assert BIO.snap(normalise_predicate(extracted)) == snapped


def test_inverse_relations_are_never_merged_onto_their_converse() -> None:
    v = Vocabulary.build(terms=["educated", "taught"])
    assert v.snap("educated_by") == "educated_by"
    assert v.snap("taught_by") == "taught_by"


def test_predicates_off_the_vocabulary_survive_and_the_commonest_are_reported() -> None:
    assert BIO.snap("co_authored") == "co_authored"
    preds = ["funded", "co_authored", "co_authored", "lived_at", "designed", "co_authored", "lived_at"]
    assert off_vocabulary(preds, BIO, top=2) == [("co_authored", 3), ("lived_at", 2)]
    assert off_vocabulary(preds, Vocabulary()) == []


def test_an_unknown_preset_or_a_group_outside_the_vocabulary_is_a_configuration_error(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigurationError, match="unknown vocabulary preset 'poetry'"):
        Vocabulary.build(preset="poetry")
    with pytest.raises(ConfigurationError, match="not in the vocabulary"):
        Vocabulary.build(preset="narrative", groups=[["friend_of", "frenemy_of"]])
    cfg = tmp_path / "pgrag.yaml"
    cfg.write_text(
        "realms:\n  r:\n    spaces:\n      s:\n        preset: poetry\n        sources: [{path: docs}]\n"
    )
    with pytest.raises(ConfigurationError, match="unknown vocabulary preset 'poetry'"):
        load_settings(cfg)


def test_a_space_combines_a_preset_with_its_own_terms_aliases_and_groups(tmp_path) -> None:  # type: ignore[no-untyped-def]
    cfg = tmp_path / "pgrag.yaml"
    cfg.write_text(
        "realms:\n  r:\n    spaces:\n      s:\n        preset: biography\n        vocabulary: [patron_of]\n"
        "        predicate_aliases: {sponsored: patron_of}\n"
        "        exclusive_groups: [[married, sibling_of]]\n"
        "        sources: [{path: docs}]\n"
    )
    v = load_settings(cfg).space_spec("r", "s").vocabulary_model()
    assert "patron_of" in v.terms and "designed" in v.terms
    assert v.snap("sponsored") == "patron_of" and v.snap("collaborated_with") == "worked_with"
    assert v.groups == (("married", "sibling_of"),)


def test_single_valued_predicates_from_presets_and_configuration() -> None:
    finance = Vocabulary.build(preset="finance")
    assert (
        finance.single_valued["headquartered_in"] == "object" and finance.single_valued["cfo_of"] == "subject"
    )
    own = Vocabulary.build(preset="finance", single_valued={"cfo_of": "none", "owns": "object"})
    assert "cfo_of" not in own.single_valued and own.single_valued["owns"] == "object"
    assert Vocabulary.build(single_valued={"anything_goes": "subject"}).single_valued == {
        "anything_goes": "subject"
    }
    with pytest.raises(ConfigurationError, match="not in the vocabulary"):
        Vocabulary.build(preset="finance", single_valued={"married": "object"})
    with pytest.raises(ConfigurationError, match="no side"):
        Vocabulary.build(single_valued={"owns": "both"})
