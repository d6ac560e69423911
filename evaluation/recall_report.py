"""The half of :mod:`evaluation.recall` that needs no database and runs no query: the benchmarks, the
metrics, the baselines' in-memory rankings, the question splits, the per-question comparison with exact
dense retrieval, the on-topic share of the relations a query returns (the paper's §8.13 measure), the PPR
tuning grid (the tables and chart: :mod:`evaluation.recall_tables`).

**Splits** (:func:`splits`): the 100 questions of each set are fixed and a split is by position — "tune" is
questions 1–50 (the only ones ``--tune`` queries), "held out" questions 51–100, "all" both. Every score is
reported per split side by side, with how many questions an arm answers better / worse than exact dense at
r@5 (:func:`better_worse`): at 50 or 100 questions that count, not the mean, is the honest significance check
(``../shared/research/graph-retrieval.md`` §6).
"""

from __future__ import annotations

import itertools
import json
import re
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from evaluation.embedder_candidates import baselines, common

KS = (2, 5)
DEPTH = 10
"""How deep the baselines rank (every arm is cut at max(KS))."""
BM25, EXACT = "BM25 (baseline)", "exact dense (baseline)"
TUNE_QUESTIONS = 50
"""Questions 1–50 of each set are the tuning split; 51–100 are held out (never queried by ``--tune``)."""
SPLITS = ("tune", "held out", "all")
RANK_BUCKETS = ((1, 5), (6, 10), (11, 20), (21, None))
"""The walk-rank buckets of the on-topic table: ranks 1–5, 6–10, 11–20 and 21+."""
NO_RANK, UNREACHED = "no walk rank", "unreached"
TUNING_GRID: dict[str, tuple[Any, ...]] = {
    "ppr_damping": (0.3, 0.5, 0.7),
    "ppr_prior_weight": (0.02, 0.05, 0.1),
    "ppr_prior_k": (50, 200, "pool"),
    "ppr_edges": (("mentions",), ("mentions", "relations"), ("mentions", "relations", "titles")),
}
"""The ``--tune`` grid (81 variants); ``"pool"`` is the data set's passage count (a prior over every
passage)."""


# -- data -----------------------------------------------------------------------------------------
@dataclass
class Benchmark:
    """One data set: its passage pool (``titles``, ``bodies``, pool order) and its questions with their gold
    supporting passages (``gold``: pool indices). ``note`` says why a set without questions is not scored."""

    name: str
    titles: list[str]
    bodies: list[str]
    questions: list[str] = field(default_factory=list)
    gold: list[set[int]] = field(default_factory=list)
    note: str = ""

    @property
    def texts(self) -> list[str]:
        """``title\\nbody`` per passage: what BM25 ranks and what a chunk embeds (title with text)."""
        return [f"{t}\n{b}" for t, b in zip(self.titles, self.bodies)]

    @property
    def scorable(self) -> bool:
        """Whether it has questions with gold passages."""
        return bool(self.questions)

    def head(self, n: int) -> Benchmark:
        """The same pool with only the first ``n`` questions."""
        return Benchmark(self.name, self.titles, self.bodies, self.questions[:n], self.gold[:n], self.note)


def _split(loader: Callable[..., Any], name: str) -> Benchmark:
    texts, questions, gold = loader(with_title=True)
    parts = [t.partition("\n") for t in texts]
    return Benchmark(name, [p[0] for p in parts], [p[2] for p in parts], list(questions), list(gold))


def load_2wiki() -> Benchmark:
    """The 2WikiMultiHopQA passages of the shared corpora; the folder has no question file, so no gold.
    Raises :class:`FileNotFoundError` when the corpus is absent."""
    folder = common.CORPORA / "2wikimultihopqa_hipporag_corpus"
    pool = json.loads((folder / "2wikimultihopqa_corpus.json").read_text(encoding="utf-8"))
    files = sorted(p.name for p in folder.iterdir())
    return Benchmark(
        "2wikimultihopqa",
        [p["title"] for p in pool],
        [p["text"] for p in pool],
        note=f"{len(pool):,} passages and no questions in the shared folder ({', '.join(files)}): "
        "no gold, so recall cannot be scored; not indexed",
    )


