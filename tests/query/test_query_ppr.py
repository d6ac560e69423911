"""The personalised-PageRank graph ranking (issue 26) against real PostgreSQL: the walk equals a reference
PageRank, a bridge question finds the passage dense retrieval misses, no mass crosses spaces or realms,
edges not valid or not believed carry none, the cache follows the space's data version, near-duplicates
count once."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

import igraph as ig
import numpy as np
import psycopg
import pytest
from psycopg import sql

from pgrag_dag.errors import QueryError
from pgrag_dag.query import QueryParam, ppr, query_data
from pgrag_dag.query import fusion as fuse
from pgrag_dag.store import graph_version, walk_graph
from pgrag_dag.store.identifiers import qualified
from pgrag_dag.temporal import Temporal
from tests.fix_pg import drop_realm
from tests.query.test_query_modes import EMB, GraphBuilder

PPR = {"graph_ranking": "ppr"}


def _reference_ppr(n: int, edges: list[tuple[int, int, float]], reset: np.ndarray, d: float) -> np.ndarray:
    """Power iteration of p = (1 − d)·r + d·Wᵀp on the undirected weighted graph (no sinks here)."""
    w = np.zeros((n, n))
    for a, b, x in edges:
        w[a, b] += x
        w[b, a] += x
    trans = w / w.sum(axis=1, keepdims=True)
    r = reset / reset.sum()
    p = r.copy()
    for _ in range(500):
        p = (1 - d) * r + d * trans.T @ p
    return p


def test_the_walk_equals_a_reference_pagerank_on_a_hand_built_graph() -> None:
    # entities 10, 11, 12; chunks 100, 101, 102
    edges = walk_graph.WalkEdges(
        mentions=np.array([[100, 10], [100, 11], [101, 11], [101, 12], [102, 12]], dtype=np.int64),
        relations=np.array([[10, 12]], dtype=np.int64),
        relation_weight=np.array([3.0]),
        titles=np.zeros((0, 2), dtype=np.int64),
    )
    g = ppr.WalkGraph.from_edges(edges, np.array([100, 101, 102], dtype=np.int64))
    assert g.entity_ids.tolist() == [10, 11, 12] and g.chunk_ids.tolist() == [100, 101, 102]
    assert g.chunks_of.tolist() == [1.0, 2.0, 2.0]
    walk = g.walk({11: 1.0}, {100: 0.9, 102: 0.5}, damping=0.5, prior_weight=0.05)
    assert walk is not None and walk.seeds == {11: 0.5}  # 1 / (2 chunks mention it)
    reset = np.array([0, 0.5, 0, 0.05 * 1.0, 0, 0.05 * 0.0])  # prior min-max: 100 → 1, 102 → 0
    ref = _reference_ppr(6, [(3, 0, 1), (3, 1, 1), (4, 1, 1), (4, 2, 1), (5, 2, 1), (0, 2, 3.0)], reset, 0.5)
    got = [walk.entity_score(i) for i in (10, 11, 12)] + walk.chunk_mass.tolist()
    assert np.allclose(got, ref, atol=1e-6)
    # and igraph's PRPACK on the same graph, with a vertex without edges (chunk 103: restart only)
    with_sink = ppr.WalkGraph.from_edges(edges, np.array([100, 101, 102, 103], dtype=np.int64))
    mine = with_sink.walk({11: 1.0}, {100: 0.9, 102: 0.5, 103: 0.7}, damping=0.5, prior_weight=0.05)
    assert mine is not None
    graph = ig.Graph(n=7, edges=[(3, 0), (3, 1), (4, 1), (4, 2), (5, 2), (0, 2)])
    graph.es["weight"] = [1, 1, 1, 1, 1, 3.0]
    reset7 = [0, 0.5, 0, 0.05, 0, 0, 0.05 * 0.5]
    prpack = graph.personalized_pagerank(damping=0.5, directed=False, weights="weight", reset=reset7)
    assert np.allclose(np.concatenate([mine.entity_mass, mine.chunk_mass]), prpack, atol=1e-6)
    assert [c for c, _ in walk.top_chunks(3)] == [100, 101, 102]
    assert g.walk({999: 1.0}, {100: 1.0}, damping=0.5, prior_weight=0.05) is None  # no seed in the graph


def test_local_push_gives_the_exact_walk_and_the_same_best_chunks() -> None:
    edges = walk_graph.WalkEdges(
        mentions=np.array([[100, 10], [100, 11], [101, 11], [101, 12], [102, 12]], dtype=np.int64),
        relations=np.array([[10, 12]], dtype=np.int64),
        relation_weight=np.array([3.0]),
        titles=np.zeros((0, 2), dtype=np.int64),
    )
    g = ppr.WalkGraph.from_edges(edges, np.array([100, 101, 102, 103], dtype=np.int64))  # 103: a sink
    args = ({11: 1.0}, {100: 0.9, 102: 0.5, 103: 0.7})
    exact = g.walk(*args, damping=0.5, prior_weight=0.05, method="exact")
    pushed = g.walk(*args, damping=0.5, prior_weight=0.05, method="push", epsilon=1e-12)
    assert exact is not None and pushed is not None and pushed.seeds == exact.seeds
    assert np.allclose(pushed.mass, exact.mass, atol=1e-6)
    assert pushed.chunk_mass[3] > 0  # the sink keeps its restart mass and sends the rest back
    with pytest.raises(ValueError, match="unknown walk method 'pagerank'"):
        g.walk(*args, damping=0.5, prior_weight=0.05, method="pagerank")
    # a random graph of 3,000 chunks and 1,000 entities: at the default epsilon the best chunks are the same
    rng = np.random.default_rng(3)
    mentions = np.column_stack([rng.integers(0, 3000, 12000) + 10_000, rng.zipf(1.6, 12000) % 1000])
    relations = rng.integers(0, 1000, (4000, 2))
    big = ppr.WalkGraph.from_edges(
        walk_graph.WalkEdges(
            mentions, relations, rng.integers(1, 4, 4000).astype(float), np.zeros((0, 2), dtype=np.int64)
        ),
        np.arange(10_000, 13_000, dtype=np.int64),
    )
    seeds = {int(e): 1.0 for e in rng.choice(big.entity_ids, 3, replace=False)}
    prior = {int(c): float(rng.random()) for c in rng.choice(big.chunk_ids, 30, replace=False)}
    best = [big.walk(seeds, prior, damping=0.7, prior_weight=0.05, method=m) for m in ("exact", "push")]
    assert best[0] is not None and best[1] is not None
    assert {c for c, _ in best[0].top_chunks(24)} == {c for c, _ in best[1].top_chunks(24)}


def test_question_keys_find_names_and_lowercase_ngrams() -> None:
    q = "Who founded the company that built the analytical engine with Ada Lovelace?"
    assert set(ppr.question_keys(q)) == {"ada lovelace"}
    grams = ppr.question_keys(q, names=False, ngrams=True)
    assert "analytical engine" in grams and "ada lovelace" in grams and "company" in grams
    assert "the" not in grams and "who" not in grams and "with the" not in grams


@pytest.fixture
def bridge(conn: psycopg.Connection, realm: str) -> GraphBuilder:
    """A two-hop question: "Where was the designer of the Vexwold Lathe born?" — the first passage names the
    lathe and its designer, the second (the answer) names only the designer and his birthplace; decoys share
    the question's words. Dense (hashing) retrieval at chunk_top_k 2 misses the second passage."""
    b = GraphBuilder(conn, realm)
    b.entity("Vexwold Lathe")
    b.entity("Orrin Tamsk")
    b.entity("Port Hallow")
    b.rel("Orrin Tamsk", "designed", "Vexwold Lathe", weight=2)
    b.rel("Orrin Tamsk", "born_in", "Port Hallow")
    b.chunk(
        "lathe", "The Vexwold Lathe was designed by Orrin Tamsk.", mentions=("Vexwold Lathe", "Orrin Tamsk")
    )
    b.chunk(
        "birth", "Orrin Tamsk came into the world in Port Hallow.", mentions=("Orrin Tamsk", "Port Hallow")
    )
    for i in range(4):
        b.chunk(f"decoy{i}", f"Where was the lathe designer born? Nobody knows where designer {i} was born.")
    return b


