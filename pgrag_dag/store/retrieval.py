"""Read SQL for the query path (paper §3.3, §5.3–5.4, §7.2–7.3).

Every function reads one realm schema (``pgrag_<realm>``, composed with ``psycopg.sql.Identifier``)
and is scoped to one space, or to every space when ``space`` is the read-only wildcard ``"*"``.
Values always travel as parameters.

The temporal predicates of one query travel as a :class:`Temporal` (valid time ``as_of``, belief time
``believed_at``, ``include_superseded``). :func:`relation_filter` renders them as the one SQL
predicate every relation read uses — inside each step of the traversal, not after it — and
``believed_at`` also bounds the chunks and seed entities a search may return. Vector searches run with
``hnsw.iterative_scan = relaxed_order`` (pgvector >= 0.8) — set per session on the query path's pooled
connections, else ``SET LOCAL`` in a transaction or savepoint of their own — so a space filter does not
starve an HNSW scan of rows; results are re-sorted by distance afterwards, as pgvector recommends for
relaxed ordering.

Rows are returned as lists of dicts; distances are cosine distances (``<=>``, 0..2) and ``score``
is cosine similarity ``1 - distance`` — except :func:`chunk_fulltext`, the chunks' full-text channel,
whose ``score`` is ``ts_rank_cd``. Query vectors must have the realm's embedding width; every vector
search orders by :func:`~pgrag_dag.store.vector_index.distance`, the ``halfvec`` expression the realm's
HNSW index holds, to find its ``k`` rows, and reports and re-sorts them by the full-precision
:func:`~pgrag_dag.store.vector_index.exact_distance`.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import Any, LiteralString

import numpy as np
import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from pgrag_dag.errors import QueryError
from pgrag_dag.names import WILDCARD_SPACE, schema_for, validate_space
from pgrag_dag.store import db
from pgrag_dag.store.identifiers import qualified
from pgrag_dag.store.vector_index import distance, exact_distance
from pgrag_dag.temporal import CURRENT, Temporal

Row = dict[str, Any]


def relation_filter(
    alias: str, temporal: Temporal = CURRENT, *, typed: bool = False, realm: str | None = None
) -> sql.Composable:
    """The predicate a relation row ``alias`` must satisfy to be read at all (§5.2–5.4, §5.5, §7.2).

    Valid at ``as_of`` when set — ``(valid_from_key IS NULL OR valid_from_key <= upper) AND
    (valid_to_key IS NULL OR valid_to_key >= lower)``. Present time (no ``believed_at``): never dormant,
    and ``superseded_by IS NULL`` unless ``include_superseded`` — the row's own columns, which the
    covering partial indexes of the walk hold. Belief time (``believed_at`` = T, issue 14): from the
    append-only history — an interval of ``relation_belief`` covers T (``believed_from <= T <
    believed_to``, open intervals unbounded) with ``state = 'current'`` (any state with
    ``include_superseded``), so an edge current at T is read even if it is dormant, its document removed,
    or superseded again since; ``realm`` is then required. With ``typed``, also ``lower(predicate) =
    ANY(%(relation_types)s)``. Refers to the parameters of :func:`scope_params`.

    Raises:
        QueryError: ``believed_at`` set without ``realm``.
    """
    r = sql.Identifier(alias)
    terms: list[sql.Composable] = []
    if temporal.believed_at is None:
        terms.append(sql.SQL("{r}.dormant_since IS NULL").format(r=r))
        if not temporal.include_superseded:
            terms.append(sql.SQL("{r}.superseded_by IS NULL").format(r=r))
    else:
        terms.append(sql.SQL("EXISTS ({})").format(_belief_interval(alias, temporal, realm, "1")))
    if typed:
        terms.append(sql.SQL("lower({r}.predicate) = ANY(%(relation_types)s)").format(r=r))
    if temporal.as_of is not None:
        terms += [
            sql.SQL("({r}.valid_from_key IS NULL OR {r}.valid_from_key <= %(as_of_hi)s)").format(r=r),
            sql.SQL("({r}.valid_to_key IS NULL OR {r}.valid_to_key >= %(as_of_lo)s)").format(r=r),
        ]
    return sql.SQL(" AND ").join(terms)


def _belief_interval(
    alias: str, temporal: Temporal, realm: str | None, what: str, *, state: str | None = None
) -> sql.Composable:
    """``SELECT what FROM relation_belief b`` for relation ``alias``'s interval covering ``believed_at``
    (restricted to ``state``, or to ``current`` unless ``include_superseded``)."""
    if realm is None:
        raise QueryError("a belief-time read needs the realm (relation_filter(..., realm=...))")
    if state is None and not temporal.include_superseded:
        state = "current"
    return sql.SQL("""SELECT {what} FROM {h} AS b WHERE b.relation_id = {r}.id
                        AND b.believed_from <= %(believed_at)s
                        AND (b.believed_to IS NULL OR b.believed_to > %(believed_at)s){state}
                            LIMIT 1""").format(
        what=sql.SQL(what),
        h=qualified(realm, "relation_belief"),
        r=sql.Identifier(alias),
        state=sql.SQL("") if state is None else sql.SQL(" AND b.state = {}").format(sql.Literal(state)),
    )


def scope_params(temporal: Temporal, relation_types: Sequence[str] | None = None) -> dict[str, Any]:
    """Parameters of :func:`relation_filter`: the temporal ones and ``relation_types`` (lower-cased)."""
    types = None if relation_types is None else sorted({t.strip().lower() for t in relation_types})
    return {**temporal.params(), "relation_types": types}


def superseded_expr(alias: str, temporal: Temporal = CURRENT, *, realm: str | None = None) -> sql.Composable:
    """Whether relation ``alias`` is superseded in the state being read: at ``believed_at`` when set (its
    history interval covering T has ``state = 'superseded'``; ``realm`` required), else now
    (``superseded_by`` set)."""
    if temporal.believed_at is not None:
        return sql.SQL("EXISTS ({})").format(
            _belief_interval(alias, temporal, realm, "1", state="superseded")
        )
    return sql.SQL("({r}.superseded_by IS NOT NULL)").format(r=sql.Identifier(alias))


BELIEF_COLUMNS = ("t_expired", "superseded_by", "superseded")
"""The relation columns whose value depends on the belief time read (:func:`belief_column`)."""


def belief_column(
    alias: str, column: str, temporal: Temporal = CURRENT, *, realm: str | None = None
) -> sql.Composable:
    """Column ``column`` (one of :data:`BELIEF_COLUMNS`) of relation ``alias`` in the state being read: the
    row's own now; at ``believed_at`` the history's — ``superseded_by`` of the superseded interval covering
    T, ``t_expired`` its start (when belief in the edge had been retracted), both ``NULL`` for an edge current
    at T (even if superseded now); ``superseded`` as :func:`superseded_expr`. ``realm`` is required for a
    belief-time read.

    Raises:
        QueryError: ``column`` is not a belief column; ``believed_at`` set without ``realm``.
    """
    if column not in BELIEF_COLUMNS:
        raise QueryError(f"{column!r} is not a belief column (one of {', '.join(BELIEF_COLUMNS)})")
    if column == "superseded":
        return superseded_expr(alias, temporal, realm=realm)
    if temporal.believed_at is None:
        return sql.Identifier(alias, column)
    what = "b.believed_from" if column == "t_expired" else "b.superseded_by"
    return sql.SQL("({})").format(_belief_interval(alias, temporal, realm, what, state="superseded"))


def belief_columns(alias: str, temporal: Temporal = CURRENT, *, realm: str | None = None) -> sql.Composable:
    """``t_expired, superseded_by, superseded`` of relation ``alias`` in the state being read
    (:func:`belief_column` of each, named as the columns)."""
    return sql.SQL(", ").join(
        sql.SQL("{} AS {}").format(belief_column(alias, c, temporal, realm=realm), sql.Identifier(c))
        for c in BELIEF_COLUMNS
    )


def entity_live(alias: str, temporal: Temporal = CURRENT, *, realm: str | None = None) -> sql.Composable:
    """Entity ``alias`` is live in the state being read: not dormant now (``dormant_since IS NULL``, which
    archived entities also fail); at ``believed_at`` (issue 14) an ``entity_belief`` interval covers T —
    live then, whether dormant or archived now. ``realm`` is required for a belief-time read.

    Raises:
        QueryError: ``believed_at`` set without ``realm``.
    """
    e = sql.Identifier(alias)
    if temporal.believed_at is None:
        return sql.SQL("{e}.dormant_since IS NULL").format(e=e)
    if realm is None:
        raise QueryError("a belief-time read needs the realm (entity_live(..., realm=...))")
    return sql.SQL("""EXISTS (SELECT 1 FROM {h} AS eb WHERE eb.entity_id = {e}.id
                               AND eb.believed_from <= %(believed_at)s
                               AND (eb.believed_to IS NULL OR eb.believed_to > %(believed_at)s))""").format(
        h=qualified(realm, "entity_belief"), e=e
    )


def chunks_read(realm: str, temporal: Temporal = CURRENT) -> sql.Composable:
    """The chunk rows a read sees, as a relation to alias: the ``documents`` table now; at ``believed_at``
    (issue 14) also the chunks removed since T (``documents_removed`` with ``t_removed > T``: a document
    replaced or deleted after T is read as it was). Columns: ``id, space, doc_key, title, chunk_index,
    doc_order, text, t_created, embedding, search_tsv``; pair with :func:`created_by` for ``t_created <=
    T``."""
    if temporal.believed_at is None:
        return qualified(realm, "documents")
    return sql.SQL("""(SELECT id, space, doc_key, title, chunk_index, doc_order, text, t_created, embedding,
                          search_tsv
                          FROM {d}
                        UNION ALL
                        SELECT id, space, doc_key, title, chunk_index, doc_order, text, t_created, embedding,
                               to_tsvector('english', title || ' ' || text)
                          FROM {x} WHERE t_removed > %(believed_at)s)""").format(
        d=qualified(realm, "documents"), x=qualified(realm, "documents_removed")
    )


def mentions_read(realm: str, temporal: Temporal = CURRENT) -> sql.Composable:
    """The ``(space, chunk_id, entity_id)`` mention edges a read sees: ``doc_mentions`` now; at
    ``believed_at`` also those of the chunks removed since T (kept in ``documents_removed.entity_ids``)."""
    if temporal.believed_at is None:
        return qualified(realm, "doc_mentions")
    return sql.SQL("""(SELECT space, chunk_id, entity_id FROM {m}
                        UNION ALL
                        SELECT x.space, x.id, unnest(x.entity_ids) FROM {x} AS x
                            WHERE x.t_removed > %(believed_at)s)""").format(
        m=qualified(realm, "doc_mentions"), x=qualified(realm, "documents_removed")
    )


def created_by(alias: str, temporal: Temporal) -> sql.Composable:
    """``alias.t_created <= believed_at`` (a chunk or entity the system had at that instant), or ``TRUE``."""
    if temporal.believed_at is None:
        return sql.SQL("TRUE")
    return sql.SQL("{}.t_created <= %(believed_at)s").format(sql.Identifier(alias))


def in_space(alias: str, space: str) -> sql.Composable:
    """``alias.space = %(space)s``, or ``TRUE`` for the wildcard (read across spaces)."""
    if validate_space(space, for_write=False) == WILDCARD_SPACE:
        return sql.SQL("TRUE")
    return sql.SQL("{}.space = %(space)s").format(sql.Identifier(alias))


def fetch(
    conn: psycopg.Connection, query: sql.Composed, params: dict[str, Any], *, vector: bool = False
) -> list[Row]:
    """Rows of ``query`` as dicts. ``vector`` runs it under pgvector's relaxed iterative scan: already
    set for the session on a pooled reader (:func:`~pgrag_dag.store.db.read_connection`), otherwise
    ``SET LOCAL`` inside a transaction or savepoint of its own.

    A vector search is never a server-side prepared statement: planned for its own query vector, it
    uses the HNSW index; PostgreSQL's generic plan for it may not (measured: 68 ms instead of 5 ms for
    relation similarity at 100k relations). Other reads are prepared after a few uses (psycopg's
    default), which saves their planning."""
    if vector and not db.iterative_scan_session(conn):
        with conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
            cur.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
            cur.execute(query, params, prepare=False)
            return cur.fetchall()
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(query, params, prepare=False if vector else None)
        return cur.fetchall()


_IDENTITY: LiteralString = """SELECT r.embedding_model, r.embedding_dim,
       COALESCE(to_jsonb(r) ->> 'embedding_convention', 'symmetric')"""
# (to_jsonb: a control schema from before the convention column reads as "symmetric", which it was)

Identity = tuple[str, int, str]
"""A realm's registered embedding: ``(embedding_model, embedding_dim, embedding_convention)``."""


