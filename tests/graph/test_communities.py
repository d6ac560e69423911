"""Communities (§6, §6.1): Leiden clusters, reports through real litellm, hierarchy, rebuild in PostgreSQL."""

from __future__ import annotations

import json
import re
import sys
import uuid
from collections.abc import Iterator

import polars as pl
import psycopg
import pytest
from psycopg import sql

from pgrag_dag.config import CommunitySettings, LLMSettings
from pgrag_dag.graph import communities as cm
from pgrag_dag.graph import community_reports as cr
from pgrag_dag.names import schema_for
from pgrag_dag.providers.llm import ModelClient
from pgrag_dag.providers.prompts import PARENT_REPORT_SYSTEM
from pgrag_dag.store import communities as store
from pgrag_dag.testing.stub_server import StubServer

REL_SCHEMA = {
    "source_id": pl.Int64,
    "target_id": pl.Int64,
    "predicate": pl.String,
    "description": pl.String,
    "weight": pl.Int64,
    "negated": pl.Boolean,
    "valid_from": pl.String,
    "valid_to": pl.String,
}


def entities(n: int) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "id": list(range(1, n + 1)),
            "name": [f"Entity {i:02d}" for i in range(1, n + 1)],
            "entity_type": ["Concept"] * n,
            "description": [f"description of entity {i}" for i in range(1, n + 1)],
        }
    )


def relations(edges: list[tuple[int, int, int, bool]]) -> pl.DataFrame:
    rows = [(s, t, "linked_to", "", w, neg, None, None) for s, t, w, neg in edges]
    return pl.DataFrame(rows, schema=REL_SCHEMA, orient="row")


def triangle(base: int, weight: int = 6) -> list[tuple[int, int, int, bool]]:
    return [
        (base, base + 1, weight, False),
        (base + 1, base + 2, weight, False),
        (base, base + 2, weight, False),
    ]


def groups(clusters: pl.DataFrame) -> list[list[int]]:
    return [
        sorted(g)
        for g in clusters.group_by("cluster").agg("entity_id").sort("cluster")["entity_id"].to_list()
    ]


def report_answer(messages: list[dict[str, str]]) -> str:
    """Stub model: a report titled after the prompt's first entity (or child titles, for parents)."""
    system, user = messages[0]["content"], messages[-1]["content"]
    if system == PARENT_REPORT_SYSTEM:
        kids = re.findall(r"^## (.+)$", user, re.MULTILINE)
        title = "Topic of " + " + ".join(kids)
    else:
        title = "Community of " + re.findall(r"^- (.+?) \[", user, re.MULTILINE)[0]
    return json.dumps(
        {
            "title": title,
            "summary": f"{title}: a summary.",
            "findings": [{"summary": "a finding", "explanation": "why"}],
            "rating": 7,
        }
    )


@pytest.fixture
def llm(pg_dsn: str, conn: psycopg.Connection) -> Iterator[tuple[StubServer, ModelClient]]:
    """A stub server reached through a real ModelClient (cache in the control schema ``conn`` creates);
    a fresh model name per test keeps one test's cached answers from serving another."""
    with StubServer(report_answer) as server:
        settings = LLMSettings(
            models=[f"openai/stub-{uuid.uuid4().hex[:12]}"],
            api_base=server.base_url,
            api_key="x",
            deadline_s=10,
            max_retries=0,
        )
        client = ModelClient(pg_dsn, settings)
        yield server, client
        client.close()


def prompts_sent(server: StubServer) -> list[list[dict[str, str]]]:
    return [r["body"]["messages"] for r in server.requests if r["path"].endswith("/chat/completions")]


# -- clustering ---------------------------------------------------------------------------------
def test_two_dense_triangles_joined_by_a_weak_edge_become_two_communities() -> None:
    rels = relations(triangle(1) + triangle(4) + [(3, 4, 1, False)])
    clusters = cm.detect_communities(entities(6), rels, settings=CommunitySettings())
    assert groups(clusters) == [[1, 2, 3], [4, 5, 6]]
    assert clusters.schema == pl.Schema({"cluster": pl.Int64, "entity_id": pl.Int64})


