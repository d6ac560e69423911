"""SQL for the ``documents`` (chunk) vertex table (paper Table 1, §5.5).

Idempotent re-indexing: a document whose chunk hashes are unchanged is left alone; a changed one has
its previous chunks removed (cascading to their raw extractions, gate decisions and mentions) and its
new chunks inserted; a document no longer in the sources is removed. Removed chunks are archived and
each document added, replaced or removed is logged in the belief history (issue 14).
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

import polars as pl
import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from pgrag_dag.store import history
from pgrag_dag.store.identifiers import qualified


@dataclass(frozen=True)
class ChunkSync:
    """What :func:`sync_chunks` changed: doc_keys added, replaced, removed, unchanged; chunks inserted;
    doc_keys ``kept`` (stored, absent from ``chunks``, kept as asked) and ``withheld`` (stored, absent,
    not removed because removals were withheld); ``restamped``: unchanged chunks whose order or metadata
    was brought up to date."""

    added: list[str]
    replaced: list[str]
    removed: list[str]
    unchanged: list[str]
    chunks_inserted: int
    kept: list[str] = field(default_factory=list)
    withheld: list[str] = field(default_factory=list)
    restamped: int = 0


def sync_chunks(
    conn: psycopg.Connection,
    realm: str,
    space: str,
    chunks: pl.DataFrame,
    *,
    metadata: dict[str, str],
    keep: Collection[str] = (),
    keep_all: bool = False,
    fingerprints: dict[str, str] | None = None,
    unchanged_docs: Collection[str] = (),
    orders: dict[str, int] | None = None,
    stored_orders: Mapping[str, int] | None = None,
) -> ChunkSync:
    """Make the space's stored chunks equal ``chunks`` (the ``chunks`` frame), document by document.

    ``metadata`` maps doc_key → document metadata JSON; a ``metadata`` column in ``chunks`` (JSON text,
    the chunk's own, e.g. its section) wins over it. A stored document absent from ``chunks`` is removed
    unless its doc_key is in ``keep`` (a document that could not be read this time: its chunks stay as
    they are) or in ``unchanged_docs`` (read, and its :func:`stored_documents` fingerprint is what it was:
    not chunked again, issue 15); with ``keep_all`` none is removed. ``fingerprints`` (doc_key → fingerprint)
    is stored with the chunks written or restamped; ``orders`` (doc_key → doc_order, every document read)
    re-orders the stored documents (:func:`_reorder`). ``stored_orders``: doc_key → doc_order of every stored
    document, when the caller knows them current (:func:`stored_documents`, checked by :func:`state_version`
    under the partition lock): only the documents of ``chunks`` are then read back, and nothing when no
    document is chunked and none moved — O(changed documents), not O(space) (issue 30). Runs inside the
    caller's transaction.
    """
    fingerprints = fingerprints or {}
    wanted: dict[str, pl.DataFrame] = {k[0]: g.sort("chunk_index") for k, g in chunks.group_by(["doc_key"])}
    stored = _chunk_hashes(conn, realm, space, None if stored_orders is None else list(wanted))
    present = stored.keys() if stored_orders is None else stored_orders.keys()
    added, replaced, unchanged = [], [], list(unchanged_docs)
    skip = set(unchanged)
    inserted = 0
    for doc_key in sorted(wanted, key=lambda k: (int(wanted[k]["doc_order"][0]), k)):
        frame = wanted[doc_key]
        hashes = ",".join(frame["content_hash"].to_list())
        if stored.get(doc_key) == hashes:
            unchanged.append(doc_key)
            continue
        if doc_key in stored:
            delete_document_chunks(conn, realm, space, doc_key)
            replaced.append(doc_key)
        else:
            added.append(doc_key)
        with conn.cursor() as cur:
            cur.executemany(
                sql.SQL("""INSERT INTO {} (space, doc_key, chunk_index, title, source, doc_order, text,
                                          content_hash,
                                          doc_hash, metadata, doc_fingerprint)
                           VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)""").format(
                    qualified(realm, "documents")
                ),
                [
                    (
                        space,
                        r["doc_key"],
                        r["chunk_index"],
                        r["title"],
                        r["source"],
                        r["doc_order"],
                        r["text"],
                        r["content_hash"],
                        r["doc_hash"],
                        Jsonb(_json(r.get("metadata") or metadata.get(doc_key))),
                        fingerprints.get(doc_key),
                    )
                    for r in frame.iter_rows(named=True)
                ],
            )
        inserted += frame.height
    same = [k for k in unchanged if k in wanted]
    restamped = _reorder(conn, realm, space, orders or {}, stored_orders)
    restamped += _restamp(
        conn, realm, space, pl.concat([wanted[k] for k in same]) if same else None, metadata, fingerprints
    )
    absent = set(present) - set(wanted) - skip
    kept = sorted(absent & set(keep))
    removed = [] if keep_all else sorted(absent - set(kept))
    for doc_key in removed:
        delete_document_chunks(conn, realm, space, doc_key)
    history.log_documents(
        conn,
        realm,
        space,
        [(k, "added") for k in added]
        + [(k, "replaced") for k in replaced]
        + [(k, "removed") for k in removed],
    )
    return ChunkSync(
        added,
        replaced,
        removed,
        unchanged,
        inserted,
        kept,
        sorted(absent - set(kept)) if keep_all else [],
        restamped,
    )


def _chunk_hashes(
    conn: psycopg.Connection, realm: str, space: str, keys: Collection[str] | None
) -> dict[str, str]:
    """doc_key → its stored chunks' content hashes, comma-joined in chunk order: of every document of the
    space, or of those of ``keys``."""
    only = sql.SQL("") if keys is None else sql.SQL(" AND md5(doc_key) = ANY(%s)")
    if keys is not None and not keys:
        return {}
    md5s = [hashlib.md5(k.encode("utf-8")).hexdigest() for k in keys or ()]
    rows = conn.execute(
        sql.SQL(
            "SELECT doc_key, string_agg(content_hash, ',' ORDER BY chunk_index) FROM {} WHERE space = %s{}"
            " GROUP BY doc_key"
        ).format(qualified(realm, "documents"), only),
        (space,) if keys is None else (space, md5s),
    ).fetchall()
    return {k: h for k, h in rows if keys is None or k in keys}


def _restamp(
    conn: psycopg.Connection,
    realm: str,
    space: str,
    frame: pl.DataFrame | None,
    metadata: dict[str, str],
    fingerprints: dict[str, str],
) -> int:
    """Bring unchanged documents' chunks up to date where only their order, metadata or fingerprint changed (a
    file renamed in the order, a JSONL field edited, chunk offsets recorded since they were indexed): one
    set-based UPDATE touching only rows that differ. Returns how many rows it changed."""
    if frame is None or frame.height == 0:
        return 0
    import json

    metas = [
        json.dumps(_json(r.get("metadata") or metadata.get(r["doc_key"])), ensure_ascii=False)
        for r in frame.iter_rows(named=True)
    ]
    prints = [fingerprints.get(k) for k in frame["doc_key"].to_list()]
    return conn.execute(
        sql.SQL("""UPDATE {t} d SET doc_order = v.doc_order, metadata = v.metadata, doc_fingerprint = v.fp
                     FROM unnest(%s::text[], %s::int[], %s::int[], %s::jsonb[], %s::text[])
                          AS v(doc_key, chunk_index, doc_order, metadata, fp)
                    WHERE d.space = %s AND md5(d.doc_key) = md5(v.doc_key) AND d.doc_key = v.doc_key
                      AND d.chunk_index = v.chunk_index
                      AND (d.doc_order, d.metadata, d.doc_fingerprint) IS DISTINCT FROM (v.doc_order,
                          v.metadata, v.fp)""").format(t=qualified(realm, "documents")),
        (
            frame["doc_key"].to_list(),
            frame["chunk_index"].to_list(),
            frame["doc_order"].to_list(),
            metas,
            prints,
            space,
        ),
    ).rowcount


ORDER_SPACING = 1024
"""The gap between consecutive ``doc_order`` keys when they are (re)numbered: ten halvings' room for
documents inserted at one place before the space is renumbered."""
ORDER_MAX = 2**31 - 1  # doc_order is a PostgreSQL integer


def sparse_orders(ranked: Sequence[str], stored: Mapping[str, int]) -> dict[str, int]:
    """doc_key → ``doc_order`` key for the documents ``ranked`` (in the space's order), so that adding,
    changing or deleting one document writes O(that document) rows wherever it sits (issue 30 item 1): keys
    are sparse and only compared, so the stored keys of the longest run of documents whose stored keys
    already ascend in ``ranked`` order stay as they are, and every other document — new, or moved — takes a
    key in the gap between its kept neighbours. Where a gap is too narrow for what must go in it, every
    document is renumbered :data:`ORDER_SPACING` apart (or as far apart as :data:`ORDER_MAX` allows): the
    one case that rewrites the space, as the first run after an upgrade from dense keys does."""
    n = len(ranked)
    spacing = max(1, min(ORDER_SPACING, ORDER_MAX // (n + 1)))
    kept = _ascending_run([(i, stored[k]) for i, k in enumerate(ranked) if k in stored])
    out = {ranked[i]: stored[ranked[i]] for i in kept}
    anchors = [-1, *sorted(kept), n]
    for lo_i, hi_i in zip(anchors, anchors[1:]):
        gap = range(lo_i + 1, hi_i)
        if not gap:
            continue
        lo = stored[ranked[lo_i]] if lo_i >= 0 else None
        hi = stored[ranked[hi_i]] if hi_i < n else None
        lo = lo if lo is not None else 0 if hi is None else hi - (len(gap) + 1) * spacing
        hi = hi if hi is not None else lo + (len(gap) + 1) * spacing
        if hi - lo - 1 < len(gap) or lo < -ORDER_MAX or hi > ORDER_MAX:
            return {k: (i + 1) * spacing for i, k in enumerate(ranked)}
        for j, i in enumerate(gap, start=1):
            out[ranked[i]] = lo + j * (hi - lo) // (len(gap) + 1)
    return out


def _ascending_run(keys: Sequence[tuple[int, int]]) -> list[int]:
    """The positions of a longest strictly ascending subsequence of ``keys`` ((position, key) in position
    order), O(n log n) (patience sorting): the documents whose stored order keys can stay."""
    if all(a[1] < b[1] for a, b in zip(keys, keys[1:])):  # nothing moved: the common case, one pass
        return [p for p, _ in keys]
    tail_keys: list[int] = []  # the smallest last key of an ascending run of each length
    tails: list[int] = []  # its index into ``keys``
    prev = [-1] * len(keys)
    for j, (_, key) in enumerate(keys):
        at = bisect.bisect_left(tail_keys, key)
        if at > 0:
            prev[j] = tails[at - 1]
        if at == len(tails):
            tail_keys.append(key)
            tails.append(j)
        else:
            tail_keys[at], tails[at] = key, j
    run, j = [], tails[-1] if tails else -1
    while j >= 0:
        run.append(keys[j][0])
        j = prev[j]
    return run[::-1]


def stored_orders(conn: psycopg.Connection, realm: str, space: str) -> dict[str, int]:
    """doc_key → stored ``doc_order`` of every document of the space."""
    return {
        str(k): int(o)
        for k, o in conn.execute(
            sql.SQL(
                "SELECT DISTINCT ON (doc_key) doc_key, doc_order FROM {} WHERE space = %s ORDER BY doc_key"
            ).format(qualified(realm, "documents")),
            (space,),
        ).fetchall()
    }


def _reorder(
    conn: psycopg.Connection,
    realm: str,
    space: str,
    orders: dict[str, int],
    known: Mapping[str, int] | None = None,
) -> int:
    """Give stored documents the ``doc_order`` of ``orders`` (doc_key → doc_order) where it moved: one
    set-based UPDATE; none, and no read, when ``known`` (the stored orders, current) says none moved. When
    the stored documents keep their order relative to one another (a document added or removed shifts the
    positions after it), the move is no work for the relations stage (supersession compares order, which
    did not change), so the queue trigger is told to pass (``pgrag.order_shift``). Returns rows changed."""
    if not orders:
        return 0
    table = qualified(realm, "documents")
    stored = stored_orders(conn, realm, space) if known is None else known
    moved = {k: o for k, o in orders.items() if k in stored and stored[k] != o}
    if not moved:
        return 0
    kept = [k for k in stored if k in orders]
    shift = sorted(kept, key=lambda k: (stored[k], k)) == sorted(kept, key=lambda k: (orders[k], k))
    conn.execute("SELECT set_config('pgrag.order_shift', %s, true)", ("on" if shift else "off",))
    changed = conn.execute(
        sql.SQL("""UPDATE {t} d SET doc_order = v.o FROM unnest(%s::text[], %s::int[]) AS v(k, o)
                                       WHERE d.space = %s AND md5(d.doc_key) = md5(v.k) AND d.doc_key = v.k
                                         AND d.doc_order <> v.o""").format(t=table),
        (list(moved), list(moved.values()), space),
    ).rowcount
    conn.execute("SELECT set_config('pgrag.order_shift', 'off', true)")
    return changed


@dataclass(frozen=True)
class StoredDocuments:
    """The space's stored documents as the chunks stage compares them (:func:`stored_documents`):
    doc_key → ``fingerprints`` (those that have one, issue 15) and ``orders`` (every one), and ``version``
    (:func:`state_version` when they were read)."""

    fingerprints: dict[str, str]
    orders: dict[str, int]
    version: tuple[int, int, int]


def stored_documents(conn: psycopg.Connection, realm: str, space: str) -> StoredDocuments:
    """Every stored document's fingerprint (what the chunks stage chunked it from: text, title, source,
    metadata and the chunker — not its order; issue 15) and ``doc_order``, in one read of its first chunk
    rows, with the :func:`state_version` they were read at (in one snapshot when the caller's connection
    is in a transaction; otherwise compared again under the partition lock before they are used)."""
    version = state_version(conn, realm, space)
    rows = conn.execute(
        sql.SQL(
            "SELECT DISTINCT ON (doc_key) doc_key, doc_fingerprint, doc_order FROM {} WHERE space = %s"
            " ORDER BY doc_key, chunk_index"
        ).format(qualified(realm, "documents")),
        (space,),
    ).fetchall()
    return StoredDocuments({k: f for k, f, _ in rows if f is not None}, {k: o for k, _, o in rows}, version)


def state_version(conn: psycopg.Connection, realm: str, space: str) -> tuple[int, int, int]:
    """(chunks, sum of chunk ids, largest chunk id) of the space: changes when a chunk is added (ids only
    grow) or removed — by the chunks stage, or a purge, deletion or retention run between its read and
    its write. A rename or re-order keeps it; only the chunks stage does either, under its stage lock."""
    row = conn.execute(
        sql.SQL(
            "SELECT count(*), coalesce(sum(id), 0), coalesce(max(id), 0) FROM {} WHERE space = %s"
        ).format(qualified(realm, "documents")),
        (space,),
    ).fetchone()
    return (int(row[0]), int(row[1]), int(row[2])) if row else (0, 0, 0)


def indexed_keys(conn: psycopg.Connection, realm: str, space: str, keys: Collection[str]) -> set[str]:
    """Which of ``keys`` the space holds chunks of now."""
    rows = conn.execute(
        sql.SQL("SELECT DISTINCT doc_key FROM {} WHERE space = %s AND md5(doc_key) = ANY(%s)").format(
            qualified(realm, "documents")
        ),
        (space, [hashlib.md5(k.encode("utf-8")).hexdigest() for k in keys]),
    ).fetchall()
    return {k for (k,) in rows} & set(keys)


@dataclass(frozen=True)
class Rename:
    """One stored document to rename in place (:func:`rename_documents`): its ``old`` and ``new`` doc_key, the
    ``source`` to store, and the fingerprint to store when the stored one is ``old_print`` (the document read
    as it was chunked, but for its key: ``new_print``, so it is not chunked again)."""

    old: str
    new: str
    source: str
    old_print: str | None = None
    new_print: str | None = None


def rename_documents(
    conn: psycopg.Connection, realm: str, space: str, renames: Collection[Rename]
) -> list[Rename]:
    """Rename stored documents in place (issue 16), in the caller's transaction: every chunk of ``old`` (and
    every archived chunk in ``documents_removed``) gets doc_key ``new`` and ``source``; chunk ids, and with
    them raw extractions, gate decisions, mentions, relations' provenance and vectors, stay as they are. One
    ``renamed`` event per document is logged (:func:`pgrag_dag.store.history.log_renames`). A rename whose
    ``old`` key holds no chunk, or whose ``new`` key already does, is left out. Returns those done."""
    if not renames:
        return []
    table = qualified(realm, "documents")
    present = indexed_keys(conn, realm, space, [r.old for r in renames] + [r.new for r in renames])
    todo = [r for r in renames if r.old in present and r.new not in present]
    if not todo:
        return []
    cols = (
        [r.old for r in todo],
        [r.new for r in todo],
        [r.source for r in todo],
        [r.old_print for r in todo],
        [r.new_print for r in todo],
    )
    conn.execute(
        sql.SQL("""UPDATE {t} d SET doc_key = v.new, source = v.source,
                                doc_fingerprint = CASE WHEN d.doc_fingerprint = v.old_print THEN v.new_print
                                                       ELSE d.doc_fingerprint END
                              FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[], %s::text[])
                                   AS v(old, new, source, old_print, new_print)
                             WHERE d.space = %s AND md5(d.doc_key) = md5(v.old)
                                 AND d.doc_key = v.old""").format(t=table),
        (*cols, space),
    )
    conn.execute(
        sql.SQL("""UPDATE {t} d SET doc_key = v.new, source = v.source
                              FROM unnest(%s::text[], %s::text[], %s::text[]) AS v(old, new, source)
                             WHERE d.space = %s AND d.doc_key = v.old""").format(
            t=qualified(realm, "documents_removed")
        ),
        (*cols[:3], space),
    )
    history.log_renames(conn, realm, space, [(r.old, r.new) for r in todo])
    return todo


def _json(text: str | None) -> object:
    import json

    return json.loads(text) if text else {}


def delete_document_chunks(conn: psycopg.Connection, realm: str, space: str, doc_key: str) -> int:
    """Remove a document's chunks (and, by cascade, their extractions, decisions and mentions); each chunk
    is archived in ``documents_removed`` first (:mod:`pgrag_dag.store.history`), so belief-time reads
    still find it. Returns how many chunks were removed; the caller logs the document event."""
    cur = conn.execute(
        sql.SQL("DELETE FROM {} WHERE space = %s AND md5(doc_key) = md5(%s) AND doc_key = %s").format(
            qualified(realm, "documents")
        ),
        (space, doc_key, doc_key),
    )
    return cur.rowcount


def chunk_order(
    conn: psycopg.Connection, realm: str, space: str, chunk_ids: Collection[int] | None = None
) -> dict[int, tuple[int, int]]:
    """chunk id → (doc_order, chunk_index): a chunk's position in document order (§5.2), for every chunk of
    the space or those of ``chunk_ids``."""
    only = sql.SQL("") if chunk_ids is None else sql.SQL(" AND id = ANY(%s)")
    rows = conn.execute(
        sql.SQL("SELECT id, doc_order, chunk_index FROM {} WHERE space = %s{}").format(
            qualified(realm, "documents"), only
        ),
        (space,) if chunk_ids is None else (space, list(chunk_ids)),
    ).fetchall()
    return {i: (o, c) for i, o, c in rows}


def count_chunks(conn: psycopg.Connection, realm: str, space: str) -> int:
    """How many chunks the space holds."""
    row = conn.execute(
        sql.SQL("SELECT count(*) FROM {} WHERE space = %s").format(qualified(realm, "documents")), (space,)
    ).fetchone()
    return int(row[0]) if row else 0


def count_documents(conn: psycopg.Connection, realm: str, space: str) -> int:
    """How many documents (distinct doc_keys) the space holds."""
    row = conn.execute(
        sql.SQL("SELECT count(DISTINCT doc_key) FROM {} WHERE space = %s").format(
            qualified(realm, "documents")
        ),
        (space,),
    ).fetchone()
    return int(row[0]) if row else 0


def document_indexed(conn: psycopg.Connection, realm: str, space: str, doc_key: str) -> bool:
    """Whether ``space`` of ``realm`` holds chunks of ``doc_key`` now; ``False`` for a realm never indexed
    (no ``documents`` table). Raises :class:`~pgrag_dag.errors.InvalidNameError` for a bad realm name."""
    if not history.table_exists(conn, realm, "documents"):
        return False
    found = conn.execute(
        sql.SQL("SELECT 1 FROM {} WHERE space = %s AND doc_key = %s LIMIT 1").format(
            qualified(realm, "documents")
        ),
        (space, doc_key),
    ).fetchone()
    return found is not None
