#!/usr/bin/env python
"""The ``chunks`` stage alone at scale (issue 30): one-document runs on a space of ``--files`` text files.

The files are 2WikiMultiHopQA passages written as ``.txt`` files under ``<data-dir>/src`` the way
``bench_scale.py`` writes them (every passage, then replicas ``<n>_<title>_<word>.txt``), aged one hour (so
the stage trusts their recorded stat, as it would any file not written in the last seconds). The stage
(:func:`pgrag_dag.pipeline.stage_chunks`, default chunking) indexes them once (``build``, timed), then runs
once per operation, each timed from the call to its return:

``unchanged`` (nothing changed), ``add_one`` (a new file last in the order), ``add_first`` (a new file whose
name sorts first), ``change_one`` (a mid-order file with a sentence appended), ``delete_one`` (a mid-order
file removed), ``delete_first`` (the first file removed), ``unchanged_again`` (nothing changed, after them).
A file an operation writes is new (within the racy window), so the next run reads it again: as in use.

    .venv/bin/python evaluation/bench_chunks.py --files 50000 --data-dir /tmp/h32b_bench
    .venv/bin/python evaluation/bench_chunks.py --files 50000 --data-dir /tmp/h32b_bench --profile /tmp/prof

A ``--data-dir`` that holds a build of the same ``--files`` is reused (its files are restored first; the
build is then not timed). ``--profile DIR`` writes a cProfile of each operation to ``DIR/<op>.prof`` and
prints its top functions by cumulative time. Prints a Markdown table: seconds per operation (wall, and this
process's CPU: on a loaded machine the wall clock mostly measures the wait for a core), the documents chunked,
rows changed and documents read. The database is ``PGRAG_DATABASE_URL`` when set, else an embedded
PostgreSQL under ``<data-dir>/pg``. The machine is shared and noisy: compare runs made side by side.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import bench_index as bi  # noqa: E402
import bench_query as bq  # noqa: E402
import bench_scale as bs  # noqa: E402

REALM = "bench_chunks"
HOUR_NS = 3_600 * 10**9
OPS = ["unchanged", "add_one", "add_first", "change_one", "delete_one", "delete_first", "unchanged_again"]


def write_space(src: Path, n: int) -> list[str]:
    """Write the first ``n`` documents of ``bench_scale.documents`` under ``src`` (aged one hour); return
    their file names in the space's order. An existing file is left as it is."""
    passages = json.loads(bi.WIKI2_CORPUS.read_text(encoding="utf-8"))
    docs = list(zip(range(n + 2), bs.documents(passages), strict=False))
    src.mkdir(parents=True, exist_ok=True)
    then = time.time_ns() - HOUR_NS
    names = []
    for _, d in docs[:n]:
        path = src / d["file"]
        if not path.exists():
            path.write_text(d["text"] + "\n", encoding="utf-8")
            os.utime(path, ns=(then, then))
        names.append(d["file"])
    extra = [d for _, d in docs[n:]]
    (src.parent / "extra.json").write_text(json.dumps(extra))
    return sorted(names)


def operation(op: str, src: Path, names: list[str], extra: list[dict[str, Any]]) -> None:
    """Change ``src`` as operation ``op`` does (see the module)."""
    mid = names[len(names) // 2]
    if op == "add_one":
        (src / extra[0]["file"]).write_text(extra[0]["text"] + "\n", encoding="utf-8")
    elif op == "add_first":
        (src / "0000_first.txt").write_text(extra[1]["text"] + "\n", encoding="utf-8")
    elif op == "change_one":
        with (src / mid).open("a", encoding="utf-8") as f:
            f.write("Zelda Quorn visited the place in 1901.\n")
    elif op == "delete_one":
        (src / names[len(names) // 2 + 1]).unlink()
    elif op == "delete_first":
        (src / names[0]).unlink()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, default=50_000, help="text files in the space")
    ap.add_argument("--data-dir", type=Path, help="keep the files and the embedded PostgreSQL here")
    ap.add_argument("--profile", type=Path, help="write a cProfile per operation into this directory")
    ap.add_argument("--ops", default=",".join(OPS), help=f"operations to run, in order (of {OPS})")
    args = ap.parse_args()
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import pgrag_dag
    from pgrag_dag.engine import Engine
    from pgrag_dag.pipeline import stage_chunks

    root = (args.data_dir or Path(tempfile.mkdtemp(prefix="pgrag_bench_chunks_"))).resolve()
    src = root / f"src{args.files}"
    if (src.parent / "extra.json").exists():
        for stale in ("0000_first.txt", *(d["file"] for d in json.loads((root / "extra.json").read_text()))):
            (src / stale).unlink(missing_ok=True)
    names = write_space(src, args.files)
    extra = json.loads((root / "extra.json").read_text())
    database = bi.Database(root / "pg")
    engine = Engine.from_settings(bq.synthetic_settings(database.dsn, REALM, src))
    t0 = time.perf_counter()
    built = stage_chunks(engine, REALM, bq.SPACE).metadata
    print(f"build (or restore): {time.perf_counter() - t0:.2f} s, {built['documents_chunked']} chunked")
    if built["documents_chunked"]:  # the restored files read once more, recorded: the next run trusts them
        stage_chunks(engine, REALM, bq.SPACE)
    rows = []
    for op in args.ops.split(","):
        operation(op, src, names, extra)
        prof = cProfile.Profile() if args.profile else None
        t0, c0 = time.perf_counter(), time.process_time()
        if prof:
            prof.enable()
        meta = stage_chunks(engine, REALM, bq.SPACE).metadata
        if prof:
            prof.disable()
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
        rows.append(
            (op, seconds, cpu, meta["documents_chunked"], meta["rows_changed"], meta["documents_read"])
        )
        if prof and args.profile:
            args.profile.mkdir(parents=True, exist_ok=True)
            prof.dump_stats(args.profile / f"{op}.prof")
            print(f"\n== {op}: {seconds:.2f} s")
            pstats.Stats(str(args.profile / f"{op}.prof")).sort_stats("cumulative").print_stats(25)
    print(f"\nengine: {Path(pgrag_dag.__file__).parent} (load {os.getloadavg()[0]:.1f})")
    head = "seconds | CPU seconds | documents chunked | rows changed | documents read"
    print(f"| {args.files:,} files | {head} |")
    print("|---|---|---|---|---|---|")
    for op, s, cpu, chunked, changed, read in rows:
        print(f"| {op} | {s:.2f} | {cpu:.2f} | {chunked} | {changed} | {read} |")
    if args.data_dir is None:
        database.close()
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
