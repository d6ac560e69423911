"""The realm's HNSW indexes (paper §3.5; issue 13 item 11, models wider than 2,000 dimensions; issue 30,
the ``halfvec`` kind at every width): a realm stores ``vector(d)`` and indexes a ``halfvec`` expression,
every vector search orders by that expression (so the index serves it) and reports the full-precision
distance, realms of different widths coexist, a realm built with the older ``vector_cosine_ops`` indexes is
upgraded, and a width above the index limit is refused before anything is written. Real PostgreSQL, real
stages, the hashing embedder at 384 and at width 3,072 (text-embedding-3-large's)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from pgrag_dag.errors import SchemaMismatchError
from pgrag_dag.operate.reembed import reembed_realm
from pgrag_dag.operate.status import store_status, summary_lines
from pgrag_dag.pipeline import index_documents
from pgrag_dag.providers.embedding import HashingEmbedder
from pgrag_dag.query import QueryParam, query_data
from pgrag_dag.store import db, embedding_columns, retrieval, retrieval_channels, schema, vectors
from pgrag_dag.store.embedding_columns import EMBEDDED_TABLES
from pgrag_dag.store.identifiers import qualified
from pgrag_dag.store.schema import schema_for
from tests.fix_corpus import SmallCorpus

WIDE = 3072


def _drop(conn: psycopg.Connection, realm: str) -> None:
    conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema_for(realm))))
    conn.execute("DELETE FROM pgrag__control.realms WHERE realm = %s", (realm,))


@pytest.fixture
def fresh(conn: psycopg.Connection) -> Iterator[list[str]]:
    """Names of realms a test creates itself; dropped afterwards."""
    made: list[str] = []
    yield made
    for name in made:
        _drop(conn, name)


def _index_defs(conn: psycopg.Connection, realm: str) -> dict[str, str]:
    rows = conn.execute(
        "SELECT tablename, indexdef FROM pg_indexes WHERE schemaname = %s "
        "AND indexname LIKE '%%embedding_hnsw'",
        (schema_for(realm),),
    ).fetchall()
    return dict(rows)


def _search_plans(
    conn: psycopg.Connection, realm: str, dim: int, monkeypatch: pytest.MonkeyPatch
) -> dict[str, str]:
    """table → the plan of the real search function over it: EXPLAIN of the very statement it runs, with
    sequential scans and sorts disabled, so that the nearest-neighbour ORDER BY is served by an index
    whenever one can serve it (on these few rows the planner would rather sort them)."""
    plans: dict[str, str] = {}
    real = retrieval.fetch

    def explained(
        c: psycopg.Connection, query: sql.Composed, params: dict[str, Any], *, vector: bool = False
    ) -> Any:
        if vector:
            with c.transaction():
                c.execute("SET LOCAL enable_seqscan = off")
                c.execute("SET LOCAL enable_sort = off")
                rows = c.execute(sql.SQL("EXPLAIN ") + query, params, prepare=False).fetchall()
            plans[len(plans)] = " ".join(r[0] for r in rows)  # type: ignore[index]
        return real(c, query, params, vector=vector)

    q = HashingEmbedder(dim).embed_one("Charles Babbage designed the Difference Engine")
    with monkeypatch.context() as m:
        m.setattr(retrieval, "fetch", explained)
        m.setattr(retrieval_channels, "fetch", explained)
        found = {
            "entities": retrieval.entity_search(conn, realm, "main", q, 3),
            "documents": retrieval.chunk_search(conn, realm, "main", q, 3),
            "relations": retrieval_channels.relation_similarity(conn, realm, "main", q, 3),
            "communities": retrieval_channels.community_search(conn, realm, "main", q, 3),
        }
    assert all(found.values()), {t: len(rows) for t, rows in found.items()}
    return dict(zip(found, plans.values()))


def test_a_3072_dimension_realm_indexes_halfvec_and_every_vector_search_uses_the_index(
    small_corpus: SmallCorpus, realm: str, conn: psycopg.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    _drop(conn, realm)  # the fixture made it at 384; the stages create it at the configured width
    monkeypatch.setenv("PGRAG_EMBEDDING__DIM", str(WIDE))
    engine = small_corpus.engine()
    index_documents(engine, realm, "main")

    assert conn.execute(
        "SELECT embedding_dim FROM pgrag__control.realms WHERE realm = %s", (realm,)
    ).fetchone() == (WIDE,)
    embedding_columns.verify_embedding_columns(conn, realm, WIDE)  # stored at full precision: vector(3072)
    defs = _index_defs(conn, realm)
    assert sorted(defs) == sorted(EMBEDDED_TABLES)
    for _table, definition in defs.items():
        assert f"((embedding)::halfvec({WIDE})) halfvec_cosine_ops" in definition, definition
    audit = vectors.audit(conn, realm, "main", WIDE)
    assert audit.height and not audit["missing"].any() and (audit["dim"] == WIDE).all()

    for table, plan in _search_plans(conn, realm, WIDE, monkeypatch).items():
        assert f"Index Scan using {table}_embedding_hnsw" in plan, (table, plan)

    result = query_data(
        "Who designed the Difference Engine?",
        QueryParam(space="main", mode="hybrid", keywords="lexical"),
        dsn=engine.dsn,
        realm=realm,
        embedder=engine.embedder(),
    )
    assert "Charles Babbage" in {e["name"] for e in result.entities}
    assert (
        any("Difference Engine" in c["text"] for c in result.chunks)
        and result.relations
        and result.communities
    )
    assert not [w for w in result.warnings if "embedding" in w]


def test_realms_of_different_widths_coexist(
    conn: psycopg.Connection, realm: str, fresh: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    wide = f"{realm}_w"
    fresh.append(wide)
    assert schema.init_realm(conn, wide, embedding_model="hashing-sha256", dim=WIDE) is True
    texts = ["Charles Babbage: mathematician", "Ada Lovelace: writer", "London: a city"]
    for name, dim in ((realm, 384), (wide, WIDE)):
        embedder = HashingEmbedder(dim)
        with conn.transaction():
            ids = [
                conn.execute(
                    sql.SQL(
                        "INSERT INTO {} (space, name, description) VALUES ('main', %s, %s) RETURNING id"
                    ).format(qualified(name, "entities")),
                    t.split(": "),
                ).fetchone()[0]
                for t in texts
            ]
            vectors.write(
                conn, name, "entities", [(i, t, "h") for i, t in zip(ids, texts)], embedder.embed(texts)
            )
    for name, dim in ((realm, 384), (wide, WIDE)):
        q = HashingEmbedder(dim).embed_one("Ada Lovelace: writer")
        hits = retrieval.entity_search(conn, name, "main", q, 2)
        assert hits[0]["name"] == "Ada Lovelace" and hits[0]["score"] == pytest.approx(1.0, abs=1e-3)
    assert "((embedding)::halfvec(384)) halfvec_cosine_ops" in _index_defs(conn, realm)["entities"]
    assert f"((embedding)::halfvec({WIDE})) halfvec_cosine_ops" in _index_defs(conn, wide)["entities"]
    schema.init_realm(conn, realm, embedding_model="hashing-sha256", dim=384)  # each keeps its own width
    schema.init_realm(conn, wide, embedding_model="hashing-sha256", dim=WIDE)


@pytest.mark.parametrize("dim", [4001, 8192])
def test_a_width_above_the_index_limit_fails_before_any_write(
    conn: psycopg.Connection, realm: str, dim: int
) -> None:
    name = f"{realm}_toowide"
    with pytest.raises(SchemaMismatchError) as info:
        schema.init_realm(conn, name, embedding_model="openai/too-wide", dim=dim)
    message = str(info.value)
    assert "\n" not in message
    for part in (
        repr(name),
        schema_for(name),
        "documents,entities,relations,communities",
        str(dim),
        "4000",
        "embedding.dim",
    ):
        assert part in message, (part, message)
    assert conn.execute(
        "SELECT count(*) FROM pgrag__control.realms WHERE realm = %s", (name,)
    ).fetchone() == (0,)
    assert conn.execute("SELECT to_regnamespace(%s)", (schema_for(name),)).fetchone() == (None,)


def test_reembedding_across_2000_dimensions_indexes_the_new_width_both_ways(
    small_corpus: SmallCorpus, realm: str, conn: psycopg.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = small_corpus.engine()
    index_documents(engine, realm, "main")
    assert all("::halfvec(384)) halfvec_cosine_ops" in d for d in _index_defs(conn, realm).values())

    monkeypatch.setenv("PGRAG_EMBEDDING__DIM", str(WIDE))
    wide = small_corpus.engine()
    assert reembed_realm(wide, realm)["reembedded"]
    assert all(f"::halfvec({WIDE})" in d for d in _index_defs(conn, realm).values())
    for table, plan in _search_plans(conn, realm, WIDE, monkeypatch).items():
        assert f"Index Scan using {table}_embedding_hnsw" in plan, (table, plan)

    monkeypatch.setenv("PGRAG_EMBEDDING__DIM", "384")
    assert reembed_realm(small_corpus.engine(), realm)["reembedded"]
    assert all("::halfvec(384)) halfvec_cosine_ops" in d for d in _index_defs(conn, realm).values())
    for table, plan in _search_plans(conn, realm, 384, monkeypatch).items():
        assert f"Index Scan using {table}_embedding_hnsw" in plan, (table, plan)


def test_reembedding_to_a_width_above_the_limit_changes_nothing(
    small_corpus: SmallCorpus, realm: str, conn: psycopg.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    index_documents(small_corpus.engine(), realm, "main", communities=False)
    before = _index_defs(conn, realm)
    monkeypatch.setenv("PGRAG_EMBEDDING__DIM", "4096")
    with pytest.raises(SchemaMismatchError, match="4096.*4000|4000.*4096"):
        reembed_realm(small_corpus.engine(), realm)
    assert _index_defs(conn, realm) == before
    assert conn.execute(
        "SELECT embedding_dim FROM pgrag__control.realms WHERE realm = %s", (realm,)
    ).fetchone() == (384,)
    with db.connect(small_corpus.engine().dsn) as c:
        embedding_columns.verify_embedding_columns(c, realm, 384)


def test_a_first_load_builds_the_hnsw_index_after_the_vectors_and_a_missing_index_is_rebuilt(
    small_corpus: SmallCorpus, realm: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 15: with ``embedding.bulk_load_rows`` reached on a table holding no vector, the embeddings stage
    drops its HNSW index, writes, and builds it once after (logged); a later run finds the index present and
    builds nothing; an index dropped behind its back (a killed build) is built by the next run."""
    import logging

    from pgrag_dag.store import bulk_index

    engine = small_corpus.engine(
        embedding={"model": "hashing-sha256", "dim": 384, "bulk_load_rows": 2, "index_build_memory": "64MB"}
    )
    with caplog.at_level(logging.INFO, logger="pgrag_dag.store.bulk_index"):
        first = {r.stage: r for r in index_documents(engine, realm, "main", communities=False)}["embeddings"]
    assert set(first.metadata["hnsw_built_after_load"]) == {"documents", "entities", "relations"}
    assert first.metadata["hnsw_build_seconds"] >= 0 and "building the HNSW index of" in caplog.text
    with db.connect(engine.dsn) as conn:
        assert bulk_index.missing(conn, realm) == []
        relations = vectors.unembedded(conn, realm, "main")["relations"]["missing"]
    assert relations == 0
    again = {r.stage: r for r in index_documents(engine, realm, "main", communities=False)}["embeddings"]
    assert again.metadata["hnsw_built_after_load"] == [] and again.metadata["hnsw_build_seconds"] is None
    with db.connect(engine.dsn, autocommit=True) as conn:
        bulk_index.drop(conn, realm, ["relations"])
        assert bulk_index.missing(conn, realm) == ["relations"]
    healed = {r.stage: r for r in index_documents(engine, realm, "main", communities=False)}["embeddings"]
    assert healed.metadata["hnsw_built_after_load"] == ["relations"]
    with db.connect(engine.dsn, autocommit=True) as conn:
        assert bulk_index.missing(conn, realm) == []
        # a first load drops the full-text index too (issue 30): one a killed build left missing is rebuilt
        conn.execute(sql.SQL("DROP INDEX {}.relations_fts_tsv").format(sql.Identifier(schema_for(realm))))
        assert bulk_index.missing(conn, realm) == ["relations"]
    index_documents(engine, realm, "main", communities=False)
    with db.connect(engine.dsn) as conn:
        assert bulk_index.missing(conn, realm) == []
        gin = conn.execute(
            "SELECT indexdef FROM pg_indexes WHERE schemaname = %s AND indexname = 'relations_fts_tsv'",
            (schema_for(realm),),
        ).fetchone()
        assert gin is not None and "USING gin (rendered_tsv)" in gin[0] and "fastupdate=off" in gin[0]


