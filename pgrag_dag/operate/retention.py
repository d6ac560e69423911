"""Retention as demotion (paper §6.1; issue 14 item 3): score live entities, archive the least valuable,
unarchive on request. Nothing is deleted: archiving is reversible and the history keeps it.

The importance score of a live entity of a space is the weighted mean (weights ``retention.w_*``,
:class:`~pgrag_dag.config.RetentionSettings`) of four components, each in 0..1:

- ``recency``: when a recorded query last returned it, ``(last − start) / (now − start)`` over the
  window from ``start`` — the belief time of the space's oldest live entity, or its first recorded event
  if that is earlier — to now; 0 when never returned (so any retrieval counts for more than none);
- ``frequency``: ``log(1 + events returning it) / log(1 + the most any entity of the space got)``;
- ``degree``: ``log(1 + current relations to live entities) / log(1 + the space's largest degree)``;
- ``age``: belief-time age inverted, ``1 − age / the oldest's age`` (its ``created`` event; 1 = newest),
  so an entity is not archived before queries could find it.

``retention.archive_fraction`` of the live entities with the lowest score (ties by id) are archived,
only those at most ``retention.max_score`` when set. Recency and frequency need coverage telemetry
(:mod:`pgrag_dag.query.telemetry`): without it, or before any query of the space was recorded, :func:`plan`
and :func:`apply` refuse with :class:`ConfigurationError` rather than score on structure alone.
Times are the database clock. SQL: :mod:`pgrag_dag.store.retention`.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

import psycopg

from pgrag_dag.config.sections import RetentionSettings, Settings
from pgrag_dag.engine import Engine
from pgrag_dag.errors import ConfigurationError
from pgrag_dag.names import validate_realm, validate_space
from pgrag_dag.store import db, locks, telemetry
from pgrag_dag.store import retention as store
from pgrag_dag.store.retrieval import read_scope, unindexed_space

STAGE = "retention"
"""The stage name the retention and unarchive commands' stage locks carry."""
COMPONENTS = ("recency", "frequency", "degree", "age")


def score(
    structure: list[dict[str, Any]],
    attention: dict[int, tuple[int, datetime]],
    *,
    now: datetime,
    first_event: datetime,
    settings: RetentionSettings,
) -> list[dict[str, Any]]:
    """Score each live entity of ``structure`` (:func:`pgrag_dag.store.retention.live_structure`) with its
    retrieval ``attention`` (:func:`pgrag_dag.store.telemetry.entity_attention`) as the module docstring
    says. Returns ``id, name, entity_type, score, components`` (``{component: 0..1}``, 4 decimals) and the
    raw ``events``, ``last_retrieved``, ``degree``, ``created_at``, lowest score first (ties by id)."""
    start = min([first_event, *(e["created_at"] for e in structure)])
    window = (now - start).total_seconds()
    most = max((n for n, _ in attention.values()), default=0)
    widest = max((int(e["degree"]) for e in structure), default=0)
    oldest = max(((now - e["created_at"]).total_seconds() for e in structure), default=0.0)
    weights = {
        "recency": settings.w_recency,
        "frequency": settings.w_frequency,
        "degree": settings.w_degree,
        "age": settings.w_age,
    }
    total = sum(weights.values())
    out = []
    for e in structure:
        events, last = attention.get(int(e["id"]), (0, None))
        parts = {
            "recency": 0.0
            if last is None
            else (1.0 if window <= 0 else min(1.0, (last - start).total_seconds() / window)),
            "frequency": math.log1p(events) / math.log1p(most) if most else 0.0,
            "degree": math.log1p(int(e["degree"])) / math.log1p(widest) if widest else 0.0,
            "age": 1.0 if oldest <= 0 else max(0.0, 1.0 - (now - e["created_at"]).total_seconds() / oldest),
        }
        value = sum(weights[k] * parts[k] for k in COMPONENTS) / total
        out.append(
            {
                "id": int(e["id"]),
                "name": e["name"],
                "entity_type": e["entity_type"],
                "score": round(value, 4),
                "components": {k: round(v, 4) for k, v in parts.items()},
                "events": events,
                "last_retrieved": last,
                "degree": int(e["degree"]),
                "created_at": e["created_at"],
            }
        )
    return sorted(out, key=lambda r: (r["score"], r["id"]))


def select(scored: list[dict[str, Any]], settings: RetentionSettings) -> list[dict[str, Any]]:
    """The entities to archive: the lowest ``floor(archive_fraction × live)`` of ``scored`` (sorted as
    :func:`score` returns them), only those scoring at most ``max_score`` when it is set."""
    chosen = scored[: math.floor(settings.archive_fraction * len(scored))]
    return [e for e in chosen if settings.max_score is None or e["score"] <= settings.max_score]


def _require_coverage(settings: Settings, realm: str, space: str) -> None:
    if not settings.telemetry.coverage:
        raise ConfigurationError(
            f"retention of {realm}.{space} needs coverage telemetry, which is off: recency and frequency are "
            "undefined without it — set telemetry.coverage: true (PGRAG_TELEMETRY__COVERAGE=true) "
            "and let queries "
            "record events first"
        )


def _require_events(realm: str, space: str, events: int) -> None:
    if events == 0:
        raise ConfigurationError(
            f"retention of {realm}.{space}: no query of the space has been recorded yet, "
            "so recency and frequency "
            "are undefined — run queries with telemetry.coverage on first"
        )


