"""Passage recall on the multi-hop benchmarks, offline, for every query mode that returns chunks (issue 17
item 1; the retrieval half of the paper's §8 that needs no chat model), and issue 26's PPR graph ranking.

    python -m evaluation.recall                       # the committed tables and chart; ~17 min on 2 cores
    python -m evaluation.recall --questions 20 --out /tmp/r   # a quick look
    python -m evaluation.recall --data-dir D --reuse-index    # a rerun over a kept index: minutes
    python -m evaluation.recall --data-dir D --reuse-index --tune   # the PPR grid, questions 1–50 only
    python -m evaluation.recall --extractor nlp --data-dir D2       # the graph arms over the nlp graph

**Data** (:func:`~evaluation.recall_report.load_benchmarks`): the HippoRAG subsets of MuSiQue (1,890
passages, 100 questions) and HotpotQA (994 passages, 100 questions) of the shared corpora; 2WikiMultiHopQA has
no question file, so it is neither indexed nor scored, and the table says so.

**Index** (:func:`index`): one realm, one space per data set, the product's six index stages (two more with
``--communities``), each passage one chunk (checked), the offline extractor and the local embedder; the run
fails if any model is called. ``--reuse-index`` keeps the realm when it holds every space with one embedded
chunk per passage (:func:`stored_index`).

**Arms** (:data:`ARMS`): ``query_data`` in each mode with the product's query defaults and the arm's
overrides, which name ``graph_ranking`` explicitly so that a change of the product's default does not change
what an arm means. ``"mentions"`` (today's order): searched chunks first, then mention-expansion chunks, so
local/mix/hybrid equal naive at k ≤ ``chunk_top_k``; "graph only" (``chunk_channels: []``) is what the graph
finds alone. ``"ppr"``: personalised PageRank (issue 26). An arm naming a field :class:`QueryParam` lacks is
skipped with a message, except :data:`~evaluation.recall_report.IMPLICIT` overrides (what a QueryParam
without the field does). ``global`` returns no chunks: run, checked, not scored.

**Baselines, same run**: BM25 over ``title\\ntext``, exact brute-force cosine over the stored chunk vectors.
**Metrics** (:mod:`evaluation.recall_report`): recall@k and all-gold@k, k ∈ {2, 5}, for the tune split
(questions 1–50), the held-out split (51–100) and all, with the questions better / worse than exact dense at
r@5; for :data:`ONTOPIC_ARMS` the on-topic share of the relations returned, by hop and walk rank (§8.13).
**Tuning** (``--tune``, :func:`run_tuning`): the PPR grid on questions 1–50 only. Writes
``recall_multihop.json`` / ``.md`` / ``.png`` (``recall_tuning.json`` / ``.md``) under ``--out`` (default
``evaluation/results``); ``evaluation/README.md`` says more. Needs ``evaluation/requirements-eval.txt``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from evaluation import recall_report as report
from evaluation import recall_tables as tables
from evaluation.harness import ROOT, RunRecord, Table, progress, timed_run, write_run
from evaluation.recall_report import (  # noqa: F401  (the names tests and bench_recall import from here)
    BM25,
    EXACT,
    KS,
    TUNE_QUESTIONS,
    Benchmark,
    all_gold,
    bm25_rankings,
    exact_dense_rankings,
    load_2wiki,
    load_benchmarks,
    passage_recall,
    score,
)

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

RESULTS = ROOT / "evaluation" / "results"
REALM = "eval_recall"
LOCAL_MODEL = "local/all-MiniLM-L6-v2"
Arms = Mapping[str, tuple[str, Mapping[str, Any]]]
"""Arm name → (mode, QueryParam overrides over the product's defaults)."""
_MENTIONS: dict[str, Any] = {"graph_ranking": "mentions", "collapse_duplicates": False}
_PPR: dict[str, Any] = {"graph_ranking": "ppr"}
ARMS: dict[str, tuple[str, dict[str, Any]]] = {
    "naive": ("naive", {}),
    "local": ("local", _MENTIONS),
    "mix": ("mix", _MENTIONS),
    "hybrid": ("hybrid", _MENTIONS),
    "global": ("global", {}),
    "local, graph only": ("local", {**_MENTIONS, "chunk_channels": ()}),
    "mix, graph only": ("mix", {**_MENTIONS, "chunk_channels": ()}),
    "hybrid, graph only": ("hybrid", {**_MENTIONS, "chunk_channels": ()}),
    "local, ppr": ("local", _PPR),
    "mix, ppr": ("mix", _PPR),
    "hybrid, ppr": ("hybrid", _PPR),
    "local, ppr, graph only": ("local", {**_PPR, "chunk_channels": ()}),
}
ONTOPIC_ARMS = ("local", "local, ppr")
"""The arms whose returned relations the on-topic table measures (§8.13)."""


# -- index ----------------------------------------------------------------------------------------
def write_config(
    work: Path,
    benchmarks: Sequence[Benchmark],
    *,
    embedding_model: str,
    dim: int,
    extractor: str = "cooccurrence",
) -> Path:
    """One JSONL source per data set under ``work`` and the ``pgrag.yaml`` naming them (one space each,
    the offline ``extractor``: ``cooccurrence`` or ``nlp``); returns the configuration's path."""
    import yaml

    for b in benchmarks:
        with (work / f"{b.name}.jsonl").open("w", encoding="utf-8") as f:
            for i, (title, body) in enumerate(zip(b.titles, b.bodies)):
                f.write(json.dumps({"id": str(i), "title": title, "text": body}) + "\n")
    spaces = {
        b.name: {
            "extractor": {"name": extractor},
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


def stored_index(
    dsn: str,
    benchmarks: Sequence[Benchmark],
    *,
    embedding_model: str,
    dim: int,
    communities: bool = False,
    extractor: str = "cooccurrence",
) -> tuple[dict[str, Any] | None, str]:
    """What :func:`index` would return, read from realm :data:`REALM` when it already holds every one of
    ``benchmarks``' spaces, indexed with ``embedding_model`` at width ``dim`` and by ``extractor`` (its
    extractions' model is ``offline-<extractor>``): exactly one chunk per passage (as many distinct doc
    keys), each with a vector, entities and relations (and communities when ``communities``); else
    ``None``. With the reason either way."""
    from psycopg import sql

    from pgrag_dag.names import schema_for
    from pgrag_dag.store import db
    from pgrag_dag.store.identifiers import qualified

    counts = sql.SQL(
        "SELECT count(*), count(DISTINCT doc_key), count(embedding), "
        "(SELECT count(*) FROM {e} WHERE space = %(s)s), (SELECT count(*) FROM {r} WHERE space = %(s)s), "
        "(SELECT count(*) FROM {c} WHERE space = %(s)s) "
        "FROM {d} WHERE space = %(s)s"
    ).format(**{t[0]: qualified(REALM, t) for t in ("documents", "entities", "relations", "communities")})
    out: dict[str, Any] = {}
    with db.connect(dsn) as conn:
        known = conn.execute("SELECT to_regclass('pgrag__control.realms') IS NOT NULL").fetchone()
        reg = None
        if known and known[0]:
            reg = conn.execute(
                "SELECT embedding_model, embedding_dim FROM pgrag__control.realms WHERE realm = %s "
                "AND to_regclass(%s) IS NOT NULL",
                (REALM, f"{schema_for(REALM)}.documents"),
            ).fetchone()
        if reg is None:
            return None, f"realm {REALM} is not in the database"
        if tuple(reg) != (embedding_model, dim):
            return None, f"realm {REALM} was indexed with {reg[0]} ({reg[1]}), not {embedding_model} ({dim})"
        for b in benchmarks:
            n = len(b.titles)
            row = conn.execute(counts, {"s": b.name}).fetchone()
            assert row is not None
            chunks, keys, embedded, entities, relations, built = row
            if (chunks, keys, embedded) != (n, n, n):
                return (
                    None,
                    f"{b.name}: {chunks} chunks of {keys} doc keys, {embedded} embedded; expected {n}",
                )
            if not entities or not relations or (communities and not built):
                return None, f"{b.name}: {entities} entities, {relations} relations, {built} communities"
            models = conn.execute(
                sql.SQL(
                    "SELECT DISTINCT x.model FROM {x} x JOIN {d} d ON d.id = x.chunk_id WHERE d.space = %s"
                ).format(x=qualified(REALM, "raw_extractions"), d=qualified(REALM, "documents")),
                (b.name,),
            ).fetchall()
            if [m for (m,) in models] != [f"offline-{extractor}"]:
                return None, f"{b.name}: extracted by {sorted(m for (m,) in models)}, not offline-{extractor}"
            out[b.name] = {"passages": n, "entities": entities, "relations": relations, "seconds": None}
            out[b.name].update(communities=built if communities else None, stage_seconds={}, reused=True)
    return out, "every space holds one embedded chunk per passage"


# -- the arms -------------------------------------------------------------------------------------
def run_arms(engine: Any, b: Benchmark, arms: Arms, relations_of: Collection[str] = ()) -> dict[str, Any]:
    """Every arm (``{arm: (mode, QueryParam overrides)}``) on every question of ``b`` (arm order rotated per
    question); per arm the ranked pool indices (result order, cut at max(KS)), chunks returned, how they
    came (``via``), query seconds and, for the arms in ``relations_of``, per question the relations returned
    as ``(id, hop, ranks["traversal"])``."""
    from pgrag_dag.query import QueryParam, query_data

    names = list(arms)
    out: dict[str, dict[str, Any]] = {
        a: {"ranked": [], "returned": [], "via": {}, "seconds": [], "relations": []} for a in names
    }
    for qi, question in enumerate(progress(b.questions, f"{b.name}: {len(names)} arms")):
        for arm in [*names[qi % len(names) :], *names[: qi % len(names)]]:
            mode, overrides = arms[arm]
            param = QueryParam(space=b.name, mode=mode, **overrides)  # type: ignore[arg-type]
            t0 = time.perf_counter()
            res = query_data(question, param, dsn=engine.dsn, realm=REALM, embedder=engine.embedder())
            o = out[arm]
            o["seconds"].append(time.perf_counter() - t0)
            o["ranked"].append([int(c["doc_key"]) for c in res.chunks][: max(KS)])
            o["returned"].append(len(res.chunks))
            for c in res.chunks:
                o["via"][c["via"]] = o["via"].get(c["via"], 0) + 1
            if arm in relations_of:
                o["relations"].append(
                    [(r["id"], r.get("hop"), (r.get("ranks") or {}).get("traversal")) for r in res.relations]
                )
    return out


def relation_sources(dsn: str, space: str, ids: Collection[int]) -> dict[int, set[int]]:
    """Relation id → the pool indices (doc keys) of its supporting chunks (``relations.chunk_ids``), for the
    relations ``ids`` of ``space``."""
    from psycopg import sql

    from pgrag_dag.store import db
    from pgrag_dag.store.identifiers import qualified

    with db.connect(dsn) as conn:
        rows = conn.execute(
            sql.SQL(
                "SELECT r.id, array_agg(DISTINCT d.doc_key) FROM {r} r "
                "CROSS JOIN LATERAL unnest(r.chunk_ids) AS c(id) JOIN {d} d ON d.id = c.id "
                "WHERE r.space = %s AND r.id = ANY(%s) GROUP BY r.id"
            ).format(r=qualified(REALM, "relations"), d=qualified(REALM, "documents")),
            (space, sorted(ids)),
        ).fetchall()
    return {rid: {int(k) for k in keys} for rid, keys in rows}


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
    engine: Any,
    benchmarks: Sequence[Benchmark],
    arms: Arms | Callable[[Benchmark], Arms],
    on_topic_arms: Collection[str] = ONTOPIC_ARMS,
) -> dict[str, Any]:
    """Scores per data set (over ``arms``, or ``arms(benchmark)``): ``arms`` and ``baselines`` (each
    :func:`score` over all questions, ``splits`` (:func:`~evaluation.recall_report.split_scores` against
    exact dense), ``ranked``; an arm also ``chunks_returned`` mean, ``p50_ms``, ``via``), ``on_topic`` (arm of
    ``on_topic_arms`` → split → :func:`~evaluation.recall_report.on_topic_shares`); a data set without
    questions gets its ``note`` instead. Raises :class:`RuntimeError` when ``global`` returned a chunk (it
    is reported as returning none)."""
    out: dict[str, Any] = {}
    for b in benchmarks:
        if not b.scorable:
            out[b.name] = {"scored": False, "note": b.note}
            continue
        base_rankings = baseline_rankings(engine, b)
        exact_ranked = [x[: max(KS)] for x in base_rankings[EXACT][0]]
        chosen = arms(b) if callable(arms) else arms
        topical = [a for a in on_topic_arms if a in chosen]
        runs = run_arms(engine, b, chosen, relations_of=topical)
        per = {
            arm: {
                **score(o["ranked"], b.gold),
                "splits": report.split_scores(o["ranked"], b.gold, exact_ranked),
                "chunks_returned": float(np.mean(o["returned"])),
                "p50_ms": round(1000 * statistics.median(o["seconds"]), 2),
                "via": o["via"],
                "ranked": o["ranked"],
            }
            for arm, o in runs.items()
        }
        if "global" in per and per["global"]["chunks_returned"]:
            raise RuntimeError(f"{b.name}: global mode returned chunks; the report says it returns none")
        base = {
            name: {
                **score(r, b.gold),
                "splits": report.split_scores(r, b.gold, exact_ranked),
                "implementation": impl,
                "ranked": [x[: max(KS)] for x in r],
            }
            for name, (r, impl) in base_rankings.items()
        }
        ids = {r[0] for a in topical for q in runs[a]["relations"] for r in q}
        sources = relation_sources(engine.dsn, b.name, ids) if ids else {}
        naive = per.get("naive")
        out[b.name] = {
            "scored": True,
            "questions": len(b.questions),
            "passages": len(b.titles),
            "splits": {n: report.split_label(n, pos) for n, pos in report.splits(len(b.questions)).items()},
            "arms": per,
            "baselines": base,
            "on_topic": {a: report.on_topic_by_split(runs[a]["relations"], sources, b.gold) for a in topical},
            "naive_top5_equals_exact": None
            if naive is None
            else sum(set(a[:5]) == set(e[:5]) for a, e in zip(naive["ranked"], exact_ranked)),
        }
    return out


# -- runs -----------------------------------------------------------------------------------------
def _execute(
    record: RunRecord,
    indexed: Sequence[Benchmark],
    measure: Callable[[Any], dict[str, Any]],
    present: Callable[[dict[str, Any], dict[str, Any]], tuple[list[Table], list[Path]]],
    *,
    out_dir: Path,
    dsn: str,
    embedding_model: str,
    dim: int,
    communities: bool,
    reuse_index: bool,
    extractor: str = "cooccurrence",
) -> RunRecord:
    """Over realm :data:`REALM` of ``dsn`` holding ``indexed``, built by the offline ``extractor`` (kept when
    ``reuse_index`` and :func:`stored_index` finds it, then brought to the current schema version; else
    indexed afresh):
    ``record.results`` = ``measure(engine)`` with the indexing, model calls and machine load, the tables and
    plots of ``present(results, indexing)``; the run is written under ``out_dir``."""
    from pgrag_dag.config import EmbeddingSettings, load_settings
    from pgrag_dag.engine import Engine

    load_start = [round(x, 2) for x in os.getloadavg()]
    with timed_run(record), tempfile.TemporaryDirectory(prefix="pgrag_eval_recall_") as work:
        config = write_config(
            Path(work), indexed, embedding_model=embedding_model, dim=dim, extractor=extractor
        )
        # keyword arguments beat PGRAG_EMBEDDING__MODEL (the tests set it) and the file
        settings = load_settings(
            config, database_url=dsn, embedding=EmbeddingSettings(model=embedding_model, dim=dim)
        )
        engine = Engine.from_settings(settings)
        try:
            engine.embedder().embed(["warm-up"], "passage")
            indexing = None
            if reuse_index:
                indexing, why = stored_index(
                    dsn,
                    indexed,
                    embedding_model=embedding_model,
                    dim=dim,
                    communities=communities,
                    extractor=extractor,
                )
                print(f"--reuse-index: {'reusing' if indexing else 'indexing afresh'} ({why})", flush=True)
                if indexing is not None:
                    engine.init_realm(REALM)  # a realm of an earlier revision: the current DDL (idempotent)
            if indexing is None:
                indexing = index(engine, indexed, communities=communities)
            results = measure(engine)
        finally:
            engine.close()
        record.results = {
            **results,
            "indexing": indexing,
            "index_reused": all(v.get("reused") for v in indexing.values()),
            "model_calls": engine.usage()["model_calls"],
            "load_average_start": load_start,
            "load_average_end": [round(x, 2) for x in os.getloadavg()],
            "cpus": os.cpu_count(),
        }
        record.tables, record.plots = present(record.results, indexing)
    record.tables.append(tables.machine_table(record.results, record.seconds))
    write_run(record, out_dir)
    return record


def _models(embedding_model: str, extractor: str = "cooccurrence") -> dict[str, str]:
    return {"extraction": f"{extractor} (no model)", "embedding": embedding_model, "chat": "replay"}


def run(
    benchmarks: Sequence[Benchmark],
    *,
    dsn: str,
    out_dir: Path,
    embedding_model: str = LOCAL_MODEL,
    dim: int = 384,
    arms: Sequence[str] = tuple(ARMS),
    communities: bool = False,
    reuse_index: bool = False,
    name: str = "recall_multihop",
    extractor: str = "cooccurrence",
) -> RunRecord:
    """Index the scorable ``benchmarks`` in realm :data:`REALM` of ``dsn`` (dropped first unless
    ``reuse_index`` finds them indexed; the community stages too with ``communities``), score every arm that
    QueryParam can express and both baselines, and write the run (JSON, Markdown, PNG) under ``out_dir``;
    returns the record."""
    indexed = [b for b in benchmarks if b.scorable]
    runnable, arm_config, skipped = report.resolve_arms({a: ARMS[a] for a in arms}, indexed[0].name)
    record = RunRecord(
        name,
        config={
            "data_sets": {
                b.name: {"passages": len(b.titles), "questions": len(b.questions), "indexed": b.scorable}
                for b in benchmarks
            },
            "arms": arm_config,
            "ks": list(KS),
            "splits": f"tune = questions 1–{TUNE_QUESTIONS}, held out = {TUNE_QUESTIONS + 1}–100, all",
            "query": "QueryParam defaults (chunk_top_k 8, top_k 10, max_hops 2, keywords lexical) "
            "and each arm's overrides",
            "on_topic_arms": [a for a in ONTOPIC_ARMS if a in runnable],
            "extractor": extractor,
            "chunking": {"chunk_chars": 8000, "overlap_chars": 0},
            "communities": "built (extractive reports)"
            if communities
            else "not built (no mode takes chunks from them)",
            "realm": REALM,
            "reuse_index": reuse_index,
        },
        models=_models(embedding_model, extractor),
    )

    def present(res: dict[str, Any], indexing: dict[str, Any]) -> tuple[list[Table], list[Path]]:
        scores = res["scores"]
        out = [
            tables.recall_table(scores, indexing, embedding_model),
            tables.split_table(scores),
            *[tables.on_topic_table(ds, s["on_topic"]) for ds, s in scores.items() if s.get("on_topic")],
            tables.index_table(indexing),
        ]
        if skipped:
            out.append(Table("Arms skipped", ["arm", "why"], [[a, w] for a, w in skipped.items()]))
        chart = tables.plot(scores, out_dir / f"{name}.png")
        return out, [chart] if chart else []

    return _execute(
        record,
        indexed,
        lambda engine: {"scores": evaluate(engine, benchmarks, runnable), "skipped_arms": skipped},
        present,
        out_dir=out_dir,
        dsn=dsn,
        embedding_model=embedding_model,
        dim=dim,
        communities=communities,
        reuse_index=reuse_index,
        extractor=extractor,
    )


def run_tuning(
    benchmarks: Sequence[Benchmark],
    *,
    dsn: str,
    out_dir: Path,
    embedding_model: str = LOCAL_MODEL,
    dim: int = 384,
    reuse_index: bool = False,
    grid: Mapping[str, Sequence[Any]] = report.TUNING_GRID,
    name: str = "recall_tuning",
) -> RunRecord:
    """The PPR grid (:func:`~evaluation.recall_report.tuning_variants` of ``grid``) in local mode with
    ``graph_ranking: "ppr"``, beside the arm "local" (mentions) and the baselines, on the **tune split only**:
    questions 1–:data:`TUNE_QUESTIONS` of each scorable set, the only ones queried or embedded. Names the best
    variant by mean r@5 over the sets (:func:`~evaluation.recall_report.tuning_summary`) and writes the run
    under ``out_dir``. Raises :class:`RuntimeError` when QueryParam lacks a PPR field."""
    tune = [b.head(TUNE_QUESTIONS) for b in benchmarks if b.scorable]
    variants = report.tuning_variants(grid)
    first = ("local", {**_PPR, **report.resolve_variant(next(iter(variants.values())), 1)})
    local, _, skipped = report.resolve_arms({"local": ARMS["local"], "ppr": first}, tune[0].name)
    if skipped:
        raise RuntimeError(f"--tune: {skipped['ppr']}")
    del local["ppr"]

    def arms(b: Benchmark) -> Arms:
        assert len(b.questions) <= TUNE_QUESTIONS  # the held-out questions are never queried
        pool = len(b.titles)
        return {
            **local,
            **{v: ("local", {**_PPR, **report.resolve_variant(g, pool)}) for v, g in variants.items()},
        }

    record = RunRecord(
        name,
        config={
            "data_sets": {b.name: {"passages": len(b.titles), "questions": len(b.questions)} for b in tune},
            "questions": f"1–{TUNE_QUESTIONS} of each set (the tune split); "
            f"{TUNE_QUESTIONS + 1}–100 are never queried",
            "mode": "local",
            "overrides": {**_PPR, "ppr_damping, ppr_prior_weight, ppr_prior_k, ppr_edges": "the variant's"},
            "grid": report.jsonable(dict(grid)),
            "selection": "best mean r@5 over the data sets, ties by mean r@2",
            "realm": REALM,
            "reuse_index": reuse_index,
        },
        models=_models(embedding_model),
    )

    def measure(engine: Any) -> dict[str, Any]:
        scores = evaluate(engine, tune, arms, on_topic_arms=())
        return {
            "recall_tuning": report.tuning_summary(scores, variants, {b.name: len(b.titles) for b in tune})
        }

    return _execute(
        record,
        tune,
        measure,
        lambda res, indexing: ([tables.tuning_table(res["recall_tuning"]), tables.index_table(indexing)], []),
        out_dir=out_dir,
        dsn=dsn,
        embedding_model=embedding_model,
        dim=dim,
        communities=False,
        reuse_index=reuse_index,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """The command line: ``python -m evaluation.recall [--questions N] [--out DIR] [--data-dir DIR]
    [--reuse-index] [--tune] [--communities]``."""
    from evaluation.bench_index import Database

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--questions", type=int, default=100, help="questions per data set (default 100: all)")
    ap.add_argument("--out", type=Path, default=RESULTS, help="directory for the JSON, Markdown and PNG")
    ap.add_argument(
        "--data-dir",
        type=Path,
        help="embedded PostgreSQL data dir (kept); default a temporary one; PGRAG_DATABASE_URL wins",
    )
    ap.add_argument(
        "--reuse-index",
        action="store_true",
        help=f"keep realm {REALM} when it holds every data set's space with one embedded chunk per passage "
        "(counts checked); else index afresh",
    )
    ap.add_argument(
        "--tune",
        action="store_true",
        help=f"run the PPR parameter grid on questions 1–{TUNE_QUESTIONS} of each set only (local mode) "
        "and write recall_tuning.json/.md instead of the recall run",
    )
    ap.add_argument(
        "--extractor",
        choices=("cooccurrence", "nlp"),
        default="cooccurrence",
        help="the offline extractor that builds the graph (issue 27: nlp); a realm another one built is "
        "indexed afresh (keep each in its own --data-dir)",
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
    given = {"dsn": database.dsn, "out_dir": args.out, "embedding_model": args.embedding_model}
    given.update(dim=args.dim, reuse_index=args.reuse_index)
    try:
        if args.tune:
            record = run_tuning(load_benchmarks(min(args.questions, TUNE_QUESTIONS)), **given)
        else:
            record = run(
                load_benchmarks(args.questions),
                communities=args.communities,
                extractor=args.extractor,
                name="recall_multihop"
                if args.extractor == "cooccurrence"
                else f"recall_multihop_{args.extractor}",
                **given,
            )
    finally:
        database.close()
    print(record.markdown())
    print(f"written under {args.out}: {record.name}.json, .md ({record.seconds:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
