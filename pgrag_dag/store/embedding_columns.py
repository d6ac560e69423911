"""The realm's embedding columns (paper §3.5): which tables hold vectors, the width check that fails closed,
the HNSW indexes over them, and re-typing them for ``pgrag reembed``. :mod:`pgrag_dag.store.schema` creates
the tables; this module owns what their ``embedding`` columns must be."""

from __future__ import annotations

from collections.abc import Sequence

import psycopg
from psycopg import sql

from pgrag_dag.errors import SchemaMismatchError
from pgrag_dag.names import schema_for
from pgrag_dag.store import vector_index

EMBEDDED_TABLES = ("documents", "entities", "relations", "communities")
ARCHIVE_TABLES = ("documents_removed", "communities_expired")
"""Tables holding the realm's vectors without an HNSW index (chunks removed and reports replaced since they
were indexed, read only by belief-time queries): retyped and re-embedded with :data:`EMBEDDED_TABLES` by
``pgrag reembed``."""


def describe_embedding(identity: tuple[str, int, str]) -> str:
    """``model (dim)``, with the convention when it is not symmetric."""
    model, dim, convention = identity
    return f"{model} ({dim})" + ("" if convention == "symmetric" else f" {convention}")


def check_embedding(realm: str, registered: tuple[str, int, str], configured: tuple[str, int, str]) -> None:
    """Raise :class:`SchemaMismatchError` unless the configured ``(model, dim, convention)`` is the one
    the realm is registered with (§3.5); the message names both and the command that switches. When the
    widths differ it also names the embedding columns that hold the stored width
    (``pgrag_<realm>.entities.embedding`` and the other :data:`EMBEDDED_TABLES`' — §3.5's check is about
    those columns), and the error's ``table`` is ``pgrag_<realm>.entities.embedding``."""
    if registered == configured:
        return
    table, columns = f"realm {realm!r} embedding", ""
    if registered[1] != configured[1]:
        schema = schema_for(realm)
        table = f"{schema}.entities.embedding"
        others = [f"{schema}.{t}.embedding" for t in EMBEDDED_TABLES if t != "entities"]
        columns = f"; its columns {', '.join([table, *others])} hold vector({registered[1]})"
    raise SchemaMismatchError(
        table,
        describe_embedding(registered),
        describe_embedding(configured),
        f"configure the realm's model again, or switch every vector deliberately: pgrag reembed {realm}",
        message=f"realm {realm!r} is embedded with {describe_embedding(registered)} but the configuration "
        f"says {describe_embedding(configured)}{columns}: configure the realm's model again, or switch "
        f"every vector deliberately with `pgrag reembed {realm}`",
    )


def verify_embedding_columns(conn: psycopg.Connection, realm: str, dim: int) -> None:
    """Fail closed (§3.5): every vertex/edge table with embeddings has ``embedding vector(dim)``.

    Raises :class:`SchemaMismatchError` naming the table when the column is missing or differs.
    """
    schema = schema_for(realm)
    for table in EMBEDDED_TABLES:
        found = _embedding_type(conn, schema, table)
        expected = f"vector({dim})"
        if found is None or found[0] != expected:
            raise SchemaMismatchError(f"{schema}.{table}.embedding", expected, found[0] if found else None)


def _embedding_type(conn: psycopg.Connection, schema: str, table: str) -> tuple[str, int] | None:
    """``(type as written, e.g. vector(384); its width)`` of ``schema.table.embedding``, or ``None``."""
    row = conn.execute(
        """SELECT format_type(a.atttypid, a.atttypmod), a.atttypmod
             FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
             JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE n.nspname = %s AND c.relname = %s AND a.attname = 'embedding' AND NOT a.attisdropped""",
        (schema, table),
    ).fetchone()
    return None if row is None else (str(row[0]), int(row[1]))


