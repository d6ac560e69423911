"""Community reports committed largest first, and every skipped report named by its members (issue 13
item 13; paper §6): a build cut short by ``communities.report_deadline_s``, ``communities.max_reports``
or a killed run still holds its largest clusters; a failed or cut report names the cluster's member
entities in the log, the metadata and ``pending_work``. Real PostgreSQL, real litellm calls to the
stub server."""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from typing import Any

import psycopg
import pytest
from psycopg import sql

from pgrag_dag.config import CommunitySettings
from pgrag_dag.graph import communities as cm
from pgrag_dag.pipeline import PENDING_CHECK
from pgrag_dag.pipeline.community_stages import stage_communities
from pgrag_dag.providers.prompts import PARENT_REPORT_SYSTEM
from pgrag_dag.store import db
from pgrag_dag.store.schema import schema_for
from tests.fix_corpus import SmallCorpus

GROUPS = {"Big": 6, "Mid": 5, "Small": 4, "Tiny": 3}
"""Four disjoint cliques: Leiden finds one community each, numbered largest first."""


def _seed(dsn: str, realm: str) -> None:
    with db.connect(dsn) as conn, conn.transaction():
        s = sql.Identifier(schema_for(realm))
        for group, n in GROUPS.items():
            ids = [
                conn.execute(
                    sql.SQL(
                        "INSERT INTO {}.entities (space, name, description) VALUES ('main', %s, %s) "
                        "RETURNING id"
                    ).format(s),
                    (f"{group} {i}", f"member {i} of {group}"),
                ).fetchone()[0]  # type: ignore[index]
                for i in range(1, n + 1)
            ]
            for a in ids:
                for b in ids:
                    if a < b:
                        conn.execute(
                            sql.SQL(
                                "INSERT INTO {}.relations (space, source_id, target_id, predicate, weight) "
                                "VALUES ('main', %s, %s, 'works_with', 5)"
                            ).format(s),
                            (a, b),
                        )


def _group(prompt: str) -> str:
    return re.findall(r"^- (\w+) \d+ \[", prompt, re.MULTILINE)[0]


def _report(messages: list[dict[str, str]]) -> str:
    group = _group(messages[-1]["content"])
    return json.dumps(
        {
            "title": f"The {group} group",
            "summary": f"{group} members work together.",
            "findings": [{"summary": f"{group} is a clique", "explanation": "every pair works together"}],
            "rating": 5,
        }
    )


@pytest.fixture
def cliques(small_corpus: SmallCorpus, realm: str) -> SmallCorpus:
    """The small corpus's space ``main`` holding the four cliques (no documents), one community level."""
    _seed(small_corpus.settings().database_url, realm)
    small_corpus.server.answer = _report
    return small_corpus


def _configure(corpus: SmallCorpus, **communities: Any) -> None:
    corpus.config.write_text(
        corpus.config.read_text()
        + "communities:\n"
        + "".join(f"  {k}: {v}\n" for k, v in {"min_size": 2, "levels": 0, **communities}.items())
    )


def _stored(dsn: str, realm: str) -> list[tuple[str, int]]:
    with db.connect(dsn) as conn:
        return conn.execute(
            sql.SQL("SELECT title, size FROM {}.communities WHERE space = 'main' ORDER BY id").format(
                sql.Identifier(schema_for(realm))
            )
        ).fetchall()


def _asked(corpus: SmallCorpus, since: int = 0) -> list[str]:
    return [_group(r["body"]["messages"][-1]["content"]) for r in corpus.chat_requests()[since:]]


def test_a_failed_report_names_its_members_in_the_log_the_metadata_and_pending_work(
    cliques: SmallCorpus, realm: str, caplog: pytest.LogCaptureFixture
) -> None:
    def mid_fails(messages: list[dict[str, str]]) -> str:
        if _group(messages[-1]["content"]) == "Mid":
            raise RuntimeError("503 overloaded")
        return _report(messages)

    _configure(cliques)
    cliques.server.answer = mid_fails
    with caplog.at_level(logging.WARNING):
        result = stage_communities(cliques.engine(), realm, "main")
    members = [f"Mid {i}" for i in range(1, 6)]
    (skip,) = result.metadata["skipped_reports"]
    assert skip["kind"] == "failed" and skip["size"] == 5 and sorted(skip["members"]) == members
    assert skip["reason"].startswith("ModelError: ")
    (line,) = result.metadata["report_failures"]
    assert line.startswith("cluster 1: ModelError") and "[members: 5 entities: " in line
    assert all(m in line for m in members)
    assert any(
        "community report skipped: cluster 1: ModelError" in r.getMessage()
        and all(m in r.getMessage() for m in members)
        for r in caplog.records
    )
    ok, pending = result.checks[PENDING_CHECK]
    assert ok is False and pending["failures"] == [line]
    assert [t for t, _ in _stored(cliques.engine().dsn, realm)] == [
        "The Big group",
        "The Small group",
        "The Tiny group",
    ]