def test_every_vector_search_reports_and_orders_by_the_full_precision_distance(
    small_corpus: SmallCorpus, realm: str, conn: psycopg.Connection
) -> None:
    """Issue 30: the ``halfvec`` index only picks the ``k`` rows; each search reports the cosine distance of
    the stored ``vector`` (equal to numpy's on the same vectors to 1e-6, where ``halfvec`` rounding is off by
    about 1e-5) and orders its rows by it."""
    import numpy as np

    index_documents(small_corpus.engine(), realm, "main")
    q = HashingEmbedder(384).embed_one("Charles Babbage designed the Difference Engine")
    found = {
        "entities": retrieval.entity_search(conn, realm, "main", q, 5),
        "documents": retrieval.chunk_search(conn, realm, "main", q, 5),
        "relations": retrieval_channels.relation_similarity(conn, realm, "main", q, 5),
        "communities": retrieval_channels.community_search(conn, realm, "main", q, 5),
    }
    off = []
    for table, rows in found.items():
        assert len(rows) >= (1 if table == "communities" else 2), table  # the small corpus: one report
        scores = [r["score"] for r in rows]  # 1 - distance
        assert scores == sorted(scores, reverse=True), table
        stored = dict(
            conn.execute(
                sql.SQL("SELECT id, embedding FROM {} WHERE id = ANY(%s)").format(qualified(realm, table)),
                ([r["id"] for r in rows],),
            ).fetchall()
        )
        for r in rows:
            v = np.asarray(stored[r["id"]].to_numpy(), dtype=np.float64)
            exact = 1.0 - float(v @ q) / (np.linalg.norm(v) * np.linalg.norm(q))
            assert 1.0 - r["score"] == pytest.approx(exact, abs=1e-6), (table, r["id"])
            half = v.astype(np.float16).astype(np.float64) @ q.astype(np.float16).astype(np.float64)
            off.append(abs(exact - (1.0 - half / (np.linalg.norm(v) * np.linalg.norm(q)))))
    assert max(off) > 1e-6  # what the test tells apart: the halfvec distance is not within its tolerance


