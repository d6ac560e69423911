"""SQL for the embedding columns of ``documents``, ``entities``, ``relations`` and ``communities``.

A row is (re-)embedded when it has no ``embedding`` or its ``embed_hash`` differs from the SHA-256 of
the text it embeds, so unchanged rows are never re-embedded and changed descriptions are. A row the
model refused may hold a fallback vector instead (issue 13): in ``fallback_embedding``, named by
``embed_fallback``, never in the indexed ``embedding`` column — it stays pending, so the next run
embeds it with the model.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import polars as pl
import psycopg
from psycopg import sql

from pgrag_dag.names import WILDCARD_SPACE, validate_space
from pgrag_dag.store.identifiers import qualified

# The text each table embeds, as a SQL expression over the row: a chunk carries its document's title (issue
# 12).
EMBED_TEXT = {
    "documents": sql.SQL("CASE WHEN title = '' THEN text ELSE title || E'\\n' || text END"),
    "entities": sql.SQL("name || ': ' || description"),
    "relations": sql.SQL("rendered"),
    "communities": sql.SQL("report"),
}
ARCHIVE_TEXT = {
    "documents_removed": EMBED_TEXT["documents"],
    "communities_expired": EMBED_TEXT["communities"],
}
"""The text of the archived chunks (issue 14) and replaced reports (issue 28), embedded only by ``pgrag
reembed`` (never audited or pending: a row archived before it was embedded stays without a vector)."""


def _texts(realm: str, table: str, where: sql.Composable) -> sql.Composed:
    """``SELECT id, t, h`` — the row's text (:data:`EMBED_TEXT`) and its SHA-256 (hex) — over the rows
    of ``table`` matching ``where`` (which may use ``space``, ``embed_hash`` and ``missing``), by id."""
    expr = {**EMBED_TEXT, **ARCHIVE_TEXT}[table]
    return sql.SQL("""SELECT id, t, h FROM (SELECT id, {e} AS t, encode(sha256(convert_to({e}, 'UTF8')),
                                                 'hex') AS h,
                                                 space, embed_hash, embedding IS NULL AS missing FROM {tab}) x
                       WHERE {where} ORDER BY id""").format(e=expr, tab=qualified(realm, table), where=where)


_STALE = sql.SQL("space = %s AND (embedding IS NULL OR embed_hash IS DISTINCT FROM text_hash)")
"""The rows of a space to (re-)embed — what the partial index ``<table>_stale`` holds."""


def pending(conn: psycopg.Connection, realm: str, space: str, table: str) -> list[tuple[int, str, str]]:
    """(id, text, sha256 of text) for the space's rows of ``table`` whose embedding is missing (rows
    with only a fallback vector included) or stale — through the partial index ``<table>_stale``
    (:func:`create_text_hashes`), so a space with nothing to embed costs an index look-up, not a hash of
    every row's text (issue 15)."""
    return list(stream_pending(conn, realm, space, table))


def stream_pending(
    conn: psycopg.Connection, realm: str, space: str, table: str, *, page: int = 2_000
) -> Iterator[tuple[int, str, str]]:
    """:func:`pending`'s rows by id, ``page`` rows at a time, so that embedding a million rows holds their
    ids (an array, 8 bytes a row) and one page of texts, not all (issue 30).

    The ids come first from the partial index ``<table>_stale`` alone, then each page's texts by primary
    key: the planner cannot estimate the stale predicate (``embed_hash IS DISTINCT FROM text_hash``, two
    columns) and, asked for the rows in id order, takes them all to be stale and walks the primary key over
    the whole table to skip a sort (0.28 s at 100k relations for a run with nothing to embed). Each page is
    read in its own statement: a row embedded or deleted meanwhile is skipped, a row whose text changed
    meanwhile comes with its new text and hash."""
    t = qualified(realm, table)
    ids = np.sort(
        np.fromiter(
            (
                r[0]
                for r in conn.execute(
                    sql.SQL("SELECT id FROM {t} WHERE {stale}").format(t=t, stale=_STALE), (space,)
                )
            ),
            dtype=np.int64,
        )
    )
    query = sql.SQL("SELECT id, {e}, text_hash FROM {t} WHERE id = ANY(%s) AND {stale} ORDER BY id").format(
        e=EMBED_TEXT[table], t=t, stale=_STALE
    )
    for at in range(0, len(ids), page):
        yield from conn.execute(query, (ids[at : at + page].tolist(), space))


