"""The append-only belief history of a realm (paper §5.3, §6.1; issue 14): DDL, triggers and writes.

Belief time is kept as history, never rewritten. Three tables per realm schema, each carrying ``space``:

- ``belief_log``: one row per change of belief state, written once and never updated — ``seq``
  (bigserial), ``kind`` (``relation`` | ``entity`` | ``document``), ``object_id`` (the relation or
  entity id; ``NULL`` for documents), ``doc_key`` (documents), ``event``, ``superseded_by`` (for
  ``superseded``: the superseding relation), ``at`` (database clock, the writing transaction's
  ``now()``) and ``xid`` (the writing transaction, ``xid8``: what the change feed's snapshot
  watermarks compare). Events: relations ``asserted`` | ``superseded`` | ``restored`` | ``dormant`` |
  ``revived`` | ``deleted``; entities ``created`` | ``dormant`` | ``revived`` | ``archived`` |
  ``unarchived`` | ``deleted``; documents ``added`` | ``replaced`` | ``removed`` | ``renamed`` (schema
  version 17, issue 16: ``doc_key`` is the new key, ``renamed_from`` the one it had — a document re-keyed in
  place, its chunks, extractions and graph kept; readers of a document's history follow the chain).
- ``relation_belief``: the intervals ``[believed_from, believed_to)`` during which a relation was in the
  graph (not dormant), with its ``state`` then — ``current`` or ``superseded`` (by ``superseded_by``).
  ``believed_to`` is ``NULL`` while the interval is open; closing it is the one write ever allowed.
- ``entity_belief``: the intervals during which an entity was live (neither dormant nor archived).
- ``graph_checked``: when a stage last read the whole graph it summarises (the communities stage, built or
  found unchanged): the change feed's community lag counts only relation events after it.
- ``documents_removed``: every chunk row ever deleted from ``documents`` (a document replaced or removed),
  with its text, vector, ``t_created``, ``t_removed`` and the entities it mentioned (``entity_ids``), so a
  belief-time read can return the chunks the system had at that instant.

Each change is stamped with the row's own stamp for it — ``t_created`` for an assertion (none: believed
from ``-infinity``, always known, §5.3), ``t_expired`` for a supersession, ``dormant_since`` /
``archived_at`` for dormancy and archiving — and ``now()`` for a restoration or revival; the engine writes
every stamp as ``now()``, so in practice each is the writing transaction's database clock.

The logs and intervals are written by triggers on ``relations`` and ``entities`` — statement-level over the
new rows for INSERT, and for UPDATE a row trigger fired only when ``dormant_since``, ``superseded_by`` or
``archived_at`` changed (so rewriting every vector costs nothing) — and a row trigger archiving deleted
chunks, so no write path can change a belief state without recording it, and an UPDATE that leaves the
state as it was records nothing (re-indexing unchanged input moves nothing).
Document events are written by :func:`log_documents` from the chunk sync. UPDATE, DELETE and TRUNCATE of the
logs are refused by triggers, except closing an open interval — and explicit deletion
(:func:`forgetting`, issue 14 item 4), which is never the default.

A relation row's own ``t_created`` / ``t_expired`` / ``superseded_by`` / ``dormant_since`` describe its
present state (the present-time query path reads only them, through partial indexes); belief-time reads
(``as_believed_at``) read the intervals (:mod:`pgrag_dag.store.retrieval`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime

import psycopg
from psycopg import sql

from pgrag_dag.names import schema_for
from pgrag_dag.store.identifiers import qualified

RELATION_EVENTS = ("asserted", "superseded", "restored", "dormant", "revived", "deleted")
ENTITY_EVENTS = ("created", "dormant", "revived", "archived", "unarchived", "deleted")
DOCUMENT_EVENTS = ("added", "replaced", "removed", "renamed")
FORGET_SETTING = "pgrag.forget"
"""A transaction-local setting (``SET LOCAL pgrag.forget = 'on'``) that lets explicit deletion remove
history."""

_RELATION_STATE = (
    "CASE WHEN {x}.dormant_since IS NOT NULL THEN NULL"
    " WHEN {x}.superseded_by IS NOT NULL THEN 'superseded' ELSE 'current' END"
)


def _relation_from_stamps(rows: str) -> tuple[str, ...]:
    """The history of relation ``rows`` (a table or transition table, aliased ``n``) reconstructed from
    their stamps: current from ``t_created`` (none: ``-infinity``) until ``t_expired`` (superseded;
    none: ``t_created``) or ``dormant_since``; superseded from then until ``dormant_since``. Used for
    realms built before the history (``rows`` then selects those with no ``belief_log`` row yet, so the
    log, written last, marks them done) and for every INSERT (the engine inserts current rows only)."""
    born = "COALESCE(n.t_created, '-infinity')"
    expired = f"greatest({born}, COALESCE(n.t_expired, n.t_created, '-infinity'))"
    ended = (
        f"CASE WHEN n.superseded_by IS NOT NULL THEN {expired}"
        f" WHEN n.dormant_since IS NOT NULL THEN greatest({born}, n.dormant_since) END"
    )
    return (
        f"""INSERT INTO {{s}}.relation_belief (space, relation_id, state, superseded_by, believed_from,
            believed_to)
            SELECT n.space, n.id, 'current', NULL, {born}, {ended} FROM {rows} AS n""",
        f"""INSERT INTO {{s}}.relation_belief (space, relation_id, state, superseded_by, believed_from,
            believed_to)
            SELECT n.space, n.id, 'superseded', n.superseded_by, {expired},
                   CASE WHEN n.dormant_since IS NOT NULL THEN greatest({expired}, n.dormant_since) END
              FROM {rows} AS n WHERE n.superseded_by IS NOT NULL""",
        f"""INSERT INTO {{s}}.belief_log (space, kind, object_id, event, superseded_by, at)
            SELECT space, 'relation', id, event, sup, at FROM (
                SELECT n.space, n.id, 'asserted' AS event, NULL::bigint AS sup, {born} AS at, 0 AS k
                    FROM {rows} AS n
                UNION ALL SELECT n.space, n.id, 'superseded', n.superseded_by, {expired}, 1 FROM {rows} AS n
                 WHERE n.superseded_by IS NOT NULL
                UNION ALL SELECT n.space, n.id, 'dormant', NULL, greatest({born}, n.dormant_since), 2
                 FROM {rows} AS n
                 WHERE n.dormant_since IS NOT NULL) x ORDER BY id, k""",
    )


def _entity_from_stamps(rows: str) -> tuple[str, ...]:
    """The history of entity ``rows`` (aliased ``n``) from their stamps: live from ``t_created`` until
    ``dormant_since``; ``created`` (and ``dormant``/``archived``) logged."""
    return (
        f"""INSERT INTO {{s}}.entity_belief (space, entity_id, believed_from, believed_to)
            SELECT n.space, n.id, n.t_created, CASE WHEN n.dormant_since IS NOT NULL
              THEN greatest(n.t_created, n.dormant_since) END
              FROM {rows} AS n""",
        f"""INSERT INTO {{s}}.belief_log (space, kind, object_id, event, at)
            SELECT space, 'entity', id, event, at FROM (
                SELECT n.space, n.id, 'created' AS event, n.t_created AS at, 0 AS k FROM {rows} AS n
                UNION ALL SELECT n.space, n.id, CASE WHEN n.archived_at IS NOT NULL THEN 'archived'
                                 ELSE 'dormant' END,
                                 greatest(n.t_created, n.dormant_since), 1 FROM {rows} AS n
                                     WHERE n.dormant_since IS NOT NULL
            ) x ORDER BY id, k""",
    )


def _deleted_trigger(table: str, kind: str) -> str:
    """The statement trigger function logging a ``deleted`` event per row an explicit deletion removes from
    ``table``."""
    return f"""CREATE OR REPLACE FUNCTION {{s}}.{table}_history_delete() RETURNS trigger LANGUAGE plpgsql
    AS $f$
    BEGIN
        INSERT INTO {{s}}.belief_log (space, kind, object_id, event) SELECT o.space, '{kind}', o.id, 'deleted'
          FROM old_rows o ORDER BY o.id;
        RETURN NULL;
    END $f$"""


# Each entry is one statement (function bodies contain semicolons); {s} is the realm schema.
HISTORY_DDL: tuple[str, ...] = (
    """ALTER TABLE {s}.entities ADD COLUMN IF NOT EXISTS archived_at timestamptz""",
    """CREATE TABLE IF NOT EXISTS {s}.belief_log (
        seq bigserial PRIMARY KEY,
        space text NOT NULL,
        kind text NOT NULL CHECK (kind IN ('relation', 'entity', 'document')),
        object_id bigint,
        doc_key text,
        event text NOT NULL,
        superseded_by bigint,
        at timestamptz NOT NULL DEFAULT now(),
        xid xid8 NOT NULL DEFAULT pg_current_xact_id(),
        CHECK ((kind = 'document') = (doc_key IS NOT NULL AND object_id IS NULL))
    )""",
    # issue 16: a document renamed in place ('renamed') names the key it had; NULL for every other event
    """ALTER TABLE {s}.belief_log ADD COLUMN IF NOT EXISTS renamed_from text""",
    """CREATE INDEX IF NOT EXISTS belief_log_space_xid ON {s}.belief_log (space, xid)""",
    """CREATE INDEX IF NOT EXISTS belief_log_object ON {s}.belief_log (kind, object_id)""",
    """CREATE TABLE IF NOT EXISTS {s}.relation_belief (
        id bigserial PRIMARY KEY,
        space text NOT NULL,
        relation_id bigint NOT NULL,
        state text NOT NULL CHECK (state IN ('current', 'superseded')),
        superseded_by bigint,
        believed_from timestamptz NOT NULL,
        believed_to timestamptz,
        CHECK (believed_to IS NULL OR believed_to >= believed_from)
    )""",
    """CREATE INDEX IF NOT EXISTS relation_belief_relation ON {s}.relation_belief (relation_id, believed_from)
        INCLUDE (believed_to, state)""",
    """CREATE UNIQUE INDEX IF NOT EXISTS relation_belief_open ON {s}.relation_belief (relation_id)
       WHERE believed_to IS NULL""",
    """CREATE TABLE IF NOT EXISTS {s}.entity_belief (
        id bigserial PRIMARY KEY,
        space text NOT NULL,
        entity_id bigint NOT NULL,
        believed_from timestamptz NOT NULL,
        believed_to timestamptz,
        CHECK (believed_to IS NULL OR believed_to >= believed_from)
    )""",
    """CREATE INDEX IF NOT EXISTS entity_belief_entity ON {s}.entity_belief (entity_id, believed_from)
       INCLUDE (believed_to)""",
    """CREATE UNIQUE INDEX IF NOT EXISTS entity_belief_open ON {s}.entity_belief (entity_id)
       WHERE believed_to IS NULL""",
    """CREATE TABLE IF NOT EXISTS {s}.documents_removed (
        id bigint PRIMARY KEY,
        space text NOT NULL,
        doc_key text NOT NULL,
        chunk_index integer NOT NULL,
        title text NOT NULL,
        source text NOT NULL,
        doc_order integer NOT NULL,
        text text NOT NULL,
        content_hash text NOT NULL,
        metadata jsonb NOT NULL DEFAULT '{{}}',
        embedding {v},
        embed_hash text,
        embed_fallback text,
        fallback_embedding vector,
        entity_ids bigint[] NOT NULL DEFAULT '{{}}',
        t_created timestamptz NOT NULL,
        t_removed timestamptz NOT NULL DEFAULT now()
    )""",
    # when a stage last read the whole graph it summarises (the communities stage: built or found unchanged),
    # so the community lag counts only what changed after that read
    """CREATE TABLE IF NOT EXISTS {s}.graph_checked (
        space text NOT NULL,
        stage text NOT NULL,
        checked_at timestamptz NOT NULL,
        PRIMARY KEY (space, stage)
    )""",
    # issue 28: the graph data version (pgrag_dag.store.graph_version) the stage read, in the snapshot it
    # read the graph in: the lag counts every graph write after it, with no clock race
    "ALTER TABLE {s}.graph_checked ADD COLUMN IF NOT EXISTS graph_version bigint",
    """CREATE INDEX IF NOT EXISTS documents_removed_belief ON {s}.documents_removed (space, t_created,
       t_removed)""",
    """CREATE INDEX IF NOT EXISTS documents_removed_entities ON {s}.documents_removed
       USING gin (entity_ids)""",
    # ---- migration: a realm built before the history reconstructs it once from the rows' stamps
    *_relation_from_stamps(
        "(SELECT * FROM {s}.relations r WHERE NOT EXISTS (SELECT 1 FROM {s}.belief_log l"
        " WHERE l.kind = 'relation' AND l.object_id = r.id))"
    ),
    *_entity_from_stamps(
        "(SELECT * FROM {s}.entities e WHERE NOT EXISTS (SELECT 1 FROM {s}.belief_log l"
        " WHERE l.kind = 'entity' AND l.object_id = e.id))"
    ),
    """INSERT INTO {s}.belief_log (space, kind, doc_key, event, at)
       SELECT d.space, 'document', d.doc_key, 'added', min(d.t_created) FROM {s}.documents d
        WHERE NOT EXISTS (SELECT 1 FROM {s}.belief_log l WHERE l.kind = 'document' AND l.space = d.space)
        GROUP BY d.space, d.doc_key""",
    # ---- relations: every change of belief state (INSERT: a statement trigger over the new rows)
    """CREATE OR REPLACE FUNCTION {s}.relations_history_insert() RETURNS trigger LANGUAGE plpgsql AS $f$
    BEGIN
        """
    + ";\n        ".join(_relation_from_stamps("new_rows"))
    + """;
        RETURN NULL;
    END $f$""",
    # an UPDATE changes belief state on few rows (the embeddings stage rewrites every row's vector and must
    # not pay for it): a row trigger, fired only when dormant_since or superseded_by changed (see _TRIGGERS)
    """CREATE OR REPLACE FUNCTION {s}.relations_history_update() RETURNS trigger LANGUAGE plpgsql AS $f$
    DECLARE
        v_old text := """
    + _RELATION_STATE.format(x="OLD")
    + """;
        v_new text := """
    + _RELATION_STATE.format(x="NEW")
    + """;
        v_at timestamptz := CASE WHEN NEW.dormant_since IS NOT NULL THEN NEW.dormant_since
                                 WHEN NEW.superseded_by IS NOT NULL THEN COALESCE(NEW.t_expired, now())
                                     ELSE now() END;
    BEGIN
        IF v_old IS NOT DISTINCT FROM v_new
           AND NOT (v_new = 'superseded' AND OLD.superseded_by IS DISTINCT FROM NEW.superseded_by) THEN
            RETURN NULL;
        END IF;
        UPDATE {s}.relation_belief b SET believed_to = greatest(b.believed_from, v_at)
         WHERE b.relation_id = NEW.id AND b.believed_to IS NULL;
        IF v_new IS NOT NULL THEN
            INSERT INTO {s}.relation_belief (space, relation_id, state, superseded_by, believed_from)
            VALUES (NEW.space, NEW.id, v_new, CASE WHEN v_new = 'superseded' THEN NEW.superseded_by END,
                    greatest(v_at, (SELECT max(x.believed_from) FROM {s}.relation_belief x
                        WHERE x.relation_id = NEW.id)));
        END IF;
        INSERT INTO {s}.belief_log (space, kind, object_id, event, superseded_by, at)
        VALUES (NEW.space, 'relation', NEW.id,
                CASE WHEN v_new IS NULL THEN 'dormant' WHEN v_old IS NULL THEN 'revived'
                     WHEN v_new = 'superseded' THEN 'superseded' ELSE 'restored' END,
                CASE WHEN v_new = 'superseded' THEN NEW.superseded_by END, v_at);
        RETURN NULL;
    END $f$""",
    _deleted_trigger("relations", "relation"),
    # ---- entities: live = not dormant (archived entities are dormant too)
    """CREATE OR REPLACE FUNCTION {s}.entities_history_insert() RETURNS trigger LANGUAGE plpgsql AS $f$
    BEGIN
        """
    + ";\n        ".join(_entity_from_stamps("new_rows"))
    + """;
        RETURN NULL;
    END $f$""",
    """CREATE OR REPLACE FUNCTION {s}.entities_history_update() RETURNS trigger LANGUAGE plpgsql AS $f$
    DECLARE
        v_live_old boolean := OLD.dormant_since IS NULL;
        v_live_new boolean := NEW.dormant_since IS NULL;
        v_at timestamptz := CASE WHEN NEW.dormant_since IS NULL THEN now() ELSE COALESCE(NEW.archived_at,
            NEW.dormant_since) END;
    BEGIN
        IF v_live_old = v_live_new AND (OLD.archived_at IS NULL) = (NEW.archived_at IS NULL) THEN
            RETURN NULL;
        END IF;
        IF v_live_old AND NOT v_live_new THEN
            UPDATE {s}.entity_belief b SET believed_to = greatest(b.believed_from, v_at)
             WHERE b.entity_id = NEW.id AND b.believed_to IS NULL;
        ELSIF v_live_new AND NOT v_live_old THEN
            INSERT INTO {s}.entity_belief (space, entity_id, believed_from)
            VALUES (NEW.space, NEW.id, greatest(v_at, (SELECT max(x.believed_to) FROM {s}.entity_belief x
                WHERE x.entity_id = NEW.id)));
        END IF;
        INSERT INTO {s}.belief_log (space, kind, object_id, event, at)
        VALUES (NEW.space, 'entity', NEW.id,
                CASE WHEN OLD.archived_at IS NULL AND NEW.archived_at IS NOT NULL THEN 'archived'
                     WHEN OLD.archived_at IS NOT NULL AND NEW.archived_at IS NULL THEN 'unarchived'
                     WHEN v_live_new THEN 'revived' ELSE 'dormant' END, v_at);
        RETURN NULL;
    END $f$""",
    _deleted_trigger("entities", "entity"),
    # ---- chunks: a deleted chunk is archived with the entities it mentioned (unless explicitly forgotten)
    """CREATE OR REPLACE FUNCTION {s}.documents_archive() RETURNS trigger LANGUAGE plpgsql AS $f$
    BEGIN
        IF COALESCE(current_setting('"""
    + FORGET_SETTING
    + """', true), '') <> 'on' THEN
            INSERT INTO {s}.documents_removed (id, space, doc_key, chunk_index, title, source, doc_order,
                                               text, content_hash, metadata, embedding, embed_hash,
                                               embed_fallback, fallback_embedding, entity_ids, t_created)
            VALUES (OLD.id, OLD.space, OLD.doc_key, OLD.chunk_index, OLD.title, OLD.source, OLD.doc_order,
                    OLD.text, OLD.content_hash, OLD.metadata, OLD.embedding, OLD.embed_hash,
                    OLD.embed_fallback, OLD.fallback_embedding,
                    COALESCE((SELECT array_agg(m.entity_id ORDER BY m.entity_id) FROM {s}.doc_mentions m
                               WHERE m.chunk_id = OLD.id), '{{}}'), OLD.t_created)
            ON CONFLICT (id) DO NOTHING;
        END IF;
        RETURN OLD;
    END $f$""",
    # ---- the logs are append-only: only an open interval may be closed; only explicit deletion removes
    """CREATE OR REPLACE FUNCTION {s}.history_append_only() RETURNS trigger LANGUAGE plpgsql AS $f$
    BEGIN
        IF TG_OP = 'UPDATE' AND TG_TABLE_NAME IN ('relation_belief', 'entity_belief')
           AND (to_jsonb(OLD) ->> 'believed_to') IS NULL AND (to_jsonb(NEW) ->> 'believed_to') IS NOT NULL
           AND (to_jsonb(NEW) - 'believed_to') = (to_jsonb(OLD) - 'believed_to') THEN
            RETURN NEW;
        END IF;
        IF TG_OP IN ('DELETE', 'TRUNCATE') AND COALESCE(current_setting('"""
    + FORGET_SETTING
    + """', true), '') = 'on' THEN
            RETURN OLD;
        END IF;
        RAISE EXCEPTION 'the belief history is append-only: % on %.% refused',
            TG_OP, TG_TABLE_SCHEMA, TG_TABLE_NAME
            USING ERRCODE = 'insufficient_privilege';
    END $f$""",
)

_TRIGGERS: tuple[tuple[str, str, str, str], ...] = (
    # (trigger name, table, timing and event, level, condition and function)
    (
        "relations_history_ins",
        "relations",
        "AFTER INSERT",
        "REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT"
        " EXECUTE FUNCTION {s}.relations_history_insert()",
    ),
    (
        "relations_history_upd",
        "relations",
        "AFTER UPDATE OF dormant_since, superseded_by",
        "FOR EACH ROW WHEN "
        "(OLD.dormant_since IS DISTINCT FROM NEW.dormant_since"
        " OR OLD.superseded_by IS DISTINCT FROM NEW.superseded_by) "
        "EXECUTE FUNCTION {s}.relations_history_update()",
    ),
    (
        "relations_history_del",
        "relations",
        "AFTER DELETE",
        "REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT"
        " EXECUTE FUNCTION {s}.relations_history_delete()",
    ),
    (
        "entities_history_ins",
        "entities",
        "AFTER INSERT",
        "REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION {s}.entities_history_insert()",
    ),
    (
        "entities_history_upd",
        "entities",
        "AFTER UPDATE OF dormant_since, archived_at",
        "FOR EACH ROW WHEN "
        "(OLD.dormant_since IS DISTINCT FROM NEW.dormant_since"
        " OR OLD.archived_at IS DISTINCT FROM NEW.archived_at) "
        "EXECUTE FUNCTION {s}.entities_history_update()",
    ),
    (
        "entities_history_del",
        "entities",
        "AFTER DELETE",
        "REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION {s}.entities_history_delete()",
    ),
    (
        "documents_archive",
        "documents",
        "BEFORE DELETE",
        "FOR EACH ROW EXECUTE FUNCTION {s}.documents_archive()",
    ),
    (
        "belief_log_append_only",
        "belief_log",
        "BEFORE UPDATE OR DELETE",
        "FOR EACH ROW EXECUTE FUNCTION {s}.history_append_only()",
    ),
    (
        "belief_log_no_truncate",
        "belief_log",
        "BEFORE TRUNCATE",
        "FOR EACH STATEMENT EXECUTE FUNCTION {s}.history_append_only()",
    ),
    (
        "relation_belief_no_truncate",
        "relation_belief",
        "BEFORE TRUNCATE",
        "FOR EACH STATEMENT EXECUTE FUNCTION {s}.history_append_only()",
    ),
    (
        "entity_belief_no_truncate",
        "entity_belief",
        "BEFORE TRUNCATE",
        "FOR EACH STATEMENT EXECUTE FUNCTION {s}.history_append_only()",
    ),
    (
        "relation_belief_append_only",
        "relation_belief",
        "BEFORE UPDATE OR DELETE",
        "FOR EACH ROW EXECUTE FUNCTION {s}.history_append_only()",
    ),
    (
        "entity_belief_append_only",
        "entity_belief",
        "BEFORE UPDATE OR DELETE",
        "FOR EACH ROW EXECUTE FUNCTION {s}.history_append_only()",
    ),
)


def create_history(conn: psycopg.Connection, schema: str, vector_type: sql.Composable) -> None:
    """Run :data:`HISTORY_DDL` and (re)create the triggers in realm schema ``schema`` (``vector_type``: the
    realm's ``vector(d)``, the archived chunks' embedding column —
    :data:`pgrag_dag.store.embedding_columns.ARCHIVE_TABLES` are retyped and re-embedded with the realm's
    vectors),
    inside the caller's DDL transaction (:func:`pgrag_dag.store.schema.init_realm`). Idempotent: a realm built
    before the history gets its intervals and log reconstructed once from the rows' ``t_created`` /
    ``t_expired`` / ``dormant_since`` (relations without ``t_created`` are believed from ``-infinity``: always
    known, §5.3)."""
    s = sql.Identifier(schema)
    for stmt in HISTORY_DDL:
        conn.execute(sql.SQL(stmt).format(s=s, v=vector_type))
    for name, tab, when, rest in _TRIGGERS:
        conn.execute(
            sql.SQL("DROP TRIGGER IF EXISTS {n} ON {s}.{t}").format(
                n=sql.Identifier(name), s=s, t=sql.Identifier(tab)
            )
        )
        conn.execute(
            sql.SQL("CREATE TRIGGER {n} " + when + " ON {s}.{t} " + rest).format(
                n=sql.Identifier(name), s=s, t=sql.Identifier(tab)
            )
        )


def log_documents(conn: psycopg.Connection, realm: str, space: str, events: Sequence[tuple[str, str]]) -> int:
    """Append one ``belief_log`` row per ``(doc_key, event)`` (event in :data:`DOCUMENT_EVENTS`, ``renamed``
    aside: :func:`log_renames`), in the caller's transaction. Returns how many were written. Raises
    :class:`ValueError` for an unknown event."""
    bad = sorted({e for _, e in events} - set(DOCUMENT_EVENTS) | ({"renamed"} & {e for _, e in events}))
    if bad:
        raise ValueError(f"unknown document event(s) {bad}; expected one of {DOCUMENT_EVENTS}")
    if not events:
        return 0
    with conn.cursor() as cur:
        cur.executemany(
            sql.SQL("INSERT INTO {} (space, kind, doc_key, event) VALUES (%s, 'document', %s, %s)").format(
                qualified(realm, "belief_log")
            ),
            [(space, k, e) for k, e in events],
        )
    return len(events)


def log_renames(conn: psycopg.Connection, realm: str, space: str, renames: Sequence[tuple[str, str]]) -> int:
    """Append one ``renamed`` ``belief_log`` row per ``(old_key, new_key)`` (doc_key = the new key,
    ``renamed_from`` = the old), in the caller's transaction. Returns how many were written."""
    with conn.cursor() as cur:
        cur.executemany(
            sql.SQL(
                "INSERT INTO {} (space, kind, doc_key, event, renamed_from)"
                " VALUES (%s, 'document', %s, 'renamed', %s)"
            ).format(qualified(realm, "belief_log")),
            [(space, new, old) for old, new in renames],
        )
    return len(renames)


def before_added(conn: psycopg.Connection, realm: str, space: str, doc_key: str) -> datetime | None:
    """The last instant before ``doc_key`` was last added to ``space``: the ``at`` of its latest
    ``belief_log`` event ``added`` — under ``doc_key`` or a key it was ``renamed`` from (issue 16) — (the
    database clock of the chunk sync that added it) minus one microsecond, PostgreSQL's resolution — a
    ``timestamptz`` as a timezone-aware :class:`datetime`. ``None`` when the document was never added (or
    the realm has no history). Reads ``belief_log``."""
    if not table_exists(conn, realm, "belief_log"):
        return None
    row = conn.execute(
        sql.SQL(
            """WITH RECURSIVE keys(k) AS (
               SELECT %(key)s::text
               UNION SELECT l.renamed_from FROM {t} l JOIN keys ON l.doc_key = keys.k
                      WHERE l.space = %(space)s AND l.kind = 'document' AND l.event = 'renamed')
           SELECT max(at) - interval '1 microsecond' FROM {t}
            WHERE space = %(space)s AND kind = 'document' AND doc_key IN (SELECT k FROM keys)
                AND event = 'added'"""
        ).format(t=qualified(realm, "belief_log")),
        {"space": space, "key": doc_key},
    ).fetchone()
    return None if row is None else row[0]


def graph_clock(conn: psycopg.Connection) -> datetime:
    """The database clock now (``clock_timestamp()``): take it before a stage reads the graph, record it
    with :func:`mark_checked` after the stage succeeded."""
    row = conn.execute("SELECT clock_timestamp()").fetchone()
    assert row is not None
    return row[0]


def mark_checked(
    conn: psycopg.Connection,
    realm: str,
    space: str,
    stage: str,
    at: datetime,
    graph_version: int | None = None,
) -> None:
    """Record that ``stage`` of ``space`` read the whole graph at ``at`` (:func:`graph_clock`) — at graph
    data version ``graph_version`` (:func:`pgrag_dag.store.graph_version.read_version`, read in the same
    snapshot as the graph) — and is up to date with it: built from it, or found it unchanged. In the
    caller's transaction; a later stamp or version never moves back."""
    conn.execute(
        sql.SQL("""INSERT INTO {} (space, stage, checked_at, graph_version) VALUES (%s, %s, %s, %s)
                            ON CONFLICT (space, stage) DO UPDATE SET checked_at = greatest({}.checked_at,
                                EXCLUDED.checked_at),
                                graph_version = greatest({}.graph_version, EXCLUDED.graph_version)""").format(
            qualified(realm, "graph_checked"),
            sql.Identifier("graph_checked"),
            sql.Identifier("graph_checked"),
        ),
        (space, stage, at, graph_version),
    )


def table_exists(conn: psycopg.Connection, realm: str, table: str) -> bool:
    """Whether realm schema ``pgrag_<realm>`` has ``table`` (a realm never indexed, or from before a table,
    has not)."""
    row = conn.execute("SELECT to_regclass(%s)", (f'"{schema_for(realm)}"."{table}"',)).fetchone()
    return row is not None and row[0] is not None


@contextmanager
def forgetting(conn: psycopg.Connection) -> Iterator[None]:
    """Inside the caller's transaction, allow explicit deletion to remove history rows and to delete chunks
    without archiving them (``SET LOCAL`` :data:`FORGET_SETTING`); reset on exit. Never the default."""
    conn.execute(sql.SQL("SELECT set_config({}, 'on', true)").format(sql.Literal(FORGET_SETTING)))
    try:
        yield
    finally:
        conn.execute(sql.SQL("SELECT set_config({}, '', true)").format(sql.Literal(FORGET_SETTING)))
