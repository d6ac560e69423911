"""The graph view (issue 16 item 8): one self-contained page per space — nothing loaded from a network —
checked in Debian's headless Chromium: opened on ``#q=<entity>``, the DOM lists the entity and its
neighbours with predicates, denial and supersession marks and validity, as the database holds them; a
screenshot is kept under ``test-artifacts/view/``. The demo's graph (issue 31 item 4): an overview of its
communities that opens into one, at the same coordinates on every load, labelled; screenshots
``demo-overview.png`` and ``demo-community.png`` beside it; and the same on four Microsoft earnings calls
indexed by the offline ``nlp`` extractor (slow: ``msft-*.png``)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import quote

import pytest
import yaml
from psycopg import sql
from typer.testing import CliRunner

from pgrag_dag.cli import app
from pgrag_dag.config import load_settings
from pgrag_dag.engine import Engine
from pgrag_dag.graph.export import read_tables
from pgrag_dag.graph.view import render_view, write_view
from pgrag_dag.store.identifiers import qualified
from tests.demo_graph import build_graph, demo_engine
from tests.fix_browser import chromium_dom, needs_chromium
from tests.fix_corpus import SHARED_CORPORA
from tests.graph_corpus import SPACE, indexed_saga

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts" / "view"


@pytest.fixture
def saga(tmp_path: Path, pg_dsn: str, realm: str) -> Iterator[Engine]:
    with indexed_saga(tmp_path, pg_dsn, realm) as engine:
        yield engine


class _Elements(HTMLParser):
    """Every start tag of a page as (tag, attributes), and the text under each ``<h3>``, ``<li>``, ``<p>``
    and SVG ``<text>`` (its lines' ``<tspan>`` run together)."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.texts: list[tuple[str, dict[str, str | None], list[str]]] = []
        self._open: list[tuple[str, dict[str, str | None], list[str]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag in ("h3", "li", "p", "text"):
            self._open.append((tag, dict(attrs), []))

    def handle_endtag(self, tag: str) -> None:
        if self._open and self._open[-1][0] == tag:
            self.texts.append(self._open.pop())

    def handle_data(self, data: str) -> None:
        for _, _, parts in self._open:
            parts.append(data)


def _parse(html: str) -> _Elements:
    parser = _Elements()
    parser.feed(html)
    return parser


def _chromium(url: str, profile: Path, *, screenshot: Path | None = None) -> str:
    return chromium_dom(url, profile, screenshot=screenshot)


def _neighbourhood(engine: Engine, realm: str, name: str) -> set[tuple[str, str, str, str]]:
    """(predicate, neighbour, negated, superseded) of every non-dormant relation of ``name`` to a live
    entity."""
    with engine.connect() as conn:
        rows = conn.execute(
            sql.SQL(
                """SELECT r.predicate, CASE WHEN s.name = %(n)s THEN o.name ELSE s.name END, r.negated,
                 r.superseded_by IS NOT NULL
                 FROM {r} r JOIN {e} s ON s.id = r.source_id JOIN {e} o ON o.id = r.target_id
                WHERE r.space = %(s)s AND r.dormant_since IS NULL AND s.dormant_since IS NULL
                AND o.dormant_since IS NULL
                  AND %(n)s IN (s.name, o.name)"""
            ).format(r=qualified(realm, "relations"), e=qualified(realm, "entities")),
            {"s": SPACE, "n": name},
        ).fetchall()
    return {(p, n, str(neg).lower(), str(sup).lower()) for p, n, neg, sup in rows}


def test_the_page_is_self_contained_and_caps_big_graphs(saga: Engine, realm: str) -> None:
    tables = read_tables(saga, realm, SPACE, mentions=False)
    html, counts = render_view(tables, max_nodes=400)
    page = _parse(html)
    # nothing is fetched: no external script, stylesheet, image, frame or import; the CSP forbids any
    assert not [a for t, a in page.tags if t in ("script", "img", "iframe") and a.get("src")]
    assert not [a for t, a in page.tags if t == "link"]
    # url() only names the page's own arrow markers (#arrow-…) or data: — nothing outside the page
    assert not re.search(r"@import|url\((?!\s*[\"']?(?:data:|#))", html)
    assert not re.search(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""", html, flags=re.I)
    csp = next(
        a["content"] for t, a in page.tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"
    )
    assert csp is not None and "default-src 'none'" in csp and "http" not in csp
    live = tables.entities.filter(~tables.entities["dormant"]).height
    assert counts["entities_drawn"] == counts["entities_live"] == live and counts["communities"] >= 1
    assert "Porthos" not in re.sub(r"<script>.*?</script>", "", html, flags=re.S)  # dormant: not drawn
    # Pierrefonds' community lost its only live member with Porthos' document: no empty circle, said so
    assert counts["communities_empty"] == 1 and "Pierrefonds" not in html
    assert "(not drawn: 1 with no live member left)" in " ".join(html.split())
    # capped: two circles per drawing — at most two communities, two members each — said on the page
    small, capped = render_view(tables, max_nodes=2)
    cap = next(a for t, a in _parse(small).tags if a.get("id") == "cap")
    assert (cap["data-capped"], cap["data-max-nodes"], cap["data-entities-live"]) == ("true", "2", str(live))
    assert int(str(cap["data-entities-drawn"])) == capped["entities_drawn"] < live
    said = " ".join(small.split())
    assert "Cap: 2 circles per drawing" in said
    assert f"The page holds {capped['entities_drawn']} of {live} live entities (capped)" in said
    data = json.loads(re.search(r"const PAGE = (.*);\n", small).group(1))  # type: ignore[union-attr]
    assert data["communities"] and all(len(c["members"]) <= 2 for c in data["communities"])


def test_hostile_names_stay_text_in_the_page() -> None:
    from datetime import datetime

    import polars as pl

    from pgrag_dag.graph.export import GraphTables
    from pgrag_dag.store import export as store

    evil = "</script><script>alert(1)</script>"
    now = datetime.now(UTC)
    ents = pl.DataFrame(
        [
            (1, evil, "Person", '"><img src=x onerror=alert(2)>', [], False, None, False, None, now),
            (2, "Bob", "Person", "", [evil], False, None, False, None, now),
        ],
        schema=store.ENTITY_SCHEMA,
        orient="row",
    )
    rels = pl.DataFrame(
        [
            (
                1,
                1,
                2,
                evil,
                "Bob",
                "knows",
                evil,
                1,
                0.9,
                False,
                None,
                None,
                now,
                None,
                None,
                False,
                False,
                None,
                [1],
            )
        ],
        schema=store.RELATION_SCHEMA,
        orient="row",
    )
    comms = pl.DataFrame(
        [(1, 0, evil, 5.0, 2, '" onclick="alert(3)', None, [], [1, 2], now)],
        schema=store.COMMUNITY_SCHEMA,
        orient="row",
    )
    html, counts = render_view(
        GraphTables("r", "s", ents, rels, comms, pl.DataFrame(schema=store.MENTION_SCHEMA)), max_nodes=10
    )
    assert counts["entities_drawn"] == 2 and counts["relations_drawn"] == 1
    assert (
        "alert(1)" in html and evil not in html and "<img src=x" not in html and 'onclick="alert' not in html
    )
    assert html.count("</script") == 1  # the end of the page's own script: none injected


@needs_chromium
def test_chromium_lists_the_searched_entity_and_its_neighbours(
    saga: Engine, realm: str, tmp_path: Path
) -> None:
    view = write_view(saga, realm, SPACE)
    assert view.path == tmp_path / "data" / "views" / f"{realm}.{SPACE}.html"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "athos.png"
    shot.unlink(missing_ok=True)
    profile = tmp_path / "chromium-profile"
    dom = _chromium(view.path.as_uri() + "#q=" + quote("athos"), profile, screenshot=shot)  # case-insensitive
    assert shot.is_file() and shot.stat().st_size > 10_000
    page = _parse(dom)
    cards = [a for t, a in page.tags if t == "section" and "match" in (a.get("class") or "")]
    assert len(cards) == 1
    assert [" ".join(x).strip() for t, a, x in page.texts if t == "h3"] == ["Athos"]
    items = [(a, "".join(x)) for t, a, x in page.texts if t == "li" and a.get("class") == "relation"]
    got = {
        (
            str(a["data-predicate"]),
            str(a["data-neighbour"]),
            str(a["data-negated"]),
            str(a["data-superseded"]),
        )
        for a, _ in items
    }
    assert got == _neighbourhood(saga, realm, "Athos")
    assert ("ally_of", "d'Artagnan", "false", "true") in got and (
        "enemy_of",
        "d'Artagnan",
        "false",
        "false",
    ) in got
    ally = next(
        text for a, text in items if a["data-predicate"] == "ally_of" and a["data-neighbour"] == "d'Artagnan"
    )
    assert "superseded by enemy_of" in ally and "valid 1625–" in ally
    status = next("".join(x) for t, a, x in page.texts if a.get("id") == "status")
    assert "1 entity match" in status
    # a denial, from the other side: Richelieu's list marks Aramis' refusal
    dom = _chromium(view.path.as_uri() + "#q=" + quote("Richelieu"), profile)
    items = [(a, "".join(x)) for t, a, x in _parse(dom).texts if t == "li" and a.get("class") == "relation"]
    denial = next(
        text for a, text in items if a["data-neighbour"] == "Aramis" and a["data-negated"] == "true"
    )
    assert "Aramis —NOT serves→ Richelieu" in denial and "denied" in denial


def test_pgrag_view_writes_the_page_and_prints_its_path(
    saga: Engine, realm: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PGRAG_CONFIG", str(tmp_path / "pgrag.yaml"))
    runner = CliRunner()
    out = runner.invoke(app, ["view", f"{realm}.{SPACE}", "--no-open"])
    assert out.exit_code == 0, out.output
    path = tmp_path / "data" / "views" / f"{realm}.{SPACE}.html"
    assert out.output.startswith(str(path)) and path.is_file() and "live entities" in out.output
    target = tmp_path / "mine.html"
    out = runner.invoke(
        app, ["view", f"{realm}.{SPACE}", "--no-open", "--out", str(target), "--max-nodes", "3"]
    )
    assert out.exit_code == 0 and target.is_file() and out.output.startswith(f"{target}  (")
    assert 'data-max-nodes="3"' in target.read_text() and " communities, " in out.output
    out = runner.invoke(
        app, ["view", f"{realm}.{SPACE}", "--no-open", "--out", str(tmp_path / "no" / "v.html")]
    )
    assert out.exit_code == 2 and "ExportError" in out.output and len(out.output.strip().splitlines()) == 1


def test_pgrag_view_says_so_when_no_browser_opens_the_page(
    saga: Engine, realm: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import webbrowser

    monkeypatch.setenv("PGRAG_CONFIG", str(tmp_path / "pgrag.yaml"))
    monkeypatch.setenv("BROWSER", "false")  # a "browser" that fails, as on a machine without a display
    monkeypatch.setattr(webbrowser, "_tryorder", None)  # read BROWSER afresh
    out = CliRunner().invoke(app, ["view", f"{realm}.{SPACE}"])
    assert out.exit_code == 0, out.output
    assert (
        out.output.splitlines()[-1]
        == "no web browser found here: open the file above in one (it needs no network)"
    )
    monkeypatch.setenv("BROWSER", "true")
    monkeypatch.setattr(webbrowser, "_tryorder", None)
    out = CliRunner().invoke(app, ["view", f"{realm}.{SPACE}"])
    assert out.exit_code == 0 and "no web browser" not in out.output, out.output


def _live_communities(engine: Engine, realm: str, space: str) -> dict[int, tuple[str, set[int]]]:
    """Level-0 community id → (title, its live members' ids), for the communities with a live member."""
    with engine.connect() as conn:
        rows = conn.execute(
            sql.SQL(
                """SELECT c.id, c.title, array_agg(m.entity_id) FROM {c} c
                     JOIN {m} m ON m.community_id = c.id JOIN {e} e ON e.id = m.entity_id
                    WHERE c.space = %s AND c.level = 0 AND e.dormant_since IS NULL GROUP BY c.id, c.title"""
            ).format(
                c=qualified(realm, "communities"),
                m=qualified(realm, "community_members"),
                e=qualified(realm, "entities"),
            ),
            (space,),
        ).fetchall()
    return {int(i): (t, set(ms)) for i, t, ms in rows}


def _drawing(dom: str) -> tuple[list[dict[str, str | None]], list[tuple[str, ...]], list[str]]:
    """(the attributes of every community or entity circle group, every circle's (cx, cy, r), the text of
    every label shown) in a dumped page."""
    page = _parse(dom)
    groups = [a for t, a in page.tags if t == "g" and a.get("class") in ("community-node", "entity-node")]
    circles = [(str(a["cx"]), str(a["cy"]), str(a["r"])) for t, a in page.tags if t == "circle"]
    shown = [
        " ".join(x).strip()  # one data part per <tspan> line
        for t, a, x in page.texts
        if t == "text" and "shown" in str(a.get("class")).split() and a.get("visibility") == "visible"
    ]
    return groups, circles, shown


@needs_chromium
def test_chromium_draws_the_demo_as_communities_that_open_into_their_members(
    pg_dsn: str, realm: str, tmp_path: Path
) -> None:
    engine = demo_engine(pg_dsn, realm)
    build_graph(engine, realm)
    truth = _live_communities(engine, realm, "demo")
    view = write_view(engine, realm, "demo", out=tmp_path / "demo.html")
    # the layout is computed when the page is written: the same graph writes the same bytes
    again = write_view(engine, realm, "demo", out=tmp_path / "again.html")
    assert view.path.read_bytes() == again.path.read_bytes()
    assert view.communities == view.communities_total == len(truth) == 30 and not view.capped
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    overview, community = ARTIFACTS / "demo-overview.png", ARTIFACTS / "demo-community.png"
    for shot in (overview, community):
        shot.unlink(missing_ok=True)
    dom = chromium_dom(view.path.as_uri(), tmp_path / "profile-1", screenshot=overview)
    assert overview.is_file() and overview.stat().st_size > 30_000
    groups, circles, shown = _drawing(dom)
    # the overview: one circle per community with a live member, as the database holds them
    assert sorted(int(str(a["data-community-id"])) for a in groups) == sorted(truth)
    assert {int(str(a["data-community-id"])): int(str(a["data-members"])) for a in groups} == {
        i: len(ms) for i, (_, ms) in truth.items()
    }
    # labelled by report title (two lines at most, cut with an ellipsis), the largest communities first
    titles = {i: " ".join(t.split()) for i, (t, _) in truth.items()}
    largest = sorted(truth, key=lambda i: (-len(truth[i][1]), i))
    for text in shown:
        assert any(titles[i].startswith(text.replace(" …", "").rstrip("…")) for i in truth), text
    assert len(shown) >= 20 and titles[largest[0]].startswith(shown[0].rstrip("…"))
    # the same coordinates on a second load (a fresh browser profile)
    groups2, circles2, shown2 = _drawing(chromium_dom(view.path.as_uri(), tmp_path / "profile-2"))
    assert [(a["data-x"], a["data-y"]) for a in groups] == [(a["data-x"], a["data-y"]) for a in groups2]
    assert circles == circles2 and shown == shown2 and len(set(circles)) == len(circles)
    # the largest community opens into its live members, labelled, its hub among them
    dom = chromium_dom(view.path.as_uri() + f"#c={largest[0]}", tmp_path / "profile-1", screenshot=community)
    assert community.is_file() and community.stat().st_size > 30_000
    members, _, labels = _drawing(dom)
    assert {int(str(a["data-entity-id"])) for a in members} == truth[largest[0]][1]
    assert len(members) == len(truth[largest[0]][1]) == 123
    assert "Charles Babbage" in labels and len(labels) >= 30
    # zoomed in four times (#…&z=4) nearly every circle on screen is labelled
    page = _parse(chromium_dom(view.path.as_uri() + f"#c={largest[0]}&z=4", tmp_path / "profile-1"))
    shown_for = {
        str(a["data-for"])
        for t, a in page.tags
        if t == "text" and "shown" in str(a.get("class")).split() and a.get("visibility") == "visible"
    }
    at: dict[str, tuple[float, float]] = {}
    for (t, a), (t2, c) in zip(page.tags, page.tags[1:], strict=False):
        if t == "g" and a.get("class") == "entity-node" and t2 == "circle":
            at[str(a["data-entity-id"])] = (float(str(c["cx"])), float(str(c["cy"])))
    # well inside the drawing (1500 × 950 less the 380-pixel side panel): room for a label on every side
    inside = {k for k, (x, y) in at.items() if 130 < x < 1120 - 130 and 100 < y < 950 - 100}
    # at the fitted zoom only the best-connected half is labelled; zoomed in, nearly all on screen
    assert len(labels) < 0.7 * len(members) and len(inside) >= 12
    assert len(inside & shown_for) >= 0.9 * len(inside), sorted(inside - shown_for)


def _loose(engine: Engine, realm: str, space: str) -> int:
    """Live entities of ``space`` in no level-0 community."""
    with engine.connect() as conn:
        row = conn.execute(
            sql.SQL(
                """SELECT count(*) FROM {e} e WHERE e.space = %s AND e.dormant_since IS NULL
                   AND NOT EXISTS (SELECT 1 FROM {m} m JOIN {c} c ON c.id = m.community_id
                                    WHERE m.entity_id = e.id AND c.level = 0)"""
            ).format(
                e=qualified(realm, "entities"),
                m=qualified(realm, "community_members"),
                c=qualified(realm, "communities"),
            ),
            (space,),
        ).fetchone()
    assert row is not None
    return int(row[0])


@pytest.mark.slow
@needs_chromium
def test_chromium_draws_earnings_calls_indexed_offline(pg_dsn: str, realm: str, tmp_path: Path) -> None:
    calls = SHARED_CORPORA / "msft_earnings_calls_graphrag" / "transcripts"
    if not calls.is_dir():
        pytest.skip(f"{calls} is not here (../shared/corpora or PGRAG_SHARED_DIR)")
    (tmp_path / "calls").mkdir()
    for quarter in ("FY24Q1", "FY24Q2", "FY24Q3", "FY24Q4"):
        name = f"Transcript{quarter}.txt"
        (tmp_path / "calls" / name).write_text((calls / name).read_text(encoding="utf-8"), encoding="utf-8")
    spaces = {"calls": {"extractor": "nlp", "sources": [{"path": "calls", "glob": "*.txt"}]}}
    config = {"database_url": pg_dsn, "data_dir": str(tmp_path / "data"), "llm": {"models": ["replay"]}}
    (tmp_path / "pgrag.yaml").write_text(yaml.safe_dump({**config, "realms": {realm: {"spaces": spaces}}}))
    engine = Engine.from_settings(load_settings(tmp_path / "pgrag.yaml"))
    build_graph(engine, realm, "calls")
    truth, loose = _live_communities(engine, realm, "calls"), _loose(engine, realm, "calls")
    view = write_view(engine, realm, "calls")
    assert view.communities == len(truth) >= 10 and loose > 0
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shots = {k: ARTIFACTS / f"msft-{k}.png" for k in ("overview", "loose", "search")}
    for shot in shots.values():
        shot.unlink(missing_ok=True)
    groups, _, shown = _drawing(
        chromium_dom(view.path.as_uri(), tmp_path / "profile", screenshot=shots["overview"])
    )
    assert sorted(int(str(a["data-community-id"])) for a in groups) == sorted(truth)
    assert len(shown) >= len(truth) / 2
    # the entities in no community open as their own group, capped at the page's max_nodes
    members, _, _ = _drawing(
        chromium_dom(view.path.as_uri() + "#c=loose", tmp_path / "profile", screenshot=shots["loose"])
    )
    assert len(members) == min(loose, 400)
    # a search opens the community of the entity found, selected, with its relations' predicates shown
    dom = chromium_dom(
        view.path.as_uri() + "#q=" + quote("Amy Hood"), tmp_path / "profile", screenshot=shots["search"]
    )
    page = _parse(dom)
    assert [" ".join(x).strip() for t, a, x in page.texts if t == "h3"] == ["Amy Hood"]
    svg = next(a for t, a in page.tags if t == "svg" and a.get("id") == "graph")
    hood = next(i for i, (_, ms) in truth.items() if any(m in ms for m in _ids(engine, realm, "Amy Hood")))
    assert svg["data-view"] == str(hood)
    assert any("selected" in str(a.get("class")) for t, a in page.tags if t == "g")
    assert all(shot.is_file() and shot.stat().st_size > 20_000 for shot in shots.values())


def _ids(engine: Engine, realm: str, name: str) -> set[int]:
    with engine.connect() as conn:
        rows = conn.execute(
            sql.SQL("SELECT id FROM {} WHERE name = %s").format(qualified(realm, "entities")), (name,)
        ).fetchall()
    return {int(r[0]) for r in rows}
