"""Stored responses that failed to parse are re-evaluated (issue 13 item 4): every run parses their
stored raw text again with today's parser, so a fixed parser recovers them with no model call, and a
recovered pass lets its chunk resume after it. Real PostgreSQL, real litellm calls to the stub server."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from psycopg import sql

from pgrag_dag.extract import model_extraction as extraction
from pgrag_dag.pipeline import PENDING_CHECK, index_documents
from pgrag_dag.store import db
from pgrag_dag.store.schema import schema_for
from tests.fix_corpus import SmallCorpus, extraction_answer

GLEAN = "Some entities and triples were missed"
ROYAL = {
    "entities": [{"name": "Royal Society", "type": "Organization", "description": "A learned society."}],
    "triples": [],
}
TWO_BLOCKS = f"Found one more:\n```json\n{json.dumps(ROYAL)}\n```\nand nothing else:\n```json\n{{}}\n```"
"""A response today's parser refuses ("more than one fenced block")."""


@pytest.fixture
def fixed_parser(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Call to install a fixed parser (what a release with a better parser does): the first fenced
    block of a response wins."""
    original = extraction.parse_extraction

    def fixed(text: str) -> dict[str, Any]:
        blocks = re.findall(r"```(?:json)?\s*\n?(.*?)```", text, re.DOTALL)
        return original(blocks[0] if blocks else text)

    return lambda: monkeypatch.setattr(extraction, "parse_extraction", fixed)


def _names(dsn: str, realm: str) -> set[str]:
    with db.connect(dsn) as conn:
        return {
            n
            for (n,) in conn.execute(
                sql.SQL("SELECT name FROM {}.entities WHERE space = 'main'").format(
                    sql.Identifier(schema_for(realm))
                )
            ).fetchall()
        }


def _statuses(dsn: str, realm: str) -> list[tuple[int, str]]:
    with db.connect(dsn) as conn:
        return conn.execute(
            sql.SQL("SELECT pass, parse_status FROM {}.raw_extractions ORDER BY chunk_id, pass").format(
                sql.Identifier(schema_for(realm))
            )
        ).fetchall()


def _refuse_model(messages: list[dict[str, str]]) -> str:
    raise AssertionError("no model call may be made for a response already received")


def test_a_gleaning_pass_that_failed_to_parse_is_recovered_after_a_parser_fix_without_a_model_call(
    small_corpus: SmallCorpus, realm: str, fixed_parser: Any
) -> None:
    small_corpus.server.answer = lambda m: (
        TWO_BLOCKS if m[-1]["content"].startswith(GLEAN) else extraction_answer(m)
    )
    engine = small_corpus.engine()
    first = index_documents(engine, realm, "main", communities=False)[1]
    chunks = first.metadata["chunks_extracted"]
    assert first.metadata["gleaning_failures"] == chunks > 0
    assert sorted(set(_statuses(engine.dsn, realm))) == [(0, "ok"), (1, "parse_error")]
    assert "Royal Society" not in _names(engine.dsn, realm)

    fixed_parser()
    small_corpus.server.answer = _refuse_model
    calls = len(small_corpus.chat_requests())
    again = index_documents(small_corpus.engine(), realm, "main", communities=False)[1]
    assert len(small_corpus.chat_requests()) == calls  # re-parsed from the stored text: no model call
    assert sorted(set(_statuses(engine.dsn, realm))) == [(0, "ok"), (1, "ok")]
    assert "Royal Society" in _names(engine.dsn, realm)
    assert again.metadata["parse_errors_recovered"] == chunks and again.metadata["model_calls"] == 0
    # nothing is left to recover: a third run extracts nothing
    third = index_documents(small_corpus.engine(), realm, "main", communities=False)[1]
    assert third.metadata["chunks_extracted"] == 0 and third.metadata["parse_errors_recovered"] == 0


def test_a_first_pass_that_failed_to_parse_is_recovered_and_gleaning_resumes_after_it(
    small_corpus: SmallCorpus, realm: str, fixed_parser: Any
) -> None:
    def poison_first_pass(messages: list[dict[str, str]]) -> str:
        user = messages[-1]["content"]
        if not user.startswith(GLEAN) and "never built" in user:
            return f"```json\n{extraction_answer(messages)}\n```\n```json\n{{}}\n```"
        return extraction_answer(messages)

    small_corpus.server.answer = poison_first_pass
    engine = small_corpus.engine()
    first = index_documents(engine, realm, "main", communities=False)[1]
    assert first.metadata["chunks_failed"] == 1
    assert first.checks[PENDING_CHECK][1]["chunks_without_first_pass"] == 1

    fixed_parser()
    calls = len(small_corpus.chat_requests())
    again = index_documents(small_corpus.engine(), realm, "main", communities=False)[1]
    new = small_corpus.chat_requests()[calls:]
    # the first pass is not asked again; gleaning (one pass) resumes after it
    assert [r["body"]["messages"][-1]["content"].startswith(GLEAN) for r in new] == [True]
    assert again.metadata["parse_errors_recovered"] == 1 and again.metadata["chunks_failed"] == 0
    assert again.checks[PENDING_CHECK][0] is True
    with db.connect(engine.dsn) as conn:
        denied = conn.execute(
            sql.SQL("SELECT count(*) FROM {}.relations WHERE negated").format(
                sql.Identifier(schema_for(realm))
            )
        ).fetchone()
    assert denied == (1,)  # "never built by Charles Babbage" came from the recovered chunk


def test_a_response_that_still_does_not_parse_stays_a_parse_error_and_is_not_asked_again_when_gleaning(
    small_corpus: SmallCorpus, realm: str
) -> None:
    small_corpus.server.answer = lambda m: (
        "Nothing else, I think." if m[-1]["content"].startswith(GLEAN) else extraction_answer(m)
    )
    engine = small_corpus.engine()
    index_documents(engine, realm, "main", communities=False)
    calls = len(small_corpus.chat_requests())
    again = index_documents(small_corpus.engine(), realm, "main", communities=False)[1]
    assert len(small_corpus.chat_requests()) == calls and again.metadata["chunks_extracted"] == 0
    assert again.metadata["parse_errors_recovered"] == 0
    assert sorted(set(_statuses(engine.dsn, realm))) == [(0, "ok"), (1, "parse_error")]