def test_a_realm_indexed_before_halfvec_indexes_is_upgraded_by_the_next_runs(
    small_corpus: SmallCorpus, realm: str, conn: psycopg.Connection, caplog: pytest.LogCaptureFixture
) -> None:
    """Schema version 26: a realm whose HNSW indexes are the older ``vector_cosine_ops`` ones has them
    dropped by the schema upgrade (a warning names them; searches still answer, by a scan) and built again
    as ``halfvec`` by the next embeddings run; the vectors are kept, nothing is embedded again."""
    import logging

    from pgrag_dag.store import bulk_index

    engine = small_corpus.engine()
    index_documents(engine, realm, "main")
    s = sql.Identifier(schema_for(realm))
    with conn.transaction():
        for table in EMBEDDED_TABLES:
            conn.execute(sql.SQL("DROP INDEX {}.{}").format(s, sql.Identifier(f"{table}_embedding_hnsw")))
            conn.execute(
                sql.SQL("CREATE INDEX {} ON {}.{} USING hnsw (embedding vector_cosine_ops)").format(
                    sql.Identifier(f"{table}_embedding_hnsw"), s, sql.Identifier(table)
                )
            )
        conn.execute("UPDATE pgrag__control.realms SET schema_version = 25 WHERE realm = %s", (realm,))
    before = vectors.audit(conn, realm, "main", 384).sort("table", "row_id")
    assert bulk_index.missing(conn, realm) == list(EMBEDDED_TABLES)  # what pgrag status names
    registered = conn.execute(
        "SELECT embedding_model FROM pgrag__control.realms WHERE realm = %s", (realm,)
    ).fetchone()[0]  # type: ignore[index]

    with caplog.at_level(logging.WARNING, logger="pgrag_dag.store.schema"):
        assert schema.init_realm(conn, realm, embedding_model=registered, dim=384) is True
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and "documents, entities, relations, communities" in warned[0], warned
    assert _index_defs(conn, realm) == {}
    assert bulk_index.missing(conn, realm) == list(EMBEDDED_TABLES)
    lines = summary_lines(store_status(engine.settings))
    assert any(
        "indexes: communities, documents, entities, relations still to build" in line
        and "pgrag index" in line
        for line in lines
    ), lines
    q = HashingEmbedder(384).embed_one("Charles Babbage")
    assert retrieval.entity_search(conn, realm, "main", q, 3)  # answered meanwhile, by a scan
    assert schema.init_realm(conn, realm, embedding_model=registered, dim=384) is False

    embeddings = {r.stage: r for r in index_documents(engine, realm, "main")}["embeddings"]
    assert sorted(embeddings.metadata["hnsw_built_after_load"]) == sorted(EMBEDDED_TABLES)
    assert sum(v for k, v in embeddings.metadata.items() if k.endswith("_embedded")) == 0
    defs = _index_defs(conn, realm)
    assert sorted(defs) == sorted(EMBEDDED_TABLES)
    assert all("((embedding)::halfvec(384)) halfvec_cosine_ops" in d for d in defs.values()), defs
    after = vectors.audit(conn, realm, "main", 384).sort("table", "row_id")
    assert after.equals(before)
    assert bulk_index.missing(conn, realm) == []
    assert not any("still to build" in line for line in summary_lines(store_status(engine.settings)))

    # code from before halfvec indexes, run on the upgraded realm, builds a vector_cosine_ops index again:
    # the next embeddings run replaces it (a new user's trial found it kept for good)
    with conn.transaction():
        conn.execute(sql.SQL("DROP INDEX {}.relations_embedding_hnsw").format(s))
        conn.execute(
            sql.SQL(
                "CREATE INDEX relations_embedding_hnsw ON {}.relations "
                "USING hnsw (embedding vector_cosine_ops)"
            ).format(s)
        )
    assert bulk_index.missing(conn, realm) == ["relations"]
    again = {r.stage: r for r in index_documents(engine, realm, "main")}["embeddings"]
    assert again.metadata["hnsw_built_after_load"] == ["relations"]
    assert "((embedding)::halfvec(384)) halfvec_cosine_ops" in _index_defs(conn, realm)["relations"]
    assert bulk_index.missing(conn, realm) == []


