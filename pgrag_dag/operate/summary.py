"""Human summaries of an indexing run, from the stages' metadata (issue 16 item 3): what ``pgrag demo`` prints
after each partition's Dagster run and ``pgrag index`` after its plain pipeline run — documents, chunks,
entities, relations (negated, with validity, superseded), gate decisions per gate, predicates, graph
quality, communities, model usage and checks.

``metas`` is what :func:`pgrag_dag.assets.runner.materialize_partition` returns — asset name → its
materialisation metadata, plus ``_checks`` (``"<asset>:<check>"`` → passed), ``_quality`` (the
``graph_quality`` check's metadata) and ``_run`` (``run_id``) — or what :func:`stage_metas` makes of
:class:`~pgrag_dag.pipeline.common.StageResult` s.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pgrag_dag.pipeline.common import StageResult

USAGE_KEYS = ("model_calls", "cache_hits", "prompt_tokens", "completion_tokens", "cost_usd")


def counted(count: int, word: str, plural: str | None = None) -> str:
    """``1 row`` / ``1,204 rows``: a count with its noun in the number's form (``plural`` when it is not
    ``word + "s"``: ``communities``)."""
    return f"{count:,} {word if count == 1 else (plural or word + 's')}"


def stage_metas(results: Sequence[StageResult]) -> dict[str, dict[str, Any]]:
    """``metas`` (module docstring) from the results of :func:`pgrag_dag.pipeline.index_documents`: each
    stage's metadata; ``_checks`` with each stage's ``contract`` check (passed: a stage whose frame broke
    its contract raises instead of returning) and its further checks; ``_quality`` from the relations
    stage's ``graph_quality`` check; no ``_run`` (no Dagster run)."""
    metas: dict[str, dict[str, Any]] = {r.stage: dict(r.metadata) for r in results}
    metas["_checks"] = {
        f"{r.stage}:{name}": ok
        for r in results
        for name, ok in [("contract", True), *((n, c[0]) for n, c in r.checks.items())]
    }
    metas["_quality"] = next(
        (dict(c[1]) for r in results for n, c in r.checks.items() if n == "graph_quality"), {}
    )
    return metas


def _run_label(metas: dict[str, dict[str, Any]]) -> str:
    run = metas.get("_run", {}).get("run_id")
    return f"Dagster run {run}" if run else "plain pipeline run, no Dagster"


def _usage(metas: dict[str, dict[str, Any]]) -> dict[str, float]:
    return {k: sum(float(m.get(k, 0) or 0) for m in metas.values()) for k in USAGE_KEYS}


def _model_line(usage: dict[str, float]) -> str:
    return (
        f"  model            {usage['model_calls']:.0f} calls, {usage['cache_hits']:.0f} cache hits, "
        f"{usage['prompt_tokens']:.0f} prompt / {usage['completion_tokens']:.0f} completion tokens, "
        f"estimated cost ${usage['cost_usd']:.4f}"
    )


def _checks_line(checks: dict[str, bool]) -> str:
    return (
        f"  checks           {sum(checks.values())}/{len(checks)} passed "
        f"({', '.join(sorted(k for k, ok in checks.items() if not ok)) or 'all green'})"
    )


def _n(value: Any) -> str:
    """A count as every line writes it, with thousands separators (``14,937``); anything else as it is."""
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value)


def _by_reason(reasons: dict[str, int] | None) -> str:
    """``": negation 6, single_valued 1"`` — the reasons of the edges this run newly superseded (they add up
    to the count they follow; the run's decisions, re-decided pairs included, need not), or ``""``."""
    if not reasons:
        return ""
    return ": " + ", ".join(f"{k} {_n(v)}" for k, v in sorted(reasons.items()))


