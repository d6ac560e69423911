"""Tests for pgrag_dag.ingest.chunkers: token windows, Markdown/MediaWiki sections, paragraphs (paper §4.1).

Real text from the shared corpora (``../shared/corpora``, relative to the repository): the Ada
Lovelace article (MediaWiki ``==Section==`` headings, CRLF), Charles Babbage (``== Section ==``,
LF), the Analytical Engine (a 3,361-character sentence) and a slice of The Three Musketeers.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import polars as pl
import pytest
from pydantic import ValidationError

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from pgrag_dag.ingest.chunkers import (
    CHUNKER_OUTPUT_SCHEMA,
    MarkdownHeadingOptions,
    ParagraphOptions,
    TokenWindowOptions,
    markdown_heading_chunks,
    paragraph_chunks,
    paragraph_pack_chunks,
    token_window_chunks,
)
from pgrag_dag.pipeline.builtin_operators import ParagraphPackOptions  # noqa: E402
from tests.fix_corpus import SHARED_CORPORA  # noqa: E402

CORPORA = SHARED_CORPORA
WIKI = CORPORA / "wikipedia_babbage_lovelace"
_SENTENCE_BOUNDARY = re.compile(r"""[.!?]["')\]]*$""")


def _read(path: Path) -> str:
    """The file's exact text: bytes decoded, so CRLF line ends survive (read_text would fold them)."""
    return path.read_bytes().decode("utf-8-sig")


@pytest.fixture(scope="module")
def ada() -> str:
    text = _read(WIKI / "Ada_Lovelace.txt")
    assert "\r\n" in text and "==Biography==" in text
    return text


@pytest.fixture(scope="module")
def babbage() -> str:
    return _read(WIKI / "Charles_Babbage.txt")


@pytest.fixture(scope="module")
def engine() -> str:
    return _read(WIKI / "Analytical_Engine.txt")


@pytest.fixture(scope="module")
def musketeers() -> str:
    text = _read(CORPORA / "dumas" / "01_the_three_musketeers_pg1257.txt")
    body = text.split("*** START OF", 1)[1].split("\n", 1)[1].split("*** END OF", 1)[0]
    return body[20_000:45_000]


@pytest.fixture(scope="module")
def markdown(babbage: str) -> str:
    """A Markdown article assembled from real sentences of the Babbage article."""
    paras = [p.strip() for p in re.split(r"\n\s*\n", babbage) if p.strip() and not p.strip().startswith("=")]
    return "\n".join(
        [
            "Charles Babbage was an English polymath.",
            "",
            "# Charles Babbage",
            paras[1],
            "",
            "## Early life ##",
            "",
            "### Education",
            paras[2],
            "",
            "```python",
            "# a comment inside a fence, not a heading",
            "```",
            "",
            "## Work",
            "#### Empty subsection",
            "",
            "### Engines",
            paras[3],
            "",
            "#hashtag is not a heading",
        ]
    )


def _docs(**texts: str | None) -> pl.DataFrame:
    keys = list(texts)
    return pl.DataFrame(
        {
            "doc_key": keys,
            "title": keys,
            "source": [f"corpus/{k}" for k in keys],
            "doc_order": list(range(len(keys))),
            "text": list(texts.values()),
            "doc_hash": ["0" * 64] * len(keys),
            "metadata": ["{}"] * len(keys),
        },
        schema_overrides={"text": pl.String},
    )


def _rows(out: pl.DataFrame, docs: pl.DataFrame) -> list[dict]:
    """Check every invariant shared by the chunkers; return the rows with metadata parsed."""
    assert out.schema == pl.Schema(CHUNKER_OUTPUT_SCHEMA)
    assert out.columns == ["doc_key", "chunk_index", "text", "metadata"]
    texts = dict(docs.select("doc_key", "text").iter_rows())
    order = [k for k in docs["doc_key"] if k in set(out["doc_key"])]
    assert list(dict.fromkeys(out["doc_key"])) == order  # input document order, documents not interleaved
    for _key, group in out.group_by("doc_key", maintain_order=True):
        assert group["chunk_index"].to_list() == list(range(group.height))
    rows = []
    for row in out.iter_rows(named=True):
        assert row["text"] and row["text"] == row["text"].strip()
        assert row["text"] in texts[row["doc_key"]]
        row["metadata"] = json.loads(row["metadata"])
        assert isinstance(row["metadata"], dict)
        start, end = (
            row["metadata"].pop("char_start"),
            row["metadata"].pop("char_end"),
        )  # issue 13: citable offsets
        assert texts[row["doc_key"]][start:end] == row["text"]
        rows.append(row)
    return rows


def _containing(rows: list[dict], needle: str) -> dict:
    hits = [r for r in rows if needle in r["text"]]
    assert len(hits) == 1, f"{len(hits)} chunks contain {needle!r}"
    return hits[0]


