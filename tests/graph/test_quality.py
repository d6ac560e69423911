"""Table 6's graph quality (§8.6) measured in SQL equals its definition over the frames (issue 15 item 2)."""

from __future__ import annotations

import re
from typing import Any

import polars as pl
import psycopg
import pytest
from psycopg import sql

from pgrag_dag import gate_rules as gates
from pgrag_dag.config import GateSettings
from pgrag_dag.gate_rules import identity_key
from pgrag_dag.graph.quality import (
    ORPHAN_FIX,
    PRONOUN_HEADS,
    graph_quality,
    judge_quality,
    measure_quality,
    quality_passed,
)
from pgrag_dag.graph.resolution import merge_race_loser, resolve_entities
from pgrag_dag.pipeline import index_documents, stage_relations
from pgrag_dag.store import db, graph, schema
from pgrag_dag.store import quality as store_quality
from pgrag_dag.store import relations as relation_store
from pgrag_dag.store.identifiers import qualified
from pgrag_dag.vocabulary import Vocabulary
from tests.demo_graph import demo_engine


def _both(
    conn: psycopg.Connection, realm: str, space: str, vocabulary: Vocabulary
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(measured in SQL, defined over the frames) in one transaction."""
    with conn.transaction():
        measured = measure_quality(conn, realm, space, vocabulary)
        defined = graph_quality(*relation_store.quality_frames(conn, realm, space), vocabulary)
    return measured, defined


def _entity(
    conn: psycopg.Connection,
    realm: str,
    space: str,
    name: str,
    aliases: list[str] | None = None,
    *,
    dormant: bool = False,
) -> int:
    """Insert an entity row by direct SQL, without identity keys (as a writer that knows none would)."""
    row = conn.execute(
        sql.SQL(
            "INSERT INTO {} (space, name, aliases, dormant_since) VALUES (%s, %s, %s, %s) RETURNING id"
        ).format(qualified(realm, "entities")),
        (space, name, aliases or [], "now" if dormant else None),
    ).fetchone()
    assert row is not None
    return int(row[0])


def _relation(
    conn: psycopg.Connection,
    realm: str,
    space: str,
    source: int,
    target: int,
    predicate: str,
    *,
    dormant: bool = False,
) -> None:
    conn.execute(
        sql.SQL(
            "INSERT INTO {} (space, source_id, target_id, predicate, dormant_since) "
            "VALUES (%s, %s, %s, %s, %s)"
        ).format(qualified(realm, "relations")),
        (space, source, target, predicate, "now" if dormant else None),
    )


def test_the_measurement_equals_the_definition_on_the_demo_graph_with_planted_defects(
    pg_dsn: str, realm: str
) -> None:
    engine = demo_engine(pg_dsn, realm)
    index_documents(engine, realm, "demo", communities=False)
    vocabulary = engine.settings.space_spec(realm, "demo").vocabulary_model()
    s = sql.Identifier(schema.schema_for(realm))
    with db.connect(pg_dsn, autocommit=True) as conn:
        # the graph writes stored every key: nothing is left to fill
        with conn.transaction():
            assert store_quality.fill_identity_keys(conn, realm, "demo") == 0
        measured, defined = _both(conn, realm, "demo", vocabulary)
        assert measured == defined
        assert (measured["entities"], measured["relations"], measured["duplicate_edge_rows"]) == (450, 603, 0)
        assert measured["vocabulary_predicate_share"] > 0.4 and measured["orphan_entities"] > 0

        def first(query: str, *args: Any) -> Any:
            row = conn.execute(sql.SQL(query).format(s=s), args).fetchone()
            assert row is not None
            return row[0] if len(row) == 1 else row

        babbage = first("SELECT id FROM {s}.entities WHERE name = 'Charles Babbage'")
        # fragmented: a vertex inserted under Charles Babbage's alias; one an UPDATE made the alias of the
        # lowest-id vertex (the trigger clears the stale alias keys); not a vertex that is its own first
        # alias holder, nor one only a dormant vertex holds as an alias
        fragment = _entity(conn, realm, "demo", "BABBAGE")
        low, high, own, later, held = [
            r[0]
            for r in conn.execute(
                sql.SQL(
                    "SELECT id FROM {s}.entities WHERE dormant_since IS NULL AND aliases = '{{}}' "
                    "AND id <> %s ORDER BY id"
                ).format(s=s),
                (fragment,),
            ).fetchall()[:5]
        ]
        name_of = dict(
            conn.execute(
                sql.SQL("SELECT id, name FROM {s}.entities WHERE id = ANY(%s)").format(s=s),
                ([high, own, held],),
            ).fetchall()
        )
        update = sql.SQL("UPDATE {s}.entities SET aliases = aliases || %s::text WHERE id = %s").format(s=s)
        conn.execute(update, (f" “{name_of[high].upper()}”", low))
        conn.execute(update, (name_of[own], own))
        conn.execute(update, (name_of[own].lower(), later))
        _entity(conn, realm, "demo", "Dormant Holder", [name_of[held]], dormant=True)
        assert first("SELECT count(*) FROM {s}.entity_keys WHERE entity_id = ANY(%s)", [low, own, later]) == 0
        # pronoun entities (a dormant one does not count) and names that only start like one
        for name in (
            "They",
            "Her Majesty",
            "Theodore",
            "the company",
            "Herb Alpert",
            "ONE",
            "İts",
            "The Beatles",
        ):
            _entity(conn, realm, "demo", name)
        _entity(conn, realm, "demo", "It", dormant=True)
        # duplicate edge rows: a case variant of a live edge; two variants on a new pair, one dormant; a
        # predicate that is not ASCII and duplicates nothing
        src, tgt, pred = first(
            "SELECT source_id, target_id, predicate FROM {s}.relations WHERE NOT negated ORDER BY id LIMIT 1"
        )
        _relation(conn, realm, "demo", src, tgt, pred.upper())
        _relation(conn, realm, "demo", babbage, low, "Born_In")
        _relation(conn, realm, "demo", babbage, low, "BORN_IN", dormant=True)
        _relation(conn, realm, "demo", babbage, low, "wörked_with")

        measured, defined = _both(conn, realm, "demo", vocabulary)
        assert measured == defined
        assert measured["fragmented_short_form_vertices"] == 2
        assert measured["fragmented_examples"] == [name_of[high], "BABBAGE"]
        assert measured["pronoun_entities"] == 4
        assert measured["pronoun_examples"] == ["They", "Her Majesty", "the company", "ONE"]
        assert measured["duplicate_edge_rows"] == 4
        assert measured["entities"] == 450 + 9 and measured["relations"] == 603 + 3
        # the keys the measurement filled are the identity keys
        keys = conn.execute(
            sql.SQL(
                "SELECT name, aliases, name_key, alias_keys FROM {s}.entities e "
                "LEFT JOIN {s}.entity_keys k ON k.entity_id = e.id"
            ).format(s=s)
        ).fetchall()
        assert all(store_quality.identity_keys(n, a) == (nk, ak) for n, a, nk, ak in keys)

    # the relations stage reports the measurement (its rebuild leaves the planted edges dormant)
    passed, reported = stage_relations(engine, realm, "demo").checks["graph_quality"]
    with db.connect(pg_dsn, autocommit=True) as conn:
        defined = graph_quality(*relation_store.quality_frames(conn, realm, "demo"), vocabulary)
    assert {k: reported[k] for k in defined} == defined
    assert not passed and reported["pronoun_entities"] == 4 and reported["duplicate_edge_rows"] >= 4
    # judged for the demo's model extractor (issue 31 item 1): each defect one blocking line with its examples
    # and what to run; 14 orphans of 459 entities is no warning
    assert reported["extractor"] == "llm" and reported["warnings"] == []
    assert [line.split(" (")[0] for line in reported["blocking"]] == [
        f"duplicate_edge_rows {reported['duplicate_edge_rows']}",
        "fragmented_short_form_vertices 2",
        "pronoun_entities 4",
    ]
    assert "e.g. They, Her Majesty, the company, ONE)" in reported["blocking"][2]
    assert all("`pgrag index REALM.SPACE --full`" in line for line in reported["blocking"])


@pytest.mark.parametrize(
    ("extractor", "orphans", "warns"),
    [
        ("llm", 51, True),
        ("llm", 50, False),
        ("nlp", 75, False),
        ("nlp", 91, True),
        ("cooccurrence", 60, True),
        ("my_extractor", 51, True),
    ],
)
def test_the_orphan_share_warns_above_the_extractors_own_ceiling_and_never_blocks(
    extractor: str, orphans: int, warns: bool
) -> None:
    metrics = {
        "entities": 100,
        "orphan_entities": orphans,
        "duplicate_edge_rows": 0,
        "fragmented_short_form_vertices": 0,
        "pronoun_entities": 0,
    }
    judged = judge_quality(metrics, extractor)
    assert quality_passed(judged) and judged["blocking"] == []
    assert len(judged["warnings"]) == int(warns)
    if warns:
        warning = judged["warnings"][0]
        assert warning.startswith(f"orphan_entities {orphans} of 100 ({orphans}%, above ")
        assert ORPHAN_FIX.get(extractor, ORPHAN_FIX["llm"]) in warning


TRICKY_NAMES = [
    # pronominal: any case; a possessive or demonstrative before any whitespace; "the <noun>" (before a
    # newline too)
    "she",
    "THEM",
    "Whom",
    "his\u00a0dog",
    "Those\u2003people",
    "my own",
    "the firm",
    "THE GOVERNMENT",
    "the company\n",
    # not pronominal: a pronoun inside a word, before punctuation or after a space; the dotted capital I and
    # the Kelvin sign (lowercased they are no ASCII pronoun); an overlong relative name
    "Hershey",
    "Itself-Made",
    " she",
    "İ",
    "İt",
    "\u212aelvin",
    "Mine",
    "the companies",
    "his" + "x" * 250,
    "hiS " + "x" * 250,
]


def test_the_measurement_is_exact_on_tricky_names_and_keys(conn: psycopg.Connection, realm: str) -> None:
    """Names whose identity keys need Python (NFC, invisible characters, quotes, Unicode case and spaces)
    and names on the edge of the pronoun gate: SQL narrows, the Python definitions decide."""
    for name in TRICKY_NAMES:
        _entity(conn, realm, "s", name)
    # fragmented by keys only Python computes: NFD vs NFC, a zero-width joiner, wrapping quotes, ß, ΣΑΣ
    holder = _entity(
        conn, realm, "s", "Holder", ["Cafe\u0301", "Ada\u200dLovelace", "«Straße»", "ΟΔΟΣ", "  X  Y "]
    )
    names = ["Café", "adalovelace", "STRASSE", "straße", "οδος", "οδοσ", "x y"]
    ids = {n: _entity(conn, realm, "s", n) for n in names}
    other = _entity(conn, realm, "t", "Café")  # another space
    _relation(conn, realm, "s", holder, ids["Café"], "knows")
    _relation(conn, realm, "t", other, _entity(conn, realm, "t", "Other"), "KNOWS")
    vocabulary = Vocabulary.build(terms=["knows"])
    measured, defined = _both(conn, realm, "s", vocabulary)
    assert measured == defined
    assert measured["pronoun_examples"] == TRICKY_NAMES[:9]
    expected = [
        n
        for n in names
        if identity_key(n)
        in {identity_key(a) for a in ["Cafe\u0301", "Ada\u200dLovelace", "«Straße»", "ΟΔΟΣ", "  X  Y "]}
    ]
    assert measured["fragmented_examples"] == expected == ["Café", "adalovelace", "straße", "οδος", "x y"]
    assert (
        measured["vocabulary_predicate_share"] == 1.0 and measured["orphan_entities"] == len(TRICKY_NAMES) + 6
    )
    assert _both(conn, realm, "t", vocabulary)[0] == _both(conn, realm, "t", vocabulary)[1]
    assert _both(conn, realm, "t", Vocabulary())[0]["vocabulary_predicate_share"] is None


def test_the_identity_key_of_every_pronominal_name_starts_with_a_pronoun_head() -> None:
    """The SQL pre-filter's premise (:data:`PRONOUN_HEADS`), over the gate's words in every case, before
    every whitespace character, with quotes, invisible characters and combining marks around."""
    assert all(re.fullmatch("[a-z]+", h) for h in PRONOUN_HEADS)
    group = re.match(r"\^\(\?:\(\?:([a-z|]+)\)\\s\|the ", gates._RELATIVE.pattern)
    assert (
        group is not None and set(group.group(1).split("|")) <= set(PRONOUN_HEADS) and "the" in PRONOUN_HEADS
    )
    spaces = [c for c in map(chr, range(0x3000 + 1)) if c.isspace()]
    words = [*PRONOUN_HEADS, "İt", "\u212ait", "ıt"]
    tails = ["", "company", "company\n", "“dog”", "\u200bx", "\u0301x", "x\u00ad"]
    names = [
        f"{lead}{w}{sp}{tail}"
        for lead in ("", "'", "\u200b")
        for w in words
        for form in (str.lower, str.upper, str.title)
        for w in [form(w)]
        for sp in ["", *spaces]
        for tail in tails
    ]
    settings = GateSettings()
    pronominal = [n for n in names if gates.name_gate(n, settings) is gates.Gate.PRONOMINAL_NAME]
    assert len(pronominal) > 1000
    assert all(identity_key(n).split(" ")[0] in PRONOUN_HEADS for n in pronominal)


def test_graph_writes_store_the_identity_keys_and_an_edit_by_sql_clears_them(
    conn: psycopg.Connection, realm: str
) -> None:
    table, s = qualified(realm, "entities"), sql.Identifier(schema.schema_for(realm))

    def decisions(*records: tuple[str, list[str]]) -> pl.DataFrame:
        return pl.DataFrame(
            [
                {"chunk_id": 1, "name": n, "entity_type": "Person", "description": "", "aliases": a}
                for n, a in records
            ],
            schema={
                "chunk_id": pl.Int64,
                "name": pl.String,
                "entity_type": pl.String,
                "description": pl.String,
                "aliases": pl.List(pl.String),
            },
        )

    def keys() -> list[tuple[Any, ...]]:
        return conn.execute(
            sql.SQL(
                "SELECT name, aliases, name_key, alias_keys FROM {s}.entities e "
                "LEFT JOIN {s}.entity_keys k ON k.entity_id = e.id ORDER BY e.id"
            ).format(s=s)
        ).fetchall()

    with conn.transaction():  # inserted
        graph.write_entities(
            conn,
            realm,
            "s",
            resolve_entities(
                graph.load_entities(conn, realm, "s"),
                decisions(("Charles Babbage", ["Babbage"]), ("Ada", [])),
            ),
            merge=merge_race_loser,
        )
    with conn.transaction():  # updated: a new alias; a longer canonical name (the short one becomes an alias)
        graph.write_entities(
            conn,
            realm,
            "s",
            resolve_entities(
                graph.load_entities(conn, realm, "s"),
                decisions(("Charles Babbage", ["C.\u00a0Babbage"]), ("Ada Lovelace", ["Ada"])),
            ),
            merge=merge_race_loser,
        )
    rows = keys()
    assert [r[0] for r in rows] == ["Charles Babbage", "Ada Lovelace"]
    assert rows[0][1:] == (["Babbage", "C.\u00a0Babbage"], "charles babbage", ["babbage", "c. babbage"])
    assert all(store_quality.identity_keys(n, a) == (nk, ak) for n, a, nk, ak in rows)
    # an edit of the name or the aliases by SQL drops the entity's keys; one that changes neither keeps them
    conn.execute(sql.SQL("UPDATE {} SET name = 'Lovelace' WHERE name = 'Ada Lovelace'").format(table))
    conn.execute(
        sql.SQL("UPDATE {} SET description = 'x', aliases = aliases WHERE name = 'Charles Babbage'").format(
            table
        )
    )
    assert [(r[2], r[3]) for r in keys()] == [("charles babbage", ["babbage", "c. babbage"]), (None, None)]
    with conn.transaction():
        assert store_quality.fill_identity_keys(conn, realm, "s") == 1
    assert all(store_quality.identity_keys(n, a) == (nk, ak) for n, a, nk, ak in keys())


def test_a_realm_of_schema_12_gets_the_identity_keys_of_its_entities_at_upgrade(
    conn: psycopg.Connection, realm: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The backfill runs once, in batches, over every space, when an older realm is upgraded."""
    s = sql.Identifier(schema.schema_for(realm))
    conn.execute(sql.SQL("DROP TRIGGER entity_keys_stale ON {}.entities").format(s))  # as schema 12 left it
    conn.execute(sql.SQL("DROP FUNCTION {}.entity_keys_stale()").format(s))
    conn.execute(sql.SQL("DROP TABLE {}.entity_keys").format(s))
    conn.execute(sql.SQL("DROP INDEX {}.relations_odd_predicate").format(s))
    names = [*TRICKY_NAMES, "Cafe\u0301", "“Quoted”", "Ada\u200d Lovelace", "ΣΑΣ"]
    for i, name in enumerate(names):
        conn.execute(
            sql.SQL("INSERT INTO {}.entities (space, name, aliases) VALUES (%s, %s, %s)").format(s),
            ("s" if i % 2 else "t", name, [name.upper(), f" {name}\u200b "] if i % 3 else []),
        )
    conn.execute("UPDATE pgrag__control.realms SET schema_version = 12 WHERE realm = %s", (realm,))
    monkeypatch.setattr(store_quality, "FILL_BATCH", 4)
    assert schema.init_realm(conn, realm, embedding_model="hashing-sha256", dim=384) is True
    rows = conn.execute(
        sql.SQL(
            "SELECT name, aliases, name_key, alias_keys FROM {s}.entities e "
            "LEFT JOIN {s}.entity_keys k ON k.entity_id = e.id ORDER BY e.id"
        ).format(s=s)
    ).fetchall()
    assert [r[0] for r in rows] == names
    assert all((nk, ak) == (identity_key(n), [identity_key(a) for a in al]) for n, al, nk, ak in rows)
    assert rows[len(TRICKY_NAMES)][2:] == ("café", ["café", "café"])
    assert conn.execute(
        "SELECT to_regclass(%s) IS NOT NULL", (f"{schema.schema_for(realm)}.relations_odd_predicate",)
    ).fetchone() == (True,)
    assert schema.init_realm(conn, realm, embedding_model="hashing-sha256", dim=384) is False