def test_clusters_under_min_size_are_dropped_and_largest_is_cluster_zero() -> None:
    rels = relations(
        triangle(1)
        + [
            (4, 5, 3, False),
            (4, 6, 3, False),
            (4, 7, 3, False),
            (5, 6, 3, False),
            (6, 7, 3, False),
            (5, 7, 3, False),
            (8, 9, 9, False),
        ]
    )
    clusters = cm.detect_communities(entities(10), rels, settings=CommunitySettings(min_size=3))
    assert groups(clusters) == [[4, 5, 6, 7], [1, 2, 3]]  # pair 8–9 and isolated 10 dropped


def test_negated_edges_are_down_weighted() -> None:
    # entity 7: weight 2 to the first triangle, a denial of weight 4 to the second
    rels = relations(triangle(1) + triangle(4) + [(7, 1, 2, False), (7, 4, 4, True)])
    scaled = cm.detect_communities(entities(7), rels, settings=CommunitySettings(negated_weight=0.25))
    unscaled = cm.detect_communities(entities(7), rels, settings=CommunitySettings(negated_weight=1.0))
    assert [1, 2, 3, 7] in groups(scaled)
    assert [4, 5, 6, 7] in groups(unscaled)


def test_clustering_is_deterministic_for_a_seed_and_input_order() -> None:
    edges = triangle(1) + triangle(4) + triangle(7) + [(3, 4, 1, False), (6, 7, 1, False), (2, 8, 1, False)]
    first = cm.detect_communities(entities(9), relations(edges), settings=CommunitySettings())
    shuffled = cm.detect_communities(
        entities(9).reverse(), relations(edges[::-1]), settings=CommunitySettings()
    )
    assert first.equals(shuffled)
    assert first.equals(cm.detect_communities(entities(9), relations(edges), settings=CommunitySettings()))


def test_label_propagation_fallback_is_deterministic(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "leidenalg", None)  # import leidenalg -> ImportError
    rels = relations(triangle(1) + triangle(4) + [(3, 4, 1, False)])
    runs = [cm.detect_communities(entities(6), rels, settings=CommunitySettings()) for _ in range(3)]
    assert groups(runs[0]) == [[1, 2, 3], [4, 5, 6]]
    assert all(r.equals(runs[0]) for r in runs)


def test_fingerprint_changes_when_a_relation_changes() -> None:
    edges = triangle(1) + [(3, 4, 1, False)]
    base = cm.graph_fingerprint(entities(4), relations(edges))
    assert base == cm.graph_fingerprint(entities(4).reverse(), relations(edges[::-1]))
    assert base != cm.graph_fingerprint(entities(4), relations(triangle(1) + [(3, 4, 2, False)]))
    assert base != cm.graph_fingerprint(entities(4), relations(triangle(1) + [(3, 4, 1, True)]))
    renamed = relations(edges).with_columns(pl.lit("founded").alias("predicate"))
    assert base != cm.graph_fingerprint(entities(4), renamed)


# -- rendering and parsing ----------------------------------------------------------------------
def test_render_marks_denials_and_validity_and_is_sorted() -> None:
    ents = entities(3)
    rels = pl.DataFrame(
        {
            "source": ["Entity 02", "Entity 01", "Entity 01"],
            "predicate": ["employed", "founded", "owned"],
            "target": ["Entity 03", "Entity 02", "Entity 03"],
            "description": ["", "in a garage", ""],
            "negated": [True, False, False],
            "valid_from": [None, "1999", "2001"],
            "valid_to": [None, None, "2005"],
        }
    )
    text = cm.render_community(ents, rels)
    assert "(Entity 02) --[NOT employed]--> (Entity 03)" in text
    assert "(Entity 01) --[founded]--> (Entity 02) [from 1999]: in a garage" in text
    assert "(Entity 01) --[owned]--> (Entity 03) [valid 2001 to 2005]" in text
    assert text == cm.render_community(ents.reverse(), rels.reverse())
    assert text.index("founded") < text.index("owned") < text.index("NOT employed")


