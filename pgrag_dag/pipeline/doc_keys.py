"""Stable document keys (issue 16): a file's doc_key is its path relative to its source's root, and stores
keyed under an earlier rule are re-keyed in place.

Until issue 16 a text file's doc_key (and ``source``, shown to the model) was its path relative to the
configuration file's directory, or absolute; moving the configuration, or writing a source path absolutely
instead of relatively, re-keyed every document — removing and re-adding it, re-extracting every chunk.
Now the key is the path relative to the source's directory (a single-file source: the file name), after
the source's ``key_prefix`` (:mod:`pgrag_dag.ingest.sources`). A store indexed under the old rule is migrated
by the next ``chunks`` run (:func:`plan_renames`, applied by
:func:`pgrag_dag.store.documents.rename_documents` in the stage's write transaction): each document still
stored under the key the old rule gives it from the current configuration — or under its key without a
``key_prefix`` added since — is renamed to its new key. Its chunk rows keep their ids, so raw extractions,
gate decisions, mentions, relations and vectors stay as they are and no model is called; its archived
chunks (``documents_removed``) are renamed with it; the belief log gains one ``renamed`` event (the log is
append-only, so the earlier events keep the old key and readers follow ``renamed_from``), and the change
feed lists it under ``documents_renamed`` — neither removed nor added, since nothing else changed.
"""

from __future__ import annotations

from collections.abc import Collection

import polars as pl
import psycopg

from pgrag_dag.engine import Engine
from pgrag_dag.ingest.sources import Sources, read_sources
from pgrag_dag.pipeline.composition import compose
from pgrag_dag.store import db, documents, locks, work_queue
from pgrag_dag.store.documents import Rename


def document_prints(
    docs: pl.DataFrame, chunker_print: str, *, source: dict[str, str] | None = None
) -> dict[str, str]:
    """doc_key → the fingerprint of what a document's chunks are made from (text hash, title, ``source``,
    metadata, the chunker's ``chunker_print``; not its order), for every row of the ``documents`` frame;
    ``source`` (doc_key → source) replaces the frame's ``source`` where given (the print a document had
    under another key)."""
    source = source or {}
    cols = docs.select("doc_key", "doc_hash", "title", "source", "metadata")
    if any(cols[c].null_count() for c in cols.columns):  # what only json.dumps writes (null)
        return {
            k: work_queue.fingerprint([chunker_print, h, t, source.get(k, s), m])
            for k, h, t, s, m in cols.iter_rows()
        }
    print_of = work_queue.fingerprint_strings
    return {k: print_of((chunker_print, h, t, source.get(k, s), m)) for k, h, t, s, m in cols.iter_rows()}


def plan_renames(
    conn: psycopg.Connection,
    realm: str,
    space: str,
    read: Sources,
    prints: dict[str, str],
    chunker_print: str,
    *,
    stored: Collection[str] = (),
) -> list[Rename]:
    """The stored documents of ``realm``/``space`` to re-key (see the module): for each document ``read``
    (or skipped with a known key) not stored under its key, the first of its :attr:`Sources.earlier_keys`
    that is stored and is no current document's key. ``prints``: :func:`document_prints` of ``read``; a
    renamed document whose stored fingerprint is the one it had under its old key gets its new one, so it
    is not chunked again. ``stored``: keys known to be stored (their documents need no rename, and once
    every document is stored under its key nothing is read). Reads only."""
    current = set(read.documents["doc_key"].to_list()) | {
        s.doc_key for s in read.skipped if s.doc_key is not None
    }
    known = set(stored)
    earlier = {new: keys for new, keys in read.earlier_keys.items() if new not in known}
    wanted = set(earlier) | {k for keys in earlier.values() for k in keys}
    if not wanted:
        return []
    indexed = documents.indexed_keys(conn, realm, space, wanted)
    taken: set[str] = set()
    moves: dict[str, str] = {}
    for new, keys in earlier.items():
        old = next((k for k in keys if k in indexed and k not in current and k not in taken), None)
        if new not in indexed and old is not None:
            taken.add(old)
            moves[new] = old
    docs = read.documents.filter(pl.col("doc_key").is_in(sorted(moves)))
    before = document_prints(docs, chunker_print, source=moves)
    return [Rename(old, new, new, before.get(new), prints.get(new)) for new, old in moves.items()]


def migrate_keys(engine: Engine, realm: str, space: str) -> list[Rename]:
    """Re-key ``realm``/``space``'s stored documents to the current rule now, in one transaction under the
    ``chunks`` stage lock and the partition lock (what the next ``chunks`` run does first; the demo calls it
    before looking for a document by its key). Returns the renames done. Raises as
    :func:`pgrag_dag.ingest.sources.read_sources` (missing sources are allowed: they name no document),
    :class:`~pgrag_dag.errors.PartitionBusyError` when a stage of the space holds its lock, and
    :class:`~pgrag_dag.errors.DatabaseError`."""
    engine.init_realm(realm)
    read = read_sources(engine.settings, realm, space, allow_empty=True)
    chunker_print = work_queue.fingerprint(compose(engine.settings, realm, space).chunker.describe())
    prints = document_prints(read.documents, chunker_print)
    with (
        db.database_errors(engine.dsn),
        locks.stage_lock(engine.dsn, realm, space, "chunks", wait_s=engine.settings.operations.lock_wait_s),
    ):
        with engine.connect() as conn, conn.transaction():
            locks.lock_partition(conn, realm, space)
            return documents.rename_documents(
                conn, realm, space, plan_renames(conn, realm, space, read, prints, chunker_print)
            )
