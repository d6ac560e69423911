"""The syntax tree of the read-only openCypher subset (paper §2; issue 29): what
:func:`pgrag_dag.cypher.parse.parse` returns and :func:`pgrag_dag.cypher.compile.compile_query` reads.

Plain frozen dataclasses, no SQL. Every node that can be refused later (a property key, a function, a
variable, a parameter) carries its ``pos``: the 1-based ``(line, column)`` of its text.

::

    Query ── matches: [Match] ── patterns: [Pattern] ── nodes: [NodePattern], rels: [RelPattern]
         │                    └─ where: Expr | None
         └── ret: Return ── items: [ReturnItem], order: [SortItem], skip, limit
    Expr = Literal | Param | Property | HasLabels | Ref | Call | ListExpr | Binary | Not | IsNull
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from typing import Literal as Lit

Pos = tuple[int, int]
"""1-based ``(line, column)`` of a piece of the query text."""


@dataclass(frozen=True)
class Literal:
    value: str | int | float | bool | None


@dataclass(frozen=True)
class Param:
    name: str
    pos: Pos


@dataclass(frozen=True)
class Property:
    var: str
    key: str
    pos: Pos


@dataclass(frozen=True)
class HasLabels:
    """``var:Label1:Label2`` in an expression: a label test, true when ``var`` has every label (a node's
    entity type; a relationship's type)."""

    var: str
    labels: tuple[str, ...]
    pos: Pos


@dataclass(frozen=True)
class Ref:
    var: str
    pos: Pos


@dataclass(frozen=True)
class Call:
    """A function call; ``star`` for ``count(*)``; ``distinct`` for ``count(DISTINCT x)``."""

    name: str
    args: tuple[Expr, ...]
    pos: Pos
    distinct: bool = False
    star: bool = False


@dataclass(frozen=True)
class ListExpr:
    items: tuple[Expr, ...]


BinaryOp = Lit["and", "or", "=", "<>", "<", "<=", ">", ">=", "in", "starts_with", "ends_with", "contains"]


@dataclass(frozen=True)
class Binary:
    op: BinaryOp
    left: Expr
    right: Expr


@dataclass(frozen=True)
class Not:
    operand: Expr


@dataclass(frozen=True)
class IsNull:
    operand: Expr
    negated: bool = False


Expr = Literal | Param | Property | HasLabels | Ref | Call | ListExpr | Binary | Not | IsNull

PropertyMap = tuple[tuple[str, Expr, Pos], ...]
"""``{key: value, …}`` of a node or relationship pattern: ``(key, value, position of key)``."""


@dataclass(frozen=True)
class NodePattern:
    """``(var:Label {key: value})``; labels are entity types (all must hold)."""

    var: str | None
    labels: tuple[str, ...]
    props: PropertyMap
    pos: Pos


Direction = Lit["out", "in", "both"]


@dataclass(frozen=True)
class RelPattern:
    """``-[var:type1|type2*lo..hi {key: value}]->``: ``types`` are predicates (any of them, case-insensitive);
    ``hops`` is ``None`` for one relationship, ``(lo, hi)`` for a variable-length one; ``direction`` is
    from the node before it to the node after it (``both``: either way)."""

    var: str | None
    types: tuple[str, ...]
    direction: Direction
    hops: tuple[int, int] | None
    props: PropertyMap
    pos: Pos


@dataclass(frozen=True)
class Pattern:
    """A path ``nodes[0] rels[0] nodes[1] …``: ``len(nodes) == len(rels) + 1``."""

    nodes: tuple[NodePattern, ...]
    rels: tuple[RelPattern, ...]


@dataclass(frozen=True)
class Match:
    patterns: tuple[Pattern, ...]
    where: Expr | None
    optional: bool
    pos: Pos


@dataclass(frozen=True)
class ReturnItem:
    """``expr AS alias``; ``name`` is the output column: the alias, else the expression's own text."""

    expr: Expr
    name: str


@dataclass(frozen=True)
class SortItem:
    expr: Expr
    descending: bool


@dataclass(frozen=True)
class Return:
    distinct: bool
    items: tuple[ReturnItem, ...]
    order: tuple[SortItem, ...]
    skip: Literal | Param | None
    limit: Literal | Param | None


@dataclass(frozen=True)
class Query:
    matches: tuple[Match, ...]
    ret: Return


def walk(expr: Expr) -> list[Any]:
    """``expr`` and every expression inside it, depth first."""
    out: list[Any] = [expr]
    if isinstance(expr, Binary):
        out += walk(expr.left) + walk(expr.right)
    elif isinstance(expr, Not | IsNull):
        out += walk(expr.operand)
    elif isinstance(expr, Call | ListExpr):
        for item in expr.args if isinstance(expr, Call) else expr.items:
            out += walk(item)
    return out
