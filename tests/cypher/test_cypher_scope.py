"""Temporal and tenant scoping of the Cypher surface (issue 29 item 2; paper §5.4): ``as_of``,
``as_believed_at`` and ``include_superseded`` apply inside every hop, a pattern stays in its space (or the
realm's spaces under the wildcard) and never reads another realm. Graph: :mod:`tests.cypher.graph`."""

from __future__ import annotations

from typing import Any

import pytest

from pgrag_dag.cypher import cypher
from pgrag_dag.errors import InvalidNameError, QueryError, UnknownSpaceError
from tests.cypher.graph import Realms, realms, utc  # noqa: F401  (the fixture)

TWO_HOPS = (
    "MATCH (a {name: 'Ada Lovelace'})-[r1]->(m)-[r2]->(c) RETURN m.name AS m, c.name AS c ORDER BY m, c"
)
PATRON_PATH = "MATCH (a {name: 'Ada Lovelace'})-[p*2]->(c {name: 'Paris'}) RETURN size(p) AS hops"


def names(r: Realms, text: str, column: str, **kw: Any) -> list[Any]:
    kw.setdefault("space", "work")
    return cypher(text, dsn=r.dsn, realm=r.realm, **kw)[column].to_list()


def test_a_path_through_an_edge_not_valid_at_as_of_is_not_returned(realms: Realms) -> None:
    # works_at holds 2015..2019, so Quillon Labs → London is reached through it only then; employed_by
    # (from 2021) carries Babbage's path to Quillon Labs only after
    now = cypher(TWO_HOPS, dsn=realms.dsn, realm=realms.realm, space="work")
    assert ("Quillon Labs", "London") in now.rows()
    in_2016 = cypher(TWO_HOPS, dsn=realms.dsn, realm=realms.realm, space="work", as_of="2016")
    assert [tuple(r) for r in in_2016.rows()] == [
        ("Charles Babbage", "Analytical Engine"),
        ("Charles Babbage", "Difference Engine"),
        ("Quillon Labs", "London"),
    ]
    in_2022 = cypher(TWO_HOPS, dsn=realms.dsn, realm=realms.realm, space="work", as_of="2022")
    assert [tuple(r) for r in in_2022.rows()] == [
        ("Charles Babbage", "Analytical Engine"),
        ("Charles Babbage", "Difference Engine"),
        ("Charles Babbage", "Quillon Labs"),
    ]


def test_as_of_applies_inside_every_hop_of_a_variable_length_path(realms: Realms) -> None:
    text = (
        "MATCH (a {name: 'Ada Lovelace'})-[p*1..3]->(b {name: 'London'}) RETURN size(p) AS hops ORDER BY hops"
    )
    assert names(realms, text, "hops") == [1, 2, 3]
    assert names(realms, text, "hops", as_of="2016") == [1, 2]  # employed_by not yet valid
    assert names(realms, text, "hops", as_of="2022-06-01") == [1, 3]  # works_at no longer valid


def test_a_path_through_a_superseded_edge_is_not_returned_unless_asked(realms: Realms) -> None:
    # the only way to Paris is funded_by Old Patron, superseded on 2016-01-01
    assert names(realms, PATRON_PATH, "hops") == []
    assert names(realms, PATRON_PATH, "hops", include_superseded=True) == [2]
    fixed = "MATCH (a {name: 'Ada Lovelace'})-[:funded_by]->(p)-[:lives_in]->(c) RETURN p.name AS p"
    assert names(realms, fixed, "p") == []
    assert names(realms, fixed, "p", include_superseded=True) == ["Old Patron"]


def test_as_believed_at_reads_each_hop_as_the_system_believed_it_then(realms: Realms) -> None:
    assert names(realms, PATRON_PATH, "hops", as_believed_at="2012-01-01") == [2]  # not yet superseded
    assert names(realms, PATRON_PATH, "hops", as_believed_at="2017-01-01") == []
    engine = "MATCH (a {name: 'Ada Lovelace'})-[r]->(x:Artifact) RETURN type(r) AS t"
    assert names(realms, engine, "t", as_believed_at="2012-01-01T00:00:00Z") == ["described"]
    assert names(realms, engine, "t") == ["wrote_notes_on"]