def mean_pending_chars(
    conn: psycopg.Connection, realm: str, space: str, table: str, *, sample: int = 200
) -> float:
    """The mean length in characters of the texts of up to ``sample`` of the space's pending rows of ``table``
    (what :func:`pending` returns), 0.0 when none is pending: what the progress display weighs a table's texts
    by (a chunk's text is ten times an entity's, and its vector costs accordingly). Reads ``sample`` rows
    through the partial index ``<table>_stale``."""
    row = conn.execute(
        sql.SQL("SELECT avg(length(x)) FROM (SELECT {e} AS x FROM {t} WHERE {stale} LIMIT %s) s").format(
            e=EMBED_TEXT[table], t=qualified(realm, table), stale=_STALE
        ),
        (space, sample),
    ).fetchone()
    return float(row[0]) if row and row[0] is not None else 0.0


def count_pending(conn: psycopg.Connection, realm: str, space: str, table: str) -> int:
    """How many rows :func:`pending` would return (an index-only count over ``<table>_stale``)."""
    row = conn.execute(
        sql.SQL("SELECT count(*) FROM {t} WHERE {stale}").format(t=qualified(realm, table), stale=_STALE),
        (space,),
    ).fetchone()
    return int(row[0]) if row else 0


def create_text_hashes(conn: psycopg.Connection, schema: str) -> None:
    """Give every embedded table of realm schema ``schema`` the stored generated column ``text_hash`` (the
    SHA-256, hex, of the text it embeds — :data:`EMBED_TEXT` — as ``embed_hash`` records it when a vector is
    written) and the partial index ``<table>_stale`` of its rows without a vector or with a vector of other
    text; inside the caller's DDL transaction (:func:`pgrag_dag.store.schema.init_realm`). Idempotent; adding
    the column rewrites the table once."""
    s = sql.Identifier(schema)
    conn.execute(
        sql.SQL("""CREATE OR REPLACE FUNCTION {s}.text_sha256(t text) RETURNS text LANGUAGE sql IMMUTABLE
                            PARALLEL SAFE AS $f$ SELECT encode(sha256(convert_to(t, 'UTF8')),
                                'hex') $f$""").format(s=s)
    )
    for table, expr in EMBED_TEXT.items():
        conn.execute(
            sql.SQL(
                "ALTER TABLE {s}.{t} ADD COLUMN IF NOT EXISTS text_hash text GENERATED ALWAYS AS "
                "({s}.text_sha256({e})) STORED"
            ).format(s=s, t=sql.Identifier(table), e=expr)
        )
        conn.execute(
            sql.SQL(
                "CREATE INDEX IF NOT EXISTS {i} ON {s}.{t} (space) WHERE embedding IS NULL "
                "OR embed_hash IS DISTINCT FROM text_hash"
            ).format(i=sql.Identifier(f"{table}_stale"), s=s, t=sql.Identifier(table))
        )


def every_text(conn: psycopg.Connection, realm: str, table: str) -> list[tuple[int, str, str]]:
    """(id, text, sha256 of text) for every row of ``table`` in every space of the realm, by id
    (``pgrag reembed`` embeds them all, stored vector or not)."""
    return conn.execute(_texts(realm, table, sql.SQL("TRUE"))).fetchall()


def spaces(conn: psycopg.Connection, realm: str) -> list[str]:
    """Every space with a row in one of the realm's embedded tables, sorted."""
    union = sql.SQL(" UNION ").join(
        sql.SQL("SELECT DISTINCT space FROM {}").format(qualified(realm, table)) for table in EMBED_TEXT
    )
    return [
        r[0]
        for r in conn.execute(sql.SQL("SELECT space FROM ({}) x ORDER BY space").format(union)).fetchall()
    ]


def write(
    conn: psycopg.Connection,
    realm: str,
    table: str,
    rows: list[tuple[int, str, str]],
    vectors: list[np.ndarray],
    *,
    fallback: str | None = None,
) -> int:
    """Store ``vectors`` (one per ``(id, text, hash)`` row, in order) with their text hashes, in the
    caller's transaction: one binary ``COPY`` into a temporary table, then one ``UPDATE … FROM``.
    Returns the rows updated (rows deleted meanwhile are skipped). A vector of another width than the
    column's is a PostgreSQL error (nothing of the transaction is kept).

    The realm's model's vectors go to ``embedding`` (and clear any fallback vector). With ``fallback``
    (the fallback embedder's model name) they go to ``fallback_embedding``, flagged ``embed_fallback =
    fallback``, and only where the row has no ``embedding`` (a stale vector of the model is kept)."""
    return len(_store(conn, realm, table, rows, vectors, fallback=fallback, returning=sql.SQL("1")))