def load_benchmarks(n_questions: int) -> list[Benchmark]:
    """MuSiQue and HotpotQA (first ``n_questions`` each) and 2WikiMultiHopQA (passages only)."""
    return [
        _split(common.load_musique, "musique").head(n_questions),
        _split(common.load_hotpot, "hotpotqa").head(n_questions),
        load_2wiki(),
    ]


# -- baselines' rankings -------------------------------------------------------------------------
def bm25_rankings(
    texts: Sequence[str], questions: Sequence[str], depth: int = DEPTH
) -> tuple[list[list[int]], str]:
    """The top ``depth`` passage indices per question by Okapi BM25 (k1 1.2, b 0.75) over ``baselines.toks``
    tokens (lowercase words, a small stop list), ties by pool order; and the implementation used
    (``rank_bm25.BM25Okapi``, else ``baselines.bm25_scores``)."""
    try:
        from rank_bm25 import BM25Okapi
    except ImportError:
        scores = baselines.bm25_scores(list(texts), list(questions))
        return np.argsort(-scores, axis=1, kind="stable")[:, :depth].tolist(), "baselines.bm25_scores"
    model = BM25Okapi([baselines.toks(t) for t in texts], k1=1.2, b=0.75)
    return (
        [np.argsort(-model.get_scores(baselines.toks(q)), kind="stable")[:depth].tolist() for q in questions],
        "rank_bm25.BM25Okapi",
    )


def exact_dense_rankings(passages: np.ndarray, queries: np.ndarray, depth: int = DEPTH) -> list[list[int]]:
    """Brute-force cosine: for each row of ``queries`` (q, d) the row indices of ``passages`` (n, d) with the
    ``depth`` highest cosine similarities, highest first, ties by row order."""
    p = passages / np.linalg.norm(passages, axis=1, keepdims=True)
    q = queries / np.linalg.norm(queries, axis=1, keepdims=True)
    return np.argsort(-(q @ p.T), axis=1, kind="stable")[:, :depth].tolist()


# -- arms as QueryParams -------------------------------------------------------------------------
IMPLICIT: dict[str, Any] = {"graph_ranking": "mentions"}
"""Overrides that are what a :class:`~pgrag_dag.query.QueryParam` without the field does (the query path
before issue 26): dropped, and the arm's ``note`` says so, when the field is missing."""
TRACKED: tuple[str, ...] = (
    "chunk_channels",
    "graph_ranking",
    "ppr_damping",
    "ppr_prior_k",
    "ppr_prior_weight",
    "ppr_edges",
)
TRACKED += ("collapse_duplicates", "duplicate_similarity")
"""The QueryParam fields whose effective values the run config records per arm (those the param has)."""


def make_param(
    space: str, mode: str, overrides: Mapping[str, Any], factory: Callable[..., Any] | None = None
) -> tuple[Any, dict[str, Any], str]:
    """``QueryParam(space=space, mode=mode, **overrides)`` (or ``factory``), the overrides it took and a note;
    ``(None, {}, why)`` when QueryParam has no field an override names — but an :data:`IMPLICIT` override is
    dropped instead (the note says so). Other errors (a value QueryParam refuses) are raised."""
    from pgrag_dag.query import QueryParam

    make: Callable[..., Any] = QueryParam if factory is None else factory
    given, notes = dict(overrides), list[str]()
    while True:
        try:
            return make(space=space, mode=mode, **given), given, "; ".join(notes)
        except TypeError as exc:
            m = re.search(r"unexpected keyword argument '(\w+)'", str(exc))
            if m is None or m.group(1) not in given:
                raise
            name = m.group(1)
            if name in IMPLICIT and given[name] == IMPLICIT[name]:
                notes.append(f"{name}={given.pop(name)!r} implicit: QueryParam has no {name} field")
                continue
            return None, {}, f"skipped: QueryParam has no field {name!r} (issue 26 not in this revision)"


