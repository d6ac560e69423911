"""Passage recall on the multi-hop benchmarks (issue 17 item 1): the metrics and both baselines on constructed
cases checked by hand, and the harness end to end on a slice of MuSiQue (its index, every mode, the run
record)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import psycopg
import pytest
from psycopg import sql

from evaluation import plots, recall
from evaluation.recall import (
    ARMS,
    BM25,
    EXACT,
    Benchmark,
    all_gold,
    bm25_rankings,
    exact_dense_rankings,
    passage_recall,
    score,
)
from pgrag_dag.store import schema
from pgrag_dag.store.identifiers import qualified
from tests.fix_corpus import SHARED_CORPORA

needs_corpora = pytest.mark.skipif(
    not (SHARED_CORPORA / "musique_hipporag_train100").is_dir(),
    reason="the shared corpora are not beside the repository (PGRAG_SHARED_DIR)",
)


def test_recall_and_all_gold_count_the_gold_passages_in_the_top_k() -> None:
    assert passage_recall([4, 1, 7], {1, 9}, 2) == 0.5 and passage_recall([4, 1, 7], {1, 9}, 1) == 0.0
    assert all_gold([9, 1, 7], {1, 9}, 2) == 1.0 and all_gold([9, 4, 1], {1, 9}, 2) == 0.0
    # question 1: gold {0, 1} ranked 1st and 3rd; question 2: gold {5} ranked 2nd
    assert score([[0, 3, 1], [2, 5, 6]], [{0, 1}, {5}], ks=(1, 2, 3)) == {
        "r@1": 0.25,
        "all@1": 0.0,
        "r@2": 0.75,
        "all@2": 0.5,
        "r@3": 1.0,
        "all@3": 1.0,
    }


def test_bm25_ranks_the_passages_sharing_the_rare_words_first() -> None:
    texts = [
        "Paris\nParis is the capital of France.",
        "Lyon\nLyon is a city in France.",
        "Berlin\nBerlin is the capital of Germany.",
        "Ada Lovelace\nAda Lovelace wrote the first program.",
        "Rome\nRome has many old churches.",
        "Madrid\nMadrid hosts a football club.",
    ]
    questions = ["Which city is the capital of Germany?", "Who wrote the first program?"]
    ranked, impl = bm25_rankings(texts, questions, depth=6)
    assert impl in ("rank_bm25.BM25Okapi", "baselines.bm25_scores")
    # "germany" occurs in passage 2 only, "city" in passage 1 only, "capital" in passages 0 and 2 (a lower
    # idf)
    assert ranked[0][:3] == [2, 1, 0]
    assert ranked[1][0] == 3  # "wrote", "first", "program" are passage 3's alone
    assert score(ranked, [{2, 0}, {3}], ks=(1, 2, 3)) == {
        "r@1": 0.75,
        "all@1": 0.5,
        "r@2": 0.75,
        "all@2": 0.5,
        "r@3": 1.0,
        "all@3": 1.0,
    }


def test_exact_dense_ranks_by_cosine_whatever_the_vector_lengths() -> None:
    passages = np.array([[1, 0, 0], [0, 3, 0], [1, 1, 0], [0, 0, 0.5]], dtype=np.float32)
    queries = np.array([[0, 2, 0.1], [1, 0.2, 0]], dtype=np.float32)
    ranked = exact_dense_rankings(passages, queries, depth=3)
    # q0 ≈ e2: passage 1 (cos 0.999), then 2 (0.705), then 3 (0.050); q1 ≈ e1: passage 0 (0.981), 2 (0.832), 1
    # (0.196)
    assert ranked == [[1, 2, 3], [0, 2, 1]]
    assert score(ranked, [{1, 3}, {2}], ks=(1, 2)) == {"r@1": 0.25, "all@1": 0.0, "r@2": 0.75, "all@2": 0.5}


@needs_corpora
def test_2wikimultihopqa_has_passages_and_no_questions_so_it_is_not_scored() -> None:
    wiki = recall.load_2wiki()
    assert len(wiki.titles) == 6119 and not wiki.scorable and "no questions" in wiki.note
    assert [p.name for p in (SHARED_CORPORA / "2wikimultihopqa_hipporag_corpus").iterdir()] == [
        "2wikimultihopqa_corpus.json"
    ]


@needs_corpora
def test_the_harness_scores_every_mode_and_both_baselines_on_a_musique_slice(
    pg_dsn: str, tmp_path: Path
) -> None:
    musique = recall.load_benchmarks(3)[0]
    gold = sorted(set().union(*musique.gold))
    keep = (
        gold + [i for i in range(len(musique.titles)) if i not in gold][:17]
    )  # the gold passages and 17 others
    where = {old: new for new, old in enumerate(keep)}
    part = Benchmark(
        "musique",
        [musique.titles[i] for i in keep],
        [musique.bodies[i] for i in keep],
        musique.questions,
        [{where[g] for g in q} for q in musique.gold],
    )
    none = Benchmark("2wikimultihopqa", ["T"], ["x"], note="no questions here")
    try:
        record = recall.run(
            [part, none], dsn=pg_dsn, out_dir=tmp_path, embedding_model="hashing-sha256", name="r"
        )
        # --reuse-index: the realm holds one embedded chunk per passage, so nothing is indexed again ...
        again = recall.run(
            [part],
            dsn=pg_dsn,
            out_dir=tmp_path,
            embedding_model="hashing-sha256",
            name="r2",
            reuse_index=True,
        )
        # ... but a pool of another size, or another embedding model, is not the index in place
        fewer = Benchmark("musique", part.titles[:-1], part.bodies[:-1], part.questions, part.gold)
        stale, why = recall.stored_index(pg_dsn, [fewer], embedding_model="hashing-sha256", dim=384)
        other, why_model = recall.stored_index(pg_dsn, [part], embedding_model="local/x", dim=384)
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
                    sql.Identifier(schema.schema_for(recall.REALM))
                )
            )
            conn.execute("DELETE FROM pgrag__control.realms WHERE realm = %s", (recall.REALM,))
    res = record.results
    assert res["model_calls"] == 0 and res["scores"]["2wikimultihopqa"] == {
        "scored": False,
        "note": "no questions here",
    }
    assert res["indexing"]["musique"]["passages"] == len(keep) and res["indexing"]["musique"]["relations"] > 0
    s = res["scores"]["musique"]
    # every arm ran, or (issue 26's fields absent) was skipped with a message
    assert set(s["arms"]) | set(res["skipped_arms"]) == set(ARMS) and s["questions"] == 3
    assert {"naive", "local", "local, graph only", "global"} <= set(s["arms"])
    # the baselines as recorded are the baseline functions' scores
    ranked, _ = bm25_rankings(part.texts, part.questions)
    assert {k: s["baselines"][BM25][k] for k in ("r@2", "r@5", "all@2", "all@5")} == score(ranked, part.gold)
    for _arm, v in s["arms"].items():
        assert {k: v[k] for k in ("r@2", "r@5", "all@2", "all@5")} == score(v["ranked"], part.gold)
        # 3 questions: all of them are the tune split, none is held out
        assert {k: v["splits"]["all"][k] for k in ("r@2", "r@5")} == {k: v[k] for k in ("r@2", "r@5")}
        assert v["splits"]["tune"]["questions"] == 3 and v["splits"]["held out"]["r@5"] is None
        assert sum(v["splits"]["all"]["vs_exact_r@5"].values()) == 3
    assert s["splits"] == {"tune": "tune, q 1–3", "held out": "held out, no question", "all": "all, q 1–3"}
    # the on-topic table of the local arm: every returned relation counted once by hop and once by rank
    topic = s["on_topic"]["local"]["all"]
    assert sum(c["relations"] for c in topic["hop"].values()) == topic["all"]["all"]["relations"]
    assert sum(c["relations"] for c in topic["rank"].values()) == topic["all"]["all"]["relations"]
    assert res["index_reused"] is False and again.results["index_reused"] is True
    assert again.results["indexing"]["musique"]["relations"] == res["indexing"]["musique"]["relations"]
    assert again.results["scores"]["musique"]["arms"]["naive"]["ranked"] == s["arms"]["naive"]["ranked"]
    assert stale is None and "chunks" in why and other is None and "hashing-sha256" in why_model
    assert s["arms"]["global"]["chunks_returned"] == 0  # global returns no chunks
    # searched chunks come first, so the entity-anchored modes rank naive's top chunk_top_k first
    for mode in ("local", "mix", "hybrid"):
        assert s["arms"][mode]["ranked"] == s["arms"]["naive"]["ranked"]
    assert set(s["arms"]["mix, graph only"]["via"]) <= {"mention"}
    # 25 vectors: HNSW finds the exact top 5, so naive equals exact dense
    assert s["naive_top5_equals_exact"] == 3 and s["arms"]["naive"]["r@5"] == s["baselines"][EXACT]["r@5"]
    data = json.loads((tmp_path / "r.json").read_text())
    table = data["tables"][0]
    row = next(r for r in table["rows"] if r[:2] == ["musique", "naive"])
    assert row[2:6] == [s["arms"]["naive"][k] for k in ("r@2", "r@5", "all@2", "all@5")]
    assert ["2wikimultihopqa", "(every arm)"] == next(r for r in table["rows"] if r[0] == "2wikimultihopqa")[
        :2
    ]
    if plots.pyplot() is not None:  # an evaluation extra (requirements-eval.txt): no chart without it
        assert (tmp_path / "r.png").stat().st_size > 10_000 and data["plots"] == ["r.png"]
    assert "no questions here" in (tmp_path / "r.md").read_text()


def test_names_postgresql_lowercases_alike_resolve_to_one_vertex(
    pg_dsn: str, realm: str, tmp_path: Path
) -> None:
    """Found indexing MuSiQue offline: "İzmir" (Python lowercases it to "i̇zmir") and "Izmir" are one row under
    PostgreSQL's lower() — the entity writer must map its inserted rows by the name it sent, or a triple
    endpoint is left unresolved (KeyError in the relations stage)."""
    import yaml

    from pgrag_dag.config import load_settings
    from pgrag_dag.engine import Engine
    from pgrag_dag.pipeline import index_documents

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text(
        "Şükrü Gürel was a native of İzmir. Gürel worked in Ankara for Bülent Ecevit.\n"
    )
    (docs / "b.txt").write_text(
        "The consulate of Pakistan in Izmir opened in 1990. Ankara and Izmir are large cities.\n"
    )
    cfg = tmp_path / "pgrag.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "llm": {"models": ["replay"]},
                "realms": {
                    realm: {
                        "spaces": {
                            "s": {
                                "extractor": {"name": "cooccurrence"},
                                "sources": [{"path": "docs", "glob": "*.txt"}],
                            }
                        }
                    }
                },
            }
        )
    )
    engine = Engine.from_settings(load_settings(cfg, database_url=pg_dsn))
    try:
        meta = {r.stage: r.metadata for r in index_documents(engine, realm, "s", communities=False)}
    finally:
        engine.close()
    assert meta["relations"]["relations"] > 0
    with psycopg.connect(pg_dsn) as conn:
        rows = conn.execute(
            sql.SQL("SELECT name, aliases FROM {} WHERE space = 's' AND lower(name) = lower('Izmir')").format(
                qualified(realm, "entities")
            )
        ).fetchall()
        assert len(rows) == 1 and {rows[0][0], *rows[0][1]} == {"İzmir", "Izmir"}
        edges = conn.execute(
            sql.SQL("""SELECT count(*) FROM {r} r JOIN {e} e ON e.id IN (r.source_id, r.target_id)
                                        WHERE e.space = 's' AND lower(e.name) = lower('Izmir')""").format(
                r=qualified(realm, "relations"), e=qualified(realm, "entities")
            )
        ).fetchone()
        assert edges is not None and edges[0] >= 2  # the edges of both documents
