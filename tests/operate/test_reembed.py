"""``reembed_realm`` on real PostgreSQL and real stages (issue 12 bullet 5, paper §3.5): a realm switches
embedder in one transaction — registry, column widths, every vector, the HNSW indexes — or not at all."""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import pytest
from psycopg import sql

from pgrag_dag.errors import ConfigurationError, ModelError, PartitionBusyError, SchemaMismatchError
from pgrag_dag.operate.reembed import reembed_if_switched, reembed_realm
from pgrag_dag.pipeline import index_documents, stage_embeddings
from pgrag_dag.providers.embedding import HashingEmbedder
from pgrag_dag.query import QueryParam, query_data
from pgrag_dag.store import db, embedding_columns, locks, vector_index, vectors
from pgrag_dag.store.embedding_columns import ARCHIVE_TABLES, EMBEDDED_TABLES
from pgrag_dag.store.schema import schema_for
from pgrag_dag.store.vectors import EMBED_TEXT
from tests.fix_corpus import SmallCorpus


def _registry(dsn: str, realm: str) -> tuple:
    with db.connect(dsn) as conn:
        return conn.execute(
            """SELECT embedding_model, embedding_dim, embedding_convention
                                 FROM pgrag__control.realms WHERE realm = %s""",
            (realm,),
        ).fetchone()


def _snapshot(dsn: str, realm: str) -> dict[str, Any]:
    """Registry row, embedding column types, HNSW index definitions and every stored vector (as text)."""
    s = schema_for(realm)
    with db.connect(dsn) as conn:
        columns = conn.execute(
            """SELECT c.relname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a
                                    JOIN pg_class c ON c.oid = a.attrelid
                                    JOIN pg_namespace n ON n.oid = c.relnamespace
                                   WHERE n.nspname = %s AND c.relkind = 'r' AND a.attname = 'embedding'
                                     AND NOT a.attisdropped ORDER BY 1""",
            (s,),
        ).fetchall()
        indexes = conn.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = %s "
            "AND indexname LIKE '%%embedding_hnsw' ORDER BY 1",
            (s,),
        ).fetchall()
        rows = {
            table: conn.execute(
                sql.SQL("SELECT id, embedding::text, embed_hash FROM {}.{} ORDER BY id").format(
                    sql.Identifier(s), sql.Identifier(table)
                )
            ).fetchall()
            for table in EMBEDDED_TABLES
        }
    return {"registry": _registry(dsn, realm), "columns": columns, "indexes": indexes, "rows": rows}


def _texts(dsn: str, realm: str, table: str) -> dict[int, tuple[str, Any, str | None]]:
    """id → (embedded text, stored vector as float32 or None, embed_hash)."""
    with db.connect(dsn) as conn:
        rows = conn.execute(
            sql.SQL("SELECT id, {}, embedding::real[], embed_hash FROM {}.{}").format(
                EMBED_TEXT[table], sql.Identifier(schema_for(realm)), sql.Identifier(table)
            )
        ).fetchall()
    return {i: (t, None if v is None else np.asarray(v, np.float32), h) for i, t, v, h in rows}


def _xmins(dsn: str, realm: str) -> list[tuple]:
    """The transaction id that last wrote each row of the embedded tables (and the registry row)."""
    with db.connect(dsn) as conn:
        out = [
            conn.execute("SELECT xmin::text FROM pgrag__control.realms WHERE realm = %s", (realm,)).fetchone()
        ]
        for table in EMBEDDED_TABLES:
            out += conn.execute(
                sql.SQL("SELECT id, xmin::text FROM {}.{} ORDER BY id").format(
                    sql.Identifier(schema_for(realm)), sql.Identifier(table)
                )
            ).fetchall()
    return out


def _hnsw_plans(dsn: str, realm: str, dim: int) -> dict[str, str]:
    """table → the index its nearest-neighbour search uses (sequential scans disabled)."""
    q = "[" + ",".join(["0.5"] * dim) + "]"
    out = {}
    with db.connect(dsn) as conn:
        conn.execute("SET enable_seqscan = off")
        for table in EMBEDDED_TABLES:
            plan = conn.execute(
                sql.SQL("EXPLAIN SELECT id FROM {}.{} AS t ORDER BY {} LIMIT 3").format(
                    sql.Identifier(schema_for(realm)), sql.Identifier(table), vector_index.distance("t", dim)
                ),
                {"q": q},
            ).fetchall()
            out[table] = " ".join(r[0] for r in plan)
    return out


