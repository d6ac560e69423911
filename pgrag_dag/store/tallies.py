"""The graph's counts kept by delta (issue 30): what :func:`pgrag_dag.store.relations.graph_counts` reports
without reading the space.

``graph_tallies`` (space, entities, entities_dormant, relations, relations_dormant, mentions, negated,
with_validity, superseded) holds signed deltas: triggers on ``entities``, ``relations`` and ``doc_mentions``
append one row per statement that inserts or deletes rows (summed over the statement's transition table)
and one row per updated row whose contribution changed (an entity made dormant or revived; a relation made
dormant, revived, superseded, restored, negated or given a validity) — whatever path wrote (a stage,
``pgrag delete``, retention, purge, a foreign-key cascade). A space's counts are the sums of its rows: a
read costs the rows appended since the last compaction, not the space. ``negated``, ``with_validity`` and
``superseded`` count among the live (not dormant) relations, as :func:`recount` does.

Append-only, like ``graph_writes`` (:mod:`pgrag_dag.store.graph_version`): a counter row updated in place
would serialise every writer of the space until its commit. :func:`compact` folds a space's rows into one
(under the partition lock, in one statement, so a row a concurrent writer appends meanwhile stays); a full
run of the relations stage replaces them with a recount (:func:`reset`), which also mends a space whose
rows were written before the triggers existed — and suspends the triggers for its own transaction
(:func:`suspend`; they cost a fifth to a third more on bulk inserts of entities and relations). When the
table is created, every space's recount is its first row (the triggers exist before it in the same DDL
transaction: ``CREATE TRIGGER`` waits for the writers in flight, and a later writer's rows fire them).
"""

from __future__ import annotations

import psycopg
from psycopg import sql

from pgrag_dag.names import schema_for
from pgrag_dag.store.identifiers import qualified

KEYS = (
    "entities",
    "entities_dormant",
    "relations",
    "relations_dormant",
    "mentions",
    "negated",
    "with_validity",
    "superseded",
)
"""The counts, in :func:`pgrag_dag.store.relations.graph_counts`' order."""
COLUMNS = (*KEYS, "orphans")
"""Every column of ``graph_tallies``: :data:`KEYS` and ``orphans`` — the live entities no current (live,
not superseded) relation names, the ``orphan_entities`` of the graph-quality check (§8.6), kept through
``entity_degree``."""
CURRENT = "dormant_since IS NULL AND superseded_by IS NULL"
"""A current relation: the ones the graph-quality check and the walk read."""

_ENTITY = "count(*) FILTER (WHERE dormant_since IS NULL), count(*) FILTER (WHERE dormant_since IS NOT NULL)"
_RELATION = """count(*) FILTER (WHERE dormant_since IS NULL),
    count(*) FILTER (WHERE dormant_since IS NOT NULL),
    count(*) FILTER (WHERE dormant_since IS NULL AND negated),
    count(*) FILTER (WHERE dormant_since IS NULL
                       AND (valid_from_key IS NOT NULL OR valid_to_key IS NOT NULL)),
    count(*) FILTER (WHERE dormant_since IS NULL AND superseded_by IS NOT NULL)"""
_COLUMNS = {
    "entities": "entities, entities_dormant",
    "relations": "relations, relations_dormant, negated, with_validity, superseded",
    "doc_mentions": "mentions",
}
_COUNTED = {"entities": _ENTITY, "relations": _RELATION, "doc_mentions": "count(*)"}


def _statement_function(table: str, rows: str, sign: str) -> str:
    """A statement trigger's function: the signed counts of the transition table ``rows``, per space."""
    counts = ", ".join(f"{sign}{c.strip()}" for c in _split(_COUNTED[table]))
    return f"""CREATE OR REPLACE FUNCTION {{s}}.tally_{table}_{rows}() RETURNS trigger LANGUAGE plpgsql AS $f$
    BEGIN
        IF current_setting('pgrag.tallies', true) = 'recount' THEN RETURN NULL; END IF;
        INSERT INTO {{s}}.graph_tallies (space, {_COLUMNS[table]})
        SELECT space, {counts} FROM {rows} GROUP BY space;
        RETURN NULL;
    END $f$"""


def _split(counts: str) -> list[str]:
    """The comma-separated aggregates of ``counts`` (commas inside parentheses kept)."""
    out, depth, cur = [], 0, ""
    for ch in counts:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    return [*out, cur]


