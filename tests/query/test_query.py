"""Query path, first depth: mix / naive / bypass against real PostgreSQL (paper §3.3, §5.4, §7)."""

from __future__ import annotations

import json
import logging
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from pgrag_dag.config import LLMSettings, RetrievalSettings
from pgrag_dag.errors import InvalidNameError, QueryError, SchemaMismatchError
from pgrag_dag.providers.embedding import HashingEmbedder
from pgrag_dag.providers.llm import ModelClient
from pgrag_dag.providers.prompts import SYNTHESIS_SYSTEM
from pgrag_dag.query import QueryParam, QueryResult, query, query_data, synthesis_messages
from pgrag_dag.query.assembly import render_relation
from pgrag_dag.store import db, retrieval, schema
from pgrag_dag.testing.stub_server import StubServer

EMB = HashingEmbedder(384)


def _t(realm: str, table: str) -> sql.Composed:
    return sql.SQL("{}.{}").format(sql.Identifier(schema.schema_for(realm)), sql.Identifier(table))


def _at(year: int) -> datetime:
    return datetime(year, 1, 1, tzinfo=UTC)


def _graph(conn: psycopg.Connection, realm: str) -> dict[str, int]:
    """Two spaces. In ``alpha``, around the seed Ada Lovelace:

    hop 1: worked_with Babbage [1833..1852], NOT married_to Babbage, knows Mary Somerville (newest),
           employed_by Old Firm (superseded). ``beta`` holds Leaked Neighbour and Other Leak, which no
           edge may join to an ``alpha`` vertex (the schema refuses it: tests/query/test_query_leaks.py).
    hop 2: Babbage designed Analytical Engine [from 1837] (newer than every hop-1 edge);
           Old Firm located_in Secret Town (reachable only through the superseded edge);
           Mary knows Dormant Person (dormant vertex).
    hop 3: Analytical Engine inspired Difference Engine.
    ``beta`` has its own Ada Lovelace --knows--> Beta Friend.
    """
    ids: dict[str, int] = {}
    entities = [
        ("alpha", "Ada Lovelace", "Person", "Mathematician and writer", None),
        ("alpha", "Charles Babbage", "Person", "Inventor", None),
        ("alpha", "Mary Somerville", "Person", "Scientist", None),
        ("alpha", "Analytical Engine", "Artifact", "Mechanical computer", None),
        ("alpha", "Difference Engine", "Artifact", "Calculator", None),
        ("alpha", "Old Firm", "Organization", "", None),
        ("alpha", "Secret Town", "Place", "", None),
        ("alpha", "Dormant Person", "Person", "", _at(2020)),
        ("alpha", "Ada Byron", "Person", "Dormant alias vertex", _at(2020)),
        ("beta", "Ada Lovelace", "Person", "Beta copy", None),
        ("beta", "Beta Friend", "Person", "", None),
        ("beta", "Leaked Neighbour", "Person", "", None),
        ("beta", "Other Leak", "Person", "", None),
    ]
    for space, name, etype, desc, dormant in entities:
        row = conn.execute(
            sql.SQL("""INSERT INTO {} (space, name, entity_type, description, dormant_since, embedding)
                       VALUES (%s, %s, %s, %s, %s, %s) RETURNING id""").format(_t(realm, "entities")),
            (space, name, etype, desc, dormant, EMB.embed_one(name)),
        ).fetchone()
        assert row is not None
        ids[f"{space}:{name}"] = row[0]

    def rel(
        space: str,
        s: str,
        p: str,
        o: str,
        *,
        year: int,
        negated: bool = False,
        payload: dict[str, str] | None = None,
        superseded_by: int | None = None,
    ) -> int:
        row = conn.execute(
            sql.SQL("""INSERT INTO {} (space, source_id, target_id, predicate, negated, payload, weight,
                                       superseded_by, t_created)
                       VALUES (%s, %s, %s, %s, %s, %s, 1, %s, %s) RETURNING id""").format(
                _t(realm, "relations")
            ),
            (space, ids[s], ids[o], p, negated, json.dumps(payload or {}), superseded_by, _at(year)),
        ).fetchone()
        assert row is not None
        return int(row[0])

    worked = rel(
        "alpha",
        "alpha:Ada Lovelace",
        "worked_with",
        "alpha:Charles Babbage",
        year=2001,
        payload={"valid_from": "1833", "valid_to": "1852"},
    )
    rel("alpha", "alpha:Ada Lovelace", "married_to", "alpha:Charles Babbage", year=2002, negated=True)
    rel("alpha", "alpha:Mary Somerville", "knows", "alpha:Ada Lovelace", year=2005)  # incoming edge
    rel("alpha", "alpha:Ada Lovelace", "employed_by", "alpha:Old Firm", year=2003, superseded_by=worked)
    rel(
        "alpha",
        "alpha:Charles Babbage",
        "designed",
        "alpha:Analytical Engine",
        year=2030,
        payload={"valid_from": "1837"},
    )
    rel("alpha", "alpha:Old Firm", "located_in", "alpha:Secret Town", year=2003)
    rel("alpha", "alpha:Mary Somerville", "knows", "alpha:Dormant Person", year=2003)
    rel("alpha", "alpha:Analytical Engine", "inspired", "alpha:Difference Engine", year=2003)
    rel("beta", "beta:Ada Lovelace", "knows", "beta:Beta Friend", year=2003)

    chunks = [  # (space, doc_key, text, embedded?, mentioned entity keys)
        ("alpha", "notes", "Ada Lovelace wrote the notes on the engine.", True, []),
        (
            "alpha",
            "letters",
            "The two corresponded about the machine for years.",
            False,
            ["alpha:Ada Lovelace", "alpha:Charles Babbage"],
        ),
        ("alpha", "diary", "She spent the winter in the country.", False, ["alpha:Ada Lovelace"]),
        ("beta", "beta-doc", "Beta passage that must stay in beta.", True, ["beta:Ada Lovelace"]),
        (
            "beta",
            "beta-leak",
            "Beta chunk wrongly linked to the alpha vertex.",
            False,
            ["alpha:Ada Lovelace"],
        ),
    ]
    for order, (space, key, text, embedded, mentions) in enumerate(chunks):
        row = conn.execute(
            sql.SQL("""INSERT INTO {} (space, doc_key, chunk_index, title, source, doc_order, text,
                                       content_hash, doc_hash, embedding)
                       VALUES (%s, %s, 0, %s, %s, %s, %s, %s, %s, %s) RETURNING id""").format(
                _t(realm, "documents")
            ),
            (
                space,
                key,
                key.title(),
                f"{key}.txt",
                order,
                text,
                f"h{order}",
                f"d{order}",
                EMB.embed_one(text) if embedded else None,
            ),
        ).fetchone()
        assert row is not None
        ids[f"chunk:{key}"] = row[0]
        for ent in mentions:
            conn.execute(
                sql.SQL("INSERT INTO {} (space, chunk_id, entity_id) VALUES (%s, %s, %s)").format(
                    _t(realm, "doc_mentions")
                ),
                (space, row[0], ids[ent]),
            )
    return ids


