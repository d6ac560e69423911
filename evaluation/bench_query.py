#!/usr/bin/env python
"""Query-latency benchmark: ``query_data`` per mode against LightRAG (context only), same data, one run.

For each size (default about 10k and 100k relations) it

1. builds a graph from the first N 2WikiMultiHopQA passages with the indexing stages of
   :mod:`pgrag_dag.pipeline` and the chat model REPLAYED: an extraction response is synthesised per
   chunk (``bench_index``'s helpers, denser here: up to ``--triples-per-chunk`` triples — the title to
   each name, then pairs of names nearest first) and cached, so extraction makes no model call. N is
   the shortest passage prefix whose synthetic triples reach the size; the density is the same at
   every size, so only the size changes. Embeddings: the hashing embedder at width 384, written by the
   embeddings stage with the HNSW indexes dropped, then rebuilt once with a large
   ``maintenance_work_mem`` (the realm's own index DDL, ``embedding_columns.create_embedding_indexes``) and
   ``VACUUM ANALYZE``;
2. exports the same live entities, relations and chunks as JSON, and loads them into LightRAG
   (``lightrag-hku``, own venv ``evaluation/.venv-lightrag``) with ``ainsert_custom_kg`` in a
   subprocess, with the same hashing embedder (checked for parity) wrapped in its ``EmbeddingFunc``;
3. starts two query workers — ``query_data`` in this venv, LightRAG ``aquery(only_need_context=True)``
   with keywords supplied (no LLM call) in its venv — and interleaves them question by question over
   ~50 questions about entities sampled from the graph, every mode each system has, for ``--rounds``
   rounds after a warm-up. Latency is timed inside each worker with ``perf_counter``.

Reported: p50/p95 per mode and system, ratios (LightRAG / ours), growth between sizes, peak RSS of
each query worker (``ru_maxrss``, build excluded), the PostgreSQL server's PSS, items returned per
query, and where the time of our mix query goes (self time of each retrieval call, measured by
wrapping the engine's functions at runtime in the worker). Targets (issue 5): mix p95 <= 50 ms at 100k
relations, >= 4x faster than LightRAG (mix, medians), mix p95 growing < 1.5x from 10k to 100k.

    .venv/bin/python evaluation/bench_query.py --sizes 10000 100000
    .venv/bin/python evaluation/bench_query.py --sizes 10000 --data-dir /tmp/bq   # keep graphs for re-runs
    .venv/bin/python evaluation/bench_query.py --param graph_ranking=ppr          # QueryParam overrides
    .venv/bin/python evaluation/bench_query.py --variant mentions --variant ppr graph_ranking=ppr

``--param KEY=VALUE`` (repeatable; the value parsed as JSON when it is JSON, else a string) overrides a
:class:`~pgrag_dag.query_param.QueryParam` field in every query of ours. ``--variant NAME [KEY=VALUE ...]``
(repeatable) times our engine once per variant in the same run — a query worker each, interleaved with
LightRAG's — as the systems ``pgrag (NAME)``, each with ``--param``'s overrides and then its own. With a
walk variant (``graph_ranking=ppr``, issue 26) the report adds the walk's share of the mix time (the steps
of :data:`~bench_query_workers.WALK_STEPS`), the walk-graph build (the first ppr query of a worker, in the
warm-up: its time, steps and RSS growth) and the walk-graph cache's memory (``ppr.CACHE.nbytes`` after the
warm-up, its graph's vertices and edges, per 100k relations) beside each worker's RSS growth (at start,
after the warm-up, at the end). Issue 26's target is mix p95 <= 60 ms at 100k with ``ppr``.

This is a benchmark, not a test. The machine is shared and noisy: quote medians and ratios from one
run (BENCHMARKS.md). Results: Markdown on stdout, JSON in ``evaluation/results/bench_query.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import bench_index as bi  # noqa: E402  (stdlib-only at import time: also importable from LightRAG's venv)
from bench_query_workers import (  # noqa: E402  (the query workers, run as subprocesses of this script)
    DIM,
    MODES,
    SIDE,
    SPACE,
    WALK_BUILD_STEPS,
    WALK_NOT_STEPS,
    WALK_STEPS,
    Worker,
    engine_source,
    ensure_lightrag_venv,
    is_walk_step,
    lightrag_worker,
    parse_param,
    pgrag_worker,
    postgres_pss_mb,
)

SYNTH_VERSION = "dense-1"
HNSW_TABLES = ("documents", "entities", "relations")
TARGET_MIX_P95_MS, TARGET_SPEEDUP, TARGET_GROWTH = 50.0, 4.0, 1.5
TARGET_MIX_P95_MS_PPR = 60.0  # issue 26: mix p95 with graph_ranking = "ppr" at 100k relations
OURS = "ours"
"""Our system's key when the engine runs with one parameter set (``--variant`` not given)."""
ANCHORS = {  # BENCHMARKS.md, LightRAG 1.5.7 on a machine like this one: (p50, p95) ms
    10_000: {
        "mix": (84, 102),
        "local": (48, 69),
        "global": (29, 43),
        "hybrid": (68, 93),
        "naive": (6.5, 7.6),
    },
    100_000: {
        "mix": (200, 251),
        "local": (118, 155),
        "global": (82, 112),
        "hybrid": (226, 269),
        "naive": (13, 18),
    },
}


# -- synthetic extraction, denser than bench_index's ----------------------------------------------
_SINGLE = re.compile(r"[A-Z][a-z][\w'’\-]{2,}")
_NOT_NAMES = {
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
    "monday",
    "tuesday",
    "wednesday",
    "thursday",
    "friday",
    "saturday",
    "sunday",
    "however",
    "although",
    "they",
    "their",
    "there",
    "these",
    "this",
    "after",
    "before",
    "during",
}
MAX_NAMES = 20