def test_auto_build_memory_fits_the_largest_tables_graph_within_a_quarter_of_the_machine() -> None:
    from pgrag_dag.store import bulk_index

    gb = 2**30
    # 102,761 vectors of 384 dimensions: (768 + 1,024) bytes each (a halfvec value: 2 bytes per dimension)
    # and a quarter more
    assert bulk_index.auto_memory({"relations": 102_761, "entities": 28_725}, 384, 24 * gb) == "220MB"
    assert bulk_index.auto_memory({"relations": 1_029_432}, 384, 24 * gb) == "2200MB"
    assert bulk_index.auto_memory({"documents": 10}, 384, 24 * gb) == "64MB"  # the floor
    assert bulk_index.auto_memory({}, 384, 24 * gb) == "64MB"
    assert bulk_index.auto_memory({"relations": 1_029_432}, 384, 8 * gb) == "2048MB"  # the cap
    assert bulk_index.auto_memory({"relations": 100_000}, 3072, 24 * gb) == "855MB"


def test_an_hnsw_build_that_outgrows_its_memory_is_logged_and_auto_memory_fits_it(
    conn: psycopg.Connection, realm: str, pg_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 30 item 5: pgvector's "no longer fits" notice becomes a warning naming the setting; ``auto``
    gives the build the memory it needs (no warning)."""
    import logging

    from pgrag_dag.store import bulk_index

    # 1,500 random unit-ish vectors: about 3.4 MB of graph, more than 1MB of maintenance_work_mem
    conn.execute(
        sql.SQL("""INSERT INTO {} (space, name, entity_type, description, embedding)
                   SELECT 'main', 'e' || g, 'Concept', '',
                          array(SELECT random() - 0.5 FROM generate_series(1, 384) WHERE g > 0)::vector
                     FROM generate_series(1, 1500) g""").format(qualified(realm, "entities"))
    )
    for memory, overflows in (("1MB", True), ("auto", False)):
        caplog.clear()
        bulk_index.drop(conn, realm, ["entities"])
        assert bulk_index.missing(conn, realm) == ["entities"]
        with caplog.at_level(logging.INFO, logger="pgrag_dag.store.bulk_index"):
            bulk_index.build(pg_dsn, realm, ["entities"], memory=memory)
        assert bulk_index.missing(conn, realm) == []
        warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert bool(warned) is overflows, warned
        if overflows:
            assert "no longer fits" in warned[0] and "embedding.index_build_memory" in warned[0]
        else:
            assert "maintenance_work_mem 64MB" in caplog.text