@pytest.fixture
def graph(conn: psycopg.Connection, realm: str) -> dict[str, int]:
    return _graph(conn, realm)


def _ask(pg_dsn: str, realm: str, question: str = "Ada Lovelace", **param: Any) -> QueryResult:
    # the vector-seeded path these tests pin (the walk has tests/query/test_query_ppr.py)
    param.setdefault("graph_ranking", "mentions")
    param.setdefault("collapse_duplicates", False)
    param.setdefault("space", "alpha")
    param.setdefault("top_k", 1)
    return query_data(question, QueryParam(**param), dsn=pg_dsn, realm=realm, embedder=EMB)


def _triples(result: QueryResult) -> list[tuple[str, str, str]]:
    return [(r["subject"], r["predicate"], r["object"]) for r in result.relations]


def _names(result: QueryResult) -> set[str]:
    return (
        {r["subject"] for r in result.relations}
        | {r["object"] for r in result.relations}
        | {e["name"] for e in result.entities}
    )


def test_every_traversal_step_is_scoped_to_the_space(pg_dsn: str, realm: str, graph: dict[str, int]) -> None:
    result = _ask(pg_dsn, realm)
    assert [e["id"] for e in result.entities] == [graph["alpha:Ada Lovelace"]]
    assert {r["space"] for r in result.relations} == {"alpha"}
    assert not {"Leaked Neighbour", "Other Leak", "Beta Friend"} & _names(result)
    assert "Leaked Neighbour" not in result.context and "Other Leak" not in result.context
    assert {c["space"] for c in result.chunks} == {"alpha"}
    assert "beta-leak" not in {c["doc_key"] for c in result.chunks}


