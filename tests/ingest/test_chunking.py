"""Tests for pgrag_dag.ingest.splitting: paragraph packing, sentence-aligned overlap (paper §4.1)."""

from __future__ import annotations

import hashlib
import json
import re

import polars as pl
import pytest

from pgrag_dag.errors import ContractError
from pgrag_dag.ingest.splitting import (
    CHUNK_COLUMNS,
    assemble_chunks,
    chunk_documents,
    chunk_text,
    split_sentences,
    unwrap_hard_wraps,
)
from pgrag_dag.operators.contracts import ChunkContract, validate

_ENDS_AT_SENTENCE = re.compile(r"[.!?][\"')\]]*\s+$")


def _paragraph(i: int) -> str:
    # ~70 characters, two sentences
    return f"Paragraph {i:02d} opens with a statement. It closes with a second one here."


def _carried(prev: str, nxt: str) -> str:
    """The longest suffix of ``prev`` that ``nxt`` starts with, followed by a paragraph break."""
    for k in range(len(prev), 0, -1):
        if nxt.startswith(prev[-k:]) and nxt[k : k + 2] == "\n\n":
            return prev[-k:]
    return ""


def _documents(*texts: str) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "doc_key": [f"doc{i}.txt" for i in range(len(texts))],
            "title": [f"Doc {i}" for i in range(len(texts))],
            "source": [f"corpus/doc{i}.txt" for i in range(len(texts))],
            "doc_order": list(range(len(texts))),
            "text": list(texts),
            "doc_hash": [hashlib.sha256(t.encode()).hexdigest() for t in texts],
            "metadata": ["{}"] * len(texts),
        }
    )


def test_paragraphs_are_packed_whole_within_the_budget() -> None:
    paras = [_paragraph(i) for i in range(6)]
    assert all(60 < len(p) < 100 for p in paras)
    chunks = chunk_text("\n\n".join(paras), chunk_chars=200, overlap_chars=0)
    # two paragraphs fit (2*len + 2 <= 200), a third does not
    assert chunks == ["\n\n".join(paras[i : i + 2]) for i in (0, 2, 4)]
    assert all(len(c) <= 200 for c in chunks)


def test_blank_lines_with_whitespace_separate_paragraphs_and_empty_ones_vanish() -> None:
    text = "First paragraph.\n   \n\n\nSecond paragraph.\n\n  \n"
    # packed together with the document's own separator between them (issue 13: chunks are substrings)
    assert chunk_text(text, chunk_chars=200, overlap_chars=0) == [
        "First paragraph.\n   \n\n\nSecond paragraph."
    ]
    assert chunk_text(text, chunk_chars=200, overlap_chars=0)[0] in text


def test_overlap_is_carried_and_starts_at_a_sentence_boundary() -> None:
    paras = [_paragraph(i) for i in range(8)]
    chunks = chunk_text("\n\n".join(paras), chunk_chars=200, overlap_chars=60)
    assert len(chunks) >= 3
    for prev, nxt in zip(chunks, chunks[1:]):
        tail = _carried(prev, nxt)
        assert tail, f"no overlap carried into {nxt[:40]!r}"
        assert len(tail) <= 60
        # the carried text begins a sentence: what precedes it in the previous chunk ends one
        assert _ENDS_AT_SENTENCE.search(prev[: -len(tail)]), prev[: -len(tail)][-30:]
        assert tail[0].isupper()
        assert tail in split_sentences(prev)
        # a chunk exceeds the budget only by its carried overlap
        assert len(nxt) - len(tail) - 2 <= 200


def test_zero_overlap_carries_nothing() -> None:
    paras = [_paragraph(i) for i in range(6)]
    chunks = chunk_text("\n\n".join(paras), chunk_chars=200, overlap_chars=0)
    for prev, nxt in zip(chunks, chunks[1:]):
        assert _carried(prev, nxt) == ""
    assert "\n\n".join(chunks) == "\n\n".join(paras)


