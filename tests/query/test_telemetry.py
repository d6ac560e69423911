"""Coverage telemetry (paper §6.1 "Coverage"; issue 14 item 3): what queries touched, off the critical
path."""

from __future__ import annotations

import hashlib
import json
import logging
import time
from typing import Any

import psycopg
import pytest
from psycopg import sql
from typer.testing import CliRunner

from pgrag_dag.cli import app
from pgrag_dag.config import TelemetrySettings
from pgrag_dag.operate.coverage import coverage as read_coverage
from pgrag_dag.pipeline import index_documents
from pgrag_dag.pipeline.community_stages import stage_communities
from pgrag_dag.query import QueryParam, query_data, telemetry
from pgrag_dag.store import db
from pgrag_dag.store.schema import schema_for
from tests.fix_corpus import SmallCorpus

ON = TelemetrySettings(coverage=True)


def _rows(dsn: str, realm: str, query: str, args: Any = ()) -> list[tuple]:
    with db.connect(dsn) as conn:
        cur = conn.execute(sql.SQL(query).format(s=sql.Identifier(schema_for(realm))), args)
        return cur.fetchall() if cur.description else []


@pytest.fixture
def indexed(small_corpus: SmallCorpus, realm: str) -> SmallCorpus:
    """The small corpus indexed into ``realm.main`` with its communities."""
    index_documents(small_corpus.engine(), realm, "main")
    return small_corpus


NARROW = {"top_k": 1, "max_hops": 1, "relation_channels": ["traversal"]}
"""A local query that returns one entity and its direct relations: most of the graph stays untouched."""


def _ask(
    corpus: SmallCorpus,
    realm: str,
    question: str,
    *,
    mode: str = "hybrid",
    telemetry: TelemetrySettings | None = ON,
    **param: Any,
):  # type: ignore[no-untyped-def]
    engine = corpus.engine()
    return query_data(
        question,
        QueryParam(space="main", mode=mode, **param),
        dsn=engine.dsn,
        realm=realm,
        embedder=engine.embedder(),
        telemetry=telemetry,
    )


def _flush(dsn: str) -> None:
    assert telemetry.writer_for(dsn).flush(10)


def test_a_query_with_coverage_on_records_the_question_hash_mode_space_and_ids(
    indexed: SmallCorpus, realm: str
) -> None:
    dsn = indexed.engine().dsn
    res = _ask(indexed, realm, "Who  worked with CHARLES Babbage? ")
    _flush(dsn)
    rows = _rows(
        dsn, realm, "SELECT space, question_sha256, mode, entity_ids, community_ids, at FROM {s}.query_events"
    )
    assert len(rows) == 1
    space, digest, mode, entity_ids, community_ids, at = rows[0]
    assert (space, mode) == ("main", "hybrid")
    assert digest == hashlib.sha256(b"who worked with charles babbage?").hexdigest()
    returned = {e["id"] for e in res.entities} | {
        r[k] for r in res.relations for k in ("subject_id", "object_id")
    }
    assert entity_ids == sorted(returned) and entity_ids
    assert community_ids == sorted(c["id"] for c in res.communities) and community_ids
    (now,) = _rows(dsn, realm, "SELECT now()")[0]
    assert 0 <= (now - at).total_seconds() < 60  # the database clock
    text = _rows(dsn, realm, "SELECT q::text FROM {s}.query_events q")[0][0]
    assert "worked" not in text.lower() and "babbage" not in text.lower()  # never the question's text


def test_coverage_is_off_by_default_and_records_nothing(indexed: SmallCorpus, realm: str) -> None:
    assert indexed.settings().telemetry.coverage is False
    _ask(indexed, realm, "Who worked with Charles Babbage?", telemetry=indexed.settings().telemetry)
    _ask(indexed, realm, "Who worked with Charles Babbage?", telemetry=None)
    _flush(indexed.engine().dsn)
    assert _rows(indexed.engine().dsn, realm, "SELECT count(*) FROM {s}.query_events") == [(0,)]


def test_a_broken_telemetry_write_is_logged_and_never_fails_the_query(
    indexed: SmallCorpus, realm: str, caplog: pytest.LogCaptureFixture
) -> None:
    dsn = indexed.engine().dsn
    _rows(dsn, realm, "DROP TABLE {s}.query_events")
    failed = telemetry.writer_for(dsn).stats.failed
    with caplog.at_level(logging.WARNING, logger="pgrag_dag.query.telemetry"):
        res = _ask(indexed, realm, "Who worked with Charles Babbage?")
        _flush(dsn)
    assert res.entities  # the query answered
    assert telemetry.writer_for(dsn).stats.failed == failed + 1
    assert any("not recorded" in r.getMessage() and "query_events" in r.getMessage() for r in caplog.records)


def test_a_writer_with_a_bad_dsn_swallows_its_errors() -> None:
    writer = telemetry.EventWriter("postgresql://nobody@127.0.0.1:1/none", queue_size=4)
    assert writer.submit("nosuch", ("main", "0" * 64, "mix", [1], []))
    assert writer.flush(15)
    assert (writer.stats.written, writer.stats.failed) == (0, 1)