def test_parse_report_tolerates_fence_prose_and_trailing_commas() -> None:
    text = (
        'Here it is:\n```json\n{"title": "T", "summary": "S", '
        '"findings": [{"summary": "f", "explanation": "e"},], "rating": 12,}\n```'
    )
    assert cm.parse_report(text) == {
        "title": "T",
        "summary": "S",
        "findings": [{"summary": "f", "explanation": "e"}],
        "rating": 10.0,
    }


@pytest.mark.parametrize(
    "text",
    [
        "no json here",
        '{"summary": "S", "rating": 5}',
        '{"title": "T", "summary": "S"}',
        '{"title": "T", "summary": "S", "rating": "high"}',
        '["not", "an", "object"]',
    ],
)
def test_parse_report_rejects_unusable_reports(text: str) -> None:
    with pytest.raises(ValueError):
        cm.parse_report(text)


# -- reports through real litellm ---------------------------------------------------------------
def three_clusters() -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    ents = entities(10)
    rels = relations(
        triangle(1)
        + triangle(4)
        + [
            (7, 8, 6, False),
            (8, 9, 6, False),
            (9, 10, 6, False),
            (7, 10, 6, False),
            (7, 9, 6, False),
            (3, 4, 1, False),
        ]
    )
    return ents, rels, cm.detect_communities(ents, rels, settings=CommunitySettings())


@pytest.mark.live
def test_reports_are_written_largest_first(llm: tuple[StubServer, ModelClient]) -> None:
    server, client = llm
    ents, rels, clusters = three_clusters()
    reports, failures = cr.write_reports(clusters, ents, rels, client, concurrency=1)
    assert failures == []
    assert reports["cluster"].to_list() == [0, 1, 2]
    assert reports["size"].to_list() == [4, 3, 3]
    assert "Entity 07" in prompts_sent(server)[0][-1]["content"]
    assert json.loads(reports["findings"][0]) == [{"summary": "a finding", "explanation": "why"}]
    assert reports["report"][0].startswith("# Community of Entity 07")


@pytest.mark.live
def test_unusable_report_is_skipped_and_the_others_kept(llm: tuple[StubServer, ModelClient]) -> None:
    server, client = llm
    server.answer = lambda m: (
        "I cannot help with that." if "Entity 04" in m[-1]["content"] else report_answer(m)
    )
    ents, rels, clusters = three_clusters()
    reports, failures = cr.write_reports(clusters, ents, rels, client)
    assert reports["cluster"].to_list() == [0, 1] or reports["cluster"].to_list() == [0, 2]
    skipped = ({0, 1, 2} - set(reports["cluster"].to_list())).pop()
    assert 4 in clusters.filter(pl.col("cluster") == skipped)["entity_id"].to_list()
    assert len(failures) == 1 and failures[0].startswith(f"cluster {skipped}: ValueError")


@pytest.mark.live
def test_model_failure_for_one_cluster_is_skipped_and_the_others_kept(
    llm: tuple[StubServer, ModelClient],
) -> None:
    server, client = llm

    def answer(messages: list[dict[str, str]]) -> str:
        if "Entity 07" in messages[-1]["content"]:
            raise RuntimeError("upstream overloaded")  # HTTP 500 -> ModelError (no retries)
        return report_answer(messages)

    server.answer = answer
    ents, rels, clusters = three_clusters()
    reports, failures = cr.write_reports(clusters, ents, rels, client)
    assert reports["cluster"].to_list() == [1, 2]
    assert len(failures) == 1 and failures[0].startswith("cluster 0: ModelError")


@pytest.mark.live
def test_duplicate_titles_are_qualified_with_a_member_name(llm: tuple[StubServer, ModelClient]) -> None:
    server, client = llm
    server.answer = lambda m: json.dumps(
        {"title": "Shared Theme", "summary": "s", "findings": [], "rating": 5}
    )
    ents, rels, clusters = three_clusters()
    reports, _ = cr.write_reports(clusters, ents, rels, client)
    titles = reports["title"].to_list()
    assert titles[0] == "Shared Theme" and len(set(titles)) == 3
    for cluster, title in zip(reports["cluster"].to_list()[1:], titles[1:], strict=True):
        member = re.fullmatch(r"Shared Theme \((.+)\)", title)
        assert member is not None
        ids = clusters.filter(pl.col("cluster") == cluster)["entity_id"].to_list()
        assert member.group(1) in ents.filter(pl.col("id").is_in(ids))["name"].to_list()