def create_embedding_indexes(conn: psycopg.Connection, realm: str, *, skip: Sequence[str] = ()) -> None:
    """Create the HNSW indexes (cosine distance, ``halfvec`` at every width:
    :mod:`pgrag_dag.store.vector_index`) ``<table>_embedding_hnsw`` of the four :data:`EMBEDDED_TABLES` where
    they are missing (§3.5), except ``skip``'s; run it only after :func:`verify_embedding_columns`. Building
    one over ~170k vectors of width 384 takes minutes at PostgreSQL's default ``maintenance_work_mem``
    (:mod:`pgrag_dag.store.bulk_index` builds with more).

    Raises :class:`SchemaMismatchError` when a column is missing or wider than an index allows."""
    schema = schema_for(realm)
    for table in EMBEDDED_TABLES:
        found = _embedding_type(conn, schema, table)
        if found is None:
            raise SchemaMismatchError(f"{schema}.{table}.embedding", "a vector column", None)
        vector_index.check_indexable(realm, schema, EMBEDDED_TABLES, found[1])
        if table not in skip:
            conn.execute(vector_index.index_ddl(schema, table, found[1]))


def drop_outdated_indexes(conn: psycopg.Connection, realm: str) -> list[str]:
    """In the caller's transaction: drop each HNSW index of :data:`EMBEDDED_TABLES` built before the
    ``halfvec`` kind (:func:`pgrag_dag.store.vector_index.outdated`; schema version 26) and return those
    tables, sorted. They are left missing — not built here, inside the schema upgrade's transaction, at the
    default build memory — so that the next ``embeddings`` run builds them
    (:func:`pgrag_dag.store.bulk_index.missing`); vector searches read their table by a scan until then
    (same results, slower). Takes ``ACCESS EXCLUSIVE`` on each such table for the drop."""
    schema = schema_for(realm)
    dropped = []
    for table in EMBEDDED_TABLES:
        row = conn.execute(
            "SELECT indexdef FROM pg_indexes WHERE schemaname = %s AND indexname = %s",
            (schema, f"{table}_embedding_hnsw"),
        ).fetchone()
        if row is not None and vector_index.outdated(str(row[0])):
            conn.execute(
                sql.SQL("DROP INDEX {}.{}").format(
                    sql.Identifier(schema), sql.Identifier(f"{table}_embedding_hnsw")
                )
            )
            dropped.append(table)
    return dropped


def retype_embeddings(conn: psycopg.Connection, realm: str, dim: int) -> None:
    """In the caller's transaction: drop the realm's HNSW indexes and make every embedding column of
    :data:`EMBEDDED_TABLES` and :data:`ARCHIVE_TABLES` ``vector(dim)``, every vector ``NULL`` (§3.5; ``pgrag
    reembed``). Takes ``ACCESS EXCLUSIVE`` on the four tables and rewrites them; recreate the indexes with
    :func:`create_embedding_indexes` after writing the new vectors (one bulk build each).
    Raises :class:`SchemaMismatchError` for a width no HNSW index can hold, before changing anything."""
    vector_index.check_indexable(realm, schema_for(realm), EMBEDDED_TABLES, dim)
    schema = sql.Identifier(schema_for(realm))
    for table in EMBEDDED_TABLES:
        conn.execute(
            sql.SQL("DROP INDEX IF EXISTS {}.{}").format(schema, sql.Identifier(f"{table}_embedding_hnsw"))
        )
    for table in EMBEDDED_TABLES + ARCHIVE_TABLES:
        conn.execute(
            sql.SQL("ALTER TABLE {}.{} ALTER COLUMN embedding TYPE vector({}) USING NULL").format(
                schema, sql.Identifier(table), sql.Literal(dim)
            )
        )


def switch_registration(
    conn: psycopg.Connection,
    realm: str,
    *,
    registered: tuple[str, int, str],
    configured: tuple[str, int, str],
) -> None:
    """In the caller's transaction: record ``configured`` (model, width in dimensions, convention) as the
    realm's embedding (§3.5) where it is still ``registered`` (the row stays locked until the
    transaction ends).

    Raises :class:`SchemaMismatchError` when the realm's registration is no longer ``registered``
    (another ``pgrag reembed`` switched it meanwhile, or it was removed)."""
    cur = conn.execute(
        """UPDATE pgrag__control.realms SET embedding_model = %s, embedding_dim = %s,
            embedding_convention = %s
            WHERE realm = %s AND (embedding_model, embedding_dim, embedding_convention) = (%s, %s, %s)""",
        (*configured, realm, *registered),
    )
    if cur.rowcount != 1:
        raise SchemaMismatchError(
            f"realm {realm!r} embedding",
            describe_embedding(registered),
            "another registration",
            "it changed while re-embedding; run pgrag reembed again",
        )