def test_dormant_entities_are_neither_seeded_nor_walked_to(
    pg_dsn: str, realm: str, graph: dict[str, int]
) -> None:
    result = _ask(pg_dsn, realm, "Ada Byron", top_k=10)
    assert "Ada Byron" not in {e["name"] for e in result.entities}
    assert result.entities and all(e["space"] == "alpha" for e in result.entities)
    assert "Dormant Person" not in _names(_ask(pg_dsn, realm, max_hops=3))


def test_superseded_relations_are_not_walked_unless_asked(
    pg_dsn: str, realm: str, graph: dict[str, int]
) -> None:
    default = _triples(_ask(pg_dsn, realm))
    assert ("Ada Lovelace", "employed_by", "Old Firm") not in default
    assert ("Old Firm", "located_in", "Secret Town") not in default  # the vertex beyond is never reached
    history = _ask(pg_dsn, realm, include_superseded=True)
    assert ("Ada Lovelace", "employed_by", "Old Firm") in _triples(history)
    assert ("Old Firm", "located_in", "Secret Town") in _triples(history)
    assert "(Ada Lovelace) --[employed_by]--> (Old Firm) [superseded]" in history.context


def test_relations_are_hop_major_then_newest_first(pg_dsn: str, realm: str, graph: dict[str, int]) -> None:
    result = _ask(pg_dsn, realm)
    hops = [r["hop"] for r in result.relations]
    assert hops == sorted(hops) and set(hops) == {1, 2}
    assert _triples(result) == [
        ("Mary Somerville", "knows", "Ada Lovelace"),  # hop 1, 2005
        ("Ada Lovelace", "married_to", "Charles Babbage"),  # hop 1, 2002
        ("Ada Lovelace", "worked_with", "Charles Babbage"),  # hop 1, 2001
        ("Charles Babbage", "designed", "Analytical Engine"),  # hop 2, 2030: newest, yet after hop 1
    ]
    assert {r["channel"] for r in result.relations} == {"traversal"}
    assert [r["rank"] for r in result.relations] == [1, 2, 3, 4]


def test_max_hops_bounds_the_walk(pg_dsn: str, realm: str, graph: dict[str, int]) -> None:
    one = _ask(pg_dsn, realm, max_hops=1)
    assert {r["hop"] for r in one.relations} == {1}
    assert ("Charles Babbage", "designed", "Analytical Engine") not in _triples(one)
    two = _ask(pg_dsn, realm, max_hops=2)
    assert ("Charles Babbage", "designed", "Analytical Engine") in _triples(two)
    assert ("Analytical Engine", "inspired", "Difference Engine") not in _triples(two)
    three = _ask(pg_dsn, realm, max_hops=3)
    assert ("Analytical Engine", "inspired", "Difference Engine") in _triples(three)
    assert _ask(pg_dsn, realm, max_hops=0).relations == []


def test_max_relation_edges_caps_each_matched_entity(pg_dsn: str, realm: str, graph: dict[str, int]) -> None:
    result = _ask(pg_dsn, realm, max_relation_edges=2)
    assert _triples(result) == [
        ("Mary Somerville", "knows", "Ada Lovelace"),
        ("Ada Lovelace", "married_to", "Charles Babbage"),
    ]


def test_mention_expansion_ranks_by_matched_entities_mentioned(
    pg_dsn: str, realm: str, graph: dict[str, int]
) -> None:
    result = _ask(pg_dsn, realm, "Ada Lovelace Charles Babbage", top_k=2)
    assert {e["name"] for e in result.entities} == {"Ada Lovelace", "Charles Babbage"}
    vector = [c for c in result.chunks if c["via"] == "vector"]
    mention = [c for c in result.chunks if c["via"] == "mention"]
    assert [c["doc_key"] for c in vector] == ["notes"]
    assert [(c["doc_key"], c["mentions"]) for c in mention] == [("letters", 2), ("diary", 1)]
    assert [c["rank"] for c in result.chunks] == [1, 2, 3]
    assert "[2] The two corresponded" in result.context
    assert "[2] Letters (letters, chunk 0)" in result.context


def test_denials_and_validity_are_rendered(pg_dsn: str, realm: str, graph: dict[str, int]) -> None:
    context = _ask(pg_dsn, realm).context
    assert "(Ada Lovelace) --[NOT married_to]--> (Charles Babbage)" in context
    assert "(Ada Lovelace) --[worked_with]--> (Charles Babbage) [valid 1833 to 1852]" in context
    assert "(Charles Babbage) --[designed]--> (Analytical Engine) [from 1837]" in context
    assert (
        render_relation(
            {
                "subject": "A",
                "predicate": "p",
                "object": "B",
                "negated": False,
                "valid_from": None,
                "valid_to": "2020",
            }
        )
        == "(A) --[p]--> (B) [until 2020]"
    )


