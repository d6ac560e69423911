"""Communities (paper §6, §6.1): Leiden clusters of the entity graph, LLM reports, a topic hierarchy.

Pure operators — no SQL, no Dagster; the only I/O is the injected
:class:`~pgrag_dag.providers.llm.ModelClient`.

- :func:`detect_communities`  entity graph → clusters (Leiden; label propagation if leidenalg is missing)
- :func:`graph_fingerprint`   SHA-256 of the graph, so an unchanged graph's rebuild can be skipped
- :func:`render_community`    a cluster's entities and internal relations as prompt text
- :func:`parse_report`        model text → report dict, or :class:`ValueError`
- :mod:`pgrag_dag.graph.community_reports`  one report per cluster, largest first, in batches to commit as
                              they come; unusable reports skipped, and those past a deadline or budget
- :func:`build_hierarchy`     recursive supergraph clustering → parent reports from child reports

Local ids: base clusters are numbered ``0..n-1`` (0 = largest); parents continue after the largest
cluster id, so ``children.cluster`` names a base cluster or a lower-level parent unambiguously.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import random
from collections import defaultdict
from typing import Any

import igraph as ig
import polars as pl

from pgrag_dag.config.sections import CommunitySettings
from pgrag_dag.errors import ModelError
from pgrag_dag.providers.json_reply import evict_hint, parse_json_object
from pgrag_dag.providers.llm import ModelClient
from pgrag_dag.providers.prompts import PARENT_REPORT_SYSTEM

log = logging.getLogger(__name__)

REPORT_COLUMNS = ("title", "summary", "findings", "rating", "size", "report")
_REPORT_SCHEMA = {
    "title": pl.String,
    "summary": pl.String,
    "findings": pl.String,
    "rating": pl.Float64,
    "size": pl.Int64,
    "report": pl.String,
}


# -- clustering ---------------------------------------------------------------------------------
def detect_communities(
    entities: pl.DataFrame, relations: pl.DataFrame, *, settings: CommunitySettings
) -> pl.DataFrame:
    """Partition the entity graph into communities (§6).

    Args:
        entities: ``id`` (Int64), ``name`` (str) — the non-dormant entities of one space.
        relations: ``source_id``, ``target_id`` (Int64), ``weight`` (int, distinct corroborating
            chunks; a relation counts at least once), ``negated`` (bool). Relations whose endpoints
            are not in ``entities`` are ignored.
        settings: ``resolution`` (Leiden RB-configuration), ``seed``, ``min_size`` (entities),
            ``negated_weight`` (factor < 1 applied to a denial's weight).

    Returns:
        ``cluster`` (Int64; 0 = largest, ordered by size desc then smallest entity id),
        ``entity_id`` (Int64); sorted by cluster, entity_id. Clusters under ``min_size`` are dropped.

    The graph is undirected; parallel edges are summed. Inputs are sorted by id first, so the result
    is deterministic for a given seed. Falls back to igraph's label propagation (seeded) only when
    leidenalg cannot be imported.
    """
    ids = sorted(int(i) for i in entities["id"].to_list())
    edges = _edge_weights(relations, set(ids), settings.negated_weight)
    groups = _partition(ids, edges, resolution=settings.resolution, seed=settings.seed)
    return _numbered(groups, min_size=settings.min_size)


def _edge_weights(
    relations: pl.DataFrame, keep: set[int], negated_weight: float
) -> dict[tuple[int, int], float]:
    """Undirected summed weights keyed by (smaller id, larger id); denials scaled by ``negated_weight``."""
    out: dict[tuple[int, int], float] = defaultdict(float)
    rows = relations.select("source_id", "target_id", "weight", "negated").sort("source_id", "target_id")
    for s, t, w, neg in rows.iter_rows():
        s, t = int(s), int(t)
        if s == t or s not in keep or t not in keep:
            continue
        weight = float(max(int(w or 0), 1)) * (negated_weight if neg else 1.0)
        out[(min(s, t), max(s, t))] += weight
    return dict(sorted(out.items()))


def _partition(
    nodes: list[int], edges: dict[tuple[int, int], float], *, resolution: float, seed: int
) -> list[list[int]]:
    """Leiden (RB-configuration, weighted, seeded) over ``nodes``; groups of node ids."""
    if not nodes:
        return []
    index = {n: i for i, n in enumerate(nodes)}
    g = ig.Graph(n=len(nodes), edges=[(index[a], index[b]) for a, b in edges], directed=False)
    weights = list(edges.values())
    try:
        import leidenalg
    except ImportError:
        log.warning("leidenalg is not importable; falling back to label propagation (seed %d)", seed)
        membership = _label_propagation(g, weights, seed)
    else:
        part = leidenalg.find_partition(
            g,
            leidenalg.RBConfigurationVertexPartition,
            weights=weights or None,
            resolution_parameter=resolution,
            seed=seed,
        )
        membership = list(part.membership)
    groups: dict[int, list[int]] = defaultdict(list)
    for node, label in zip(nodes, membership, strict=True):
        groups[label].append(node)
    return list(groups.values())


def _label_propagation(g: ig.Graph, weights: list[float], seed: int) -> list[int]:
    """igraph's label propagation under a seeded RNG, so the fallback is deterministic too."""
    ig.set_random_number_generator(random.Random(seed))
    try:
        return list(g.community_label_propagation(weights=weights or None).membership)
    finally:
        ig.set_random_number_generator(random)


def _numbered(groups: list[list[int]], *, min_size: int) -> pl.DataFrame:
    kept = sorted((sorted(g) for g in groups if len(g) >= min_size), key=lambda g: (-len(g), g[0]))
    rows = [(c, e) for c, g in enumerate(kept) for e in g]
    return pl.DataFrame(rows, schema={"cluster": pl.Int64, "entity_id": pl.Int64}, orient="row")


def graph_fingerprint(entities: pl.DataFrame, relations: pl.DataFrame) -> str:
    """SHA-256 hex over the sorted graph: entity (id, name) and relation (source_id, target_id,
    predicate, negated, weight). Equal fingerprints mean a rebuild would see the same graph (§6)."""
    h = hashlib.sha256()
    for i, name in sorted((int(i), str(n)) for i, n in entities.select("id", "name").iter_rows()):
        h.update(f"E\t{i}\t{name}\n".encode())
    cols = ("source_id", "target_id", "predicate", "negated", "weight")
    for row in sorted(
        (int(s), int(t), str(p), bool(n), int(w)) for s, t, p, n, w in relations.select(cols).iter_rows()
    ):
        h.update(("R\t" + "\t".join(map(str, row)) + "\n").encode())
    return h.hexdigest()


# -- rendering and parsing ----------------------------------------------------------------------
def render_community(cluster_entities: pl.DataFrame, internal_relations: pl.DataFrame) -> str:
    """Prompt text for one community (§6): its entities, then the relations internal to it.

    Args:
        cluster_entities: ``id``, ``name``, ``entity_type``, ``description``.
        internal_relations: ``source`` and ``target`` (entity names), ``predicate``, ``description``,
            ``negated``, ``valid_from``, ``valid_to`` (text or null).

    Lines are sorted, so equal inputs give identical text (and identical cache keys). A denial is
    rendered ``(A) --[NOT p]--> (B)``; validity as ``[from X]``, ``[until Y]`` or ``[valid X to Y]``.
    """
    lines = ["Entities:"]
    for name, etype, desc in sorted(
        (str(n), str(t or ""), str(d or ""))
        for n, t, d in cluster_entities.select("name", "entity_type", "description").iter_rows()
    ):
        lines.append(f"- {name} [{etype}]" + (f": {desc}" if desc else ""))
    lines += ["", "Relations:"]
    cols = ("source", "predicate", "target", "negated", "valid_from", "valid_to", "description")
    rels = sorted(
        (str(s), str(p), str(t), bool(n), vf or "", vt or "", str(d or ""))
        for s, p, t, n, vf, vt, d in internal_relations.select(cols).iter_rows()
    )
    for s, p, t, neg, vf, vt, d in rels:
        when = (
            f" [valid {vf} to {vt}]"
            if vf and vt
            else f" [from {vf}]"
            if vf
            else f" [until {vt}]"
            if vt
            else ""
        )
        lines.append(f"- ({s}) --[{'NOT ' if neg else ''}{p}]--> ({t}){when}" + (f": {d}" if d else ""))
    if not rels:
        lines.append("- (none)")
    return "\n".join(lines)


def parse_report(text: str) -> dict[str, Any]:
    """Parse a community report (§6) from model text.

    Returns ``{"title": str, "summary": str, "findings": [{"summary", "explanation"}], "rating": float}``
    with the rating clamped to 0–10. Tolerates a ```json fence, leading prose and trailing commas.
    Raises :class:`ValueError` when there is no JSON object, the title or summary is missing or
    empty, a finding has no summary, or the rating is missing or not a finite number.
    """
    obj = parse_json_object(text)
    title, summary = obj.get("title"), obj.get("summary")
    if not isinstance(title, str) or not title.strip():
        raise ValueError("report has no title")
    if not isinstance(summary, str) or not summary.strip():
        raise ValueError("report has no summary")
    raw_findings = obj.get("findings", [])
    if not isinstance(raw_findings, list):
        raise ValueError("report findings is not a list")
    findings = [{"summary": f, "explanation": ""} if isinstance(f, str) else f for f in raw_findings]
    if not all(
        isinstance(f, dict) and isinstance(f.get("summary"), str) and f["summary"].strip() for f in findings
    ):
        raise ValueError("a report finding has no summary")
    findings = [
        {"summary": f["summary"].strip(), "explanation": str(f.get("explanation") or "").strip()}
        for f in findings
    ]
    rating = obj.get("rating")
    if isinstance(rating, bool) or not isinstance(rating, int | float) or not math.isfinite(rating):
        raise ValueError(f"report rating is not a finite number: {rating!r}")
    return {
        "title": " ".join(title.split()),
        "summary": summary.strip(),
        "findings": findings,
        "rating": min(10.0, max(0.0, float(rating))),
    }


def _flatten(report: dict[str, Any]) -> str:
    """Report → text for embedding: title, summary, one line per finding."""
    lines = [f"# {report['title']}", "", report["summary"]]
    lines += [
        f"- {f['summary']}" + (f": {f['explanation']}" if f["explanation"] else "")
        for f in report["findings"]
    ]
    return "\n".join(lines)


def ask_report(client: ModelClient, system: str, user: str, purpose: str) -> dict[str, Any]:
    messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
    completion = client.complete(messages, purpose=purpose, json_mode=True)
    try:
        return parse_report(completion.text)
    except ValueError as exc:
        client.forget(completion)  # an unusable live response is asked again next build
        if hint := evict_hint(completion):
            raise ValueError(f"{exc}{hint}") from exc
        raise


EXTRACTIVE_MARK = "Extractive summary (not model-written)"
"""How every extractive report's summary begins."""


def extractive_report(
    ranked_names: list[str], internal_relations: pl.DataFrame, *, top: int = 5
) -> dict[str, Any]:
    """A community report written without a model (§6, for spaces with no model): the member names by
    degree and the best-supported internal relations, quoted from the graph — nothing is inferred.

    Args:
        ranked_names: member names, highest internal degree first.
        internal_relations: ``source``, ``target`` (names), ``predicate``, ``description``, ``weight``,
            ``negated`` — relations with both endpoints in the community.
        top: how many relations become findings.

    Returns the :func:`parse_report` shape; the summary starts with :data:`EXTRACTIVE_MARK`, the
    rating is ``min(10, 2·log2(1 + relations))`` (how much the graph says about the community).
    """
    n, m = len(ranked_names), internal_relations.height
    if "weight" not in internal_relations.columns:
        internal_relations = internal_relations.with_columns(weight=pl.lit(1, pl.Int64))
    head = ", ".join(ranked_names[:3]) + (f" and {n - 3} more" if n > 3 else "")
    best = internal_relations.sort(
        ["weight", "source", "predicate", "target"], descending=[True, False, False, False]
    )
    findings = [
        {
            "summary": f"{s} {'NOT ' if neg else ''}{p.replace('_', ' ')} {t}",
            "explanation": (
                " ".join(str(d or "").split())[:300] + f" (supported by {w} chunk{'s' if w != 1 else ''})"
            ).strip(),
        }
        for s, p, t, d, w, neg in best.select(
            "source", "predicate", "target", "description", "weight", "negated"
        )
        .head(top)
        .iter_rows()
    ]
    summary = (
        f"{EXTRACTIVE_MARK}: {n} entities and {m} relations. Members by connections: "
        f"{', '.join(ranked_names[:12])}{' …' if n > 12 else ''}."
    )
    return {
        "title": head or "Community",
        "summary": summary,
        "findings": findings,
        "rating": round(min(10.0, 2 * math.log2(1 + m)), 2),
    }


def extractive_parent_report(children: pl.DataFrame) -> dict[str, Any]:
    """A parent topic's report without a model (§6.1): its children's titles, largest first, as findings.

    ``children``: child reports (``title``, ``size``, ``rating``), largest first. The summary starts with
    :data:`EXTRACTIVE_MARK`; the rating is the size-weighted mean of the children's.
    """
    titles = children["title"].to_list()
    sizes = children["size"].to_list()
    total = sum(sizes) or 1
    rating = sum(r * z for r, z in zip(children["rating"].to_list(), sizes)) / total
    return {
        "title": " · ".join(titles[:2]) + (f" and {len(titles) - 2} more" if len(titles) > 2 else ""),
        "summary": f"{EXTRACTIVE_MARK}: a topic of {len(titles)} communities, {sum(sizes)} entities.",
        "findings": [{"summary": t, "explanation": f"{z} entities"} for t, z in zip(titles, sizes)],
        "rating": round(rating, 2),
    }


def qualify_title(title: str, candidates: list[str], seen: set[str]) -> str:
    """``title``, or ``title (name)`` with the first candidate not already in it, if taken."""
    if title.lower() not in seen:
        return title
    for name in candidates:
        if name.lower() not in title.lower() and f"{title} ({name})".lower() not in seen:
            return f"{title} ({name})"
    n = next(n for n in range(2, len(seen) + 3) if f"{title} ({n})".lower() not in seen)
    return f"{title} ({n})"


def reports_frame(rows: list[dict[str, Any]], key: str) -> pl.DataFrame:
    return pl.DataFrame(rows, schema={key: pl.Int64, **_REPORT_SCHEMA})


def member_label(names: list[str], *, shown: int = 8) -> str:
    """How a log line or a pending-work line names a community's members: ``N entities: A, B, …``
    (the first ``shown`` names, then ``and K more``)."""
    head = ", ".join(names[:shown]) + (f" and {len(names) - shown} more" if len(names) > shown else "")
    return f"{len(names)} entit{'y' if len(names) == 1 else 'ies'}: {head}"


def report_row(key: str, ident: int, report: dict[str, Any], size: int) -> dict[str, Any]:
    return {
        key: ident,
        "title": report["title"],
        "summary": report["summary"],
        "findings": json.dumps(report["findings"], ensure_ascii=False),
        "rating": report["rating"],
        "size": size,
        "report": _flatten(report),
    }


def render_child_reports(reports: pl.DataFrame) -> str:
    """Prompt text for a parent report: each child's title, size, rating, summary and findings."""
    blocks = []
    for title, summary, findings, rating, size in reports.select(
        "title", "summary", "findings", "rating", "size"
    ).iter_rows():
        lines = [f"## {title}", f"(entities: {size}, rating: {rating:g})", summary]
        lines += [
            f"- {f['summary']}" + (f": {f['explanation']}" if f.get("explanation") else "")
            for f in json.loads(findings or "[]")
        ]
        blocks.append("\n".join(lines))
    return "Community reports:\n\n" + "\n\n".join(blocks)


def build_hierarchy(
    clusters: pl.DataFrame,
    relations: pl.DataFrame,
    reports: pl.DataFrame,
    client: ModelClient | None,
    *,
    settings: CommunitySettings,
    entities: pl.DataFrame | None = None,
    purpose: str = "community_parent_report",
    failures: list[str] | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Topic tree above the communities by recursive supergraph clustering (§6.1).

    Each level: one node per community of the level below (only communities that have a report),
    edge weights summed across the cut (denials scaled by ``negated_weight``), Leiden again; groups
    of at least 2 become parents, whose reports are written from their children's reports with
    :data:`PARENT_REPORT_SYSTEM` (with ``client=None``: :func:`extractive_parent_report`, no model).
    A community not grouped stays without a parent, so every child is
    in at most one parent per level — and nesting holds because each level clusters the level below.
    ``settings.levels`` is the number of parent levels above the base (0 = none); recursion stops
    early when a level forms no group.

    Args:
        clusters: ``cluster``, ``entity_id`` (from :func:`detect_communities`).
        relations: ``source_id``, ``target_id``, ``weight``, ``negated``.
        reports: base reports from :func:`write_reports` (``cluster``, ``title``, ...).
        entities: optional ``id``, ``name``: member names used to qualify duplicate parent titles.
        failures: when given, one line per parent report that failed (``"level L communities [...]: reason
            [members: N entities: A, B, …]"``) is appended to it.

    Returns:
        ``(parents, children)``: parents with ``parent`` (Int64 local id, after every cluster id),
        ``level`` (1..levels), ``title``, ``summary``, ``findings`` (JSON text), ``rating``, ``size``
        (entities under it), ``report``; children with ``parent``, ``cluster`` (a base cluster or a
        lower-level parent). A parent whose report is unusable is logged and not created.

    Raises:
        DatabaseError: the response cache's database went away (raised at once; no further report).
    """
    names = {} if entities is None else {int(i): str(n) for i, n in entities.select("id", "name").iter_rows()}
    node_of: dict[int, int] = {}  # entity id -> current-level node
    under: dict[int, list[int]] = defaultdict(list)  # node -> entity ids beneath it
    reported = {int(c) for c in reports["cluster"].to_list()}
    for c, e in clusters.select("cluster", "entity_id").iter_rows():
        if int(c) in reported:
            node_of[int(e)] = int(c)
            under[int(c)].append(int(e))
    node_reports = reports.select("cluster", *REPORT_COLUMNS).rename({"cluster": "node"})
    seen = {t.lower() for t in reports["title"].to_list()}
    next_id = max(reported, default=-1) + 1
    parent_rows: list[dict[str, Any]] = []
    child_rows: list[tuple[int, int]] = []
    for level in range(1, settings.levels + 1):
        edges = _edge_weights(
            relations.with_columns(
                pl.col("source_id").replace_strict(node_of, default=None, return_dtype=pl.Int64),
                pl.col("target_id").replace_strict(node_of, default=None, return_dtype=pl.Int64),
            ).drop_nulls(["source_id", "target_id"]),
            set(under),
            settings.negated_weight,
        )
        groups = _partition(sorted(under), edges, resolution=settings.resolution, seed=settings.seed)
        groups = sorted(
            (sorted(g) for g in groups if len(g) >= 2), key=lambda g: (-sum(len(under[n]) for n in g), g[0])
        )
        level_rows: list[dict[str, Any]] = []
        for group in groups:
            kids = node_reports.filter(pl.col("node").is_in(group)).sort(
                ["size", "node"], descending=[True, False]
            )
            try:
                report = (
                    extractive_parent_report(kids)
                    if client is None
                    else ask_report(client, PARENT_REPORT_SYSTEM, render_child_reports(kids), purpose)
                )
            except (ValueError, ModelError) as exc:
                who = member_label(sorted(names.get(e, str(e)) for n in group for e in under[n]))
                line = f"level {level} communities {group}: {type(exc).__name__}: {exc} [members: {who}]"
                log.warning("parent report skipped: %s", line)
                if failures is not None:
                    failures.append(line)
                continue
            entity_ids = sorted(e for n in group for e in under[n])
            report["title"] = qualify_title(
                report["title"], sorted(names[e] for e in entity_ids if e in names), seen
            )
            seen.add(report["title"].lower())
            level_rows.append({**report_row("parent", next_id, report, len(entity_ids)), "level": level})
            child_rows += [(next_id, n) for n in group]
            for e in entity_ids:
                node_of[e] = next_id
            next_id += 1
        if not level_rows:
            break
        parent_rows += level_rows
        grouped = {int(r["parent"]) for r in level_rows}
        node_of = {e: n for e, n in node_of.items() if n in grouped}
        under = defaultdict(list)
        for e, n in node_of.items():
            under[n].append(e)
        node_reports = reports_frame(level_rows, "parent").rename({"parent": "node"})
    parents = pl.DataFrame(parent_rows, schema={"parent": pl.Int64, "level": pl.Int64, **_REPORT_SCHEMA})
    children = pl.DataFrame(child_rows, schema={"parent": pl.Int64, "cluster": pl.Int64}, orient="row")
    return parents, children
