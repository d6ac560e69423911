"""SQL for incremental indexing (issue 15): what each stage still owes its space, and its data version.

Two tables in every realm schema:

- ``stage_work`` — the work queue: one row per (space, stage, kind, item) an upstream write made stale,
  ``kind`` ``chunk`` (item = a chunk id, which may be gone: a removed chunk is work too) or ``entity``
  (item = an entity id). Triggers fill it, whatever path wrote (a stage, ``pgrag delete``, retention):

  ===================================  =========================================================
  write                                enqueued for
  ===================================  =========================================================
  raw_extractions inserted / updated   ``gated_triples`` (their chunks)
  gate_decisions inserted / deleted    ``resolved_entities`` and ``relations`` (their chunks; a
                                       removed chunk's decisions go by cascade, so removals too)
  doc_mentions deleted (not by the     ``resolved_entities`` (their entities: dormancy)
  resolution stage itself)
  entities archived / unarchived       ``resolved_entities`` (dormancy)
  entities inserted, renamed, aliased, ``relations`` (their entities: triple endpoints resolve anew)
  merged into another
  documents re-ordered (doc_order)     ``relations`` (their chunks: supersession compares order),
                                       unless only shifted (relative order kept)
  ===================================  =========================================================

  A stage reads its rows (:func:`take`), does the work, and deletes exactly the rows it read
  (:func:`finish`) in the transaction that writes its result — a row enqueued meanwhile by a concurrent
  writer stays for the next run; a failed run leaves its rows queued (resumable).
- ``stage_state`` — per (space, stage): the ``fingerprint`` of the settings the stage's stored result
  was computed under (a change forces a full recompute), ``version`` (bumped each run that changed what the
  stage holds) and ``epoch`` (the transaction that created the row), from which :func:`data_version` is
  derived — no whole-table hashing. A stage with no state row (a new space, a realm built before issue 15)
  runs a full recompute first.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from pgrag_dag.names import schema_for
from pgrag_dag.store.identifiers import qualified

WORK_DDL: tuple[str, ...] = (
    """CREATE TABLE IF NOT EXISTS {s}.stage_work (
        id bigserial PRIMARY KEY,
        space text NOT NULL,
        stage text NOT NULL,
        kind text NOT NULL CHECK (kind IN ('chunk', 'entity')),
        item bigint NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS stage_work_space_stage ON {s}.stage_work (space, stage)",
    """CREATE TABLE IF NOT EXISTS {s}.stage_state (
        space text NOT NULL,
        stage text NOT NULL,
        fingerprint text NOT NULL,
        version bigint NOT NULL DEFAULT 0,
        epoch text NOT NULL DEFAULT pg_current_xact_id()::text,
        rows_changed bigint NOT NULL DEFAULT 0,
        report jsonb,
        updated_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (space, stage)
    )""",
    # the relations stage finds the edges a removed or re-extracted chunk supported
    "CREATE INDEX IF NOT EXISTS relations_chunk_ids ON {s}.relations USING gin (chunk_ids)",
    "CREATE INDEX IF NOT EXISTS gate_decisions_chunk ON {s}.gate_decisions (chunk_id)",
    "CREATE INDEX IF NOT EXISTS resolution_rejections_chunk ON {s}.resolution_rejections (chunk_id)",
)

_ENQUEUE = (
    "INSERT INTO {{s}}.stage_work (space, stage, kind, item)"
    " SELECT DISTINCT space, {stage}, {kind}, {col} FROM {rows}"
)

