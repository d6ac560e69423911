#!/usr/bin/env python
"""The offline extractors' graphs beside the LLM graph (paper §8.6's structural measures; issue 27).

For each corpus — the demo's three Wikipedia articles (``corpus/wikipedia``, biography vocabulary) and the
Disney 10-K excerpts (``corpus/disney_10k``, finance vocabulary) — indexes it three times in one realm of a
fresh embedded database: space ``llm`` with the recorded model responses (the ``replay`` model and the
demo's cassettes: the demo's own graph), and one space per offline extractor (``cooccurrence``, ``nlp``),
communities off. Reports, per space: entities, relations, distinct predicates, the share of typed
entities (not ``Concept``), orphan entities, fragmented short-form vertices, superseded relations, names
ending in punctuation, canonical names starting with an honorific, model calls, the extraction stage's
seconds; and against the LLM graph: canonical names in common (case-insensitive, share of the LLM's),
the share of the LLM graph's connected entity pairs the offline graph connects, and the share of the
offline graph's connected pairs the LLM graph connects (a precision proxy), with examples.

    .venv/bin/python evaluation/compare_offline_graph.py [--corpus wiki|disney ...] [--extractor NAME ...]

Prints the JSON report and writes it to ``evaluation/results/compare_offline_graph.json`` (gitignored).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
for p in (str(REPO), str(HERE)):
    if p not in sys.path:
        sys.path.insert(0, p)
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import bench_index as bi  # noqa: E402  (the shared JSON report writer)

REALM = "cmp"
CORPORA = {"wiki": ("wikipedia", "biography"), "disney": ("disney_10k", "finance")}
EXTRACTORS = ("cooccurrence", "nlp")


def _space(corpus: str, extra: dict[str, Any]) -> dict[str, Any]:
    folder, preset = CORPORA[corpus]
    return {
        "order": "filename",
        "preset": preset,
        "sources": [{"path": str(REPO / "corpus" / folder), "glob": "*.txt"}],
        **extra,
    }


def _graph(engine: Any, space: str) -> dict[str, Any]:
    """Live canonical names (lowercased), their types, connected unordered name pairs (current edges) and
    the count of superseded edges of one space."""
    from psycopg import sql

    from pgrag_dag.store.schema import schema_for

    s = sql.Identifier(schema_for(REALM))
    with engine.connect() as conn:
        names = dict(
            conn.execute(
                sql.SQL(
                    "SELECT name, entity_type FROM {}.entities WHERE space = %s AND dormant_since IS NULL"
                ).format(s),
                (space,),
            ).fetchall()
        )
        pairs = {
            frozenset((a.lower(), b.lower()))
            for a, b in conn.execute(
                sql.SQL(
                    """SELECT a.name, b.name FROM {s}.relations r JOIN {s}.entities a ON a.id = r.source_id
                 JOIN {s}.entities b ON b.id = r.target_id
                WHERE r.space = %s AND r.dormant_since IS NULL AND r.superseded_by IS NULL"""
                ).format(s=s),
                (space,),
            )
        }
        superseded = conn.execute(
            sql.SQL(
                "SELECT count(*) FROM {}.relations WHERE space = %s AND superseded_by IS NOT NULL"
                " AND dormant_since IS NULL"
            ).format(s),
            (space,),
        ).fetchone()[0]
    return {"names": names, "pairs": pairs, "superseded": superseded}


def _measure(engine: Any, space: str) -> dict[str, Any]:
    from pgrag_dag import index_documents
    from pgrag_dag.extract.nlp_names import HONORIFICS

    t0 = time.perf_counter()
    results = {r.stage: r for r in index_documents(engine, REALM, space, communities=False)}
    quality = results["relations"].checks["graph_quality"][1]
    graph = _graph(engine, space)
    names = graph["names"]
    return {
        "chunks": results["chunks"].metadata["chunks"],
        "entities": quality["entities"],
        "relations": quality["relations"],
        "distinct_predicates": quality["distinct_predicates"],
        "typed_entity_share": round(sum(t != "Concept" for t in names.values()) / max(1, len(names)), 3),
        "orphan_entities": quality["orphan_entities"],
        "fragmented_short_form_vertices": quality["fragmented_short_form_vertices"],
        "superseded_relations": graph["superseded"],
        "names_ending_in_punctuation": sorted(n for n in names if n[-1:] in ".,;:!?")[:10],
        "honorific_canonical_names": sorted(n for n in names if n.split()[0].lower() in HONORIFICS)[:10],
        "model_calls": sum(r.metadata.get("model_calls", 0) for r in results.values()),
        "extraction_seconds": results["raw_extractions"].metadata["seconds"],
        "build_seconds": round(time.perf_counter() - t0, 2),
        "_names": {n.lower() for n in names},
        "_pairs": graph["pairs"],
    }


def compare(corpus: str, extractors: list[str]) -> dict[str, Any]:
    """The report of one corpus: the LLM space and one space per offline extractor (see the module)."""
    from pgrag_dag import Engine, load_settings

    with tempfile.TemporaryDirectory() as tmp:
        spaces = {"llm": _space(corpus, {})} | {x: _space(corpus, {"extractor": x}) for x in extractors}
        settings = load_settings(
            REPO / "pgrag.yaml", data_dir=Path(tmp) / "data", realms={REALM: {"spaces": spaces}}
        )
        engine = Engine.from_settings(settings)
        try:
            engine.import_cassettes()
            measured = {space: _measure(engine, space) for space in spaces}
        finally:
            engine.close()
    llm = measured["llm"]
    report: dict[str, Any] = {
        "spaces": {k: {x: y for x, y in v.items() if not x.startswith("_")} for k, v in measured.items()}
    }
    for x in extractors:
        off = measured[x]
        common, shared = llm["_names"] & off["_names"], llm["_pairs"] & off["_pairs"]
        report[x] = {
            "names_in_common": len(common),
            "share_of_llm_names": round(len(common) / max(1, len(llm["_names"])), 3),
            "share_of_llm_pairs_connected": round(len(shared) / max(1, len(llm["_pairs"])), 3),
            "precision_proxy": round(len(shared) / max(1, len(off["_pairs"])), 3),
            "llm_only_examples": sorted(llm["_names"] - off["_names"])[:20],
            "missed_pair_examples": sorted(
                " — ".join(sorted(p)) for p in llm["_pairs"] - off["_pairs"] if p <= off["_names"]
            )[:30],
            "unconfirmed_pair_examples": sorted(
                " — ".join(sorted(p)) for p in off["_pairs"] - llm["_pairs"] if p <= llm["_names"]
            )[:30],
            "offline_only_examples": sorted(off["_names"] - llm["_names"])[:20],
        }
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", nargs="+", choices=sorted(CORPORA), default=sorted(CORPORA, reverse=True))
    parser.add_argument("--extractor", nargs="+", choices=EXTRACTORS, default=list(EXTRACTORS))
    args = parser.parse_args()
    report = {corpus: compare(corpus, args.extractor) for corpus in args.corpus}
    import json

    print(json.dumps(report, indent=2))
    bi.write_results(
        HERE / "results" / "compare_offline_graph.json", "compare_offline_graph", "embedded", report
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
