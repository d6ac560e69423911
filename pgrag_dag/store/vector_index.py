"""HNSW indexes over the embedding columns, and the distance expression every vector search orders by
(paper §3.5; issue 13 item 11: models wider than 2,000 dimensions).

pgvector's HNSW indexes ``vector`` up to 2,000 dimensions and ``halfvec`` (16-bit floats) up to 4,000.
A realm stores its vectors as ``vector(d)`` — full precision, whatever the width — and indexes them:

=====================  =======================================================================
width ``d``            index ``<table>_embedding_hnsw``
=====================  =======================================================================
1 … 2,000              ``USING hnsw (embedding vector_cosine_ops)``
2,001 … 4,000          ``USING hnsw ((embedding::halfvec(d)) halfvec_cosine_ops)`` (expression)
above 4,000            refused by :func:`check_indexable` before any DDL or write
=====================  =======================================================================

A search must order by the very expression its index holds, or PostgreSQL sorts the whole table:
:func:`distance` renders ``embedding <=> %(q)s`` or ``embedding::halfvec(d) <=> %(q)s::halfvec(d)``.
Through ``halfvec`` both sides are rounded to 16-bit floats (about three significant digits), so a
wide realm's cosine distances differ from the full-precision ones in the fourth digit; near-ties may
swap, nothing else changes. Realms of different widths coexist: each has its own columns and indexes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from psycopg import sql

from pgrag_dag.errors import SchemaMismatchError

VECTOR_HNSW_MAX_DIM = 2000
"""The widest ``vector`` pgvector's HNSW indexes (dimensions)."""
HALFVEC_HNSW_MAX_DIM = 4000
"""The widest ``halfvec`` pgvector's HNSW indexes (dimensions): the widest realm there can be."""

IndexKind = Literal["vector", "halfvec"]


def index_kind(dim: int) -> IndexKind:
    """What a width of ``dim`` dimensions is indexed as: ``vector`` up to :data:`VECTOR_HNSW_MAX_DIM`,
    else ``halfvec`` (call :func:`check_indexable` first)."""
    return "vector" if dim <= VECTOR_HNSW_MAX_DIM else "halfvec"


def check_indexable(realm: str, schema: str, tables: Sequence[str], dim: object) -> None:
    """Raise :class:`SchemaMismatchError` — one line naming the realm, its tables, the declared width and
    the limit — unless ``dim`` is an integer in ``1 … HALFVEC_HNSW_MAX_DIM``."""
    if isinstance(dim, int) and not isinstance(dim, bool) and 1 <= dim <= HALFVEC_HNSW_MAX_DIM:
        return
    raise SchemaMismatchError(
        f"realm {realm!r} embedding columns of {schema}.{{{','.join(tables)}}}",
        f"a width of 1 to {HALFVEC_HNSW_MAX_DIM} dimensions (pgvector's HNSW limit, as halfvec)",
        dim if isinstance(dim, int) else repr(dim),
        "embedding.dim: choose an embedding model of at most "
        f"{HALFVEC_HNSW_MAX_DIM} dimensions, or one that can return fewer; nothing was created",
    )


def indexed_expression(alias: str | None, dim: int) -> sql.Composable:
    """The expression HNSW indexes: ``[alias.]embedding``, or ``([alias.]embedding::halfvec(dim))``."""
    column = (
        sql.Identifier("embedding")
        if alias is None
        else sql.SQL("{}.embedding").format(sql.Identifier(alias))
    )
    if index_kind(dim) == "vector":
        return column
    return sql.SQL("({}::halfvec({}))").format(column, sql.Literal(dim))


def distance(alias: str, dim: int, param: str = "q") -> sql.Composable:
    """Cosine distance (0 … 2) from row ``alias``'s embedding to the query vector ``%(param)s`` of width
    ``dim``, written so that the realm's HNSW index serves ``ORDER BY`` it (see the module docstring)."""
    query = sql.Placeholder(param)
    if index_kind(dim) == "halfvec":
        query = sql.SQL("({}::halfvec({}))").format(query, sql.Literal(dim))  # type: ignore[assignment]
    return sql.SQL("{} <=> {}").format(indexed_expression(alias, dim), query)


def index_ddl(schema: str, table: str, dim: int) -> sql.Composed:
    """``CREATE INDEX IF NOT EXISTS <table>_embedding_hnsw`` on ``schema.table`` for width ``dim``."""
    ops = sql.SQL("vector_cosine_ops" if index_kind(dim) == "vector" else "halfvec_cosine_ops")
    return sql.SQL("CREATE INDEX IF NOT EXISTS {name} ON {s}.{t} USING hnsw ({expr} {ops})").format(
        name=sql.Identifier(f"{table}_embedding_hnsw"),
        s=sql.Identifier(schema),
        t=sql.Identifier(table),
        expr=indexed_expression(None, dim),
        ops=ops,
    )