_ROW_FUNCTIONS = (
    """CREATE OR REPLACE FUNCTION {s}.tally_entities_row() RETURNS trigger LANGUAGE plpgsql AS $f$
    BEGIN
        IF current_setting('pgrag.tallies', true) = 'recount' THEN RETURN NULL; END IF;
        INSERT INTO {s}.graph_tallies (space, entities, entities_dormant, orphans)
        SELECT NEW.space, sum(sg * (d IS NULL)::int), sum(sg * (d IS NOT NULL)::int),
               CASE WHEN EXISTS (SELECT 1 FROM {s}.entity_degree g WHERE g.space = NEW.space
                                    AND g.entity_id = NEW.id AND g.degree <> 0) THEN 0
                    ELSE sum(sg * (d IS NULL)::int) END
          FROM (VALUES (1, NEW.dormant_since), (-1, OLD.dormant_since)) AS x(sg, d);
        RETURN NULL;
    END $f$""",
    """CREATE OR REPLACE FUNCTION {s}.tally_relations_row() RETURNS trigger LANGUAGE plpgsql AS $f$
    BEGIN
        IF current_setting('pgrag.tallies', true) = 'recount' THEN RETURN NULL; END IF;
        INSERT INTO {s}.graph_tallies (space, relations, relations_dormant, negated, with_validity,
                                       superseded)
        SELECT NEW.space, sum(sg * (d IS NULL)::int), sum(sg * (d IS NOT NULL)::int),
               sum(sg * (d IS NULL AND n)::int),
               sum(sg * (d IS NULL AND (f IS NOT NULL OR t IS NOT NULL))::int),
               sum(sg * (d IS NULL AND b IS NOT NULL)::int)
          FROM (VALUES (1, NEW.dormant_since, NEW.negated, NEW.valid_from_key, NEW.valid_to_key,
                        NEW.superseded_by),
                       (-1, OLD.dormant_since, OLD.negated, OLD.valid_from_key, OLD.valid_to_key,
                        OLD.superseded_by)) AS x(sg, d, n, f, t, b);
        RETURN NULL;
    END $f$""",
)