def read_scope(conn: psycopg.Connection, realm: str, space: str) -> tuple[Identity | None, bool]:
    """``(realm_embedding, space_exists)`` in one round trip (§3.5 check before a query).

    ``realm_embedding`` is the realm's registered :data:`Identity` or ``None``;
    ``space_exists`` whether any chunk was ever indexed into ``space`` (``True`` for the wildcard
    ``"*"``). Call it outside a transaction: a realm that was never created is detected by the
    missing table, then answered by :func:`realm_embedding` and :func:`space_exists`.
    """
    wildcard = validate_space(space, for_write=False) == WILDCARD_SPACE
    exists = (
        sql.SQL("TRUE")
        if wildcard
        else sql.SQL("EXISTS (SELECT 1 FROM {} WHERE space = %(space)s)").format(
            qualified(realm, "documents")
        )
    )
    query = sql.SQL(_IDENTITY + ", {} FROM pgrag__control.realms AS r WHERE realm = %(realm)s")
    try:
        row = conn.execute(query.format(exists), {"realm": realm, "space": space}).fetchone()
    except psycopg.errors.UndefinedTable:
        registered = realm_embedding(conn, realm)
        return registered, registered is not None and (wildcard or space_exists(conn, realm, space))
    return (None, False) if row is None else ((str(row[0]), int(row[1]), str(row[2])), bool(row[3]))


