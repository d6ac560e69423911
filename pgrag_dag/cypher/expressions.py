"""Cypher expressions → composed SQL (paper §2; issue 29): WHERE conditions, RETURN items, ORDER BY keys.

A variable is one of the SQL aliases the compiler made (``n0``, ``r1``, …; never user text). A property
key is looked up in a fixed whitelist (:data:`NODE_COLUMNS`, :data:`RELATION_COLUMNS`) and becomes an
indexed column of ``entities`` / ``relations``, never a JSONB look-up; every value — literal or
``$parameter`` — is bound as a parameter under a name the compiler chose.

Raises (:class:`~pgrag_dag.errors.CypherError`, with the position of the offending text): an unbound
variable, a property key outside the whitelist, a property of a variable-length relationship, an
unknown function, an aggregate inside WHERE, a missing parameter or one of an unsupported type.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any, Literal

from psycopg import sql

from pgrag_dag.cypher import syntax as s
from pgrag_dag.errors import CypherError
from pgrag_dag.store.retrieval import BELIEF_COLUMNS, belief_column
from pgrag_dag.temporal import CURRENT, Temporal

NODE_COLUMNS: dict[str, str] = {
    "name": "name",
    "type": "entity_type",
    "entity_type": "entity_type",
    "description": "description",
    "aliases": "aliases",
    "space": "space",
}
"""Node property key → ``entities`` column (a label is the entity type, too)."""

RELATION_COLUMNS: dict[str, str] = {
    "predicate": "predicate",
    "type": "predicate",
    "description": "description",
    "weight": "weight",
    "negated": "negated",
    "confidence": "confidence",
    "valid_from": "valid_from",
    "valid_to": "valid_to",
    "t_created": "t_created",
    "t_expired": "t_expired",
    "superseded_by": "superseded_by",
    "superseded": "superseded",
    "space": "space",
}
"""Relationship property key → ``relations`` column. ``valid_from`` / ``valid_to`` are the generated
columns (``YYYY``, ``YYYY-MM`` or ``YYYY-MM-DD`` text). The belief columns ``t_expired``, ``superseded_by``
and ``superseded`` are read in the state the query reads (:func:`~pgrag_dag.store.retrieval.belief_column`):
the row's own now, the belief history's at ``as_believed_at`` — as the retrieval path reports them."""

_NODE_VALUE: tuple[tuple[str, str], ...] = (
    ("id", "id"),
    ("space", "space"),
    ("name", "name"),
    ("type", "entity_type"),
    ("description", "description"),
    ("aliases", "aliases"),
)
_RELATION_VALUE: tuple[tuple[str, str], ...] = (
    ("id", "id"),
    ("space", "space"),
    ("source_id", "source_id"),
    ("target_id", "target_id"),
    *((k, k) for k in RELATION_COLUMNS if k not in {"type", "space"}),
)
"""The keys of a node's / relationship's JSON value (``RETURN n``) and their columns."""

AGGREGATES = frozenset({"count", "collect", "min", "max", "sum", "avg"})

_SCALARS: dict[str, str] = {"tolower": "lower", "toupper": "upper", "coalesce": "coalesce"}

Kind = Literal["node", "rel", "path"]


@dataclass(frozen=True)
class Binding:
    """What a Cypher variable is in SQL: a node (an ``entities`` row aliased ``alias``), a relationship (a
    ``relations`` row) or a variable-length relationship (``rels``: an expression of its relation ids,
    ``bigint[]`` in path order)."""

    kind: Kind
    alias: str
    rels: sql.Composable | None = None


def check_value(name: str, value: Any, pos: s.Pos) -> Any:
    """``value`` of parameter ``$name`` when it can be bound: ``None``, a string, a number, a boolean, a
    date or datetime, or a list of those. Raises :class:`CypherError` otherwise."""
    scalar = (str, int, float, bool, date, datetime, type(None))
    if isinstance(value, scalar) or (
        isinstance(value, list | tuple) and all(isinstance(v, scalar) for v in value)
    ):
        return list(value) if isinstance(value, tuple) else value
    raise CypherError(
        "parameter",
        f"parameter ${name} must be a string, number, boolean, date, null or a list of those, "
        f"got {type(value).__name__}",
        *pos,
    )


class Expressions:
    """Compiles expressions against ``bindings`` (variable → :class:`Binding`), binding every value
    through ``bind`` (value → placeholder) and reading ``$parameters`` from ``params``; a belief column is
    read in the state ``temporal`` selects (realm ``realm``'s history at ``believed_at``)."""

    def __init__(
        self,
        bindings: Mapping[str, Binding],
        params: Mapping[str, Any],
        bind: Callable[[Any], sql.Composable],
        *,
        temporal: Temporal = CURRENT,
        realm: str | None = None,
    ) -> None:
        self.bindings, self.params, self.bind = bindings, params, bind
        self.temporal, self.realm = temporal, realm

    def rel_column(self, alias: str, column: str) -> sql.Composable:
        """``alias.column`` of a relation, a belief column in the state read."""
        if column in BELIEF_COLUMNS:
            return belief_column(alias, column, self.temporal, realm=self.realm)
        return sql.Identifier(alias, column)

    def binding(self, var: str, pos: s.Pos) -> Binding:
        if var not in self.bindings:
            raise CypherError("variable", f"variable {var!r} is not bound by a MATCH", *pos)
        return self.bindings[var]

    def column(self, var: str, key: str, pos: s.Pos) -> sql.Composable:
        """``alias.column`` of property ``key`` of variable ``var``."""
        b = self.binding(var, pos)
        if b.kind == "path":
            raise CypherError(
                "property", f"{var} is a variable-length relationship: it has no property {key!r}", *pos
            )
        columns = NODE_COLUMNS if b.kind == "node" else RELATION_COLUMNS
        if key not in columns:
            what = "node" if b.kind == "node" else "relationship"
            raise CypherError(
                "property",
                f"unknown {what} property {key!r} (one of {', '.join(sorted(columns))})",
                *pos,
            )
        if b.kind == "rel":
            return self.rel_column(b.alias, columns[key])
        return sql.Identifier(b.alias, columns[key])

    def has_labels(self, test: s.HasLabels) -> sql.Composable:
        """``var:A:B``: a node's entity type equals each label, as a pattern's ``(n:A)`` (an entity has one
        type, so two different labels never hold); a relationship's predicate equals each, case-insensitive
        as its pattern's types. ``NULL`` for a node or relationship an OPTIONAL MATCH left unbound."""
        b = self.binding(test.var, test.pos)
        if b.kind == "path":
            raise CypherError(
                "label", f"{test.var} is a variable-length relationship: it has no type to test", *test.pos
            )
        if b.kind == "node":
            column: sql.Composable = sql.Identifier(b.alias, "entity_type")
            labels = list(test.labels)
        else:
            column = sql.SQL("lower({})").format(sql.Identifier(b.alias, "predicate"))
            labels = [label.strip().lower() for label in test.labels]
        return sql.SQL("({})").format(
            sql.SQL(" AND ").join(sql.SQL("{} = {}").format(column, self.bind(label)) for label in labels)
        )

    def param(self, p: s.Param) -> Any:
        if p.name not in self.params:
            raise CypherError("parameter", f"parameter ${p.name} is not given", *p.pos)
        return check_value(p.name, self.params[p.name], p.pos)

    def condition(self, expr: s.Expr) -> sql.Composable:
        """``expr`` as a WHERE condition: no aggregate allowed."""
        for e in s.walk(expr):
            if isinstance(e, s.Call) and e.name.lower() in AGGREGATES:
                raise CypherError("aggregate", f"{e.name}() is not allowed in WHERE", *e.pos)
        return self.expr(expr)

    def expr(self, expr: s.Expr) -> sql.Composable:
        if isinstance(expr, s.Literal):
            return sql.SQL("NULL") if expr.value is None else self.bind(expr.value)
        if isinstance(expr, s.Param):
            value = self.param(expr)
            return sql.SQL("NULL") if value is None else self.bind(value)
        if isinstance(expr, s.Property):
            return self.column(expr.var, expr.key, expr.pos)
        if isinstance(expr, s.HasLabels):
            return self.has_labels(expr)
        if isinstance(expr, s.Ref):
            return self.value(expr)
        if isinstance(expr, s.Call):
            return self.call(expr)
        if isinstance(expr, s.ListExpr):
            if all(isinstance(i, s.Literal) for i in expr.items):
                return self.bind([i.value for i in expr.items])  # type: ignore[union-attr]
            return sql.SQL("ARRAY[{}]").format(sql.SQL(", ").join(self.expr(i) for i in expr.items))
        if isinstance(expr, s.Not):
            return sql.SQL("(NOT {})").format(self.expr(expr.operand))
        if isinstance(expr, s.IsNull):
            operand = expr.operand
            target = (
                self.identity(operand) if isinstance(operand, s.Ref) else self.expr(operand)
            )  # a node or relationship is null when its row is: its id says so without building a value
            return sql.SQL("({} IS NOT NULL)" if expr.negated else "({} IS NULL)").format(target)
        return self.binary(expr)

    def binary(self, expr: s.Binary) -> sql.Composable:
        op = expr.op
        left, right = self.expr(expr.left), self.expr(expr.right)
        if op in {"and", "or"}:
            return sql.SQL("({} " + op.upper() + " {})").format(left, right)
        if op == "in":
            return sql.SQL("({} = ANY({}))").format(left, right)
        if op == "starts_with":
            return sql.SQL("starts_with(({})::text, ({})::text)").format(left, right)
        if op == "ends_with":
            return sql.SQL("(right(({0})::text, char_length(({1})::text)) = ({1})::text)").format(left, right)
        if op == "contains":
            return sql.SQL("(strpos(({})::text, ({})::text) > 0)").format(left, right)
        compare = sql.SQL("({} " + op + " {})").format(left, right)
        name = self.name_column(expr)
        if op == "=" and name is not None:
            # the same truth value, plus a term the (space, lower(name)) index answers
            column, value = name
            return sql.SQL("(lower({c}) = lower(({v})::text) AND {eq})").format(c=column, v=value, eq=compare)
        return compare

    def name_column(self, expr: s.Binary) -> tuple[sql.Composable, sql.Composable] | None:
        """``(column, value)`` when ``expr`` compares a node's name with a value."""
        for a, b in ((expr.left, expr.right), (expr.right, expr.left)):
            if (
                isinstance(a, s.Property)
                and a.key == "name"
                and self.binding(a.var, a.pos).kind == "node"
                and isinstance(b, s.Literal | s.Param)
            ):
                return self.column(a.var, a.key, a.pos), self.expr(b)
        return None

    def identity(self, ref: s.Ref) -> sql.Composable:
        """The id (ids, for a variable-length relationship) of the variable ``ref`` names."""
        b = self.binding(ref.var, ref.pos)
        return b.rels if b.kind == "path" and b.rels is not None else sql.Identifier(b.alias, "id")

    def value(self, ref: s.Ref) -> sql.Composable:
        """A node or relationship as a JSON object (``NULL`` when unmatched by an OPTIONAL MATCH); a
        variable-length relationship as its relation ids."""
        b = self.binding(ref.var, ref.pos)
        if b.kind == "path":
            return self.identity(ref)
        keys = _NODE_VALUE if b.kind == "node" else _RELATION_VALUE
        pairs = [
            sql.SQL("{}, {}").format(
                sql.Literal(k),
                sql.Identifier(b.alias, c) if b.kind == "node" else self.rel_column(b.alias, c),
            )
            for k, c in keys
        ]
        return sql.SQL("CASE WHEN {a}.id IS NULL THEN NULL ELSE jsonb_build_object({p}) END").format(
            a=sql.Identifier(b.alias), p=sql.SQL(", ").join(pairs)
        )

    def call(self, call: s.Call) -> sql.Composable:
        name = call.name.lower()
        if call.star:
            if name != "count":
                raise CypherError("function", f"{call.name}(*) is not supported", *call.pos)
            return sql.SQL("count(*)")
        args = [
            self.identity(a) if isinstance(a, s.Ref) and name == "count" else self.expr(a) for a in call.args
        ]
        distinct = sql.SQL("DISTINCT " if call.distinct else "")
        if name in AGGREGATES:
            self.arity(call, 1)
            if name == "collect":
                return sql.SQL("array_remove(array_agg({d}{x}), NULL)").format(d=distinct, x=args[0])
            return sql.SQL(name + "({d}{x})").format(d=distinct, x=args[0])
        if call.distinct:
            raise CypherError(
                "function", f"DISTINCT is only allowed in an aggregate, not {call.name}()", *call.pos
            )
        if name in {"type", "id"}:
            self.arity(call, 1)
            arg = call.args[0]
            if not isinstance(arg, s.Ref):
                raise CypherError("function", f"{call.name}() takes a variable", *call.pos)
            b = self.binding(arg.var, arg.pos)
            if name == "type" and b.kind != "rel":
                raise CypherError("function", "type() takes a relationship", *call.pos)
            if b.kind == "path":
                raise CypherError("function", f"{call.name}() of a variable-length relationship", *call.pos)
            return sql.Identifier(b.alias, "predicate" if name == "type" else "id")
        if name in _SCALARS:
            if name != "coalesce":
                self.arity(call, 1)
            return sql.SQL(_SCALARS[name] + "({})").format(sql.SQL(", ").join(args))
        if name in {"size", "length"}:
            self.arity(call, 1)
            return sql.SQL("cardinality({})").format(args[0])
        raise CypherError("function", f"function {call.name}() is not supported", *call.pos)

    @staticmethod
    def arity(call: s.Call, n: int) -> None:
        if len(call.args) != n:
            raise CypherError("function", f"{call.name}() takes {n} argument(s)", *call.pos)


def is_aggregate(expr: s.Expr) -> bool:
    """Whether ``expr`` contains an aggregate call."""
    return any(isinstance(e, s.Call) and e.name.lower() in AGGREGATES for e in s.walk(expr))
