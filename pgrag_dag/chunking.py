"""Deprecated import path, kept for one release: use :mod:`pgrag_dag.ingest.splitting`."""

import warnings

from pgrag_dag.ingest.splitting import split_sentences

__all__ = ["split_sentences"]

warnings.warn(
    "pgrag_dag.chunking is deprecated and goes in the next release: "
    "import split_sentences from pgrag_dag.ingest.splitting",
    DeprecationWarning,
    stacklevel=2,
)