def unindexed_space(realm: str, space: str) -> str:
    """The one-line refusal of a space ``realm`` holds nothing of (``space_exists`` false), naming the command
    that indexes it in the form the CLI uses everywhere: ``pgrag index <realm>.<space>``."""
    return (
        f"space {space!r} does not exist in realm {realm!r} (nothing was indexed into it, or it was "
        f"deleted); run pgrag index {shlex.quote(realm + '.' + space)}"
    )


def realm_embedding(conn: psycopg.Connection, realm: str) -> Identity | None:
    """The realm's registered :data:`Identity`, or ``None`` if it is not registered."""
    if conn.execute("SELECT to_regclass('pgrag__control.realms')").fetchone() == (None,):
        return None  # a database nothing was ever indexed into
    row = conn.execute(_IDENTITY + " FROM pgrag__control.realms AS r WHERE realm = %s", (realm,)).fetchone()
    return None if row is None else (str(row[0]), int(row[1]), str(row[2]))


def space_exists(conn: psycopg.Connection, realm: str, space: str) -> bool:
    """Whether any chunk was ever indexed into ``space`` of ``realm``."""
    row = conn.execute(
        sql.SQL("SELECT EXISTS (SELECT 1 FROM {}.documents WHERE space = %s)").format(
            sql.Identifier(schema_for(realm))
        ),
        (space,),
    ).fetchone()
    return bool(row and row[0])


