"""Recall@2/@5 of the non-neural baselines on the same pools and questions:
- hashing: a re-implementation of pgrag-dag's HashingEmbedder as its docstring describes it
  (lowercase \\w+ unigrams + bigrams, SHA-256 bucket/sign/magnitude, 384 dims, L2-normalised);
- bm25: Okapi BM25 (k1=1.2, b=0.75), lowercase \\w+ tokens, a small English stop-word list;
- bm25-rank_bm25: the rank_bm25 package's BM25Okapi on the same tokens, as a cross-check (if installed).
usage: baselines.py [--title]
"""

import argparse
import hashlib
import math
import re
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import numpy as np
from common import DATASETS, dense_recall, recall_from_scores, write

TOKEN = re.compile(r"\w+", re.UNICODE)
STOP = set(
    "a an and are as at be by for from has have he her his in is it its of on or she that the their they "
    "this to was were what which who whom whose with when where why how did does do".split()
)


def hashing_vec(text, dim=384, memo={}):  # noqa: B006 - the default dict is a cache shared across calls
    words = [w.lower() for w in TOKEN.findall(text)]
    feats = words + [f"{a} {b}" for a, b in zip(words, words[1:])]
    v = np.zeros(dim, np.float32)
    for f in feats:
        hit = memo.get(f)
        if hit is None:
            d = hashlib.sha256(f.encode()).digest()
            hit = memo[f] = (
                int.from_bytes(d[0:4], "big") % dim,
                (1.0 if d[4] & 1 else -1.0) * (0.5 + d[5] / 255.0),
            )
        v[hit[0]] += hit[1]
    n = np.linalg.norm(v)
    if n == 0:
        v[0] = 1.0
        return v
    return v / n


def toks(text):
    return [w for w in (t.lower() for t in TOKEN.findall(text)) if w not in STOP]


def bm25_scores(docs, queries, k1=1.2, b=0.75):
    dt = [Counter(toks(d)) for d in docs]
    lens = np.array([sum(c.values()) for c in dt], np.float64)
    avg = lens.mean()
    df = Counter(t for c in dt for t in c)
    n = len(docs)
    idf = {t: math.log(1 + (n - f + 0.5) / (f + 0.5)) for t, f in df.items()}
    post = {}
    for i, c in enumerate(dt):
        for t, f in c.items():
            post.setdefault(t, []).append((i, f))
    S = np.zeros((len(queries), n))
    for qi, q in enumerate(queries):
        for t in set(toks(q)):
            for i, f in post.get(t, ()):
                S[qi, i] += idf[t] * f * (k1 + 1) / (f + k1 * (1 - b + b * lens[i] / avg))
    return S


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--title", action="store_true")
    a = ap.parse_args()
    res = {"title": a.title}
    for k, f in DATASETS.items():
        texts, questions, gold = f(with_title=a.title)
        P = np.stack([hashing_vec(t) for t in texts])
        Q = np.stack([hashing_vec(q) for q in questions])
        for m, v in dense_recall(P, Q, gold).items():
            res[f"hashing_{k}_{m}"] = round(v, 3)
        for m, v in recall_from_scores(bm25_scores(texts, questions), gold).items():
            res[f"bm25_{k}_{m}"] = round(v, 3)
        try:
            from rank_bm25 import BM25Okapi

            bm = BM25Okapi([toks(t) for t in texts])
            S = np.stack([bm.get_scores(toks(q)) for q in questions])
            for m, v in recall_from_scores(S, gold).items():
                res[f"rank_bm25_{k}_{m}"] = round(v, 3)
        except ImportError:
            pass
    write("baselines" + ("_title" if a.title else ""), res)


if __name__ == "__main__":
    main()
