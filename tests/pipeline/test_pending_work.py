"""Work that failed is work still to do (issue 11): failed gleaning passes and failed community reports
are recorded as pending, reported in the non-blocking ``pending_work`` check, and retried by the next
run — with no model call for what succeeded. Real PostgreSQL, real litellm calls to the stub server."""

from __future__ import annotations

import json
from typing import Any

from psycopg import sql

from pgrag_dag.pipeline import PENDING_CHECK, index_documents, stage_raw_extractions
from pgrag_dag.pipeline.community_stages import stage_communities, stage_community_hierarchy
from pgrag_dag.store import db
from pgrag_dag.store.schema import schema_for
from tests.fix_corpus import SmallCorpus, extraction_answer

GLEAN = "Some entities and triples were missed"
REPORT = "You write a report"


def _gleaning_finds_more(messages: list[dict[str, str]]) -> str:
    """The fixture's model, whose gleaning pass finds one more entity per chunk."""
    if messages[-1]["content"].startswith(GLEAN):
        return json.dumps(
            {
                "entities": [
                    {
                        "name": "Royal Society",
                        "type": "Organization",
                        "description": "A learned society.",
                        "aliases": [],
                    }
                ],
                "triples": [],
            }
        )
    return extraction_answer(messages)


def _chat(corpus: SmallCorpus, prefix: str = "") -> list[dict[str, Any]]:
    return [
        r
        for r in corpus.chat_requests()
        if any(m["content"].startswith(prefix) for m in r["body"]["messages"])
    ]


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


def test_failed_gleaning_passes_are_pending_and_resumed_without_asking_again(
    small_corpus: SmallCorpus, realm: str
) -> None:
    def gleaning_outage(messages: list[dict[str, str]]) -> str:
        if messages[-1]["content"].startswith(GLEAN):
            raise RuntimeError("429 rate limited")  # the stub answers HTTP 500
        return _gleaning_finds_more(messages)

    small_corpus.server.answer = gleaning_outage
    engine = small_corpus.engine()
    first = index_documents(engine, realm, "main", communities=False)[1]
    chunks = first.metadata["chunks_extracted"]
    assert chunks >= 2 and first.metadata["gleaning_failures"] == chunks
    ok, pending = first.checks[PENDING_CHECK]
    assert (
        ok is False
        and pending["gleaning_passes_failed"] == chunks
        and pending["chunks_without_first_pass"] == 0
    )
    assert "pass 1:" in pending["examples"][0]
    assert "Royal Society" not in _names(engine.dsn, realm)

    small_corpus.server.answer = _gleaning_finds_more  # the outage ends
    calls = len(small_corpus.chat_requests())
    again = index_documents(small_corpus.engine(), realm, "main", communities=False)[1]
    new = small_corpus.chat_requests()[calls:]
    assert again.metadata["chunks_resumed"] == chunks
    # exactly the failed gleaning passes were asked (gleaning_passes is 1: one per chunk); no first pass again
    assert len(new) == chunks and all(r["body"]["messages"][-1]["content"].startswith(GLEAN) for r in new)
    assert again.checks[PENDING_CHECK] == (
        True,
        {"chunks_without_first_pass": 0, "gleaning_passes_failed": 0, "pending": 0, "examples": []},
    )
    assert "Royal Society" in _names(small_corpus.engine().dsn, realm)
    # and a third run has nothing left to do
    calls = len(small_corpus.chat_requests())
    third = stage_raw_extractions(small_corpus.engine(), realm, "main")
    assert third.metadata["chunks_extracted"] == 0 and len(small_corpus.chat_requests()) == calls


def test_failed_community_reports_are_pending_and_retried_next_run(
    small_corpus: SmallCorpus, realm: str
) -> None:
    failed_once: list[str] = []

    def first_report_fails(messages: list[dict[str, str]]) -> str:
        if messages[0]["content"].startswith(REPORT) and not failed_once:
            failed_once.append(messages[-1]["content"])
            raise RuntimeError("503 overloaded")
        return extraction_answer(messages)

    small_corpus.config.write_text(small_corpus.config.read_text() + "communities:\n  min_size: 2\n")
    small_corpus.server.answer = first_report_fails
    results = {r.stage: r for r in index_documents(small_corpus.engine(), realm, "main")}
    built = results["communities"]
    assert built.metadata["reports_failed"] == 1 and failed_once
    assert built.checks[PENDING_CHECK][0] is False and built.checks[PENDING_CHECK][1]["pending"] == 1
    stored = built.metadata["communities"]

    reports_before = len(_chat(small_corpus, REPORT))
    again = stage_communities(small_corpus.engine(), realm, "main")  # graph unchanged, but a report is owed
    assert "skipped" not in again.metadata and again.metadata["reports_retried"] == 1
    assert again.metadata["reports_failed"] == 0 and again.metadata["communities"] == stored + 1
    assert again.checks[PENDING_CHECK] == (True, {"pending": 0, "failures": []})
    retried = _chat(small_corpus, REPORT)[reports_before:]
    assert [
        r["body"]["messages"][-1]["content"] for r in retried
    ] == failed_once  # only the failed one was asked
    # nothing is owed any more: the next run skips
    assert "skipped" in stage_communities(small_corpus.engine(), realm, "main").metadata
    assert stage_community_hierarchy(small_corpus.engine(), realm, "main").checks[PENDING_CHECK][0] is True
