"""Tests for pgrag_dag.graph.resolution and its store (store.graph.write_entities): one vertex per name, then
by alias, merged so that a specific value never loses to a placeholder (paper §4.6)."""

from __future__ import annotations

import unicodedata
from typing import Any

import polars as pl
import psycopg
from psycopg import sql

from pgrag_dag.frames import ENTITY_SCHEMA
from pgrag_dag.graph.resolution import merge_race_loser, resolve_entities, support_groups
from pgrag_dag.names import schema_for
from pgrag_dag.store.graph import load_entities, write_entities

EXISTING_SCHEMA = {k: v for k, v in ENTITY_SCHEMA.items() if k != "changed"}
DECISION_SCHEMA = {
    "chunk_id": pl.Int64,
    "name": pl.String,
    "entity_type": pl.String,
    "description": pl.String,
    "aliases": pl.List(pl.String),
}


def _decisions(*records: tuple[Any, ...]) -> pl.DataFrame:
    """(name, entity_type, description, aliases) records, one chunk each, in order."""
    rows = [
        {"chunk_id": i, "name": n, "entity_type": t, "description": d, "aliases": a}
        for i, (n, t, d, a) in enumerate(records, 1)
    ]
    return pl.DataFrame(rows, schema=DECISION_SCHEMA)


def _existing(*rows: tuple[Any, ...]) -> pl.DataFrame:
    return pl.DataFrame([dict(zip(EXISTING_SCHEMA, r)) for r in rows], schema=EXISTING_SCHEMA)


NONE = _existing()


def _vertices(frame: pl.DataFrame) -> list[tuple[Any, ...]]:
    return frame.select("name", "entity_type", "description", "aliases").rows()


def test_babbage_upgrades_to_charles_babbage_never_the_reverse() -> None:
    res = resolve_entities(
        NONE, _decisions(("Babbage", "Person", "", []), ("Charles Babbage", "Person", "", ["Babbage"]))
    )
    assert _vertices(res.entities()) == [("Charles Babbage", "Person", "", ["Babbage"])]
    assert res.index_of("babbage") == res.index_of("CHARLES BABBAGE") == 0

    reverse = resolve_entities(
        NONE, _decisions(("Charles Babbage", "Person", "", ["Babbage"]), ("Babbage", "Person", "", []))
    )
    assert _vertices(reverse.entities()) == [("Charles Babbage", "Person", "", ["Babbage"])]


def test_a_stored_short_name_is_upgraded_in_place() -> None:
    existing = _existing((41, "Babbage", "Person", "Mathematician", []))
    res = resolve_entities(existing, _decisions(("Charles Babbage", "Person", "", ["Babbage", "C. Babbage"])))
    assert res.entities().rows() == [
        (41, "Charles Babbage", "Person", "Mathematician", ["Babbage", "C. Babbage"], True)
    ]


def test_an_unchanged_stored_vertex_is_not_marked_changed() -> None:
    existing = _existing((7, "Charles Babbage", "Person", "Mathematician and inventor", ["Babbage"]))
    res = resolve_entities(existing, _decisions(("Babbage", "Concept", "Inventor", [])))
    assert res.entities().rows() == [
        (7, "Charles Babbage", "Person", "Mathematician and inventor", ["Babbage"], False)
    ]


def test_a_bare_concept_never_overwrites_a_specific_type() -> None:
    person_first = resolve_entities(
        NONE, _decisions(("Ada Lovelace", "Person", "", []), ("Ada Lovelace", "Concept", "", []))
    )
    concept_first = resolve_entities(
        NONE, _decisions(("Ada Lovelace", "Concept", "", []), ("Ada Lovelace", "Person", "", []))
    )
    assert person_first.entities()["entity_type"].to_list() == ["Person"]
    assert concept_first.entities()["entity_type"].to_list() == ["Person"]


def test_a_longer_description_wins_and_a_shorter_never_does() -> None:
    long = "English mathematician who wrote the first published algorithm"
    res = resolve_entities(
        NONE,
        _decisions(
            ("Ada Lovelace", "Person", "Mathematician", []),
            ("Ada Lovelace", "Person", long, []),
            ("Ada Lovelace", "Concept", "Writer", []),
        ),
    )
    assert res.entities()["description"].to_list() == [long]