def chunk_names(head: str, text: str) -> list[str]:
    """Names in order of first appearance: ``bench_index``'s capitalised phrases, and single capitalised
    words (4+ letters) that are not sentence-initial, inside a phrase, or a month/day/function word."""
    phrases = bi.capitalised_phrases(text)
    in_phrase = {w for p in phrases for w in p.split()}
    found = [(text.find(p), p) for p in phrases]
    pos = 0
    for sentence in bi._SENTENCE.split(text):
        start = text.find(sentence, pos)
        pos = max(start, pos)
        for m in re.finditer(r"\S+", sentence):
            word = re.sub(r"['’]s$", "", m.group().strip('()[]"“”,;:.!?'))
            if (
                m.start()
                and _SINGLE.fullmatch(word)
                and word not in in_phrase
                and word.lower() not in _NOT_NAMES
            ):
                found.append((start + m.start(), word))
    seen, names = {head.lower()}, []
    for _, name in sorted(found):
        if name.lower() not in seen:
            seen.add(name.lower())
            names.append(name)
    return names[:MAX_NAMES]


def dense_extraction(head: str, text: str, cap: int) -> dict[str, Any]:
    """Entities (the title, then :func:`chunk_names`) and up to ``cap`` triples: the title to every
    name (as ``bench_index``), then pairs of names at distance 1, 2, ... in text order. Predicates,
    negation (~1 in 10), confidence (~5% under the 0.5 floor) and years come from SHA-256."""
    sentences = [s.strip() for s in bi._SENTENCE.split(text) if s.strip()] or [text]

    def context(*names: str) -> str:
        for want in (names, names[-1:]):
            for s in sentences:
                if all(n in s for n in want):
                    return s[:240]
        return sentences[0][:240]

    head = head.strip()
    names = chunk_names(head, text)
    entities = [
        {"name": n, "type": bi._entity_type(n), "description": context(n), "aliases": []} for n in names
    ]
    entities.insert(
        0, {"name": head, "type": bi._entity_type(head), "description": sentences[0][:240], "aliases": []}
    )
    pairs = [(head, n) for n in names] + [
        (names[i], names[i + d]) for d in range(1, len(names)) for i in range(len(names) - d)
    ]
    triples = []
    for j, (s, o) in enumerate(pairs[:cap]):
        h = bi._h(s, o, text[:64])
        sentence = context(s, o) if s != head else context(o)
        year = bi._YEAR.search(sentence)
        triples.append(
            {
                "subject": s,
                "predicate": bi.PREDICATES[h % len(bi.PREDICATES)],
                "object": o,
                "description": sentence,
                "negated": (h >> 8) % 10 == 0,
                "confidence": round(0.47 + ((h >> 16) % 54) / 100, 2),
                "valid_from": year.group(1) if year and j % 2 == 0 else None,
                "valid_to": None,
            }
        )
    return {"entities": entities, "triples": triples}


Extract = Callable[[str, str, int], dict[str, Any]]
"""A synthetic extraction: (title entity, chunk text, triple cap) → {"entities": [...], "triples": [...]}."""


@contextlib.contextmanager
def dense_synthesis(cap: int, extract: Extract = dense_extraction) -> Iterator[None]:
    """Let ``bench_index.seed_synthetic_cache`` cache ``extract``'s responses (default
    :func:`dense_extraction`) instead of its own."""
    original = bi.synthesise_extraction
    bi.synthesise_extraction = lambda title, text: json.dumps(extract(title, text, cap), ensure_ascii=False)
    try:
        yield
    finally:
        bi.synthesise_extraction = original


def passages_for(
    size: int, cap: int, passages: Iterable[dict[str, Any]], extract: Extract = dense_extraction
) -> int | None:
    """The shortest passage prefix whose distinct synthetic triples (``extract``'s, over the confidence
    floor, one chunk per passage) reach ``size``; ``None`` when the whole corpus does not."""
    keys: set[tuple[str, str, str, bool]] = set()
    for i, p in enumerate(passages, 1):
        text = (p.get("text") or "").strip()
        if not text:
            continue
        for t in extract(p.get("title") or "", text, cap)["triples"]:
            if t["confidence"] >= 0.5 and t["subject"].lower() != t["object"].lower():
                keys.add((t["subject"].lower(), t["predicate"], t["object"].lower(), t["negated"]))
        if len(keys) >= size:
            return i
    return None


# -- building our graph ---------------------------------------------------------------------------
@contextlib.contextmanager
def pgoptions(options: str) -> Iterator[None]:
    """Session settings for the connections opened inside (libpq ``PGOPTIONS``)."""
    before = os.environ.get("PGOPTIONS")
    os.environ["PGOPTIONS"] = f"{before or ''} {options}".strip()
    try:
        yield
    finally:
        os.environ.pop("PGOPTIONS") if before is None else os.environ.__setitem__("PGOPTIONS", before)


def synthetic_settings(dsn: str, realm: str, source_dir: Path) -> Any:
    """Settings for one benchmark realm: the ``*.txt`` files of ``source_dir`` as space ``wiki2``, the chat
    model ``replay`` only, the hashing embedder at width 384, no gleaning, default chunking and gates."""
    from pgrag_dag.config import (
        ChunkingSettings,
        EmbeddingSettings,
        ExtractionSettings,
        GateSettings,
        LLMSettings,
        RealmSpec,
        SourceSpec,
        SpaceSpec,
        load_settings,
    )

    return load_settings(
        database_url=dsn,
        config_dir=source_dir,
        data_dir=source_dir / ".pgrag",
        cassettes=[],
        llm=LLMSettings(models=["replay"]),
        embedding=EmbeddingSettings(model="hashing-sha256", dim=DIM),
        chunking=ChunkingSettings(),
        extraction=ExtractionSettings(gleaning_passes=0),
        gates=GateSettings(),
        realms={
            realm: RealmSpec(spaces={SPACE: SpaceSpec(sources=[SourceSpec(path=source_dir, glob="*.txt")])})
        },
    )


