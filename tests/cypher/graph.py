"""The small hand-built graph the Cypher tests ask (issue 29), written as rows into a real realm.

Space ``work`` (entities created 2000-01-01; relations weight 1, confidence 1 unless said)::

    Ada Lovelace (Person, alias "Countess of Lovelace")
        -works_at-> Quillon Labs           valid 2015..2019, weight 3, created 2014
        -collaborated_with-> Charles Babbage   weight 5, created 2010
        -lived_in-> London                 negated, created 2010
        -described-> Analytical Engine     created 2010, superseded 2016-01-01 by
        -wrote_notes_on-> Analytical Engine    created 2016
        -funded_by-> Old Patron            created 2010, superseded 2016-01-01 by
        -funded_by-> New Patron            created 2016
    Charles Babbage (Person)
        -employed_by-> Quillon Labs        valid from 2021, created 2020
        -designed-> Analytical Engine      weight 2, created 2010
        -designed-> Difference Engine      confidence 0.5, created 2010
    Quillon Labs (Organization) -located_in-> London (Place)   created 2010
    Old Patron (Person) -lives_in-> Paris (Place)              created 2010
    Ghost Worker (Person, dormant since 2018-01-01) -works_at-> Quillon Labs   created 2010

Space ``other``: Ada Lovelace (Person) -works_at-> Rival Corp (Organization), created 2010.
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from psycopg import sql

from pgrag_dag.store import db, schema
from tests.fix_pg import drop_realm

_counter = itertools.count()


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def table(realm: str, name: str) -> sql.Composed:
    return sql.SQL("{}.{}").format(sql.Identifier(schema.schema_for(realm)), sql.Identifier(name))


class Graph:
    """Writes entities, relations and one chunk per space (a space exists once a chunk was indexed)."""

    def __init__(self, conn: psycopg.Connection, realm: str) -> None:
        self.conn, self.realm = conn, realm
        self.ids: dict[tuple[str, str], int] = {}
        self.spaces: set[str] = set()

    def chunk(self, space: str) -> None:
        self.conn.execute(
            sql.SQL("""INSERT INTO {} (space, doc_key, chunk_index, title, source, doc_order, text,
                                       content_hash, doc_hash, t_created)
                       VALUES (%s, 'doc', 0, 'Doc', 'doc.txt', 0, 'text', 'h', 'd', %s)""").format(
                table(self.realm, "documents")
            ),
            (space, utc("2000-01-01")),
        )
        self.spaces.add(space)

    def entity(self, space: str, name: str, kind: str, *, aliases: tuple[str, ...] = ()) -> int:
        if space not in self.spaces:
            self.chunk(space)
        row = self.conn.execute(
            sql.SQL("""INSERT INTO {} (space, name, entity_type, description, aliases, t_created)
                       VALUES (%s, %s, %s, %s, %s, %s) RETURNING id""").format(table(self.realm, "entities")),
            (space, name, kind, f"{name}, a {kind.lower()}", list(aliases), utc("2000-01-01")),
        ).fetchone()
        assert row is not None
        self.ids[(space, name)] = int(row[0])
        return int(row[0])

    def rel(self, space: str, s: str, p: str, o: str, *, created: str, **fields: Any) -> int:
        payload = {k: fields.pop(k) for k in ("valid_from", "valid_to") if k in fields}
        row = self.conn.execute(
            sql.SQL("""INSERT INTO {} (space, source_id, target_id, predicate, description, payload, weight,
                                       negated, confidence, t_created)
                       VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING id""").format(
                table(self.realm, "relations")
            ),
            (
                space,
                self.ids[(space, s)],
                self.ids[(space, o)],
                p,
                f"{s} {p} {o}",
                json.dumps(payload),
                fields.pop("weight", 1),
                fields.pop("negated", False),
                fields.pop("confidence", 1.0),
                utc(created),
            ),
        ).fetchone()
        assert row is not None and not fields, fields
        return int(row[0])

    def supersede(self, old: int, new: int, at: str) -> None:
        self.conn.execute(
            sql.SQL("UPDATE {} SET superseded_by = %s, t_expired = %s WHERE id = %s").format(
                table(self.realm, "relations")
            ),
            (new, utc(at), old),
        )

    def dormant(self, space: str, name: str, since: str) -> None:
        self.conn.execute(
            sql.SQL("UPDATE {} SET dormant_since = %s WHERE id = %s").format(table(self.realm, "entities")),
            (utc(since), self.ids[(space, name)]),
        )


def build(conn: psycopg.Connection, realm: str) -> Graph:
    """The graph of the module docstring in ``realm``."""
    g = Graph(conn, realm)
    w = "work"
    g.entity(w, "Ada Lovelace", "Person", aliases=("Countess of Lovelace",))
    g.entity(w, "Charles Babbage", "Person")
    for name, kind in [
        ("Quillon Labs", "Organization"),
        ("London", "Place"),
        ("Paris", "Place"),
        ("Analytical Engine", "Artifact"),
        ("Difference Engine", "Artifact"),
        ("Old Patron", "Person"),
        ("New Patron", "Person"),
        ("Ghost Worker", "Person"),
    ]:
        g.entity(w, name, kind)
    period = {"valid_from": "2015", "valid_to": "2019"}
    g.rel(w, "Ada Lovelace", "works_at", "Quillon Labs", created="2014-01-01", weight=3, **period)
    g.rel(w, "Ada Lovelace", "collaborated_with", "Charles Babbage", created="2010-01-01", weight=5)
    g.rel(w, "Ada Lovelace", "lived_in", "London", created="2010-01-01", negated=True)
    described = g.rel(w, "Ada Lovelace", "described", "Analytical Engine", created="2010-01-01")
    notes = g.rel(w, "Ada Lovelace", "wrote_notes_on", "Analytical Engine", created="2016-01-01")
    g.supersede(described, notes, "2016-01-01")
    old = g.rel(w, "Ada Lovelace", "funded_by", "Old Patron", created="2010-01-01")
    new = g.rel(w, "Ada Lovelace", "funded_by", "New Patron", created="2016-01-01")
    g.supersede(old, new, "2016-01-01")
    g.rel(w, "Charles Babbage", "employed_by", "Quillon Labs", created="2020-01-01", valid_from="2021")
    g.rel(w, "Charles Babbage", "designed", "Analytical Engine", created="2010-01-01", weight=2)
    g.rel(w, "Charles Babbage", "designed", "Difference Engine", created="2010-01-01", confidence=0.5)
    g.rel(w, "Quillon Labs", "located_in", "London", created="2010-01-01")
    g.rel(w, "Old Patron", "lives_in", "Paris", created="2010-01-01")
    g.rel(w, "Ghost Worker", "works_at", "Quillon Labs", created="2010-01-01")
    g.dormant(w, "Ghost Worker", "2018-01-01")
    g.entity("other", "Ada Lovelace", "Person")
    g.entity("other", "Rival Corp", "Organization")
    g.rel("other", "Ada Lovelace", "works_at", "Rival Corp", created="2010-01-01")
    return g


@dataclass(frozen=True)
class Realms:
    """``realm`` holds the graph of the module docstring; ``neighbour`` is another realm whose space
    ``work`` holds one vertex, "Intruder" (Person), that ``realm`` must never return."""

    dsn: str
    realm: str
    neighbour: str
    graph: Graph


@pytest.fixture(scope="module")
def realms(pg_dsn: str) -> Iterator[Realms]:
    """Both realms, built once per test module (the tests only read) and dropped after it."""
    conn = db.connect(pg_dsn, autocommit=True)
    schema.init_control(conn)
    names = [f"cy{os.getpid()}_{next(_counter)}" for _ in range(2)]
    try:
        for name in names:
            schema.init_realm(conn, name, embedding_model="hashing-sha256", dim=384)
        graph = build(conn, names[0])
        intruder = Graph(conn, names[1])
        intruder.entity("work", "Intruder", "Person")
        intruder.entity("work", "Quillon Labs", "Organization")
        intruder.rel("work", "Intruder", "works_at", "Quillon Labs", created="2010-01-01")
        yield Realms(pg_dsn, names[0], names[1], graph)
    finally:
        for name in names:
            drop_realm(conn, name)
        conn.close()
