"""The chunks stage on real PostgreSQL (issue 13): bad documents are contained to themselves, chunks
carry citable offsets, keys and titles of any size and content are stored or refused with a reason."""

from __future__ import annotations

from psycopg import sql

from pgrag_dag.pipeline import stage_chunks
from pgrag_dag.store import db
from pgrag_dag.store.schema import schema_for
from tests.fix_corpus import SmallCorpus


def _rows(dsn: str, realm: str, query: str, params: tuple = ()) -> list[tuple]:
    with db.connect(dsn) as conn:
        return conn.execute(sql.SQL(query).format(s=sql.Identifier(schema_for(realm))), params).fetchall()  # type: ignore[arg-type]


def _texts(corpus: SmallCorpus) -> dict[str, str]:
    return {f"docs/{p.name}": p.read_text(encoding="utf-8") for p in (corpus.root / "docs").iterdir() if p.is_file()}


def test_issue13_stored_chunks_are_substrings_with_their_offsets(small_corpus: SmallCorpus, realm: str) -> None:
    engine = small_corpus.engine()
    stage_chunks(engine, realm, "main")
    texts = _texts(small_corpus)
    rows = _rows(engine.dsn, realm, "SELECT doc_key, text, metadata FROM {s}.documents")
    assert len(rows) >= 3
    for doc_key, text, meta in rows:
        assert texts[doc_key][meta["char_start"]:meta["char_end"]] == text
        assert meta["file_name"] == doc_key.split("/")[-1]  # the document's own metadata is kept beside them


def test_issue13_chunks_indexed_before_offsets_gain_them_without_being_replaced(small_corpus: SmallCorpus, realm: str) -> None:
    engine = small_corpus.engine()
    stage_chunks(engine, realm, "main")
    with db.connect(engine.dsn) as conn:  # as an earlier release stored them
        conn.execute(sql.SQL("UPDATE {}.documents SET metadata = metadata - 'char_start' - 'char_end'").format(
            sql.Identifier(schema_for(realm))))
    ids = _rows(engine.dsn, realm, "SELECT id FROM {s}.documents ORDER BY id")
    meta = stage_chunks(engine, realm, "main").metadata
    assert meta["documents_unchanged"] == 2 and meta["chunks_inserted"] == 0
    assert _rows(engine.dsn, realm, "SELECT id FROM {s}.documents ORDER BY id") == ids  # nothing re-extracted
    assert all("char_start" in m for (m,) in _rows(engine.dsn, realm, "SELECT metadata FROM {s}.documents"))
