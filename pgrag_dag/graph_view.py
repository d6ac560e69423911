"""Deprecated import path, kept for one release: use :mod:`pgrag_dag.graph.view`."""

from pgrag_dag.graph.view import write_view

__all__ = ["write_view"]
