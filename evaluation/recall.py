"""Passage recall on the multi-hop benchmarks, offline, for every query mode that returns chunks (issue 17
item 1; the retrieval half of the paper's §8 that needs no chat model).

    python -m evaluation.recall                       # the committed table and chart; ~17 min on 2 cores
    python -m evaluation.recall --questions 20 --out /tmp/r   # a quick look

**Data** (``$PGRAG_SHARED_DIR/corpora``, else ``../shared/corpora``; read by
``evaluation/embedder_candidates/common.py``): the HippoRAG subsets of MuSiQue (1,890 passages, 100
questions whose paragraphs carry ``is_supporting``) and HotpotQA (994 passages, 100 questions whose
``supporting_facts`` name their gold titles). The 2WikiMultiHopQA folder holds 6,119 passages and **no
questions** (:func:`load_2wiki`), so it cannot be scored; it is not indexed (as a distractor pool it would
make a different benchmark than the published subsets, and its graph alone would take most of the time
budget), and the table says so.

**Index** (one realm, one space per data set, through the product's six index stages,
:func:`pgrag_dag.pipeline.index_documents`; the two community stages too with ``--communities``, extractive
reports — no mode takes chunks from communities): each passage is a JSONL record (``title``, ``text``,
``id`` = its position in the pool) and one chunk (``chunk_chars`` 8000, no overlap; checked); the
offline extractor (``extractor: cooccurrence``, no model), the local embedder
(``local/all-MiniLM-L6-v2``); the chat model is ``replay`` and the run fails if any model is called.

**Arms** (:data:`ARMS`): ``query_data`` with the product's query defaults (``chunk_top_k`` 8, vector
chunk channel, lexical keywords, 2 hops) in each mode, and the entity-anchored modes again with no chunk
search (``chunk_channels: []``), so that their chunks are mention expansion's alone. A result's chunks are
ranked in the order the result gives them: the searched chunks (vector rank) first, then the mention
chunks (by how many matched entities each mentions, then document order; ``query._merge``). So with the
default channel, recall@k for k ≤ ``chunk_top_k`` of local, mix and hybrid is naive's by construction;
the "graph only" arms measure what the graph finds. ``global`` returns no chunks (community reports and
ranked relations only): it is run, its chunk count checked to be zero, and not scored.

**Baselines, same run**: BM25 over ``title\\ntext`` (``rank_bm25.BM25Okapi``, k1 1.2, b 0.75, the tokens
of ``embedder_candidates/baselines.py``; that module's own Okapi code if rank-bm25 is not installed) and
exact brute-force cosine over the chunk vectors stored in PostgreSQL with the same embedder's question
vectors.

**Metrics** per question: passage recall@k = |gold ∩ top-k| / |gold| and all-gold@k = 1 when every gold
passage is in the top k; both averaged over questions, k ∈ {2, 5}.

Writes ``recall_multihop.json`` / ``.md`` / ``.png`` under ``--out`` (default ``evaluation/results``) through
:mod:`evaluation.harness`. Needs ``pip install -r evaluation/requirements-eval.txt`` (rank-bm25, matplotlib).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from evaluation import plots
from evaluation.embedder_candidates import baselines, common
from evaluation.harness import ROOT, RunRecord, Table, progress, timed_run, write_run

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

RESULTS = ROOT / "evaluation" / "results"
REALM = "eval_recall"
LOCAL_MODEL = "local/all-MiniLM-L6-v2"
KS = (2, 5)
DEPTH = 10
"""How deep the baselines rank (every arm is cut at max(KS))."""
ARMS: dict[str, tuple[str, tuple[str, ...] | None]] = {
    # arm -> (mode, chunk_channels; None = the product's default)
    "naive": ("naive", None),
    "local": ("local", None),
    "mix": ("mix", None),
    "hybrid": ("hybrid", None),
    "global": ("global", None),
    "local, graph only": ("local", ()),
    "mix, graph only": ("mix", ()),
    "hybrid, graph only": ("hybrid", ()),
}
BM25, EXACT = "BM25 (baseline)", "exact dense (baseline)"


# -- data -----------------------------------------------------------------------------------------
@dataclass
class Benchmark:
    """One data set: its passage pool (``titles``, ``bodies``, pool order) and its questions with their gold
    supporting passages (``gold``: pool indices). ``note`` says why a set without questions is not scored."""

    name: str
    titles: list[str]
    bodies: list[str]
    questions: list[str] = field(default_factory=list)
    gold: list[set[int]] = field(default_factory=list)
    note: str = ""

    @property
    def texts(self) -> list[str]:
        """``title\\nbody`` per passage: what BM25 ranks and what a chunk embeds (title with text)."""
        return [f"{t}\n{b}" for t, b in zip(self.titles, self.bodies)]

    @property
    def scorable(self) -> bool:
        """Whether it has questions with gold passages."""
        return bool(self.questions)

    def head(self, n: int) -> Benchmark:
        """The same pool with only the first ``n`` questions."""
        return Benchmark(self.name, self.titles, self.bodies, self.questions[:n], self.gold[:n], self.note)


def _split(loader: Callable[..., Any], name: str) -> Benchmark:
    texts, questions, gold = loader(with_title=True)
    parts = [t.partition("\n") for t in texts]
    return Benchmark(name, [p[0] for p in parts], [p[2] for p in parts], list(questions), list(gold))


def load_2wiki() -> Benchmark:
    """The 2WikiMultiHopQA passages of the shared corpora; the folder has no question file, so no gold.
    Raises :class:`FileNotFoundError` when the corpus is absent."""
    folder = common.CORPORA / "2wikimultihopqa_hipporag_corpus"
    pool = json.loads((folder / "2wikimultihopqa_corpus.json").read_text(encoding="utf-8"))
    files = sorted(p.name for p in folder.iterdir())
    return Benchmark(
        "2wikimultihopqa",
        [p["title"] for p in pool],
        [p["text"] for p in pool],
        note=f"{len(pool):,} passages and no questions in the shared folder ({', '.join(files)}): "
        "no gold, so recall cannot be scored; not indexed",
    )


def load_benchmarks(n_questions: int) -> list[Benchmark]:
    """MuSiQue and HotpotQA (first ``n_questions`` each) and 2WikiMultiHopQA (passages only)."""
    return [
        _split(common.load_musique, "musique").head(n_questions),
        _split(common.load_hotpot, "hotpotqa").head(n_questions),
        load_2wiki(),
    ]


# -- metrics and baselines ------------------------------------------------------------------------
def passage_recall(ranked: Sequence[int], gold: set[int], k: int) -> float:
    """|gold ∩ top-k of ``ranked``| / |gold|; ``gold`` must not be empty."""
    return len(set(ranked[:k]) & gold) / len(gold)


def all_gold(ranked: Sequence[int], gold: set[int], k: int) -> float:
    """1.0 when every gold passage is in the top k of ``ranked``, else 0.0."""
    return float(gold <= set(ranked[:k]))


def score(
    rankings: Sequence[Sequence[int]], gold: Sequence[set[int]], ks: Sequence[int] = KS
) -> dict[str, float]:
    """Mean ``r@k`` (:func:`passage_recall`) and ``all@k`` (:func:`all_gold`) over questions, for each k."""
    out: dict[str, float] = {}
    for k in ks:
        out[f"r@{k}"] = float(np.mean([passage_recall(r, g, k) for r, g in zip(rankings, gold)]))
        out[f"all@{k}"] = float(np.mean([all_gold(r, g, k) for r, g in zip(rankings, gold)]))
    return out


def bm25_rankings(
    texts: Sequence[str], questions: Sequence[str], depth: int = DEPTH
) -> tuple[list[list[int]], str]:
    """The top ``depth`` passage indices per question by Okapi BM25 (k1 1.2, b 0.75) over ``baselines.toks``
    tokens (lowercase words, a small stop list), ties by pool order; and the implementation used
    (``rank_bm25.BM25Okapi``, else ``baselines.bm25_scores``)."""
    try:
        from rank_bm25 import BM25Okapi
    except ImportError:
        scores = baselines.bm25_scores(list(texts), list(questions))
        return np.argsort(-scores, axis=1, kind="stable")[:, :depth].tolist(), "baselines.bm25_scores"
    model = BM25Okapi([baselines.toks(t) for t in texts], k1=1.2, b=0.75)
    return (
        [np.argsort(-model.get_scores(baselines.toks(q)), kind="stable")[:depth].tolist() for q in questions],
        "rank_bm25.BM25Okapi",
    )


def exact_dense_rankings(passages: np.ndarray, queries: np.ndarray, depth: int = DEPTH) -> list[list[int]]:
    """Brute-force cosine: for each row of ``queries`` (q, d) the row indices of ``passages`` (n, d) with the
    ``depth`` highest cosine similarities, highest first, ties by row order."""
    p = passages / np.linalg.norm(passages, axis=1, keepdims=True)
    q = queries / np.linalg.norm(queries, axis=1, keepdims=True)
    return np.argsort(-(q @ p.T), axis=1, kind="stable")[:, :depth].tolist()


def stored_chunk_vectors(dsn: str, realm: str, space: str) -> tuple[list[str], np.ndarray]:
    """(doc_keys, vectors (n, d) float32) of every embedded chunk of ``realm.space``, by chunk id."""
    from psycopg import sql

    from pgrag_dag.store import db
    from pgrag_dag.store.identifiers import qualified

    with db.connect(dsn) as conn:
        rows = conn.execute(
            sql.SQL(
                "SELECT doc_key, embedding::real[] FROM {} WHERE space = %s AND embedding IS NOT NULL "
                "ORDER BY id"
            ).format(qualified(realm, "documents")),
            (space,),
        ).fetchall()
    return [k for k, _ in rows], np.asarray([v for _, v in rows], dtype=np.float32)


# -- index ----------------------------------------------------------------------------------------
def write_config(work: Path, benchmarks: Sequence[Benchmark], *, embedding_model: str, dim: int) -> Path:
    """One JSONL source per data set under ``work`` and the ``pgrag.yaml`` naming them (one space each,
    the offline extractor); returns the configuration's path."""
    import yaml

    for b in benchmarks:
        with (work / f"{b.name}.jsonl").open("w", encoding="utf-8") as f:
            for i, (title, body) in enumerate(zip(b.titles, b.bodies)):
                f.write(json.dumps({"id": str(i), "title": title, "text": body}) + "\n")
    spaces = {
        b.name: {
            "extractor": {"name": "cooccurrence"},
            "sources": [{"path": f"{b.name}.jsonl", "format": "jsonl", "key_field": "id"}],
        }
        for b in benchmarks
    }
    cfg = {
        "llm": {"models": ["replay"]},
        "embedding": {"model": embedding_model, "dim": dim},
        "chunking": {"chunk_chars": 8000, "overlap_chars": 0},
        "realms": {REALM: {"spaces": spaces}},
    }
    path = work / "pgrag.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
    return path