WORK_FUNCTIONS: tuple[str, ...] = (
    """CREATE OR REPLACE FUNCTION {s}.work_raw() RETURNS trigger LANGUAGE plpgsql AS $f$
    BEGIN """
    + _ENQUEUE.format(stage="'gated_triples'", kind="'chunk'", col="chunk_id", rows="new_rows")
    + """;
        RETURN NULL;
    END $f$""",
    """CREATE OR REPLACE FUNCTION {s}.work_decisions() RETURNS trigger LANGUAGE plpgsql AS $f$
    BEGIN
        IF TG_OP = 'INSERT' THEN
            """
    + _ENQUEUE.format(
        stage="s.stage",
        kind="'chunk'",
        col="chunk_id",
        rows="new_rows, (VALUES ('resolved_entities'), ('relations')) AS s(stage)",
    )
    + """;
        ELSE
            """
    + _ENQUEUE.format(
        stage="s.stage",
        kind="'chunk'",
        col="chunk_id",
        rows="old_rows, (VALUES ('resolved_entities'), ('relations')) AS s(stage)",
    )
    + """;
        END IF;
        RETURN NULL;
    END $f$""",
    # the resolution stage rewrites mentions itself and decides dormancy for what it rewrote
    """CREATE OR REPLACE FUNCTION {s}.work_mentions() RETURNS trigger LANGUAGE plpgsql AS $f$
    BEGIN
        IF coalesce(current_setting('pgrag.stage', true), '') <> 'resolved_entities' THEN
            """
    + _ENQUEUE.format(stage="'resolved_entities'", kind="'entity'", col="entity_id", rows="old_rows")
    + """;
        END IF;
        RETURN NULL;
    END $f$""",
    """CREATE OR REPLACE FUNCTION {s}.work_entities_new() RETURNS trigger LANGUAGE plpgsql AS $f$
    BEGIN """
    + _ENQUEUE.format(stage="'relations'", kind="'entity'", col="id", rows="new_rows")
    + """;
        RETURN NULL;
    END $f$""",
    """CREATE OR REPLACE FUNCTION {s}.work_entities_changed() RETURNS trigger LANGUAGE plpgsql AS $f$
    BEGIN
        IF OLD.name IS DISTINCT FROM NEW.name OR OLD.aliases IS DISTINCT FROM NEW.aliases
           OR OLD.merged_into IS DISTINCT FROM NEW.merged_into THEN
            INSERT INTO {s}.stage_work (space, stage, kind, item) VALUES (NEW.space, 'relations', 'entity',
                NEW.id);
        END IF;
        IF OLD.archived_at IS DISTINCT FROM NEW.archived_at THEN
            INSERT INTO {s}.stage_work (space, stage, kind, item) VALUES (NEW.space, 'resolved_entities',
                'entity', NEW.id);
        END IF;
        RETURN NULL;
    END $f$""",
    # a shift that keeps every document's order relative to the others changes no supersession
    # (documents._reorder)
    """CREATE OR REPLACE FUNCTION {s}.work_documents_order() RETURNS trigger LANGUAGE plpgsql AS $f$
    BEGIN
        IF coalesce(current_setting('pgrag.order_shift', true), '') <> 'on' THEN
            INSERT INTO {s}.stage_work (space, stage, kind, item) VALUES (NEW.space, 'relations', 'chunk',
                NEW.id);
        END IF;
        RETURN NULL;
    END $f$""",
)

WORK_TRIGGERS: tuple[tuple[str, str, str, str], ...] = (
    # (trigger name, table, timing and event, level, condition and function)
    (
        "raw_extractions_work_ins",
        "raw_extractions",
        "AFTER INSERT",
        "REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION {s}.work_raw()",
    ),
    (
        "raw_extractions_work_upd",
        "raw_extractions",
        "AFTER UPDATE",
        "REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION {s}.work_raw()",
    ),
    (
        "gate_decisions_work_ins",
        "gate_decisions",
        "AFTER INSERT",
        "REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION {s}.work_decisions()",
    ),
    (
        "gate_decisions_work_del",
        "gate_decisions",
        "AFTER DELETE",
        "REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION {s}.work_decisions()",
    ),
    (
        "doc_mentions_work_del",
        "doc_mentions",
        "AFTER DELETE",
        "REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION {s}.work_mentions()",
    ),
    (
        "entities_work_ins",
        "entities",
        "AFTER INSERT",
        "REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION {s}.work_entities_new()",
    ),
    (
        "entities_work_upd",
        "entities",
        "AFTER UPDATE OF name, aliases, archived_at, merged_into",
        "FOR EACH ROW WHEN (OLD.name IS DISTINCT FROM NEW.name OR OLD.aliases IS DISTINCT FROM NEW.aliases "
        "OR OLD.archived_at IS DISTINCT FROM NEW.archived_at "
        "OR OLD.merged_into IS DISTINCT FROM NEW.merged_into) EXECUTE FUNCTION {s}.work_entities_changed()",
    ),
    (
        "documents_work_order",
        "documents",
        "AFTER UPDATE OF doc_order",
        "FOR EACH ROW WHEN (OLD.doc_order IS DISTINCT FROM NEW.doc_order)"
        " EXECUTE FUNCTION {s}.work_documents_order()",
    ),
)


def create_work(conn: psycopg.Connection, schema: str) -> None:
    """Create the work queue, the stage state and their triggers in realm schema ``schema``, inside the
    caller's DDL transaction (:func:`pgrag_dag.store.schema.init_realm`). Idempotent. A realm built before
    them has no state rows, so each stage's next run is a full recompute (and clears the queue)."""
    s = sql.Identifier(schema)
    for stmt in (*WORK_DDL, *WORK_FUNCTIONS):
        conn.execute(sql.SQL(stmt).format(s=s))
    for name, tab, when, rest in WORK_TRIGGERS:
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


def fingerprint(settings: Any) -> str:
    """A 16-hex-digit SHA-256 of ``settings`` (anything JSON can write, keys sorted; other values by
    ``str``)."""
    return hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:16]


_json_string = json.encoder.encode_basestring_ascii


def fingerprint_strings(values: Sequence[str]) -> str:
    """:func:`fingerprint` of a list of strings, the same digits, written without ``json.dumps``' set-up per
    call (a third of the time: the chunks stage prints 50k documents a run, issue 30)."""
    return hashlib.sha256(f"[{', '.join(map(_json_string, values))}]".encode()).hexdigest()[:16]


