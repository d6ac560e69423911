"""Demo-shaped throughput of embedding candidates (names from bench_candidate.CANDIDATES):

- ``long``: 2,000-character windows (the default chunk_chars) of the demo corpus (wikipedia_babbage_lovelace),
  which MiniLM truncates at 256 word pieces; batches of 8;
- ``short``: short texts (~21 word pieces: the 200 MuSiQue + HotpotQA questions, x3), a stand-in for the
  entity and relation texts that make up most of the demo's ~1,100; batches of 32.

usage: throughput.py long|short CANDIDATE [CANDIDATE ...]
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import bench_candidate as bc  # noqa: E402
from common import CORPORA, DATASETS, Timer  # noqa: E402


def texts_for(kind: str) -> list[str]:
    if kind == "long":
        text = " ".join(
            p.read_text(errors="replace")
            for p in sorted((CORPORA / "wikipedia_babbage_lovelace").rglob("*.txt"))
        )
        text = " ".join(text.split())
        return [text[i : i + 2000] for i in range(0, len(text) - 2000, 1800)][:96]
    return [q for f in DATASETS.values() for q in f()[1]] * 3


kind, names = sys.argv[1], sys.argv[2:]
bc.BATCH = 8 if kind == "long" else 32
texts = texts_for(kind)
print(f"{len(texts)} {kind} texts")
for name in names:
    e = bc.CANDIDATES[name]()
    e.encode(texts[:8], "passage")
    with Timer() as t:
        e.encode(texts, "passage")
    print(
        f"{name:28s} {len(texts) / t.wall:7.1f} texts/s  {len(texts) / t.cpu:7.1f} per cpu-s  "
        f"others={t.others_cores:.2f} cores",
        flush=True,
    )
