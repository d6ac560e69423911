"""The query path (paper §7): :func:`query_data` retrieves and assembles, :func:`query` adds one
synthesis call; :class:`QueryParam` is every knob of a query, :class:`QueryResult` what it returns.

The parameters, modes and their evidence are the leaf :mod:`pgrag_dag.query_param` (re-exported
here). Modules: :mod:`.run` (``query_data``, ``query``, synthesis), :mod:`.retrieve` (the reads of
one query across channels, in one snapshot),
:mod:`.keywords` (conditioning), :mod:`.fusion` (RRF, quota, MMR), :mod:`.assembly` (the context
blocks), :mod:`.citations`, :mod:`.extractive` (an answer a user can see without a model:
:func:`extractive_answer`), :mod:`.filter_warnings` and :mod:`.telemetry` (what each query touched,
§6.1).
"""

from pgrag_dag.query.extractive import extractive_answer
from pgrag_dag.query.run import query, query_data, synthesis_messages, synthesise
from pgrag_dag.query_param import (
    CHUNK_CHANNELS,
    DEFAULT_CHUNK_CHANNELS,
    EVIDENCE,
    MAX_HOPS,
    MODES,
    RELATION_CHANNELS,
    QueryParam,
    QueryResult,
    check_mode,
)

__all__ = [
    "CHUNK_CHANNELS",
    "DEFAULT_CHUNK_CHANNELS",
    "EVIDENCE",
    "MAX_HOPS",
    "MODES",
    "RELATION_CHANNELS",
    "QueryParam",
    "QueryResult",
    "check_mode",
    "extractive_answer",
    "query",
    "query_data",
    "synthesise",
    "synthesis_messages",
]
