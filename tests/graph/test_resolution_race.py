"""Two writers racing on one canonical name end with one vertex (paper §3.4, §4.6)."""

from __future__ import annotations

import threading

import polars as pl
import psycopg
from psycopg import sql

from pgrag_dag.graph.resolution import merge_race_loser, resolve_entities
from pgrag_dag.store import db
from pgrag_dag.store.graph import load_entities, write_entities
from pgrag_dag.store.identifiers import qualified
from pgrag_dag.store.quality import identity_keys


def _decisions(name: str, entity_type: str, description: str, aliases: list[str]) -> pl.DataFrame:
    return pl.DataFrame(
        [
            {
                "chunk_id": 1,
                "name": name,
                "entity_type": entity_type,
                "description": description,
                "aliases": aliases,
            }
        ],
        schema={
            "chunk_id": pl.Int64,
            "name": pl.String,
            "entity_type": pl.String,
            "description": pl.String,
            "aliases": pl.List(pl.String),
        },
    )


def test_two_concurrent_writers_on_one_name_converge_on_one_vertex(
    pg_dsn: str, conn: psycopg.Connection, realm: str
) -> None:
    records = [
        ("Charles Babbage", "Person", "English polymath.", ["Babbage"]),
        (
            "charles babbage",
            "Concept",
            "English polymath who designed the Difference Engine.",
            ["C. Babbage"],
        ),
    ]
    both_resolved = threading.Barrier(2)
    ids: list[int | None] = [None, None]
    errors: list[BaseException] = []

    def writer(i: int) -> None:
        try:
            with db.connect(pg_dsn) as c, c.transaction():
                res = resolve_entities(load_entities(c, realm, "s"), _decisions(*records[i]))
                both_resolved.wait(timeout=10)  # each resolved against an empty space: both will insert
                write_entities(c, realm, "s", res, merge=merge_race_loser)
                ids[i] = res.vertices[0].id
        except BaseException as exc:  # asserted below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    rows = conn.execute(
        sql.SQL(
            "SELECT id, name, entity_type, description, aliases, name_key, alias_keys FROM {} e "
            "LEFT JOIN {} k ON k.entity_id = e.id WHERE e.space = 's'"
        ).format(qualified(realm, "entities"), qualified(realm, "entity_keys"))
    ).fetchall()
    assert len(rows) == 1
    vid, name, etype, description, aliases, name_key, alias_keys = rows[0]
    assert (name_key, alias_keys) == identity_keys(name, aliases)  # the keys of the merged vertex are stored
    assert ids == [vid, vid]
    assert etype == "Person"  # whichever lost, a bare Concept never overwrites a specific type
    assert (
        description == "English polymath who designed the Difference Engine."
    )  # the longer description wins
    assert set(aliases) >= {"Babbage", "C. Babbage"} and name.lower() == "charles babbage"


def test_a_vertex_recomputed_to_what_is_stored_is_not_rewritten(pg_dsn: str, realm: str) -> None:
    """A full resolution marks every vertex it recomputes as changed; one whose values equal the stored row
    is neither counted as updated nor given a new ``t_updated`` (a trial's ``pgrag index --full`` on an
    unchanged space reported three entities updated, every run). A real difference is still written."""
    from pgrag_dag.frames import Resolution, Vertex

    table = qualified(realm, "entities")
    with db.connect(pg_dsn) as c, c.transaction():
        res = resolve_entities(
            load_entities(c, realm, "s"), _decisions("Azure Linux", "Place", "a cloud", ["Azure"])
        )
        assert write_entities(c, realm, "s", res, merge=merge_race_loser)["inserted"] == 1
    stored = res.vertices[0]

    def write(**changes: object) -> tuple[int, object]:
        v = Vertex(
            stored.id, stored.name, stored.entity_type, stored.description, list(stored.aliases), changed=True
        )
        for k, value in changes.items():
            setattr(v, k, value)
        with db.connect(pg_dsn) as c, c.transaction():
            updated = write_entities(c, realm, "s", Resolution(vertices=[v]), merge=merge_race_loser)[
                "updated"
            ]
            row = c.execute(
                sql.SQL("SELECT t_updated FROM {} WHERE id = %s").format(table), (v.id,)
            ).fetchone()
        assert row is not None
        return updated, row[0]

    before = write()[1]
    assert write() == (0, before)
    updated, after = write(description="a cloud of Linux machines")
    assert updated == 1 and after > before
