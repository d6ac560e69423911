"""A 2-hop Cypher pattern reads the same relations as the query path's k-hop traversal
(:func:`pgrag_dag.store.retrieval.traverse`, §7.2) from the same seed, in the same temporal state (issue 29
item 5) — on the hand-built graph of :mod:`tests.cypher.graph`, not the demo's."""

from __future__ import annotations

from typing import Any

import pytest

from pgrag_dag.cypher import cypher
from pgrag_dag.store import db, retrieval
from pgrag_dag.temporal import Temporal
from tests.cypher.graph import Realms, realms  # noqa: F401  (the fixture)

# the traversal never revisits a vertex: the second hop may not lead back to the seed
ONE = "MATCH (a {name: $seed})-[r1]-(m) RETURN id(r1) AS id"
TWO = "MATCH (a {name: $seed})-[r1]-(m)-[r2]-(c) WHERE id(c) <> id(a) RETURN id(r2) AS id"


def by_cypher(r: Realms, seed: str, **kw: Any) -> set[int]:
    found: set[int] = set()
    for text in (ONE, TWO):
        frame = cypher(text, {"seed": seed}, dsn=r.dsn, realm=r.realm, space="work", **kw)
        found |= set(frame["id"].to_list())
    return found


def by_traversal(r: Realms, seed: str, temporal: Temporal) -> set[int]:
    conn = db.connect(r.dsn, autocommit=True)
    try:
        rows = retrieval.traverse(
            conn,
            r.realm,
            "work",
            [r.graph.ids[("work", seed)]],
            max_hops=2,
            max_relation_edges=1000,
            temporal=temporal,
        )
    finally:
        conn.close()
    return {int(row["id"]) for row in rows}


@pytest.mark.parametrize("seed", ["Ada Lovelace", "Charles Babbage", "London", "Old Patron"])
@pytest.mark.parametrize(
    "when",
    [
        {},
        {"as_of": "2016"},
        {"as_of": "2022"},
        {"as_believed_at": "2012-01-01"},
        {"as_believed_at": "2017-06-01", "as_of": "2016"},
        {"include_superseded": True},
    ],
)
def test_a_two_hop_pattern_reads_what_the_traversal_reads(
    realms: Realms, seed: str, when: dict[str, Any]
) -> None:
    temporal = Temporal(
        as_of=when.get("as_of"),
        believed_at=when.get("as_believed_at"),  # type: ignore[arg-type]
        include_superseded=when.get("include_superseded", False),
    )
    expected = by_traversal(realms, seed, temporal)
    assert by_cypher(realms, seed, **when) == expected
    assert expected  # never two empty sets agreeing
