"""SQL for the entity graph: ``entities``, ``doc_mentions``, ``relations`` (paper Table 1, §4.6–4.7, §5.5).

Writes are applied under a per-partition advisory lock (:func:`pgrag_dag.store.locks.lock_partition`), so
concurrent writers resolve against one another instead of splitting a vertex.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any

import polars as pl
import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from pgrag_dag.frames import ENTITY_SCHEMA, Resolution, Vertex
from pgrag_dag.store.identifiers import qualified
from pgrag_dag.store.quality import fill_identity_keys


def load_entities(
    conn: psycopg.Connection,
    realm: str,
    space: str,
    *,
    resolved: bool = False,
    holding: Iterable[str] | None = None,
) -> pl.DataFrame:
    """The space's entities (dormant included), by id: id, name, entity_type, description, aliases — as
    stored, or with ``resolved`` the type and description resolution decided (before the space's enrichers).
    With ``holding`` (identity keys), only the entities holding one of them as name or alias (through
    ``entity_keys``: an incremental resolution reads the vertices its records can meet, issue 15)."""
    cols = (
        "coalesce(resolved_type, entity_type), coalesce(resolved_description, description)"
        if resolved
        else "entity_type, description"
    )
    where: sql.Composable = sql.SQL("")
    args: list[Any] = [space]
    if holding is not None:
        keys = sorted(set(holding))
        fill_identity_keys(conn, realm, space)
        where = sql.SQL(""" AND id IN (SELECT entity_id FROM {k} WHERE space = %s
                                         AND (name_key = ANY(%s) OR alias_keys && %s::text[]))""").format(
            k=qualified(realm, "entity_keys")
        )
        args += [space, keys, keys]
    rows = conn.execute(
        sql.SQL("SELECT id, name, {}, aliases FROM {} WHERE space = %s{} ORDER BY id").format(
            sql.SQL(cols), qualified(realm, "entities"), where
        ),
        args,
    ).fetchall()
    schema = {k: v for k, v in ENTITY_SCHEMA.items() if k != "changed"}
    return pl.DataFrame(rows, schema=schema, orient="row")


Merge = Callable[[Vertex, Vertex], None]
"""``merge(winner, loser)``: folds a new vertex that lost the unique-name race into the stored winner,
in place (:func:`pgrag_dag.graph.resolution.merge_race_loser`)."""


def write_entities(
    conn: psycopg.Connection, realm: str, space: str, res: Resolution, *, merge: Merge
) -> dict[str, int]:
    """Apply a :class:`Resolution` in one transaction (a savepoint inside the caller's), see
    :func:`_write_entities`, and store the identity keys of the entities it wrote
    (:func:`pgrag_dag.store.quality.fill_identity_keys`)."""
    with conn.transaction():
        counts = _write_entities(conn, realm, space, res, merge)
        fill_identity_keys(conn, realm, space)
        return counts


def _write_entities(
    conn: psycopg.Connection, realm: str, space: str, res: Resolution, merge: Merge
) -> dict[str, int]:
    """Apply a :class:`Resolution`: update changed vertices, insert new ones, fill in their ids.

    A new vertex whose name another writer inserted meanwhile loses the unique-index race and is
    merged into the winner by ``merge`` (§4.6). Returns counts ``inserted``, ``updated``.
    """
    table = qualified(realm, "entities")
    updated = 0
    changed = [v for v in res.vertices if v.id is not None and v.changed]
    if changed:
        with conn.cursor() as cur:
            cur.executemany(
                sql.SQL("""UPDATE {} SET name = %s, entity_type = %s, description = %s, aliases = %s,
                                         resolved_type = %s, resolved_description = %s, t_updated = now()
                            WHERE id = %s""").format(table),
                [
                    (
                        v.name,
                        v.entity_type,
                        v.description,
                        v.aliases,
                        v.resolved_type,
                        v.resolved_description,
                        v.id,
                    )
                    for v in changed
                ],
            )
        updated = len(changed)
    new = [v for v in res.vertices if v.id is None]
    if not new:
        return {"inserted": 0, "updated": updated}
    conn.execute("""CREATE TEMP TABLE IF NOT EXISTS pgrag_incoming_ent (ord integer, name text,
                        entity_type text,
                        description text, aliases text[], resolved_type text, resolved_description text)
                            ON COMMIT DROP""")
    conn.execute("TRUNCATE pgrag_incoming_ent")
    with conn.cursor() as cur, cur.copy("COPY pgrag_incoming_ent FROM STDIN") as copy:
        for i, v in enumerate(new):
            copy.write_row(
                (i, v.name, v.entity_type, v.description, v.aliases, v.resolved_type, v.resolved_description)
            )
    rows = conn.execute(
        sql.SQL("""INSERT INTO {} (space, name, entity_type, description, aliases, resolved_type,
                   resolved_description)
                   SELECT %s, name, entity_type, description, aliases, resolved_type, resolved_description
                     FROM pgrag_incoming_ent ORDER BY ord
                   ON CONFLICT (space, lower(name)) DO NOTHING RETURNING id, name""").format(table),
        (space,),
    ).fetchall()
    # by the exact name inserted: Python's str.lower and PostgreSQL's lower() differ ("İzmir" lowercases to
    # "i̇zmir" in Python, to "izmir" in PostgreSQL, where it collides with "Izmir")
    ids = {name: i for i, name in rows}
    losers = []
    for v in new:
        v.id = ids.get(v.name)
        if v.id is None:
            losers.append(v)
    for v in losers:  # another writer inserted this name meanwhile: merge into the winner (§4.6)
        winner = conn.execute(
            sql.SQL(
                "SELECT id, name, entity_type, description, aliases FROM {}"
                " WHERE space = %s AND lower(name) = lower(%s)"
            ).format(table),
            (space, v.name),
        ).fetchone()
        assert winner is not None  # the conflict proves it exists
        w = Vertex(winner[0], winner[1], winner[2], winner[3], list(winner[4]))
        merge(w, v)
        conn.execute(
            sql.SQL(
                "UPDATE {} SET entity_type = %s, description = %s, aliases = %s, t_updated = now()"
                " WHERE id = %s"
            ).format(table),
            (w.entity_type, w.description, w.aliases, w.id),
        )
        v.id = w.id
    return {"inserted": len(rows), "updated": updated + len(losers)}


def replace_mentions(
    conn: psycopg.Connection, realm: str, space: str, mentions: pl.DataFrame
) -> dict[str, int]:
    """Replace the space's ``doc_mentions`` with ``mentions`` (chunk_id, entity_id) and restamp dormancy.

    An entity no chunk mentions becomes dormant (``dormant_since = now()``); a mentioned dormant entity
    revives unless it is archived (retention, issue 14: archived entities stay dormant until unarchived).
    Returns counts ``mentions``, ``dormant``, ``revived``.
    """
    pairs = mentions.unique().sort("chunk_id", "entity_id")
    stored = conn.execute(
        sql.SQL("SELECT chunk_id, entity_id FROM {} WHERE space = %s ORDER BY 1, 2").format(
            qualified(realm, "doc_mentions")
        ),
        (space,),
    ).fetchall()
    if stored != list(pairs.iter_rows()):  # an unchanged mention set is left as it is
        conn.execute(
            sql.SQL("DELETE FROM {} WHERE space = %s").format(qualified(realm, "doc_mentions")), (space,)
        )
        with (
            conn.cursor() as cur,
            cur.copy(
                sql.SQL("COPY {} (space, chunk_id, entity_id) FROM STDIN").format(
                    qualified(realm, "doc_mentions")
                )
            ) as copy,
        ):
            for c, e in pairs.iter_rows():
                copy.write_row((space, c, e))
    return {"mentions": pairs.height, **_restamp_dormancy(conn, realm, space)}


def replace_chunk_mentions(
    conn: psycopg.Connection,
    realm: str,
    space: str,
    chunk_ids: Sequence[int],
    mentions: pl.DataFrame,
    *,
    also: Sequence[int] = (),
) -> dict[str, int]:
    """Replace the ``doc_mentions`` of ``chunk_ids`` only (an incremental run, issue 15) with ``mentions``
    (chunk_id, entity_id; every row's chunk among ``chunk_ids``) and restamp dormancy for the entities
    that gained or lost a mention there, and for ``also`` (entity ids whose mentions went elsewhere, e.g.
    by a removed chunk's cascade, or whose archiving changed). Returns counts ``mentions`` (of these chunks),
    ``rewritten`` (mention rows added or removed), ``dormant``, ``revived``."""
    table = qualified(realm, "doc_mentions")
    wanted = sorted(mentions.unique().iter_rows())
    stored = (
        sorted(
            conn.execute(
                sql.SQL("SELECT chunk_id, entity_id FROM {} WHERE space = %s AND chunk_id = ANY(%s)").format(
                    table
                ),
                (space, list(chunk_ids)),
            ).fetchall()
        )
        if chunk_ids
        else []
    )
    rewritten = len(set(stored) ^ set(wanted))
    if rewritten:
        conn.execute(
            sql.SQL("DELETE FROM {} WHERE space = %s AND chunk_id = ANY(%s)").format(table),
            (space, list(chunk_ids)),
        )
        with (
            conn.cursor() as cur,
            cur.copy(sql.SQL("COPY {} (space, chunk_id, entity_id) FROM STDIN").format(table)) as copy,
        ):
            for c, e in wanted:
                copy.write_row((space, c, e))
    affected = sorted(set(also) | {e for _, e in stored} | {e for _, e in wanted})
    dormancy = _restamp_dormancy(conn, realm, space, affected) if affected else {"dormant": 0, "revived": 0}
    return {"mentions": len(wanted), "rewritten": rewritten, **dormancy}


def chunks_mentioning(
    conn: psycopg.Connection, realm: str, space: str, entity_ids: Sequence[int]
) -> list[int]:
    """The chunks of the space that mention any of ``entity_ids`` (``doc_mentions``, by its entity index)."""
    if not entity_ids:
        return []
    return [
        r[0]
        for r in conn.execute(
            sql.SQL("SELECT DISTINCT chunk_id FROM {} WHERE space = %s AND entity_id = ANY(%s)").format(
                qualified(realm, "doc_mentions")
            ),
            (space, list(entity_ids)),
        ).fetchall()
    ]


def _restamp_dormancy(
    conn: psycopg.Connection, realm: str, space: str, ids: Sequence[int] | None = None
) -> dict[str, int]:
    """An entity no chunk mentions becomes dormant (``dormant_since = now()``); a mentioned dormant entity
    revives unless archived — over the space, or only the entities ``ids``. Returns ``dormant``,
    ``revived``."""
    ent, men = qualified(realm, "entities"), qualified(realm, "doc_mentions")
    only = sql.SQL("") if ids is None else sql.SQL(" AND e.id = ANY(%s)")
    args = (space,) if ids is None else (space, list(ids))
    dormant = conn.execute(
        sql.SQL("""UPDATE {e} e SET dormant_since = now() WHERE e.space = %s{only} AND e.dormant_since IS NULL
                   AND NOT EXISTS (SELECT 1 FROM {m} m WHERE m.entity_id = e.id)""").format(
            e=ent, m=men, only=only
        ),
        args,
    ).rowcount
    revived = conn.execute(
        sql.SQL("""UPDATE {e} e SET dormant_since = NULL WHERE e.space = %s{only}
                   AND e.dormant_since IS NOT NULL
                   AND e.archived_at IS NULL AND EXISTS (SELECT 1 FROM {m} m
                       WHERE m.entity_id = e.id)""").format(e=ent, m=men, only=only),
        args,
    ).rowcount
    return {"dormant": dormant, "revived": revived}


class EntityForms:
    """The space's entity surface forms, read from ``entity_keys`` (identity keys computed when entities are
    written) as far as they are asked for: :meth:`load` reads every entity holding one of some identity keys,
    so for those keys ``lookup`` (key → the entity a triple endpoint with it resolves to: a canonical name
    first, then the lowest-id entity holding it as an alias) and ``holders`` (key → every entity holding it)
    are exact; ``names`` (id → canonical name) and ``forms`` (id → its keys) cover every entity read.
    ``everything`` reads the whole space at once (a full recompute)."""

    def __init__(self, conn: psycopg.Connection, realm: str, space: str, *, everything: bool = False) -> None:
        self._conn, self._realm, self._space = conn, realm, space
        fill_identity_keys(conn, realm, space)  # keys of entities a writer stored without them
        self.names: dict[int, str] = {}
        self.forms: dict[int, tuple[str, list[str]]] = {}
        self.holders: dict[str, set[int]] = {}
        self._complete: set[str] = set()
        self.everything = everything
        if everything:
            self._read(sql.SQL(""), ())

    def _read(self, where: sql.Composable, args: Sequence[object]) -> None:
        rows = self._conn.execute(
            sql.SQL("""SELECT e.id, e.name, k.name_key, k.alias_keys FROM {k} k
                                               JOIN {e} e ON e.space = k.space AND e.id = k.entity_id
                                              WHERE k.space = %s{w}""").format(
                k=qualified(self._realm, "entity_keys"), e=qualified(self._realm, "entities"), w=where
            ),
            (self._space, *args),
        ).fetchall()
        for i, name, name_key, alias_keys in rows:
            if i in self.names:
                continue
            self.names[i], self.forms[i] = name, (name_key, list(alias_keys))
            for key in (name_key, *alias_keys):
                self.holders.setdefault(key, set()).add(i)

    def load(self, keys: Iterable[str]) -> None:
        """Read every entity of the space holding one of ``keys`` (name or alias), through the indexes
        ``entity_keys_name`` and ``entity_keys_aliases``."""
        wanted = sorted(set(keys) - self._complete)
        if wanted and not self.everything:
            self._read(sql.SQL(" AND (k.name_key = ANY(%s) OR k.alias_keys && %s::text[])"), (wanted, wanted))
        self._complete |= set(wanted)

    def load_ids(self, ids: Iterable[int]) -> None:
        """Read the entities ``ids`` (their forms; the lookup of their keys needs :meth:`load`)."""
        wanted = sorted(set(ids) - set(self.names))
        if wanted and not self.everything:
            self._read(sql.SQL(" AND k.entity_id = ANY(%s)"), (wanted,))

    def resolve(self, key: str) -> int | None:
        """The entity a triple endpoint with identity key ``key`` resolves to, or ``None`` (call :meth:`load`
        with the key first)."""
        held = self.holders.get(key)
        if not held:
            return None
        canonical = [i for i in held if self.forms[i][0] == key]
        return min(canonical) if canonical else min(held)

    @property
    def lookup(self) -> dict[str, int]:
        """key → entity for every key read completely (every key when ``everything``)."""
        keys = self.holders if self.everything else self._complete
        return {k: i for k in keys if (i := self.resolve(k)) is not None}

    def keys_of(self, ids: Iterable[int]) -> set[str]:
        """The identity keys the entities ``ids`` hold (name and aliases; :meth:`load_ids` them first)."""
        return {k for i in ids if i in self.forms for k in (self.forms[i][0], *self.forms[i][1])}


def entity_forms(conn: psycopg.Connection, realm: str, space: str) -> EntityForms:
    """The :class:`EntityForms` of the whole space (dormant entities included)."""
    return EntityForms(conn, realm, space, everything=True)


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
