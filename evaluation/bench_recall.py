#!/usr/bin/env python
"""Chunk recall benchmark (issue 12): dense vs full-text vs hybrid chunk search, through the product.

The MuSiQue and HotpotQA subsets of the shared corpora (``$PGRAG_SHARED_DIR/corpora`` or
``../shared/corpora``; pools and gold read by ``embedder_candidates/common.py``) are written as one JSONL
source per data set (``title`` / ``text`` / ``id`` fields), one space each, and indexed by the
``chunks`` and ``embeddings`` stages only (no extraction; the chat model is ``replay``, so nothing calls
a model), chunked so that each passage is one chunk. Two realms: ``recall_minilm`` (the local model,
``local/all-MiniLM-L6-v2``) and ``recall_hashing`` (``hashing-sha256``).

For 100 questions each, ``query_data`` in naive mode with ``chunk_top_k = 5`` gives a ranked list of
passages; passage recall@k = |gold ∩ top-k| / |gold| (gold = the supporting passages), averaged over
questions, for the arms (:data:`ARMS`)

- dense (``chunk_channels: [vector]``), hybrid (``[vector, fulltext]``, fused by RRF) and full-text only
  (``[fulltext]``), with the local model and with the hashing embedder; the arms with the full-text
  channel run twice, with keywords off (its text: the question's words, any of them) and with the
  default lexical keywords (its text: the low-level keywords — what a default query runs, and what
  decides the default, :func:`decide`);
- baselines in the same run: BM25 (``rank_bm25.BM25Okapi``, k1 = 1.2, b = 0.75, over ``title\\ntext``
  with ``baselines.py``'s tokens; its own Okapi code when rank-bm25 is not installed) and exact cosine
  (numpy over the vectors stored in PostgreSQL, the same embedder's query vectors), which shows whether
  HNSW loses anything.

Also: query latency p50 per arm (``perf_counter`` around ``query_data``, arms interleaved question by
question; the baselines' figure is in-process scoring, no database), the embedding stage's throughput
(passages/s, model loaded beforehand), and diagnostics read through the store functions directly —
which text feeds the full-text query, and how deep each channel's list should be before fusion.

    .venv/bin/python evaluation/bench_recall.py                      # about 5 minutes here
    .venv/bin/python evaluation/bench_recall.py --data-dir /tmp/br   # keep the database

Writes ``evaluation/results/recall.json`` and ``evaluation/results/recall.md``. The database is
``PGRAG_DATABASE_URL`` when set, else an embedded PostgreSQL under ``--data-dir`` (default: a temporary
one, stopped and removed at the end). Each run drops and re-indexes both realms.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
for path in (REPO, HERE, HERE / "embedder_candidates"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import common  # noqa: E402  (embedder_candidates: the pools, questions and gold)
import numpy as np  # noqa: E402
from bench_index import Database, fresh_realm  # noqa: E402

from evaluation.recall import bm25_rankings, passage_recall  # noqa: E402

RESULTS = REPO / "evaluation" / "results"
LOCAL_MODEL, HASHING_MODEL = "local/all-MiniLM-L6-v2", "hashing-sha256"
REALMS = {"minilm": ("recall_minilm", LOCAL_MODEL), "hashing": ("recall_hashing", HASHING_MODEL)}
DATASETS: dict[str, Callable[..., Any]] = {"musique": common.load_musique, "hotpotqa": common.load_hotpot}
ARMS: dict[str, tuple[str, tuple[str, ...], str]] = {  # arm -> (embedder, chunk_channels, keywords)
    "minilm dense": ("minilm", ("vector",), "off"),
    "minilm hybrid, keywords off": ("minilm", ("vector", "fulltext"), "off"),
    "minilm hybrid, lexical keywords": ("minilm", ("vector", "fulltext"), "lexical"),
    "full-text, keywords off": ("minilm", ("fulltext",), "off"),
    "full-text, lexical keywords": ("minilm", ("fulltext",), "lexical"),
    "hashing dense": ("hashing", ("vector",), "off"),
    "hashing hybrid, keywords off": ("hashing", ("vector", "fulltext"), "off"),
    "hashing hybrid, lexical keywords": ("hashing", ("vector", "fulltext"), "lexical"),
}
DEFAULT_HYBRID = "minilm hybrid, lexical keywords"
"""The hybrid a query with the default keyword mode (lexical) runs: the one that decides the default."""
KS = (2, 5)


recall = passage_recall
"""|gold ∩ top-k| / |gold| (:func:`evaluation.recall.passage_recall`)."""


def summary(ranked: list[list[int]], gold: list[set[int]]) -> dict[str, float]:
    return {f"r@{k}": round(float(np.mean([recall(r, g, k) for r, g in zip(ranked, gold)])), 3) for k in KS}


def p50_ms(seconds: list[float]) -> float:
    return round(1000 * statistics.median(seconds), 2)


# -- data and indexing ----------------------------------------------------------------------------
def load(n_questions: int) -> dict[str, dict[str, Any]]:
    """Per data set: ``titles``, ``bodies`` (pool order), ``texts`` (``title\\ntext``), questions, gold."""
    out = {}
    for name, loader in DATASETS.items():
        texts, questions, gold = loader(with_title=True)
        parts = [t.partition("\n") for t in texts]
        out[name] = {
            "titles": [p[0] for p in parts],
            "bodies": [p[2] for p in parts],
            "texts": texts,
            "questions": questions[:n_questions],
            "gold": gold[:n_questions],
        }
    return out


def write_sources(work: Path, data: dict[str, dict[str, Any]]) -> Path:
    """One JSONL source per data set and a configuration naming both realms; returns its path."""
    import yaml

    for name, d in data.items():
        with (work / f"{name}.jsonl").open("w", encoding="utf-8") as f:
            for i, (title, body) in enumerate(zip(d["titles"], d["bodies"])):
                f.write(json.dumps({"id": str(i), "title": title, "text": body}) + "\n")
    spaces = {
        name: {"sources": [{"path": f"{name}.jsonl", "format": "jsonl", "key_field": "id"}]} for name in data
    }
    cfg = {
        "llm": {"models": ["replay"]},
        "chunking": {"chunk_chars": 8000, "overlap_chars": 0},
        "realms": {realm: {"spaces": spaces} for realm, _ in REALMS.values()},
    }
    path = work / "pgrag.yaml"
    path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    return path


def index(
    config: Path, dsn: str, data: dict[str, dict[str, Any]], *, reuse: bool = False
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Both realms through ``stage_chunks`` and ``stage_embeddings`` (``reuse``: as already indexed);
    returns (engines, indexing report)."""
    from psycopg import sql

    from pgrag_dag.config import EmbeddingSettings, load_settings
    from pgrag_dag.engine import Engine
    from pgrag_dag.pipeline import stage_chunks, stage_embeddings
    from pgrag_dag.store import db
    from pgrag_dag.store.identifiers import qualified

    engines, report = {}, {}
    for tag, (realm, model) in REALMS.items():
        # keyword arguments beat PGRAG_EMBEDDING__MODEL (tests set it) and the file
        settings = load_settings(config, database_url=dsn, embedding=EmbeddingSettings(model=model, dim=384))
        engine = engines[tag] = Engine.from_settings(settings)
        if reuse:
            continue
        fresh_realm(dsn, realm)
        t0 = time.perf_counter()
        engine.embedder().embed(["warm-up"], "passage")
        load_s = time.perf_counter() - t0
        for name, d in data.items():
            chunks = stage_chunks(engine, realm, name).metadata
            if chunks["chunks"] != len(d["texts"]) or chunks["documents"] != len(d["texts"]):
                raise SystemExit(
                    f"{realm}.{name}: {chunks['documents']} documents became {chunks['chunks']} chunks; "
                    f"expected one chunk per passage ({len(d['texts'])})"
                )
            emb = stage_embeddings(engine, realm, name).metadata
            report[f"{tag}/{name}"] = {
                "passages": chunks["chunks"],
                "chunks_stage_s": chunks["seconds"],
                "embeddings_stage_s": emb["seconds"],
                "passages_per_s": round(emb["documents_embedded"] / emb["seconds"], 1),
                "model_load_s": round(load_s, 2),
            }
            print(f"indexed {realm}.{name}: {report[f'{tag}/{name}']}", flush=True)
        with db.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("VACUUM ANALYZE {}").format(qualified(realm, "documents")))
        if engine.usage()["model_calls"]:
            raise SystemExit(
                f"{realm}: {engine.usage()['model_calls']} model call(s); nothing should call a model"
            )
    return engines, report