def test_alias_sets_are_unioned_minus_the_canonical_name() -> None:
    res = resolve_entities(
        NONE,
        _decisions(
            ("Babbage", "Person", "", ["Charles Babbage", "C. Babbage"]),
            ("Charles Babbage", "Person", "", ["Mr Babbage", "c. babbage", "CHARLES BABBAGE"]),
        ),
    )
    (vertex,) = _vertices(res.entities())
    assert vertex[0] == "Charles Babbage"
    assert vertex[3] == ["Babbage", "C. Babbage", "Mr Babbage"]


def test_two_records_sharing_only_an_alias_stay_two_vertices() -> None:
    res = resolve_entities(
        NONE,
        _decisions(
            ("Ada Lovelace", "Person", "", ["Ada"]),
            ("Ada (programming language)", "Work", "", ["Ada"]),
        ),
    )
    assert _vertices(res.entities()) == [
        ("Ada Lovelace", "Person", "", ["Ada"]),
        ("Ada (programming language)", "Work", "", ["Ada"]),
    ]
    assert res.index_of("Ada (programming language)") == 1


def test_identity_ignores_unicode_form_whitespace_quotes_and_zero_width_characters() -> None:
    nfc = unicodedata.normalize("NFC", "André-Marie Ampère")
    nfd = unicodedata.normalize("NFD", nfc)
    assert nfc != nfd
    existing = _existing((1, nfc, "Person", "Physicist", []), (2, "Ada Lovelace", "Person", "", []))
    variants = [
        nfd,
        "ada   lovelace",
        "\u201cAda Lovelace\u201d",
        "'Ada Lovelace'",
        "Ada\u200b Lovelace",
        " Ada Lovelace\ufeff",
    ]
    res = resolve_entities(existing, _decisions(*[(v, "Person", "", []) for v in variants]))
    frame = res.entities()
    assert frame["id"].to_list() == [1, 2]  # no new vertex for any variant
    assert [res.index_of(v) for v in variants] == [0, 1, 1, 1, 1, 1]


def _table(realm: str) -> sql.Composed:
    return sql.SQL("{}.{}").format(sql.Identifier(schema_for(realm)), sql.Identifier("entities"))


def _stored(conn: psycopg.Connection, realm: str, space: str) -> list[tuple[Any, ...]]:
    return conn.execute(
        sql.SQL(
            "SELECT id, name, entity_type, description, aliases FROM {} WHERE space = %s ORDER BY id"
        ).format(_table(realm)),
        (space,),
    ).fetchall()


def test_write_entities_merges_a_vertex_another_writer_inserted_meanwhile(
    conn: psycopg.Connection, realm: str
) -> None:
    # this writer resolved against an empty space ...
    res = resolve_entities(
        load_entities(conn, realm, "s1"),
        _decisions(
            ("charles babbage", "Concept", "Inventor of the Difference Engine", ["C. Babbage", "Babbage"]),
            ("Ada Lovelace", "Person", "Mathematician", []),
        ),
    )
    # ... while another writer inserted the same name, in other case
    winner_id = conn.execute(
        sql.SQL(
            "INSERT INTO {} (space, name, entity_type, description, aliases) "
            "VALUES (%s, %s, %s, %s, %s) RETURNING id"
        ).format(_table(realm)),
        ("s1", "Charles Babbage", "Person", "Mathematician", ["Babbage"]),
    ).fetchone()[0]  # type: ignore[index]

    counts = write_entities(conn, realm, "s1", res, merge=merge_race_loser)

    assert counts == {"inserted": 1, "updated": 1}
    stored = _stored(conn, realm, "s1")
    assert len(stored) == 2
    assert stored[0] == (
        winner_id,
        "Charles Babbage",
        "Person",
        "Inventor of the Difference Engine",
        ["Babbage", "C. Babbage"],
    )
    assert stored[1][1:] == ("Ada Lovelace", "Person", "Mathematician", [])
    assert [v.id for v in res.vertices] == [winner_id, stored[1][0]]