def test_a_bridge_question_finds_the_passage_dense_retrieval_misses(
    pg_dsn: str, realm: str, bridge: GraphBuilder
) -> None:
    q = "Where was the designer of the Vexwold Lathe born?"
    birth = bridge.ids["chunk:alpha:birth"]
    naive = query_data(
        q, QueryParam(space="alpha", mode="naive", chunk_top_k=2), dsn=pg_dsn, realm=realm, embedder=EMB
    )
    assert birth not in [c["id"] for c in naive.chunks]
    res = query_data(
        q,
        QueryParam(space="alpha", mode="local", chunk_top_k=2, **PPR),
        dsn=pg_dsn,
        realm=realm,
        embedder=EMB,
    )
    ids = [c["id"] for c in res.chunks]
    assert birth in ids and bridge.ids["chunk:alpha:lathe"] in ids
    assert all(c["via"] == "ppr" and c["ppr_score"] > 0 for c in res.chunks)
    assert res.channels["ppr_seeds"] == 1 and res.entities[0]["name"] == "Vexwold Lathe"
    assert {e["name"] for e in res.entities} >= {"Orrin Tamsk", "Port Hallow"}
    walked = {(r["subject"], r["predicate"], r["object"]): r for r in res.relations}
    assert walked[("Orrin Tamsk", "designed", "Vexwold Lathe")]["hop"] == 1
    assert walked[("Orrin Tamsk", "born_in", "Port Hallow")]["hop"] == 2
    assert res.relations[0]["ppr_score"] >= res.relations[-1]["ppr_score"]


