"""A small runner for the openCypher TCK feature files under ``tests/cypher/tck/`` (issue 29 item 4).

:func:`load` reads every scenario (outlines expanded by their examples); :func:`setup_graph` translates a
setup made only of ``CREATE`` of nodes with at most one label and a ``name``, and of relationships with one
type and no property, into the node and relationship values our tables can hold (parsed with our own
parser: a ``CREATE`` pattern is a ``MATCH`` pattern); :func:`insert` writes them into one space of a realm;
:func:`cell` reads a TCK result cell and :func:`ours` one of our values into the same comparable form:
scalars as Python values, lists as ``("list", items)``, a node as ``("node", labels, properties)``, a
relationship as ``("rel", type, properties)``. What the runner cannot translate raises :class:`Unsupported`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from pgrag_dag.cypher import syntax as s
from pgrag_dag.cypher.parse import parse
from pgrag_dag.errors import CypherError
from tests.cypher.graph import Graph, table

TCK = Path(__file__).parent / "tck" / "features"


class Unsupported(Exception):
    """A setup, parameter or cell outside what the runner translates to our tables."""


@dataclass
class Scenario:
    """One scenario: ``setup`` (the texts executed before), ``params``, ``query``; the expectation —
    ``header`` and ``rows`` (raw cells; ``ordered`` for "in order") or ``error`` (e.g. ``SyntaxError should
    be raised at compile time: VariableTypeConflict``)."""

    feature: str
    name: str
    setup: list[str] = field(default_factory=list)
    params: list[tuple[str, str]] = field(default_factory=list)
    query: str = ""
    header: tuple[str, ...] | None = None
    rows: list[tuple[str, ...]] = field(default_factory=list)
    ordered: bool = False
    lists_unordered: bool = False
    error: str | None = None

    @property
    def key(self) -> str:
        return f"{self.feature}: {self.name}"

    @property
    def fails_at_compile_time(self) -> bool:
        return self.error is not None and "compile time" in self.error


def _cells(line: str) -> list[str]:
    inner = line.strip()[1:-1]  # a pipe inside a cell is escaped as \|
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", inner)]


def _blocks(text: str) -> tuple[list[list[Any]], list[dict[str, Any]]]:
    """``(background steps, scenarios)``; a step is ``[text, docstring, table rows]``."""
    lines = text.splitlines()
    background: list[list[Any]] = []
    blocks: list[dict[str, Any]] = []
    steps: list[list[Any]] | None = None
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        i += 1
        if not line or line.startswith(("#", "@", "Feature:")):
            continue
        if line.startswith("Background:"):
            steps = background
        elif line.startswith(("Scenario:", "Scenario Outline:")):
            blocks.append({"title": line.partition(":")[2].strip(), "steps": [], "examples": []})
            steps = blocks[-1]["steps"]
        elif line.startswith("Examples:"):
            blocks[-1]["examples"].append([])
            steps = None
        elif line.startswith("|"):
            if steps is None:
                blocks[-1]["examples"][-1].append(_cells(line))
            else:
                steps[-1][2].append(_cells(line))
        elif line == '"""':
            doc: list[str] = []
            while lines[i].strip() != '"""':
                doc.append(lines[i].strip())
                i += 1
            i += 1
            assert steps is not None
            steps[-1][1] = "\n".join(doc)
        else:
            assert steps is not None, line
            steps.append([line, None, []])
    return background, blocks


def _fill(text: str | None, example: dict[str, str]) -> str | None:
    if text is None:
        return None
    for key, value in example.items():
        text = text.replace(f"<{key}>", value)
    return text


def _scenario(feature: str, title: str, steps: list[list[Any]], example: dict[str, str]) -> Scenario:
    sc = Scenario(feature, title + (f" {example}" if example else ""))
    for raw, raw_doc, raw_table in steps:
        text, doc = _fill(raw, example) or "", _fill(raw_doc, example)
        rows = [tuple(_fill(c, example) or "" for c in row) for row in raw_table]
        if "having executed" in text:
            sc.setup.append(doc or "")
        elif "parameters are" in text:
            sc.params = [(r[0], r[1]) for r in rows]
        elif "executing query" in text or "executing control query" in text:
            sc.query = doc or ""
        elif "the result should be empty" in text:
            sc.header, sc.rows = (), []
        elif "the result should be" in text:
            sc.header, sc.rows = rows[0], rows[1:]
            sc.ordered = "in order" in text
            sc.lists_unordered = "ignoring element order for lists" in text
        elif "should be raised" in text:
            sc.error = text.partition(" a ")[2] or text
    return sc


