"""On the demo graph (the shipped cassette replayed over the bundled Wikipedia corpus), a 2-hop Cypher pattern
from the entities ``query_data`` seeded returns exactly the relations ``query_data``'s traversal returned
(issue 29 item 5): the same scope, liveness and temporal filters inside every hop, in both edge directions.

The query path runs in ``local`` mode with the vector-seeded traversal (``graph_ranking="mentions"``), the
traversal as its only relation channel and a per-seed cap no seed reaches, so its relations are the whole
2-hop neighbourhood of its seeds; the Cypher side asks for the same neighbourhood by pattern."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from pgrag_dag.cypher import cypher
from pgrag_dag.engine import Engine
from pgrag_dag.pipeline import index_documents
from pgrag_dag.query import query_data
from pgrag_dag.query_param import QueryParam
from pgrag_dag.store import db, schema
from tests.demo_graph import demo_engine
from tests.fix_pg import drop_realm

# a path of the traversal never revisits a vertex: m is not the seed, c is neither the seed nor m
ONE = "MATCH (a)-[r1]-(m) WHERE id(a) IN $seeds AND id(m) <> id(a) RETURN DISTINCT id(r1) AS id"
TWO = (
    "MATCH (a)-[r1]-(m)-[r2]-(c) WHERE id(a) IN $seeds AND id(m) <> id(a) AND id(c) <> id(a)"
    " AND id(c) <> id(m) RETURN DISTINCT id(r2) AS id"
)


@dataclass(frozen=True)
class Demo:
    dsn: str
    realm: str
    engine: Engine


@pytest.fixture(scope="module")
def demo(pg_dsn: str) -> Iterator[Demo]:
    """The demo graph indexed once for the module (no communities: the traversal does not read them)."""
    conn = db.connect(pg_dsn, autocommit=True)
    schema.init_control(conn)
    name = f"cydemo{os.getpid()}"
    schema.init_realm(conn, name, embedding_model="hashing-sha256", dim=384)
    try:
        engine = demo_engine(pg_dsn, name)
        index_documents(engine, name, "demo", communities=False)
        yield Demo(pg_dsn, name, engine)
        engine.close()
    finally:
        drop_realm(conn, name)
        conn.close()


def traversed(d: Demo, question: str, when: dict[str, Any]) -> tuple[list[int], set[int]]:
    """``(seed entity ids, relation ids)`` of ``query_data``'s traversal for ``question``."""
    param = QueryParam(
        space="demo",
        mode="local",
        graph_ranking="mentions",
        relation_channels=("traversal",),
        top_k=4,
        max_hops=2,
        max_relation_edges=100_000,
        **when,
    )
    result = query_data(question, param, dsn=d.dsn, realm=d.realm, embedder=d.engine.embedder())
    assert result.channels["traversal"] == len(result.relations)
    assert {r["channel"] for r in result.relations} <= {"traversal"}
    return [e["id"] for e in result.entities], {r["id"] for r in result.relations}


def matched(d: Demo, seeds: list[int], when: dict[str, Any]) -> set[int]:
    found: set[int] = set()
    for text in (ONE, TWO):
        frame = cypher(text, {"seeds": seeds}, dsn=d.dsn, realm=d.realm, space="demo", **when)
        found |= set(frame["id"].to_list())
    return found


@pytest.mark.parametrize(
    "question",
    ["Who designed the Analytical Engine?", "What did Ada Lovelace write about Bernoulli numbers?"],
)
@pytest.mark.parametrize("when", [{}, {"as_of": "1843"}, {"include_superseded": True}])
def test_a_two_hop_pattern_returns_the_relations_query_data_traversed(
    demo: Demo, question: str, when: dict[str, Any]
) -> None:
    seeds, relations = traversed(demo, question, when)
    assert seeds and len(relations) > 10  # a real neighbourhood, never two empty sets agreeing
    assert matched(demo, seeds, when) == relations
