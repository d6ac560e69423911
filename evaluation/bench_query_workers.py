"""The query workers of ``bench_query.py``: ``query_data`` in this venv (one per variant of ours), LightRAG
in its own.

Each is a subprocess speaking one JSON request per stdin line and one JSON answer per line on the
original stdout (:func:`serve`). Stdlib-only at import time: LightRAG's venv imports this module too.
The pgrag worker charges self time per engine step (:class:`StepTimer`, :func:`instrument`). The
coordinator's side — :class:`Worker` (a worker subprocess), :func:`ensure_lightrag_venv`,
:func:`postgres_pss_mb` — is here too, for ``bench_query.py`` and ``bench_scale.py``.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gzip
import hashlib
import importlib
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import bench_index as bi  # noqa: E402  (stdlib-only at import time)

LIGHTRAG_VENV = HERE / ".venv-lightrag"
LIGHTRAG_REQUIREMENTS = HERE / "requirements-bench.txt"
MODES = ("mix", "local", "global", "hybrid", "naive")
SPACE = "wiki2"
DIM = 384
O200K_URL = "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"


def own_peak_rss_mb() -> float:
    """This process's peak RSS since it was exec'd (``VmHWM``), in MB. ``ru_maxrss`` is not used in
    workers: Linux carries the parent's resident size at fork into the child's ``ru_maxrss``."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    return bi.peak_rss_mb()