_ORPHAN_FUNCTIONS = (
    # an entity's current relations changed by delta: its orphan status flips where its degree crosses 0
    """CREATE OR REPLACE FUNCTION {s}.degree_add(p_space text, p_entity bigint, p_delta int) RETURNS void
    LANGUAGE plpgsql AS $f$
    DECLARE
        v_new int;
    BEGIN
        INSERT INTO {s}.entity_degree AS g (space, entity_id, degree) VALUES (p_space, p_entity, p_delta)
        ON CONFLICT (space, entity_id) DO UPDATE SET degree = g.degree + EXCLUDED.degree
        RETURNING g.degree INTO v_new;
        IF (v_new = 0) <> (v_new - p_delta = 0) AND EXISTS (
               SELECT 1 FROM {s}.entities e WHERE e.id = p_entity AND e.dormant_since IS NULL) THEN
            INSERT INTO {s}.graph_tallies (space, orphans)
            VALUES (p_space, CASE WHEN v_new = 0 THEN 1 ELSE -1 END);
        END IF;
    END $f$""",
    """CREATE OR REPLACE FUNCTION {s}.orphans_relations_row() RETURNS trigger LANGUAGE plpgsql AS $f$
    BEGIN
        IF current_setting('pgrag.tallies', true) = 'recount' THEN RETURN NULL; END IF;
        IF OLD.dormant_since IS NULL AND OLD.superseded_by IS NULL THEN
            PERFORM {s}.degree_add(OLD.space, OLD.source_id, -1);
            PERFORM {s}.degree_add(OLD.space, OLD.target_id, -1);
        END IF;
        IF NEW.dormant_since IS NULL AND NEW.superseded_by IS NULL THEN
            PERFORM {s}.degree_add(NEW.space, NEW.source_id, 1);
            PERFORM {s}.degree_add(NEW.space, NEW.target_id, 1);
        END IF;
        RETURN NULL;
    END $f$""",
    *(
        f"""CREATE OR REPLACE FUNCTION {{s}}.orphans_relations_{rows}() RETURNS trigger
    LANGUAGE plpgsql AS $f$
    BEGIN
        IF current_setting('pgrag.tallies', true) = 'recount' THEN RETURN NULL; END IF;
        WITH ends AS (SELECT space, source_id AS e FROM {rows} WHERE {CURRENT}
                      UNION ALL SELECT space, target_id FROM {rows} WHERE {CURRENT}),
             d AS (SELECT space, e, {sign}count(*)::int AS n FROM ends GROUP BY space, e),
             up AS (INSERT INTO {{s}}.entity_degree AS g (space, entity_id, degree)
                    SELECT space, e, n FROM d ORDER BY space, e
                    ON CONFLICT (space, entity_id) DO UPDATE SET degree = g.degree + EXCLUDED.degree
                    RETURNING g.space, g.entity_id, g.degree)
        INSERT INTO {{s}}.graph_tallies (space, orphans)
        SELECT up.space, sum(CASE WHEN up.degree = 0 THEN 1 ELSE -1 END)
          FROM up JOIN d ON d.space = up.space AND d.e = up.entity_id
          JOIN {{s}}.entities x ON x.id = up.entity_id
         WHERE (up.degree = 0) <> (up.degree - d.n = 0) AND x.dormant_since IS NULL
         GROUP BY up.space;
        RETURN NULL;
    END $f$"""
        for rows, sign in (("new_rows", ""), ("old_rows", "-"))
    ),
    *(
        f"""CREATE OR REPLACE FUNCTION {{s}}.predicates_{rows}() RETURNS trigger LANGUAGE plpgsql AS $f$
    BEGIN
        IF current_setting('pgrag.tallies', true) = 'recount' THEN RETURN NULL; END IF;
        INSERT INTO {{s}}.predicate_tallies (space, predicate, n)
        SELECT space, predicate, {sign}count(*) FROM {rows} WHERE {CURRENT} GROUP BY space, predicate;
        RETURN NULL;
    END $f$"""
        for rows, sign in (("new_rows", ""), ("old_rows", "-"))
    ),
    """CREATE OR REPLACE FUNCTION {s}.predicates_row() RETURNS trigger LANGUAGE plpgsql AS $f$
    BEGIN
        IF current_setting('pgrag.tallies', true) = 'recount' THEN RETURN NULL; END IF;
        INSERT INTO {s}.predicate_tallies (space, predicate, n)
        SELECT space, predicate, sum(n) FROM (
               SELECT OLD.space, OLD.predicate, -1
                WHERE OLD.dormant_since IS NULL AND OLD.superseded_by IS NULL
               UNION ALL
               SELECT NEW.space, NEW.predicate, 1
                WHERE NEW.dormant_since IS NULL AND NEW.superseded_by IS NULL) x(space, predicate, n)
         GROUP BY space, predicate HAVING sum(n) <> 0;
        RETURN NULL;
    END $f$""",
    """CREATE OR REPLACE FUNCTION {s}.orphans_entities_new_rows() RETURNS trigger LANGUAGE plpgsql AS $f$
    BEGIN
        IF current_setting('pgrag.tallies', true) = 'recount' THEN RETURN NULL; END IF;
        INSERT INTO {s}.graph_tallies (space, orphans)
        SELECT space, count(*) FROM new_rows WHERE dormant_since IS NULL GROUP BY space;
        RETURN NULL;
    END $f$""",
    """CREATE OR REPLACE FUNCTION {s}.orphans_entities_old_rows() RETURNS trigger LANGUAGE plpgsql AS $f$
    BEGIN
        IF current_setting('pgrag.tallies', true) = 'recount' THEN RETURN NULL; END IF;
        INSERT INTO {s}.graph_tallies (space, orphans)
        SELECT o.space, -count(*) FROM old_rows o WHERE o.dormant_since IS NULL AND NOT EXISTS (
               SELECT 1 FROM {s}.entity_degree g WHERE g.space = o.space AND g.entity_id = o.id
                  AND g.degree <> 0)
         GROUP BY o.space;
        DELETE FROM {s}.entity_degree g USING old_rows o WHERE g.space = o.space AND g.entity_id = o.id;
        RETURN NULL;
    END $f$""",
)

