"""The openCypher TCK scenarios of our subset (issue 29 item 4; fixtures and their licence in
``tests/cypher/tck/``, runner :mod:`tests.cypher.tck_runner`): every query parses or is refused with a
``CypherError``; what the TCK fails at compile time is refused; what can be set up in our tables runs and
returns the TCK's rows. The deviations are listed below, each with why."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from pgrag_dag.cypher import CypherOptions, answer, explain
from pgrag_dag.cypher.parse import parse
from pgrag_dag.errors import CypherError, PgragError
from pgrag_dag.store import db, schema
from tests.cypher.tck_runner import Scenario, Unsupported, cell, insert, load, ours, plain, setup_graph
from tests.fix_pg import drop_realm

SCENARIOS = load()

ACCEPTED_THOUGH_THE_TCK_REFUSES: dict[str, str] = {}
"""Scenarios the TCK fails at compile time that we compile, by :attr:`Scenario.key`, with why."""

DIFFERENT_ROWS: dict[str, str] = {
    "Match4: [1] Handling fixed-length variable length pattern": "a variable-length relationship binds its "
    "relation ids in path order, not a list of relationship values (README, Cypher)",
}
"""Executed scenarios whose rows differ from the TCK's, by :attr:`Scenario.key`, with why."""


def test_every_scenario_is_read() -> None:
    features = Counter(sc.feature.rstrip("0123456789") for sc in SCENARIOS)
    assert len(SCENARIOS) == 623 and set(features) == {
        "Match",
        "MatchWhere",
        "Return",
        "ReturnOrderBy",
        "ReturnSkipLimit",
        "Aggregation",
        "Null",
    }
    assert all(sc.query for sc in SCENARIOS)


def test_every_query_parses_in_the_subset_or_is_refused_with_a_cypher_error() -> None:
    parsed = 0
    for sc in SCENARIOS:
        try:
            parse(sc.query)
            parsed += 1
        except CypherError:
            pass  # one line naming what and where (any other exception fails the test)
    assert parsed == 263  # the rest use WITH, UNWIND, paths, maps, writing clauses, …


def test_a_query_the_tck_fails_at_compile_time_is_refused() -> None:
    accepted = {}
    failing = [sc for sc in SCENARIOS if sc.fails_at_compile_time]
    for sc in failing:
        params = {name: plain(cell(value)) for name, value in sc.params}
        try:
            explain(sc.query, params, CypherOptions("tck", "s"))
        except CypherError:
            continue
        accepted[sc.key] = sc.query
    assert len(failing) == 265  # outlines expanded
    assert set(accepted) == set(ACCEPTED_THOUGH_THE_TCK_REFUSES), accepted


@pytest.fixture(scope="module")
def tck_realm(pg_dsn: str) -> Iterator[tuple[str, str]]:
    conn = db.connect(pg_dsn, autocommit=True)
    schema.init_control(conn)
    name = f"tck{os.getpid()}"
    schema.init_realm(conn, name, embedding_model="hashing-sha256", dim=384)
    try:
        yield pg_dsn, name
    finally:
        drop_realm(conn, name)
        conn.close()


def executable(sc: Scenario) -> tuple[Any, list[Any], dict[str, Any]] | None:
    """``(setup, expected rows, params)`` when ``sc`` compiles and its setup and cells translate."""
    if sc.error is not None or sc.header is None or sc.lists_unordered:
        return None
    try:
        setup = setup_graph(sc.setup)
        rows = [tuple(cell(c) for c in row) for row in sc.rows]
        params = {name: plain(cell(value)) for name, value in sc.params}
        explain(sc.query, params, CypherOptions("tck", "s"))
    except (Unsupported, CypherError):
        return None
    if any(name is None for _, name in setup.nodes) and ".name" in sc.query:
        return None  # an unnamed node has a name here
    return setup, rows, params


def test_the_scenarios_our_tables_can_hold_return_the_tck_rows(tck_realm: tuple[str, str]) -> None:
    dsn, realm = tck_realm
    different: dict[str, str] = {}
    ran = 0
    conn = db.connect(dsn, autocommit=True)
    try:
        for i, sc in enumerate(SCENARIOS):
            found = executable(sc)
            if found is None:
                continue
            setup, expected, params = found
            space = f"s{i}"
            known = insert(conn, realm, space, setup)
            ran += 1
            try:
                frame = answer(sc.query, params, CypherOptions(realm, space), dsn=dsn)
            except PgragError as exc:
                different[sc.key] = f"{type(exc).__name__}: {exc}"
                continue
            got = [tuple(ours(v, known) for v in row) for row in frame.iter_rows()]
            same = got == expected if sc.ordered else Counter(got) == Counter(expected)
            if tuple(frame.columns) != sc.header or not same:
                different[sc.key] = f"{frame.columns} {got} != {sc.header} {expected}"
    finally:
        conn.close()
    assert ran == 68  # of the 263 scenarios in the subset: the rest need properties, WITH, UNWIND, …
    assert set(different) == set(DIFFERENT_ROWS), different
