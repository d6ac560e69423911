"""Embedders: litellm embedding models, or the deterministic SHA-256 feature-hashing embedder (§3.5).

Every embedder returns float32 numpy vectors of exactly ``dim`` dimensions, L2-normalised for the
hashing embedder; width mismatches and failures raise, never fall back silently.
"""

from __future__ import annotations

import hashlib
import re
import time
from typing import Protocol

import numpy as np

from pgrag_dag.config import EmbeddingSettings
from pgrag_dag.errors import ModelError, SchemaMismatchError

HASHING_MODEL = "hashing-sha256"
_TOKEN = re.compile(r"\w+", re.UNICODE)


class Embedder(Protocol):
    """``embed(texts) -> list of float32 arrays of shape (dim,)``; ``model`` names it in the realm registry."""

    model: str
    dim: int

    def embed(self, texts: list[str]) -> list[np.ndarray]: ...


class HashingEmbedder:
    """Deterministic feature hashing: identical vectors in every process (§3.5).

    Features are lowercase word unigrams and bigrams. SHA-256 of a feature gives its bucket
    (``digest[0:4] mod dim``), its sign (``digest[4]`` parity) and its magnitude (``0.5 + digest[5]/255``),
    never Python's salted ``hash``. Vectors are L2-normalised; a text with no word gets a fixed unit vector.
    """

    def __init__(self, dim: int = 384) -> None:
        if dim < 8:
            raise SchemaMismatchError("hashing embedder", ">= 8", dim)
        self.model = HASHING_MODEL
        self.dim = dim
        self._memo: dict[str, tuple[int, float]] = {}

    def _feature(self, token: str) -> tuple[int, float]:
        hit = self._memo.get(token)
        if hit is None:
            d = hashlib.sha256(token.encode("utf-8")).digest()
            sign = 1.0 if d[4] & 1 else -1.0
            hit = (int.from_bytes(d[0:4], "big") % self.dim, sign * (0.5 + d[5] / 255.0))
            if len(self._memo) < 500_000:
                self._memo[token] = hit
        return hit

    def embed_one(self, text: str) -> np.ndarray:
        """One text → float32 vector of shape (dim,), unit L2 norm."""
        words = [w.lower() for w in _TOKEN.findall(text)]
        feats = [self._feature(f) for f in words + [f"{a} {b}" for a, b in zip(words, words[1:])]]
        if feats:
            buckets, values = zip(*feats)
            vec = np.bincount(buckets, weights=values, minlength=self.dim).astype(np.float32)
        else:
            vec = np.zeros(self.dim, dtype=np.float32)
        norm = float(np.linalg.norm(vec))
        if norm == 0.0:
            vec[0] = 1.0
            return vec
        return vec / norm

    def embed(self, texts: list[str]) -> list[np.ndarray]:
        return [self.embed_one(t) for t in texts]


class LiteLLMEmbedder:
    """Embeddings from any litellm embedding model, in batches, with a per-call wall-clock deadline.

    Raises :class:`ModelError` when a batch fails before its deadline and :class:`SchemaMismatchError`
    when the model returns vectors of another width than configured.
    """

    def __init__(self, settings: EmbeddingSettings, *, deadline_s: float = 120.0) -> None:
        self.model = settings.model
        self.dim = settings.dim
        self.settings = settings
        self.deadline_s = deadline_s

    def embed(self, texts: list[str]) -> list[np.ndarray]:
        from pgrag_dag.llm import import_litellm

        litellm = import_litellm()
        out: list[np.ndarray] = []
        size = self.settings.batch_size
        for start in range(0, len(texts), size):
            batch = texts[start : start + size]
            deadline, last = time.monotonic() + self.deadline_s, ""
            while True:
                try:
                    resp = litellm.embedding(
                        model=self.model, input=batch, api_base=self.settings.api_base, api_key=self.settings.api_key
                    )
                    break
                except Exception as exc:
                    last = f"{type(exc).__name__}: {exc}"
                    if time.monotonic() + 1.0 > deadline:
                        raise ModelError(f"embedding model {self.model} failed within {self.deadline_s}s: {last}") from exc
                    time.sleep(1.0)
            for item in resp.data:
                emb = item["embedding"] if isinstance(item, dict) else item.embedding
                vec = np.asarray(emb, dtype=np.float32)
                if vec.shape != (self.dim,):
                    raise SchemaMismatchError(f"embedding model {self.model}", self.dim, int(vec.shape[0]))
                out.append(vec)
        return out


def make_embedder(settings: EmbeddingSettings) -> Embedder:
    """The embedder a realm's settings name: :class:`HashingEmbedder` for ``hashing-sha256``, else litellm."""
    if settings.model == HASHING_MODEL:
        return HashingEmbedder(settings.dim)
    return LiteLLMEmbedder(settings)
