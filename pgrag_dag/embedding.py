"""Embedders: litellm embedding models, or the deterministic SHA-256 feature-hashing embedder (§3.5).

Every embedder returns float32 numpy vectors of exactly ``dim`` dimensions, L2-normalised for the
hashing embedder; width mismatches and failures raise, never fall back silently.
"""

from __future__ import annotations

import hashlib
import re
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

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
        """Texts → one float32 unit vector of shape (dim,) each, in order (see :meth:`embed_one`)."""
        return [self.embed_one(t) for t in texts]


class LiteLLMEmbedder:
    """Embeddings from any litellm embedding model, in batches, each batch (with its retries) bounded by
    a wall-clock deadline: ``deadline_s`` seconds, by default ``settings.deadline_s``.

    A request waits at most half the deadline (never past it), so a hung endpoint is retried once
    rather than holding the whole deadline; a failed request is retried after 0.5, 1, 2, … s while
    the deadline allows.

    Raises :class:`ModelError` (one line naming the model, the deadline and the last error) when a
    batch fails within its deadline, and :class:`SchemaMismatchError` when the model returns vectors of
    another width than configured.
    """

    def __init__(self, settings: EmbeddingSettings, *, deadline_s: float | None = None) -> None:
        self.model = settings.model
        self.dim = settings.dim
        self.settings = settings
        self.deadline_s = settings.deadline_s if deadline_s is None else deadline_s

    def embed(self, texts: list[str]) -> list[np.ndarray]:
        """Texts → one float32 vector of shape (dim,) each, in order, ``settings.batch_size`` per request.

        Raises :class:`ModelError` / :class:`SchemaMismatchError` as the class says.
        """
        out: list[np.ndarray] = []
        size = self.settings.batch_size
        for start in range(0, len(texts), size):
            for item in self._request(texts[start : start + size]).data:
                emb = item["embedding"] if isinstance(item, dict) else item.embedding
                vec = np.asarray(emb, dtype=np.float32)
                if vec.shape != (self.dim,):
                    raise SchemaMismatchError(f"embedding model {self.model}", self.dim, int(vec.shape[0]))
                out.append(vec)
        return out

    def _request(self, batch: list[str]) -> Any:
        from pgrag_dag.llm import import_litellm
        from pgrag_dag.store.db import one_line

        litellm = import_litellm()
        deadline, attempt, last = time.monotonic() + self.deadline_s, 0, "no attempt made"
        while (remaining := deadline - time.monotonic()) > 0.05:
            attempt += 1
            wait_s = min(remaining, max(1.0, self.deadline_s / 2))
            try:
                return _within(wait_s, lambda: litellm.embedding(
                    model=self.model, input=batch, api_base=self.settings.api_base, api_key=self.settings.api_key,
                    timeout=wait_s, max_retries=0,
                ))
            except _Abandoned as exc:  # a provider's error, if one came before, says more
                last = last if attempt > 1 else f"no response within {exc.args[0]:.3g} s"
            except Exception as exc:  # litellm maps provider errors onto many exception types
                last = f"{type(exc).__name__}: {one_line(exc)}"
            pause = min(0.5 * 2.0 ** (attempt - 1), deadline - time.monotonic() - 0.05)
            if pause > 0:
                time.sleep(pause)
        raise ModelError(f"embedding model {self.model} failed after {attempt} attempt(s) within the "
                         f"{self.deadline_s:g} s deadline (embedding.deadline_s): {last}")


class _Abandoned(TimeoutError):
    """A request not answered within its wait (``args[0]``: the seconds waited)."""


def _within(wait_s: float, call: Callable[[], Any]) -> Any:
    """``call()`` on a daemon thread, waited for at most ``wait_s`` seconds: its result, or its exception
    re-raised, or :class:`_Abandoned` (the call is abandoned and ends on its own ``timeout``).

    litellm's OpenAI embedding handler reads ``max_retries=0`` as "the default" and retries twice
    inside one call, so its ``timeout`` alone does not bound a request."""
    box: dict[str, Any] = {}
    done = threading.Event()

    def run() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:  # handed to the waiting thread
            box["error"] = exc
        finally:
            done.set()

    threading.Thread(target=run, name="pgrag-embed", daemon=True).start()
    if not done.wait(wait_s):
        raise _Abandoned(wait_s)
    if "error" in box:
        raise box["error"]
    return box["value"]


def make_embedder(settings: EmbeddingSettings) -> Embedder:
    """The embedder a realm's settings name: :class:`HashingEmbedder` for ``hashing-sha256``, else a
    :class:`LiteLLMEmbedder` bounded by ``settings.deadline_s`` per batch."""
    if settings.model == HASHING_MODEL:
        return HashingEmbedder(settings.dim)
    return LiteLLMEmbedder(settings)
