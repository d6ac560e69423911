"""Extraction concurrency benchmark (issue 3, paper §3.4): a simulated model latency, bounded concurrency.

A local OpenAI-compatible stub server answers every chat call after sleeping ``--latency`` seconds;
the extraction stage reaches it through real litellm calls, with the response cache in an embedded
PostgreSQL (a fresh model name per run, so nothing is served from the cache). With 64 chunks,
concurrency 8 and a 1 s latency the ideal is 8 s; the target is at most 1.25 × ideal.

Two layouts: 64 one-chunk documents (all chunks in the first round), and one 64-chunk document
(``batch_size`` rounds in sequence, each round's calls concurrent).

    .venv/bin/python evaluation/bench_extraction.py [--chunks 64] [--concurrency 8] [--latency 1.0]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


def _answer_after(latency: float):  # type: ignore[no-untyped-def]
    def answer(messages: list[dict[str, str]]) -> str:
        time.sleep(latency)
        return json.dumps(
            {
                "entities": [{"name": "Charles Babbage", "type": "Person", "description": "", "aliases": []}],
                "triples": [],
            }
        )

    return answer


def _run(layout: str, n: int, concurrency: int, latency: float, dsn: str) -> dict[str, float]:
    import polars as pl

    from pgrag_dag.config import ExtractionSettings, LLMSettings
    from pgrag_dag.extract.model_extraction import extract_chunks
    from pgrag_dag.providers.llm import ModelClient, import_litellm
    from pgrag_dag.testing.stub_server import StubServer

    import_litellm()  # pay the import before timing
    one_doc = layout == "one document"
    chunks = pl.DataFrame(
        {
            "chunk_id": list(range(n)),
            "doc_key": ["doc.txt"] * n if one_doc else [f"doc{i:03d}.txt" for i in range(n)],
            "chunk_index": list(range(n)) if one_doc else [0] * n,
            "title": ["Benchmark"] * n,
            "source": ["bench"] * n,
            "text": [f"Chunk {i} about Charles Babbage. {uuid.uuid4().hex}" for i in range(n)],
        }
    )
    settings = ExtractionSettings(gleaning_passes=0, concurrency=concurrency, batch_size=concurrency)
    with StubServer(_answer_after(latency)) as server:
        client = ModelClient(
            dsn,
            LLMSettings(
                models=[f"openai/bench-{uuid.uuid4().hex[:8]}"],
                api_base=server.base_url,
                api_key="x",
                deadline_s=30,
                max_retries=0,
            ),
        )
        t0 = time.perf_counter()
        raw = extract_chunks(chunks, client, settings)
        elapsed = time.perf_counter() - t0
        client.close()
    assert raw.filter(raw["parse_status"] == "ok").height == n
    ideal = n / concurrency * latency
    return {"seconds": round(elapsed, 2), "ideal": ideal, "ratio": round(elapsed / ideal, 3)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chunks", type=int, default=64)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--latency", type=float, default=1.0)
    args = ap.parse_args()

    from pgrag_dag.store import db, schema

    with tempfile.TemporaryDirectory(prefix="pgrag_bench_x_") as tmp:
        server = db.embedded_server(Path(tmp))
        dsn = str(server.get_uri())
        with db.connect(dsn, autocommit=True) as conn:
            schema.init_control(conn)
        rows = {
            layout: _run(layout, args.chunks, args.concurrency, args.latency, dsn)
            for layout in ("one-chunk documents", "one document")
        }
        server.stop()
    print(
        f"{args.chunks} chunks, concurrency {args.concurrency}, simulated latency "
        f"{args.latency} s, gleaning off\n"
    )
    print("| layout | seconds | ideal | ratio (target ≤ 1.25) |\n|---|---|---|---|")
    for layout, r in rows.items():
        print(
            f"| {layout} | {r['seconds']} | {r['ideal']:g} | {r['ratio']} "
            f"{'✓' if r['ratio'] <= 1.25 else '✗'} |"
        )
    return 0 if all(r["ratio"] <= 1.25 for r in rows.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
