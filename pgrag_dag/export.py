"""Deprecated import path, kept for one release: use :mod:`pgrag_dag.graph.export`."""

import warnings

from pgrag_dag.graph.export import export_graph

__all__ = ["export_graph"]

warnings.warn(
    "pgrag_dag.export is deprecated and goes in the next release: "
    "import export_graph from pgrag_dag.graph.export",
    DeprecationWarning,
    stacklevel=2,
)
