"""Each clause of the Cypher subset against the hand-built graph of :mod:`tests.cypher.graph`, with answers
computed by hand from its docstring (issue 29; paper §2). Real PostgreSQL, no mocks."""

from __future__ import annotations

from typing import Any

import polars as pl
import pytest

from pgrag_dag.cypher import cypher
from pgrag_dag.errors import CypherError, QueryError
from tests.cypher.graph import Realms, realms  # noqa: F401  (the fixture)


def ask(r: Realms, text: str, params: dict[str, Any] | None = None, **kw: Any) -> pl.DataFrame:
    kw.setdefault("space", "work")
    return cypher(text, params, dsn=r.dsn, realm=r.realm, **kw)


def rows(frame: pl.DataFrame) -> list[tuple[Any, ...]]:
    return [tuple(row) for row in frame.iter_rows()]


def test_labels_are_entity_types_and_relationship_types_are_predicates(realms: Realms) -> None:
    # the dormant Ghost Worker's works_at edge and the other space's Ada are not read
    frame = ask(
        realms,
        "MATCH (p:Person)-[r:works_at|EMPLOYED_BY]->(o:Organization) RETURN p.name AS who, type(r) AS how "
        "ORDER BY who",
    )
    assert frame.columns == ["who", "how"]
    assert rows(frame) == [("Ada Lovelace", "works_at"), ("Charles Babbage", "employed_by")]


def test_a_node_property_map_matches_a_bound_parameter(realms: Realms) -> None:
    frame = ask(
        realms, "MATCH (a {name: $name})-[r]->(x) RETURN x.name ORDER BY x.name", {"name": "Ada Lovelace"}
    )
    # described (superseded) and funded_by Old Patron (superseded) are not current
    assert frame["x.name"].to_list() == [
        "Analytical Engine",
        "Charles Babbage",
        "London",
        "New Patron",
        "Quillon Labs",
    ]


def test_an_incoming_relationship_runs_from_target_to_source(realms: Realms) -> None:
    frame = ask(realms, "MATCH (o {name: 'Quillon Labs'})<-[r]-(p) RETURN p.name AS p ORDER BY p")
    assert frame["p"].to_list() == ["Ada Lovelace", "Charles Babbage"]


def test_an_undirected_relationship_matches_either_direction(realms: Realms) -> None:
    frame = ask(realms, "MATCH (a {name: 'Charles Babbage'})-[r]-(b) RETURN b.name AS b ORDER BY b")
    assert frame["b"].to_list() == ["Ada Lovelace", "Analytical Engine", "Difference Engine", "Quillon Labs"]
    both = ask(
        realms, "MATCH (a:Person)-[r:collaborated_with]-(b) RETURN a.name AS a, b.name AS b ORDER BY a"
    )
    assert rows(both) == [("Ada Lovelace", "Charles Babbage"), ("Charles Babbage", "Ada Lovelace")]


def test_comma_separated_patterns_join_on_their_shared_variable(realms: Realms) -> None:
    frame = ask(
        realms, "MATCH (a:Person)-[:works_at]->(o), (o)-[:located_in]->(c) RETURN a.name AS a, c.name AS c"
    )
    assert rows(frame) == [("Ada Lovelace", "London")]


def test_a_relationship_is_bound_once_per_match(realms: Realms) -> None:
    # without relationship uniqueness, c would be Quillon Labs again, over the edge that led to b
    frame = ask(
        realms, "MATCH (a {name: 'Quillon Labs'})-[r1]-(b)-[r2]-(c) RETURN DISTINCT c.name AS c ORDER BY c"
    )
    assert "Quillon Labs" not in frame["c"].to_list()
    # from Ada (not over works_at): Babbage, London, the Analytical Engine, New Patron; from Babbage (not over
    # employed_by): Ada, both engines; from London (not over located_in): Ada
    assert frame["c"].to_list() == [
        "Ada Lovelace",
        "Analytical Engine",
        "Charles Babbage",
        "Difference Engine",
        "London",
        "New Patron",
    ]


