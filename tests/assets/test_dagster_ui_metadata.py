"""What the Dagster UI shows about the stage assets (issue 16 item 9): ``dagster/row_count`` is the rows the
asset holds for the partition (and says what it counts), every check result names its partition, and the
assets carry ``dagster/column_schema`` (from their contracts) and ``dagster/column_lineage``."""

from __future__ import annotations

import dagster as dg
import psycopg
import pytest
from psycopg import sql

from pgrag_dag.assets.changes import COMMUNITY_CHECKS
from pgrag_dag.assets.partitions import add_partitions
from pgrag_dag.assets.stages import ASSETS
from pgrag_dag.resources.engine import PgragResource
from pgrag_dag.store import db
from pgrag_dag.store.schema import schema_for
from tests.fix_corpus import SmallCorpus

pytestmark = pytest.mark.dagster

# what each stage holds, counted here independently of pgrag_dag.store.row_counts
HELD_SQL = {
    "chunks": "SELECT count(*) FROM {s}.documents WHERE space = %(p)s",
    "raw_extractions": "SELECT count(*) FROM {s}.raw_extractions WHERE space = %(p)s",
    "gated_triples": "SELECT count(*) FROM {s}.gate_decisions WHERE space = %(p)s",
    "resolved_entities": "SELECT count(*) FROM {s}.entities WHERE space = %(p)s",
    "relations": "SELECT count(*) FROM {s}.relations WHERE space = %(p)s",
    "embeddings": """SELECT (SELECT count(embedding) FROM {s}.documents WHERE space = %(p)s)
                          + (SELECT count(embedding) FROM {s}.entities WHERE space = %(p)s)
                          + (SELECT count(embedding) FROM {s}.relations WHERE space = %(p)s)""",
    "communities": "SELECT count(*) FROM {s}.communities WHERE space = %(p)s AND level = 0",
    "community_hierarchy": "SELECT count(*) FROM {s}.communities WHERE space = %(p)s AND level > 0",
}
TABLE = {
    "chunks": "documents",
    "raw_extractions": "raw_extractions",
    "gated_triples": "gate_decisions",
    "resolved_entities": "entities",
    "relations": "relations",
    "communities": "communities",
    "community_hierarchy": "communities",
}


def _materialize(corpus: SmallCorpus, instance: dg.DagsterInstance, key: str) -> dg.ExecuteInProcessResult:
    result = dg.materialize(
        [*ASSETS, *COMMUNITY_CHECKS],
        partition_key=key,
        instance=instance,
        resources={"pgrag": PgragResource(config_path=str(corpus.config))},
    )
    assert result.success
    return result


def _held(conn: psycopg.Connection, realm: str, stage: str) -> int:
    row = conn.execute(
        sql.SQL(HELD_SQL[stage]).format(s=sql.Identifier(schema_for(realm))), {"p": "main"}
    ).fetchone()
    assert row is not None
    return int(row[0])


def _row_counts(result: dg.ExecuteInProcessResult) -> dict[str, dict[str, object]]:
    out = {}
    for event in result.get_asset_materialization_events():
        meta = event.materialization.metadata  # type: ignore[union-attr]
        out[event.asset_key.to_user_string()] = {
            k: v.value
            for k, v in meta.items()
            if k in ("dagster/row_count", "row_count_counts", "rows_changed")
        }
    return out


def _columns(conn: psycopg.Connection, realm: str, table: str) -> set[str]:
    rows = conn.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = %s AND table_name = %s",
        (schema_for(realm), table),
    ).fetchall()
    return {r[0] for r in rows}


def test_row_count_is_what_each_asset_holds_after_a_full_and_an_incremental_run(
    small_corpus: SmallCorpus, realm: str
) -> None:
    key = f"{realm}.main"
    dsn = small_corpus.engine().dsn
    with dg.instance_for_test() as instance:
        add_partitions(instance, [key])
        first = _row_counts(_materialize(small_corpus, instance, key))
        with db.connect(dsn) as conn:
            assert {s: m["dagster/row_count"] for s, m in first.items()} == {
                s: _held(conn, realm, s) for s in HELD_SQL
            }
        assert all(first[s]["dagster/row_count"] > 0 for s in HELD_SQL if s != "community_hierarchy"), first
        assert first["chunks"]["row_count_counts"] == "chunks stored in the space (documents rows)"
        assert "relations rows" in str(first["relations"]["row_count_counts"])
        # one document added: few rows change, the row counts are still what the tables hold
        (small_corpus.root / "docs" / "03_menabrea.txt").write_text(
            "Luigi Menabrea wrote about the Analytical Engine. "
            "Ada Lovelace translated the paper of Luigi Menabrea."
        )
        second = _row_counts(_materialize(small_corpus, instance, key))
        with db.connect(dsn) as conn:
            assert {s: m["dagster/row_count"] for s, m in second.items()} == {
                s: _held(conn, realm, s) for s in HELD_SQL
            }
        assert second["chunks"]["dagster/row_count"] > first["chunks"]["dagster/row_count"]
        for stage in ("chunks", "gated_triples", "resolved_entities", "relations", "embeddings"):
            changed = second[stage]["rows_changed"]
            assert isinstance(changed, int) and 0 < changed < second[stage]["dagster/row_count"], (
                stage,
                second[stage],
            )
        assert second["chunks"]["rows_changed"] == 1  # the new document's one chunk


