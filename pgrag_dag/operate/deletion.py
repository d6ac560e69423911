"""Explicit deletion of an entity, a document, a space or a realm (paper §6.1; issue 14 item 4).

Deletion is never the default and never silent: each function reports exactly what it removed (rows per
table, history included), and with ``dry_run=True`` what it would remove, changing nothing (``pgrag
delete …`` without ``--yes``). Archiving (:mod:`pgrag_dag.operate.retention`) is the reversible alternative.

- an **entity**: refused while a chunk still mentions it — the next run would silently re-create it —
  naming up to five of those documents; otherwise it goes with its relations, mentions, community
  memberships and their history (:func:`pgrag_dag.store.deletion.delete_entity_rows`; its ``deleted``
  tombstones stay in ``belief_log``);
- a **document**: :func:`pgrag_dag.pipeline.delete_document` — its chunks go, the graph is rebuilt from the
  stored extractions, and the history is kept (the chunks are archived);
- a **space**: every row of it in every table of the realm, history included;
- a **realm**: its schema (``DROP SCHEMA … CASCADE``) and its registry row.

Writers take the partition's stage lock, then in the write transaction its partition lock
(:mod:`pgrag_dag.store.locks`); a realm takes every space's, then the schema lock. Entity and space
deletion run inside :func:`pgrag_dag.store.history.forgetting`.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

import psycopg

from pgrag_dag.config.load import config_file
from pgrag_dag.config.sections import Settings
from pgrag_dag.engine import Engine
from pgrag_dag.errors import ConfigurationError, DeletionRefusedError
from pgrag_dag.names import validate_realm, validate_space
from pgrag_dag.store import db, deletion, history, inventory, locks, schema, vectors
from pgrag_dag.store.retrieval import realm_embedding

STAGE = "delete"
"""The stage name deletion's stage locks carry."""


def _wait(engine: Engine) -> float:
    return engine.settings.operations.lock_wait_s


def delete_entity(
    engine: Engine, realm: str, space: str, name: str, *, dry_run: bool = False
) -> dict[str, Any]:
    """Delete the entity of ``realm.space`` called ``name`` (case-insensitive) for good, or with ``dry_run``
    say what that would remove (the same statements, rolled back).

    Returns ``{"target": "entity", "realm", "space", "name", "id", "removed": {table: rows}, "restored"
    (relations it had superseded, current again), "tombstones" (``deleted`` events left in belief_log),
    "dry_run"}`` (see :func:`pgrag_dag.store.deletion.delete_entity_rows`).

    Raises:
        DeletionRefusedError: a chunk still mentions it (the message names up to 5 doc_keys).
        ConfigurationError: the space has no entity of that name.
        InvalidNameError, PartitionBusyError, DatabaseError: a bad name; a stage of the partition still
            running after ``operations.lock_wait_s``; PostgreSQL refused (nothing was removed).
    """
    validate_realm(realm)
    validate_space(space)
    with (
        db.database_errors(engine.dsn),
        locks.stage_lock(engine.dsn, realm, space, STAGE, wait_s=_wait(engine)),
    ):
        with engine.connect() as conn, conn.transaction() as tx:
            locks.lock_partition(conn, realm, space)
            found = deletion.entity_id(conn, realm, space, name)
            if found is None:
                raise ConfigurationError(f"space {realm}.{space} has no entity named {name!r}")
            n, keys = deletion.mentioning_documents(conn, realm, space, found[0])
            if n:
                raise DeletionRefusedError(
                    f"entity {found[1]!r}",
                    keys,
                    n,
                    "the next run would re-create it; archive it (pgrag retention / unarchive) "
                    "or delete those documents first (pgrag delete document). "
                    "If it is no name at all (an interjection, boilerplate), keep it out with the "
                    f"name_stoplist gate: {stoplist_hint(engine.settings, realm, space, found[1])}",
                )
            with history.forgetting(conn):
                done = deletion.delete_entity_rows(conn, realm, space, found[0])
            if dry_run:
                raise psycopg.Rollback(tx)
    return {
        "target": "entity",
        "realm": realm,
        "space": space,
        "name": found[1],
        "id": found[0],
        **done,
        "dry_run": dry_run,
    }


