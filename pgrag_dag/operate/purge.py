"""Erasure (issue 28 item 2): ``pgrag purge document`` and ``pgrag purge space`` remove a document's text and
everything derived from it, for good — unlike ``pgrag delete document`` (:mod:`pgrag_dag.operate.deletion`),
which keeps the history by design (paper §5.3, §6.1).

Purging a document removes, in one transaction under the partition lock (a failure leaves the database as it
was): its chunks (with their vectors), its archived chunk versions, their raw extractions, gate decisions,
rejections and mentions; the cached model responses whose prompt or answer quotes its text; its events in
the belief history; the graph rows only it supported (hard-deleted, with their history — not dormant); the
community reports built from its entities (and their ancestors: rebuilt by the next communities run); the
stage records quoting it; and the ids of what went from the query telemetry. The entities and relations
other documents also support stay, with their attributes derived again from the support that remains
(:func:`pgrag_dag.graph.rederive.rederive_attributes`). After the commit the embeddings stage embeds what
was re-derived. ``pgrag__control.purges`` records that a purge happened (SHA-256 of the doc_key, time,
counts) — never the key or any text.

A dry run (``dry_run=True``, the default) runs the same statements and rolls them back: the report is
exact and nothing changes (sequences aside: PostgreSQL never gives a number back).

What a purge cannot reach is said in every report (:data:`UNREACHABLE`).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import polars as pl
import psycopg

from pgrag_dag.engine import Engine
from pgrag_dag.errors import ConfigurationError
from pgrag_dag.graph.rederive import rederive_attributes
from pgrag_dag.ingest.splitting import split_sentences
from pgrag_dag.names import validate_realm, validate_space
from pgrag_dag.store import cache, db, deletion, graph, history, inventory, locks, purge, telemetry

STAGE = "purge"
"""The stage name a purge's stage lock carries."""

MIN_QUOTE = 20
"""Shortest passage (characters) matched against the model cache: a shorter description or name also
occurs in prompts of other documents, whose cached answers must stay."""

UNREACHABLE = (
    "Dagster's event log and run records (dagster.storage_database, or the SQLite files under "
    "<data_dir>/dagster) may quote chunk text in step failures and asset metadata: not scrubbed",
    "files outside the database are untouched: the source file itself, cassettes (pgrag cassette export), "
    "model-response spools, exports, graph views, logs",
    "PostgreSQL keeps removed rows' bytes until VACUUM reuses their space, and in its WAL, base backups and "
    "replicas; run VACUUM (FULL) on the realm's tables to rewrite them. A real purge (--yes) re-analyses the "
    "realm's tables, so the planner statistics (pg_stats) no longer quote it, but the replaced statistics "
    "rows stay on disk until a superuser runs VACUUM (FULL) pg_catalog.pg_statistic",
)
"""What erasure cannot reach (printed with every purge report and listed in the README)."""


MENTIONS = {"chunk_id": pl.Int64, "entity_id": pl.Int64}
"""The schema of a mentions frame (no mention is written by a purge: only dormancy is decided again)."""


@contextmanager
def _purging(engine: Engine, realm: str, space: str) -> Iterator[tuple[psycopg.Connection, Any]]:
    """The purge's one transaction: the partition's stage lock (waiting ``operations.lock_wait_s``), then a
    connection in a transaction holding the partition lock, in a realm that exists — yields (connection,
    transaction) for a dry run to roll back. Raises :class:`ConfigurationError` for a realm never indexed."""
    with (
        db.database_errors(engine.dsn),
        locks.stage_lock(engine.dsn, realm, space, STAGE, wait_s=engine.settings.operations.lock_wait_s),
    ):
        with engine.connect() as conn:
            indexed = history.table_exists(conn, realm, "belief_log")
        if (
            indexed
        ):  # a realm indexed by an earlier release gains the tables a purge clears (no-op when current)
            engine.init_realm(realm)
        with engine.connect() as conn, conn.transaction() as tx:
            locks.lock_partition(conn, realm, space)
            if not history.table_exists(conn, realm, "belief_log"):
                raise ConfigurationError(f"realm {realm!r} does not exist (it has never been indexed)")
            yield conn, tx


