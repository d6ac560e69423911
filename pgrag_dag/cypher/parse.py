"""Cypher text → :class:`~pgrag_dag.cypher.syntax.Query` (paper §2; issue 29).

The grammar is ``cypher.lark`` beside this module, parsed by Lark's LALR(1) parser (the measurement
behind that choice is in ``evaluation/README.md``, "Cypher parser"). It holds only the reading subset,
so a writing or procedural clause never parses: :func:`parse` turns the syntax error into a
:class:`~pgrag_dag.errors.CypherError` naming the clause and its ``line:column`` — before any SQL exists.

Raises of :func:`parse` (all :class:`~pgrag_dag.errors.CypherError`, one line):
a refused clause (``CREATE``, ``MERGE``, ``SET``, ``DELETE``, ``DETACH DELETE``, ``REMOVE``, ``CALL``,
``LOAD CSV``, ``UNWIND``, ``WITH``, ``FOREACH``, ``UNION``), an unbounded variable-length relationship
(``*``, ``*2..``), any other syntax error, a text longer than :data:`MAX_QUERY_CHARS`.
"""

from __future__ import annotations

import functools
import importlib.resources
from typing import Any

from lark import Lark, Token, Tree
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from pgrag_dag.cypher import syntax as s
from pgrag_dag.errors import CypherError

MAX_QUERY_CHARS = 20_000
"""A longer text is refused unparsed: a query is a question, not a payload."""

REFUSED: dict[str, str] = {
    "CREATE": "CREATE",
    "MERGE": "MERGE",
    "SET": "SET",
    "DELETE": "DELETE",
    "DETACH": "DETACH DELETE",
    "REMOVE": "REMOVE",
    "CALL": "CALL",
    "LOAD": "LOAD CSV",
    "UNWIND": "UNWIND",
    "WITH": "WITH",
    "FOREACH": "FOREACH",
    "UNION": "UNION",
    "USE": "USE",
    "DROP": "DROP",
}
"""First word of a clause outside the subset → the clause's name in the refusal."""


@functools.cache
def _parser() -> Lark:
    grammar = importlib.resources.files("pgrag_dag.cypher").joinpath("cypher.lark").read_text("utf-8")
    return Lark(grammar, parser="lalr", lexer="contextual", propagate_positions=True)


def parse(text: str) -> s.Query:
    """The syntax tree of ``text``; see the module docstring for what is refused."""
    if not isinstance(text, str) or not text.strip():
        raise CypherError("syntax", "query is empty")
    if len(text) > MAX_QUERY_CHARS:
        raise CypherError("syntax", f"query is longer than {MAX_QUERY_CHARS} characters")
    try:
        tree = _parser().parse(text)
    except UnexpectedInput as exc:
        raise _refusal(exc) from None
    return _Build(text).query(tree)


def _refusal(exc: UnexpectedInput) -> CypherError:
    """One line for a syntax error: the refused clause by name when the text starts one."""
    if isinstance(exc, UnexpectedToken) and exc.token.type == "$END":
        return CypherError("syntax", "query ends early: a query is MATCH … RETURN …")
    if isinstance(exc, UnexpectedEOF):
        return CypherError("syntax", "query ends early: a query is MATCH … RETURN …")
    line, column = exc.line, exc.column
    if isinstance(exc, UnexpectedToken):
        word = str(exc.token.value).upper()
        if word in REFUSED:
            clause = REFUSED[word]
            return CypherError(
                clause,
                f"{clause} is not supported: the Cypher surface is read-only (MATCH … RETURN)",
                line,
                column,
            )
        shown = str(exc.token.value)[:40]
        return CypherError("syntax", f"syntax error: unexpected {shown!r}", line, column)
    if isinstance(exc, UnexpectedCharacters):
        return CypherError("syntax", f"syntax error: unexpected character {exc.char!r}", line, column)
    return CypherError("syntax", "syntax error", line, column)  # pragma: no cover - lark's other kinds


def _pos(item: Tree[Any] | Token) -> s.Pos:
    if isinstance(item, Token):
        return (item.line or 0, item.column or 0)
    return (item.meta.line, item.meta.column)