def index(engine: Any, benchmarks: Sequence[Benchmark], *, communities: bool = False) -> dict[str, Any]:
    """The six index stages (and the two community stages with ``communities``) for each data set's space, in
    a fresh realm; per data set the stages' seconds and counts. Raises :class:`RuntimeError` when a passage is
    not one chunk or a model was called."""
    from evaluation.bench_index import fresh_realm
    from pgrag_dag.pipeline import index_documents

    fresh_realm(engine.dsn, REALM)
    out: dict[str, Any] = {}
    for b in benchmarks:
        t0 = time.perf_counter()
        meta = {r.stage: r.metadata for r in index_documents(engine, REALM, b.name, communities=communities)}
        if meta["chunks"]["chunks"] != len(b.titles) or meta["chunks"]["documents"] != len(b.titles):
            raise RuntimeError(
                f"{b.name}: {meta['chunks']['documents']} documents became {meta['chunks']['chunks']} "
                f"chunks; expected one chunk per passage ({len(b.titles)})"
            )
        out[b.name] = {
            "passages": len(b.titles),
            "entities": meta["relations"]["entities"],
            "relations": meta["relations"]["relations"],
            "communities": meta["communities"]["communities"] if communities else None,
            "seconds": round(time.perf_counter() - t0, 1),
            "stage_seconds": {s: m.get("seconds") for s, m in meta.items()},
        }
        print(f"indexed {REALM}.{b.name}: {out[b.name]}", flush=True)
    if engine.usage()["model_calls"]:
        raise RuntimeError(
            f"{engine.usage()['model_calls']} model call(s) while indexing; nothing may call a model"
        )
    return out


