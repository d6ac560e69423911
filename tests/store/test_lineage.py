"""Lineage from a community report down to the documents it derives from (issue 6)."""

from __future__ import annotations

import json

from psycopg import sql
from typer.testing import CliRunner

from pgrag_dag.cli import app
from pgrag_dag.pipeline import index_documents
from pgrag_dag.resources.query import QueryResource
from pgrag_dag.store.identifiers import qualified
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