@pytest.mark.parametrize(
    ("where", "expected"),
    [
        ("r.weight >= 2", ["collaborated_with", "designed", "works_at"]),
        ("r.weight > 2 AND NOT r.predicate = 'works_at'", ["collaborated_with"]),
        ("r.weight = 3 OR r.confidence < 1", ["designed", "works_at"]),
        ("r.negated = true", ["lived_in"]),
        ("b.name IN ['London', 'Nowhere']", ["lived_in", "located_in"]),
        ("b.name IN $names", ["collaborated_with", "lives_in"]),
        ("b.name STARTS WITH 'Diff'", ["designed"]),
        ("b.name ENDS WITH 'Labs'", ["employed_by", "works_at"]),
        ("b.name CONTAINS 'Engine' AND a.name <> 'Charles Babbage'", ["wrote_notes_on"]),
        ("r.valid_from IS NOT NULL", ["employed_by", "works_at"]),
        ("r.valid_to IS NULL AND r.valid_from >= '2020'", ["employed_by"]),
        ("r.t_created >= $since", ["employed_by", "funded_by", "wrote_notes_on"]),
        ("r.t_expired IS NOT NULL", []),
        ("r.description = 'Old Patron lives_in Paris'", ["lives_in"]),
        ("b.type = 'Place' AND b.description CONTAINS 'place'", ["lived_in", "lives_in", "located_in"]),
        ("a.aliases = ['Countess of Lovelace'] AND b:Person", ["collaborated_with", "funded_by"]),
    ],
)
def test_where_filters_on_node_and_relationship_properties(
    realms: Realms, where: str, expected: list[str]
) -> None:
    params = {"names": ["Charles Babbage", "Paris"], "since": "2016-01-01T00:00:00+00:00"}
    text = f"MATCH (a)-[r]->(b) WHERE {where} RETURN type(r) AS t ORDER BY t"
    assert ask(realms, text, params)["t"].to_list() == expected


def test_a_label_test_in_where_is_the_entity_type_or_the_predicate(realms: Realms) -> None:
    def names(text: str) -> list[Any]:
        return ask(realms, text)["x"].to_list()

    assert names("MATCH (x) WHERE x:Place RETURN x.name AS x ORDER BY x") == ["London", "Paris"]
    # Ada's current edges lead to Quillon Labs, Charles Babbage, London, Analytical Engine, New Patron
    ada = "MATCH (a {name: 'Ada Lovelace'})-[r]->(x) WHERE "
    assert names(ada + "x:Person OR x:Artifact RETURN x.name AS x ORDER BY x") == [
        "Analytical Engine",
        "Charles Babbage",
        "New Patron",
    ]
    # the live vertices of work that are not people: an organisation, two places, two artifacts
    assert names("MATCH (n) WHERE NOT n:Person RETURN count(*) AS x") == [5]
    assert names("MATCH (x) WHERE x:Person:Place RETURN x.name AS x") == []  # an entity has one type
    # a relationship's label is its predicate, case-insensitive as in a pattern
    babbage = "MATCH (b {name: 'Charles Babbage'})-[r]->(x) WHERE r:DESIGNED RETURN x.name AS x ORDER BY x"
    assert names(babbage) == ["Analytical Engine", "Difference Engine"]
    # a label test is a value too: NULL for a vertex an OPTIONAL MATCH did not bind
    frame = ask(
        realms,
        "MATCH (p:Place) OPTIONAL MATCH (p)<-[:located_in]-(o) RETURN p.name AS p, o:Organization AS org "
        "ORDER BY p",
    )
    assert rows(frame) == [("London", True), ("Paris", None)]
    with pytest.raises(CypherError, match="variable-length relationship: it has no type to test at 1:31"):
        ask(realms, "MATCH (a)-[p*1..2]->(b) WHERE p:works_at RETURN b.name")
    with pytest.raises(CypherError, match="variable 'm' is not bound by a MATCH at 1:17"):
        ask(realms, "MATCH (n) WHERE m:Person RETURN n.name")


def test_a_query_may_open_with_optional_match(realms: Realms) -> None:
    # one row of NULLs when nothing matches (found by the TCK's Match7 [1])
    assert rows(ask(realms, "OPTIONAL MATCH (n {name: 'Nobody'}) RETURN n.name AS n")) == [(None,)]
    frame = ask(realms, "OPTIONAL MATCH (n:Place) RETURN n.name AS n, (n:Place) ORDER BY n")
    assert frame.columns == ["n", "(n:Place)"]  # an unaliased item is named as written
    assert rows(frame) == [("London", True), ("Paris", True)]


