"""The openCypher surface (paper §2; issue 29): a read-only Cypher subset compiled to parameterised SQL
over one realm's tables, scoped and temporal exactly as the retrieval walk is (§5.4).

:func:`~pgrag_dag.cypher.parse.parse` (text → syntax tree, refusals with line:column),
:func:`~pgrag_dag.cypher.compile.compile_query` (syntax tree → composed SQL and bound parameters),
:func:`~pgrag_dag.cypher.run.cypher` (both, then one read-only, time- and row-bounded read → polars), its
keywords made one :class:`~pgrag_dag.cypher.compile.CypherOptions` that the other interfaces pass as is
(:func:`~pgrag_dag.cypher.run.answer`, :func:`~pgrag_dag.cypher.run.explain`).
"""

from pgrag_dag.cypher.compile import CypherOptions
from pgrag_dag.cypher.run import answer, cypher, explain

__all__ = ["CypherOptions", "answer", "cypher", "explain"]