def entity_search(
    conn: psycopg.Connection,
    realm: str,
    space: str,
    qvec: np.ndarray,
    k: int,
    *,
    temporal: Temporal = CURRENT,
) -> list[Row]:
    """The ``k`` non-dormant entities nearest ``qvec`` (shape ``(dim,)``) in ``space`` (§7.2 seeds).

    With ``temporal.believed_at`` only entities live at that instant can seed (§5.3; their
    ``entity_belief`` interval covers it, whether dormant or archived now).
    Rows: ``id, space, name, entity_type, description, distance, score``, nearest first.
    """
    if k <= 0:
        return []
    query = sql.SQL("""
        WITH hits AS MATERIALIZED (
            SELECT e.id, e.space, e.name, e.entity_type, e.description, {exact} AS distance
              FROM {e} AS e
             WHERE {in_space} AND {live} AND e.embedding IS NOT NULL
             ORDER BY {dist}
             LIMIT %(k)s)
        SELECT *, 1 - distance AS score FROM hits ORDER BY distance, id""").format(
        e=qualified(realm, "entities"),
        in_space=in_space("e", space),
        live=entity_live("e", temporal, realm=realm),
        dist=distance("e", len(qvec)),
        exact=exact_distance("e"),
    )
    return fetch(conn, query, {"q": qvec, "k": k, "space": space, **temporal.params()}, vector=True)


