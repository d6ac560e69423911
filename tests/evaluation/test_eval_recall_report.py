"""The pure half of the recall harness (issue 26's additions): the question splits, the per-question counts
against exact dense, the on-topic bucketing of returned relations (§8.13), the PPR tuning grid and its
selection, arms as QueryParams when a field is missing — on constructed cases checked by hand."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from evaluation import recall_report as rr
from evaluation.recall import ARMS
from evaluation.recall_report import (
    BM25,
    EXACT,
    NO_RANK,
    UNREACHED,
    best_variant,
    better_worse,
    hop_bucket,
    make_param,
    on_topic_by_split,
    on_topic_shares,
    rank_bucket,
    resolve_arms,
    resolve_variant,
    split_label,
    split_scores,
    splits,
    tuning_summary,
    tuning_variants,
)
from evaluation.recall_tables import split_table, tuning_table


def test_splits_are_by_position_first_50_tune_last_50_held_out() -> None:
    s = splits(100)
    assert (s["tune"], s["held out"], s["all"]) == (range(0, 50), range(50, 100), range(0, 100))
    # fewer questions (--questions 6): the same tune questions, nothing held out
    assert splits(6) == {"tune": range(0, 6), "held out": range(50, 50), "all": range(0, 6)}
    assert splits(70)["held out"] == range(50, 70)
    assert split_label("tune", s["tune"]) == "tune, q 1–50"
    assert split_label("held out", s["held out"]) == "held out, q 51–100"
    assert split_label("held out", splits(6)["held out"]) == "held out, no question"


def test_better_worse_counts_questions_by_recall_at_5_against_the_reference() -> None:
    gold = [{1, 2}, {3}, {4}, {5, 6}]
    arm = [[1, 2], [9, 9, 9, 9, 9, 3], [4], [5]]  # q0 2/2, q1 0 (3 is 6th), q2 1, q3 1/2
    exact = [[1, 0], [3], [4], [0, 0, 0, 0, 0, 5]]  # q0 1/2, q1 1, q2 1, q3 0 (5 is 6th)
    assert better_worse(arm, exact, gold, range(4)) == {"better": 2, "worse": 1, "same": 1}
    assert better_worse(arm, exact, gold, [1, 2]) == {"better": 0, "worse": 1, "same": 1}
    assert better_worse(arm, exact, gold, [0], k=1) == {"better": 0, "worse": 0, "same": 1}


def test_split_scores_report_tune_held_out_and_all_side_by_side() -> None:
    # 100 questions, gold {i}: the arm finds questions 1–50 at rank 1 and 51–100 at rank 3; exact dense finds
    # every question at rank 2
    gold = [{i} for i in range(100)]
    arm = [[i] if i < 50 else [-1, -2, i] for i in range(100)]
    exact = [[-1, i] for i in range(100)]
    s = split_scores(arm, gold, exact)
    assert s["tune"] == {
        "questions": 50,
        "first": 1,
        "last": 50,
        "r@2": 1.0,
        "all@2": 1.0,
        "r@5": 1.0,
        "all@5": 1.0,
        "vs_exact_r@5": {"better": 0, "worse": 0, "same": 50},
    }
    assert s["held out"]["r@2"] == 0.0 and s["held out"]["r@5"] == 1.0 and s["held out"]["first"] == 51
    assert s["all"]["r@2"] == 0.5 and s["all"]["questions"] == 100
    # a smaller tune split; no reference: no counts; an empty split: None scores
    small = split_scores([[0], [9], [2]], [{0}, {1}, {2}], tune=2)
    assert (
        small["tune"]["r@2"] == 0.5 and small["held out"]["r@2"] == 1.0 and "vs_exact_r@5" not in small["all"]
    )
    empty = split_scores([[0]], [{0}], [[0]])["held out"]
    assert empty["questions"] == 0 and empty["r@5"] is None and empty["first"] is None


def test_rank_and_hop_buckets() -> None:
    assert [rank_bucket(r) for r in (1, 5, 6, 10, 11, 20, 21, 400)] == [
        "1–5",
        "1–5",
        "6–10",
        "6–10",
        "11–20",
        "11–20",
        "21+",
        "21+",
    ]
    assert rank_bucket(None) == NO_RANK and hop_bucket(None) == UNREACHED and hop_bucket(2) == "2"


def test_on_topic_shares_by_hop_and_walk_rank() -> None:
    # relation -> supporting passages; question 0's gold {10}, question 1's gold {20, 21}
    sources = {1: {10}, 2: {11}, 3: {10, 12}, 4: {21}, 5: {30}}
    returned: list[list[tuple[int, int | None, int | None]]] = [
        [(1, 1, 1), (2, 1, 2), (3, 2, 7), (5, 2, 25)],  # on-topic: 1, 3
        [(4, 1, 1), (1, 2, None), (6, None, 12)],  # on-topic: 4; relation 6 has no source row
    ]
    s = on_topic_shares(returned, sources, [{10}, {20, 21}])
    assert s["questions"] == 2
    assert list(s["hop"]) == ["1", "2", UNREACHED]
    assert s["hop"]["1"] == {"relations": 3, "on_topic": 2, "share": 2 / 3, "per_question": 1.5}
    assert s["hop"]["2"] == {"relations": 3, "on_topic": 1, "share": 1 / 3, "per_question": 1.5}
    assert s["hop"][UNREACHED] == {"relations": 1, "on_topic": 0, "share": 0.0, "per_question": 0.5}
    assert list(s["rank"]) == ["1–5", "6–10", "11–20", "21+", NO_RANK]
    assert (s["rank"]["1–5"]["relations"], s["rank"]["1–5"]["on_topic"]) == (3, 2)
    assert (s["rank"]["6–10"]["on_topic"], s["rank"]["21+"]["on_topic"], s["rank"][NO_RANK]["on_topic"]) == (
        1,
        0,
        0,
    )
    assert s["all"]["all"] == {"relations": 7, "on_topic": 3, "share": 3 / 7, "per_question": 3.5}
    # no relation at all: an "all" row with no share
    assert on_topic_shares([[]], sources, [{10}])["all"]["all"]["share"] is None
    # by split: 2 questions are all tune, none held out
    by = on_topic_by_split(returned, sources, [{10}, {20, 21}])
    assert by["tune"] == by["all"] == s and by["held out"]["questions"] == 0


def test_the_tuning_grid_has_81_variants_and_a_pool_prior() -> None:
    variants = tuning_variants()
    assert len(variants) == 81
    first = variants["d 0.3, w 0.02, k 50, edges mentions"]
    assert first == {
        "ppr_damping": 0.3,
        "ppr_prior_weight": 0.02,
        "ppr_prior_k": 50,
        "ppr_edges": ("mentions",),
    }
    pool = variants["d 0.5, w 0.05, k pool, edges mentions+relations+titles"]
    assert resolve_variant(pool, 1890)["ppr_prior_k"] == 1890 and resolve_variant(first, 1890) == first


def test_best_variant_by_mean_r5_then_r2_then_order() -> None:
    results = {
        "a": {"m": {"r@5": 0.70, "r@2": 0.5}, "h": {"r@5": 0.80, "r@2": 0.6}},  # mean r@5 0.75
        "b": {"m": {"r@5": 0.74, "r@2": 0.5}, "h": {"r@5": 0.78, "r@2": 0.7}},  # 0.76
        "c": {"m": {"r@5": 0.76, "r@2": 0.5}, "h": {"r@5": 0.76, "r@2": 0.7}},  # 0.76, same r@2 as b
    }
    assert best_variant(results, ["m", "h"]) == "b"
    assert best_variant(results, ["m"]) == "c"
    assert best_variant({k: results[k] for k in ("a", "b")}, ["h"]) == "a"


def _scored(r5: float, r2: float = 0.5, p50: float | None = 10.0) -> dict[str, Any]:
    tune: dict[str, Any] = {
        "questions": 50,
        "first": 1,
        "last": 50,
        "r@2": r2,
        "r@5": r5,
        "all@2": 0.1,
        "all@5": 0.2,
    }
    tune["vs_exact_r@5"] = {"better": 3, "worse": 1, "same": 46}
    out = {"r@2": r2, "r@5": r5, "all@2": 0.1, "all@5": 0.2, "splits": {"tune": tune}}
    return {**out, "p50_ms": p50} if p50 is not None else out


def test_tuning_summary_and_table_name_the_best_variant() -> None:
    variants = {
        "v1": {
            "ppr_damping": 0.5,
            "ppr_prior_weight": 0.05,
            "ppr_prior_k": "pool",
            "ppr_edges": ("mentions",),
        },
        "v2": {"ppr_damping": 0.3, "ppr_prior_weight": 0.05, "ppr_prior_k": 50, "ppr_edges": ("mentions",)},
    }
    scores = {
        ds: {
            "questions": 50,
            "arms": {"local": _scored(0.6), "v1": _scored(0.7 + d), "v2": _scored(0.8 - d)},
            "baselines": {BM25: _scored(0.5, p50=None), EXACT: _scored(0.65, p50=None)},
        }
        for ds, d in (("musique", 0.0), ("hotpotqa", 0.2))
    }
    t = tuning_summary(scores, variants, {"musique": 1890, "hotpotqa": 994})
    assert t["best"] == "v1"  # mean r@5 0.8 against 0.7
    assert t["variants"]["v1"]["mean_r@5"] == pytest.approx(0.8)
    assert t["variants"]["v1"]["musique"]["ppr_prior_k"] == 1890
    assert t["variants"]["v1"]["hotpotqa"]["ppr_prior_k"] == 994
    assert t["variants"]["v1"]["grid"]["ppr_edges"] == ["mentions"]
    assert t["reference"][EXACT]["mean_r@5"] == pytest.approx(0.65)
    table = tuning_table(t)
    assert [r[:2] for r in table.rows] == [
        ["ref", "local"],
        ["ref", BM25],
        ["ref", EXACT],
        ["1 (best)", "v1"],
        ["2", "v2"],
    ]
    assert table.rows[3][6] == "0.500 / 0.700 / 0.20 (3 / 1)" and "q 1–50" in table.title


def test_split_table_labels_every_split() -> None:
    row = _scored(0.7)
    full = {
        name: {
            **row["splits"]["tune"],
            "first": first,
            "last": last,
            "questions": 50 if name != "all" else 100,
        }
        for name, first, last in (("tune", 1, 50), ("held out", 51, 100), ("all", 1, 100))
    }
    arm = {**row, "splits": full}
    scores = {
        "musique": {"scored": True, "questions": 100, "arms": {"local, ppr": arm}, "baselines": {EXACT: arm}}
    }
    table = split_table(scores)
    assert table.headers[2:] == [
        "tune, q 1–50: r@2 / r@5 / all@5",
        "tune: vs exact dense r@5, better / worse",
        "held out, q 51–100: r@2 / r@5 / all@5",
        "held out: vs exact dense r@5, better / worse",
        "all, q 1–100: r@2 / r@5 / all@5",
        "all: vs exact dense r@5, better / worse",
    ]
    assert table.rows[0] == ["musique", "local, ppr", *["0.500 / 0.700 / 0.20", "3 / 1"] * 3]
    assert table.rows[1][3] == "—"  # exact dense is not compared with itself


@dataclass(frozen=True, kw_only=True)
class _OldParam:
    """A QueryParam from before issue 26: no graph_ranking, no ppr_* fields."""

    space: str
    mode: str = "mix"
    chunk_channels: tuple[str, ...] = ("vector",)


def test_arms_run_without_the_new_fields_when_mentions_is_todays_behaviour() -> None:
    param, applied, note = make_param("musique", "local", {"graph_ranking": "mentions"}, _OldParam)
    assert param == _OldParam(space="musique", mode="local") and applied == {}
    assert "implicit" in note
    param, applied, note = make_param(
        "musique", "local", {"graph_ranking": "mentions", "chunk_channels": ()}, _OldParam
    )
    assert param.chunk_channels == () and applied == {"chunk_channels": ()}
    param, applied, note = make_param("musique", "local", {"graph_ranking": "ppr"}, _OldParam)
    assert param is None and note.startswith("skipped") and "graph_ranking" in note
    with pytest.raises(TypeError):  # a wrong value type is the dataclass's own error, not a missing field
        make_param("musique", "local", {"space": "x"}, _OldParam)


def test_every_arm_names_its_graph_ranking_explicitly() -> None:
    for arm, (mode, overrides) in ARMS.items():
        if mode in ("local", "mix", "hybrid"):
            assert overrides["graph_ranking"] == ("ppr" if "ppr" in arm else "mentions"), arm
    runnable, config, skipped = resolve_arms({"local": ARMS["local"], "naive": ARMS["naive"]}, "musique")
    assert not skipped and runnable["local"][0] == "local"
    assert (
        config["local"]["overrides"] == {"graph_ranking": "mentions", "collapse_duplicates": False}
        and config["naive"]["overrides"] == {}
    )
    assert config["local"]["chunk_channels"] == ["vector"]
    assert rr.jsonable({"a": (1, (2,)), "b": [("x",)]}) == {"a": [1, [2]], "b": [["x"]]}
