"""Deprecated import path, kept for one release: use :mod:`pgrag_dag.graph.view`."""

import warnings

from pgrag_dag.graph.view import write_view

__all__ = ["write_view"]

warnings.warn(
    "pgrag_dag.graph_view is deprecated and goes in the next release: "
    "import write_view from pgrag_dag.graph.view",
    DeprecationWarning,
    stacklevel=2,
)
