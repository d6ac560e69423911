#!/usr/bin/env python
"""Scale benchmark (issue 15 item 3): a full build, one-document incremental runs and query latency at
10k / 100k / 1M relations, with the chat model REPLAYED (zero model calls) and the hashing embedder.

For each size in ``--sizes`` (relations), ascending, on a fresh realm ``bench_s<size>`` (space ``wiki2``):

1. **Full build.** The size's documents are written as ``.txt`` files (below) and one synthetic extraction
   response per chunk is cached (``bench_query.dense_extraction``: the title and up to 20 names a chunk,
   up to ``--triples-per-chunk`` triples — the title to each name, then pairs of names, nearest first).
   Then the six index stages of :mod:`pgrag_dag.pipeline` (``chunks`` … ``embeddings``, no communities)
   run once through ``bench_query.index_fresh``: the HNSW indexes are dropped before the embeddings stage
   and built once after with ``--maintenance-work-mem`` (``--hnsw product`` leaves them to the product),
   then VACUUM ANALYZE. Reported: seconds per stage, HNSW build and total; this process's peak RSS over
   the build (``VmHWM``, reset before it; each stage's own peak in ``peak_rss_mb_after_stage``, the
   ``VmHWM`` cleared between stages; its RSS when the build starts in ``rss_at_start_mb``; the whole
   run's ``ru_maxrss`` beside it); the PostgreSQL
   server's peak PSS (the sum over its processes, sampled every 0.5 s; embedded server only); the
   relations, entities and chunks reached.
2. **Incremental**, on the built realm, each one run of the same six stages, timed per stage:
   ``unchanged`` (no source changed), ``add_one`` (a passage not indexed yet, last in the order; its
   response cached first), ``add_first`` (another, under a file name that sorts first in the order),
   ``change_one`` (an indexed document with a sentence naming a new person appended; its new chunk's
   response cached first), ``delete_one`` (an indexed document's file removed, mid-order), ``delete_first``
   (the first original document's file removed). The replay serves every
   extraction, so model calls are excluded by construction: ``model_calls`` is reported per run and must
   be 0 (else the script exits 1). Rows changed come from the stages' metadata: every integer or
   boolean key that :data:`CHANGED_KEYS` matches, per stage. A run's peak RSS has for floor what the
   process still holds after the build (``rss_at_start_mb``, after a collection and ``malloc_trim``): the
   run itself grew it by the difference.
3. **Query** (unless ``--skip-query``): ``mix`` p50/p95 (``--modes``) at the largest size, timed by
   ``bench_query.time_queries`` (a query worker subprocess, warm-up, interleaved rounds), and LightRAG
   (``lightrag-hku`` in ``evaluation/.venv-lightrag``, context only, no LLM call) at the largest size
   not above ``--lightrag-max`` (default 100,000: it held 2.4 GB at 100k, bench_query), with its load
   time and RSS. The output says at which size LightRAG stops and why. Then **during**: a query worker of
   ours asks the same questions back to back (``mix``) while :data:`DURING_RUNS` one-document runs index
   (the ``change_one`` document given another last sentence each time), reported as p50/p95 with the
   runs' seconds — what queries see while a scheduled refresh runs.

**Sizes beyond the corpus are replicas.** 2WikiMultiHopQA has 6,119 passages: about 120k relations at
this density. A size's documents are the shortest prefix of "every passage; then every passage again as
replica 1; then as replica 2; ..." whose distinct synthetic triples reach the size (counted with
``bench_query.passages_for`` over :func:`replica_extraction`, before anything is written). Replica r of a
passage is a new document ``<n>_<title>_<word>.txt`` holding the passage's text unchanged; its synthetic
extraction is the passage's with the replica's word — a made-up capitalised word (``Zyba``, ``Zyca``, …)
that no passage contains — appended to every entity name, so its entities and relations are new ones
that never merge with another replica's; the name gates accept such names as they accept the originals.
Predicates, confidences, negations and years are the original's. So a 1M graph is about eight disjoint
copies of the corpus graph under distinct names: the degree distribution of the 120k graph, not a denser
graph; replica chunks repeat the originals' text (and vectors), while entities and relations embed
distinct text. Writing, chunking and caching the documents is not timed (it runs in a child process, so
it is not in this process's RSS either).

With ``--keep --data-dir D`` the realms and their documents stay; a later run with ``--reuse R.json --keep
--data-dir D`` (``R.json`` that run's report) brings each back to its built state — the source folder undone,
one untimed index run — and measures the incremental runs and the queries again, reporting the earlier
full build marked ``reused_from`` (``bench_scale_chain.py``).

    nice -n 5 .venv/bin/python evaluation/bench_scale.py --sizes 10000,100000 --skip-query   # 5-10 min here
    .venv/bin/python evaluation/bench_scale.py                          # 10k, 100k, 1M with queries: hours
    .venv/bin/python evaluation/bench_scale.py --sizes 2000 --corpus-passages 40 \\
        --skip-query  # replicas, quick

Output: Markdown tables on stdout, JSON in ``evaluation/results/bench_scale.json`` (``--results``) and a
log-log plot of seconds vs relations (the full build and each incremental run; ``--baseline`` draws an
earlier run's JSON dashed beside it) in ``evaluation/bench_scale.svg`` (``--plot``). The plot needs
matplotlib in the project's venv: ``.venv/bin/pip install -r evaluation/requirements-scale.txt`` (without
it the plot is skipped with a message). The database is ``PGRAG_DATABASE_URL`` when set, else an
embedded PostgreSQL under ``--data-dir`` (default a temporary one, removed at the end). The machine is
shared and noisy: compare runs made side by side.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import itertools
import json
import re
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import bench_index as bi  # noqa: E402
import bench_query as bq  # noqa: E402
from bench_query_workers import SPACE, Worker, own_peak_rss_mb, own_rss_mb, postgres_pss_mb  # noqa: E402
from bench_scale_chain import Touched, restore_built  # noqa: E402
from bench_scale_report import OPS, markdown, plot  # noqa: E402

CHANGED_KEYS = re.compile(
    r"(_inserted|_updated|_added|_replaced|_removed|_extracted|_written|_embedded|_fallback"
    r"|_changed|_deleted|newly_|^(dormant|revived|restored|rewritten)$)"
)
"""Stage metadata keys that count rows a run changed (``documents_added``, ``chunks_extracted``,
``relations_updated``, ``entities_embedded``, ``newly_superseded``, ``dormant``, …), never totals held
(``relations``, ``entities_dormant``, ``documents_unchanged``)."""
_CONS, _VOWELS = "bcdfgklmnprstvz", "aeiou"
_REPLICA = re.compile(rf"^(.+) (Zy[{_CONS}][{_VOWELS}])$")
MAX_REPLICAS = len(_CONS) * len(_VOWELS)


# -- documents and replicas -----------------------------------------------------------------------
def replica_word(r: int) -> str:
    """The name word of replica ``r`` (1 … :data:`MAX_REPLICAS`): ``Zyba``, ``Zyca``, …, ``Zyzu``."""
    if not 1 <= r <= MAX_REPLICAS:
        raise ValueError(f"replica {r} is outside 1..{MAX_REPLICAS}")
    return f"Zy{_CONS[(r - 1) % len(_CONS)]}{_VOWELS[(r - 1) // len(_CONS)]}"


def replica_extraction(head: str, text: str, cap: int) -> dict[str, Any]:
    """``bench_query.dense_extraction`` for a chunk whose title entity is ``head``; when ``head`` ends in a
    replica word (a replica document's title), the original's extraction with that word appended to
    every entity name, alias, subject and object."""
    m = _REPLICA.match(head)
    if not m:
        return bq.dense_extraction(head, text, cap)
    base, word = m.groups()
    out = bq.dense_extraction(base, text, cap)
    for e in out["entities"]:
        e["name"], e["aliases"] = f"{e['name']} {word}", [f"{a} {word}" for a in e["aliases"]]
    for t in out["triples"]:
        t["subject"], t["object"] = f"{t['subject']} {word}", f"{t['object']} {word}"
    return out


def documents(passages: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Every non-empty passage as ``{"file", "title", "text", "replica"}``, then every one again per
    replica; ``title`` is the title entity the pipeline derives from the file name (what the synthetic
    extraction is given)."""
    from pgrag_dag.ingest.sources import title_for

    for r in range(MAX_REPLICAS + 1):
        for i, p in enumerate(passages):
            text = (p.get("text") or "").strip()
            if not text:
                continue
            name = bi._file_name(i, p.get("title") or "")
            if r:
                name = f"{name[:-4]}_{replica_word(r)}.txt"
            yield {"file": name, "title": bi._title_entity(title_for(Path(name))), "text": text, "replica": r}


def plan_documents(size: int, cap: int, passages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The shortest prefix of :func:`documents` whose distinct synthetic triples reach ``size``, and one
    document more (the one ``add_one`` adds). Raises ``ValueError`` when even every replica does not."""
    n = bq.passages_for(size, cap, documents(passages), extract=replica_extraction)
    if n is None:
        raise ValueError(
            f"{size:,} relations are beyond {MAX_REPLICAS} replicas of {len(passages):,} passages"
        )
    return list(itertools.islice(documents(passages), n + 1))


def check_replica_words(passages: list[dict[str, Any]]) -> None:
    """Refuse a corpus in which a replica word occurs (a replica name could then merge with a real one)."""
    word = re.compile(rf"\bZy[{_CONS}][{_VOWELS}]\b")
    hit = next((p for p in passages if word.search(f"{p.get('title')} {p.get('text')}")), None)
    if hit:
        raise ValueError(f"the corpus uses a replica word: passage {hit.get('title')!r}")


def seed(dsn: str, realm: str, source_dir: str, cap: int, only: list[str] | None = None) -> dict[str, Any]:
    """Cache the synthetic responses of the space's chunks (or of the ``only`` doc_keys'); run in a child."""
    settings = bq.synthetic_settings(dsn, realm, Path(source_dir))
    with bq.dense_synthesis(cap, replica_extraction):
        return bi.seed_synthetic_cache(settings, dsn, realm, SPACE, only=only)


# -- measuring ------------------------------------------------------------------------------------
def reset_peak_rss() -> None:
    """Hand freed memory back (a garbage collection, glibc's ``malloc_trim``), then set this process's
    ``VmHWM`` back to its current RSS (:func:`clear_peak_rss`)."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    clear_peak_rss()


def clear_peak_rss() -> None:
    """Set this process's ``VmHWM`` back to its current RSS (``/proc/self/clear_refs``, Linux >= 4.0),
    touching nothing else: between stages, so each stage's own peak is read."""
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")


def stage_peak(rss: dict[str, float], name: str) -> None:
    """Record the peak RSS of the stage ``name`` just finished (MB), then clear the peak for the next."""
    rss[name] = own_peak_rss_mb()
    clear_peak_rss()


class PostgresPeak:
    """While open, samples the embedded server's PSS (MB, all its processes) every ``every`` s; ``peak``
    is the largest sample (``None`` for a server that is not embedded)."""

    def __init__(self, data_dir: Path | None, every: float = 0.5) -> None:
        self.data_dir, self.every, self.peak = data_dir, every, None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while True:
            pss = postgres_pss_mb(self.data_dir)
            if pss is not None:
                self.peak = max(self.peak or 0.0, pss)
            if self._stop.wait(self.every):
                return

    def __enter__(self) -> PostgresPeak:
        if self.data_dir is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()


def changed_rows(meta: dict[str, Any]) -> dict[str, Any]:
    """The keys of one stage's metadata that count rows changed (:data:`CHANGED_KEYS`), when non-zero."""
    return {k: v for k, v in meta.items() if CHANGED_KEYS.search(k) and isinstance(v, (bool, int)) and v}


def summary(dsn: str, realm: str, meta: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """What every run reports: the rows the space holds afterwards (live relations and entities,
    mentions, chunks; read from the store, not from metadata), model calls and rows changed."""
    from psycopg import sql

    from pgrag_dag.store import db
    from pgrag_dag.store import relations as relation_store
    from pgrag_dag.store.identifiers import qualified

    with db.connect(dsn) as conn:
        held = relation_store.graph_counts(conn, realm, SPACE)
        chunks = conn.execute(
            sql.SQL("SELECT count(*) FROM {} WHERE space = %s").format(qualified(realm, "documents")),
            (SPACE,),
        ).fetchone()
    return {
        "relations": held["relations"],
        "entities": held["entities"],
        "mentions": held["mentions"],
        "chunks": chunks[0] if chunks else None,
        "model_calls": sum(int(m.get("model_calls") or 0) for m in meta.values()),
        "cache_hits": sum(int(m.get("cache_hits") or 0) for m in meta.values()),
        "chunks_failed": meta.get("raw_extractions", {}).get("chunks_failed"),
        "changed": {s: c for s, m in meta.items() if (c := changed_rows(m))},
    }


def full_build(
    engine: Any, dsn: str, realm: str, args: argparse.Namespace, data_dir: Path | None
) -> dict[str, Any]:
    """The six stages and the HNSW build on a fresh realm, with memory peaks (see the module docstring)."""
    rss: dict[str, float] = {}
    reset_peak_rss()
    start = own_rss_mb()
    with PostgresPeak(data_dir) as pg:
        t0 = time.perf_counter()
        seconds, meta, indexes = bq.index_fresh(
            engine,
            dsn,
            realm,
            args.maintenance_work_mem,
            drop_hnsw=args.hnsw == "rebuild",
            on_stage=lambda name, _s, _m: stage_peak(rss, name),
        )
        wall = time.perf_counter() - t0
    return {
        "seconds": {k: round(v, 3) for k, v in seconds.items()},
        "total_s": round(wall, 3),
        "peak_rss_mb": max([own_peak_rss_mb(), *rss.values()]),
        "rss_at_start_mb": start,
        "peak_rss_mb_after_stage": rss,
        "ru_maxrss_mb": bi.peak_rss_mb(),
        "postgres_peak_pss_mb": pg.peak,
        "hnsw_indexes": indexes,
        **summary(dsn, realm, meta),
        "metadata": {
            s: {k: v for k, v in m.items() if not isinstance(v, (list, dict)) or k == "rejections_per_gate"}
            for s, m in meta.items()
        },
    }


def incremental(engine: Any, dsn: str, realm: str, op: str, data_dir: Path | None) -> dict[str, Any]:
    """One run of the six index stages on the built realm, timed per stage."""
    seconds: dict[str, float] = {}
    meta: dict[str, dict[str, Any]] = {}
    reset_peak_rss()
    start = own_rss_mb()  # what the process still holds after the build: the peak's floor
    with PostgresPeak(data_dir) as pg:
        t_all = time.perf_counter()
        for name, fn in bi.stage_functions(False):
            t0 = time.perf_counter()
            meta[name] = fn(engine, realm, SPACE).metadata
            seconds[name] = round(time.perf_counter() - t0, 3)
            changed = " ".join(f"{k}={v}" for k, v in changed_rows(meta[name]).items())
            print(f"  {realm} {op}: stage {name} {seconds[name]:.2f} s  {changed}", flush=True)
        wall = time.perf_counter() - t_all
    return {
        "seconds": seconds,
        "total_s": round(wall, 3),
        "peak_rss_mb": own_peak_rss_mb(),
        "rss_at_start_mb": start,
        "postgres_peak_pss_mb": pg.peak,
        **summary(dsn, realm, meta),
    }


# -- one size -------------------------------------------------------------------------------------
def run_size(
    size: int,
    docs: list[dict[str, Any]],
    args: argparse.Namespace,
    database: bi.Database,
    root: Path,
    pool: ProcessPoolExecutor,
    query: str | None,
) -> dict[str, Any]:
    """Build ``bench_s<size>`` from ``docs`` (the last two held back for ``add_one`` and ``add_first``), run
    the incremental runs and, with ``query`` (``"ours"`` or ``"lightrag"`` too), the query timing. With
    ``--reuse`` the realm kept by an earlier ``--keep`` run on the same ``--data-dir`` is brought back to its
    built state (:func:`restore_built`) instead, and that run's full build is reported."""
    from pgrag_dag.engine import Engine

    realm, dsn = f"bench_s{size}", database.dsn
    src = root / realm
    reuses = root / f"{realm}.reuses"  # each reuse touches new names (Touched.plan): what it counts
    generation = int(reuses.read_text()) + 1 if args.reuse is not None and reuses.is_file() else 1
    touched = Touched.plan(docs, replica_word(MAX_REPLICAS + 1 - generation) if args.reuse else None)
    if args.reuse is not None:
        reuses.write_text(str(generation))

    def cache(files: list[str]) -> None:  # the synthetic responses of ``files``, so no run calls a model
        pool.submit(seed, dsn, realm, str(src), args.triples_per_chunk, files).result()

    result: dict[str, Any] = {
        "size": size,
        "realm": realm,
        "documents": len(touched.base),
        "replicas": max(d["replica"] for d in touched.base),
    }
    if args.reuse is None:
        shutil.rmtree(src, ignore_errors=True)
        src.mkdir(parents=True)
        t0 = time.perf_counter()
        for d in touched.base:
            (src / d["file"]).write_text(d["text"] + "\n", encoding="utf-8")
        print(
            f"[{size:,}] {len(touched.base):,} documents ({result['replicas']} replica(s) beyond the corpus) "
            "written; caching their synthetic responses ...",
            flush=True,
        )
        result["synthesis"] = pool.submit(seed, dsn, realm, str(src), args.triples_per_chunk).result()
        print(
            f"[{size:,}] {result['synthesis']['cached_responses']:,} responses "
            f"({result['synthesis']['synthetic_triples']:,} triples) cached in "
            f"{time.perf_counter() - t0:.0f} s; full build ...",
            flush=True,
        )
        bi.fresh_realm(dsn, realm)
    engine = Engine.from_settings(bq.synthetic_settings(dsn, realm, src))
    try:
        if args.reuse is None:
            result["full"] = full_build(engine, dsn, realm, args, database.data_dir)
        else:
            result.update(restore_built(engine, dsn, realm, src, touched, args.reuse, size))
        f = result["full"]
        print(
            f"[{size:,}] full build {f['total_s']:.1f} s: {f['relations']:,} relations, {f['entities']:,} "
            f"entities, {f['chunks']:,} chunks; peak RSS {f['peak_rss_mb']} MB, PostgreSQL PSS "
            f"{f['postgres_peak_pss_mb']} MB" + (f" (reused from {args.reuse})" if args.reuse else ""),
            flush=True,
        )
        result["documents_touched"] = touched.files()
        result["ops"] = {}
        for op in OPS:
            touched.apply(op, src, cache)
            result["ops"][op] = incremental(engine, dsn, realm, op, database.data_dir)
            print(f"[{size:,}] {op} {result['ops'][op]['total_s']:.2f} s", flush=True)
    finally:
        engine.close()
    if query:
        result["query"] = query_phase(size, realm, database, root, args, lightrag=query == "lightrag")
        engine = Engine.from_settings(bq.synthetic_settings(dsn, realm, src))
        try:
            result["query_during"] = queries_during(
                size,
                realm,
                database,
                root,
                args,
                lambda n: change_again(engine, realm, pool, args, src, touched, n),
            )
        finally:
            engine.close()
    if not args.keep:
        bi.fresh_realm(dsn, realm)
        shutil.rmtree(src, ignore_errors=True)
    return result


DURING_RUNS = 3
"""One-document runs (``change_one`` again, with another sentence each) timed while queries run."""


def change_again(
    engine: Any,
    realm: str,
    pool: ProcessPoolExecutor,
    args: argparse.Namespace,
    src: Path,
    touched: Touched,
    n: int,
) -> dict[str, Any]:
    """Give the document ``change_one`` edited another last sentence (``n``), cache the response of its new
    chunk and run the six stages (:func:`incremental`)."""
    extra = f" Copy {n + 2} of it went to the collector {touched.named('Ilse Varga Numbert')}."
    edited = touched.edited
    (src / edited["file"]).write_text(edited["text"] + touched.appended + extra + "\n", encoding="utf-8")
    pool.submit(seed, engine.dsn, realm, str(src), args.triples_per_chunk, [edited["file"]]).result()
    return incremental(engine, engine.dsn, realm, f"during_{n}", None)


def queries_during(
    size: int,
    realm: str,
    database: bi.Database,
    root: Path,
    args: argparse.Namespace,
    work: Callable[[int], dict[str, Any]],
) -> dict[str, Any]:
    """``mix`` latency of a query worker of ours asking the query phase's questions back to back while
    :data:`DURING_RUNS` one-document runs (``work(n)``) index (issue 30 item 6): what a user's queries see
    while a scheduled refresh runs. Returns ``samples``, ``p50``/``p95`` ms and each run's ``total_s``."""
    asked = json.loads((root / f"{realm}.questions.json").read_text(encoding="utf-8"))
    worker = Worker(
        bq.pgrag_worker_argv(database.dsn, realm, args.keywords, root / f"{realm}.questions.json", {}),
        bi.RESULTS / "bench_query_logs" / f"during_{size}.log",
    )
    ms: list[float] = []
    stop = threading.Event()

    def ask() -> None:
        for q in itertools.cycle(asked):
            if stop.is_set():
                return
            answer = worker.call(op="query", mode="mix", **q)
            if answer.get("ok"):
                ms.append(float(answer["ms"]))

    try:
        for q in asked[: args.warmup]:
            worker.call(op="query", mode="mix", **q)
        asking = threading.Thread(target=ask, daemon=True)
        asking.start()
        try:
            runs = [work(n)["total_s"] for n in range(DURING_RUNS)]
        finally:
            stop.set()
            asking.join()
    finally:
        worker.close()
    p50, p95 = (bq.pct(ms, 50), bq.pct(ms, 95)) if len(ms) > 1 else (None, None)
    print(
        f"[{size:,}] mix during {DURING_RUNS} one-document runs: {len(ms)} queries, p50 {p50} / p95 {p95} ms",
        flush=True,
    )
    return {"samples": len(ms), "p50": p50, "p95": p95, "runs_s": runs}


def query_phase(
    size: int, realm: str, database: bi.Database, root: Path, args: argparse.Namespace, *, lightrag: bool
) -> dict[str, Any]:
    """``bench_query.time_queries`` over the realm; when LightRAG fails to load, ours alone, with the
    reason."""
    kw = {
        "questions": args.questions,
        "seed": args.seed,
        "keywords": args.keywords,
        "rounds": args.rounds,
        "warmup": args.warmup,
        "modes": tuple(args.modes),
    }
    lr_python = bq.ensure_lightrag_venv() if lightrag else None
    try:
        return bq.time_queries(size, realm, database, root, lr_python, **kw)
    except RuntimeError as exc:
        if lr_python is None:
            raise
        print(f"[{size:,}] LightRAG stopped: {exc}; timing ours alone", flush=True)
        return {**bq.time_queries(size, realm, database, root, None, **kw), "lightrag_failed": str(exc)}


def lightrag_note(results: list[dict[str, Any]], lightrag_max: int) -> str | None:
    """Where LightRAG stops in this run, and why."""
    loaded = [r for r in results if "lightrag_build" in r.get("query", {})]
    failed = [r for r in results if r.get("query", {}).get("lightrag_failed")]
    above = [r["size"] for r in results if r["size"] > lightrag_max]
    if failed:
        return (
            f"LightRAG failed to load at {failed[0]['size']:,} relations: "
            f"{failed[0]['query']['lightrag_failed']}"
        )
    if not loaded:
        return None
    q = loaded[-1]["query"]
    b, serving = q["lightrag_build"], q["peak_rss_mb"].get("lightrag")
    note = (
        f"LightRAG loaded at {loaded[-1]['size']:,} relations: ainsert_custom_kg {b.get('build_s', 0):.0f} "
        f"s, peak RSS {b.get('peak_rss_mb')} MB loading and {serving} MB serving"
    )
    if above:
        import psutil

        projected = max(b.get("peak_rss_mb") or 0, serving or 0) * above[-1] / loaded[-1]["size"] / 1024
        note += (
            f"; not loaded at {', '.join(f'{s:,}' for s in above)} relations: above --lightrag-max "
            f"{lightrag_max:,}. Its graph and vector stores live in its process's memory, so its RSS grows "
            f"with the graph: about {projected:.1f} GB at {above[-1]:,} if linear, on a machine with "
            f"{psutil.virtual_memory().total / 2**30:.0f} GB shared with PostgreSQL and this run"
        )
    return note


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--sizes",
        type=lambda s: [int(x) for x in s.replace("_", "").split(",") if x],
        default=[10_000, 100_000, 1_000_000],
        help="relation counts, comma-separated (default 10000,100000,1000000)",
    )
    ap.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="embedded PostgreSQL data dir (and the documents); default a temporary one, removed afterwards",
    )
    ap.add_argument("--skip-query", action="store_true", help="no query timing (and no LightRAG)")
    ap.add_argument(
        "--reuse",
        type=Path,
        default=None,
        metavar="JSON",
        help="skip the full build: reuse the realms an earlier --keep run left in --data-dir (restored to "
        "their built state first) and report that run's build from its JSON report",
    )
    ap.add_argument(
        "--keep", action="store_true", help="keep each size's realm (and its documents) after its runs"
    )
    ap.add_argument("--results", type=Path, default=bi.RESULTS / "bench_scale.json", help="the JSON report")
    ap.add_argument("--plot", type=Path, default=HERE / "bench_scale.svg", help="the plot (.svg or .png)")
    ap.add_argument(
        "--baseline", type=Path, default=None, help="an earlier run's JSON, drawn dashed in the plot"
    )
    ap.add_argument("--lightrag-max", type=int, default=100_000, help="largest size LightRAG is loaded at")
    ap.add_argument(
        "--corpus-passages",
        type=int,
        default=None,
        help="use only the first N passages of the corpus (replicas start sooner; for testing them)",
    )
    ap.add_argument(
        "--triples-per-chunk", type=int, default=40, help="synthetic triple cap per chunk (as bench_query)"
    )
    ap.add_argument(
        "--maintenance-work-mem", default="2GB", help="for the one HNSW build after the full build"
    )
    ap.add_argument(
        "--hnsw",
        choices=["rebuild", "product"],
        default="rebuild",
        help="rebuild: drop the HNSW indexes before the full build's embeddings stage and build them "
        "once after (as bench_query); product: leave them to the product",
    )
    ap.add_argument(
        "--modes", type=lambda s: s.split(","), default=["mix"], help="query modes, comma-separated"
    )
    ap.add_argument("--questions", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--seed", type=int, default=7, help="question sampling seed")
    ap.add_argument("--keywords", choices=["replayed", "lexical", "off"], default="replayed")
    args = ap.parse_args()
    if args.reuse is not None and (args.data_dir is None or not args.keep):
        ap.error(
            "--reuse needs the --data-dir of the earlier --keep run, and --keep (else the realm is dropped)"
        )
    if not bi.WIKI2_CORPUS.is_file():
        print(f"the corpus {bi.WIKI2_CORPUS} does not exist (set PGRAG_SHARED_DIR)")
        return 1
    passages = json.loads(bi.WIKI2_CORPUS.read_text(encoding="utf-8"))[: args.corpus_passages]
    check_replica_words(passages)
    sizes = sorted(set(args.sizes))
    plans = {}
    for size in sizes:
        t0 = time.perf_counter()
        plans[size] = plan_documents(size, args.triples_per_chunk, passages)
        base = plans[size][:-1]
        print(
            f"[{size:,}] {len(base):,} documents reach {size:,} distinct synthetic triples "
            f"({max(d['replica'] for d in base)} replica(s); planned in {time.perf_counter() - t0:.1f} s)",
            flush=True,
        )
    lr_sizes = [s for s in sizes if s <= args.lightrag_max]
    queries = (
        {} if args.skip_query else {sizes[-1]: "ours"} | ({lr_sizes[-1]: "lightrag"} if lr_sizes else {})
    )
    bi.RESULTS.mkdir(parents=True, exist_ok=True)
    root = (
        (args.data_dir.resolve() / "bench_scale_docs")
        if args.data_dir
        else Path(tempfile.mkdtemp(prefix="pgrag_bench_scale_"))
    )
    root.mkdir(parents=True, exist_ok=True)
    database = bi.Database(args.data_dir)
    results: list[dict[str, Any]] = []
    t_start = time.perf_counter()
    try:
        print(f"database: {database.kind}", flush=True)
        with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:
            for size in sizes:
                results.append(run_size(size, plans[size], args, database, root, pool, queries.get(size)))
    finally:
        database.close()
        if not args.data_dir:
            shutil.rmtree(root, ignore_errors=True)
    note = lightrag_note(results, args.lightrag_max)
    table, targets = markdown(results, note)
    print()
    print(table)
    baseline = json.loads(args.baseline.read_text(encoding="utf-8")) if args.baseline else None
    print(plot(results, args.plot, baseline))
    calls = sum(
        (0 if "reused_from" in r["full"] else r["full"]["model_calls"])
        + sum(o["model_calls"] for o in r["ops"].values())
        for r in results
    )
    bi.write_results(
        args.results,
        "bench_scale",
        database.kind,
        {
            "wall_s": round(time.perf_counter() - t_start, 1),
            "model_calls": calls,
            "targets": targets,
            "lightrag": note,
            "options": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
            "results": results,
            "table_markdown": table,
        },
    )
    if calls:
        print(
            f"error: {calls} model call(s) were made; the replay should have served every extraction",
            file=sys.stderr,
        )
        return 1
    print("model calls: 0 (every extraction replayed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
