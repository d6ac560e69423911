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

``graph_touched (space, xid, entity_ids, chunk_ids)`` says which vertices each of those transactions
touched (issue 30 item 6): the entities and chunks at either end of every edge it added, removed or
changed, and every entity or chunk it added, removed or changed. A query process holding the graph of an
earlier version patches it by re-reading only the edges at those vertices
(:meth:`pgrag_dag.query.walk_matrix.WalkGraph.patched`) instead of reading the whole graph again. A
statement writing more than :data:`TOUCHED_MAX` rows, or a transaction updating more than
:data:`TOUCHED_ROWS_MAX` rows one by one, records ``NULL`` lists instead — too many to patch: the reader
reads the whole graph. Only the rows of the last :data:`TOUCHED_KEPT` writes of a space are kept (each
write prunes the older ones); a reader further behind finds a write without rows and reads the whole graph.

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

import numpy as np
import psycopg
from psycopg import sql

from pgrag_dag.names import WILDCARD_SPACE, schema_for
from pgrag_dag.store.identifiers import qualified

BUMPED_SETTING = "pgrag.graph_bumped"
"""The transaction-local setting listing the spaces already bumped (``\\x1f``-delimited: no space name
holds a control character)."""

TOUCHED_MAX = 50_000
"""A statement writing more rows than this records ``NULL`` lists (too many to patch)."""
TOUCHED_ROWS_MAX = 5_000
"""A transaction's row-by-row updates of one space recorded before it records ``NULL`` lists instead."""
TOUCHED_KEPT = 200
"""The writes per space whose ``graph_touched`` rows are kept."""

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
    "DROP INDEX IF EXISTS {s}.graph_writes_space",
    "CREATE INDEX IF NOT EXISTS graph_writes_space_xid ON {s}.graph_writes (space, xid)",
    """CREATE TABLE IF NOT EXISTS {s}.graph_touched (
        space text NOT NULL,
        xid xid8 NOT NULL DEFAULT pg_current_xact_id(),
        entity_ids bigint[],
        chunk_ids bigint[])""",
    "CREATE INDEX IF NOT EXISTS graph_touched_space_xid ON {s}.graph_touched (space, xid)",
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
        DELETE FROM {s}.graph_touched AS t
         WHERE t.space = p_space
           AND t.xid < (SELECT w.xid FROM {s}.graph_writes AS w WHERE w.space = p_space
                         ORDER BY w.xid DESC OFFSET {kept} LIMIT 1);
    END $f$""",
    """CREATE OR REPLACE FUNCTION {s}.touch_graph_row(p_space text, p_entities bigint[], p_chunks bigint[])
    RETURNS void LANGUAGE plpgsql AS $f$
    DECLARE
        v_key text := 'pgrag.touched_' || md5(p_space);
        v_rows integer := coalesce(nullif(current_setting(v_key, true), ''), '0')::integer;
    BEGIN
        IF v_rows > {rows_max} THEN
            RETURN;
        ELSIF v_rows = {rows_max} THEN
            INSERT INTO {s}.graph_touched (space) VALUES (p_space);  -- NULL lists: too many to patch
        ELSE
            INSERT INTO {s}.graph_touched (space, entity_ids, chunk_ids)
            VALUES (p_space, p_entities, p_chunks);
        END IF;
        PERFORM set_config(v_key, (v_rows + 1)::text, true);
    END $f$""",
)

# per table: the (entity, chunk) id expressions of one row; a table with two entity ends lists two
_TOUCHES: dict[str, tuple[tuple[str, str], ...]] = {
    "documents": (("NULL", "{r}.id"),),
    "doc_mentions": (("{r}.entity_id", "{r}.chunk_id"),),
    "entities": (("{r}.id", "NULL"),),
    "entity_keys": (("{r}.entity_id", "NULL"),),
    "relations": (("{r}.source_id", "NULL"), ("{r}.target_id", "NULL")),
}


def _ids(touches: tuple[tuple[str, str], ...], kind: int, row: str) -> str:
    """``row``'s entity (``kind`` 0) or chunk (1) ids as a ``bigint[]`` expression."""
    return "ARRAY[" + ", ".join(t[kind].format(r=row) for t in touches) + "]::bigint[]"


