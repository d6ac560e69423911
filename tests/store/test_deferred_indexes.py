"""A first load of vectors drops the table's secondary indexes and builds them again after (issue 30 item 4):
the indexes are gone while the vectors are written and the same after; a load killed between the two leaves a
record, and the next run of any stage builds them again. Real PostgreSQL, real stages."""

from __future__ import annotations

import psycopg
import pytest

from pgrag_dag.pipeline import index_documents
from pgrag_dag.store import bulk_index, db, deferred_indexes, vectors
from pgrag_dag.store.schema import schema_for
from tests.fix_corpus import SmallCorpus

TABLES = ("documents", "entities", "relations")


def _indexes(conn: psycopg.Connection, realm: str) -> dict[str, str]:
    """index name → definition, for the three loaded tables."""
    rows = conn.execute(
        "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = %s AND tablename = ANY(%s)",
        (schema_for(realm), list(TABLES)),
    ).fetchall()
    return dict(rows)


def test_a_first_load_writes_without_the_secondary_indexes_and_builds_the_same_ones_after(
    small_corpus: SmallCorpus, realm: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = small_corpus.engine(
        embedding={"model": "hashing-sha256", "dim": 384, "bulk_load_rows": 2, "index_build_memory": "64MB"}
    )
    engine.init_realm(realm)
    with db.connect(engine.dsn) as conn:
        before = _indexes(conn, realm)
    during: list[tuple[str, set[str]]] = []
    real_write = vectors.write_audited

    def write(conn: psycopg.Connection, r: str, table: str, *args: object, **kwargs: object) -> object:
        during.append((table, set(_indexes(conn, r))))
        return real_write(conn, r, table, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(vectors, "write_audited", write)
    stages = {r.stage: r for r in index_documents(engine, realm, "main", communities=False)}
    assert set(stages["embeddings"].metadata["hnsw_built_after_load"]) == set(TABLES)
    assert during, "no vector was written"
    # while a table's vectors are written its secondary indexes are gone; constraints and the pending-row
    # indexes stay
    secondary = {
        "relations": {"relations_source", "relations_walk_out", "relations_fts_tsv", "relations_chunk_ids"},
        "entities": {"entities_aliases", "entities_dormant"},
        "documents": {"documents_space_id", "documents_fts_tsv", "documents_title_key"},
    }
    kept = {"relations_pkey", "entities_space_lower_name", "relations_unembedded", "documents_unembedded"}
    assert {t for t, _ in during} == set(TABLES)
    for table, names in during:
        assert not (secondary[table] & names) and kept <= names, (table, sorted(names))
    with db.connect(engine.dsn) as conn:
        assert _indexes(conn, realm) == before
        assert deferred_indexes.pending(conn, realm) == {}
        assert bulk_index.missing(conn, realm) == []


def test_indexes_a_killed_load_left_dropped_are_built_by_the_next_run_of_any_stage(
    small_corpus: SmallCorpus, realm: str
) -> None:
    engine = small_corpus.engine()
    index_documents(engine, realm, "main", communities=False)
    with db.connect(engine.dsn) as conn:
        before = _indexes(conn, realm)
    with db.connect(engine.dsn) as conn, conn.transaction():  # what a load does first, then killed
        bulk_index.drop(conn, realm, ["relations"])
    with db.connect(engine.dsn) as conn:
        gone = set(before) - set(_indexes(conn, realm))
        assert {"relations_embedding_hnsw", "relations_source", "relations_fts_tsv"} <= gone
        assert "relations_pkey" not in gone and "relations_unembedded" not in gone
        assert set(deferred_indexes.pending(conn, realm)["relations"]) == gone - {"relations_embedding_hnsw"}
        assert bulk_index.missing(conn, realm) == ["relations"]
    engine.init_realm(realm)  # what the chunks stage of the next run does first
    with db.connect(engine.dsn) as conn:
        assert set(before) - set(_indexes(conn, realm)) == {"relations_embedding_hnsw"}
        assert deferred_indexes.pending(conn, realm) == {}
        for name, definition in _indexes(conn, realm).items():
            assert definition == before[name]
        assert bulk_index.missing(conn, realm) == ["relations"]  # the HNSW index: the embeddings stage's
    index_documents(engine, realm, "main", communities=False)
    with db.connect(engine.dsn) as conn:
        assert _indexes(conn, realm) == before
