"""Tenant isolation of every retrieval channel across two spaces and two realms (paper §3.3, §7.2–7.3).

Realm A holds the space ``alpha`` (the one queried) and ``beta``; realm B holds its own ``alpha``.
Every other tenant carries bait: rows that would rank first in each channel if read — the same
entity names, embeddings equal to the query vectors, rendered text containing every query term — all
marked ``LEAK``. Realm A also holds mis-scoped mention edges joining an ``alpha`` entity to ``beta``
chunks; a mis-scoped relation (an edge whose endpoint lies in another space) cannot be stored at all.
Realm B's ids collide with realm A's (each realm has its own sequences).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import numpy as np
import psycopg
import pytest
from psycopg import sql

from pgrag_dag import names, temporal
from pgrag_dag.query import QueryResult, keywords
from pgrag_dag.store import retrieval, schema
from pgrag_dag.store import retrieval_channels as channels
from tests.query.test_query_modes import EMB, GraphBuilder, ask

Q = "Ada Lovelace engine notes"
_KW = keywords.lexical(Q)
QV = EMB.embed_one(Q)
ENTITY_V = EMB.embed_one(" ".join([Q, *_KW.low_level]))
GLOBAL_V = EMB.embed_one(" ".join([Q, *_KW.high_level]))


def _bait(b: GraphBuilder, space: str, marker: str) -> None:
    b.entity("Ada Lovelace", space=space, description=marker, embedding=ENTITY_V)
    b.rel(
        "Ada Lovelace",
        "wrote",
        f"{marker} Notes",
        space=space,
        rendered=f"Ada Lovelace engine notes {marker}",
        embedding=QV,
    )
    b.rel(
        f"{marker} Notes",
        "describe",
        f"{marker} Engine",
        space=space,
        embedding=QV,
        rendered=f"Ada Lovelace engine notes {marker} hop two",
    )
    b.chunk(
        f"{marker}-doc",
        f"Ada Lovelace engine notes {marker}",
        space=space,
        embedding=QV,
        mentions=("Ada Lovelace",),
    )
    b.chunk(
        f"{marker}-mention",
        f"{marker} passage reached by mention",
        space=space,
        embed=False,
        mentions=("Ada Lovelace",),
    )
    b.community(
        f"{marker} report",
        f"Ada Lovelace engine notes {marker}",
        space=space,
        rating=10,
        size=50,
        embedding=GLOBAL_V,
    )


@pytest.fixture
def other_realm(conn: psycopg.Connection, realm: str) -> Iterator[str]:
    name = f"{realm}_b"
    schema.init_realm(conn, name, embedding_model=EMB.model, dim=EMB.dim)
    yield name
    conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(names.schema_for(name))))
    conn.execute("DELETE FROM pgrag__control.realms WHERE realm = %s", (name,))


@pytest.fixture
def tenants(conn: psycopg.Connection, realm: str, other_realm: str) -> GraphBuilder:
    b = GraphBuilder(conn, other_realm)  # realm B first, so its ids collide with realm A's
    _bait(b, "alpha", "LEAK-realm")
    _bait(b, "beta", "LEAK-realm")
    a = GraphBuilder(conn, realm)
    a.entity("Ada Lovelace", description="Mathematician")
    a.rel("Ada Lovelace", "wrote", "Notes", rendered="Ada Lovelace wrote notes on the engine")
    a.rel("Charles Babbage", "designed", "Analytical Engine", rendered="Charles Babbage designed the engine")
    a.rel("Ada Lovelace", "worked_with", "Charles Babbage")
    a.chunk("notes", "Ada Lovelace wrote notes on the engine.", mentions=("Ada Lovelace",))
    a.chunk("letters", "Letters between the two.", embed=False, mentions=("Ada Lovelace", "Charles Babbage"))
    a.community("Pioneers", "Ada Lovelace and the engine notes.")
    _bait(a, "beta", "LEAK-beta")
    # mis-scoped mention rows inside realm A
    a.entity("LEAK-beta Neighbour", space="beta")
    stray = a.chunk("LEAK-beta-stray", "LEAK-beta chunk wrongly linked", space="beta", embed=False)
    m = sql.SQL("INSERT INTO {} (space, chunk_id, entity_id) VALUES (%s, %s, %s)").format(
        a._t("doc_mentions")
    )
    conn.execute(m, ("beta", stray, a.ids["alpha:Ada Lovelace"]))
    cross = a.chunk("LEAK-beta-cross", "LEAK-beta chunk under an alpha mention", space="beta", embed=False)
    conn.execute(m, ("alpha", cross, a.ids["alpha:Ada Lovelace"]))
    return a


@pytest.mark.parametrize(
    "space, source, target",
    [
        ("alpha", "alpha:Ada Lovelace", "beta:LEAK-beta Neighbour"),  # an alpha edge to a beta vertex
        ("beta", "alpha:Ada Lovelace", "beta:LEAK-beta Neighbour"),  # a beta edge from an alpha vertex
        ("beta", "alpha:Ada Lovelace", "alpha:Analytical Engine"),  # a beta edge between alpha vertices
    ],
)
def test_an_edge_whose_endpoint_lies_in_another_space_is_refused(
    conn: psycopg.Connection, realm: str, tenants: GraphBuilder, space: str, source: str, target: str
) -> None:
    insert = sql.SQL(
        "INSERT INTO {} (space, source_id, target_id, predicate) VALUES (%s, %s, %s, 'leaked_to')"
    )
    with pytest.raises(psycopg.errors.ForeignKeyViolation, match="_in_space"), conn.transaction():
        conn.execute(
            insert.format(tenants._t("relations")), (space, tenants.ids[source], tenants.ids[target])
        )


def _leaks(result: QueryResult, marker: str = "leak") -> list[str]:
    rows = [*result.entities, *result.relations, *result.chunks, *result.communities]
    found = [json.dumps(r, default=str) for r in rows if marker in json.dumps(r, default=str).lower()]
    if marker in result.context.lower():
        found.append("context")
    return found


_CHANNELS: dict[str, tuple[dict[str, Any], str]] = {  # channel -> (query parameters, what it must have found)
    "entity seeds": ({"relation_channels": [], "top_k": 20}, "entities"),
    "chunk seeds": ({"mode": "naive", "chunk_top_k": 20}, "chunks"),
    "chunk full-text": (
        {"mode": "naive", "chunk_top_k": 20, "chunk_channels": ["fulltext"]},
        "chunks_fulltext",
    ),
    "traversal": ({"relation_channels": ["traversal"], "max_hops": 3, "top_k": 20}, "traversal"),
    "relation similarity": ({"relation_channels": ["similarity"], "relation_top_k": 50}, "similarity"),
    "full-text": ({"relation_channels": ["lexical"], "relation_top_k": 50}, "lexical"),
    "mention expansion": ({"relation_channels": [], "top_k": 20, "chunk_top_k": 20}, "mentions"),
    "communities": ({"mode": "global", "community_top_k": 20, "relation_top_k": 50}, "communities"),
    "global ranking": ({"mode": "global", "relation_top_k": 50}, "ranked"),
    "hybrid, diversified": (
        {
            "mode": "hybrid",
            "top_k": 20,
            "chunk_top_k": 20,
            "relation_top_k": 50,
            "community_top_k": 20,
            "max_hops": 3,
            "mmr": True,
            "node_distance_rerank": True,
            "decompose": True,
            "chunk_channels": ["vector", "fulltext"],
        },
        "ranked",
    ),
}


@pytest.mark.parametrize("channel", list(_CHANNELS))
def test_no_channel_reads_another_space_or_realm(
    pg_dsn: str, realm: str, tenants: GraphBuilder, channel: str
) -> None:
    param, source = _CHANNELS[channel]
    result = ask(pg_dsn, realm, Q, **param)
    assert result.channels.get(source, 0) > 0, f"{channel} found nothing in alpha: the test would be vacuous"
    assert _leaks(result) == []
    assert {
        r["space"] for r in [*result.entities, *result.relations, *result.chunks, *result.communities]
    } == {"alpha"}


def test_the_wildcard_reads_every_space_of_one_realm_without_crossing_spaces(
    pg_dsn: str, realm: str, tenants: GraphBuilder
) -> None:
    result = ask(
        pg_dsn,
        realm,
        Q,
        space="*",
        mode="hybrid",
        top_k=20,
        chunk_top_k=20,
        relation_top_k=50,
        community_top_k=20,
        max_hops=3,
        chunk_channels=["vector", "fulltext"],
    )
    assert _leaks(result, "leak-realm") == []  # never another realm
    assert {r["space"] for r in result.relations} == {"alpha", "beta"}
    ends = {n for r in result.relations for n in (r["subject"], r["object"])}
    assert not {"LEAK-beta Neighbour"} & ends
    passages = {c["text"] for c in result.chunks}
    assert "LEAK-beta chunk under an alpha mention" not in passages  # nor mentions across spaces
    assert "LEAK-beta chunk wrongly linked" not in passages


def test_store_channels_are_scoped_directly(
    conn: psycopg.Connection, realm: str, tenants: GraphBuilder
) -> None:
    t = temporal.CURRENT
    ada = tenants.ids["alpha:Ada Lovelace"]
    reads: dict[str, list[dict[str, Any]]] = {
        "entity_search": retrieval.entity_search(conn, realm, "alpha", ENTITY_V, 50),
        "chunk_search": retrieval.chunk_search(conn, realm, "alpha", QV, 50),
        "chunk_fulltext": retrieval.chunk_fulltext(
            conn, realm, "alpha", channels.fulltext_query(Q.split()), 50
        ),
        "traverse": retrieval.traverse(conn, realm, "alpha", [ada], max_hops=3, max_relation_edges=50),
        "mention_chunks": retrieval.mention_chunks(conn, realm, "alpha", [ada], 50),
        "relation_similarity": channels.relation_similarity(conn, realm, "alpha", QV, 50, temporal=t),
        "relation_fulltext": channels.relation_fulltext(
            conn, realm, "alpha", channels.fulltext_query(Q.split()), 50
        ),
        "relation_keyword_overlap": channels.relation_keyword_overlap(conn, realm, "alpha", Q.split(), 50),
        "community_search": channels.community_search(conn, realm, "alpha", GLOBAL_V, 50),
    }
    for name, rows in reads.items():
        assert rows, f"{name} read nothing"
        assert {r["space"] for r in rows} == {"alpha"}, name
        assert not [r for r in rows if "leak" in json.dumps(r, default=str).lower()], name
    assert not [r for r in reads["traverse"] if "LEAK" in r["subject"] + r["object"]]
    beta = {tenants.ids[k] for k in tenants.ids if k.startswith("beta:")}
    distances = channels.entity_distances(
        conn, realm, "alpha", [ada], beta | {tenants.ids["alpha:Notes"]}, max_depth=3
    )
    assert distances == {tenants.ids["alpha:Notes"]: 1}  # the alpha edge to a beta vertex is never crossed
    assert channels.last_graph_write(conn, realm, ["alpha"]).keys() == {"alpha"}


def test_bait_is_what_an_unscoped_read_would_return(
    conn: psycopg.Connection, other_realm: str, tenants: GraphBuilder
) -> None:
    """The bait is attractive: read in its own tenant, it ranks first in every channel."""
    assert channels.relation_similarity(conn, other_realm, "alpha", QV, 1)[0]["object"] == "LEAK-realm Notes"
    assert "LEAK-realm" in retrieval.chunk_search(conn, other_realm, "alpha", QV, 1)[0]["text"]
    assert (
        "LEAK-realm"
        in retrieval.chunk_fulltext(conn, other_realm, "alpha", channels.fulltext_query(Q.split()), 1)[0][
            "text"
        ]
    )
    assert retrieval.entity_search(conn, other_realm, "alpha", ENTITY_V, 1)[0]["description"] == "LEAK-realm"
    assert "LEAK" in channels.community_search(conn, other_realm, "alpha", GLOBAL_V, 1)[0]["title"]
    assert np.isclose(channels.relation_similarity(conn, other_realm, "alpha", QV, 1)[0]["score"], 1.0)
