"""SQL for ``source_files``: what the chunks stage last read from each text file of a space (issue 30 item 2).

One row per text file (space, path): its doc_key, the ``size`` (bytes), ``mtime_ns`` (modification time,
nanoseconds since the epoch) and ``inode`` its ``os.stat`` gave when it was read, and the ``doc_hash`` of
the text read then. A later run trusts that hash for a file whose size, modification time and inode are
unchanged and reads nothing of it (:func:`pgrag_dag.ingest.sources.read_sources`); ``pgrag index --verify``
(or ``--full``) reads and hashes every file regardless. JSONL sources are read whole every run and have no
row. A purge of a document removes its row (the path names the document); deleting a space removes them all.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

import psycopg
from psycopg import sql

from pgrag_dag.store.identifiers import qualified


class FileStat(NamedTuple):
    """What ``os.stat`` said of a text file when it was read, and the hash of what was read."""

    doc_key: str
    size: int
    mtime_ns: int
    inode: int
    doc_hash: str


def create_source_files(conn: psycopg.Connection, schema: str) -> None:
    """Create the ``source_files`` table of realm schema ``schema``, inside the caller's DDL transaction
    (:func:`pgrag_dag.store.schema.init_realm`). Idempotent."""
    conn.execute(
        sql.SQL("""CREATE TABLE IF NOT EXISTS {s}.source_files (
                       space text NOT NULL,
                       path text NOT NULL,
                       doc_key text NOT NULL,
                       size bigint NOT NULL,
                       mtime_ns bigint NOT NULL,
                       inode bigint NOT NULL,
                       doc_hash text NOT NULL,
                       PRIMARY KEY (space, path))""").format(s=sql.Identifier(schema))
    )


def load_stats(conn: psycopg.Connection, realm: str, space: str) -> dict[str, FileStat]:
    """path → :class:`FileStat` of every file of ``space`` recorded by an earlier run."""
    rows = conn.execute(
        sql.SQL("SELECT path, doc_key, size, mtime_ns, inode, doc_hash FROM {} WHERE space = %s").format(
            qualified(realm, "source_files")
        ),
        (space,),
    ).fetchall()
    # the driver gives str and int already: one tuple per row, no conversion (50k files, issue 30)
    return {row[0]: FileStat._make(row[1:]) for row in rows}


def write_stats(
    conn: psycopg.Connection,
    realm: str,
    space: str,
    stats: Mapping[str, FileStat],
    *,
    before: Mapping[str, FileStat],
) -> int:
    """Record ``stats`` (path → :class:`FileStat`, the files this run read or trusted) where they differ from
    ``before`` (:func:`load_stats` at the start of the run), and forget the files of ``before`` not in
    ``stats`` (removed, skipped this run, or read too soon after a write to be trusted). In the caller's
    transaction. Returns rows written or removed."""
    table = qualified(realm, "source_files")
    changed = [(space, p, *s) for p, s in stats.items() if before.get(p) != s]
    gone = sorted(set(before) - set(stats))
    with conn.cursor() as cur:
        if changed:
            cur.executemany(
                sql.SQL("""INSERT INTO {} (space, path, doc_key, size, mtime_ns, inode, doc_hash)
                           VALUES (%s, %s, %s, %s, %s, %s, %s)
                           ON CONFLICT (space, path) DO UPDATE SET doc_key = EXCLUDED.doc_key,
                               size = EXCLUDED.size, mtime_ns = EXCLUDED.mtime_ns, inode = EXCLUDED.inode,
                               doc_hash = EXCLUDED.doc_hash""").format(table),
                changed,
            )
        if gone:
            cur.execute(
                sql.SQL("DELETE FROM {} WHERE space = %s AND path = ANY(%s)").format(table), (space, gone)
            )
    return len(changed) + len(gone)
