"""The plain pipeline end to end on real PostgreSQL and real litellm calls (§3.5, §4.7, §5.5)."""

from __future__ import annotations

import polars as pl
import pytest
from psycopg import sql

from pgrag_dag.errors import DatabaseError, ExtractionError
from pgrag_dag.pipeline import index_documents, stage_chunks, stage_raw_extractions
from pgrag_dag.store import db
from pgrag_dag.store.schema import schema_for
from tests.fix_corpus import SmallCorpus


def _rows(dsn: str, realm: str, query: str) -> list[tuple]:
    with db.connect(dsn) as conn:
        return conn.execute(sql.SQL(query).format(s=sql.Identifier(schema_for(realm)))).fetchall()


def _by_stage(results: list) -> dict[str, dict]:
    return {r.stage: r.metadata for r in results}


def test_index_builds_graph_with_gates_resolution_and_corroboration(
    small_corpus: SmallCorpus, realm: str
) -> None:
    engine = small_corpus.engine()
    meta = _by_stage(index_documents(engine, realm, "main", communities=False))
    assert meta["chunks"]["documents"] == 2
    assert meta["raw_extractions"]["chunks_failed"] == 0
    gates = meta["gated_triples"]["rejections_per_gate"]
    assert gates["vague_predicate"] == 1 and gates["pronominal_name"] == 1
    names = {n for (n,) in _rows(engine.dsn, realm, "SELECT name FROM {s}.entities")}
    assert "Charles Babbage" in names and "Babbage" not in names and "She" not in names
    rel = _rows(
        engine.dsn,
        realm,
        """SELECT s.name, r.predicate, o.name, r.weight, cardinality(r.chunk_ids), r.negated,
                                             r.valid_from FROM {s}.relations r
                                             JOIN {s}.entities s ON s.id = r.source_id
                                             JOIN {s}.entities o ON o.id = r.target_id""",
    )
    by_key = {(a, p, b, neg): (w, n, vf) for a, p, b, w, n, neg, vf in rel}
    # "Ada Lovelace worked_with Charles Babbage" is stated in both documents: two distinct chunks
    assert by_key[("Ada Lovelace", "worked_with", "Charles Babbage", False)][:2] == (2, 2)
    # "Babbage designed Analytical Engine" resolved through the alias onto Charles Babbage
    assert ("Charles Babbage", "designed", "Analytical Engine", False) in by_key
    # a denial keeps the positive predicate with the flag; a stated period is kept
    assert ("Charles Babbage", "built", "Analytical Engine", True) in by_key
    assert by_key[("Ada Lovelace", "wrote_notes_on", "Analytical Engine", False)][2] == "1843"
    assert meta["embeddings"]["documents_embedded"] == meta["chunks"]["chunks"]


def test_reindexing_unchanged_sources_calls_no_model_and_writes_nothing(
    small_corpus: SmallCorpus, realm: str
) -> None:
    engine = small_corpus.engine()
    index_documents(engine, realm, "main", communities=False)
    calls = len(small_corpus.chat_requests())
    weights = _rows(engine.dsn, realm, "SELECT id, weight, chunk_ids FROM {s}.relations ORDER BY id")
    decisions = _rows(engine.dsn, realm, "SELECT id FROM {s}.gate_decisions ORDER BY id")
    xmins = _rows(engine.dsn, realm, "SELECT xmin::text FROM {s}.doc_mentions ORDER BY chunk_id, entity_id")
    meta = _by_stage(index_documents(small_corpus.engine(), realm, "main", communities=False))
    assert meta["gated_triples"]["rewritten"] is False
    assert _rows(engine.dsn, realm, "SELECT id FROM {s}.gate_decisions ORDER BY id") == decisions
    assert (
        _rows(engine.dsn, realm, "SELECT xmin::text FROM {s}.doc_mentions ORDER BY chunk_id, entity_id")
        == xmins
    )
    assert len(small_corpus.chat_requests()) == calls
    assert meta["chunks"]["chunks_inserted"] == 0 and meta["raw_extractions"]["chunks_extracted"] == 0
    assert meta["relations"]["relations_inserted"] == 0 and meta["relations"]["relations_updated"] == 0
    assert meta["embeddings"]["entities_embedded"] == 0
    assert _rows(engine.dsn, realm, "SELECT id, weight, chunk_ids FROM {s}.relations ORDER BY id") == weights


