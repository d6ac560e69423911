"""The append-only belief history (issue 14 item 1; paper §5.3): as_believed_at answers exactly as the graph
stood at an instant, also after later supersessions, deletions and re-indexing."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import psycopg
import pytest
from psycopg import sql

from pgrag_dag.engine import Engine
from pgrag_dag.pipeline import delete_document, index_documents
from pgrag_dag.query import QueryParam, QueryResult, query_data
from pgrag_dag.store.identifiers import qualified
from tests.graph.test_supersession import _write, novel  # noqa: F401  (the fixture: a stub model over small books)

PAIR = "Athos and d'Artagnan"


def _clock(engine: Engine) -> datetime:
    """The database clock between two writes (never the Python clock)."""
    with engine.connect() as conn:
        row = conn.execute("SELECT clock_timestamp()").fetchone()
    assert row is not None
    return row[0]


def _ask(engine: Engine, realm: str, question: str = PAIR, **param: Any) -> QueryResult:
    return query_data(
        question, QueryParam(space="books", **param), dsn=engine.dsn, realm=realm, embedder=engine.embedder()
    )


def _pair(engine: Engine, realm: str, **param: Any) -> set[tuple[str, bool]]:
    """(predicate, superseded in the state read) of the Athos → d'Artagnan edges a query returns."""
    return {
        (r["predicate"], r["superseded"])
        for r in _ask(engine, realm, **param).relations
        if r["subject"] == "Athos" and r["object"] == "d'Artagnan" and r["predicate"] != "taught"
    }


def _history(
    engine: Engine, realm: str
) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    with engine.connect() as conn:
        return tuple(
            conn.execute(sql.SQL("SELECT * FROM {} ORDER BY 1").format(qualified(realm, t))).fetchall()  # type: ignore[return-value]
            for t in ("belief_log", "relation_belief", "entity_belief")
        )


def test_a_three_document_reversal_chain_is_answered_as_it_stood_at_every_instant(novel, realm) -> None:  # type: ignore[no-untyped-def]
    root, engine, server = novel
    _write(root, "01_book.txt", "Athos is an ally of d'Artagnan.", "Athos taught d'Artagnan to fence.")
    index_documents(engine, realm, "books", communities=False)
    t1 = _clock(engine)
    _write(root, "02_book.txt", "Athos is now an enemy of d'Artagnan.", "Porthos lives in Paris.")
    index_documents(engine, realm, "books", communities=False)
    t2 = _clock(engine)
    _write(root, "03_book.txt", "Athos is again an ally of d'Artagnan.")
    index_documents(engine, realm, "books", communities=False)
    t3 = _clock(engine)

    expected = {t1: {("ally_of", False)}, t2: {("enemy_of", False)}, t3: {("ally_of", False)}}
    for t, edges in expected.items():
        assert _pair(engine, realm, as_believed_at=t) == edges, t
    assert _pair(engine, realm) == {("ally_of", False)}
    # with superseded edges: at t2 the alliance was superseded by the enmity, at t3 the other way round
    assert _pair(engine, realm, as_believed_at=t2, include_superseded=True) == {
        ("enemy_of", False),
        ("ally_of", True),
    }
    assert _pair(engine, realm, as_believed_at=t3, include_superseded=True) == {
        ("ally_of", False),
        ("enemy_of", True),
    }
    at_t2 = {
        r["predicate"]: r for r in _ask(engine, realm, as_believed_at=t2, include_superseded=True).relations
    }
    assert (
        at_t2["ally_of"]["superseded_by"] == at_t2["enemy_of"]["id"] and at_t2["ally_of"]["t_expired"] <= t2
    )

    # the middle document goes: its enmity is dormant now, but the past is unchanged
    calls = len(server.requests)
    delete_document(engine, realm, "books", "02_book.txt")
    (root / "docs" / "02_book.txt").unlink()
    assert len(server.requests) == calls
    for t, edges in expected.items():
        assert _pair(engine, realm, as_believed_at=t) == edges, f"after deleting the middle document, at {t}"
    assert _pair(engine, realm, include_superseded=True) == {("ally_of", False)}  # the enmity is dormant now
    # Porthos came with the middle document: live at t2, dormant now
    assert "Porthos" in {
        e["name"] for e in _ask(engine, realm, "Porthos lives in Paris", as_believed_at=t2).entities
    }
    assert "Porthos" not in {e["name"] for e in _ask(engine, realm, "Porthos lives in Paris").entities}
    # and its chunk is read from the archive at t2, never now
    at_t2_chunks = {
        c["doc_key"] for c in _ask(engine, realm, "Porthos lives in Paris", as_believed_at=t2).chunks
    }
    assert "02_book.txt" in at_t2_chunks
    assert "02_book.txt" not in {c["doc_key"] for c in _ask(engine, realm, "Porthos lives in Paris").chunks}
    assert "02_book.txt" not in {
        c["doc_key"] for c in _ask(engine, realm, "Porthos lives in Paris", as_believed_at=t1).chunks
    }

    # re-indexing unchanged sources moves nothing in the history
    before = _history(engine, realm)
    index_documents(engine, realm, "books", communities=False)
    assert _history(engine, realm) == before


