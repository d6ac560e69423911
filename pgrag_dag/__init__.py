"""pgrag-dag: a PostgreSQL-native, bi-temporal Graph RAG engine built as a Dagster dataflow of
composable operators. The engine (this package) never imports Dagster; the assets and resources live
in :mod:`pgrag_dag.assets` and :mod:`pgrag_dag.resources`.

Public surface::

    from pgrag_dag import Engine, load_settings, index_documents, query_data, query, QueryParam, reembed_realm
    from pgrag_dag import changes_since, ChangeSet   # the change feed (§6.1 "Change")
    from pgrag_dag import purge_document, purge_space   # erasure (issue 28): dry run unless dry_run=False
    from pgrag_dag import cypher   # the read-only openCypher surface (issue 29): a query → a polars frame
"""

from pgrag_dag.config.load import load_settings
from pgrag_dag.config.sections import Settings
from pgrag_dag.cypher.run import cypher
from pgrag_dag.engine import Engine
from pgrag_dag.errors import (
    ConfigurationError,
    ContractError,
    DatabaseError,
    ExtractionError,
    InvalidNameError,
    ModelError,
    PgragError,
    QueryError,
    ReplayMissError,
    SchemaMismatchError,
    SourceError,
)
from pgrag_dag.operate.changes import ChangeSet, changes_since
from pgrag_dag.operate.purge import purge_document, purge_space
from pgrag_dag.operate.reembed import reembed_realm
from pgrag_dag.pipeline.common import StageResult
from pgrag_dag.pipeline.run import delete_document, index_documents
from pgrag_dag.query.run import query, query_data
from pgrag_dag.query_param import QueryParam, QueryResult

__all__ = [
    "ChangeSet",
    "ConfigurationError",
    "ContractError",
    "DatabaseError",
    "Engine",
    "ExtractionError",
    "InvalidNameError",
    "ModelError",
    "PgragError",
    "QueryError",
    "QueryParam",
    "QueryResult",
    "ReplayMissError",
    "SchemaMismatchError",
    "Settings",
    "SourceError",
    "StageResult",
    "changes_since",
    "cypher",
    "delete_document",
    "index_documents",
    "load_settings",
    "purge_document",
    "purge_space",
    "query",
    "query_data",
    "reembed_realm",
]