# -- the arms -------------------------------------------------------------------------------------
def run_arms(engine: Any, b: Benchmark, arms: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Every arm on every question of ``b`` (arm order rotated per question); per arm the ranked pool indices
    (result order, cut at max(KS)), chunks returned, how they came (``via``) and query seconds."""
    from pgrag_dag.query import QueryParam, query_data

    out = {a: {"ranked": [], "returned": [], "via": {}, "seconds": []} for a in arms}
    for qi, question in enumerate(progress(b.questions, f"{b.name}: {len(arms)} arms")):
        for arm in [*arms[qi % len(arms) :], *arms[: qi % len(arms)]]:
            mode, channels = ARMS[arm]
            param = QueryParam(
                space=b.name, mode=mode, **({} if channels is None else {"chunk_channels": channels})
            )
            t0 = time.perf_counter()
            res = query_data(question, param, dsn=engine.dsn, realm=REALM, embedder=engine.embedder())
            o = out[arm]
            o["seconds"].append(time.perf_counter() - t0)
            o["ranked"].append([int(c["doc_key"]) for c in res.chunks][: max(KS)])
            o["returned"].append(len(res.chunks))
            for c in res.chunks:
                o["via"][c["via"]] = o["via"].get(c["via"], 0) + 1
    return out


def baseline_rankings(engine: Any, b: Benchmark) -> dict[str, tuple[list[list[int]], str]]:
    """BM25 and exact dense rankings (pool indices) of ``b``'s questions, with what implements each."""
    keys, vectors = stored_chunk_vectors(engine.dsn, REALM, b.name)
    if len(keys) != len(b.titles):
        raise RuntimeError(f"{b.name}: {len(keys)} of {len(b.titles)} passages have a stored vector")
    queries = np.stack(engine.embedder().embed(list(b.questions), "query"))
    pool = np.array([int(k) for k in keys])
    exact = [pool[r].tolist() for r in exact_dense_rankings(vectors, queries)]
    return {
        BM25: bm25_rankings(b.texts, b.questions),
        EXACT: (exact, f"numpy cosine over the stored chunk vectors, {engine.settings.embedding.model}"),
    }


def evaluate(
    engine: Any, benchmarks: Sequence[Benchmark], arms: Sequence[str] = tuple(ARMS)
) -> dict[str, Any]:
    """Scores per data set: ``arms`` (each :func:`score` plus ``chunks_returned`` mean, ``p50_ms``, ``via``,
    ``ranked``) and ``baselines``; a data set without questions gets its ``note`` instead. Raises
    :class:`RuntimeError` when ``global`` returned a chunk (it is reported as returning none)."""
    out: dict[str, Any] = {}
    for b in benchmarks:
        if not b.scorable:
            out[b.name] = {"scored": False, "note": b.note}
            continue
        per: dict[str, Any] = {}
        for arm, o in run_arms(engine, b, arms).items():
            per[arm] = {
                **score(o["ranked"], b.gold),
                "chunks_returned": float(np.mean(o["returned"])),
                "p50_ms": round(1000 * statistics.median(o["seconds"]), 2),
                "via": o["via"],
                "ranked": o["ranked"],
            }
        if "global" in per and per["global"]["chunks_returned"]:
            raise RuntimeError(f"{b.name}: global mode returned chunks; the report says it returns none")
        base = {
            name: {**score(r, b.gold), "implementation": impl, "ranked": [x[: max(KS)] for x in r]}
            for name, (r, impl) in baseline_rankings(engine, b).items()
        }
        naive, exact = per.get("naive"), base[EXACT]
        hnsw = (
            None
            if naive is None
            else sum(set(a[:5]) == set(e[:5]) for a, e in zip(naive["ranked"], exact["ranked"]))
        )
        out[b.name] = {
            "scored": True,
            "questions": len(b.questions),
            "passages": len(b.titles),
            "arms": per,
            "baselines": base,
            "naive_top5_equals_exact": hnsw,
        }
    return out


# -- report ---------------------------------------------------------------------------------------
def recall_table(
    scores: dict[str, Any], indexing: dict[str, Any], embedding_model: str = LOCAL_MODEL
) -> Table:
    """One row per data set and arm: r@2, r@5, all-gold@2, all-gold@5, chunks returned, query p50."""
    rows: list[list[Any]] = []
    for ds, s in scores.items():
        if not s["scored"]:
            rows.append([ds, "(every arm)", *["—"] * 6])
            continue
        for arm, v in {**s["arms"], **s["baselines"]}.items():
            if arm == "global":
                rows.append([ds, arm, "—", "—", "—", "—", 0.0, v["p50_ms"]])
                continue
            rows.append(
                [
                    ds,
                    arm,
                    v["r@2"],
                    v["r@5"],
                    v["all@2"],
                    v["all@5"],
                    v.get("chunks_returned"),
                    v.get("p50_ms"),
                ]
            )
    notes = [f"{ds}: {s['note']}." for ds, s in scores.items() if not s["scored"]]
    counts = "; ".join(
        f"{ds} {s['questions']} questions over {s['passages']:,} passages "
        f"({indexing[ds]['entities']:,} entities, {indexing[ds]['relations']:,} relations, "
        f"communities {indexing[ds]['communities'] or 'not built'})"
        for ds, s in scores.items()
        if s["scored"]
    )
    note = (
        f"{counts}. r@k = |gold ∩ top-k| / |gold|; all@k = share of questions with every gold passage in the "
        "top k. Chunks are ranked in the order the result gives them: searched chunks (vector rank) first, "
        "then mention-expansion chunks (most matched entities mentioned, then document order), so "
        "local/mix/hybrid equal naive at k ≤ chunk_top_k (8) by construction; 'graph only' = chunk_channels "
        "[] (mention expansion alone). global returns relations (and community reports when built), no "
        "chunks: not scored (— ; 0 chunks returned). Baselines rank in-process; their p50 is not measured. "
        + " ".join(notes)
    )
    return Table(
        f"Passage recall on the multi-hop benchmarks (offline extractor, {embedding_model})",
        ["data set", "arm", "r@2", "r@5", "all-gold@2", "all-gold@5", "chunks returned", "query p50 ms"],
        rows,
        note=note,
    )


def index_table(indexing: dict[str, Any]) -> Table:
    """One row per indexed data set: passages, entities, relations, communities, seconds in total and per
    stage."""
    stages = list(dict.fromkeys(s for v in indexing.values() for s in v["stage_seconds"]))
    rows = [
        [
            ds,
            v["passages"],
            v["entities"],
            v["relations"],
            "not built" if v["communities"] is None else v["communities"],
            v["seconds"],
            *[v["stage_seconds"].get(s) for s in stages],
        ]
        for ds, v in indexing.items()
    ]
    return Table(
        f"Indexing ({len(stages)} stages, no model call)",
        [
            "data set",
            "passages",
            "entities",
            "relations",
            "communities",
            "total s",
            *[f"{s} s" for s in stages],
        ],
        rows,
        digits=1,
    )


def plot(scores: dict[str, Any], path: Path) -> Path | None:
    """Grouped bars of r@2, r@5 and all-gold@5 per arm, one panel per scored data set (PNG at ``path``);
    ``None`` (with a message) when matplotlib is not installed."""
    plt = plots.pyplot()
    if plt is None:
        return None
    scored = {ds: s for ds, s in scores.items() if s["scored"]}
    fig, axes = plt.subplots(1, len(scored), figsize=(7 * len(scored), 4.8), squeeze=False, sharey=True)
    metrics = (("r@2", "recall@2"), ("r@5", "recall@5"), ("all@5", "all gold in top 5"))
    for ax, (ds, s) in zip(axes[0], scored.items()):
        rows = {a: v for a, v in {**s["arms"], **s["baselines"]}.items() if a != "global"}
        x = np.arange(len(rows))
        for i, (key, label) in enumerate(metrics):
            ax.bar(x + (i - 1) * 0.27, [v[key] for v in rows.values()], 0.27, label=label)
        ax.set_xticks(
            x,
            [a.replace(" (baseline)", "\n(baseline)").replace(", graph only", "\ngraph only") for a in rows],
            rotation=45,
            ha="right",
            fontsize=8,
        )
        ax.set_title(f"{ds} ({s['questions']} questions, {s['passages']:,} passages)")
        ax.set_ylim(0, 1)
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].set_ylabel("share")
    axes[0][0].legend(loc="upper right", fontsize=8)
    return plots.save(fig, path, title="Passage recall by query mode (global returns no chunks: not shown)")


