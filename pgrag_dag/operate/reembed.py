"""Re-embedding: switch a realm to the configured embedder as one deliberate command (issue 12,
paper §3.5), ``pgrag reembed REALM``.

A realm's vectors all come from one embedder, recorded in the realm registry as (model, width,
convention); opening it with another is a :class:`SchemaMismatchError`. :func:`reembed_realm` rebuilds
every vector of the realm with the configured embedder:

1. take the stage locks of every space of the realm, held to the end (no stage of the realm runs);
2. read every row of ``documents``, ``entities``, ``relations`` and ``communities`` (its text and the
   text's SHA-256, :data:`pgrag_dag.store.vectors.EMBED_TEXT`);
3. embed the distinct texts in batches, outside any transaction, reporting progress;
4. in one transaction: the schema and partition locks, the registry row switched, each embedding column
   altered to ``vector(new width)`` (every vector ``NULL``), the HNSW indexes dropped, the new vectors
   written with the hash of the text embedded, the indexes rebuilt, the columns verified.

Nothing is changed before step 4 commits: an embedder error, a database error or Ctrl-C leaves the
registry, the columns and every stored vector as they were. Queries of the realm wait for the commit
(the tables are locked ``ACCESS EXCLUSIVE`` in step 4) and then read the new vectors.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from pgrag_dag.config.sections import Settings
from pgrag_dag.engine import Engine
from pgrag_dag.errors import ConfigurationError, SchemaMismatchError
from pgrag_dag.names import validate_realm
from pgrag_dag.providers.embedding import configured_convention, embed_distinct
from pgrag_dag.store import db, locks, schema, vector_index, vectors
from pgrag_dag.store import embedding_columns as columns
from pgrag_dag.store.retrieval import Identity, realm_embedding

Progress = Callable[[int, int], None]
"""``progress(done, total)``: distinct texts embedded so far, of ``total``."""

STAGE = "reembed"
"""The stage name the command's stage locks carry (shown to a stage that waits for them)."""


def configured_identity(settings: Settings) -> Identity:
    """``(model, dim, convention)`` the settings' embedder has, known without loading a model."""
    return settings.embedding.model, settings.embedding.dim, configured_convention(settings.embedding)


def registered_identity(engine: Engine, realm: str) -> Identity | None:
    """The realm's registered ``(model, dim, convention)``, or ``None`` when it was never created.

    Raises :class:`InvalidNameError` for a bad realm name, :class:`DatabaseError` when unreachable."""
    validate_realm(realm)
    with db.database_errors(engine.dsn), engine.connect(autocommit=True) as conn:
        return realm_embedding(conn, realm)


