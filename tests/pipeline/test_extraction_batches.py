"""``raw_extractions`` in batches of whole documents writes what one batch writes (issue 30 item 6: bounded
memory). A space extracted one document per batch asks the model nothing a one-batch run did not ask —
every prompt, with the document context each chunk carries from its document's earlier chunks, is served
from the response cache — and stores the same rows in the same order. The run's judgements span its
batches: a first batch whose every chunk fails does not fail a run whose later batch succeeds; every
first pass failing raises, and a contract broken in a later batch writes nothing of the earlier ones.
Real PostgreSQL, real litellm calls to the stub server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from psycopg import sql

from pgrag_dag import progress
from pgrag_dag.errors import ContractError, ExtractionError
from pgrag_dag.pipeline import extractions, index_documents, stage_chunks, stage_raw_extractions
from pgrag_dag.store import db
from pgrag_dag.store.schema import schema_for
from tests.cli.test_progress import Recorder
from tests.fix_corpus import SmallCorpus, extraction_answer
from tests.graph_snapshot import graph_snapshot
from tests.pipeline.test_operators import compose_space, operator_module

THIRD = (
    "Ada Lovelace described the Analytical Engine in London. Charles Babbage showed her the Difference "
    "Engine at his home in London.\n\n"
    "The British government stopped funding the Difference Engine after a decade. Babbage kept designing "
    "his engines.\n\n"
    "Ada Lovelace and Charles Babbage wrote letters about the Analytical Engine for many years."
)


def _raw(dsn: str, realm: str, space: str) -> list[tuple[Any, ...]]:
    """The space's raw rows in id order, named by doc_key and chunk index (chunk ids differ by space)."""
    with db.connect(dsn) as conn:
        return conn.execute(
            sql.SQL("""SELECT d.doc_key, d.chunk_index, r.pass, r.model, r.prompt_version, r.raw_text,
                              r.parsed, r.parse_status, r.error
                         FROM {s}.raw_extractions r JOIN {s}.documents d ON d.id = r.chunk_id
                        WHERE r.space = %s ORDER BY r.id""").format(s=sql.Identifier(schema_for(realm))),
            (space,),
        ).fetchall()


def _three_documents(corpus: SmallCorpus, realm: str, *copies: str) -> None:
    """The fixture's two documents and a third, extracted chunk by chunk (each chunk's prompt names what
    its document's earlier chunks found), in space ``main`` and each of ``copies``."""
    (corpus.root / "docs" / "03_third.txt").write_text(THIRD, encoding="utf-8")
    compose_space(corpus, realm, extractor={"name": "llm", "options": {"batch_size": 1}})
    cfg = yaml.safe_load(corpus.config.read_text())
    spaces = cfg["realms"][realm]["spaces"]
    for c in copies:
        spaces[c] = dict(spaces["main"])
    corpus.config.write_text(yaml.safe_dump(cfg))


