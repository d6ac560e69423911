"""SQL of the graph-quality measurement (paper §8.6, Table 6; issue 15 item 2) and of ``entity_keys``, the
identity keys it reads.

``entity_keys`` (space, entity_id, name_key, alias_keys) holds :func:`pgrag_dag.gate_rules.identity_key` of
each entity's canonical name and of each of its aliases (in alias order) — keys only Python computes (NFC,
invisible characters, quote marks, Unicode whitespace and case). A narrow table of its own: storing keys never
rewrites a wide entity row and its HNSW entry. A row exists only while it is current: it cascades away with
its entity, and the ``entity_keys_stale`` trigger deletes it when an ``UPDATE`` changes the entity's name or
aliases; that trigger and ``entity_keys_new`` (on insert) name the entity in ``entity_keys_owed``, the queue
:func:`fill_identity_keys` reads (issue 30). :func:`fill_identity_keys` stores the missing rows — after every
graph write of entities
(:func:`pgrag_dag.store.graph.write_entities`), before each measurement (whichever writer wrote an entity),
and over the whole realm when :func:`create_identity_keys` upgrades it.

:func:`quality_rows` reads a space's Table-6 aggregates from indexes and narrow tables; Python decides on
the few rows SQL only narrows down (:func:`pgrag_dag.graph.quality.measure_quality`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import sql

from pgrag_dag.gate_rules import identity_key
from pgrag_dag.names import schema_for
from pgrag_dag.store.identifiers import qualified

KEYS_DDL: tuple[str, ...] = (
    # the entities whose keys are owed (inserted, renamed, re-aliased), so that storing them reads these
    # rows, not every entity of the space (issue 30)
    """CREATE TABLE IF NOT EXISTS {s}.entity_keys_owed (
        id bigserial PRIMARY KEY, space text NOT NULL, entity_id bigint NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS entity_keys_owed_space ON {s}.entity_keys_owed (space, id)",
    # the pronoun check reads the names whose key starts with a pronoun or "the" (a few percent), not every
    # key of the space (issue 30)
    "CREATE INDEX IF NOT EXISTS entity_keys_head ON {s}.entity_keys (space, split_part(name_key, ' ', 1))",
    """CREATE OR REPLACE FUNCTION {s}.entity_keys_stale() RETURNS trigger LANGUAGE plpgsql AS $f$
    BEGIN
        DELETE FROM {s}.entity_keys WHERE space = NEW.space AND entity_id = NEW.id;
        INSERT INTO {s}.entity_keys_owed (space, entity_id) VALUES (NEW.space, NEW.id);
        RETURN NULL;
    END $f$""",
    """CREATE OR REPLACE FUNCTION {s}.entity_keys_new() RETURNS trigger LANGUAGE plpgsql AS $f$
    BEGIN
        INSERT INTO {s}.entity_keys_owed (space, entity_id) SELECT space, id FROM new_rows ORDER BY id;
        RETURN NULL;
    END $f$""",
    "DROP TRIGGER IF EXISTS entity_keys_new ON {s}.entities",
    """CREATE TRIGGER entity_keys_new AFTER INSERT ON {s}.entities REFERENCING NEW TABLE AS new_rows
       FOR EACH STATEMENT EXECUTE FUNCTION {s}.entity_keys_new()""",
    "DROP TRIGGER IF EXISTS entity_keys_stale ON {s}.entities",
    """CREATE TRIGGER entity_keys_stale AFTER UPDATE OF name, aliases ON {s}.entities FOR EACH ROW
       WHEN (OLD.name IS DISTINCT FROM NEW.name OR OLD.aliases IS DISTINCT FROM NEW.aliases)
       EXECUTE FUNCTION {s}.entity_keys_stale()""",
)
"""The trigger that keeps ``entity_keys`` current (the table itself is in the realm DDL of
:mod:`pgrag_dag.store.schema`)."""

FILL_BATCH = 10_000
"""Entities per batch of :func:`fill_identity_keys`."""

ODD_PREDICATE = sql.SQL(
    '(x.predicate <> lower(x.predicate COLLATE "C") OR octet_length(x.predicate) <> char_length(x.predicate))'
)
"""A predicate that is not lowercase ASCII — normalised predicates never are; the partial index
``relations_odd_predicate`` holds these relations."""


def identity_keys(name: str, aliases: Sequence[str]) -> tuple[str, list[str]]:
    """``(name_key, alias_keys)`` as ``entity_keys`` holds them: :func:`~pgrag_dag.gate_rules.identity_key` of
    the name and of each alias, in order."""
    return identity_key(name), [identity_key(a) for a in aliases]


def create_identity_keys(conn: psycopg.Connection, realm: str) -> int:
    """Create the ``entity_keys_stale`` trigger in realm ``realm`` and store every missing key row, inside the
    caller's DDL transaction (:func:`pgrag_dag.store.schema.init_realm`, which holds ``entities`` locked).
    Idempotent; returns how many rows it stored (every entity of a realm built before schema version 15,
    once)."""
    s = sql.Identifier(schema_for(realm))
    for stmt in KEYS_DDL:
        conn.execute(sql.SQL(stmt).format(s=s))
    stored = fill_identity_keys(conn, realm)
    if stored:  # the planner's first statistics of a filled table (autovacuum would take a while)
        conn.execute(sql.SQL("ANALYZE {}.entity_keys").format(s))
    return stored


