"""HNSW indexes over the embedding columns, and the distance expressions every vector search uses
(paper §3.5; issue 13 item 11: models wider than 2,000 dimensions; issue 30: the index kind).

A realm stores its vectors as ``vector(d)`` — full precision, whatever the width — and indexes every width
alike, as a ``halfvec`` (16-bit float) expression: ``<table>_embedding_hnsw`` is ``USING hnsw
((embedding::halfvec(d)) halfvec_cosine_ops)``. pgvector's HNSW indexes ``vector`` only up to 2,000
dimensions and ``halfvec`` up to 4,000; a width above 4,000 is refused by :func:`check_indexable` before
any DDL or write.

Why ``halfvec`` below 2,000 dimensions too (issue 30, measured on the 102,761 relation vectors of the 100k
``bench_query`` graph, 384 dimensions, quiet machine): the build takes 18.0 s instead of 20.9 s, the index
114 MB instead of 200 MB (half the build memory at a million vectors), and recall@10 against exact search
is the same (0.765 / 0.774 against 0.761 / 0.774 on 150 queries, ``ef_search`` 40). Realms built before
schema version 26 had a ``vector_cosine_ops`` index up to 2,000 dimensions; :func:`outdated` finds it and
the schema upgrade drops it, to be built again as ``halfvec`` by the next ``embeddings`` run
(:mod:`pgrag_dag.store.bulk_index`).

A search must order by the very expression its index holds, or PostgreSQL sorts the whole table:
:func:`distance` renders ``embedding::halfvec(d) <=> %(q)s::halfvec(d)``. Through ``halfvec`` both sides
are rounded to about three significant digits, so that order decides only which ``k`` rows the index
returns (as approximate as the HNSW search itself); the distance a search reports, and orders its ``k``
rows by, is the full-precision :func:`exact_distance` of the stored vectors.
"""

from __future__ import annotations

from collections.abc import Sequence

from psycopg import sql

from pgrag_dag.errors import SchemaMismatchError

HALFVEC_HNSW_MAX_DIM = 4000
"""The widest ``halfvec`` pgvector's HNSW indexes (dimensions): the widest realm there can be."""
OPERATOR_CLASS = "halfvec_cosine_ops"
"""The operator class of every ``<table>_embedding_hnsw`` index (:func:`outdated` looks for it)."""


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
    """The expression HNSW indexes: ``([alias.]embedding::halfvec(dim))``."""
    column = (
        sql.Identifier("embedding")
        if alias is None
        else sql.SQL("{}.embedding").format(sql.Identifier(alias))
    )
    return sql.SQL("({}::halfvec({}))").format(column, sql.Literal(dim))


def distance(alias: str, dim: int, param: str = "q") -> sql.Composable:
    """Cosine distance (0 … 2), through ``halfvec``, from row ``alias``'s embedding to the query vector
    ``%(param)s`` of width ``dim``: the expression the realm's HNSW index serves ``ORDER BY`` it (see the
    module docstring). Report and re-sort by :func:`exact_distance`."""
    query = sql.SQL("({}::halfvec({}))").format(sql.Placeholder(param), sql.Literal(dim))
    return sql.SQL("{} <=> {}").format(indexed_expression(alias, dim), query)


def exact_distance(alias: str, param: str = "q") -> sql.Composable:
    """Cosine distance (0 … 2) from row ``alias``'s stored ``vector`` to ``%(param)s`` at full precision."""
    return sql.SQL("{}.embedding <=> {}").format(sql.Identifier(alias), sql.Placeholder(param))


def index_ddl(schema: str, table: str, dim: int) -> sql.Composed:
    """``CREATE INDEX IF NOT EXISTS <table>_embedding_hnsw`` on ``schema.table`` for width ``dim``."""
    return sql.SQL("CREATE INDEX IF NOT EXISTS {name} ON {s}.{t} USING hnsw ({expr} {ops})").format(
        name=sql.Identifier(f"{table}_embedding_hnsw"),
        s=sql.Identifier(schema),
        t=sql.Identifier(table),
        expr=indexed_expression(None, dim),
        ops=sql.SQL(OPERATOR_CLASS),
    )


def outdated(definition: str) -> bool:
    """Whether an HNSW index definition (``pg_get_indexdef``) predates the ``halfvec`` kind (schema
    version 26): a ``vector_cosine_ops`` index a realm of at most 2,000 dimensions was built with."""
    return OPERATOR_CLASS not in definition