def chunk_search(
    conn: psycopg.Connection,
    realm: str,
    space: str,
    qvec: np.ndarray,
    k: int,
    *,
    temporal: Temporal = CURRENT,
    scores_only: bool = False,
) -> list[Row]:
    """The ``k`` embedded chunks nearest ``qvec`` (shape ``(dim,)``) in ``space``.

    With ``temporal.believed_at`` only the chunks the system had at that instant are searched (§5.3:
    indexed at or before it, and not removed by then — a chunk removed since is read from the archive,
    :func:`chunks_read`). Rows: ``id, space, doc_key, title, chunk_index, text, t_created, distance, score``,
    nearest first; with ``scores_only`` just ``id, distance, score`` (the walk's dense prior reads ~200
    chunks and needs no text: measured 2.6 ms against 5.1 ms at 100k relations). Chunks not yet embedded
    are never returned by this search (mention expansion can still reach them).
    """
    if k <= 0:
        return []
    columns = sql.SQL(
        "d.id" if scores_only else "d.id, d.space, d.doc_key, d.title, d.chunk_index, d.text, d.t_created"
    )
    query = sql.SQL("""
        WITH hits AS MATERIALIZED (
            SELECT {columns}, {exact} AS distance
              FROM {d} AS d
             WHERE {in_space} AND d.embedding IS NOT NULL AND {known}
             ORDER BY {dist}
             LIMIT %(k)s)
        SELECT *, 1 - distance AS score FROM hits ORDER BY distance, id""").format(
        columns=columns,
        d=chunks_read(realm, temporal),
        in_space=in_space("d", space),
        known=created_by("d", temporal),
        dist=distance("d", len(qvec)),
        exact=exact_distance("d"),
    )
    return fetch(conn, query, {"q": qvec, "k": k, "space": space, **temporal.params()}, vector=True)


def chunk_fulltext(
    conn: psycopg.Connection, realm: str, space: str, text: str, k: int, *, temporal: Temporal = CURRENT
) -> list[Row]:
    """The ``k`` chunks of ``space`` best matching ``websearch_to_tsquery('english', text)`` (§7.3
    lexical channel, over chunks), ranked by ``ts_rank_cd`` against the stored ``search_tsv`` =
    ``to_tsvector('english', title || ' ' || text)`` (GIN index ``documents_fts_tsv``), then id.

    ``text`` is websearch syntax: plain words are AND-ed, ``or`` separates alternatives, quotes make a
    phrase — the query path passes :func:`~pgrag_dag.store.retrieval_channels.fulltext_query` of its
    terms (any of them). A text without lexemes (empty, only stop words or punctuation) matches
    nothing. Scope and belief time as :func:`chunk_search`; unlike it, chunks not yet embedded are
    found too. Rows have :func:`chunk_search`'s shape — ``id, space, doc_key, title, chunk_index,
    text, t_created, distance`` (always ``None``: no vector was compared), ``score`` (``ts_rank_cd``
    with normalisation 0, > 0; not comparable with cosine similarity) — best first.
    """
    if k <= 0 or not text.strip():
        return []
    query = sql.SQL("""
        WITH q AS (SELECT websearch_to_tsquery('english', %(text)s) AS q),
        hits AS MATERIALIZED (
            SELECT d.id, d.space, d.doc_key, d.title, d.chunk_index, d.text, d.t_created,
                   NULL::double precision AS distance, ts_rank_cd(d.search_tsv, q.q) AS score
              FROM q, {d} AS d
             WHERE numnode(q.q) > 0 AND d.search_tsv @@ q.q AND {in_space} AND {known}
             ORDER BY score DESC, d.id
             LIMIT %(k)s)
        SELECT * FROM hits ORDER BY score DESC, id""").format(
        d=chunks_read(realm, temporal), in_space=in_space("d", space), known=created_by("d", temporal)
    )
    return fetch(conn, query, {"text": text, "k": k, "space": space, **temporal.params()})