def resolve_arms(
    arms: Mapping[str, tuple[str, Mapping[str, Any]]], space: str, tracked: Sequence[str] = TRACKED
) -> tuple[dict[str, tuple[str, dict[str, Any]]], dict[str, Any], dict[str, str]]:
    """The arms (``{arm: (mode, overrides)}``) QueryParam can express, as ``{arm: (mode, overrides it
    takes)}``; each arm's config entry (``mode``, ``overrides``, ``note`` and, when it runs, ``applied``,
    ``chunk_channels`` and the ``effective`` values of the ``tracked`` fields the param has); the skipped
    arms with why (also printed)."""
    runnable: dict[str, tuple[str, dict[str, Any]]] = {}
    config: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    for arm, (mode, overrides) in arms.items():
        param, applied, note = make_param(space, mode, overrides)
        entry = {"mode": mode, "overrides": jsonable(overrides), "note": note}
        if param is None:
            skipped[arm] = note
            print(f"arm {arm!r} {note}", flush=True)
        else:
            runnable[arm] = (mode, applied)
            entry["applied"] = jsonable(applied)
            entry["chunk_channels"] = list(param.chunk_channels)
            entry["effective"] = {f: jsonable(getattr(param, f)) for f in tracked if hasattr(param, f)}
        config[arm] = entry
    return runnable, config, skipped


def jsonable(v: Any) -> Any:
    """``v`` with tuples as lists (also inside mappings and lists), as JSON writes them."""
    if isinstance(v, Mapping):
        return {k: jsonable(x) for k, x in v.items()}
    return [jsonable(x) for x in v] if isinstance(v, (tuple, list)) else v


# -- metrics --------------------------------------------------------------------------------------
def passage_recall(ranked: Sequence[int], gold: set[int], k: int) -> float:
    """|gold ∩ top-k of ``ranked``| / |gold|; ``gold`` must not be empty."""
    return len(set(ranked[:k]) & gold) / len(gold)


def all_gold(ranked: Sequence[int], gold: set[int], k: int) -> float:
    """1.0 when every gold passage is in the top k of ``ranked``, else 0.0."""
    return float(gold <= set(ranked[:k]))


def score(
    rankings: Sequence[Sequence[int]], gold: Sequence[set[int]], ks: Sequence[int] = KS
) -> dict[str, float]:
    """Mean ``r@k`` (:func:`passage_recall`) and ``all@k`` (:func:`all_gold`) over questions, for each k."""
    out: dict[str, float] = {}
    for k in ks:
        out[f"r@{k}"] = float(np.mean([passage_recall(r, g, k) for r, g in zip(rankings, gold)]))
        out[f"all@{k}"] = float(np.mean([all_gold(r, g, k) for r, g in zip(rankings, gold)]))
    return out


# -- splits ---------------------------------------------------------------------------------------
def splits(n: int, tune: int = TUNE_QUESTIONS) -> dict[str, range]:
    """Question positions (0-based) of each split of a set of ``n`` questions: ``tune`` the first ``tune``,
    ``held out`` the rest, ``all`` every one. A split by position, so a run over fewer questions
    (``--questions``) has the same tune questions and a shorter (or empty) held-out split."""
    return {"tune": range(min(n, tune)), "held out": range(tune, max(n, tune)), "all": range(n)}


def split_label(name: str, positions: range) -> str:
    """``"tune, q 1–50"``: the split and its questions, 1-based; ``"held out, no question"`` when empty."""
    if not positions:
        return f"{name}, no question"
    return f"{name}, q {positions.start + 1}–{positions.stop}"


def better_worse(
    ranked: Sequence[Sequence[int]],
    reference: Sequence[Sequence[int]],
    gold: Sequence[set[int]],
    positions: Sequence[int],
    k: int = 5,
) -> dict[str, int]:
    """Among the questions at ``positions``, how many ``ranked`` has a higher / lower / equal recall@k than
    ``reference`` (exact dense)."""
    out = {"better": 0, "worse": 0, "same": 0}
    for i in positions:
        a, b = passage_recall(ranked[i], gold[i], k), passage_recall(reference[i], gold[i], k)
        out["better" if a > b else "worse" if a < b else "same"] += 1
    return out