def test_return_a_node_and_a_relationship_as_structs(realms: Realms) -> None:
    frame = ask(
        realms,
        "MATCH (a {name: 'Charles Babbage'})-[r:designed]->(b {name: 'Difference Engine'}) RETURN a, r",
    )
    a, r = frame.row(0)
    assert (a["name"], a["type"], a["aliases"], a["space"]) == ("Charles Babbage", "Person", [], "work")
    assert (r["predicate"], r["weight"], r["confidence"], r["negated"]) == ("designed", 1, 0.5, False)
    assert (r["source_id"], r["target_id"]) == (a["id"], realms.graph.ids[("work", "Difference Engine")])


def test_distinct_and_aliases(realms: Realms) -> None:
    frame = ask(realms, "MATCH (a:Person)-[r]->(b) RETURN DISTINCT a.type AS kind")
    assert rows(frame) == [("Person",)]
    assert ask(realms, "MATCH (a:Person)-[r]->(b) RETURN a.type AS kind").height == 9


def test_aggregates_group_by_the_other_items(realms: Realms) -> None:
    frame = ask(
        realms,
        "MATCH (a:Person)-[r]->(b) RETURN a.name AS who, count(r) AS n, count(DISTINCT b.type) AS kinds, "
        "min(r.weight) AS low, max(r.weight) AS top, collect(b.name) AS to ORDER BY who",
    )
    assert [row[:5] for row in rows(frame)] == [
        ("Ada Lovelace", 5, 4, 1, 5),
        ("Charles Babbage", 3, 2, 1, 2),
        ("Old Patron", 1, 1, 1, 1),
    ]
    assert sorted(frame["to"][1]) == ["Analytical Engine", "Difference Engine", "Quillon Labs"]
    assert rows(ask(realms, "MATCH (a)-[r]->(b) RETURN count(*) AS n")) == [(10,)]


def test_order_by_skip_and_limit(realms: Realms) -> None:
    text = "MATCH (a)-[r]->(b) RETURN b.name AS b, r.weight AS w ORDER BY w DESC, b SKIP $skip LIMIT 3"
    assert rows(ask(realms, text, {"skip": 1})) == [
        ("Quillon Labs", 3),
        ("Analytical Engine", 2),
        ("Analytical Engine", 1),
    ]
    assert ask(realms, "MATCH (n) RETURN n.name ORDER BY n.name LIMIT 2")["n.name"].to_list() == [
        "Ada Lovelace",
        "Analytical Engine",
    ]
    with pytest.raises(CypherError, match="LIMIT must be a non-negative integer"):
        ask(realms, "MATCH (n) RETURN n.name LIMIT $k", {"k": -1})


def test_optional_match_keeps_the_rows_it_cannot_extend(realms: Realms) -> None:
    frame = ask(
        realms,
        "MATCH (x:Artifact) OPTIONAL MATCH (x)<-[r:wrote_notes_on]-(p) RETURN x.name AS thing, p.name AS by, "
        "r IS NULL AS none ORDER BY thing",
    )
    assert rows(frame) == [("Analytical Engine", "Ada Lovelace", False), ("Difference Engine", None, True)]
    # the WHERE of an OPTIONAL MATCH filters its own part, not the rows
    filtered = ask(
        realms,
        "MATCH (x:Artifact) OPTIONAL MATCH (x)<-[r]-(p) WHERE p.name = 'Nobody' "
        "RETURN x.name AS x, p.name AS p ORDER BY x",
    )
    assert rows(filtered) == [("Analytical Engine", None), ("Difference Engine", None)]


