"""Structural metrics of Table 6 / Table 7 / §8.8 / §8.15 (issue 17 item 2): computed on a planted graph whose
values are counted by hand, and the harness replaying a slice of the demo cassette, its table equal to SQL
counts."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from evaluation import plots, structure
from evaluation.structure import Arm, parse_arm
from evaluation.structure_metrics import graph_structure, rating_spread, short_form_fragments
from pgrag_dag.store import schema
from pgrag_dag.store.identifiers import qualified
from pgrag_dag.vocabulary import Vocabulary

ROOT = Path(__file__).resolve().parents[2]


def test_a_short_form_is_a_fragment_beside_exactly_one_long_person_form_in_a_shared_document() -> None:
    names = {
        1: "Charles Babbage",
        2: "Babbage",
        3: "Mr. Whewell",
        4: "William Whewell",
        5: "Ada",
        6: "Ada Lovelace",
        7: "Ada Byron",
        8: "Lovelace",
        9: "Mill",
        10: "Analytical Engine Mill",
        11: "Engine",
    }
    docs = {
        1: ["a"],
        2: ["a"],
        3: ["b"],
        4: ["b"],
        5: ["c"],
        6: ["c"],
        7: ["c"],
        8: ["d"],
        9: ["e"],
        10: ["e"],
        11: ["e"],
    }
    types = {1: "Person", 4: "person", 6: "Person", 7: "Person", 10: "Artifact"}
    # Babbage and Mr. Whewell are fragments; Ada has two long forms; Lovelace shares no document with Ada
    # Lovelace; Mill's long form is no Person (and Engine is its middle word only)
    assert short_form_fragments(names, docs, types) == [
        ("Babbage", "Charles Babbage"),
        ("Mr. Whewell", "William Whewell"),
    ]
    # without types every person-like name may be a long form: Mill beside Analytical Engine Mill counts too
    assert short_form_fragments(names, docs) == [
        ("Babbage", "Charles Babbage"),
        ("Mr. Whewell", "William Whewell"),
        ("Mill", "Analytical Engine Mill"),
    ]


def test_rating_spread_names_the_distinct_values_and_their_range() -> None:
    assert rating_spread([7.0, 9.0, 8.0, 7.0]) == "3 values (7–9)"
    assert rating_spread([8.0, 8.0]) == "1 value (8)" and rating_spread([]) == "no reports"


def _insert(conn: psycopg.Connection, realm: str, table: str, **cols: Any) -> int:
    names = list(cols)
    row = conn.execute(
        sql.SQL("INSERT INTO {} ({}) VALUES ({}) RETURNING id").format(
            qualified(realm, table),
            sql.SQL(", ").join(map(sql.Identifier, names)),
            sql.SQL(", ").join(sql.Placeholder() * len(names)),
        ),
        list(cols.values()),
    ).fetchone()
    assert row is not None
    return int(row[0])


def test_the_metrics_of_a_planted_graph_are_the_hand_counted_values(
    conn: psycopg.Connection, realm: str
) -> None:
    sp = "p"
    doc = {
        k: _insert(
            conn,
            realm,
            "documents",
            space=sp,
            doc_key=k,
            chunk_index=0,
            title=k,
            source=k,
            doc_order=i,
            text="t",
            content_hash=k,
            doc_hash=k,
        )
        for i, k in enumerate(("a.txt", "b.txt"))
    }
    ent = {}
    for name, etype, aliases, where in (
        ("Charles Babbage", "Person", ["Babbage"], "ab"),
        ("Babbage", "Person", [], "a"),
        ("William Whewell", "Person", [], "b"),
        ("Whewell", "Concept", [], "b"),
        ("she", "Person", [], "a"),
        ("Analytical Engine", "Artifact", [], "a"),
        ("Orphan Society", "Organization", [], "b"),
        ("Lovelace", "Person", [], "a"),
    ):
        ent[name] = _insert(conn, realm, "entities", space=sp, name=name, entity_type=etype, aliases=aliases)
        for d in where:
            conn.execute(
                sql.SQL("INSERT INTO {} (space, chunk_id, entity_id) VALUES (%s, %s, %s)").format(
                    qualified(realm, "doc_mentions")
                ),
                (sp, doc[f"{d}.txt"], ent[name]),
            )
    _insert(conn, realm, "entities", space=sp, name="Dormant Thing", dormant_since="now")
    cb, ae = ent["Charles Babbage"], ent["Analytical Engine"]
    for s, p, o, w, neg, dormant in (
        (cb, "designed", ae, 2, False, None),
        (cb, "Designed", ae, 1, False, None),
        (ent["William Whewell"], "worked_with", cb, 1, True, None),
        (ent["she"], "met", cb, 1, False, None),
        (ent["Babbage"], "wrote", ae, 1, False, None),
        (ent["Whewell"], "met", ae, 1, False, None),
        (ent["Lovelace"], "wrote", ae, 1, False, "now"),
    ):
        _insert(
            conn,
            realm,
            "relations",
            space=sp,
            source_id=s,
            target_id=o,
            predicate=p,
            weight=w,
            negated=neg,
            chunk_ids=[doc["a.txt"]],
            dormant_since=dormant,
        )
    for level, size, rating in ((0, 4, 7.0), (0, 2, 7.0), (1, 6, 9.0)):
        _insert(
            conn,
            realm,
            "communities",
            space=sp,
            level=level,
            title=f"c{size}",
            summary="s",
            rating=rating,
            size=size,
            report="r",
            graph_fingerprint="f",
        )
    with conn.transaction():
        m = graph_structure(conn, realm, sp, Vocabulary.build(preset="biography"), chars=20_000)
    assert m["entities"] == 8 and m["relations"] == 6  # the dormant entity and the dormant relation are out
    assert m["distinct_predicates"] == 5 and m["vocabulary_predicate_share"] == round(
        5 / 6, 4
    )  # not "Designed"
    assert m["orphan_entities"] == 2  # Orphan Society; Lovelace (its one relation is dormant)
    assert m["duplicate_edge_rows"] == 2  # designed / Designed between the same two vertices
    assert m["fragmented_short_form_vertices"] == 1  # Babbage: Charles Babbage's declared alias
    assert m["fragmented_graph_vertices"] == 2 and m["fragmented_graph_examples"] == [
        "Babbage / Charles Babbage",
        "Whewell / William Whewell",
    ]  # Whewell is declared nowhere
    assert m["pronoun_entities"] == 1 and m["pronoun_examples"] == ["she"]
    assert m["entities_with_aliases"] == 1 and m["negated_relations"] == 1
    assert (m["corroborated_relations"], m["corroborated_share"]) == (1, round(1 / 6, 4))
    assert m["single_use_predicate_share"] == 0.8  # met twice; designed, Designed, worked_with, wrote once
    assert m["top_predicates"] == ["met (2)", "Designed (1)", "designed (1)", "worked_with (1)", "wrote (1)"]
    assert (m["entities_per_10k_chars"], m["relations_per_10k_chars"], m["labels_per_relation"]) == (
        4.0,
        3.0,
        round(5 / 6, 4),
    )
    assert (m["communities"], m["largest_community_share"], m["rating_spread"]) == (2, 0.5, "1 value (7)")


def test_an_arm_is_a_name_and_a_yaml_fragment() -> None:
    arm = parse_arm("floor={gates: {confidence_floor: 0.9}, graph: {space: {preset: null}}, note: n}")
    assert (arm.name, arm.settings, arm.graph, arm.note) == (
        "floor",
        {"gates": {"confidence_floor": 0.9}},
        {"space": {"preset": None}},
        "n",
    )
    with pytest.raises(ValueError):
        parse_arm("no equals sign")


def _count(conn: psycopg.Connection, query: str, space: str) -> Any:
    s = sql.Identifier(schema.schema_for(structure.REALM))
    row = conn.execute(sql.SQL(query).format(s=s), (space,)).fetchone()
    assert row is not None
    return row[0]


LIVE = "r.space = %s AND r.dormant_since IS NULL AND r.superseded_by IS NULL"


def test_the_harness_replays_a_demo_document_and_its_tables_are_the_sql_counts(
    pg_dsn: str, tmp_path: Path
) -> None:
    corpus = tmp_path / "corpus" / "wikipedia"
    corpus.mkdir(parents=True)
    shutil.copy(ROOT / "corpus" / "wikipedia" / "Analytical_Engine.txt", corpus)
    arms = [Arm("as recorded"), Arm("floor 0.8", {"gates": {"confidence_floor": 0.8}})]
    try:
        record = structure.run(arms, dsn=pg_dsn, out_dir=tmp_path / "out", source_root=tmp_path, name="s")
        results = record.results["arms"]
        with psycopg.connect(pg_dsn) as conn:
            for arm in arms:
                res = results[arm.name]
                m, sp = res["metrics"], res["space"]
                assert res["status"] == "built" and res["model_calls"] == 0 and res["cache_hits"] > 0
                assert (
                    m["chunks_indexed"]
                    == m["chunks"]
                    == _count(conn, "SELECT count(*) FROM {s}.documents WHERE space = %s", sp)
                )
                assert m["entities"] == _count(
                    conn, "SELECT count(*) FROM {s}.entities WHERE space = %s AND dormant_since IS NULL", sp
                )
                assert m["relations"] == _count(
                    conn, f"SELECT count(*) FROM {{s}}.relations r WHERE {LIVE}", sp
                )
                assert m["distinct_predicates"] == _count(
                    conn, f"SELECT count(DISTINCT predicate) FROM {{s}}.relations r WHERE {LIVE}", sp
                )
                assert m["negated_relations"] == _count(
                    conn, f"SELECT count(*) FROM {{s}}.relations r WHERE {LIVE} AND negated", sp
                )
                assert m["corroborated_relations"] == _count(
                    conn, f"SELECT count(*) FROM {{s}}.relations r WHERE {LIVE} AND weight > 1", sp
                )
                assert m["entities_with_aliases"] == _count(
                    conn,
                    "SELECT count(*) FROM {s}.entities WHERE space = %s AND dormant_since IS NULL "
                    "AND aliases <> '{{}}'",
                    sp,
                )
                assert m["orphan_entities"] == _count(
                    conn,
                    f"""SELECT count(*) FROM {{s}}.entities e WHERE e.space = %s
                    AND e.dormant_since IS NULL AND NOT EXISTS (SELECT 1 FROM {{s}}.relations r
                    WHERE {LIVE.replace("%s", "e.space")}
                    AND e.id IN (r.source_id, r.target_id))""",
                    sp,
                )
                assert m["communities"] == _count(
                    conn, "SELECT count(*) FROM {s}.communities WHERE space = %s AND level = 0", sp
                )
                largest = _count(
                    conn, "SELECT max(size) FROM {s}.communities WHERE space = %s AND level = 0", sp
                )
                assert m["largest_community_share"] == round(largest / m["entities"], 4)
                assert m["chars"] == len((corpus / "Analytical_Engine.txt").read_text(encoding="utf-8-sig"))
        assert results["floor 0.8"]["metrics"]["relations"] < results["as recorded"]["metrics"]["relations"]
        text = (tmp_path / "out" / "s.md").read_text()
        rec, floor = (results[a.name]["metrics"] for a in arms)
        assert f"| Entities | {rec['entities']} | {floor['entities']} |" in text
        assert f"| Relations | {rec['relations']} | {floor['relations']} |" in text
        assert f"| Chunks indexed | {rec['chunks']}/{rec['chunks']} |" in text
        assert (tmp_path / "out" / "s.png").is_file() == (plots.pyplot() is not None)  # an extra
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
                    sql.Identifier(schema.schema_for(structure.REALM))
                )
            )
            conn.execute("DELETE FROM pgrag__control.realms WHERE realm = %s", (structure.REALM,))