def test_every_check_result_names_its_partition(small_corpus: SmallCorpus, realm: str) -> None:
    key = f"{realm}.main"
    with dg.instance_for_test() as instance:
        add_partitions(instance, [key, f"{realm}.other"])
        evaluations = _materialize(small_corpus, instance, key).get_asset_check_evaluations()
        assert len(evaluations) == 17
        assert {(e.partition, e.metadata["partition"].value) for e in evaluations} == {(key, key)}
        assert all(e.description and e.description.startswith(f"{key}: ") for e in evaluations)
        # the instance's check history (what the UI's Checks tab lists) keeps the partition per result
        check = dg.AssetCheckKey(dg.AssetKey("relations"), "graph_quality")
        history = instance.event_log_storage.get_asset_check_execution_history(check, limit=5)
        assert [r.event.asset_check_evaluation.partition for r in history] == [key]  # type: ignore[union-attr]


def test_the_assets_carry_their_column_schema_and_column_lineage(
    small_corpus: SmallCorpus, realm: str
) -> None:
    by_name = {a.key.to_user_string(): a for a in ASSETS}
    schema = by_name["relations"].specs_by_key[dg.AssetKey("relations")].metadata["dagster/column_schema"]
    columns = {c.name: c for c in schema.columns}
    assert list(columns) == ["source_id", "target_id", "predicate", "negated", "weight"]  # RelationContract's
    assert columns["weight"].type == "Int64" and columns["weight"].constraints.other == [
        "greater_than_or_equal_to(min_value=1)"
    ]
    assert "unique (source_id, predicate, target_id, negated)" in schema.constraints.other
    raw = (
        by_name["raw_extractions"]
        .specs_by_key[dg.AssetKey("raw_extractions")]
        .metadata["dagster/column_schema"]
    )
    assert {c.name: c.constraints.nullable for c in raw.columns}["parsed"] is True

    key = f"{realm}.main"
    with dg.instance_for_test() as instance:
        add_partitions(instance, [key])
        mats = {
            e.asset_key.to_user_string(): e.materialization.metadata  # type: ignore[union-attr]
            for e in _materialize(small_corpus, instance, key).get_asset_materialization_events()
        }
    lineage = {
        s: m["dagster/column_lineage"].value.deps_by_column
        for s, m in mats.items()
        if "dagster/column_lineage" in m
    }
    assert sorted(lineage) == sorted(set(HELD_SQL) - {"chunks"})

    def deps(stage: str, column: str) -> set[str]:
        return {f"{d.asset_key.to_user_string()}.{d.column_name}" for d in lineage[stage][column]}

    assert deps("gated_triples", "predicate") == {"raw_extractions.parsed"}
    assert deps("raw_extractions", "parsed") == {"chunks.text", "chunks.title"}
    assert deps("resolved_entities", "name") == {"gated_triples.name", "gated_triples.aliases"}
    assert "resolved_entities.name" in deps("relations", "source_id") and "gated_triples.subject" in deps(
        "relations", "source_id"
    )
    assert deps("embeddings", "relations.embedding") == {"relations.rendered"}
    assert deps("community_hierarchy", "report") == {"communities.report"}
    # every column named is a real column: of the stage's table (or ``table.column``) and of the upstream's
    with db.connect(small_corpus.engine().dsn) as conn:
        for stage, cols in lineage.items():
            for column, ds in cols.items():
                table, col = column.split(".", 1) if "." in column else (TABLE[stage], column)
                assert col in _columns(conn, realm, table), (stage, column)
                for d in ds:
                    up = d.asset_key.to_user_string()
                    upstream = _columns(conn, realm, TABLE[up]) if up in TABLE else set()
                    contract = {
                        c.name
                        for c in by_name[up]
                        .specs_by_key[d.asset_key]
                        .metadata["dagster/column_schema"]
                        .columns
                    }
                    assert d.column_name in upstream | contract, (stage, column, up, d.column_name)