def run(
    benchmarks: Sequence[Benchmark],
    *,
    dsn: str,
    out_dir: Path,
    embedding_model: str = LOCAL_MODEL,
    dim: int = 384,
    arms: Sequence[str] = tuple(ARMS),
    communities: bool = False,
    name: str = "recall_multihop",
) -> RunRecord:
    """Index the scorable ``benchmarks`` in realm :data:`REALM` of ``dsn`` (dropped first; the community
    stages too with ``communities``), score every arm and both baselines, and write the run (JSON, Markdown,
    PNG) under ``out_dir``; returns the record."""
    from pgrag_dag.config import EmbeddingSettings, load_settings
    from pgrag_dag.engine import Engine

    load_start = [round(x, 2) for x in os.getloadavg()]
    indexed = [b for b in benchmarks if b.scorable]
    record = RunRecord(
        name,
        config={
            "data_sets": {
                b.name: {"passages": len(b.titles), "questions": len(b.questions), "indexed": b.scorable}
                for b in benchmarks
            },
            "arms": {
                a: {
                    "mode": ARMS[a][0],
                    "chunk_channels": "default [vector]" if ARMS[a][1] is None else list(ARMS[a][1]),
                }
                for a in arms
            },
            "ks": list(KS),
            "query": "QueryParam defaults (chunk_top_k 8, top_k 10, max_hops 2, keywords lexical)",
            "extractor": "cooccurrence",
            "chunking": {"chunk_chars": 8000, "overlap_chars": 0},
            "communities": "built (extractive reports)"
            if communities
            else "not built (no mode takes chunks from them)",
            "realm": REALM,
        },
        models={"extraction": "cooccurrence (no model)", "embedding": embedding_model, "chat": "replay"},
    )
    with timed_run(record), tempfile.TemporaryDirectory(prefix="pgrag_eval_recall_") as work:
        config = write_config(Path(work), indexed, embedding_model=embedding_model, dim=dim)
        # keyword arguments beat PGRAG_EMBEDDING__MODEL (the tests set it) and the file
        settings = load_settings(
            config, database_url=dsn, embedding=EmbeddingSettings(model=embedding_model, dim=dim)
        )
        engine = Engine.from_settings(settings)
        try:
            engine.embedder().embed(["warm-up"], "passage")
            indexing = index(engine, indexed, communities=communities)
            scores = evaluate(engine, benchmarks, arms)
        finally:
            engine.close()
        record.results = {
            "scores": scores,
            "indexing": indexing,
            "model_calls": engine.usage()["model_calls"],
            "load_average_start": load_start,
            "load_average_end": [round(x, 2) for x in os.getloadavg()],
            "cpus": os.cpu_count(),
        }
        record.tables = [recall_table(scores, indexing, embedding_model), index_table(indexing)]
        chart = plot(scores, out_dir / f"{name}.png")
        record.plots = [chart] if chart else []
    load = record.results
    record.tables.append(
        Table(
            "Machine",
            ["cpus", "load average at start (1/5/15 min)", "at end", "seconds"],
            [[load["cpus"], load["load_average_start"], load["load_average_end"], round(record.seconds, 1)]],
        )
    )
    write_run(record, out_dir)
    return record


