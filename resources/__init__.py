"""Dagster resources: :class:`PgragResource` (settings, database, model client, embedder) and
:class:`QueryResource` (the Python query API for users' own Dagster code and notebooks)."""

from pgrag_dag.resources.engine import PgragResource
from pgrag_dag.resources.query import QueryResource

__all__ = ["PgragResource", "QueryResource"]
