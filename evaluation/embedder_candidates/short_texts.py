"""Batched throughput on short texts (~21 word pieces: the 200 MuSiQue + HotpotQA questions, x3),
a stand-in for the entity and relation descriptions that make up most of the demo's ~1,100 texts.
usage: short_texts.py CANDIDATE [CANDIDATE ...]
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import bench_candidate as bc
from common import DATASETS, Timer

bc.BATCH = 32
texts = [q for f in DATASETS.values() for q in f()[1]] * 3
for name in sys.argv[1:]:
    e = bc.CANDIDATES[name]()
    e.encode(texts[:8], "passage")
    with Timer() as t:
        e.encode(texts, "passage")
    print(f"{name:28s} {len(texts)/t.wall:7.1f} texts/s  {len(texts)/t.cpu:7.1f} per cpu-s  others={t.others_cores:.2f} cores", flush=True)
