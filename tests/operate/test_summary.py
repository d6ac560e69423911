"""The human summary of an indexing run (issue 16 item 3) says what holds plainly: the space's totals apart
from this run's decisions, removed documents, and a space without a vocabulary says so instead of printing
``None``."""

from __future__ import annotations

from typing import Any

from pgrag_dag.operate.summary import summarise


def _metas(
    *, share: float | None, snapped: int, off: list[str], by_reason: dict[str, int]
) -> dict[str, dict[str, Any]]:
    return {
        "gated_triples": {
            "distinct_predicates": 7,
            "predicates_snapped": snapped,
            "off_vocabulary_top": off,
            "entities_accepted": 10,
            "triples_accepted": 9,
            "rejected": 0,
        },
        "relations": {
            "superseded": sum(by_reason.values()),
            "newly_superseded": 1,
            "supersessions_by_reason": by_reason,
        },
        "chunks": {
            "documents": 3,
            "documents_added": 1,
            "documents_replaced": 0,
            "documents_removed": 2,
            "documents_unchanged": 2,
        },
        "_quality": {
            "distinct_predicates": 181,
            "vocabulary_predicate_share": share,
            "orphan_entities": 2,
            "duplicate_edge_rows": 0,
            "fragmented_short_form_vertices": 0,
            "pronoun_entities": 0,
        },
        "_checks": {"relations:graph_quality": True},
    }


def _line(lines: list[str], head: str) -> str:
    return next(line for line in lines if line.startswith(f"  {head}"))


def test_a_space_without_a_vocabulary_says_so() -> None:
    lines = summarise("notes.main", _metas(share=None, snapped=0, off=[], by_reason={}))
    # the space's predicates (the graph's), not the run's decisions': an unchanged run decides nothing
    assert _line(lines, "predicates") == (
        "  predicates       181 distinct in the space; no vocabulary configured "
        "(the space's preset: or vocabulary:)"
    )
    assert (
        _line(lines, "gate decisions")
        == "  gate decisions   this run: 10 entities and 9 triples accepted, 0 rejected"
    )
    assert _line(lines, "documents") == "  documents        3  (1 added, 0 replaced, 2 removed, 2 unchanged)"
    kept = _metas(share=None, snapped=0, off=[], by_reason={})
    kept["chunks"].update(documents=4, skipped_documents_kept=1)  # a file emptied since: its chunks kept
    assert _line(summarise("notes.main", kept), "documents") == (
        "  documents        4  (1 added, 0 replaced, 2 removed, 2 unchanged, "
        "1 unreadable now and kept as indexed)"
    )
    assert _line(lines, "graph quality") == (
        "  graph quality    2 orphan entities, 0 duplicate edges, 0 fragmented vertices, 0 pronoun entities"
    )
    assert _line(lines, "supersession") == "  supersession     0 superseded (1 this run)"
    one = _metas(share=None, snapped=0, off=[], by_reason={})
    one["_quality"].update(orphan_entities=1, fragmented_short_form_vertices=1)
    assert _line(summarise("notes.main", one), "graph quality") == (
        "  graph quality    1 orphan entity, 0 duplicate edges, 1 fragmented vertex, 0 pronoun entities"
    )


def test_a_space_with_a_vocabulary_lists_what_fell_off_it() -> None:
    lines = summarise(
        "wiki.demo",
        _metas(
            share=0.44, snapped=3, off=["taught", "met", "visited", "a", "b", "c"], by_reason={"group": 2}
        ),
    )
    assert _line(lines, "predicates") == (
        "  predicates       181 distinct in the space; this run: 3 snapped onto the "
        "vocabulary, commonest off it: taught, met, visited, a, b"
    )
    assert _line(lines, "graph quality").startswith(
        "  graph quality    vocabulary share 0.44, 2 orphan entities"
    )
    assert _line(lines, "supersession") == "  supersession     2 superseded (1 this run)"
    everything_on_it = summarise("wiki.demo", _metas(share=1.0, snapped=0, off=[], by_reason={}))
    assert _line(everything_on_it, "predicates").endswith(
        "this run: 0 snapped onto the vocabulary, commonest off it: none"
    )


def test_every_count_of_the_summary_has_thousands_separators() -> None:
    """A trial read ``entities 2575`` beside ``1,979 orphan`` entities: every count is written one way."""
    metas = _metas(share=None, snapped=0, off=[], by_reason={"negation": 6123})
    metas["relations"].update(newly_superseded=6123, newly_superseded_by_reason={"negation": 6123})
    metas["relations"].update(entities=14937, relations=21034, superseded=1204)
    metas["chunks"].update(chunks=5120, documents=1001)
    metas["gated_triples"].update(entities_accepted=14937)
    text = "\n".join(summarise("notes.main", metas))
    for shown in ("14,937 live", "21,034  (", "1,204 superseded", "negation 6,123", "5,120  (", "1,001  ("):
        assert shown in text, text
    assert "{" not in text


def test_the_entities_line_counts_dormant_entities_apart_from_the_live_ones() -> None:
    """A trial read ``entities 3,822 (30 dormant)`` as 30 of the 3,822, where ``pgrag status`` said 3,822 live
    and 30 dormant besides: the summary says it as status does."""
    metas = _metas(share=None, snapped=0, off=[], by_reason={})
    metas["relations"].update(entities=3822, entities_dormant=30)
    assert _line(summarise("notes.main", metas), "entities") == "  entities         3,822 live, 30 dormant"


def test_the_supersession_reasons_are_those_of_the_edges_this_run_superseded() -> None:
    """A trial read ``6 superseded (4 this run; decided this run by reason: group 4, single_valued 2)``: the
    reasons added up to 6, not to the 4 they qualified. The line gives this run's reasons, which add up."""
    metas = _metas(share=None, snapped=0, off=[], by_reason={"group": 4, "single_valued": 2})
    metas["relations"].update(newly_superseded=4, newly_superseded_by_reason={"group": 3, "single_valued": 1})
    assert _line(summarise("tenk.disney", metas), "supersession") == (
        "  supersession     6 superseded (4 this run: group 3, single_valued 1)"
    )
