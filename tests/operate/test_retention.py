"""Retention as demotion and explicit deletion (paper §6.1; issue 14 items 3 and 4)."""

from __future__ import annotations

import json
import math
from typing import Any

import dagster as dg
import psycopg
import pytest
from psycopg import sql
from typer.testing import CliRunner

from pgrag_dag.assets.definitions import build_defs
from pgrag_dag.assets.partitions import SPACES
from pgrag_dag.assets.retention import retention_job
from pgrag_dag.cli import app
from pgrag_dag.config import TelemetrySettings
from pgrag_dag.errors import ConfigurationError, DeletionRefusedError
from pgrag_dag.names import partition_key
from pgrag_dag.operate import deletion, retention
from pgrag_dag.operate.changes import community_lag
from pgrag_dag.pipeline import index_documents, stage_resolved_entities
from pgrag_dag.pipeline.community_stages import stage_communities
from pgrag_dag.query import QueryParam, query_data
from pgrag_dag.query import telemetry as coverage
from pgrag_dag.resources.engine import PgragResource
from pgrag_dag.store import db
from pgrag_dag.store.schema import schema_for
from tests.fix_corpus import SmallCorpus

runner = CliRunner()
NARROW = {"top_k": 1, "max_hops": 1, "relation_channels": ["traversal"]}


def _rows(dsn: str, realm: str, query: str, args: Any = ()) -> list[tuple]:
    with db.connect(dsn) as conn:
        cur = conn.execute(sql.SQL(query).format(s=sql.Identifier(schema_for(realm))), args)
        return cur.fetchall() if cur.description else []


@pytest.fixture
def indexed(small_corpus: SmallCorpus, realm: str, monkeypatch: pytest.MonkeyPatch) -> SmallCorpus:
    """The small corpus indexed into ``realm.main`` with communities; coverage telemetry on in its config."""
    small_corpus.config.write_text(small_corpus.config.read_text() + "telemetry:\n  coverage: true\n")
    monkeypatch.setenv("PGRAG_CONFIG", str(small_corpus.config))
    index_documents(small_corpus.engine(), realm, "main")
    return small_corpus


def _ask(corpus: SmallCorpus, realm: str, question: str) -> Any:
    engine = corpus.engine()
    res = query_data(
        question,
        QueryParam(space="main", mode="local", **NARROW),
        dsn=engine.dsn,
        realm=realm,
        embedder=engine.embedder(),
        telemetry=TelemetrySettings(coverage=True),
    )
    assert coverage.writer_for(engine.dsn).flush(10)
    return res


def _entity(dsn: str, realm: str, name: str) -> tuple[int, Any, Any]:
    (row,) = _rows(
        dsn, realm, "SELECT id, archived_at, dormant_since FROM {s}.entities WHERE name = %s", (name,)
    )
    return row


# -- retention -------------------------------------------------------------------------------------


def test_retention_refuses_without_telemetry_or_before_any_event(indexed: SmallCorpus, realm: str) -> None:
    with pytest.raises(
        ConfigurationError, match="needs coverage telemetry, which is off: recency and frequency"
    ):
        retention.plan(indexed.engine(telemetry={"coverage": False}), realm, "main")
    with pytest.raises(ConfigurationError, match="no query of the space has been recorded yet"):
        retention.plan(indexed.engine(), realm, "main")
    out = runner.invoke(app, ["retention", f"{realm}.main"])
    assert out.exit_code == 2 and "ConfigurationError" in out.output and "recorded" in out.output