_LISTED = """
            INSERT INTO {{s}}.graph_touched (space, entity_ids, chunk_ids)
            SELECT space, coalesce(array_agg(DISTINCT e) FILTER (WHERE e IS NOT NULL), '{{{{}}}}'),
                   coalesce(array_agg(DISTINCT c) FILTER (WHERE c IS NOT NULL), '{{{{}}}}')
              FROM ({union}) AS x GROUP BY space;"""


def _statement_function(realm: str, rows: str) -> sql.Composed:
    """The statement trigger over the transition table ``rows``: bump each space it holds and record the
    vertices it touched, one ``graph_touched`` row per space (``NULL`` lists above :data:`TOUCHED_MAX`
    rows: not worth listing, nor patching)."""
    branches = []
    for table, touches in _TOUCHES.items():
        union = " UNION ALL ".join(
            f"SELECT r.space, ({e.format(r='r')})::bigint AS e, ({c.format(r='r')})::bigint AS c "
            f"FROM {rows} AS r"
            for e, c in touches
        )
        listed = _LISTED.format(union=union)
        branches.append(f"IF TG_TABLE_NAME = '{table}' THEN {listed}\n        END IF;")
    kind = "new" if rows == "new_rows" else "old"
    body = f"""CREATE OR REPLACE FUNCTION {{s}}.graph_version_{kind}() RETURNS trigger LANGUAGE plpgsql AS $f$
    BEGIN
        PERFORM {{s}}.bump_graph_version(x.space) FROM (SELECT DISTINCT space FROM {rows}) AS x;
        IF (SELECT count(*) FROM {rows}) > {TOUCHED_MAX} THEN  -- NULL lists: too many to patch
            INSERT INTO {{s}}.graph_touched (space) SELECT DISTINCT space FROM {rows};
            RETURN NULL;
        END IF;
        {" ".join(branches)}
        RETURN NULL;
    END $f$"""
    return sql.SQL(body).format(s=sql.Identifier(schema_for(realm)))


def _row_function(realm: str) -> sql.Composed:
    """The row trigger of an UPDATE that changed what the walk reads: bump the row's space (both, when it
    moved) and record the vertices of its old and new values (``touch_graph_row``)."""
    branches = []
    for table, t in _TOUCHES.items():
        old_e, old_c, new_e, new_c = (
            _ids(t, 0, "OLD"),
            _ids(t, 1, "OLD"),
            _ids(t, 0, "NEW"),
            _ids(t, 1, "NEW"),
        )
        branches.append(f"""IF TG_TABLE_NAME = '{table}' THEN
            IF NEW.space IS DISTINCT FROM OLD.space THEN
                PERFORM {{s}}.touch_graph_row(
                    OLD.space, array_remove({old_e}, NULL), array_remove({old_c}, NULL));
                PERFORM {{s}}.touch_graph_row(
                    NEW.space, array_remove({new_e}, NULL), array_remove({new_c}, NULL));
            ELSE
                PERFORM {{s}}.touch_graph_row(NEW.space,
                    array_remove({old_e} || {new_e}, NULL), array_remove({old_c} || {new_c}, NULL));
            END IF;
        END IF;""")
    body = f"""CREATE OR REPLACE FUNCTION {{s}}.graph_version_row() RETURNS trigger LANGUAGE plpgsql AS $f$
    BEGIN
        PERFORM {{s}}.bump_graph_version(OLD.space);
        IF NEW.space IS DISTINCT FROM OLD.space THEN
            PERFORM {{s}}.bump_graph_version(NEW.space);
        END IF;
        {" ".join(branches)}
        RETURN NULL;
    END $f$"""
    return sql.SQL(body).format(s=sql.Identifier(schema_for(realm)))