def test_a_full_queue_drops_events_with_a_warning_and_never_blocks(
    indexed: SmallCorpus, realm: str, pg_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    event = ("main", "a" * 64, "local", [1], [])
    writer = telemetry.EventWriter(pg_dsn, queue_size=2)
    with psycopg.connect(pg_dsn) as blocker:
        blocker.execute(
            sql.SQL("LOCK TABLE {}.query_events IN ACCESS EXCLUSIVE MODE").format(
                sql.Identifier(schema_for(realm))
            )
        )
        assert writer.submit(realm, event)
        # wait (bounded) until the writer waits on the table lock: its batch is then the one event, so the
        # next two fill the queue — an empty queue alone would not say so (the writer drains what follows
        # into its batch until it starts writing)
        table = f"{schema_for(realm)}.query_events"
        deadline = time.monotonic() + 10
        with psycopg.connect(pg_dsn, autocommit=True) as watcher:
            while not watcher.execute(
                "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE relation = %s::regclass AND NOT granted)",
                (table,),
            ).fetchone()[0]:  # type: ignore[index]
                assert time.monotonic() < deadline, "the writer never waited on the locked table"
                time.sleep(0.01)
        assert writer.submit(realm, event) and writer.submit(realm, event)  # the queue holds 2
        with caplog.at_level(logging.WARNING, logger="pgrag_dag.query.telemetry"):
            assert not writer.submit(realm, event)
        assert writer.stats.dropped == 1 and "1 dropped so far" in caplog.text
        blocker.rollback()
    assert writer.flush(10)
    assert writer.stats.written == 3
    assert _rows(pg_dsn, realm, "SELECT count(*) FROM {s}.query_events") == [(3,)]


def _expected_coverage(dsn: str, realm: str) -> tuple[list[tuple[int, int]], list[int]]:
    """(community id, events) fewest first, ties by id; live entity ids no event named — from the rows."""
    events = _rows(dsn, realm, "SELECT entity_ids, community_ids FROM {s}.query_events")
    members: dict[int, set[int]] = {}
    for c, e in _rows(dsn, realm, "SELECT community_id, entity_id FROM {s}.community_members"):
        members.setdefault(c, set()).add(e)
    communities = [c for (c,) in _rows(dsn, realm, "SELECT id FROM {s}.communities WHERE space = 'main'")]
    attention = sorted(
        (
            (c, sum(1 for ents, comms in events if c in comms or members.get(c, set()) & set(ents)))
            for c in communities
        ),
        key=lambda x: (x[1], x[0]),
    )
    touched = {e for ents, _ in events for e in ents}
    live = [
        i
        for (i,) in _rows(
            dsn,
            realm,
            "SELECT id FROM {s}.entities WHERE space = 'main' AND dormant_since IS NULL ORDER BY id",
        )
    ]
    return attention, [i for i in live if i not in touched]


def test_coverage_names_the_least_attended_communities_and_the_never_retrieved_entities(
    indexed: SmallCorpus, realm: str
) -> None:
    dsn = indexed.engine().dsn
    _ask(indexed, realm, "Difference Engine", mode="local", **NARROW)
    _ask(indexed, realm, "Analytical Engine", mode="local", **NARROW)
    _flush(dsn)
    report = read_coverage(dsn, realm, "main", limit=50)
    attention, never = _expected_coverage(dsn, realm)
    assert report["events"] == 2
    assert [(c["id"], c["events"]) for c in report["least_attended_communities"]] == attention
    assert (
        report["never_retrieved"] == len(never)
        and [e["id"] for e in report["never_retrieved_entities"]] == never
    )
    assert 0 < len(never) < len(_rows(dsn, realm, "SELECT id FROM {s}.entities WHERE dormant_since IS NULL"))
    assert (
        read_coverage(dsn, realm, "main", limit=1)["never_retrieved_entities"]
        == report["never_retrieved_entities"][:1]
    )


def test_the_communities_asset_metadata_answers_the_coverage_questions(
    indexed: SmallCorpus, realm: str
) -> None:
    dsn = indexed.engine().dsn
    off = stage_communities(indexed.engine(), realm, "main").metadata
    assert off["coverage"] == "telemetry off (telemetry.coverage)"
    _ask(indexed, realm, "Difference Engine", mode="local", **NARROW)
    _flush(dsn)
    meta = stage_communities(indexed.engine(telemetry={"coverage": True}), realm, "main").metadata
    attention, never = _expected_coverage(dsn, realm)
    assert meta["coverage_events"] == 1 and meta["never_retrieved_entities"] == len(never)
    assert [(c["id"], c["events"]) for c in meta["least_attended_communities"]] == attention[:5]
    json.dumps(meta["least_attended_communities"])  # Dagster metadata: JSON as it is


def test_cli_coverage_after_cli_queries_with_telemetry_from_the_environment(
    indexed: SmallCorpus, realm: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PGRAG_CONFIG", str(indexed.config))
    monkeypatch.setenv("PGRAG_TELEMETRY__COVERAGE", "true")
    runner = CliRunner()
    out = runner.invoke(
        app,
        [
            "query",
            "Difference Engine",
            "--realm",
            realm,
            "--space",
            "main",
            "--mode",
            "local",
            "--top-k",
            "1",
            "--max-hops",
            "1",
            "--json",
        ],
    )
    assert out.exit_code == 0, out.output
    telemetry.flush_all(10)
    out = runner.invoke(app, ["coverage", f"{realm}.main", "--json", "--limit", "3"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    attention, never = _expected_coverage(indexed.engine().dsn, realm)
    assert data["events"] == 1 and data["never_retrieved"] == len(never)
    assert [(c["id"], c["events"]) for c in data["least_attended_communities"]] == attention[:3]
    human = runner.invoke(app, ["coverage", f"{realm}.main"])
    assert human.exit_code == 0 and f"live entities never retrieved: {len(never)}" in human.output