def test_a_fact_straddling_a_chunk_boundary_appears_whole_in_the_next_chunk() -> None:
    subject = "Ada Lovelace wrote the first published algorithm."
    obj = "It was written for the Analytical Engine."
    p1 = (
        "Charles Babbage designed several calculating machines. His Difference Engine was never finished. "
        + subject
    )
    p2 = obj + " The engine was programmed with punched cards, like a Jacquard loom."
    text = f"{p1}\n\n{p2}"
    assert len(p1) + 2 + len(p2) > 200

    without = chunk_text(text, chunk_chars=200, overlap_chars=0)
    assert [c for c in without if subject in c and obj in c] == []  # the control: split without overlap

    chunks = chunk_text(text, chunk_chars=200, overlap_chars=80)
    assert len(chunks) == 2
    assert subject in chunks[0] and obj not in chunks[0]
    assert subject in chunks[1] and obj in chunks[1]
    assert chunks[1].startswith(subject + "\n\n" + obj)


def test_an_overlong_paragraph_is_split_into_sentence_runs() -> None:
    sentences = [f"Sentence number {i} of the long paragraph says a little more." for i in range(12)]
    para = " ".join(sentences)
    assert len(para) > 600
    chunks = chunk_text(para, chunk_chars=200, overlap_chars=0)
    assert len(chunks) >= 4
    assert all(len(c) <= 200 for c in chunks)
    # every sentence survives whole, in exactly one chunk, in order
    found = [s for c in chunks for s in split_sentences(c)]
    assert found == sentences


def test_an_overlong_sentence_is_hard_split_at_spaces() -> None:
    words = [f"word{i:03d}" for i in range(80)]
    sentence = " ".join(words)  # 639 characters, no sentence end
    chunks = chunk_text(sentence, chunk_chars=200, overlap_chars=0)
    assert len(chunks) >= 4
    assert all(0 < len(c) <= 200 for c in chunks)
    assert " ".join(chunks).split() == words  # no word was cut


def test_chunk_documents_builds_the_chunks_frame() -> None:
    long_text = "\n\n".join(_paragraph(i) for i in range(6))
    docs = _documents(long_text, "A short document about Ampère.")
    frame = chunk_documents(docs, chunk_chars=200, overlap_chars=0)
    assert frame.columns == CHUNK_COLUMNS
    assert frame.schema["chunk_index"] == pl.Int64 and frame.schema["doc_order"] == pl.Int64
    assert all(frame.schema[c] == pl.String for c in CHUNK_COLUMNS if c not in ("chunk_index", "doc_order"))
    assert frame.select("doc_key", "chunk_index").rows() == [
        ("doc0.txt", 0),
        ("doc0.txt", 1),
        ("doc0.txt", 2),
        ("doc1.txt", 0),
    ]
    last = frame.row(3, named=True)
    assert last["title"] == "Doc 1" and last["source"] == "corpus/doc1.txt" and last["doc_order"] == 1
    assert last["doc_hash"] == docs["doc_hash"][1]
    assert last["text"] == "A short document about Ampère."


def test_content_hash_is_the_sha256_of_the_chunk_text() -> None:
    frame = chunk_documents(
        _documents("Ampère’s law — naïve café.\n\nSecond paragraph here."), chunk_chars=200, overlap_chars=0
    )
    for text, digest in frame.select("text", "content_hash").rows():
        assert digest == hashlib.sha256(text.encode("utf-8")).hexdigest()


def test_chunk_contract_accepts_chunked_documents_and_rejects_a_tampered_hash() -> None:
    frame = chunk_documents(
        _documents("\n\n".join(_paragraph(i) for i in range(6))), chunk_chars=200, overlap_chars=40
    ).with_columns(chunk_id=pl.lit(None, pl.Int64))
    assert validate(ChunkContract, frame).height == frame.height

    tampered = frame.with_columns(
        content_hash=pl.when(pl.col("chunk_index") == 1)
        .then(pl.lit("0" * 64))
        .otherwise(pl.col("content_hash"))
    )
    with pytest.raises(ContractError) as info:
        validate(ChunkContract, tampered)
    cases = info.value.failure_cases
    assert isinstance(cases, pl.DataFrame)
    assert cases["check"].to_list() == ["hash_matches_text"]
    assert cases["index"].to_list() == [1]


# -- issue 13, item 3: chunks are real substrings of their document, with citable offsets ------------

