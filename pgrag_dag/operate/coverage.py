"""Coverage (paper §6.1 "Coverage"): the communities with least retrieval attention and the live
entities no recorded query ever returned, from the events :mod:`pgrag_dag.query.telemetry` records."""

from __future__ import annotations

from typing import Any

from pgrag_dag.errors import ConfigurationError
from pgrag_dag.names import validate_realm, validate_space
from pgrag_dag.store import db
from pgrag_dag.store import telemetry as store


def coverage(dsn: str, realm: str, space: str, *, limit: int = 20, recording: bool = True) -> dict[str, Any]:
    """Answer §6.1's two coverage questions for ``realm.space``; ``recording``: whether the configuration
    records queries now (``telemetry.coverage``), passed through for the report to say so.

    Returns ``{"realm", "space", "recording", "events"`` (recorded queries of the space or of ``*``),
    ``"least_attended_communities"`` (up to ``limit``: ``id, level, title, size, events, last_at``, fewest
    events first, ties by id; a community counts an event that returned it or one of its members),
    ``"never_retrieved"`` (how many live entities no event returned) and ``"never_retrieved_entities"``
    (the first ``limit`` of them by id: ``id, name, entity_type``)}``.

    Raises:
        InvalidNameError: an invalid realm or space (the wildcard included: coverage is per space).
        ConfigurationError: ``limit`` below 1.
        DatabaseError: PostgreSQL unreachable, or the realm has no ``query_events`` (never initialised).
    """
    validate_realm(realm)
    validate_space(space)
    if limit < 1:
        raise ConfigurationError(f"limit must be at least 1, got {limit}")
    with db.database_errors(dsn), db.connect(dsn, vector=False) as conn, conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        events, _ = store.events_for_space(conn, realm, space)
        communities = store.least_attended_communities(conn, realm, space, limit)
        never, entities = store.never_retrieved_entities(conn, realm, space, limit)
    return {
        "realm": realm,
        "space": space,
        "recording": recording,
        "events": events,
        "least_attended_communities": communities,
        "never_retrieved": never,
        "never_retrieved_entities": entities,
    }


def summary_lines(report: dict[str, Any]) -> list[str]:
    """Human lines for a :func:`coverage` report (``pgrag coverage``). With telemetry off the first line says
    so, and how to turn it on: without recorded queries every entity is "never retrieved"."""
    lines = [f"{report['realm']}.{report['space']}: {report['events']:,} recorded queries"]
    if not report.get("recording", True):
        lines[0] += (
            " — telemetry is off (telemetry.coverage: false), so no query is recorded and the counts below "
            "say nothing about retrieval; turn it on with `telemetry: {coverage: true}` in pgrag.yaml "
            "(or PGRAG_TELEMETRY__COVERAGE=true), then query"
        )
    lines.append("communities with least retrieval attention (events, fewest first):")
    lines += [
        f"  {c['events']:>5,}  #{c['id']} L{c['level']} {c['title']} ({c['size']:,} members)"
        for c in report["least_attended_communities"]
    ] or ["  (no communities)"]
    shown = len(report["never_retrieved_entities"])
    lines.append(
        f"live entities never retrieved: {report['never_retrieved']:,}"
        + (f" (first {shown} by id)" if shown < report["never_retrieved"] else "")
    )
    lines += [f"  #{e['id']} {e['name']} ({e['entity_type']})" for e in report["never_retrieved_entities"]]
    return lines
