"""The change feed (paper §6.1 "Change"; issue 14 item 2): what a space's belief history gained since a
watermark, for pollers that must see every change exactly once.

::

    cs = changes_since(engine, "wiki", "demo", None)          # everything so far
    ...
    cs = changes_since(engine, "wiki", "demo", cs.watermark)   # only what committed since

The watermark is taken from the database (a snapshot of its transactions), never from a clock, so
writers that commit concurrently, or commit in another order than they began, are neither lost nor
repeated (:mod:`pgrag_dag.store.changes`).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, fields
from typing import Any, cast

import psycopg

from pgrag_dag.engine import Engine
from pgrag_dag.errors import QueryError, UnknownSpaceError
from pgrag_dag.names import validate_realm, validate_space
from pgrag_dag.store import changes as store
from pgrag_dag.store import db, history
from pgrag_dag.store.retrieval import realm_embedding, unindexed_space

_SNAPSHOT = re.compile(r"^[0-9]{1,20}:[0-9]{1,20}:([0-9]{1,20}(,[0-9]{1,20})*)?$")

FIELD_OF_EVENT = {
    ("relation", "asserted"): "relations_added",
    ("relation", "superseded"): "relations_superseded",
    ("relation", "restored"): "relations_restored",
    ("relation", "dormant"): "relations_dormant",
    ("relation", "revived"): "relations_revived",
    ("relation", "deleted"): "relations_deleted",
    ("entity", "created"): "entities_created",
    ("entity", "dormant"): "entities_dormant",
    ("entity", "revived"): "entities_revived",
    ("entity", "archived"): "entities_archived",
    ("entity", "unarchived"): "entities_unarchived",
    ("entity", "deleted"): "entities_deleted",
    ("document", "added"): "documents_added",
    ("document", "replaced"): "documents_replaced",
    ("document", "removed"): "documents_removed",
    ("document", "renamed"): "documents_renamed",
}
"""``(belief_log.kind, event)`` → the :class:`ChangeSet` field listing it."""
EVENT_FIELDS = tuple(dict.fromkeys(FIELD_OF_EVENT.values()))


@dataclass(frozen=True)
class ChangeSet:
    """The changes of one space between two watermarks, every event once, each list in ``seq`` order.

    Events are dicts with ``seq`` (the belief log's) and ``at`` (ISO-8601, the writing transaction's
    database clock). Relations: ``id``, ``rendered``, ``subject``, ``predicate``, ``negated``, ``object``
    (the relation's present row; ``None`` once explicitly deleted); ``relations_superseded`` adds
    ``superseded_by`` (id) and ``superseded_by_rendered``. Entities: ``id``, ``name``, ``entity_type``.
    Documents: ``doc_key``; ``documents_renamed`` (a document re-keyed in place, issue 16: its chunks and
    graph unchanged, so neither removed nor added) adds ``renamed_from``, the key it had. Nothing is
    collapsed: a relation asserted and superseded inside one window is in both lists.

    ``changed_relations_since_communities``: relation events of the space after its latest level-0
    community ``built_at``, or after the communities stage last found the graph unchanged (or without a
    cluster large enough), whichever is later — every relation event when the stage never ran;
    ``graph_writes_since_communities``: transactions that wrote the space's graph after the data version
    the communities stage last read — relations, and also archival, dormancy, revival, merges and changed
    descriptions or types, which feed the reports too (issue 28); ``communities_stale`` when either is > 0
    or relations exist and the stage never read them;
    ``communities_built_at`` that build's ISO-8601
    time (``None``: no community) — read in the same snapshot, whatever the window.
    ``watermark``: pass it as the next call's ``watermark``.
    """

    realm: str
    space: str
    since: str | None
    watermark: str
    relations_added: tuple[dict[str, Any], ...] = ()
    relations_superseded: tuple[dict[str, Any], ...] = ()
    relations_restored: tuple[dict[str, Any], ...] = ()
    relations_dormant: tuple[dict[str, Any], ...] = ()
    relations_revived: tuple[dict[str, Any], ...] = ()
    relations_deleted: tuple[dict[str, Any], ...] = ()
    entities_created: tuple[dict[str, Any], ...] = ()
    entities_dormant: tuple[dict[str, Any], ...] = ()
    entities_revived: tuple[dict[str, Any], ...] = ()
    entities_archived: tuple[dict[str, Any], ...] = ()
    entities_unarchived: tuple[dict[str, Any], ...] = ()
    entities_deleted: tuple[dict[str, Any], ...] = ()
    documents_added: tuple[dict[str, Any], ...] = ()
    documents_replaced: tuple[dict[str, Any], ...] = ()
    documents_removed: tuple[dict[str, Any], ...] = ()
    documents_renamed: tuple[dict[str, Any], ...] = ()
    communities_stale: bool = False
    changed_relations_since_communities: int = 0
    graph_writes_since_communities: int = 0
    communities_built_at: str | None = None

    def counts(self) -> dict[str, int]:
        """Events per field (every field of :data:`EVENT_FIELDS`, zeros included)."""
        return {f: len(getattr(self, f)) for f in EVENT_FIELDS}

    @property
    def events(self) -> int:
        """How many events the window holds."""
        return sum(self.counts().values())

    def seqs(self) -> list[int]:
        """Every event's ``seq``, ascending."""
        return sorted(e["seq"] for f in EVENT_FIELDS for e in getattr(self, f))

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of every field, plus ``counts`` and ``events``."""
        out = {
            f.name: list(getattr(self, f.name)) if f.name in EVENT_FIELDS else getattr(self, f.name)
            for f in fields(self)
        }
        return {**asdict(self), **out, "counts": self.counts(), "events": self.events}

    def summary(self, *, examples: int = 3) -> list[str]:
        """Human lines: the space and window, each non-zero kind with up to ``examples`` examples, the
        community lag, and the next watermark last."""
        lines = [
            f"{self.realm}.{self.space}: {self.events} change(s) since "
            + (f"watermark {self.since}" if self.since else "the beginning")
        ]
        for f, n in self.counts().items():
            if n:
                shown = "; ".join(_label(e) for e in getattr(self, f)[:examples])
                lines.append(f"  {f.replace('_', ' ')}: {n}  ({shown}{'; …' if n > examples else ''})")
        stale = (
            f"stale: {self.changed_relations_since_communities} relation change(s), "
            f"{self.graph_writes_since_communities} graph write(s) since they were built"
            if self.communities_stale
            else "current"
        )
        lines.append(
            f"communities: {stale}"
            + (f" (built {self.communities_built_at})" if self.communities_built_at else " (none built)")
        )
        lines.append(f"next watermark: {self.watermark}")
        return lines


def _label(e: dict[str, Any]) -> str:
    if "renamed_from" in e:
        return f"{e['renamed_from']} → {e['doc_key']}"
    if "doc_key" in e:
        return str(e["doc_key"])
    if "name" in e:
        return str(e["name"] if e["name"] is not None else f"entity {e['id']} (deleted)")
    text = (
        e["rendered"]
        if e["rendered"]
        else f"relation {e['id']}" + (" (deleted)" if e["rendered"] is None else "")
    )
    return f"{text} → {e['superseded_by_rendered']}" if e.get("superseded_by_rendered") else text


def _event(row: dict[str, Any]) -> dict[str, Any]:
    base = {"seq": int(row["seq"]), "at": row["at"].isoformat()}
    if row["kind"] == "document":
        renamed = {"renamed_from": row["renamed_from"]} if row["event"] == "renamed" else {}
        return {**base, "doc_key": row["doc_key"], **renamed}
    if row["kind"] == "entity":
        return {**base, "id": row["object_id"], "name": row["entity"], "entity_type": row["entity_type"]}
    rel = {
        **base,
        "id": row["object_id"],
        "rendered": row["rendered"],
        "subject": row["subject"],
        "predicate": row["predicate"],
        "negated": row["negated"],
        "object": row["object"],
    }
    if row["event"] == "superseded":
        rel.update(superseded_by=row["superseded_by"], superseded_by_rendered=row["superseded_by_rendered"])
    return rel


def changes_since(engine_or_dsn: Engine | str, realm: str, space: str, watermark: str | None) -> ChangeSet:
    """What ``realm``/``space``'s belief history gained since ``watermark`` (``None`` or ``""``: since the
    beginning), read in one ``REPEATABLE READ READ ONLY`` transaction (paper §6.1, §5.3).

    The returned ``watermark`` is that transaction's ``pg_current_snapshot()``; a poller passing each
    result's watermark to the next call sees every event exactly once, however writers interleave their
    commits. Re-indexing unchanged documents writes no event (an empty delta).

    Raises:
        QueryError: a malformed watermark, one ahead of this database (from another server), a realm
            that does not exist or predates the belief history (index it once to migrate it), or a space
            with neither history nor chunks (never indexed, mistyped or deleted: :class:`UnknownSpaceError`).
        InvalidNameError: an invalid realm or space name (the wildcard ``*`` included).
        DatabaseError: PostgreSQL unreachable or refusing the read.
    """
    validate_realm(realm)
    validate_space(space)
    old = watermark.strip() if watermark else None
    if old is not None and not _SNAPSHOT.match(old):
        raise QueryError(
            f"malformed watermark {watermark!r}: expected a snapshot 'xmin:xmax:xip,...' "
            "as a previous changes_since returned"
        )
    dsn = engine_or_dsn.dsn if isinstance(engine_or_dsn, Engine) else engine_or_dsn
    with db.database_errors(dsn), db.read_connection(dsn) as conn:
        _require_history(conn, realm)
        with conn.transaction():
            new = store.current_snapshot(conn)
            if old is not None:
                _check_watermark(conn, old, watermark)
            _require_space(conn, realm, space)
            rows = store.events_since(conn, realm, space, old)
            lag = _lag(*store.community_lag(conn, realm, space))
    lists: dict[str, list[dict[str, Any]]] = {f: [] for f in EVENT_FIELDS}
    for row in rows:
        lists[FIELD_OF_EVENT[(row["kind"], row["event"])]].append(_event(row))
    return ChangeSet(
        realm=realm,
        space=space,
        since=old,
        watermark=new,
        **cast(dict[str, Any], {f: tuple(v) for f, v in lists.items()}),
        **asdict(lag),
    )


@dataclass(frozen=True)
class CommunityLag:
    """How far a space's communities lag behind its relations (see :class:`ChangeSet`)."""

    communities_stale: bool
    changed_relations_since_communities: int
    graph_writes_since_communities: int
    communities_built_at: str | None


