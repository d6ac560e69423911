"""Validity dates as models write them (paper §5.1; issue 13 item 5): ISO timestamps keep their date,
everything already normalised stays as it is, and the date reaches the gate decisions and the stored
relation unchanged."""

from __future__ import annotations

import json
from typing import Any

import pytest
from psycopg import sql

from pgrag_dag.config import GateSettings
from pgrag_dag.extract.gates import gate_extraction
from pgrag_dag.pipeline import index_documents
from pgrag_dag.store import db
from pgrag_dag.store.schema import schema_for
from pgrag_dag.temporal import normalise_date
from tests.fix_corpus import SmallCorpus, extraction_answer


@pytest.mark.parametrize(
    ("written", "date"),
    [
        ("2019-03-04T10:00:00+02:00", "2019-03-04"),
        ("2019-03-04 10:00:00", "2019-03-04"),
        ("2019-03-04T10:00:00Z", "2019-03-04"),
        ("2019-03-04T10:00:00.123456Z", "2019-03-04"),
        ("2019-03-04 10:00:00.5+0530", "2019-03-04"),
        ("2019-03-04T23:30:00-05:00", "2019-03-04"),  # the date as written, never shifted to UTC
        ("2019-03-04T10:00", "2019-03-04"),
        ("2019-03-04 10:00:00 UTC", "2019-03-04"),
        ("2016-12-31T23:59:60Z", "2016-12-31"),  # a leap second
        (" 2019-03-04T10:00:00+02:00 ", "2019-03-04"),
    ],
)
def test_iso_timestamps_keep_their_date(written: str, date: str) -> None:
    assert normalise_date(written) == date


@pytest.mark.parametrize("already", ["2019", "2019-03", "2019-03-04", "1625-06-01", "0001"])
def test_normalised_dates_stay_as_they_are(already: str) -> None:
    assert normalise_date(already) == already


@pytest.mark.parametrize(
    ("written", "date"),
    [
        ("2015-6-30", "2015-06-30"),
        ("2015/06/30", "2015-06-30"),
        ("June 30, 2015", "2015-06-30"),
        ("30 June 2015", "2015-06-30"),
        ("June 2015", "2015-06"),
        (1843, "1843"),
    ],
)
def test_other_stated_dates_are_normalised_as_before(written: Any, date: str) -> None:
    assert normalise_date(written) == date


@pytest.mark.parametrize(
    "bad",
    [
        "2019-02-30T10:00:00Z",  # no such day
        "2019-03-04T25:00:00Z",
        "2019-03-04T10:61:00",
        "2019-03-04T10:00:61",
        "2019-03-04T10:00:00+25:00",
        "2019-03-04T",
        "2019-03-04T10",
        "2019-03-04 at noon",
        "2019-03-04T10:00:00 PST",
        "mid-1990s",
        "later",
    ],
)
def test_impossible_or_vague_timestamps_are_discarded(bad: str) -> None:
    assert normalise_date(bad) is None


def test_a_timestamped_period_passes_the_gates_as_a_date() -> None:
    parsed = {
        "entities": [
            {"name": "Ada Lovelace", "type": "Person"},
            {"name": "Royal Society", "type": "Organization"},
        ],
        "triples": [
            {
                "subject": "Ada Lovelace",
                "predicate": "member_of",
                "object": "Royal Society",
                "confidence": 0.9,
                "valid_from": "2019-03-04T10:00:00+02:00",
                "valid_to": "2020-01-31 17:30:00",
            }
        ],
    }
    triple = next(r for r in gate_extraction(1, 0, parsed, GateSettings()) if r["kind"] == "triple")
    assert triple["accepted"] and (triple["valid_from"], triple["valid_to"]) == ("2019-03-04", "2020-01-31")


def test_a_timestamped_period_is_stored_on_the_relation_as_its_date(
    small_corpus: SmallCorpus, realm: str
) -> None:
    def timestamped(messages: list[dict[str, str]]) -> str:
        out = json.loads(extraction_answer(messages))
        for t in out.get("triples", []):
            if t["predicate"] == "wrote_notes_on":
                t["valid_from"], t["valid_to"] = "1843-07-01T10:00:00+02:00", "1843-09-30 18:00:00"
        return json.dumps(out)

    small_corpus.server.answer = timestamped
    engine = small_corpus.engine()
    index_documents(engine, realm, "main", communities=False)
    with db.connect(engine.dsn) as conn:
        rows = conn.execute(
            sql.SQL("""SELECT valid_from, valid_to, valid_from_key, valid_to_key FROM {}.relations
                                        WHERE predicate = 'wrote_notes_on'""").format(
                sql.Identifier(schema_for(realm))
            )
        ).fetchall()
    assert rows == [("1843-07-01", "1843-09-30", "1843-07-01", "1843-09-30")]