def test_a_dry_run_lists_the_lowest_scores_with_their_components_and_changes_nothing(
    indexed: SmallCorpus, realm: str
) -> None:
    dsn = indexed.engine().dsn
    _ask(indexed, realm, "Difference Engine")
    _ask(indexed, realm, "Difference Engine")
    _ask(indexed, realm, "Ada Lovelace")
    before = _rows(dsn, realm, "SELECT id, archived_at, dormant_since FROM {s}.entities ORDER BY id")
    plan = retention.plan(indexed.engine(retention={"archive_fraction": 0.5}), realm, "main")
    assert plan["dry_run"] and plan["events"] == 3
    assert len(plan["archive"]) == math.floor(0.5 * plan["live"]) > 0
    events = {}
    for (ids,) in _rows(dsn, realm, "SELECT entity_ids FROM {s}.query_events"):
        for i in ids:
            events[i] = events.get(i, 0) + 1
    most = max(events.values())
    for e in plan["archive"]:
        assert set(e["components"]) == {"recency", "frequency", "degree", "age"}
        assert all(0 <= v <= 1 for v in e["components"].values())
        assert e["events"] == events.get(e["id"], 0)
        assert e["components"]["frequency"] == round(math.log1p(e["events"]) / math.log1p(most), 4)
        assert (e["components"]["recency"] == 0) == (e["events"] == 0)
    assert [e["score"] for e in plan["archive"]] == sorted(e["score"] for e in plan["archive"])
    w = indexed.settings().retention
    for e in plan["archive"]:
        c = e["components"]
        mean = (
            w.w_recency * c["recency"]
            + w.w_frequency * c["frequency"]
            + w.w_degree * c["degree"]
            + w.w_age * c["age"]
        ) / (w.w_recency + w.w_frequency + w.w_degree + w.w_age)
        assert abs(e["score"] - mean) < 1e-3
    live = {i for (i,) in _rows(dsn, realm, "SELECT id FROM {s}.entities WHERE dormant_since IS NULL")}
    never = live - set(events)
    assert never and plan["archive"][0]["id"] in never and plan["archive"][0]["events"] == 0  # lowest first
    assert max(events, key=lambda i: events[i]) not in {
        e["id"] for e in plan["archive"]
    }  # the most retrieved stays
    assert _rows(dsn, realm, "SELECT id, archived_at, dormant_since FROM {s}.entities ORDER BY id") == before
    out = runner.invoke(app, ["retention", f"{realm}.main", "--json"])
    assert out.exit_code == 0, out.output
    assert [e["name"] for e in json.loads(out.output)["archive"]] == [
        e["name"] for e in retention.plan(indexed.engine(), realm, "main")["archive"]
    ]