@pytest.mark.parametrize(
    ("pattern", "hops"),
    [
        # lived_in; works_at → located_in; collaborated_with → employed_by → located_in
        ("(a {name: 'Ada Lovelace'})-[p*1..3]->(b {name: 'London'})", [1, 2, 3]),
        ("(a {name: 'Ada Lovelace'})-[p*..2]->(b {name: 'London'})", [1, 2]),
        ("(a {name: 'Ada Lovelace'})-[p*2]->(b {name: 'London'})", [2]),
        ("(b {name: 'London'})<-[p*1..3]-(a {name: 'Ada Lovelace'})", [1, 2, 3]),
        # undirected: via Babbage (2); via Quillon Labs and Babbage (3); via the Analytical Engine and
        # Babbage (3)
        ("(a {name: 'Ada Lovelace'})-[p*1..3]-(b {name: 'Difference Engine'})", [2, 3, 3]),
        ("(a {name: 'Ada Lovelace'})-[p:works_at|located_in*1..3]->(b {name: 'London'})", [2]),
        # zero hops: Ada herself; one: Babbage and New Patron (Old Patron only over a superseded edge)
        ("(a {name: 'Ada Lovelace'})-[p*0..1]->(b:Person)", [0, 1, 1]),
    ],
)
def test_variable_length_relationships(realms: Realms, pattern: str, hops: list[int]) -> None:
    frame = ask(realms, f"MATCH {pattern} RETURN size(p) AS hops ORDER BY hops")
    assert frame["hops"].to_list() == hops


def test_a_variable_length_relationship_binds_its_relation_ids_in_path_order(realms: Realms) -> None:
    frame = ask(realms, "MATCH (a {name: 'Ada Lovelace'})-[p*2]->(b {name: 'London'}) RETURN p")
    (path,) = frame["p"].to_list()
    ids = ask(
        realms,
        "MATCH (a {name: 'Ada Lovelace'})-[r1:works_at]->(o)-[r2:located_in]->(b) "
        "RETURN id(r1) AS r1, id(r2) AS r2",
    ).row(0)
    assert path == list(ids)


def test_a_longer_path_than_max_hops_is_refused_before_sql(realms: Realms) -> None:
    with pytest.raises(CypherError, match=r"\*1\.\.6 is outside 0\.\.5 \(max_hops\) at 1:10"):
        ask(realms, "MATCH (a)-[*1..6]->(b) RETURN b")
    # every directed trail of the 10 current edges: from Ada 5 + 4 + 1, from Babbage 3 + 1, Quillon Labs 1,
    # Old Patron 1
    assert ask(realms, "MATCH (a)-[p*1..6]->(b) RETURN count(*) AS n", max_hops=6)["n"].to_list() == [16]


def test_an_empty_range_matches_nothing(realms: Realms) -> None:
    # openCypher's *1..0 and *2..1 (TCK Match4, Match5): no path, not an error
    for hops in ("1..0", "2..1"):
        assert ask(realms, f"MATCH (a)-[p*{hops}]->(b) RETURN count(*) AS n")["n"].to_list() == [0]
    assert ask(realms, "MATCH (a)-[p*1..1]->(b) RETURN count(*) AS n")["n"].to_list() == [10]


def test_the_row_cap_refuses_a_longer_result(realms: Realms) -> None:
    with pytest.raises(QueryError, match="more than 3 rows"):
        ask(realms, "MATCH (n) RETURN n.name", max_rows=3)
    assert ask(realms, "MATCH (n) RETURN n.name LIMIT 3", max_rows=3).height == 3


def test_the_statement_timeout_cancels_a_long_read(realms: Realms) -> None:
    # 10^6 combinations, each vertex checked against the belief history: far beyond one millisecond
    text = "MATCH (a), (b), (c), (d), (e), (f) RETURN count(*) AS n"
    with pytest.raises(QueryError, match="ran past its timeout"):
        ask(realms, text, as_believed_at="2030-01-01", timeout_s=0.001)


def test_an_empty_result_keeps_its_columns(realms: Realms) -> None:
    frame = ask(realms, "MATCH (n {name: 'Nobody'}) RETURN n.name AS name, count(*) AS n")
    assert frame.columns == ["name", "n"] and frame.height == 0


def test_an_optional_variable_length_relationship(realms: Realms) -> None:
    # into the Analytical Engine: Ada and Babbage in one hop, Ada through Babbage in two; into the
    # Difference Engine: Babbage, then Ada through him
    frame = ask(
        realms,
        "MATCH (x:Artifact) OPTIONAL MATCH (x)<-[p*1..2]-(s:Person) "
        "RETURN x.name AS x, count(p) AS n ORDER BY x",
    )
    assert rows(frame) == [("Analytical Engine", 3), ("Difference Engine", 2)]
    none = ask(realms, "MATCH (c {name: 'Paris'}) OPTIONAL MATCH (c)-[p*1..2]->(x) RETURN c.name AS c, p")
    assert rows(none) == [("Paris", None)]