def create_graph_versions(conn: psycopg.Connection, realm: str) -> None:
    """Create ``graph_writes``, its index, functions and triggers in ``realm``'s schema, inside the
    caller's DDL transaction (:func:`pgrag_dag.store.schema.init_realm`). Idempotent."""
    s = sql.Identifier(schema_for(realm))
    for stmt in _DDL:
        conn.execute(sql.SQL(stmt).format(s=s, kept=TOUCHED_KEPT, rows_max=TOUCHED_ROWS_MAX))
    for function in (_statement_function(realm, "new_rows"), _statement_function(realm, "old_rows")):
        conn.execute(function)
    conn.execute(_row_function(realm))
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


def read_version(conn: psycopg.Connection, realm: str, space: str) -> tuple[tuple[str, int, int], ...] | None:
    """The graph version of ``space`` as the caller's snapshot sees it: ``((space, writes, last xid),)`` —
    ``(space, 0, 0)`` for a space never written since the table existed; for the wildcard ``"*"`` every
    written space of the realm, sorted. The last transaction id tells apart two states with as many writes
    (a space deleted and written again). ``None`` for a realm whose schema predates the table (schema
    version < 19, until its next index run upgrades it): nothing can be cached for it. Compare results for
    equality only (see the module docstring)."""
    table = qualified(realm, "graph_writes")
    present = conn.execute(
        "SELECT to_regclass(%s) IS NOT NULL", (f"{schema_for(realm)}.graph_writes",)
    ).fetchone()
    if not (present and present[0]):
        return None
    if space == WILDCARD_SPACE:
        rows = conn.execute(
            sql.SQL("SELECT space, count(*), max(xid)::text FROM {} GROUP BY space ORDER BY space").format(
                table
            )
        ).fetchall()
        return tuple((str(s), int(n), int(x)) for s, n, x in rows)
    row = conn.execute(
        sql.SQL("SELECT count(*), coalesce(max(xid)::text, '0') FROM {} WHERE space = %s").format(table),
        (space,),
    ).fetchone()
    return ((space, int(row[0]), int(row[1])) if row else (space, 0, 0),)


def writes(conn: psycopg.Connection, realm: str, space: str) -> frozenset[int]:
    """The transaction ids of every write of ``space``'s graph the caller's snapshot sees."""
    rows = conn.execute(
        sql.SQL("SELECT xid::text FROM {} WHERE space = %s").format(qualified(realm, "graph_writes")),
        (space,),
    ).fetchall()
    return frozenset(int(r[0]) for r in rows)


def touched(
    conn: psycopg.Connection, realm: str, space: str, xids: Sequence[int]
) -> tuple[np.ndarray, np.ndarray] | None:
    """The entity and chunk ids (int64, sorted, distinct) that the writes ``xids`` of ``space`` touched, or
    ``None`` when one of them cannot say — too many to list, or its rows pruned (see the module docstring):
    then only reading the whole graph is right."""
    if not xids:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    rows = conn.execute(
        sql.SQL("""
            SELECT t.xid::text, t.entity_ids, t.chunk_ids FROM {} AS t
             WHERE t.space = %s AND t.xid = ANY(%s::text[]::xid8[])""").format(
            qualified(realm, "graph_touched")
        ),
        (space, [str(x) for x in xids]),
    ).fetchall()
    said = {int(x) for x, _, _ in rows}
    if said != set(xids) or any(e is None or c is None for _, e, c in rows):
        return None
    ents = [np.asarray(e, dtype=np.int64) for _, e, _ in rows]
    chunks = [np.asarray(c, dtype=np.int64) for _, _, c in rows]
    return np.unique(np.concatenate(ents)), np.unique(np.concatenate(chunks))


def bumped_spaces(conn: psycopg.Connection) -> Sequence[str]:
    """The spaces the caller's open transaction has bumped so far (for tests and diagnostics)."""
    row = conn.execute("SELECT coalesce(current_setting(%s, true), '')", (BUMPED_SETTING,)).fetchone()
    return [s for s in str(row[0] if row else "").split(chr(31)) if s]