def summarise(partition: str, metas: dict[str, dict[str, Any]]) -> list[str]:
    """Human-readable summary lines from the assets' materialisation metadata."""
    c, g, r, co, h = (
        metas.get(k, {})
        for k in ("chunks", "gated_triples", "relations", "communities", "community_hierarchy")
    )
    usage = _usage(metas)
    gates = dict(g.get("rejections_per_gate") or {})
    if r.get("self_loops_after_resolution"):
        gates["self_loop (after resolution)"] = r["self_loops_after_resolution"]
    checks = metas.get("_checks", {})
    quality = metas.get("_quality", {})
    return [
        f"partition {partition}  ({_run_label(metas)})",
        f"  documents        {_n(c.get('documents'))}  ({_n(c.get('documents_added'))} added, "
        f"{_n(c.get('documents_replaced'))} replaced, "
        f"{_n(c.get('documents_removed', 0))} removed, {_n(c.get('documents_unchanged'))} unchanged"
        + (f", {c['documents_renamed']} renamed in place" if c.get("documents_renamed") else "")
        # a file that cannot be read now keeps its indexed chunks: count it, or the space seems to shrink
        + (
            f", {c['skipped_documents_kept']} unreadable now and kept as indexed"
            if c.get("skipped_documents_kept")
            else ""
        )
        + ")",
        f"  chunks           {_n(c.get('chunks'))}  ({_n(c.get('chunks_inserted'))} inserted this run)",
        # live and dormant apart, as ``pgrag status`` says them: the dormant are not among the live count
        f"  entities         {_n(r.get('entities'))} live, {_n(r.get('entities_dormant'))} dormant",
        f"  relations        {_n(r.get('relations'))}  ({_n(r.get('negated'))} negated, "
        f"{_n(r.get('with_validity'))} with a validity period)",
        f"  supersession     {_n(r.get('superseded'))} superseded ({_n(r.get('newly_superseded'))} this run"
        + _by_reason(r.get("newly_superseded_by_reason"))
        + ")",
        *[f"    {x}" for x in (r.get("supersession_examples") or [])[:4]],
        f"  gate decisions   this run: {_n(g.get('entities_accepted'))} entities and "
        f"{_n(g.get('triples_accepted'))} triples "
        f"accepted, {_n(g.get('rejected'))} rejected",
        *[f"    {gate:<20} {_n(n)}" for gate, n in sorted(gates.items())],
        f"  predicates       {_n(quality.get('distinct_predicates', g.get('distinct_predicates')))} "
        "distinct in the space; " + _vocabulary(g, quality),
        "  graph quality    "
        + (
            f"vocabulary share {share}, "
            if (share := quality.get("vocabulary_predicate_share")) is not None
            else ""
        )
        + f"{counted(quality.get('orphan_entities') or 0, 'orphan entity', 'orphan entities')}, "
        f"{counted(quality.get('duplicate_edge_rows') or 0, 'duplicate edge')}, "
        + counted(
            quality.get("fragmented_short_form_vertices") or 0, "fragmented vertex", "fragmented vertices"
        )
        + ", "
        f"{counted(quality.get('pronoun_entities') or 0, 'pronoun entity', 'pronoun entities')}",
        *[f"    warning: {w}" for w in quality.get("warnings") or []],
        f"  communities      {_n(co.get('communities'))} (level 0), "
        f"{counted(h.get('parents') or 0, 'parent topic')}",
        _model_line(usage),
        _checks_line(checks),
    ]


def _vocabulary(gated: dict[str, Any], quality: dict[str, Any]) -> str:
    """The predicates line's vocabulary part; a space without a vocabulary (share ``None``) says so."""
    if quality.get("vocabulary_predicate_share") is None and not gated.get("predicates_snapped"):
        return "no vocabulary configured (the space's preset: or vocabulary:)"
    off = ", ".join((gated.get("off_vocabulary_top") or [])[:5]) or "none"
    return f"this run: {gated.get('predicates_snapped')} snapped onto the vocabulary, commonest off it: {off}"


def summarise_first(partition: str, withheld: str, metas: dict[str, dict[str, Any]]) -> list[str]:
    """Summary lines of the run without the last document ``withheld`` (:data:`FIRST_RUN_ASSETS`)."""
    c, r = metas.get("chunks", {}), metas.get("relations", {})
    return [
        f"partition {partition} without its last document, {withheld}  ({_run_label(metas)})",
        f"  documents        {c.get('documents')}, {c.get('chunks')} chunks; {r.get('entities')} entities, "
        f"{r.get('relations')} relations, {r.get('superseded')} superseded; communities not built yet",
        _model_line(_usage(metas)),
        _checks_line(metas.get("_checks", {})),
    ]