def test_write_entities_updates_an_upgraded_vertex_in_place(conn: psycopg.Connection, realm: str) -> None:
    table = _table(realm)
    conn.execute(
        sql.SQL(
            "INSERT INTO {} (space, name, entity_type) VALUES ('s1', 'Babbage', 'Concept'), "
            "('s2', 'Babbage', 'Place')"
        ).format(table)
    )
    before = _stored(conn, realm, "s1")
    res = resolve_entities(
        load_entities(conn, realm, "s1"),
        _decisions(("Charles Babbage", "Person", "Mathematician", ["Babbage"])),
    )
    assert write_entities(conn, realm, "s1", res, merge=merge_race_loser) == {"inserted": 0, "updated": 1}
    assert _stored(conn, realm, "s1") == [
        (before[0][0], "Charles Babbage", "Person", "Mathematician", ["Babbage"])
    ]
    assert [r[1:3] for r in _stored(conn, realm, "s2")] == [("Babbage", "Place")]  # other space untouched


def test_a_concept_stub_arriving_after_a_rich_record_strips_nothing() -> None:
    # the gates create bare Concept stubs for unlisted triple endpoints; one landing later must not win
    rich = (
        "Charles Babbage",
        "Person",
        "English mathematician who designed the Difference Engine",
        ["Babbage"],
    )
    res = resolve_entities(NONE, _decisions(rich, ("Babbage", "Concept", "", [])))
    assert _vertices(res.entities()) == [rich]


def test_a_vertex_gaining_another_vertexs_canonical_name_as_an_alias_absorbs_it() -> None:
    # two stored vertices; a later record joins them: "Babbage" becomes an alias of Charles Babbage
    existing = _existing(
        (3, "Charles Babbage", "Person", "", []),
        (5, "Babbage", "Concept", "Designer of the Analytical Engine", ["C. B."]),
    )
    res = resolve_entities(existing, _decisions(("Charles Babbage", "Person", "", ["Babbage"])))
    survivor, fragment = res.vertices
    assert fragment.merged_into == 0 and survivor.merged_into is None
    assert (survivor.name, survivor.entity_type, survivor.description, survivor.aliases) == (
        "Charles Babbage",
        "Person",
        "Designer of the Analytical Engine",  # the fragment's longer description is kept
        ["Babbage", "C. B."],
    )
    assert res.index_of("Babbage") == res.index_of("c. b.") == 0  # the fragment's forms resolve anew
    assert res.moved == {"babbage": 1, "c. b.": 1}
    assert [(f.id, s.id) for f, s in res.merges()] == [(5, 3)]
    assert [v.id for v in res.touched().vertices] == [3] and [v.id for v in res.standing().vertices] == [3]


def test_the_survivor_is_the_vertex_with_the_longer_canonical_name() -> None:
    # the record hits "IBM" by name and names the longer vertex as an alias: IBM is the fragment, so
    # the survivor keeps a name no other row holds
    existing = _existing(
        (1, "IBM", "Organization", "", []), (2, "International Business Machines", "Concept", "", [])
    )
    res = resolve_entities(
        existing, _decisions(("IBM", "Organization", "", ["International Business Machines"]))
    )
    assert [(f.id, s.id) for f, s in res.merges()] == [(1, 2)]
    (standing,) = res.standing().vertices
    assert (standing.name, standing.entity_type, standing.aliases) == (
        "International Business Machines",
        "Organization",
        ["IBM"],
    )
    assert res.index_of("ibm") == 1


def test_merges_chain_and_a_new_fragment_is_never_written() -> None:
    res = resolve_entities(
        NONE,
        _decisions(
            ("Babbage", "Person", "", []),
            ("C. Babbage", "Person", "", []),
            ("Charles Babbage", "Person", "", []),
            ("Charles Babbage", "Person", "", ["Babbage", "C. Babbage"]),
            ("Babbage", "Person", "Inventor", []),  # resolves to the survivor now
        ),
    )
    assert _vertices(res.standing().entities()) == [
        ("Charles Babbage", "Person", "Inventor", ["Babbage", "C. Babbage"])
    ]
    assert res.merges() == []  # both fragments were new: nothing stored to mark
    assert {res.index_of(n) for n in ("Babbage", "C. Babbage", "Charles Babbage")} == {2}