# ------------------------------------------------------------------------------------- markdown_heading


def test_markdown_heading_on_wikipedia_keeps_the_heading_path(ada: str) -> None:
    docs = _docs(ada=ada)
    rows = _rows(markdown_heading_chunks(docs, MarkdownHeadingOptions()), docs)
    meta = lambda needle: _containing(rows, needle)["metadata"]  # noqa: E731
    assert meta("Augusta Ada King, Countess of Lovelace") == {"section": "", "heading_level": 0}
    assert meta("She was buried, at her request, next to her father") == {
        "section": "Biography > Death",
        "heading_level": 3,
    }
    assert meta("Throughout her illnesses, she continued her education.") == {
        "section": "Biography > Education",
        "heading_level": 3,
    }
    assert meta("In note G, she describes an algorithm for the Analytical Engine") == {
        "section": "First computer program",
        "heading_level": 2,
    }
    sections = list(dict.fromkeys(r["metadata"]["section"] for r in rows))
    # "Biography" has an empty body: no chunk of its own, but it heads the path of its subsections
    assert sections == [
        "",
        "Biography > Childhood",
        "Biography > Adult years",
        "Biography > Death",
        "Biography > Education",
        "Work",
        "First computer program",
        "Conceptual leap",
        "Controversy over extent of contributions",
        "In popular culture",
        "Commemoration",
    ]
    assert all(
        "==" not in r["text"] and "\r\n\r\n" not in r["text"][:2] for r in rows
    )  # heading lines excluded
    assert all(len(r["text"]) <= 2000 for r in rows)


def test_markdown_heading_spaced_mediawiki_headings_nest_four_deep(babbage: str) -> None:
    docs = _docs(babbage=babbage)
    rows = _rows(markdown_heading_chunks(docs, MarkdownHeadingOptions()), docs)
    assert _containing(rows, "detailed breakdown of the cost structure of book publishing")["metadata"] == {
        "section": "Academic > On the Economy of Machinery and Manufactures > Publishing",
        "heading_level": 4,
    }
    assert _containing(rows, "Babbage's congruence")["metadata"]["section"] == "See also"
    assert "Notes" not in {r["metadata"]["section"] for r in rows}  # empty section: no chunk


def test_markdown_heading_long_sections_split_at_paragraphs_then_sentences(ada: str) -> None:
    docs = _docs(ada=ada)
    # 500: every sentence of the article is shorter, so no cut needs to fall inside a sentence
    rows = _rows(markdown_heading_chunks(docs, MarkdownHeadingOptions(max_chars=500)), docs)
    assert all(len(r["text"]) <= 500 for r in rows)
    for r in rows:  # every cut is at a line start or right after a sentence end
        at = ada.index(r["text"])
        before = ada[:at].rstrip()
        assert at == 0 or ada[at - 1] == "\n" or _SENTENCE_BOUNDARY.search(before), ada[at - 40 : at + 20]
        end = at + len(r["text"])
        assert end == len(ada) or ada[end] in "\r\n" or _SENTENCE_BOUNDARY.search(r["text"])
    death = [r["text"] for r in rows if r["metadata"]["section"] == "Biography > Death"]
    assert len(death) == 2 and death[0].startswith("Ada Lovelace died at the age of thirty-six")
    # the short last paragraph is packed with the sentences before it
    assert death[1].endswith(
        "She was buried, at her request, next to her father at the Church of St. Mary "
        "Magdalene in Hucknall, Nottingham."
    )


def test_markdown_heading_atx_headings_fences_and_crlf(markdown: str) -> None:
    crlf = markdown.replace("\n", "\r\n")
    docs = _docs(lf=markdown, crlf=crlf)
    rows = _rows(markdown_heading_chunks(docs, MarkdownHeadingOptions()), docs)
    lf = [r for r in rows if r["doc_key"] == "lf"]
    assert [(r["metadata"]["section"], r["metadata"]["heading_level"]) for r in lf] == [
        ("", 0),
        ("Charles Babbage", 1),
        ("Charles Babbage > Early life > Education", 3),  # "## Early life ##": closing hashes dropped
        ("Charles Babbage > Work > Engines", 3),  # the empty "####" subsection left no chunk
    ]
    assert lf[0]["text"] == "Charles Babbage was an English polymath."
    assert "# a comment inside a fence, not a heading" in lf[2]["text"]
    assert lf[3]["text"].endswith("#hashtag is not a heading")
    assert [r["text"].replace("\r\n", "\n") for r in rows if r["doc_key"] == "crlf"] == [
        r["text"] for r in lf
    ]
    assert [r["metadata"] for r in rows if r["doc_key"] == "crlf"] == [r["metadata"] for r in lf]


# ------------------------------------------------------------------------------------- paragraph