def split_scores(
    ranked: Sequence[Sequence[int]],
    gold: Sequence[set[int]],
    reference: Sequence[Sequence[int]] | None = None,
    tune: int = TUNE_QUESTIONS,
) -> dict[str, dict[str, Any]]:
    """Per split (:func:`splits` with ``tune``): ``questions``, ``first`` / ``last`` (1-based), the
    :func:`score` keys (``None`` for an empty split) and, unless ``reference`` is ``None``, ``vs_exact_r@5``
    (:func:`better_worse` at k = 5)."""
    out: dict[str, dict[str, Any]] = {}
    for name, pos in splits(len(gold), tune).items():
        row: dict[str, Any] = {"questions": len(pos), "first": pos.start + 1 if pos else None}
        row["last"] = pos.stop if pos else None
        if pos:
            row.update(score([ranked[i] for i in pos], [gold[i] for i in pos]))
        else:
            row.update(dict.fromkeys(f"{m}@{k}" for k in KS for m in ("r", "all")))
        if reference is not None:
            row["vs_exact_r@5"] = better_worse(ranked, reference, gold, pos)
        out[name] = row
    return out


# -- on-topic relations (§8.13) -------------------------------------------------------------------
def rank_bucket(rank: int | None) -> str:
    """The :data:`RANK_BUCKETS` label of a 1-based walk rank (``"1–5"``, …, ``"21+"``); :data:`NO_RANK` for a
    relation the walk did not rank."""
    if rank is None:
        return NO_RANK
    for lo, hi in RANK_BUCKETS:
        if hi is None or rank <= hi:
            return f"{lo}+" if hi is None else f"{lo}–{hi}"
    raise AssertionError("unreachable: the last bucket is open")


def hop_bucket(hop: int | None) -> str:
    """The hop depth as a label (``"1"``, ``"2"``, …); :data:`UNREACHED` when the row has none."""
    return UNREACHED if hop is None else str(hop)


def on_topic_shares(
    returned: Sequence[Sequence[tuple[int, int | None, int | None]]],
    sources: Mapping[int, set[int]],
    gold: Sequence[set[int]],
) -> dict[str, Any]:
    """The on-topic share of the relations returned, by hop depth and by walk rank bucket.

    ``returned``: per question, its relations as ``(relation id, hop, walk rank)``; ``sources``: relation id
    → the pool indices of its supporting chunks; a relation is on-topic when one of them is a gold passage
    of the question. Returns ``questions`` and, under ``hop``, ``rank`` (:func:`rank_bucket`) and ``all``,
    per bucket ``relations``, ``on_topic``, ``share`` (``None`` without relations) and ``per_question``
    (relations / questions). Hops sort numerically, :data:`UNREACHED` last; ranks in bucket order."""
    counts: dict[str, dict[str, list[int]]] = {"hop": {}, "rank": {}, "all": {}}
    for rels, g in zip(returned, gold):
        for rid, hop, rank in rels:
            on = int(bool(sources.get(rid, set()) & g))
            for by, key in (("hop", hop_bucket(hop)), ("rank", rank_bucket(rank)), ("all", "all")):
                c = counts[by].setdefault(key, [0, 0])
                c[0] += 1
                c[1] += on
    rank_order = [rank_bucket(lo) for lo, _ in RANK_BUCKETS] + [NO_RANK]
    order = {
        "hop": sorted(counts["hop"], key=lambda h: (h == UNREACHED, int(h) if h != UNREACHED else 0)),
        "rank": [b for b in rank_order if b in counts["rank"]],
        "all": list(counts["all"]),
    }
    n = len(returned)
    out: dict[str, Any] = {"questions": n}
    for by, keys in order.items():
        out[by] = {
            key: {
                "relations": counts[by][key][0],
                "on_topic": counts[by][key][1],
                "share": counts[by][key][1] / counts[by][key][0],
                "per_question": counts[by][key][0] / n,
            }
            for key in keys
        }
    if not out["all"]:
        out["all"] = {"all": {"relations": 0, "on_topic": 0, "share": None, "per_question": 0.0}}
    return out


def on_topic_by_split(
    returned: Sequence[Sequence[tuple[int, int | None, int | None]]],
    sources: Mapping[int, set[int]],
    gold: Sequence[set[int]],
) -> dict[str, dict[str, Any]]:
    """:func:`on_topic_shares` for each split (:func:`splits`) of the questions."""
    return {
        name: on_topic_shares([returned[i] for i in pos], sources, [gold[i] for i in pos])
        for name, pos in splits(len(gold)).items()
    }