_IRREGULAR = (
    "  Charles Babbage was an English polymath.  He designed the Difference Engine.\n"
    "The British government funded it for a decade.\n\n\n\n"
    "Ada Lovelace wrote notes on the Analytical Engine.   She described an algorithm for it.\n \t\n"
    + " ".join(f"Fact {i} about the engine is short." for i in range(20))
    + "\n\n\nThe end.\n"
)


@pytest.mark.parametrize("overlap", [0, 60])
def test_issue13_every_paragraph_pack_chunk_is_a_contiguous_substring_of_its_document(overlap: int) -> None:
    """Irregular separators (several blank lines, double spaces, a sentence ending a line) and an
    over-long paragraph cut into sentence runs with overlap: the document's own text, never re-joined."""
    chunks = chunk_text(_IRREGULAR, chunk_chars=200, overlap_chars=overlap)
    assert len(chunks) >= 5
    for c in chunks:
        assert c in _IRREGULAR, c
        assert c == c.strip()
    if overlap:  # the overlap is carried: the next chunk starts inside the previous one
        assert sum(nxt[:20] in prev for prev, nxt in zip(chunks, chunks[1:])) >= 3


def test_issue13_a_document_without_breaks_or_punctuation_is_split_at_the_size_limit() -> None:
    for text in ("x" * 5_000, "巴贝奇设计了差分机" * 600, " ".join(["word"] * 2_000)):
        chunks = chunk_text(text, chunk_chars=2_000, overlap_chars=200)
        assert len(chunks) >= 3 and all(0 < len(c) <= 2_000 for c in chunks)
        assert all(c in text for c in chunks)
        assert "".join(chunks).replace(" ", "") == text.replace(" ", "")  # nothing lost, nothing repeated


def test_issue13_assembled_chunks_carry_their_character_offsets() -> None:
    from pgrag_dag.pipeline.builtin_operators import ParagraphPackOptions, _paragraph_pack

    docs = _documents(_IRREGULAR, "Ampère’s law — naïve café.\n\nSecond paragraph here.")
    pieces = _paragraph_pack(docs, ParagraphPackOptions(chunk_chars=200, overlap_chars=60), None)  # type: ignore[arg-type]
    frame = assemble_chunks(docs, pieces)
    texts = dict(docs.select("doc_key", "text").iter_rows())
    for doc_key, text, meta in frame.select("doc_key", "text", "metadata").iter_rows():
        m = json.loads(meta)
        assert texts[doc_key][m["char_start"] : m["char_end"]] == text
        assert m["char_end"] - m["char_start"] == len(text)


def test_issue13_a_user_chunker_that_re_joins_text_gets_offsets_only_where_its_chunks_are_found() -> None:
    docs = _documents("One.\n\nTwo.\n\nOne.")
    pieces = pl.DataFrame(
        {
            "doc_key": ["doc0.txt"] * 3,
            "chunk_index": [0, 1, 2],
            "text": ["One.", "One. Two.", "One."],
            "metadata": [None, None, '{"char_start": 5, "char_end": 9}'],
        }
    )
    metas = [json.loads(m) for m in assemble_chunks(docs, pieces)["metadata"]]
    assert (metas[0]["char_start"], metas[0]["char_end"]) == (0, 4)
    assert "char_start" not in metas[1]  # not a substring: no offsets rather than wrong ones
    assert (metas[2]["char_start"], metas[2]["char_end"]) == (12, 16)  # a wrong claim is corrected


def test_hard_wrapped_prose_unwraps_and_headings_stay() -> None:
    """Dumas as Project Gutenberg wraps it: a sentence over three lines becomes one line; a heading, a short
    line and a paragraph break are kept (what ``pgrag query`` shows offline, sentence by sentence)."""
    text = (
        "CHAPTER IV\n\n"
        "She was from Tours and had a fine voice. Marie Michon was a\n"
        "very aristocratic person; like her sister the queen, she had been\n"
        "brought up at court.\n"
        "Short line\n"
        "next"
    )
    assert unwrap_hard_wraps(text) == (
        "CHAPTER IV\n\n"
        "She was from Tours and had a fine voice. Marie Michon was a very aristocratic person; like her "
        "sister the queen, she had been brought up at court.\n"
        "Short line\n"
        "next"
    )
    assert unwrap_hard_wraps("A line that ends a sentence well past forty characters.\nNext one.") == (
        "A line that ends a sentence well past forty characters.\nNext one."
    )
