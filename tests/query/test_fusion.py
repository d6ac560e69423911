"""Fusion, de-duplication and re-ranking as pure functions (paper §7.2–7.4; :mod:`pgrag_dag.query.fusion`)."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np
import pytest

from pgrag_dag.query import fusion


def _r(s: str, p: str, o: str, *, id: int = 0, negated: bool = False, **kw: Any) -> dict[str, Any]:
    return {"id": id, "subject": s, "predicate": p, "object": o, "negated": negated, "hop": 1, **kw}


A, B, C, D = (
    _r("A", "p", "x", id=1),
    _r("B", "p", "x", id=2),
    _r("C", "p", "x", id=3),
    _r("D", "p", "x", id=4),
)


def _names(rows: list[dict[str, Any]]) -> list[str]:
    return [r["subject"] for r in rows]


def test_rrf_scores_are_the_sum_of_reciprocal_ranks_checked_by_hand() -> None:
    fused = fusion.rrf({"traversal": [A, B, C], "similarity": [C, D], "lexical": [D, A]})
    expected = {  # Σ 1/(60 + r) over the channels that returned it
        "A": Fraction(1, 61) + Fraction(1, 62),
        "B": Fraction(1, 62),
        "C": Fraction(1, 63) + Fraction(1, 61),
        "D": Fraction(1, 62) + Fraction(1, 61),
    }
    for row in fused:
        assert row["score"] == pytest.approx(float(expected[row["subject"]]), abs=1e-15)
    # A and D tie exactly; A's best rank (1, traversal) precedes D's (1, lexical) by channel order
    assert _names(fused) == ["A", "D", "C", "B"]
    assert {r["subject"]: r["ranks"] for r in fused} == {
        "A": {"traversal": 1, "lexical": 2},
        "B": {"traversal": 2},
        "C": {"traversal": 3, "similarity": 1},
        "D": {"similarity": 2, "lexical": 1},
    }
    assert {r["subject"]: r["channel"] for r in fused} == {
        "A": "traversal",
        "B": "traversal",
        "C": "similarity",
        "D": "lexical",
    }


def test_rrf_constant_k_changes_the_scores() -> None:
    fused = fusion.rrf({"traversal": [A, B], "similarity": [B]}, k=0)
    assert [(r["subject"], r["score"]) for r in fused] == [("B", 0.5 + 1.0), ("A", 1.0)]
    with pytest.raises(ValueError):
        fusion.rrf({"traversal": [A]}, k=-1)


def test_rrf_of_one_channel_keeps_its_order() -> None:
    rows = [_r(n, "p", "x", id=i) for i, n in enumerate("EFGH")]
    assert _names(fusion.rrf({"traversal": rows})) == list("EFGH")


def test_duplicates_are_merged_case_insensitively_keeping_the_walked_row() -> None:
    walked = _r("Ada Lovelace", "worked_with", "Charles Babbage", id=7, hop=2)
    found = _r("ada lovelace", "WORKED_WITH", "charles babbage", id=7, hop=1)
    fused = fusion.rrf({"similarity": [found], "traversal": [walked]})
    assert len(fused) == 1
    assert fused[0]["hop"] == 2 and fused[0]["subject"] == "Ada Lovelace"  # traversal's row: the true hop
    assert fused[0]["ranks"] == {"traversal": 1, "similarity": 1}


def test_a_denial_never_merges_with_the_assertion() -> None:
    yes, no = _r("A", "married_to", "B", id=1), _r("A", "married_to", "B", id=2, negated=True)
    assert fusion.triple_key(yes) != fusion.triple_key(no)
    assert len(fusion.rrf({"traversal": [yes], "similarity": [no]})) == 2
    assert fusion.dedupe([yes, _r("a", "MARRIED_TO", "b", id=3), no]) == [yes, no]


def test_quota_interleaves_to_the_similarity_share() -> None:
    t = [_r(f"t{i}", "p", "x", id=i) for i in range(1, 5)]
    s = [_r(f"s{i}", "p", "x", id=10 + i) for i in range(1, 5)]
    lex = [_r("l1", "p", "x", id=21), t[0]]
    assert _names(fusion.quota({"traversal": t, "similarity": s, "lexical": lex}, share=0.5)) == [
        "t1",
        "s1",
        "t2",
        "s2",
        "t3",
        "s3",
        "t4",
        "s4",
        "l1",
    ]
    # share 0.25: similarity takes slot n when it holds fewer than floor(n/4) of the first n
    assert _names(fusion.quota({"traversal": t, "similarity": s}, share=0.25)) == [
        "t1",
        "t2",
        "t3",
        "s1",
        "t4",
        "s2",
        "s3",
        "s4",
    ]
    assert _names(fusion.quota({"traversal": t[:2], "similarity": s[:2]}, share=1.0)) == [
        "s1",
        "s2",
        "t1",
        "t2",
    ]
    assert _names(fusion.quota({"traversal": t[:2], "similarity": s[:2]}, share=0.0)) == [
        "t1",
        "t2",
        "s1",
        "s2",
    ]
    merged = fusion.quota({"traversal": [A, B], "similarity": [B, C]}, share=0.5)
    assert _names(merged) == ["A", "B", "C"]  # B takes similarity's slot 2 (its rank 1 there)
    assert all(r["score"] is None for r in merged)
    assert next(r for r in merged if r["subject"] == "B")["ranks"] == {"traversal": 2, "similarity": 1}
    with pytest.raises(ValueError):
        fusion.quota({"traversal": t}, share=1.5)


def test_quota_skips_a_duplicate_without_spending_a_slot() -> None:
    merged = fusion.quota({"traversal": [A, B], "similarity": [A, C]}, share=0.5)
    assert _names(merged) == ["A", "C", "B"]


def test_mmr_demotes_a_restatement() -> None:
    items = [_r("A", "p", "x", id=1), _r("A2", "p", "x", id=2), _r("B", "q", "y", id=3)]
    v = np.array([1.0, 0.0, 0.0], dtype=np.float32)
    vectors = {1: v, 2: v * 2, 3: np.array([0.0, 1.0, 0.0], dtype=np.float32)}
    # rel = (3, 2, 1)/3; after A: A2 scores 0.7·2/3 − 0.3·1 ≈ 0.167 < B's 0.7·1/3 ≈ 0.233
    assert _names(fusion.mmr(items, vectors)) == ["A", "B", "A2"]
    assert _names(fusion.mmr(items, vectors, lam=1.0)) == ["A", "A2", "B"]  # λ = 1: relevance only
    assert _names(fusion.mmr(items, {})) == ["A", "A2", "B"]  # no embeddings: never penalised
    with pytest.raises(ValueError):
        fusion.mmr(items, vectors, lam=2.0)


def test_node_distance_rerank_resolves_channel_results_and_keeps_walked_hops() -> None:
    walked = _r("W", "p", "x", id=1, hop=2, ranks={"traversal": 1}, subject_id=10, object_id=11)
    near = _r("N", "p", "x", id=2, ranks={"similarity": 1}, subject_id=20, object_id=21)
    far = _r("F", "p", "x", id=3, ranks={"lexical": 1}, subject_id=30, object_id=31)
    lost = _r("L", "p", "x", id=4, ranks={"similarity": 2}, subject_id=40, object_id=41)
    out = fusion.node_distance_rerank([far, lost, walked, near], {21: 0, 30: 2, 31: 3})
    assert [(r["subject"], r["hop"]) for r in out] == [("N", 1), ("W", 2), ("F", 3), ("L", None)]
    assert out[0]["hop_resolved"] is True and "hop_resolved" not in out[1]
    assert far["hop"] == 1  # inputs are not mutated


def test_community_blend_and_pure_similarity() -> None:
    rows = [
        {"id": 1, "score": 0.9, "rating": 1.0, "size": 3},
        {"id": 2, "score": 0.8, "rating": 9.0, "size": 30},
        {"id": 3, "score": 0.5, "rating": 10.0, "size": 3},
    ]
    pure = fusion.rank_communities(rows, k=3, w_rating=0.0, w_size=0.0)
    assert [r["id"] for r in pure] == [1, 2, 3]
    blended = fusion.rank_communities(rows, k=2)
    # 0.6·0.8 + 0.2·0.9 + 0.2·1 = 0.86 > 0.6·0.9 + 0.2·0.1 + 0.2·log4/log31 ≈ 0.64
    assert [r["id"] for r in blended] == [2, 1]
    assert blended[0]["rank_score"] == pytest.approx(0.86)
    assert fusion.rank_communities([], k=3) == []
    with pytest.raises(ValueError):
        fusion.rank_communities(rows, k=1, w_rating=-1)


def test_interleave_merges_sub_query_results_round_robin() -> None:
    merged = fusion.interleave([[A, B, C], [D, B]], fusion.triple_key)
    assert _names(merged) == ["A", "D", "B", "C"]
