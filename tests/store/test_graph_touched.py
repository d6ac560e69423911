"""What the graph-version triggers record of each write's touched vertices (``graph_touched``, issue 30
item 6): the ends of every edge written, ``NULL`` lists past the caps, and only the last writes kept."""

from __future__ import annotations

import psycopg
from psycopg import sql

from pgrag_dag.store import graph_version
from pgrag_dag.store.identifiers import qualified
from tests.query.test_query_modes import GraphBuilder


def _xid(conn: psycopg.Connection) -> int:
    row = conn.execute("SELECT pg_current_xact_id()::text").fetchone()
    assert row is not None
    return int(row[0])


def test_each_write_lists_the_vertices_it_touched(conn: psycopg.Connection, realm: str) -> None:
    b = GraphBuilder(conn, realm)
    with conn.transaction():
        xid = _xid(conn)
        chunk = b.chunk("one", "Pellin Bridge crosses the Suro.", mentions=("Pellin Bridge", "Suro"))
        rel = b.rel("Pellin Bridge", "crosses", "Suro")
    bridge, suro = b.ids["alpha:Pellin Bridge"], b.ids["alpha:Suro"]
    got = graph_version.touched(conn, realm, "alpha", [xid])
    assert got is not None and got[0].tolist() == sorted([bridge, suro]) and got[1].tolist() == [chunk]
    with conn.transaction():
        xid = _xid(conn)
        conn.execute(
            sql.SQL("UPDATE {} SET weight = 4 WHERE id = %s").format(qualified(realm, "relations")), (rel,)
        )
    got = graph_version.touched(conn, realm, "alpha", [xid])
    assert got is not None and got[0].tolist() == sorted([bridge, suro]) and got[1].tolist() == []
    assert xid in graph_version.writes(conn, realm, "alpha")
    # a write of another space is not this space's
    with conn.transaction():
        other = _xid(conn)
        b.chunk("two", "Elsewhere.", space="beta")
    assert graph_version.touched(conn, realm, "alpha", [other]) is None
    assert other not in graph_version.writes(conn, realm, "alpha")


def test_too_many_rows_record_null_lists_and_old_writes_are_pruned(
    conn: psycopg.Connection, realm: str
) -> None:
    b = GraphBuilder(conn, realm)
    suro, kessa = b.entity("Suro"), b.entity("Kessa")
    r = qualified(realm, "relations")
    many = graph_version.TOUCHED_ROWS_MAX + 1
    with conn.transaction():
        inserted = _xid(conn)
        conn.execute(
            sql.SQL("""INSERT INTO {} (space, source_id, target_id, predicate, t_created)
                       SELECT 'alpha', %s, %s, 'p' || i, now() FROM generate_series(1, %s) AS i""").format(r),
            (suro, kessa, many),
        )
    listed = graph_version.touched(conn, realm, "alpha", [inserted])
    # one statement: one list, however many rows
    assert listed is not None and listed[0].tolist() == sorted([suro, kessa])
    with conn.transaction():
        updated = _xid(conn)
        conn.execute(sql.SQL("UPDATE {} SET weight = weight + 1").format(r))  # row by row, past the cap
    assert graph_version.touched(conn, realm, "alpha", [updated]) is None
    rows = conn.execute(
        sql.SQL("SELECT count(*) FROM {} WHERE xid = %s::text::xid8").format(
            qualified(realm, "graph_touched")
        ),
        (str(updated),),
    ).fetchone()
    assert rows == (graph_version.TOUCHED_ROWS_MAX + 1,)  # the cap's rows and one NULL row, then nothing
    with conn.transaction():
        big = _xid(conn)
        conn.execute(
            sql.SQL("""INSERT INTO {} (space, source_id, target_id, predicate, t_created)
                       SELECT 'alpha', %s, %s, 'q' || i, now() FROM generate_series(1, %s) AS i""").format(r),
            (suro, kessa, graph_version.TOUCHED_MAX + 1),
        )
    assert graph_version.touched(conn, realm, "alpha", [big]) is None
    for i in range(graph_version.TOUCHED_KEPT):
        b.entity(f"Port {i}")
    assert graph_version.touched(conn, realm, "alpha", [inserted]) is None  # its rows pruned
    kept = conn.execute(
        sql.SQL("SELECT count(DISTINCT xid) FROM {} WHERE space = 'alpha'").format(
            qualified(realm, "graph_touched")
        )
    ).fetchone()
    assert kept is not None and kept[0] <= graph_version.TOUCHED_KEPT + 1
