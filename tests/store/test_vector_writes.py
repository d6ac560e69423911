"""How the embeddings stage's vector writes are planned (issue 30 item 4).

Each flush copies its vectors into a fresh temporary table and updates the embedded table from it. The
planner knows nothing of that temporary table; joined on ``t.id = v.id`` alone it hash-joined the
temporary table against a sequential scan of the whole embedded table — one full scan per 2,048-row
flush, quadratic over a first load of a million rows (it cost a 100k build 138 s). The write must find its
rows through the primary key whatever the table's size. Real PostgreSQL: EXPLAIN of the very statement
:func:`pgrag_dag.store.vectors.write` runs, on a table of 20,000 entities.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import psycopg
from psycopg import sql

from pgrag_dag.store import db, vectors
from pgrag_dag.store.identifiers import qualified

ROWS = 20_000


class _ExplainingCursor(psycopg.Cursor[Any]):
    """A cursor that, before running an ``UPDATE``, records the plan of that statement with its parameters."""

    plans: list[str] = []

    def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
        text = query.as_string(self) if isinstance(query, sql.Composable) else str(query)
        if text.lstrip().upper().startswith("UPDATE"):
            plan = super().execute(sql.SQL("EXPLAIN ") + sql.SQL(text), params).fetchall()
            self.plans.append("\n".join(row[0] for row in plan))
        return super().execute(query, params, **kwargs)


def test_a_vector_write_finds_its_rows_through_the_primary_key_not_a_scan_of_the_table(
    pg_dsn: str, conn: psycopg.Connection, realm: str
) -> None:
    table = qualified(realm, "entities")
    conn.execute(
        sql.SQL(
            "INSERT INTO {} (space, name) SELECT 'main', 'entity ' || g FROM generate_series(1, %s) g"
        ).format(table),
        (ROWS,),
    )
    conn.execute(sql.SQL("ANALYZE {}").format(table))
    ids = [
        r[0] for r in conn.execute(sql.SQL("SELECT id FROM {} ORDER BY id LIMIT 3").format(table)).fetchall()
    ]
    rng = np.random.default_rng(0)
    rows = [(i, f"entity {n}", f"h{n}") for n, i in enumerate(ids)]
    vecs = [rng.standard_normal(384).astype(np.float32) for _ in ids]
    _ExplainingCursor.plans = []
    with db.connect(pg_dsn) as writer:
        writer.cursor_factory = _ExplainingCursor
        with writer.transaction():
            assert vectors.write(writer, realm, "entities", rows, vecs) == 3
            assert vectors.write(writer, realm, "entities", rows, vecs, fallback="hashing-sha256") == 0
    assert len(_ExplainingCursor.plans) == 2, _ExplainingCursor.plans
    for plan in _ExplainingCursor.plans:
        assert "entities_pkey" in plan, plan
        assert "Seq Scan on entities" not in plan, plan
    stored = conn.execute(
        sql.SQL("SELECT id, embed_hash FROM {} WHERE embedding IS NOT NULL ORDER BY id").format(table)
    ).fetchall()
    assert stored == [(i, f"h{n}") for n, i in enumerate(ids)]