def index_fresh(
    engine: Any,
    dsn: str,
    realm: str,
    mwm: str,
    *,
    drop_hnsw: bool = True,
    on_stage: Callable[[str, float, dict[str, Any]], None] | None = None,
) -> tuple[dict[str, float], dict[str, Any], list[str]]:
    """Run the six index stages once on ``realm`` (space ``wiki2``); with ``drop_hnsw`` the HNSW indexes
    are dropped before the embeddings stage (no per-row index inserts), then (re)built once with
    ``maintenance_work_mem`` = ``mwm`` and the tables VACUUM ANALYZEd. Prints a line per stage;
    ``on_stage(name, seconds, metadata)`` is called after each.

    Returns (seconds per stage plus ``hnsw_build`` and ``vacuum_analyze``, each stage's metadata, the
    realm's HNSW index names)."""
    from psycopg import sql

    from pgrag_dag.store import db, embedding_columns, schema
    from pgrag_dag.store.identifiers import qualified

    seconds: dict[str, float] = {}
    meta: dict[str, Any] = {}
    for name, fn in bi.stage_functions(False):
        if (
            name == "embeddings" and drop_hnsw
        ):  # write vectors without per-row HNSW inserts; build each index once after
            with db.connect(dsn, autocommit=True) as conn:
                for t in HNSW_TABLES:
                    conn.execute(
                        sql.SQL("DROP INDEX IF EXISTS {}.{}").format(
                            sql.Identifier(schema.schema_for(realm)), sql.Identifier(f"{t}_embedding_hnsw")
                        )
                    )
        t0 = time.perf_counter()
        meta[name] = fn(engine, realm, SPACE).metadata
        seconds[name] = time.perf_counter() - t0
        print(f"  {realm}: stage {name} {seconds[name]:.1f} s", flush=True)
        if on_stage:
            on_stage(name, seconds[name], meta[name])
    t0 = time.perf_counter()
    with (
        pgoptions(f"-c maintenance_work_mem={mwm} -c max_parallel_maintenance_workers=1"),
        db.connect(dsn, autocommit=True) as conn,
    ):
        # the realm's own index DDL re-creates the dropped HNSW indexes (init_realm would not: it runs
        # no DDL on a realm already at the current schema version, issue 11)
        embedding_columns.create_embedding_indexes(conn, realm)
    seconds["hnsw_build"] = time.perf_counter() - t0
    print(f"  {realm}: HNSW build {seconds['hnsw_build']:.1f} s", flush=True)
    t0 = time.perf_counter()
    with db.connect(dsn, autocommit=True) as conn:
        # entity_keys too: without statistics the walk's seed linking (walk_graph.link_keys) is planned
        # as a scan of the space's keys per question n-gram (~100 ms at 10k relations instead of ~1 ms)
        for t in ("documents", "entities", "relations", "doc_mentions", "entity_keys"):
            if conn.execute("SELECT to_regclass(%s)", (f"{schema.schema_for(realm)}.{t}",)).fetchone()[0]:
                conn.execute(sql.SQL("VACUUM (ANALYZE) {}").format(qualified(realm, t)))
        indexes = [
            r[0]
            for r in conn.execute(
                "SELECT indexname FROM pg_indexes WHERE schemaname = %s AND indexname LIKE '%%_hnsw'",
                (schema.schema_for(realm),),
            )
        ]
    seconds["vacuum_analyze"] = time.perf_counter() - t0
    return seconds, meta, sorted(indexes)


def build_graph(dsn: str, realm: str, n_passages: int, cap: int, mwm: str) -> dict[str, Any]:
    """Index the first ``n_passages`` passages into ``realm`` (fresh) with the replayed synthetic model."""
    from pgrag_dag.engine import Engine

    tmpdir = Path(tempfile.mkdtemp(prefix="pgrag_bench_query_"))
    try:
        written = bi.prepare_wiki2(n_passages, tmpdir)
        settings = synthetic_settings(dsn, realm, tmpdir)
        with dense_synthesis(cap):
            seeded = bi.seed_synthetic_cache(settings, dsn, realm, SPACE)
        bi.fresh_realm(dsn, realm)
        engine = Engine.from_settings(settings)
        try:
            seconds, meta, indexes = index_fresh(engine, dsn, realm, mwm)
        finally:
            engine.close()
        raw = meta["raw_extractions"]
        if raw.get("model_calls") or raw.get("chunks_failed"):
            print(
                f"warning: {raw.get('model_calls')} model calls, {raw.get('chunks_failed')} failed chunks",
                file=sys.stderr,
            )
        rel = meta["relations"]
        return {
            "passages": written,
            "chunks": meta["chunks"]["chunks"],
            "triples_per_chunk_cap": cap,
            "synthesis": seeded,
            "entities": rel.get("entities"),
            "relations": rel.get("relations"),
            "mentions": rel.get("mentions"),
            "seconds": {k: round(v, 2) for k, v in seconds.items()},
            "hnsw_indexes": indexes,
            "maintenance_work_mem": mwm,
        }
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)