def test_every_belief_change_is_logged_once_in_order(novel, realm) -> None:  # type: ignore[no-untyped-def]
    root, engine, _ = novel
    _write(root, "01_book.txt", "Athos is an ally of d'Artagnan.")
    _write(root, "02_book.txt", "Athos is now an enemy of d'Artagnan.")
    index_documents(engine, realm, "books", communities=False)
    delete_document(engine, realm, "books", "02_book.txt")
    with engine.connect() as conn:
        rows = conn.execute(
            sql.SQL("""
            SELECT l.kind, COALESCE(r.predicate, e.name, l.doc_key), l.event, sup.predicate
              FROM {log} l LEFT JOIN {r} r ON l.kind = 'relation' AND r.id = l.object_id
              LEFT JOIN {e} e ON l.kind = 'entity' AND e.id = l.object_id
              LEFT JOIN {r} sup ON sup.id = l.superseded_by ORDER BY l.seq""").format(
                log=qualified(realm, "belief_log"),
                r=qualified(realm, "relations"),
                e=qualified(realm, "entities"),
            )
        ).fetchall()
    relation_events = [(p, ev, by) for k, p, ev, by in rows if k == "relation"]
    assert relation_events == [
        ("ally_of", "asserted", None),
        ("enemy_of", "asserted", None),
        ("ally_of", "superseded", "enemy_of"),
        ("enemy_of", "dormant", None),
        ("ally_of", "restored", None),
    ]
    assert [(p, ev) for k, p, ev, _ in rows if k == "document"] == [
        ("01_book.txt", "added"),
        ("02_book.txt", "added"),
        ("02_book.txt", "removed"),
    ]
    assert sorted((p, ev) for k, p, ev, _ in rows if k == "entity") == [
        ("Athos", "created"),
        ("d'Artagnan", "created"),
    ]


def test_the_history_is_append_only(novel, realm) -> None:  # type: ignore[no-untyped-def]
    root, engine, _ = novel
    _write(root, "01_book.txt", "Athos is an ally of d'Artagnan.")
    _write(root, "02_book.txt", "Athos is now an enemy of d'Artagnan.")
    index_documents(engine, realm, "books", communities=False)
    with engine.connect() as conn:
        for stmt in ("UPDATE {} SET event = 'restored'", "DELETE FROM {}"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match="append-only"), conn.transaction():
                conn.execute(sql.SQL(stmt).format(qualified(realm, "belief_log")))
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="append-only"), conn.transaction():
            # a closed interval may never be reopened or moved
            conn.execute(
                sql.SQL("UPDATE {} SET believed_to = NULL WHERE believed_to IS NOT NULL").format(
                    qualified(realm, "relation_belief")
                )
            )
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="append-only"), conn.transaction():
            conn.execute(
                sql.SQL("UPDATE {} SET believed_from = believed_from - interval '1 day'").format(
                    qualified(realm, "entity_belief")
                )
            )
        for table in ("belief_log", "relation_belief", "entity_belief"):  # TRUNCATE fires no row trigger
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match="append-only"), conn.transaction():
                conn.execute(sql.SQL("TRUNCATE {}").format(qualified(realm, table)))
        closed = conn.execute(
            sql.SQL("SELECT count(*) FROM {} WHERE believed_to IS NOT NULL").format(
                qualified(realm, "relation_belief")
            )
        ).fetchone()
    assert closed == (1,)  # the alliance's current interval, closed by the enmity


def test_removed_chunks_are_re_embedded_with_the_realm(novel, realm, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from pgrag_dag.config import load_settings
    from pgrag_dag.operate.reembed import reembed_realm

    root, engine, _ = novel
    _write(root, "01_book.txt", "Athos is an ally of d'Artagnan.")
    _write(root, "02_book.txt", "Porthos lives in Paris.")
    index_documents(engine, realm, "books", communities=False)
    t = _clock(engine)
    delete_document(engine, realm, "books", "02_book.txt")
    monkeypatch.setenv("PGRAG_EMBEDDING__DIM", "64")
    narrow = Engine.from_settings(load_settings(root / "pgrag.yaml"))
    result = reembed_realm(narrow, realm)
    assert result["rows"]["documents_removed"] == 1
    with narrow.connect() as conn:
        dims = conn.execute(
            sql.SQL("SELECT vector_dims(embedding) FROM {}").format(qualified(realm, "documents_removed"))
        ).fetchall()
    assert dims == [(64,)]
    chunks = query_data(
        "Porthos lives in Paris",
        QueryParam(space="books", mode="naive", as_believed_at=t),
        dsn=narrow.dsn,
        realm=realm,
        embedder=narrow.embedder(),
    ).chunks
    assert [c["doc_key"] for c in chunks][:1] == ["02_book.txt"]  # found by its new vector, from the archive
