"""A failed embedding stage never leaves data silently invisible (issue 13 item 9, paper §3.5).

Rows committed by earlier stages have no vector until the ``embeddings`` stage embeds them. When the
model fails, the stage keeps what it embedded, says what is left (metadata, the non-blocking
``pending_work`` check, a one-line error), every query of the space warns with the counts, and the
next run embeds the rest. The opt-in ``embedding.fallback: hashing`` embeds what the model refused
apart from the model's vectors — flagged per row, outside every vector search, reported — and the next
run replaces it. Real PostgreSQL, real stages, real litellm calls to the stub server's embeddings.
"""

from __future__ import annotations

import threading
from typing import Any

import dagster as dg
import numpy as np
import polars as pl
import psycopg
import pytest
import yaml
from psycopg import sql

from pgrag_dag.assets.partitions import add_partitions
from pgrag_dag.assets.stages import ASSETS
from pgrag_dag.errors import EmbeddingIncompleteError
from pgrag_dag.pipeline import (
    PENDING_CHECK,
    embeddings,
    stage_chunks,
    stage_embeddings,
    stage_gated_triples,
    stage_raw_extractions,
    stage_relations,
    stage_resolved_entities,
)
from pgrag_dag.providers.embedding import HashingEmbedder
from pgrag_dag.query import QueryParam, query_data
from pgrag_dag.resources.engine import PgragResource
from pgrag_dag.store import embedding_columns, schema, vectors
from pgrag_dag.store.identifiers import qualified
from pgrag_dag.store.schema import schema_for
from pgrag_dag.store.vectors import EMBED_TEXT
from tests.fix_corpus import SmallCorpus

pytestmark = pytest.mark.live

MODEL = "openai/stub-embed"
BATCH = 2
TABLES = (
    "documents",
    "entities",
    "relations",
)  # what the embeddings stage embeds after earlier stages committed


def _embed_with_the_stub(
    corpus: SmallCorpus,
    conn: psycopg.Connection,
    realm: str,
    monkeypatch: pytest.MonkeyPatch,
    **embedding: Any,
) -> None:
    """Configure the stub server's embeddings as the realm's model (a litellm model, 384 dimensions);
    the realm is created afresh by the stages under it."""
    cfg = yaml.safe_load(corpus.config.read_text())
    # a deadline a loaded CI machine meets on the first request (2 s did not: "no response within 1 s" twice
    # on CI)
    cfg["embedding"] = {
        "model": MODEL,
        "dim": 384,
        "api_base": corpus.server.base_url,
        "api_key": "x",
        "deadline_s": 6,
        "batch_size": BATCH,
        **embedding,
    }
    corpus.config.write_text(yaml.safe_dump(cfg))
    monkeypatch.setenv("PGRAG_EMBEDDING__MODEL", MODEL)  # the test session's default is the hashing embedder
    conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema_for(realm))))
    conn.execute("DELETE FROM pgrag__control.realms WHERE realm = %s", (realm,))


def _graph(corpus: SmallCorpus, realm: str) -> None:
    engine = corpus.engine()
    for stage in (
        stage_chunks,
        stage_raw_extractions,
        stage_gated_triples,
        stage_resolved_entities,
        stage_relations,
    ):
        stage(engine, realm, "main")


def _rows(conn: psycopg.Connection, realm: str, table: str) -> dict[int, dict[str, Any]]:
    """id → text, embedding (float32 or None), embed_fallback, fallback_embedding (float32 or None)."""
    rows = conn.execute(
        sql.SQL(
            "SELECT id, {}, embedding::real[], embed_fallback, fallback_embedding::real[] FROM {} ORDER BY id"
        ).format(EMBED_TEXT[table], qualified(realm, table))
    ).fetchall()
    return {
        i: {
            "text": t,
            "embedding": None if e is None else np.asarray(e, np.float32),
            "fallback": f,
            "fallback_embedding": None if fe is None else np.asarray(fe, np.float32),
        }
        for i, t, e, f, fe in rows
    }


