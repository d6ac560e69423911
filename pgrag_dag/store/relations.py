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

from pgrag_dag.names import schema_for
from pgrag_dag.store import incoming, tallies
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
    """Upsert the ``relations`` frame in one transaction (a savepoint inside the caller's): the frame is
    copied into the incoming table (:func:`pgrag_dag.store.incoming.open_incoming`,
    :func:`~pgrag_dag.store.incoming.add_relations`) and merged set-based
    (:func:`~pgrag_dag.store.incoming.merge_relations`, which says what changes). ``relations`` holds every
    edge of the space, or — with ``pairs`` (source_id, target_id), an incremental run — every edge of those
    pairs. Returns counts ``inserted``, ``updated``, ``dormant``."""
    with conn.transaction():
        incoming.open_incoming(conn)
        incoming.add_relations(conn, relations)
        return incoming.merge_relations(conn, realm, space, pairs)


def graph_counts(
    conn: psycopg.Connection, realm: str, space: str, *, recount: bool = False
) -> dict[str, int]:
    """What the space holds: live and dormant entities and relations, mentions, and among the live relations
    the ``negated`` ones, those ``with_validity`` (a valid_from or valid_to) and the ``superseded`` ones.

    Read from the counts the triggers keep by delta (:mod:`pgrag_dag.store.tallies`: the rows appended since
    the last compaction, not the space — issue 30); with ``recount`` counted from the space's rows instead
    (a full run). A realm whose schema predates the tallies (version < 23, until its next index run
    upgrades it) is recounted."""
    if recount or not _has_tallies(conn, realm):
        counts = tallies.recount(conn, realm, space)
    else:
        counts = tallies.read(conn, realm, space)
    return {k: counts[k] for k in tallies.KEYS}


def _has_tallies(conn: psycopg.Connection, realm: str) -> bool:
    row = conn.execute(
        "SELECT to_regclass(%s) IS NOT NULL", (f'"{schema_for(realm)}".graph_tallies',)
    ).fetchone()
    return bool(row and row[0])


def entity_count(conn: psycopg.Connection, realm: str, space: str) -> int:
    """How many entities the space holds, live and dormant (from the counts kept by delta,
    :func:`graph_counts`)."""
    counts = graph_counts(conn, realm, space)
    return counts["entities"] + counts["entities_dormant"]


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
) -> dict[str, Any]:
    """Mark superseded edges (§5.2–5.3): ``superseded_by`` and ``t_expired`` (database clock), never delete.

    ``relations`` is the live frame the stage wrote (rows addressed by position) — call it right after
    :func:`write_relations` in the same transaction (the edges it concerns are that call's incoming rows) —
    and it is the whole space's or, in an incremental run, every edge of the affected pairs; ``supersession``
    has row, superseded_by_row, reason, explanation. See
    :func:`pgrag_dag.store.incoming.apply_incoming_supersession` for what changes. Returns counts
    ``superseded`` (now), ``newly_superseded``, ``restored`` and ``newly_by_reason``."""
    incoming.add_supersession(conn, relations, supersession)
    return incoming.apply_incoming_supersession(conn, realm, space)
