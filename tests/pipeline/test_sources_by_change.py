"""Sources read by change (issue 30 item 2): the chunks stage trusts a text file whose size, modification
time and inode are what it recorded, reads only candidates, and ``full`` (``pgrag index --verify``) reads
every file — the only way to see an edit that kept all three."""

from __future__ import annotations

import os
import time
from pathlib import Path

import polars as pl
from psycopg import sql

from pgrag_dag.ingest.splitting import CHUNK_SCHEMA
from pgrag_dag.pipeline import stage_chunks
from pgrag_dag.store import db, documents
from pgrag_dag.store.schema import schema_for
from tests.fix_corpus import SmallCorpus

HOUR_NS = 3_600 * 10**9


def _age(path: Path, ns: int) -> None:
    """Set the file's modification time ``ns`` nanoseconds into the past: older than the racy window."""
    then = time.time_ns() - ns
    os.utime(path, ns=(then, then))


def _files(corpus: SmallCorpus, realm: str) -> dict[str, tuple[int, str]]:
    with db.connect(corpus.engine().dsn) as conn:
        rows = conn.execute(
            sql.SQL("SELECT doc_key, size, doc_hash FROM {}.source_files WHERE space = 'main'").format(
                sql.Identifier(schema_for(realm))
            )
        ).fetchall()
    return {k: (s, h) for k, s, h in rows}


def _chunk_texts(corpus: SmallCorpus, realm: str, doc_key: str) -> list[str]:
    with db.connect(corpus.engine().dsn) as conn:
        rows = conn.execute(
            sql.SQL(
                "SELECT text FROM {}.documents WHERE space = 'main' AND doc_key = %s ORDER BY chunk_index"
            ).format(sql.Identifier(schema_for(realm))),
            (doc_key,),
        ).fetchall()
    return [r[0] for r in rows]


