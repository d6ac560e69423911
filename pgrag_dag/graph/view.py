"""A graph view in the browser (issue 16 item 8): one self-contained HTML page per space — no CDN, no
network: vis-network (the copy inside the ``pyvis`` wheel) and the data are inlined, and the page's
Content-Security-Policy forbids loading anything else, so it opens offline and from a file.

What it shows: the live entities (neither dormant nor archived) as vertices coloured by their level-0
community (§6), sized by degree; the non-dormant relations among them as arrows subject → object labelled
with the predicate and its stated validity (§5.1) — a denial (``negated``) red and dashed, a superseded
relation (§5.2–5.3) grey and dotted, current assertions solid. A search box (also ``#q=<name>`` in the
address, so ``view.html#q=Ada%20Lovelace`` opens on it) lists the matching entity and every relation it
has on the page as DOM — names, predicate, denied/superseded marks, validity — and selects them in the
drawing; the community list says each community's title, rating, size and summary.

Big spaces are capped: at most ``max_nodes`` entities are drawn (default ``export.view_max_nodes``), the best
connected (degree over non-dormant relations, then name), with the relations among them — at most
:data:`EDGES_PER_NODE` per entity drawn, current before superseded, the best corroborated first; the page
says how many of how many, and search covers what is drawn (``pgrag export`` has everything).
"""

from __future__ import annotations

import json
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
"""The view draws at most this many relations per entity drawn (a hub-dense top of a big graph stays
usable)."""
_VIS = "templates/lib/vis-9.1.2"  # inside the pyvis package


@dataclass(frozen=True)
class ViewResult:
    """What :func:`write_view` wrote: ``path`` and the counts drawn out of the space's live graph."""

    path: Path
    entities_drawn: int
    entities_live: int
    relations_drawn: int
    relations_among: int
    relations_live: int
    communities: int

    @property
    def capped(self) -> bool:
        """Whether fewer entities are drawn than the space holds live."""
        return self.entities_drawn < self.entities_live

    def summary(self) -> str:
        """One line: what is drawn of what."""
        return (
            f"{self.entities_drawn} of {self.entities_live} live entities, {self.relations_drawn} of "
            f"{self.relations_live} relations, {self.communities} communities"
        )


def view_path(settings: Settings, realm: str, space: str) -> Path:
    """``<data_dir>/views/<partition key>.html`` (the key percent-encodes a space's blanks and slashes)."""
    return settings.resolve(settings.data_dir) / "views" / f"{partition_key(realm, space)}.html"


def _validity(valid_from: str | None, valid_to: str | None) -> str:
    """``1843–1852``, ``1843–``, ``–1852`` or ``""``."""
    return "" if not (valid_from or valid_to) else f"{valid_from or ''}–{valid_to or ''}"


def _select(tables: GraphTables, max_nodes: int) -> tuple[pl.DataFrame, pl.DataFrame, int, int, int]:
    """(entities drawn with ``degree``, relations drawn, relations among the drawn entities, live entities,
    live relations): the live entities, the best connected first, at most ``max_nodes``, and the non-dormant
    relations among them — at most :data:`EDGES_PER_NODE` × ``max_nodes``, current before superseded, then
    the best corroborated."""
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
    drawn = ranked.head(max_nodes)
    ids = drawn["id"].implode()
    among = rels.filter(pl.col("source_id").is_in(ids) & pl.col("target_id").is_in(ids))
    kept = (
        among.sort(["superseded", "weight", "id"], descending=[False, True, False])
        .head(EDGES_PER_NODE * max_nodes)
        .sort("id")
    )
    return drawn, kept, among.height, ents.height, rels.height


def _communities(
    tables: GraphTables, drawn_ids: set[int]
) -> tuple[list[dict[str, Any]], dict[int, dict[str, Any]]]:
    """The level-0 communities with a drawn member, largest first, each with its colour; and entity id →
    its community."""
    base = tables.communities.filter(pl.col("level") == 0).sort(["size", "id"], descending=[True, False])
    out: list[dict[str, Any]] = []
    of: dict[int, dict[str, Any]] = {}
    for row in base.iter_rows(named=True):
        members = [int(e) for e in row["member_entity_ids"] if int(e) in drawn_ids]
        if not members:
            continue
        c = {
            "id": int(row["id"]),
            "title": row["title"],
            "rating": row["rating"],
            "size": int(row["size"]),
            "summary": row["summary"],
            "color": PALETTE[len(out) % len(PALETTE)],
            "members": members,
        }
        out.append(c)
        for e in members:
            of.setdefault(e, c)
    return out, of