def export_graph(dsn: str, realm: str, path: Path, n_questions: int, seed: int) -> dict[str, Any]:
    """Write the live graph (what our queries can return) and the questions as JSON for LightRAG."""
    from psycopg import sql

    from pgrag_dag.providers.embedding import HashingEmbedder
    from pgrag_dag.store import db, schema

    def rows(q: str) -> list[tuple[Any, ...]]:
        return conn.execute(
            sql.SQL(q).format(s=sql.Identifier(schema.schema_for(realm))), (SPACE,)
        ).fetchall()

    with db.connect(dsn) as conn:
        chunks = rows("SELECT id, text FROM {s}.documents WHERE space = %s ORDER BY id")
        ents = rows("""SELECT e.id, e.name, e.entity_type, e.description,
                              (SELECT min(m.chunk_id) FROM {s}.doc_mentions m WHERE m.entity_id = e.id)
                         FROM {s}.entities e WHERE e.space = %s AND e.dormant_since IS NULL ORDER BY e.id""")
        rels = rows("""SELECT r.id, r.source_id, r.target_id, r.predicate, r.description, r.negated, r.weight,
                              r.chunk_ids[1]
                         FROM {s}.relations r WHERE r.space = %s AND r.dormant_since IS NULL
                          AND r.superseded_by IS NULL ORDER BY r.id""")
    name = {i: n for i, n, *_ in ents}
    rels = [r for r in rels if r[1] in name and r[2] in name]
    first_predicate: dict[int, str] = {}
    for _, s, o, p, *_ in rels:
        first_predicate.setdefault(s, p)
        first_predicate.setdefault(o, p)
    pool = [i for i, *_ in ents if i in first_predicate]
    picked = random.Random(seed).sample(pool, min(n_questions, len(pool)))
    questions = [
        {
            "entity_id": i,
            "question": f"What do the records say about {name[i]}, and who or what is it connected to?",
            "ll_keywords": [name[i]],
            "hl_keywords": [first_predicate[i].replace("_", " ")],
        }
        for i in picked
    ]
    samples = [f"{n}: {d}" for _, n, _, d, _ in ents[:5]] + [questions[0]["question"] if questions else "x"]
    payload = {
        "realm": realm,
        "space": SPACE,
        "dim": DIM,
        "chunks": [{"content": t, "source_id": f"c{i}"} for i, t in chunks],
        "entities": [
            {"entity_name": n, "entity_type": t, "description": d or n, "source_id": f"c{c}"}
            for _, n, t, d, c in ents
        ],
        "relationships": [
            {
                "src_id": name[s],
                "tgt_id": name[o],
                "keywords": ("NOT " if neg else "") + p,
                "description": d or p,
                "weight": float(w or 1),
                "source_id": f"c{c}",
            }
            for _, s, o, p, d, neg, w, c in rels
        ],
        "questions": questions,
        "parity": {"texts": samples, "vectors": [v.tolist() for v in HashingEmbedder(DIM).embed(samples)]},
    }
    text = json.dumps(payload, ensure_ascii=False)
    path.write_text(text, encoding="utf-8")
    return {
        "path": str(path),
        "sha256": hashlib.sha256(text.encode()).hexdigest()[:16],
        "chunks": len(chunks),
        "entities": len(ents),
        "relations": len(rels),
        "questions": questions,
    }


# -- the coordinator ------------------------------------------------------------------------------
def pct(xs: list[float], q: int) -> float:
    return (
        round(statistics.quantiles(xs, n=100, method="inclusive")[q - 1], 2)
        if len(xs) > 1
        else round(xs[0], 2)
    )


