"""Injection attempts, the read-only transaction, and the indexes the compiled SQL can use (issue 29
item 2): values and names from the query text or its parameters only ever travel as bound values, a
compiled query cannot write, and the hot filters — a name, an edge's endpoint, its validity — are indexed
columns, never JSONB look-ups. Graph: :mod:`tests.cypher.graph`."""

from __future__ import annotations

import re
from typing import Any

import psycopg
import pytest
from psycopg import sql

from pgrag_dag.cypher import cypher
from pgrag_dag.cypher.compile import Compiled, CypherOptions
from pgrag_dag.cypher.run import compile_text, run
from pgrag_dag.store import db
from pgrag_dag.temporal import Temporal
from tests.cypher.graph import Realms, realms  # noqa: F401  (the fixture)

HOSTILE = [
    "Ada Lovelace' OR '1'='1",
    "x'); DROP TABLE relations; --",
    'Ada Lovelace"; SELECT pg_sleep(5); --',
    "Ada Lovelace\\' OR TRUE --",
    "Ada\u0000Lovelace",
    "Ａda Lovelace",  # fullwidth A: no normalisation makes it Ada
    "a" * 200,
]


def count_relations(r: Realms) -> int:
    frame = cypher("MATCH ()-[r]->() RETURN count(*) AS n", dsn=r.dsn, realm=r.realm, space="*")
    return int(frame["n"][0])


@pytest.mark.parametrize("value", HOSTILE)
def test_a_hostile_parameter_is_a_value_that_matches_nothing(realms: Realms, value: str) -> None:
    before = count_relations(realms)
    for text, params in [
        ("MATCH (a {name: $v})-[r]->(b) RETURN b.name", {"v": value}),
        (
            "MATCH (a)-[r]->(b) WHERE a.name = $v OR b.name IN $list RETURN b.name",
            {"v": value, "list": [value]},
        ),
        ("MATCH (a:Person) WHERE a.name STARTS WITH $v RETURN a.name", {"v": value}),
    ]:
        try:
            frame = cypher(text, params, dsn=realms.dsn, realm=realms.realm, space="work")
        except Exception as exc:  # NUL cannot travel in a PostgreSQL text value: refused by the driver
            assert "\u0000" in value, exc
            continue
        assert frame.height == 0
    assert count_relations(realms) == before == 11


@pytest.mark.parametrize(
    "text",
    [
        "MATCH (n:`Person' OR '1'='1`) RETURN n.name",
        "MATCH (n:`Person`)-[r:`works_at') OR TRUE OR ('`]->(o) RETURN n.name",
        "MATCH (n) WHERE n.name = 'Ada Lovelace\\' OR \\'1\\'=\\'1' RETURN n.name",
        'MATCH (n) WHERE n.name = "x\\"; DROP TABLE relations; --" RETURN n.name',
        "MATCH (n) WHERE n:`Person' OR '1'='1` RETURN n.name",
        "MATCH ()-[r]->(n) WHERE r:`works_at' OR TRUE; DROP TABLE relations; --` RETURN n.name",
    ],
)
def test_hostile_labels_types_and_literals_are_bound_values(realms: Realms, text: str) -> None:
    assert cypher(text, dsn=realms.dsn, realm=realms.realm, space="work").height == 0
    assert count_relations(realms) == 11


def test_a_compiled_query_runs_in_a_read_only_transaction(realms: Realms) -> None:
    # the guarantee is the transaction's, not the grammar's: even a writing statement handed to run() fails
    writing = Compiled(
        query=sql.SQL("UPDATE {}.entities SET name = 'x' RETURNING id").format(
            sql.Identifier(f"pgrag_{realms.realm}")
        ),
        params={},
        columns=("id",),
    )
    conn = db.connect(realms.dsn, autocommit=True)
    try:
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            run(conn, writing)
    finally:
        conn.close()


def plan(r: Realms, text: str, params: dict[str, Any] | None = None, **kw: Any) -> str:
    """EXPLAIN of the compiled query with sequential scans priced out: what matters is that an index
    *can* answer each hot filter (a tiny table would be scanned anyway)."""
    compiled = compile_text(text, params, CypherOptions(r.realm, "work", Temporal(**kw)))
    conn = db.connect(r.dsn)
    try:
        for table in ("entities", "relations"):  # the statistics autovacuum would have gathered
            conn.execute(
                sql.SQL("ANALYZE {}.{}").format(sql.Identifier(f"pgrag_{r.realm}"), sql.Identifier(table))
            )
        conn.execute("SET enable_seqscan = off")
        rows = conn.execute(sql.SQL("EXPLAIN ") + compiled.query, compiled.params).fetchall()
        return "\n".join(str(row[0]) for row in rows)
    finally:
        conn.rollback()
        conn.close()


def test_the_hot_filters_of_a_two_hop_pattern_are_indexed_columns(realms: Realms) -> None:
    text = "MATCH (a {name: $name})-[r1]->(m)-[r2]->(c) RETURN m.name, c.name"
    current = plan(realms, text, {"name": "Ada Lovelace"})
    assert "entities_space_lower_name" in current  # the name, through (space, lower(name))
    # each hop through the walk's covering partial index (live, not superseded) on (space, source_id)
    assert "relations_walk_out" in current
    assert not re.search(r"Seq Scan on relations", current)
    dated = plan(realms, text, {"name": "Ada Lovelace"}, as_of="2016")
    assert "valid_from_key" in dated and "valid_to_key" in dated  # generated columns
    for p in (current, dated):
        assert "payload" not in p and "->>" not in p  # never a JSONB look-up


def test_a_variable_length_walk_steps_through_the_endpoint_indexes(realms: Realms) -> None:
    text = "MATCH (a {name: 'Ada Lovelace'})-[p*1..3]-(b) RETURN b.name"
    current = plan(realms, text)
    assert "relations_walk_out" in current and "relations_walk_in" in current
    assert "payload" not in current