def test_one_document_per_batch_asks_and_stores_what_one_batch_does(
    small_corpus: SmallCorpus, realm: str, pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _three_documents(small_corpus, realm, "copy")
    first = {
        r.stage: r.metadata for r in index_documents(small_corpus.engine(), realm, "main", communities=False)
    }
    raw = first["raw_extractions"]
    assert raw["batches"] == 1 and raw["chunks_extracted"] > 3  # a document holds more than one chunk
    asked = len(small_corpus.chat_requests())
    with db.connect(pg_dsn) as conn:
        context = conn.execute(
            sql.SQL("SELECT count(*) FROM {}.documents WHERE space = 'main' AND chunk_index > 0").format(
                sql.Identifier(schema_for(realm))
            )
        ).fetchone()
    assert context is not None and context[0] >= 2  # chunks whose prompt carries their document's names

    monkeypatch.setattr(extractions, "EXTRACT_BATCH", 1)
    with progress.reporting(Recorder()) as recorder:
        copy = {
            r.stage: r.metadata
            for r in index_documents(small_corpus.engine(), realm, "copy", communities=False)
        }
    assert copy["raw_extractions"]["batches"] == 3  # one per document: a document is never split
    assert len(small_corpus.chat_requests()) == asked  # every prompt as before, document context included
    for key in ("chunks_extracted", "passes_written", "chunks_failed", "gleaning_failures", "rows_changed"):
        assert copy["raw_extractions"][key] == raw[key], key
    assert _raw(pg_dsn, realm, "copy") == _raw(pg_dsn, realm, "main")
    # the progress shown is the run's, not the batch's: it climbs to every chunk of the run once
    seen = [(e[3], e[4]) for e in recorder.events if e[0] == "advanced" and e[1] == "raw_extractions"]
    chunks = raw["chunks_extracted"]
    assert [d for d, _ in seen] == sorted(d for d, _ in seen) and seen[-1] == (chunks, chunks)
    assert {t for _, t in seen} == {chunks}
    assert graph_snapshot(pg_dsn, realm, "copy") == graph_snapshot(pg_dsn, realm, "main")


def test_the_run_s_judgements_span_its_batches_and_a_raise_writes_nothing(
    small_corpus: SmallCorpus, realm: str, pg_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _three_documents(small_corpus, realm)
    monkeypatch.setattr(extractions, "EXTRACT_BATCH", 1)
    stage_chunks(small_corpus.engine(), realm, "main")

    def down(messages: list[dict[str, str]]) -> str:
        raise RuntimeError("503 unavailable")  # the stub answers HTTP 500

    small_corpus.server.answer = down
    with pytest.raises(ExtractionError, match=r"every one of \d+ chunk\(s\) failed extraction"):
        stage_raw_extractions(small_corpus.engine(), realm, "main")
    assert _raw(pg_dsn, realm, "main") == []

    # a later batch breaks the extractor's contract: the earlier batches' rows are not written either
    operator_module(
        tmp_path,
        monkeypatch,
        "late_ops",
        "@operator('late', 'extractor')\n"
        "def late(chunks, options, ctx):\n    'One entity per chunk; no first pass for the third document.'\n"
        "    chunks = chunks.filter(pl.col('doc_key') != '03_third.txt')\n"
        "    body = [json.dumps({'entities': [{'name': t, 'type': 'Work'}], 'triples': []}) "
        "for t in chunks['title']]\n"
        "    return pl.DataFrame({'chunk_id': chunks['chunk_id'], 'pass': [0] * chunks.height,\n"
        "                         'parse_status': ['ok'] * chunks.height, 'parsed': body},\n"
        "                        schema={'chunk_id': pl.Int64, 'pass': pl.Int64, 'parse_status': pl.String,\n"
        "                                'parsed': pl.String})\n",
    )
    compose_space(small_corpus, realm, extractor="late_ops:late")
    with pytest.raises(ContractError, match=r"operator late.*no first pass \(pass 0\) for \d+ chunk"):
        stage_raw_extractions(small_corpus.engine(), realm, "main")
    assert _raw(pg_dsn, realm, "main") == []

    # the first document's chunks all fail, the others succeed: the run completes, its failures kept
    def first_document_down(messages: list[dict[str, str]]) -> str:
        if "01_babbage" in messages[-1]["content"]:
            raise RuntimeError("503 unavailable")
        return extraction_answer(messages)

    compose_space(small_corpus, realm, extractor={"name": "llm", "options": {"batch_size": 1}})
    small_corpus.server.answer = first_document_down
    meta = stage_raw_extractions(small_corpus.engine(), realm, "main").metadata
    rows = _raw(pg_dsn, realm, "main")
    failed = sorted((k, i) for k, i, p, *_, status, _e in rows if p == 0 and status != "ok")
    assert meta["batches"] == 3 and meta["chunks_failed"] == len(failed) > 0
    assert {k for k, _ in failed} == {"01_babbage.txt"}
    assert {k for k, _, p, *_, status, _e in rows if status == "ok"} == {"02_lovelace.txt", "03_third.txt"}
    assert meta["passes_written"] == len(rows) and meta["failures"][0].startswith("01_babbage.txt#0")
