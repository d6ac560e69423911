"""A small saga indexed for real, with every state an export or view must show (issue 16 items 7–8): a
relation superseded by a later document (ally_of → enemy_of), an assertion superseded by a later denial
(Aramis serves / does not serve Richelieu), a stated validity (1625), an entity and a relation gone dormant
(their only document deleted), an archived entity, and Leiden communities with model-written reports (the
stub server's), built on the documents of tests/graph/test_supersession.py."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml
from psycopg import sql

from pgrag_dag.config import load_settings
from pgrag_dag.engine import Engine
from pgrag_dag.pipeline import delete_document, index_documents
from pgrag_dag.store import retention
from pgrag_dag.store.identifiers import qualified
from pgrag_dag.testing.stub_server import StubServer
from tests.fix_corpus import report_answer

CHUNK = re.compile(r"<<<CHUNK\n(.*)\nCHUNK>>>", re.DOTALL)
SPACE = "saga"
# sentence -> (subject, predicate, object, negated, valid_from)
FACTS = {
    "Athos is an ally of d'Artagnan.": ("Athos", "ally_of", "d'Artagnan", False, "1625"),
    "Athos taught d'Artagnan to fence.": ("Athos", "taught", "d'Artagnan", False, None),
    "Aramis serves Richelieu.": ("Aramis", "serves", "Richelieu", False, None),
    "Rochefort serves Richelieu.": ("Rochefort", "serves", "Richelieu", False, None),
    "Aramis is an ally of Athos.": ("Aramis", "ally_of", "Athos", False, None),
    "Rochefort is an enemy of d'Artagnan.": ("Rochefort", "enemy_of", "d'Artagnan", False, None),
    "Athos is now an enemy of d'Artagnan.": ("Athos", "enemy_of", "d'Artagnan", False, None),
    "Aramis does not serve Richelieu.": ("Aramis", "serves", "Richelieu", True, None),
    "Porthos lives in Pierrefonds.": ("Porthos", "lives_in", "Pierrefonds", False, None),
}
BOOKS = {
    "01_book.txt": [
        "Athos is an ally of d'Artagnan.",
        "Athos taught d'Artagnan to fence.",
        "Aramis serves Richelieu.",
        "Rochefort serves Richelieu.",
        "Aramis is an ally of Athos.",
        "Rochefort is an enemy of d'Artagnan.",
    ],
    "02_book.txt": ["Athos is now an enemy of d'Artagnan.", "Aramis does not serve Richelieu."],
    "03_book.txt": ["Porthos lives in Pierrefonds."],
}


def answer(messages: list[dict[str, str]]) -> str:
    """The stub model: the triples of :data:`FACTS` found in a chunk, and a short report for a community
    (or parent topic) naming the first member listed."""
    user = messages[-1]["content"]
    if messages[0]["content"].startswith("You write a report"):
        return report_answer(user, "the saga")
    if user.startswith("Some entities"):
        return '{"entities": [], "triples": []}'
    text = CHUNK.search(user).group(1)  # type: ignore[union-attr]
    triples, names = [], set()
    for sentence, (s, p, o, neg, vf) in FACTS.items():
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
                    "valid_from": vf,
                    "valid_to": None,
                }
            )
    ents = [
        {
            "name": n,
            "type": "Place" if n == "Pierrefonds" else "Person",
            "description": f"{n} of the saga.",
            "aliases": [],
        }
        for n in sorted(names)
    ]
    return json.dumps({"entities": ents, "triples": triples})


@contextmanager
def indexed_saga(root: Path, pg_dsn: str, realm: str, **extra: object) -> Iterator[Engine]:
    """Index :data:`BOOKS` into ``realm.saga`` (configuration ``root/pgrag.yaml``, data dir ``root/data``,
    ``extra`` merged into it), delete the third book (Porthos and Pierrefonds, and their relation, go dormant)
    and archive Rochefort; yields the engine while the stub server runs."""
    (root / "docs").mkdir()
    for name, sentences in BOOKS.items():
        (root / "docs" / name).write_text(" ".join(sentences) + "\n", encoding="utf-8")
    with StubServer(answer) as server:
        cfg = {
            "database_url": pg_dsn,
            "data_dir": str(root / "data"),
            "llm": {
                "models": [f"openai/saga-{uuid.uuid4().hex[:8]}"],
                "api_base": server.base_url,
                "api_key": "x",
                "deadline_s": 10,
                "max_retries": 0,
            },
            "communities": {"min_size": 2},
            "realms": {
                realm: {
                    "spaces": {SPACE: {"preset": "narrative", "sources": [{"path": "docs", "glob": "*.txt"}]}}
                }
            },
            **extra,
        }
        (root / "pgrag.yaml").write_text(yaml.safe_dump(cfg), encoding="utf-8")
        engine = Engine.from_settings(load_settings(root / "pgrag.yaml"))
        list(index_documents(engine, realm, SPACE))
        with engine.connect() as conn:
            key = conn.execute(
                sql.SQL("SELECT DISTINCT doc_key FROM {} WHERE space = %s AND doc_key LIKE %s").format(
                    qualified(realm, "documents")
                ),
                (SPACE, "%03_book.txt"),
            ).fetchone()
        assert key is not None
        delete_document(engine, realm, SPACE, key[0])
        (root / "docs" / "03_book.txt").unlink()
        with engine.connect() as conn, conn.transaction():
            rochefort = conn.execute(
                sql.SQL("SELECT id FROM {} WHERE space = %s AND name = 'Rochefort'").format(
                    qualified(realm, "entities")
                ),
                (SPACE,),
            ).fetchone()
            assert rochefort is not None
            assert retention.archive(conn, realm, SPACE, [rochefort[0]])
        yield engine