def test_context_blocks_in_order_and_nothing_dropped(
    pg_dsn: str, realm: str, graph: dict[str, int], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="pgrag_dag.query"):
        result = _ask(pg_dsn, realm, "Ada Lovelace Charles Babbage", top_k=2)
    placed = result.assembly["passages"]["chars_placed"]
    assert any(f"passages={placed}/{placed}chars" in r.getMessage() for r in caplog.records)
    ctx = result.context
    assert (
        ctx.index("-----Document passages-----")
        < ctx.index("-----Entities-----")
        < ctx.index("-----Relations-----")
    )
    for block in ("communities", "passages", "entities", "relations", "total"):
        report = result.assembly[block]
        assert report["chars_retrieved"] == report["chars_placed"]
        assert report["items_retrieved"] == report["items_placed"]
    assert result.assembly["passages"]["chars_retrieved"] == sum(len(c["text"]) for c in result.chunks)
    assert result.assembly["relations"]["items_placed"] == len(result.relations) > 0
    assert all(c["text"] in ctx for c in result.chunks)


def test_wildcard_space_reads_every_space_without_crossing_them(
    pg_dsn: str, realm: str, graph: dict[str, int]
) -> None:
    result = _ask(pg_dsn, realm, space="*", top_k=2)
    assert {(e["space"], e["name"]) for e in result.entities} == {
        ("alpha", "Ada Lovelace"),
        ("beta", "Ada Lovelace"),
    }
    triples = _triples(result)
    assert ("Ada Lovelace", "knows", "Beta Friend") in triples
    assert ("Ada Lovelace", "worked_with", "Charles Babbage") in triples
    assert not {"Leaked Neighbour", "Other Leak"} & _names(result)
    assert {"alpha", "beta"} <= {c["space"] for c in result.chunks}


def test_naive_and_bypass_modes(pg_dsn: str, realm: str, graph: dict[str, int]) -> None:
    naive = _ask(pg_dsn, realm, mode="naive")
    assert naive.entities == [] and naive.relations == []
    assert {c["via"] for c in naive.chunks} == {"vector"} and [c["doc_key"] for c in naive.chunks] == [
        "notes"
    ]
    bypass = _ask(pg_dsn, realm, mode="bypass")
    assert (bypass.entities, bypass.relations, bypass.chunks, bypass.context) == ([], [], [], "")


def test_unknown_mode_and_bad_params_raise(pg_dsn: str, realm: str) -> None:
    with pytest.raises(QueryError, match="unknown query mode 'fancy'"):
        QueryParam(space="alpha", mode="fancy")  # type: ignore[arg-type]
    with pytest.raises(QueryError, match="max_hops"):
        QueryParam(space="alpha", max_hops=-1)
    with pytest.raises(InvalidNameError):
        QueryParam(
            space="alpha\x00"
        )  # a control character (a space is a value: "alpha; DROP TABLE x" is one)


def test_wrong_realm_or_embedder_fails_closed(pg_dsn: str, realm: str, graph: dict[str, int]) -> None:
    with pytest.raises(QueryError, match="does not exist"):
        query_data("Ada", QueryParam(space="alpha"), dsn=pg_dsn, realm="nosuchrealm", embedder=EMB)
    with pytest.raises(SchemaMismatchError):
        query_data("Ada", QueryParam(space="alpha"), dsn=pg_dsn, realm=realm, embedder=HashingEmbedder(64))


def test_param_defaults_follow_retrieval_settings() -> None:
    p = QueryParam.from_settings(RetrievalSettings(max_hops=3), space="alpha", top_k=4)
    assert (p.mode, p.top_k, p.chunk_top_k, p.max_hops, p.max_relation_edges) == ("mix", 4, 8, 3, 50)


def test_traversal_rows_carry_their_endpoint_names(
    conn: psycopg.Connection, realm: str, graph: dict[str, int]
) -> None:
    walked = retrieval.traverse(
        conn, realm, "alpha", [graph["alpha:Ada Lovelace"]], max_hops=2, max_relation_edges=50
    )
    names = {v: k.split(":", 1)[1] for k, v in graph.items() if not k.startswith("chunk:")}
    assert walked and all(
        (r["subject"], r["object"]) == (names[r["source_id"]], names[r["target_id"]]) for r in walked
    )
    assert ("Ada Lovelace", "Charles Babbage") in {(r["subject"], r["object"]) for r in walked}


