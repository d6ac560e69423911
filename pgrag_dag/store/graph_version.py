"""The data version of each space's graph (issue 26 item 2): DDL, triggers and the read.

``graph_writes (space, xid)`` holds, per space, one row for every committed transaction that changed
what the personalised-PageRank walk reads (:mod:`pgrag_dag.store.walk_graph`) or a community report is
built from: chunks added or removed (``documents``), mention edges (``doc_mentions``), entities added,
removed, made dormant or archived or renamed or re-typed or re-described (``entities``, ``entity_keys``),
relations added, removed, re-weighted (corroboration), superseded, made dormant, re-dated, re-typed or
re-described (``relations``). The communities stage records the version it read
(:func:`pgrag_dag.store.history.mark_checked`), so the community lag counts every write after it (issue
28: archival, dormancy, merges and attribute changes too). A query process caches the walk graph it
built keyed by the version it read in the same snapshot as the edges, so it never serves a graph older than
the state it reads, whatever other writers do (:class:`pgrag_dag.query.ppr.WalkCache`).

How the number is kept: the triggers call ``bump_graph_version(space)`` once per space and transaction
(a transaction-local setting remembers which spaces it already bumped), which appends one row
``(space, xid)`` to ``graph_writes``; the version a snapshot reads is how many rows of the space it sees.
Snapshots only grow — a later one sees every transaction an earlier one saw, and more — so two snapshots
reading the same count see the same committed writes of the space: one count is one committed state of its
graph. Appending takes no lock another writer waits for (an in-place counter row would serialise every
writer of the space until its commit, and could deadlock writers that do not hold the partition lock); the
cost is one small row per writing transaction and space, counted through an index. INSERT and DELETE are
caught by statement triggers over their transition tables (one pass over the rows written); UPDATE by row
triggers that fire only when a column the walk reads changed, so rewriting every vector (the embeddings
stage) bumps nothing.
A space never written since the table existed reads version 0.

Not the stages' data version (:func:`pgrag_dag.store.work_queue.data_version`): that one moves when an
index stage run changes what it holds, while deletion, retention and merges also write the graph outside
the stages; triggers see every write path.
"""

from __future__ import annotations

from collections.abc import Sequence

import psycopg
from psycopg import sql

from pgrag_dag.names import WILDCARD_SPACE, schema_for
from pgrag_dag.store.identifiers import qualified

BUMPED_SETTING = "pgrag.graph_bumped"
"""The transaction-local setting listing the spaces already bumped (``\\x1f``-delimited: no space name
holds a control character)."""

# (table, columns an UPDATE must change to matter to the walk, or "" when no UPDATE of the table does)
_WATCHED: tuple[tuple[str, str], ...] = (
    ("documents", "title"),
    ("doc_mentions", "chunk_id, entity_id"),
    ("entities", "name, aliases, dormant_since, archived_at, entity_type, description, merged_into"),
    ("entity_keys", "name_key, alias_keys"),
    (
        "relations",
        "source_id, target_id, predicate, weight, negated, payload, superseded_by, dormant_since, t_created, "
        "t_expired, description",
    ),
)

