"""Deprecated import path, kept for one release: use :mod:`pgrag_dag.ingest.splitting`."""

from pgrag_dag.ingest.splitting import split_sentences

__all__ = ["split_sentences"]
