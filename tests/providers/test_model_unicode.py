"""Model output of any Unicode (issue 13 item 1), through real litellm calls to the stub server, the
gates, resolution, PostgreSQL and a query: NUL never reaches PostgreSQL raw, a lone surrogate refuses
only its entity or triple (gate ``unencodable_text``), and CJK, right-to-left and emoji names round-trip."""

from __future__ import annotations

import json

from psycopg import sql

from pgrag_dag.pipeline import index_documents
from pgrag_dag.query import QueryParam, query_data
from pgrag_dag.store import db
from pgrag_dag.store.schema import schema_for
from tests.fix_corpus import SmallCorpus, extraction_answer


def _rows(dsn: str, realm: str, query: str) -> list[tuple]:
    with db.connect(dsn) as conn:
        return conn.execute(sql.SQL(query).format(s=sql.Identifier(schema_for(realm)))).fetchall()


ESCAPES = {"@NUL@": "\\u0000", "@SURROGATE@": "\\udbff"}
"""Placeholders for JSON escapes the model writes itself (six ASCII characters in its text)."""


def _with(extra_entities: list[dict], extra_triples: list[dict]):  # type: ignore[no-untyped-def]
    """The fixture's answer plus some records, in every chunk that names an entity."""

    def answer(messages: list[dict[str, str]]) -> str:
        out = json.loads(extraction_answer(messages))
        if not out.get("entities"):
            return json.dumps(out)
        out["entities"] += extra_entities
        out["triples"] += extra_triples
        text = json.dumps(out, ensure_ascii=False)
        for placeholder, escape in ESCAPES.items():
            text = text.replace(placeholder, escape)
        return text

    return answer


def test_issue13_nul_and_lone_surrogates_in_model_responses_refuse_only_their_records(
    small_corpus: SmallCorpus, realm: str
) -> None:
    # raw characters in the response (the stub's HTTP JSON carries them as escapes, so litellm hands them
    # over as characters) and JSON escapes the model wrote itself
    small_corpus.server.answer = _with(
        [
            {
                "name": "Menabrea\u0000",
                "type": "Person",
                "description": "Italian\u0000 engineer@NUL@.",
                "aliases": [],
            },
            {"name": "Bad\ud800Name", "type": "Person", "description": "", "aliases": []},
            {"name": "Escaped@SURROGATE@", "type": "Person", "description": "", "aliases": []},
            {"name": "Turin", "type": "Place", "description": "A city", "aliases": ["Torino\udc00"]},
        ],
        [
            {
                "subject": "Ada Lovelace",
                "predicate": "translated",
                "object": "Menabrea",
                "confidence": 0.9,
                "description": "Ada translated \ud83d Menabrea.",
            }
        ],
    )
    engine = small_corpus.engine()
    meta = {r.stage: r.metadata for r in index_documents(engine, realm, "main", communities=False)}
    assert meta["raw_extractions"]["chunks_failed"] == 0
    refused = _rows(
        engine.dsn,
        realm,
        "SELECT DISTINCT kind, coalesce(name, subject), offending_value FROM {s}.gate_decisions "
        "WHERE gate = 'unencodable_text'",
    )
    assert {(k, n) for k, n, _ in refused} == {
        ("entity", "Bad\ufffdName"),
        ("entity", "Escaped\ufffd"),
        ("entity", "Turin"),
        ("triple", "Ada Lovelace"),
    }
    values = {v for _, _, v in refused}
    assert {'name: "Bad\\ud800Name"', 'name: "Escaped\\udbff"', 'aliases: ["Torino\\udc00"]'} <= values
    names = dict(_rows(engine.dsn, realm, "SELECT name, description FROM {s}.entities"))
    assert names["Menabrea"] == "Italian engineer." and "Turin" not in names
    assert {"Charles Babbage", "Ada Lovelace", "Analytical Engine"} <= set(
        names
    )  # every other record is accepted
    raw = _rows(
        engine.dsn,
        realm,
        "SELECT raw_text, parsed::text FROM {s}.raw_extractions WHERE raw_text LIKE '%%Menabrea%%'",
    )
    assert raw and all(
        "\\u0000" in t and "\x00" not in t and "\\u0000" not in p for t, p in raw
    )  # kept, escaped
    cached = _rows(
        engine.dsn,
        realm,
        "SELECT count(*) FROM pgrag__control.llm_cache WHERE response LIKE '%%Bad\\\\ud800Name%%'",
    )
    assert cached[0][0] >= 1  # the response was cached (escaped), so a rerun replays it


NAMES = {  # name -> type; every script the issue names, a ZWJ emoji sequence and a Persian ZWNJ
    "李白": "Person",
    "東京大学": "Organization",
    "محمد بن موسى الخوارزمي": "Person",
    "שלום עליכם": "Person",
    "👩\u200d🔬 Lab": "Organization",
    "کتاب\u200cخانه ملی": "Organization",
}


def test_issue13_cjk_right_to_left_and_emoji_names_round_trip_exactly(
    small_corpus: SmallCorpus, realm: str
) -> None:
    ents = [
        {"name": n, "type": t, "description": f"{n} — described.", "aliases": []} for n, t in NAMES.items()
    ]
    ents.append(
        {"name": "\u200d👩🔬 Lab\u200b", "type": "Organization", "description": "", "aliases": []}
    )  # same identity
    small_corpus.server.answer = _with(
        ents,
        [
            {
                "subject": "李白",
                "predicate": "worked_at",
                "object": "👩\u200d🔬 Lab",
                "confidence": 0.9,
                "description": "x",
            },
            {
                "subject": "محمد بن موسى الخوارزمي",
                "predicate": "wrote_in",
                "object": "کتاب\u200cخانه ملی",
                "confidence": 0.9,
                "description": "y",
            },
        ],
    )
    engine = small_corpus.engine()
    index_documents(engine, realm, "main", communities=False)
    stored = {n for (n,) in _rows(engine.dsn, realm, "SELECT name FROM {s}.entities")}
    assert set(NAMES) <= stored
    assert (
        not {"👩🔬 Lab", "کتابخانه ملی"} & stored
    )  # one vertex per identity, its stored name the one with the joiner
    edges = {
        (s, o)
        for s, o in _rows(
            engine.dsn,
            realm,
            """SELECT a.name, b.name FROM {s}.relations r
        JOIN {s}.entities a ON a.id = r.source_id JOIN {s}.entities b ON b.id = r.target_id""",
        )
    }
    assert {("李白", "👩\u200d🔬 Lab"), ("محمد بن موسى الخوارزمي", "کتاب\u200cخانه ملی")} <= edges
    res = query_data(
        "Where did 李白 work, and what did محمد بن موسى الخوارزمي write?",
        QueryParam(space="main", top_k=40),
        dsn=engine.dsn,
        realm=realm,
        embedder=engine.embedder(),
    )
    found = {e["name"] for e in res.entities} | {r[k] for r in res.relations for k in ("subject", "object")}
    assert set(NAMES) <= found, found - set(NAMES)
