#!/usr/bin/env python
"""Offline extraction benchmark: the extractors without a model (paper §4.1, §4.3; issue 27).

Times ``--extractor`` — :func:`pgrag_dag.extract.cooccurrence.extract_cooccurrence` (noun-phrase entities,
sentence co-occurrence; the default) or :func:`pgrag_dag.extract.nlp.extract_nlp` (the spaCy pipeline,
loaded once before the timed runs) — on real text, chunked as the pipeline does (``--chunk-chars`` 2,000,
``--overlap-chars`` 200, :func:`pgrag_dag.ingest.splitting.chunk_documents`):

(a) the Wikipedia articles of the demo corpus (``../shared/corpora/wikipedia_babbage_lovelace``: Ada
    Lovelace, Analytical Engine, Charles Babbage and the four articles in ``related/``);
(b) the first ``--passages`` (default: all 6,119) passages of the 2WikiMultiHopQA corpus
    (``../shared/corpora/2wikimultihopqa_hipporag_corpus/2wikimultihopqa_corpus.json``, a JSON list of
    ``{"title", "text"}``), one document per passage.

For each corpus it reports chunks, the median extraction seconds over ``--repeat`` runs, seconds per
1,000 chunks, entities and triples per chunk, and the share of records (entities + triples) the gates
accept (:func:`pgrag_dag.extract.gates.apply_gates`, default :class:`~pgrag_dag.config.GateSettings`, the
``biography`` vocabulary), with the gates' own time beside it. No database, no model, no network.
The JSON report is printed and written to ``evaluation/results/bench_offline_extraction.json``
(gitignored) by ``bench_index.write_results``. The machine is shared and noisy: quote medians.

    .venv/bin/python evaluation/bench_offline_extraction.py [--passages 6119] [--repeat 3]
    .venv/bin/python evaluation/bench_offline_extraction.py --extractor nlp --chunk-chars 1000 --passages 500
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
for p in (str(REPO), str(HERE)):
    if p not in sys.path:
        sys.path.insert(0, p)
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import bench_index as bi  # noqa: E402  (the shared JSON report writer; stdlib-only at import time)

WIKIPEDIA = bi.SHARED / "corpora" / "wikipedia_babbage_lovelace"
RESULTS = REPO / "evaluation" / "results"


def _documents(items: list[tuple[str, str, str]]) -> Any:
    """A ``documents`` frame from (doc_key, title, text) triples."""
    import polars as pl

    return pl.DataFrame(
        [
            {
                "doc_key": key,
                "title": title,
                "source": key,
                "doc_order": i,
                "text": text,
                "doc_hash": hashlib.sha256(text.encode()).hexdigest(),
                "metadata": "{}",
            }
            for i, (key, title, text) in enumerate(items)
        ]
    )


def wikipedia_documents() -> list[tuple[str, str, str]]:
    """The demo articles and their related articles (sorted by path), read as the sources stage does."""
    from pgrag_dag.ingest.sources import read_document, title_for

    paths = sorted(WIKIPEDIA.glob("*.txt")) + sorted((WIKIPEDIA / "related").glob("*.txt"))
    return [(str(p.relative_to(WIKIPEDIA)), title_for(p), read_document(p)) for p in paths]


def wiki2_documents(n: int) -> list[tuple[str, str, str]]:
    """The first ``n`` 2WikiMultiHopQA passages, one document each (key ``passage-<i>``)."""
    passages = json.loads(bi.WIKI2_CORPUS.read_text(encoding="utf-8"))[:n]
    return [(f"passage-{i:05d}", p["title"], p["text"]) for i, p in enumerate(passages) if p["text"].strip()]


def bench(corpus: str, items: list[tuple[str, str, str]], args: argparse.Namespace) -> dict[str, Any]:
    """Chunk ``items``, time the extraction ``args.repeat`` times and gate the result once."""
    import polars as pl

    from pgrag_dag.config import GateSettings
    from pgrag_dag.extract.cooccurrence import CooccurrenceOptions, extract_cooccurrence
    from pgrag_dag.extract.gates import apply_gates
    from pgrag_dag.extract.nlp import extract_nlp
    from pgrag_dag.extract.nlp_pipeline import NlpOptions, load_pipeline
    from pgrag_dag.ingest.splitting import chunk_documents
    from pgrag_dag.vocabulary import Vocabulary

    chunks = chunk_documents(
        _documents(items), chunk_chars=args.chunk_chars, overlap_chars=args.overlap_chars
    )
    chunks = chunks.with_row_index("chunk_id").with_columns(pl.col("chunk_id").cast(pl.Int64))
    vocabulary = Vocabulary.build(preset="biography")
    if args.extractor == "nlp":
        nlp_options = NlpOptions(batch_size=args.batch_size, n_process=args.n_process)
        load_pipeline(nlp_options.model)  # once per process, as in the pipeline: not timed

        def run() -> Any:
            return extract_nlp(chunks, nlp_options, version="offline-bench", vocabulary=vocabulary)
    else:

        def run() -> Any:
            return extract_cooccurrence(chunks, CooccurrenceOptions(), version="offline-bench")

    seconds, raw, first = [], None, None
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        raw = run()
        seconds.append(time.perf_counter() - t0)
        first = raw if first is None else first
        assert raw.equals(first), "extraction is not deterministic"
    t0 = time.perf_counter()
    decisions = apply_gates(raw, GateSettings(), vocabulary)
    gate_s = time.perf_counter() - t0
    parsed = [json.loads(p) for p in raw["parsed"]]
    n_ent = sum(len(p["entities"]) for p in parsed)
    n_tri = sum(len(p["triples"]) for p in parsed)
    median = statistics.median(seconds)
    by_kind = {k: decisions.filter(pl.col("kind") == k) for k in ("entity", "triple")}
    return {
        "corpus": corpus,
        "documents": len(items),
        "chunks": chunks.height,
        "characters": int(chunks["text"].str.len_chars().sum()),
        "repeats": args.repeat,
        "seconds": round(median, 4),
        "seconds_all": [round(s, 4) for s in seconds],
        "seconds_per_1000_chunks": round(1000 * median / max(1, chunks.height), 4),
        "chunks_per_s": round(chunks.height / median, 1) if median else None,
        "entities_per_chunk": round(n_ent / max(1, chunks.height), 2),
        "triples_per_chunk": round(n_tri / max(1, chunks.height), 2),
        "gate_decisions": decisions.height,
        "accepted_share": round(decisions["accepted"].mean(), 4) if decisions.height else None,
        "accepted_share_entities": round(by_kind["entity"]["accepted"].mean(), 4)
        if by_kind["entity"].height
        else None,
        "accepted_share_triples": round(by_kind["triple"]["accepted"].mean(), 4)
        if by_kind["triple"].height
        else None,
        "rejections_by_gate": dict(sorted(decisions["gate"].drop_nulls().value_counts().iter_rows())),
        "gate_seconds": round(gate_s, 4),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--passages", type=int, default=None, help="2Wiki passages to extract (default: all)")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per corpus; the median is reported")
    ap.add_argument("--extractor", choices=("cooccurrence", "nlp"), default="cooccurrence")
    ap.add_argument("--batch-size", type=int, default=32, help="texts per spaCy batch (nlp)")
    ap.add_argument("--n-process", type=int, default=1, help="spaCy worker processes (nlp)")
    ap.add_argument("--chunk-chars", type=int, default=2000)
    ap.add_argument("--overlap-chars", type=int, default=200)
    ap.add_argument("--out", type=Path, default=RESULTS / "bench_offline_extraction.json")
    args = ap.parse_args()
    if args.repeat < 1 or (args.passages is not None and args.passages < 1):
        ap.error("--repeat and --passages must be >= 1")

    results: list[dict[str, Any]] = []
    if WIKIPEDIA.is_dir():
        results.append(bench("wikipedia_babbage_lovelace", wikipedia_documents(), args))
    else:
        print(f"(a) skipped: {WIKIPEDIA} does not exist", file=sys.stderr)
    if bi.WIKI2_CORPUS.is_file():
        results.append(bench("2wikimultihopqa", wiki2_documents(args.passages or 10**9), args))
    else:
        print(f"(b) skipped: {bi.WIKI2_CORPUS} does not exist", file=sys.stderr)
    if not results:
        print("nothing was benchmarked", file=sys.stderr)
        return 1
    fields = {
        "extractor": f"offline-{args.extractor}",
        "options": {
            "chunk_chars": args.chunk_chars,
            "overlap_chars": args.overlap_chars,
            "vocabulary": "biography",
            **(
                {"batch_size": args.batch_size, "n_process": args.n_process}
                if args.extractor == "nlp"
                else {}
            ),
        },
        "results": results,
    }
    print(json.dumps(fields, indent=2))
    bi.write_results(args.out, "bench_offline_extraction", "none (no database)", fields)
    return 0


if __name__ == "__main__":
    sys.exit(main())
