"""The two query workers of ``bench_query.py``: ``query_data`` in this venv, LightRAG in its own.

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


def serve(ready: dict[str, Any], handle: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # anything a library prints goes to stderr, never into the protocol
    proto.write(json.dumps(ready) + "\n")
    for line in sys.stdin:
        req = json.loads(line)
        if req["op"] == "exit":
            break
        answer = {"peak_rss_mb": own_peak_rss_mb()} if req["op"] == "stats" else handle(req)
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
    "keywords": ("extract", "lexical"),
    "fusion": ("rrf", "quota", "fuse", "mmr", "node_distance_rerank"),
    "assembly": ("assemble",),
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
    mods = [m for n, m in sys.modules.items() if n.startswith("pgrag_dag") and m is not None]
    wrapped: dict[int, Callable[..., Any]] = {}
    for mod in mods:
        if mod.__name__.rsplit(".", 1)[-1] not in QUERY_PATH_MODULES:
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
    return sorted({w.__wrapped__.__module__.rsplit(".", 1)[-1] + "." + w.__name__ for w in wrapped.values()})


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
    engine's own settings of that name; an engine without a keyword step ignores the option."""
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

    def handle(req: dict[str, Any]) -> dict[str, Any]:
        param = q.QueryParam(space=SPACE, mode=req["mode"], **extra)
        timer.take()
        t0 = time.perf_counter()
        r = query_data(req["question"], param, dsn=args.dsn, realm=args.realm, embedder=embedder, **call_kw)
        ms = (time.perf_counter() - t0) * 1000
        used = getattr(r, "keywords", None)
        return {
            "ms": ms,
            "ok": True,
            "steps": timer.take(),
            "keyword_source": used.get("source") if isinstance(used, dict) else None,
            "items": {
                "entities": len(r.entities),
                "relations": len(r.relations),
                "chunks": len(r.chunks),
                "communities": len(r.communities),
                "context_chars": len(r.context),
            },
        }

    serve({"modes": implemented, "instrumented": steps, "keywords": keywords}, handle)


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
