"""Attributes follow support (issue 28 item 1, §4.6): when a document is removed or edited, the entities it
supported keep nothing it alone said — incrementally, and the same with ``full`` — on real PostgreSQL with
the offline ``cooccurrence`` extractor (an entity's description is the longest sentence naming it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from psycopg import sql

from pgrag_dag.config import load_settings
from pgrag_dag.engine import Engine
from pgrag_dag.pipeline import index_documents
from pgrag_dag.store.identifiers import qualified

LONG = "Grace Hopper worked with Howard Aiken on the Harvard Mark I at Harvard University in Cambridge."
SHORT = "Grace Hopper wrote the first compiler."


def _engine(root: Path, dsn: str, realm: str) -> Engine:
    cfg = {
        "database_url": dsn,
        "data_dir": str(root / "data"),
        "llm": {"models": ["replay"]},
        "realms": {
            realm: {
                "spaces": {
                    "main": {"extractor": "cooccurrence", "sources": [{"path": "docs", "glob": "*.txt"}]}
                }
            }
        },
    }
    (root / "pgrag.yaml").write_text(yaml.safe_dump(cfg))
    return Engine.from_settings(load_settings(root / "pgrag.yaml"))


def _entities(engine: Engine, realm: str) -> dict[str, dict[str, Any]]:
    with engine.connect() as conn:
        rows = conn.execute(
            sql.SQL(
                "SELECT name, entity_type, description, aliases, dormant_since IS NOT NULL FROM {} "
                "WHERE space = 'main'"
            ).format(qualified(realm, "entities"))
        ).fetchall()
    return {n: {"type": t, "description": d, "aliases": a, "dormant": z} for n, t, d, a, z in rows}


def test_a_removed_document_leaves_no_sentence_in_a_live_entity(
    tmp_path: Path, pg_dsn: str, realm: str
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a_harvard.txt").write_text(LONG, encoding="utf-8")
    (docs / "b_compiler.txt").write_text(SHORT, encoding="utf-8")
    engine = _engine(tmp_path, pg_dsn, realm)
    try:
        index_documents(engine, realm, "main", communities=False)
        assert _entities(engine, realm)["Grace Hopper"]["description"] == LONG  # the longer one won
        (docs / "a_harvard.txt").unlink()
        meta = {r.stage: r.metadata for r in index_documents(engine, realm, "main", communities=False)}
        assert meta["resolved_entities"]["entities_rederived"] >= 1
        after = _entities(engine, realm)
        assert after["Grace Hopper"]["description"] == SHORT and not after["Grace Hopper"]["dormant"]
        assert after["Howard Aiken"]["dormant"]  # only the removed file named him: history, not live
        live_text = " ".join(str(e) for e in after.values() if not e["dormant"])
        assert "Aiken" not in live_text and "Harvard" not in live_text

        # an edit: the new version's sentence replaces the old one's, and a full rebuild agrees
        (docs / "b_compiler.txt").write_text("Grace Hopper wrote a compiler.", encoding="utf-8")
        index_documents(engine, realm, "main", communities=False)
        edited = _entities(engine, realm)
        assert edited["Grace Hopper"]["description"] == "Grace Hopper wrote a compiler."
        index_documents(engine, realm, "main", communities=False, full=True)
        assert _entities(engine, realm) == edited
    finally:
        engine.close()