def write_audited(
    conn: psycopg.Connection,
    realm: str,
    table: str,
    rows: list[tuple[int, str, str]],
    vectors: list[np.ndarray],
    expected_dim: int,
    *,
    fallback: str | None = None,
) -> pl.DataFrame:
    """:func:`write`, returning the :func:`audit` frame of the rows it updated, read from the rows as
    the ``UPDATE`` stored them (``RETURNING``: no second read of the table; the frame's height is the
    rows updated). Same errors as :func:`write`."""
    found = _store(conn, realm, table, rows, vectors, fallback=fallback, returning=_AUDITED)
    return _audit_frame([(table, i, d, expected_dim, fin, miss, h) for i, d, miss, h, fin in found])


def _store(
    conn: psycopg.Connection,
    realm: str,
    table: str,
    rows: list[tuple[int, str, str]],
    vectors: list[np.ndarray],
    *,
    fallback: str | None,
    returning: sql.Composable,
) -> list[tuple[Any, ...]]:
    """:func:`write`'s statements, returning ``returning`` (over the updated row ``t``) per row updated."""
    if not rows:
        return []
    if len(rows) != len(vectors):
        raise ValueError(f"{len(rows)} rows but {len(vectors)} vectors")
    conn.execute(
        "CREATE TEMPORARY TABLE pgrag_vectors_in (id bigint, embedding vector, embed_hash text)"
        " ON COMMIT DROP"
    )
    with (
        conn.cursor() as cur,
        cur.copy("COPY pgrag_vectors_in (id, embedding, embed_hash) FROM STDIN WITH (FORMAT BINARY)") as copy,
    ):
        copy.set_types(["int8", "vector", "text"])
        for (i, _, h), vec in zip(rows, vectors, strict=True):
            copy.write_row((i, vec, h))
    # ``t.id = ANY(ids)``: the rows are found through the primary key. Joined on ``t.id = v.id`` alone, the
    # planner (which knows nothing of the fresh temporary table) hash-joins it against a scan of the whole
    # table — one full scan per flush, O(n²) over a first load of a million rows (issue 30)
    ids = [r[0] for r in rows]
    if fallback is None:
        updated = conn.execute(
            sql.SQL("""UPDATE {} t SET embedding = v.embedding, embed_hash = v.embed_hash,
                                                embed_fallback = NULL,
                                                fallback_embedding = NULL
                                  FROM pgrag_vectors_in v WHERE t.id = ANY(%s) AND t.id = v.id
                                  RETURNING {}""").format(qualified(realm, table), returning),
            (ids,),
        ).fetchall()
    else:
        updated = conn.execute(
            sql.SQL("""UPDATE {} t SET fallback_embedding = v.embedding, embed_hash = v.embed_hash,
                                                embed_fallback = %s
                                  FROM pgrag_vectors_in v WHERE t.id = ANY(%s) AND t.id = v.id
                                      AND t.embedding IS NULL
                                  RETURNING {}""").format(qualified(realm, table), returning),
            (fallback, ids),
        ).fetchall()
    conn.execute("DROP TABLE pgrag_vectors_in")
    return updated


def _audited(alias: str | None) -> sql.Composed:
    """:func:`audit`'s columns over a row (``alias.`` when given): id, dim, missing, embed_hash, finite."""
    p = sql.SQL("") if alias is None else sql.SQL("{}.").format(sql.Identifier(alias))
    # finite: a NaN or infinite component makes the norm (summed in double precision: no float32 value
    # overflows it) NaN or infinite, and PostgreSQL orders NaN above 'Infinity'. One pass over the floats:
    # 0.12 s per 20k stored vectors, against 0.25-0.32 s for a cast to real[] and an overlap with the three
    # values (pgvector refuses both on input already; this checks what is stored)
    columns = """{p}id, COALESCE(vector_dims({p}embedding), 0), {p}embedding IS NULL, {p}embed_hash,
                 COALESCE(vector_norm({p}embedding) < 'Infinity'::float8, true)"""
    return sql.SQL(columns).format(p=p)


_AUDITED = _audited("t")