def _embedded(conn: psycopg.Connection, realm: str, table: str) -> dict[int, tuple[str, bool]]:
    """id → (the text it embeds, whether it has a vector)."""
    rows = conn.execute(
        sql.SQL("SELECT id, {}, embedding IS NOT NULL FROM {} ORDER BY id").format(
            EMBED_TEXT[table], qualified(realm, table)
        )
    ).fetchall()
    return {i: (t, bool(v)) for i, t, v in rows}


def _embeds(corpus: SmallCorpus) -> list[list[str]]:
    return [r["body"]["input"] for r in corpus.server.requests if r["path"].endswith("/embeddings")]


def _counted(counts: dict[str, int]) -> str:
    """``{"documents": 1, "entities": 6, "relations": 6}`` → ``1 chunk, 6 entities and 6 relations``."""
    words = {
        "documents": ("chunk", "chunks"),
        "entities": ("entity", "entities"),
        "relations": ("relation", "relations"),
    }
    parts = [f"{n} {words[t][n != 1]}" for t, n in counts.items() if n]
    return ", ".join(parts[:-1]) + " and " + parts[-1]


def _query(corpus: SmallCorpus, realm: str, question: str, **param: Any) -> Any:
    engine = corpus.engine()
    return query_data(
        question, QueryParam(space="main", **param), dsn=engine.dsn, realm=realm, embedder=engine.embedder()
    )