def test_a_deadline_cuts_the_smallest_clusters_and_the_next_run_writes_only_those(
    cliques: SmallCorpus, realm: str
) -> None:
    release = threading.Event()

    def tiny_is_slow(messages: list[dict[str, str]]) -> str:
        if _group(messages[-1]["content"]) == "Tiny":
            release.wait(20)
        return _report(messages)

    _configure(cliques, report_deadline_s=4)  # wide enough for a loaded CI machine
    cliques.server.answer = tiny_is_slow
    started = time.monotonic()
    try:
        cut = stage_communities(cliques.engine(), realm, "main")
    finally:
        release.set()
    assert time.monotonic() - started < 12
    assert [size for _, size in _stored(cliques.engine().dsn, realm)] == [6, 5, 4]  # the largest clusters
    (skip,) = cut.metadata["skipped_reports"]
    assert skip["kind"] == "deadline" and sorted(skip["members"]) == ["Tiny 1", "Tiny 2", "Tiny 3"]
    assert skip["reason"] == "cut by the deadline (communities.report_deadline_s = 4 s)"
    assert cut.metadata["reports_cut"] == {"deadline": 1, "budget": 0} and cut.metadata["communities"] == 3
    assert cut.checks[PENDING_CHECK][0] is False and "Tiny 1" in cut.checks[PENDING_CHECK][1]["failures"][0]

    cliques.server.answer = _report
    calls = len(cliques.chat_requests())
    again = stage_communities(cliques.engine(), realm, "main")  # owed: rebuilt, the rest from the cache
    assert set(_asked(cliques, calls)) <= {"Tiny"}
    assert [size for _, size in _stored(cliques.engine().dsn, realm)] == [6, 5, 4, 3]
    assert again.checks[PENDING_CHECK] == (True, {"pending": 0, "failures": []})


def test_a_report_budget_writes_the_largest_clusters_and_names_the_rest(
    cliques: SmallCorpus, realm: str
) -> None:
    _configure(cliques, max_reports=2)
    result = stage_communities(cliques.engine(), realm, "main")
    assert sorted(_asked(cliques)) == ["Big", "Mid"]  # no call for the others
    assert [size for _, size in _stored(cliques.engine().dsn, realm)] == [6, 5]
    assert [(s["kind"], s["size"]) for s in result.metadata["skipped_reports"]] == [
        ("budget", 4),
        ("budget", 3),
    ]
    assert sorted(result.metadata["skipped_reports"][1]["members"]) == ["Tiny 1", "Tiny 2", "Tiny 3"]
    assert result.metadata["reports_cut"] == {"deadline": 0, "budget": 2}
    assert result.checks[PENDING_CHECK][0] is True  # what the budget leaves out is not owed
    calls = len(cliques.chat_requests())
    assert "skipped" in stage_communities(cliques.engine(), realm, "main").metadata
    assert len(cliques.chat_requests()) == calls


def test_reports_are_committed_largest_first_while_the_build_runs(cliques: SmallCorpus, realm: str) -> None:
    """What a run killed mid-build leaves: the largest clusters committed, the rest owed by name."""
    release = threading.Event()

    def tiny_waits(messages: list[dict[str, str]]) -> str:
        if _group(messages[-1]["content"]) == "Tiny":
            release.wait(30)
        return _report(messages)

    _configure(cliques)
    cliques.server.answer = tiny_waits
    engine = cliques.engine()
    box: dict[str, Any] = {}
    build = threading.Thread(
        target=lambda: box.update(result=stage_communities(engine, realm, "main")), daemon=True
    )
    build.start()
    try:
        deadline = time.monotonic() + 20
        while len(_stored(engine.dsn, realm)) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert build.is_alive()  # Tiny's report is still being asked for
        assert [size for _, size in _stored(engine.dsn, realm)] == [6, 5, 4]  # and the largest are committed
        with db.connect(engine.dsn) as conn:
            owed = conn.execute(
                sql.SQL(
                    "SELECT failures FROM {}.stage_pending WHERE space = 'main' AND stage = 'communities'"
                ).format(sql.Identifier(schema_for(realm)))
            ).fetchone()
        assert owed is not None and owed[0] == [
            "cluster 3: not written yet, the build was cut short "
            "[members: 3 entities: Tiny 1, Tiny 2, Tiny 3]"
        ]
    finally:
        release.set()
        build.join(30)
    assert box["result"].metadata["communities"] == 4 and box["result"].checks[PENDING_CHECK][0] is True
    assert [size for _, size in _stored(engine.dsn, realm)] == [6, 5, 4, 3]


@pytest.mark.live
def test_a_failed_parent_report_names_the_member_entities(conn: psycopg.Connection, pg_dsn: str) -> None:
    import uuid

    from pgrag_dag.config import LLMSettings
    from pgrag_dag.graph.community_reports import write_reports
    from pgrag_dag.providers.llm import ModelClient
    from pgrag_dag.testing.stub_server import StubServer
    from tests.graph.test_communities import hierarchy_graph, report_answer

    def parents_fail(messages: list[dict[str, str]]) -> str:
        if messages[0]["content"] == PARENT_REPORT_SYSTEM:
            return "no report today"
        return report_answer(messages)

    with StubServer(parents_fail) as server:
        client = ModelClient(
            pg_dsn,
            LLMSettings(
                models=[f"openai/stub-{uuid.uuid4().hex[:12]}"],
                api_base=server.base_url,
                api_key="x",
                deadline_s=10,
                max_retries=0,
            ),
        )
        try:
            ents, rels = hierarchy_graph()
            settings = CommunitySettings(levels=1)
            clusters = cm.detect_communities(ents, rels, settings=settings)
            reports, _ = write_reports(clusters, ents, rels, client)
            failures: list[str] = []
            parents, _ = cm.build_hierarchy(
                clusters, rels, reports, client, settings=settings, entities=ents, failures=failures
            )
        finally:
            client.close()
    assert parents.height == 0 and failures
    assert re.fullmatch(
        r"level 1 communities \[\d+, \d+\]: ValueError: .* "
        r"\[members: 6 entities: Entity \d\d(, Entity \d\d){5}\]",
        failures[0],
    ), failures[0]
