"""Graph export (issue 16 item 7): GraphML re-read with igraph, Parquet and CSV re-read with polars, each
equal to what the database holds — superseded, denied, dormant and archived rows included — and the
optional Dagster asset ``graph_export`` materialised for real."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import igraph as ig
import polars as pl
import pytest
from psycopg import sql
from typer.testing import CliRunner

from pgrag_dag.cli import app
from pgrag_dag.engine import Engine
from pgrag_dag.graph.export import export_graph
from pgrag_dag.store.identifiers import qualified
from tests.graph_corpus import SPACE, indexed_saga

runner = CliRunner()


@pytest.fixture
def saga(tmp_path: Path, pg_dsn: str, realm: str) -> Iterator[Engine]:
    with indexed_saga(tmp_path, pg_dsn, realm) as engine:
        yield engine


def _rows(engine: Engine, query: str, realm: str, **tables: str) -> list[tuple[Any, ...]]:
    """Rows of ``query`` (tables named as ``{e}`` etc.), read straight from the database with the space as
    %s."""
    with engine.connect() as conn:
        return conn.execute(
            sql.SQL(query).format(**{k: qualified(realm, t) for k, t in tables.items()}), (SPACE,)
        ).fetchall()


def _db_entities(engine: Engine, realm: str) -> list[tuple[Any, ...]]:
    return _rows(
        engine,
        """SELECT id, name, entity_type, aliases, dormant_since IS NOT NULL, archived_at IS NOT NULL
                              FROM {e} WHERE space = %s ORDER BY id""",
        realm,
        e="entities",
    )


def _db_relations(engine: Engine, realm: str) -> list[tuple[Any, ...]]:
    return _rows(
        engine,
        """SELECT r.id, s.name, o.name, r.predicate, r.negated, r.weight, r.valid_from, r.valid_to,
                                   r.t_created, r.t_expired, r.superseded_by, r.dormant_since IS NOT NULL
                              FROM {r} r JOIN {e} s ON s.id = r.source_id JOIN {e} o ON o.id = r.target_id
                             WHERE r.space = %s ORDER BY r.id""",
        realm,
        r="relations",
        e="entities",
    )


def _live(ents: list[tuple[Any, ...]], rels: list[tuple[Any, ...]]) -> tuple[list[Any], list[Any]]:
    """The entity and relation rows an export without dormant rows holds: entities not dormant, relations
    not dormant between two of them."""
    names = {e[1] for e in ents if not e[4]}
    return [e for e in ents if not e[4]], [r for r in rels if not r[11] and {r[1], r[2]} <= names]


def test_graphml_parquet_and_csv_hold_what_the_database_holds(saga: Engine, realm: str) -> None:
    result = export_graph(saga, realm, SPACE, formats=["graphml", "parquet", "csv"], include_dormant=True)
    assert result.directory == saga.settings.resolve(saga.settings.data_dir) / "exports" / f"{realm}.{SPACE}"
    ents, rels = _db_entities(saga, realm), _db_relations(saga, realm)
    by_name = {e[1]: e for e in ents}
    # the fixture holds every state an export must carry
    assert by_name["Porthos"][4] and not by_name["Porthos"][5]  # dormant: its only document was deleted
    assert by_name["Rochefort"][4] and by_name["Rochefort"][5]  # archived (and so dormant)
    assert any(r[10] is not None for r in rels) and any(r[4] for r in rels) and any(r[11] for r in rels)
    assert result.rows["entities"] == len(ents) and result.rows["relations"] == len(rels)

    # GraphML, re-read by igraph
    g = ig.Graph.Read_GraphML(str(result.files["graphml"]))
    assert g.is_directed() and g.vcount() == len(ents) and g.ecount() == len(rels)
    assert (g["realm"], g["space"]) == (realm, SPACE)
    got_v = sorted(
        (
            int(v["entity_id"]),
            v["name"],
            v["entity_type"],
            json.loads(v["aliases"]),
            v["dormant"],
            v["archived"],
        )
        for v in g.vs
    )
    assert got_v == [(i, n, t, list(a), d, ar) for i, n, t, a, d, ar in ents]
    got_e = sorted(
        (
            int(e["relation_id"]),
            g.vs[e.source]["name"],
            g.vs[e.target]["name"],
            e["predicate"],
            e["negated"],
            int(e["weight"]),
            e["dormant"],
        )
        for e in g.es
    )
    assert got_e == [(r[0], r[1], r[2], r[3], r[4], r[5], r[11]) for r in rels]
    # the alliance of book 1, superseded by book 2's enmity: every attribute as stored
    ally = next(r for r in rels if r[1:4] == ("Athos", "d'Artagnan", "ally_of"))
    enemy = next(r for r in rels if r[1:4] == ("Athos", "d'Artagnan", "enemy_of"))
    edge = next(e for e in g.es if int(e["relation_id"]) == ally[0])
    assert edge["superseded"] is True and int(edge["superseded_by"]) == enemy[0] == ally[10]
    assert edge["valid_from"] == "1625" == ally[6] and edge["valid_to"] == "" and ally[7] is None
    assert edge["t_created"] == ally[8].isoformat() and edge["t_expired"] == ally[9].isoformat()
    assert edge["negated"] is False and edge["label"] == "ally_of"
    denial = next(e for e in g.es if e["predicate"] == "serves" and e["negated"])
    assert g.vs[denial.source]["name"] == "Aramis" and denial["superseded"] is False
    assert str(denial["superseded_by"]) == "nan"  # a missing number is absent, read as NaN
    members = dict(
        _rows(
            saga,
            """SELECT m.entity_id, min(c.id) FROM {m} m JOIN {c} c ON c.id = m.community_id
                                  WHERE c.space = %s AND c.level = 0 GROUP BY m.entity_id""",
            realm,
            m="community_members",
            c="communities",
        )
    )
    assert (
        members
        and {int(v["entity_id"]): int(v["community"]) for v in g.vs if str(v["community"]) != "nan"}
        == members
    )

    # Parquet, re-read by polars
    pq = {
        t: pl.read_parquet(result.files[f"parquet:{t}"])
        for t in ("entities", "relations", "communities", "mentions")
    }
    assert pq["entities"].select("id", "name", "entity_type", "aliases", "dormant", "archived").rows() == [
        (i, n, t, list(a), d, ar) for i, n, t, a, d, ar in ents
    ]
    assert (
        pq["relations"]
        .select(
            "id",
            "subject",
            "object",
            "predicate",
            "negated",
            "weight",
            "valid_from",
            "valid_to",
            "t_created",
            "t_expired",
            "superseded_by",
            "dormant",
        )
        .rows()
        == rels
    )
    db_comms = _rows(
        saga,
        "SELECT id, level, title, rating, summary FROM {c} WHERE space = %s ORDER BY level, id",
        realm,
        c="communities",
    )
    assert (
        db_comms and pq["communities"].select("id", "level", "title", "rating", "summary").rows() == db_comms
    )
    level0 = pq["communities"].filter(pl.col("level") == 0)
    assert sorted((e, c) for c, ms in level0.select("id", "member_entity_ids").rows() for e in ms) == sorted(
        (e, c)
        for e, c in _rows(
            saga,
            """SELECT m.entity_id, m.community_id FROM {m} m WHERE m.space = %s""",
            realm,
            m="community_members",
        )
    )
    assert pq["mentions"].rows() == _rows(
        saga,
        """SELECT m.entity_id, m.chunk_id, d.doc_key, d.chunk_index FROM {m} m
                                                   JOIN {d} d ON d.id = m.chunk_id WHERE m.space = %s
                                                   ORDER BY 1, 2""",
        realm,
        m="doc_mentions",
        d="documents",
    )

    # CSV, re-read by polars: lists as JSON text, timestamps as ISO-8601
    csv = pl.read_csv(result.files["csv:relations"], try_parse_dates=True)
    assert csv.select("id", "subject", "object", "predicate", "negated", "weight").rows() == [
        r[:6] for r in rels
    ]
    assert csv["t_expired"].to_list() == [r[9] for r in rels]
    assert [json.loads(c) for c in csv["chunk_ids"]] == pq["relations"]["chunk_ids"].to_list()
    ents_csv = pl.read_csv(result.files["csv:entities"])
    assert [(i, n, json.loads(a)) for i, n, a in ents_csv.select("id", "name", "aliases").rows()] == [
        (i, n, list(a)) for i, n, _, a, _, _ in ents
    ]


def test_pgrag_export_writes_the_files_and_refuses_a_missing_parent_in_one_line(
    saga: Engine, realm: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PGRAG_CONFIG", str(tmp_path / "pgrag.yaml"))
    target = tmp_path / "out"
    out = runner.invoke(app, ["export", f"{realm}.{SPACE}", "--format", "csv", "--out", str(target)])
    assert out.exit_code == 0, out.output
    assert sorted(p.name for p in target.iterdir()) == [
        "communities.csv",
        "entities.csv",
        "mentions.csv",
        "relations.csv",
    ]
    live, _ = _live(_db_entities(saga, realm), _db_relations(saga, realm))
    assert f"{len(live)} entities" in out.output and str(target / "relations.csv") in out.output
    missing = tmp_path / "no" / "such"
    out = runner.invoke(app, ["export", f"{realm}.{SPACE}", "--out", str(missing)])
    assert out.exit_code == 2 and len(out.output.strip().splitlines()) == 1
    assert (
        "ExportError" in out.output and f"its parent directory {missing.parent} does not exist" in out.output
    )
    assert not missing.parent.exists()
    out = runner.invoke(app, ["export", f"{realm}.{SPACE}", "--format", "gexf"])
    assert out.exit_code == 2 and "unknown export format 'gexf'" in out.output
    out = runner.invoke(app, ["export", f"{realm}.nosuchspace"])
    assert (
        out.exit_code == 2 and "UnknownSpaceError" in out.output and len(out.output.strip().splitlines()) == 1
    )


@pytest.mark.dagster
def test_the_graph_export_asset_writes_the_files_and_communities_link_the_view(
    tmp_path: Path, pg_dsn: str, realm: str
) -> None:
    from pgrag_dag.assets.changes import COMMUNITY_CHECKS
    from pgrag_dag.assets.partitions import add_partitions
    from pgrag_dag.assets.stages import build_assets
    from pgrag_dag.resources.engine import PgragResource

    with indexed_saga(
        tmp_path, pg_dsn, realm, export={"asset": True, "formats": ["graphml", "parquet"]}
    ) as engine:
        key = f"{realm}.{SPACE}"
        assets = build_assets(engine.settings)
        assert [a.key.to_user_string() for a in assets][-1] == "graph_export"
        with dg.instance_for_test() as instance:
            add_partitions(instance, [key])
            result = dg.materialize(
                [*assets, *COMMUNITY_CHECKS],
                partition_key=key,
                instance=instance,
                resources={"pgrag": PgragResource(config_path=str(tmp_path / "pgrag.yaml"))},
            )
        assert result.success
        mats = {
            e.asset_key.to_user_string(): e.materialization for e in result.get_asset_materialization_events()
        }
        meta = mats["graph_export"].metadata  # type: ignore[union-attr]
        directory = tmp_path / "data" / "exports" / key
        assert meta["directory"].value == str(directory)
        assert sorted(k for k in meta if k.startswith("file:")) == [
            "file:graphml",
            "file:parquet:communities",
            "file:parquet:entities",
            "file:parquet:mentions",
            "file:parquet:relations",
        ]
        ents, rels = _live(_db_entities(engine, realm), _db_relations(engine, realm))  # dormant rows left out
        assert meta["rows:entities"].value == len(ents) and meta["rows:relations"].value == len(rels)
        graph = ig.Graph.Read_GraphML(meta["file:graphml"].value)
        assert (graph.vcount(), graph.ecount()) == (len(ents), len(rels))
        assert pl.read_parquet(meta["file:parquet:relations"].value)["id"].to_list() == [r[0] for r in rels]
        # the communities asset links the graph view it wrote
        view = mats["communities"].metadata  # type: ignore[union-attr]
        page = Path(view["graph_view"].value)
        assert page == tmp_path / "data" / "views" / f"{key}.html" and page.is_file()
        assert view["graph_view_url"].value == page.as_uri() and '"label": "Athos"' in page.read_text()
        # a view that cannot be written is said in the metadata; the materialisation still succeeds
        page.unlink()
        page.parent.rmdir()
        page.parent.write_text("not a directory")
        with dg.instance_for_test() as instance:
            add_partitions(instance, [key])
            again = dg.materialize(
                [*assets, *COMMUNITY_CHECKS],
                partition_key=key,
                instance=instance,
                selection=["communities"],
                resources={"pgrag": PgragResource(config_path=str(tmp_path / "pgrag.yaml"))},
            )
        assert again.success
        said = next(e.materialization for e in again.get_asset_materialization_events()).metadata  # type: ignore[union-attr]
        assert said["graph_view"].value.startswith("not written: ExportError")


def test_export_and_view_take_out_as_text_as_well_as_a_path(saga: Engine, realm: str, tmp_path: Path) -> None:
    from pgrag_dag.graph.view import write_view

    done = export_graph(saga, realm, SPACE, formats=["csv"], out=str(tmp_path / "csv"))
    assert {p.parent for p in done.files.values()} == {tmp_path / "csv"}
    page = write_view(saga, realm, SPACE, out=str(tmp_path / "view.html"))
    assert page.path == tmp_path / "view.html" and page.path.read_text(encoding="utf-8").startswith("<!")


def test_an_export_leaves_dormant_rows_out_unless_asked(saga: Engine, realm: str, tmp_path: Path) -> None:
    """Dormant rows — history of removed documents — stay in the database, not in a file handed on (issue
    28); ``include_dormant`` adds them, marked."""
    ents, rels = _db_entities(saga, realm), _db_relations(saga, realm)
    live_ents, live_rels = _live(ents, rels)
    live = {e[0] for e in live_ents}
    assert live and len(live) < len(ents)
    done = export_graph(saga, realm, SPACE, formats=["parquet"], out=str(tmp_path / "live"))
    exported = pl.read_parquet(done.files["parquet:entities"])
    assert set(exported["id"]) == live and not exported["dormant"].any()
    assert set(pl.read_parquet(done.files["parquet:relations"])["id"]) == {r[0] for r in live_rels}
    members = pl.read_parquet(done.files["parquet:communities"])["member_entity_ids"].explode().drop_nulls()
    assert set(members) <= live
    assert set(pl.read_parquet(done.files["parquet:mentions"])["entity_id"]) <= live
    everything = export_graph(
        saga, realm, SPACE, formats=["parquet"], out=str(tmp_path / "all"), include_dormant=True
    )
    assert pl.read_parquet(everything.files["parquet:entities"])["dormant"].sum() == len(ents) - len(live)
