"""Modes, conditioning, relation channels, fusion, communities and diversification against real
PostgreSQL (paper §7.1–7.4, Table 3)."""

from __future__ import annotations

import doctest
import json
import logging
from datetime import UTC, datetime
from typing import Any

import numpy as np
import polars as pl
import psycopg
import pytest
from psycopg import sql

from pgrag_dag.errors import ModelError, QueryError
from pgrag_dag.graph.relations import render_relation as surface
from pgrag_dag.providers.embedding import HashingEmbedder, InputKind
from pgrag_dag.providers.llm import Completion
from pgrag_dag.query import (
    DEFAULT_CHUNK_CHANNELS,
    EVIDENCE,
    MODES,
    QueryParam,
    QueryResult,
    assembly,
    check_mode,
    keywords,
    query_data,
)
from pgrag_dag.store import db, history, retrieval
from pgrag_dag.store import retrieval_channels as channels
from pgrag_dag.store.communities import replace_communities
from pgrag_dag.store.identifiers import qualified

EMB = HashingEmbedder(384)


def _at(year: int) -> datetime:
    return datetime(year, 1, 1, tzinfo=UTC)


class GraphBuilder:
    """Writes a graph with SQL, as the indexer would leave it: entities, relations with their rendered
    form and a HashingEmbedder(384) embedding of it, chunks, mentions and community reports.

    Entity keys are ``"<space>:<name>"``; a bare name means the relation's (or chunk's) own space.
    """

    def __init__(self, conn: psycopg.Connection, realm: str) -> None:
        self.conn, self.realm = conn, realm
        self.ids: dict[str, int] = {}

    def _t(self, table: str) -> sql.Composed:
        return qualified(self.realm, table)

    def _one(self, query: sql.Composed, params: tuple[Any, ...]) -> int:
        row = self.conn.execute(query, params).fetchone()
        assert row is not None
        return int(row[0])

    def entity(
        self,
        name: str,
        *,
        space: str = "alpha",
        description: str = "",
        dormant: bool = False,
        embedding: np.ndarray | None = None,
    ) -> int:
        key = f"{space}:{name}"
        if key not in self.ids:
            self.ids[key] = self._one(
                sql.SQL("""INSERT INTO {} (space, name, entity_type, description, dormant_since, embedding,
                                           t_created, t_updated)
                           VALUES (%s, %s, 'Concept', %s, %s, %s, %s, %s) RETURNING id""").format(
                    self._t("entities")
                ),
                (
                    space,
                    name,
                    description,
                    _at(2020) if dormant else None,
                    EMB.embed_one(name) if embedding is None else embedding,
                    _at(2000),
                    _at(2000),
                ),
            )
        return self.ids[key]

    def _key(self, name: str, space: str) -> str:
        key = name if ":" in name else f"{space}:{name}"
        if key not in self.ids:
            sp, nm = key.split(":", 1)
            self.entity(nm, space=sp)
        return key

    def rel(
        self,
        s: str,
        p: str,
        o: str,
        *,
        space: str = "alpha",
        negated: bool = False,
        description: str = "",
        valid_from: str | None = None,
        valid_to: str | None = None,
        year: int = 2001,
        superseded_by: int | None = None,
        expired: int | None = None,
        weight: int = 1,
        embed: bool = True,
        dormant: bool = False,
        rendered: str | None = None,
        embedding: np.ndarray | None = None,
    ) -> int:
        sk, ok = self._key(s, space), self._key(o, space)
        text = (
            rendered
            if rendered is not None
            else surface(
                sk.split(":", 1)[1], p, ok.split(":", 1)[1], negated=negated, description=description
            )
        )
        payload = {k: v for k, v in (("valid_from", valid_from), ("valid_to", valid_to)) if v}
        vec = embedding if embedding is not None else (EMB.embed_one(text) if embed else None)
        return self._one(
            sql.SQL("""INSERT INTO {} (space, source_id, target_id, predicate, negated, description, payload,
                                       weight, superseded_by, t_created, t_expired, dormant_since, rendered,
                                       embedding)
                       VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
                       RETURNING id""").format(self._t("relations")),
            (
                space,
                self.ids[sk],
                self.ids[ok],
                p,
                negated,
                description,
                json.dumps(payload),
                weight,
                superseded_by,
                _at(year),
                _at(expired) if expired else None,
                _at(2020) if dormant else None,
                text,
                vec,
            ),
        )

    def chunk(
        self,
        key: str,
        text: str,
        *,
        space: str = "alpha",
        embed: bool = True,
        mentions: tuple[str, ...] = (),
        embedding: np.ndarray | None = None,
    ) -> int:
        cid = self._one(
            sql.SQL("""INSERT INTO {} (space, doc_key, chunk_index, title, source, doc_order, text,
                                       content_hash,
                                       doc_hash, embedding)
                       VALUES (%s, %s, 0, %s, %s, %s, %s, %s, %s, %s) RETURNING id""").format(
                self._t("documents")
            ),
            (
                space,
                key,
                key.title(),
                f"{key}.txt",
                len(self.ids),
                text,
                f"h-{space}-{key}",
                f"d-{space}-{key}",
                embedding if embedding is not None else (EMB.embed_one(text) if embed else None),
            ),
        )
        for name in mentions:
            self.conn.execute(
                sql.SQL("INSERT INTO {} (space, chunk_id, entity_id) VALUES (%s, %s, %s)").format(
                    self._t("doc_mentions")
                ),
                (space, cid, self.ids[self._key(name, space)]),
            )
        self.ids[f"chunk:{space}:{key}"] = cid
        return cid

    def community(
        self,
        title: str,
        report: str,
        *,
        space: str = "alpha",
        rating: float = 5.0,
        size: int = 3,
        level: int = 0,
        built_at: datetime | None = None,
        embedding: np.ndarray | None = None,
    ) -> int:
        cid = self._one(
            sql.SQL("""INSERT INTO {} (space, level, title, summary, rating, size, report, graph_fingerprint,
                                       built_at, embedding)
                       VALUES (%s, %s, %s, %s, %s, %s, %s, 'fp', %s, %s) RETURNING id""").format(
                self._t("communities")
            ),
            (
                space,
                level,
                title,
                title,
                rating,
                size,
                report,
                built_at or datetime.now(UTC),
                EMB.embed_one(report) if embedding is None else embedding,
            ),
        )
        self.ids[f"community:{space}:{title}"] = cid
        return cid