def stoplist_gates(settings: Settings, realm: str, space: str, name: str) -> list[dict[str, Any]]:
    """The space's ``gates`` with ``name`` added to its ``name_stoplist`` gate (one is appended when it has
    none; a name already listed is not repeated), as plain data for YAML."""
    gates = [g.model_dump(exclude_defaults=True) for g in settings.space_spec(realm, space).gates]
    stop = next((g for g in gates if g["name"] == "name_stoplist"), None)
    if stop is None:
        gates.append({"name": "name_stoplist", "options": {"names": [name]}})
    elif name not in stop.setdefault("options", {}).setdefault("names", []):
        stop["options"]["names"].append(name)
    return gates


def stoplist_hint(settings: Settings, realm: str, space: str, name: str) -> str:
    """What to paste into the configuration so the extractions naming ``name`` are refused from the next
    ``pgrag index`` on (it re-gates every chunk when the gates change): ``in <file>, under realms → R →
    spaces → S, set: gates: [...]`` — one line of flow-style YAML (:func:`stoplist_gates`, JSON-quoted
    strings), the space's other gates kept."""
    line = "gates: " + json.dumps(stoplist_gates(settings, realm, space, name), ensure_ascii=False)
    for key in ("name", "options", "names"):  # YAML keys need no quotes; the values keep JSON's
        line = line.replace(f'"{key}": ', f"{key}: ")
    return (
        f"in {config_file()}, under realms → {realm} → spaces → {space}, set:  {line}  "
        f"then run pgrag index {shlex.quote(realm + '.' + space)}"
    )


def delete_document(
    engine: Engine, realm: str, space: str, doc_key: str, *, dry_run: bool = False
) -> dict[str, Any]:
    """Remove document ``doc_key`` from ``realm.space`` (:func:`pgrag_dag.pipeline.delete_document`: the
    graph stages run again from the stored extractions; the history is kept), or with ``dry_run`` count
    what it would remove.

    Returns ``{"target": "document", "realm", "space", "doc_key", "removed": {table: rows}, "history":
    {table: rows added}, "dry_run"}``, and (not in a dry run) ``"graph": {stage: metadata}``, ``"changes":
    {ChangeSet field: events}`` — every belief change the removal and the graph stages after it recorded
    (:func:`pgrag_dag.operate.changes.changes_since` from ``"since"``, the watermark taken before).

    Raises: :class:`ConfigurationError` when the space has no such document; as :func:`delete_entity`.
    """
    from pgrag_dag.pipeline.run import delete_document as remove

    validate_realm(realm)
    validate_space(space)
    if dry_run:
        with db.database_errors(engine.dsn), engine.connect() as conn, conn.transaction():
            removed = deletion.document_counts(conn, realm, space, doc_key)
            if not removed["documents"]:
                raise inventory.no_such_document(conn, realm, space, doc_key)
        return {
            "target": "document",
            "realm": realm,
            "space": space,
            "doc_key": doc_key,
            "removed": removed,
            "history": {"documents_removed": removed["documents"], "belief_log": 1},
            "dry_run": True,
        }
    from pgrag_dag.operate.changes import changes_since

    before = changes_since(engine, realm, space, None).watermark
    first, *stages = remove(engine, realm, space, doc_key)
    caused = changes_since(engine, realm, space, before)
    return {
        "target": "document",
        "realm": realm,
        "space": space,
        "doc_key": doc_key,
        "removed": first.metadata["removed"],
        "history": first.metadata["history"],
        "changes": {k: n for k, n in caused.counts().items() if n},
        "since": before,
        "graph": {r.stage: r.metadata for r in stages},
        "dry_run": False,
    }


