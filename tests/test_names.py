"""Realm names are identifiers, space names are values (pgrag_dag/names.py; issue 13 item 6)."""

from __future__ import annotations

import json

import dagster as dg
import pytest
import yaml
from psycopg import sql
from typer.testing import CliRunner

from pgrag_dag.assets.partitions import SPACES, add_partitions
from pgrag_dag.assets.stages import ASSETS
from pgrag_dag.cli import app
from pgrag_dag.errors import ConfigurationError, InvalidNameError
from pgrag_dag.names import parse_partition, partition_key, split_partition_key, validate_space
from pgrag_dag.resources.engine import PgragResource
from pgrag_dag.store import db
from pgrag_dag.store.schema import schema_for
from tests.fix_corpus import SmallCorpus

VALUES = [
    "tenant:acme",
    "org/eng",
    "Straße",
    "two words",
    "tenant:acme/eng Straße",
    "a.b",
    "a...b",
    "100%",
    "a%20b",
    "x, y | z",
    "[1...2]",
    "*a*",
    "Ünïcode",
    "名前",
    "مساحة",
    "😀",
    "O'Brien; DROP TABLE x; --",
    'x"y',
    "-",
    "demo",
    "a" * 200,
]


@pytest.mark.parametrize("space", VALUES)
def test_any_printable_space_is_valid_and_its_partition_key_round_trips(space: str) -> None:
    assert validate_space(space) == space
    key = partition_key("acme", space)
    assert split_partition_key(key) == ("acme", space)
    encoded = key.split(".", 1)[1]  # nothing Dagster or its UI give a meaning: ranges, lists, paths, blanks
    assert not set(encoded) & set(".,|/*[]() \\\"';:") and all(c.isprintable() for c in encoded)


def test_simple_keys_are_unchanged_so_existing_dagster_partitions_keep_their_names() -> None:
    assert partition_key("wiki", "demo") == "wiki.demo" and partition_key("tenk", "disney") == "tenk.disney"
    assert partition_key("t1", "tenant:acme/eng Straße") == "t1.tenant%3Aacme%2Feng%20Straße"
    assert split_partition_key("wiki.demo") == ("wiki", "demo")


@pytest.mark.parametrize(
    "space",
    [
        "",
        " demo",
        "demo ",
        "a\x00b",
        "tab\there",
        "new\nline",
        "zero\u200bwidth",
        "bidi\u202eevil",
        "line\u2028sep",
        "lone\ud800",
        "a" * 201,
        "*",
        42,
        None,
    ],
)
def test_invisible_control_or_overlong_spaces_are_refused(space: object) -> None:
    with pytest.raises(InvalidNameError) as info:
        validate_space(space)
    assert "\n" not in str(info.value) and len(str(info.value)) < 300


def test_the_wildcard_stays_reserved_for_reads() -> None:
    assert validate_space("*", for_write=False) == "*"
    with pytest.raises(InvalidNameError, match="read-only"):
        partition_key("acme", "*")


@pytest.mark.parametrize(
    "key",
    [
        "acme.a%41",
        "acme.%2a",
        "acme.a%2eb",
        "acme.a...b",
        "acme.%C3",
        "acme.two words",
        "acme.%20x",
        "acme.",
        "acme",
        "Acme.docs",
        "a|b.c",
        "acme.%00",
        "acme.%E2%80%8B",
    ],
)
def test_a_key_that_is_not_the_canonical_encoding_of_a_valid_space_is_refused(key: str) -> None:
    with pytest.raises(InvalidNameError):
        split_partition_key(key)


def test_the_command_line_takes_the_space_as_written_or_its_partition_key() -> None:
    declared = [("acme", "tenant:acme/eng Straße"), ("acme", "a%20b"), ("acme", "a b")]
    assert parse_partition("acme.tenant:acme/eng Straße", declared) == ("acme", "tenant:acme/eng Straße")
    assert parse_partition("acme.tenant%3Aacme%2Feng%20Straße", declared) == (
        "acme",
        "tenant:acme/eng Straße",
    )
    assert parse_partition("acme.a%20b", declared) == ("acme", "a%20b")  # the space as written wins
    assert parse_partition("acme.undeclared%20one", declared) == ("acme", "undeclared%20one")
    with pytest.raises(InvalidNameError):
        parse_partition('x"; drop schema public; --.main', declared)