def hierarchy_graph() -> tuple[pl.DataFrame, pl.DataFrame]:
    """Five triangles: T1–T2 and T3–T4 tied by two weak edges each, T2–T3 by one; T5 isolated."""
    edges = [e for b in (1, 4, 7, 10, 13) for e in triangle(b)]
    edges += [(1, 4, 1, False), (2, 5, 1, False), (7, 10, 1, False), (8, 11, 1, False), (6, 9, 1, False)]
    return entities(15), relations(edges)


@pytest.mark.live
def test_every_child_is_in_exactly_one_parent_built_from_child_reports(
    llm: tuple[StubServer, ModelClient],
) -> None:
    server, client = llm
    ents, rels = hierarchy_graph()
    clusters = cm.detect_communities(ents, rels, settings=CommunitySettings())
    assert len(groups(clusters)) == 5
    reports, _ = cr.write_reports(clusters, ents, rels, client)
    parents, children = cm.build_hierarchy(
        clusters, rels, reports, client, settings=CommunitySettings(levels=1)
    )
    assert children["cluster"].is_unique().all()
    assert sorted(children.group_by("parent").len()["len"].to_list()) == [2, 2]
    assert set(children["parent"].to_list()) == set(parents["parent"].to_list())
    assert min(parents["parent"].to_list()) > max(clusters["cluster"].to_list())
    isolated = clusters.filter(pl.col("entity_id") == 13)["cluster"][0]
    assert isolated not in children["cluster"].to_list()  # left alone: no single-child parent
    parent_prompts = [
        m[-1]["content"] for m in prompts_sent(server) if m[0]["content"] == PARENT_REPORT_SYSTEM
    ]
    assert len(parent_prompts) == 2
    title_of = dict(zip(reports["cluster"].to_list(), reports["title"].to_list(), strict=True))
    for parent, prompt in zip(parents["parent"].to_list(), parent_prompts, strict=True):
        for child in children.filter(pl.col("parent") == parent)["cluster"].to_list():
            assert title_of[child] in prompt
    assert parents["size"].to_list() == [6, 6]


@pytest.mark.live
def test_second_level_nests_the_first(llm: tuple[StubServer, ModelClient]) -> None:
    _, client = llm
    ents, rels = hierarchy_graph()
    clusters = cm.detect_communities(ents, rels, settings=CommunitySettings())
    reports, _ = cr.write_reports(clusters, ents, rels, client)
    parents, children = cm.build_hierarchy(
        clusters, rels, reports, client, settings=CommunitySettings(levels=2)
    )
    assert parents["level"].to_list() == [1, 1, 2]
    top = parents.filter(pl.col("level") == 2)["parent"][0]
    level1 = parents.filter(pl.col("level") == 1)["parent"].to_list()
    assert sorted(children.filter(pl.col("parent") == top)["cluster"].to_list()) == sorted(level1)
    assert children["cluster"].is_unique().all()
    assert parents.filter(pl.col("level") == 2)["size"][0] == 12


