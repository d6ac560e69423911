"""Deprecated import path, kept for one release: use :mod:`pgrag_dag.graph.export`."""

from pgrag_dag.graph.export import export_graph

__all__ = ["export_graph"]