_ORPHAN_TRIGGERS = (
    ("relations_orphans_insert", "relations", "AFTER INSERT",
     "REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT", "orphans_relations_new_rows"),
    ("relations_orphans_delete", "relations", "AFTER DELETE",
     "REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT", "orphans_relations_old_rows"),
    ("relations_orphans_update", "relations",
     "AFTER UPDATE OF dormant_since, superseded_by, source_id, target_id",
     "FOR EACH ROW WHEN ((OLD.dormant_since IS NULL AND OLD.superseded_by IS NULL)"
     " <> (NEW.dormant_since IS NULL AND NEW.superseded_by IS NULL)"
     " OR OLD.source_id <> NEW.source_id OR OLD.target_id <> NEW.target_id)", "orphans_relations_row"),
    ("relations_predicates_insert", "relations", "AFTER INSERT",
     "REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT", "predicates_new_rows"),
    ("relations_predicates_delete", "relations", "AFTER DELETE",
     "REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT", "predicates_old_rows"),
    ("relations_predicates_update", "relations", "AFTER UPDATE OF dormant_since, superseded_by, predicate",
     "FOR EACH ROW WHEN ((OLD.dormant_since IS NULL AND OLD.superseded_by IS NULL)"
     " <> (NEW.dormant_since IS NULL AND NEW.superseded_by IS NULL) OR OLD.predicate <> NEW.predicate)",
     "predicates_row"),
    ("entities_orphans_insert", "entities", "AFTER INSERT",
     "REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT", "orphans_entities_new_rows"),
    ("entities_orphans_delete", "entities", "AFTER DELETE",
     "REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT", "orphans_entities_old_rows"),
)  # fmt: skip
"""(name, table, event, level, function) of the triggers keeping ``entity_degree`` (each entity's current
relations) and the ``orphans`` tally — an entity's dormancy is the entities row trigger's — and
``predicate_tallies`` (the current relations per predicate: the quality check's distinct predicates and
vocabulary share)."""

_ROW_TRIGGERS = {
    # an UPDATE is caught row by row, only where a count changes: rewriting vectors or descriptions appends
    # nothing (a statement trigger would copy every updated row, vectors and all, into its transition tables)
    "entities": (
        "AFTER UPDATE OF dormant_since",
        "(OLD.dormant_since IS NULL) <> (NEW.dormant_since IS NULL)",
    ),
    "relations": (
        "AFTER UPDATE OF dormant_since, negated, payload, superseded_by",
        "(OLD.dormant_since IS NULL) <> (NEW.dormant_since IS NULL) OR OLD.negated <> NEW.negated"
        " OR (OLD.superseded_by IS NULL) <> (NEW.superseded_by IS NULL)"
        " OR (OLD.valid_from_key IS NULL AND OLD.valid_to_key IS NULL)"
        " <> (NEW.valid_from_key IS NULL AND NEW.valid_to_key IS NULL)",
    ),
}