# -- PostgreSQL ---------------------------------------------------------------------------------
def seed_graph(conn: psycopg.Connection, realm: str, space: str) -> dict[str, int]:
    """Insert hierarchy_graph() into ``space`` plus one dormant entity and one superseded relation."""
    s = sql.Identifier(schema_for(realm))
    ents, rels = hierarchy_graph()
    ids: dict[int, int] = {}
    for local, name in ents.select("id", "name").iter_rows():
        row = conn.execute(
            sql.SQL(
                "INSERT INTO {}.entities (space, name, description) VALUES (%s, %s, %s) RETURNING id"
            ).format(s),
            (space, name, f"about {name}"),
        ).fetchone()
        assert row is not None
        ids[local] = row[0]
    insert_rel = sql.SQL(
        "INSERT INTO {}.relations (space, source_id, target_id, predicate, weight, negated) "
        "VALUES (%s, %s, %s, %s, %s, %s) RETURNING id"
    ).format(s)
    for src, dst, _, _, w, neg, _, _ in rels.iter_rows():
        conn.execute(insert_rel, (space, ids[src], ids[dst], "linked_to", w, neg))
    dormant = conn.execute(
        sql.SQL(
            "INSERT INTO {}.entities (space, name, dormant_since) VALUES (%s, 'Ghost', now()) RETURNING id"
        ).format(s),
        (space,),
    ).fetchone()
    assert dormant is not None
    conn.execute(insert_rel, (space, ids[1], dormant[0], "haunted", 9, False))
    new = conn.execute(insert_rel, (space, ids[13], ids[1], "replaced_by", 9, False)).fetchone()
    old = conn.execute(insert_rel, (space, ids[13], ids[1], "moved_to", 9, False)).fetchone()
    assert new is not None and old is not None
    conn.execute(
        sql.SQL("UPDATE {}.relations SET superseded_by = %s, t_expired = now() WHERE id = %s").format(s),
        (new[0], old[0]),
    )
    conn.execute(sql.SQL("UPDATE {}.relations SET dormant_since = now() WHERE id = %s").format(s), (new[0],))
    return ids


def test_load_graph_excludes_dormant_and_superseded(conn: psycopg.Connection, realm: str) -> None:
    seed_graph(conn, realm, "main")
    ents, rels = store.load_graph(conn, realm, "main")
    assert ents.height == 15 and "Ghost" not in ents["name"].to_list()
    assert rels.height == 20 and set(rels["predicate"].to_list()) == {"linked_to"}
    assert set(store.RELATION_SCHEMA) <= set(rels.columns)
    other_ents, other_rels = store.load_graph(conn, realm, "other")
    assert other_ents.height == 0 and other_rels.height == 0


@pytest.mark.live
def test_replace_communities_twice_leaves_only_the_second_build(
    conn: psycopg.Connection, realm: str, llm: tuple[StubServer, ModelClient]
) -> None:
    _, client = llm
    seed_graph(conn, realm, "main")
    settings = CommunitySettings(levels=1)
    ents, rels = store.load_graph(conn, realm, "main")
    fingerprint = cm.graph_fingerprint(ents, rels)
    assert store.current_fingerprint(conn, realm, "main") is None
    clusters = cm.detect_communities(ents, rels, settings=settings)
    reports, _ = cr.write_reports(clusters, ents, rels, client)
    parents, children = cm.build_hierarchy(clusters, rels, reports, client, settings=settings, entities=ents)
    reports = reports.with_columns(pl.Series("embedding", [[0.5] * 384] * reports.height))  # optional column
    args = {
        "fingerprint": fingerprint,
        "reports": reports,
        "members": clusters,
        "parents": parents,
        "children": children,
    }
    first = store.replace_communities(conn, realm, "main", **args)
    assert first == {"deleted": 0, "communities": 5, "members": 15, "parents": 2, "children": 4}
    second = store.replace_communities(conn, realm, "main", **args)
    assert second["deleted"] == 7
    s = sql.Identifier(schema_for(realm))
    count = sql.SQL(
        "SELECT level, count(*), count(DISTINCT built_at) FROM {}.communities GROUP BY level ORDER BY level"
    )
    assert conn.execute(count.format(s)).fetchall() == [(0, 5, 1), (1, 2, 1)]
    assert conn.execute(sql.SQL("SELECT count(*) FROM {}.community_members").format(s)).fetchone() == (15,)
    nested = sql.SQL("""SELECT count(*) FROM {s}.community_children cc
                         JOIN {s}.communities c ON c.id = cc.child_id
                         WHERE c.parent_id = cc.parent_id""").format(s=s)
    assert conn.execute(nested).fetchone() == (4,)
    embedded = sql.SQL("SELECT level, count(embedding) FROM {}.communities GROUP BY level ORDER BY level")
    assert conn.execute(embedded.format(s)).fetchall() == [(0, 5), (1, 0)]
    assert store.current_fingerprint(conn, realm, "main") == fingerprint
