#!/usr/bin/env python
"""The offline extractor's graph beside the LLM graph of the demo (paper §8.6's structural measures).

Indexes the demo's three Wikipedia articles (``corpus/wikipedia``, biography vocabulary) twice in one
realm of a fresh embedded database: space ``llm`` with the recorded model responses (the ``replay``
model and the demo's cassette — the demo's own graph) and space ``offline`` with the ``cooccurrence``
extractor and extractive community reports. Reports, per space: entities, relations, distinct
predicates, communities, parent topics, the Table 6 defects, model calls, and the seconds of the
extraction stage and of the whole build; then the overlap: canonical names in common (case-insensitive),
the share of the LLM graph's connected entity pairs that the offline graph also connects, and examples.

    .venv/bin/python evaluation/compare_offline_graph.py

Prints the JSON report and writes it to ``evaluation/results/compare_offline_graph.json`` (gitignored).
"""

from __future__ import annotations

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


def _space(extra: dict[str, Any]) -> dict[str, Any]:
    return {
        "order": "filename",
        "preset": "biography",
        "sources": [{"path": str(REPO / "corpus" / "wikipedia"), "glob": "*.txt"}],
        **extra,
    }


def _graph(engine: Any, space: str) -> tuple[set[str], set[frozenset[str]]]:
    """Live canonical names (lowercased) and connected unordered name pairs of one space."""
    from psycopg import sql

    from pgrag_dag.store.schema import schema_for

    s = sql.Identifier(schema_for(REALM))
    with engine.connect() as conn:
        names = {
            n.lower()
            for (n,) in conn.execute(
                sql.SQL("SELECT name FROM {}.entities WHERE space = %s AND dormant_since IS NULL").format(s),
                (space,),
            )
        }
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
    return names, pairs


def main() -> int:
    from pgrag_dag import Engine, index_documents, load_settings

    with tempfile.TemporaryDirectory() as tmp:
        settings = load_settings(
            REPO / "pgrag.yaml",
            data_dir=Path(tmp) / "data",
            realms={
                REALM: {
                    "spaces": {
                        "llm": _space({}),
                        "offline": _space({"extractor": "cooccurrence", "reports": "extractive"}),
                    }
                }
            },
        )
        engine = Engine.from_settings(settings)
        try:
            engine.import_cassettes()
            spaces: dict[str, Any] = {}
            for space in ("llm", "offline"):
                t0 = time.perf_counter()
                results = {r.stage: r for r in index_documents(engine, REALM, space)}
                quality = results["relations"].checks["graph_quality"][1]
                spaces[space] = {
                    "chunks": results["chunks"].metadata["chunks"],
                    "entities": quality["entities"],
                    "relations": quality["relations"],
                    "distinct_predicates": quality["distinct_predicates"],
                    "orphan_entities": quality["orphan_entities"],
                    "defects": {
                        k: quality[k]
                        for k in ("duplicate_edge_rows", "fragmented_short_form_vertices", "pronoun_entities")
                    },
                    "communities": results["communities"].metadata["communities"],
                    "parent_topics": results["community_hierarchy"].metadata.get("parents", 0),
                    "report_writer": results["communities"].metadata["report_writer"],
                    "model_calls": sum(r.metadata.get("model_calls", 0) for r in results.values()),
                    "extraction_seconds": results["raw_extractions"].metadata["seconds"],
                    "build_seconds": round(time.perf_counter() - t0, 2),
                }
            llm_names, llm_pairs = _graph(engine, "llm")
            off_names, off_pairs = _graph(engine, "offline")
        finally:
            engine.close()
    common = llm_names & off_names
    shared_pairs = llm_pairs & off_pairs
    per_1000 = spaces["offline"]["extraction_seconds"] / spaces["offline"]["chunks"] * 1000
    report = {
        "spaces": spaces,
        "offline_extraction_seconds_per_1000_chunks": round(per_1000, 2),
        "entities_in_common": len(common),
        "share_of_llm_entities_also_offline": round(len(common) / max(1, len(llm_names)), 3),
        "llm_connected_pairs": len(llm_pairs),
        "share_of_llm_pairs_also_connected_offline": round(len(shared_pairs) / max(1, len(llm_pairs)), 3),
        "common_examples": sorted(common)[:25],
        "llm_only_examples": sorted(llm_names - off_names)[:25],
        "offline_only_examples": sorted(off_names - llm_names)[:25],
    }
    import json

    print(json.dumps(report, indent=2))
    bi.write_results(
        HERE / "results" / "compare_offline_graph.json", "compare_offline_graph", "embedded", report
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