@pytest.mark.live
def test_query_sends_the_context_to_synthesis(pg_dsn: str, realm: str, graph: dict[str, int]) -> None:
    question = f"How did Ada Lovelace work with Charles Babbage? (run {uuid.uuid4().hex[:8]})"
    with StubServer(lambda messages: "They worked together [1].") as server:
        client = ModelClient(
            pg_dsn,
            LLMSettings(
                models=["openai/stub"], api_base=server.base_url, api_key="x", deadline_s=10, max_retries=0
            ),
        )
        try:
            answer, result = query(
                question,
                QueryParam(space="alpha", top_k=2),
                dsn=pg_dsn,
                realm=realm,
                embedder=EMB,
                client=client,
            )
        finally:
            client.close()
    assert answer == "They worked together [1]."
    messages = server.requests[-1]["body"]["messages"]
    assert messages[0] == {"role": "system", "content": SYNTHESIS_SYSTEM}
    assert question in messages[1]["content"] and result.context in messages[1]["content"]
    assert "--[NOT married_to]-->" in messages[1]["content"]


def test_query_resource_reads_through_the_engine(pg_dsn: str, realm: str, graph: dict[str, int]) -> None:
    from pgrag_dag.resources.query import QueryResource

    rag = QueryResource(database_url=pg_dsn, realm=realm)
    result = rag.query_data("Ada Lovelace", space="alpha", top_k=1, max_hops=1)
    assert [e["name"] for e in result.entities] == ["Ada Lovelace"]
    assert {r["hop"] for r in result.relations} == {1}
    with pytest.raises(QueryError, match="space is required"):
        rag.query_data("Ada Lovelace")


def test_query_resource_starts_from_the_configured_retrieval_defaults(
    pg_dsn: str, realm: str, graph: dict[str, int], tmp_path: Path
) -> None:
    from pgrag_dag.resources.query import QueryResource

    config = tmp_path / "pgrag.yaml"
    config.write_text("retrieval:\n  mode: naive\n  chunk_top_k: 1\n", encoding="utf-8")
    rag = QueryResource(database_url=pg_dsn, realm=realm, config_path=str(config))
    naive = rag.query_data("Ada Lovelace", space="alpha")
    assert (naive.param.mode, naive.param.chunk_top_k, naive.entities) == ("naive", 1, [])
    mixed = rag.query_data("Ada Lovelace", space="alpha", mode="mix", top_k=1)
    assert [e["name"] for e in mixed.entities] == ["Ada Lovelace"] and mixed.param.chunk_top_k == 1


def test_vector_searches_are_never_server_side_prepared(
    pg_dsn: str, realm: str, graph: dict[str, int]
) -> None:
    """A generic plan may skip the HNSW index; each vector search is planned for its own vector."""
    vec = EMB.embed_one("Ada Lovelace")
    with db.read_connection(pg_dsn) as conn:
        for _ in range(8):  # past psycopg's prepare threshold (5)
            retrieval.entity_search(conn, realm, "alpha", vec, 3)
            retrieval.traverse(
                conn, realm, "alpha", [graph["alpha:Ada Lovelace"]], max_hops=2, max_relation_edges=5
            )
        prepared = [r[0] for r in conn.execute("SELECT statement FROM pg_prepared_statements").fetchall()]
    assert any("RECURSIVE" in s for s in prepared)  # other reads are prepared: the check can see them
    assert not [s for s in prepared if "<=>" in s]


def test_a_belief_time_prompt_does_not_depend_on_the_instant() -> None:
    """Issue 14: the synthesis prompt says an answer is for an earlier belief-time instant, not which one
    (the database's clock), so a recorded answer replays in any database for the same context."""
    at = [
        synthesis_messages("Q?", "ctx", QueryParam(space="s", as_believed_at=t))
        for t in ("2020-01-01T00:00:00", "2031-06-30T12:34:56.789+02:00")
    ]
    now = synthesis_messages("Q?", "ctx", QueryParam(space="s"))
    assert at[0] == at[1] != now
    assert at[0][1]["content"].startswith(
        "Question: Q?\n(Answer as the graph stood at an earlier belief-time instant.)"
    )
    assert "2020" not in at[0][1]["content"] and "2031" not in at[0][1]["content"]
    both = synthesis_messages(
        "Q?", "ctx", QueryParam(space="s", as_of="2016", as_believed_at="2020-01-01T00:00:00")
    )
    assert (
        "(Answer as of 2016 (valid time) and as the graph stood at an earlier belief-time instant.)"
        in both[1]["content"]
    )
