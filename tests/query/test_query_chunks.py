"""Chunk search channels — vector, full-text — and their RRF fusion, against real PostgreSQL (paper §7.3
applied to chunks; issue 12). Time and tenant scoping of the full-text channel are in
tests/query/test_query_temporal.py and tests/query/test_query_leaks.py beside the other channels'."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest

from pgrag_dag.config import load_settings
from pgrag_dag.errors import ConfigurationError, QueryError
from pgrag_dag.query import DEFAULT_CHUNK_CHANNELS, QueryParam, query_data
from pgrag_dag.store import retrieval
from tests.query.test_query_modes import EMB, GraphBuilder, _SpyEmbedder, ask

RARE_Q = "Who studied Zymurgy in the old brewery records?"


@pytest.fixture
def brewery(conn: psycopg.Connection, realm: str) -> GraphBuilder:
    """Short passages made of the question's common words, and one long passage that alone names the
    rare word: the hashing embedder (bag of hashed words) ranks it below the decoys."""
    b = GraphBuilder(conn, realm)
    for key, text in (
        ("d1", "The old brewery records were studied."),
        ("d2", "Who studied the old records?"),
        ("d3", "Old records of the brewery."),
        ("d4", "The brewery records, studied by the old clerk."),
        ("d5", "Records of the old brewery were studied again."),
    ):
        b.chunk(key, text)
    b.chunk(
        "ledger",
        "Ledgers of the abbey, kept by the cellarer over many winters, list Zymurgy among the crafts "
        "of the house, beside weaving, milling, dyeing, glazing and the keeping of bees in the orchard.",
    )
    return b


def test_fulltext_finds_a_chunk_by_a_rare_word_the_hashing_vector_ranks_low(
    conn: psycopg.Connection, pg_dsn: str, realm: str, brewery: GraphBuilder
) -> None:
    ledger = brewery.ids["chunk:alpha:ledger"]
    dense = [r["id"] for r in retrieval.chunk_search(conn, realm, "alpha", EMB.embed_one(RARE_Q), 10)]
    assert dense.index(ledger) >= 3  # the vector channel alone misses it at chunk_top_k 3
    assert ledger not in [c["id"] for c in ask(pg_dsn, realm, RARE_Q, mode="naive", chunk_top_k=3).chunks]
    lexical = retrieval.chunk_fulltext(conn, realm, "alpha", "Zymurgy", 3)
    assert (
        [r["id"] for r in lexical] == [ledger] and lexical[0]["score"] > 0 and lexical[0]["distance"] is None
    )
    assert set(lexical[0]) == set(retrieval.chunk_search(conn, realm, "alpha", EMB.embed_one(RARE_Q), 1)[0])
    hybrid = ask(pg_dsn, realm, RARE_Q, mode="naive", chunk_top_k=3, chunk_channels=["vector", "fulltext"])
    found = {c["id"]: c for c in hybrid.chunks}
    assert (
        ledger in found and found[ledger]["via"] == "fulltext" and found[ledger]["ranks"] == {"fulltext": 1}
    )
    assert found[ledger]["rank"] == 2  # tied with the vector channel's first: the vector channel goes first
    assert hybrid.keywords["low_level"] == [
        "Zymurgy"
    ]  # naive mode extracts keywords for the full-text channel
    assert "Zymurgy among the crafts" in hybrid.context


def test_a_text_without_lexemes_matches_nothing(
    conn: psycopg.Connection, realm: str, brewery: GraphBuilder
) -> None:
    for text in ("", "   ", "the of and", "?!"):
        assert retrieval.chunk_fulltext(conn, realm, "alpha", text, 5) == []
    assert retrieval.chunk_fulltext(conn, realm, "alpha", "brewery", 0) == []


def _unit(v: np.ndarray) -> np.ndarray:
    return (v / np.linalg.norm(v)).astype(np.float32)


FUSED_Q = "Which ledger names Quillwort?"


@pytest.fixture
def fused(conn: psycopg.Connection, realm: str) -> dict[str, int]:
    """Vector ranks v1, x, d (then far ones); full-text ranks f1 (the keyword thrice), x (once): x is
    second in both channels and first in neither."""
    b, qv, rng = GraphBuilder(conn, realm), EMB.embed_one(FUSED_Q), np.random.default_rng(7)

    def near(w: float) -> np.ndarray:
        r = rng.standard_normal(qv.shape)
        r -= (r @ qv) * qv  # orthogonal to the query: cosine = 1 / sqrt(1 + w²)
        return _unit(qv + w * _unit(r))

    b.chunk("v1", "An alpha passage.", embedding=qv)
    b.chunk("x", "The ledger names Quillwort once.", embedding=near(0.6))
    b.chunk("d", "A second passage.", embedding=near(1.2))
    b.chunk("f1", "Quillwort, Quillwort and Quillwort again.", embedding=near(8.0))
    for i in range(4):
        b.chunk(f"far{i}", f"Unrelated passage {i}.", embedding=near(20.0))
    return {k.split(":")[-1]: v for k, v in b.ids.items() if k.startswith("chunk:")}


@pytest.mark.parametrize("mode", ["naive", "mix", "local", "hybrid"])
def test_rrf_puts_the_chunk_both_channels_found_first(
    conn: psycopg.Connection, pg_dsn: str, realm: str, fused: dict[str, int], mode: str
) -> None:
    qv = EMB.embed_one(FUSED_Q)
    assert [r["id"] for r in retrieval.chunk_search(conn, realm, "alpha", qv, 3)] == [
        fused[k] for k in ("v1", "x", "d")
    ]
    assert [r["id"] for r in retrieval.chunk_fulltext(conn, realm, "alpha", "Quillwort", 3)] == [
        fused["f1"],
        fused["x"],
    ]
    res = ask(pg_dsn, realm, FUSED_Q, mode=mode, chunk_top_k=3, chunk_channels=["vector", "fulltext"])
    searched = [c for c in res.chunks if c["via"] != "mention"]
    assert [c["id"] for c in searched] == [fused["x"], fused["v1"], fused["f1"]]  # v1/f1 tie: vector first
    x = searched[0]
    assert x["via"] == "vector+fulltext" and x["ranks"] == {"vector": 2, "fulltext": 2}
    assert x["rrf_score"] == pytest.approx(2 / 62) and x["score"] == pytest.approx(
        1 / np.sqrt(1.36), abs=1e-3
    )
    assert searched[2]["via"] == "fulltext" and searched[2]["score"] is None
    assert [c["rank"] for c in res.chunks] == list(range(1, len(res.chunks) + 1))
    assert (
        res.channels["chunks"] == 3
        and res.channels["chunks_vector"] == 3
        and res.channels["chunks_fulltext"] == 2
    )


def test_chunk_channels_toggle_and_are_counted(pg_dsn: str, realm: str, fused: dict[str, int]) -> None:
    def run(chans: list[str], embedder: Any = EMB) -> Any:
        return query_data(
            FUSED_Q,
            QueryParam(
                space="alpha", mode="naive", chunk_top_k=3, chunk_channels=chans, collapse_duplicates=False
            ),
            dsn=pg_dsn,
            realm=realm,
            embedder=embedder,
        )

    vector = run(["vector"])
    assert vector.channels == {"chunks": 3, "chunks_vector": 3}
    assert [c["doc_key"] for c in vector.chunks] == ["v1", "x", "d"] and {
        c["via"] for c in vector.chunks
    } == {"vector"}
    assert [c["rrf_score"] for c in vector.chunks] == pytest.approx([1 / 61, 1 / 62, 1 / 63])
    assert vector.chunks[0]["score"] == pytest.approx(1.0, abs=1e-5)  # cosine similarity
    spy = _SpyEmbedder()
    lexical = run(["fulltext"], spy)
    assert (
        lexical.channels == {"chunks": 2, "chunks_fulltext": 2} and spy.seen == []
    )  # no vector read: not embedded
    assert [(c["doc_key"], c["via"], c["score"]) for c in lexical.chunks] == [
        ("f1", "fulltext", None),
        ("x", "fulltext", None),
    ]
    assert run(["fulltext", "vector"]).channels == {"chunks": 3, "chunks_vector": 3, "chunks_fulltext": 2}
    none = run([])
    assert none.channels == {"chunks": 0} and none.chunks == [] and none.context == ""


def test_the_fulltext_chunk_channel_is_off_by_default_as_measured() -> None:
    """Issue 12: on only if hybrid beats dense on both subsets' recall@5 — it did not (evaluation/README.md,
    "Chunk recall": MuSiQue +0.030, HotpotQA −0.005 with the local model)."""
    assert DEFAULT_CHUNK_CHANNELS == ("vector",) and QueryParam(space="alpha").chunk_channels == ("vector",)


def test_an_unknown_chunk_channel_is_refused(tmp_path: Path) -> None:
    with pytest.raises(QueryError, match=r"chunk_channels must be among vector, fulltext, got \('bm25',\)"):
        QueryParam(space="alpha", chunk_channels=["bm25"])  # type: ignore[list-item]
    with pytest.raises(QueryError, match="chunk_channels must be a list of strings"):
        QueryParam(space="alpha", chunk_channels="fulltext")  # type: ignore[arg-type]
    assert QueryParam(space="alpha", chunk_channels=["fulltext", "fulltext"]).chunk_channels == ("fulltext",)
    config = tmp_path / "pgrag.yaml"
    config.write_text("retrieval:\n  chunk_channels: [vector, bm25]\n", encoding="utf-8")
    with pytest.raises(ConfigurationError, match="retrieval: chunk_channels must be among vector, fulltext"):
        load_settings(config)
    config.write_text("retrieval:\n  chunk_channels: [fulltext]\n", encoding="utf-8")
    assert QueryParam.from_settings(load_settings(config).retrieval, space="alpha").chunk_channels == (
        "fulltext",
    )