def test_write_merges_marks_the_fragment_and_load_entities_no_longer_reads_it(
    conn: psycopg.Connection, realm: str
) -> None:
    from pgrag_dag.store.graph import EntityForms, write_merges

    first = resolve_entities(
        load_entities(conn, realm, "s1"),
        _decisions(("Charles Babbage", "Person", "", []), ("Babbage", "Concept", "", [])),
    )
    write_entities(conn, realm, "s1", first, merge=merge_race_loser)
    a, b = (v.id for v in first.vertices)
    res = resolve_entities(
        load_entities(conn, realm, "s1"), _decisions(("Charles Babbage", "Person", "", ["Babbage"]))
    )
    write_entities(conn, realm, "s1", res.touched(), merge=merge_race_loser)
    assert write_merges(conn, realm, "s1", [(f.id, s.id) for f, s in res.merges()]) == 1
    assert write_merges(conn, realm, "s1", [(b, a)]) == 0  # already recorded
    assert load_entities(conn, realm, "s1")["id"].to_list() == [a]
    forms = EntityForms(conn, realm, "s1", everything=True)
    assert forms.merged == {b} and forms.resolve("babbage") == a and b in forms.holders["babbage"]

    # the survivor loses the alias; a new record of the name makes the fragment's row a vertex again
    conn.execute(sql.SQL("UPDATE {} SET aliases = '{{}}' WHERE id = %s").format(_table(realm)), (a,))
    again = resolve_entities(load_entities(conn, realm, "s1"), _decisions(("Babbage", "Person", "", [])))
    write_entities(conn, realm, "s1", again, merge=merge_race_loser)
    assert again.vertices[-1].id == b
    assert load_entities(conn, realm, "s1")["id"].to_list() == [a, b]


def _record(name: str, *aliases: str) -> dict[str, Any]:
    return {
        "kind": "entity",
        "name": name,
        "entity_type": "Person",
        "description": "",
        "aliases": list(aliases),
    }


def test_support_groups_say_whether_the_remaining_records_still_make_one_vertex() -> None:
    vertex = ("De Treville", ["Treville"])  # merged once through "De Treville, called Treville"
    linked = [_record("Treville"), _record("De Treville", "Treville"), _record("De Treville")]
    assert support_groups(*vertex, linked) == [{"de treville", "treville"}]
    # the linking record gone: what remains makes two vertices, as a fresh index of it would
    assert support_groups(*vertex, [linked[0], linked[2]]) == [{"treville"}, {"de treville"}]
    # records of other vertices are not its support, nor are triples
    other = [_record("Athos"), {"kind": "triple", "name": None, "aliases": None}]
    assert support_groups(*vertex, [linked[2], *other]) == [{"de treville"}]
    assert support_groups(*vertex, other) == []
    # a group merely sharing an alias is another vertex holding it: split_unsupported takes no form from it
    shared = [_record("Lady de Winter", "Milady"), _record("Anne de Breuil", "Milady")]
    assert support_groups("Anne de Breuil", ["Milady"], shared) == [
        {"lady de winter", "milady"},
        {"anne de breuil", "milady"},
    ]


def test_a_mixed_case_spelling_replaces_a_name_in_capitals(conn: psycopg.Connection, realm: str) -> None:
    """New-user trial on the earnings calls: a speaker label "AMY HOOD" was kept as the canonical name of
    Amy Hood. Of two spellings of one name, the mixed-case one is canonical, in either order, and a stored
    vertex in capitals is renamed in place; a name only ever written in capitals ("IBM") stays so."""
    for records in (
        (("AMY HOOD", "Concept", "", []), ("Amy Hood", "Person", "CFO", [])),
        (("Amy Hood", "Person", "CFO", []), ("AMY HOOD", "Concept", "", [])),
    ):
        assert _vertices(resolve_entities(NONE, _decisions(*records)).entities()) == [
            ("Amy Hood", "Person", "CFO", [])
        ]
    table = _table(realm)
    conn.execute(
        sql.SQL(
            "INSERT INTO {} (space, name, entity_type) VALUES ('s1', 'AMY HOOD', 'Concept'), "
            "('s1', 'IBM', 'Organization')"
        ).format(table)
    )
    before = _stored(conn, realm, "s1")
    res = resolve_entities(
        load_entities(conn, realm, "s1"),
        _decisions(("Amy Hood", "Person", "Chief Financial Officer", []), ("IBM", "Organization", "", [])),
    )
    assert write_entities(conn, realm, "s1", res, merge=merge_race_loser) == {"inserted": 0, "updated": 1}
    assert _stored(conn, realm, "s1") == [
        (before[0][0], "Amy Hood", "Person", "Chief Financial Officer", []),
        (before[1][0], "IBM", "Organization", "", []),
    ]