def purge_document(
    engine: Engine, realm: str, space: str, doc_key: str, *, dry_run: bool = True
) -> dict[str, Any]:
    """Erase document ``doc_key`` of ``realm.space`` (see the module docstring), or with ``dry_run`` (the
    default) report what that removes and change nothing.

    Returns ``{"target": "document", "realm", "space", "doc_key_sha256", "removed": {table: rows, tables
    without a row left out; ``pgrag__control.llm_cache``: responses evicted; ``*.entity_ids`` /
    ``*.community_ids``: rows an id was taken out of}, "rederived": {"entities": n, "relations": n} (rows
    whose attributes changed), "communities_to_rebuild", "seconds", "unreachable" (:data:`UNREACHABLE`),
    "dry_run"}`` and, after a real purge that re-derived rows, ``"embeddings"``: the embeddings stage's
    metadata (it re-embeds them; ``None`` when it failed — the next run embeds them), and after any real purge
    ``"statistics_refreshed"``: the tables re-analysed (:func:`_refresh_statistics`). The stage lock is the
    partition's (every stage takes it): no stage of the space runs during the purge.

    Raises:
        ConfigurationError: the space holds no such document (no chunk, archived version or event).
        InvalidNameError, PartitionBusyError, DatabaseError: a bad name; a stage of the partition still
            running after ``operations.lock_wait_s``; PostgreSQL refused (nothing was removed).
    """
    validate_realm(realm)
    validate_space(space)
    started = time.monotonic()
    with _purging(engine, realm, space) as (conn, tx):
        keys = purge.document_keys(conn, realm, space, doc_key)
        live, archived = purge.document_chunks(conn, realm, space, keys)
        if not live and not archived and not purge.document_events(conn, realm, space, keys):
            raise inventory.no_such_document(conn, realm, space, doc_key)
        chunks = live + archived
        passages, outputs, names = purge.quoted_texts(conn, realm, space, live, archived)
        gone_rels, kept_rels, gone_ents, kept_ents = purge.supported_graph(conn, realm, space, chunks)
        communities = purge.communities_of(conn, realm, space, gone_ents + kept_ents)
        old = purge.descriptions(conn, realm, space, gone_ents + kept_ents, gone_rels + kept_rels)
        reports = purge.report_summaries(conn, realm, space, communities)
        with history.forgetting(conn):
            removed = purge.delete_document_rows(
                conn,
                realm,
                space,
                keys=keys,
                live=live,
                archived=archived,
                relations=gone_rels,
                entities=gone_ents,
                communities=communities,
            )
            rederived = rederive_attributes(
                conn, realm, space, entity_ids=kept_ents, relation_ids=kept_rels, without_chunks=chunks
            )
            # an entity kept only by history (archived chunks, dormant edges) has no mention left: dormant
            # now, as the next index run would make it
            dormancy = graph.replace_chunk_mentions(
                conn, realm, space, [], pl.DataFrame(schema=MENTIONS), also=kept_ents
            )
            removed["entities (made dormant)"] = dormancy["dormant"]
            # what the document gave the graph and is gone from it now: its reports' prompts quoted that
            new = purge.descriptions(conn, realm, space, kept_ents, kept_rels)
            lost = [d for key, d in old.items() if new.get(key) != d]
            # model outputs and report summaries whole, not by sentence: those quote other documents too
            needles = quotes([*passages, *lost]) + [t for t in [*outputs, *reports] if len(t) >= MIN_QUOTE]
            evicted = cache.evict_quoting(conn, purge.json_forms(needles))
            removed["pgrag__control.llm_cache"] = len(evicted)
            removed["query_events.entity_ids"] = telemetry.forget_entities(conn, realm, gone_ents)
            removed["query_events.community_ids"] = telemetry.forget_communities(conn, realm, communities)
            removed["stage records quoting it"] = purge.scrub_stage_records(
                conn, realm, space, [*passages, *outputs, *names, *keys]
            )
        sha = hashlib.sha256(doc_key.encode()).hexdigest()
        counts = {k: n for k, n in removed.items() if n}
        purge.record_purge(conn, realm, space, "document", sha, counts)
        if dry_run:
            raise psycopg.Rollback(tx)
    result: dict[str, Any] = {
        "target": "document",
        "realm": realm,
        "space": space,
        "doc_key_sha256": sha,
        "removed": counts,
        "rederived": rederived,
        "communities_to_rebuild": len(communities),
        "seconds": round(time.monotonic() - started, 3),
        "unreachable": list(UNREACHABLE),
        "dry_run": dry_run,
    }
    if not dry_run:
        result["statistics_refreshed"] = _refresh_statistics(engine, realm)
        if any(rederived.values()):
            result["embeddings"] = _embed(engine, realm, space)
    return result


