"""What the Cypher surface refuses, and where (issue 29 item 1): every clause outside the read-only subset
is a one-line :class:`CypherError` naming the clause and its line:column, raised before any connection is
taken — the DSN below points at no server, so a refusal that reached the database would be a
``DatabaseError`` instead."""

from __future__ import annotations

import pytest

from pgrag_dag.cypher import CypherOptions, cypher, explain
from pgrag_dag.cypher.parse import MAX_QUERY_CHARS, parse
from pgrag_dag.errors import CypherError, QueryError
from pgrag_dag.temporal import Temporal

DEMO = CypherOptions("demo", "wiki")

NO_SERVER = "postgresql://nobody@127.0.0.1:1/none?connect_timeout=1"


@pytest.mark.parametrize(
    ("text", "clause", "line", "column"),
    [
        ("CREATE (n:Person {name: 'x'}) RETURN n", "CREATE", 1, 1),
        ("MERGE (n:Person {name: 'x'}) RETURN n", "MERGE", 1, 1),
        ("MATCH (n)\nSET n.name = 'x'\nRETURN n", "SET", 2, 1),
        ("MATCH (n) DELETE n", "DELETE", 1, 11),
        ("MATCH (n)\n  DETACH DELETE n", "DETACH DELETE", 2, 3),
        ("MATCH (n) REMOVE n.name RETURN n", "REMOVE", 1, 11),
        ("CALL db.labels()", "CALL", 1, 1),
        ("MATCH (n) CALL { RETURN 1 } RETURN n", "CALL", 1, 11),
        ("LOAD CSV FROM 'file:///etc/passwd' AS row RETURN row", "LOAD CSV", 1, 1),
        ("UNWIND [1, 2] AS x RETURN x", "UNWIND", 1, 1),
        ("MATCH (n) WITH n RETURN n", "WITH", 1, 11),
        ("MATCH (n) RETURN n UNION MATCH (m) RETURN m", "UNION", 1, 20),
        ("MATCH (n) FOREACH (x IN [1] | SET n.a = x) RETURN n", "FOREACH", 1, 11),
        ("MATCH (a)-[*]->(b) RETURN b", "unbounded *", 1, 12),
        ("MATCH (a)-[r:knows*2..]->(b) RETURN b", "unbounded *", 1, 19),
        ("MATCH (n RETURN n", "syntax", 1, 10),
        ("MATCH (n) RETURN n; DROP TABLE x", "DROP", 1, 21),
        ("MATCH (n) WHERE n.name = 'a' # comment RETURN n", "syntax", 1, 30),
    ],
)
def test_a_clause_outside_the_subset_is_refused_with_its_position_before_any_sql(
    text: str, clause: str, line: int, column: int
) -> None:
    with pytest.raises(CypherError) as caught:
        cypher(text, dsn=NO_SERVER, realm="demo", space="wiki")
    err = caught.value
    assert (err.clause, err.line, err.column) == (clause, line, column)
    assert str(err).endswith(f"at {line}:{column}") and "\n" not in str(err)
    assert isinstance(err, QueryError)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("MATCH (n) WHERE n.payload = 'x' RETURN n", "unknown node property 'payload' .* at 1:17"),
        (
            "MATCH (n {`name) OR 1=1 --`: 'x'}) RETURN n",
            r"unknown node property 'name\) OR 1=1 --' .* at 1:11",
        ),
        ('MATCH ()-[r]->() RETURN r.`weight"; DROP TABLE x; --`', "unknown relationship property"),
        ("MATCH (n) RETURN m.name", "variable 'm' is not bound by a MATCH at 1:18"),
        ("MATCH (n) RETURN pg_sleep(10)", r"function pg_sleep\(\) is not supported at 1:18"),
        ("MATCH (n) WHERE count(n) > 1 RETURN n", r"count\(\) is not allowed in WHERE"),
        ("MATCH (n) RETURN n.name LIMIT $k", r"parameter \$k is not given"),
        ("MATCH (a)-[p*2]->(b) RETURN p.weight", "variable-length relationship: it has no property"),
        ("MATCH (a)-[r]->(r) RETURN r", "'r' is bound as a node, not a rel at 1:10"),
        ("MATCH (n) RETURN n.name, n.name", "column 'n.name' is returned twice"),
        ("MATCH (n) RETURN DISTINCT n.name ORDER BY n.description", "ORDER BY must name a returned column"),
    ],
)
def test_what_the_compiler_refuses_is_named_with_its_position(text: str, message: str) -> None:
    with pytest.raises(CypherError, match=message):
        explain(text, None, DEMO)


def test_a_parameter_of_an_unbindable_type_is_refused() -> None:
    with pytest.raises(CypherError, match=r"parameter \$name must be a string.*got dict at 1:17"):
        explain("MATCH (n {name: $name}) RETURN n", {"name": {"$ne": None}}, DEMO)


def test_an_empty_or_oversized_text_is_refused() -> None:
    for text in ["", "   "]:
        with pytest.raises(CypherError, match="query is empty"):
            parse(text)
    with pytest.raises(CypherError, match="longer than"):
        parse("MATCH (n) RETURN n" + " " * MAX_QUERY_CHARS)


def test_keywords_are_case_insensitive_and_names_may_be_backticked() -> None:
    q = parse(
        "match (`my node`:Person) where `my node`.name starts with 'A' return distinct `my node`.name as n"
    )
    assert q.matches[0].patterns[0].nodes[0].var == "my node"
    assert q.ret.distinct and q.ret.items[0].name == "n"


def test_explain_binds_every_value_and_names_no_user_text() -> None:
    sql_text, params = explain(
        "MATCH (p:`Secret Label`)-[r:SECRET_TYPE]->(o) WHERE o.name = $who "
        "AND r.description CONTAINS 'SECRET LITERAL' RETURN p.name AS secret_alias",
        {"who": "SECRET VALUE'; DROP TABLE x; --"},
        CypherOptions("demo", "wiki", Temporal(as_of="2016")),
    )
    assert "secret" not in sql_text.lower() and "DROP" not in sql_text
    values = [tuple(v) if isinstance(v, list) else v for v in params.values()]
    assert "Secret Label" in values and ("secret_type",) in values
    assert "SECRET VALUE'; DROP TABLE x; --" in values and "SECRET LITERAL" in values
    assert params["space"] == "wiki" and (params["as_of_lo"], params["as_of_hi"]) == (
        "2016-01-01",
        "2016-12-31",
    )
    assert '"pgrag_demo"."entities"' in sql_text and '"pgrag_demo"."relations"' in sql_text