def test_unchanged_files_are_trusted_unread_and_verify_sees_an_edit_that_kept_size_and_mtime(
    small_corpus: SmallCorpus, realm: str
) -> None:
    engine = small_corpus.engine()
    docs = sorted(p for p in (small_corpus.root / "docs").iterdir() if p.is_file())
    assert len(docs) >= 2
    for p in docs:
        _age(p, HOUR_NS)
    first = stage_chunks(engine, realm, "main").metadata
    assert (first["documents_read"], first["documents_trusted"]) == (len(docs), 0)
    recorded = _files(small_corpus, realm)
    assert {k: s for k, (s, _) in recorded.items()} == {p.name: p.stat().st_size for p in docs}

    again = stage_chunks(engine, realm, "main").metadata
    assert (again["documents_read"], again["documents_trusted"]) == (0, len(docs))
    assert again["documents_unchanged"] == len(docs) and again["rows_changed"] == 0

    edited = docs[0]  # an edit that changes the size: read, re-chunked, recorded anew
    edited.write_text(
        edited.read_text(encoding="utf-8") + "\nCharles Babbage kept a ledger.\n", encoding="utf-8"
    )
    _age(edited, HOUR_NS // 2)
    changed = stage_chunks(engine, realm, "main").metadata
    assert (changed["documents_read"], changed["documents_trusted"]) == (1, len(docs) - 1)
    assert changed["documents_replaced"] == 1
    assert _files(small_corpus, realm)[edited.name][0] == edited.stat().st_size

    # the same size and modification time, other bytes: trusted (documented), until --verify reads it
    st = edited.stat()
    text = edited.read_text(encoding="utf-8")
    swapped = text.replace("ledger", "LEDGER")
    assert len(swapped) == len(text) and swapped != text
    with edited.open("r+", encoding="utf-8") as f:  # in place: the inode stays
        f.write(swapped)
    os.utime(edited, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (edited.stat().st_size, edited.stat().st_mtime_ns, edited.stat().st_ino) == (
        st.st_size,
        st.st_mtime_ns,
        st.st_ino,
    )
    missed = stage_chunks(engine, realm, "main").metadata
    assert missed["documents_replaced"] == 0 and missed["documents_trusted"] == len(docs)
    assert not any("LEDGER" in t for t in _chunk_texts(small_corpus, realm, edited.name))
    verified = stage_chunks(engine, realm, "main", full=True).metadata
    assert (verified["documents_read"], verified["documents_trusted"]) == (len(docs), 0)
    assert verified["documents_replaced"] == 1
    assert any("LEDGER" in t for t in _chunk_texts(small_corpus, realm, edited.name))


def test_a_file_written_within_the_racy_window_is_not_trusted_and_a_removed_file_is_forgotten(
    small_corpus: SmallCorpus, realm: str
) -> None:
    engine = small_corpus.engine()
    docs = sorted(p for p in (small_corpus.root / "docs").iterdir() if p.is_file())
    for p in docs[1:]:
        _age(p, HOUR_NS)
    # modified "within the racy window" whatever the machine's speed: a minute ahead of the clock, so however
    # long the runs below take, it is never old enough to be trusted (no test timing depends on the load)
    ahead = time.time_ns() + 60 * 10**9
    os.utime(docs[0], ns=(ahead, ahead))
    stage_chunks(engine, realm, "main")
    assert sorted(_files(small_corpus, realm)) == sorted(p.name for p in docs[1:])
    again = stage_chunks(engine, realm, "main").metadata
    assert again["documents_read"] == 1  # read again: nothing was recorded for it
    docs[-1].unlink()
    gone = stage_chunks(engine, realm, "main").metadata
    assert gone["documents_removed"] == 1 and docs[-1].name not in _files(small_corpus, realm)


def test_the_stored_state_read_before_the_lock_is_checked_and_sync_agrees_with_it_or_without(
    small_corpus: SmallCorpus, realm: str
) -> None:
    """Issue 30: the chunks stage reads the stored prints and orders once, before its write transaction, and
    uses them under the partition lock only when :func:`documents.state_version` is unchanged (a purge or
    deletion in between moves it); given them, ``sync_chunks`` reads back only the documents it chunks and
    decides as it does reading the whole space."""
    engine = small_corpus.engine()
    stage_chunks(engine, realm, "main")
    empty = pl.DataFrame(schema={**CHUNK_SCHEMA, "metadata": pl.String})
    with db.connect(engine.dsn) as conn:
        stored = documents.stored_documents(conn, realm, "main")
        keys = sorted(stored.orders)
        assert len(keys) == 2 and set(stored.fingerprints) == set(keys)
        assert documents.state_version(conn, realm, "main") == stored.version
        assert stored.version[0] == documents.count_chunks(conn, realm, "main")
        with conn.transaction(force_rollback=True):  # what a purge between read and write does
            documents.delete_document_chunks(conn, realm, "main", keys[0])
            assert documents.state_version(conn, realm, "main") != stored.version
        with conn.transaction(
            force_rollback=True
        ):  # a rename (the chunks stage's own, under its lock) keeps it
            documents.rename_documents(
                conn, realm, "main", [documents.Rename(keys[0], "moved.txt", "moved.txt")]
            )
            assert documents.state_version(conn, realm, "main") == stored.version
        outcomes = []
        for known in (None, stored.orders):  # keys[1] read unchanged, keys[0] gone from the sources
            with conn.transaction(force_rollback=True):
                sync = documents.sync_chunks(
                    conn,
                    realm,
                    "main",
                    empty,
                    metadata={},
                    unchanged_docs={keys[1]},
                    orders={keys[1]: stored.orders[keys[1]] + 1},
                    stored_orders=known,
                )
                order = conn.execute(
                    sql.SQL(
                        "SELECT DISTINCT doc_order FROM {}.documents WHERE space = 'main' AND doc_key = %s"
                    ).format(sql.Identifier(schema_for(realm))),
                    (keys[1],),
                ).fetchall()
                outcomes.append(
                    (sync.removed, sync.unchanged, sync.added, sync.replaced, sync.restamped, order)
                )
        assert (
            outcomes[0]
            == outcomes[1]
            == (
                [keys[0]],
                [keys[1]],
                [],
                [],
                len(_chunk_texts(small_corpus, realm, keys[1])),
                [(stored.orders[keys[1]] + 1,)],
            )
        )