def traverse(
    conn: psycopg.Connection,
    realm: str,
    space: str,
    seeds: Sequence[int],
    *,
    max_hops: int,
    max_relation_edges: int,
    include_superseded: bool = False,
    temporal: Temporal | None = None,
    relation_types: Sequence[str] | None = None,
) -> list[Row]:
    """Relations within ``max_hops`` of the seed entities, walked in both edge directions (§3.3, §7.2).

    The filters are applied at every step of the walk (a recursive CTE), never to its result (§7.2):
    each step stays in the seed's space (the edge's; its endpoints lie in it by the realm's foreign
    keys on ``(space, source_id|target_id)``), never crosses a dormant relation or reaches a dormant
    entity, and crosses only relations satisfying :func:`relation_filter` for ``temporal`` — valid at
    ``as_of``, believed at ``believed_at``, not superseded unless asked — so a vertex
    reachable only through an excluded edge is never reached, and nothing beyond it surfaces. The
    same predicate is applied again when the kept relations are fetched. Seeds outside ``space`` or
    dormant are ignored. Paths do not revisit a vertex.

    ``temporal`` defaults to ``Temporal(include_superseded=include_superseded)``; pass one or the
    other, not both. ``relation_types`` (predicates, case-insensitive) restricts every step too: an
    edge of another type is never crossed.

    Each seed contributes at most ``max_relation_edges`` relations, nearest hop first, then newest
    ``t_created`` first (unknown ``t_created`` last). A relation reached from several seeds keeps
    its smallest hop. Rows: ``id, space, source_id, target_id, subject, object`` (endpoint canonical
    names), ``predicate, description, negated, valid_from, valid_to, weight, confidence, t_created,
    t_expired, superseded_by, superseded``
    (superseded in the state read: at ``believed_at`` when set, see :func:`superseded_expr`),
    ``hop, seeds`` (the seed ids that kept it), ordered by ``hop``, then ``t_created`` descending,
    then ``id``.

    Raises:
        QueryError: both ``include_superseded`` and ``temporal`` given.
    """
    if temporal is None:
        temporal = Temporal(include_superseded=include_superseded)
    elif include_superseded:
        raise QueryError("pass include_superseded inside temporal, not beside it")
    if not seeds or max_hops <= 0 or max_relation_edges <= 0:
        return []
    edge_ok = relation_filter("r", temporal, typed=relation_types is not None, realm=realm)
    query = sql.SQL("""
        WITH RECURSIVE dormant AS (
            SELECT d.id FROM {e} AS d WHERE {d_in_space} AND NOT ({d_live})
        ),
        walk (seed, space, entity_id, rel_id, rel_created, hop, path) AS (
            SELECT e.id, e.space, e.id, NULL::bigint, NULL::timestamptz, 0, ARRAY[e.id]
              FROM {e} AS e
             WHERE e.id = ANY(%(seeds)s) AND {in_space} AND {e_live}
          UNION ALL
            SELECT w.seed, w.space, adj.neighbour, adj.rel_id, adj.rel_created, w.hop + 1,
              w.path || adj.neighbour
              FROM walk AS w
              CROSS JOIN LATERAL (
                    -- each step keeps, per vertex and direction, only the cap newest admissible edges:
                    -- exact, since the per-seed ranking below is hop first, then newest (t_created, id).
                    -- The neighbour lies in the edge's space (foreign key on (space, endpoint)); a
                    -- dormant one is refused by a hashed look-up, not a probe per edge.
                    (SELECT r.id AS rel_id, r.t_created AS rel_created, r.target_id AS neighbour FROM {r} AS r
                      WHERE r.space = w.space AND r.source_id = w.entity_id AND {edge_ok}
                        AND r.target_id <> ALL (w.path) AND r.target_id NOT IN (SELECT id FROM dormant)
                      ORDER BY r.t_created DESC NULLS LAST, r.id LIMIT %(cap)s)
                    UNION ALL
                    (SELECT r.id, r.t_created, r.source_id FROM {r} AS r
                      WHERE r.space = w.space AND r.target_id = w.entity_id AND {edge_ok}
                        AND r.source_id <> ALL (w.path) AND r.source_id NOT IN (SELECT id FROM dormant)
                      ORDER BY r.t_created DESC NULLS LAST, r.id LIMIT %(cap)s)
              ) AS adj
             WHERE w.hop < %(max_hops)s
        ),
        reached AS (
            SELECT seed, rel_id, rel_created, min(hop) AS hop FROM walk WHERE rel_id IS NOT NULL
             GROUP BY seed, rel_id, rel_created
        ),
        ranked AS (
            SELECT seed, rel_id, hop,
                   row_number() OVER (PARTITION BY seed ORDER BY hop, rel_created DESC NULLS LAST, rel_id)
                       AS rn
              FROM reached
        ),
        kept AS (
            SELECT rel_id, min(hop) AS hop, array_agg(DISTINCT seed ORDER BY seed) AS seeds
              FROM ranked WHERE rn <= %(cap)s GROUP BY rel_id
        )
        SELECT r.id, r.space, r.source_id, r.target_id, a.name AS subject, b.name AS object, r.predicate,
               r.description, r.negated, r.valid_from, r.valid_to, r.weight, r.confidence, r.t_created,
               {belief}, k.hop, k.seeds
          FROM kept AS k JOIN {r} AS r ON r.id = k.rel_id
          JOIN {e} AS a ON a.id = r.source_id
          JOIN {e} AS b ON b.id = r.target_id
         WHERE {edge_ok}
         ORDER BY k.hop, r.t_created DESC NULLS LAST, r.id""").format(
        e=qualified(realm, "entities"),
        r=qualified(realm, "relations"),
        in_space=in_space("e", space),
        d_in_space=in_space("d", space),
        edge_ok=edge_ok,
        belief=belief_columns("r", temporal, realm=realm),
        d_live=entity_live("d", temporal, realm=realm),
        e_live=entity_live("e", temporal, realm=realm),
    )
    params = {
        "seeds": list(seeds),
        "space": space,
        "max_hops": max_hops,
        "cap": max_relation_edges,
        **scope_params(temporal, relation_types),
    }
    return fetch(conn, query, params)


