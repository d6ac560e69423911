"""Context assembly: blocks, caps, clipping, references, rendering, the assembly report (paper §7.5, §8.3)."""

from __future__ import annotations

import logging
from typing import Any

import psycopg
import pytest

from pgrag_dag.errors import QueryError
from pgrag_dag.query import QueryParam
from pgrag_dag.query.assembly import (
    BLOCKS,
    CHARS_PER_TOKEN,
    CLIP_MARK,
    assemble,
    clip,
    place,
    render_relation,
)
from tests.query.test_query_modes import GraphBuilder, ask

_BASE = {"subject": "A", "predicate": "p", "object": "B", "negated": False}


def _chunk(ref: int, text: str) -> dict[str, Any]:
    return {"ref": ref, "text": text, "title": f"Doc {ref}", "doc_key": f"doc-{ref}", "chunk_index": 0}


# -- rendering -------------------------------------------------------------------------------------


def test_denials_render_as_not() -> None:
    assert render_relation({**_BASE, "negated": True}) == "(A) --[NOT p]--> (B)"
    assert (
        render_relation({**_BASE, "negated": True, "description": "never"}) == "(A) --[NOT p]--> (B): never"
    )


def test_validity_renders_beside_the_predicate_unless_turned_off() -> None:
    assert render_relation({**_BASE, "valid_from": "2023-05-10"}) == "(A) --[p]--> (B) [from 2023-05-10]"
    assert render_relation({**_BASE, "valid_from": "2022-01-01", "valid_to": "2022-03-31"}) == (
        "(A) --[p]--> (B) [valid 2022-01-01 to 2022-03-31]"
    )
    assert render_relation({**_BASE, "valid_to": "2020"}) == "(A) --[p]--> (B) [until 2020]"
    dated = {**_BASE, "negated": True, "valid_from": "2022", "valid_to": "2023", "superseded": True}
    assert render_relation(dated, validity=False) == "(A) --[NOT p]--> (B) [superseded]"


# -- caps and clipping -----------------------------------------------------------------------------


def test_clip_fits_the_limit_at_a_word_boundary() -> None:
    text = "word " * 100
    out = clip(text, 53)
    assert len(out) <= 53 and out.endswith(CLIP_MARK) and out.startswith("word word")
    assert clip("short", 10) == "short"
    assert clip("abcdefghij", 3) == "abc"


def test_an_overflowing_passage_is_clipped_not_dropped() -> None:
    placed, clipped = place(["x" * 100, "y" * 100, "z" * 10], 40, clippable=True)  # 160 characters
    assert clipped == 1 and placed[0] == "x" * 100 and placed[1].startswith("y") and len(placed[1]) == 60
    assert len(placed) == 2
    first, clipped = place(["a" * 1000], 10, clippable=True)
    assert clipped == 1 and len(first[0]) == 40  # the old assembler placed nothing here
    lines, clipped = place(["l" * 30, "m" * 30], 10, clippable=False)  # a relation line: whole or not at all
    assert (lines, clipped) == (["l" * 30], 0)
    assert place(["a", "b"], None, clippable=False) == (["a", "b"], 0)


def test_blocks_in_order_with_a_reference_list_and_a_report() -> None:
    built = assemble(
        communities=[{"title": "T", "report": "R"}],
        chunks=[_chunk(1, "one"), _chunk(2, "two")],
        entities=[{"name": "A", "entity_type": "Person", "description": ""}],
        relations=[_BASE],
    )
    ctx = built.context
    heads = [
        "-----Community reports-----",
        "-----Document passages-----",
        "-----Entities-----",
        "-----Relations-----",
    ]
    assert [ctx.index(h) for h in heads] == sorted(ctx.index(h) for h in heads)
    assert "[1] one" in ctx and "[2] two" in ctx
    assert "References:\n[1] Doc 1 (doc-1, chunk 0)\n[2] Doc 2 (doc-2, chunk 0)" in ctx
    assert built.report["passages"] == {
        "items_retrieved": 2,
        "items_placed": 2,
        "items_clipped": 0,
        "chars_retrieved": 6,
        "chars_placed": 6,
    }
    assert built.report["caps"] == {b: None for b in BLOCKS}
    assert built.report["total"]["items_placed"] == 5
    with pytest.raises(ValueError):
        assemble(communities=[], chunks=[], entities=[], relations=[], caps={"nope": 1})


def test_references_list_only_placed_passages() -> None:
    built = assemble(
        communities=[],
        chunks=[_chunk(1, "a" * 40), _chunk(2, "b" * 40)],
        entities=[],
        relations=[],
        caps={"passages": 10},
    )
    assert "[1] Doc 1" in built.context and "Doc 2" not in built.context
    assert built.report["passages"]["items_placed"] == 1 and built.report["passages"]["chars_placed"] == 40


# -- through the query path ------------------------------------------------------------------------


