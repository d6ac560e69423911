"""Run a Cypher query: parse, compile, one bounded read-only read, a polars frame (paper §2, §5.4; issue 29).

:func:`cypher` is the public entry (``pgrag_dag.cypher``), :func:`explain` shows the compiled SQL and its
parameters without running it (``pgrag cypher --explain``). The text is parsed and compiled — and refused,
if it must be — before a connection is taken, so no SQL runs for a refused query.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any

import polars as pl
import psycopg

from pgrag_dag.config.sections import CypherSettings
from pgrag_dag.cypher.compile import TIMEOUT_S, Compiled, CypherOptions, compile_query
from pgrag_dag.cypher.parse import parse
from pgrag_dag.errors import QueryError, UnknownSpaceError
from pgrag_dag.store import db
from pgrag_dag.store.retrieval import read_scope, unindexed_space
from pgrag_dag.temporal import Temporal, belief_instant


def compile_text(text: str, params: Mapping[str, Any] | None, options: CypherOptions) -> Compiled:
    """``text`` parsed and compiled for ``options`` (realm, space, temporal filters §5.4, limits):
    :func:`~pgrag_dag.cypher.compile.compile_query` of :func:`~pgrag_dag.cypher.parse.parse`. No
    database is touched. Raises :class:`~pgrag_dag.errors.CypherError` for a refused text."""
    return compile_query(parse(text), params, options)


def explain(
    text: str, params: Mapping[str, Any] | None, options: CypherOptions
) -> tuple[str, dict[str, Any]]:
    """``(SQL text, parameters)`` :func:`answer` would run — the SQL with ``%(name)s`` placeholders, the
    values beside it, never inlined. Raises as :func:`compile_text`."""
    compiled = compile_text(text, params, options)
    return compiled.query.as_string(None), dict(compiled.params)


def cypher(
    text: str,
    params: Mapping[str, Any] | None = None,
    *,
    dsn: str,
    realm: str,
    space: str,
    as_of: str | None = None,
    as_believed_at: str | datetime | None = None,
    include_superseded: bool = False,
    limits: CypherSettings | None = None,
    max_hops: int | None = None,
    max_rows: int | None = None,
    timeout_s: float | None = None,
) -> pl.DataFrame:
    """Answer a read-only openCypher query over ``realm``'s graph in ``space`` (``"*"``: every space of
    the realm, never another realm) as a polars frame, one column per RETURN item (named by its alias,
    else its text).

    ``params`` are the query's ``$parameters`` (strings, numbers, booleans, dates, ``None`` or lists of
    those), always bound, never spliced. ``as_of`` (``YYYY[-MM[-DD]]``: valid time), ``as_believed_at``
    (an ISO-8601 instant: belief time) and ``include_superseded`` apply inside every hop exactly as in the
    retrieval walk (§5.4). A node is an entity (labels: its type; properties: ``name, type, description,
    aliases, space``), a relationship a relation (type: its predicate; properties: ``predicate,
    description, weight, negated, confidence, valid_from, valid_to, t_created, t_expired, superseded_by,
    superseded, space``, the last three as believed at ``as_believed_at``); ``RETURN n`` gives a struct of
    those and the id. A variable-length relationship ``*lo..hi`` is at most ``max_hops`` long and binds its
    relation ids (a list, path order).

    The read runs in one ``READ ONLY`` repeatable-read transaction on a pooled reader with
    ``statement_timeout = timeout_s``; a result longer than ``max_rows`` is refused (add ``LIMIT``). The
    three limits come from ``limits`` — the ``cypher:`` settings (``engine.settings.cypher``;
    :class:`~pgrag_dag.config.sections.CypherSettings`, whose defaults apply when it is ``None``: 5 hops,
    10,000 rows, 10 s) — unless given here. The keywords make one
    :class:`~pgrag_dag.cypher.compile.CypherOptions` for :func:`answer`.

    Raises:
        CypherError: the text is refused (a writing clause, a syntax error, an unknown property or
            function, an unbounded or too long path, a missing parameter) — before any SQL runs.
        QueryError: an unknown realm or space, a read past ``timeout_s``, more than ``max_rows`` rows, a
            malformed ``as_of`` / ``as_believed_at``.
        InvalidNameError: an invalid realm or space name.
        DatabaseError: PostgreSQL unreachable, or it refused the read (e.g. comparing text with a number).
    """
    believed = None if as_believed_at is None else belief_instant(as_believed_at)
    temporal = Temporal(as_of=as_of, believed_at=believed, include_superseded=include_superseded)
    options = CypherOptions.bounded(
        realm,
        space,
        temporal,
        limits or CypherSettings(),
        max_hops=max_hops,
        max_rows=max_rows,
        timeout_s=timeout_s,
    )
    return answer(text, params, options, dsn=dsn)


def answer(text: str, params: Mapping[str, Any] | None, options: CypherOptions, *, dsn: str) -> pl.DataFrame:
    """:func:`cypher` for ``options`` on the database ``dsn``: compiled (and refused, if it must be) before
    a connection is taken, then read. Raises as :func:`cypher`."""
    compiled = compile_text(text, params, options)
    realm, space = options.realm, options.space
    with _read_errors(dsn, options.timeout_s), db.read_connection(dsn) as conn:
        registered, found = read_scope(conn, realm, space)
        if registered is None:
            raise QueryError(f"realm {realm!r} does not exist (it has never been indexed)")
        if not found:
            raise UnknownSpaceError(unindexed_space(realm, space))
        rows = run(conn, compiled, timeout_s=options.timeout_s)
    if len(rows) > options.max_rows:
        raise QueryError(
            f"the result has more than {options.max_rows} rows (max_rows): add LIMIT or raise max_rows"
        )
    return frame(rows, compiled.columns)


def run(
    conn: psycopg.Connection, compiled: Compiled, *, timeout_s: float = TIMEOUT_S
) -> list[tuple[Any, ...]]:
    """The rows of ``compiled`` read on ``conn`` in a ``READ ONLY`` transaction of its own (a savepoint
    of the caller's when one is open) with ``statement_timeout`` set for it alone."""
    owned = conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    with conn.transaction():
        if owned:  # inside a caller's transaction it would outlive the savepoint: theirs to set
            conn.execute("SET TRANSACTION READ ONLY")
        conn.execute(
            "SELECT set_config('statement_timeout', %s, true)", (f"{max(1, round(timeout_s * 1000))}",)
        )
        with conn.cursor() as cur:
            # a plan for these very values: a query text is rarely run twice, and a generic plan would not
            # see which names and predicates are selective
            cur.execute(compiled.query, compiled.params, prepare=False)
            return cur.fetchall()


def frame(rows: list[tuple[Any, ...]], columns: tuple[str, ...]) -> pl.DataFrame:
    """``rows`` as a frame of ``columns`` (types inferred from every row; a node or relationship is a
    struct, a list a list)."""
    if not rows:
        return pl.DataFrame({name: [] for name in columns})
    return pl.DataFrame(rows, schema=list(columns), orient="row", infer_schema_length=None)


@contextlib.contextmanager
def _read_errors(dsn: str, timeout_s: float) -> Iterator[None]:
    """A read past the timeout becomes :class:`QueryError`; any other psycopg error a
    :class:`~pgrag_dag.errors.DatabaseError` naming the server."""
    with db.database_errors(dsn):
        try:
            yield
        except psycopg.errors.QueryCanceled as exc:
            raise QueryError(
                f"the Cypher read ran past its timeout ({timeout_s:g} s): bound the pattern or add LIMIT"
            ) from exc