def mention_chunks(
    conn: psycopg.Connection,
    realm: str,
    space: str,
    entity_ids: Sequence[int],
    k: int,
    *,
    temporal: Temporal = CURRENT,
) -> list[Row]:
    """Chunks mentioning the matched entities, through ``doc_mentions`` (§7.2 mention expansion).

    Ranked by how many distinct matched entities each chunk mentions (most first), then document
    order. The mention edge, the chunk and the entity must all lie in ``space`` (and in one space
    under the wildcard). With ``temporal.believed_at``, the chunks and mentions the system had at that
    instant are read (§5.3; removed chunks from the archive, :func:`chunks_read` / :func:`mentions_read`).
    Rows: ``id, space, doc_key, title, chunk_index, text, t_created, mentions, entity_ids``; at most ``k``.
    """
    if not entity_ids or k <= 0:
        return []
    query = sql.SQL("""
        SELECT d.id, d.space, d.doc_key, d.title, d.chunk_index, d.text, d.t_created,
               count(DISTINCT m.entity_id) AS mentions,
               array_agg(DISTINCT m.entity_id ORDER BY m.entity_id) AS entity_ids
          FROM {m} AS m JOIN {d} AS d ON d.id = m.chunk_id AND d.space = m.space
          JOIN {e} AS e ON e.id = m.entity_id AND e.space = m.space
         WHERE m.entity_id = ANY(%(ids)s) AND {in_space} AND {known}
         GROUP BY d.id, d.space, d.doc_key, d.title, d.chunk_index, d.text, d.t_created, d.doc_order
         ORDER BY mentions DESC, d.doc_order, d.doc_key, d.chunk_index, d.id
         LIMIT %(k)s""").format(
        m=mentions_read(realm, temporal),
        d=chunks_read(realm, temporal),
        e=qualified(realm, "entities"),
        in_space=in_space("m", space),
        known=created_by("d", temporal),
    )
    params = {"ids": list(entity_ids), "space": space, "k": k, **temporal.params()}
    return fetch(conn, query, params)
