"""The one helper every store module names its tables with (kept apart so that modules the schema module
imports — history, telemetry, work — can use it without an import cycle)."""

from __future__ import annotations

from psycopg import sql

from pgrag_dag.names import schema_for


def qualified(realm: str, table: str) -> sql.Composed:
    """``pgrag_<realm>.<table>`` as a composed SQL identifier. Raises
    :class:`~pgrag_dag.errors.InvalidNameError` for an invalid realm name."""
    return sql.SQL("{}.{}").format(sql.Identifier(schema_for(realm)), sql.Identifier(table))