def create_tallies(conn: psycopg.Connection, realm: str) -> None:
    """Create ``graph_tallies``, its functions and triggers in ``realm``'s schema, inside the caller's DDL
    transaction (:func:`pgrag_dag.store.schema.init_realm`); when the table is new, store every space's
    recount as its first row (after the triggers exist). Idempotent."""
    s = sql.Identifier(schema_for(realm))
    new = conn.execute("SELECT to_regclass(%s) IS NULL", (f'"{schema_for(realm)}".graph_tallies',)).fetchone()
    conn.execute(
        sql.SQL("""CREATE TABLE IF NOT EXISTS {s}.graph_tallies (
            space text NOT NULL, {cols})""").format(
            s=s, cols=sql.SQL(", ".join(f"{k} bigint NOT NULL DEFAULT 0" for k in COLUMNS))
        )
    )
    conn.execute(
        sql.SQL("""CREATE TABLE IF NOT EXISTS {s}.predicate_tallies (
            space text NOT NULL, predicate text NOT NULL, n bigint NOT NULL)""").format(s=s)
    )
    conn.execute(
        sql.SQL("CREATE INDEX IF NOT EXISTS predicate_tallies_space ON {s}.predicate_tallies (space)").format(
            s=s
        )
    )
    conn.execute(
        sql.SQL("""CREATE TABLE IF NOT EXISTS {s}.entity_degree (
            space text NOT NULL, entity_id bigint NOT NULL, degree integer NOT NULL,
            PRIMARY KEY (space, entity_id))""").format(s=s)
    )
    conn.execute(
        sql.SQL("CREATE INDEX IF NOT EXISTS graph_tallies_space ON {s}.graph_tallies (space)").format(s=s)
    )
    for table in _COUNTED:
        t = qualified(realm, table)
        for event, rows, sign in (("INSERT", "new_rows", ""), ("DELETE", "old_rows", "-")):
            conn.execute(sql.SQL(_statement_function(table, rows, sign)).format(s=s))
            name = sql.Identifier(f"{table}_tally_{event.lower()}")
            conn.execute(sql.SQL("DROP TRIGGER IF EXISTS {n} ON {t}").format(n=name, t=t))
            conn.execute(
                sql.SQL(
                    f"CREATE TRIGGER {{n}} AFTER {event} ON {{t}} REFERENCING "
                    f"{'NEW' if rows == 'new_rows' else 'OLD'} TABLE AS {rows} FOR EACH STATEMENT "
                    f"EXECUTE FUNCTION {{s}}.tally_{table}_{rows}()"
                ).format(n=name, t=t, s=s)
            )
    for stmt in _ROW_FUNCTIONS:
        conn.execute(sql.SQL(stmt).format(s=s))
    for table, (when, condition) in _ROW_TRIGGERS.items():
        t = qualified(realm, table)
        name = sql.Identifier(f"{table}_tally_update")
        conn.execute(sql.SQL("DROP TRIGGER IF EXISTS {n} ON {t}").format(n=name, t=t))
        conn.execute(
            sql.SQL(
                f"CREATE TRIGGER {{n}} {when} ON {{t}} FOR EACH ROW WHEN ({condition}) "
                f"EXECUTE FUNCTION {{s}}.tally_{table}_row()"
            ).format(n=name, t=t, s=s)
        )
    for stmt in _ORPHAN_FUNCTIONS:
        conn.execute(sql.SQL(stmt).format(s=s))
    for trigger, on, event, level, function in _ORPHAN_TRIGGERS:
        n, t = sql.Identifier(trigger), qualified(realm, on)
        conn.execute(sql.SQL("DROP TRIGGER IF EXISTS {n} ON {t}").format(n=n, t=t))
        conn.execute(
            sql.SQL(
                f"CREATE TRIGGER {{n}} {event} ON {{t}} {level} EXECUTE FUNCTION {{s}}.{function}()"
            ).format(n=n, t=t, s=s)
        )
    if new and new[0]:
        conn.execute(_degrees(realm, None))
        conn.execute(_predicates(realm, None))
        conn.execute(
            sql.SQL("INSERT INTO {} (space, {}) {}").format(
                qualified(realm, "graph_tallies"), sql.SQL(", ".join(COLUMNS)), _recount_all(realm)
            )
        )


def _degrees(realm: str, space: str | None) -> sql.Composed:
    """``INSERT`` of every entity's current relations into ``entity_degree`` (of ``%(space)s``, or of every
    space with ``None``), from the relations."""
    where = sql.SQL("") if space is None else sql.SQL(" AND space = %(space)s")
    return sql.SQL("""INSERT INTO {g} (space, entity_id, degree)
                      SELECT space, e, count(*) FROM (
                             SELECT space, source_id AS e FROM {r} WHERE {current}{where}
                             UNION ALL SELECT space, target_id FROM {r} WHERE {current}{where}) x
                       GROUP BY space, e""").format(
        g=qualified(realm, "entity_degree"),
        r=qualified(realm, "relations"),
        current=sql.SQL(CURRENT),
        where=where,
    )


def _predicates(realm: str, space: str | None) -> sql.Composed:
    """``INSERT`` of the current relations per predicate into ``predicate_tallies`` (of ``%(space)s``, or of
    every space with ``None``), from the relations."""
    where = sql.SQL("") if space is None else sql.SQL(" AND space = %(space)s")
    return sql.SQL("""INSERT INTO {p} (space, predicate, n)
                      SELECT space, predicate, count(*) FROM {r} WHERE {current}{where}
                       GROUP BY space, predicate""").format(
        p=qualified(realm, "predicate_tallies"),
        r=qualified(realm, "relations"),
        current=sql.SQL(CURRENT),
        where=where,
    )


def predicates(conn: psycopg.Connection, realm: str, space: str) -> list[tuple[str, int]]:
    """(predicate, current relations) of the space, by predicate, from ``predicate_tallies`` (what
    ``SELECT predicate, count(*)`` over its current relations gives, without reading them)."""
    rows = conn.execute(
        sql.SQL("""SELECT predicate, sum(n) FROM {} WHERE space = %s GROUP BY predicate HAVING sum(n) <> 0
                    ORDER BY predicate""").format(qualified(realm, "predicate_tallies")),
        (space,),
    ).fetchall()
    return [(str(p), int(n)) for p, n in rows]


