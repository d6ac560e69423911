"""Instants of the belief history a reader asks about (paper §5.3; issue 14): when a document arrived.

Read-only SQL over a realm's ``documents`` and ``belief_log`` (:mod:`pgrag_dag.store.history`). A
belief-time query at :func:`before_added` reads the graph as it stood just before a document was added:
every write of that document's run, the chunk sync that logged ``added`` included, is later.
"""

from __future__ import annotations

from datetime import datetime

import psycopg
from psycopg import sql

from pgrag_dag.names import schema_for
from pgrag_dag.store.schema import qualified


def document_indexed(conn: psycopg.Connection, realm: str, space: str, doc_key: str) -> bool:
    """Whether ``space`` of ``realm`` holds chunks of ``doc_key`` now; ``False`` for a realm never indexed
    (no ``documents`` table). Raises :class:`~pgrag_dag.errors.InvalidNameError` for a bad realm name."""
    if not _exists(conn, realm, "documents"):
        return False
    found = conn.execute(sql.SQL("SELECT 1 FROM {} WHERE space = %s AND doc_key = %s LIMIT 1").format(
        qualified(realm, "documents")), (space, doc_key)).fetchone()
    return found is not None


def before_added(conn: psycopg.Connection, realm: str, space: str, doc_key: str) -> datetime | None:
    """The last instant before ``doc_key`` was last added to ``space``: the ``at`` of its latest
    ``belief_log`` event ``added`` (the database clock of the chunk sync that added it) minus one
    microsecond, PostgreSQL's resolution — a ``timestamptz`` as a timezone-aware :class:`datetime`.
    ``None`` when the document was never added (or the realm has no history). Reads ``belief_log``."""
    if not _exists(conn, realm, "belief_log"):
        return None
    row = conn.execute(sql.SQL(
        """SELECT max(at) - interval '1 microsecond' FROM {}
            WHERE space = %s AND kind = 'document' AND doc_key = %s AND event = 'added'""").format(
        qualified(realm, "belief_log")), (space, doc_key)).fetchone()
    return None if row is None else row[0]


def _exists(conn: psycopg.Connection, realm: str, table: str) -> bool:
    row = conn.execute("SELECT to_regclass(%s)", (f'"{schema_for(realm)}"."{table}"',)).fetchone()
    return row is not None and row[0] is not None