def _name(tree: Tree[Any]) -> str:
    token = tree.children[0]
    text = str(token)
    return text[1:-1] if isinstance(token, Token) and token.type == "BACKTICKED" else text


def _trees(tree: Tree[Any], data: str) -> list[Tree[Any]]:
    return [c for c in tree.children if isinstance(c, Tree) and c.data == data]


def _has(tree: Tree[Any], token_type: str) -> bool:
    return any(isinstance(c, Token) and c.type == token_type for c in tree.children)


def _unquote(text: str) -> str:
    body = text[1:-1]
    escapes = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "'": "'", '"': '"'}
    out: list[str] = []
    i = 0
    while i < len(body):
        if body[i] == "\\" and i + 1 < len(body):
            out.append(escapes.get(body[i + 1], body[i + 1]))
            i += 2
        else:
            out.append(body[i])
            i += 1
    return "".join(out)


class _Build:
    """Lark tree → :mod:`~pgrag_dag.cypher.syntax` objects; ``text`` names unaliased return items."""

    def __init__(self, text: str) -> None:
        self.text = text

    def query(self, tree: Tree[Any]) -> s.Query:
        readings = [c for c in tree.children if isinstance(c, Tree) and c.data != "return_clause"]
        (ret,) = _trees(tree, "return_clause")
        return s.Query(matches=tuple(self.match(r) for r in readings), ret=self.ret(ret))

    def match(self, tree: Tree[Any]) -> s.Match:
        (patterns,) = _trees(tree, "pattern_list")
        where = _trees(tree, "where")
        return s.Match(
            patterns=tuple(self.pattern(p) for p in _trees(patterns, "pattern")),
            where=self.expr(where[0].children[1]) if where else None,
            optional=tree.data == "optional_match",
            pos=_pos(tree),
        )

    def pattern(self, tree: Tree[Any]) -> s.Pattern:
        nodes = [self.node(c) for c in _trees(tree, "node")]
        rels = [self.rel(c) for c in tree.children if isinstance(c, Tree) and c.data.startswith("rel_")]
        return s.Pattern(nodes=tuple(nodes), rels=tuple(rels))

    def node(self, tree: Tree[Any]) -> s.NodePattern:
        var = _trees(tree, "var")
        return s.NodePattern(
            var=_name(var[0].children[0]) if var else None,
            labels=tuple(_name(label.children[0]) for label in _trees(tree, "label")),
            props=self.props(tree),
            pos=_pos(tree),
        )

    def props(self, tree: Tree[Any]) -> s.PropertyMap:
        found = _trees(tree, "props")
        if not found:
            return ()
        return tuple(
            (_name(p.children[0]), self.expr(p.children[1]), _pos(p.children[0])) for p in found[0].children
        )

    def rel(self, tree: Tree[Any]) -> s.RelPattern:
        direction: s.Direction = {"rel_right": "out", "rel_left": "in"}.get(tree.data, "both")  # type: ignore[assignment]
        detail = _trees(tree, "detail")
        d = detail[0] if detail else Tree("detail", [])
        var = _trees(d, "var")
        types = _trees(d, "rel_types")
        ranges = [c for c in d.children if isinstance(c, Tree) and c.data.startswith("range_")]
        return s.RelPattern(
            var=_name(var[0].children[0]) if var else None,
            types=tuple(_name(n) for n in types[0].children) if types else (),
            direction=direction,
            hops=self.hops(ranges[0]) if ranges else None,
            props=self.props(d),
            pos=_pos(tree),
        )

    def hops(self, tree: Tree[Any]) -> tuple[int, int]:
        ints = [int(c) for c in tree.children if isinstance(c, Token) and c.type == "INT"]
        if tree.data == "range_exact":
            return (ints[0], ints[0])
        if tree.data == "range_bounds":
            tokens = [c for c in tree.children if isinstance(c, Token)]
            after_dots = tokens[-1].type == "INT" and tokens[-2].type == "DOTS"
            if after_dots:
                return (ints[0] if len(ints) == 2 else 1, ints[-1])
        line, column = _pos(tree)
        raise CypherError(
            "unbounded *",
            "variable-length relationship without an upper bound is not supported (write *1..3)",
            line,
            column,
        )

    def ret(self, tree: Tree[Any]) -> s.Return:
        (items,) = _trees(tree, "return_items")
        order = _trees(tree, "order")
        skip, limit = _trees(tree, "skip"), _trees(tree, "limit")
        return s.Return(
            distinct=_has(tree, "DISTINCT"),
            items=tuple(self.item(i) for i in items.children),
            order=tuple(self.sort(i) for i in _trees(order[0], "sort_item")) if order else (),
            skip=self.count(skip[0]) if skip else None,
            limit=self.count(limit[0]) if limit else None,
        )

    def item(self, tree: Tree[Any]) -> s.ReturnItem:
        expr_tree = tree.children[0]
        alias = [c for c in tree.children[1:] if isinstance(c, Tree) and c.data == "name"]
        if alias:
            name = _name(alias[0])
        else:  # the item as written, parentheses included: "RETURN (n:Foo)" is column "(n:Foo)"
            name = self.text[tree.meta.start_pos : tree.meta.end_pos]
        return s.ReturnItem(expr=self.expr(expr_tree), name=name)

    def sort(self, tree: Tree[Any]) -> s.SortItem:
        return s.SortItem(expr=self.expr(tree.children[0]), descending=_has(tree, "DESC"))

    def count(self, tree: Tree[Any]) -> s.Literal | s.Param:
        value = tree.children[1]
        if isinstance(value, Token):
            return s.Literal(int(value))
        return s.Param(name=_name(value.children[0]), pos=_pos(value))

    def expr(self, tree: Tree[Any] | Token) -> s.Expr:
        if isinstance(tree, Token):  # a bare terminal the grammar inlined
            return s.Literal(str(tree))
        kind, kids = tree.data, [c for c in tree.children if isinstance(c, Tree)]
        if kind in {"or_", "and_"}:
            return s.Binary(kind[:-1], self.expr(kids[0]), self.expr(kids[1]))  # type: ignore[arg-type]
        if kind == "not_":
            return s.Not(self.expr(kids[0]))
        if kind == "compare":
            op = next(str(c) for c in tree.children if isinstance(c, Token) and c.type == "COMPARE")
            return s.Binary(op, self.expr(kids[0]), self.expr(kids[1]))  # type: ignore[arg-type]
        if kind in {"in_", "starts_with", "ends_with", "contains"}:
            return s.Binary(kind.rstrip("_"), self.expr(kids[0]), self.expr(kids[1]))  # type: ignore[arg-type]
        if kind in {"is_null", "is_not_null"}:
            return s.IsNull(self.expr(kids[0]), negated=kind == "is_not_null")
        return self.atom(tree, kind, kids)

    def atom(self, tree: Tree[Any], kind: str, kids: list[Tree[Any]]) -> s.Expr:
        if kind == "property":
            return s.Property(var=_name(kids[0].children[0]), key=_name(kids[1]), pos=_pos(tree))
        if kind == "ref":
            return s.Ref(var=_name(kids[0].children[0]), pos=_pos(tree))
        if kind == "has_labels":
            labels = tuple(_name(label.children[0]) for label in kids[1:])
            return s.HasLabels(var=_name(kids[0].children[0]), labels=labels, pos=_pos(tree))
        if kind == "param":
            return s.Param(name=_name(kids[0]), pos=_pos(tree))
        if kind == "call":
            return s.Call(
                name=_name(kids[0]),
                args=tuple(self.expr(k) for k in kids[1:]),
                pos=_pos(tree),
                distinct=_has(tree, "DISTINCT"),
            )
        if kind == "call_star":
            return s.Call(name=_name(kids[0]), args=(), pos=_pos(tree), star=True)
        if kind == "list":
            return s.ListExpr(tuple(self.expr(k) for k in kids))
        return self.literal(tree, kind)

    def literal(self, tree: Tree[Any], kind: str) -> s.Literal:
        token = str(tree.children[0])
        if kind == "string":
            return s.Literal(_unquote(token))
        if kind == "number":
            return s.Literal(float(token) if any(c in token for c in ".eE") else int(token))
        return s.Literal({"true": True, "false": False, "null": None}[kind])