_DDL: tuple[str, ...] = (
    "DROP TABLE IF EXISTS {s}.graph_versions",  # schema version 18's counter row (see the module docstring)
    "DROP SEQUENCE IF EXISTS {s}.graph_version_seq",
    """CREATE TABLE IF NOT EXISTS {s}.graph_writes (
        space text NOT NULL,
        xid xid8 NOT NULL DEFAULT pg_current_xact_id())""",
    "CREATE INDEX IF NOT EXISTS graph_writes_space ON {s}.graph_writes (space)",
    """CREATE OR REPLACE FUNCTION {s}.bump_graph_version(p_space text) RETURNS void LANGUAGE plpgsql AS $f$
    DECLARE
        v_done text := coalesce(current_setting('pgrag.graph_bumped', true), '');
        v_mark text := chr(31) || p_space || chr(31);
    BEGIN
        IF position(v_mark IN v_done) > 0 THEN
            RETURN;
        END IF;
        INSERT INTO {s}.graph_writes (space) VALUES (p_space);
        PERFORM set_config('pgrag.graph_bumped', v_done || v_mark, true);
    END $f$""",
    """CREATE OR REPLACE FUNCTION {s}.graph_version_new() RETURNS trigger LANGUAGE plpgsql AS $f$
    BEGIN
        PERFORM {s}.bump_graph_version(x.space) FROM (SELECT DISTINCT space FROM new_rows) AS x;
        RETURN NULL;
    END $f$""",
    """CREATE OR REPLACE FUNCTION {s}.graph_version_old() RETURNS trigger LANGUAGE plpgsql AS $f$
    BEGIN
        PERFORM {s}.bump_graph_version(x.space) FROM (SELECT DISTINCT space FROM old_rows) AS x;
        RETURN NULL;
    END $f$""",
    """CREATE OR REPLACE FUNCTION {s}.graph_version_row() RETURNS trigger LANGUAGE plpgsql AS $f$
    BEGIN
        PERFORM {s}.bump_graph_version(OLD.space);
        IF NEW.space IS DISTINCT FROM OLD.space THEN
            PERFORM {s}.bump_graph_version(NEW.space);
        END IF;
        RETURN NULL;
    END $f$""",
)


def create_graph_versions(conn: psycopg.Connection, realm: str) -> None:
    """Create ``graph_writes``, its index, functions and triggers in ``realm``'s schema, inside the
    caller's DDL transaction (:func:`pgrag_dag.store.schema.init_realm`). Idempotent."""
    s = sql.Identifier(schema_for(realm))
    for stmt in _DDL:
        conn.execute(sql.SQL(stmt).format(s=s))
    for table, columns in _WATCHED:
        t = qualified(realm, table)
        triggers = [
            ("gv_ins", "AFTER INSERT", "REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT", "new"),
            ("gv_del", "AFTER DELETE", "REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT", "old"),
        ]
        changed = " OR ".join(f"OLD.{c} IS DISTINCT FROM NEW.{c}" for c in columns.split(", "))
        triggers.append(
            (
                "gv_upd",
                f"AFTER UPDATE OF {columns}, space",
                f"FOR EACH ROW WHEN ({changed} OR OLD.space IS DISTINCT FROM NEW.space)",
                "row",
            )
        )
        for suffix, when, rest, fn in triggers:
            name = sql.Identifier(f"{table}_{suffix}")
            conn.execute(sql.SQL("DROP TRIGGER IF EXISTS {n} ON {t}").format(n=name, t=t))
            conn.execute(
                sql.SQL("CREATE TRIGGER {n} " + when + " ON {t} " + rest + " EXECUTE FUNCTION {f}()").format(
                    n=name, t=t, f=qualified(realm, f"graph_version_{fn}")
                )
            )


def read_version(conn: psycopg.Connection, realm: str, space: str) -> tuple[tuple[str, int], ...] | None:
    """The graph version of ``space`` as the caller's snapshot sees it: ``((space, writes),)`` — 0 for a
    space never written since the table existed; for the wildcard ``"*"`` every written space of the realm,
    sorted. ``None`` for a realm whose schema predates the table (schema version < 19, until its next index
    run upgrades it): nothing can be cached for it. Compare results for equality only (see the module
    docstring)."""
    table = qualified(realm, "graph_writes")
    present = conn.execute(
        "SELECT to_regclass(%s) IS NOT NULL", (f"{schema_for(realm)}.graph_writes",)
    ).fetchone()
    if not (present and present[0]):
        return None
    if space == WILDCARD_SPACE:
        rows = conn.execute(
            sql.SQL("SELECT space, count(*) FROM {} GROUP BY space ORDER BY space").format(table)
        ).fetchall()
        return tuple((str(s), int(n)) for s, n in rows)
    row = conn.execute(sql.SQL("SELECT count(*) FROM {} WHERE space = %s").format(table), (space,)).fetchone()
    return ((space, int(row[0]) if row else 0),)


def bumped_spaces(conn: psycopg.Connection) -> Sequence[str]:
    """The spaces the caller's open transaction has bumped so far (for tests and diagnostics)."""
    row = conn.execute("SELECT coalesce(current_setting(%s, true), '')", (BUMPED_SETTING,)).fetchone()
    return [s for s in str(row[0] if row else "").split(chr(31)) if s]