def test_a_question_naming_nothing_falls_back_to_the_dense_path(
    pg_dsn: str, realm: str, bridge: GraphBuilder
) -> None:
    q = "where do designers come from"
    res = query_data(
        q,
        QueryParam(space="alpha", mode="local", chunk_top_k=2, **PPR),
        dsn=pg_dsn,
        realm=realm,
        embedder=EMB,
    )
    old = query_data(
        q, QueryParam(space="alpha", mode="local", chunk_top_k=2), dsn=pg_dsn, realm=realm, embedder=EMB
    )
    assert res.channels["ppr_seeds"] == 0
    assert [c["id"] for c in res.chunks] == [c["id"] for c in old.chunks]
    assert {c["via"] for c in res.chunks} <= {"vector", "mention"}


def test_no_mass_crosses_spaces_or_realms(conn: psycopg.Connection, pg_dsn: str, realm: str) -> None:
    from pgrag_dag.store import schema

    b = GraphBuilder(conn, realm)
    b.chunk("mine", "Quorvex Mill stands by the river.", mentions=("Quorvex Mill",))
    b.chunk("theirs", "Quorvex Mill in beta grinds corn.", space="beta", mentions=("beta:Quorvex Mill",))
    b.chunk("next", "The river mill of beta has a wheel.", space="beta", mentions=("beta:Quorvex Mill",))
    other = realm + "x"
    schema.init_realm(conn, other, embedding_model="hashing-sha256", dim=384)
    try:
        o = GraphBuilder(conn, other)
        o.chunk("far", "Quorvex Mill of the other realm.", mentions=("Quorvex Mill",))
        res = query_data(
            "What is Quorvex Mill?",
            QueryParam(space="alpha", mode="local", **PPR),
            dsn=pg_dsn,
            realm=realm,
            embedder=EMB,
        )
        assert [c["doc_key"] for c in res.chunks] == ["mine"]
        assert {e["space"] for e in res.entities} == {"alpha"}
        both = query_data(
            "What is Quorvex Mill?",
            QueryParam(space="*", mode="local", **PPR),
            dsn=pg_dsn,
            realm=realm,
            embedder=EMB,
        )
        assert {c["doc_key"] for c in both.chunks} == {"mine", "theirs", "next"}  # never "far"
    finally:
        drop_realm(conn, other)


