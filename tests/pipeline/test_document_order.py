"""Order without rewrites (issue 30 item 1): ``doc_order`` keys are sparse, so a document added, changed or
deleted anywhere in the order writes only its own rows; a reorder moves only what moved."""

from __future__ import annotations

import os
import time

from psycopg import sql

from pgrag_dag.pipeline import stage_chunks
from pgrag_dag.store import db
from pgrag_dag.store.documents import ORDER_SPACING, sparse_orders
from pgrag_dag.store.schema import schema_for
from tests.fix_corpus import SmallCorpus


def test_sparse_orders_keep_every_key_that_still_ascends_and_fit_the_rest_between() -> None:
    stored = {"a": 1024, "b": 2048, "c": 3072}
    assert sparse_orders(["a", "b", "c"], stored) == stored
    assert sparse_orders(["a", "c"], stored) == {"a": 1024, "c": 3072}  # a deletion moves nothing
    assert sparse_orders(["x", "a", "b", "y", "c", "z"], stored) == {
        "x": 0,
        "a": 1024,
        "b": 2048,
        "y": 2560,
        "c": 3072,
        "z": 4096,
    }
    assert sparse_orders(["c", "a", "b"], stored) == {"c": 0, "a": 1024, "b": 2048}  # only "c" moved
    assert sparse_orders(["a", "b"], {}) == {"a": ORDER_SPACING, "b": 2 * ORDER_SPACING}
    # dense keys of an earlier release leave no room: renumbered once, spaced
    assert sparse_orders(["a", "x", "b"], {"a": 0, "b": 1}) == {"a": 1024, "x": 2048, "b": 3072}
    # ten insertions at one place fit before a renumbering
    order, keys = ["a", "b"], {"a": 1024, "b": 2048}
    for i in range(10):
        order.insert(1, f"n{i}")
        new = sparse_orders(order, keys)
        assert all(new[k] == v for k, v in keys.items())
        assert [new[k] for k in order] == sorted(new[k] for k in order)
        keys = new


def _orders(corpus: SmallCorpus, realm: str) -> dict[str, set[int]]:
    with db.connect(corpus.engine().dsn) as conn:
        rows = conn.execute(
            sql.SQL("SELECT doc_key, doc_order FROM {}.documents WHERE space = 'main'").format(
                sql.Identifier(schema_for(realm))
            )
        ).fetchall()
    out: dict[str, set[int]] = {}
    for k, o in rows:
        out.setdefault(k, set()).add(o)
    return out


def test_a_document_added_first_in_the_order_moves_no_other_documents_key(
    small_corpus: SmallCorpus, realm: str
) -> None:
    engine = small_corpus.engine()
    stage_chunks(engine, realm, "main")
    before = _orders(small_corpus, realm)
    assert len(before) >= 2 and all(len(v) == 1 for v in before.values())
    first = small_corpus.root / "docs" / "00_preface.txt"  # sorts before every file: order by file name
    first.write_text("Charles Babbage wrote a preface in London.\n", encoding="utf-8")
    then = time.time_ns() - 3_600 * 10**9
    os.utime(first, ns=(then, then))
    meta = stage_chunks(engine, realm, "main").metadata
    after = _orders(small_corpus, realm)
    assert meta["documents_added"] == 1 and meta["rows_changed"] == 1  # the new document only, no restamp
    assert {k: v for k, v in after.items() if k != first.name} == before
    assert max(after[first.name]) < min(o for v in before.values() for o in v)
    first.unlink()
    meta = stage_chunks(engine, realm, "main").metadata
    assert meta["documents_removed"] == 1 and meta["rows_changed"] == 1
    assert _orders(small_corpus, realm) == before