def delete_space(engine: Engine, realm: str, space: str, *, dry_run: bool = False) -> dict[str, Any]:
    """Delete every row of ``realm.space`` from every table of the realm (history and telemetry included),
    or with ``dry_run`` count them. Returns ``{"target": "space", "realm", "space", "removed": {table:
    rows}, "dry_run"}``. Raises :class:`ConfigurationError` when the space holds no row; as
    :func:`delete_entity`."""
    validate_realm(realm)
    validate_space(space)
    with (
        db.database_errors(engine.dsn),
        locks.stage_lock(engine.dsn, realm, space, STAGE, wait_s=_wait(engine)),
    ):
        _require_realm(engine, realm)
        with engine.connect() as conn, conn.transaction():
            locks.lock_partition(conn, realm, space)
            counts = deletion.count_rows(conn, realm, space)
            if not any(counts.values()):
                raise ConfigurationError(f"space {space!r} of realm {realm!r} holds nothing to delete")
            if not dry_run:
                with history.forgetting(conn):
                    counts = deletion.delete_space_rows(conn, realm, space)
    return {"target": "space", "realm": realm, "space": space, "removed": counts, "dry_run": dry_run}


def delete_realm(engine: Engine, realm: str, *, dry_run: bool = False) -> dict[str, Any]:
    """Drop realm ``realm``: its schema with every table (``DROP SCHEMA … CASCADE``) and its registry row,
    or with ``dry_run`` count what that removes. Holds the stage locks of every space of the realm (sorted),
    then the schema lock and every partition lock. Returns ``{"target": "realm", "realm", "spaces",
    "removed": {table: rows, "pgrag__control.realms": 1}, "dry_run"}``.

    Raises: :class:`ConfigurationError` when the realm does not exist; as :func:`delete_entity`."""
    validate_realm(realm)
    with db.database_errors(engine.dsn):
        _require_realm(engine, realm)
        with engine.connect(autocommit=True) as conn:
            declared = engine.settings.realms.get(realm)
            known = set(vectors.spaces(conn, realm)) | set(declared.spaces if declared else ())
        with locks.stage_locks(engine.dsn, realm, known, STAGE, wait_s=_wait(engine)):
            with engine.connect() as conn, conn.transaction():
                schema.lock_ddl(conn)
                for space in sorted(known | set(vectors.spaces(conn, realm))):
                    locks.lock_partition(conn, realm, space)
                counts = deletion.count_rows(conn, realm, None)
                if not dry_run:
                    deletion.drop_realm(conn, realm)
    return {
        "target": "realm",
        "realm": realm,
        "spaces": sorted(known),
        "removed": {**counts, "pgrag__control.realms": 1},
        "dry_run": dry_run,
    }


def _require_realm(engine: Engine, realm: str) -> None:
    with engine.connect(autocommit=True) as conn:
        if realm_embedding(conn, realm) is None:
            raise ConfigurationError(f"realm {realm!r} does not exist (it has never been indexed)")


def summary_lines(result: dict[str, Any]) -> list[str]:
    """Human lines for a deletion result: what was (or, in a dry run, would be) removed, table by table."""
    what = {
        "entity": lambda r: f"entity {r['name']!r} of {r['realm']}.{r['space']}",
        "document": lambda r: f"document {r['doc_key']!r} of {r['realm']}.{r['space']}",
        "space": lambda r: f"space {r['realm']}.{r['space']}",
        "realm": lambda r: f"realm {r['realm']} (spaces: {', '.join(r['spaces']) or 'none'})",
    }[result["target"]](result)
    lines = [f"{'would remove' if result['dry_run'] else 'removed'} {what}:"]
    lines += [
        f"  {'documents (chunks)' if table == 'documents' else table:<28} {n}"
        for table, n in result["removed"].items()
        if n
    ]
    if "history" in result:  # a document's removal adds history rather than removing it
        lines.append(
            "  history rows added (kept): " + ", ".join(f"{t} {n}" for t, n in result["history"].items())
        )
    if result.get("changes"):
        lines.append(
            "  belief changes it caused: "
            + ", ".join(f"{n} {k.replace('_', ' ')}" for k, n in result["changes"].items())
            + f" (pgrag changes {result['realm']}.{result['space']} --since {result['since']})"
        )
    if result.get("restored"):
        lines.append(f"  relations it had superseded, current again: {result['restored']}")
    if result.get("tombstones"):
        lines.append(f"  'deleted' events left in belief_log: {result['tombstones']}")
    if result["dry_run"]:
        lines.append("nothing changed; add --yes to delete")
    return lines