def check_scope(engine: Engine, realm: str, space: str) -> None:
    """Raise :class:`ConfigurationError` unless ``realm`` exists and a chunk was ever indexed into ``space``
    (its own autocommit connection; a missing realm is detected without a failed transaction)."""
    with db.database_errors(engine.dsn), engine.connect(autocommit=True) as conn:
        registered, found = read_scope(conn, realm, space)
    if registered is None:
        raise ConfigurationError(f"realm {realm!r} does not exist (it has never been indexed)")
    if not found:
        raise ConfigurationError(unindexed_space(realm, space))


def _plan(conn: psycopg.Connection, settings: Settings, realm: str, space: str) -> dict[str, Any]:
    events, first = telemetry.events_for_space(conn, realm, space)
    _require_events(realm, space, events)
    assert first is not None
    scored = score(
        store.live_structure(conn, realm, space),
        telemetry.entity_attention(conn, realm, space),
        now=store.clock(conn),
        first_event=first,
        settings=settings.retention,
    )
    chosen = select(scored, settings.retention)
    return {
        "realm": realm,
        "space": space,
        "events": events,
        "live": len(scored),
        "settings": settings.retention.model_dump(),
        "archive": chosen,
    }


def plan(engine: Engine, realm: str, space: str) -> dict[str, Any]:
    """What retention would archive in ``realm.space`` now, changing nothing (a dry run).

    Returns ``{"realm", "space", "events"`` (recorded queries of the space or of ``*``), ``"live"`` (live
    entities scored), ``"settings"`` (the ``retention:`` section), ``"archive"`` (the entities it would
    archive, lowest score first: as :func:`score` returns them), ``"dry_run": True}``.

    Raises:
        ConfigurationError: coverage telemetry off, no event recorded for the space yet, or no such realm
            or space.
        InvalidNameError: an invalid realm or space (the wildcard included).
        DatabaseError: PostgreSQL unreachable or refused a read.
    """
    validate_realm(realm)
    validate_space(space)
    _require_coverage(engine.settings, realm, space)
    check_scope(engine, realm, space)
    with db.database_errors(engine.dsn), engine.connect() as conn, conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        return {**_plan(conn, engine.settings, realm, space), "dry_run": True}


def apply(engine: Engine, realm: str, space: str) -> dict[str, Any]:
    """Archive what :func:`plan` selects, scored and archived in one write transaction under the
    partition's stage and partition locks (:mod:`pgrag_dag.store.locks`). Returns :func:`plan`'s dict
    with ``"dry_run": False`` and ``"archived"`` (how many). The next ``communities`` build leaves them
    out (its fingerprint changes); :func:`unarchive` reverses it.

    Raises: as :func:`plan`, plus :class:`PartitionBusyError` when a stage of the partition still runs
    after ``operations.lock_wait_s`` seconds.
    """
    validate_realm(realm)
    validate_space(space)
    _require_coverage(engine.settings, realm, space)
    check_scope(engine, realm, space)
    with (
        db.database_errors(engine.dsn),
        locks.stage_lock(engine.dsn, realm, space, STAGE, wait_s=engine.settings.operations.lock_wait_s),
    ):
        with engine.connect() as conn, conn.transaction():
            locks.lock_partition(conn, realm, space)
            result = _plan(conn, engine.settings, realm, space)
            archived = store.archive(conn, realm, space, [e["id"] for e in result["archive"]])
    return {**result, "dry_run": False, "archived": len(archived)}


def unarchive(engine: Engine, realm: str, space: str, names: list[str]) -> dict[str, Any]:
    """Unarchive the entities of ``realm.space`` called ``names`` (case-insensitive), under the stage and
    partition locks: each is live again at once when a chunk still mentions it, else stays dormant until
    one does (history: ``unarchived``). Needs no telemetry.

    Returns ``{"realm", "space", "unarchived": [{"id", "name", "revived"}], "not_archived": [names]}``.

    Raises:
        ConfigurationError: no name given, or a name the space has no entity for (before any write; the
            message names them).
        InvalidNameError, PartitionBusyError, DatabaseError: as :func:`apply`.
    """
    validate_realm(realm)
    validate_space(space)
    if not names:
        raise ConfigurationError("name at least one entity to unarchive")
    check_scope(engine, realm, space)
    with (
        db.database_errors(engine.dsn),
        locks.stage_lock(engine.dsn, realm, space, STAGE, wait_s=engine.settings.operations.lock_wait_s),
    ):
        with engine.connect() as conn, conn.transaction():
            locks.lock_partition(conn, realm, space)
            found = store.find_by_name(conn, realm, space, names)
            missing = [n for n in names if n.lower() not in found]
            if missing:
                raise ConfigurationError(
                    f"space {realm}.{space} has no entity named {', '.join(map(repr, missing))}"
                )
            done = store.unarchive(
                conn, realm, space, sorted({e["id"] for e in found.values() if e["archived"]})
            )
    return {
        "realm": realm,
        "space": space,
        "unarchived": done,
        "not_archived": [found[n.lower()]["name"] for n in names if not found[n.lower()]["archived"]],
    }


def summary_lines(result: dict[str, Any]) -> list[str]:
    """Human lines for :func:`plan` / :func:`apply` (``pgrag retention``)."""
    verb = "would archive" if result["dry_run"] else "archived"
    n = len(result["archive"]) if result["dry_run"] else result["archived"]
    lines = [
        f"{result['realm']}.{result['space']}: {verb} {n} of {result['live']} live entities "
        f"({result['events']} recorded queries)"
    ]
    for e in result["archive"]:
        parts = " ".join(f"{k}={v:.2f}" for k, v in e["components"].items())
        lines.append(f"  {e['score']:.3f}  {e['name']} ({e['entity_type']})  {parts}")
    if result["dry_run"] and result["archive"]:
        lines.append("dry run: nothing changed; --apply archives them (reversible: pgrag unarchive)")
    return lines
