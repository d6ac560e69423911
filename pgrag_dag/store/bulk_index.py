"""First loads build the HNSW indexes after the vectors, not row by row (issue 15 item 2; §3.5).

Inserting vectors one by one into an HNSW index costs far more than building it once over them. When the
``embeddings`` stage is about to write at least ``embedding.bulk_load_rows`` vectors into a table that holds
no vector in any space of the realm yet (a first load — nothing can be searched there before it), it drops
that table's HNSW index and its secondary indexes, the full-text GIN ones among them
(:mod:`pgrag_dag.store.deferred_indexes`; :func:`drop` says why) in a transaction of its own, writes the
vectors, and after the last commit builds the indexes again with ``maintenance_work_mem`` raised to
``embedding.index_build_memory``, logging the build's progress (``pg_stat_progress_create_index``) every
``PROGRESS_EVERY_S`` seconds. Queries and stages reading the table run without those indexes until the build
ends (exact and sequential scans: slower, same results). A build that fails or is killed leaves an index
missing; the next ``embeddings`` run of any space of the realm builds it (:func:`missing`), and the next run
of any stage the secondary ones, so nothing stays unindexed.

Build memory (issue 30 item 5): pgvector builds the graph in ``maintenance_work_mem``; once it no longer fits
(it says so in a NOTICE, logged here as a warning) the rest is inserted on disk, several times slower — at
1M relations the relations index took 25 minutes at 512MB. ``index_build_memory: auto`` (the default) sizes it
from the table to index, :func:`auto_memory`: measured here, a 384-dimension vector takes 1,511 bytes of graph
with the ``halfvec`` index of every realm since schema version 26 (100MB overflowed after 69,413 vectors;
2,310 bytes with the earlier ``vector`` index), so 2 bytes per dimension (the ``halfvec`` value,
:mod:`pgrag_dag.store.vector_index`) plus 1 KiB, with a quarter more as margin, at least 64MB and at most
a quarter of this machine's memory (the embedded server shares it; set a size for a server elsewhere).
PostgreSQL's own ``max_parallel_maintenance_workers`` (default 2) decides the parallel build: 41.6 s with 2
workers, 52.6 s with 1, 85.4 s alone for 102,761 vectors here (a shared machine).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable

import psycopg
from psycopg import sql

from pgrag_dag.names import schema_for
from pgrag_dag.store import db, deferred_indexes, embedding_columns, schema, vector_index
from pgrag_dag.store.identifiers import qualified

log = logging.getLogger(__name__)

PROGRESS_EVERY_S = 15.0
"""Seconds between two progress lines of an index build."""

AUTO = "auto"
GRAPH_BYTES_PER_VECTOR = 1024
"""Bytes of an HNSW build's graph per vector besides the indexed value (neighbour lists, element header;
measured: 1,511 bytes per 384-dimension ``halfvec`` in all, of which 768 the value)."""
MIN_BUILD_MB = 64


def index_name(table: str) -> str:
    """The HNSW index of ``table``'s embedding column (:func:`pgrag_dag.store.vector_index.index_ddl`)."""
    return f"{table}_embedding_hnsw"


def first_load(conn: psycopg.Connection, realm: str, table: str, rows: int, threshold: int) -> bool:
    """Whether writing ``rows`` vectors into ``table`` is a first load: ``threshold`` > 0, ``rows`` ≥ it, and
    no row of the table (any space) holds a vector yet."""
    if threshold <= 0 or rows < threshold:
        return False
    found = conn.execute(
        sql.SQL("SELECT EXISTS (SELECT 1 FROM {} WHERE embedding IS NOT NULL)").format(
            qualified(realm, table)
        )
    ).fetchone()
    return not (found and found[0])


def drop(conn: psycopg.Connection, realm: str, tables: Iterable[str]) -> None:
    """Drop the HNSW indexes of ``tables`` and their secondary indexes in the caller's transaction (all
    rebuilt by :func:`build`); the secondary ones — the full-text GIN indexes
    (:data:`~pgrag_dag.store.schema.FULL_TEXT_INDEXES`) among them — are recorded by
    :func:`pgrag_dag.store.deferred_indexes.defer`, so a killed load's are rebuilt by the next run.

    Why the secondary ones too: writing a vector rewrites the whole row (no HOT update: the row grows), so
    every index of the table gets a new entry. Measured at 100k relations, 2,048 rows: 0.7 s with the GIN
    index, 0.38 s without; the whole stage's writing 15.2 s with the other secondary indexes, 12.4–13.3 s
    without."""
    for table in tables:
        deferred_indexes.defer(conn, realm, table)
        names = [index_name(table)]
        if table in schema.FULL_TEXT_INDEXES:  # deferred above when present; named here in case it is not
            names.append(schema.FULL_TEXT_INDEXES[table][0])
        for name in names:
            conn.execute(
                sql.SQL("DROP INDEX IF EXISTS {}.{}").format(
                    sql.Identifier(schema_for(realm)), sql.Identifier(name)
                )
            )


