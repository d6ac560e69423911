"""Quick ORT settings sweep: threads x batch size on 384 MuSiQue passages (title + text), per model file.
usage: microbench_ort.py MODEL.onnx [MODEL.onnx ...]
Prints passages/s (wall), passages per own CPU-second, and the cores other processes used meanwhile.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import bench_candidate as bc
from common import Timer, load_musique, minilm_dir

texts = load_musique(with_title=True)[0][:384]
tok = str(minilm_dir() / "tokenizer.json")
for path in sys.argv[1:]:
    for threads in (1, 2):
        e = bc.OnnxMiniLM(path, tok, threads=threads)
        for batch in (8, 32):
            bc.BATCH = batch
            e.encode(texts[:16], "passage")
            with Timer() as t:
                e.encode(texts, "passage")
            print(
                f"{Path(path).name:24s} threads={threads} batch={batch:3d}  {len(texts) / t.wall:6.1f} p/s  "
                f"{len(texts) / t.cpu:6.1f} p/cpu-s  others={t.others_cores:.2f} cores",
                flush=True,
            )
