"""The three faces of the Cypher surface (issue 29 item 3): ``pgrag_dag.cypher``, ``QueryResource.cypher``
and ``pgrag cypher`` (table, ``--json``, ``--csv``, ``--explain``, refusals as one ``error:`` line, exit 2).
Graph: :mod:`tests.cypher.graph`."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import pgrag_dag
from pgrag_dag.cli import app
from pgrag_dag.config import load_settings
from pgrag_dag.errors import ConfigurationError, CypherError, QueryError
from pgrag_dag.resources.query import QueryResource
from tests.cypher.graph import Realms, realms  # noqa: F401  (the fixture)

runner = CliRunner()
DESIGNED = "MATCH (b {name: $who})-[r:designed]->(x) RETURN x.name AS made, r.weight AS w ORDER BY made"


@pytest.fixture
def cli_env(realms: Realms, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Realms:
    (tmp_path / "pgrag.yaml").write_text("{}\n")  # declares nothing
    monkeypatch.setenv("PGRAG_CONFIG", str(tmp_path / "pgrag.yaml"))
    monkeypatch.setenv("PGRAG_DATABASE_URL", realms.dsn)
    return realms


def test_the_package_function_and_the_resource_answer_alike(realms: Realms, tmp_path: Path) -> None:
    expected = [("Analytical Engine", 2), ("Difference Engine", 1)]
    frame = pgrag_dag.cypher(
        DESIGNED, {"who": "Charles Babbage"}, dsn=realms.dsn, realm=realms.realm, space="work"
    )
    assert [tuple(r) for r in frame.rows()] == expected
    (tmp_path / "pgrag.yaml").write_text("{}\n")
    rag = QueryResource(realm=realms.realm, config_path=str(tmp_path / "pgrag.yaml"), database_url=realms.dsn)
    same = rag.cypher(DESIGNED, {"who": "Charles Babbage"}, space="work")
    assert same.equals(frame)
    then = rag.cypher(
        "MATCH (a {name: 'Ada Lovelace'})-[r]->(x:Artifact) RETURN type(r) AS t",
        space="work",
        as_believed_at="2012-01-01",
    )
    assert then["t"].to_list() == ["described"]


def test_the_command_prints_a_table_json_and_csv(cli_env: Realms) -> None:
    where = ["--space", f"{cli_env.realm}.work", "--param", "who=Charles Babbage"]
    out = runner.invoke(app, ["cypher", DESIGNED, *where])
    assert out.exit_code == 0, out.output
    assert "Analytical Engine" in out.stdout and out.stdout.rstrip().endswith("(2 rows)")
    out = runner.invoke(app, ["cypher", DESIGNED, *where, "--json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout) == [
        {"made": "Analytical Engine", "w": 2},
        {"made": "Difference Engine", "w": 1},
    ]
    out = runner.invoke(
        app, ["cypher", "MATCH (a {name: 'Ada Lovelace'}) RETURN a.name AS n, a", *where, "--csv"]
    )
    assert out.exit_code == 0, out.output
    (header, row) = list(csv.reader(io.StringIO(out.stdout)))
    assert header == ["n", "a"] and row[0] == "Ada Lovelace"
    assert json.loads(row[1])["aliases"] == ["Countess of Lovelace"]


def test_a_parameter_value_is_read_as_json_when_it_is_json(cli_env: Realms) -> None:
    text = "MATCH (n) WHERE n.name IN $names RETURN n.name AS n ORDER BY n LIMIT $k"
    args = [
        "--space",
        f"{cli_env.realm}.*",
        "--param",
        'names=["Paris", "London", "Rival Corp"]',
        "--param",
        "k=2",
    ]
    out = runner.invoke(app, ["cypher", text, *args, "--json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout) == [{"n": "London"}, {"n": "Paris"}]


def test_explain_prints_the_sql_and_its_parameters_without_a_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PGRAG_DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none")
    out = runner.invoke(
        app,
        [
            "cypher",
            "MATCH (p:Person {name: $n})-[r]->(o) RETURN o.name",
            "--space",
            "demo.wiki",
            "--param",
            "n=Ada",
        ]
        + ["--as-of", "2016", "--explain"],
    )
    assert out.exit_code == 0, out.output
    sql_text, _, params = out.stdout.partition("\n{")
    assert sql_text.startswith('SELECT "n1"."name" AS "c0" FROM "pgrag_demo"."entities" AS "n0"')
    assert "Ada" not in sql_text and "valid_from_key" in sql_text
    bound = json.loads("{" + params)
    assert bound["space"] == "wiki" and "Ada" in bound.values() and bound["as_of_lo"] == "2016-01-01"


def test_a_refused_query_is_one_error_line_and_exit_2(cli_env: Realms) -> None:
    out = runner.invoke(app, ["cypher", "MATCH (n)\nDETACH DELETE n", "--space", f"{cli_env.realm}.work"])
    assert out.exit_code == 2
    assert out.stderr == (
        "error: CypherError: Cypher DETACH DELETE is not supported: the Cypher surface is read-only "
        "(MATCH … RETURN) at 2:1\n"
    )
    out = runner.invoke(app, ["cypher", "MATCH (n) RETURN n", "--space", "nodot"])
    assert out.exit_code == 2 and "--space takes <realm>.<space>" in out.stderr
    out = runner.invoke(
        app, ["cypher", "MATCH (n) RETURN n", "--space", f"{cli_env.realm}.work", "--json", "--csv"]
    )
    assert out.exit_code == 2 and "not both" in out.stderr


def test_the_configured_limits_bound_the_command_and_the_resource(
    cli_env: Realms, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "limits.yaml"
    config.write_text("cypher:\n  max_hops: 2\n  max_rows: 3\n")
    monkeypatch.setenv("PGRAG_CONFIG", str(config))
    where = ["--space", f"{cli_env.realm}.work"]
    path = (
        "MATCH (a {name: 'Ada Lovelace'})-[p*1..3]->(b {name: 'London'}) RETURN size(p) AS hops ORDER BY hops"
    )
    out = runner.invoke(app, ["cypher", path, *where])
    assert out.exit_code == 2 and "*1..3 is outside 0..2 (max_hops)" in out.stderr
    out = runner.invoke(app, ["cypher", path, *where, "--max-hops", "3", "--json"])  # the caller's wins
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout) == [{"hops": 1}, {"hops": 2}, {"hops": 3}]
    every = "MATCH (n) RETURN n.name"
    out = runner.invoke(app, ["cypher", every, *where])
    assert out.exit_code == 2 and "more than 3 rows (max_rows)" in out.stderr
    assert runner.invoke(app, ["cypher", every, *where, "--max-rows", "100"]).exit_code == 0
    monkeypatch.setenv("PGRAG_CYPHER__MAX_ROWS", "4")  # the environment over the file
    out = runner.invoke(app, ["cypher", every, *where])
    assert out.exit_code == 2 and "more than 4 rows (max_rows)" in out.stderr
    monkeypatch.setenv("PGRAG_CYPHER__TIMEOUT_S", "0.001")
    heavy = "MATCH (a), (b), (c), (d), (e), (f) RETURN count(*) AS n"
    out = runner.invoke(app, ["cypher", heavy, *where, "--as-believed-at", "2030-01-01"])
    assert out.exit_code == 2 and "ran past its timeout (0.001 s)" in out.stderr
    monkeypatch.delenv("PGRAG_CYPHER__MAX_ROWS")
    monkeypatch.delenv("PGRAG_CYPHER__TIMEOUT_S")
    rag = QueryResource(realm=cli_env.realm, config_path=str(config), database_url=cli_env.dsn)
    with pytest.raises(QueryError, match="more than 3 rows"):
        rag.cypher(every, space="work")
    assert (
        rag.cypher(every, space="work", max_rows=100).height == 9
    )  # work: 10 entities, Ghost Worker dormant
    with pytest.raises(CypherError, match=r"outside 0\.\.2"):
        rag.cypher(path, space="work")
    config.write_text("cypher:\n  max_hops: -1\n")
    with pytest.raises(ConfigurationError, match="max_hops"):
        load_settings(config)


def test_the_example_in_pgrag_cypher_help_compiles(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The help's example is shown as written (``[r]`` is no markup to strip) and compiles as it reads."""
    monkeypatch.chdir(tmp_path)  # --explain needs no configuration and no database
    monkeypatch.delenv("PGRAG_CONFIG", raising=False)
    shown = " ".join(runner.invoke(app, ["cypher", "--help"], terminal_width=200).stdout.split())
    example = shown.split('Example: pgrag cypher "', 1)[1].split('" --space', 1)[0]
    assert example == "MATCH (p:Person)-[r]->(o) RETURN p.name, type(r), o.name LIMIT 5"
    out = runner.invoke(app, ["cypher", example, "--space", "wiki.demo", "--explain"])
    assert out.exit_code == 0, out.output
    assert "SELECT" in out.stdout