def summarise_runs(samples: dict[str, dict[str, list[dict[str, Any]]]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for system, by_mode in samples.items():
        for mode, runs in by_mode.items():
            ok = [r for r in runs if r.get("ok")]
            ms = [r["ms"] for r in ok]
            entry: dict[str, Any] = {"n": len(runs), "failed": len(runs) - len(ok)}
            sources = [r["keyword_source"] for r in ok if r.get("keyword_source")]
            if sources:
                entry["keyword_sources"] = {s: sources.count(s) for s in sorted(set(sources))}
            if ms:
                items = {k: statistics.median(r["items"][k] for r in ok) for k in ok[0]["items"]}
                entry.update(
                    p50=pct(ms, 50),
                    p95=pct(ms, 95),
                    mean=round(statistics.fmean(ms), 2),
                    items=items,
                    empty=sum(1 for r in ok if r["items"]["context_chars"] < 100),
                )
            if system != "lightrag" and ok and any(r.get("steps") for r in ok):
                names = sorted({k for r in ok for k in r["steps"]})
                entry["steps_mean_ms"] = {
                    k: round(statistics.fmean(r["steps"].get(k, 0.0) for r in ok), 3) for k in names
                }
                entry["steps_p50_ms"] = {
                    k: round(statistics.median(r["steps"].get(k, 0.0) for r in ok), 3) for k in names
                }
                walk = [sum(v for k, v in r["steps"].items() if is_walk_step(k)) for r in ok]
                if any(walk):
                    entry["walk"] = {
                        "mean_ms": round(statistics.fmean(walk), 2),
                        "p50_ms": pct(walk, 50),
                        "p95_ms": pct(walk, 95),
                        "share_of_mean": round(statistics.fmean(walk) / statistics.fmean(ms), 3),
                        "share_median": round(statistics.median(w / t for w, t in zip(walk, ms)), 3),
                    }
            out.setdefault(system, {})[mode] = entry
    return out


def run_size(
    size: int,
    n_passages: int,
    args: argparse.Namespace,
    database: bi.Database,
    root: Path,
    lr_python: Path | None,
) -> dict[str, Any]:
    realm = f"bench_q{size}"
    marker = root / f"{realm}.build.json"
    ddl = hashlib.sha256((bi.REPO / "pgrag_dag" / "store" / "schema.py").read_bytes()).hexdigest()[:16]
    key = {
        "passages": n_passages,
        "cap": args.triples_per_chunk,
        "synth": SYNTH_VERSION,
        "dim": DIM,
        "schema": ddl,
    }
    cached = json.loads(marker.read_text()) if marker.exists() else None
    if args.data_dir and cached and cached.get("key") == key:
        build = cached["build"]
        print(f"[{size}] reusing realm {realm} ({build['relations']} relations)", flush=True)
    else:
        print(f"[{size}] building realm {realm} from {n_passages} passages ...", flush=True)
        build = build_graph(
            database.dsn, realm, n_passages, args.triples_per_chunk, args.maintenance_work_mem
        )
        marker.write_text(json.dumps({"key": key, "build": build}, indent=1))
    result: dict[str, Any] = {"size": size, "realm": realm, "build": build}
    result.update(
        time_queries(
            size,
            realm,
            database,
            root,
            lr_python,
            questions=args.questions,
            seed=args.seed,
            keywords=args.keywords,
            rounds=args.rounds,
            warmup=args.warmup,
            variants=args.variants,
        )
    )
    return result


def pgrag_worker_argv(
    dsn: str, realm: str, keywords: str, questions: Path, overrides: dict[str, Any]
) -> list[str]:
    """The command line of a query worker of ours (:func:`bench_query_workers.pgrag_worker`) over ``realm``,
    asking the questions of the JSON file ``questions`` with these :class:`QueryParam` ``overrides``."""
    return [
        sys.executable,
        str(Path(__file__).resolve()),
        "--worker",
        "pgrag",
        "--dsn",
        dsn,
        "--realm",
        realm,
        "--keywords",
        keywords,
        "--questions-file",
        str(questions),
        "--query-params",
        json.dumps(overrides),
    ]


def time_queries(
    size: int,
    realm: str,
    database: bi.Database,
    root: Path,
    lr_python: Path | None,
    *,
    questions: int,
    seed: int,
    keywords: str,
    rounds: int,
    warmup: int,
    modes: tuple[str, ...] = MODES,
    variants: dict[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Time queries over ``realm``'s live graph (space ``wiki2``): export it under ``root``, load it into
    LightRAG when ``lr_python`` is given (the store is reused while the export is unchanged), then run
    the query workers interleaved — ``warmup`` questions once, then ``rounds`` timed passes over
    ``questions`` questions (sampled with ``seed``) in each of ``modes`` both systems have.

    ``variants`` (system key → :class:`QueryParam` overrides; default ``{"ours": {}}``) starts one query
    worker of ours per entry; the workers take turns in rotating order.

    Returns ``export`` (counts, path, sha256), ``lightrag_build`` (build_s, nodes, edges, peak_rss_mb)
    and ``lightrag_load_s`` (with LightRAG), ``modes``, ``variants``, ``peak_rss_mb`` per worker (MB,
    VmHWM), ``memory`` per worker of ours (RSS at start, after the warm-up and at the end, the walk-graph
    cache after the warm-up and at the end), ``graph_builds`` per worker of ours (queries that built a walk
    graph: warm-up or not, mode, ms, build steps, RSS before/after), ``postgres_pss_mb`` and ``latency``
    (:func:`summarise_runs`: p50/p95 ms per system and mode). Raises ``RuntimeError`` when the LightRAG
    build or a worker fails."""
    export = export_graph(database.dsn, realm, root / f"{realm}.export.json", questions, seed)
    asked = export.pop("questions")
    result: dict[str, Any] = {"export": export}
    logs = bi.RESULTS / "bench_query_logs"
    logs.mkdir(parents=True, exist_ok=True)
    qfile = root / f"{realm}.questions.json"
    qfile.write_text(json.dumps(asked), encoding="utf-8")
    workers: dict[str, Worker] = {}
    samples: dict[str, dict[str, list[dict[str, Any]]]] = {}
    variants = variants or {OURS: {}}
    result["variants"] = variants
    memory: dict[str, dict[str, Any]] = {}
    builds: dict[str, list[dict[str, Any]]] = {name: [] for name in variants}
    try:
        for name, overrides in variants.items():
            slug = re.sub(r"[^\w.-]+", "_", name).strip("_")
            workers[name] = Worker(
                pgrag_worker_argv(database.dsn, realm, keywords, qfile, overrides),
                logs / f"{slug}_{size}.log",
            )
            memory[name] = {"rss_start_mb": workers[name].ready.get("rss_mb")}
        if lr_python:
            workdir = root / f"lightrag_{realm}"
            lr_marker = workdir / "bench_export.sha256"
            lr_argv = [
                str(lr_python),
                str(Path(__file__).resolve()),
                "--worker",
                "lightrag",
                "--export",
                export["path"],
                "--workdir",
                str(workdir),
            ]
            if not (lr_marker.exists() and lr_marker.read_text() == export["sha256"]):
                shutil.rmtree(workdir, ignore_errors=True)
                workdir.mkdir(parents=True)
                print(f"[{size}] loading LightRAG with ainsert_custom_kg ...", flush=True)
                done = subprocess.run([*lr_argv, "--build"], capture_output=True, text=True, cwd=str(HERE))
                (logs / f"lightrag_build_{size}.log").write_text(done.stderr)
                if done.returncode:
                    raise RuntimeError(
                        f"LightRAG build failed (exit {done.returncode}); see "
                        f"{logs / f'lightrag_build_{size}.log'}"
                    )
                (workdir / "bench_build.json").write_text(done.stdout.strip().splitlines()[-1])
                lr_marker.write_text(export["sha256"])
            result["lightrag_build"] = json.loads((workdir / "bench_build.json").read_text())
            workers["lightrag"] = Worker(lr_argv, logs / f"lightrag_{size}.log")
            result["lightrag_load_s"] = round(workers["lightrag"].ready["load_s"], 2)
        served = {name: [m for m in modes if m in w.ready["modes"]] for name, w in workers.items()}
        result["modes"] = served
        first = workers[next(iter(variants))].ready
        result["instrumented"] = first["instrumented"]
        result["our_keyword_setting"] = first["keywords"]
        if len(variants) > 1:
            result["our_keyword_settings"] = {n: workers[n].ready["keywords"] for n in variants}
        result["effective_params"] = {n: workers[n].ready.get("effective_params") for n in variants}
        result["engine_source"] = {n: workers[n].ready.get("engine_source") for n in variants}
        samples = {n: defaultdict(list) for n in workers}
        print(f"[{size}] timing {len(asked)} questions x {rounds} rounds, modes {served} ...", flush=True)
        plan = [(-1, q) for q in asked[:warmup]] + [(r, q) for r in range(rounds) for q in asked]
        names = list(workers)
        for i, (rnd, q) in enumerate(plan):
            if rnd == 0 and (i == 0 or plan[i - 1][0] < 0):  # the warm-up is over
                for name in variants:
                    after = workers[name].call(op="stats")
                    memory[name].update(
                        rss_warm_mb=after.get("rss_mb"), walk_cache_warm=after.get("walk_cache")
                    )
            for j in range(len(modes)):
                mode = modes[(i + j) % len(modes)]
                k = (i + j) % len(names)  # rotate: each system goes first, middle and last as often
                order = names[k:] + names[:k] if len(names) > 2 else names if k == 0 else names[::-1]
                for name in order:
                    if mode in served[name]:
                        answer = workers[name].call(op="query", mode=mode, **q)
                        if answer.get("graph_build") and name in builds:
                            builds[name].append(
                                {
                                    "warmup": rnd < 0,
                                    "mode": mode,
                                    "ms": round(answer["ms"], 1),
                                    "build_steps_ms": {
                                        s: answer["steps"][s]
                                        for s in WALK_BUILD_STEPS
                                        if s in answer["steps"]
                                    },
                                    **answer["graph_build"],
                                }
                            )
                        if rnd >= 0:
                            samples[name][mode].append(answer)
    finally:
        closed = {n: w.close() for n, w in workers.items()}
        result["peak_rss_mb"] = {n: c.get("peak_rss_mb") for n, c in closed.items()}
        for name in memory:
            memory[name].update(
                rss_end_mb=closed[name].get("rss_mb"),
                peak_rss_mb=closed[name].get("peak_rss_mb"),
                walk_cache_end=closed[name].get("walk_cache"),
            )
        result["memory"] = memory
        result["graph_builds"] = builds
    result["postgres_pss_mb"] = postgres_pss_mb(database.data_dir)
    result["latency"] = summarise_runs(samples)
    result["engine_source_end"] = engine_source()
    seen = {
        json.dumps(e, sort_keys=True)
        for e in [*result["engine_source"].values(), result["engine_source_end"]]
    }
    if len(seen) > 1:
        print(f"[{size}] WARNING: the engine changed during the run: {sorted(seen)}", flush=True)
    for name, built in builds.items():
        if len(built) > 1 or any(not b["warmup"] for b in built):
            print(f"[{size}] note: {name} built its walk graph {len(built)} times", flush=True)
    lr_llm = max((r.get("llm_calls", 0) for r in samples.get("lightrag", {}).get("mix", [])), default=0)
    result["lightrag_llm_calls"] = lr_llm
    return result


# -- report ---------------------------------------------------------------------------------------
def fmt(v: Any, nd: int = 1) -> str:
    return "–" if v is None else f"{v:.{nd}f}" if isinstance(v, float) else str(v)


def ours_of(r: dict[str, Any]) -> list[str]:
    """The system keys of ours in one size's result, in run order (``["ours"]`` without variants)."""
    return list(r.get("variants") or {OURS: {}})


def p95_target(overrides: dict[str, Any]) -> float:
    """Mix p95 target at 100k: issue 26's for the walk (``graph_ranking = "ppr"``), else issue 5's."""
    return TARGET_MIX_P95_MS_PPR if overrides.get("graph_ranking") == "ppr" else TARGET_MIX_P95_MS


def report(results: list[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    systems = list(dict.fromkeys(s for r in results for s in ours_of(r)))
    several = len(systems) > 1
    lines = [
        "| size | graph (ours: entities / relations / chunks) | LightRAG graph (nodes / edges) | our build "
        f"(stages + HNSW) | LightRAG build | peak RSS {' / '.join(systems)} / LightRAG (MB) | "
        "PostgreSQL PSS (MB) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        b, lb = r["build"], r.get("lightrag_build", {})
        stage_s = sum(v for k, v in b["seconds"].items() if k not in ("hnsw_build", "vacuum_analyze"))
        peaks = " / ".join(fmt(r["peak_rss_mb"].get(s)) for s in [*systems, "lightrag"])
        lines.append(
            f"| {r['size']:,} | {r['export']['entities']:,} / {r['export']['relations']:,} / "
            f"{r['export']['chunks']:,} | {fmt(lb.get('nodes'))} / {fmt(lb.get('edges'))} | {stage_s:.0f} s "
            f"+ {b['seconds']['hnsw_build']:.0f} s | {fmt(lb.get('build_s'), 0)} s | {peaks} | "
            f"{fmt(r['postgres_pss_mb'])} |"
        )
    engines = {
        json.dumps(e, sort_keys=True) for r in results for e in (r.get("engine_source") or {}).values()
    }
    engines |= {
        json.dumps(r["engine_source_end"], sort_keys=True) for r in results if r.get("engine_source_end")
    }
    if engines:
        lines += [
            "",
            "Engine: "
            + (
                " ≠ ".join(sorted(engines)) + " — IT CHANGED DURING THE RUN"
                if len(engines) > 1
                else engines.pop()
            ),
        ]
    shown = (
        "graph_ranking",
        "ppr_damping",
        "ppr_prior_k",
        "ppr_prior_weight",
        "ppr_edges",
        "collapse_duplicates",
    )
    eff = {s: (results[0].get("effective_params") or {}).get(s) or {} for s in systems}
    if any(eff.values()):
        lines += [
            "",
            "Effective parameters (mix): "
            + "; ".join(
                f"`{s}`: " + ", ".join(f"{k}={eff[s].get(k)}" for k in shown if k in eff[s]) for s in systems
            ),
        ]
    if several:
        lines += [
            "",
            "Systems of ours: "
            + "; ".join(f"`{s}` = {json.dumps(results[0]['variants'].get(s, {})) or '{}'}" for s in systems),
        ]
    sys_col = "| system " if several else ""
    lines += [
        "",
        f"| size | mode {sys_col}| ours p50 / p95 ms | LightRAG p50 / p95 ms | ratio p50 / p95 (LightRAG ÷ "
        "ours) | items ours e/r/c | items LightRAG e/r/c | anchor LightRAG p50 / p95 |",
        "|---|---|" + ("---|" if several else "") + "---|---|---|---|---|---|",
    ]

    def items(e: dict[str, Any]) -> str:
        return (
            f"{e['items']['entities']:.0f}/{e['items']['relations']:.0f}/{e['items']['chunks']:.0f}"
            if e.get("items")
            else "–"
        )

    for r in results:
        lat = r["latency"]
        for mode in MODES:
            t = lat.get("lightrag", {}).get(mode, {})
            for system in ours_of(r):
                o = lat.get(system, {}).get(mode, {})
                if not o and not t:
                    continue
                ratio = (
                    f"{t['p50'] / o['p50']:.1f}× / {t['p95'] / o['p95']:.1f}×"
                    if o.get("p50") and t.get("p50")
                    else "–"
                )
                anchor = ANCHORS.get(r["size"], {}).get(mode)
                lines.append(
                    f"| {r['size']:,} | {mode} {f'| {system} ' if several else ''}| {fmt(o.get('p50'))} / "
                    f"{fmt(o.get('p95'))} {'' if o else '(not implemented)'} | {fmt(t.get('p50'))} / "
                    f"{fmt(t.get('p95'))} | {ratio} | {items(o)} | {items(t)} "
                    f"| {f'{anchor[0]} / {anchor[1]}' if anchor else '–'} |"
                )
    targets: dict[str, Any] = {}
    by_size = {r["size"]: r["latency"] for r in results}
    big_size = 100_000 if 100_000 in by_size else max(by_size)
    big = by_size[big_size]
    overrides_of = {s: o for r in results for s, o in (r.get("variants") or {OURS: {}}).items()}
    lr_mix = big.get("lightrag", {}).get("mix", {})
    for system in systems:
        tag = f"{system}: " if several else ""
        mix = big.get(system, {}).get("mix", {})
        limit = p95_target(overrides_of.get(system, {}))
        targets[f"{tag}mix_p95_ms"] = {
            "measured": mix.get("p95"),
            "target": f"<= {limit}",
            "met": mix.get("p95") is not None and mix["p95"] <= limit,
        }
        if lr_mix.get("p50") and mix.get("p50"):
            sp50, sp95 = lr_mix["p50"] / mix["p50"], lr_mix["p95"] / mix["p95"]
            targets[f"{tag}speedup_vs_lightrag_mix"] = {
                "measured": f"{sp50:.2f}× (p50), {sp95:.2f}× (p95)",
                "target": f">= {TARGET_SPEEDUP}× (p50)",
                "met": sp50 >= TARGET_SPEEDUP,
            }
        small = by_size.get(10_000, {}).get(system, {}).get("mix", {})
        if 100_000 in by_size and small.get("p95") and mix.get("p95"):
            growth = mix["p95"] / small["p95"]
            lr_growth = (by_size[100_000].get("lightrag", {}).get("mix", {}).get("p95") or 0) / (
                by_size[10_000].get("lightrag", {}).get("mix", {}).get("p95") or float("inf")
            )
            targets[f"{tag}mix_p95_growth_10k_to_100k"] = {
                "measured": f"{growth:.2f}× (LightRAG {lr_growth:.2f}×)",
                "target": f"< {TARGET_GROWTH}×",
                "met": growth < TARGET_GROWTH,
            }
    lines += [
        "",
        f"| target (mix, {big_size:,} relations) | measured | target | met |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| {k} | {v['measured']} | {v['target']} | {'✓' if v['met'] else '✗'} |" for k, v in targets.items()
    ]
    walks = [
        (r, s, m, r["latency"].get(s, {}).get(m, {}).get("walk"))
        for r in results
        for s in ours_of(r)
        for m in MODES
    ]
    walks = [w for w in walks if w[3]]
    if walks:
        lines += [
            "",
            "The walk's share of our query time (steps `"
            + "`, `".join(p.rstrip(".") + ("" if p.endswith("_walked") else ".*") for p in WALK_STEPS)
            + f"`, self time, main thread; not `{'`, `'.join(WALK_NOT_STEPS)}`):",
            "",
            "| size | system | mode | query mean / p50 / p95 ms | walk mean / p50 / p95 ms | walk share of "
            "mean | median per-query share |",
            "|---|---|---|---|---|---|---|",
        ]
        for r, s, m, w in walks:
            e = r["latency"][s][m]
            lines.append(
                f"| {r['size']:,} | {s} | {m} | {e['mean']:.1f} / {e['p50']:.1f} / {e['p95']:.1f} | "
                f"{w['mean_ms']:.1f} / {w['p50_ms']:.1f} / {w['p95_ms']:.1f} | "
                f"{100 * w['share_of_mean']:.0f}% | {100 * w['share_median']:.0f}% |"
            )
    mem = [(r, s, r.get("memory", {}).get(s, {})) for r in results for s in ours_of(r)]
    if any(m for _, _, m in mem):
        lines += [
            "",
            "Memory of our query workers (RSS MB at start / after the warm-up / at the end, peak) and the "
            "walk-graph cache after the warm-up (`ppr.CACHE.nbytes`, its own estimate):",
            "",
            "| size | system | RSS start / warm / end (MB) | RSS growth warm−start / end−start | peak RSS | "
            "walk cache (MB) | graph vertices / edges | cache per 100k relations (MB) |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r, s, m in mem:
            start, warm, end = m.get("rss_start_mb"), m.get("rss_warm_mb"), m.get("rss_end_mb")
            grow = f"{warm - start:+.1f} / {end - start:+.1f}" if None not in (start, warm, end) else "–"
            wc = m.get("walk_cache_warm") or {}
            per = (
                f"{wc['nbytes'] / 2**20 * 100_000 / r['export']['relations']:.1f}"
                if wc.get("nbytes") and r["export"]["relations"]
                else "–"
            )
            lines.append(
                f"| {r['size']:,} | {s} | {fmt(start)} / {fmt(warm)} / {fmt(end)} | {grow} | "
                f"{fmt(m.get('peak_rss_mb'))} | {fmt(wc['nbytes'] / 2**20) if wc.get('nbytes') else '–'} | "
                f"{fmt(wc.get('vertices'))} / {fmt(wc.get('edges'))} | {per} |"
            )
    built = [(r, s, b) for r in results for s, bs in r.get("graph_builds", {}).items() for b in bs]
    if built:
        lines += [
            "",
            "Walk-graph builds (the query that found no graph of the current version cached):",
            "",
            "| size | system | warm-up | mode | query ms | build steps ms | RSS before → after (MB) |",
            "|---|---|---|---|---|---|---|",
        ]
        for r, s, b in built:
            steps = ", ".join(f"{k} {v:.0f}" for k, v in b["build_steps_ms"].items())
            lines.append(
                f"| {r['size']:,} | {s} | {'yes' if b['warmup'] else 'no'} | {b['mode']} | {b['ms']:.0f} | "
                f"{steps or '–'} | {fmt(b.get('rss_before_mb'))} → {fmt(b.get('rss_after_mb'))} |"
            )
    for r in results:
        for system in ours_of(r):
            mix = r["latency"].get(system, {}).get("mix", {})
            if not mix.get("steps_mean_ms"):
                continue
            total = mix["mean"]
            lines += [
                "",
                f"Where {'our' if system == OURS else f'`{system}`'} mix query's time goes at {r['size']:,} "
                f"relations (self time per call site; mean {total:.1f} ms, p50 {mix['p50']:.1f} ms):",
                "",
                "| step | mean ms | p50 ms | share of mean |",
                "|---|---|---|---|",
            ]
            steps = sorted(mix["steps_mean_ms"].items(), key=lambda kv: -kv[1])
            for name, ms in steps:
                walk = " (walk)" if is_walk_step(name) else ""
                lines.append(
                    f"| {name}{walk} | {ms:.2f} | {mix['steps_p50_ms'][name]:.2f} | {100 * ms / total:.0f}% |"
                )
            rest = total - sum(ms for name, ms in steps if not name.startswith(SIDE))
            lines.append(
                f"| (rest of query_data: Python outside the wrapped calls) | {rest:.2f} | – | "
                f"{100 * rest / total:.0f}% |"
            )
            if any(name.startswith(SIDE) for name, _ in steps):
                lines.append(
                    f"\n{SIDE}= in the second thread, overlapping the main thread's steps "
                    "(`retrieve.retrieve_all` self time includes waiting for it)."
                )
    return "\n".join(lines), targets


def query_variants(params: list[str], variants: list[list[str]]) -> dict[str, dict[str, Any]]:
    """System key → QueryParam overrides: ``{"ours": params}`` without ``variants``, else
    ``{"pgrag (NAME)": params + the variant's}`` per ``[NAME, KEY=VALUE, ...]``. Each set is checked by
    building a :class:`QueryParam` in every mode (``ValueError`` naming the variant otherwise)."""
    from pgrag_dag.query import QueryParam

    common = dict(parse_param(p) for p in params)
    out = (
        {f"pgrag ({v[0]})": {**common, **dict(parse_param(p) for p in v[1:])} for v in variants}
        if variants
        else {OURS: common}
    )
    if variants and len(out) < len(variants):
        raise ValueError("--variant names must be distinct")
    for name, overrides in out.items():
        try:
            for mode in MODES:
                QueryParam(space=SPACE, mode=mode, **overrides)
        except Exception as exc:
            raise ValueError(f"{name}: {exc}") from exc
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--sizes",
        type=int,
        nargs="+",
        default=[10_000, 100_000],
        help="relation counts to build (1,000,000 is beyond what this corpus yields and is skipped)",
    )
    ap.add_argument("--questions", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=3, help="timed passes over the questions (after a warm-up)")
    ap.add_argument("--warmup", type=int, default=5, help="questions run once per mode before timing")
    ap.add_argument(
        "--triples-per-chunk", type=int, default=40, help="synthetic triple cap per chunk (graph density)"
    )
    ap.add_argument("--seed", type=int, default=7, help="question sampling seed")
    ap.add_argument("--maintenance-work-mem", default="2GB", help="for the one-off HNSW builds")
    ap.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="keep the embedded PostgreSQL, exports and LightRAG stores here and reuse matching builds",
    )
    ap.add_argument("--skip-lightrag", action="store_true")
    ap.add_argument(
        "--keywords",
        choices=["replayed", "lexical", "off"],
        default="replayed",
        help="our keyword step, where the engine has one: replayed (the keywords LightRAG gets, from "
        "the response cache), or the engine's lexical / off settings",
    )
    ap.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a QueryParam field for every query of ours (repeatable; VALUE parsed as JSON when it is "
        "JSON, else a string), e.g. --param graph_ranking=ppr --param ppr_damping=0.5",
    )
    ap.add_argument(
        "--variant",
        action="append",
        nargs="+",
        default=[],
        metavar=("NAME", "KEY=VALUE"),
        help="time our engine once more in the same run as system 'pgrag (NAME)', with --param's "
        "overrides and these (repeatable), e.g. --variant mentions --variant ppr graph_ranking=ppr",
    )
    ap.add_argument("--out", type=Path, default=bi.RESULTS / "bench_query.json")
    ap.add_argument("--worker", choices=["pgrag", "lightrag"], help=argparse.SUPPRESS)
    ap.add_argument("--dsn", help=argparse.SUPPRESS)
    ap.add_argument("--realm", help=argparse.SUPPRESS)
    ap.add_argument("--export", help=argparse.SUPPRESS)
    ap.add_argument("--workdir", help=argparse.SUPPRESS)
    ap.add_argument("--build", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--questions-file", help=argparse.SUPPRESS)
    ap.add_argument("--query-params", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker == "pgrag":
        pgrag_worker(args)
        return 0
    if args.worker == "lightrag":
        lightrag_worker(args)
        return 0
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    try:
        args.variants = query_variants(args.param, args.variant)
    except ValueError as exc:
        ap.error(str(exc))
    bi.RESULTS.mkdir(parents=True, exist_ok=True)
    if not bi.WIKI2_CORPUS.is_file():
        print(f"the corpus {bi.WIKI2_CORPUS} does not exist (set PGRAG_SHARED_DIR)")
        return 1
    passages = json.loads(bi.WIKI2_CORPUS.read_text(encoding="utf-8"))
    plan: list[tuple[int, int]] = []
    for size in sorted(set(args.sizes)):
        n = passages_for(size, args.triples_per_chunk, passages)
        if n is None:
            print(
                f"size {size:,} skipped: the {len(passages):,} passages yield fewer synthetic relations at "
                f"--triples-per-chunk {args.triples_per_chunk}"
            )
        else:
            plan.append((size, n))
    if not plan:
        return 1
    lr_python = None if args.skip_lightrag else ensure_lightrag_venv()
    root = args.data_dir.resolve() if args.data_dir else Path(tempfile.mkdtemp(prefix="pgrag_bench_query_"))
    root.mkdir(parents=True, exist_ok=True)
    database = bi.Database(args.data_dir)
    results = []
    t_start = time.perf_counter()
    try:
        print(f"database: {database.kind}")
        for size, n in plan:
            results.append(run_size(size, n, args, database, root, lr_python))
    finally:
        database.close()
        if not args.data_dir:
            shutil.rmtree(root, ignore_errors=True)
    table, targets = report(results)
    print()
    print(table)
    bi.write_results(
        args.out,
        "bench_query",
        database.kind,
        {
            "wall_s": round(time.perf_counter() - t_start, 1),
            "targets": targets,
            "results": results,
            "variants": args.variants,
            "anchors_lightrag_benchmarks_md": ANCHORS,
            "table_markdown": table,
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
