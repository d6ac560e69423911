"""The tables and chart of :mod:`evaluation.recall`'s runs: recall per arm and split, indexing, the on-topic
share of relations by hop and walk rank (the paper's §8.13 measure), the tuning grid, the machine."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from evaluation import plots
from evaluation import recall_report as rr
from evaluation.harness import Table
from evaluation.recall_report import EXACT


# -- tables ---------------------------------------------------------------------------------------
def _triple(v: Mapping[str, Any]) -> str:
    if v.get("r@5") is None:
        return "—"
    return f"{v['r@2']:.3f} / {v['r@5']:.3f} / {v['all@5']:.2f}"


def _updown(v: Mapping[str, Any]) -> str:
    c = v.get("vs_exact_r@5")
    return "—" if c is None or not v.get("questions") else f"{c['better']} / {c['worse']}"


def recall_table(
    scores: dict[str, Any], indexing: dict[str, Any], embedding_model: str, chunk_top_k: int = 8
) -> Table:
    """One row per data set and arm over **all** its questions: r@2, r@5, all-gold@2, all-gold@5, chunks
    returned, query p50, and questions better / worse than exact dense at r@5 (the columns of the earlier
    table first, so that its readers still find them)."""
    rows: list[list[Any]] = []
    for ds, s in scores.items():
        if not s["scored"]:
            rows.append([ds, "(every arm)", *["—"] * 8])
            continue
        for arm, v in {**s["arms"], **s["baselines"]}.items():
            vs = v.get("splits", {}).get("all", {}).get("vs_exact_r@5")
            updown = ["—", "—"] if vs is None or arm == EXACT else [vs["better"], vs["worse"]]
            if arm == "global":
                rows.append([ds, arm, "—", "—", "—", "—", 0.0, v["p50_ms"], "—", "—"])
                continue
            rows.append(
                [
                    ds,
                    arm,
                    *(v[k] for k in ("r@2", "r@5", "all@2", "all@5")),
                    v.get("chunks_returned"),
                    v.get("p50_ms"),
                    *updown,
                ]
            )
    notes = [f"{ds}: {s['note']}." for ds, s in scores.items() if not s["scored"]]
    counts = "; ".join(
        f"{ds} {s['questions']} questions over {s['passages']:,} passages "
        f"({indexing[ds]['entities']:,} entities, {indexing[ds]['relations']:,} relations, "
        f"communities {indexing[ds]['communities'] or 'not built'})"
        for ds, s in scores.items()
        if s["scored"]
    )
    note = (
        f"All questions of each set (the next table splits them into tune and held out). {counts}. "
        "r@k = |gold ∩ top-k| / |gold|; all@k = share of questions with every gold passage in the top k; "
        "better / worse = questions whose r@5 is above / below exact dense's. Chunks are ranked in the order "
        "the result gives them. graph_ranking 'mentions' (the arms without 'ppr'): searched chunks (vector "
        "rank) first, then mention-expansion chunks (most matched entities mentioned, then document order), "
        f"so local/mix/hybrid equal naive at k ≤ chunk_top_k ({chunk_top_k}) by construction; 'ppr': the "
        "personalised-PageRank order. 'graph only' = chunk_channels []. global returns relations (and "
        "community reports when built), no chunks: not scored (— ; 0 chunks returned). Baselines rank "
        "in-process; their p50 is not measured. " + " ".join(notes)
    )
    return Table(
        f"Passage recall on the multi-hop benchmarks, all questions (offline extractor, {embedding_model})",
        "data set|arm|r@2|r@5|all-gold@2|all-gold@5|chunks returned|query p50 ms".split("|")
        + ["r@5 better than exact dense", "worse"],
        rows,
        note=note,
    )


def split_table(scores: dict[str, Any]) -> Table:
    """One row per data set and arm; for each split (tune, held out, all) ``r@2 / r@5 / all@5`` and the
    questions better / worse than exact dense at r@5, side by side."""
    scored = {ds: s for ds, s in scores.items() if s["scored"]}
    n = max((s["questions"] for s in scored.values()), default=0)
    labels = {name: rr.split_label(name, pos) for name, pos in rr.splits(n).items()}
    rows: list[list[Any]] = []
    for ds, s in scored.items():
        for arm, v in {**s["arms"], **s["baselines"]}.items():
            if arm == "global":
                continue
            cells: list[Any] = []
            for name in rr.SPLITS:
                sv = v["splits"][name]
                cells += [_triple(sv), "—" if arm == EXACT else _updown(sv)]
            rows.append([ds, arm, *cells])
    headers = ["data set", "arm"]
    for name in rr.SPLITS:
        headers += [f"{labels[name]}: r@2 / r@5 / all@5", f"{name}: vs exact dense r@5, better / worse"]
    return Table(
        "Passage recall by question split — tune (questions 1–50), held out (51–100), all",
        headers,
        rows,
        note=(
            "A split is by position in the benchmark's fixed question list. Only the tune split may be used "
            "to choose PPR parameters (`--tune` queries nothing else); report the held-out column. "
            "better / worse: questions of the split whose recall@5 is above / below exact dense's."
        ),
    )


def index_table(indexing: dict[str, Any]) -> Table:
    """One row per indexed data set: passages, entities, relations, communities, seconds in total and per
    stage (``reused`` when ``--reuse-index`` found the index in place)."""
    stages = list(dict.fromkeys(s for v in indexing.values() for s in v["stage_seconds"]))
    rows = [
        [
            ds,
            v["passages"],
            v["entities"],
            v["relations"],
            "not built" if v["communities"] is None else v["communities"],
            "reused" if v.get("reused") else v["seconds"],
            *[v["stage_seconds"].get(s) for s in stages],
        ]
        for ds, v in indexing.items()
    ]
    title = (
        f"Indexing ({len(stages)} stages, no model call)" if stages else "Indexing (reused, counts checked)"
    )
    return Table(
        title,
        [*"data set|passages|entities|relations|communities|total s".split("|"), *[f"{s} s" for s in stages]],
        rows,
        digits=1,
    )


def on_topic_table(ds: str, on_topic: Mapping[str, Mapping[str, Any]]) -> Table:
    """The §8.13 measure for one data set: per hop depth and walk-rank bucket (rows), per arm the relations
    returned a question (all questions) and the on-topic share for tune / held out / all. ``on_topic``: arm
    → split → :func:`evaluation.recall_report.on_topic_shares`."""
    arms = list(on_topic)
    buckets: dict[tuple[str, str], None] = {}
    for by in ("hop", "rank", "all"):
        keys = [k for a in arms for k in on_topic[a]["all"][by]]
        if by == "hop":
            keys = sorted(set(keys), key=lambda h: (h == rr.UNREACHED, int(h) if h != rr.UNREACHED else 0))
        elif by == "rank":
            order = [rr.rank_bucket(lo) for lo, _ in rr.RANK_BUCKETS] + [rr.NO_RANK]
            keys = [b for b in order if b in keys]
        buckets.update(dict.fromkeys((by, k) for k in keys))
    rows: list[list[Any]] = []
    for by, key in buckets:
        row: list[Any] = [{"hop": "hop", "rank": "walk rank", "all": "all"}[by], key]
        for a in arms:
            per = {name: on_topic[a][name][by].get(key) for name in rr.SPLITS}
            row.append(per["all"]["per_question"] if per["all"] else 0.0)
            row.append(
                " / ".join(
                    "—" if c is None or c["share"] is None else f"{c['share']:.0%}"
                    for c in (per[name] for name in rr.SPLITS)
                )
            )
        rows.append(row)
    headers = ["by", "bucket"]
    for a in arms:
        headers += [f"{a}: relations a question", f"{a}: on-topic, tune / held out / all"]
    return Table(
        f"{ds}: on-topic share of the relations a query returns, by hop and walk rank (as §8.13)",
        headers,
        rows,
        note=(
            "A relation is on-topic when one of its supporting chunks (relations.chunk_ids) is a gold "
            "passage of the question. hop = the row's `hop` (under 'mentions' the relation similarity and "
            "lexical channels' rows count as hop 1, as the result gives them); walk rank = "
            "ranks['traversal'] (under graph_ranking 'ppr' the PPR rank, under 'mentions' the traversal's "
            f"hop-major rank); '{rr.NO_RANK}' = returned by another relation channel only. Relations a "
            "question: over all questions."
        ),
        digits=2,
    )


def tuning_table(tuning: Mapping[str, Any]) -> Table:
    """The ``--tune`` grid, best mean r@5 first: the variant's parameters, per data set ``r@2 / r@5 /
    all@5`` on the tune split and its questions better / worse than exact dense, the mean r@5; the
    reference arms first."""
    sets = list(tuning["data_sets"])
    rows: list[list[Any]] = []
    for name, v in tuning["reference"].items():
        cells = [_triple(v[d]) if name == EXACT else _cell(v[d]) for d in sets]
        rows.append(["ref", name, "", "", "", "", *cells, v["mean_r@5"]])
    variants = tuning["variants"]
    ranked = [tuning["best"], *sorted(set(variants) - {tuning["best"]}, key=rr.variant_order(variants, sets))]
    for i, name in enumerate(ranked, 1):
        v, p = variants[name], variants[name]["grid"]
        grid = [p[k] for k in ("ppr_damping", "ppr_prior_weight", "ppr_prior_k")] + ["+".join(p["ppr_edges"])]
        label = f"{i} (best)" if name == tuning["best"] else str(i)
        rows.append([label, name, *grid, *[_cell(v[d]) for d in sets], v["mean_r@5"]])
    q = ", ".join(f"{d} q 1–{tuning['data_sets'][d]['questions']}" for d in sets)
    return Table(
        f"PPR tuning on the tune split only ({q}; local mode, graph_ranking ppr)",
        [*"rank|variant|damping|prior weight|prior k|edges".split("|")]
        + [*(f"{d}: r@2 / r@5 / all@5 (better / worse)" for d in sets), "mean r@5"],
        rows,
        note=(
            f"Best by mean r@5 over {' and '.join(sets)}: **{tuning['best']}**. Questions 51–100 were not "
            "queried. prior k 'pool' = every passage of the set. better / worse = questions whose r@5 is "
            "above / below exact dense's."
        ),
    )


def _cell(v: Mapping[str, Any]) -> str:
    c = v.get("vs_exact_r@5")
    return _triple(v) + ("" if c is None else f" ({c['better']} / {c['worse']})")


def machine_table(results: Mapping[str, Any], seconds: float) -> Table:
    """CPUs, load average at the start and end of the run, and its seconds."""
    return Table(
        "Machine",
        ["cpus", "load average at start (1/5/15 min)", "at end", "seconds"],
        [[results["cpus"], results["load_average_start"], results["load_average_end"], round(seconds, 1)]],
    )


def plot(scores: dict[str, Any], path: Path) -> Path | None:
    """Grouped bars of r@2, r@5 and all-gold@5 per arm over all questions, one panel per scored data set (PNG
    at ``path``); ``None`` (with a message) when matplotlib is not installed."""
    plt = plots.pyplot()
    if plt is None:
        return None
    scored = {ds: s for ds, s in scores.items() if s["scored"]}
    fig, axes = plt.subplots(1, len(scored), figsize=(8 * len(scored), 5), squeeze=False, sharey=True)
    metrics = (("r@2", "recall@2"), ("r@5", "recall@5"), ("all@5", "all gold in top 5"))
    for ax, (ds, s) in zip(axes[0], scored.items()):
        rows = {a: v for a, v in {**s["arms"], **s["baselines"]}.items() if a != "global"}
        x = np.arange(len(rows))
        for i, (key, label) in enumerate(metrics):
            ax.bar(x + (i - 1) * 0.27, [v[key] for v in rows.values()], 0.27, label=label)
        ax.set_xticks(
            x,
            [a.replace(" (baseline)", "\n(baseline)").replace(", graph only", "\ngraph only") for a in rows],
            rotation=45,
            ha="right",
            fontsize=8,
        )
        ax.set_title(f"{ds} ({s['questions']} questions, {s['passages']:,} passages)")
        ax.set_ylim(0, 1)
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].set_ylabel("share")
    axes[0][0].legend(loc="upper right", fontsize=8)
    return plots.save(fig, path, title="Passage recall by query mode (global returns no chunks: not shown)")