# -- the arms through query_data ------------------------------------------------------------------
def run_arms(engines: dict[str, Any], data: dict[str, dict[str, Any]], warmup: int) -> dict[str, Any]:
    """Every arm on every question, interleaved (the arm order rotates per question)."""
    from pgrag_dag.query import QueryParam, query_data

    out: dict[str, Any] = {}
    names = list(ARMS)
    for ds, d in data.items():
        ranked: dict[str, list[list[int]]] = {a: [] for a in names}
        secs: dict[str, list[float]] = {a: [] for a in names}
        via: dict[str, dict[str, int]] = {a: {} for a in names}
        for qi, question in enumerate(d["questions"][:warmup] + d["questions"]):
            timed = qi >= warmup
            for arm in names[qi % len(names) :] + names[: qi % len(names)]:
                tag, chans, keywords = ARMS[arm]
                engine = engines[tag]
                param = QueryParam(
                    space=ds, mode="naive", keywords=keywords, chunk_top_k=5, chunk_channels=chans
                )
                t0 = time.perf_counter()
                res = query_data(
                    question, param, dsn=engine.dsn, realm=REALMS[tag][0], embedder=engine.embedder()
                )
                dt = time.perf_counter() - t0
                if timed:
                    secs[arm].append(dt)
                    ranked[arm].append([int(c["doc_key"]) for c in res.chunks])
                    for c in res.chunks:
                        via[arm][c["via"]] = via[arm].get(c["via"], 0) + 1
        for arm in names:
            out.setdefault(arm, {})[ds] = {
                **summary(ranked[arm], d["gold"]),
                "p50_ms": p50_ms(secs[arm]),
                "via": via[arm],
                "ranked": ranked[arm],
            }
    return out


