"""Lineage from a community report down to the documents it derives from (issue 6)."""

from __future__ import annotations

import json

import polars as pl
from psycopg import sql
from typer.testing import CliRunner

from pgrag_dag.cli import app
from pgrag_dag.pipeline import index_documents
from pgrag_dag.resources.query import QueryResource
from pgrag_dag.store.communities import replace_communities
from pgrag_dag.store.identifiers import qualified
from pgrag_dag.store.lineage import lineage
from tests.fix_corpus import DOCS, SmallCorpus


def test_a_report_resolves_to_its_entities_relations_chunks_and_documents(
    small_corpus: SmallCorpus, realm: str, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    engine = small_corpus.engine()
    meta = {r.stage: r.metadata for r in index_documents(engine, realm, "main")}
    assert meta["communities"]["communities"] >= 1 and meta["communities"]["lineage_documents"] >= 1
    with engine.connect() as conn:
        cid = conn.execute(
            sql.SQL("SELECT id FROM {} WHERE level = 0 ORDER BY size DESC LIMIT 1").format(
                qualified(realm, "communities")
            )
        ).fetchone()[0]  # type: ignore[index]
        members = {
            n
            for (n,) in conn.execute(
                sql.SQL(
                    "SELECT e.name FROM {m} m JOIN {e} e ON e.id = m.entity_id WHERE m.community_id = %s"
                ).format(m=qualified(realm, "community_members"), e=qualified(realm, "entities")),
                (cid,),
            ).fetchall()
        }
    out = QueryResource(realm=realm, config_path=str(small_corpus.config)).lineage(cid)
    assert {e["name"] for e in out["entities"]} == members
    # every relation is inside the cluster, every chunk is one of its relations' provenance
    assert out["relations"] and all(
        r["subject"] in members and r["object"] in members for r in out["relations"]
    )
    provenance = {c for r in out["relations"] for c in r["chunk_ids"]}
    assert {c["id"] for c in out["chunks"]} == provenance
    assert {d["doc_key"] for d in out["documents"]} <= set(DOCS)
    monkeypatch.setenv("PGRAG_CONFIG", str(small_corpus.config))
    printed = CliRunner().invoke(app, ["lineage", str(cid), "--realm", realm, "--json"])
    assert printed.exit_code == 0 and json.loads(printed.output)["community"]["id"] == cid
    missing = CliRunner().invoke(app, ["lineage", "999999", "--realm", realm])
    assert missing.exit_code == 2 and "has no community 999999" in missing.output


def test_lineage_is_what_the_report_was_built_from_after_a_later_supersession(
    small_corpus: SmallCorpus, realm: str
) -> None:
    """A relation superseded after the build stays in the report's lineage (the report was built from it),
    and one written after the build is not in it, until the communities are rebuilt (issue 28)."""
    engine = small_corpus.engine()
    index_documents(engine, realm, "main")
    rel, com = qualified(realm, "relations"), qualified(realm, "communities")
    with engine.connect() as conn:
        cid, before = conn.execute(
            sql.SQL(
                """SELECT c.id, array_agg(DISTINCT cs.relation_id ORDER BY cs.relation_id)
                     FROM {c} c JOIN {cs} cs ON cs.community_id = c.id
                    WHERE c.level = 0 GROUP BY c.id ORDER BY count(*) DESC, c.id LIMIT 1"""
            ).format(c=com, cs=qualified(realm, "community_sources"))
        ).fetchone()  # type: ignore[misc]
        victim, source, target, chunks = conn.execute(
            sql.SQL("SELECT id, source_id, target_id, chunk_ids FROM {} WHERE id = %s").format(rel),
            (before[0],),
        ).fetchone()  # type: ignore[misc]
        with conn.transaction():  # a later document's different claim supersedes it, after the build
            newer = conn.execute(
                sql.SQL(
                    """INSERT INTO {r} (space, source_id, target_id, predicate, description, chunk_ids)
                       VALUES ('main', %s, %s, 'later_claim', 'a later claim', %s) RETURNING id"""
                ).format(r=rel),
                (source, target, chunks),
            ).fetchone()[0]  # type: ignore[index]
            conn.execute(
                sql.SQL("UPDATE {} SET superseded_by = %s WHERE id = %s").format(rel), (newer, victim)
            )
        out = lineage(conn, realm, cid)
        assert sorted(r["id"] for r in out["relations"]) == before
        assert victim in {r["id"] for r in out["relations"]} and newer not in {
            r["id"] for r in out["relations"]
        }
        # a rebuild from today's graph takes the new claim in and leaves the superseded one out
        members = conn.execute(
            sql.SQL("SELECT entity_id FROM {} WHERE community_id = %s").format(
                qualified(realm, "community_members")
            ),
            (cid,),
        ).fetchall()
        replace_communities(
            conn,
            realm,
            "main",
            fingerprint="rebuilt",
            reports=pl.DataFrame(
                {
                    "cluster": [1],
                    "title": ["t"],
                    "summary": ["s"],
                    "findings": ["[]"],
                    "rating": [1.0],
                    "size": [len(members)],
                    "report": ["r"],
                }
            ),
            members=pl.DataFrame({"cluster": [1] * len(members), "entity_id": [m for (m,) in members]}),
        )
        rebuilt = conn.execute(sql.SQL("SELECT id FROM {} WHERE level = 0").format(com)).fetchone()[0]  # type: ignore[index]
        after = {r["id"] for r in lineage(conn, realm, rebuilt)["relations"]}
        assert newer in after and victim not in after
