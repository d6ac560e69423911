"""Tests for pgrag_dag.providers.embedding: the deterministic SHA-256 hashing embedder and the litellm
embedder (paper §3.5: vectors comparable across processes; width mismatches raise, never fall back)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pgrag_dag.config import EmbeddingSettings
from pgrag_dag.errors import ModelError, SchemaMismatchError
from pgrag_dag.providers import embedding
from pgrag_dag.providers.embedding import (
    HASHING_MODEL,
    LOCAL_MODEL,
    SYMMETRIC,
    HashingEmbedder,
    LiteLLMEmbedder,
    LocalEmbedder,
    configured_convention,
    convention_for,
    make_embedder,
)
from pgrag_dag.testing.stub_server import StubServer

TEXTS = [
    "Ada Lovelace wrote the first published algorithm.",
    "Charles Babbage",
    "Ampère’s force law",
    "",
    "!!!",
]
REPO = Path(__file__).resolve().parents[2]


def test_hashing_vectors_are_identical_in_another_process() -> None:
    script = (
        "import json, sys\n"
        "from pgrag_dag.providers.embedding import HashingEmbedder\n"
        "texts = json.loads(sys.stdin.read())\n"
        "print(json.dumps([v.tolist() for v in HashingEmbedder(384).embed(texts)]))\n"
    )
    # a different hash seed in the child: Python's salted hash() would give other buckets
    env = dict(os.environ, PYTHONHASHSEED="12345")
    out = subprocess.run(
        [sys.executable, "-c", script],
        input=json.dumps(TEXTS),
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        check=True,
        timeout=60,
    )
    theirs = [np.asarray(v, dtype=np.float32) for v in json.loads(out.stdout)]
    ours = HashingEmbedder(384).embed(TEXTS)
    assert len(theirs) == len(ours) == len(TEXTS)
    for a, b in zip(ours, theirs):
        assert a.dtype == np.float32 and np.array_equal(a, b)


def test_hashing_vectors_have_unit_norm_and_the_configured_width() -> None:
    for dim in (8, 64, 384):
        vectors = HashingEmbedder(dim).embed(TEXTS)
        for v in vectors:
            assert v.shape == (dim,) and v.dtype == np.float32
            assert abs(float(np.linalg.norm(v)) - 1.0) < 1e-6


def test_hashing_vectors_separate_texts_and_ignore_case() -> None:
    e = HashingEmbedder(384)
    a, b, c = e.embed(
        ["Charles Babbage designed engines", "charles BABBAGE designed ENGINES", "Tea in Darjeeling"]
    )
    assert np.array_equal(a, b)
    assert float(a @ c) < 0.5
    # a text with no word gets the fixed unit vector
    empty, punct = e.embed(["", "!!!"])
    assert np.array_equal(empty, punct) and empty[0] == 1.0 and float(np.abs(empty[1:]).sum()) == 0.0


def test_hashing_vector_of_a_text_does_not_depend_on_its_batch() -> None:
    # embed() sums every text's features in one bincount (issue 30): rows must not bleed into each other,
    # and a text embedded alone, first, last or beside an empty one must give the same bits
    e = HashingEmbedder(64)
    alone = [e.embed_one(t) for t in TEXTS]
    for batch in (TEXTS, TEXTS[::-1], ["", *TEXTS, "Ada"]):
        got = dict(zip(batch, e.embed(batch)))
        for text, vector in zip(TEXTS, alone):
            assert np.array_equal(got[text], vector), text
    assert e.embed([]) == []


def test_hashing_embedder_refuses_a_width_below_eight() -> None:
    with pytest.raises(SchemaMismatchError):
        HashingEmbedder(4)


def test_make_embedder_chooses_by_model_name() -> None:
    assert isinstance(make_embedder(EmbeddingSettings(model=HASHING_MODEL, dim=64)), HashingEmbedder)
    assert isinstance(
        make_embedder(EmbeddingSettings(model="openai/text-embedding-3-small", dim=64)), LiteLLMEmbedder
    )


@pytest.mark.live
def test_litellm_embedder_returns_vectors_of_the_configured_width(stub_llm: StubServer) -> None:
    settings = EmbeddingSettings(
        model="openai/stub-emb", dim=384, api_base=stub_llm.base_url, api_key="x", batch_size=2
    )
    texts = TEXTS[:3]
    vectors = LiteLLMEmbedder(settings, deadline_s=10).embed(texts)
    assert [v.shape for v in vectors] == [(384,)] * 3
    # the stub serves the hashing embedder's vectors: they arrive unchanged and in order
    for got, want in zip(vectors, HashingEmbedder(384).embed(texts)):
        assert np.array_equal(got, want)
    embedding_calls = [r for r in stub_llm.requests if r["path"].endswith("/embeddings")]
    assert [len(r["body"]["input"]) for r in embedding_calls] == [2, 1]  # batched by batch_size
    assert embedding_calls[0]["body"]["model"] == "stub-emb"


@pytest.mark.live
def test_litellm_embedder_raises_schema_mismatch_when_the_width_differs(stub_llm: StubServer) -> None:
    settings = EmbeddingSettings(model="openai/stub-emb", dim=256, api_base=stub_llm.base_url, api_key="x")
    with pytest.raises(SchemaMismatchError) as info:
        LiteLLMEmbedder(settings, deadline_s=10).embed(["Charles Babbage"])
    assert (info.value.expected, info.value.found) == (256, 384)
    assert "stub-emb" in info.value.table


# -- query/passage conventions (issue 12) -------------------------------------------------------------


def test_known_conventions_by_model_name_and_their_overrides() -> None:
    def name(model: str, **kw: str) -> str:
        return convention_for(EmbeddingSettings(model=model, dim=8, **kw)).name

    assert name("openai/text-embedding-3-small") == SYMMETRIC
    assert name("cohere/embed-english-v3.0") == "input_type(query='search_query', passage='search_document')"
    assert name("voyage/voyage-3") == "input_type(query='query', passage='document')"
    assert name("ollama/nomic-embed-text") == "prefix(query='search_query: ', passage='search_document: ')"
    assert (
        name("huggingface/intfloat/multilingual-e5-small") == "prefix(query='query: ', passage='passage: ')"
    )
    # configuration wins field by field; "" turns a known field off
    assert name("huggingface/intfloat/e5-base", passage_prefix="") == "prefix(query='query: ', passage='')"
    assert name("cohere/embed-english-v3.0", query_input_type="", passage_input_type="") == SYMMETRIC
    assert (
        name("openai/my-e5", query_prefix="q: ", passage_prefix="p: ") == "prefix(query='q: ', passage='p: ')"
    )
    # the hashing and local models are symmetric whatever is configured for litellm models
    assert (
        configured_convention(EmbeddingSettings(model=HASHING_MODEL, dim=8, query_prefix="q: ")) == SYMMETRIC
    )


@pytest.mark.live
def test_litellm_embedder_sends_the_query_and_passage_prefixes(stub_llm: StubServer) -> None:
    settings = EmbeddingSettings(
        model="openai/stub-emb",
        dim=384,
        api_base=stub_llm.base_url,
        api_key="x",
        query_prefix="query: ",
        passage_prefix="passage: ",
    )
    embedder = LiteLLMEmbedder(settings, deadline_s=10)
    assert embedder.convention == "prefix(query='query: ', passage='passage: ')"
    (passage,) = embedder.embed(["Charles Babbage"])
    (query,) = embedder.embed(["Charles Babbage"], "query")
    inputs = [r["body"]["input"] for r in stub_llm.requests if r["path"].endswith("/embeddings")]
    assert inputs == [["passage: Charles Babbage"], ["query: Charles Babbage"]]
    assert np.array_equal(query, HashingEmbedder(384).embed_one("query: Charles Babbage"))
    assert not np.array_equal(query, passage)


@pytest.mark.live
def test_litellm_embedder_sends_the_providers_input_type_per_kind(stub_llm: StubServer) -> None:
    settings = EmbeddingSettings(
        model="openai/stub-emb",
        dim=384,
        api_base=stub_llm.base_url,
        api_key="x",
        query_input_type="search_query",
        passage_input_type="search_document",
    )
    embedder = LiteLLMEmbedder(settings, deadline_s=10)
    embedder.embed(["Ada"], "query")
    embedder.embed(["Ada"])
    bodies = [r["body"] for r in stub_llm.requests if r["path"].endswith("/embeddings")]
    assert [(b["input"], b.get("input_type")) for b in bodies] == [
        (["Ada"], "search_query"),
        (["Ada"], "search_document"),
    ]


# -- the local model (issue 12) ---------------------------------------------------------------------

LOCAL = EmbeddingSettings(model=LOCAL_MODEL, dim=384)


@pytest.fixture(scope="module")
def local() -> LocalEmbedder:
    return LocalEmbedder(LOCAL)


@pytest.mark.slow
def test_the_local_model_ranks_a_paraphrase_above_an_unrelated_sentence(local: LocalEmbedder) -> None:
    texts = [
        "Who translated Menabrea's paper on the Analytical Engine?",
        "Ada Lovelace rendered the Italian engineer's article about Babbage's calculating "
        "machine into English.",
        "The Uniform Penny Post was introduced in Britain in 1840.",
    ]
    query, paraphrase, unrelated = local.embed(texts, "query")
    for v in (query, paraphrase, unrelated):
        assert v.shape == (384,) and v.dtype == np.float32 and abs(float(np.linalg.norm(v)) - 1) < 1e-5
    assert float(query @ paraphrase) > float(query @ unrelated) + 0.3
    # the hashing embedder, sharing no word with the paraphrase, ranks the unrelated sentence above it
    hq, hp, hu = HashingEmbedder(384).embed(texts)
    assert float(hq @ hp) < float(hq @ hu)


def test_local_vectors_do_not_depend_on_batching_or_order(local: LocalEmbedder) -> None:
    """Each window is its own forward pass (issue 30 item 4: the int8 products quantise a pass's
    activations with one range, so batched windows would move each other's vectors)."""
    texts = TEXTS + [TEXTS[0] * 40]
    together = local.embed(texts)
    alone = [local.embed([t])[0] for t in texts]
    reversed_ = local.embed(texts[::-1])[::-1]
    for a, b, c in zip(together, alone, reversed_):
        assert float(a @ b) > 0.99999 and float(a @ c) > 0.99999
    assert local.embed([]) == []


LOCAL_VECTORS = json.loads((Path(__file__).parent / "local_vectors.json").read_text(encoding="utf-8"))


def test_local_vectors_stay_within_cosine_099_of_the_float32_products(local: LocalEmbedder) -> None:
    """``local_vectors.json``: eleven texts of the kinds the stage embeds (MuSiQue and HotpotQA passages,
    one past the 256-piece window, entity ``name: description`` and relation texts, a question, one
    word, accents and CJK) with the vectors of the model before its int8 products (issue 30 item 4). The
    model id is unchanged only while every text stays within cosine 0.99."""
    texts, before = LOCAL_VECTORS["texts"], np.array(LOCAL_VECTORS["vectors"], dtype=np.float32)
    now = np.array(local.embed(texts))
    cosines = (now * before).sum(axis=1)
    assert cosines.min() >= 0.99, dict(zip(texts, cosines.round(4)))
    assert cosines.mean() >= 0.995
    assert cosines.max() < 0.99999  # the int8 products are in use: not the same vectors


def test_the_int8_graph_is_derived_in_memory_and_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    """The rewrite is deterministic (its SHA-256 is recorded), rewrites the 30 products of the six layers
    that are not down-projections, and a graph of other bytes is refused, not run."""
    import hashlib

    from pgrag_dag.providers.onnx_int8 import int8_matmuls

    files = embedding._LOCAL_MODELS[LOCAL_MODEL]
    _, source = embedding._package_file(files.onnx_package, files.onnx_file, files.onnx_sha256, LOCAL_MODEL)
    graph, rewritten = int8_matmuls(source, model=LOCAL_MODEL)
    assert rewritten == 30 and graph.count(b"DynamicQuantizeMatMul") == 30
    assert b"DynamicQuantizeMatMul" not in source
    assert hashlib.sha256(graph).hexdigest() == files.int8_sha256
    assert int8_matmuls(source, model=LOCAL_MODEL)[0] == graph
    with pytest.raises(ModelError, match="no int8 weight product found"):
        int8_matmuls(graph, model=LOCAL_MODEL)  # already rewritten: nothing left of the expected shape
    monkeypatch.setitem(
        embedding._LOCAL_MODELS, LOCAL_MODEL, dataclasses.replace(files, int8_sha256="0" * 64)
    )
    with pytest.raises(
        ModelError, match=rf"the int8 graph derived from .*model\.onnx has SHA-256 {files.int8_sha256}"
    ):
        LocalEmbedder(LOCAL)


def test_a_text_longer_than_the_window_is_embedded_whole(local: LocalEmbedder) -> None:
    """Past 256 word pieces the rest of the text still counts (windows are averaged, not truncated)."""
    head = "Charles Babbage designed the Difference Engine and the Analytical Engine in London. " * 30
    tail = (
        "The recipe calls for two cups of flour, sugar, butter and a pinch of salt, baked for an hour. " * 12
    )
    whole, head_only, tail_only = local.embed([head + tail, head, tail])
    assert float(whole @ tail_only) > float(head_only @ tail_only) + 0.1
    assert float(whole @ head_only) > 0.7


def test_the_local_model_refuses_files_that_are_not_the_recorded_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    files = embedding._LOCAL_MODELS[LOCAL_MODEL]
    monkeypatch.setitem(
        embedding._LOCAL_MODELS, LOCAL_MODEL, dataclasses.replace(files, tokenizer_sha256="0" * 64)
    )
    with pytest.raises(ModelError, match=r"tokenizer\.json has SHA-256 be50c362.*expected 0000"):
        LocalEmbedder(LOCAL)
    monkeypatch.setitem(
        embedding._LOCAL_MODELS, LOCAL_MODEL, dataclasses.replace(files, onnx_package="no_such_wheel")
    )
    with pytest.raises(ModelError, match="package 'no_such_wheel' is not installed"):
        LocalEmbedder(LOCAL)


def test_the_local_model_refuses_another_width_and_unknown_names() -> None:
    with pytest.raises(SchemaMismatchError, match=r"embedding\.dim\): expected 384, found 768"):
        make_embedder(EmbeddingSettings(model=LOCAL_MODEL, dim=768))
    with pytest.raises(ModelError, match="unknown local embedding model 'local/bge-small'"):
        make_embedder(EmbeddingSettings(model="local/bge-small", dim=384))
    assert isinstance(make_embedder(LOCAL), LocalEmbedder)
    assert (
        EmbeddingSettings().model == LOCAL_MODEL
    )  # the default is the local model, not the hashing embedder
