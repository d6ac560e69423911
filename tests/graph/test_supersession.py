"""Supersession by document order, belief time, dormancy and delete_document (paper §5.2, §5.3, §5.5)."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from datetime import UTC
from pathlib import Path

import polars as pl
import pytest
import yaml
from psycopg import sql

from pgrag_dag.config import load_settings
from pgrag_dag.engine import Engine
from pgrag_dag.errors import ConfigurationError
from pgrag_dag.graph.supersession import detect_contradictions, supersede
from pgrag_dag.pipeline import delete_document, index_documents
from pgrag_dag.store.identifiers import qualified
from pgrag_dag.testing.stub_server import StubServer

CHUNK = re.compile(r"<<<CHUNK\n(.*)\nCHUNK>>>", re.DOTALL)
# sentence -> triple the "model" extracts from it
FACTS = {
    "Athos is an ally of d'Artagnan.": ("Athos", "ally_of", "d'Artagnan", False),
    "Athos taught d'Artagnan to fence.": ("Athos", "taught", "d'Artagnan", False),
    "Athos is now an enemy of d'Artagnan.": ("Athos", "enemy_of", "d'Artagnan", False),
    "Athos is again an ally of d'Artagnan.": ("Athos", "ally_of", "d'Artagnan", False),
    "Rochefort serves Richelieu.": ("Rochefort", "serves", "Richelieu", False),
    "Aramis does not serve Richelieu.": ("Aramis", "serves", "Richelieu", True),
    "Aramis serves Richelieu.": ("Aramis", "serves", "Richelieu", False),
    "Porthos lives in Paris.": ("Porthos", "lives_in", "Paris", False),
    "Porthos lives in Pierrefonds.": ("Porthos", "lives_in", "Pierrefonds", False),
    "Treville is the captain of the Musketeers.": ("Treville", "captain_of", "Musketeers", False),
    "Athos is the captain of the Musketeers.": ("Athos", "captain_of", "Musketeers", False),
    "Athos is the captain of the Guards.": ("Athos", "captain_of", "Guards", False),
}


def answer(messages: list[dict[str, str]]) -> str:
    user = messages[-1]["content"]
    if messages[0]["content"].startswith("You decide whether two statements"):
        return json.dumps({"contradicts": "lives_in" in user, "explanation": "one residence at a time"})
    if user.startswith("Some entities"):
        return '{"entities": [], "triples": []}'
    text = CHUNK.search(user).group(1)  # type: ignore[union-attr]
    triples, names = [], set()
    for sentence, (s, p, o, neg) in FACTS.items():
        if sentence in text:
            names |= {s, o}
            triples.append(
                {
                    "subject": s,
                    "predicate": p,
                    "object": o,
                    "negated": neg,
                    "confidence": 0.9,
                    "description": sentence,
                    "valid_from": None,
                    "valid_to": None,
                }
            )
    ents = [{"name": n, "type": "Person", "description": "", "aliases": []} for n in sorted(names)]
    return json.dumps({"entities": ents, "triples": triples})


@pytest.fixture
def novel(tmp_path: Path, pg_dsn: str, realm: str) -> Iterator[tuple[Path, Engine, StubServer]]:
    (tmp_path / "docs").mkdir()
    with StubServer(answer) as server:
        cfg = {
            "database_url": pg_dsn,
            "data_dir": str(tmp_path / "data"),
            "llm": {
                "models": [f"openai/novel-{uuid.uuid4().hex[:8]}"],
                "api_base": server.base_url,
                "api_key": "x",
                "deadline_s": 10,
                "max_retries": 0,
            },
            "realms": {
                realm: {
                    "spaces": {
                        "books": {"preset": "narrative", "sources": [{"path": "docs", "glob": "*.txt"}]}
                    }
                }
            },
        }
        (tmp_path / "pgrag.yaml").write_text(yaml.safe_dump(cfg))
        yield tmp_path, Engine.from_settings(load_settings(tmp_path / "pgrag.yaml")), server


def _write(root: Path, name: str, *sentences: str) -> None:
    (root / "docs" / name).write_text(" ".join(sentences) + "\n")


def _edges(engine: Engine, realm: str) -> dict[tuple[str, str, str, bool], tuple[str | None, bool, bool]]:
    """(subject, predicate, object, negated) → (superseding predicate, has t_expired, dormant)."""
    with engine.connect() as conn:
        rows = conn.execute(
            sql.SQL(
                """SELECT s.name, r.predicate, o.name, r.negated, sup.predicate, r.t_expired IS NOT NULL,
                      r.dormant_since IS NOT NULL
                 FROM {r} r JOIN {e} s ON s.id = r.source_id JOIN {e} o ON o.id = r.target_id
                 LEFT JOIN {r} sup ON sup.id = r.superseded_by"""
            ).format(r=qualified(realm, "relations"), e=qualified(realm, "entities"))
        ).fetchall()
    return {(a, p, b, n): (sp, exp, dorm) for a, p, b, n, sp, exp, dorm in rows}


def test_an_alliance_reversed_by_a_later_document_is_superseded_and_unrelated_relations_stay(
    novel, realm
) -> None:  # type: ignore[no-untyped-def]
    root, engine, _ = novel
    _write(root, "01_book.txt", "Athos is an ally of d'Artagnan.", "Athos taught d'Artagnan to fence.")
    _write(root, "02_book.txt", "Athos is now an enemy of d'Artagnan.")
    meta = {r.stage: r.metadata for r in index_documents(engine, realm, "books", communities=False)}
    edges = _edges(engine, realm)
    assert edges[("Athos", "ally_of", "d'Artagnan", False)] == ("enemy_of", True, False)
    assert edges[("Athos", "enemy_of", "d'Artagnan", False)] == (None, False, False)
    assert edges[("Athos", "taught", "d'Artagnan", False)] == (None, False, False)  # not in the group: stays
    assert meta["relations"]["supersessions_by_reason"] == {"group": 1}
    # a third book renews the alliance: the enemy edge is superseded in turn, the alliance is current again
    _write(root, "03_book.txt", "Athos is again an ally of d'Artagnan.")
    index_documents(engine, realm, "books", communities=False)
    edges = _edges(engine, realm)
    assert edges[("Athos", "enemy_of", "d'Artagnan", False)] == ("ally_of", True, False)
    assert edges[("Athos", "ally_of", "d'Artagnan", False)] == (None, False, False)


def test_document_order_decides_never_file_dates_or_extraction_order(novel, realm) -> None:  # type: ignore[no-untyped-def]
    root, engine, _ = novel
    # file names give the order: the enemy book is *earlier* here, so the alliance wins
    _write(root, "01_book.txt", "Athos is now an enemy of d'Artagnan.")
    _write(root, "02_book.txt", "Athos is an ally of d'Artagnan.")
    index_documents(engine, realm, "books", communities=False)
    edges = _edges(engine, realm)
    assert edges[("Athos", "enemy_of", "d'Artagnan", False)][0] == "ally_of"


def test_a_later_denial_supersedes_the_assertion_with_the_positive_predicate(novel, realm) -> None:  # type: ignore[no-untyped-def]
    root, engine, _ = novel
    _write(root, "01_book.txt", "Aramis serves Richelieu.", "Rochefort serves Richelieu.")
    _write(root, "02_book.txt", "Aramis does not serve Richelieu.")
    index_documents(engine, realm, "books", communities=False)
    edges = _edges(engine, realm)
    assert edges[("Aramis", "serves", "Richelieu", False)] == ("serves", True, False)
    assert edges[("Aramis", "serves", "Richelieu", True)] == (None, False, False)
    assert edges[("Rochefort", "serves", "Richelieu", False)] == (None, False, False)


def test_delete_document_makes_its_only_facts_dormant_and_restores_what_it_superseded(novel, realm) -> None:  # type: ignore[no-untyped-def]
    root, engine, server = novel
    _write(root, "01_book.txt", "Athos is an ally of d'Artagnan.", "Rochefort serves Richelieu.")
    _write(root, "02_book.txt", "Athos is now an enemy of d'Artagnan.", "Porthos lives in Paris.")
    index_documents(engine, realm, "books", communities=False)
    calls = len(server.requests)
    delete_document(engine, realm, "books", "02_book.txt")
    assert len(server.requests) == calls  # no model call
    edges = _edges(engine, realm)
    assert edges[("Athos", "enemy_of", "d'Artagnan", False)] == (None, False, True)  # dormant, not deleted
    assert edges[("Athos", "ally_of", "d'Artagnan", False)] == (None, False, False)  # current again
    with engine.connect() as conn:
        dormant = dict(
            conn.execute(
                sql.SQL("SELECT name, dormant_since IS NOT NULL FROM {}").format(qualified(realm, "entities"))
            ).fetchall()
        )
    assert dormant["Porthos"] and dormant["Paris"] and not dormant["Athos"]
    # revival: a new document mentions Porthos again
    (root / "docs" / "02_book.txt").unlink()
    _write(root, "03_book.txt", "Porthos lives in Pierrefonds.")
    index_documents(engine, realm, "books", communities=False)
    with engine.connect() as conn:
        dormant = dict(
            conn.execute(
                sql.SQL("SELECT name, dormant_since IS NOT NULL FROM {}").format(qualified(realm, "entities"))
            ).fetchall()
        )
    assert not dormant["Porthos"] and dormant["Paris"]
    with pytest.raises(ConfigurationError, match="no document"):
        delete_document(engine, realm, "books", "02_book.txt")


def test_contradiction_detection_asks_only_about_the_residue(novel, realm) -> None:  # type: ignore[no-untyped-def]
    root, engine, server = novel
    engine = Engine.from_settings(
        load_settings(root / "pgrag.yaml", temporal={"contradiction_detection": True})
    )
    _write(root, "01_book.txt", "Porthos lives in Paris.", "Athos is an ally of d'Artagnan.")
    _write(root, "02_book.txt", "Porthos lives in Pierrefonds.", "Athos is now an enemy of d'Artagnan.")
    index_documents(engine, realm, "books", communities=False)
    asked = [
        r["body"]["messages"][1]["content"]
        for r in server.requests
        if r["body"]["messages"][0]["content"].startswith("You decide whether")
    ]
    assert len(asked) == 1 and "lives_in Paris" in asked[0]  # the alliance was settled declaratively
    edges = _edges(engine, realm)
    assert edges[("Porthos", "lives_in", "Paris", False)] == ("lives_in", True, False)
    with engine.connect() as conn:
        payload = conn.execute(
            sql.SQL(
                "SELECT payload FROM {} WHERE superseded_by IS NOT NULL AND predicate = 'lives_in'"
            ).format(qualified(realm, "relations"))
        ).fetchone()
    assert payload is not None and payload[0]["supersession"] == {
        "reason": "contradiction",
        "explanation": "one residence at a time",
    }


def test_supersession_operator_on_frames() -> None:
    rel = pl.DataFrame(
        {
            "source_id": [1, 1, 1, 2],
            "target_id": [2, 2, 2, 3],
            "predicate": ["ally_of", "enemy_of", "taught", "ally_of"],
            "negated": [False, False, False, False],
            "asserted_doc_order": [0, 1, 2, 0],
            "asserted_chunk_index": [0, 0, 0, 0],
            "rendered": ["a", "b", "c", "d"],
            "source_name": ["x"] * 4,
        }
    )
    out = supersede(rel, (("ally_of", "enemy_of"),))
    assert out.select("row", "superseded_by_row", "reason").rows() == [(0, 1, "group")]
    assert detect_contradictions(rel, out, (("ally_of", "enemy_of"),), client=None, max_pairs=0).height == 0  # type: ignore[arg-type]


def test_the_supersession_audit_refuses_an_earlier_winner_another_pair_or_another_group() -> None:
    from pgrag_dag.errors import ContractError
    from pgrag_dag.graph.supersession import SUPERSESSION_SCHEMA
    from pgrag_dag.operators import contracts
    from pgrag_dag.pipeline import supersession_audit

    rel = pl.DataFrame(
        {
            "source_id": [1, 1, 1, 2, 1],
            "target_id": [2, 2, 2, 3, 2],
            "predicate": ["ally_of", "enemy_of", "taught", "ally_of", "enemy_of"],
            "negated": [False, False, False, False, False],
            "asserted_doc_order": [0, 1, 2, 3, 1],
            "asserted_chunk_index": [0, 0, 0, 0, 1],
        }
    )
    groups = (("ally_of", "enemy_of"),)

    def audit(*rows: tuple[int, int, str]) -> pl.DataFrame:
        frame = pl.DataFrame(
            [{"row": r, "superseded_by_row": w, "reason": why, "explanation": None} for r, w, why in rows],
            schema=SUPERSESSION_SCHEMA,
        )
        return supersession_audit(rel, frame, groups)

    ok = audit((0, 1, "group"), (1, 4, "group"))  # same document, later chunk: later too
    assert ok.select("later", "same_pair", "same_group").rows() == [(True, True, True), (True, True, True)]
    contracts.validate(contracts.SupersessionContract, ok)
    for bad in [
        (1, 0, "group"),  # the winner is earlier
        (0, 3, "group"),  # another ordered pair
        (0, 2, "group"),  # 'taught' is in no group
        (2, 3, "negation"),
    ]:  # a negation flip on another pair
        with pytest.raises(ContractError):
            contracts.validate(contracts.SupersessionContract, audit(bad))
    assert (
        audit().height == 0
        and supersession_audit(rel, audit().select(list(SUPERSESSION_SCHEMA)), ()).height == 0
    )


def test_as_believed_at_reconstructs_what_the_graph_believed_before_a_later_document(novel, realm) -> None:  # type: ignore[no-untyped-def]
    import time
    from datetime import datetime

    from pgrag_dag.query import QueryParam, query_data

    root, engine, _ = novel
    _write(root, "01_book.txt", "Athos is an ally of d'Artagnan.", "Athos taught d'Artagnan to fence.")
    index_documents(engine, realm, "books", communities=False)
    time.sleep(0.05)
    before_book_two = datetime.now(UTC)
    time.sleep(0.05)
    _write(root, "02_book.txt", "Athos is now an enemy of d'Artagnan.")
    index_documents(engine, realm, "books", communities=False)

    def believed(**kw: object) -> set[tuple[str, bool]]:
        res = query_data(
            "Athos and d'Artagnan",
            QueryParam(space="books", **kw),  # type: ignore[arg-type]
            dsn=engine.dsn,
            realm=realm,
            embedder=engine.embedder(),
        )
        return {(r["predicate"], r["superseded"]) for r in res.relations}

    assert believed() == {("enemy_of", False), ("taught", False)}
    then = believed(as_believed_at=before_book_two)
    assert then == {("ally_of", False), ("taught", False)}  # the alliance, as it was believed then
    res = query_data(
        "Athos and d'Artagnan",
        QueryParam(space="books", as_believed_at=before_book_two),
        dsn=engine.dsn,
        realm=realm,
        embedder=engine.embedder(),
    )
    assert all("02_book" not in c["doc_key"] for c in res.chunks)  # nor did it know the second book
    assert believed(include_superseded=True) == {("enemy_of", False), ("taught", False), ("ally_of", True)}


def test_single_valued_predicates_supersede_on_either_side_incrementally_and_restore_on_delete(
    novel, realm
) -> None:  # type: ignore[no-untyped-def]
    """captain_of holds one subject per object (the narrative preset), lives_in one object per subject
    (declared here): a later document's other value supersedes the earlier across entity pairs, with no
    model call, on the incremental path; deleting the later document restores the earlier value."""
    root, engine, server = novel
    cfg = yaml.safe_load((root / "pgrag.yaml").read_text())
    cfg["realms"][realm]["spaces"]["books"]["single_valued"] = {"lives_in": "object"}
    (root / "pgrag.yaml").write_text(yaml.safe_dump(cfg))
    engine = Engine.from_settings(load_settings(root / "pgrag.yaml"))
    _write(root, "01_book.txt", "Treville is the captain of the Musketeers.", "Porthos lives in Paris.")
    index_documents(engine, realm, "books", communities=False)
    _write(
        root,
        "02_book.txt",
        "Athos is the captain of the Musketeers.",
        "Athos is the captain of the Guards.",
        "Porthos lives in Pierrefonds.",
    )
    meta = {r.stage: r.metadata for r in index_documents(engine, realm, "books", communities=False)}
    assert meta["relations"]["mode"] == "incremental"
    assert meta["relations"]["supersessions_by_reason"] == {"single_valued": 2}
    assert not [r for r in server.requests if "decide whether" in r["body"]["messages"][0]["content"]]
    edges = _edges(engine, realm)
    assert edges[("Treville", "captain_of", "Musketeers", False)] == ("captain_of", True, False)
    assert edges[("Athos", "captain_of", "Musketeers", False)] == (None, False, False)
    assert edges[("Athos", "captain_of", "Guards", False)] == (None, False, False)  # one subject per object
    assert edges[("Porthos", "lives_in", "Paris", False)] == ("lives_in", True, False)
    assert edges[("Porthos", "lives_in", "Pierrefonds", False)] == (None, False, False)
    with engine.connect() as conn:
        reasons = conn.execute(
            sql.SQL(
                "SELECT payload->'supersession'->>'reason' FROM {} WHERE superseded_by IS NOT NULL"
            ).format(qualified(realm, "relations"))
        ).fetchall()
    assert reasons == [("single_valued",), ("single_valued",)]
    # a third book names the current captain again: the earlier one stays superseded (by the latest)
    _write(root, "03_book.txt", "Athos is the captain of the Musketeers.")
    index_documents(engine, realm, "books", communities=False)
    treville = _edges(engine, realm)[("Treville", "captain_of", "Musketeers", False)]
    assert treville == ("captain_of", True, False)
    (root / "docs" / "03_book.txt").unlink()
    index_documents(engine, realm, "books", communities=False)
    delete_document(engine, realm, "books", "02_book.txt")
    edges = _edges(engine, realm)
    assert edges[("Treville", "captain_of", "Musketeers", False)] == (None, False, False)
    assert edges[("Porthos", "lives_in", "Paris", False)] == (None, False, False)
    assert edges[("Porthos", "lives_in", "Pierrefonds", False)] == (None, False, True)


def test_single_valued_supersession_on_frames_and_its_audit() -> None:
    from pgrag_dag.errors import ContractError
    from pgrag_dag.operators import contracts
    from pgrag_dag.pipeline import supersession_audit

    single = {"headquartered_in": "object", "cfo_of": "subject"}
    rel = pl.DataFrame(
        {  # 0-1: one company's headquarters; 2-3: one company's CFO; 4: another company's; 5: a denial
            "source_id": [1, 1, 10, 11, 11, 1],
            "target_id": [2, 3, 1, 1, 4, 5],
            "predicate": [
                "headquartered_in",
                "headquartered_in",
                "cfo_of",
                "cfo_of",
                "cfo_of",
                "headquartered_in",
            ],
            "negated": [False, False, False, False, False, True],
            "asserted_doc_order": [0, 1, 0, 2, 1, 3],
            "asserted_chunk_index": [0, 0, 0, 0, 0, 0],
            "rendered": list("abcdef"),
            "source_name": ["x"] * 6,
        }
    )
    out = supersede(rel, (), single)
    assert out.select("row", "superseded_by_row", "reason").rows() == [
        (0, 1, "single_valued"),
        (2, 3, "single_valued"),
    ]
    assert supersede(rel, ()).height == 0  # nothing declared, nothing superseded
    audit = supersession_audit(rel, out, (), single)
    assert audit["same_single_end"].to_list() == [True, True]
    contracts.validate(contracts.SupersessionContract, audit)
    for bad in [(2, 4), (0, 3), (4, 3)]:  # another object; another predicate; cfo_of of another company
        frame = pl.DataFrame(
            [{"row": bad[0], "superseded_by_row": bad[1], "reason": "single_valued", "explanation": None}],
            schema=out.schema,
        )
        with pytest.raises(ContractError):
            contracts.validate(contracts.SupersessionContract, supersession_audit(rel, frame, (), single))