def ask(pg_dsn: str, realm: str, question: str, **param: Any) -> QueryResult:
    """``query_data`` on the hand-built graph. These tests pin the vector-seeded path (mention expansion,
    the k-hop traversal) and exact chunk counts, so unless told otherwise they ask for it: graph_ranking
    "mentions" and no near-duplicate collapse (the walk has its own tests: tests/query/test_query_ppr.py)."""
    param.setdefault("space", "alpha")
    param.setdefault("graph_ranking", "mentions")
    param.setdefault("collapse_duplicates", False)
    return query_data(question, QueryParam(**param), dsn=pg_dsn, realm=realm, embedder=EMB)


def triples(result: QueryResult) -> list[tuple[str, str, str]]:
    return [(r["subject"], r["predicate"], r["object"]) for r in result.relations]


@pytest.fixture
def g(conn: psycopg.Connection, realm: str) -> GraphBuilder:
    """``alpha``: Ada Lovelace --worked_with--> Charles Babbage --designed--> Analytical Engine (a chain,
    hop 1 and 2); an unconnected Jacquard Loom --inspired--> Punched Cards; Factory Act --cites-->
    Statute 4711 and Thesis --cites--> Paper (lexical bait); chunks; two community reports."""
    b = GraphBuilder(conn, realm)
    b.entity("Ada Lovelace", description="Mathematician")
    b.rel("Ada Lovelace", "worked_with", "Charles Babbage", year=2001, valid_from="1833", valid_to="1852")
    b.rel("Charles Babbage", "designed", "Analytical Engine", year=2030, valid_from="1837")
    b.rel("Ada Lovelace", "married_to", "Charles Babbage", negated=True, year=2002)
    b.rel("Jacquard Loom", "inspired", "Punched Cards", year=2003)
    b.rel("Factory Act", "cites", "Statute 4711", year=2003)
    b.rel("Thesis", "cites", "Paper", year=2003)
    b.chunk("notes", "Ada Lovelace wrote the notes on the engine.", mentions=("Ada Lovelace",))
    b.chunk(
        "letters",
        "The two corresponded for years.",
        embed=False,
        mentions=("Ada Lovelace", "Charles Babbage"),
    )
    b.community(
        "Computing pioneers", "Ada Lovelace and Charles Babbage pioneered computing engines.", rating=8
    )
    b.community("Law", "Factory Act and statutes.", rating=2)
    return b


# -- modes -----------------------------------------------------------------------------------------


def test_unknown_mode_raises() -> None:
    with pytest.raises(QueryError, match="unknown query mode 'fancy'"):
        QueryParam(space="alpha", mode="fancy")  # type: ignore[arg-type]
    with pytest.raises(QueryError, match="unknown query mode"):
        check_mode("Mix")
    for mode in MODES:
        check_mode(mode)


_SPIED = {
    retrieval: ("entity_search", "chunk_search", "chunk_fulltext", "mention_chunks", "traverse"),
    channels: ("relation_similarity", "relation_fulltext", "relation_keyword_overlap", "community_search"),
}
_CHUNK_CALLS = [{"vector": "chunk_search", "fulltext": "chunk_fulltext"}[c] for c in DEFAULT_CHUNK_CHANNELS]
# Table 3: what each mode reads, and nothing else (chunk search: the default chunk channels)
_EXPECTED_CALLS = {
    "mix": [
        "entity_search",
        "mention_chunks",
        "relation_fulltext",
        "relation_similarity",
        "traverse",
        *_CHUNK_CALLS,
    ],
    "local": [
        "entity_search",
        "mention_chunks",
        "relation_fulltext",
        "relation_similarity",
        "traverse",
        *_CHUNK_CALLS,
    ],
    "global": ["community_search", "relation_similarity"],
    "hybrid": [
        "community_search",
        "entity_search",
        "mention_chunks",
        "relation_fulltext",
        "relation_similarity",
        "relation_similarity",
        "traverse",
        *_CHUNK_CALLS,
    ],
    "naive": [*_CHUNK_CALLS],
    "bypass": [],
}