def reembed_realm(
    engine: Engine,
    realm: str,
    *,
    force: bool = False,
    progress: Progress | None = None,
    batch_size: int | None = None,
) -> dict[str, Any]:
    """Rebuild every vector of ``realm`` with the engine's configured embedder, in place (§3.5).

    See the module docstring for the steps. ``batch_size``: texts per embedder call between two
    ``progress`` calls (default ``embedding.batch_size``). A realm already registered under the
    configured (model, dim, convention) is left alone unless ``force``. Rows whose text changed while
    embedding keep the hash of the text embedded, so the next ``embeddings`` stage embeds them again;
    rows added meanwhile have no vector until then.

    Returns ``{"realm", "reembedded" (bool), "from", "to" (``model (dim)``), "spaces", "rows" ({table:
    rows}), "texts" (distinct texts embedded), "seconds" (wall clock, all of it), "embed_seconds",
    "texts_per_s" (texts / embed_seconds)}`` — without the counts when nothing was done.

    Raises:
        InvalidNameError: a realm name that may not reach SQL.
        ConfigurationError: the realm does not exist (it was never indexed).
        PartitionBusyError: a stage of the realm still runs after ``operations.lock_wait_s`` seconds.
        ModelError: the embedder failed, or returned a non-finite vector.
        SchemaMismatchError: the embedder's identity or width is not the configured one, the width is
            above what an HNSW index can hold (4,000 dimensions; refused before any work), or the realm's
            registration changed meanwhile.
        DatabaseError: PostgreSQL refused or lost the operation (nothing was changed).
    """
    t0 = time.perf_counter()
    registered = registered_identity(engine, realm)
    if registered is None:
        raise ConfigurationError(
            f"realm {realm!r} does not exist (it has never been indexed); nothing to re-embed"
        )
    configured = configured_identity(engine.settings)
    result: dict[str, Any] = {
        "realm": realm,
        "reembedded": False,
        "from": columns.describe_embedding(registered),
        "to": columns.describe_embedding(configured),
    }
    if registered == configured and not force:
        return result
    vector_index.check_indexable(realm, schema.schema_for(realm), columns.EMBEDDED_TABLES, configured[1])
    embedder = engine.embedder()  # a local model loads here, before any lock is taken
    if (embedder.model, embedder.dim, embedder.convention) != configured:
        raise SchemaMismatchError(
            "embedder",
            columns.describe_embedding(configured),
            columns.describe_embedding((embedder.model, embedder.dim, embedder.convention)),
        )
    declared = engine.settings.realms.get(realm)
    with db.database_errors(engine.dsn), engine.connect(autocommit=True) as conn:
        schema.init_control(conn)  # a control schema from before the convention column gains it
        known = set(vectors.spaces(conn, realm)) | set(declared.spaces if declared else ())
        with locks.stage_locks(
            engine.dsn, realm, known, STAGE, wait_s=engine.settings.operations.lock_wait_s
        ):
            with conn.transaction():  # one snapshot of every table
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
                todo = {
                    table: vectors.every_text(conn, realm, table)
                    for table in columns.EMBEDDED_TABLES + columns.ARCHIVE_TABLES
                }
            t_embed = time.perf_counter()
            by_text = embed_distinct(
                embedder,
                [t for rows in todo.values() for _, t, _ in rows],
                batch_size=batch_size or engine.settings.embedding.batch_size,
                progress=progress,
            )
            embed_s = time.perf_counter() - t_embed
            with conn.transaction():
                schema.lock_ddl(conn)
                for space in sorted(known | set(vectors.spaces(conn, realm))):
                    locks.lock_partition(conn, realm, space)
                columns.switch_registration(conn, realm, registered=registered, configured=configured)
                columns.retype_embeddings(conn, realm, configured[1])
                for table, rows in todo.items():
                    vectors.write(conn, realm, table, rows, [by_text[t] for _, t, _ in rows])
                columns.create_embedding_indexes(conn, realm)
                columns.verify_embedding_columns(conn, realm, configured[1])
    return {
        **result,
        "reembedded": True,
        "spaces": sorted(known),
        "rows": {t: len(r) for t, r in todo.items()},
        "texts": len(by_text),
        "seconds": round(time.perf_counter() - t0, 3),
        "embed_seconds": round(embed_s, 3),
        "texts_per_s": round(len(by_text) / embed_s, 1) if embed_s > 0 else None,
    }


def reembed_if_switched(
    engine: Engine, realm: str, *, echo: Callable[[str], None], progress: Progress | None = None
) -> dict[str, Any] | None:
    """Re-embed ``realm`` (:func:`reembed_realm`) when it exists and is registered under another
    embedder than the configured one, first saying so through ``echo`` (one line); ``None`` when it
    does not exist or is already at the configured embedder. Raises as :func:`reembed_realm`."""
    registered = registered_identity(engine, realm)
    configured = configured_identity(engine.settings)
    if registered is None or registered == configured:
        return None
    echo(
        f"realm {realm} is embedded with {columns.describe_embedding(registered)} but the configuration says "
        f"{columns.describe_embedding(configured)}: re-embedding it (as `pgrag reembed {realm}` does)"
    )
    return reembed_realm(engine, realm, progress=progress)


def summary(result: dict[str, Any]) -> str:
    """One line saying what :func:`reembed_realm` did."""
    if not result["reembedded"]:
        return (
            f"realm {result['realm']}: already embedded with {result['to']}; "
            "nothing to do (--force re-embeds anyway)"
        )
    label = {"documents": "chunks", "communities": "community reports"}  # table → what its rows are
    rows = ", ".join(f"{n} {label.get(table, table)}" for table, n in result["rows"].items())
    rate = f"{result['texts_per_s']:g} texts/s" if result["texts_per_s"] is not None else "no texts"
    return (
        f"realm {result['realm']}: re-embedded {result['texts']} texts ({rows}) from {result['from']} "
        f"to {result['to']} in {result['seconds']:g} s ({rate})"
    )
