"""The answer a user can see without a model (issue 26 item 4; the offline stand-in for §7.5): the sentences
of the retrieved passages closest to the question, by the real local embedder (MiniLM), over a corpus the real
pipeline indexed."""

from __future__ import annotations

import numpy as np
import pytest

from pgrag_dag.engine import Engine
from pgrag_dag.extract.cooccurrence import sentences_of
from pgrag_dag.operate.reembed import reembed_realm
from pgrag_dag.pipeline import index_documents
from pgrag_dag.providers.embedding import Embedder, InputKind
from pgrag_dag.query import QueryParam, QueryResult, extractive_answer, query_data
from pgrag_dag.query.citations import sources
from pgrag_dag.query.extractive import LIKELY_MARGIN, SENTENCES_PER_CHUNK, SOURCES_HEADER, extractive_lines
from tests.fix_corpus import SmallCorpus

QUESTION = "In which year did Ada Lovelace write her notes on the Analytical Engine?"
ANSWER = "Ada Lovelace wrote notes on the Analytical Engine in 1843."
"""The one sentence of the corpus (tests/fix_corpus.py, 02_lovelace.txt) that answers QUESTION."""


def index_with_local_embedder(
    corpus: SmallCorpus, realm: str, monkeypatch: pytest.MonkeyPatch, *, communities: bool = False
) -> Engine:
    """Index ``corpus`` into ``realm.main`` with the pipeline, then re-embed the realm with the local MiniLM
    model (the test session embeds by word hashing, tests/fix_pg.py); the engine returned, and any engine
    made after it in the test, uses the local model."""
    index_documents(corpus.engine(), realm, "main", communities=communities)
    monkeypatch.delenv("PGRAG_EMBEDDING__MODEL")
    local = corpus.engine()
    assert local.settings.embedding.model == "local/all-MiniLM-L6-v2"
    assert reembed_realm(local, realm)["reembedded"]
    return local


class _Recording:
    """The real embedder, recording each call's kind and texts (nothing is replaced)."""

    def __init__(self, inner: Embedder) -> None:
        self.inner, self.model, self.dim, self.convention = inner, inner.model, inner.dim, inner.convention
        self.calls: list[tuple[str, list[str]]] = []

    def embed(self, texts: list[str], kind: InputKind = "passage") -> list[np.ndarray]:
        self.calls.append((kind, list(texts)))
        return self.inner.embed(texts, kind)


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


@pytest.fixture
def local(small_corpus: SmallCorpus, realm: str, monkeypatch: pytest.MonkeyPatch) -> Engine:
    return index_with_local_embedder(small_corpus, realm, monkeypatch)


def test_the_sentence_that_answers_is_ranked_first(local: Engine, realm: str) -> None:
    res = query_data(
        QUESTION, QueryParam(space="main"), dsn=local.dsn, realm=realm, embedder=local.embedder()
    )
    spy = _Recording(local.embedder())
    rows = extractive_answer(res, spy)

    first = rows[0]
    assert first["doc_key"] == "02_lovelace.txt" and first["likely"]
    assert first["sentences"][0]["text"] == ANSWER
    chunk = next(c for c in res.chunks if c["ref"] == first["ref"])
    assert ANSWER in chunk["text"] and first["chunk_index"] == chunk["chunk_index"]
    # the score is the cosine of the question (as a query) and the sentence (as a passage)
    q, s = local.embedder().embed([QUESTION], "query")[0], local.embedder().embed([ANSWER], "passage")[0]
    assert first["score"] == pytest.approx(_cos(q, s), abs=1e-5) and first["score"] > 0.4

    # every numbered passage, once, best sentence first within it and best passage first overall
    assert sorted(r["ref"] for r in rows) == sorted(s["ref"] for s in sources(res))
    assert [r["score"] for r in rows] == sorted((r["score"] for r in rows), reverse=True)
    for row in rows:
        assert 1 <= len(row["sentences"]) <= 2 and row["score"] == row["sentences"][0]["score"]
        assert [x["score"] for x in row["sentences"]] == sorted(
            (x["score"] for x in row["sentences"]), reverse=True
        )
        text = next(c["text"] for c in res.chunks if c["ref"] == row["ref"])
        assert all(x["text"] in [" ".join(p.split()) for p in sentences_of(text)] for x in row["sentences"])
        assert row["likely"] == (row["score"] >= first["score"] - LIKELY_MARGIN)
    # a passage on the Difference Engine is no likely answer to a question about the notes
    assert any(not r["likely"] for r in rows if "Difference Engine" in r["sentences"][0]["text"])

    # two embedder calls: the question as a query, every distinct candidate sentence as passages, once
    assert [kind for kind, _ in spy.calls] == ["query", "passage"] and spy.calls[0][1] == [QUESTION]
    passages = spy.calls[1][1]
    assert len(passages) == len(set(passages)) and ANSWER in passages