def build_network(tables: GraphTables, *, max_nodes: int) -> tuple[Any, list[dict[str, Any]], dict[str, int]]:
    """The drawn graph as a ``pyvis.network.Network`` (vertex and edge fields as the page reads them), the
    drawn communities, and the counts ``entities_drawn``, ``entities_live``, ``relations_drawn``,
    ``relations_among`` (the drawn entities'), ``relations_live``."""
    from pyvis.network import Network

    drawn, rels, among, live_e, live_r = _select(tables, max_nodes)
    communities, of = _communities(tables, set(drawn["id"].to_list()))
    net = Network(directed=True, cdn_resources="in_line")
    for e in drawn.iter_rows(named=True):
        c = of.get(int(e["id"]))
        tip = "\n".join(
            x
            for x in (
                f"{e['name']} ({e['entity_type']})",
                e["description"],
                f"community: {c['title']}" if c else "",
            )
            if x
        )
        net.add_node(
            int(e["id"]),
            label=e["name"],
            title=tip,
            color=c["color"] if c else NO_COMMUNITY,
            value=max(1, int(e["degree"])),
            entity_type=e["entity_type"],
            description=e["description"],
            aliases=list(e["aliases"] or []),
            degree=int(e["degree"]),
            community=c["id"] if c else None,
            community_title=c["title"] if c else None,
        )
    names = dict(zip(tables.relations["id"].to_list(), tables.relations["predicate"].to_list()))
    pairs: dict[tuple[int, int], int] = defaultdict(int)
    for r in rels.iter_rows(named=True):
        pair = (min(r["source_id"], r["target_id"]), max(r["source_id"], r["target_id"]))
        k, pairs[pair] = (
            pairs[pair],
            pairs[pair] + 1,
        )  # the k-th edge of a pair bends further, so none hides another
        validity = _validity(r["valid_from"], r["valid_to"])
        state = "denied" if r["negated"] else ""
        if r["superseded"]:
            state = ", ".join(
                x for x in (state, f"superseded by {names.get(r['superseded_by'], r['superseded_by'])}") if x
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
        net.add_edge(
            int(r["source_id"]),
            int(r["target_id"]),
            id=int(r["id"]),
            label=r["predicate"] + (f" ({validity})" if validity else ""),
            title=tip,
            color=DENIED if r["negated"] else SUPERSEDED if r["superseded"] else CURRENT,
            dashes=[2, 6] if r["superseded"] else r["negated"],
            width=1 + math.log2(max(1, r["weight"])),
            smooth={
                "enabled": True,
                "type": "curvedCW" if k % 2 == 0 else "curvedCCW",
                "roundness": 0.08 + 0.12 * (k // 2 + k % 2),
            },
            predicate=r["predicate"],
            subject=r["subject"],
            object=r["object"],
            negated=bool(r["negated"]),
            superseded=bool(r["superseded"]),
            superseded_by=names.get(r["superseded_by"]) if r["superseded"] else None,
            valid_from=r["valid_from"],
            valid_to=r["valid_to"],
            weight=int(r["weight"]),
        )
    net.set_options(
        json.dumps(
            {
                "nodes": {"shape": "dot", "scaling": {"min": 8, "max": 36}, "font": {"size": 14}},
                "edges": {
                    "font": {"size": 10, "align": "middle"},
                    "arrows": {"to": {"enabled": True, "scaleFactor": 0.5}},
                },
                "physics": {"solver": "forceAtlas2Based", "stabilization": {"iterations": 150, "fit": True}},
                "interaction": {"hover": True, "tooltipDelay": 150},
            }
        )
    )
    counts = {
        "entities_drawn": drawn.height,
        "entities_live": live_e,
        "relations_drawn": rels.height,
        "relations_among": among,
        "relations_live": live_r,
    }
    return net, communities, counts


def render_view(tables: GraphTables, *, max_nodes: int) -> tuple[str, dict[str, int]]:
    """The page's HTML (template ``pgrag_dag/templates/graph_view.html``, vis-network inlined) and its counts
    (as :func:`build_network`, plus ``communities``)."""
    import jinja2

    net, communities, counts = build_network(tables, max_nodes=max_nodes)
    nodes, edges, _, _, _, options = net.get_network_data()
    vis = resources.files("pyvis").joinpath(_VIS)
    env = jinja2.Environment(loader=jinja2.PackageLoader("pgrag_dag", "templates"), autoescape=True)
    html = env.get_template("graph_view.html").render(
        realm=tables.realm,
        space=tables.space,
        nodes=nodes,
        edges=edges,
        options=json.loads(options),
        communities=communities,
        counts=counts,
        capped=counts["entities_drawn"] < counts["entities_live"],
        dormant=tables.entities.filter(pl.col("dormant")).height,
        superseded=sum(1 for e in edges if e.get("superseded")),
        denied=sum(1 for e in edges if e.get("negated")),
        vis_js=vis.joinpath("vis-network.min.js").read_text(encoding="utf-8"),
        vis_css=vis.joinpath("vis-network.css").read_text(encoding="utf-8"),
        colors={"denied": DENIED, "superseded": SUPERSEDED, "current": CURRENT, "none": NO_COMMUNITY},
    )
    return html, {**counts, "communities": len(communities)}


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