def main(argv: Sequence[str] | None = None) -> int:
    """The command line: ``python -m evaluation.recall [--questions N] [--out DIR] [--data-dir DIR]``."""
    from evaluation.bench_index import Database

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--questions", type=int, default=100, help="questions per data set (default 100: all)")
    ap.add_argument("--out", type=Path, default=RESULTS, help="directory for the JSON, Markdown and PNG")
    ap.add_argument(
        "--data-dir",
        type=Path,
        help="embedded PostgreSQL data dir (kept); default a temporary one; PGRAG_DATABASE_URL wins",
    )
    ap.add_argument("--embedding-model", default=LOCAL_MODEL, help=f"embedding model (default {LOCAL_MODEL})")
    ap.add_argument("--dim", type=int, default=384, help="its width")
    ap.add_argument(
        "--communities",
        action="store_true",
        help="also build communities (extractive reports); they "
        "add no chunk to any mode, so recall is the same",
    )
    args = ap.parse_args(argv)
    database = Database(args.data_dir)
    try:
        record = run(
            load_benchmarks(args.questions),
            dsn=database.dsn,
            out_dir=args.out,
            embedding_model=args.embedding_model,
            dim=args.dim,
            communities=args.communities,
        )
    finally:
        database.close()
    print(record.markdown())
    print(f"written under {args.out}: {record.name}.json, .md, .png ({record.seconds:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