def test_belief_columns_are_read_as_believed_at_the_instant_not_as_the_row_says_now(realms: Realms) -> None:
    # described and funded_by Old Patron were superseded on 2016-01-01 (by wrote_notes_on and funded_by New
    # Patron, both created then): believed at 2012 neither was retracted yet, though both rows say so now
    text = (
        "MATCH (a {name: 'Ada Lovelace'})-[r:described|funded_by]->(x) "
        "RETURN x.name AS x, r.t_expired AS expired, r.superseded AS sup, r.superseded_by AS by, r ORDER BY x"
    )
    by_name = {
        row[0]: row[1]
        for row in cypher(
            "MATCH ()-[r:wrote_notes_on|funded_by]->(x) RETURN x.name, id(r)",
            dsn=realms.dsn,
            realm=realms.realm,
            space="work",
        ).rows()
    }

    def read(**kw: Any) -> list[tuple[Any, ...]]:
        frame = cypher(text, dsn=realms.dsn, realm=realms.realm, space="work", include_superseded=True, **kw)
        for row in frame.iter_rows(
            named=True
        ):  # the relationship's value (JSON) says what its properties say
            expired = None if row["expired"] is None else row["expired"].isoformat()
            assert (row["r"]["t_expired"], row["r"]["superseded"]) == (expired, row["sup"])
        return [tuple(r) for r in frame.select("x", "expired", "sup", "by").rows()]

    retracted = utc("2016-01-01")
    after = [
        ("Analytical Engine", retracted, True, by_name["Analytical Engine"]),
        ("New Patron", None, False, None),
        ("Old Patron", retracted, True, by_name["New Patron"]),
    ]
    assert read() == after
    assert read(as_believed_at="2017-01-01") == after
    assert read(as_believed_at="2012-01-01") == [
        ("Analytical Engine", None, False, None),
        ("Old Patron", None, False, None),
    ]  # New Patron's edge was not believed yet
    # a filter on a belief column reads the same state
    current_then = "MATCH (a {name: 'Ada Lovelace'})-[r]->(x) WHERE r.t_expired IS NULL RETURN count(*) AS n"
    assert names(realms, current_then, "n", include_superseded=True) == [5]
    assert names(realms, current_then, "n", include_superseded=True, as_believed_at="2012-01-01") == [4]


def test_as_believed_at_before_an_edge_existed_does_not_return_it(realms: Realms) -> None:
    text = "MATCH (b {name: 'Charles Babbage'})-[r]->(x) RETURN type(r) AS t ORDER BY t"
    assert names(realms, text, "t") == ["designed", "designed", "employed_by"]
    assert names(realms, text, "t", as_believed_at="2015-01-01") == ["designed", "designed"]  # created 2020
    assert names(realms, "MATCH (n) RETURN n.name", "n.name", as_believed_at="1999-01-01") == []


def test_a_dormant_vertex_is_no_vertex_now_but_was_one_before_it_went_dormant(realms: Realms) -> None:
    text = "MATCH (p)-[:works_at]->(o {name: 'Quillon Labs'}) RETURN p.name AS p ORDER BY p"
    assert names(realms, text, "p") == ["Ada Lovelace"]
    assert names(realms, text, "p", as_believed_at="2017-01-01") == ["Ada Lovelace", "Ghost Worker"]
    # nor is it a step of a path
    through = "MATCH (g {name: 'Ghost Worker'})-[*0..2]-(x) RETURN count(*) AS n"
    assert names(realms, through, "n") == [0]


def test_a_pattern_in_one_space_never_returns_a_vertex_of_another(realms: Realms) -> None:
    text = "MATCH (a {name: 'Ada Lovelace'})-[:works_at]->(o) RETURN o.name AS o, o.space AS s ORDER BY o"
    assert [tuple(r) for r in cypher(text, dsn=realms.dsn, realm=realms.realm, space="work").rows()] == [
        ("Quillon Labs", "work")
    ]
    assert names(realms, text, "o", space="other") == ["Rival Corp"]
    every = cypher(text, dsn=realms.dsn, realm=realms.realm, space="*")
    assert [tuple(r) for r in every.rows()] == [("Quillon Labs", "work"), ("Rival Corp", "other")]
    all_names = names(realms, "MATCH (n) RETURN n.name", "n.name", space="other")
    assert sorted(all_names) == ["Ada Lovelace", "Rival Corp"]


def test_another_realm_is_never_read(realms: Realms) -> None:
    for space in ("work", "*"):
        found = names(realms, "MATCH (n) RETURN n.name", "n.name", space=space, max_rows=100)
        assert "Intruder" not in found and found
    theirs = cypher(
        "MATCH (p)-[:works_at]->(o) RETURN p.name AS p", dsn=realms.dsn, realm=realms.neighbour, space="*"
    )
    assert theirs["p"].to_list() == ["Intruder"]


def test_an_unknown_realm_or_space_and_a_hostile_name_are_refused(realms: Realms) -> None:
    with pytest.raises(UnknownSpaceError, match="space 'nowhere' does not exist"):
        names(realms, "MATCH (n) RETURN n", "n", space="nowhere")
    with pytest.raises(QueryError, match="does not exist"):
        cypher("MATCH (n) RETURN n", dsn=realms.dsn, realm="neverindexed", space="work")
    for realm in ['x"; DROP SCHEMA public CASCADE; --', "a.b", "ünï"]:
        with pytest.raises(InvalidNameError):
            cypher("MATCH (n) RETURN n", dsn=realms.dsn, realm=realm, space="work")
    # a space is a value, always bound: a hostile one is just a space nothing was indexed into
    with pytest.raises(UnknownSpaceError):
        names(realms, "MATCH (n) RETURN n", "n", space="work' OR '1'='1")
