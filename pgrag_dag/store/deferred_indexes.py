"""The secondary indexes a first load of vectors drops and builds again after (issue 30 item 4; §3.5), and
the record that lets any later run rebuild one a killed load left missing.

Writing a vector rewrites its whole row: the row grows out of its page, so the update is never HOT and every
index of the table gets a new entry for it. On a first load (:mod:`pgrag_dag.store.bulk_index`) that is one
entry per vector in each of the table's secondary indexes — eleven on ``relations``, three on ``entities`` —
for keys that did not change. Dropping them for the load and building each once after is the textbook bulk
load (PostgreSQL's "Populating a Database"); measured at 100k relations, quiet, the stage's writing of 136,802
vectors took 12.4–13.3 s instead of 15.2 s, the rebuild about 1.5 s of the index builds
(``evaluation/README.md``).

*Secondary* here means an index that backs no constraint (unique, primary key, exclusion: never dropped, they
keep the data right) and is not the HNSW index (its own path, :func:`pgrag_dag.store.bulk_index.drop`), nor a
partial index over rows without a vector (``… WHERE embedding IS NULL``): the load reads the pending rows
through those, and a written row leaves them rather than adding an entry.

Each dropped index's definition (``pg_indexes.indexdef``, exactly as it was — indexes of the realm's DDL and
any a team added itself) is recorded in ``<realm schema>.deferred_indexes`` in the transaction that drops it,
and deleted in the transaction that builds it again. An index a killed run left missing is therefore rebuilt
by the next run of any stage that opens the realm (:func:`restore` from
:func:`pgrag_dag.store.schema.init_realm`), not only by the next ``embeddings`` run: the graph stages read
through these indexes, and would crawl without them. Until then queries and stages stay correct, only slower.
A stage of another space that opens the realm while a load is under way builds them at once too: the load then
writes slower, and nothing is wrong.
"""

from __future__ import annotations

import logging
import re

import psycopg
from psycopg import sql

from pgrag_dag.names import schema_for

log = logging.getLogger(__name__)

DDL = """
CREATE TABLE IF NOT EXISTS {s}.deferred_indexes (
    index_name text PRIMARY KEY,
    table_name text NOT NULL,
    definition text NOT NULL,
    dropped_at timestamptz NOT NULL DEFAULT now()
)"""

_SECONDARY = """
SELECT c.relname, pg_get_indexdef(i.indexrelid)
  FROM pg_index i
  JOIN pg_class c ON c.oid = i.indexrelid
  JOIN pg_class t ON t.oid = i.indrelid
  JOIN pg_namespace n ON n.oid = t.relnamespace
  JOIN pg_am a ON a.oid = c.relam
 WHERE n.nspname = %s AND t.relname = %s
   AND NOT i.indisunique AND NOT i.indisprimary AND NOT i.indisexclusion
   AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid)
   AND a.amname <> 'hnsw'
   AND coalesce(pg_get_expr(i.indpred, i.indrelid), '') !~ '\\membedding IS NULL'
 ORDER BY c.relname"""


def create_deferred_indexes(conn: psycopg.Connection, schema: str) -> None:
    """Create ``schema.deferred_indexes`` (index name, table, definition, when dropped) if missing."""
    conn.execute(sql.SQL(DDL).format(s=sql.Identifier(schema)))


def defer(conn: psycopg.Connection, realm: str, table: str) -> list[str]:
    """In the caller's transaction: record and drop the secondary indexes of ``realm``'s ``table`` (see the
    module docstring); returns their names, sorted. Takes ``ACCESS EXCLUSIVE`` on the table until the
    transaction ends, as any ``DROP INDEX`` does."""
    schema = schema_for(realm)
    found = conn.execute(_SECONDARY, (schema, table)).fetchall()
    for name, definition in found:
        conn.execute(
            sql.SQL(
                "INSERT INTO {}.deferred_indexes (index_name, table_name, definition) VALUES (%s, %s, %s) "
                "ON CONFLICT (index_name) DO UPDATE SET definition = excluded.definition"
            ).format(sql.Identifier(schema)),
            (name, table, definition),
        )
        conn.execute(sql.SQL("DROP INDEX {}.{}").format(sql.Identifier(schema), sql.Identifier(name)))
    return [name for name, _ in found]


def pending(conn: psycopg.Connection, realm: str) -> dict[str, list[str]]:
    """Table → the names of its indexes dropped by a load and not yet built again (usually empty; empty for a
    realm whose schema predates the record, version 25)."""
    if conn.execute("SELECT to_regclass(%s)", (f"{schema_for(realm)}.deferred_indexes",)).fetchone() == (
        None,
    ):
        return {}
    rows = conn.execute(
        sql.SQL("SELECT table_name, index_name FROM {}.deferred_indexes ORDER BY 1, 2").format(
            sql.Identifier(schema_for(realm))
        )
    ).fetchall()
    out: dict[str, list[str]] = {}
    for table, name in rows:
        out.setdefault(table, []).append(name)
    return out


def restore(conn: psycopg.Connection, realm: str, tables: list[str] | None = None) -> list[str]:
    """Build again the recorded indexes of ``realm`` (of ``tables``; all when ``None``), each in a transaction
    of its own that deletes its record: returns the names built, sorted. ``conn`` must not be in a
    transaction. A record another process is building meanwhile waits for it and is then skipped (its row is
    gone); an index that exists already (built by hand) just loses its record. Build memory is the session's
    ``maintenance_work_mem``."""
    schema = sql.Identifier(schema_for(realm))
    with conn.transaction():  # not an implicit transaction the builds below would nest in, uncommitted
        recorded = pending(conn, realm)
    names = [n for t, found in recorded.items() if tables is None or t in tables for n in found]
    built = []
    for name in names:
        with conn.transaction():
            row = conn.execute(
                sql.SQL("DELETE FROM {}.deferred_indexes WHERE index_name = %s RETURNING definition").format(
                    schema
                ),
                (name,),
            ).fetchone()
            if row is None:
                continue
            # the definition is pg_get_indexdef's: "CREATE [UNIQUE] INDEX name ON …"; IF NOT EXISTS makes an
            # index rebuilt by hand meanwhile a no-op rather than an error
            definition = re.sub(r"^CREATE INDEX ", "CREATE INDEX IF NOT EXISTS ", str(row[0]), count=1)
            conn.execute(sql.SQL(definition))  # the catalog's own text
            built.append(name)
    if built:
        log.info(
            "rebuilt %d index(es) a load of realm %s had deferred: %s", len(built), realm, ", ".join(built)
        )
    return sorted(built)
