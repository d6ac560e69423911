"""``PgragResource``: the engine handle the indexing assets use (settings, DSN, model client, embedder)."""

from __future__ import annotations

import dagster as dg
from pydantic import PrivateAttr

from pgrag_dag.config.load import load_settings
from pgrag_dag.config.sections import Settings
from pgrag_dag.engine import Engine


class PgragResource(dg.ConfigurableResource):  # type: ignore[type-arg]
    """Settings come from the YAML file named by ``config_path`` (default ``PGRAG_CONFIG`` or
    ``./pgrag.yaml``) and the ``PGRAG_`` environment; ``database_url`` overrides the embedded server.

    One :class:`~pgrag_dag.engine.Engine` is created per step and closed after it.
    """

    config_path: str | None = None
    database_url: str | None = None
    _engine: Engine | None = PrivateAttr(default=None)

    def settings(self) -> Settings:
        """Load the settings (raises :class:`ConfigurationError` on invalid values)."""
        overrides = {"database_url": self.database_url} if self.database_url else {}
        return load_settings(self.config_path, **overrides)

    def engine(self) -> Engine:
        """The step's engine, created on first use."""
        if self._engine is None:
            self._engine = Engine.from_settings(self.settings())
        return self._engine

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        if self._engine is not None:
            self._engine.close()
            self._engine = None