def test_changed_document_alone_is_re_extracted_and_replaces_its_contribution(
    small_corpus: SmallCorpus, realm: str
) -> None:
    engine = small_corpus.engine()
    index_documents(engine, realm, "main", communities=False)
    before = len(small_corpus.chat_requests())
    (small_corpus.root / "docs" / "02_lovelace.txt").write_text(
        "Ada Lovelace wrote notes on the Analytical Engine in 1843."
    )
    meta = _by_stage(index_documents(engine, realm, "main", communities=False))
    assert meta["chunks"]["documents_replaced"] == 1 and meta["chunks"]["documents_unchanged"] == 1
    extracted = meta["raw_extractions"]["chunks_extracted"]
    assert (
        extracted == 1 and len(small_corpus.chat_requests()) - before == 2
    )  # first pass + one gleaning pass
    rows = _rows(
        engine.dsn,
        realm,
        """SELECT r.weight, r.dormant_since IS NOT NULL FROM {s}.relations r
                                        JOIN {s}.entities s ON s.id = r.source_id
                                        WHERE s.name = 'Ada Lovelace'
                                        AND r.predicate = 'worked_with'""",
    )
    assert rows == [(1, False)]  # the removed document's corroboration is gone
    denial = _rows(engine.dsn, realm, "SELECT dormant_since IS NOT NULL FROM {s}.relations WHERE negated")
    assert denial == [(True,)]  # its only contributing chunk disappeared: dormant, not deleted


def test_a_run_in_which_every_chunk_fails_raises_and_writes_no_extraction(
    small_corpus: SmallCorpus, realm: str
) -> None:
    small_corpus.server.answer = lambda messages: "I am sorry, I cannot help with that."
    engine = small_corpus.engine()
    stage_chunks(engine, realm, "main")
    with pytest.raises(ExtractionError, match="every one of .* chunk"):
        stage_raw_extractions(engine, realm, "main")
    assert _rows(engine.dsn, realm, "SELECT count(*) FROM {s}.raw_extractions") == [(0,)]
    assert _rows(engine.dsn, realm, "SELECT count(*) FROM {s}.entities") == [(0,)]


def test_one_malformed_chunk_is_kept_with_its_raw_text_and_retried_next_run(
    small_corpus: SmallCorpus, realm: str
) -> None:
    from tests.fix_corpus import extraction_answer

    def flaky(messages: list[dict[str, str]]) -> str:
        return "{not json" if "never built" in messages[-1]["content"] else extraction_answer(messages)

    small_corpus.server.answer = flaky
    engine = small_corpus.engine()
    meta = _by_stage(index_documents(engine, realm, "main", communities=False))
    assert meta["raw_extractions"]["chunks_failed"] == 1
    assert "02_lovelace.txt#" in meta["raw_extractions"]["failures"][0]
    kept = _rows(
        engine.dsn, realm, "SELECT raw_text, parse_status FROM {s}.raw_extractions WHERE parse_status <> 'ok'"
    )
    assert kept == [("{not json", "parse_error")]
    small_corpus.server.answer = extraction_answer
    meta = _by_stage(index_documents(engine, realm, "main", communities=False))
    assert meta["raw_extractions"]["chunks_extracted"] == 1 and meta["raw_extractions"]["chunks_failed"] == 0


def test_unreachable_database_raises_database_error(small_corpus: SmallCorpus) -> None:
    engine = small_corpus.engine(database_url="postgresql://nobody@127.0.0.1:1/none")
    with pytest.raises(DatabaseError, match="cannot connect to PostgreSQL"):
        engine.init_realm("whatever")


def test_contract_frames_of_a_built_graph_are_valid(small_corpus: SmallCorpus, realm: str) -> None:
    from pgrag_dag.operators.contracts import EntityContract, validate
    from pgrag_dag.store import graph

    engine = small_corpus.engine()
    index_documents(engine, realm, "main", communities=False)
    with engine.connect() as conn:
        frame = graph.load_entities(conn, realm, "main")
    assert validate(EntityContract, frame).height == frame.height > 0
    assert isinstance(frame, pl.DataFrame)


def test_changing_a_gate_setting_regates_from_stored_extractions_without_a_model_call(
    small_corpus: SmallCorpus, realm: str
) -> None:
    from pgrag_dag.pipeline import (
        stage_embeddings,
        stage_gated_triples,
        stage_relations,
        stage_resolved_entities,
    )

    index_documents(small_corpus.engine(), realm, "main", communities=False)
    calls = len(small_corpus.chat_requests())
    strict = small_corpus.engine(gates={"confidence_floor": 0.95})  # every fixture triple has confidence 0.9
    gated = stage_gated_triples(strict, realm, "main").metadata
    for stage in (stage_resolved_entities, stage_relations, stage_embeddings):
        stage(strict, realm, "main")
    assert len(small_corpus.chat_requests()) == calls
    assert gated["triples_accepted"] == 0 and gated["rejections_per_gate"]["confidence_floor"] > 0
    live = _rows(strict.dsn, realm, "SELECT count(*) FROM {s}.relations WHERE dormant_since IS NULL")
    assert live == [(0,)]  # no contributing chunk left: dormant, not deleted
    assert _rows(strict.dsn, realm, "SELECT count(*) > 0 FROM {s}.relations") == [(True,)]