def purge_space(engine: Engine, realm: str, space: str, *, dry_run: bool = True) -> dict[str, Any]:
    """Erase every row of ``realm.space`` from every table of the realm (history, telemetry and work queue
    included, :func:`pgrag_dag.store.deletion.delete_space_rows`) and the cached model responses that quote
    its chunks, in one transaction under the partition lock; or with ``dry_run`` (the default) report it.

    Returns ``{"target": "space", "realm", "space", "removed": {table: rows}, "seconds", "unreachable",
    "dry_run"}`` and, after a real purge, ``"statistics_refreshed"``.
    Raises :class:`ConfigurationError` when the space holds no row; as
    :func:`purge_document`."""
    validate_realm(realm)
    validate_space(space)
    started = time.monotonic()
    with _purging(engine, realm, space) as (conn, tx):
        if not any(deletion.count_rows(conn, realm, space).values()):
            raise ConfigurationError(f"space {space!r} of realm {realm!r} holds nothing to purge")
        passages = purge.space_passages(conn, realm, space)
        with history.forgetting(conn):
            removed = deletion.delete_space_rows(conn, realm, space)
            evicted = cache.evict_quoting(conn, purge.json_forms(quotes(passages)))
        removed["pgrag__control.llm_cache"] = len(evicted)
        counts = {k: n for k, n in removed.items() if n}
        purge.record_purge(conn, realm, space, "space", None, counts)
        if dry_run:
            raise psycopg.Rollback(tx)
    return {
        "target": "space",
        "realm": realm,
        "space": space,
        "removed": counts,
        "seconds": round(time.monotonic() - started, 3),
        "unreachable": list(UNREACHABLE),
        "dry_run": dry_run,
        **({} if dry_run else {"statistics_refreshed": _refresh_statistics(engine, realm)}),
    }


def _refresh_statistics(engine: Engine, realm: str) -> int:
    """Analyse the realm's tables once the purge committed (planner statistics sample column values:
    :func:`pgrag_dag.store.purge.refresh_statistics`); returns how many tables."""
    with db.database_errors(engine.dsn), db.connect(engine.dsn, autocommit=True) as conn:
        return len(purge.refresh_statistics(conn, realm))


def quotes(passages: list[str]) -> list[str]:
    """What a cached prompt or answer may copy of ``passages``: each passage and each of its sentences (a
    description, a report or an answer quotes a sentence, seldom a whole chunk), those of at least
    :data:`MIN_QUOTE` characters, distinct, longest first. A response quoting one is evicted even where
    another document holds the same sentence: a cache entry costs a model call, a surviving quote a breach."""
    found = {p.strip() for p in passages}
    for p in passages:
        for line in p.splitlines():
            found.update(s.strip() for s in split_sentences(line))
    return sorted((q for q in found if len(q) >= MIN_QUOTE), key=lambda q: (-len(q), q))


def _embed(engine: Engine, realm: str, space: str) -> dict[str, Any] | None:
    """Run the embeddings stage for the rows a purge re-derived (their vectors were cleared); ``None``
    when it fails — the rows stay without a vector, which every query reports, until the next run."""
    from pgrag_dag.errors import PgragError
    from pgrag_dag.pipeline.embeddings import stage_embeddings

    try:
        return dict(stage_embeddings(engine, realm, space).metadata)
    except PgragError:
        return None


def summary_lines(result: dict[str, Any]) -> list[str]:
    """Human lines for a purge result: what was (or, in a dry run, would be) removed, table by table, what
    was re-derived, and what a purge cannot reach."""
    what = (
        f"document (sha256 {result['doc_key_sha256'][:16]}…) of {result['realm']}.{result['space']}"
        if result["target"] == "document"
        else f"space {result['realm']}.{result['space']}"
    )
    lines = [f"{'would purge' if result['dry_run'] else 'purged'} {what} in {result['seconds']:.2f} s:"]
    lines += [f"  {table:<40} {n}" for table, n in result["removed"].items()]
    if result.get("rederived"):
        r = result["rederived"]
        lines.append(
            f"  attributes derived again from the remaining support: {r['entities']} entities, "
            f"{r['relations']} relations"
            + ("" if result["dry_run"] else " (re-embedded)" if result.get("embeddings") is not None else
               " (their vectors wait for the next embeddings run)")
        )  # fmt: skip
    if result.get("communities_to_rebuild"):
        lines.append(
            f"  {result['communities_to_rebuild']} community reports removed: the next communities run "
            "(pgrag index, or Dagster automation) rebuilds them"
        )
    lines.append("not reached by a purge:")
    lines += [f"  - {u}" for u in result["unreachable"]]
    if result["dry_run"]:
        lines.append("nothing changed; add --yes to purge")
    else:
        if result.get("statistics_refreshed"):
            lines.append(
                f"  planner statistics refreshed: {result['statistics_refreshed']} tables analysed (pg_stats "
                "samples column values)"
            )
        key = "the doc_key's SHA-256, " if result["target"] == "document" else "the space, "
        lines.append(f"recorded in pgrag__control.purges ({key}the time and these counts)")
    return lines