def _orphans(realm: str) -> str:
    """The ``FROM … WHERE`` of the orphan entities (``x``): live, and no current relation names them."""
    e, r = (qualified(realm, t).as_string(None) for t in ("entities", "relations"))
    return f"""{e} x WHERE x.dormant_since IS NULL
                 AND NOT EXISTS (SELECT 1 FROM {r} r WHERE r.space = x.space AND r.source_id = x.id
                                    AND r.{CURRENT.replace(" AND ", " AND r.")})
                 AND NOT EXISTS (SELECT 1 FROM {r} r WHERE r.space = x.space AND r.target_id = x.id
                                    AND r.{CURRENT.replace(" AND ", " AND r.")})"""


def _recount(realm: str) -> sql.Composed:
    """``SELECT`` of the counts of space ``%(space)s`` from its rows, in :data:`COLUMNS` order (one
    statement, one snapshot)."""
    e, r, m = qualified(realm, "entities"), qualified(realm, "relations"), qualified(realm, "doc_mentions")
    ent = [f"{c.strip()} AS {k}" for c, k in zip(_split(_ENTITY), KEYS[:2], strict=True)]
    rel_keys = ("relations", "relations_dormant", "negated", "with_validity", "superseded")
    rel = [f"{c.strip()} AS {k}" for c, k in zip(_split(_RELATION), rel_keys, strict=True)]
    return sql.SQL("""SELECT {keys} FROM (SELECT {ent} FROM {e} WHERE space = %(space)s) e,
                             (SELECT {rel} FROM {r} WHERE space = %(space)s) r,
                             (SELECT count(*) AS mentions FROM {m} WHERE space = %(space)s) m,
                             (SELECT count(*) AS orphans FROM {orphans} AND x.space = %(space)s) o""").format(
        keys=sql.SQL(", ".join(COLUMNS)),
        ent=sql.SQL(", ".join(ent)),
        rel=sql.SQL(", ".join(rel)),
        orphans=sql.SQL(_orphans(realm)),
        e=e,
        r=r,
        m=m,
    )


def _recount_all(realm: str) -> sql.Composed:
    """``SELECT space, <counts>`` of every space holding an entity, relation or mention, in :data:`COLUMNS`
    order."""
    parts: list[sql.Composable] = []
    for table, counted in _COUNTED.items():
        cols = [c.strip() for c in _COLUMNS[table].split(",")]
        counts = dict(zip(cols, _split(counted), strict=True))
        values = [f"{counts.get(k, '0')} AS {k}" for k in COLUMNS]  # UNION ALL matches columns by position
        parts.append(
            sql.SQL("SELECT space, {} FROM {} GROUP BY space").format(
                sql.SQL(", ".join(values)), qualified(realm, table)
            )
        )
    values = [f"{'count(*)' if k == 'orphans' else '0'} AS {k}" for k in COLUMNS]
    parts.append(sql.SQL(f"SELECT x.space, {', '.join(values)} FROM {_orphans(realm)} GROUP BY x.space"))
    union = sql.SQL(" UNION ALL ").join(parts)
    return sql.SQL("SELECT space, {} FROM ({}) x GROUP BY space").format(
        sql.SQL(", ".join(f"sum({k})" for k in COLUMNS)), union
    )


def read(conn: psycopg.Connection, realm: str, space: str) -> dict[str, int]:
    """The space's counts (:data:`COLUMNS`): the sums of its ``graph_tallies`` rows (zeros for a space with
    none)."""
    row = conn.execute(
        sql.SQL("SELECT {} FROM {} WHERE space = %s").format(
            sql.SQL(", ".join(f"coalesce(sum({k}), 0)" for k in COLUMNS)), qualified(realm, "graph_tallies")
        ),
        (space,),
    ).fetchone()
    assert row is not None
    return dict(zip(COLUMNS, (int(v) for v in row), strict=True))


def recount(conn: psycopg.Connection, realm: str, space: str) -> dict[str, int]:
    """The space's counts (:data:`COLUMNS`) counted from its rows: what :func:`read` must equal (a scan of the
    space's entities, relations and mentions)."""
    row = conn.execute(_recount(realm), {"space": space}).fetchone()
    assert row is not None
    return dict(zip(COLUMNS, (int(v) for v in row), strict=True))


