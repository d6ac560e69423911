"""Interleaved A/B of ONNX files (2 threads, batch 8) on 256 MuSiQue passages (title + text), 3 rounds,
so that load from other processes on the machine hits every model alike.
usage: ab_ort.py MODEL.onnx [MODEL.onnx ...]
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import bench_candidate as bc
import numpy as np
from common import Timer, load_musique, minilm_dir

bc.BATCH = 8
texts = load_musique(with_title=True)[0][:256]
tok = str(minilm_dir() / "tokenizer.json")
models = {Path(p).name: bc.OnnxMiniLM(p, tok, threads=2) for p in sys.argv[1:]}
for m in models.values():
    m.encode(texts[:16], "passage")
rows = {k: [] for k in models}
for _r in range(3):
    for k, m in models.items():
        with Timer() as t:
            m.encode(texts, "passage")
        rows[k].append((len(texts) / t.wall, len(texts) / t.cpu, t.others_cores))
for k, v in rows.items():
    a = np.array(v)
    print(
        f"{k:28s} p/s {a[:, 0].mean():6.1f} (best {a[:, 0].max():5.1f})  p/cpu-s {a[:, 1].mean():6.1f}  "
        f"others {a[:, 2].mean():.2f} cores"
    )
