"""Tests for pgrag_dag.embedding: the deterministic SHA-256 hashing embedder and the litellm embedder
(paper §3.5: vectors comparable across processes; width mismatches raise, never fall back)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pgrag_dag.config import EmbeddingSettings
from pgrag_dag.embedding import HASHING_MODEL, HashingEmbedder, LiteLLMEmbedder, make_embedder
from pgrag_dag.errors import SchemaMismatchError
from pgrag_dag.stub_server import StubServer

TEXTS = ["Ada Lovelace wrote the first published algorithm.", "Charles Babbage", "Ampère’s force law", "", "!!!"]
REPO = Path(__file__).resolve().parent.parent


def test_hashing_vectors_are_identical_in_another_process() -> None:
    script = (
        "import json, sys\n"
        "from pgrag_dag.embedding import HashingEmbedder\n"
        "texts = json.loads(sys.stdin.read())\n"
        "print(json.dumps([v.tolist() for v in HashingEmbedder(384).embed(texts)]))\n"
    )
    # a different hash seed in the child: Python's salted hash() would give other buckets
    env = dict(os.environ, PYTHONHASHSEED="12345")
    out = subprocess.run([sys.executable, "-c", script], input=json.dumps(TEXTS), capture_output=True, text=True,
                         env=env, cwd=REPO, check=True, timeout=60)
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
    a, b, c = e.embed(["Charles Babbage designed engines", "charles BABBAGE designed ENGINES", "Tea in Darjeeling"])
    assert np.array_equal(a, b)
    assert float(a @ c) < 0.5
    # a text with no word gets the fixed unit vector
    empty, punct = e.embed(["", "!!!"])
    assert np.array_equal(empty, punct) and empty[0] == 1.0 and float(np.abs(empty[1:]).sum()) == 0.0


def test_hashing_embedder_refuses_a_width_below_eight() -> None:
    with pytest.raises(SchemaMismatchError):
        HashingEmbedder(4)


def test_make_embedder_chooses_by_model_name() -> None:
    assert isinstance(make_embedder(EmbeddingSettings(model=HASHING_MODEL, dim=64)), HashingEmbedder)
    assert isinstance(make_embedder(EmbeddingSettings(model="openai/text-embedding-3-small", dim=64)), LiteLLMEmbedder)


@pytest.mark.live
def test_litellm_embedder_returns_vectors_of_the_configured_width(stub_llm: StubServer) -> None:
    settings = EmbeddingSettings(model="openai/stub-emb", dim=384, api_base=stub_llm.base_url, api_key="x",
                                 batch_size=2)
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
