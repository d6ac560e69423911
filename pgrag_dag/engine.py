"""The engine handle: settings, a DSN, and lazily created model client and embedder.

One :class:`Engine` per process or Dagster step; stage functions in :mod:`pgrag_dag.pipeline` take it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from pgrag_dag.config.sections import Settings
from pgrag_dag.providers.embedding import Embedder, configured_convention, make_embedder
from pgrag_dag.providers.llm import ModelClient
from pgrag_dag.store import cache, db, schema


@dataclass
class Engine:
    """Settings + DSN; :meth:`client` and :meth:`embedder` are created on first use."""

    settings: Settings
    dsn: str
    _client: ModelClient | None = field(default=None, repr=False)
    _embedder: Embedder | None = field(default=None, repr=False)

    @classmethod
    def from_settings(cls, settings: Settings) -> Engine:
        """Resolve the DSN (``database_url`` or the embedded server under ``data_dir``)."""
        return cls(settings, db.resolve_dsn(settings.database_url, settings.resolve(settings.data_dir)))

    def connect(self, *, autocommit: bool = False) -> psycopg.Connection:
        """A new connection (pgvector registered); raises :class:`DatabaseError` when unreachable."""
        return db.connect(self.dsn, autocommit=autocommit)

    def init_realm(self, realm: str) -> None:
        """Create the realm's schema at the configured embedding width (idempotent, fails closed; no DDL
        when the realm is at the current schema version)."""
        with db.database_errors(self.dsn), self.connect(autocommit=True) as conn:
            schema.init_realm(
                conn,
                realm,
                embedding_model=self.settings.embedding.model,
                dim=self.settings.embedding.dim,
                convention=configured_convention(self.settings.embedding),
            )

    def import_cassettes(self) -> int:
        """Load every configured cassette into the response cache; returns lines read."""
        n = 0
        with db.database_errors(self.dsn), self.connect(autocommit=True) as conn:
            schema.init_control(conn)
            for path in self.settings.cassettes:
                with conn.transaction():
                    n += cache.import_cassette(conn, self.settings.resolve(path))
        return n

    def client(self) -> ModelClient:
        """The chat client (failover list, deadline, cache, replay) — one per engine. Responses it
        could not cache are spooled under ``<data_dir>/spool/`` and loaded by the next client."""
        if self._client is None:
            self._client = ModelClient(self.dsn, self.settings.llm, spool_dir=self.spool_dir())
        return self._client

    def spool_dir(self) -> Path:
        """``<data_dir>/spool``: model responses received while the response cache could not be written."""
        return self.settings.resolve(self.settings.data_dir) / "spool"

    def embedder(self) -> Embedder:
        """The realm's embedder (local, litellm or hashing), per the settings; created on first use."""
        if self._embedder is None:
            self._embedder = make_embedder(self.settings.embedding)
        return self._embedder

    def usage(self) -> dict[str, Any]:
        """Model usage so far (calls, cache hits, tokens, cost)."""
        return (
            self._client.usage.as_dict()
            if self._client
            else {
                "model_calls": 0,
                "cache_hits": 0,
                "prompt_tokens": 0,
                "completion_tokens": 0,
                "cost_usd": 0.0,
            }
        )

    def close(self) -> None:
        """Close the model client's cache pool (if a client was made)."""
        if self._client is not None:
            self._client.close()
