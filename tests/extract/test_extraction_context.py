"""Document context, vocabulary in the prompt, and batching by document (paper §3.4, §4.1, §4.5)."""

from __future__ import annotations

import json
import re
import uuid

import polars as pl
import pytest

from pgrag_dag.config import ExtractionSettings, LLMSettings
from pgrag_dag.extract.model_extraction import DocumentContext, extract_chunks
from pgrag_dag.providers.llm import ModelClient
from pgrag_dag.testing.stub_server import StubServer
from pgrag_dag.vocabulary import Vocabulary

pytestmark = [pytest.mark.live, pytest.mark.usefixtures("conn")]  # conn creates the response cache
CHUNK = re.compile(r"<<<CHUNK\n(.*)\nCHUNK>>>", re.DOTALL)
NAMES = re.compile(r"Entities already identified in this document \(reuse these exact names\): (.*)")


def _answer(messages: list[dict[str, str]]) -> str:
    """Entities are the capitalised words of the chunk, plus a pronoun the context must never echo."""
    text = CHUNK.search(messages[-1]["content"]).group(1)  # type: ignore[union-attr]
    names = [w for w in dict.fromkeys(re.findall(r"\b[A-Z][a-z]+\b", text)) if w not in {"She", "The"}]
    ents = [{"name": n, "type": "Person", "description": "", "aliases": []} for n in names + ["she"]]
    return json.dumps({"entities": ents, "triples": []})


def _doc(doc_key: str, texts: list[str], first_id: int) -> pl.DataFrame:
    tag = uuid.uuid4().hex[:6]
    return pl.DataFrame(
        {
            "chunk_id": [first_id + i for i in range(len(texts))],
            "doc_key": [doc_key] * len(texts),
            "chunk_index": list(range(len(texts))),
            "title": [doc_key] * len(texts),
            "source": [doc_key] * len(texts),
            "text": [f"{t} [{tag}]" for t in texts],
        }
    )


def _client(pg_dsn: str, server: StubServer) -> ModelClient:
    return ModelClient(
        pg_dsn,
        LLMSettings(
            models=[f"openai/ctx-{uuid.uuid4().hex}"],
            api_base=server.base_url,
            api_key="x",
            deadline_s=5,
            max_retries=0,
        ),
    )


def _prompts(server: StubServer) -> dict[str, str]:
    """Chunk text → the user message that carried it."""
    out = {}
    for r in server.requests:
        user = r["body"]["messages"][-1]["content"]
        out[CHUNK.search(user).group(1)] = user  # type: ignore[union-attr]
    return out


def _names(user: str) -> list[str]:
    m = NAMES.search(user)
    return m.group(1).split("; ") if m else []


def test_each_chunk_sees_the_names_its_documents_earlier_batches_found(pg_dsn: str) -> None:
    doc = _doc(
        "a.txt",
        ["Babbage met Lovelace.", "She met Somerville.", "They met Faraday.", "Then Babbage again."],
        1,
    )
    with StubServer(_answer) as server:
        extract_chunks(
            doc, _client(pg_dsn, server), ExtractionSettings(gleaning_passes=0, batch_size=1, concurrency=1)
        )
        seen = _prompts(server)
    texts = doc["text"].to_list()
    assert _names(seen[texts[0]]) == []
    assert _names(seen[texts[1]]) == ["Babbage", "Lovelace"]
    assert _names(seen[texts[2]]) == ["Babbage", "Lovelace", "Somerville"]
    assert "she" not in _names(seen[texts[3]])  # a pronoun is never fed back
    assert _names(seen[texts[3]]) == ["Babbage", "Lovelace", "Somerville", "Faraday"]


def test_chunks_of_one_batch_share_the_context_of_the_batches_before(pg_dsn: str) -> None:
    doc = _doc("a.txt", ["Babbage.", "Lovelace.", "Somerville.", "Faraday."], 1)
    with StubServer(_answer) as server:
        extract_chunks(doc, _client(pg_dsn, server), ExtractionSettings(gleaning_passes=0, batch_size=2))
        seen = _prompts(server)
    texts = doc["text"].to_list()
    assert _names(seen[texts[0]]) == _names(seen[texts[1]]) == []
    assert _names(seen[texts[2]]) == _names(seen[texts[3]]) == ["Babbage", "Lovelace"]


def test_a_documents_prompts_do_not_depend_on_what_else_is_extracted(pg_dsn: str) -> None:
    a = _doc("a.txt", ["Babbage.", "Lovelace.", "Somerville."], 1)
    b = _doc("b.txt", ["Darwin.", "Faraday."], 10)
    settings = ExtractionSettings(gleaning_passes=0, batch_size=2)
    with StubServer(_answer) as server:
        extract_chunks(pl.concat([b, a]), _client(pg_dsn, server), settings)
        together = _prompts(server)
    with StubServer(_answer) as server:
        extract_chunks(a, _client(pg_dsn, server), settings)
        alone = _prompts(server)
    assert {t: together[t] for t in a["text"].to_list()} == alone


def test_the_context_is_capped_and_ranked_by_how_many_chunks_named_each_entity() -> None:
    ctx = DocumentContext(2)
    ctx.add("d", 0, ["Ada Lovelace", "London"])
    ctx.add("d", 1, ["Charles Babbage", "ada  lovelace"])
    ctx.add("d", 2, ["Charles Babbage", "his father"])
    assert ctx.names("d", 3) == ["Ada Lovelace", "Charles Babbage"]
    assert ctx.names("d", 1) == ["Ada Lovelace", "London"]
    assert ctx.names("other", 3) == []


def test_the_vocabulary_is_rendered_into_the_extraction_prompt(pg_dsn: str) -> None:
    doc = _doc("a.txt", ["Babbage designed it."], 1)
    with StubServer(_answer) as server:
        extract_chunks(
            doc,
            _client(pg_dsn, server),
            ExtractionSettings(gleaning_passes=0),
            vocabulary=Vocabulary.build(preset="biography"),
        )
        system = server.requests[0]["body"]["messages"][0]["content"]
    assert "Use one of these predicates" in system and "designed, built, invented" in system
