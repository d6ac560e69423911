"""Community store (paper §6, §6.1): read the graph snapshot, replace a space's communities.

The realm schema is always a ``psycopg.sql.Identifier``; every value is a parameter.
A build replaces the space's communities — derived data is rebuilt, never accumulated (the replaced reports
are kept apart, in ``communities_expired``, for queries ``as_believed_at`` an earlier instant): its first
batch replaces the previous build (:func:`replace_communities`) and later batches of the same build
are added to it (:func:`append_communities`), largest clusters first, each in one transaction, so a
build cut short still holds its largest clusters. Every row of one batch carries the same
``built_at`` (its transaction's ``now()``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl
import psycopg
from psycopg import sql

from pgrag_dag.names import schema_for, validate_space

COMMUNITY_DDL = """
CREATE TABLE IF NOT EXISTS {s}.communities (
    id bigserial PRIMARY KEY,
    space text NOT NULL,
    level integer NOT NULL DEFAULT 0,
    title text NOT NULL,
    summary text NOT NULL,
    findings jsonb NOT NULL DEFAULT '[]',
    rating double precision NOT NULL DEFAULT 0,
    size integer NOT NULL,
    report text NOT NULL,
    built_at timestamptz NOT NULL DEFAULT now(),
    graph_fingerprint text NOT NULL,
    parent_id bigint REFERENCES {s}.communities(id) ON DELETE SET NULL,
    embedding {v},
    embed_hash text
);
CREATE INDEX IF NOT EXISTS communities_space ON {s}.communities (space, level);
-- issue 28: reports a rebuild replaced, kept for belief-time queries (built_at ≤ T < t_expired)
CREATE TABLE IF NOT EXISTS {s}.communities_expired (
    id bigint PRIMARY KEY,
    space text NOT NULL,
    level integer NOT NULL,
    title text NOT NULL,
    summary text NOT NULL,
    findings jsonb NOT NULL DEFAULT '[]',
    rating double precision NOT NULL DEFAULT 0,
    size integer NOT NULL,
    report text NOT NULL,
    built_at timestamptz NOT NULL,
    graph_fingerprint text NOT NULL,
    embedding {v},
    embed_hash text,
    embed_fallback text,
    fallback_embedding vector,
    t_expired timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS communities_expired_space ON {s}.communities_expired (space, built_at);
CREATE TABLE IF NOT EXISTS {s}.community_members (
    space text NOT NULL,
    community_id bigint NOT NULL REFERENCES {s}.communities(id) ON DELETE CASCADE,
    entity_id bigint NOT NULL REFERENCES {s}.entities(id),
    PRIMARY KEY (community_id, entity_id)
);
-- issue 28: what each level-0 report was built from — the relations inside its cluster when it was built
-- and their chunks at that moment — so lineage names its inputs, not today's relations among its members
CREATE TABLE IF NOT EXISTS {s}.community_sources (
    space text NOT NULL,
    community_id bigint NOT NULL REFERENCES {s}.communities(id) ON DELETE CASCADE,
    relation_id bigint NOT NULL,
    chunk_id bigint NOT NULL,
    PRIMARY KEY (community_id, relation_id, chunk_id)
);
CREATE INDEX IF NOT EXISTS community_sources_relation ON {s}.community_sources (relation_id);
CREATE TABLE IF NOT EXISTS {s}.community_children (
    space text NOT NULL,
    parent_id bigint NOT NULL REFERENCES {s}.communities(id) ON DELETE CASCADE,
    child_id bigint NOT NULL REFERENCES {s}.communities(id) ON DELETE CASCADE,
    PRIMARY KEY (parent_id, child_id)
);
"""
"""The community tables of a realm schema (``{s}`` the schema, ``{v}`` its vector type), run in order inside
:data:`pgrag_dag.store.schema`'s realm DDL: ``communities`` (report vertices), ``communities_expired``
(reports a rebuild replaced, issue 28), ``community_members``, ``community_sources`` (what each level-0
report was built from) and ``community_children``."""

ENTITY_SCHEMA = {"id": pl.Int64, "name": pl.String, "entity_type": pl.String, "description": pl.String}
RELATION_SCHEMA = {
    "id": pl.Int64,
    "source_id": pl.Int64,
    "target_id": pl.Int64,
    "predicate": pl.String,
    "description": pl.String,
    "weight": pl.Int64,
    "negated": pl.Boolean,
    "valid_from": pl.String,
    "valid_to": pl.String,
}

_ENTITIES = """
SELECT id, name, entity_type, description FROM {s}.entities
 WHERE space = %s AND dormant_since IS NULL ORDER BY id"""

_RELATIONS = """
SELECT r.id, r.source_id, r.target_id, r.predicate, r.description, r.weight, r.negated,
       r.valid_from, r.valid_to
  FROM {s}.relations r
  JOIN {s}.entities a ON a.id = r.source_id AND a.dormant_since IS NULL
  JOIN {s}.entities b ON b.id = r.target_id AND b.dormant_since IS NULL
 WHERE r.space = %s AND r.dormant_since IS NULL AND r.superseded_by IS NULL
 ORDER BY r.id"""

_SOURCES = """
INSERT INTO {s}.community_sources (space, community_id, relation_id, chunk_id)
SELECT %s, m.community_id, r.id, cid.chunk_id
  FROM {s}.community_members m
  JOIN {s}.relations r ON r.space = %s AND r.source_id = m.entity_id AND r.dormant_since IS NULL
                      AND r.superseded_by IS NULL
  JOIN {s}.community_members m2 ON m2.community_id = m.community_id AND m2.entity_id = r.target_id
  CROSS JOIN LATERAL unnest(r.chunk_ids) AS cid(chunk_id)
 WHERE m.community_id = ANY(%s)
ON CONFLICT DO NOTHING"""
"""A report's sources (issue 28): the relations inside its cluster as the build's transaction sees them —
live, not superseded, both ends members (what :data:`_RELATIONS` gave the build) — with their chunks then."""

_EXPIRE = """
INSERT INTO {s}.communities_expired (id, space, level, title, summary, findings, rating, size, report,
                                     built_at, graph_fingerprint, embedding, embed_hash)
SELECT id, space, level, title, summary, findings, rating, size, report, built_at, graph_fingerprint,
       embedding, embed_hash
  FROM {s}.communities WHERE space = %s AND level >= %s
ON CONFLICT (id) DO NOTHING"""
"""Reports about to be replaced, kept with ``t_expired`` = the rebuild's transaction time (issue 28): a
global query ``as_believed_at`` an instant before the rebuild reads them."""

_INSERT_COMMUNITY = """
INSERT INTO {s}.communities (space, level, title, summary, findings, rating, size, report,
                             graph_fingerprint, embedding)
VALUES (%s, %s, %s, %s, %s::jsonb, %s, %s, %s, %s, %s) RETURNING id"""


def load_graph(conn: psycopg.Connection, realm: str, space: str) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Snapshot the entity graph of one space for community construction (§6).

    Returns ``(entities, relations)``:

    - entities: ``id`` (Int64), ``name``, ``entity_type``, ``description`` — non-dormant only;
    - relations: ``id``, ``source_id``, ``target_id``, ``predicate``, ``description``, ``weight``
      (distinct corroborating chunks), ``negated``, ``valid_from``, ``valid_to`` (text or null) —
      neither dormant nor superseded, with both endpoints non-dormant.

    Raises :class:`~pgrag_dag.errors.InvalidNameError` for an invalid realm or space (the wildcard
    space included: communities are built per space).
    """
    validate_space(space)
    s = sql.Identifier(schema_for(realm))
    ents = conn.execute(sql.SQL(_ENTITIES).format(s=s), (space,)).fetchall()
    rels = conn.execute(sql.SQL(_RELATIONS).format(s=s), (space,)).fetchall()
    return (
        pl.DataFrame(ents, schema=ENTITY_SCHEMA, orient="row"),
        pl.DataFrame(rels, schema=RELATION_SCHEMA, orient="row"),
    )


def current_fingerprint(conn: psycopg.Connection, realm: str, space: str) -> str | None:
    """The ``graph_fingerprint`` the space's level-0 communities were built from, or ``None``.

    Compare with :func:`pgrag_dag.graph.communities.graph_fingerprint` of :func:`load_graph` to skip a
    rebuild on an unchanged graph.
    """
    validate_space(space)
    query = sql.SQL("SELECT graph_fingerprint FROM {s}.communities WHERE space = %s AND level = 0 LIMIT 1")
    row = conn.execute(query.format(s=sql.Identifier(schema_for(realm))), (space,)).fetchone()
    return None if row is None else str(row[0])


def replace_communities(
    conn: psycopg.Connection,
    realm: str,
    space: str,
    *,
    fingerprint: str,
    reports: pl.DataFrame,
    members: pl.DataFrame,
    parents: pl.DataFrame | None = None,
    children: pl.DataFrame | None = None,
) -> dict[str, int]:
    """Replace the space's communities with one build, in one transaction (§6 "rebuild, not accumulate").

    Args:
        fingerprint: :func:`~pgrag_dag.graph.communities.graph_fingerprint` of the graph built from.
        reports: ``cluster``, ``title``, ``summary``, ``findings`` (JSON text), ``rating``, ``size``,
            ``report``, optionally ``embedding`` (vector of the realm's width) — level 0.
        members: ``cluster``, ``entity_id``; rows of clusters without a report are ignored.
        parents: ``parent``, ``level`` (default 1), then the report columns as above.
        children: ``parent``, ``cluster`` (a base cluster or a lower-level parent, local ids).

    Moves the space's communities into ``communities_expired`` (kept for belief-time queries) and deletes
    them (members, sources and children cascade), inserts level-0 communities
    and ``community_members``, then parents level by level with ``community_children`` and each
    child's ``parent_id``. Returns counts: ``deleted``, ``communities``, ``members``, ``parents``,
    ``children``. Raises :class:`ValueError` when a child edge names an unknown community, and
    :class:`~pgrag_dag.errors.InvalidNameError` for the wildcard space.
    """
    validate_space(space)
    s = sql.Identifier(schema_for(realm))
    parents = parents if parents is not None else pl.DataFrame(schema={"parent": pl.Int64, "level": pl.Int64})
    children = (
        children if children is not None else pl.DataFrame(schema={"parent": pl.Int64, "cluster": pl.Int64})
    )
    if "level" not in parents.columns:
        parents = parents.with_columns(pl.lit(1, dtype=pl.Int64).alias("level"))
    with conn.transaction():
        conn.execute(sql.SQL(_EXPIRE).format(s=s), (space, 0))
        deleted = conn.execute(
            sql.SQL("DELETE FROM {s}.communities WHERE space = %s").format(s=s), (space,)
        ).rowcount
        ids, n_members = _insert_base(conn, s, space, fingerprint, reports, members)
        n_parents, n_edges = _insert_parents(conn, s, space, fingerprint, parents, children, ids)
    return {
        "deleted": max(deleted, 0),
        "communities": reports.height,
        "members": n_members,
        "parents": n_parents,
        "children": n_edges,
    }


def append_communities(
    conn: psycopg.Connection,
    realm: str,
    space: str,
    *,
    fingerprint: str,
    reports: pl.DataFrame,
    members: pl.DataFrame,
) -> dict[str, int]:
    """Add level-0 communities to the build :func:`replace_communities` began (same ``fingerprint``),
    without removing any — how a build is committed batch by batch, largest clusters first (§6).

    ``reports`` and ``members`` as for :func:`replace_communities`. Returns counts ``communities``,
    ``members``. Raises :class:`~pgrag_dag.errors.InvalidNameError` for the wildcard space.
    """
    validate_space(space)
    with conn.transaction():
        _, n_members = _insert_base(
            conn, sql.Identifier(schema_for(realm)), space, fingerprint, reports, members
        )
    return {"communities": reports.height, "members": n_members}


def _insert_base(
    conn: psycopg.Connection,
    s: sql.Identifier,
    space: str,
    fingerprint: str,
    reports: pl.DataFrame,
    members: pl.DataFrame,
) -> tuple[dict[int, int], int]:
    """Insert level-0 report rows, their members and their sources (``community_sources``: what each was
    built from); (local id → ``communities.id``, members inserted)."""
    ids = _insert(conn, s, space, fingerprint, reports.sort("cluster"), "cluster", level=None)
    member_rows = [
        (space, ids[int(c)], int(e))
        for c, e in members.select("cluster", "entity_id").unique().sort("cluster", "entity_id").iter_rows()
        if int(c) in ids
    ]
    _many(
        conn,
        sql.SQL(
            "INSERT INTO {s}.community_members (space, community_id, entity_id) VALUES (%s, %s, %s)"
        ).format(s=s),
        member_rows,
    )
    if ids:
        conn.execute(sql.SQL(_SOURCES).format(s=s), (space, space, list(ids.values())))
    return ids, len(member_rows)


def _insert_parents(
    conn: psycopg.Connection,
    s: sql.Identifier,
    space: str,
    fingerprint: str,
    parents: pl.DataFrame,
    children: pl.DataFrame,
    ids: dict[int, int],
) -> tuple[int, int]:
    """Insert parents level by level, their ``community_children`` edges and each child's ``parent_id``.

    ``ids`` maps local ids to ``communities.id`` and is extended in place. Returns (parents, edges).
    """
    n_parents = 0
    for level in sorted({int(v) for v in parents["level"].to_list()}):
        batch = parents.filter(pl.col("level") == level).sort("parent")
        ids.update(_insert(conn, s, space, fingerprint, batch, "parent", level=level))
        n_parents += batch.height
    edges: list[tuple[str, int, int]] = []
    for p, c in children.select("parent", "cluster").unique().sort("parent", "cluster").iter_rows():
        if int(p) not in ids or int(c) not in ids:
            raise ValueError(f"community_children edge {p} -> {c} names a community not in this build")
        edges.append((space, ids[int(p)], ids[int(c)]))
    _many(
        conn,
        sql.SQL("INSERT INTO {s}.community_children (space, parent_id, child_id) VALUES (%s, %s, %s)").format(
            s=s
        ),
        edges,
    )
    _many(
        conn,
        sql.SQL("UPDATE {s}.communities SET parent_id = %s WHERE id = %s").format(s=s),
        [(p, c) for _, p, c in edges],
    )
    return n_parents, len(edges)


def load_base(
    conn: psycopg.Connection, realm: str, space: str
) -> tuple[pl.DataFrame, pl.DataFrame, str | None]:
    """The space's level-0 build: (members ``cluster`` = community id, ``entity_id``; reports ``cluster``,
    ``title``, ``summary``, ``findings`` (JSON text), ``rating``, ``size``, ``report``; its fingerprint)."""
    s = sql.Identifier(schema_for(realm))
    rows = conn.execute(
        sql.SQL("""SELECT id, title, summary, findings::text, rating, size, report, graph_fingerprint
                     FROM {s}.communities WHERE space = %s AND level = 0 ORDER BY id""").format(s=s),
        (space,),
    ).fetchall()
    reports = pl.DataFrame(
        [r[:7] for r in rows],
        orient="row",
        schema={
            "cluster": pl.Int64,
            "title": pl.String,
            "summary": pl.String,
            "findings": pl.String,
            "rating": pl.Float64,
            "size": pl.Int64,
            "report": pl.String,
        },
    )
    members = conn.execute(
        sql.SQL("""SELECT m.community_id, m.entity_id FROM {s}.community_members m JOIN {s}.communities c
                    ON c.id = m.community_id WHERE c.space = %s AND c.level = 0 ORDER BY 1, 2""").format(s=s),
        (space,),
    ).fetchall()
    frame = pl.DataFrame(members, orient="row", schema={"cluster": pl.Int64, "entity_id": pl.Int64})
    return frame, reports, (rows[0][7] if rows else None)


def parents_fingerprint(conn: psycopg.Connection, realm: str, space: str) -> str | None:
    """The fingerprint the space's parent levels were built from, or ``None`` when there are none."""
    row = conn.execute(
        sql.SQL(
            "SELECT graph_fingerprint FROM {s}.communities WHERE space = %s AND level > 0 LIMIT 1"
        ).format(s=sql.Identifier(schema_for(realm))),
        (space,),
    ).fetchone()
    return None if row is None else str(row[0])


def count_parents(conn: psycopg.Connection, realm: str, space: str) -> int:
    """Number of parent communities (level > 0) of the space."""
    row = conn.execute(
        sql.SQL("SELECT count(*) FROM {s}.communities WHERE space = %s AND level > 0").format(
            s=sql.Identifier(schema_for(realm))
        ),
        (space,),
    ).fetchone()
    return int(row[0]) if row else 0


def replace_parents(
    conn: psycopg.Connection,
    realm: str,
    space: str,
    *,
    fingerprint: str,
    parents: pl.DataFrame,
    children: pl.DataFrame,
) -> dict[str, int]:
    """Replace the space's parent levels (level > 0) above the stored level-0 communities (§6.1).

    ``children.cluster`` holds stored community ids (level 0) or local parent ids. Returns counts.
    """
    validate_space(space)
    s = sql.Identifier(schema_for(realm))
    if "level" not in parents.columns:
        parents = parents.with_columns(pl.lit(1, dtype=pl.Int64).alias("level"))
    with conn.transaction():
        conn.execute(sql.SQL(_EXPIRE).format(s=s), (space, 1))
        conn.execute(
            sql.SQL("UPDATE {s}.communities SET parent_id = NULL WHERE space = %s").format(s=s), (space,)
        )
        deleted = conn.execute(
            sql.SQL("DELETE FROM {s}.communities WHERE space = %s AND level > 0").format(s=s), (space,)
        ).rowcount
        base = [
            int(r[0])
            for r in conn.execute(
                sql.SQL("SELECT id FROM {s}.communities WHERE space = %s AND level = 0").format(s=s), (space,)
            ).fetchall()
        ]
        ids = {i: i for i in base}
        n_parents, n_edges = _insert_parents(conn, s, space, fingerprint, parents, children, ids)
    return {"deleted": max(deleted, 0), "parents": n_parents, "children": n_edges}


def _insert(
    conn: psycopg.Connection,
    s: sql.Identifier,
    space: str,
    fingerprint: str,
    frame: pl.DataFrame,
    key: str,
    *,
    level: int | None,
) -> dict[int, int]:
    """Insert report rows; map each local id (``key`` column) to its new ``communities.id``."""
    if frame.height == 0:
        return {}
    has_vec = "embedding" in frame.columns
    params: list[tuple[Any, ...]] = []
    for row in frame.iter_rows(named=True):
        vec = row.get("embedding") if has_vec else None
        params.append(
            (
                space,
                0 if level is None else level,
                row["title"],
                row["summary"],
                row["findings"] or "[]",
                float(row["rating"]),
                int(row["size"]),
                row["report"],
                fingerprint,
                None if vec is None else np.asarray(vec, dtype=np.float32),
            )
        )
    out: dict[int, int] = {}
    with conn.cursor() as cur:
        cur.executemany(sql.SQL(_INSERT_COMMUNITY).format(s=s), params, returning=True)
        for local in frame[key].to_list():
            inserted = cur.fetchone()
            assert inserted is not None
            out[int(local)] = int(inserted[0])
            cur.nextset()
    return out


def _many(conn: psycopg.Connection, query: sql.Composed, rows: list[tuple[Any, ...]]) -> None:
    if rows:
        with conn.cursor() as cur:
            cur.executemany(query, rows)