@pytest.fixture
def g(conn: psycopg.Connection, realm: str) -> GraphBuilder:
    b = GraphBuilder(conn, realm)
    b.rel("Ada Lovelace", "worked_with", "Charles Babbage", year=2001, valid_from="1833", valid_to="1852")
    b.rel("Ada Lovelace", "married_to", "Charles Babbage", negated=True, year=2002)
    b.rel("Ada Lovelace", "knows", "Mary Somerville", year=2005)
    b.rel("Charles Babbage", "designed", "Analytical Engine", year=2030, valid_from="1837")  # hop 2, newest
    b.rel("Analytical Engine", "inspired", "Difference Engine", year=2031)  # hop 3
    session = " ".join(f"Ada Lovelace session line {i:05d} about the engine." for i in range(400))[:14_000]
    assert len(session) == 14_000
    b.chunk("haystack", session, mentions=("Ada Lovelace",))
    b.chunk("notes", "Ada Lovelace wrote the notes.", mentions=("Ada Lovelace",))
    return b


def test_a_14000_character_passage_reaches_the_prompt_clipped_under_a_2000_token_cap(
    pg_dsn: str, realm: str, g: GraphBuilder
) -> None:
    whole = ask(pg_dsn, realm, "Ada Lovelace session line about the engine", top_k=1)
    haystack = next(c for c in whole.chunks if c["doc_key"] == "haystack")
    assert haystack["text"] in whole.context  # no cap by default: everything placed
    capped = ask(
        pg_dsn, realm, "Ada Lovelace session line about the engine", top_k=1, max_passage_tokens=2000
    )
    report = capped.assembly["passages"]
    assert capped.chunks[0]["doc_key"] == "haystack"
    assert report["items_placed"] >= 1 and report["items_clipped"] == 1
    assert report["chars_retrieved"] > 14_000 and 7_500 < report["chars_placed"] <= 2000 * CHARS_PER_TOKEN
    assert haystack["text"][:7_000] in capped.context and CLIP_MARK in capped.context
    assert f"[{capped.chunks[0]['ref']}] Haystack (haystack, chunk 0)" in capped.context
    assert capped.assembly["caps"]["passages"] == 2000


def test_relations_stay_hop_major_under_a_truncating_budget(
    pg_dsn: str, realm: str, g: GraphBuilder, caplog: pytest.LogCaptureFixture
) -> None:
    param: dict[str, Any] = {"top_k": 1, "max_hops": 3, "relation_channels": ["traversal"], "keywords": "off"}
    full = ask(pg_dsn, realm, "Ada Lovelace", **param)
    assert [(r["predicate"], r["hop"]) for r in full.relations] == [
        ("knows", 1),
        ("married_to", 1),
        ("worked_with", 1),
        ("designed", 2),
        ("inspired", 3),
    ]
    lines = [render_relation(r) for r in full.relations]
    budget = sum(len(x) for x in lines[:3]) // CHARS_PER_TOKEN + 1  # room for the three hop-1 lines only
    caplog.clear()  # the first query's line is captured too where an earlier test left INFO logging on
    with caplog.at_level(logging.INFO, logger="pgrag_dag.query"):
        cut = ask(pg_dsn, realm, "Ada Lovelace", max_relation_tokens=budget, **param)
    assert all(x in cut.context for x in lines[:3])
    assert (
        "designed" not in cut.context and "inspired" not in cut.context
    )  # newer, but farther: truncated first
    report = cut.assembly["relations"]
    assert (report["items_retrieved"], report["items_placed"], report["items_clipped"]) == (5, 3, 0)
    line = next(r.getMessage() for r in caplog.records if "query assembly" in r.getMessage())
    assert f"relations={report['chars_placed']}/{report['chars_retrieved']}chars(3/5)" in line


def test_not_and_validity_reach_the_prompt(pg_dsn: str, realm: str, g: GraphBuilder) -> None:
    ctx = ask(pg_dsn, realm, "Ada Lovelace", top_k=1).context
    assert "(Ada Lovelace) --[NOT married_to]--> (Charles Babbage)" in ctx
    assert "(Ada Lovelace) --[worked_with]--> (Charles Babbage) [valid 1833 to 1852]" in ctx
    assert "(Charles Babbage) --[designed]--> (Analytical Engine) [from 1837]" in ctx
    bare = ask(pg_dsn, realm, "Ada Lovelace", top_k=1, render_relation_validity=False).context
    assert "(Ada Lovelace) --[worked_with]--> (Charles Babbage)\n" in bare + "\n"
    assert "[valid" not in bare and "[from" not in bare
    assert "(Ada Lovelace) --[NOT married_to]--> (Charles Babbage)" in bare


def test_caps_are_validated() -> None:
    with pytest.raises(QueryError, match="max_passage_tokens"):
        QueryParam(space="alpha", max_passage_tokens=-1)
    assert QueryParam(space="alpha", max_relation_tokens=0).caps["relations"] == 0
