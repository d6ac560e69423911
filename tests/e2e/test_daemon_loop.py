"""The daemon loop end to end (issue 18 item 1): ``pgrag ui`` (``dg dev``: webserver and daemon) on a
project of two spaces; the daemon's first source-sensor tick materialises both never-materialised
spaces, then one source file of one space is edited and the daemon alone — the source sensor's run of
``chunks``, the automation sensor's runs downstream — re-materialises that partition's chain. Asserted
through GraphQL (runs, their partition tags and who requested them; materialisations per partition)
and the database (the graph of the other space unchanged, the changed space's communities rebuilt),
and through the stub model's request log (only the changed chunks were extracted)."""

from __future__ import annotations

import re
import time
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from pgrag_dag.store import db, schema
from tests.fix_corpus import CHUNK, DOCS, SmallCorpus
from tests.fix_daemon import STAGES, Daemon, pgrag_ui, storage_db, write_project  # noqa: F401  (storage_db: a fixture)
from tests.graph_snapshot import graph_snapshot

pytestmark = [pytest.mark.dagster, pytest.mark.slow]

SENSOR_INTERVAL_S = 5
"""``dagster.sensor_interval_s`` for the test (default 30): Dagster's daemon loop runs every 5 s anyway."""
ADDED = "Charles Babbage designed the Difference Engine in London."
"""The paragraph appended to the edited document: two entities new to its space."""


def _chunks(conn: psycopg.Connection, realm: str, space: str) -> set[str]:
    s = sql.Identifier(schema.schema_for(realm))
    return {
        r[0]
        for r in conn.execute(sql.SQL("SELECT text FROM {}.documents WHERE space = %s").format(s), (space,))
    }


def _members(conn: psycopg.Connection, realm: str, space: str) -> set[str]:
    s = sql.Identifier(schema.schema_for(realm))
    q = sql.SQL("""SELECT DISTINCT e.name FROM {s}.communities c
                   JOIN {s}.community_members m ON m.community_id = c.id
                   JOIN {s}.entities e ON e.id = m.entity_id WHERE c.space = %s""").format(s=s)
    return {r[0] for r in conn.execute(q, (space,))}


def _counts(daemon: Daemon, partition: str) -> dict[str, int]:
    return {stage: len(daemon.materializations(stage, partition)) for stage in STAGES}


def test_an_edited_source_file_re_materialises_only_its_partition_through_the_daemon(
    small_corpus: SmallCorpus,
    realm: str,
    pg_dsn: str,
    storage_db: str,
    tmp_path: Path,
) -> None:
    alpha, beta = f"{realm}.alpha", f"{realm}.beta"
    config = write_project(
        small_corpus.config,
        realm,
        {
            "alpha": {"02_lovelace.txt": DOCS["02_lovelace.txt"]},
            "beta": {"01_babbage.txt": DOCS["01_babbage.txt"]},
        },
        dagster={
            "instance_storage": "postgres",
            "storage_database": storage_db,
            "sensor_interval_s": SENSOR_INTERVAL_S,
            "llm_pool_limit": 2,
            "max_concurrent_runs": 2,
            "executor": "in_process",
        },
    )
    started = time.monotonic()
    with pgrag_ui(config, tmp_path / "ui.log") as daemon, db.connect(pg_dsn, autocommit=True) as conn:
        loaded = time.monotonic() - started
        # the source sensor's first tick adds both partitions and requests them (never materialised):
        # automation takes each chain to its end
        daemon.wait_idle(
            2 * SENSOR_INTERVAL_S + 5,
            150,
            done=lambda: all(all(_counts(daemon, p).values()) for p in (alpha, beta)),
        )
        first = daemon.runs()
        assert all(r["status"] == "SUCCESS" for r in first), first
        assert {r["tags"].get("dagster/partition") for r in first} == {alpha, beta}
        initial = time.monotonic() - started - loaded
        before = {p: _counts(daemon, p) for p in (alpha, beta)}
        beta_graph = graph_snapshot(pg_dsn, realm, "beta")
        alpha_chunks, alpha_members = _chunks(conn, realm, "alpha"), _members(conn, realm, "alpha")
        assert alpha_members and "Difference Engine" not in alpha_members
        asked = len(small_corpus.server.requests)

        edited = time.monotonic()
        doc = config.parent / "alpha" / "02_lovelace.txt"
        doc.write_text(doc.read_text(encoding="utf-8") + "\n\n" + ADDED, encoding="utf-8")
        daemon.wait_idle(
            2 * SENSOR_INTERVAL_S + 5,
            120,
            done=lambda: len(daemon.materializations("communities", alpha)) > before[alpha]["communities"],
        )
        loop = time.monotonic() - edited
        runs = [r for r in daemon.runs() if r["runId"] not in {f["runId"] for f in first}]
        after = {p: _counts(daemon, p) for p in (alpha, beta)}
        new_chunks = _chunks(conn, realm, "alpha") - alpha_chunks
        members = _members(conn, realm, "alpha")
        prompts = small_corpus.chat_requests()[
            len(
                [r for r in small_corpus.server.requests[:asked] if r["path"].endswith("/chat/completions")]
            ) :
        ]

    # only the changed partition ran: the source sensor's run of chunks, then automation's runs downstream
    assert runs and all(r["status"] == "SUCCESS" for r in runs), runs
    assert {r["tags"].get("dagster/partition") for r in runs} == {alpha}
    assert (runs[0]["tags"].get("dagster/sensor_name"), runs[0]["assets"]) == ("source_sensor", ["chunks"])
    assert {r["tags"].get("dagster/sensor_name") for r in runs[1:]} == {"pgrag_automation"}
    assert set().union(*(r["assets"] for r in runs)) >= {
        "chunks",
        "raw_extractions",
        "relations",
        "communities",
    }
    # the other partition untouched: no new materialisation, the same graph
    assert after[beta] == before[beta]
    assert graph_snapshot(pg_dsn, realm, "beta") == beta_graph
    assert all(
        after[alpha][s] > before[alpha][s] for s in ("chunks", "raw_extractions", "relations", "communities")
    )
    # only the changed chunks reached the model, each of them did; communities were rebuilt with the new
    # entities
    assert new_chunks and all(ADDED.split()[0] in c or ADDED[-20:] in c for c in new_chunks), new_chunks
    extracted = [CHUNK.search(p["body"]["messages"][-1]["content"]) for p in prompts]
    gleaned = [
        p
        for p, m in zip(prompts, extracted)
        if m is None
        and p["body"]["messages"][-1]["content"].startswith("Some entities and triples were missed")
    ]
    asked_about = {m.group(1) for m in extracted if m is not None}
    assert asked_about == new_chunks, (asked_about, new_chunks)
    reports = [p for p, m in zip(prompts, extracted) if m is None and p not in gleaned]
    assert all(p["body"]["messages"][0]["content"].startswith("You write a report") for p in reports)
    assert "Difference Engine" in members, members
    assert any(re.search(r"\bDifference Engine\b", p["body"]["messages"][-1]["content"]) for p in reports)
    print(
        f"\ndaemon loop: code location loaded in {loaded:.0f} s, both spaces materialised by the daemon in "
        f"{initial:.0f} s ({len(first)} runs), the edit re-materialised in {loop:.0f} s ({len(runs)} runs, "
        f"{len(asked_about)} chunk(s) extracted, {len(reports)} report(s) written)"
    )
