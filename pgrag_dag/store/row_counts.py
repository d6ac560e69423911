"""What each stage asset holds for a space: the row counts Dagster shows as ``dagster/row_count`` (issue 16
item 9) — rows stored in the realm's tables after the stage ran, not rows it checked or changed in that run.
"""

from __future__ import annotations

import psycopg
from psycopg import sql

from pgrag_dag.store.identifiers import qualified
from pgrag_dag.store.vectors import UNEMBEDDED_TABLES, unembedded

HELD_ROWS: dict[str, str] = {
    "chunks": "chunks stored in the space (documents rows)",
    "raw_extractions": "extraction passes stored in the space (raw_extractions rows: one per chunk and pass)",
    "gated_triples": (
        "gate decisions stored in the space (gate_decisions rows: entities and triples, accepted or refused)"
    ),
    "resolved_entities": "entities stored in the space (entities rows, live and dormant)",
    "relations": "relations stored in the space (relations rows: live, dormant and superseded)",
    "embeddings": "vectors stored in the space (chunks, entities and relations with an embedding)",
    "communities": "communities stored in the space (level-0 communities rows, one report each)",
    "community_hierarchy": "parent topics stored in the space (communities rows above level 0)",
}
"""Stage asset name → what its ``dagster/row_count`` counts (shown beside it as ``row_count_counts``)."""

_COUNTS: dict[str, tuple[str, str]] = {
    "chunks": ("documents", "TRUE"),
    "raw_extractions": ("raw_extractions", "TRUE"),
    "gated_triples": ("gate_decisions", "TRUE"),
    "resolved_entities": ("entities", "TRUE"),
    "relations": ("relations", "TRUE"),
    "communities": ("communities", "level = 0"),
    "community_hierarchy": ("communities", "level > 0"),
}


def held_rows(conn: psycopg.Connection, realm: str, space: str, stage: str) -> int:
    """How many rows ``stage`` (a key of :data:`HELD_ROWS`) holds for ``space`` of ``realm`` now: a count of
    its table's rows of the space; for ``embeddings`` the rows of :data:`UNEMBEDDED_TABLES` minus those
    without a vector. Raises :class:`KeyError` for another stage name."""
    if stage == "embeddings":
        total = sum(_count(conn, realm, space, table, "TRUE") for table in UNEMBEDDED_TABLES)
        return total - sum(c["missing"] for c in unembedded(conn, realm, space).values())
    table, where = _COUNTS[stage]
    return _count(conn, realm, space, table, where)


def _count(conn: psycopg.Connection, realm: str, space: str, table: str, where: str) -> int:
    row = conn.execute(
        sql.SQL("SELECT count(*) FROM {} WHERE space = %s AND {}").format(
            qualified(realm, table), sql.SQL(where)
        ),
        (space,),
    ).fetchone()  # where: a literal of _COUNTS, never input
    return int(row[0]) if row else 0