def reset(conn: psycopg.Connection, realm: str, space: str) -> dict[str, int]:
    """Replace the space's tally rows with a recount, in one statement (a row a concurrent writer appends
    meanwhile counts what its own write changed, after the recount's snapshot), and its ``entity_degree``
    and ``predicate_tallies`` rows with the current relations' endpoints and predicates, in the caller's
    transaction — a full run of the relations
    stage, under the partition lock (no other writer of the space). Returns the recount (:data:`COLUMNS`)."""
    conn.execute(
        sql.SQL("DELETE FROM {} WHERE space = %(space)s").format(qualified(realm, "entity_degree")),
        {"space": space},
    )
    conn.execute(_degrees(realm, space), {"space": space})
    conn.execute(
        sql.SQL("DELETE FROM {} WHERE space = %(space)s").format(qualified(realm, "predicate_tallies")),
        {"space": space},
    )
    conn.execute(_predicates(realm, space), {"space": space})
    # the full run wrote the space's relations in this transaction, where autovacuum cannot see them: with
    # the statistics of the table before, the orphan count's anti-joins ran as nested loops over every
    # relation per entity (minutes at 100k relations). ANALYZE here samples this transaction's own rows.
    analyze = sql.SQL("ANALYZE {}, {}")
    conn.execute(analyze.format(qualified(realm, "relations"), qualified(realm, "entities")))
    t = qualified(realm, "graph_tallies")
    row = conn.execute(
        sql.SQL("""WITH gone AS (DELETE FROM {t} WHERE space = %(space)s RETURNING 1),
                        counted AS ({recount})
                   INSERT INTO {t} (space, {keys})
                   SELECT %(space)s, counted.* FROM counted, (SELECT count(*) FROM gone) g
                   RETURNING {keys}""").format(
            t=t, recount=_recount(realm), keys=sql.SQL(", ".join(COLUMNS))
        ),
        {"space": space},
    ).fetchone()
    assert row is not None
    return dict(zip(COLUMNS, (int(v) for v in row), strict=True))


def suspend(conn: psycopg.Connection) -> None:
    """Stop the triggers keeping the counts for the rest of the caller's transaction (``SET LOCAL
    pgrag.tallies = recount``), which must end with :func:`reset` of every space it writes — a full run of the
    relations stage, which rewrites the whole space and recounts it anyway: its million-row writes do not
    pay for maintaining counts the recount replaces."""
    conn.execute("SELECT set_config('pgrag.tallies', 'recount', true)")


COMPACT_ABOVE = 64
"""A space's tally rows beyond which :func:`compact` folds them into one."""


def compact(conn: psycopg.Connection, realm: str, space: str, above: int = COMPACT_ABOVE) -> bool:
    """Fold the space's tally rows into one when it holds more than ``above``, in one statement, in the
    caller's transaction (under the partition lock); returns whether it did."""
    t = qualified(realm, "graph_tallies")
    held = conn.execute(
        sql.SQL("SELECT count(*) FROM (SELECT 1 FROM {} WHERE space = %s LIMIT %s) x").format(t),
        (space, above + 1),
    ).fetchone()
    p = qualified(realm, "predicate_tallies")
    rows = conn.execute(
        sql.SQL("SELECT count(*) FROM (SELECT 1 FROM {} WHERE space = %s LIMIT %s) x").format(p),
        (space, 4 * above + 1),
    ).fetchone()
    if rows and rows[0] > 4 * above:  # folded per predicate; a predicate at zero leaves no row
        conn.execute(
            sql.SQL("""WITH gone AS (DELETE FROM {p} WHERE space = %(space)s RETURNING predicate, n)
                       INSERT INTO {p} (space, predicate, n)
                       SELECT %(space)s, predicate, sum(n) FROM gone GROUP BY predicate
                       HAVING sum(n) <> 0""").format(p=p),
            {"space": space},
        )
    if not held or held[0] <= above:
        return False
    conn.execute(
        sql.SQL("""WITH gone AS (DELETE FROM {t} WHERE space = %(space)s RETURNING *)
                   INSERT INTO {t} (space, {keys}) SELECT %(space)s, {sums} FROM gone""").format(
            t=t,
            keys=sql.SQL(", ".join(COLUMNS)),
            sums=sql.SQL(", ".join(f"coalesce(sum({k}), 0)" for k in COLUMNS)),
        ),
        {"space": space},
    )
    return True