@pytest.fixture
def indexed(small_corpus: SmallCorpus, realm: str) -> SmallCorpus:
    """The small corpus indexed (communities included) at hashing-sha256 (384)."""
    index_documents(small_corpus.engine(), realm, "main")
    return small_corpus


def test_reembed_switches_every_vector_column_and_index_to_the_new_width(
    indexed: SmallCorpus, realm: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    dsn = indexed.engine().dsn
    before = {t: _texts(dsn, realm, t) for t in EMBEDDED_TABLES}
    had_vector = {t: {i for i, (_, v, _) in rows.items() if v is not None} for t, rows in before.items()}
    assert all(had_vector[t] for t in EMBEDDED_TABLES)  # chunks, entities, relations and reports all embedded
    monkeypatch.setenv("PGRAG_EMBEDDING__DIM", "64")
    narrow = indexed.engine()
    with pytest.raises(SchemaMismatchError, match=f"pgrag reembed {realm}"):
        index_documents(narrow, realm, "main", communities=False)
    with pytest.raises(SchemaMismatchError, match="hashing-sha256 \\(384\\)"):
        query_data(
            "Who funded the Difference Engine?",
            QueryParam(space="main", mode="naive"),
            dsn=dsn,
            realm=realm,
            embedder=narrow.embedder(),
        )

    seen: list[tuple[int, int]] = []
    result = reembed_realm(
        narrow, realm, progress=lambda done, total: seen.append((done, total)), batch_size=5
    )

    assert (
        result["reembedded"]
        and result["from"] == "hashing-sha256 (384)"
        and result["to"] == "hashing-sha256 (64)"
    )
    # nothing was removed from the space and no report replaced, so the archives have no row to re-embed
    assert result["rows"] == {
        **{t: len(before[t]) for t in EMBEDDED_TABLES},
        "documents_removed": 0,
        "communities_expired": 0,
    }
    assert result["spaces"] == ["main"]
    total = result["texts"]
    assert seen[0] == (0, total) and seen[-1] == (total, total) and len(seen) == 1 + -(-total // 5)
    assert _registry(dsn, realm) == ("hashing-sha256", 64, "symmetric")
    snap = _snapshot(dsn, realm)
    assert snap["columns"] == [(t, "vector(64)") for t in sorted((*EMBEDDED_TABLES, *ARCHIVE_TABLES))]
    assert [name for name, _ in snap["indexes"]] == sorted(f"{t}_embedding_hnsw" for t in EMBEDDED_TABLES)
    assert all(f"{t}_embedding_hnsw" in plan for t, plan in _hnsw_plans(dsn, realm, 64).items())
    reference = HashingEmbedder(64)
    for table in EMBEDDED_TABLES:
        after = _texts(dsn, realm, table)
        assert {i for i, (_, v, _) in after.items() if v is not None} >= had_vector[table]
        for text, vec, h in after.values():
            assert vec is not None and vec.shape == (64,)
            assert np.allclose(vec, reference.embed_one(text), atol=1e-6)
            assert h == hashlib.sha256(text.encode()).hexdigest()

    naive = query_data(
        "Who funded the Difference Engine?",
        QueryParam(space="main", mode="naive"),
        dsn=dsn,
        realm=realm,
        embedder=narrow.embedder(),
    )
    assert any("British government funded" in c["text"] for c in naive.chunks)
    mix = query_data(
        "Who worked with Charles Babbage?",
        QueryParam(space="main", mode="mix", keywords="lexical"),
        dsn=dsn,
        realm=realm,
        embedder=narrow.embedder(),
    )
    assert "Charles Babbage" in {e["name"] for e in mix.entities} and mix.relations and mix.chunks

    # at the configured embedder already: nothing is rewritten
    xmins = _xmins(dsn, realm)
    assert reembed_realm(narrow, realm) == {
        "realm": realm,
        "reembedded": False,
        "from": "hashing-sha256 (64)",
        "to": "hashing-sha256 (64)",
    }
    assert _snapshot(dsn, realm) == snap and _xmins(dsn, realm) == xmins
    meta = {r.stage: r.metadata for r in index_documents(narrow, realm, "main", communities=False)}
    assert meta["embeddings"]["documents_embedded"] == meta["embeddings"]["entities_embedded"] == 0


def test_force_reembeds_a_realm_already_at_the_configured_embedder(indexed: SmallCorpus, realm: str) -> None:
    engine = indexed.engine()
    with db.connect(engine.dsn) as conn:
        conn.execute(
            sql.SQL("UPDATE {}.entities SET embedding = NULL").format(sql.Identifier(schema_for(realm)))
        )
        conn.commit()
    result = reembed_realm(engine, realm, force=True)
    assert result["reembedded"] and result["from"] == result["to"] == "hashing-sha256 (384)"
    assert all(v is not None for _, v, _ in _texts(engine.dsn, realm, "entities").values())


class _FailsOnSecondBatch:
    """The configured embedder's vectors, but its second call fails as a dropped connection would."""

    def __init__(self, inner: HashingEmbedder) -> None:
        self.inner, self.model, self.dim, self.convention = inner, inner.model, inner.dim, inner.convention
        self.calls = 0

    def embed(self, texts: list[str], kind: str = "passage") -> list[np.ndarray]:
        self.calls += 1
        if self.calls == 2:
            raise ModelError("embedding model hashing-sha256 failed: connection reset")
        return self.inner.embed(texts)


def test_an_embedder_failing_mid_way_changes_nothing(
    indexed: SmallCorpus, realm: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    dsn = indexed.engine().dsn
    before = _snapshot(dsn, realm)
    monkeypatch.setenv("PGRAG_EMBEDDING__DIM", "64")
    narrow = indexed.engine()
    narrow._embedder = failing = _FailsOnSecondBatch(HashingEmbedder(64))
    with pytest.raises(ModelError, match="connection reset"):
        reembed_realm(narrow, realm, batch_size=4)
    assert failing.calls == 2
    assert _snapshot(dsn, realm) == before


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, ModelError])
def test_a_failure_inside_the_write_transaction_rolls_every_change_back(
    indexed: SmallCorpus, realm: str, monkeypatch: pytest.MonkeyPatch, interrupt: type[BaseException]
) -> None:
    dsn = indexed.engine().dsn
    before = _snapshot(dsn, realm)
    monkeypatch.setenv("PGRAG_EMBEDDING__DIM", "64")
    reached: list[int] = []

    def fail_after_writing(conn: Any, name: str) -> None:  # columns altered and vectors written by now
        reached.append(
            conn.execute(
                sql.SQL("SELECT count(embedding) FROM {}.documents").format(sql.Identifier(schema_for(name)))
            ).fetchone()[0]
        )
        raise interrupt("interrupted while rebuilding the indexes")

    with monkeypatch.context() as m:
        m.setattr(embedding_columns, "create_embedding_indexes", fail_after_writing)
        with pytest.raises(interrupt):
            reembed_realm(indexed.engine(), realm)
    assert reached and reached[0] == len(before["rows"]["documents"])
    assert _snapshot(dsn, realm) == before
    assert reembed_realm(indexed.engine(), realm)["reembedded"]  # no lock was left behind


def test_a_running_stage_makes_reembed_wait_then_refuse(
    indexed: SmallCorpus, realm: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    dsn = indexed.engine().dsn
    before = _snapshot(dsn, realm)
    monkeypatch.setenv("PGRAG_EMBEDDING__DIM", "64")
    monkeypatch.setenv("PGRAG_OPERATIONS__LOCK_WAIT_S", "0.5")
    with locks.stage_lock(dsn, realm, "main", "embeddings", wait_s=0):
        with pytest.raises(PartitionBusyError, match=f"{realm}.main.*pgrag embeddings"):
            reembed_realm(indexed.engine(), realm)
    assert _snapshot(dsn, realm) == before


class _EditsWhileEmbedding:
    """The configured embedder; before its first batch another writer changes an entity's description."""

    def __init__(self, inner: HashingEmbedder, dsn: str, realm: str) -> None:
        self.inner, self.model, self.dim, self.convention = inner, inner.model, inner.dim, inner.convention
        self.dsn, self.realm = dsn, realm
        self.edited: int | None = None

    def embed(self, texts: list[str], kind: str = "passage") -> list[np.ndarray]:
        if self.edited is None:
            with db.connect(self.dsn) as conn:
                self.edited = conn.execute(
                    sql.SQL(
                        "UPDATE {}.entities SET description = 'Edited meanwhile.' "
                        "WHERE name = 'London' RETURNING id"
                    ).format(sql.Identifier(schema_for(self.realm)))
                ).fetchone()[0]
                conn.commit()
        return self.inner.embed(texts)


def test_a_row_edited_while_embedding_keeps_the_hash_of_the_text_embedded(
    indexed: SmallCorpus, realm: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    dsn = indexed.engine().dsn
    old_text = _texts(dsn, realm, "entities")
    monkeypatch.setenv("PGRAG_EMBEDDING__DIM", "64")
    narrow = indexed.engine()
    narrow._embedder = editing = _EditsWhileEmbedding(HashingEmbedder(64), dsn, realm)
    reembed_realm(narrow, realm)
    assert editing.edited is not None
    text, vec, h = _texts(dsn, realm, "entities")[editing.edited]
    was = old_text[editing.edited][0]
    assert text == "London: Edited meanwhile." and h == hashlib.sha256(was.encode()).hexdigest()
    assert np.allclose(vec, HashingEmbedder(64).embed_one(was), atol=1e-6)
    with db.connect(dsn) as conn:
        assert [i for i, _, _ in vectors.pending(conn, realm, "main", "entities")] == [editing.edited]
    assert (
        stage_embeddings(narrow, realm, "main").metadata["entities_embedded"] == 1
    )  # the next stage catches up
    assert np.allclose(
        _texts(dsn, realm, "entities")[editing.edited][1], HashingEmbedder(64).embed_one(text), atol=1e-6
    )


def test_an_unknown_realm_is_a_configuration_error(small_corpus: SmallCorpus) -> None:
    with pytest.raises(ConfigurationError, match="realm 'nosuchrealm' does not exist"):
        reembed_realm(small_corpus.engine(), "nosuchrealm")


def test_demo_re_embeds_a_realm_embedded_by_another_model_and_says_so(
    indexed: SmallCorpus, realm: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from pgrag_dag.assets.demo import _switch_embedders

    engine = indexed.engine()
    lines: list[str] = []
    assert reembed_if_switched(engine, realm, echo=lines.append) is None and lines == []
    monkeypatch.setenv("PGRAG_EMBEDDING__DIM", "64")
    narrow = indexed.engine()
    _switch_embedders(narrow, narrow.settings)
    out = capsys.readouterr().out.splitlines()
    assert out[0] == (
        f"realm {realm} is embedded with hashing-sha256 (384) but the configuration says "
        f"hashing-sha256 (64): re-embedding it (as `pgrag reembed {realm}` does)"
    )
    assert out[-1].startswith(f"realm {realm}: re-embedded ") and len(out) == 2
    assert _registry(engine.dsn, realm) == ("hashing-sha256", 64, "symmetric")
    _switch_embedders(narrow, narrow.settings)
    assert capsys.readouterr().out == ""


class _Stop(Exception):
    pass


def test_the_demo_re_embeds_before_it_materialises(
    indexed: SmallCorpus, realm: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import pgrag_dag.assets.demo as demo

    seen: list[tuple[str, tuple[Any, ...]]] = []

    def materialize(settings: Any, partition: str, **options: Any) -> None:
        seen.append((partition, _registry(settings.database_url, realm)))  # the registry when the run starts
        raise _Stop(partition)

    monkeypatch.setenv("PGRAG_CONFIG", str(indexed.config))
    monkeypatch.setenv("PGRAG_EMBEDDING__DIM", "64")
    monkeypatch.setattr(demo, "materialize_partition", materialize)
    assert demo.run_demo() == [f"{realm}.main"]  # the stopped run is reported as failed
    assert seen == [(f"{realm}.main", ("hashing-sha256", 64, "symmetric"))]
    out, err = capsys.readouterr()
    assert f"realm {realm} is embedded with hashing-sha256 (384)" in out and f"_Stop: {realm}.main" in err


@pytest.mark.slow
def test_reembedding_with_the_local_model_finds_a_paraphrased_chunk(
    small_corpus: SmallCorpus, realm: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    question = "Which UK authorities financed a calculating machine?"
    expected = "British government funded"
    hashing = small_corpus.engine()
    index_documents(hashing, realm, "main", communities=False)
    param = QueryParam(space="main", mode="naive", chunk_top_k=1)
    before = query_data(question, param, dsn=hashing.dsn, realm=realm, embedder=hashing.embedder())
    assert expected not in before.chunks[0]["text"]  # hashed words do not match a paraphrase
    monkeypatch.delenv("PGRAG_EMBEDDING__MODEL")
    local = small_corpus.engine()
    assert local.settings.embedding.model == "local/all-MiniLM-L6-v2"
    result = reembed_realm(local, realm)
    assert result["to"] == "local/all-MiniLM-L6-v2 (384)" and result["texts_per_s"] > 0
    after = query_data(question, param, dsn=local.dsn, realm=realm, embedder=local.embedder())
    assert expected in after.chunks[0]["text"]