def test_k_bounds_the_sentences_and_the_lines_show_them(local: Engine, realm: str) -> None:
    res = query_data(
        QUESTION, QueryParam(space="main"), dsn=local.dsn, realm=realm, embedder=local.embedder()
    )
    rows = extractive_answer(res, local.embedder(), k=1)
    assert all(len(r["sentences"]) == 1 for r in rows) and rows[0]["sentences"][0]["text"] == ANSWER
    lines = list(extractive_lines(rows))
    assert lines[0] == SOURCES_HEADER
    assert lines[1] == (
        f"[{rows[0]['ref']}] 02_lovelace.txt · {rows[0]['title']} · chunk {rows[0]['chunk_index']} · "
        f"similarity {rows[0]['score']:.2f} · best match"
    )
    assert lines[2] == f"    {ANSWER}" and len(lines) == 1 + 2 * len(rows)
    with pytest.raises(ValueError, match="need k >= 1"):
        extractive_answer(res, local.embedder(), k=0)


def test_global_mode_has_no_passage_and_calls_no_embedder(local: Engine, realm: str) -> None:
    res = query_data(
        QUESTION,
        QueryParam(space="main", mode="global"),
        dsn=local.dsn,
        realm=realm,
        embedder=local.embedder(),
    )
    assert res.chunks == [] and res.relations  # ranked relations, no passage
    spy = _Recording(local.embedder())
    assert extractive_answer(res, spy) == [] and spy.calls == []


def test_headings_are_no_candidates_and_each_passage_gives_at_most_its_cap() -> None:
    """No database needed: any QueryResult with numbered passages will do (the Python API)."""
    from pgrag_dag.config.sections import EmbeddingSettings
    from pgrag_dag.providers.embedding import make_embedder

    embedder = _Recording(make_embedder(EmbeddingSettings(model="local/all-MiniLM-L6-v2")))
    filler = " ".join(f"Line {i} says nothing about machines at all." for i in range(30))
    res = QueryResult(question="When did Babbage design the Analytical Engine?", param=QueryParam(space="s"))
    res.chunks = [
        {"ref": 1, "doc_key": "long", "title": "Long", "chunk_index": 4, "space": "s", "text": filler},
        {
            "ref": 2,
            "doc_key": "engine",
            "title": "engine",
            "chunk_index": 0,
            "space": "s",
            "text": "Analytical Engine\nBabbage designed the Analytical Engine in 1837. It was not finished.",
        },
    ]
    rows = extractive_answer(res, embedder)
    assert [r["doc_key"] for r in rows] == ["engine", "long"] and [r["likely"] for r in rows] == [True, False]
    assert rows[0]["sentences"][0] == {
        "text": "Babbage designed the Analytical Engine in 1837.",
        "score": pytest.approx(rows[0]["score"]),
        "position": 0,  # the heading line "Analytical Engine" is no candidate
    }
    passages = embedder.calls[1][1]
    assert "Analytical Engine" not in passages
    assert sum(p.startswith("Line ") for p in passages) == SENTENCES_PER_CHUNK  # its first 16 of 30
    assert list(extractive_lines(rows))[1].startswith("[2] engine · chunk 0 · similarity ")
