"""A small corpus fixture: two real-prose documents, a deterministic extraction "model" served by the
stub server, and a configuration file pointing at them (the same YAML users write)."""

from __future__ import annotations

import json
import os
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from pgrag_dag.testing.stub_server import StubServer

SHARED_CORPORA = (
    Path(os.environ.get("PGRAG_SHARED_DIR", Path(__file__).resolve().parents[2] / "shared")) / "corpora"
)
"""The shared third-party corpora (``../shared/corpora`` beside the repository, or
``$PGRAG_SHARED_DIR/corpora``)."""

DOCS = {
    "01_babbage.txt": (
        "Charles Babbage designed the Difference Engine in London. The British government funded the "
        "Difference Engine for a decade.\n\n"
        "Babbage later designed the Analytical Engine, a general-purpose machine. Ada Lovelace worked "
        "with Charles Babbage on the Analytical Engine."
    ),
    "02_lovelace.txt": (
        "Ada Lovelace wrote notes on the Analytical Engine in 1843. She worked with Charles Babbage for "
        "several years.\n\nThe Analytical Engine was never built by Charles Babbage."
    ),
}
# name -> (type, description); a name is extracted when it appears in the chunk
ENTITIES = {
    "Charles Babbage": ("Person", "English mathematician who designed mechanical computers."),
    "Babbage": ("Person", "Babbage."),
    "Difference Engine": ("Artifact", "Babbage's first mechanical calculator."),
    "Analytical Engine": ("Artifact", "A proposed general-purpose mechanical computer."),
    "Ada Lovelace": ("Person", "English mathematician and writer."),
    "London": ("Place", "Capital of England."),
    "British government": ("Organization", "The government of the United Kingdom."),
}
# (subject, predicate, object, negated, valid_from); emitted when both names appear in the chunk
TRIPLES = [
    ("Charles Babbage", "designed", "Difference Engine", False, None),
    ("British government", "funded", "Difference Engine", False, None),
    ("Babbage", "designed", "Analytical Engine", False, None),
    ("Ada Lovelace", "worked_with", "Charles Babbage", False, None),
    ("Ada Lovelace", "wrote_notes_on", "Analytical Engine", False, "1843"),
    ("Charles Babbage", "built", "Analytical Engine", True, None),
    ("Charles Babbage", "relates_to", "London", False, None),
]
CHUNK = re.compile(r"<<<CHUNK\n(.*)\nCHUNK>>>", re.DOTALL)


def report_answer(user: str, nobody: str) -> str:
    """A community (or parent topic) report for the stub model, titled after the first entity or child
    the prompt ``user`` lists (``nobody`` when it lists none)."""
    first = next((line[2:].split(" [")[0] for line in user.splitlines() if line.startswith("- ")), nobody)
    return json.dumps(
        {
            "title": f"{first} and its neighbours",
            "summary": f"A community around {first}.",
            "findings": [{"summary": f"{first} is central.", "explanation": "It has most relations."}],
            "rating": 6,
        }
    )


def extraction_answer(messages: list[dict[str, str]]) -> str:
    """What a careful model would extract from the fixture's chunks (gleaning finds nothing more);
    community and parent report prompts get a short report naming the first entity or child listed."""
    user = messages[-1]["content"]
    if messages[0]["content"].startswith("You write a report"):
        return report_answer(user, "the corpus")
    if user.startswith("Some entities and triples were missed"):
        return '{"entities": [], "triples": []}'
    text = CHUNK.search(user).group(1)  # type: ignore[union-attr]
    names = [n for n in ENTITIES if re.search(rf"\b{re.escape(n)}\b", text)]
    if "Charles Babbage" in names and "Babbage" in names:
        names.remove("Babbage")
    ents = [
        {
            "name": n,
            "type": ENTITIES[n][0],
            "description": ENTITIES[n][1],
            "aliases": ["Babbage"] if n == "Charles Babbage" else [],
        }
        for n in names
    ]
    if re.search(r"\bShe\b", text):
        ents.append({"name": "She", "type": "Person", "description": "a pronoun", "aliases": []})
    present = set(names) | ({"Babbage"} if "Charles Babbage" in names else set())
    triples = [
        {
            "subject": s,
            "predicate": p,
            "object": o,
            "negated": neg,
            "confidence": 0.9,
            "valid_from": vf,
            "valid_to": None,
            "description": f"{s} {p.replace('_', ' ')} {o}.",
        }
        for s, p, o, neg, vf in TRIPLES
        if s in present
        and o in present
        and (not neg or "never built" in text)
        and not (p == "built" and not neg)
    ]
    return json.dumps({"entities": ents, "triples": triples})


LONG_NAME = "The " + "very " * 60 + "long committee"


def leaky_answer(messages: list[dict[str, str]]) -> str:
    """:func:`extraction_answer` plus an over-long entity name: with ``gates.max_name_chars`` raised, the
    gate lets it through and the stage contract (the paper's 200 characters) must catch it."""
    out = json.loads(extraction_answer(messages))
    if "entities" in out:
        out["entities"].append({"name": LONG_NAME, "type": "Organization", "description": "", "aliases": []})
    return json.dumps(out)


def admit_long_names(corpus: SmallCorpus) -> None:
    """Serve :func:`leaky_answer` and raise the configured name gate to 500 characters."""
    corpus.server.answer = leaky_answer
    corpus.config.write_text(corpus.config.read_text() + "gates:\n  max_name_chars: 500\n")


@dataclass
class SmallCorpus:
    """The fixture's directory, its config file, the stub server and the model name it answers as."""

    root: Path
    config: Path
    server: StubServer
    model: str

    def settings(self, **overrides: object):  # type: ignore[no-untyped-def]
        from pgrag_dag.config import load_settings

        return load_settings(self.config, **overrides)

    def engine(self, **overrides: object):  # type: ignore[no-untyped-def]
        from pgrag_dag.engine import Engine

        return Engine.from_settings(self.settings(**overrides))

    def chat_requests(self) -> list[dict]:
        return [r for r in self.server.requests if r["path"].endswith("/chat/completions")]


@pytest.fixture
def small_corpus(tmp_path: Path, pg_dsn: str, realm: str) -> Iterator[SmallCorpus]:
    """Two documents under ``tmp_path/docs``, realm = the ``realm`` fixture, space ``main``."""
    docs = tmp_path / "docs"
    docs.mkdir()
    for name, text in DOCS.items():
        (docs / name).write_text(text, encoding="utf-8")
    model = f"openai/fixture-{uuid.uuid4().hex[:8]}"
    with StubServer(extraction_answer) as server:
        cfg = {
            "database_url": pg_dsn,
            "data_dir": str(tmp_path / "data"),
            "llm": {
                "models": [model],
                "api_base": server.base_url,
                "api_key": "x",
                "deadline_s": 10,
                "max_retries": 0,
            },
            "chunking": {"chunk_chars": 200, "overlap_chars": 60},
            "extraction": {"concurrency": 2},
            "realms": {realm: {"spaces": {"main": {"sources": [{"path": "docs", "glob": "*.txt"}]}}}},
        }
        path = tmp_path / "pgrag.yaml"
        path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
        yield SmallCorpus(tmp_path, path, server, model)


def pytest_report_header() -> str:
    """Say where the shared corpora are read from, and whether they are there (tests on them fail without)."""
    found = (
        "found"
        if SHARED_CORPORA.is_dir()
        else "MISSING — set PGRAG_SHARED_DIR to the folder holding corpora/"
    )
    return f"pgrag shared corpora: {SHARED_CORPORA} ({found})"
