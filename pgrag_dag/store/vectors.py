"""SQL for the embedding columns of ``documents``, ``entities``, ``relations`` and ``communities``.

A row is (re-)embedded when ``embed_hash`` differs from the SHA-256 of the text it embeds, so
unchanged rows are never re-embedded and changed descriptions are.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import psycopg
from psycopg import sql

from pgrag_dag.store.schema import qualified as _t

# The text each table embeds, as a SQL expression over the row: a chunk carries its document's title (issue 12).
EMBED_TEXT = {
    "documents": sql.SQL("CASE WHEN title = '' THEN text ELSE title || E'\\n' || text END"),
    "entities": sql.SQL("name || ': ' || description"),
    "relations": sql.SQL("rendered"),
    "communities": sql.SQL("report"),
}


def pending(conn: psycopg.Connection, realm: str, space: str, table: str) -> list[tuple[int, str, str]]:
    """(id, text, sha256 of text) for the space's rows of ``table`` whose embedding is missing or stale."""
    expr = EMBED_TEXT[table]
    return conn.execute(
        sql.SQL("""SELECT id, t, h FROM (SELECT id, {e} AS t, encode(sha256(convert_to({e}, 'UTF8')), 'hex') AS h,
                                               embed_hash, embedding IS NULL AS missing
                                          FROM {tab} WHERE space = %s) x
                    WHERE missing OR embed_hash IS DISTINCT FROM h ORDER BY id""").format(e=expr, tab=_t(realm, table)),
        (space,),
    ).fetchall()


def write(conn: psycopg.Connection, realm: str, table: str, rows: list[tuple[int, str, str]], vectors: list[np.ndarray]) -> int:
    """Store ``vectors`` (one per pending row, in order) with their text hashes."""
    with conn.cursor() as cur:
        cur.executemany(
            sql.SQL("UPDATE {} SET embedding = %s, embed_hash = %s WHERE id = %s").format(_t(realm, table)),
            [(vec, h, i) for (i, _, h), vec in zip(rows, vectors, strict=True)],
        )
    return len(rows)


def audit(conn: psycopg.Connection, realm: str, space: str, expected_dim: int) -> pl.DataFrame:
    """One row per stored embedding of the space: table, row_id, dim, expected_dim, finite, missing, embed_hash.

    ``finite`` is false when any component is NaN or infinite; rows without an embedding have
    ``missing`` true (and dim 0)."""
    parts = []
    for table in EMBED_TEXT:
        rows = conn.execute(
            sql.SQL("""SELECT id, COALESCE(vector_dims(embedding), 0), embedding IS NULL, embed_hash,
                              COALESCE(NOT ('NaN' = ANY(embedding::real[]) OR 'Infinity' = ANY(embedding::real[])
                                            OR '-Infinity' = ANY(embedding::real[])), true)
                         FROM {} WHERE space = %s""").format(_t(realm, table)),
            (space,),
        ).fetchall()
        parts.extend((table, i, d, expected_dim, fin, miss, h) for i, d, miss, h, fin in rows)
    schema = {"table": pl.String, "row_id": pl.Int64, "dim": pl.Int64, "expected_dim": pl.Int64,
              "finite": pl.Boolean, "missing": pl.Boolean, "embed_hash": pl.String}
    return pl.DataFrame(parts, schema=schema, orient="row")