ANALYZE_AFTER = 1000
"""Storing at least this many keys at once refreshes ``entity_keys``' planner statistics."""


def fill_identity_keys(
    conn: psycopg.Connection, realm: str, space: str | None = None, *, batch: int | None = None
) -> int:
    """Store the ``entity_keys`` row of every entity (of ``space``, or of the whole realm) that has none,
    ``batch`` entities (default :data:`FILL_BATCH`) at a time, in the caller's transaction — which holds the
    space's partition lock, or the realm's tables locked (no other writer stores the same rows). Returns how
    many rows it stored.

    For one space, the candidates are the entities ``entity_keys_owed`` names — every entity inserted,
    renamed or re-aliased since its keys were last stored, whatever path wrote it (the triggers of
    :data:`KEYS_DDL`) — so finding that none is missing reads an index of that queue, not the space
    (issue 30); their queue rows are deleted once read. Over the whole realm (an upgrade), every entity
    without keys."""
    if space is not None:
        return _fill_owed(conn, realm, space, batch or FILL_BATCH)
    e, k = qualified(realm, "entities"), qualified(realm, "entity_keys")
    scope = sql.SQL("") if space is None else sql.SQL("e.space = %(space)s AND ")
    missing = sql.SQL("""SELECT e.space, e.id FROM {e} e WHERE {scope} NOT EXISTS (
                             SELECT 1 FROM {k} k WHERE k.space = e.space AND k.entity_id = e.id)
                          ORDER BY e.space, e.id LIMIT %(batch)s""").format(e=e, k=k, scope=scope)
    stored = 0
    while ids := [
        i for _, i in conn.execute(missing, {"space": space, "batch": batch or FILL_BATCH}).fetchall()
    ]:
        rows = conn.execute(
            sql.SQL("SELECT space, id, name, aliases FROM {} WHERE id = ANY(%s)").format(e), (ids,)
        ).fetchall()
        _copy_keys(conn, k, rows)
        stored += len(rows)
    if stored >= ANALYZE_AFTER:
        # a query links the question's names through these keys (pgrag_dag.store.walk_graph.link_keys):
        # without statistics the planner scans every key of the space per name (measured: 105 ms a query
        # on a fresh 10k-relation graph, 1 ms after ANALYZE), until autovacuum gets to the table
        conn.execute(sql.SQL("ANALYZE {}").format(k))
    return stored


def _fill_owed(conn: psycopg.Connection, realm: str, space: str, batch: int) -> int:
    """:func:`fill_identity_keys` of one space from ``entity_keys_owed``, ``batch`` queue rows at a time."""
    e, k, o = (qualified(realm, t) for t in ("entities", "entity_keys", "entity_keys_owed"))
    stored = 0
    while owed := conn.execute(
        sql.SQL("SELECT id, entity_id FROM {} WHERE space = %s ORDER BY id LIMIT %s").format(o),
        (space, batch),
    ).fetchall():
        rows = conn.execute(
            sql.SQL("""SELECT e.space, e.id, e.name, e.aliases FROM {e} e
                        WHERE e.space = %s AND e.id = ANY(%s) AND NOT EXISTS (
                              SELECT 1 FROM {k} k WHERE k.space = e.space AND k.entity_id = e.id)
                        ORDER BY e.id""").format(e=e, k=k),
            (space, sorted({i for _, i in owed})),
        ).fetchall()
        _copy_keys(conn, k, rows)
        conn.execute(sql.SQL("DELETE FROM {} WHERE id = ANY(%s)").format(o), ([i for i, _ in owed],))
        stored += len(rows)
    if stored >= ANALYZE_AFTER:  # see fill_identity_keys
        conn.execute(sql.SQL("ANALYZE {}").format(k))
    return stored


def _copy_keys(conn: psycopg.Connection, k: sql.Composable, rows: Sequence[tuple[Any, ...]]) -> None:
    """Store the ``entity_keys`` rows of ``rows`` (space, id, name, aliases)."""
    with (
        conn.cursor() as cur,
        cur.copy(sql.SQL("COPY {} (space, entity_id, name_key, alias_keys) FROM STDIN").format(k)) as copy,
    ):
        for sp, i, name, aliases in rows:
            copy.write_row((sp, i, *identity_keys(name, aliases)))