# -- the tuning grid ------------------------------------------------------------------------------
def tuning_variants(grid: Mapping[str, Sequence[Any]] = TUNING_GRID) -> dict[str, dict[str, Any]]:
    """Every combination of ``grid`` (the last field varying fastest) by name, e.g. ``"d 0.5, w 0.05, k 200,
    edges mentions+relations"``; ``ppr_prior_k`` may be ``"pool"`` (:func:`resolve_variant`)."""
    names = list(grid)
    out: dict[str, dict[str, Any]] = {}
    for values in itertools.product(*(grid[n] for n in names)):
        v = dict(zip(names, values))
        out[variant_name(v)] = v
    return out


def variant_name(v: Mapping[str, Any]) -> str:
    """A variant's short name: damping, prior weight, prior size, edge set."""
    return (
        f"d {v['ppr_damping']}, w {v['ppr_prior_weight']}, k {v['ppr_prior_k']}, "
        f"edges {'+'.join(v['ppr_edges'])}"
    )


def resolve_variant(v: Mapping[str, Any], pool: int) -> dict[str, Any]:
    """The variant's QueryParam overrides for a data set of ``pool`` passages (``"pool"`` → ``pool``)."""
    return {**v, "ppr_prior_k": pool if v["ppr_prior_k"] == "pool" else v["ppr_prior_k"]}


def variant_order(results: Mapping[str, Mapping[str, Any]], data_sets: Sequence[str]) -> Callable[[str], Any]:
    """Sort key: best first by mean r@5 over ``data_sets``, then mean r@2, then order in ``results``."""
    order = {name: i for i, name in enumerate(results)}

    def key(name: str) -> tuple[float, float, int]:
        r = results[name]
        r5 = statistics.fmean(r[d]["r@5"] for d in data_sets)
        return (-r5, -statistics.fmean(r[d]["r@2"] for d in data_sets), order[name])

    return key


def best_variant(results: Mapping[str, Mapping[str, Any]], data_sets: Sequence[str]) -> str:
    """The variant with the highest mean r@5 over ``data_sets`` (each ``results[variant][data set]`` a
    :func:`score`), ties by mean r@2, then by name order in ``results``."""
    return min(results, key=variant_order(results, data_sets))


def tuning_summary(
    scores: Mapping[str, Any], variants: Mapping[str, Mapping[str, Any]], pools: Mapping[str, int]
) -> dict[str, Any]:
    """The ``recall_tuning`` result from :func:`evaluation.recall.evaluate`'s ``scores`` over the tune split
    of the data sets of ``pools`` (name → passages): per variant its ``grid`` values and per data set the
    scores, ``questions``, ``vs_exact_r@5``, ``p50_ms`` and ``ppr_prior_k``, and ``mean_r@5``; the same for
    the ``reference`` arms (local, BM25, exact dense); the ``best`` variant (:func:`best_variant`)."""
    sets = list(pools)

    def row(s: Mapping[str, Any]) -> dict[str, Any]:
        keys = ("r@2", "r@5", "all@2", "all@5")
        return {**{k: s[k] for k in keys}, **s["splits"]["tune"], "p50_ms": s.get("p50_ms")}

    table: dict[str, dict[str, Any]] = {}
    for arm in ["local", BM25, EXACT, *variants]:
        v = table[arm] = {ds: row({**scores[ds]["arms"], **scores[ds]["baselines"]}[arm]) for ds in sets}
        v["mean_r@5"] = statistics.fmean(v[ds]["r@5"] for ds in sets)
        if arm in variants:
            v["grid"] = jsonable(variants[arm])
            for ds in sets:
                v[ds]["ppr_prior_k"] = resolve_variant(variants[arm], pools[ds])["ppr_prior_k"]
    return {
        "data_sets": {ds: {"questions": scores[ds]["questions"], "passages": pools[ds]} for ds in sets},
        "variants": {v: table[v] for v in variants},
        "reference": {a: table[a] for a in ("local", BM25, EXACT)},
        "best": best_variant({v: table[v] for v in variants}, sets),
    }