@pytest.mark.parametrize("mode", MODES)
def test_every_mode_consults_exactly_its_table_3_evidence(
    pg_dsn: str, realm: str, g: GraphBuilder, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    for module, names in _SPIED.items():
        for name in names:
            real = getattr(module, name)

            def spy(*a: Any, _real: Any = real, _name: str = name, **k: Any) -> Any:
                calls.append(_name)
                return _real(*a, **k)

            monkeypatch.setattr(module, name, spy)
    result = ask(
        pg_dsn, realm, "How did Ada Lovelace and Charles Babbage pioneer computing engines?", mode=mode
    )
    assert sorted(calls) == sorted(_EXPECTED_CALLS[mode])
    chunk_channels = {c for c in result.channels if c.startswith("chunks_")}
    assert set(result.channels) - chunk_channels == EVIDENCE[mode]
    assert chunk_channels == (
        {f"chunks_{c}" for c in DEFAULT_CHUNK_CHANNELS} if "chunks" in EVIDENCE[mode] else set()
    )
    ev = EVIDENCE[mode]
    assert bool(result.entities) == ("entities" in ev)
    assert bool(result.chunks) == ("chunks" in ev)
    assert bool(result.communities) == ("communities" in ev)
    assert bool(result.relations) == bool(ev - {"entities", "chunks", "mentions", "communities"})
    used = {c for r in result.relations for c in r["ranks"]}
    assert used <= ev
    if mode in ("global", "hybrid"):
        assert "ranked" in used
    if mode == "bypass":
        assert result.context == "" and result.keywords == {}


def test_independent_reads_run_beside_the_walk_in_one_snapshot(
    pg_dsn: str, realm: str, g: GraphBuilder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """mix: seeds → mention expansion → traversal on one pooled connection; chunk search and the
    similarity and lexical channels on a second one importing the first one's snapshot — so a passage
    committed after the query began (here: just before the chunk search) is read by neither."""
    question = "How did Ada Lovelace and Charles Babbage pioneer computing engines?"
    backends: dict[str, set[int]] = {}
    for module, names in _SPIED.items():
        for name in names:
            real = getattr(module, name)

            def spy(conn: psycopg.Connection, *a: Any, _real: Any = real, _name: str = name, **k: Any) -> Any:
                if _name == "chunk_search":
                    g.chunk(
                        "late", "A passage committed while the query ran.", embedding=EMB.embed_one(question)
                    )
                backends.setdefault(_name, set()).add(conn.info.backend_pid)
                return _real(conn, *a, **k)

            monkeypatch.setattr(module, name, spy)
    result = ask(pg_dsn, realm, question, mode="mix")
    assert "late" not in {c["doc_key"] for c in result.chunks}
    main = backends["entity_search"] | backends["mention_chunks"] | backends["traverse"]
    side = backends["chunk_search"] | backends["relation_similarity"] | backends["relation_fulltext"]
    assert len(main) == 1 and len(side) == 1 and main != side
    monkeypatch.undo()
    again = ask(pg_dsn, realm, question, mode="naive")
    assert again.chunks[0]["doc_key"] == "late"  # committed: the next query reads it first


def test_a_busy_read_pool_runs_everything_on_the_query_connection_with_the_same_result(
    pg_dsn: str, realm: str, g: GraphBuilder, monkeypatch: pytest.MonkeyPatch
) -> None:
    question = "How did Ada Lovelace and Charles Babbage pioneer computing engines?"
    free = ask(pg_dsn, realm, question, mode="hybrid")
    backends: set[int] = set()
    for module, name in (
        (retrieval, "traverse"),
        (retrieval, "chunk_search"),
        (channels, "community_search"),
    ):
        # the default binds this iteration's original function before monkeypatch replaces it
        def spy(
            conn: psycopg.Connection,
            *a: Any,
            _real: Any = getattr(module, name),  # noqa: B008 - bound at definition on purpose
            **k: Any,
        ) -> Any:
            backends.add(conn.info.backend_pid)
            return _real(conn, *a, **k)

        monkeypatch.setattr(module, name, spy)
    pool = db._read_pool(pg_dsn)
    held = [pool.getconn() for _ in range(pool.max_size - 1)]  # one left: the query's own
    try:
        busy = ask(pg_dsn, realm, question, mode="hybrid")
    finally:
        for conn in held:
            pool.putconn(conn)
    assert len(backends) == 1  # no spare: the independent reads ran inline
    assert [(r["id"], r["hop"], r["ranks"]) for r in busy.relations] == [
        (r["id"], r["hop"], r["ranks"]) for r in free.relations
    ]
    assert [c["id"] for c in busy.chunks] == [c["id"] for c in free.chunks] and busy.context == free.context
    assert len(free.relations) > 3 and free.channels["traversal"] > 0


def test_local_reads_the_same_evidence_as_mix(pg_dsn: str, realm: str, g: GraphBuilder) -> None:
    q = "Ada Lovelace worked with Charles Babbage"
    mix, local = ask(pg_dsn, realm, q), ask(pg_dsn, realm, q, mode="local")
    assert mix.context == local.context and triples(mix) == triples(local)


# -- conditioning ----------------------------------------------------------------------------------


class _FakeClient:
    def __init__(self, reply: str | Exception) -> None:
        self.reply, self.calls = reply, []  # type: ignore[var-annotated]

    def complete(self, messages: list[dict[str, str]], *, purpose: str, json_mode: bool = True) -> Completion:
        self.calls.append((purpose, json_mode, messages))
        if isinstance(self.reply, Exception):
            raise self.reply
        return Completion(self.reply, "fake", 0, 0, False)


class _SpyEmbedder(HashingEmbedder):
    def __init__(self) -> None:
        super().__init__(384)
        self.seen: list[list[str]] = []

    def embed(self, texts: list[str], kind: InputKind = "passage") -> list[np.ndarray]:
        self.seen.append(list(texts))
        assert kind == "query"
        return super().embed(texts, kind)


def test_lexical_keywords_split_named_things_from_themes() -> None:
    low, high = keywords.lexical("What caused Boeing's cash flow to turn negative after the 737-9 grounding?")
    assert low == ["Boeing", "737-9"]
    assert high == ["caused", "cash", "flow", "turn", "negative", "grounding"]
    assert keywords.lexical("Who was CFO of The Walt Disney Company?").low_level == [
        "CFO",
        "Walt Disney Company",
    ]


def test_model_keywords_with_fallback_on_any_failure() -> None:
    good = _FakeClient('{"low_level_keywords": ["Boeing"], "high_level_keywords": ["cash flow"]}')
    kw = keywords.extract("Why did cash turn negative at Boeing?", good)  # type: ignore[arg-type]
    assert (kw.low_level, kw.high_level, kw.source) == (["Boeing"], ["cash flow"], "model")
    assert good.calls[0][:2] == ("keywords", True)
    for bad in (
        ModelError("down"),
        "not json",
        '{"low_level_keywords": "Boeing"}',
        "[]",
        '{"low_level_keywords": [], "high_level_keywords": []}',
    ):
        kw = keywords.extract("Why did cash turn negative at Boeing?", _FakeClient(bad))  # type: ignore[arg-type]
        assert kw.source == "lexical" and kw.low_level == ["Boeing"]
    assert keywords.extract("Ada Lovelace").source == "lexical"


def test_low_level_keywords_sharpen_the_entity_vector(pg_dsn: str, realm: str, g: GraphBuilder) -> None:
    spy = _SpyEmbedder()
    q = "What did Ada Lovelace write?"
    res = query_data(q, QueryParam(space="alpha"), dsn=pg_dsn, realm=realm, embedder=spy)
    assert spy.seen == [[q, q + " Ada Lovelace"]]  # one embedding call: question, entity text
    assert res.keywords == {"low_level": ["Ada Lovelace"], "high_level": ["write"], "source": "lexical"}
    spy.seen.clear()
    query_data(q, QueryParam(space="alpha", mode="hybrid"), dsn=pg_dsn, realm=realm, embedder=spy)
    assert spy.seen == [[q, q + " Ada Lovelace", q + " write"]]  # + the global text (high level)
    spy.seen.clear()
    off = query_data(q, QueryParam(space="alpha", keywords="off"), dsn=pg_dsn, realm=realm, embedder=spy)
    assert spy.seen == [[q]] and off.keywords["source"] == "off"


def test_query_data_calls_the_model_for_keywords_only_when_asked(
    pg_dsn: str, realm: str, g: GraphBuilder
) -> None:
    client = _FakeClient('{"low_level_keywords": ["Jacquard Loom"], "high_level_keywords": ["inspiration"]}')
    ask_model = QueryParam(space="alpha", keywords="model")
    res = query_data("What came of it?", ask_model, dsn=pg_dsn, realm=realm, embedder=EMB, client=client)  # type: ignore[arg-type]
    assert res.keywords["source"] == "model" and len(client.calls) == 1
    assert ("Jacquard Loom", "inspired", "Punched Cards") in triples(res)  # via the keyword-steered channels
    query_data(
        "What came of it?", QueryParam(space="alpha"), dsn=pg_dsn, realm=realm, embedder=EMB, client=client
    )  # type: ignore[arg-type]
    assert len(client.calls) == 1  # "lexical" (the default) never calls the model
    assert not [w for w in res.warnings if "keywords" in w]
    failed = query_data(
        "What came of it?", ask_model, dsn=pg_dsn, realm=realm, embedder=EMB, client=_FakeClient("not JSON")
    )  # type: ignore[arg-type]
    assert failed.keywords["source"] == "lexical"
    assert (
        "model keywords were asked for but the model call failed (see the log): lexical keywords were used"
        in failed.warnings
    )
    no_client = query_data("What came of it?", ask_model, dsn=pg_dsn, realm=realm, embedder=EMB)
    assert any("no model client was given" in w for w in no_client.warnings)


# -- relation channels -----------------------------------------------------------------------------


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_similarity_channel_alone_ranks_by_relation_embedding(
    pg_dsn: str, realm: str, g: GraphBuilder
) -> None:
    q = "inspired punched cards"
    res = ask(pg_dsn, realm, q, relation_channels=["similarity"], relation_top_k=3)
    qv = EMB.embed_one(q)
    rows = g.conn.execute(
        sql.SQL("SELECT rendered FROM {} WHERE space = 'alpha' AND dormant_since IS NULL").format(
            g._t("relations")
        )
    ).fetchall()
    by_hand = sorted((r[0] for r in rows), key=lambda text: -_cos(qv, EMB.embed_one(text)))[:3]
    assert [
        surface(r["subject"], r["predicate"], r["object"], negated=r["negated"]) for r in res.relations
    ] == by_hand
    assert (
        res.relations[0]["predicate"] == "inspired"
    )  # unconnected to any seed: only this channel reaches it
    assert {r["channel"] for r in res.relations} == {"similarity"} and {r["hop"] for r in res.relations} == {
        1
    }
    assert [r["ranks"] for r in res.relations] == [{"similarity": i} for i in (1, 2, 3)]
    assert res.channels["similarity"] == 3 and "traversal" not in res.channels


def test_lexical_channel_alone_finds_the_exact_term(pg_dsn: str, realm: str, g: GraphBuilder) -> None:
    # the lexical channel searches the low-level keywords (here the identifier 4711), not the themes
    res = ask(pg_dsn, realm, "Which law cites 4711?", relation_channels=["lexical"])
    assert triples(res) == [("Factory Act", "cites", "Statute 4711")]
    assert [r["ranks"] for r in res.relations] == [{"lexical": 1}]
    # without low-level keywords it falls back to the high-level ones, ranked by ts_rank_cd
    res = ask(pg_dsn, realm, "which law cites anything", relation_channels=["lexical"])
    assert triples(res) == [("Factory Act", "cites", "Statute 4711"), ("Thesis", "cites", "Paper")]
    scores = [r["score"] for r in res.relations]
    assert scores == sorted(scores, reverse=True)
    assert ask(pg_dsn, realm, "the of and", relation_channels=["lexical"], keywords="off").relations == []


def test_traversal_channel_alone_is_hop_major(pg_dsn: str, realm: str, g: GraphBuilder) -> None:
    res = ask(pg_dsn, realm, "Ada Lovelace", top_k=1, relation_channels=["traversal"])
    assert [(r["predicate"], r["hop"]) for r in res.relations] == [
        ("married_to", 1),
        ("worked_with", 1),
        ("designed", 2),
    ]


def test_channels_fused_by_rrf_match_the_arithmetic(pg_dsn: str, realm: str, g: GraphBuilder) -> None:
    q = "Ada Lovelace and the engine Charles Babbage designed"
    alone = {
        c: {
            (r["subject"], r["predicate"], r["object"]): r["rank"]
            for r in ask(pg_dsn, realm, q, top_k=1, relation_channels=[c]).relations
        }
        for c in ("traversal", "similarity", "lexical")
    }
    fused = ask(pg_dsn, realm, q, top_k=1)
    assert len({t for ranks in alone.values() for t in ranks}) == len(fused.relations)
    for r in fused.relations:
        t = (r["subject"], r["predicate"], r["object"])
        ranks = {c: alone[c][t] for c in alone if t in alone[c]}
        assert r["ranks"] == ranks
        assert r["score"] == pytest.approx(sum(1 / (60 + x) for x in ranks.values()))
    assert [r["score"] for r in fused.relations] == sorted(
        (r["score"] for r in fused.relations), reverse=True
    )
    designed = next(r for r in fused.relations if r["predicate"] == "designed")
    assert designed["hop"] == 2  # found by several channels, it keeps the walked hop
    assert len(fused.relations[0]["ranks"]) > 1  # agreement between channels leads


def test_quota_fusion_through_the_query_path(pg_dsn: str, realm: str, g: GraphBuilder) -> None:
    q = "Ada Lovelace inspired punched cards"
    both = ["traversal", "similarity"]
    trav = triples(ask(pg_dsn, realm, q, top_k=1, relation_channels=["traversal"]))
    sim = triples(ask(pg_dsn, realm, q, top_k=1, relation_channels=["similarity"], relation_top_k=2))
    res = ask(
        pg_dsn, realm, q, top_k=1, relation_channels=both, relation_top_k=2, fusion="quota", quota_share=1.0
    )
    assert triples(res)[: len(sim)] == sim  # similarity has first claim on every slot
    assert set(triples(res)) == set(trav) | set(sim)
    assert all(r["score"] is None for r in res.relations)
    zero = ask(
        pg_dsn, realm, q, top_k=1, relation_channels=both, relation_top_k=2, fusion="quota", quota_share=0.0
    )
    assert triples(zero)[: len(trav)] == trav


def test_relation_types_restrict_every_channel_and_every_step(
    pg_dsn: str, realm: str, g: GraphBuilder
) -> None:
    q = "Ada Lovelace and the engine Charles Babbage designed, cites"
    res = ask(pg_dsn, realm, q, top_k=1, relation_types=["DESIGNED", "cites"])
    assert res.relations and {r["predicate"] for r in res.relations} <= {"designed", "cites"}
    # designed is two hops from Ada, behind worked_with: the walk may not cross worked_with to reach it
    assert "traversal" not in {c for r in res.relations for c in r["ranks"]}
    walked = ask(
        pg_dsn,
        realm,
        "Ada Lovelace",
        top_k=1,
        relation_types=["worked_with", "designed"],
        relation_channels=["traversal"],
    )
    assert [(r["predicate"], r["hop"]) for r in walked.relations] == [("worked_with", 1), ("designed", 2)]
    with pytest.raises(QueryError, match="relation_types"):
        QueryParam(space="alpha", relation_types=[])


def test_similarity_and_lexical_channels_apply_the_temporal_filter(
    pg_dsn: str, realm: str, conn: psycopg.Connection
) -> None:
    b = GraphBuilder(conn, realm)
    new = b.rel("Mill", "grinds", "Corn", year=2010)
    b.rel("Mill", "grinds", "Wheat", year=2005, superseded_by=new, expired=2010)
    b.rel("Mill", "grinds", "Barley", valid_from="1800", valid_to="1810")
    b.rel("Mill", "grinds", "Rye", dormant=True)
    b.rel("Mill", "grinds", "Oats", year=2030)
    b.rel("Mill", "grinds", "Millet")
    b.entity("Ghost Grain", dormant=True)
    b.rel("Mill", "grinds", "Ghost Grain")
    b.chunk("mill", "The mill grinds grain.")
    for channel in ("similarity", "lexical"):

        def objs(*, _channel: str = channel, **kw: Any) -> set[str]:
            return {
                r["object"]
                for r in ask(pg_dsn, realm, "mill grinds", relation_channels=[_channel], **kw).relations
            }

        assert objs() == {"Corn", "Barley", "Oats", "Millet"}, channel
        assert objs(include_superseded=True) == {"Corn", "Wheat", "Barley", "Oats", "Millet"}
        assert objs(as_of="1805") == {"Corn", "Barley", "Oats", "Millet"}
        assert objs(as_of="1900") == {"Corn", "Oats", "Millet"}
        assert objs(as_believed_at="2020-01-01") == {"Corn", "Barley", "Millet"}
        # exactly as the graph stood in 2007 (issue 14): Wheat not yet superseded, Rye not yet dormant and
        # Ghost Grain not yet a dormant vertex (both went dormant in 2020)
        assert objs(as_believed_at="2007-01-01") == {"Wheat", "Barley", "Rye", "Millet", "Ghost Grain"}


# -- communities and global mode -------------------------------------------------------------------


def test_communities_blend_similarity_rating_and_size_after_overfetching(
    pg_dsn: str, realm: str, conn: psycopg.Connection
) -> None:
    b = GraphBuilder(conn, realm)
    b.rel("Mill", "grinds", "Corn")
    b.chunk("mill", "The mill grinds grain.")
    q = "mill grinding corn"
    b.community("Exact", "mill grinding corn", rating=1, size=2)
    b.community("Close", "mill grinding corn and wheat", rating=10, size=40)
    b.community("Far", "river boats", rating=10, size=40)
    pure = ask(
        pg_dsn, realm, q, mode="global", community_top_k=1, community_w_rating=0.0, community_w_size=0.0
    )
    assert [c["title"] for c in pure.communities] == ["Exact"]
    blended = ask(pg_dsn, realm, q, mode="global", community_top_k=1)
    # top 1 over-fetches 3 by similarity, then 0.6·sim + 0.2·rating/10 + 0.2·log(1+size)/log(41)
    assert [c["title"] for c in blended.communities] == ["Close"]
    assert blended.channels["communities"] == 3
    qv = EMB.embed_one(" ".join([q, *keywords.lexical(q).high_level]))
    sims = {
        t: _cos(qv, EMB.embed_one(r))
        for t, r in (("Exact", "mill grinding corn"), ("Close", "mill grinding corn and wheat"))
    }
    assert blended.communities[0]["rank_score"] == pytest.approx(0.6 * sims["Close"] + 0.2 + 0.2, abs=1e-5)
    assert blended.context.startswith("-----Community reports-----\n### Close")


def test_stale_community_reports_warn(
    pg_dsn: str, realm: str, conn: psycopg.Connection, caplog: pytest.LogCaptureFixture
) -> None:
    b = GraphBuilder(conn, realm)
    b.rel("Mill", "grinds", "Corn", year=2010)
    b.chunk("mill", "The mill grinds grain.")
    b.community("Mills", "mill grinding corn", built_at=_at(2015))
    with caplog.at_level(logging.WARNING, logger="pgrag_dag.query"):
        fresh = ask(pg_dsn, realm, "mill", mode="global")
    assert fresh.warnings == [] and fresh.communities
    b.rel("Mill", "grinds", "Wheat", year=2016)
    with caplog.at_level(logging.WARNING, logger="pgrag_dag.query"):
        stale = ask(pg_dsn, realm, "mill", mode="hybrid")
    assert len(stale.warnings) == 1 and "stale" in stale.warnings[0]
    assert any("stale" in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)
    # a communities run that read the graph since and found nothing to rebuild (a document removed and put
    # back: the same graph) brings the reports up to date: no warning then
    history.mark_checked(conn, realm, "alpha", "communities", datetime.now(UTC))
    assert ask(pg_dsn, realm, "mill", mode="hybrid").warnings == []
    before = ask(pg_dsn, realm, "mill", mode="global", as_believed_at="2014-01-01")
    assert before.communities == []  # reports built after the belief instant are not read


def test_global_without_communities_or_embeddings_ranks_by_keyword_overlap(
    pg_dsn: str, realm: str, conn: psycopg.Connection
) -> None:
    b = GraphBuilder(conn, realm)
    b.rel("Mill", "grinds", "Corn", weight=1, embed=False)
    b.rel("Mill", "exports", "Corn", weight=5, embed=False)
    b.rel("Mill", "grinds", "Flour Corn", weight=2, embed=False)
    b.rel("Boat", "carries", "Sand", weight=9, embed=False)
    b.chunk("mill", "The mill grinds grain.")
    res = ask(pg_dsn, realm, "Which mill grinds corn?", mode="global")
    assert res.communities == [] and any("no community report" in w for w in res.warnings)
    assert (
        "4 relations of space 'alpha' have no vector" in res.warnings[0]
    )  # issue 13: what vector search cannot see
    # three keywords (mill, grinds, corn): two relations match all three, the tie goes to weight
    assert triples(res) == [
        ("Mill", "grinds", "Flour Corn"),
        ("Mill", "grinds", "Corn"),
        ("Mill", "exports", "Corn"),
    ]
    assert [r["score"] for r in res.relations] == pytest.approx([1 / 61, 1 / 62, 1 / 63])
    assert res.entities == [] and res.chunks == []


# -- diversification -------------------------------------------------------------------------------


def test_node_distance_rerank_resolves_real_distances(pg_dsn: str, realm: str, g: GraphBuilder) -> None:
    g.entity("Difference Engine Two", embedding=EMB.embed_one("unrelated vertex"))  # never a seed
    g.rel("Analytical Engine", "inspired", "Difference Engine Two", year=2000)
    q = "Ada Lovelace: what inspired Difference Engine Two?"
    base = ask(pg_dsn, realm, q, top_k=1, max_hops=1, relation_channels=["traversal", "similarity"])
    far = next(r for r in base.relations if r["object"] == "Difference Engine Two")
    assert far["hop"] == 1 and far["channel"] == "similarity"  # the channel never walked to it
    res = ask(
        pg_dsn,
        realm,
        q,
        top_k=1,
        max_hops=1,
        relation_channels=["traversal", "similarity"],
        node_distance_rerank=True,
    )
    hops = {(r["subject"], r["object"]): r["hop"] for r in res.relations}
    assert hops[("Analytical Engine", "Difference Engine Two")] == 3  # Ada → Babbage → Engine → it
    assert hops[("Jacquard Loom", "Punched Cards")] is None  # unconnected: last
    order = [r["hop"] if r["hop"] is not None else 99 for r in res.relations]
    assert order == sorted(order)
    assert [r["object"] for r in res.relations][-1] in {"Punched Cards", "Statute 4711", "Paper"}


def test_mmr_diversifies_restatements(pg_dsn: str, realm: str, conn: psycopg.Connection) -> None:
    b = GraphBuilder(conn, realm)
    vec = EMB.embed_one("mill grinds corn")
    b.rel("Mill", "grinds", "Corn", embedding=vec)
    b.rel("Mill", "mills", "Corn", embedding=vec, rendered="Mill grinds corn")  # a restatement
    for p, o in (("sells", "Flour"), ("employs", "Miller"), ("stands_by", "River"), ("owned_by", "Baron")):
        b.rel("Mill", p, o)
    b.chunk("mill", "The mill grinds grain.")
    q = "mill grinds corn"
    plain = [r["predicate"] for r in ask(pg_dsn, realm, q, relation_channels=["similarity"]).relations]
    assert plain[:2] == ["grinds", "mills"]  # the restatement ranks second
    diverse = [
        r["predicate"] for r in ask(pg_dsn, realm, q, relation_channels=["similarity"], mmr=True).relations
    ]
    assert diverse[0] == "grinds" and diverse[1] == plain[2]  # the next distinct fact takes its slot
    assert diverse.index("mills") > 1 and sorted(diverse) == sorted(plain)


def test_decomposition_retrieves_for_both_events(pg_dsn: str, realm: str, g: GraphBuilder) -> None:
    q = "Did the Jacquard Loom inspire punched cards before Ada Lovelace met Charles Babbage?"
    res = ask(pg_dsn, realm, q, top_k=1, decompose=True)
    assert res.subqueries == [
        "Did the Jacquard Loom inspire punched cards",
        "Ada Lovelace met Charles Babbage",
    ]
    names = {e["name"] for e in res.entities}
    assert {"Jacquard Loom", "Ada Lovelace"} <= names
    assert [e["rank"] for e in res.entities] == list(range(1, len(res.entities) + 1))
    assert ask(pg_dsn, realm, q, top_k=1).subqueries == []


@pytest.mark.parametrize("module", [keywords, assembly, channels], ids=lambda m: m.__name__)
def test_docstring_examples_run(module: Any) -> None:
    failed, attempted = doctest.testmod(module)
    assert attempted > 0 and failed == 0


def test_max_hops_is_bounded(pg_dsn: str, realm: str, g: GraphBuilder) -> None:
    from pgrag_dag.query import MAX_HOPS

    assert ask(pg_dsn, realm, "Ada Lovelace", max_hops=MAX_HOPS).relations
    with pytest.raises(QueryError, match=f"max_hops must be at most {MAX_HOPS}, got 100"):
        QueryParam(space="alpha", max_hops=100)


def test_a_read_past_the_timeout_fails_closed_and_the_next_query_runs(
    conn: psycopg.Connection, pg_dsn: str, realm: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import random

    rnd = random.Random(11)
    b = GraphBuilder(conn, realm)
    names = [f"Vertex {i}" for i in range(40)]
    for i in range(600):  # dense: a 4-hop walk enumerates far more than a millisecond's worth of paths
        s, o = rnd.sample(names, 2)
        b.rel(s, f"p{i}", o, embed=False)
    b.chunk("notes", "Vertex 1 and Vertex 2.", mentions=("Vertex 1",))
    db.close_read_pools()
    monkeypatch.setenv("PGRAG_READ_TIMEOUT_S", "0.001")
    try:
        with pytest.raises(QueryError, match="read timeout"):
            ask(pg_dsn, realm, "Vertex 1", max_hops=4, top_k=10)
    finally:
        db.close_read_pools()  # the pools of this test keep its 1 ms timeout
    monkeypatch.undo()
    assert ask(pg_dsn, realm, "Vertex 1", max_hops=2).relations


@pytest.mark.parametrize(
    "size, timeout, ok",
    [
        ("8", "30", True),
        ("2", "0", True),
        ("1", "30", False),
        ("8", "-1", False),
        ("8", "abc", False),
        ("x", "1", False),
    ],
)
def test_read_pool_settings_come_from_the_environment_and_fail_closed(
    monkeypatch: pytest.MonkeyPatch, size: str, timeout: str, ok: bool
) -> None:
    from pgrag_dag.errors import ConfigurationError

    monkeypatch.setenv("PGRAG_READ_POOL_MAX", size)
    monkeypatch.setenv("PGRAG_READ_TIMEOUT_S", timeout)
    if ok:
        assert db.read_pool_settings() == (int(size), float(timeout))
    else:
        with pytest.raises(ConfigurationError, match="PGRAG_READ_POOL_MAX"):
            db.read_pool_settings()


def test_a_global_query_believed_before_a_rebuild_reads_the_report_then_current(
    pg_dsn: str, realm: str, conn: psycopg.Connection
) -> None:
    """A rebuild keeps the reports it replaces (``communities_expired``): ``as_believed_at`` an instant
    before it returns the report then current, and after it the new one (issue 28, §5.4 on reports)."""
    b = GraphBuilder(conn, realm)
    b.rel("Mill", "grinds", "Corn", year=2010)
    b.chunk("mill", "The mill grinds grain.")
    b.community("Mills", "mill grinding corn", built_at=_at(2015))
    replace_communities(
        conn,
        realm,
        "alpha",
        fingerprint="rebuilt",
        reports=pl.DataFrame(
            {
                "cluster": [1],
                "title": ["Mills rebuilt"],
                "summary": ["s"],
                "findings": ["[]"],
                "rating": [5.0],
                "size": [3],
                "report": ["mill grinding corn and wheat"],
                "embedding": [EMB.embed_one("mill grinding corn and wheat")],
            }
        ),
        members=pl.DataFrame(schema={"cluster": pl.Int64, "entity_id": pl.Int64}),
    )
    then = ask(pg_dsn, realm, "mill", mode="global", as_believed_at="2020-01-01")
    assert [c["title"] for c in then.communities] == ["Mills"]
    now = ask(pg_dsn, realm, "mill", mode="global")
    assert [c["title"] for c in now.communities] == ["Mills rebuilt"]
    assert ask(pg_dsn, realm, "mill", mode="global", as_believed_at="2014-01-01").communities == []