def test_an_edge_superseded_or_not_yet_believed_carries_no_mass(conn: psycopg.Connection, realm: str) -> None:
    b = GraphBuilder(conn, realm)
    new = b.rel("Ilsa Varn", "works_at", "Drell Works", year=2015)
    b.rel(
        "Ilsa Varn",
        "works_at",
        "Old Foundry",
        year=2005,
        superseded_by=new,
        expired=2015,
        valid_from="2001",
        valid_to="2010",
    )
    b.rel("Ilsa Varn", "founded", "Late Guild", year=2030)  # believed only from 2030
    present = walk_graph.walk_edges(conn, realm, "alpha", kinds=("relations",))
    names = {v: k.split(":", 1)[1] for k, v in b.ids.items()}
    assert sorted(names[int(t)] for _, t in present.relations) == ["Drell Works", "Late Guild"]
    past = walk_graph.walk_edges(
        conn,
        realm,
        "alpha",
        kinds=("relations",),
        temporal=Temporal(believed_at=datetime(2010, 6, 1, tzinfo=UTC)),
    )
    assert sorted(names[int(t)] for _, t in past.relations) == ["Old Foundry"]
    valid = walk_graph.walk_edges(
        conn, realm, "alpha", kinds=("relations",), temporal=Temporal(as_of="2008", include_superseded=True)
    )
    assert "Old Foundry" in {names[int(t)] for _, t in valid.relations}
    later = walk_graph.walk_edges(
        conn, realm, "alpha", kinds=("relations",), temporal=Temporal(as_of="2012", include_superseded=True)
    )
    assert "Old Foundry" not in {names[int(t)] for _, t in later.relations}


def test_link_keys_finds_names_and_aliases_of_live_entities_only(
    conn: psycopg.Connection, realm: str
) -> None:
    b = GraphBuilder(conn, realm)
    lathe, orrin = b.entity("Vexwold Lathe"), b.entity("Orrin Tamsk")
    gone = b.entity("Port Hallow", dormant=True)
    b.entity("Vexwold Lathe", space="beta")  # another space: never linked
    conn.execute(
        sql.SQL("INSERT INTO {} (space, entity_id, name_key, alias_keys) VALUES (%s, %s, %s, %s)").format(
            qualified(realm, "entity_keys")
        ),
        ("alpha", orrin, "orrin tamsk", ["tamsk", "o. tamsk"]),
    )
    # with the 60 n-grams a lowercase question gives
    keys = ["vexwold lathe", "tamsk", "port hallow", "nothing here"] + [f"gram {i}" for i in range(60)]
    assert walk_graph.link_keys(conn, realm, "alpha", keys) == {"vexwold lathe": [lathe], "tamsk": [orrin]}
    assert walk_graph.link_keys(conn, realm, "alpha", ["port hallow"]) == {}
    assert gone > 0 and walk_graph.link_keys(conn, realm, "alpha", []) == {}


def test_the_cache_serves_the_new_version_after_a_write(
    conn: psycopg.Connection, pg_dsn: str, realm: str
) -> None:
    b = GraphBuilder(conn, realm)
    b.chunk("one", "Pellin Bridge crosses the Suro.", mentions=("Pellin Bridge", "Suro"))
    cache = ppr.WalkCache()

    def graph() -> ppr.WalkGraph:
        with conn.transaction():
            return ppr.space_graph(
                conn,
                pg_dsn,
                realm,
                "alpha",
                temporal=Temporal(),
                relation_types=None,
                kinds=("mentions", "relations"),
                cache=cache,
            )

    first = graph()
    assert graph() is first and cache.builds == 1  # same version: served from the cache
    v1 = graph_version.read_version(conn, realm, "alpha")
    b.chunk("two", "Suro floods in spring near Kessa.", mentions=("Suro", "Kessa"))
    assert graph_version.read_version(conn, realm, "alpha") != v1
    second = graph()
    assert second is not first and cache.builds == 2 and len(second.chunk_ids) == 2
    # an embedding rewrite changes nothing the walk reads: no new version
    v2 = graph_version.read_version(conn, realm, "alpha")
    conn.execute(sql.SQL("UPDATE {} SET embedding = embedding").format(qualified(realm, "documents")))
    conn.execute(sql.SQL("UPDATE {} SET embedding = embedding").format(qualified(realm, "entities")))
    assert graph_version.read_version(conn, realm, "alpha") == v2 and graph() is second
    # a corroboration change is a new version
    b.rel("Pellin Bridge", "crosses", "Suro")
    conn.execute(sql.SQL("UPDATE {} SET weight = weight + 1").format(qualified(realm, "relations")))
    assert graph_version.read_version(conn, realm, "alpha") != v2