def test_archiving_withholds_entities_from_queries_and_communities_until_unarchived(
    indexed: SmallCorpus, realm: str
) -> None:
    engine = indexed.engine(retention={"archive_fraction": 0.5})
    dsn = engine.dsn
    _ask(indexed, realm, "Ada Lovelace")
    plan = retention.plan(engine, realm, "main")
    done = retention.apply(engine, realm, "main")
    assert done["archived"] == len(plan["archive"]) == len(done["archive"]) > 0 and not done["dry_run"]
    gone = {e["id"]: e["name"] for e in done["archive"]}
    for _i, name in gone.items():
        _, archived_at, dormant_since = _entity(dsn, realm, name)
        assert archived_at is not None and dormant_since is not None
    log = _rows(
        dsn, realm, "SELECT object_id FROM {s}.belief_log WHERE kind = 'entity' AND event = 'archived'"
    )
    assert sorted(i for (i,) in log) == sorted(gone)
    assert _rows(
        dsn,
        realm,
        "SELECT count(*) FROM {s}.entity_belief WHERE entity_id = ANY(%s) AND believed_to IS NULL",
        (list(gone),),
    ) == [(0,)]
    # withheld from retrieval: no query returns them, nor a relation touching them
    for name in gone.values():
        res = query_data(
            name, QueryParam(space="main", mode="mix"), dsn=dsn, realm=realm, embedder=engine.embedder()
        )
        assert not {e["id"] for e in res.entities} & set(gone)
        assert not {r[k] for r in res.relations for k in ("subject_id", "object_id")} & set(gone)
    # and from community construction; the next resolution run does not revive them
    stage_communities(engine, realm, "main")
    members = {e for (e,) in _rows(dsn, realm, "SELECT entity_id FROM {s}.community_members")}
    assert members and not members & set(gone)
    stage_resolved_entities(engine, realm, "main")
    assert all(_entity(dsn, realm, n)[1] is not None for n in gone.values())
    # unarchive: live again (a chunk still mentions it), recorded, a new interval
    first = next(iter(gone.values()))
    out = runner.invoke(app, ["unarchive", f"{realm}.main", first.upper(), "--json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["unarchived"] == [
        {"id": _entity(dsn, realm, first)[0], "name": first, "revived": True}
    ]
    i, archived_at, dormant_since = _entity(dsn, realm, first)
    assert archived_at is None and dormant_since is None
    assert _rows(
        dsn,
        realm,
        "SELECT event FROM {s}.belief_log WHERE kind = 'entity' AND object_id = %s ORDER BY seq",
        (i,),
    )[-2:] == [("archived",), ("unarchived",)]
    assert _rows(
        dsn,
        realm,
        "SELECT count(*) FROM {s}.entity_belief WHERE entity_id = %s AND believed_to IS NULL",
        (i,),
    ) == [(1,)]
    res = query_data(
        first, QueryParam(space="main", mode="local"), dsn=dsn, realm=realm, embedder=engine.embedder()
    )
    assert i in {e["id"] for e in res.entities}
    with pytest.raises(ConfigurationError, match="has no entity named 'Nobody'"):
        retention.unarchive(engine, realm, "main", ["Nobody"])


def test_the_retention_job_dry_runs_by_default_and_archives_when_told(
    indexed: SmallCorpus, realm: str
) -> None:
    indexed.config.write_text(indexed.config.read_text() + "retention:\n  archive_fraction: 0.5\n")
    _ask(indexed, realm, "Ada Lovelace")
    key = partition_key(realm, "main")
    resources = {"pgrag": PgragResource(config_path=str(indexed.config))}
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(SPACES.name, [key])
        dry = retention_job.execute_in_process(instance=instance, partition_key=key, resources=resources)
        assert dry.success
        out = dry.output_for_node("retention_op")
        assert out["dry_run"] and out["archive"]
        assert _rows(
            indexed.engine().dsn, realm, "SELECT count(*) FROM {s}.entities WHERE archived_at IS NOT NULL"
        ) == [(0,)]
        real = retention_job.execute_in_process(
            instance=instance,
            partition_key=key,
            resources=resources,
            run_config={"ops": {"retention_op": {"config": {"dry_run": False}}}},
        )
        assert real.success and real.output_for_node("retention_op")["archived"] == len(out["archive"])
        # archiving moved no relation, yet the communities are stale (issue 28 item 4) ...
        lag = community_lag(indexed.engine(), realm, "main")
        assert lag.communities_stale and lag.graph_writes_since_communities >= 1
        assert lag.changed_relations_since_communities == 0
        # ... and automation rebuilds them: the run-status sensor, evaluated on the run that archived,
        # requests the partition's communities_rebuild, which clears the lag
        defs = build_defs(pgrag=resources["pgrag"])
        sensor = next(s for s in defs.sensors if s.name == "communities_after_retention")
        success = next(
            e
            for e in instance.all_logs(real.run_id)
            if e.dagster_event is not None and e.dagster_event.event_type == dg.DagsterEventType.RUN_SUCCESS
        )
        context = dg.build_run_status_sensor_context(
            sensor_name=sensor.name,
            dagster_event=success.dagster_event,
            dagster_instance=instance,
            dagster_run=real.dagster_run,
        )
        request = sensor(context)  # type: ignore[operator]
        assert isinstance(request, dg.RunRequest) and request.partition_key == key
        rebuilt = defs.resolve_job_def("communities_rebuild").execute_in_process(
            instance=instance, partition_key=request.partition_key
        )
        assert rebuilt.success
        assert not community_lag(indexed.engine(), realm, "main").communities_stale
    assert _rows(
        indexed.engine().dsn, realm, "SELECT count(*) FROM {s}.entities WHERE archived_at IS NOT NULL"
    ) == [(len(out["archive"]),)]


# -- explicit deletion -----------------------------------------------------------------------------


def test_forgetting_lets_explicit_deletion_remove_belief_log_rows(indexed: SmallCorpus, realm: str) -> None:
    from pgrag_dag.store import history

    with db.connect(indexed.engine().dsn) as conn:
        with conn.transaction(), history.forgetting(conn):
            assert (
                conn.execute(
                    sql.SQL("DELETE FROM {}.belief_log").format(sql.Identifier(schema_for(realm)))
                ).rowcount
                > 0
            )
        with (
            pytest.raises(psycopg.errors.InsufficientPrivilege),
            conn.transaction(),
        ):  # never outside forgetting
            conn.execute(sql.SQL("DELETE FROM {}.entity_belief").format(sql.Identifier(schema_for(realm))))


def test_an_entity_still_mentioned_is_not_deleted_and_the_refusal_names_the_documents(
    indexed: SmallCorpus, realm: str
) -> None:
    dsn = indexed.engine().dsn
    with pytest.raises(
        DeletionRefusedError,
        match=r"cannot delete entity 'Ada Lovelace': 2 document\(s\) still mention "
        r"it \('01_babbage.txt', '02_lovelace.txt'\)",
    ) as err:
        deletion.delete_entity(indexed.engine(), realm, "main", "ada lovelace")
    assert "\n" not in str(err.value)
    assert _entity(dsn, realm, "Ada Lovelace")[0]
    out = runner.invoke(app, ["delete", "entity", f"{realm}.main", "Ada Lovelace", "--yes"])
    assert out.exit_code == 2 and "DeletionRefusedError" in out.output


def _history(dsn: str, realm: str, entity: int, rels: list[int]) -> dict[str, int]:
    return {
        "belief_log": _rows(
            dsn,
            realm,
            """SELECT count(*) FROM {s}.belief_log WHERE (kind = 'entity' AND object_id = %s)
                                           OR (kind = 'relation' AND object_id = ANY(%s))""",
            (entity, rels),
        )[0][0],
        "relation_belief": _rows(
            dsn, realm, "SELECT count(*) FROM {s}.relation_belief WHERE relation_id = ANY(%s)", (rels,)
        )[0][0],
        "entity_belief": _rows(
            dsn, realm, "SELECT count(*) FROM {s}.entity_belief WHERE entity_id = %s", (entity,)
        )[0][0],
    }


def test_deleting_an_unmentioned_entity_removes_it_its_relations_and_their_history(
    indexed: SmallCorpus, realm: str
) -> None:
    engine = indexed.engine()
    dsn = engine.dsn
    out = runner.invoke(app, ["delete", "document", f"{realm}.main", "01_babbage.txt"])
    assert out.exit_code == 1 and "would remove document" in out.output
    assert _rows(dsn, realm, "SELECT count(*) FROM {s}.documents WHERE doc_key = '01_babbage.txt'")[0][0] > 0
    out = runner.invoke(app, ["delete", "document", f"{realm}.main", "01_babbage.txt", "--yes", "--json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert (
        doc["removed"]["documents"] == doc["history"]["documents_removed"] > 0
        and doc["history"]["belief_log"] == 1
    )
    assert _rows(dsn, realm, "SELECT count(*) FROM {s}.documents WHERE doc_key = '01_babbage.txt'") == [(0,)]
    ent, _, dormant = _entity(dsn, realm, "Difference Engine")  # mentioned only by the removed document
    assert dormant is not None
    # the report counts every belief change the removal caused, the graph stages' included
    assert doc["changes"]["documents_removed"] == 1 and doc["changes"]["entities_dormant"] >= 1
    assert doc["changes"]["relations_dormant"] >= 1 and doc["since"]
    rels = [
        r
        for (r,) in _rows(
            dsn, realm, "SELECT id FROM {s}.relations WHERE %s IN (source_id, target_id)", (ent,)
        )
    ]
    history = _history(dsn, realm, ent, rels)
    assert rels and all(history.values())
    dry = runner.invoke(app, ["delete", "entity", f"{realm}.main", "Difference Engine", "--json"])
    assert dry.exit_code == 1, dry.output
    planned = json.loads(dry.output)
    assert _entity(dsn, realm, "Difference Engine")[0] == ent  # a dry run removes nothing
    out = runner.invoke(app, ["delete", "entity", f"{realm}.main", "Difference Engine", "--yes", "--json"])
    assert out.exit_code == 0, out.output
    done = json.loads(out.output)
    assert done["removed"] == planned["removed"] and not done["dry_run"]
    assert {k: done["removed"][k] for k in history} == history
    assert (done["removed"]["entities"], done["removed"]["relations"]) == (1, len(rels))
    assert done["removed"]["documents_removed.entity_ids"] > 0  # the archived chunks no longer name it
    assert _rows(dsn, realm, "SELECT count(*) FROM {s}.entities WHERE id = %s", (ent,)) == [(0,)]
    assert _rows(dsn, realm, "SELECT count(*) FROM {s}.relations WHERE id = ANY(%s)", (rels,)) == [(0,)]
    assert _rows(
        dsn, realm, "SELECT count(*) FROM {s}.documents_removed WHERE %s = ANY(entity_ids)", (ent,)
    ) == [(0,)]
    left = _rows(
        dsn,
        realm,
        """SELECT event, count(*) FROM {s}.belief_log WHERE (kind = 'entity' AND object_id = %s)
                                OR (kind = 'relation' AND object_id = ANY(%s)) GROUP BY 1""",
        (ent, rels),
    )
    assert left == [("deleted", 1 + len(rels))] == [("deleted", done["tombstones"])]  # only the tombstones
    assert _rows(dsn, realm, "SELECT count(*) FROM {s}.entity_belief WHERE entity_id = %s", (ent,)) == [(0,)]
    (indexed.root / "docs" / "01_babbage.txt").unlink()  # removed from the sources too: nothing re-creates it
    index_documents(engine, realm, "main", communities=False)
    assert _rows(dsn, realm, "SELECT count(*) FROM {s}.entities WHERE name = 'Difference Engine'") == [(0,)]


def test_deleting_a_space_removes_every_row_of_it_and_leaves_other_spaces(
    indexed: SmallCorpus, realm: str
) -> None:
    import yaml

    cfg = yaml.safe_load(indexed.config.read_text())
    cfg["realms"][realm]["spaces"]["other"] = cfg["realms"][realm]["spaces"]["main"]
    indexed.config.write_text(yaml.safe_dump(cfg))
    engine = indexed.engine()
    dsn = engine.dsn
    index_documents(engine, realm, "other", communities=False)
    _ask(indexed, realm, "Ada Lovelace")
    tables = [
        t
        for (t,) in _rows(
            dsn,
            realm,
            """SELECT table_name FROM information_schema.columns c
                                                 JOIN information_schema.tables USING (table_schema,
                                                 table_name)
                                                WHERE table_schema = %s AND column_name = 'space'
                                                AND table_type = 'BASE TABLE'""",
            (schema_for(realm),),
        )
    ]

    def counts(space: str) -> dict[str, int]:
        return {
            t: _rows(dsn, realm, f"SELECT count(*) FROM {{s}}.{t} WHERE space = %s", (space,))[0][0]
            for t in tables
        }

    main, other = counts("main"), counts("other")
    assert main["belief_log"] and main["query_events"] and main["communities"] and other["entities"]
    out = runner.invoke(app, ["delete", "space", f"{realm}.main"])
    assert out.exit_code == 1 and "would remove space" in out.output and counts("main") == main
    out = runner.invoke(app, ["delete", "space", f"{realm}.main", "--yes", "--json"])
    assert out.exit_code == 0, (out.output, out.exception)
    assert json.loads(out.output)["removed"] == main  # exactly what was there, history included
    assert not any(counts("main").values())
    assert counts("other") == other


def test_deleting_a_realm_drops_its_schema_and_registry_row(indexed: SmallCorpus, realm: str) -> None:
    dsn = indexed.engine().dsn
    out = runner.invoke(app, ["delete", "realm", realm])
    assert out.exit_code == 1 and f"would remove realm {realm}" in out.output
    entities = _rows(dsn, realm, "SELECT count(*) FROM {s}.entities")[0][0]
    out = runner.invoke(app, ["delete", "realm", realm, "--yes", "--json"])
    assert out.exit_code == 0, out.output
    done = json.loads(out.output)
    assert done["removed"]["entities"] == entities and done["removed"]["pgrag__control.realms"] == 1
    with db.connect(dsn) as conn:
        assert conn.execute("SELECT to_regnamespace(%s)", (schema_for(realm),)).fetchone() == (None,)
        assert conn.execute(
            "SELECT count(*) FROM pgrag__control.realms WHERE realm = %s", (realm,)
        ).fetchone() == (0,)
    out = runner.invoke(app, ["delete", "realm", realm, "--yes"])
    assert out.exit_code == 2 and "does not exist" in out.output
