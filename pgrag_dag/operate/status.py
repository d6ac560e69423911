"""What the store holds, for ``pgrag status`` (issue 16 item 5): realms with their embedding model, spaces
with their counts, community staleness and each stage's last run, and the LLM response cache's size.

:func:`store_status` reads in one read-only snapshot (:func:`~pgrag_dag.store.db.read_connection`): it never
creates a realm, a schema or the control schema. With the embedded database and no database in the data
directory yet, it reads nothing at all (no server is started); the result then says nothing is indexed and
which command comes next.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from pgrag_dag.config.sections import Settings
from pgrag_dag.operate.summary import counted
from pgrag_dag.pipeline.embeddings import describe
from pgrag_dag.store import bulk_index, cache, db, inventory, locks, vectors, work_queue
from pgrag_dag.store.changes import community_lag
from pgrag_dag.store.documents import count_chunks, count_documents
from pgrag_dag.store.history import table_exists
from pgrag_dag.store.relations import graph_counts


def _embedded_absent(settings: Settings) -> Path | None:
    """The data directory when the embedded database is configured and none was ever made there."""
    if settings.database_url:
        return None
    data_dir = settings.resolve(settings.data_dir)
    return None if (data_dir / "pgdata" / "PG_VERSION").exists() else data_dir


def store_status(settings: Settings) -> dict[str, Any]:
    """The store's state, as JSON-ready values:

    - ``database``: the DSN with its password redacted, or ``embedded (<data_dir>)``;
    - ``embedded_server``: for an embedded database that exists, ``pid`` (the server's process, ``None`` if it
      is not running) and ``was_running`` (false when this call started it); ``None`` otherwise;
    - ``realms``: registered and configured realms by name, each ``realm``, ``registered``, ``embedding``
      (``model``, ``dim``, ``convention`` from the realm registry; ``None`` unregistered), ``schema_version``,
      ``indexes_to_build`` (the embedded tables whose vector, full-text or deferred index is still to be built
      — after a killed first load or a schema upgrade — so that their searches scan until the next ``pgrag
      index``, :func:`~pgrag_dag.store.bulk_index.missing`) and ``spaces`` (stored and configured, by name):
      ``space``, ``configured``, ``indexed`` (it holds a chunk), ``documents``, ``chunks``, ``entities``
      (``live``, ``dormant``), ``relations`` (``live`` — not dormant —, of them ``current``, ``superseded``
      and ``negated``; ``dormant``), ``communities`` (``levels``: level → reports, ``total``, ``built_at``,
      ``stale``, ``relation_changes_since`` and ``graph_writes_since`` — relation events and graph writes
      since the communities stage last read the graph, as ``pgrag changes`` counts them),
      ``stages`` (each stage's last run, in pipeline order: ``stage``, ``updated_at``, ``version``,
      ``rows_changed``), ``without_vector`` (table → rows no vector search finds yet: an embeddings stage
      that failed, was interrupted or has not run since they were written), ``running`` (who holds the
      space's stage lock — a run indexing it now, its stage named — else ``None``);
    - ``llm_cache``: ``rows`` and ``bytes`` (table, indexes and TOAST);
    - ``indexed``: whether any space holds a chunk; ``next``: the command to run next when nothing is
      indexed yet (else ``None``).

    Raises :class:`~pgrag_dag.errors.DatabaseError` when the configured server is unreachable.
    """
    configured = {realm: list(spec.spaces) for realm, spec in settings.realms.items()}
    absent = _embedded_absent(settings)
    data_dir = settings.resolve(settings.data_dir)
    was_running = None if settings.database_url or absent else db.embedded_pid(data_dir)
    if absent is not None:
        database, registry, stored, size = f"embedded ({absent}, not created yet)", {}, {}, (0, 0)
        unbuilt = {}
    else:
        dsn = db.resolve_dsn(settings.database_url, settings.resolve(settings.data_dir))
        database = (
            db.redact(dsn) if settings.database_url else f"embedded ({settings.resolve(settings.data_dir)})"
        )
        with db.database_errors(dsn), db.read_connection(dsn) as conn, conn.transaction():
            registry = {r["realm"]: r for r in inventory.registered_realms(conn)}
            stored = {
                realm: {space: _space(conn, realm, space) for space in inventory.realm_spaces(conn, realm)}
                for realm in registry
            }
            unbuilt = {realm: sorted(bulk_index.missing(conn, realm)) for realm in registry}
            size = cache.cache_size(conn)
    realms: list[dict[str, Any]] = []
    for realm in sorted(set(registry) | set(configured)):
        reg = registry.get(realm)
        spaces = stored.get(realm, {})
        names = sorted(set(spaces) | set(configured.get(realm, [])))
        realms.append(
            {
                "realm": realm,
                "registered": reg is not None,
                "embedding": None
                if reg is None
                else {
                    "model": reg["embedding_model"],
                    "dim": reg["embedding_dim"],
                    "convention": reg["embedding_convention"],
                },
                "schema_version": None if reg is None else reg["schema_version"],
                "indexes_to_build": unbuilt.get(realm, []),
                "spaces": [
                    {
                        "space": s,
                        "configured": s in configured.get(realm, []),
                        **spaces.get(s, {"indexed": False}),
                    }
                    for s in names
                ],
            }
        )
    indexed = any(s["indexed"] for r in realms for s in r["spaces"])
    first = next(((r, s) for r, ss in configured.items() for s in ss), None)
    nxt = (
        None
        if indexed
        else (
            f"pgrag index {shlex.quote(first[0] + '.' + first[1])}"
            if first
            else "declare a realm and a space with sources in pgrag.yaml, then pgrag index REALM.SPACE"
        )
    )
    return {
        "database": database,
        "embedded_server": None
        if settings.database_url or absent
        else {"pid": db.embedded_pid(data_dir), "was_running": was_running is not None},
        "indexed": indexed,
        "realms": realms,
        "llm_cache": {"rows": size[0], "bytes": size[1]},
        "next": nxt,
    }


def _space(conn: Any, realm: str, space: str) -> dict[str, Any]:
    g = graph_counts(conn, realm, space)
    levels = inventory.community_levels(conn, realm, space)
    built_at, changes, never_checked, writes = (
        community_lag(conn, realm, space) if table_exists(conn, realm, "belief_log") else (None, 0, False, 0)
    )
    chunks = count_chunks(conn, realm, space)
    return {
        "indexed": chunks > 0,
        "documents": count_documents(conn, realm, space),
        "chunks": chunks,
        "entities": {"live": g["entities"], "dormant": g["entities_dormant"]},
        "relations": {
            "live": g["relations"],
            "current": g["relations"] - g["superseded"],
            "superseded": g["superseded"],
            "negated": g["negated"],
            "dormant": g["relations_dormant"],
        },
        "communities": {
            "levels": levels,
            "total": sum(levels.values()),
            "built_at": built_at,
            "stale": changes > 0 or writes > 0 or never_checked,
            "relation_changes_since": changes,
            "graph_writes_since": writes,
        },
        "stages": sorted(work_queue.stage_runs(conn, realm, space), key=_stage_order),
        "running": locks.running(conn, realm, space),
        "without_vector": {t: c["missing"] for t, c in vectors.unembedded(conn, realm, space).items()},
    }


def _stage_order(run: dict[str, Any]) -> tuple[int, str]:
    from pgrag_dag.pipeline.run import INDEX_STAGES

    stage = run["stage"]
    return (INDEX_STAGES.index(stage) if stage in INDEX_STAGES else len(INDEX_STAGES), stage)


def _when(at: Any) -> str:
    return at.strftime("%Y-%m-%d %H:%M:%S %Z").strip() if at is not None else "never"


def _size(n: int) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:,} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n} B"  # pragma: no cover


def _server_line(server: dict[str, Any]) -> str:
    """Whether the embedded server runs, and why it stays up (it is shared: README "Your own documents")."""
    if server["pid"] is None:
        return "  embedded PostgreSQL: not running (the next command starts it)"
    how = "running" if server["was_running"] else "started by this command"
    return (
        f"  embedded PostgreSQL: {how}, pid {server['pid']}; it stays up for the next command and the "
        "Dagster UI — `pgrag stop-db` stops it"
    )


def summary_lines(status: dict[str, Any]) -> list[str]:
    """:func:`store_status` for people: a line per realm and per space, indented counts, the cache. Every
    count is written one way, with thousands separators (``1,271``)."""
    lines = [f"database: {status['database']}"]
    if (server := status.get("embedded_server")) is not None:
        lines.append(_server_line(server))
    for r in status["realms"]:
        emb = r["embedding"]
        lines.append(
            f"realm {r['realm']}: "
            + (
                f"embedding {emb['model']} ({emb['dim']} dimensions, {emb['convention']}), "
                f"schema {r['schema_version']}"
                if emb
                else "not indexed yet"
            )
        )
        if r.get("indexes_to_build"):
            lines.append(
                f"  indexes: {', '.join(r['indexes_to_build'])} still to build — their searches scan the "
                "table (same answers, slower) until the next `pgrag index` of the realm builds them"
            )
        for s in r["spaces"]:
            where = "" if s["configured"] else " (not in the configuration)"
            if not s["indexed"]:
                now = f" (running now: {s['running']})" if s.get("running") else ""
                lines.append(f"  space {s['space']}{where}: not indexed yet{now}")
                continue
            e, rel, c = s["entities"], s["relations"], s["communities"]
            lines.append(
                f"  space {s['space']}{where}: {counted(s['documents'], 'document')}, "
                f"{counted(s['chunks'], 'chunk')}"
            )
            lines.append(f"    entities: {e['live']:,} live, {e['dormant']:,} dormant")
            if missing := describe(s.get("without_vector") or {}):
                # a run indexing the space now embeds them: starting another would only wait for it
                then = (
                    "the run in progress (running now, below) embeds them"
                    if s.get("running")
                    else f"`pgrag index {shlex.quote(r['realm'] + '.' + s['space'])}` embeds them"
                )
                lines.append(f"    vectors: {missing} have none yet — vector search cannot find them; {then}")
            lines.append(
                f"    relations: {rel['current']:,} current, {rel['superseded']:,} superseded, "
                f"{rel['negated']:,} negated, {rel['dormant']:,} dormant"
            )
            if c["total"]:
                per = ", ".join(f"level {lv}: {n:,}" for lv, n in c["levels"].items())
                state = (
                    f"stale ({c['relation_changes_since']:,} relation changes, "
                    f"{c['graph_writes_since']:,} graph writes since)"
                    if c["stale"]
                    else "current"
                )
                lines.append(
                    f"    communities: {c['total']:,} ({per}), built {_when(c['built_at'])}, {state}"
                )
            else:
                lines.append(
                    "    communities: none"
                    + (" (stale: the graph changed since the stage ran)" if c["stale"] else "")
                )
            if s.get("running"):
                lines.append(f"    running now: {s['running']}")
            for st in s["stages"]:
                lines.append(
                    f"    {st['stage']}: last run {_when(st['updated_at'])}, "
                    f"{counted(st['rows_changed'], 'row')} changed"
                )
    if not status["realms"]:
        lines.append("no realm is configured or indexed")
    cache_ = status["llm_cache"]
    lines.append(f"LLM response cache: {counted(cache_['rows'], 'response')}, {_size(cache_['bytes'])}")
    if status["next"]:
        lines.append(f"nothing is indexed yet; next: {status['next']}")
    return lines


__all__ = ["store_status", "summary_lines"]