def load(root: Path = TCK) -> list[Scenario]:
    """Every scenario of the feature files under ``root``, sorted by file, outlines once per example row."""
    out: list[Scenario] = []
    for path in sorted(root.rglob("*.feature")):
        background, blocks = _blocks(path.read_text("utf-8"))
        for block in blocks:
            steps = background + block["steps"]
            examples = [dict(zip(t[0], row)) for t in block["examples"] for row in t[1:]] or [{}]
            out += [_scenario(path.stem, block["title"], steps, ex) for ex in examples]
    return out


# -- values ---------------------------------------------------------------------------------------------

_NUMBER = re.compile(r"-?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class _Reader:
    def __init__(self, text: str) -> None:
        self.text, self.i = text, 0

    def peek(self) -> str:
        while self.i < len(self.text) and self.text[self.i] == " ":
            self.i += 1
        return self.text[self.i : self.i + 1]

    def take(self, token: str) -> None:
        self.peek()
        if not self.text.startswith(token, self.i):
            raise Unsupported(f"expected {token!r} in {self.text!r}")
        self.i += len(token)

    def name(self) -> str:
        self.peek()
        m = _NAME.match(self.text, self.i)
        if not m:
            raise Unsupported(f"a name expected in {self.text!r}")
        self.i = m.end()
        return m.group()

    def props(self) -> tuple[tuple[str, Any], ...]:
        if self.peek() != "{":
            return ()
        self.take("{")
        items: list[tuple[str, Any]] = []
        while self.peek() != "}":
            key = self.name()
            self.peek()
            self.take(":")
            items.append((key, self.value()))
            if self.peek() == ",":
                self.take(",")
        self.take("}")
        return tuple(sorted(items))

    def value(self) -> Any:
        c = self.peek()
        if c == "'":
            j, out = self.i + 1, []
            while self.text[j] != "'":
                if self.text[j] == "\\":
                    j += 1
                out.append(self.text[j])
                j += 1
            self.i = j + 1
            return "".join(out)
        if c == "(":
            self.take("(")
            labels = []
            while self.peek() == ":":
                self.take(":")
                labels.append(self.name())
            node = ("node", frozenset(labels), self.props())
            self.peek()
            self.take(")")
            return node
        if c == "[" and self.text.startswith("[:", self.i):
            self.take("[:")
            rel = ("rel", self.name(), self.props())
            self.peek()
            self.take("]")
            return rel
        if c == "[":
            self.take("[")
            items = []
            while self.peek() != "]":
                items.append(self.value())
                if self.peek() == ",":
                    self.take(",")
            self.take("]")
            return ("list", tuple(items))
        for word, val in (("null", None), ("true", True), ("false", False)):
            if self.text.startswith(word, self.i):
                self.i += len(word)
                return val
        m = _NUMBER.match(self.text, self.i)
        if m:
            self.i = m.end()
            return float(m.group()) if any(ch in m.group() for ch in ".eE") else int(m.group())
        raise Unsupported(f"cell {self.text!r}")  # maps, paths, NaN, temporal values


def cell(text: str) -> Any:
    """A TCK result cell or parameter value in the comparable form of the module docstring."""
    reader = _Reader(text.strip())
    out = reader.value()
    if reader.peek():
        raise Unsupported(f"cell {text!r}")
    return out


def ours(value: Any, known: dict[tuple[str, int], Any]) -> Any:
    """One of our result values in the comparable form; a node or relationship by its id in ``known``."""
    if isinstance(value, dict):
        kind = "rel" if value.get("source_id") is not None else "node"  # polars may add the key as null
        return known[(kind, int(value["id"]))]
    if isinstance(value, list):
        return ("list", tuple(ours(v, known) for v in value))
    if isinstance(value, Decimal):
        return float(value)
    return value


def plain(value: Any) -> Any:
    """A parameter value as our ``cypher`` binds it."""
    if isinstance(value, tuple) and value and value[0] == "list":
        return [plain(v) for v in value[1]]
    if isinstance(value, tuple):
        raise Unsupported(f"parameter {value!r}")
    return value


# -- setup ----------------------------------------------------------------------------------------------

_CLAUSE = re.compile(r"\b(CREATE|MATCH|MERGE|WITH|UNWIND|SET|DELETE|RETURN|FOREACH|CALL|OPTIONAL)\b", re.I)


@dataclass
class Setup:
    """What a setup created: ``nodes`` as ``(label or "", name or None)``, ``rels`` as ``(source index,
    type, target index)``."""

    nodes: list[tuple[str, str | None]] = field(default_factory=list)
    rels: list[tuple[int, str, int]] = field(default_factory=list)


def setup_graph(texts: list[str]) -> Setup:
    """The nodes and relationships ``texts`` create. Raises :class:`Unsupported` for anything but
    ``CREATE`` of nodes with at most one label and a string ``name``, and of directed relationships with
    one type and no property between two nodes (what an entity and a relation row hold)."""
    out = Setup()
    for text in texts:
        clauses = [m.group(1).upper() for m in _CLAUSE.finditer(text)]
        if not clauses or set(clauses) != {"CREATE"}:
            raise Unsupported(f"setup clauses {clauses}")
        bound: dict[str, int] = {}
        for chunk in re.split(r"\bCREATE\b", text, flags=re.I)[1:]:
            try:
                query = parse(f"MATCH {chunk} RETURN 1")
            except CypherError as exc:
                raise Unsupported(f"setup {chunk!r}: {exc}") from None
            for pattern in query.matches[0].patterns:
                ends = [_node(out, bound, n) for n in pattern.nodes]
                for i, rel in enumerate(pattern.rels):
                    if len(rel.types) != 1 or rel.props or rel.hops or rel.direction == "both":
                        raise Unsupported("a relationship our relations cannot hold")
                    a, b = (ends[i], ends[i + 1]) if rel.direction == "out" else (ends[i + 1], ends[i])
                    if a == b:
                        raise Unsupported("a self-loop (the relations table refuses one)")
                    out.rels.append((a, rel.types[0], b))
    names = [n for _, n in out.nodes if n is not None]
    if len({n.lower() for n in names}) != len(names):
        raise Unsupported("two nodes of one name (a space's names are unique)")
    return out


def _node(out: Setup, bound: dict[str, int], node: s.NodePattern) -> int:
    if node.var is not None and node.var in bound:
        if node.labels or node.props:
            raise Unsupported("a bound node re-described")
        return bound[node.var]
    if len(node.labels) > 1 or any(key != "name" for key, _, _ in node.props):
        raise Unsupported("a node our entities cannot hold")
    name = None
    for _, value, _ in node.props:
        if not isinstance(value, s.Literal) or not isinstance(value.value, str):
            raise Unsupported("a name that is not a string")
        name = value.value
    out.nodes.append((node.labels[0] if node.labels else "", name))
    if node.var is not None:
        bound[node.var] = len(out.nodes) - 1
    return len(out.nodes) - 1


def insert(conn: psycopg.Connection, realm: str, space: str, setup: Setup) -> dict[tuple[str, int], Any]:
    """``setup`` as rows of ``space`` (an unnamed node gets a name no query asks for); the comparable value
    of every node and relationship by ``(kind, id)``."""
    Graph(conn, realm).chunk(space)  # a space exists once a chunk was indexed
    known: dict[tuple[str, int], Any] = {}
    ids: list[int] = []
    for k, (label, name) in enumerate(setup.nodes):
        row = conn.execute(
            sql.SQL("INSERT INTO {} (space, name, entity_type) VALUES (%s, %s, %s) RETURNING id").format(
                table(realm, "entities")
            ),
            (space, name if name is not None else f"~{k}", label),
        ).fetchone()
        assert row is not None
        ids.append(int(row[0]))
        props = () if name is None else (("name", name),)
        known[("node", ids[-1])] = ("node", frozenset([label] if label else []), props)
    for a, kind, b in setup.rels:
        row = conn.execute(
            sql.SQL(
                "INSERT INTO {} (space, source_id, target_id, predicate) VALUES (%s, %s, %s, %s) RETURNING id"
            ).format(table(realm, "relations")),
            (space, ids[a], ids[b], kind),
        ).fetchone()
        assert row is not None
        known[("rel", int(row[0]))] = ("rel", kind, ())
    return known
