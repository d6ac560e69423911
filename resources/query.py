"""Dagster resource for the public read API (DESIGN.md "Query"; paper §7).

``QueryResource`` is thin: it resolves the DSN (``database_url`` or the embedded server under
``data_dir``), builds the realm's embedder and a model client, and calls
:func:`pgrag_dag.query.query_data` / :func:`pgrag_dag.query.query`. Use it from your own assets or
notebooks::

    rag = QueryResource(realm="wiki", database_url="postgresql://...")
    answer, result = rag.query("Who designed the Analytical Engine?", space="main", max_hops=2)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dagster as dg

from pgrag_dag.config import EmbeddingSettings, LLMSettings
from pgrag_dag.embedding import Embedder, make_embedder
from pgrag_dag.llm import ModelClient
from pgrag_dag.query import QueryParam, QueryResult
from pgrag_dag.query import query as run_query
from pgrag_dag.query import query_data as run_query_data
from pgrag_dag.store.db import resolve_dsn


class QueryResource(dg.ConfigurableResource):  # type: ignore[type-arg]
    """Query one realm. ``param_fields`` are :class:`~pgrag_dag.query.QueryParam` fields (``space`` required).

    Raises what :func:`pgrag_dag.query.query_data` raises (``QueryError``, ``SchemaMismatchError``,
    ``InvalidNameError``), plus ``ModelError`` / ``ReplayMissError`` from synthesis.
    """

    database_url: str | None = None
    data_dir: str = ".pgrag"
    realm: str
    embedding_model: str = "hashing-sha256"
    embedding_dim: int = 384
    models: list[str] = ["replay"]
    api_base: str | None = None

    def dsn(self) -> str:
        """The PostgreSQL DSN: ``database_url``, else the embedded server under ``data_dir``."""
        return resolve_dsn(self.database_url, Path(self.data_dir))

    def embedder(self) -> Embedder:
        """The realm's embedder (``embedding_model`` at width ``embedding_dim``)."""
        return make_embedder(EmbeddingSettings(model=self.embedding_model, dim=self.embedding_dim))

    def query_data(self, question: str, **param_fields: Any) -> QueryResult:
        """Retrieved entities, relations, chunks and the assembly report; see :func:`pgrag_dag.query.query_data`."""
        return run_query_data(
            question, QueryParam(**param_fields), dsn=self.dsn(), realm=self.realm, embedder=self.embedder()
        )

    def query(self, question: str, **param_fields: Any) -> tuple[str, QueryResult]:
        """``(answer, QueryResult)``; see :func:`pgrag_dag.query.query`."""
        dsn = self.dsn()
        client = ModelClient(dsn, LLMSettings(models=list(self.models), api_base=self.api_base))
        try:
            return run_query(
                question, QueryParam(**param_fields), dsn=dsn, realm=self.realm, embedder=self.embedder(), client=client
            )
        finally:
            client.close()