def test_realms_keep_the_identifier_rule(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from pgrag_dag.config import load_settings

    config = tmp_path / "pgrag.yaml"
    config.write_text(yaml.safe_dump({"realms": {"Acme Corp": {"spaces": {"docs": {"sources": []}}}}}))
    with pytest.raises(ConfigurationError, match="invalid realm name 'Acme Corp'"):
        load_settings(config)


ODD = "tenant:acme/eng Straße"
PREFIX = "tenant:acme"


@pytest.mark.dagster
def test_a_space_with_punctuation_blanks_and_unicode_indexes_queries_and_materialises(
    small_corpus: SmallCorpus, realm: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One space through every door: the YAML key, Dagster (partition, checks, run tag), ``pgrag index``
    (as written and as its partition key), ``pgrag query --space``; and a second space whose name is a
    prefix of the first sees only its own document."""
    cfg = yaml.safe_load(small_corpus.config.read_text())
    main = cfg["realms"][realm]["spaces"].pop("main")
    cfg["realms"][realm]["spaces"] = {ODD: main, PREFIX: {"sources": [{"path": "docs", "glob": "02_*.txt"}]}}
    small_corpus.config.write_text(yaml.safe_dump(cfg, allow_unicode=True), encoding="utf-8")
    monkeypatch.setenv("PGRAG_CONFIG", str(small_corpus.config))
    key = partition_key(realm, ODD)
    assert key in small_corpus.settings().partitions()

    with dg.instance_for_test() as instance:
        assert add_partitions(instance, [key]) == [key]
        result = dg.materialize(
            ASSETS,
            partition_key=key,
            instance=instance,
            resources={"pgrag": PgragResource(config_path=str(small_corpus.config))},
        )
        assert result.success and result.dagster_run.tags["dagster/partition"] == key
        assert instance.get_dynamic_partitions(SPACES.name) == [key]
        checks = result.get_asset_check_evaluations()
        assert len(checks) == 16 and all(
            e.passed for e in checks
        )  # 8 contracts, graph_quality, 4 pending_work, 2 yield, skipped_documents
        assert {e.partition for e in result.get_asset_materialization_events()} == {key}
    calls = len(small_corpus.chat_requests())

    runner = CliRunner()
    out = runner.invoke(app, ["index", key])  # the partition key as the Dagster UI shows it: already indexed
    assert out.exit_code == 0, out.output
    assert len(small_corpus.chat_requests()) == calls
    out = runner.invoke(app, ["index", f"{realm}.{PREFIX}"])  # the space as written in pgrag.yaml
    assert out.exit_code == 0, out.output
    with db.connect(small_corpus.settings().database_url) as conn:
        rows = conn.execute(
            sql.SQL("SELECT space, count(DISTINCT doc_key) FROM {}.documents GROUP BY 1 ORDER BY 1").format(
                sql.Identifier(schema_for(realm))
            )
        ).fetchall()
    assert rows == [(PREFIX, 1), (ODD, 2)]

    def ask(space: str) -> dict:  # type: ignore[type-arg]
        out = runner.invoke(
            app, ["query", "Who worked with Charles Babbage?", "--realm", realm, "--space", space, "--json"]
        )
        assert out.exit_code == 0, out.output
        return json.loads(out.output)

    odd = ask(ODD)
    assert "Charles Babbage" in {e["name"] for e in odd["entities"]}
    assert {c["space"] for c in odd["chunks"]} | {e["space"] for e in odd["entities"]} == {ODD}
    assert {c["doc_key"] for c in odd["chunks"]} == {"01_babbage.txt", "02_lovelace.txt"}
    prefix = ask(PREFIX)
    assert {c["doc_key"] for c in prefix["chunks"]} == {"02_lovelace.txt"}
    assert {c["space"] for c in prefix["chunks"]} | {r["space"] for r in prefix["relations"]} == {PREFIX}