def test_a_writer_commits_one_version_and_a_reader_never_sees_it_early(
    conn: psycopg.Connection, pg_dsn: str, realm: str
) -> None:
    from pgrag_dag.store import db

    b = GraphBuilder(conn, realm)
    b.chunk("one", "Pellin Bridge crosses the Suro.", mentions=("Pellin Bridge",))
    before = graph_version.read_version(conn, realm, "alpha")
    wrote, release = threading.Event(), threading.Event()

    def writer() -> None:
        with db.connect(pg_dsn) as w, w.transaction():
            w.execute(
                sql.SQL("INSERT INTO {} (space, name) VALUES ('alpha', 'Kessa'), ('alpha', 'Mirn')").format(
                    qualified(realm, "entities")
                )
            )
            assert graph_version.bumped_spaces(w) == ["alpha"]
            wrote.set()
            assert release.wait(30)

    t = threading.Thread(target=writer)
    t.start()
    try:
        assert wrote.wait(30)
        assert graph_version.read_version(conn, realm, "alpha") == before  # uncommitted: not visible
    finally:
        release.set()
        t.join(30)
    assert graph_version.read_version(conn, realm, "alpha") != before


def test_near_duplicate_chunks_count_once(conn: psycopg.Connection, pg_dsn: str, realm: str) -> None:
    b = GraphBuilder(conn, realm)
    boiler = "Forward looking statements are subject to risks and uncertainties of Zarnic Corp."
    for i in range(4):
        b.chunk(f"call{i}", boiler, mentions=("Zarnic Corp",))
    b.chunk(
        "cfo",
        "Zarnic Corp named Helle Dorn its chief financial officer.",
        mentions=("Zarnic Corp", "Helle Dorn"),
    )
    q = "Who is the chief financial officer of Zarnic Corp?"
    plain = query_data(
        q,
        QueryParam(space="alpha", mode="naive", chunk_top_k=3, collapse_duplicates=False),
        dsn=pg_dsn,
        realm=realm,
        embedder=EMB,
    )
    assert [c["text"] for c in plain.chunks].count(boiler) == 2
    res = query_data(
        q,
        QueryParam(space="alpha", mode="naive", chunk_top_k=3, collapse_duplicates=True),
        dsn=pg_dsn,
        realm=realm,
        embedder=EMB,
    )
    assert [c["text"] for c in res.chunks].count(boiler) == 1 and len(res.chunks) == 2  # all there is
    kept = next(c for c in res.chunks if c["text"] == boiler)
    assert len(kept["duplicates"]) == 3 and {d["doc_key"] for d in kept["duplicates"]} < {
        f"call{i}" for i in range(4)
    }
    walked = query_data(
        q,
        QueryParam(space="alpha", mode="local", chunk_top_k=3, collapse_duplicates=True, **PPR),
        dsn=pg_dsn,
        realm=realm,
        embedder=EMB,
    )
    assert [c["text"] for c in walked.chunks].count(boiler) == 1
    assert "cfo" in [c["doc_key"] for c in walked.chunks]
    # the vector-seeded path: a collapsed copy is not brought back by mention expansion
    seeded = query_data(
        q,
        QueryParam(
            space="alpha", mode="local", chunk_top_k=2, graph_ranking="mentions", collapse_duplicates=True
        ),
        dsn=pg_dsn,
        realm=realm,
        embedder=EMB,
    )
    assert [c["text"] for c in seeded.chunks].count(boiler) == 1


