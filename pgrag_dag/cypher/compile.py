"""A Cypher syntax tree → one parameterised SQL query over one realm's tables (paper §2, §5.4; issue 29).

Shape of the output (``n*`` an ``entities`` row, ``r*`` a ``relations`` row, ``v*`` a variable-length
walk; every alias is the compiler's, never user text)::

    SELECT [DISTINCT] <item> AS c0, …
      FROM entities AS n0 CROSS JOIN relations AS r1 CROSS JOIN entities AS n2
      CROSS JOIN LATERAL (WITH RECURSIVE walk … ) AS v3            -- a *lo..hi relationship
      LEFT JOIN LATERAL (SELECT n5.id AS n5, … WHERE …) AS o4 ON TRUE   -- an OPTIONAL MATCH
      LEFT JOIN entities AS n5 ON n5.id = o4.n5
     WHERE <scope of every row> AND <pattern joins> AND <WHERE>
     [GROUP BY …] [ORDER BY …] LIMIT … OFFSET …

The guarantees, each applied to every row of every hop, by the same predicates the retrieval walk uses
(:mod:`pgrag_dag.store.retrieval`): the realm's schema (:func:`~pgrag_dag.store.identifiers.qualified`);
the space, or every space of the realm under the wildcard (:func:`~pgrag_dag.store.retrieval.in_space`),
a relationship joining its endpoints in its own space; a node is a live entity
(:func:`~pgrag_dag.store.retrieval.entity_live`: not dormant or archived, or live at ``believed_at``);
a relationship — including every hop of a variable-length one — passes
:func:`~pgrag_dag.store.retrieval.relation_filter` for the query's :class:`~pgrag_dag.temporal.Temporal`
(valid at ``as_of``, believed at ``believed_at``, superseded only with ``include_superseded``), so a vertex
reachable only through an excluded edge is never reached. Within one MATCH a relationship is bound once
(Cypher's relationship uniqueness); a variable-length walk never repeats a relationship.

Raises :class:`~pgrag_dag.errors.CypherError` (with the position of the offending text) for what
:mod:`pgrag_dag.cypher.expressions` refuses, a variable-length relationship longer than ``max_hops``,
a variable bound as a node and as a relationship, two result columns of one name, a SKIP or LIMIT that
is not a non-negative integer.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from psycopg import sql

from pgrag_dag.config.sections import CypherSettings
from pgrag_dag.cypher import syntax as s
from pgrag_dag.cypher.expressions import Binding, Expressions, check_value, is_aggregate
from pgrag_dag.errors import CypherError
from pgrag_dag.names import validate_realm, validate_space
from pgrag_dag.store.identifiers import qualified
from pgrag_dag.store.retrieval import entity_live, in_space, relation_filter
from pgrag_dag.temporal import CURRENT, Temporal

_LIMITS = CypherSettings()

MAX_HOPS = _LIMITS.max_hops
"""The longest variable-length relationship compiled unless configured otherwise (``cypher.max_hops``)."""

MAX_ROWS = _LIMITS.max_rows
"""The row cap: a longer result is refused unless configured otherwise (``cypher.max_rows``) or LIMITed."""

TIMEOUT_S = _LIMITS.timeout_s
"""The statement timeout of one Cypher read, seconds (``cypher.timeout_s``; ``SET LOCAL``: its transaction
only)."""


@dataclass(frozen=True)
class CypherOptions:
    """Where, when and within which bounds one Cypher query reads (issue 29) — one value passed from the
    interfaces through compilation to the read.

    ``realm`` / ``space``: the realm's space (``"*"``: every space of the realm, never another realm);
    ``temporal``: the state read (§5.4: ``as_of``, ``believed_at``, ``include_superseded``), inside every
    hop; ``max_hops``: the longest variable-length relationship (``*lo..hi`` with ``hi`` above it is
    refused); ``max_rows``: a longer result is refused; ``timeout_s``: the read's statement timeout,
    seconds — by default the :class:`~pgrag_dag.config.sections.CypherSettings` defaults; the CLI and the
    query resource pass the configured ones (:meth:`bounded`)."""

    realm: str
    space: str
    temporal: Temporal = CURRENT
    max_hops: int = MAX_HOPS
    max_rows: int = MAX_ROWS
    timeout_s: float = TIMEOUT_S

    @classmethod
    def bounded(
        cls, realm: str, space: str, temporal: Temporal, limits: CypherSettings, **overrides: Any
    ) -> CypherOptions:
        """Options bounded by ``limits`` (the ``cypher:`` settings), each of ``overrides`` (``max_hops``,
        ``max_rows``, ``timeout_s``) that is not ``None`` winning over its setting."""
        chosen = {**limits.model_dump(), **{k: v for k, v in overrides.items() if v is not None}}
        return cls(realm, space, temporal, **chosen)


@dataclass(frozen=True)
class Compiled:
    """A compiled query: ``query`` (composed SQL, named placeholders), ``params`` (every value bound,
    under names the compiler chose, with the scope's ``space`` and the temporal parameters), ``columns``
    (the Cypher result column names, in order; SQL names them ``c0``, ``c1``, …)."""

    query: sql.Composed
    params: dict[str, Any]
    columns: tuple[str, ...]


@dataclass
class _Scope:
    """The FROM items and conditions of one MATCH level (the main query or one OPTIONAL MATCH)."""

    items: list[sql.Composable] = field(default_factory=list)
    conditions: list[sql.Composable] = field(default_factory=list)
    new: list[str] = field(default_factory=list)  # the variables it binds, in order

    def from_clause(self) -> sql.Composable:
        if not self.items:
            return sql.SQL("")
        return sql.SQL(" FROM ") + sql.SQL("").join(self.items)

    def where(self) -> sql.Composable:
        if not self.conditions:
            return sql.SQL("")
        return sql.SQL(" WHERE ") + sql.SQL(" AND ").join(self.conditions)


def compile_query(query: s.Query, params: Mapping[str, Any] | None, options: CypherOptions) -> Compiled:
    """``query`` as SQL over ``options.realm``'s tables, scoped to ``options.space`` (``"*"``: every space of
    the realm) and read in the state ``options.temporal`` selects; at most ``options.max_rows + 1`` rows are
    ever returned (the caller refuses the ``+ 1``). Raises :class:`CypherError` (see the module docstring)
    and :class:`~pgrag_dag.errors.InvalidNameError` for an invalid realm or space name."""
    validate_realm(options.realm)
    validate_space(options.space, for_write=False)
    return _Compiler(options, dict(params or {})).build(query, options.max_rows)


class _Compiler:
    def __init__(self, options: CypherOptions, user: dict[str, Any]) -> None:
        self.realm, self.space, self.temporal = options.realm, options.space, options.temporal
        self.max_hops = options.max_hops
        self.params: dict[str, Any] = {"space": self.space, **self.temporal.params()}
        self.bindings: dict[str, Binding] = {}
        self.names = itertools.count()
        self.values = itertools.count()
        self.user = user
        self.x = Expressions(self.bindings, user, self.bind, temporal=self.temporal, realm=self.realm)

    def bind(self, value: Any) -> sql.Composable:
        name = f"v{next(self.values)}"
        self.params[name] = value
        return sql.Placeholder(name)

    def alias(self, prefix: str) -> str:
        return f"{prefix}{next(self.names)}"

    def build(self, query: s.Query, max_rows: int) -> Compiled:
        main = _Scope()
        for match in query.matches:
            if match.optional:
                self.optional(main, match)
            else:
                self.match(main, match)
        select, columns = self.ret(query.ret)
        text = sql.SQL("SELECT {d}{select}{frm}{where}{tail}").format(
            d=sql.SQL("DISTINCT " if query.ret.distinct else ""),
            select=select,
            frm=main.from_clause(),
            where=main.where(),
            tail=self.tail(query.ret, max_rows),
        )
        return Compiled(query=text, params=self.params, columns=columns)

    # -- MATCH -------------------------------------------------------------------------------------

    def match(self, scope: _Scope, match: s.Match) -> None:
        rels: list[str] = []
        for pattern in match.patterns:
            rels += self.pattern(scope, pattern)
        for a, b in itertools.combinations(rels, 2):  # relationship uniqueness within one MATCH
            scope.conditions.append(
                sql.SQL("{} <> {}").format(sql.Identifier(a, "id"), sql.Identifier(b, "id"))
            )
        if match.where is not None:
            scope.conditions.append(self.x.condition(match.where))

    def optional(self, main: _Scope, match: s.Match) -> None:
        """An OPTIONAL MATCH: a lateral subquery over the rows bound so far, its new variables' ids joined
        back (``NULL`` when it matched nothing); its WHERE filters the optional part only."""
        inner = _Scope()
        self.match(inner, match)
        o = self.alias("o")
        picked = [
            sql.SQL("{} AS {}").format(self.identity(v), sql.Identifier(v_alias))
            for v, v_alias in self._new(inner)
        ]
        if (
            not main.items
        ):  # a query opening with OPTIONAL MATCH: one row to join to (one result row, or NULLs)
            main.items.append(sql.SQL("(VALUES (TRUE)) AS {}").format(sql.Identifier(self.alias("u"))))
        main.items.append(
            sql.SQL(" LEFT JOIN LATERAL (SELECT {cols}{frm}{where} LIMIT ALL) AS {o} ON TRUE").format(
                cols=sql.SQL(", ").join(picked) if picked else sql.SQL("TRUE"),
                frm=inner.from_clause(),
                where=inner.where(),
                o=sql.Identifier(o),
            )
        )
        for var, v_alias in self._new(inner):
            b = self.bindings[var]
            if b.kind == "path":
                self.bindings[var] = Binding("path", b.alias, sql.Identifier(o, v_alias))
                continue
            table = "entities" if b.kind == "node" else "relations"
            main.items.append(
                sql.SQL(" LEFT JOIN {t} AS {a} ON {a}.id = {o}.{c}").format(
                    t=qualified(self.realm, table),
                    a=sql.Identifier(b.alias),
                    o=sql.Identifier(o),
                    c=sql.Identifier(v_alias),
                )
            )

    def _new(self, scope: _Scope) -> list[tuple[str, str]]:
        return [(v, self.bindings[v].alias) for v in scope.new]

    def identity(self, var: str) -> sql.Composable:
        b = self.bindings[var]
        return b.rels if b.kind == "path" and b.rels is not None else sql.Identifier(b.alias, "id")

    def join(self, scope: _Scope, item: sql.Composable) -> None:
        scope.items.append(item if not scope.items else sql.SQL(" CROSS JOIN ") + item)

    def pattern(self, scope: _Scope, pattern: s.Pattern) -> list[str]:
        """Binds the pattern's nodes and relationships into ``scope``; the aliases of its single
        relationships (for uniqueness)."""
        aliases = [self.node(scope, n) for n in pattern.nodes]
        single: list[str] = []
        for i, rel in enumerate(pattern.rels):
            if rel.hops is None:
                single.append(self.rel(scope, rel, aliases[i], aliases[i + 1]))
            else:
                self.walk(scope, rel, aliases[i], aliases[i + 1])
        return single

    def variable(
        self, scope: _Scope, var: str | None, kind: str, pos: s.Pos, prefix: str
    ) -> tuple[str, bool]:
        """``(alias, new)`` for ``var``: its existing alias, or a fresh one (anonymous: always fresh)."""
        if var is not None and var in self.bindings:
            b = self.bindings[var]
            if b.kind != kind:
                raise CypherError("variable", f"{var!r} is bound as a {b.kind}, not a {kind}", *pos)
            if kind != "node":
                raise CypherError("variable", f"relationship {var!r} is bound twice", *pos)
            return b.alias, False
        alias = self.alias(prefix)
        if var is not None:
            self.bindings[var] = Binding(kind, alias)  # type: ignore[arg-type]
            scope.new.append(var)
        return alias, True

    def node(self, scope: _Scope, node: s.NodePattern) -> str:
        alias, new = self.variable(scope, node.var, "node", node.pos, "n")
        n = sql.Identifier(alias)
        if new:
            self.join(scope, sql.SQL("{} AS {}").format(qualified(self.realm, "entities"), n))
            scope.conditions += [
                in_space(alias, self.space),
                entity_live(alias, self.temporal, realm=self.realm),
            ]
        for label in node.labels:
            scope.conditions.append(sql.SQL("{}.entity_type = {}").format(n, self.bind(label)))
        scope.conditions += self.props(alias, node.props, "node")
        return alias

    def props(self, alias: str, props: s.PropertyMap, kind: str) -> list[sql.Composable]:
        """``{key: value}`` of a pattern as equality conditions on ``alias`` (keys checked as WHERE's)."""
        if not props:
            return []
        # "" is a variable no query can name: the pattern's own row, whatever its variable is bound to
        own = Expressions(
            {"": Binding(kind, alias)},  # type: ignore[arg-type]
            self.user,
            self.bind,
            temporal=self.temporal,
            realm=self.realm,
        )
        return [own.condition(s.Binary("=", s.Property("", key, pos), value)) for key, value, pos in props]

    def rel(self, scope: _Scope, rel: s.RelPattern, a: str, b: str) -> str:
        alias, _ = self.variable(scope, rel.var, "rel", rel.pos, "r")
        r = sql.Identifier(alias)
        self.join(scope, sql.SQL("{} AS {}").format(qualified(self.realm, "relations"), r))
        ends = {
            "out": "{r}.source_id = {a}.id AND {r}.target_id = {b}.id",
            "in": "{r}.source_id = {b}.id AND {r}.target_id = {a}.id",
            "both": "(({r}.source_id = {a}.id AND {r}.target_id = {b}.id)"
            " OR ({r}.source_id = {b}.id AND {r}.target_id = {a}.id))",
        }[rel.direction]
        scope.conditions += [
            # the edge's space is its endpoints' (foreign keys on (space, endpoint)): the index key
            sql.SQL("{r}.space = {a}.space").format(r=r, a=sql.Identifier(a)),
            in_space(alias, self.space),
            sql.SQL(ends).format(r=r, a=sql.Identifier(a), b=sql.Identifier(b)),
            relation_filter(alias, self.temporal, realm=self.realm),
            *self.types(alias, rel.types),
            *self.props(alias, rel.props, "rel"),
        ]
        return alias

    def types(self, alias: str, types: tuple[str, ...]) -> list[sql.Composable]:
        """Relationship types are predicates, case-insensitive as ``relation_types`` of the query path."""
        if not types:
            return []
        wanted = sorted({t.strip().lower() for t in types})
        return [sql.SQL("lower({}.predicate) = ANY({})").format(sql.Identifier(alias), self.bind(wanted))]

    def walk(self, scope: _Scope, rel: s.RelPattern, a: str, b: str) -> None:
        """A ``*lo..hi`` relationship: a recursive walk from ``a`` applying, at every hop, the scope and
        temporal predicates of a single relationship and the liveness of the vertex reached. An empty range
        (``*2..1``) matches nothing, as openCypher says (no walk reaches ``hop >= lo`` stopping at ``hi``)."""
        lo, hi = rel.hops or (1, 1)
        if hi > self.max_hops:
            raise CypherError(
                "variable length",
                f"variable-length relationship *{lo}..{hi} is outside 0..{self.max_hops} (max_hops)",
                *rel.pos,
            )
        if rel.var is not None and rel.var in self.bindings:
            raise CypherError("variable", f"relationship {rel.var!r} is bound twice", *rel.pos)
        v = self.alias("v")
        edge = sql.SQL(" AND ").join(
            [
                relation_filter("vr", self.temporal, realm=self.realm),
                *self.types("vr", rel.types),
                *self.props("vr", rel.props, "rel"),
            ]
        )
        step = {
            "out": [("source_id", "target_id")],
            "in": [("target_id", "source_id")],
            "both": [("source_id", "target_id"), ("target_id", "source_id")],
        }[rel.direction]
        adjacent = sql.SQL(" UNION ALL ").join(
            sql.SQL(
                "(SELECT vr.id AS rel_id, vr.{far} AS next_id FROM {r} AS vr"
                " WHERE vr.space = {a}.space AND vr.{near} = vw.end_id AND {edge})"
            ).format(
                far=sql.Identifier(far),
                near=sql.Identifier(near),
                r=qualified(self.realm, "relations"),
                a=sql.Identifier(a),
                edge=edge,
            )
            for near, far in step
        )
        walk = sql.SQL("""LATERAL (WITH RECURSIVE walk (end_id, rels, hop) AS (
                SELECT {a}.id, ARRAY[]::bigint[], 0
              UNION ALL
                SELECT adj.next_id, vw.rels || adj.rel_id, vw.hop + 1
                  FROM walk AS vw CROSS JOIN LATERAL ({adjacent}) AS adj
                  JOIN {e} AS vn ON vn.id = adj.next_id
                 WHERE vw.hop < {hi} AND adj.rel_id <> ALL (vw.rels) AND {live})
            SELECT walk.end_id, walk.rels FROM walk WHERE walk.hop >= {lo}) AS {v}""").format(
            a=sql.Identifier(a),
            adjacent=adjacent,
            e=qualified(self.realm, "entities"),
            hi=self.bind(hi),
            lo=self.bind(lo),
            live=entity_live("vn", self.temporal, realm=self.realm),
            v=sql.Identifier(v),
        )
        self.join(scope, walk)
        scope.conditions.append(sql.SQL("{}.id = {}.end_id").format(sql.Identifier(b), sql.Identifier(v)))
        if rel.var is not None:
            self.bindings[rel.var] = Binding("path", v, sql.Identifier(v, "rels"))
            scope.new.append(rel.var)

    # -- RETURN ------------------------------------------------------------------------------------

    def ret(self, ret: s.Return) -> tuple[sql.Composable, tuple[str, ...]]:
        columns = tuple(item.name for item in ret.items)
        for name in columns:
            if columns.count(name) > 1:
                raise CypherError("RETURN", f"column {name!r} is returned twice (use AS)")
        select = sql.SQL(", ").join(
            sql.SQL("{} AS {}").format(self.x.expr(item.expr), sql.Identifier(f"c{i}"))
            for i, item in enumerate(ret.items)
        )
        return select, columns

    def tail(self, ret: s.Return, max_rows: int) -> sql.Composable:
        parts: list[sql.Composable] = []
        aggregated = [is_aggregate(i.expr) for i in ret.items]
        if any(aggregated) and not all(aggregated):
            groups = [sql.SQL(str(i + 1)) for i, agg in enumerate(aggregated) if not agg]
            parts.append(sql.SQL(" GROUP BY ") + sql.SQL(", ").join(groups))
        if ret.order:
            keys = [
                sql.SQL("{}{}").format(
                    self.sort_key(ret, item.expr), sql.SQL(" DESC" if item.descending else "")
                )
                for item in ret.order
            ]
            parts.append(sql.SQL(" ORDER BY ") + sql.SQL(", ").join(keys))
        limit = self.count(ret.limit, "LIMIT")
        cap = max_rows + 1 if limit is None else min(limit, max_rows + 1)
        parts.append(sql.SQL(" LIMIT {}").format(self.bind(cap)))
        skip = self.count(ret.skip, "SKIP")
        if skip:
            parts.append(sql.SQL(" OFFSET {}").format(self.bind(skip)))
        return sql.SQL("").join(parts)

    def sort_key(self, ret: s.Return, expr: s.Expr) -> sql.Composable:
        """A returned column when ``expr`` names one (by alias or by the same expression), else ``expr``."""
        # ORDER BY sees the projection: a returned column's name wins over a variable of the same name
        for i, item in enumerate(ret.items):
            if isinstance(expr, s.Ref) and expr.var == item.name:
                return sql.Identifier(f"c{i}")
        for i, item in enumerate(ret.items):
            if item.expr == expr:
                return sql.Identifier(f"c{i}")
        if ret.distinct or any(is_aggregate(i.expr) for i in ret.items):
            raise CypherError(
                "ORDER BY", "with DISTINCT or an aggregate, ORDER BY must name a returned column"
            )
        return self.x.expr(expr)

    def count(self, value: s.Literal | s.Param | None, clause: str) -> int | None:
        if value is None:
            return None
        raw = self.x.param(value) if isinstance(value, s.Param) else value.value
        if isinstance(raw, bool) or not isinstance(raw, int) or raw < 0:
            pos = value.pos if isinstance(value, s.Param) else (0, 0)
            raise CypherError(clause, f"{clause} must be a non-negative integer, got {raw!r}", *pos)
        return raw


__all__ = ["MAX_HOPS", "MAX_ROWS", "TIMEOUT_S", "Compiled", "CypherOptions", "check_value", "compile_query"]
