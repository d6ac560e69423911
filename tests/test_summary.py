"""The human summary of an indexing run (issue 16 item 3): its vocabulary and supersession lines say what
holds plainly — a space without a vocabulary says so instead of printing ``None`` and an empty list."""

from __future__ import annotations

from typing import Any

from pgrag_dag.summary import summarise


def _metas(*, share: float | None, snapped: int, off: list[str], by_reason: dict[str, int]) -> dict[str, dict[str, Any]]:
    return {"gated_triples": {"distinct_predicates": 7, "predicates_snapped": snapped, "off_vocabulary_top": off,
                              "entities_accepted": 10, "triples_accepted": 9, "rejected": 0},
            "relations": {"superseded": sum(by_reason.values()), "newly_superseded": 1, "supersessions_by_reason": by_reason},
            "_quality": {"vocabulary_predicate_share": share, "orphan_entities": 2, "duplicate_edge_rows": 0,
                         "fragmented_short_form_vertices": 0, "pronoun_entities": 0},
            "_checks": {"relations:graph_quality": True}}


def _line(lines: list[str], head: str) -> str:
    return next(line for line in lines if line.startswith(f"  {head}"))


def test_a_space_without_a_vocabulary_says_so() -> None:
    lines = summarise("notes.main", _metas(share=None, snapped=0, off=[], by_reason={}))
    assert _line(lines, "predicates") == "  predicates       7 distinct, no vocabulary configured (the space's preset: or vocabulary:)"
    assert _line(lines, "graph quality") == ("  graph quality    2 orphan entities, 0 duplicate edges, 0 fragmented vertices, "
                                            "0 pronoun entities")
    assert _line(lines, "supersession") == "  supersession     0 superseded (1 this run)"


def test_a_space_with_a_vocabulary_lists_what_fell_off_it() -> None:
    lines = summarise("wiki.demo", _metas(share=0.44, snapped=3, off=["taught", "met", "visited", "a", "b", "c"],
                                          by_reason={"group": 2}))
    assert _line(lines, "predicates") == ("  predicates       7 distinct, 3 snapped onto the vocabulary; commonest off it: "
                                         "taught, met, visited, a, b")
    assert _line(lines, "graph quality").startswith("  graph quality    vocabulary share 0.44, 2 orphan entities")
    assert _line(lines, "supersession") == "  supersession     2 superseded (1 this run) {'group': 2}"
    everything_on_it = summarise("wiki.demo", _metas(share=1.0, snapped=0, off=[], by_reason={}))
    assert _line(everything_on_it, "predicates").endswith("0 snapped onto the vocabulary; commonest off it: none")