def audit(
    conn: psycopg.Connection,
    realm: str,
    space: str,
    expected_dim: int,
    ids: dict[str, Sequence[int]] | None = None,
    *,
    after: dict[str, int] | None = None,
    limit: int | None = None,
) -> pl.DataFrame:
    """One row per stored embedding of the space — or only of the rows ``ids`` (table → row ids, e.g. what
    a run just wrote; a table not named is skipped): table, row_id, dim, expected_dim, finite, missing,
    embed_hash. ``after`` (table → id) and ``limit`` read a page: the first ``limit`` rows of each table by
    id above ``after``'s (see :func:`audit_pages`).

    ``finite`` is false when any component is NaN or infinite; rows without an embedding have
    ``missing`` true (and dim 0)."""
    parts: list[tuple[Any, ...]] = []
    tables = EMBED_TEXT if ids is None else [t for t in EMBED_TEXT if ids.get(t)]
    for table in [t for t in tables if after is None or t in after]:
        only = sql.SQL("") if ids is None else sql.SQL(" AND id = ANY(%(ids)s)")
        page = (
            sql.SQL("")
            if after is None
            else sql.SQL(" AND id > %(after)s ORDER BY id LIMIT {}").format(sql.Literal(limit))
        )
        rows = conn.execute(
            sql.SQL("SELECT {} FROM {} WHERE space = %(space)s{}{}").format(
                _audited(None), qualified(realm, table), only, page
            ),
            {
                "space": space,
                "ids": None if ids is None else list(ids[table]),
                "after": None if after is None else after[table],
            },
        ).fetchall()
        parts.extend((table, i, d, expected_dim, fin, miss, h) for i, d, miss, h, fin in rows)
    return _audit_frame(parts)


def _audit_frame(parts: list[tuple[Any, ...]]) -> pl.DataFrame:
    """The :func:`audit` frame of ``(table, row_id, dim, expected_dim, finite, missing, embed_hash)`` rows."""
    schema = {
        "table": pl.String,
        "row_id": pl.Int64,
        "dim": pl.Int64,
        "expected_dim": pl.Int64,
        "finite": pl.Boolean,
        "missing": pl.Boolean,
        "embed_hash": pl.String,
    }
    return pl.DataFrame(parts, schema=schema, orient="row")


def audit_pages(
    conn: psycopg.Connection,
    realm: str,
    space: str,
    expected_dim: int,
    tables: Sequence[str],
    page: int = 20_000,
) -> Iterator[pl.DataFrame]:
    """:func:`audit` of every stored embedding of ``tables`` in the space, ``page`` rows of a table at a time
    (by id, through the primary key), so that auditing a million vectors holds one page (issue 30)."""
    for table in tables:
        after = 0
        while True:
            frame = audit(conn, realm, space, expected_dim, after={table: after}, limit=page)
            if frame.height:
                yield frame
            if frame.height < page:
                break
            after = int(frame["row_id"].max())  # type: ignore[arg-type]


UNEMBEDDED_TABLES = ("documents", "entities", "relations")
"""The tables the ``embeddings`` stage embeds after earlier stages committed their rows."""


def unembedded(conn: psycopg.Connection, realm: str, space: str) -> dict[str, dict[str, int]]:
    """Rows no vector search can find, per table of :data:`UNEMBEDDED_TABLES`: ``{table: {"missing":
    rows without an embedding, "fallback": how many of them hold a fallback vector}}`` in ``space``
    (every space for the read-only wildcard ``"*"``). One statement over the partial indexes
    ``<table>_unembedded``, so it costs next to nothing while every row is embedded. A realm whose
    schema predates fallback vectors reports ``fallback`` 0."""
    where = (
        sql.SQL("TRUE")
        if validate_space(space, for_write=False) == WILDCARD_SPACE
        else sql.SQL("space = %(space)s")
    )

    def counts(fallback: sql.Composable) -> sql.Composed:
        return sql.SQL(" UNION ALL ").join(
            sql.SQL("SELECT {name}, count(*), {fb} FROM {tab} WHERE embedding IS NULL AND {where}").format(
                name=sql.Literal(table), fb=fallback, tab=qualified(realm, table), where=where
            )
            for table in UNEMBEDDED_TABLES
        )

    try:
        with conn.transaction():
            rows = conn.execute(counts(sql.SQL("count(embed_fallback)")), {"space": space}).fetchall()
    except psycopg.errors.UndefinedColumn:  # the realm has not been initialised at schema version 5 yet
        rows = conn.execute(counts(sql.SQL("0")), {"space": space}).fetchall()
    return {str(t): {"missing": int(n), "fallback": int(f)} for t, n, f in rows}
