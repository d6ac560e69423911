"""Warnings for a query whose filters cannot match (issue 16 item 3): said once, in ``QueryResult.warnings``,
instead of an empty result the user has to puzzle over.

- ``as_believed_at`` before the space's first chunk: at that belief instant the system held nothing of the
  space (§5.3), so the result is empty — unless a relation predates the history (always known);
- a ``relation_types`` entry no relation of the space has, in any state: it filters every relation out;
  the warning names the space's most frequent predicates.
"""

from __future__ import annotations

from datetime import datetime

import psycopg

from pgrag_dag.query_param import QueryParam
from pgrag_dag.store import inventory
from pgrag_dag.temporal import belief_instant


def filter_warnings(conn: psycopg.Connection, realm: str, param: QueryParam) -> list[str]:
    """The warnings of ``param``'s filters on ``realm`` / ``param.space`` (see the module docstring), in
    that order; ``[]`` when every filter can match. Reads only when a filter is set (``as_believed_at``,
    ``relation_types``). Raises :class:`~pgrag_dag.errors.QueryError` for an unreadable ``as_believed_at``."""
    out: list[str] = []
    space = param.space
    if param.as_believed_at is not None:
        believed = belief_instant(param.as_believed_at)
        first, always_known = inventory.first_belief(conn, realm, space)
        if first is not None and believed < first and not always_known:
            out.append(
                f"as_believed_at {believed.isoformat()} is before anything of space {space!r} was believed "
                f"(its first chunk: {_instant(first)}): the result is empty"
            )
    if param.relation_types:
        unknown = inventory.unknown_predicates(conn, realm, space, param.relation_types)
        if unknown:
            known = inventory.frequent_predicates(conn, realm, space)
            listed = ", ".join(repr(t) for t in unknown)
            out.append(
                f"relation type{'s' if len(unknown) > 1 else ''} {listed} "
                f"match{'' if len(unknown) > 1 else 'es'} "
                f"no relation of space {space!r}"
                + (f" (its most frequent: {', '.join(known)})" if known else " (it has no relation)")
            )
    return out


def _instant(at: datetime) -> str:
    return belief_instant(at).isoformat()


__all__ = ["filter_warnings"]
