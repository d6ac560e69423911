"""A graph view in the browser (issue 16 item 8, made readable by issue 31 item 4): one self-contained HTML
page per space — no CDN, no network: the drawing is the page's own SVG and script (no library), the data
and the coordinates are inlined, and the page's Content-Security-Policy forbids loading anything else, so it
opens offline and from a file.

Two levels. The overview draws the space's level-0 communities (§6) as circles sized by their member count,
labelled by their report title, joined by the number of relations between their members. A community opens
(a click, or ``#c=<id>`` in the address) into its members as circles sized by degree and the non-dormant
relations among them as arrows subject → object — a denial (``negated``) red and dashed, a superseded
relation (§5.2–5.3) grey and dotted, current assertions solid; a selected entity's relations are labelled
with their predicate. The coordinates of both levels are computed here, by
:func:`pgrag_dag.graph.view_layout.layout` (seeded), so a page shows the same picture on every load. The
page labels the circles on screen by rank (a community's size, an entity's degree) as long as the labels do
not collide: the biggest at the overall zoom, all as one zooms in. A search box (also ``#q=<name>`` in the
address, so ``view.html#q=Ada%20Lovelace`` opens on it) lists the matching entity and every relation it has
in the page as DOM — names, predicate, denied/superseded marks, validity — opens its community and selects
them; the community list says each community's title, rating, size and summary.

Big spaces are capped, and the page says by how much: the overview draws at most ``max_nodes``
communities (the largest; default ``export.view_max_nodes``), a community at most ``max_nodes`` members
(the best connected: degree over non-dormant relations, then name), the page holds at most
:data:`PAGE_NODES` × ``max_nodes`` entities in all and at most :data:`EDGES_PER_NODE` relations per entity
— current before superseded, the best corroborated first; search covers what the page holds (``pgrag
export`` has everything). Entities in no community (their cluster was under ``communities.min_size``) open
as one more group from the side panel.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import polars as pl

from pgrag_dag.config.sections import Settings
from pgrag_dag.engine import Engine
from pgrag_dag.errors import ExportError
from pgrag_dag.graph.export import GraphTables, check_target, read_tables
from pgrag_dag.graph.view_layout import SEED, layout
from pgrag_dag.names import partition_key

PALETTE = (
    "#4e79a7",
    "#f28e2b",
    "#59a14f",
    "#b07aa1",
    "#edc948",
    "#76b7b2",
    "#ff9da7",
    "#9c755f",
    "#86bcb6",
    "#d37295",
    "#8cd17d",
    "#a0cbe8",
    "#ffbe7d",
    "#499894",
    "#f1ce63",
    "#d4a6c8",
    "#fabfd2",
    "#b6992d",
)
NO_COMMUNITY = "#bab0ac"
DENIED = "#d62728"
SUPERSEDED = "#9e9e9e"
CURRENT = "#5a6b7b"
EDGES_PER_NODE = 4
"""The page holds at most this many relations per entity it holds (a hub-dense graph stays drawable)."""
LINKS_PER_COMMUNITY = 3
"""The overview joins each community to at most this many others, those its members have the most
relations with."""
PAGE_NODES = 20
"""The page holds at most this many times ``max_nodes`` entities in all (its size stays a few MB)."""
COMMUNITY_SPAN = 4.5
"""In the overview an edge is about this many times its ends' radii long: a community's label is two lines
of a title, wider than its circle."""
ENTITY_SPAN = 3.0
"""In a community an edge is about this many times its ends' radii long."""
LOOSE = "loose"
"""The key of the group of entities in no community (``#c=loose``)."""


def community_radius(size: int) -> float:
    """A community's circle in the overview: its area grows with its member count (layout units)."""
    return round(8 + 5 * math.sqrt(max(size, 1)), 1)


def entity_radius(degree: int) -> float:
    """An entity's circle in its community: its area grows with its degree (layout units)."""
    return round(5 + 2.5 * math.sqrt(max(degree, 0)), 1)


@dataclass(frozen=True)
class ViewResult:
    """What :func:`write_view` wrote: ``path`` and the counts it holds out of the space's live graph —
    ``entities_drawn`` (entities in the page), ``relations_drawn``, ``relations_among`` (the relations among
    the entities in the page), ``communities`` (circles of the overview) of ``communities_total`` (the
    level-0 communities with a live member; ``communities_empty`` have none and are not drawn)."""

    path: Path
    entities_drawn: int
    entities_live: int
    relations_drawn: int
    relations_among: int
    relations_live: int
    communities: int
    communities_total: int
    communities_empty: int

    @property
    def capped(self) -> bool:
        """Whether the page holds fewer entities or communities than the space."""
        return self.entities_drawn < self.entities_live or self.communities < self.communities_total

    def summary(self) -> str:
        """One line: what is drawn of what."""
        return (
            f"{self.communities} of {self.communities_total} communities, {self.entities_drawn} of "
            f"{self.entities_live} live entities, {self.relations_drawn} of {self.relations_live} relations"
        )