def missing(conn: psycopg.Connection, realm: str) -> list[str]:
    """The embedded tables of ``realm`` with an index still to build: an HNSW index that does not exist or
    predates the ``halfvec`` kind (:func:`pgrag_dag.store.vector_index.outdated`: a schema upgrade dropped
    it, or code from before it built it again), a full-text GIN index that does not exist, or an index a
    load deferred and nobody built again (:func:`pgrag_dag.store.deferred_indexes.pending`). Their searches
    scan until :func:`build` (the next ``embeddings`` run) builds them; ``pgrag status`` names them. Reads
    the catalog and the realm's ``deferred_indexes`` only."""
    present: dict[str, str] = dict(
        conn.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = %s", (schema_for(realm),)
        ).fetchall()
    )
    deferred = deferred_indexes.pending(conn, realm)
    return [
        t
        for t in embedding_columns.EMBEDDED_TABLES
        if index_name(t) not in present
        or vector_index.outdated(str(present[index_name(t)]))
        or (t in schema.FULL_TEXT_INDEXES and schema.FULL_TEXT_INDEXES[t][0] not in present)
        or t in deferred
    ]


def auto_memory(counts: dict[str, int], dim: int, machine_bytes: int | None = None) -> str:
    """``maintenance_work_mem`` for building the HNSW indexes of tables holding ``counts`` (table → vectors)
    of width ``dim``: the largest table's graph (:data:`GRAPH_BYTES_PER_VECTOR` plus the indexed value per
    vector) and a quarter more, in MB, clamped to :data:`MIN_BUILD_MB` … a quarter of ``machine_bytes``
    (default: this machine's physical memory). E.g. 102,761 vectors of 384 dimensions → ``"220MB"``."""
    need = max(counts.values(), default=0) * (2 * dim + GRAPH_BYTES_PER_VECTOR) * 1.25  # halfvec: 2 bytes
    if machine_bytes is None:
        machine_bytes = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    cap = max(MIN_BUILD_MB, machine_bytes // 4 // 2**20)
    return f"{min(cap, max(MIN_BUILD_MB, int(need // 2**20) + 1))}MB"


def _vector_counts(conn: psycopg.Connection, realm: str, tables: list[str]) -> tuple[dict[str, int], int]:
    """(table → rows holding a vector, the realm's width) for ``tables``."""
    counts = {
        t: int(
            conn.execute(
                sql.SQL("SELECT count(*) FROM {} WHERE embedding IS NOT NULL").format(qualified(realm, t))
            ).fetchone()[0]  # type: ignore[index]
        )
        for t in tables
    }
    width = conn.execute(
        "SELECT embedding_dim FROM pgrag__control.realms WHERE realm = %s", (realm,)
    ).fetchone()
    return counts, int(width[0]) if width else 0


def build(dsn: str, realm: str, tables: list[str], *, memory: str) -> float:
    """Build the missing indexes of ``realm`` — HNSW and full-text GIN, and the secondary ones a load of
    ``tables`` deferred — on a connection of its own with ``maintenance_work_mem = memory`` (``"auto"``:
    :func:`auto_memory` for those tables), logging progress and, as a warning, pgvector's notice that the
    graph outgrew the memory; returns the seconds it took. Raises :class:`~pgrag_dag.errors.DatabaseError`
    when PostgreSQL refuses (e.g. the memory setting), leaving the indexes for the next run to build."""
    t0 = time.perf_counter()
    done = threading.Event()
    watcher = threading.Thread(target=_report, args=(dsn, realm, done), daemon=True)
    watcher.start()
    try:
        with db.database_errors(dsn), db.connect(dsn, autocommit=True) as conn:
            if memory == AUTO:
                memory = auto_memory(*_vector_counts(conn, realm, tables))
            log.info(
                "building the HNSW index of %s (realm %s, maintenance_work_mem %s) ...",
                ", ".join(tables),
                realm,
                memory,
            )
            conn.add_notice_handler(_overflow_warning(memory))
            conn.execute(sql.SQL("SET maintenance_work_mem = {}").format(sql.Literal(memory)))
            with conn.transaction():
                embedding_columns.drop_outdated_indexes(conn, realm)  # built by code older than halfvec
                embedding_columns.create_embedding_indexes(conn, realm)
                schema.create_full_text_indexes(conn, realm)
            deferred_indexes.restore(conn, realm, tables)
    finally:
        done.set()
        watcher.join(timeout=5)
    seconds = time.perf_counter() - t0
    log.info("HNSW index of %s built in %.1f s", ", ".join(tables), seconds)
    return seconds


def _overflow_warning(memory: str) -> Callable[[psycopg.errors.Diagnostic], None]:
    """A notice handler logging pgvector's "graph no longer fits" notice as a warning with the setting."""

    def handle(notice: psycopg.errors.Diagnostic) -> None:
        text = notice.message_primary or ""
        if "no longer fits" in text:
            log.warning(
                "%s (maintenance_work_mem %s): the rest of the HNSW build runs on disk, several times "
                "slower — raise embedding.index_build_memory",
                text,
                memory,
            )

    return handle


def _report(dsn: str, realm: str, done: threading.Event) -> None:
    """Log ``pg_stat_progress_create_index`` for the realm's index builds until ``done``."""
    try:
        with db.connect(dsn, autocommit=True) as conn:
            while not done.wait(PROGRESS_EVERY_S):
                for relname, phase, total, tuples in conn.execute(
                    """SELECT c.relname, p.phase, p.tuples_total, p.tuples_done
                             FROM pg_stat_progress_create_index p
                             JOIN pg_class c ON c.oid = p.relid JOIN pg_namespace n ON n.oid = c.relnamespace
                            WHERE n.nspname = %s""",
                    (schema_for(realm),),
                ).fetchall():
                    log.info(
                        "HNSW index of %s: %s%s",
                        relname,
                        phase,
                        f", {tuples:,} of {total:,} vectors" if total else "",
                    )
    except psycopg.Error as exc:  # progress is a courtesy: the build itself reports its own errors
        log.debug("index build progress unavailable: %s", exc)
