"""QueryParam's fields are the one declaration of a query's knobs (issue 25 item 3): the ``retrieval:``
settings and the ``pgrag query`` options are derived from them, so a field added to QueryParam is a
setting and an option at once, and a value QueryParam refuses is refused in ``pgrag.yaml`` with its
message."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pgrag_dag.cli import app
from pgrag_dag.config import RetrievalSettings, load_settings
from pgrag_dag.errors import ConfigurationError
from pgrag_dag.query_param import PER_QUESTION, QueryParam, field_help

FIELDS = [f.name for f in dataclasses.fields(QueryParam)]


def test_every_field_but_the_per_question_ones_is_a_retrieval_setting_with_its_help() -> None:
    assert list(RetrievalSettings.model_fields) == [f for f in FIELDS if f not in PER_QUESTION]
    assert len(RetrievalSettings.model_fields) == 34
    helps = field_help()
    assert set(helps) == set(FIELDS)  # every field is documented in QueryParam's docstring
    assert all(
        RetrievalSettings.model_fields[f].description == helps[f] for f in RetrievalSettings.model_fields
    )
    assert RetrievalSettings.model_fields["max_hops"].description.startswith("traversal depth k")


def test_a_setting_takes_a_literal_as_text_and_a_sequence_as_a_list_so_query_param_judges_them() -> None:
    preset = RetrievalSettings(mode="naive", relation_types=["worked_with"], max_passage_tokens=200).preset()
    assert preset == {"mode": "naive", "relation_types": ["worked_with"], "max_passage_tokens": 200}
    assert QueryParam.from_settings(RetrievalSettings(**preset), space="s").relation_types == ("worked_with",)


@pytest.mark.parametrize(
    ("retrieval", "message"),
    [
        ("mode: fancy", "retrieval: unknown query mode 'fancy'; expected one of mix, local"),
        ("mmr_lambda: 2", "retrieval: mmr_lambda must be a number in [0, 1], got 2"),
        ("chunk_channels: [bm25]", "retrieval: chunk_channels must be among vector, fulltext"),
        ("as_of: '2020'", "retrieval: unknown key 'as_of'"),
    ],
)
def test_a_value_query_param_refuses_is_refused_at_settings_load(
    tmp_path: Path, retrieval: str, message: str
) -> None:
    config = tmp_path / "pgrag.yaml"
    config.write_text(f"retrieval:\n  {retrieval}\n", encoding="utf-8")
    with pytest.raises(ConfigurationError, match="invalid settings") as refused:
        load_settings(config)
    assert message in str(refused.value)


def test_pgrag_query_has_an_option_for_every_field_and_keeps_its_earlier_names() -> None:
    shown = CliRunner().invoke(app, ["query", "--help"], terminal_width=250, env={"COLUMNS": "250"}).output
    for name in FIELDS:
        if name != "space":
            assert "--" + name.replace("_", "-") in shown, name
    for earlier in (
        "--chunk-channel",
        "--relation-type",
        "--relation-channel",
        "--node-distance",
        "--no-node-distance",
        "--json",
        "--stream",
        "--realm",
        "--space",
    ):
        assert earlier in shown, earlier
    assert "rendered [superseded]" in shown  # help text kept whole, not read as markup
    assert "mix | local | global | hybrid | naive | bypass" in shown


def test_an_option_given_reaches_query_param_and_a_refused_one_says_why(tmp_path: Path, pg_dsn: str) -> None:
    config = tmp_path / "pgrag.yaml"
    config.write_text(
        "realms:\n  r:\n    spaces:\n      s:\n        sources: [{path: docs}]\n", encoding="utf-8"
    )
    (tmp_path / "docs").mkdir()
    env = {"PGRAG_CONFIG": str(config), "PGRAG_DATABASE_URL": pg_dsn}
    out = CliRunner().invoke(app, ["query", "x", "--json", "--mmr-lambda", "3"], env=env)
    assert out.exit_code == 2
    assert "QueryError: mmr_lambda must be a number in [0, 1], got 3.0" in out.output
    given = CliRunner().invoke(app, ["query", "x", "--json", "--node-distance", "--max-hops", "1"], env=env)
    # the options parse (no usage error): the engine answers, here that the realm was never indexed
    assert (
        given.exit_code == 2 and given.output.startswith("error: ") and "No such option" not in given.output
    )
