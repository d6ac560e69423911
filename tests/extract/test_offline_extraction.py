"""Tests for pgrag_dag.extract.cooccurrence: noun-phrase entities and sentence co-occurrence, no model
(paper §4.1, §4.3), on the real Wikipedia articles of the demo corpus, through the real gates."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import polars as pl
import pytest
from pydantic import ValidationError

from pgrag_dag.config import GateSettings
from pgrag_dag.errors import ExtractionError
from pgrag_dag.extract.cooccurrence import (
    MODEL,
    CooccurrenceOptions,
    extract_cooccurrence,
    extract_document_cooccurrence,
    sentences_of,
)
from pgrag_dag.extract.gates import apply_gates
from pgrag_dag.frames import RAW_SCHEMA
from pgrag_dag.gate_rules import PRONOUNS, Gate, normalise_predicate
from pgrag_dag.ingest.sources import read_document, title_for
from pgrag_dag.ingest.splitting import chunk_documents, unwrap_hard_wraps
from pgrag_dag.operators.contracts import RawExtractionContract, gate_contract, validate
from pgrag_dag.vocabulary import PRESETS, Vocabulary
from tests.fix_corpus import SHARED_CORPORA

SHARED = SHARED_CORPORA / "wikipedia_babbage_lovelace"
DEMO = Path(__file__).resolve().parents[2] / "corpus" / "wikipedia"
ARTICLES = ("Ada_Lovelace.txt", "Analytical_Engine.txt", "Charles_Babbage.txt")
PREDICATE = "co_occurs_in_sentence"
VERSION = "offline-test-v1"


def _corpus_dir() -> Path:
    for d in (SHARED, DEMO):
        if all((d / a).is_file() for a in ARTICLES):
            return d
    pytest.skip(f"the Wikipedia articles are in neither {SHARED} nor {DEMO}")


@pytest.fixture(scope="module")
def chunks() -> pl.DataFrame:
    """The three articles chunked as the pipeline does (2,000 characters, 200 overlap), with chunk ids."""
    d = _corpus_dir()
    rows = []
    for order, name in enumerate(ARTICLES):
        text = read_document(d / name)
        rows.append(
            {
                "doc_key": name,
                "title": title_for(d / name),
                "source": name,
                "doc_order": order,
                "text": text,
                "doc_hash": hashlib.sha256(text.encode()).hexdigest(),
                "metadata": "{}",
            }
        )
    frame = chunk_documents(pl.DataFrame(rows), chunk_chars=2000, overlap_chars=200)
    return frame.with_row_index("chunk_id").with_columns(pl.col("chunk_id").cast(pl.Int64))


@pytest.fixture(scope="module")
def raw(chunks: pl.DataFrame) -> pl.DataFrame:
    return extract_cooccurrence(chunks, CooccurrenceOptions(), version=VERSION)


@pytest.fixture(scope="module")
def decisions(raw: pl.DataFrame) -> pl.DataFrame:
    return apply_gates(raw, GateSettings(), Vocabulary.build(preset="biography"))


def _chunk(chunks: pl.DataFrame, doc_key: str, index: int) -> dict:
    return chunks.filter((pl.col("doc_key") == doc_key) & (pl.col("chunk_index") == index)).row(0, named=True)


def _parsed(raw: pl.DataFrame, chunk_id: int) -> dict:
    return json.loads(raw.filter(pl.col("chunk_id") == chunk_id)["parsed"].item())


def test_output_is_the_raw_extractions_frame(chunks: pl.DataFrame, raw: pl.DataFrame) -> None:
    assert raw.schema == pl.Schema(RAW_SCHEMA)
    assert raw.height == chunks.height and raw["chunk_id"].to_list() == chunks["chunk_id"].to_list()
    validate(RawExtractionContract, raw)
    assert set(raw["pass"]) == {0} and set(raw["model"]) == {MODEL} == {"offline-cooccurrence"}
    assert set(raw["prompt_version"]) == {VERSION} and set(raw["parse_status"]) == {"ok"}
    assert raw["error"].null_count() == raw.height
    assert set(raw["prompt_tokens"]) == {0} and set(raw["completion_tokens"]) == {0}
    assert set(raw["cache_hit"]) == {False}
    assert (raw["raw_text"] == raw["parsed"]).all()
    for body in raw["parsed"]:
        obj = json.loads(body)
        assert set(obj) == {"entities", "triples"}
        for e in obj["entities"]:
            assert set(e) == {"name", "type", "description", "aliases"}
            words = e["name"].lower().split()  # an alias is a one-word short form of its name
            assert all(len(a.split()) == 1 and a.lower() in (words[0], words[-1]) for a in e["aliases"])
            assert len(e["description"]) <= 300
        for t in obj["triples"]:
            assert set(t) == {
                "subject",
                "predicate",
                "object",
                "confidence",
                "description",
                "negated",
                "valid_from",
                "valid_to",
            }
            assert t["negated"] is False and len(t["description"]) <= 300


def test_real_named_entities_are_found(decisions: pl.DataFrame) -> None:
    ents = decisions.filter((pl.col("kind") == "entity") & pl.col("accepted"))
    names = {n.lower() for n in ents["name"]}
    for expected in (
        "Charles Babbage",
        "Ada Lovelace",
        "Analytical Engine",
        "Difference Engine",
        "Luigi Menabrea",
        "Lord Byron",
        "Augusta Leigh",
        "Joseph Clement",
        "Science Museum",
        "Jacquard",
        "Alan Turing",
        "Michael Faraday",
        "Royal Society",
        "Luigi Federico Menabrea",
    ):
        assert expected.lower() in names, expected
    # a short form beside its one long form in a chunk is that name's alias, not a vertex of its own
    aliases = {(n, a) for n, al in ents.select("name", "aliases").iter_rows() for a in al}
    assert ("Luigi Menabrea", "Menabrea") in aliases and ("Charles Babbage", "Babbage") in aliases
    types = dict(zip(ents["name"], ents["entity_type"]))
    assert types["Lord Byron"] == "Person" and types["Countess of Lovelace"] == "Person"  # honorific
    assert types["Royal Society"] == "Organization" and types["Analytical Society"] == "Organization"
    assert types["Charles Babbage"] == "Concept"  # no cheap, reliable cue: not guessed


def test_no_pronoun_or_function_word_entities(decisions: pl.DataFrame) -> None:
    names = decisions.filter(pl.col("kind") == "entity")["name"].to_list()
    openers = {"the", "however", "in", "he", "she", "his", "her", "it", "this", "a", "an", "after", "during"}
    for n in names:
        low = n.lower()
        assert low not in PRONOUNS and low not in openers, n
        assert not re.match(r"(?i)(the|however|in|he|she|his|her|a|an|this)\s", n), n
        assert low not in {"december", "january", "monday", "english", "british"}, n  # months, demonyms alone
    # sentence-initial common nouns are not names ("Construction of this machine was never completed")
    assert not {"construction", "parts", "built", "design", "childhood", "biography"} & {
        n.lower() for n in names
    }


def test_dialogue_openers_and_typewriter_dashes_stay_out_of_names_in_dumas() -> None:
    """The Three Musketeers (Project Gutenberg #1257), chapters 2-3: a question opens on a modal verb
    ("Can Treville have set this ...") and a dash is typed as ``--`` after a name ("d’Artagnan--projects")."""
    path = SHARED_CORPORA / "dumas" / "01_the_three_musketeers_pg1257.txt"
    if not path.is_file():
        pytest.skip(f"{path} is not here")
    text = path.read_text(encoding="utf-8-sig").replace("\r\n", "\n")
    text = text[text.index("*** START OF") :]
    start = text.index("“Can Treville have set this")
    end = text.index("d’Artagnan--projects")
    passage = text[start - 2000 : start + 1000] + "\n\n" + text[end - 1500 : end + 500]
    (names,) = [
        {e["name"] for e in c["entities"]}
        for c in extract_document_cooccurrence([(passage, "The Three Musketeers")], CooccurrenceOptions())
    ]
    assert "Treville" in names and "d’Artagnan" in names
    assert not [n for n in names if n.split()[0] in {"Can", "Let", "Oh", "Ah", "Well", "See"} or "--" in n], (
        names
    )


def test_french_honorific_abbreviations_end_no_sentence_in_dumas() -> None:
    """The Three Musketeers, chapter 1: "whereas Mme. d’Artagnan was a woman, and still more, a mother." was
    cut after "Mme." — the closest sentence a query showed began "d’Artagnan was a woman" — and "Mme" and
    "MM" were names of their own; like "Mr." and "M.", the abbreviation now runs on into the name."""
    path = SHARED_CORPORA / "dumas" / "01_the_three_musketeers_pg1257.txt"
    if not path.is_file():
        pytest.skip(f"{path} is not here")
    text = path.read_text(encoding="utf-8-sig").replace("\r\n", "\n")
    start = text.index("just repeated would necessitate frequent employment.")
    paragraph = text[start : text.index("\n\n", start)]
    sentences = [" ".join(s.split()) for s in sentences_of(unwrap_hard_wraps(paragraph))]
    assert any(
        s.endswith("whereas Mme. d’Artagnan was a woman, and still more, a mother.") for s in sentences
    )
    assert not [s for s in sentences if s.startswith("d’Artagnan was a woman")]
    bonacieux = text[text.index("At that moment Mme. Bonacieux recovered") :][:300]
    mask = (SHARED_CORPORA / "dumas" / "06_man_in_the_iron_mask_pg2759.txt").read_text(encoding="utf-8-sig")
    chalais = mask[mask.index("in arresting MM. de Chalais") :][:70]
    (names,) = [
        {e["name"]: e["type"] for e in c["entities"]}
        for c in extract_document_cooccurrence(
            [(f"{bonacieux}\n\n{chalais}", "")],
            CooccurrenceOptions(),
        )
    ]
    assert names.get("Mme. Bonacieux") == "Person" and "MM. de Chalais" in names
    assert not {"Mme", "MM"} & set(names), names


def test_footnote_markers_and_brackets_never_glue_onto_names(
    chunks: pl.DataFrame, decisions: pl.DataFrame
) -> None:
    engine = "\n".join(chunks.filter(pl.col("doc_key") == "Analytical_Engine.txt")["text"])
    assert "[1]" in engine and "]]" in engine  # the input really has both
    for n in decisions.filter(pl.col("kind") == "entity")["name"]:
        assert not re.search(r"[\[\]()=_\"]|\d+\]", n), n
    assert all("[1]" not in s for s in sentences_of(engine))


def test_predicate_survives_gates_for_every_preset(raw: pl.DataFrame) -> None:
    assert normalise_predicate(PREDICATE) == PREDICATE
    for preset in ("biography", "finance", "narrative"):
        vocabulary = Vocabulary.build(preset=preset)
        assert vocabulary.snap(PREDICATE) == PREDICATE
        tri = apply_gates(raw, GateSettings(), vocabulary).filter(pl.col("kind") == "triple")
        assert tri.height > 500
        assert set(tri["predicate"]) == {PREDICATE} and set(tri["raw_predicate"]) == {PREDICATE}
        assert Gate.VAGUE_PREDICATE.value not in set(tri["gate"].drop_nulls())
        assert tri["accepted"].all()
    assert set(PRESETS) == {"biography", "finance", "narrative"}


def test_gate_decisions_hold_the_contract(decisions: pl.DataFrame) -> None:
    validate(gate_contract(GateSettings()), decisions)
    assert decisions["accepted"].all()


def test_concrete_triples_between_entities_sharing_a_sentence(
    chunks: pl.DataFrame, raw: pl.DataFrame, decisions: pl.DataFrame
) -> None:
    ada = _chunk(chunks, "Ada_Lovelace.txt", 0)
    assert "now commonly known as Ada Lovelace" in ada["text"] and "Charles Babbage's early" in ada["text"]
    tri = decisions.filter(
        (pl.col("kind") == "triple") & pl.col("accepted") & (pl.col("chunk_id") == ada["chunk_id"])
    )
    pairs = {(s, o): d for s, o, d in tri.select("subject", "object", "description").iter_rows()}
    # canonical order: by lowercase name, so "Ada Lovelace" is the subject
    assert ("Ada Lovelace", "Charles Babbage") in pairs and ("Charles Babbage", "Ada Lovelace") not in pairs
    assert pairs[("Ada Lovelace", "Charles Babbage")].startswith(
        "Augusta Ada King, Countess of Lovelace (10 December"
    )
    assert ("Ada Lovelace", "Analytical Engine") in pairs and (
        "Analytical Engine",
        "Charles Babbage",
    ) in pairs
    # Menabrea and the Notes share one sentence of the Ada article's second chunk
    second = _parsed(raw, _chunk(chunks, "Ada_Lovelace.txt", 1)["chunk_id"])
    menabrea = [t for t in second["triples"] if t["subject"] == "Luigi Menabrea" and t["object"] == "Notes"]
    assert len(menabrea) == 1
    assert "translated an article by Italian military engineer Luigi Menabrea" in menabrea[0]["description"]


def test_confidence_follows_the_sentence_count(chunks: pl.DataFrame, raw: pl.DataFrame) -> None:
    engine = _chunk(chunks, "Analytical_Engine.txt", 0)
    # counted by hand: two sentences name both the Analytical Engine and Charles Babbage —
    # "The ANALYTICAL ENGINE was a proposed ... Charles Babbage.[1][2]" and
    # "The Analytical Engine is one of the most successful achievements of Charles Babbage."
    # A third says only "Babbage", which this article also uses for his son Henry Babbage (and writes
    # "the Babbage ..."): not a short form of Charles Babbage, so it does not count
    assert "designed by English mathematician and computer pioneer Charles Babbage.[1][2]" in engine["text"]
    assert (
        "The Analytical Engine is one of the most successful achievements of Charles Babbage."
        in engine["text"]
    )
    both = [
        s
        for s in re.split(r"(?<=\.)(?:\[\d+\])*\s+", engine["text"])
        if "analytical engine" in s.lower() and "Babbage" in s
    ]
    assert len(both) == 3 and sum("Charles Babbage" in s for s in both) == 2
    parsed = _parsed(raw, engine["chunk_id"])
    assert next(e for e in parsed["entities"] if e["name"] == "Charles Babbage")["aliases"] == []
    edge = [
        t
        for t in parsed["triples"]
        if {t["subject"].lower(), t["object"].lower()} == {"analytical engine", "charles babbage"}
    ]
    assert len(edge) == 1 and edge[0]["confidence"] == 0.75 == min(1.0, 0.5 + 0.25 * (2 - 1))
    assert edge[0]["subject"] == "ANALYTICAL ENGINE"  # first surface form; lowercase order puts it first
    # every triple: its description is (a prefix of) a sentence naming both endpoints, and its confidence
    # is at most the formula's for the sentences in which both names occur as text (an upper bound on n:
    # "Babbage" occurs inside "Charles Babbage" without being that sentence's entity)
    for row in chunks.iter_rows(named=True):
        sentences = [" ".join(s.split()) for s in sentences_of(row["text"])]
        for t in _parsed(raw, row["chunk_id"])["triples"]:
            assert t["subject"].lower() < t["object"].lower()
            assert any(s.startswith(t["description"]) for s in sentences), t
            forms = {e["name"]: [e["name"], *e["aliases"]] for e in _parsed(raw, row["chunk_id"])["entities"]}
            n_text = sum(
                any(f.lower() in s.lower() for f in forms[t["subject"]])
                and any(f.lower() in s.lower() for f in forms[t["object"]])
                for s in sentences
            )
            assert t["confidence"] in (0.5, 0.75, 1.0) and t["confidence"] <= min(
                1.0, 0.5 + 0.25 * (n_text - 1)
            )


def test_max_entities_per_sentence_bounds_pairs(chunks: pl.DataFrame) -> None:
    one = chunks.filter((pl.col("doc_key") == "Ada_Lovelace.txt") & (pl.col("chunk_index") == 0))
    first_sentence = sentences_of(one["text"].item())[0]
    small = json.loads(
        extract_cooccurrence(one, CooccurrenceOptions(max_entities_per_sentence=2), version="v")[
            "parsed"
        ].item()
    )
    full = json.loads(extract_cooccurrence(one, CooccurrenceOptions(), version="v")["parsed"].item())
    in_first = [(t["subject"], t["object"]) for t in small["triples"] if t["description"] == first_sentence]
    assert in_first == [("Augusta Ada King", "Countess of Lovelace")]
    assert (
        len([t for t in full["triples"] if t["description"] == first_sentence]) == 15
    )  # 6 entities: C(6, 2)
    assert small["entities"] == full["entities"]


def test_deterministic(chunks: pl.DataFrame, raw: pl.DataFrame) -> None:
    again = extract_cooccurrence(chunks, CooccurrenceOptions(), version=VERSION)
    assert again.equals(raw) and again["raw_text"].to_list() == raw["raw_text"].to_list()
    backwards = extract_cooccurrence(chunks.reverse(), CooccurrenceOptions(), version=VERSION)
    assert backwards.reverse().equals(raw)  # a chunk's extraction depends on that chunk only


def test_options_are_validated() -> None:
    with pytest.raises(ValidationError, match="vague"):
        CooccurrenceOptions(predicate="co_occurs_with")
    with pytest.raises(ValidationError, match="normalised"):
        CooccurrenceOptions(predicate="Was Co-Occurring")
    with pytest.raises(ValidationError):
        CooccurrenceOptions(max_entities_per_sentence=1)
    with pytest.raises(ValidationError):
        CooccurrenceOptions(window="sentence")  # extra keys are refused
    assert CooccurrenceOptions(predicate="mentioned_together").predicate == "mentioned_together"


def test_empty_and_malformed_input() -> None:
    empty = pl.DataFrame(
        schema={
            "chunk_id": pl.Int64,
            "doc_key": pl.String,
            "chunk_index": pl.Int64,
            "title": pl.String,
            "source": pl.String,
            "text": pl.String,
        }
    )
    out = extract_cooccurrence(empty, CooccurrenceOptions(), version="v")
    assert out.height == 0 and out.schema == pl.Schema(RAW_SCHEMA)
    with pytest.raises(ExtractionError, match="text"):
        extract_cooccurrence(empty.drop("text"), CooccurrenceOptions(), version="v")
    dup = pl.DataFrame({"chunk_id": [1, 1], "title": ["T", "T"], "text": ["Ada met Charles Babbage.", "x"]})
    with pytest.raises(ExtractionError, match="unique"):
        extract_cooccurrence(dup, CooccurrenceOptions(), version="v")


def test_a_word_named_on_its_own_before_a_longer_name_is_no_short_form_of_it() -> None:
    """New-user trial: the FY18Q4 call says "Surface" and "LinkedIn" throughout; "Surface Go" and a
    sentence-initial "Take LinkedIn" made them short forms of those (every mention moved there). A word
    named on its own in two sentences before its longer name appears stays a name of its own."""
    path = SHARED_CORPORA / "msft_earnings_calls_graphrag" / "transcripts" / "TranscriptFY18Q4.txt"
    if not path.is_file():
        pytest.skip(f"{path} is not here")
    paragraphs = [p for p in path.read_text(encoding="utf-8").split("\n\n") if p.strip()]
    out = extract_document_cooccurrence([(p, "") for p in paragraphs], CooccurrenceOptions())
    records = [e for chunk in out for e in chunk["entities"]]
    assert {"Surface", "LinkedIn", "Surface Go"} <= {e["name"] for e in records}
    assert not [e["name"] for e in records if {"Surface", "LinkedIn"} & set(e["aliases"])]
