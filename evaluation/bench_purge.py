#!/usr/bin/env python
"""Erasure at scale (issue 28 item 2): how long ``purge_document`` takes on a realm ``bench_scale.py --keep``
left behind (``bench_s<size>``, space ``wiki2``), dry run and real, for a few documents.

    nice -n 5 .venv/bin/python evaluation/bench_scale.py --sizes 100000 --skip-query --keep \\
        --data-dir /tmp/bench --results /tmp/bench/scale.json --plot /tmp/bench/scale.svg
    .venv/bin/python evaluation/bench_purge.py --data-dir /tmp/bench --size 100000 --documents 3

Each purged document is the one at an evenly spaced position of the space's documents (by doc_key); the real
purge includes its one transaction (graph rows, history, cache scan, re-derivation) and the embeddings run
after it. Prints one line per purge and the graph's size before; the realm is left purged of them.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import bench_index as bi  # noqa: E402
import bench_query as bq  # noqa: E402

SPACE = "wiki2"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, required=True, help="bench_scale.py's --data-dir (kept realm)")
    ap.add_argument("--size", type=int, default=100_000, help="the realm bench_s<size>")
    ap.add_argument("--documents", type=int, default=3, help="documents to purge, one after another")
    args = ap.parse_args()
    from pgrag_dag import purge_document
    from pgrag_dag.engine import Engine
    from pgrag_dag.store import db

    realm = f"bench_s{args.size}"
    database = bi.Database(args.data_dir)
    engine = Engine.from_settings(
        bq.synthetic_settings(database.dsn, realm, args.data_dir / "bench_scale_docs")
    )
    try:
        with db.connect(database.dsn, autocommit=True) as conn:

            def one(query: str) -> int:
                row = conn.execute(query, (SPACE,)).fetchone()
                return int(row[0]) if row else 0

            rels = one(f"SELECT count(*) FROM pgrag_{realm}.relations WHERE space = %s")
            ents = one(f"SELECT count(*) FROM pgrag_{realm}.entities WHERE space = %s")
            keys = [
                r[0]
                for r in conn.execute(
                    f"SELECT DISTINCT doc_key FROM pgrag_{realm}.documents WHERE space = %s ORDER BY 1",
                    (SPACE,),
                ).fetchall()
            ]
            cached = one("SELECT count(*) FROM pgrag__control.llm_cache WHERE %s::text IS NOT NULL")
        print(
            f"{realm}.{SPACE}: {rels:,} relations, {ents:,} entities, {len(keys):,} documents, "
            f"{cached:,} cached responses"
        )
        for i in range(args.documents):
            key = keys[(i + 1) * len(keys) // (args.documents + 1)]
            t0 = time.perf_counter()
            dry = purge_document(engine, realm, SPACE, key)
            t1 = time.perf_counter()
            done = purge_document(engine, realm, SPACE, key, dry_run=False)
            t2 = time.perf_counter()
            removed = done["removed"]
            print(
                f"{key[:40]:<40} dry run {t1 - t0:6.2f} s · purge {done['seconds']:6.2f} s in its "
                f"transaction, {t2 - t1:6.2f} s with the embeddings run · removed "
                f"{removed.get('relations', 0)} relations, "
                f"{removed.get('entities', 0)} entities, {removed.get('pgrag__control.llm_cache', 0)} cache "
                f"entries · re-derived {done['rederived']} · dry run agreed: {dry['removed'] == removed}",
                flush=True,
            )
    finally:
        engine.close()
        database.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
