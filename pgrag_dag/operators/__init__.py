"""The operator authoring API (paper §3.2): what a user's chunker, extractor, gate or enricher module
imports.

::

    from pgrag_dag.operators import OperatorContext, operator

    @operator("full_names", slot="gate")
    def full_names(decisions, options, ctx: OperatorContext): ...

:mod:`.core` holds the operator types and the slot contracts' binding; :mod:`.contracts` the Pandera
frame contracts of every slot and stage. Which operator fills a space's slot is resolved by
:mod:`pgrag_dag.pipeline.composition`.
"""

from pgrag_dag.operators.core import (
    SLOTS,
    BoundOperator,
    Composition,
    NoOptions,
    Operator,
    OperatorContext,
    compose_user,
    operator,
    operator_check_name,
)

__all__ = [
    "SLOTS",
    "BoundOperator",
    "Composition",
    "NoOptions",
    "Operator",
    "OperatorContext",
    "compose_user",
    "operator",
    "operator_check_name",
]