def quality_rows(
    conn: psycopg.Connection,
    realm: str,
    space: str,
    terms: Sequence[str],
    *,
    pronoun_heads: Sequence[str],
    examples: int,
    orphans: bool = True,
    counted_predicates: Sequence[tuple[str, int]] | None = None,
) -> dict[str, Any]:
    """What SQL settles of :func:`pgrag_dag.graph.quality.graph_quality` for one space whose ``entity_keys``
    are complete (:func:`fill_identity_keys`), read in the caller's transaction (under the space's partition
    lock: no writer changes it meanwhile).

    Returns ``entities`` (live), ``relations`` (live: not dormant, not superseded), ``distinct_predicates``
    and ``on_vocabulary`` (live relations whose predicate is one of ``terms``), ``orphan_entities`` (live
    entities no live relation touches; this and ``entities`` are ``None`` with ``orphans`` false: the caller
    keeps both by delta; with ``counted_predicates``, (predicate, current relations) kept by delta, the
    relations and predicates are taken from it); ``fragmented`` (how many live entities are named by an
    identity key whose first — lowest-id — live holder as an alias is another entity) and
    ``fragmented_examples`` (the
    names of the first ``examples`` ≥ 1 of them, by id); ``pronoun_candidates`` (the names, by id, of the live
    entities whose name key's first word is one of ``pronoun_heads`` — every pronominal name is among them,
    for the name gate to decide); and ``duplicate_candidates`` (source_id, target_id,
    predicate, negated) — every relation of the space, dormant and superseded included, sharing source,
    target and negation with one whose predicate is not lowercase ASCII: only such groups can hold two edges
    whose predicates lowercase alike (the unique index holds a predicate once per group), for the Python
    lowercasing to decide.
    """
    e, r, k = (qualified(realm, t) for t in ("entities", "relations", "entity_keys"))
    live_r = sql.SQL("r.space = %(space)s AND r.dormant_since IS NULL AND r.superseded_by IS NULL")
    live_k = sql.SQL("""k.space = %(space)s AND NOT EXISTS (SELECT 1 FROM {e} d WHERE d.space = k.space
                         AND d.id = k.entity_id AND d.dormant_since IS NOT NULL)""").format(e=e)
    args = {"space": space, "examples": examples, "heads": list(pronoun_heads)}

    def rows(query: str) -> list[tuple[Any, ...]]:
        return conn.execute(
            sql.SQL(query).format(e=e, r=r, k=k, live_r=live_r, live_k=live_k, odd=ODD_PREDICATE), args
        ).fetchall()

    per_predicate = (
        rows("SELECT r.predicate, count(*) FROM {r} r WHERE {live_r} GROUP BY r.predicate")
        if counted_predicates is None
        else counted_predicates
    )
    # the one aggregate that reads every live entity: an incremental run keeps it by delta instead
    # (pgrag_dag.store.tallies)
    ((entities, orphan_count),) = (
        [(None, None)]
        if not orphans
        else rows("""
        WITH live AS MATERIALIZED (SELECT k.entity_id FROM {k} k WHERE {live_k})
        SELECT (SELECT count(*) FROM live),
               (SELECT count(*) FROM live l WHERE NOT EXISTS (SELECT 1 FROM {r} r WHERE {live_r}
                                              AND r.source_id = l.entity_id)
                                              AND NOT EXISTS (SELECT 1 FROM {r} r WHERE {live_r}
                                                  AND r.target_id = l.entity_id))""")
    )
    fragmented = rows("""
        WITH live AS MATERIALIZED (SELECT k.entity_id, k.name_key, k.alias_keys FROM {k} k WHERE {live_k}),
             owner AS (SELECT a.key, min(l.entity_id) AS entity_id FROM live l
                        CROSS JOIN LATERAL unnest(l.alias_keys) AS a(key)
                        WHERE l.alias_keys <> '{{}}' GROUP BY a.key),
             fragment AS (SELECT v.entity_id, count(*) OVER () AS n FROM live v JOIN owner o
                           ON o.key = v.name_key
                           WHERE o.entity_id <> v.entity_id ORDER BY v.entity_id LIMIT %(examples)s)
        SELECT e.name, f.n FROM fragment f JOIN {e} e ON e.id = f.entity_id ORDER BY f.entity_id""")
    pronouns = rows("""
        SELECT e.name FROM {k} k JOIN {e} e ON e.id = k.entity_id
         WHERE {live_k} AND split_part(k.name_key, ' ', 1) = ANY(%(heads)s) ORDER BY k.entity_id""")
    duplicates = rows("""
        SELECT r.source_id, r.target_id, r.predicate, r.negated FROM {r} r
         WHERE r.space = %(space)s AND (r.source_id, r.target_id, r.negated) IN (
               SELECT x.source_id, x.target_id, x.negated FROM {r} x WHERE x.space = %(space)s AND {odd})""")
    vocabulary = set(terms)
    return {
        "entities": entities,
        "relations": sum(n for _, n in per_predicate),
        "distinct_predicates": len(per_predicate),
        "on_vocabulary": sum(n for p, n in per_predicate if p in vocabulary),
        "orphan_entities": orphan_count,
        "fragmented": fragmented[0][1] if fragmented else 0,
        "fragmented_examples": [n for n, _ in fragmented],
        "pronoun_candidates": [n for (n,) in pronouns],
        "duplicate_candidates": duplicates,
    }
