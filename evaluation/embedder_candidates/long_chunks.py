"""Throughput on pgrag-dag-sized chunks: 2,000-character windows (the default chunk_chars) of the
demo corpus (wikipedia_babbage_lovelace), which MiniLM truncates at 256 word pieces.
usage: long_chunks.py CANDIDATE [CANDIDATE ...]   (names from bench_candidate.CANDIDATES)
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import numpy as np

import bench_candidate as bc
from common import CORPORA, Timer

bc.BATCH = 8
text = " ".join(p.read_text(errors="replace") for p in sorted((CORPORA / "wikipedia_babbage_lovelace").rglob("*.txt")))
text = " ".join(text.split())
chunks = [text[i : i + 2000] for i in range(0, len(text) - 2000, 1800)][:96]
print(f"{len(chunks)} chunks of 2,000 chars")
for name in sys.argv[1:]:
    e = bc.CANDIDATES[name]()
    e.encode(chunks[:8], "passage")
    with Timer() as t:
        e.encode(chunks, "passage")
    print(f"{name:28s} {len(chunks)/t.wall:6.1f} chunks/s  {len(chunks)/t.cpu:6.1f} per cpu-s  others={t.others_cores:.2f} cores", flush=True)