def test_a_failed_embedding_stage_keeps_its_vectors_reports_the_rest_and_the_next_run_embeds_them(
    small_corpus: SmallCorpus, realm: str, conn: psycopg.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    _embed_with_the_stub(small_corpus, conn, realm, monkeypatch)
    _graph(small_corpus, realm)
    chunks = _embedded(conn, realm, "documents")
    first_batch = [chunks[i][0] for i in sorted(chunks)[:BATCH]]
    small_corpus.server.refuse(
        503, "The server is overloaded", route="embeddings", after=1
    )  # an outage after one batch

    with pytest.raises(EmbeddingIncompleteError) as info:
        stage_embeddings(small_corpus.engine(), realm, "main")

    left = {t: sum(not has for _, has in _embedded(conn, realm, t).values()) for t in TABLES}
    assert (
        left["documents"] == len(chunks) - BATCH and left["entities"] > 0 and left["relations"] > 0
    )  # one batch kept
    message = str(info.value)
    assert "\n" not in message and f"embeddings {realm}.main: embedding model {MODEL} failed" in message
    assert f"{_counted(left)} left without a vector" in message and "the next run embeds them" in message
    assert (
        info.value.pending["pending"] == sum(left.values()) and info.value.pending["without_vector"] == left
    )
    # the model was asked for the first batch, then retried on the second within the deadline — and no more
    embedded = _embeds(small_corpus)
    assert embedded[0] == first_batch and all(batch == embedded[1] for batch in embedded[1:])

    small_corpus.server.accept()  # the provider is back; the stage has not run again yet
    result = _query(small_corpus, realm, "Who funded the Difference Engine?", mode="mix", keywords="lexical")
    expected = f"{_counted(left)} of space 'main' have no vector"
    assert [w for w in result.warnings if w.startswith(expected) and "vector search cannot find them" in w]

    again = stage_embeddings(small_corpus.engine(), realm, "main")
    assert again.checks[PENDING_CHECK][0] is True
    assert (
        again.metadata["documents_embedded"] == left["documents"]
        and again.metadata["entities_embedded"] == left["entities"]
    )
    assert again.metadata["unembedded"] == {t: {"missing": 0, "fallback": 0} for t in TABLES}
    assert all(has for t in TABLES for _, has in _embedded(conn, realm, t).values())
    result = _query(small_corpus, realm, "Who funded the Difference Engine?", mode="mix", keywords="lexical")
    assert not [w for w in result.warnings if "vector" in w] and result.entities
    # and a row whose text changed since it was embedded (a stale embed_hash) is embedded again, alone
    conn.execute(
        sql.SQL(
            "UPDATE {} SET description = description || ' Revised.' WHERE id = (SELECT min(id) FROM {})"
        ).format(qualified(realm, "entities"), qualified(realm, "entities"))
    )
    stale = stage_embeddings(small_corpus.engine(), realm, "main")
    assert (
        stale.metadata["entities_embedded"],
        stale.metadata["documents_embedded"],
        stale.metadata["relations_embedded"],
    ) == (1, 0, 0)


def test_the_hashing_fallback_embeds_what_the_model_refused_apart_and_the_next_run_replaces_it(
    small_corpus: SmallCorpus, realm: str, conn: psycopg.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    _embed_with_the_stub(small_corpus, conn, realm, monkeypatch, fallback="hashing")
    _graph(small_corpus, realm)
    small_corpus.server.refuse(401, "Incorrect API key provided", route="embeddings", after=1)

    done = stage_embeddings(small_corpus.engine(), realm, "main")  # the stage completes, with pending work

    passed, pending = done.checks[PENDING_CHECK]
    assert passed is False and "embedding.api_key" in pending["model_error"]
    rows = {t: _rows(conn, realm, t) for t in TABLES}
    real = {t: {i for i, r in rs.items() if r["embedding"] is not None} for t, rs in rows.items()}
    assert len(real["documents"]) == BATCH and not real["entities"] and not real["relations"]
    reference = HashingEmbedder(384)
    for table, rs in rows.items():
        for i, r in rs.items():
            if i in real[table]:
                assert r["fallback"] is None and r["fallback_embedding"] is None
            else:  # flagged, and its vector kept out of the indexed column
                assert r["embedding"] is None and r["fallback"] == "hashing-sha256"
                assert np.allclose(r["fallback_embedding"], reference.embed_one(r["text"]), atol=1e-6)
    fallback = {t: len(rs) - len(real[t]) for t, rs in rows.items()}
    assert pending["fallback_only"] == fallback and pending["pending"] == sum(fallback.values())
    assert {t: done.metadata[f"{t}_fallback"] for t in TABLES} == fallback

    small_corpus.server.accept()
    result = _query(
        small_corpus,
        realm,
        "Who designed the Analytical Engine?",
        mode="mix",
        keywords="lexical",
        chunk_channels=("vector", "fulltext"),
        graph_ranking="mentions",  # the vector-seeded path: what a fallback vector keeps out of search
    )
    vector_found = {c["id"] for c in result.chunks if "vector" in c["via"]}
    assert vector_found and vector_found <= real["documents"]  # no fallback row in a vector channel
    assert any(
        c["id"] not in real["documents"] and "fulltext" in c["via"] for c in result.chunks
    )  # full-text reaches them
    assert result.entities == []  # every entity has only a fallback vector: none can seed
    assert result.relations and all(
        "similarity" not in r["ranks"] for r in result.relations
    )  # full-text ranks them
    warning = next(w for w in result.warnings if "only a fallback vector" in w)
    assert warning.startswith(f"{_counted(fallback)} of space 'main'") and "not comparable" in warning

    again = stage_embeddings(
        small_corpus.engine(), realm, "main"
    )  # the model is back: it replaces every fallback vector
    assert again.checks[PENDING_CHECK][0] is True and again.metadata["model_error"] is None
    for table in TABLES:
        assert all(
            r["embedding"] is not None and r["fallback"] is None and r["fallback_embedding"] is None
            for r in _rows(conn, realm, table).values()
        )
    result = _query(
        small_corpus, realm, "Who designed the Analytical Engine?", mode="mix", keywords="lexical"
    )
    assert result.entities and not [w for w in result.warnings if "vector" in w]


def test_a_realm_of_schema_version_4_gains_the_fallback_columns_in_place(
    conn: psycopg.Connection, realm: str
) -> None:
    s = sql.Identifier(schema_for(realm))
    for table in embedding_columns.EMBEDDED_TABLES:
        for column in ("embed_fallback", "fallback_embedding"):
            conn.execute(
                sql.SQL("ALTER TABLE {}.{} DROP COLUMN {}").format(
                    s, sql.Identifier(table), sql.Identifier(column)
                )
            )
    for table in TABLES:
        conn.execute(sql.SQL("DROP INDEX {}.{}").format(s, sql.Identifier(f"{table}_unembedded")))
    conn.execute("UPDATE pgrag__control.realms SET schema_version = 4 WHERE realm = %s", (realm,))
    conn.execute(sql.SQL("INSERT INTO {}.entities (space, name) VALUES ('main', 'Ada Lovelace')").format(s))
    # a query before any stage upgraded the realm still counts what it cannot see
    assert vectors.unembedded(conn, realm, "main")["entities"] == {"missing": 1, "fallback": 0}

    assert schema.init_realm(conn, realm, embedding_model="hashing-sha256", dim=384) is True
    assert schema.init_realm(conn, realm, embedding_model="hashing-sha256", dim=384) is False
    assert conn.execute(
        "SELECT schema_version FROM pgrag__control.realms WHERE realm = %s", (realm,)
    ).fetchone() == (schema.SCHEMA_VERSION,)
    cols = conn.execute(
        "SELECT table_name, column_name, data_type FROM information_schema.columns WHERE table_schema = %s "
        "AND column_name IN ('embed_fallback', 'fallback_embedding') ORDER BY 1, 2",
        (schema_for(realm),),
    ).fetchall()
    assert cols == [
        (t, c, d)
        for t in sorted((*embedding_columns.EMBEDDED_TABLES, *embedding_columns.ARCHIVE_TABLES))
        for c, d in (("embed_fallback", "text"), ("fallback_embedding", "USER-DEFINED"))
    ]
    indexes = conn.execute(
        "SELECT indexname FROM pg_indexes WHERE schemaname = %s AND indexname LIKE '%%_unembedded' "
        "ORDER BY 1",
        (schema_for(realm),),
    ).fetchall()
    assert [i for (i,) in indexes] == sorted(f"{t}_unembedded" for t in TABLES)
    assert vectors.unembedded(conn, realm, "*")["entities"] == {"missing": 1, "fallback": 0}


@pytest.mark.dagster
def test_the_embeddings_asset_shows_what_is_left_and_a_later_run_clears_it(
    small_corpus: SmallCorpus, realm: str, conn: psycopg.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    _embed_with_the_stub(small_corpus, conn, realm, monkeypatch)
    key = f"{realm}.main"
    resources = {"pgrag": PgragResource(config_path=str(small_corpus.config))}
    small_corpus.server.refuse(401, "Incorrect API key provided", route="embeddings")
    with dg.instance_for_test() as instance:
        add_partitions(instance, [key])
        failed = dg.materialize(
            ASSETS, partition_key=key, instance=instance, resources=resources, raise_on_error=False
        )
        assert not failed.success
        assert "embeddings" not in {
            e.asset_key.to_user_string() for e in failed.get_asset_materialization_events()
        }
        check = next(
            e
            for e in failed.get_asset_check_evaluations()
            if e.asset_key.to_user_string() == "embeddings" and e.check_name == PENDING_CHECK
        )
        assert check.passed is False and check.severity == dg.AssetCheckSeverity.WARN
        assert (
            check.metadata["pending"].value > 0 and "embedding.api_key" in check.metadata["model_error"].value
        )
        assert check.metadata["without_vector"].value["entities"] > 0
        failure = next(
            e
            for e in failed.all_events
            if e.event_type_value == "STEP_FAILURE" and e.step_key == "embeddings"
        )
        assert "EmbeddingIncompleteError" in failure.event_specific_data.error.message  # type: ignore[union-attr]

        small_corpus.server.accept()
        fixed = dg.materialize(
            ASSETS, partition_key=key, instance=instance, resources=resources, raise_on_error=False
        )
        assert fixed.success
        check = next(
            e
            for e in fixed.get_asset_check_evaluations()
            if e.asset_key.to_user_string() == "embeddings" and e.check_name == PENDING_CHECK
        )
        assert check.passed and check.metadata["pending"].value == 0


class _Interrupted(HashingEmbedder):
    """The hashing embedder, stopped by Ctrl-C at its call ``after + 1`` (as a user or a killed worker
    stops a long run)."""

    def __init__(self, dim: int, after: int) -> None:
        super().__init__(dim)
        self.after, self.calls = after, 0

    def embed(self, texts: list[str], kind: Any = "passage") -> list[np.ndarray]:
        self.calls += 1
        if self.calls > self.after:
            raise KeyboardInterrupt
        return super().embed(texts, kind)


def test_an_interrupted_embedding_stage_keeps_what_it_committed_and_the_next_run_embeds_only_the_rest(
    small_corpus: SmallCorpus, realm: str, conn: psycopg.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 30 item 4: vectors are committed as they come, so an interrupted run loses none of them."""
    _graph(small_corpus, realm)
    engine = small_corpus.engine()
    dim = engine.settings.embedding.dim
    monkeypatch.setattr(embeddings, "FLUSH_ROWS", 2)  # a commit every two rows on this small space
    monkeypatch.setattr(engine, "embedder", lambda: _Interrupted(dim, after=2))
    total = sum(len(_embedded(conn, realm, t)) for t in TABLES)
    with pytest.raises(KeyboardInterrupt):
        stage_embeddings(engine, realm, "main")
    kept = {t: sum(has for _, has in _embedded(conn, realm, t).values()) for t in TABLES}
    # the first two model calls (a batch of chunks, then of entities) committed; the relations' call stopped
    assert kept == {
        "documents": len(_embedded(conn, realm, "documents")),
        "entities": len(_embedded(conn, realm, "entities")),
        "relations": 0,
    }
    assert 0 < sum(kept.values()) < total
    monkeypatch.undo()
    again = stage_embeddings(small_corpus.engine(), realm, "main").metadata
    assert {t: again[f"{t}_embedded"] for t in TABLES} == {
        "documents": 0,
        "entities": 0,
        "relations": total - sum(kept.values()),
    }
    assert all(has for t in TABLES for _, has in _embedded(conn, realm, t).values())


def test_write_behind_writes_in_order_on_one_writer_and_raises_its_error_on_the_callers_thread() -> None:
    written: list[str] = []
    closed: list[bool] = []
    threads: set[str] = set()

    def open_writer() -> tuple[Any, Any]:
        def write(table: str, rows: list[Any], vectors: list[np.ndarray], fallback: bool) -> None:
            threads.add(threading.current_thread().name)
            if table == "bad":
                raise RuntimeError("disk full")
            written.append(f"{table}:{len(rows)}")

        return write, lambda: closed.append(True)

    vec = [np.zeros(4, np.float32)]
    with embeddings.WriteBehind(open_writer) as sink:
        for table in ("documents", "entities", "relations"):
            sink(table, [(1, "t", "h")], vec, False)
    assert written == ["documents:1", "entities:1", "relations:1"] and closed == [True]
    assert threads == {"pgrag-embeddings-writer"}

    written.clear()
    with pytest.raises(RuntimeError, match="disk full"):
        with embeddings.WriteBehind(open_writer, depth=1) as sink:
            sink("documents", [(1, "t", "h")], vec, False)
            sink("bad", [(2, "t", "h")], vec, False)
            sink("entities", [(3, "t", "h")], vec, False)  # queued behind the failure: never written
    assert written == ["documents:1"] and closed == [True, True]

    # Ctrl-C on the caller's thread: what was handed over is still written before it propagates
    written.clear()
    with pytest.raises(KeyboardInterrupt):
        with embeddings.WriteBehind(open_writer) as sink:
            sink("documents", [(1, "t", "h"), (2, "t", "h")], vec * 2, False)
            raise KeyboardInterrupt
    assert written == ["documents:2"]


def test_pending_rows_stream_by_pages_and_a_full_audit_reads_every_vector_by_pages(
    small_corpus: SmallCorpus, realm: str, conn: psycopg.Connection
) -> None:
    """Issue 30 item 3: the stage reads its pending rows, and a full run audits its vectors, a page at a time
    — the same rows as reading them all at once."""
    _graph(small_corpus, realm)
    engine = small_corpus.engine()
    for table in TABLES:
        whole = vectors.pending(conn, realm, "main", table)
        assert len(whole) > 2 and vectors.count_pending(conn, realm, "main", table) == len(whole)
        with engine.connect() as reader:
            assert list(vectors.stream_pending(reader, realm, "main", table, page=2)) == whole
        mean = sum(len(t) for _, t, _ in whole) / len(whole)  # all of them: fewer than the sample
        assert vectors.mean_pending_chars(conn, realm, "main", table) == pytest.approx(mean)
    meta = stage_embeddings(engine, realm, "main", full=True).metadata
    assert all(vectors.count_pending(conn, realm, "main", t) == 0 for t in TABLES)
    pages = list(vectors.audit_pages(conn, realm, "main", 384, TABLES, page=2))
    assert max(p.height for p in pages) == 2
    paged = pl.concat(pages).sort("table", "row_id")
    whole_audit = vectors.audit(conn, realm, "main", 384).filter(pl.col("table").is_in(TABLES))
    assert paged.equals(whole_audit.sort("table", "row_id"))
    assert meta["vectors_checked"] == paged.height == sum(len(_embedded(conn, realm, t)) for t in TABLES)


def test_vectors_are_handed_over_after_flush_seconds_even_below_flush_rows() -> None:
    """A run of long texts reaches 2,048 rows only after minutes: the vectors are also handed over once
    ``flush_seconds`` have passed, so an interrupt loses seconds of work (a trial lost 256 chunks)."""
    rows = [(i, f"text number {i}", "h") for i in range(5)]
    for seconds, handed in ((0.0, [2, 2, 1]), (3600.0, [5])):
        got: list[int] = []
        run = embeddings.embed_pending(
            HashingEmbedder(16),
            {"documents": iter(rows)},
            totals={"documents": 5},
            batch_size=2,
            sink=lambda table, r, v, fb, got=got: got.append(len(r)),  # type: ignore[misc]
            flush_rows=1000,
            flush_seconds=seconds,
        )
        assert got == handed and run.tables["documents"].embedded == 5


def test_the_time_left_is_estimated_in_characters_since_the_long_chunk_texts_come_first() -> None:
    """A trial's first estimate was about four times too long: the run embeds the chunks (long texts) first
    and the estimate counted texts. The stage reports the characters through (``work``) of the characters
    its pending texts hold (``work_total``, from each table's mean length), and the time left follows them."""
    from pgrag_dag import progress as stage_progress
    from pgrag_dag.cli.progress import time_left

    seen: list[tuple[int, int, dict[str, Any]]] = []

    class Recorder:
        def started(self, stage: str, partition: str) -> None:
            pass

        def advanced(
            self, stage: str, partition: str, done: int, total: int, unit: str, fields: dict[str, Any]
        ) -> None:
            seen.append((done, total, dict(fields)))

        def finished(self, *args: Any) -> None:
            pass

    chunks = [(i, "c" * 900, "h") for i in range(4)]
    names = [(i, "n" * 100, "h") for i in range(36)]
    with stage_progress.reporting(Recorder()), stage_progress.stage("embeddings", "r", "s"):  # type: ignore[arg-type]
        embeddings.embed_pending(
            HashingEmbedder(16),
            {"documents": iter(chunks), "entities": iter(names)},
            totals={"documents": 4, "entities": 36},
            chars={"documents": 900.0, "entities": 100.0},
            batch_size=4,
            sink=lambda *a: None,
        )
    assert [s[2]["work_total"] for s in seen] == [7200] * len(seen)
    done, total, fields = seen[1]  # after the four chunks: a tenth of the texts, half of the characters
    assert (done, total, fields["work"]) == (4, 40, 3600)
    assert time_left(fields, 10.0) == 10.0  # counted in texts it would say 90 s
    assert seen[-1][0] == 40 and seen[-1][2]["work"] == 7200
    assert time_left({}, 10.0) is None
