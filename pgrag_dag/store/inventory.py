"""Read-only SQL of what the store holds (issue 16 items 4–5): the realm registry, the spaces of a realm and
their counts, pages of entities, relations, communities and documents, and the facts the query path warns
about (a belief-time instant before the space's first chunk, a relation type no relation has).

Nothing here writes or creates anything: a database nothing was indexed into (no control schema, no realm
schema) reads as empty. Listing functions return a :class:`Page` — ``total`` rows matching the filters and
the ``rows`` of one page (``limit``/``offset``) in a stable order (each order ends in the row id).
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from pgrag_dag.errors import ConfigurationError, QueryError
from pgrag_dag.store.history import table_exists
from pgrag_dag.store.identifiers import qualified
from pgrag_dag.store.retrieval import in_space

EntitySort = Literal["mentions", "name", "id"]
RelationSort = Literal["weight", "chunks", "name", "id"]
CommunitySort = Literal["size", "level", "rating", "id"]

ENTITY_ORDERS: dict[str, str] = {
    "mentions": "mentions DESC, e.name, e.id",
    "name": "e.name, e.id",
    "id": "e.id",
}
"""``list_entities``' orders by ``sort`` key: most mentioned first (the default: what a user scans a graph
for, junk names included), by name, or by id (the order of creation)."""
RELATION_ORDERS: dict[str, str] = {
    "weight": "r.weight DESC, cardinality(r.chunk_ids) DESC, s.name, r.predicate, o.name, r.id",
    "chunks": "cardinality(r.chunk_ids) DESC, r.weight DESC, s.name, r.predicate, o.name, r.id",
    "name": "s.name, r.predicate, o.name, r.id",
    "id": "r.id",
}
"""``list_relations``' orders: heaviest first (the default), most chunks stating it first, by subject,
predicate and object, or by id."""
COMMUNITY_ORDERS: dict[str, str] = {
    "size": "c.size DESC, c.level, c.id",
    "level": "c.level, c.size DESC, c.id",
    "rating": "c.rating DESC, c.size DESC, c.id",
    "id": "c.id",
}
"""``list_communities``' orders: largest first over every level (the default), by level then size, best
rated first, or by id."""


def _order(orders: dict[str, str], sort: str) -> sql.SQL:
    """The ``ORDER BY`` text of ``sort`` (one of ``orders``' keys: a literal of this module, never user
    text); raises :class:`QueryError` naming the valid keys otherwise."""
    if sort not in orders:
        raise QueryError(f"unknown sort {sort!r}; one of: {', '.join(orders)}")
    return sql.SQL(orders[sort])


@dataclass(frozen=True)
class Page:
    """One page of a listing: ``total`` rows match the filters; ``rows`` (dicts) are those from ``offset``,
    at most ``limit``."""

    total: int
    offset: int
    limit: int
    rows: list[dict[str, Any]]


def registered_realms(conn: psycopg.Connection) -> list[dict[str, Any]]:
    """The realm registry, by name: ``realm, embedding_model, embedding_dim, embedding_convention,
    schema_version, created_at``; ``[]`` when no control schema exists (nothing was ever indexed)."""
    if conn.execute("SELECT to_regclass('pgrag__control.realms')").fetchone() == (None,):
        return []
    with conn.cursor(row_factory=dict_row) as cur:
        return list(
            cur.execute(
                """SELECT realm, embedding_model, embedding_dim, embedding_convention, schema_version,
                 created_at
                 FROM pgrag__control.realms ORDER BY realm"""
            ).fetchall()
        )


def realm_spaces(conn: psycopg.Connection, realm: str) -> list[str]:
    """The spaces of ``realm`` holding a chunk or a stage's state (a stage ran for them), sorted; ``[]`` when
    the realm has no schema."""
    if not table_exists(conn, realm, "documents"):
        return []
    parts = [sql.SQL("SELECT DISTINCT space FROM {}").format(qualified(realm, "documents"))]
    if table_exists(conn, realm, "stage_state"):
        parts.append(sql.SQL("SELECT space FROM {}").format(qualified(realm, "stage_state")))
    rows = conn.execute(sql.SQL(" UNION ").join(parts) + sql.SQL(" ORDER BY 1")).fetchall()
    return [str(r[0]) for r in rows]


def community_levels(conn: psycopg.Connection, realm: str, space: str) -> dict[int, int]:
    """Community reports of ``space`` per level (level → count; absent levels have none)."""
    rows = conn.execute(
        sql.SQL("SELECT level, count(*) FROM {} WHERE space = %s GROUP BY level ORDER BY level").format(
            qualified(realm, "communities")
        ),
        (space,),
    ).fetchall()
    return {int(level): int(n) for level, n in rows}


def _like(text: str) -> str:
    """An ILIKE pattern matching ``text`` as a substring (``%``, ``_`` and ``\\`` taken literally)."""
    return "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def _page(
    conn: psycopg.Connection,
    select: sql.Composable,
    source: sql.Composable,
    where: list[sql.Composable],
    order: sql.Composable,
    params: dict[str, Any],
    *,
    limit: int,
    offset: int,
    group: sql.Composable | None = None,
) -> Page:
    """``SELECT select FROM source WHERE where… [GROUP BY group] ORDER BY order`` one page, and the total."""
    cond = sql.SQL(" AND ").join(where) if where else sql.SQL("TRUE")
    grouped = sql.SQL("") if group is None else sql.SQL(" GROUP BY {}").format(group)
    counted = sql.SQL("SELECT count(*) FROM (SELECT 1 FROM {src} WHERE {w}{g}) AS x").format(
        src=source, w=cond, g=grouped
    )
    total_row = conn.execute(counted, params).fetchone()
    total = int(total_row[0]) if total_row else 0
    query = sql.SQL(
        "SELECT {sel} FROM {src} WHERE {w}{g} ORDER BY {o} LIMIT %(limit)s OFFSET %(offset)s"
    ).format(sel=select, src=source, w=cond, g=grouped, o=order)
    with conn.cursor(row_factory=dict_row) as cur:
        rows = list(cur.execute(query, {**params, "limit": limit, "offset": offset}).fetchall())
    return Page(total, offset, limit, rows)


def list_entities(
    conn: psycopg.Connection,
    realm: str,
    space: str,
    *,
    name: str | None = None,
    entity_type: str | None = None,
    include_dormant: bool = False,
    sort: EntitySort = "mentions",
    limit: int = 50,
    offset: int = 0,
) -> Page:
    """Entities of ``space`` in ``sort`` order (:data:`ENTITY_ORDERS`; most mentioned first by default):
    ``id, name, entity_type, description, aliases, dormant, archived, mentions`` (chunks mentioning it).
    ``name``: a case-insensitive substring of the name or an alias; ``entity_type``: equal ignoring case;
    dormant (and archived) entities only with ``include_dormant``. Raises :class:`QueryError` for an
    unknown ``sort``."""
    where: list[sql.Composable] = [sql.SQL("e.space = %(space)s")]
    if not include_dormant:
        where.append(sql.SQL("e.dormant_since IS NULL"))
    if name:
        where.append(
            sql.SQL(
                "(e.name ILIKE %(name)s OR EXISTS (SELECT 1 FROM unnest(e.aliases) a WHERE a ILIKE %(name)s))"
            )
        )
    if entity_type:
        where.append(sql.SQL("lower(e.entity_type) = lower(%(type)s)"))
    select = sql.SQL("""e.id, e.name, e.entity_type, e.description, e.aliases, e.dormant_since IS NOT NULL
                        AS dormant,
                        e.archived_at IS NOT NULL AS archived, coalesce(m.n, 0) AS mentions""")
    # one pass over the mentions, not a count per entity: sorting by mentions needs them all
    source = sql.SQL(
        """{e} AS e LEFT JOIN (SELECT entity_id, count(*) AS n FROM {m} WHERE space = %(space)s
        GROUP BY entity_id) AS m ON m.entity_id = e.id"""
    ).format(e=qualified(realm, "entities"), m=qualified(realm, "doc_mentions"))
    return _page(
        conn,
        select,
        source,
        where,
        _order(ENTITY_ORDERS, sort),
        {"space": space, "name": _like(name or ""), "type": entity_type},
        limit=limit,
        offset=offset,
    )


def list_relations(
    conn: psycopg.Connection,
    realm: str,
    space: str,
    *,
    name: str | None = None,
    predicate: str | None = None,
    include_superseded: bool = False,
    include_dormant: bool = False,
    sort: RelationSort = "weight",
    limit: int = 50,
    offset: int = 0,
) -> Page:
    """Relations of ``space`` in ``sort`` order (:data:`RELATION_ORDERS`; heaviest first by default):
    ``id, subject, predicate, object, negated, valid_from, valid_to, weight, confidence, superseded_by,
    superseded, dormant, chunks`` (how many chunks state it), ``description``. ``name``: a case-insensitive
    substring of the subject's or the object's name; ``predicate``: equal ignoring case (as
    ``relation_types`` of a query); superseded ones only with ``include_superseded``, dormant ones only
    with ``include_dormant``. Raises :class:`QueryError` for an unknown ``sort``."""
    where: list[sql.Composable] = [sql.SQL("r.space = %(space)s")]
    if not include_dormant:
        where.append(sql.SQL("r.dormant_since IS NULL"))
    if not include_superseded:
        where.append(sql.SQL("r.superseded_by IS NULL"))
    if name:
        where.append(sql.SQL("(s.name ILIKE %(name)s OR o.name ILIKE %(name)s)"))
    if predicate:
        where.append(sql.SQL("lower(r.predicate) = lower(%(predicate)s)"))
    select = sql.SQL("""r.id, s.name AS subject, r.predicate, o.name AS object, r.negated, r.valid_from,
                        r.valid_to,
                        r.weight, r.confidence, r.superseded_by, r.superseded_by IS NOT NULL AS superseded,
                        r.dormant_since IS NOT NULL AS dormant, cardinality(r.chunk_ids) AS chunks,
                            r.description""")
    source = sql.SQL(
        "{r} AS r JOIN {e} AS s ON s.id = r.source_id JOIN {e} AS o ON o.id = r.target_id"
    ).format(r=qualified(realm, "relations"), e=qualified(realm, "entities"))
    return _page(
        conn,
        select,
        source,
        where,
        _order(RELATION_ORDERS, sort),
        {"space": space, "name": _like(name or ""), "predicate": predicate},
        limit=limit,
        offset=offset,
    )


def list_communities(
    conn: psycopg.Connection,
    realm: str,
    space: str,
    *,
    name: str | None = None,
    level: int | None = None,
    sort: CommunitySort = "size",
    limit: int = 50,
    offset: int = 0,
) -> Page:
    """Community reports of ``space`` in ``sort`` order (:data:`COMMUNITY_ORDERS`; largest first by
    default): ``id, level, title, size, rating, built_at, parent_id, summary``. ``name``: a case-insensitive
    substring of the title; ``level``: that level only. Raises :class:`QueryError` for an unknown
    ``sort``."""
    where: list[sql.Composable] = [sql.SQL("c.space = %(space)s")]
    if name:
        where.append(sql.SQL("c.title ILIKE %(name)s"))
    if level is not None:
        where.append(sql.SQL("c.level = %(level)s"))
    select = sql.SQL("c.id, c.level, c.title, c.size, c.rating, c.built_at, c.parent_id, c.summary")
    return _page(
        conn,
        select,
        sql.SQL("{} AS c").format(qualified(realm, "communities")),
        where,
        _order(COMMUNITY_ORDERS, sort),
        {"space": space, "name": _like(name or ""), "level": level},
        limit=limit,
        offset=offset,
    )


def list_documents(
    conn: psycopg.Connection,
    realm: str,
    space: str,
    *,
    name: str | None = None,
    limit: int = 50,
    offset: int = 0,
) -> Page:
    """Documents of ``space`` in document order (then doc_key): ``doc_key, title, source, doc_order`` (its
    sparse order key, only compared), ``position`` (1-based, in that order among the documents ``name``
    matches), ``chunks, chars`` (the document's characters up to its last chunk's end — the chunks'
    ``char_end`` offsets, so text two chunks overlap on counts once; the sum of its chunks' lengths only when
    a user chunker left out the offsets), ``indexed_at`` (its first chunk's ``t_created``). ``name``: a
    case-insensitive substring of the doc_key or the title."""
    where: list[sql.Composable] = [sql.SQL("d.space = %(space)s")]
    if name:
        where.append(sql.SQL("(d.doc_key ILIKE %(name)s OR d.title ILIKE %(name)s)"))
    select = sql.SQL("""d.doc_key, min(d.title) AS title, min(d.source) AS source, min(d.doc_order)
                        AS doc_order, row_number() OVER (ORDER BY min(d.doc_order), d.doc_key) AS position,
                        count(*) AS chunks,
                        CASE WHEN count(d.metadata -> 'char_end') = count(*)
                             THEN max((d.metadata ->> 'char_end')::bigint)
                             ELSE sum(length(d.text)) END AS chars,
                        min(d.t_created) AS indexed_at""")
    return _page(
        conn,
        select,
        sql.SQL("{} AS d").format(qualified(realm, "documents")),
        where,
        sql.SQL("min(d.doc_order), d.doc_key"),
        {"space": space, "name": _like(name or "")},
        limit=limit,
        offset=offset,
        group=sql.SQL("d.doc_key"),
    )


def entity_types(conn: psycopg.Connection, realm: str, space: str) -> dict[str, int]:
    """The types of ``space``'s live entities → how many have each, most frequent first (then by name)."""
    rows = conn.execute(
        sql.SQL(
            """SELECT entity_type, count(*) FROM {} WHERE space = %s AND dormant_since IS NULL
            GROUP BY entity_type ORDER BY count(*) DESC, entity_type"""
        ).format(qualified(realm, "entities")),
        (space,),
    ).fetchall()
    return {str(t): int(n) for t, n in rows}


def first_belief(conn: psycopg.Connection, realm: str, space: str) -> tuple[datetime | None, bool]:
    """``(first chunk instant, always_known)`` of ``space`` (``"*"``: every space): the earliest
    ``t_created`` of its chunks, present or removed since (nothing derived from a chunk can be believed
    before it; ``None`` without chunks), and whether a relation predates the history (no ``t_created``:
    believed at every instant, §5.3)."""
    params = {"space": space}
    removed = (
        sql.SQL("(SELECT min(x.t_created) FROM {} AS x WHERE {})").format(
            qualified(realm, "documents_removed"), in_space("x", space)
        )
        if table_exists(conn, realm, "documents_removed")
        else sql.SQL("NULL::timestamptz")
    )
    row = conn.execute(
        sql.SQL(
            """SELECT least((SELECT min(d.t_created) FROM {d} AS d WHERE {dw}), {removed}),
                  EXISTS (SELECT 1 FROM {r} AS r WHERE {rw} AND r.t_created IS NULL)"""
        ).format(
            d=qualified(realm, "documents"),
            dw=in_space("d", space),
            removed=removed,
            r=qualified(realm, "relations"),
            rw=in_space("r", space),
        ),
        params,
    ).fetchone()
    assert row is not None
    return row[0], bool(row[1])


def unknown_predicates(
    conn: psycopg.Connection, realm: str, space: str, predicates: Sequence[str]
) -> list[str]:
    """Those of ``predicates`` (compared lower-cased, as a query's ``relation_types``) that no relation of
    ``space`` (``"*"``: any) has, in any state (live, superseded or dormant); sorted."""
    types = sorted({p.strip().lower() for p in predicates})
    rows = conn.execute(
        sql.SQL(
            """SELECT t FROM unnest(%(types)s::text[]) AS t
            WHERE NOT EXISTS (SELECT 1 FROM {r} AS r WHERE {w} AND lower(r.predicate) = t) ORDER BY t"""
        ).format(r=qualified(realm, "relations"), w=in_space("r", space)),
        {"types": types, "space": space},
    ).fetchall()
    return [str(r[0]) for r in rows]


def frequent_predicates(conn: psycopg.Connection, realm: str, space: str, *, n: int = 5) -> list[str]:
    """The ``n`` predicates most live relations of ``space`` (``"*"``: any) have, most frequent first."""
    rows = conn.execute(
        sql.SQL(
            """SELECT r.predicate FROM {r} AS r WHERE {w} AND r.dormant_since IS NULL
            AND r.superseded_by IS NULL
            GROUP BY r.predicate ORDER BY count(*) DESC, r.predicate LIMIT %(n)s"""
        ).format(r=qualified(realm, "relations"), w=in_space("r", space)),
        {"space": space, "n": n},
    ).fetchall()
    return [str(r[0]) for r in rows]


__all__ = [
    "COMMUNITY_ORDERS",
    "ENTITY_ORDERS",
    "RELATION_ORDERS",
    "CommunitySort",
    "EntitySort",
    "Page",
    "RelationSort",
    "community_levels",
    "entity_types",
    "first_belief",
    "frequent_predicates",
    "list_communities",
    "list_documents",
    "list_entities",
    "list_relations",
    "realm_spaces",
    "registered_realms",
    "unknown_predicates",
]


def no_such_document(conn: psycopg.Connection, realm: str, space: str, doc_key: str) -> ConfigurationError:
    """The error for a ``doc_key`` the space holds no chunk of, naming up to three doc_keys of the space
    that are close to it (:func:`difflib.get_close_matches` over the space's doc_keys, case-insensitive):
    a user types a path relative to the wrong folder, or a name with another case or extension."""
    keys = [
        str(k)
        for (k,) in conn.execute(
            sql.SQL("SELECT DISTINCT doc_key FROM {} WHERE space = %s").format(qualified(realm, "documents")),
            (space,),
        ).fetchall()
    ]
    by_lower = {k.lower(): k for k in keys}
    close = difflib.get_close_matches(doc_key.lower(), list(by_lower), n=3, cutoff=0.75)
    # a bare file name matches the doc_key of that file in a sub-folder too
    close += [k.lower() for k in keys if k.lower().endswith("/" + doc_key.lower()) and k.lower() not in close]
    hint = f"; did you mean {', '.join(repr(by_lower[c]) for c in close[:3])}?" if close else ""
    return ConfigurationError(f"space {realm}.{space} has no document {doc_key!r}{hint}")
