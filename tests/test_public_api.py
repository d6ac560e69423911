"""The public surface survives the move into subpackages (issue 25 item 4): every name of
``pgrag_dag.__all__``, the operator authoring API, the packages that kept their import path, and the
deprecated module paths the README used to show, which re-export the same objects for one release."""

from __future__ import annotations

import importlib

import pytest

import pgrag_dag

PUBLIC = [
    "ChangeSet", "ConfigurationError", "ContractError", "DatabaseError", "Engine", "ExtractionError",
    "InvalidNameError", "ModelError", "PgragError", "QueryError", "QueryParam", "QueryResult",
    "ReplayMissError", "SchemaMismatchError", "Settings", "SourceError", "StageResult", "changes_since",
    "cypher", "delete_document", "index_documents", "load_settings", "purge_document", "purge_space", "query",
    "query_data", "reembed_realm",
]  # fmt: skip


def test_the_package_exports_what_it_did_before_the_move() -> None:
    assert sorted(pgrag_dag.__all__) == sorted(PUBLIC)
    assert all(getattr(pgrag_dag, name) is not None for name in PUBLIC)


def test_the_packages_that_kept_their_path_export_their_names() -> None:
    from pgrag_dag.config import GateSettings, LLMSettings, RetrievalSettings, Settings, load_settings
    from pgrag_dag.operators import NoOptions, Operator, OperatorContext, operator
    from pgrag_dag.pipeline import INDEX_STAGES, delete_document, index_documents, stage_chunks
    from pgrag_dag.query import QueryParam, QueryResult, query, query_data

    assert load_settings is pgrag_dag.load_settings and Settings is pgrag_dag.Settings
    assert (
        QueryParam is pgrag_dag.QueryParam and query_data is pgrag_dag.query_data and query is pgrag_dag.query
    )
    assert index_documents is pgrag_dag.index_documents and delete_document is pgrag_dag.delete_document
    # the package name is the function, as pgrag_dag.query is (issue 29): its modules import by `from`
    from pgrag_dag.cypher.run import cypher, explain

    assert cypher is pgrag_dag.cypher and callable(explain)
    assert INDEX_STAGES[0] == "chunks" and stage_chunks.__name__ == "stage_chunks"
    assert {GateSettings, LLMSettings, RetrievalSettings, NoOptions, Operator, OperatorContext, QueryResult}
    assert callable(operator)


def test_the_deprecated_paths_re_export_the_same_objects() -> None:
    for old, new, name in [
        ("pgrag_dag.chunking", "pgrag_dag.ingest.splitting", "split_sentences"),
        ("pgrag_dag.export", "pgrag_dag.graph.export", "export_graph"),
        ("pgrag_dag.graph_view", "pgrag_dag.graph.view", "write_view"),
    ]:
        with pytest.warns(DeprecationWarning, match=f"{old} is deprecated .* import {name} from {new}"):
            shim = importlib.reload(importlib.import_module(old))
        assert getattr(shim, name) is getattr(importlib.import_module(new), name)


def test_a_user_operator_written_before_the_move_still_composes() -> None:
    from pgrag_dag.pipeline.composition import resolve_operator
    from tests.user_operators import full_names, sentence_chunker

    assert resolve_operator("tests.user_operators:full_names") is full_names
    assert resolve_operator("tests.user_operators:sentence_chunker") is sentence_chunker
    assert full_names.slot == "gate" and sentence_chunker.slot == "chunker"


def test_the_console_script_and_the_code_location_are_where_they_were() -> None:
    from importlib.metadata import entry_points

    script = next(ep for ep in entry_points(group="console_scripts") if ep.name == "pgrag")
    assert script.value == "pgrag_dag.cli:main" and callable(script.load())
    assert importlib.import_module("pgrag_dag.assets.definitions").defs is not None
