"""Global mode without community reports or relation embeddings (paper §7.2): relations ranked by keyword
overlap then corroboration — and, when no keyword matches, by corroboration alone, under the same scope,
temporal and relation-type predicates, never an empty list (issue 26 item 4)."""

from __future__ import annotations

import psycopg

from pgrag_dag.query import QueryParam
from pgrag_dag.store import retrieval_channels as channels
from tests.query.test_query_modes import GraphBuilder, ask, triples


def _graph(conn: psycopg.Connection, realm: str) -> GraphBuilder:
    """``alpha``: five live relations of weights 9, 5, 3, 1, 1 and three heavier ones no read may return — in
    ``beta``, superseded, dormant, and one valid only from 1950 (read as of 1900 below); none embedded."""
    b = GraphBuilder(conn, realm)
    b.rel("Boat", "carries", "Sand", weight=9, embed=False)
    b.rel("Cart", "hauls", "Hay", weight=5, embed=False, valid_from="1800")
    b.rel("Barge", "hauls", "Coal", weight=3, embed=False, valid_from="1950")
    b.rel("Mill", "grinds", "Corn", weight=1, embed=False)
    b.rel("Ship", "carries", "Gold", weight=50, embed=False, space="beta")
    newer = b.rel("Truck", "carries", "Steel", weight=1, embed=False)
    b.rel("Truck", "carries", "Iron", weight=40, embed=False, superseded_by=newer)
    b.rel("Ghost", "carries", "Mist", weight=30, embed=False, dormant=True)
    return b


def _triples(rows: list[dict]) -> list[tuple[str, str, str]]:
    return [(r["subject"], r["predicate"], r["object"]) for r in rows]


def test_no_keyword_matching_falls_back_to_the_best_corroborated(
    realm: str, conn: psycopg.Connection
) -> None:
    _graph(conn, realm)
    by_weight = [
        ("Boat", "carries", "Sand"),
        ("Cart", "hauls", "Hay"),
        ("Barge", "hauls", "Coal"),
        ("Mill", "grinds", "Corn"),
        ("Truck", "carries", "Steel"),
    ]
    rows = channels.relation_keyword_overlap(conn, realm, "alpha", ["zeppelin", "airship"], 10)
    assert _triples(rows) == by_weight and {r["score"] for r in rows} == {0}
    assert (
        _triples(channels.relation_keyword_overlap(conn, realm, "alpha", [], 2)) == by_weight[:2]
    )  # no word
    typed = channels.relation_keyword_overlap(
        conn, realm, "alpha", ["zeppelin"], 10, relation_types=["hauls"]
    )
    assert _triples(typed) == [("Cart", "hauls", "Hay"), ("Barge", "hauls", "Coal")]
    then = QueryParam(space="alpha", as_of="1900").temporal
    assert _triples(
        channels.relation_keyword_overlap(conn, realm, "alpha", ["zeppelin"], 10, temporal=then)
    ) == [
        ("Boat", "carries", "Sand"),
        ("Cart", "hauls", "Hay"),
        ("Mill", "grinds", "Corn"),
        ("Truck", "carries", "Steel"),
    ]  # the barge's relation holds only from 1950
    assert channels.relation_keyword_overlap(conn, realm, "alpha", ["zeppelin"], 0) == []
    # nothing passes the predicates: the fallback is empty too, not padded from outside them
    assert channels.relation_keyword_overlap(conn, realm, "alpha", ["x"], 5, relation_types=["flies"]) == []


def test_a_keyword_that_matches_still_ranks_by_overlap_alone(realm: str, conn: psycopg.Connection) -> None:
    _graph(conn, realm)
    rows = channels.relation_keyword_overlap(conn, realm, "alpha", ["hay", "zeppelin"], 10)
    assert _triples(rows) == [("Cart", "hauls", "Hay")] and rows[0]["score"] == 1  # never padded by weight


def test_global_mode_answers_a_question_sharing_no_word_with_the_graph(
    pg_dsn: str, realm: str, conn: psycopg.Connection
) -> None:
    _graph(conn, realm).chunk("yard", "The yard stores goods.")  # a space exists once a document is in it
    res = ask(pg_dsn, realm, "What do zeppelins transport?", mode="global")
    assert res.communities == [] and any("no community report" in w for w in res.warnings)
    assert triples(res) == [
        ("Boat", "carries", "Sand"),
        ("Cart", "hauls", "Hay"),
        ("Barge", "hauls", "Coal"),
        ("Mill", "grinds", "Corn"),
        ("Truck", "carries", "Steel"),
    ]
    assert res.channels["ranked"] == 5
    typed = ask(pg_dsn, realm, "What do zeppelins transport?", mode="global", relation_types=["grinds"])
    assert triples(typed) == [("Mill", "grinds", "Corn")]
