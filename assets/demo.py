"""``make demo`` / ``pgrag demo``: every asset of every configured partition through Dagster, a
summary, and one query over what was built. Offline: the model is ``replay`` over the corpus cassette.
"""

from __future__ import annotations

import logging
from typing import Any

from pgrag_dag.assets.runner import materialize_partition
from pgrag_dag.config import Settings, load_settings
from pgrag_dag.engine import Engine
from pgrag_dag.errors import ReplayMissError
from pgrag_dag.names import split_partition_key
from pgrag_dag.store import db

DEMO_QUESTION = "How did Ada Lovelace contribute to Charles Babbage's Analytical Engine?"
# partition -> (question, QueryParam overrides) asked by the demo with synthesis (recorded in the cassettes)
CFO_QUESTION = "Who was the chief financial officer of The Walt Disney Company?"
DEMO_QUESTIONS: dict[str, list[tuple[str, dict[str, Any]]]] = {
    "wiki.demo": [(DEMO_QUESTION, {})],
    # an as-of query whose answer changes with the date (§5.4)
    "tenk.disney": [(CFO_QUESTION, {"as_of": "2005"}), (CFO_QUESTION, {"as_of": "2012"}), (CFO_QUESTION, {"as_of": "2016"})],
}
USAGE_KEYS = ("model_calls", "cache_hits", "prompt_tokens", "completion_tokens", "cost_usd")


def summarise(partition: str, metas: dict[str, dict[str, Any]]) -> list[str]:
    """Human-readable summary lines from the assets' materialisation metadata."""
    c, g, r, co, h = (metas.get(k, {}) for k in ("chunks", "gated_triples", "relations", "communities", "community_hierarchy"))
    usage = {k: sum(float(m.get(k, 0) or 0) for m in metas.values()) for k in USAGE_KEYS}
    gates = dict(g.get("rejections_per_gate") or {})
    if r.get("self_loops_after_resolution"):
        gates["self_loop (after resolution)"] = r["self_loops_after_resolution"]
    checks = metas.get("_checks", {})
    quality = metas.get("_quality", {})
    return [
        f"partition {partition}  (Dagster run {metas.get('_run', {}).get('run_id', '?')})",
        f"  documents        {c.get('documents')}  ({c.get('documents_added')} added, {c.get('documents_replaced')} replaced, "
        f"{c.get('documents_unchanged')} unchanged)",
        f"  chunks           {c.get('chunks')}  ({c.get('chunks_inserted')} inserted this run)",
        f"  entities         {r.get('entities')}  ({r.get('entities_dormant')} dormant)",
        f"  relations        {r.get('relations')}  ({r.get('negated')} negated, {r.get('with_validity')} with a validity period)",
        f"  supersession     {r.get('superseded')} superseded ({r.get('newly_superseded')} this run) "
        f"{r.get('supersessions_by_reason') or ''}",
        *[f"    {x}" for x in (r.get("supersession_examples") or [])[:4]],
        f"  gate decisions   {g.get('entities_accepted')} entities and {g.get('triples_accepted')} triples accepted, "
        f"{g.get('rejected')} rejected",
        *[f"    {gate:<20} {n}" for gate, n in sorted(gates.items())],
        f"  predicates       {g.get('distinct_predicates')} distinct, {g.get('predicates_snapped')} snapped onto the "
        f"vocabulary; commonest off it: {', '.join((g.get('off_vocabulary_top') or [])[:5])}",
        f"  graph quality    vocabulary share {quality.get('vocabulary_predicate_share')}, "
        f"{quality.get('orphan_entities')} orphan entities, {quality.get('duplicate_edge_rows')} duplicate edges, "
        f"{quality.get('fragmented_short_form_vertices')} fragmented vertices, "
        f"{quality.get('pronoun_entities')} pronoun entities",
        f"  communities      {co.get('communities')} (level 0), {h.get('parents')} parent topics",
        f"  model            {usage['model_calls']:.0f} calls, {usage['cache_hits']:.0f} cache hits, "
        f"{usage['prompt_tokens']:.0f} prompt / {usage['completion_tokens']:.0f} completion tokens, "
        f"estimated cost ${usage['cost_usd']:.4f}",
        f"  checks           {sum(checks.values())}/{len(checks)} passed ({', '.join(sorted(k for k, ok in checks.items() if not ok)) or 'all green'})",
    ]


def run_demo() -> None:
    """Run the demo end to end and print its summary and one query's result."""
    from pgrag_dag.query import QueryParam, query, query_data, render_relation

    settings = load_settings()
    engine = Engine.from_settings(settings)
    print(f"database: {db.redact(engine.dsn)}")
    print(f"cassettes: {engine.import_cassettes()} recorded responses loaded")
    _switch_embedders(engine, settings)
    for partition in settings.partitions():
        metas = materialize_partition(settings, partition)
        logging.getLogger("pgrag_dag").setLevel(logging.WARNING)  # the run's managed loggers were at INFO
        print("\n" + "\n".join(summarise(partition, metas)))
        realm, space = split_partition_key(partition)
        for question, overrides in DEMO_QUESTIONS.get(partition, []):
            param = QueryParam.from_settings(settings.retrieval, space=space, **overrides)
            res = query_data(question, param, dsn=engine.dsn, realm=realm, embedder=engine.embedder(),
                             telemetry=settings.telemetry)
            where = ", ".join(f"{k}={v!r}" for k, v in overrides.items())
            print(f"\nquery_data({question!r}, mode=mix{', ' + where if where else ''}):")
            print(f"  {len(res.entities)} entities, {len(res.relations)} relations, {len(res.chunks)} chunks;"
                  f" top entities: " + ", ".join(e["name"] for e in res.entities[:4]))
            for rel in _shown(res.relations, question):
                print(f"  hop {rel['hop']}: {render_relation(rel)}")
            total = res.assembly.get("total", {})
            print(f"  context: {total.get('chars_placed')} of {total.get('chars_retrieved')} retrieved characters placed")
            try:
                answer, _ = query(question, param, dsn=engine.dsn, realm=realm, embedder=engine.embedder(),
                                  client=engine.client())
            except ReplayMissError:  # the context differs from the recorded one (e.g. another embedder)
                print("  answer: not shown — the cassette has no recorded answer for this exact context (it was "
                      "recorded with the local embedder on the shipped corpus); a live model in llm.models answers it")
                continue
            print("  answer (synthesised, replayed): " + answer.replace("\n", "\n  "))
    engine.close()


def _switch_embedders(engine: Engine, settings: Settings) -> None:
    """Re-embed each configured realm that an earlier demo in this data directory embedded with another
    model (e.g. the hashing embedder, the default before issue 12), saying so in one line."""
    from pgrag_dag.cli import reembed_progress
    from pgrag_dag.reembed import reembed_if_switched, summary

    for realm in settings.realms:
        with reembed_progress(realm) as progress:
            result = reembed_if_switched(engine, realm, echo=print, progress=progress)
        if result is not None:
            print(summary(result))


def _shown(relations: list[dict[str, Any]], question: str) -> list[dict[str, Any]]:
    """Up to five relations to print: for the CFO question, the cfo_of edges (what changes with the date)."""
    if question == CFO_QUESTION:
        return [r for r in relations if r["predicate"] == "cfo_of"][:5]
    return relations[:5]