def test_paragraph_one_chunk_per_paragraph(ada: str) -> None:
    docs = _docs(ada=ada)
    rows = _rows(paragraph_chunks(docs, ParagraphOptions()), docs)
    expected = [p.strip() for p in re.split(r"\r\n\s*\r\n", ada) if p.strip()]
    assert [r["text"] for r in rows] == expected
    assert [r["metadata"] for r in rows] == [{"paragraph": k} for k in range(len(expected))]
    assert _containing(rows, "She was buried, at her request")["text"] == (
        "She was buried, at her request, next to her father at the Church of St. Mary Magdalene in Hucknall, "
        "Nottingham."
    )


def test_paragraph_short_paragraphs_merge_into_the_next(ada: str) -> None:
    docs = _docs(ada=ada)
    rows = _rows(paragraph_chunks(docs, ParagraphOptions(min_chars=30)), docs)
    bio = _containing(rows, "==Biography==")
    assert bio["text"].startswith(
        "==Biography==\r\n\r\n===Childhood===\r\nAda Lovelace was born Augusta Ada Byron"
    )
    assert bio["metadata"] == {"paragraph": 3}
    assert _containing(rows, "On 16 January 1816, Annabella")["metadata"] == {"paragraph": 5}
    assert all(len(r["text"]) >= 30 for r in rows)
    # a short run at the end joins the previous chunk; a document that is all short stays one chunk
    docs = _docs(
        tail="Ada Lovelace died in 1852.\n\nEnd.\n\nFin",
        run="A.\n\nBb.\n\nCc.\n\nLovelace died.",
        short="A.\r\n\r\nB.",
    )
    rows = _rows(paragraph_chunks(docs, ParagraphOptions(min_chars=10)), docs)
    assert [(r["doc_key"], r["text"], r["metadata"]) for r in rows] == [
        ("tail", "Ada Lovelace died in 1852.\n\nEnd.\n\nFin", {"paragraph": 0}),
        ("run", "A.\n\nBb.\n\nCc.", {"paragraph": 0}),  # the run closes once it reaches 10 characters
        ("run", "Lovelace died.", {"paragraph": 3}),
        ("short", "A.\r\n\r\nB.", {"paragraph": 0}),
    ]


def test_paragraph_long_paragraphs_split_at_sentence_ends(engine: str) -> None:
    docs = _docs(engine=engine)
    rows = _rows(paragraph_chunks(docs, ParagraphOptions(max_chars=500)), docs)
    assert all(len(r["text"]) <= 500 for r in rows)
    paragraphs = [p.strip() for p in re.split(r"\n\s*\n", engine) if p.strip()]
    longest = max(range(len(paragraphs)), key=lambda k: len(paragraphs[k]))
    pieces = [r["text"] for r in rows if r["metadata"] == {"paragraph": longest}]
    assert len(pieces) >= 8
    # the pieces tile the paragraph in order, separated only by whitespace
    assert re.sub(r"\s+", "", "".join(pieces)) == re.sub(r"\s+", "", paragraphs[longest])
    # the 3,361-character sentence is hard-cut at spaces; other cuts fall on sentence ends
    whole_sentence_ends = [p for p in pieces if _SENTENCE_BOUNDARY.search(p)]
    assert 2 <= len(whole_sentence_ends) < len(pieces)
    # no word is cut in two, not even in the 3,361-character table (short pieces like "[1]" recur: skipped)
    for piece in [r["text"] for r in rows if engine.count(r["text"]) == 1]:
        at = engine.index(piece)
        assert at == 0 or engine[at - 1].isspace()
        assert at + len(piece) == len(engine) or engine[at + len(piece)].isspace()


# ------------------------------------------------------------------------------------- token_window


def _litellm():
    import litellm

    return litellm


@pytest.mark.parametrize("fixture", ["ada", "musketeers"])
def test_token_windows_size_overlap_and_offsets(fixture: str, request: pytest.FixtureRequest) -> None:
    text = request.getfixturevalue(fixture)
    litellm = _litellm()
    options = TokenWindowOptions(tokens=200, overlap_tokens=50)
    docs = _docs(doc=text)
    rows = _rows(token_window_chunks(docs, options), docs)
    ids = litellm.encode(model="gpt-4o", text=text)
    spans = [(r["metadata"]["token_start"], r["metadata"]["token_end"]) for r in rows]
    assert spans[0][0] == 0 and spans[-1][1] == len(ids)
    for (s0, e0), (s1, _e1) in zip(spans, spans[1:]):
        assert e0 - s1 == 50  # exactly the overlap
        assert 190 <= e0 - s0 <= 200  # full windows, but for a token given back after stripping
    assert spans[-1][1] - spans[-1][0] <= 200
    assert sum(e - s == 200 for s, e in spans[:-1]) >= 0.7 * (len(spans) - 1)
    for r, (s, e) in zip(rows, spans):
        assert len(litellm.encode(model="gpt-4o", text=r["text"])) <= 200
        assert r["text"] == litellm.decode(model="gpt-4o", tokens=ids[s:e]).strip()
    for prev, nxt, (s1, e0) in zip(rows, rows[1:], [(s1, e0) for (_, e0), (s1, _) in zip(spans, spans[1:])]):
        shared = litellm.decode(model="gpt-4o", tokens=ids[s1:e0]).strip()
        assert prev["text"].endswith(shared) and nxt["text"].startswith(shared)


