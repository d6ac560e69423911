"""Markdown table from out/*.json (bench_candidate.py and baselines.py results)."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import OUT

cols = [
    "load_s",
    "passages_per_s",
    "passages_per_cpu_s",
    "other_load_cores",
    "est_1100_texts_s",
    "query_p50_ms",
    "query_p95_ms",
    "peak_rss_mb",
    "musique_r@2",
    "musique_r@5",
    "hotpotqa_r@2",
    "hotpotqa_r@5",
]
print("| run | batch | " + " | ".join(cols) + " |")
print("|---" * (len(cols) + 2) + "|")
for f in sorted(OUT.glob("*.json")):
    d = json.loads(f.read_text())
    if "name" not in d:
        continue
    print(f"| {f.stem} | {d.get('batch')} | " + " | ".join(str(d.get(c, "–")) for c in cols) + " |")
for f in sorted(OUT.glob("baselines*.json")):
    print(f"\n{f.stem}: " + json.dumps(json.loads(f.read_text())))
