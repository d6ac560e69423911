"""SQL for the entity graph's vertices: ``entities`` and ``doc_mentions`` (paper Table 1, §4.6, §5.5); the
edges, ``relations``, are :mod:`pgrag_dag.store.relations`.

Writes are applied under a per-partition advisory lock (:func:`pgrag_dag.store.locks.lock_partition`), so
concurrent writers resolve against one another instead of splitting a vertex.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import polars as pl
import psycopg
from psycopg import sql
from psycopg.rows import dict_row

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
    """The space's vertices (dormant included, merged fragments not: §4.6), by id: id, name, entity_type,
    description, aliases — as stored, or with ``resolved`` the type and description resolution decided
    (before the space's enrichers). With ``holding`` (identity keys), only the entities holding one of them
    as name or alias (through ``entity_keys``: an incremental resolution reads the vertices its records can
    meet, issue 15)."""
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
        sql.SQL(
            "SELECT id, name, {}, aliases FROM {} WHERE space = %s AND merged_into IS NULL{} ORDER BY id"
        ).format(sql.SQL(cols), qualified(realm, "entities"), where),
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


def write_merges(conn: psycopg.Connection, realm: str, space: str, merges: Sequence[tuple[int, int]]) -> int:
    """Record ``merges`` — (fragment id, survivor id) pairs, from
    :meth:`pgrag_dag.frames.Resolution.merges` after the survivors are written — as ``merged_into``: the
    fragment's row stays (its history, its edges until the relations stage rebuilds them) but no form
    resolves to it any more (§4.6, issue 28). Returns how many rows changed."""
    if not merges:
        return 0
    with conn.cursor() as cur:
        cur.executemany(
            sql.SQL(
                "UPDATE {} SET merged_into = %s, t_updated = now() WHERE space = %s AND id = %s"
                " AND merged_into IS DISTINCT FROM %s"
            ).format(qualified(realm, "entities")),
            [(survivor, space, fragment, survivor) for fragment, survivor in merges],
        )
        return max(cur.rowcount, 0)


def merged_fragments(
    conn: psycopg.Connection, realm: str, space: str, survivors: Sequence[int]
) -> list[tuple[int, str, int]]:
    """(fragment id, fragment name, survivor id) of the merges into one of ``survivors``, by fragment id."""
    if not survivors:
        return []
    return [
        (int(f), str(n), int(s))
        for f, n, s in conn.execute(
            sql.SQL(
                "SELECT id, name, merged_into FROM {} WHERE space = %s AND merged_into = ANY(%s) ORDER BY id"
            ).format(qualified(realm, "entities")),
            (space, list(survivors)),
        ).fetchall()
    ]


def aliased_entities(
    conn: psycopg.Connection, realm: str, space: str, ids: Sequence[int] | None
) -> list[dict[str, Any]]:
    """``id, name, entity_type, description, aliases`` of the vertices of ``space`` (of ``ids``; every one
    with ``None``) that hold an alias and are not merged into another, by id."""
    if ids is not None and not ids:
        return []
    only = sql.SQL("") if ids is None else sql.SQL(" AND id = ANY(%s)")
    args: list[Any] = [space] if ids is None else [space, list(ids)]
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(
            sql.SQL("""SELECT id, name, entity_type, description, aliases FROM {} WHERE space = %s
                          AND merged_into IS NULL AND cardinality(aliases) > 0{} ORDER BY id""").format(
                qualified(realm, "entities"), only
            ),
            args,
        ).fetchall()


def clear_merges(conn: psycopg.Connection, realm: str, space: str, fragment_ids: Sequence[int]) -> int:
    """Undo the merges of ``fragment_ids`` (``merged_into`` back to null: the row is a vertex again, which
    queues its relations through the work-queue trigger). Returns how many rows changed."""
    if not fragment_ids:
        return 0
    return conn.execute(
        sql.SQL(
            "UPDATE {} SET merged_into = NULL, t_updated = now()"
            " WHERE space = %s AND id = ANY(%s) AND merged_into IS NOT NULL"
        ).format(qualified(realm, "entities")),
        (space, list(fragment_ids)),
    ).rowcount


def _write_entities(
    conn: psycopg.Connection, realm: str, space: str, res: Resolution, merge: Merge
) -> dict[str, int]:
    """Apply a :class:`Resolution`: update changed vertices, insert new ones, fill in their ids.

    A new vertex whose name another writer inserted meanwhile loses the unique-index race and is
    merged into the winner by ``merge`` (§4.6); so is one whose name a merged fragment's row holds, which
    stands again. Returns counts ``inserted``, ``updated``.
    """
    table = qualified(realm, "entities")
    updated = 0
    changed = [v for v in res.vertices if v.id is not None and v.changed]
    if changed:
        # only rows whose values differ: a vertex a full run recomputes to what it stored is marked changed
        # too, and rewriting it would report a change and move its t_updated (a trial's `index --full` on an
        # unchanged space reported entities updated)
        with conn.cursor() as cur:
            cur.executemany(
                sql.SQL("""UPDATE {} SET name = %s, entity_type = %s, description = %s, aliases = %s,
                                         resolved_type = %s, resolved_description = %s, t_updated = now()
                            WHERE id = %s AND (name, entity_type, description, aliases, resolved_type,
                                               resolved_description)
                                  IS DISTINCT FROM (%s, %s, %s, %s::text[], %s, %s)""").format(table),
                [
                    (*values, v.id, *values)
                    for v in changed
                    for values in [
                        (
                            v.name,
                            v.entity_type,
                            v.description,
                            v.aliases,
                            v.resolved_type,
                            v.resolved_description,
                        )
                    ]
                ],
            )
            updated = max(cur.rowcount, 0)
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
    # another writer inserted this name meanwhile, or a fragment merged earlier holds it (its survivor no
    # longer does): merge into that row, which is a vertex again (§4.6)
    for v in losers:
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
                "UPDATE {} SET entity_type = %s, description = %s, aliases = %s, merged_into = NULL,"
                " t_updated = now() WHERE id = %s"
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
    if not mention_frame(conn, realm, space).equals(pairs):  # an unchanged mention set is left as it is
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


def mention_pairs(
    conn: psycopg.Connection, realm: str, space: str, chunk_ids: Sequence[int] | None
) -> list[tuple[int, int]]:
    """The (chunk_id, entity_id) mentions of ``chunk_ids`` (``None``: of the whole space)."""
    if chunk_ids is not None and not chunk_ids:
        return []
    only = sql.SQL("") if chunk_ids is None else sql.SQL(" AND chunk_id = ANY(%s)")
    args = (space,) if chunk_ids is None else (space, list(chunk_ids))
    return [
        (int(c), int(e))
        for c, e in conn.execute(
            sql.SQL("SELECT chunk_id, entity_id FROM {} WHERE space = %s{}").format(
                qualified(realm, "doc_mentions"), only
            ),
            args,
        ).fetchall()
    ]


MENTION_SCHEMA = {"chunk_id": pl.Int64, "entity_id": pl.Int64}
"""The ``doc_mentions`` pairs as a frame."""


def mention_frame(conn: psycopg.Connection, realm: str, space: str, *, batch: int = 100_000) -> pl.DataFrame:
    """The space's (chunk_id, entity_id) mentions, sorted, as a frame (:data:`MENTION_SCHEMA`) — read
    ``batch`` rows at a time through a server-side cursor in the caller's transaction, so no Python tuple
    per mention outlives its batch (issue 30)."""
    frames = [pl.DataFrame(schema=MENTION_SCHEMA)]
    with conn.cursor(name="pgrag_mentions") as cur:
        cur.execute(
            sql.SQL("SELECT chunk_id, entity_id FROM {} WHERE space = %s ORDER BY 1, 2").format(
                qualified(realm, "doc_mentions")
            ),
            (space,),
        )
        while rows := cur.fetchmany(batch):
            frames.append(pl.DataFrame(rows, schema=MENTION_SCHEMA, orient="row"))
    return pl.concat(frames)


def live_among(conn: psycopg.Connection, realm: str, space: str, entity_ids: Sequence[int]) -> list[int]:
    """The entities of ``entity_ids`` not dormant, ascending."""
    return [
        r[0]
        for r in conn.execute(
            sql.SQL(
                "SELECT id FROM {} WHERE space = %s AND id = ANY(%s) AND dormant_since IS NULL ORDER BY id"
            ).format(qualified(realm, "entities")),
            (space, list(entity_ids)),
        ).fetchall()
    ]


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
    are exact; ``names`` (id → canonical name) and ``forms`` (id → its keys) cover every entity read, and
    ``merged`` the fragments among them merged into another vertex (§4.6): held, never resolved to.
    ``everything`` reads the whole space at once (a full recompute)."""

    def __init__(self, conn: psycopg.Connection, realm: str, space: str, *, everything: bool = False) -> None:
        self._conn, self._realm, self._space = conn, realm, space
        fill_identity_keys(conn, realm, space)  # keys of entities a writer stored without them
        self.names: dict[int, str] = {}
        self.forms: dict[int, tuple[str, list[str]]] = {}
        self.holders: dict[str, set[int]] = {}
        self.merged: set[int] = set()
        self._complete: set[str] = set()
        self.everything = everything
        if everything:
            self._read(sql.SQL(""), ())

    def _read(self, where: sql.Composable, args: Sequence[object]) -> None:
        rows = self._conn.execute(
            sql.SQL("""SELECT e.id, e.name, k.name_key, k.alias_keys, e.merged_into IS NOT NULL FROM {k} k
                                               JOIN {e} e ON e.space = k.space AND e.id = k.entity_id
                                              WHERE k.space = %s{w}""").format(
                k=qualified(self._realm, "entity_keys"), e=qualified(self._realm, "entities"), w=where
            ),
            (self._space, *args),
        ).fetchall()
        for i, name, name_key, alias_keys, merged in rows:
            if i in self.names:
                continue
            self.names[i], self.forms[i] = name, (name_key, list(alias_keys))
            if merged:
                self.merged.add(i)
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
        held = self.holders.get(key, set()) - self.merged
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


def form_lookup(conn: psycopg.Connection, realm: str, space: str) -> tuple[dict[str, int], dict[int, str]]:
    """``(lookup, names)`` of the whole space, as :class:`EntityForms` with ``everything`` gives them
    (``lookup``: identity key → the entity a triple endpoint with it resolves to — the lowest-id entity
    holding it as its canonical name, else the lowest-id one holding it as an alias, merged fragments never;
    ``names``: id → canonical name of every entity not merged), decided in SQL: a full relations run holds
    two plain dicts, not every entity's forms and holder sets (issue 30)."""
    fill_identity_keys(conn, realm, space)  # keys of entities a writer stored without them
    k, e = qualified(realm, "entity_keys"), qualified(realm, "entities")
    lookup = {
        str(key): int(i)
        for key, i in conn.execute(
            sql.SQL("""SELECT f.key, coalesce(min(f.id) FILTER (WHERE f.canonical), min(f.id))
                         FROM (SELECT k.name_key AS key, k.entity_id AS id, true AS canonical
                                 FROM {k} k JOIN {e} e ON e.space = k.space AND e.id = k.entity_id
                                WHERE k.space = %(space)s AND e.merged_into IS NULL
                               UNION ALL
                               SELECT a.key, k.entity_id, false
                                 FROM {k} k JOIN {e} e ON e.space = k.space AND e.id = k.entity_id
                                 CROSS JOIN LATERAL unnest(k.alias_keys) AS a(key)
                                WHERE k.space = %(space)s AND e.merged_into IS NULL) f
                        GROUP BY f.key""").format(k=k, e=e),
            {"space": space},
        ).fetchall()
    }
    names = {
        int(i): str(n)
        for i, n in conn.execute(
            sql.SQL("SELECT id, name FROM {} WHERE space = %s AND merged_into IS NULL").format(e), (space,)
        ).fetchall()
    }
    return lookup, names


def entity_forms(conn: psycopg.Connection, realm: str, space: str) -> EntityForms:
    """The :class:`EntityForms` of the whole space (dormant entities included)."""
    return EntityForms(conn, realm, space, everything=True)
