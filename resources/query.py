"""Dagster resource for the public read API (`../shared/DESIGN.md` "Query"; paper §7).

``QueryResource`` is thin: it loads the same settings as the indexing assets (the YAML file named by
``config_path``, default ``PGRAG_CONFIG`` or ``./pgrag.yaml``, and the ``PGRAG_`` environment), builds
an :class:`~pgrag_dag.engine.Engine`, and calls :func:`pgrag_dag.query.query_data` /
:func:`pgrag_dag.query.query`. Use it from your own assets or notebooks::

    rag = QueryResource(realm="wiki")
    answer, result = rag.query("Who designed the Analytical Engine?", space="demo", max_hops=2)
    frame = rag.cypher("MATCH (p:Person)-[r]->(o) RETURN p.name, type(r), o.name LIMIT 5", space="demo")
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import dagster as dg

from pgrag_dag.config.load import load_settings
from pgrag_dag.engine import Engine
from pgrag_dag.errors import QueryError
from pgrag_dag.operate.changes import ChangeSet
from pgrag_dag.operate.changes import changes_since as read_changes
from pgrag_dag.query.run import query as run_query
from pgrag_dag.query.run import query_data as run_query_data
from pgrag_dag.query_param import QueryParam, QueryResult

if TYPE_CHECKING:
    import polars as pl


class QueryResource(dg.ConfigurableResource):  # type: ignore[type-arg]
    """Query one realm. ``param_fields`` are :class:`~pgrag_dag.query.QueryParam` fields (``space`` required);
    fields not given come from the settings' ``retrieval:`` defaults, then QueryParam's.

    ``database_url`` overrides the settings' database (default: the embedded server under ``data_dir``).
    Raises what :func:`pgrag_dag.query.query_data` raises (``QueryError``, ``SchemaMismatchError``,
    ``InvalidNameError``), plus ``ModelError`` / ``ReplayMissError`` from synthesis.
    """

    realm: str
    config_path: str | None = None
    database_url: str | None = None

    def engine(self) -> Engine:
        """An engine over the configured database, model failover list and embedder."""
        overrides = {"database_url": self.database_url} if self.database_url else {}
        return Engine.from_settings(load_settings(self.config_path, **overrides))

    def query_data(self, question: str, **param_fields: Any) -> QueryResult:
        """Retrieved entities, relations, chunks and the assembly report; see
        :func:`pgrag_dag.query.query_data`."""
        engine = self.engine()
        return run_query_data(
            question,
            self._param(engine, param_fields),
            dsn=engine.dsn,
            realm=self.realm,
            embedder=engine.embedder(),
            telemetry=engine.settings.telemetry,
        )

    def query(self, question: str, **param_fields: Any) -> tuple[str, QueryResult]:
        """``(answer, QueryResult)``; see :func:`pgrag_dag.query.query`."""
        engine = self.engine()
        try:
            return run_query(
                question,
                self._param(engine, param_fields),
                dsn=engine.dsn,
                realm=self.realm,
                embedder=engine.embedder(),
                client=engine.client(),
                telemetry=engine.settings.telemetry,
            )
        finally:
            engine.close()

    @staticmethod
    def _param(engine: Engine, param_fields: dict[str, Any]) -> QueryParam:
        if "space" not in param_fields:
            raise QueryError("space is required: a space of the realm, or '*' to read every space")
        return QueryParam.from_settings(engine.settings.retrieval, **param_fields)

    def cypher(
        self,
        text: str,
        params: dict[str, Any] | None = None,
        *,
        space: str,
        as_of: str | None = None,
        as_believed_at: str | None = None,
        include_superseded: bool = False,
        **limits: Any,
    ) -> pl.DataFrame:
        """A read-only openCypher query over ``space`` of this realm (``"*"``: every space of it) as a polars
        frame; see :func:`pgrag_dag.cypher` (issue 29) — bounded by the settings' ``cypher:`` limits, each of
        ``limits`` (``max_hops``, ``max_rows``, ``timeout_s``) winning over its setting. Raises
        ``CypherError`` (a ``QueryError``) for a refused text, before any SQL runs."""
        from pgrag_dag.cypher import cypher

        engine = self.engine()
        return cypher(
            text,
            params,
            dsn=engine.dsn,
            limits=engine.settings.cypher,
            realm=self.realm,
            space=space,
            as_of=as_of,
            as_believed_at=as_believed_at,
            include_superseded=include_superseded,
            **limits,
        )

    def lineage(self, community_id: int) -> dict[str, Any]:
        """What a community report derives from: entities, relations, chunks, documents (issue 6)."""
        from pgrag_dag.store.lineage import lineage

        with self.engine().connect() as conn:
            return lineage(conn, self.realm, community_id)

    def changes_since(self, space: str, watermark: str | None = None) -> ChangeSet:
        """What ``space`` of this realm gained since ``watermark`` (``None``: since the beginning), with the
        next watermark; see :func:`pgrag_dag.operate.changes.changes_since` (paper §6.1 "Change"). Raises
        ``QueryError`` for a malformed watermark or an unknown realm."""
        return read_changes(self.engine(), self.realm, space, watermark)

    def purge_document(self, space: str, doc_key: str, *, dry_run: bool = True) -> dict[str, Any]:
        """Erase document ``doc_key`` of ``space`` in this realm — its text and everything derived from it,
        history included — or, with ``dry_run`` (the default), report what that removes; see
        :func:`pgrag_dag.operate.purge.purge_document` (issue 28). An admin operation: it takes the
        partition's locks and waits for a running stage. Raises ``ConfigurationError`` for an unknown
        document, ``PartitionBusyError`` when a stage keeps the partition past ``operations.lock_wait_s``."""
        from pgrag_dag.operate.purge import purge_document

        engine = self.engine()
        try:
            return purge_document(engine, self.realm, space, doc_key, dry_run=dry_run)
        finally:
            engine.close()

    def purge_space(self, space: str, *, dry_run: bool = True) -> dict[str, Any]:
        """Erase every row of ``space`` in this realm and the cached model responses quoting it, or with
        ``dry_run`` (the default) report it; see :func:`pgrag_dag.operate.purge.purge_space`."""
        from pgrag_dag.operate.purge import purge_space

        engine = self.engine()
        try:
            return purge_space(engine, self.realm, space, dry_run=dry_run)
        finally:
            engine.close()
