"""Tests for pgrag_dag.extract.boilerplate: Project Gutenberg's header and footer and a transcript's stage
directions are not read by the offline extractors (new-user trial on the shared corpora: the licence text
made entities such as "Project Gutenberg License", "Foundation" and the producers' names)."""

from __future__ import annotations

import pytest

from pgrag_dag.extract.boilerplate import readable_texts
from pgrag_dag.extract.cooccurrence import CooccurrenceOptions, extract_document_cooccurrence
from pgrag_dag.extract.nlp import extract_documents
from pgrag_dag.extract.nlp_pipeline import NlpOptions
from tests.fix_corpus import SHARED_CORPORA


def _shared(relative: str) -> str:
    path = SHARED_CORPORA / relative
    if not path.is_file():
        pytest.skip(f"{path} is not here (../shared/corpora or PGRAG_SHARED_DIR)")
    return path.read_text(encoding="utf-8-sig").replace("\r\n", "\n")


def _novel() -> tuple[str, str, str]:
    """The Three Musketeers as three chunks: the header with the book's first page, a page of the book, and
    its last page with the footer."""
    text = _shared("dumas/01_the_three_musketeers_pg1257.txt")
    start, end = text.index("*** START OF"), text.index("*** END OF")
    return text[: start + 700], text[start + 40_000 : start + 41_000], text[end - 600 : end + 4_000]


def test_the_gutenberg_header_credit_and_footer_are_blanked_one_character_for_one() -> None:
    header, page, footer = _novel()
    out = readable_texts([header, page, footer, "after the footer"])
    assert [len(t) for t in out] == [len(header), len(page), len(footer), len("after the footer")]
    assert out[1] == page
    assert "Gutenberg" not in out[0] and "Produced by" not in out[0] and "Roger Labbe" not in out[0]
    assert "THE THREE MUSKETEERS" in out[0]  # the book's own title page, after the credit
    assert "Gutenberg" not in out[2] and out[2].strip() and footer.startswith(out[2].rstrip())
    assert not out[3].strip()
    assert readable_texts(["no markers (here)\n(Operator Direction.)\nTHANKS"]) == [
        "no markers (here)\n                     \nTHANKS"
    ]


def test_no_entity_comes_from_the_licence_or_a_stage_direction() -> None:
    """Both offline extractors: no name from the Gutenberg header or footer, none from "(Operator
    Direction.)" of the FY16Q3 call; the book's own names stay."""
    header, page, footer = _novel()
    call = _shared("msft_earnings_calls_graphrag/transcripts/TranscriptFY16Q3.txt")
    direction = call[call.index("(Operator Direction.)") - 300 :][:600]
    nlp = extract_documents([[header, page, footer], [direction]], NlpOptions())
    cooc = [
        extract_document_cooccurrence([(t, "") for t in d], CooccurrenceOptions())
        for d in ([header, page, footer], [direction])
    ]
    for out in (nlp, cooc):
        names = {e["name"] for doc in out for chunk in doc for e in chunk["entities"]}
        assert not {n for n in names if "Gutenberg" in n or "Foundation" in n or "Operator" in n}
        assert not {"Roger Labbe", "David Widger", "United States"} & names
        assert {"Henry IV", "Louvre", "SATYA NADELLA"} <= names  # the book's and the call's own names