def community_lag(engine_or_dsn: Engine | str, realm: str, space: str) -> CommunityLag:
    """The community lag of ``realm``/``space`` alone (no event read): relation events after the latest
    level-0 community ``built_at`` and graph writes after the data version it read (paper §6.1; issue 28).
    Raises as :func:`changes_since`."""
    validate_realm(realm)
    validate_space(space)
    dsn = engine_or_dsn.dsn if isinstance(engine_or_dsn, Engine) else engine_or_dsn
    with db.database_errors(dsn), db.read_connection(dsn) as conn:
        _require_history(conn, realm)
        with conn.transaction():
            _require_space(conn, realm, space)
            return _lag(*store.community_lag(conn, realm, space))


def _lag(built_at: Any, lag: int, never_checked: bool, writes: int) -> CommunityLag:
    return CommunityLag(
        communities_stale=lag > 0 or writes > 0 or never_checked,
        changed_relations_since_communities=lag,
        graph_writes_since_communities=writes,
        communities_built_at=built_at.isoformat() if built_at is not None else None,
    )


def _require_history(conn: psycopg.Connection, realm: str) -> None:
    if not history.table_exists(conn, realm, "belief_log"):
        known = realm_embedding(conn, realm) is not None
        raise QueryError(
            f"realm {realm!r} "
            + (
                "predates the belief history: index it once to migrate it"
                if known
                else "does not exist (it has never been indexed)"
            )
        )


def _require_space(conn: psycopg.Connection, realm: str, space: str) -> None:
    if not store.space_known(conn, realm, space):
        raise UnknownSpaceError(unindexed_space(realm, space))


def _check_watermark(conn: psycopg.Connection, old: str, given: str | None) -> None:
    """Refuse a watermark PostgreSQL cannot read as a snapshot, or one this database has not reached."""
    try:
        with conn.transaction():  # a savepoint: the refused cast must not abort the read
            row = conn.execute(
                "SELECT pg_snapshot_xmax(%s::pg_snapshot) <= pg_snapshot_xmax(pg_current_snapshot())", (old,)
            ).fetchone()
    except psycopg.DataError as exc:
        first = (str(exc).strip().splitlines() or [""])[0]
        raise QueryError(
            f"malformed watermark {given!r}: PostgreSQL cannot read it as a snapshot ({first})"
        ) from None
    if not (row and row[0]):
        raise QueryError(f"watermark {given!r} is ahead of this database (was it taken on another server?)")