@dataclass
class Work:
    """What :func:`take` read for one stage of one space: ``full`` (no state, another fingerprint, or a
    full recompute was asked for), the queued ``chunks`` and ``entities`` (item ids), and the queue row
    ids to delete when the work is written (``queued``)."""

    full: bool
    chunks: set[int] = field(default_factory=set)
    entities: set[int] = field(default_factory=set)
    queued: list[int] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        """Nothing to do: not full and nothing queued."""
        return not self.full and not self.queued


def take(
    conn: psycopg.Connection, realm: str, space: str, stage: str, print_: str, *, full: bool = False
) -> Work:
    """The work ``stage`` owes ``space``: a full recompute when ``full`` is asked for, when the stage has
    no state row or its stored fingerprint differs from ``print_`` (the stage's settings changed since its
    result was computed); else the queued chunk and entity ids."""
    row = conn.execute(
        sql.SQL("SELECT fingerprint FROM {} WHERE space = %s AND stage = %s").format(
            qualified(realm, "stage_state")
        ),
        (space, stage),
    ).fetchone()
    rows = conn.execute(
        sql.SQL("SELECT id, kind, item FROM {} WHERE space = %s AND stage = %s").format(
            qualified(realm, "stage_work")
        ),
        (space, stage),
    ).fetchall()
    work = Work(full=full or row is None or row[0] != print_, queued=[r[0] for r in rows])
    for _, kind, item in rows:
        (work.chunks if kind == "chunk" else work.entities).add(int(item))
    return work


def finish(
    conn: psycopg.Connection,
    realm: str,
    space: str,
    stage: str,
    work: Work,
    print_: str,
    *,
    changed: int,
    report: dict[str, Any] | None = None,
) -> None:
    """Record a stage's run in the caller's write transaction: delete the queue rows it read (``work``; a
    stage without a queue passes ``Work(full=False)``), store ``print_`` and ``report`` (what a later run with
    nothing to do reports again, e.g. the quality measurements), and bump the version when ``changed`` (rows
    the run changed) is positive or the fingerprint changed."""
    queue = qualified(realm, "stage_work")
    if work.queued:
        conn.execute(sql.SQL("DELETE FROM {} WHERE id = ANY(%s)").format(queue), (work.queued,))
    conn.execute(
        sql.SQL("""INSERT INTO {} AS s (space, stage, fingerprint, version, rows_changed, report)
                            VALUES (%s, %s, %s, 1, %s, %s)
                            ON CONFLICT (space, stage) DO UPDATE SET fingerprint = EXCLUDED.fingerprint,
                                version = s.version + (EXCLUDED.rows_changed > 0
                                    OR s.fingerprint <> EXCLUDED.fingerprint)::int,
                                rows_changed = EXCLUDED.rows_changed, report = coalesce(EXCLUDED.report,
                                    s.report),
                                updated_at = now()""").format(qualified(realm, "stage_state")),
        (space, stage, print_, changed, Jsonb(report) if report is not None else None),
    )


def report(conn: psycopg.Connection, realm: str, space: str, stage: str) -> dict[str, Any] | None:
    """The ``report`` the stage's last run stored with :func:`finish`, or ``None``."""
    row = conn.execute(
        sql.SQL("SELECT report FROM {} WHERE space = %s AND stage = %s").format(
            qualified(realm, "stage_state")
        ),
        (space, stage),
    ).fetchone()
    return None if row is None else row[0]


def data_version(conn: psycopg.Connection, realm: str, space: str, stage: str) -> str:
    """The stage's data version for ``space``: 16 hex digits from its state row's epoch and version (equal
    as long as the stage changed nothing it holds; a realm dropped and rebuilt starts another epoch).
    ``""`` when the stage has no state yet."""
    row = conn.execute(
        sql.SQL("SELECT epoch, version FROM {} WHERE space = %s AND stage = %s").format(
            qualified(realm, "stage_state")
        ),
        (space, stage),
    ).fetchone()
    if row is None:
        return ""
    return hashlib.sha256(f"{realm}|{space}|{stage}|{row[0]}|{row[1]}".encode()).hexdigest()[:16]


def mark_stage(conn: psycopg.Connection, stage: str) -> None:
    """Tell the queue triggers which stage writes in this transaction (``SET LOCAL pgrag.stage``), so the
    writes a stage makes for its own work do not queue work for itself."""
    conn.execute("SELECT set_config('pgrag.stage', %s, true)", (stage,))


def stage_runs(conn: psycopg.Connection, realm: str, space: str) -> list[dict[str, Any]]:
    """Each stage's last recorded run for ``space``, by stage name: ``stage``, ``updated_at`` (when
    :func:`finish` last ran for it), ``version`` (runs that changed what it holds), ``rows_changed`` (by that
    last run). ``[]`` for a space no stage ran for, or a realm built before the stage state."""
    if conn.execute("SELECT to_regclass(%s)", (f'"{schema_for(realm)}"."stage_state"',)).fetchone() == (
        None,
    ):
        return []
    rows = conn.execute(
        sql.SQL(
            "SELECT stage, updated_at, version, rows_changed FROM {} WHERE space = %s ORDER BY stage"
        ).format(qualified(realm, "stage_state")),
        (space,),
    ).fetchall()
    return [dict(zip(("stage", "updated_at", "version", "rows_changed"), r)) for r in rows]
