"""SQL for the ``relations`` table (paper Table 1, §4.7, §5.2, §5.5): the edges a batch of chunks or
entities touches, writing a space's relations (corroboration, negation, validity, dormancy) and
applying supersession; with the graph's counts and the frames graph quality reads. The vertex side —
``entities`` and ``doc_mentions`` — is :mod:`pgrag_dag.store.graph`; both are written under the same
per-partition advisory lock (:func:`pgrag_dag.store.locks.lock_partition`).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

import polars as pl
import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from pgrag_dag.store.identifiers import qualified


def edges_touching(
    conn: psycopg.Connection,
    realm: str,
    space: str,
    *,
    chunk_ids: Sequence[int] = (),
    entity_ids: Sequence[int] = (),
    pairs: Sequence[tuple[int, int]] = (),
) -> list[tuple[int, int, list[int]]]:
    """(source_id, target_id, chunk_ids) of the space's stored edges (any state) that a chunk of
    ``chunk_ids`` supported, that end at an entity of ``entity_ids``, or that join a pair of ``pairs``
    (source_id, target_id) — through the ``relations_chunk_ids`` GIN index and the endpoint indexes."""
    r = qualified(realm, "relations")
    parts, args = [], []
    if chunk_ids:
        parts.append(
            sql.SQL(
                "SELECT source_id, target_id, chunk_ids FROM {}"
                " WHERE space = %s AND chunk_ids && %s::bigint[]"
            ).format(r)
        )
        args += [space, list(chunk_ids)]
    if entity_ids:
        for col in ("source_id", "target_id"):
            parts.append(
                sql.SQL(
                    "SELECT source_id, target_id, chunk_ids FROM {} WHERE space = %s AND {} = ANY(%s)"
                ).format(r, sql.Identifier(col))
            )
            args += [space, list(entity_ids)]
    if pairs:
        parts.append(
            sql.SQL("""SELECT r.source_id, r.target_id, r.chunk_ids FROM {} r
                                  JOIN unnest(%s::bigint[], %s::bigint[]) AS p(s, t) ON (r.source_id,
                                      r.target_id) = (p.s, p.t)
                                 WHERE r.space = %s""").format(r)
        )
        args += [[s for s, _ in pairs], [t for _, t in pairs], space]
    if not parts:
        return []
    return [(s, t, list(c)) for s, t, c in conn.execute(sql.SQL(" UNION ALL ").join(parts), args).fetchall()]


def single_valued_rivals(
    conn: psycopg.Connection,
    realm: str,
    space: str,
    pairs: Sequence[tuple[int, int]],
    single_valued: dict[str, str],
) -> set[tuple[int, int]]:
    """The (source_id, target_id) pairs of the space's stored edges (any state) that compete with an edge
    of ``pairs`` under a single-valued predicate (``single_valued``: predicate → ``"object"`` | ``"subject"``,
    :class:`~pgrag_dag.vocabulary.Vocabulary`): a predicate holding one object per subject whose edge
    starts at a source of ``pairs``, or one subject per object whose edge ends at a target of ``pairs``.
    Empty when nothing is single-valued or ``pairs`` is empty."""
    by_source = sorted(p for p, side in single_valued.items() if side == "object")
    by_target = sorted(p for p, side in single_valued.items() if side == "subject")
    if not pairs or not (by_source or by_target):
        return set()
    query = sql.SQL("""SELECT source_id, target_id FROM {r}
                        WHERE space = %(space)s AND predicate = ANY(%(by_source)s)
                          AND source_id = ANY(%(sources)s)
                       UNION
                       SELECT source_id, target_id FROM {r}
                        WHERE space = %(space)s AND predicate = ANY(%(by_target)s)
                          AND target_id = ANY(%(targets)s)""").format(r=qualified(realm, "relations"))
    args = {
        "space": space,
        "by_source": by_source,
        "by_target": by_target,
        "sources": sorted({s for s, _ in pairs}),
        "targets": sorted({t for _, t in pairs}),
    }
    return {(s, t) for s, t in conn.execute(query, args).fetchall()}


def write_relations(
    conn: psycopg.Connection,
    realm: str,
    space: str,
    relations: pl.DataFrame,
    pairs: Collection[tuple[int, int]] | None = None,
) -> dict[str, int]:
    """Upsert the ``relations`` frame in one transaction (a savepoint inside the caller's); see
    :func:`_write_relations`."""
    with conn.transaction():
        return _write_relations(conn, realm, space, relations, pairs)


def _write_relations(
    conn: psycopg.Connection,
    realm: str,
    space: str,
    relations: pl.DataFrame,
    pairs: Collection[tuple[int, int]] | None = None,
) -> dict[str, int]:
    """Upsert the ``relations`` frame: one edge per (source, predicate, target, negated), set-based.

    The frame is copied into a temporary table and merged in one statement. Unchanged edges are not
    touched; a stored validity period is never erased by an observation without one; a stored edge
    absent from ``relations`` (no contributing chunk left) becomes dormant; a present dormant one
    revives. ``relations`` holds every edge of the space, or — with ``pairs`` (source_id, target_id), an
    incremental run — every edge of those pairs, and only their stored edges can become dormant.
    Returns counts ``inserted``, ``updated``, ``dormant``.
    """
    table = qualified(realm, "relations")
    conn.execute("""CREATE TEMP TABLE IF NOT EXISTS pgrag_incoming_rel (
                        source_id bigint, target_id bigint, predicate text, negated boolean, description text,
                        chunk_ids bigint[], weight integer, confidence double precision, payload jsonb,
                            rendered text)
                    ON COMMIT DROP""")
    conn.execute("TRUNCATE pgrag_incoming_rel")
    with (
        conn.cursor() as cur,
        cur.copy(
            "COPY pgrag_incoming_rel (source_id, target_id, predicate, negated, description, chunk_ids,"
            " weight, confidence, payload, rendered) FROM STDIN"
        ) as copy,
    ):
        for r in relations.iter_rows(named=True):
            payload = {k: r[k] for k in ("valid_from", "valid_to") if r[k]}
            copy.write_row(
                (
                    r["source_id"],
                    r["target_id"],
                    r["predicate"],
                    r["negated"],
                    r["description"],
                    r["chunk_ids"],
                    r["weight"],
                    r["confidence"],
                    Jsonb(payload),
                    r["rendered"],
                )
            )
    same_edge = sql.SQL(
        "(r.source_id, r.predicate, r.target_id, r.negated)"
        " = (i.source_id, i.predicate, i.target_id, i.negated)"
    )
    updated = conn.execute(
        sql.SQL("""UPDATE {t} r SET description = i.description, chunk_ids = i.chunk_ids, weight = i.weight,
                          confidence = i.confidence, payload = r.payload || i.payload, rendered = i.rendered,
                          dormant_since = NULL
                     FROM pgrag_incoming_rel i
                    WHERE r.space = %s AND {same}
                      AND ((r.description, r.chunk_ids, r.weight, r.confidence, r.rendered, r.dormant_since)
                           IS DISTINCT FROM (i.description, i.chunk_ids, i.weight, i.confidence, i.rendered,
                               NULL::timestamptz)
                           OR NOT (r.payload @> i.payload))""").format(t=table, same=same_edge),
        (space,),
    ).rowcount
    # new edges only: no sequence value is spent on edges that already exist
    inserted = conn.execute(
        sql.SQL("""INSERT INTO {t} (space, source_id, target_id, predicate, negated, description, chunk_ids,
                                   weight,
                                   confidence, payload, rendered)
                   SELECT %s, i.source_id, i.target_id, i.predicate, i.negated, i.description, i.chunk_ids,
                          i.weight,
                          i.confidence, i.payload, i.rendered FROM pgrag_incoming_rel i
                    WHERE NOT EXISTS (SELECT 1 FROM {t} r WHERE r.space = %s AND {same})
                    ORDER BY i.source_id, i.predicate, i.target_id, i.negated
                   ON CONFLICT (space, source_id, predicate, target_id, negated) DO NOTHING""").format(
            t=table, same=same_edge
        ),
        (space, space),
    ).rowcount
    only = sql.SQL("")
    args: list[Any] = [space]
    if pairs is not None:
        only = sql.SQL(
            " AND (r.source_id, r.target_id) IN (SELECT * FROM unnest(%s::bigint[], %s::bigint[]))"
        )
        args += [[a for a, _ in pairs], [b for _, b in pairs]]
    dormant = conn.execute(
        sql.SQL("""UPDATE {t} r SET dormant_since = now() WHERE r.space = %s AND r.dormant_since IS NULL{only}
                   AND NOT EXISTS (
                   SELECT 1 FROM pgrag_incoming_rel i WHERE (i.source_id, i.target_id, i.predicate, i.negated)
                                                          = (r.source_id, r.target_id, r.predicate,
                                                              r.negated))""").format(t=table, only=only),
        args,
    ).rowcount
    return {"inserted": inserted, "updated": updated, "dormant": dormant}


def graph_counts(conn: psycopg.Connection, realm: str, space: str) -> dict[str, int]:
    """What the space holds: live and dormant entities and relations, mentions, and among the live relations
    the ``negated`` ones, those ``with_validity`` (a valid_from or valid_to) and the ``superseded`` ones."""
    e, r, m = qualified(realm, "entities"), qualified(realm, "relations"), qualified(realm, "doc_mentions")
    row = conn.execute(
        sql.SQL("""SELECT (SELECT count(*) FROM {e} WHERE space = %(s)s AND dormant_since IS NULL),
                          (SELECT count(*) FROM {e} WHERE space = %(s)s AND dormant_since IS NOT NULL),
                          l.live, l.dormant, (SELECT count(*) FROM {m} WHERE space = %(s)s), l.negated,
                              l.validity, l.superseded
                     FROM (SELECT count(*) FILTER (WHERE dormant_since IS NULL) AS live,
                                  count(*) FILTER (WHERE dormant_since IS NOT NULL) AS dormant,
                                  count(*) FILTER (WHERE dormant_since IS NULL AND negated) AS negated,
                                  count(*) FILTER (WHERE dormant_since IS NULL
                                                     AND (valid_from_key IS NOT NULL
                                                          OR valid_to_key IS NOT NULL)) AS validity,
                                  count(*) FILTER (WHERE dormant_since IS NULL AND superseded_by IS NOT NULL)
                                      AS superseded
                             FROM {r} WHERE space = %(s)s) l""").format(e=e, r=r, m=m),
        {"s": space},
    ).fetchone()
    assert row is not None
    return dict(
        zip(
            [
                "entities",
                "entities_dormant",
                "relations",
                "relations_dormant",
                "mentions",
                "negated",
                "with_validity",
                "superseded",
            ],
            row,
        )
    )


def quality_frames(conn: psycopg.Connection, realm: str, space: str) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The frames :func:`pgrag_dag.graph.quality.graph_quality` reads: entities (id, name, aliases, dormant)
    and relations (source_id, target_id, predicate, negated, live)."""
    e, r = qualified(realm, "entities"), qualified(realm, "relations")
    ents = conn.execute(
        sql.SQL(
            "SELECT id, name, aliases, dormant_since IS NOT NULL FROM {} WHERE space = %s ORDER BY id"
        ).format(e),
        (space,),
    ).fetchall()
    rels = conn.execute(
        sql.SQL("""SELECT source_id, target_id, predicate, negated,
                                          dormant_since IS NULL AND superseded_by IS NULL FROM {}
                                              WHERE space = %s""").format(r),
        (space,),
    ).fetchall()
    return (
        pl.DataFrame(
            ents,
            schema={"id": pl.Int64, "name": pl.String, "aliases": pl.List(pl.String), "dormant": pl.Boolean},
            orient="row",
        ),
        pl.DataFrame(
            rels,
            schema={
                "source_id": pl.Int64,
                "target_id": pl.Int64,
                "predicate": pl.String,
                "negated": pl.Boolean,
                "live": pl.Boolean,
            },
            orient="row",
        ),
    )


def apply_supersession(
    conn: psycopg.Connection, realm: str, space: str, relations: pl.DataFrame, supersession: pl.DataFrame
) -> dict[str, int]:
    """Mark superseded edges (§5.2–5.3): ``superseded_by`` and ``t_expired`` (database clock), never delete.

    ``relations`` is the live frame the stage wrote (rows addressed by position) — call it right after
    :func:`write_relations` in the same transaction (it reads that call's incoming rows) — and it is the
    whole space's or, in an incremental run, every edge of the affected pairs; ``supersession`` has
    row, superseded_by_row, reason, explanation. A newly superseded edge (or one whose superseder
    changed) gets ``t_expired = now()``; a live edge no longer superseded is current again. A
    contradiction verdict is recorded in the superseded edge's payload. Returns counts ``superseded``
    (now), ``newly_superseded``, ``restored``.
    """
    table = qualified(realm, "relations")
    keys = [
        (r["source_id"], r["target_id"], r["predicate"], r["negated"])
        for r in relations.iter_rows(named=True)
    ]
    ids = {}
    for (
        i,
        s_,
        t_,
        p_,
        n_,
    ) in conn.execute(  # the edges just written (write_relations' incoming rows), not the space
        sql.SQL("""SELECT r.id, r.source_id, r.target_id, r.predicate, r.negated FROM {} r
                     JOIN pgrag_incoming_rel i
                     ON (r.source_id, r.predicate, r.target_id, r.negated) = (i.source_id, i.predicate,
                         i.target_id, i.negated)
                  WHERE r.space = %s""").format(table),
        (space,),
    ).fetchall():
        ids[(s_, t_, p_, n_)] = i
    wanted = {
        ids[keys[r]]: (ids[keys[w]], reason, expl)
        for r, w, reason, expl in supersession.select(
            "row", "superseded_by_row", "reason", "explanation"
        ).iter_rows()
    }
    live = [ids[k] for k in keys]
    stored: dict[int, int] = dict(
        conn.execute(
            sql.SQL(
                "SELECT id, superseded_by FROM {} WHERE id = ANY(%s) AND superseded_by IS NOT NULL"
            ).format(table),
            (live,),
        ).fetchall()
    )
    newly = restored = 0
    with conn.cursor() as cur:
        for edge, (by, reason, expl) in wanted.items():
            if stored.get(edge) != by:
                payload = {"supersession": {"reason": reason, **({"explanation": expl} if expl else {})}}
                cur.execute(
                    sql.SQL(
                        "UPDATE {} SET superseded_by = %s, t_expired = now(), payload = payload || %s"
                        " WHERE id = %s"
                    ).format(table),
                    (by, Jsonb(payload), edge),
                )
                newly += 1
        for edge in stored:
            if edge not in wanted:
                cur.execute(
                    sql.SQL(
                        "UPDATE {} SET superseded_by = NULL, t_expired = NULL,"
                        " payload = payload - 'supersession'"
                        " WHERE id = %s"
                    ).format(table),
                    (edge,),
                )
                restored += 1
    return {"superseded": len(wanted), "newly_superseded": newly, "restored": restored}