def test_token_window_defaults_and_multibyte_characters() -> None:
    options = TokenWindowOptions()
    assert (options.tokens, options.overlap_tokens, options.tokenizer_model) == (600, 100, "gpt-4o")
    # characters whose UTF-8 bytes span several tokens (CJK, emoji) are never cut in half
    text = "Ada Lovelace 😀 エイダ・ラブレス 数学者 🧮 " * 40
    docs = _docs(mixed=text)
    rows = _rows(token_window_chunks(docs, TokenWindowOptions(tokens=7, overlap_tokens=3)), docs)
    assert len(rows) > 50 and "\ufffd" not in "".join(r["text"] for r in rows)


def test_token_window_lossy_tokenizer_names_the_document(ada: str, monkeypatch: pytest.MonkeyPatch) -> None:
    litellm = _litellm()
    decode = litellm.decode
    monkeypatch.setattr(litellm, "decode", lambda **kw: decode(**kw).replace("Byron", "BYRON"))
    with pytest.raises(ValueError, match="'ada_lovelace'.*do not decode back"):
        token_window_chunks(_docs(ada_lovelace=ada), TokenWindowOptions())


# ------------------------------------------------------------------------------------- shared


def paragraph_pack(documents: pl.DataFrame, options: ParagraphPackOptions) -> pl.DataFrame:
    return paragraph_pack_chunks(
        documents, chunk_chars=options.chunk_chars, overlap_chars=options.overlap_chars
    )


CHUNKERS = [
    (token_window_chunks, TokenWindowOptions(tokens=300, overlap_tokens=30)),
    (markdown_heading_chunks, MarkdownHeadingOptions()),
    (paragraph_chunks, ParagraphOptions()),
    (paragraph_pack, ParagraphPackOptions(chunk_chars=1000, overlap_chars=200)),  # the default chunker
]


@pytest.mark.parametrize(("chunker", "options"), CHUNKERS, ids=lambda v: getattr(v, "__name__", ""))
def test_empty_documents_produce_no_rows_and_order_is_kept(chunker, options, ada: str, babbage: str) -> None:
    empty = chunker(_docs(), options)
    assert empty.height == 0 and empty.schema == pl.Schema(CHUNKER_OUTPUT_SCHEMA)
    docs = _docs(babbage=babbage, blank="", spaces=" \r\n\r\n \t", null=None, ada=ada)
    out = chunker(docs, options)
    _rows(out, docs)
    assert list(dict.fromkeys(out["doc_key"])) == ["babbage", "ada"]
    assert out.filter(pl.col("doc_key") == "ada")["chunk_index"][0] == 0


@pytest.mark.parametrize(("chunker", "options"), CHUNKERS, ids=lambda v: getattr(v, "__name__", ""))
def test_output_satisfies_the_chunker_contract(chunker, options, ada: str, engine: str) -> None:
    from pgrag_dag.operators.contracts import ChunkerOutputContract, validate

    validate(ChunkerOutputContract, chunker(_docs(ada=ada, engine=engine), options))


def test_missing_columns_raise() -> None:
    with pytest.raises(ValueError, match="text"):
        paragraph_chunks(pl.DataFrame({"doc_key": ["a"]}), ParagraphOptions())


@pytest.mark.parametrize(
    ("model", "kwargs"),
    [
        (TokenWindowOptions, {"tokens": 100, "overlap_tokens": 100}),
        (TokenWindowOptions, {"tokens": 0, "overlap_tokens": 0}),
        (TokenWindowOptions, {"overlap_tokens": -1}),
        (TokenWindowOptions, {"tokenizer_model": ""}),
        (TokenWindowOptions, {"window": 5}),
        (MarkdownHeadingOptions, {"max_chars": 199}),
        (MarkdownHeadingOptions, {"max_char": 2000}),
        (ParagraphOptions, {"min_chars": 0}),
        (ParagraphOptions, {"min_chars": 500, "max_chars": 500}),
        (ParagraphOptions, {"max_chars": 99}),
    ],
)
def test_bad_options_raise_validation_error(model, kwargs) -> None:
    with pytest.raises(ValidationError):
        model(**kwargs)