# -- baselines ------------------------------------------------------------------------------------
def bm25(data: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """BM25 over ``title\ntext`` (:func:`evaluation.recall.bm25_rankings`: rank_bm25's BM25Okapi if installed,
    else baselines.py's Okapi); its p50 is the scoring of all questions divided by their number."""
    out: dict[str, Any] = {}
    for ds, d in data.items():
        t0 = time.perf_counter()
        ranked, impl = bm25_rankings(d["texts"], d["questions"], depth=5)
        secs = [(time.perf_counter() - t0) / len(d["questions"])] * len(d["questions"])
        out[ds] = {
            **summary(ranked, d["gold"]),
            "p50_ms": p50_ms(secs),
            "ranked": ranked,
            "implementation": impl,
        }
    return out


def exact_cosine(engines: dict[str, Any], data: dict[str, dict[str, Any]], tag: str) -> dict[str, Any]:
    """Brute-force cosine over the stored chunk vectors of realm ``tag``, with its embedder's query
    vectors."""
    from psycopg import sql

    from pgrag_dag.store import db
    from pgrag_dag.store.identifiers import qualified

    engine, realm = engines[tag], REALMS[tag][0]
    out: dict[str, Any] = {}
    for ds, d in data.items():
        with db.connect(engine.dsn) as conn:
            rows = conn.execute(
                sql.SQL("SELECT doc_key, embedding::real[] FROM {} WHERE space = %s").format(
                    qualified(realm, "documents")
                ),
                (ds,),
            ).fetchall()
        keys = np.array([int(k) for k, _ in rows])
        mat = np.asarray([v for _, v in rows], dtype=np.float32)
        mat /= np.linalg.norm(mat, axis=1, keepdims=True)
        qv = np.stack(engine.embedder().embed(list(d["questions"]), "query"))
        ranked, secs = [], []
        for v in qv:
            t0 = time.perf_counter()
            sims = mat @ (v / np.linalg.norm(v))
            top = np.argsort(-sims, kind="stable")[:5]
            secs.append(time.perf_counter() - t0)
            ranked.append(keys[top].tolist())
        out[ds] = {**summary(ranked, d["gold"]), "p50_ms": p50_ms(secs), "ranked": ranked}
    return out


# -- diagnostics through the store functions -----------------------------------------------------
def diagnostics(engines: dict[str, Any], data: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Full-text only and hybrid (RRF of the dense top-5 and the full-text top-5, cut to 5) for each
    candidate query text, and hybrid for per-channel depths 5, 10, 20 (low-level keywords)."""
    from pgrag_dag.query import fusion, keywords
    from pgrag_dag.store import db, retrieval
    from pgrag_dag.store.retrieval_channels import fulltext_query

    def texts(q: str) -> dict[str, str]:
        kw = keywords.lexical(q)
        return {
            "question words, any (keywords off)": fulltext_query(q.split()),
            "raw question (websearch: all words)": q,
            "low-level keywords (the relation lexical text)": fulltext_query(
                kw.low_level or kw.high_level or q.split()
            ),
            "low- and high-level keywords": fulltext_query([*kw.low_level, *kw.high_level]),
        }

    engine, realm = engines["minilm"], REALMS["minilm"][0]
    out: dict[str, Any] = {"query_text": {}, "depth": {}}
    for ds, d in data.items():
        qv = engine.embedder().embed(list(d["questions"]), "query")
        with db.connect(engine.dsn) as conn:
            dense = [retrieval.chunk_search(conn, realm, ds, v, 20) for v in qv]
            per_text: dict[str, list[list[dict[str, Any]]]] = {}
            for q in d["questions"]:
                for label, text in texts(q).items():
                    per_text.setdefault(label, []).append(retrieval.chunk_fulltext(conn, realm, ds, text, 20))

        def fused(dn: list[dict[str, Any]], ft: list[dict[str, Any]], depth: int) -> list[int]:
            rows = fusion.rrf({"vector": dn[:depth], "fulltext": ft[:depth]}, key=lambda r: r["id"])[:5]
            return [int(r["doc_key"]) for r in rows]

        for label, lists in per_text.items():
            out["query_text"].setdefault(label, {})[ds] = {
                "fulltext": summary([[int(r["doc_key"]) for r in ft[:5]] for ft in lists], d["gold"]),
                "hybrid": summary([fused(dn, ft, 5) for dn, ft in zip(dense, lists)], d["gold"]),
                "no_match": sum(not ft for ft in lists),
            }
        default = per_text["low-level keywords (the relation lexical text)"]
        for depth in (5, 10, 20):
            out["depth"].setdefault(str(depth), {})[ds] = summary(
                [fused(dn, ft, depth) for dn, ft in zip(dense, default)], d["gold"]
            )
    return out


# -- report ---------------------------------------------------------------------------------------
def paired(a: list[list[int]], b: list[list[int]], gold: list[set[int]], k: int = 5) -> tuple[int, int]:
    """Questions where ``b`` has a higher / lower recall@k than ``a``."""
    diffs = [recall(y, g, k) - recall(x, g, k) for x, y, g in zip(a, b, gold)]
    return sum(v > 0 for v in diffs), sum(v < 0 for v in diffs)


def decide(results: dict[str, Any], data: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The fulltext chunk channel goes on by default only if hybrid (as a default query runs it:
    :data:`DEFAULT_HYBRID`) beats dense on both subsets' recall@5, or clearly (+0.02) on average
    without losing on either (issue 12). Both hybrids of the local model are reported."""
    dense, out = results["minilm dense"], {}
    for arm in ("minilm hybrid, keywords off", DEFAULT_HYBRID):
        hybrid = results[arm]
        gains = {
            ds: {f"r@{k}": round(hybrid[ds][f"r@{k}"] - dense[ds][f"r@{k}"], 3) for k in KS} for ds in data
        }
        r5 = [g["r@5"] for g in gains.values()]
        passes = all(g > 0 for g in r5) or (sum(r5) / len(r5) >= 0.02 and all(g >= 0 for g in r5))
        wins = {
            ds: dict(
                zip(("better", "worse"), paired(dense[ds]["ranked"], hybrid[ds]["ranked"], data[ds]["gold"]))
            )
            for ds in data
        }
        out[arm] = {"gain": gains, "paired_r@5": wins, "passes": passes}
    return {**out, "fulltext_on_by_default": out[DEFAULT_HYBRID]["passes"]}


def markdown(res: dict[str, Any], data: dict[str, dict[str, Any]]) -> str:
    ds_names = list(data)
    head = "| arm | " + " | ".join(f"{ds} r@2 / r@5" for ds in ds_names) + " | mean r@5 | query p50 ms |"
    lines = [
        "# Chunk recall (evaluation/bench_recall.py)",
        "",
        res["meta"]["note"],
        "",
        head,
        "|" + "---|" * (len(ds_names) + 3),
    ]
    rows = {
        **res["arms"],
        "BM25 (baseline, in-process)": res["bm25"],
        "minilm exact cosine (baseline, in-process)": res["exact"]["minilm"],
        "hashing exact cosine (baseline, in-process)": res["exact"]["hashing"],
    }
    for arm, per in rows.items():
        cells = [f"{per[ds]['r@2']:.3f} / {per[ds]['r@5']:.3f}" for ds in ds_names]
        mean5 = np.mean([per[ds]["r@5"] for ds in ds_names])
        lat = "/".join(f"{per[ds]['p50_ms']:.1f}" for ds in ds_names)
        lines.append(f"| {arm} | " + " | ".join(cells) + f" | {mean5:.3f} | {lat} |")
    lines += [
        "",
        "Query p50 is per data set (MuSiQue/HotpotQA): `query_data` end to end for the arms (question "
        "embedding, realm check, snapshot, search, fusion, assembly; arms interleaved); for the baselines "
        "in-process scoring only (rank_bm25, numpy), no database — not comparable with the arms.",
        "",
    ]
    d = res["decision"]
    lines += [
        "## Decision",
        "",
        "Hybrid minus dense (local model), and questions whose recall@5 hybrid raised / lowered:",
        "",
        "| hybrid | "
        + " | ".join(f"{ds} Δr@2 / Δr@5 | {ds} better / worse" for ds in ds_names)
        + " | passes |",
        "|" + "---|" * (2 + 2 * len(ds_names)),
    ]
    for arm in ("minilm hybrid, keywords off", DEFAULT_HYBRID):
        v = d[arm]
        cells = []
        for ds in ds_names:
            cells += [
                f"{v['gain'][ds]['r@2']:+.3f} / {v['gain'][ds]['r@5']:+.3f}",
                f"{v['paired_r@5'][ds]['better']} / {v['paired_r@5'][ds]['worse']}",
            ]
        lines.append(f"| {arm} | " + " | ".join(cells) + f" | {'yes' if v['passes'] else 'no'} |")
    lines += [
        "",
        f"Rule: on by default only if hybrid (as a default query runs it: {DEFAULT_HYBRID}) beats dense on "
        "both subsets' recall@5, or by ≥ 0.02 on average without losing on either. Full-text chunk channel "
        f"on by default: **{'yes' if d['fulltext_on_by_default'] else 'no'}**.",
        "",
    ]
    lines += [
        "## HNSW vs exact cosine",
        "",
        "| realm | data set | top-5 identical (set) | top-5 identical (order) |",
        "|---|---|---|---|",
    ]
    for tag, per in res["hnsw_vs_exact"].items():
        for ds, v in per.items():
            lines.append(
                f"| {tag} | {ds} | {v['same_set']} / {v['questions']} | {v['same_order']} "
                f"/ {v['questions']} |"
            )
    lines += [
        "",
        "## Embedding stage",
        "",
        "| realm / data set | passages | passages/s | stage s | model load s |",
        "|---|---|---|---|---|",
    ]
    if not res["indexing"]:
        lines.append("| (not measured: --reuse) | | | | |")
    for key, v in res["indexing"].items():
        lines.append(
            f"| {key} | {v['passages']} | {v['passages_per_s']} | {v['embeddings_stage_s']} | "
            f"{v['model_load_s']} |"
        )
    lines += [
        "",
        "## Diagnostics (store functions directly, local model)",
        "",
        "Which text feeds the full-text query (full-text top 5 alone, and RRF with the dense top 5):",
        "",
        "| text | "
        + " | ".join(f"{ds} full-text r@2 / r@5 | {ds} hybrid r@2 / r@5 | {ds} no match" for ds in ds_names)
        + " |",
        "|" + "---|" * (1 + 3 * len(ds_names)),
    ]
    for label, per in res["diagnostics"]["query_text"].items():
        cells = []
        for ds in ds_names:
            v = per[ds]
            cells += [
                f"{v['fulltext']['r@2']:.3f} / {v['fulltext']['r@5']:.3f}",
                f"{v['hybrid']['r@2']:.3f} / {v['hybrid']['r@5']:.3f}",
                str(v["no_match"]),
            ]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Depth of each channel's list before RRF (low-level keywords; fused list cut to 5):",
        "",
        "| depth | " + " | ".join(f"{ds} r@2 / r@5" for ds in ds_names) + " |",
        "|" + "---|" * (1 + len(ds_names)),
    ]
    for depth, per in res["diagnostics"]["depth"].items():
        lines.append(
            f"| {depth} | "
            + " | ".join(f"{per[ds]['r@2']:.3f} / {per[ds]['r@5']:.3f}" for ds in ds_names)
            + " |"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--data-dir", type=Path, help="embedded PostgreSQL data dir (kept); default a temporary one"
    )
    ap.add_argument("--questions", type=int, default=100, help="questions per data set (default 100)")
    ap.add_argument(
        "--warmup", type=int, default=3, help="untimed questions per data set before the timed ones"
    )
    ap.add_argument("--out", type=Path, default=RESULTS / "recall", help="output path without suffix")
    ap.add_argument(
        "--reuse",
        action="store_true",
        help="query the realms a previous run left under --data-dir instead of indexing (no throughput)",
    )
    args = ap.parse_args()
    t_start, load_start = time.perf_counter(), [round(x, 2) for x in os.getloadavg()]
    data = load(args.questions)
    database = Database(args.data_dir)
    work = Path(tempfile.mkdtemp(prefix="pgrag_bench_recall_"))
    engines: dict[str, Any] = {}
    try:
        engines, indexing = index(write_sources(work, data), database.dsn, data, reuse=args.reuse)
        arms = run_arms(engines, data, args.warmup)
        exact = {tag: exact_cosine(engines, data, tag) for tag in REALMS}
        hnsw = {
            tag: {
                ds: {
                    "questions": len(data[ds]["questions"]),
                    "same_set": sum(
                        set(a) == set(b)
                        for a, b in zip(exact[tag][ds]["ranked"], arms[f"{tag} dense"][ds]["ranked"])
                    ),
                    "same_order": sum(
                        a == b for a, b in zip(exact[tag][ds]["ranked"], arms[f"{tag} dense"][ds]["ranked"])
                    ),
                }
                for ds in data
            }
            for tag in REALMS
        }
        res: dict[str, Any] = {
            "arms": arms,
            "bm25": bm25(data),
            "exact": exact,
            "hnsw_vs_exact": hnsw,
            "indexing": indexing,
            "diagnostics": diagnostics(engines, data),
        }
        res["decision"] = decide(arms, data)
    finally:
        for engine in engines.values():
            engine.close()
        database.close()
        shutil.rmtree(work, ignore_errors=True)
    import subprocess

    commit = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    res["meta"] = {
        "commit": commit,
        "questions": args.questions,
        "database": database.kind,
        "load_average_start": load_start,
        "load_average_end": [round(x, 2) for x in os.getloadavg()],
        "seconds": round(time.perf_counter() - t_start, 1),
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "note": f"{args.questions} questions per data set; naive mode, chunk_top_k 5; passage "
        f"recall@k = |gold ∩ top-k| / |gold|, averaged. Engine at {commit}, run "
        f"{time.strftime('%Y-%m-%d')} on this 2-core machine ({round(time.perf_counter() - t_start)} s; "
        f"load average {load_start[0]} at the start, {os.getloadavg()[0]:.2f} at the end).",
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(res, indent=1, default=str), encoding="utf-8")
    text = markdown(res, data)
    args.out.with_suffix(".md").write_text(text, encoding="utf-8")
    print(text)
    print(f"written: {args.out.with_suffix('.json')} and {args.out.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