def test_names_linking_nothing_the_walk_crosses_say_so_and_take_the_dense_path(
    pg_dsn: str, realm: str, bridge: GraphBuilder
) -> None:
    q = "Where was the designer of the Vexwold Lathe born?"
    res = query_data(
        q,
        QueryParam(space="alpha", mode="local", chunk_top_k=2, ppr_edges=["titles"], **PPR),
        dsn=pg_dsn,
        realm=realm,
        embedder=EMB,
    )
    assert res.channels["ppr_seeds"] == 1 and {c["via"] for c in res.chunks} <= {"vector", "mention"}
    assert any("none of them a vertex of the walk graph (ppr_edges: titles)" in w for w in res.warnings)
    with pytest.raises(QueryError, match="ppr_prior_k must be at most 10000"):
        QueryParam(space="alpha", ppr_prior_k=10**20)


def test_collapse_duplicates_compares_vectors_and_texts() -> None:
    rows = [{"id": i, "doc_key": str(i), "chunk_index": 0, "text": t} for i, t in enumerate("aabc")]
    v = {0: np.array([1.0, 0.0]), 1: np.array([0.0, 1.0]), 2: np.array([0.99, 0.1]), 3: np.array([0.0, 1.0])}
    out = fuse.collapse_duplicates(rows, v, threshold=0.95)
    assert [r["id"] for r in out] == [0, 3]  # 1: the same text as 0; 2: cosine 0.995 with 0
    assert [d["doc_key"] for d in out[0]["duplicates"]] == ["1", "2"] and out[1]["duplicates"] == []
    assert [r["id"] for r in fuse.collapse_duplicates(rows, v, threshold=0.999)] == [0, 2, 3]
    assert fuse.collapse_duplicates(rows, v, threshold=0.95, keep=1)[0]["duplicates"][-1]["doc_key"] == "2"
    with pytest.raises(ValueError, match="threshold"):
        fuse.collapse_duplicates(rows, v, threshold=1.5)


def _edges_by_id(g: ppr.WalkGraph) -> dict[tuple[tuple[str, int], tuple[str, int]], float]:
    coo = g.weights.tocoo()

    def vertex(p: int) -> tuple[str, int]:
        return ("entity" if g.is_entity[p] else "chunk", int(g.vertex_ids[p]))

    return {(vertex(r), vertex(c)): float(v) for r, c, v in zip(coo.row, coo.col, coo.data, strict=True)}


def _same_graph(patched: ppr.WalkGraph, fresh: ppr.WalkGraph) -> None:
    assert patched.entity_ids.tolist() == fresh.entity_ids.tolist()
    assert patched.chunk_ids.tolist() == fresh.chunk_ids.tolist()
    assert patched.chunks_of.tolist() == fresh.chunks_of.tolist()
    assert _edges_by_id(patched) == _edges_by_id(fresh)
    ends = {
        int(r): (int(patched.vertex_ids[a]), int(patched.vertex_ids[b]))
        for r, (a, b) in zip(patched.relation_ids, patched.relation_ends, strict=True)
    }
    assert ends == {
        int(r): (int(fresh.vertex_ids[a]), int(fresh.vertex_ids[b]))
        for r, (a, b) in zip(fresh.relation_ids, fresh.relation_ends, strict=True)
    }