def view_path(settings: Settings, realm: str, space: str) -> Path:
    """``<data_dir>/views/<partition key>.html`` (the key percent-encodes a space's blanks and slashes)."""
    return settings.resolve(settings.data_dir) / "views" / f"{partition_key(realm, space)}.html"


def _validity(valid_from: str | None, valid_to: str | None) -> str:
    """``1843–1852``, ``1843–``, ``–1852`` or ``""``."""
    return "" if not (valid_from or valid_to) else f"{valid_from or ''}–{valid_to or ''}"


def _live(tables: GraphTables) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(live entities with ``degree``, best connected first; the non-dormant relations between them)."""
    ents = tables.entities.filter(~pl.col("dormant"))
    live_ids = ents["id"].implode()
    rels = tables.relations.filter(
        ~pl.col("dormant") & pl.col("source_id").is_in(live_ids) & pl.col("target_id").is_in(live_ids)
    )
    ends = pl.concat(
        [rels.select(pl.col("source_id").alias("id")), rels.select(pl.col("target_id").alias("id"))]
    )
    degree = ends.group_by("id").agg(pl.len().cast(pl.Int64).alias("degree"))
    ranked = (
        ents.join(degree, on="id", how="left")
        .with_columns(pl.col("degree").fill_null(0))
        .sort(["degree", "name", "id"], descending=[True, False, False])
    )
    return ranked, rels


def _groups(
    tables: GraphTables, ranked: pl.DataFrame, max_nodes: int
) -> tuple[list[dict[str, Any]], int, dict[int, Any]]:
    """The level-0 communities drawn (of those with a live member, the ``max_nodes`` largest by live
    members, largest first) and the group of entities in none (key :data:`LOOSE`, last) — each with
    ``members``: its live entities, best connected first, at most ``max_nodes``, and the page's budget of
    :data:`PAGE_NODES` × ``max_nodes`` shared by rank; the number of level-0 communities whose members are
    all dormant (not drawn); and entity id → its group's key."""
    base = tables.communities.filter(pl.col("level") == 0).sort("id")
    order = {int(e): k for k, e in enumerate(ranked["id"].to_list())}
    of: dict[int, Any] = {}
    found: list[tuple[dict[str, Any], list[int]]] = []
    for row in base.iter_rows(named=True):
        live = sorted((int(e) for e in row["member_entity_ids"] if int(e) in order), key=order.__getitem__)
        live = [e for e in live if e not in of]  # a level-0 community owns an entity once
        for e in live:
            of[e] = int(row["id"])
        if live:
            found.append((row, live))
    found.sort(key=lambda f: (-len(f[1]), f[0]["id"]))
    groups: list[dict[str, Any]] = [
        {
            "id": int(row["id"]),
            "title": row["title"],
            "rating": row["rating"],
            "size": int(row["size"]),
            "summary": row["summary"],
            "color": PALETTE[k % len(PALETTE)],
            "live": len(live),
            "members": live[:max_nodes],
        }
        for k, (row, live) in enumerate(found[:max_nodes])
    ]
    loose = [e for e in ranked["id"].to_list() if int(e) not in of]
    for e in loose:
        of[int(e)] = LOOSE
    if loose:
        groups.append(
            {
                "id": LOOSE,
                "title": "Entities in no community",
                "rating": None,
                "size": len(loose),
                "summary": "clusters smaller than communities.min_size, and entities with no relation",
                "color": NO_COMMUNITY,
                "live": len(loose),
                "members": [int(e) for e in loose[:max_nodes]],
            }
        )
    budget = PAGE_NODES * max_nodes
    kept = set(sorted((e for g in groups for e in g["members"]), key=order.__getitem__)[:budget])
    for g in groups:
        g["members"] = [e for e in g["members"] if e in kept]
    return groups, base.height - len(found), of