def own_rss_mb() -> float | None:
    """This process's resident set size now (``VmRSS``), in MB."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    return None


def serve(
    ready: dict[str, Any],
    handle: Callable[[dict[str, Any]], dict[str, Any]],
    stats: Callable[[], dict[str, Any]] | None = None,
) -> None:
    """Answer requests until ``exit``: ``stats`` → peak and current RSS (MB) and whatever ``stats()``
    adds; anything else → ``handle(request)``. ``ready`` is sent first, with the RSS at that point."""
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # anything a library prints goes to stderr, never into the protocol
    proto.write(json.dumps({**ready, "rss_mb": own_rss_mb()}, default=str) + "\n")
    for line in sys.stdin:
        req = json.loads(line)
        if req["op"] == "exit":
            break
        if req["op"] == "stats":
            answer = {"peak_rss_mb": own_peak_rss_mb(), "rss_mb": own_rss_mb(), **(stats() if stats else {})}
        else:
            answer = handle(req)
        proto.write(json.dumps(answer, default=str) + "\n")


SIDE = "‖ "
"""Label prefix of steps timed outside the main thread (the query path's independent reads): they
overlap the main thread's steps in wall time."""


class StepTimer:
    """Self time per wrapped function (time in wrapped callees is charged to them, not the caller), per
    thread; steps of other threads than the main one are labelled with :data:`SIDE`."""

    def __init__(self) -> None:
        self.ms: dict[str, float] = defaultdict(float)
        self._local = threading.local()
        self._lock = threading.Lock()

    def wrap(self, label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            stack = self._local.__dict__.setdefault("stack", [])
            name = label if threading.current_thread() is threading.main_thread() else SIDE + label
            stack.append(0.0)
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                dt = time.perf_counter() - t0
                with self._lock:
                    self.ms[name] += (dt - stack.pop()) * 1000
                if stack:
                    stack[-1] += dt

        return timed

    def take(self) -> dict[str, float]:
        with self._lock:
            out, self.ms = {k: round(v, 3) for k, v in self.ms.items()}, defaultdict(float)
        return out


QUERY_STEPS = {
    "query": ("_embed", "_embed_all", "_assemble", "_merge"),
    "run": ("_assemble",),
    "retrieve": ("embed_all", "merge_found"),
    "keywords": ("extract", "lexical"),
    "fusion": ("rrf", "quota", "fuse", "mmr", "node_distance_rerank", "collapse_duplicates"),
    "assembly": ("assemble",),
    "ppr": ("question_keys", "relation_hops"),
}
"""Once-per-query steps of the query path timed beside the SQL ones (names that do not exist are ignored)."""
QUERY_PATH_MODULES = {
    "query",
    "keywords",
    "fusion",
    "assembly",
    "db",
    "retrieval",
    "retrieval_channels",
    "cache",
}
QUERY_PATH_FULL = {
    "pgrag_dag.query.run",
    "pgrag_dag.query.retrieve",
    "pgrag_dag.query.filter_warnings",
    "pgrag_dag.store.vectors",
    # the personalised-PageRank walk (issue 26): graph_ranking = "ppr"
    "pgrag_dag.query.ppr",
    "pgrag_dag.query.walked",
    "pgrag_dag.store.walk_graph",
    "pgrag_dag.store.graph_version",
}
"""Modules wrapped by full name (their short names, e.g. ``run``, are not unique in the package)."""
QUERY_METHODS = {
    "pgrag_dag.query.ppr": {
        "WalkGraph": ("from_edges", "patched", "walk", "mentioned"),
        "WalkCache": ("get",),
    },
}
"""Methods wrapped on their class (label ``<module>.<Class>.<method>``)."""
WALK_STEPS = ("ppr.", "walked.", "walk_graph.", "graph_version.", "retrieve._walked")
"""Prefixes of the step labels that belong to the walk (graph ranking ``ppr``): the graph's version read,
build, patch and cache (``ppr.space_graph``, ``walk_graph.walk_edges`` / ``space_chunks``,
``ppr.WalkGraph.from_edges`` / ``patched``, ``graph_version.writes`` / ``touched``), the seed linking
(``walked.link_seeds``, ``ppr.question_keys``, ``walk_graph.link_keys``), the walk (``ppr.WalkGraph.walk``)
and the rows it ranks (``walked.walk_evidence``, ``walk_graph.chunk_rows`` / ``entity_rows`` /
``relations_among``, ``retrieve._walked``)."""
WALK_NOT_STEPS = ("walk_graph.chunk_vectors",)
"""Step labels under :data:`WALK_STEPS`' prefixes that are not the walk: the near-duplicate collapse's vector
read (``collapse_duplicates``), which the dense path runs too."""


def is_walk_step(label: str) -> bool:
    """Whether the step ``label`` is part of the walk (:data:`WALK_STEPS`, not :data:`WALK_NOT_STEPS`)."""
    return label.startswith(WALK_STEPS) and label not in WALK_NOT_STEPS


WALK_BUILD_STEPS = ("walk_graph.walk_edges", "walk_graph.space_chunks", "ppr.WalkGraph.from_edges")
"""The steps of a walk-graph build (once per data version and process)."""


def instrument(timer: StepTimer) -> list[str]:
    """Wrap, at runtime, every engine function that talks to PostgreSQL (first parameter ``conn``; not the
    generic ``fetch``), ``db.connect``, and the query module's embedding, keyword and assembly steps —
    in every loaded ``pgrag_dag`` module that refers to them. Engine files are not touched."""
    q = importlib.import_module("pgrag_dag.query")  # the package rebinds ``pgrag_dag.query`` to the function
    for extra in (
        "pgrag_dag.store.retrieval_channels",
        "pgrag_dag.query.keywords",
        "pgrag_dag.query.fusion",
        "pgrag_dag.query.assembly",
    ):
        with contextlib.suppress(ImportError):
            importlib.import_module(extra)
    for extra in QUERY_PATH_FULL:
        with contextlib.suppress(ImportError):
            importlib.import_module(extra)
    mods = [m for n, m in sys.modules.items() if n.startswith("pgrag_dag") and m is not None]
    wrapped: dict[int, Callable[..., Any]] = {}
    methods: list[str] = []
    for mod in mods:
        for cls_name, names in QUERY_METHODS.get(mod.__name__, {}).items():
            cls = getattr(mod, cls_name, None)
            for name in names if cls is not None else ():
                raw = vars(cls).get(name)
                label = f"{mod.__name__.rsplit('.', 1)[-1]}.{cls_name}.{name}"
                if isinstance(raw, classmethod):
                    setattr(cls, name, classmethod(timer.wrap(label, raw.__func__)))
                elif inspect.isfunction(raw):
                    setattr(cls, name, timer.wrap(label, raw))
                else:
                    continue
                methods.append(label)
        if mod.__name__.rsplit(".", 1)[-1] not in QUERY_PATH_MODULES and mod.__name__ not in QUERY_PATH_FULL:
            continue
        short = mod.__name__.rsplit(".", 1)[-1]
        for name, fn in list(vars(mod).items()):
            if not inspect.isfunction(fn) or fn.__module__ != mod.__name__ or id(fn) in wrapped:
                continue
            params = list(inspect.signature(fn).parameters)
            sql_step = params[:1] == ["conn"] and name not in ("fetch", "_fetch")
            query_step = name in QUERY_STEPS.get(short, ()) or (mod is q and "keyword" in name)
            if sql_step or query_step or (short == "db" and name == "connect"):
                wrapped[id(fn)] = timer.wrap(f"{short}.{name}", fn)
    for mod in mods:
        for name, fn in list(vars(mod).items()):
            if id(fn) in wrapped:
                setattr(mod, name, wrapped[id(fn)])
    return sorted(
        {w.__wrapped__.__module__.rsplit(".", 1)[-1] + "." + w.__name__ for w in wrapped.values()}
        | set(methods)
    )


def walk_cache_stats() -> dict[str, Any] | None:
    """The walk-graph cache of this process (``pgrag_dag.query.ppr.CACHE``): ``nbytes`` (its own estimate,
    :attr:`~pgrag_dag.query.ppr.WalkCache.nbytes`), ``builds``, ``graphs`` kept, their ``vertices``,
    ``edges``, ``entities`` and ``chunks``; ``None`` when the engine has no such cache."""
    ppr = sys.modules.get("pgrag_dag.query.ppr")
    cache = getattr(ppr, "CACHE", None)
    if cache is None:
        return None
    out: dict[str, Any] = {"nbytes": cache.nbytes, "builds": cache.builds}
    with contextlib.suppress(Exception):  # the graphs kept: a private mapping, read for the report only
        graphs = [g for _, g in cache._graphs.values()]

        def vertices(g: Any) -> int:
            return int(g.n) if hasattr(g, "n") else int(g.graph.vcount())  # numpy arrays, or igraph

        def edges(g: Any) -> int:
            return int(g.edge_count) if hasattr(g, "edge_count") else int(g.graph.ecount())

        out.update(
            graphs=len(graphs),
            vertices=sum(vertices(g) for g in graphs),
            edges=sum(edges(g) for g in graphs),
            entities=sum(len(g.entity_ids) for g in graphs),
            chunks=sum(len(g.chunk_ids) for g in graphs),
        )
    return out


def engine_source() -> dict[str, Any]:
    """The engine on disk now: the git commit of the checkout, the files of ``pgrag_dag/`` that differ from
    it, and a SHA-256 (16 hex) over every ``pgrag_dag/**/*.py`` — equal at two instants only when the engine
    was not edited in between (it may be, while a benchmark runs)."""
    root = HERE.parent / "pgrag_dag"
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        with contextlib.suppress(OSError):
            digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    out: dict[str, Any] = {"source_sha256": digest.hexdigest()[:16]}
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        run = functools.partial(
            subprocess.run, capture_output=True, text=True, cwd=str(HERE.parent), timeout=10
        )
        out["commit"] = run(["git", "rev-parse", "--short", "HEAD"]).stdout.strip()
        out["dirty"] = sorted(
            line[3:] for line in run(["git", "status", "--porcelain", "pgrag_dag"]).stdout.splitlines()
        )
    return out


def parse_param(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` → (key, value): the value parsed as JSON when it is JSON (``3``, ``0.5``, ``true``,
    ``["mentions", "relations"]``), else the string itself (``graph_ranking=ppr``)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ValueError(f"expected KEY=VALUE, got {text!r}")
    try:
        parsed: Any = json.loads(value)
    except ValueError:
        parsed = value
    return key.strip(), parsed


KEYWORD_MODEL = "bench/keywords"


def seed_keyword_replay(dsn: str, questions: list[dict[str, Any]]) -> Any:
    """A replay-only :class:`~pgrag_dag.providers.llm.ModelClient` whose cache answers each question's keyword
    prompt with the keywords LightRAG is given, so the keyword step runs with zero model calls."""
    from pgrag_dag.config import LLMSettings
    from pgrag_dag.providers.llm import ModelClient, cache_key, prompt_key
    from pgrag_dag.providers.prompts import KEYWORDS_SYSTEM, KEYWORDS_USER  # type: ignore[attr-defined]
    from pgrag_dag.store import cache, db

    client = ModelClient(dsn, LLMSettings(models=["replay"]))
    params = client.params(json_mode=True)
    with db.connect(dsn, autocommit=True) as conn, conn.transaction():
        conn.execute("DELETE FROM pgrag__control.llm_cache WHERE model = %s", (KEYWORD_MODEL,))
        for q in questions:
            messages = [
                {"role": "system", "content": KEYWORDS_SYSTEM},
                {"role": "user", "content": KEYWORDS_USER.format(question=q["question"])},
            ]
            pkey = prompt_key(messages, params)
            cache.put(
                conn,
                {
                    "key": cache_key(KEYWORD_MODEL, pkey),
                    "prompt_key": pkey,
                    "model": KEYWORD_MODEL,
                    "purpose": "keywords",
                    "request": {"messages": messages, "params": params},
                    "response": json.dumps(
                        {"low_level_keywords": q["ll_keywords"], "high_level_keywords": q["hl_keywords"]}
                    ),
                    "prompt_tokens": 0,
                    "completion_tokens": 0,
                },
            )
    return client


def pgrag_worker(args: argparse.Namespace) -> None:
    """Serve ``query_data`` (this venv) for one realm; per query: ms, item counts, step self-times.

    Keywords (``--keywords``): ``replayed`` — where the engine has a model keyword step, it runs
    against a replay cache holding the same keywords LightRAG is given; ``lexical`` / ``off`` — the
    engine's own settings of that name; an engine without a keyword step ignores the option.
    ``--query-params`` (a JSON object) overrides :class:`QueryParam` fields in every query (checked once at
    start: an unknown field or a bad value stops the worker). A query that built a walk graph
    (``ppr.CACHE.builds`` moved) also returns ``graph_build``: the RSS before and after it (MB) and the
    cache's estimate (:func:`walk_cache_stats`)."""
    import dataclasses

    from pgrag_dag.providers.embedding import HashingEmbedder

    q = importlib.import_module("pgrag_dag.query")
    timer = StepTimer()
    steps = instrument(timer)
    query_data = q.query_data
    fields = {f.name for f in dataclasses.fields(q.QueryParam)}
    embedder = HashingEmbedder(DIM)
    implemented = [m for m in MODES if m in getattr(q, "IMPLEMENTED_MODES", MODES)]
    extra: dict[str, Any] = {}
    call_kw: dict[str, Any] = {}
    keywords = "none in this engine"
    if "keywords" in fields:
        keywords = "lexical" if args.keywords == "replayed" else args.keywords
        if args.keywords == "replayed" and "client" in inspect.signature(query_data).parameters:
            questions = json.loads(Path(args.questions_file).read_text(encoding="utf-8"))
            with contextlib.suppress(ImportError):
                call_kw["client"] = seed_keyword_replay(args.dsn, questions)
                keywords = "model"
        extra["keywords"] = keywords
    overrides = json.loads(getattr(args, "query_params", None) or "{}")
    unknown = sorted(set(overrides) - fields)
    if unknown:
        raise SystemExit(f"unknown QueryParam field(s) {unknown}; fields: {sorted(fields)}")
    extra.update(overrides)
    for mode in implemented:  # a bad value fails here, not in the first timed query
        q.QueryParam(space=SPACE, mode=mode, **extra)
    if "keywords" in overrides:
        keywords = str(overrides["keywords"])

    effective = {
        f.name: getattr(q.QueryParam(space=SPACE, mode="mix", **extra), f.name)
        for f in dataclasses.fields(q.QueryParam)
    }

    def builds() -> int:
        cache = getattr(sys.modules.get("pgrag_dag.query.ppr"), "CACHE", None)
        return int(getattr(cache, "builds", 0))

    def handle(req: dict[str, Any]) -> dict[str, Any]:
        param = q.QueryParam(space=SPACE, mode=req["mode"], **extra)
        before, rss_before = builds(), own_rss_mb()
        timer.take()
        t0 = time.perf_counter()
        r = query_data(req["question"], param, dsn=args.dsn, realm=args.realm, embedder=embedder, **call_kw)
        ms = (time.perf_counter() - t0) * 1000
        steps = timer.take()
        used = getattr(r, "keywords", None)
        built = (
            {"rss_before_mb": rss_before, "rss_after_mb": own_rss_mb(), "cache": walk_cache_stats()}
            if builds() != before
            else None
        )
        return {
            "ms": ms,
            "ok": True,
            **({"graph_build": built} if built else {}),
            "steps": steps,
            "keyword_source": used.get("source") if isinstance(used, dict) else None,
            "items": {
                "entities": len(r.entities),
                "relations": len(r.relations),
                "chunks": len(r.chunks),
                "communities": len(r.communities),
                "context_chars": len(r.context),
            },
        }

    serve(
        {
            "modes": implemented,
            "instrumented": steps,
            "keywords": keywords,
            "query_params": overrides,
            "effective_params": effective,
            "engine_source": engine_source(),
        },
        handle,
        lambda: {"walk_cache": walk_cache_stats()},
    )


def hashing_vectors(texts: list[str], dim: int) -> Any:
    """``pgrag_dag.providers.embedding.HashingEmbedder`` re-stated for LightRAG's venv (the package is not
    installed there); :func:`lightrag_worker` checks it against vectors exported by the real one."""
    import numpy as np

    out = np.zeros((len(texts), dim), dtype=np.float32)
    for row, text in enumerate(texts):
        words = [w.lower() for w in re.findall(r"\w+", text, re.UNICODE)]
        for f in words + [f"{a} {b}" for a, b in zip(words, words[1:])]:
            d = hashlib.sha256(f.encode("utf-8")).digest()
            out[row, int.from_bytes(d[0:4], "big") % dim] += (1.0 if d[4] & 1 else -1.0) * (
                0.5 + d[5] / 255.0
            )
        norm = float(np.linalg.norm(out[row]))
        if norm == 0.0:
            out[row, 0] = 1.0
        else:
            out[row] /= norm
    return out


def tiktoken_offline(cache: Path) -> None:
    """Put ``o200k_base`` from the ``bpe-openai`` wheel where tiktoken looks, so it never downloads."""
    import bpe_openai

    cache.mkdir(parents=True, exist_ok=True)
    target = cache / hashlib.sha1(O200K_URL.encode()).hexdigest()
    if not target.exists():
        target.write_bytes(
            gzip.decompress(
                (Path(bpe_openai.__file__).parent / "data" / "o200k_base.tiktoken.gz").read_bytes()
            )
        )
    os.environ["TIKTOKEN_CACHE_DIR"] = str(cache)


def lightrag_worker(args: argparse.Namespace) -> None:
    """Build (``--build``) or serve LightRAG over the exported graph, in LightRAG's own venv."""
    import asyncio
    import logging

    import numpy as np

    tiktoken_offline(LIGHTRAG_VENV / "tiktoken-cache")
    from lightrag import LightRAG, QueryParam
    from lightrag.utils import EmbeddingFunc, logger

    logger.setLevel(logging.WARNING)
    data = json.loads(Path(args.export).read_text(encoding="utf-8"))
    parity = data["parity"]
    drift = float(np.abs(hashing_vectors(parity["texts"], data["dim"]) - np.asarray(parity["vectors"])).max())
    if drift > 1e-5:
        raise SystemExit(f"hashing embedder differs from pgrag_dag's by {drift}")
    calls = {"embedded": 0, "llm": 0}

    async def embed(texts: list[str], **_: Any) -> Any:
        calls["embedded"] += len(texts)
        return hashing_vectors(texts, data["dim"])

    async def no_llm(*_: Any, **__: Any) -> str:
        calls["llm"] += 1
        raise RuntimeError("the benchmark supplies keywords: no LLM call may happen")

    loop = asyncio.new_event_loop()
    t0 = time.perf_counter()
    rag = LightRAG(
        working_dir=args.workdir,
        llm_model_func=no_llm,
        embedding_func=EmbeddingFunc(embedding_dim=data["dim"], max_token_size=8192, func=embed),
    )
    loop.run_until_complete(rag.initialize_storages())
    load_s = time.perf_counter() - t0
    if args.build:
        from lightrag.utils import normalize_entity_name

        rels = [
            r
            for r in data["relationships"]
            if normalize_entity_name(r["src_id"]) != normalize_entity_name(r["tgt_id"])
        ]
        kg = {"chunks": data["chunks"], "entities": data["entities"], "relationships": rels}
        t0 = time.perf_counter()
        loop.run_until_complete(rag.ainsert_custom_kg(kg))
        loop.run_until_complete(rag.finalize_storages())
        build_s = time.perf_counter() - t0
        graph = Path(args.workdir) / "graph_chunk_entity_relation.graphml"
        text = graph.read_text(encoding="utf-8") if graph.exists() else ""
        print(
            json.dumps(
                {
                    "build_s": build_s,
                    "nodes": text.count("<node "),
                    "edges": text.count("<edge "),
                    "relations_given": len(rels),
                    "self_loops_dropped": len(data["relationships"]) - len(rels),
                    "embedded": calls["embedded"],
                    "llm_calls": calls["llm"],
                    "peak_rss_mb": own_peak_rss_mb(),
                }
            )
        )
        return

    def handle(req: dict[str, Any]) -> dict[str, Any]:
        param = QueryParam(
            mode=req["mode"],
            only_need_context=True,
            enable_rerank=False,
            hl_keywords=req["hl_keywords"],
            ll_keywords=req["ll_keywords"],
        )
        t0 = time.perf_counter()
        ctx = loop.run_until_complete(rag.aquery(req["question"], param=param))
        ms = (time.perf_counter() - t0) * 1000
        ctx = ctx if isinstance(ctx, str) else None
        lines = (ctx or "").splitlines()
        return {
            "ms": ms,
            "ok": ctx is not None,
            "llm_calls": calls["llm"],
            "items": {
                "entities": sum(ln.startswith('{"entity": ') for ln in lines),
                "relations": sum(ln.startswith('{"entity1": ') for ln in lines),
                "chunks": sum(ln.startswith('{"reference_id": ') for ln in lines),
                "context_chars": len(ctx or ""),
            },
        }

    serve({"modes": list(MODES), "load_s": load_s}, handle)
    pending = asyncio.all_tasks(loop)  # LightRAG's background workers: stop them quietly before exit
    for task in pending:
        task.cancel()
    loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
    loop.close()


# -- the coordinator's side ----------------------------------------------------------------------
class Worker:
    """A worker subprocess speaking the line protocol of :func:`serve`; its stderr goes to ``log``."""

    def __init__(self, argv: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        self._log = log.open("w", encoding="utf-8")
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            env=env,
            cwd=str(HERE),
        )
        self.ready = self._read()

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"worker {self.proc.args[2:4]} died; see {self._log.name}")
        return json.loads(line)

    def call(self, **req: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self) -> dict[str, Any]:
        """Ask for the worker's peak RSS and stop it; ``{}`` from a worker that already died."""
        try:
            stats = self.call(op="stats")
            assert self.proc.stdin is not None
            self.proc.stdin.write('{"op": "exit"}\n')
            self.proc.stdin.close()
            self.proc.wait(timeout=120)
        except (RuntimeError, OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            stats = {}
        self._log.close()
        return stats


def ensure_lightrag_venv() -> Path:
    """``evaluation/.venv-lightrag`` with ``requirements-bench.txt`` installed (created on first use)."""
    py = LIGHTRAG_VENV / "bin" / "python"
    if not py.exists():
        base = getattr(sys, "_base_executable", None) or shutil.which("python3") or "python3"
        subprocess.run([base, "-m", "venv", str(LIGHTRAG_VENV)], check=True)
        (LIGHTRAG_VENV / ".gitignore").write_text("*\n")
    if subprocess.run([str(py), "-c", "import lightrag, bpe_openai, numpy"], capture_output=True).returncode:
        print(
            f"installing {LIGHTRAG_REQUIREMENTS.name} into {LIGHTRAG_VENV.relative_to(HERE.parent)} ...",
            flush=True,
        )
        subprocess.run([str(py), "-m", "pip", "install", "-q", "-r", str(LIGHTRAG_REQUIREMENTS)], check=True)
    return py


def postgres_pss_mb(data_dir: Path | None) -> float | None:
    """Proportional set size of the embedded server and its backends, in MB (``None`` if unknown)."""
    try:
        import psutil

        pid = int((data_dir / "pgdata" / "postmaster.pid").read_text().split()[0]) if data_dir else None
        procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)] if pid else []
        return round(sum(p.memory_full_info().pss for p in procs) / 2**20, 1) if procs else None
    except Exception:
        return None
