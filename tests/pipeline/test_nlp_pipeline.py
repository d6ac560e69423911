"""The ``nlp`` extractor through the indexing stages on real PostgreSQL (issue 27): a later filing's CFO
supersedes the earlier by document order with no model at all, an ``as_of`` query answers by the date,
and the operator's identity decides what is extracted again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from psycopg import sql

from pgrag_dag.config import load_settings
from pgrag_dag.engine import Engine
from pgrag_dag.pipeline import index_documents
from pgrag_dag.query import QueryParam, query_data
from pgrag_dag.store.identifiers import qualified

REPO = Path(__file__).resolve().parents[2]
FILINGS = ("FY2013.txt", "FY2015.txt")


def _configure(root: Path, dsn: str, realm: str, extractor: Any) -> Engine:
    cfg = {
        "database_url": dsn,
        "data_dir": str(root / "data"),
        "llm": {"models": ["replay"]},
        "realms": {
            realm: {
                "spaces": {
                    "filings": {
                        "preset": "finance",
                        "extractor": extractor,
                        "sources": [{"path": "docs", "glob": "*.txt"}],
                    }
                }
            }
        },
    }
    (root / "pgrag.yaml").write_text(yaml.safe_dump(cfg))
    return Engine.from_settings(load_settings(root / "pgrag.yaml"))


@pytest.fixture
def filings(tmp_path: Path) -> Path:
    """The executive-officer sections of two Disney filings (their first 2,600 characters), in order."""
    (tmp_path / "docs").mkdir()
    for name in FILINGS:
        text = (REPO / "corpus" / "disney_10k" / name).read_text()
        (tmp_path / "docs" / name).write_text(text[:2600])
    return tmp_path


def _index(engine: Engine, realm: str) -> dict[str, dict[str, Any]]:
    """Index the space (no communities): each stage's metadata by stage."""
    return {r.stage: r.metadata for r in index_documents(engine, realm, "filings", communities=False)}


def _cfos(engine: Engine, realm: str, **param: Any) -> set[str]:
    res = query_data(
        "Who was the chief financial officer of The Walt Disney Company?",
        QueryParam(space="filings", **param),
        dsn=engine.dsn,
        realm=realm,
        embedder=engine.embedder(),
    )
    return {r["subject"] for r in res.relations if r["predicate"] == "cfo_of"}


def test_a_later_filings_cfo_supersedes_the_earlier_with_no_model_and_as_of_answers_by_date(
    filings: Path, pg_dsn: str, realm: str
) -> None:
    engine = _configure(filings, pg_dsn, realm, "nlp")
    try:
        meta = _index(engine, realm)
        assert engine.usage()["model_calls"] == 0
        assert meta["relations"]["supersessions_by_reason"].get("single_valued") == 1
        with engine.connect() as conn:
            rows = conn.execute(
                sql.SQL(
                    """SELECT s.name, r.valid_from, r.superseded_by IS NOT NULL
                         FROM {r} r JOIN {e} s ON s.id = r.source_id
                        WHERE r.predicate = 'cfo_of' ORDER BY r.valid_from"""
                ).format(r=qualified(realm, "relations"), e=qualified(realm, "entities"))
            ).fetchall()
        assert rows == [
            ("James A. Rasulo", "2010-01-01", True),
            ("Christine M. McCarthy", "2015-06-30", False),
        ]
        assert _cfos(engine, realm, as_of="2016") == {"Christine M. McCarthy"}
        assert _cfos(engine, realm, as_of="2012") == set()  # superseded: history only when asked for
        assert _cfos(engine, realm, as_of="2012", include_superseded=True) == {"James A. Rasulo"}
    finally:
        engine.close()


def test_the_extractor_identity_decides_what_is_extracted_again(
    filings: Path, pg_dsn: str, realm: str
) -> None:
    engine = _configure(filings, pg_dsn, realm, "nlp")
    try:
        first = _index(engine, realm)
        assert first["raw_extractions"]["chunks_extracted"] == first["chunks"]["chunks"] > 0
        again = _index(engine, realm)
        assert again["raw_extractions"]["chunks_extracted"] == 0  # same identity: nothing extracted
    finally:
        engine.close()
    engine = _configure(filings, pg_dsn, realm, {"name": "nlp", "options": {"proper_nouns": False}})
    try:
        other = _index(engine, realm)
        assert other["raw_extractions"]["chunks_extracted"] == first["chunks"]["chunks"]  # options changed
        once = _index(engine, realm)
        assert once["raw_extractions"]["chunks_extracted"] == 0
        assert engine.usage()["model_calls"] == 0
    finally:
        engine.close()