def _edges(rels: pl.DataFrame, held: set[int], names: dict[int, str]) -> tuple[list[dict[str, Any]], int]:
    """The relations the page holds (both ends held; at most :data:`EDGES_PER_NODE` per entity held, current
    before superseded, then the best corroborated; by id) as the page reads them, and how many relations
    join two held entities."""
    ids = pl.Series(sorted(held), dtype=pl.Int64).implode()
    among = rels.filter(pl.col("source_id").is_in(ids) & pl.col("target_id").is_in(ids))
    kept = (
        among.sort(["superseded", "weight", "id"], descending=[False, True, False])
        .head(EDGES_PER_NODE * len(held))
        .sort("id")
    )
    out: list[dict[str, Any]] = []
    pairs: dict[tuple[int, int], int] = defaultdict(int)
    for r in kept.iter_rows(named=True):
        pair = (min(r["source_id"], r["target_id"]), max(r["source_id"], r["target_id"]))
        k = pairs[pair]
        pairs[pair] += 1
        validity = _validity(r["valid_from"], r["valid_to"])
        superseded_by = names.get(r["superseded_by"], r["superseded_by"]) if r["superseded"] else None
        state = ", ".join(
            x
            for x in (
                "denied" if r["negated"] else "",
                f"superseded by {superseded_by}" if superseded_by else "",
            )
            if x
        )
        tip = "\n".join(
            x
            for x in (
                f"{r['subject']} {'NOT ' if r['negated'] else ''}{r['predicate']} {r['object']}",
                r["description"],
                f"valid {validity}" if validity else "",
                state,
                f"corroborated by {r['weight']} chunk(s)",
            )
            if x
        )
        # the k-th relation of a pair bends further, alternately to either side, so none hides another
        bend = 0 if k == 0 else (1 if k % 2 else -1) * ((k + 1) // 2)
        out.append(
            {
                "id": int(r["id"]),
                "from": int(r["source_id"]),
                "to": int(r["target_id"]),
                "bend": bend * (1 if r["source_id"] <= r["target_id"] else -1),
                "title": tip,
                "predicate": r["predicate"],
                "subject": r["subject"],
                "object": r["object"],
                "negated": bool(r["negated"]),
                "superseded": bool(r["superseded"]),
                "superseded_by": superseded_by,
                "valid_from": r["valid_from"],
                "valid_to": r["valid_to"],
                "weight": int(r["weight"]),
            }
        )
    return out, among.height


def _place(items: list[dict[str, Any]], links: list[tuple[int, int, float]], span: float) -> None:
    """Set ``x`` and ``y`` of ``items`` (each with ``r``) by :func:`~pgrag_dag.graph.view_layout.layout`
    over ``links`` (item index pairs, weight), an edge about ``span`` times its ends' radii long."""
    coords = layout(
        [i["r"] for i in items], [(a, b) for a, b, _ in links], [w for _, _, w in links], span=span
    )
    for item, (x, y) in zip(items, coords, strict=True):
        item["x"], item["y"] = x, y


def _strongest_links(between: dict[tuple[int, int], int]) -> list[tuple[tuple[int, int], int]]:
    """Of the community pairs and the relations between their members, each community's
    :data:`LINKS_PER_COMMUNITY` strongest (more relations, then the other's position): every community
    shows its main neighbours and a big space's overview is no mesh; strongest first."""
    mine: dict[int, list[tuple[int, tuple[int, int]]]] = defaultdict(list)
    for pair, n in between.items():
        for c in pair:
            mine[c].append((n, pair))
    kept = {
        pair
        for links in mine.values()
        for _, pair in sorted(links, key=lambda x: (-x[0], x[1]))[:LINKS_PER_COMMUNITY]
    }
    return sorted(((p, between[p]) for p in kept), key=lambda kv: (-kv[1], kv[0]))


def build_page(tables: GraphTables, *, max_nodes: int) -> tuple[dict[str, Any], dict[str, int]]:
    """The page's data — ``communities`` (the overview's circles and the loose group, each with ``x``,
    ``y``, ``r``, ``members``), ``links`` (community pairs and the relations between their members, each
    community's :data:`LINKS_PER_COMMUNITY` strongest), ``nodes`` (the entities held, each with ``x``,
    ``y``, ``r`` in its group's drawing), ``edges`` (the relations held) — and the counts
    ``entities_drawn``, ``entities_live``, ``relations_drawn``, ``relations_among``, ``relations_live``,
    ``communities``, ``communities_total``, ``communities_empty`` (as :class:`ViewResult`)."""
    ranked, rels = _live(tables)
    groups, empty, of = _groups(tables, ranked, max_nodes)
    held = {e for g in groups for e in g["members"]}
    names = dict(zip(tables.relations["id"].to_list(), tables.relations["predicate"].to_list()))
    edges, among = _edges(rels, held, names)
    titles = {g["id"]: g["title"] for g in groups}
    nodes: dict[int, dict[str, Any]] = {}
    for e in ranked.filter(pl.col("id").is_in(pl.Series(sorted(held), dtype=pl.Int64).implode())).iter_rows(
        named=True
    ):
        group = of.get(int(e["id"]))
        nodes[int(e["id"])] = {
            "id": int(e["id"]),
            "label": e["name"],
            "title": "\n".join(x for x in (f"{e['name']} ({e['entity_type']})", e["description"]) if x),
            "entity_type": e["entity_type"],
            "description": e["description"],
            "aliases": list(e["aliases"] or []),
            "degree": int(e["degree"]),
            "community": group,
            "community_title": titles.get(group) if group != LOOSE else None,
            "r": entity_radius(int(e["degree"])),
        }
    for g in groups:
        index = {e: k for k, e in enumerate(g["members"])}
        inside: dict[tuple[int, int], float] = defaultdict(float)
        for edge in edges:
            a, b = index.get(edge["from"]), index.get(edge["to"])
            if a is not None and b is not None and a != b:
                inside[(min(a, b), max(a, b))] += edge["weight"]
        _place(
            [nodes[e] for e in g["members"]],
            [(a, b, w) for (a, b), w in sorted(inside.items())],
            ENTITY_SPAN,
        )
    overview = [g for g in groups if g["id"] != LOOSE]
    position = {g["id"]: k for k, g in enumerate(overview)}
    between: dict[tuple[int, int], int] = defaultdict(int)
    for r in rels.select("source_id", "target_id").iter_rows():
        a, b = position.get(of.get(int(r[0]), -1)), position.get(of.get(int(r[1]), -1))
        if a is not None and b is not None and a != b:
            between[(min(a, b), max(a, b))] += 1
    strongest = _strongest_links(between)
    for g in groups:
        g["r"] = community_radius(g["live"])
    _place(overview, [(a, b, math.log2(1 + n)) for (a, b), n in sorted(strongest)], COMMUNITY_SPAN)
    links = [
        {"source": overview[a]["id"], "target": overview[b]["id"], "relations": n} for (a, b), n in strongest
    ]
    counts = {
        "entities_drawn": len(held),
        "entities_live": ranked.height,
        "relations_drawn": len(edges),
        "relations_among": among,
        "relations_live": rels.height,
        "communities": len(overview),
        "communities_total": tables.communities.filter(pl.col("level") == 0).height - empty,
        "communities_empty": empty,
    }
    page = {"communities": groups, "links": links, "nodes": list(nodes.values()), "edges": edges}
    return page, counts


def render_view(tables: GraphTables, *, max_nodes: int) -> tuple[str, dict[str, int]]:
    """The page's HTML (template ``pgrag_dag/templates/graph_view.html`` with its script
    ``graph_view.js`` inlined) and its counts (as :func:`build_page`)."""
    import jinja2

    page, counts = build_page(tables, max_nodes=max_nodes)
    env = jinja2.Environment(loader=jinja2.PackageLoader("pgrag_dag", "templates"), autoescape=True)
    script = resources.files("pgrag_dag").joinpath("templates", "graph_view.js").read_text(encoding="utf-8")
    html = env.get_template("graph_view.html").render(
        realm=tables.realm,
        space=tables.space,
        page=page,
        counts=counts,
        max_nodes=max_nodes,
        seed=SEED,
        loose_key=LOOSE,
        loose=next((g for g in page["communities"] if g["id"] == LOOSE), None),
        dormant=tables.entities.filter(pl.col("dormant")).height,
        superseded=sum(1 for e in page["edges"] if e["superseded"]),
        denied=sum(1 for e in page["edges"] if e["negated"]),
        script=script,
        colors={"denied": DENIED, "superseded": SUPERSEDED, "current": CURRENT, "none": NO_COMMUNITY},
    )
    return html, counts


def write_view(
    engine: Engine, realm: str, space: str, *, out: str | Path | None = None, max_nodes: int | None = None
) -> ViewResult:
    """Read the space (:func:`~pgrag_dag.graph.export.read_tables`, no mentions) and write its page to ``out``
    or :func:`view_path`; ``max_nodes`` defaults to ``export.view_max_nodes``.

    Raises :class:`ExportError` (``out``'s directory missing, the file not writable, ``max_nodes`` < 1),
    :class:`UnknownSpaceError`, :class:`InvalidNameError`, :class:`DatabaseError`.
    """
    cap = engine.settings.export.view_max_nodes if max_nodes is None else max_nodes
    if cap < 1:
        raise ExportError(f"max_nodes must be at least 1, not {cap}")
    path = check_target(out) or view_path(engine.settings, realm, space)
    html, counts = render_view(read_tables(engine, realm, space, mentions=False), max_nodes=cap)
    try:
        path.parent.mkdir(parents=out is None, exist_ok=True)
        path.write_text(html, encoding="utf-8")
    except OSError as exc:
        raise ExportError(f"cannot write the graph view {path}: {exc.strerror or exc}") from None
    return ViewResult(path, **counts)