def test_a_cached_graph_patched_by_the_touched_vertices_equals_the_graph_read_again(
    conn: psycopg.Connection, pg_dsn: str, realm: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ppr, "PATCH_MAX_SHARE", 1.0)  # a small graph: every write touches much of it
    b = GraphBuilder(conn, realm)
    b.chunk("one", "Pellin Bridge crosses the Suro.", mentions=("Pellin Bridge", "Suro"))
    b.chunk("two", "Suro floods near Kessa.", mentions=("Suro", "Kessa"))
    b.chunk("kessa", "Kessa is a market town.", mentions=("Kessa",))
    fen = b.chunk("fen", "Marrow Fen lies north.", mentions=("Marrow Fen",))
    b.rel("Pellin Bridge", "crosses", "Suro", weight=2)
    near = b.rel("Suro", "flows_near", "Kessa")
    conn.execute(
        sql.SQL(
            "INSERT INTO {} (space, entity_id, name_key, alias_keys) VALUES ('alpha', %s, 'kessa', '{{}}')"
        ).format(qualified(realm, "entity_keys")),
        (b.ids["alpha:Kessa"],),
    )
    cache = ppr.WalkCache()
    kinds = ("mentions", "relations", "titles")

    def graph(into: ppr.WalkCache) -> ppr.WalkGraph:
        with conn.transaction():
            return ppr.space_graph(
                conn,
                pg_dsn,
                realm,
                "alpha",
                temporal=Temporal(),
                relation_types=None,
                kinds=kinds,
                cache=into,
            )

    first = graph(cache)
    assert cache.builds == 1 and first.writes
    # what one-document runs do: a chunk and entities added, a corroboration, a supersession, a dormant
    # entity, a removed chunk (its mentions go with it), an edge between two entities already there, a
    # retitled chunk (a title edge to Kessa; its mention of Marrow Fen untouched)
    b.chunk("three", "Orrin Tamsk walked from Kessa to the Suro.", mentions=("Orrin Tamsk", "Kessa", "Suro"))
    b.rel("Orrin Tamsk", "visited", "Kessa")
    t = {name: qualified(realm, name) for name in ("relations", "entities", "documents")}
    conn.execute(sql.SQL("UPDATE {} SET weight = 3 WHERE id = %s").format(t["relations"]), (near,))
    newer = b.rel("Pellin Bridge", "spans", "Suro")
    conn.execute(
        sql.SQL("UPDATE {} SET superseded_by = %s WHERE predicate = 'crosses'").format(t["relations"]),
        (newer,),
    )
    conn.execute(
        sql.SQL("UPDATE {} SET dormant_since = now() WHERE name = 'Pellin Bridge'").format(t["entities"])
    )
    conn.execute(sql.SQL("DELETE FROM {} WHERE id = %s").format(t["documents"]), (b.ids["chunk:alpha:two"],))
    conn.execute(sql.SQL("UPDATE {} SET title = 'Kessa' WHERE id = %s").format(t["documents"]), (fen,))
    second = graph(cache)
    assert cache.patches == 1 and cache.builds == 1 and second is not first
    _same_graph(second, graph(ppr.WalkCache()))
    assert "Pellin Bridge" not in {
        n
        for (n,) in conn.execute(
            sql.SQL("SELECT name FROM {} WHERE id = ANY(%s)").format(t["entities"]),
            (second.entity_ids.tolist(),),
        )
    }
    assert second.unused == 2  # Pellin Bridge and chunk two keep their positions, unreachable
    assert newer not in second.relation_ids.tolist()  # live, but its subject is dormant: no edge
    walk = second.walk({b.ids["alpha:Kessa"]: 1.0}, {}, damping=0.7, prior_weight=0.05)
    fresh = graph(ppr.WalkCache()).walk({b.ids["alpha:Kessa"]: 1.0}, {}, damping=0.7, prior_weight=0.05)
    assert walk is not None and fresh is not None
    assert [c for c, _ in walk.top_chunks(5)] == [c for c, _ in fresh.top_chunks(5)]
    assert [m for _, m in walk.top_chunks(5)] == pytest.approx([m for _, m in fresh.top_chunks(5)], abs=1e-6)
    # the first graph is left as it was, for walks still reading it
    assert first.entity_ids.tolist() != second.entity_ids.tolist() and first.n < second.n
    # a write beyond what the lists hold (rows pruned, or too many) reads the whole graph again
    b.chunk("four", "Kessa again.", mentions=("Kessa",))
    conn.execute(sql.SQL("DELETE FROM {}").format(qualified(realm, "graph_touched")))
    third = graph(cache)
    assert cache.builds == 2 and cache.patches == 1
    _same_graph(third, graph(ppr.WalkCache()))
