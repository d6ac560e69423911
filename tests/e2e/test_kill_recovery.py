"""kill -9 recovery (issue 11): a ``pgrag index`` run killed with SIGKILL at three points, then run again
to completion, leaves the database equal to an uninterrupted run of the same corpus (paper §3.5).

The runs are real ``.venv/bin/pgrag index <realm>.main`` processes against the session's PostgreSQL,
calling a local OpenAI-compatible stub through litellm (chat *and* embeddings). The stub's "model" is
deterministic: extraction prompts are answered by the offline co-occurrence extractor run on the
prompt's chunk, gleaning finds nothing more, reports name the first entity listed. The kill points are
made deterministic by holding requests in the stub, never by sleeping:

1. during ``raw_extractions``: the stub answers the first few extraction calls and holds the next ones;
   the run is killed once the answered ones are in the response cache, with calls in flight;
2. between ``relations`` and ``embeddings``: the stub holds every embedding request; the run is killed
   once the relations are committed and the embeddings stage is waiting on its first batch;
3. during ``communities``: the stub answers the first community report and holds the rest; the run is
   killed once that report is cached — communities are committed largest first (issue 13), so by then
   nothing or the largest cluster's report is written.

Each killed realm is then indexed again, unhindered, and compared with a baseline realm indexed once
without interruption: a canonical snapshot without ids or timestamps, no duplicated row, and model
calls on the rerun for exactly the prompts the killed run had not cached. Each realm's runs use a model
name of their own (the killed run and its rerun share it), so one realm's cached responses never serve
another's.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from psycopg import sql

from pgrag_dag.extract.cooccurrence import CooccurrenceOptions, extract_chunk_cooccurrence
from pgrag_dag.store import db
from pgrag_dag.store.schema import schema_for
from pgrag_dag.testing.stub_server import StubServer
from tests.fix_corpus import SHARED_CORPORA

pytestmark = [pytest.mark.slow, pytest.mark.live]

ARTICLES = SHARED_CORPORA / "wikipedia_babbage_lovelace" / "related"
DOCS = {
    "alan_turing.txt": "Alan_Turing.txt",
    "michael_faraday.txt": "Michael_Faraday.txt",
    "charles_darwin.txt": "Charles_Darwin.txt",
    "blaise_pascal.txt": "Blaise_Pascal.txt",
}
DOC_CHARS = 2000
"""Each document is an article's opening, cut at the last sentence end before this many characters."""
PGRAG = Path(sys.executable).with_name("pgrag")
RUN_TIMEOUT_S = 90.0
CHUNK = re.compile(r"<<<CHUNK\n(.*)\nCHUNK>>>", re.DOTALL)
TITLE = re.compile(r"^Document title: (.*)$", re.MULTILINE)


# -- the corpus ---------------------------------------------------------------------------------
def opening(path: Path, limit: int = DOC_CHARS) -> str:
    """The first paragraphs of a shared Wikipedia article (title line dropped), cut at a sentence end."""
    lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()[1:] if line.strip()]
    text = "\n\n".join(lines)[:limit]
    return text[: text.rfind(". ") + 1]


# -- the stub "model" ---------------------------------------------------------------------------
def purpose_of(messages: list[dict[str, str]]) -> str:
    """What a chat request asks for, read from its prompts: extract, glean, community_report,
    parent_report."""
    system, user = messages[0]["content"], messages[-1]["content"]
    if system.startswith("You write a report on one community"):
        return "community_report"
    if system.startswith("You write a report on a topic"):
        return "parent_report"
    if system.startswith("You extract"):
        return "glean" if user.startswith("Some entities and triples were missed") else "extract"
    raise LookupError(f"unexpected prompt: {system[:60]!r}")


def model_answer(messages: list[dict[str, str]]) -> str:
    """A deterministic model: the co-occurrence extractor on the prompt's chunk; gleaning finds nothing;
    a report is titled after the first entity (or child report) its prompt lists."""
    purpose, user = purpose_of(messages), messages[-1]["content"]
    if purpose == "glean":
        return '{"entities": [], "triples": []}'
    if purpose == "extract":
        text = CHUNK.search(user).group(1)  # type: ignore[union-attr]
        title = TITLE.search(user).group(1)  # type: ignore[union-attr]
        return json.dumps(extract_chunk_cooccurrence(text, title, CooccurrenceOptions()), sort_keys=True)
    heads = (
        [line[2:].split(" [")[0] for line in user.splitlines() if line.startswith("- ")]
        if purpose == "community_report"
        else [line[3:] for line in user.splitlines() if line.startswith("## ")]
    )
    first = heads[0] if heads else "the corpus"
    return json.dumps(
        {
            "title": f"{first}: {purpose.replace('_', ' ')}",
            "summary": f"A community around {first}.",
            "findings": [{"summary": f"{first} is central.", "explanation": f"{len(heads)} listed."}],
            "rating": 5,
        }
    )


class HoldingStub(StubServer):
    """The stub server, able to hold requests: chat requests of one purpose after the first ``allow``
    of them, and every embedding request, until :meth:`release`. A held request is answered normally
    once released (by then its client is dead, so its reply goes nowhere)."""

    def __init__(self) -> None:
        super().__init__(self._answer)
        self._hold_lock = threading.Lock()
        self._open = threading.Event()
        self._open.set()
        self.hold_purpose: str | None = None
        self.hold_embeddings = False
        self.allow = 0
        self.seen = 0
        self.held = 0
        self.embeddings_held = threading.Event()
        # a reply to a killed client meets a closed socket: expected here, not worth a traceback
        self._httpd.handle_error = lambda request, client_address: None  # type: ignore[method-assign]

    def hold(self, *, purpose: str | None = None, allow: int = 0, embeddings: bool = False) -> None:
        with self._hold_lock:
            self.hold_purpose, self.allow, self.seen, self.held = purpose, allow, 0, 0
            self.hold_embeddings = embeddings
            self.embeddings_held.clear()
            self._open.clear()

    def release(self) -> None:
        with self._hold_lock:
            self.hold_purpose, self.hold_embeddings = None, False
        self._open.set()

    def _answer(self, messages: list[dict[str, str]]) -> str:
        purpose = purpose_of(messages)
        with self._hold_lock:
            wait = False
            if purpose == self.hold_purpose:
                self.seen += 1
                wait = self.seen > self.allow
                self.held += wait
        if wait:
            self._open.wait(RUN_TIMEOUT_S)
        return model_answer(messages)

    def _handler(self) -> type:
        base = super()._handler()
        server = self

        class Handler(base):  # type: ignore[misc, valid-type]
            def do_POST(self) -> None:  # noqa: N802 (http.server API)
                if self.path.endswith("/embeddings") and server.hold_embeddings:
                    server.embeddings_held.set()
                    server._open.wait(RUN_TIMEOUT_S)
                super().do_POST()

        return Handler

    def chats(self, start: int = 0, model: str | None = None) -> list[list[dict[str, str]]]:
        """Messages of the chat requests received since index ``start`` (for ``model``, as litellm sends
        it)."""
        return [
            r["body"]["messages"]
            for r in self.requests[start:]
            if r["path"].endswith("/chat/completions") and (model is None or r["body"].get("model") == model)
        ]


def canonical(messages: list[dict[str, str]]) -> str:
    return json.dumps(messages, sort_keys=True, ensure_ascii=False)


def stages(stdout: str) -> dict[str, dict[str, Any]]:
    """The metadata ``pgrag index --json`` printed per stage (nothing when the run printed nothing)."""
    return json.loads(stdout)["stages"] if stdout.strip() else {}


# -- the runs -----------------------------------------------------------------------------------
@dataclass
class Lab:
    """The shared set-up: the session's database, the stub, one config file naming every realm of this
    module (identical spaces over the same documents), and what the baseline run did."""

    dsn: str
    stub: HoldingStub
    config: Path
    logs: Path
    tag: str
    realms: list[str] = field(default_factory=list)
    baseline: dict[str, Any] = field(default_factory=dict)

    def realm(self, name: str) -> str:
        return f"kr{self.tag}_{name}"

    def model(self, realm: str) -> str:
        return f"openai/kill-{realm}-{uuid.uuid4().hex[:6]}"

    def start(self, realm: str, model: str, label: str) -> subprocess.Popen:
        env = {
            **os.environ,
            "PGRAG_CONFIG": str(self.config),
            "PGRAG_DATABASE_URL": self.dsn,
            "PGRAG_LLM__MODELS": json.dumps([model]),
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        }
        env.pop(
            "PGRAG_EMBEDDING__MODEL", None
        )  # this test's YAML embeds through the stub server, which holds the call
        out = (self.logs / f"{realm}-{label}.out").open("w")
        err = (self.logs / f"{realm}-{label}.err").open("w")
        proc = subprocess.Popen(
            [str(PGRAG), "index", f"{realm}.main", "--json"],
            env=env,
            stdout=out,
            stderr=err,
            cwd=self.config.parent,
        )
        out.close()
        err.close()
        return proc

    def log(self, realm: str, label: str) -> str:
        return "".join((self.logs / f"{realm}-{label}.{k}").read_text() for k in ("out", "err"))

    def run(self, realm: str, model: str, label: str) -> str:
        """One uninterrupted run to completion; its stdout (one line per stage)."""
        proc = self.start(realm, model, label)
        try:
            rc = proc.wait(RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
        assert rc == 0, self.log(realm, label)
        return (self.logs / f"{realm}-{label}.out").read_text()

    def kill_when(self, proc: subprocess.Popen, realm: str, label: str, ready: Callable[[], bool]) -> None:
        """SIGKILL ``proc`` as soon as ``ready()`` holds (polled); fails if the run ends first."""
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while not ready():
            if proc.poll() is not None:
                pytest.fail(
                    f"the run ended (exit {proc.returncode}) before its kill point:\n{self.log(realm, label)}"
                )
            if time.monotonic() > deadline:
                proc.kill()
                proc.wait()
                pytest.fail(f"kill point not reached within {RUN_TIMEOUT_S:.0f}s:\n{self.log(realm, label)}")
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(30) == -signal.SIGKILL

    def q(self, query: str, *args: Any, realm: str | None = None) -> list[tuple]:
        with db.connect(self.dsn, autocommit=True) as conn:
            text = sql.SQL(query).format(s=sql.Identifier(schema_for(realm))) if realm else sql.SQL(query)
            return conn.execute(text, args).fetchall()

    def count(self, realm: str, table: str) -> int:
        return self.q(f"SELECT count(*) FROM {{s}}.{table} WHERE space = 'main'", realm=realm)[0][0]

    def cached(self, model: str, purpose: str | None = None) -> list[str]:
        """Canonical messages of the response cache's entries for ``model`` (optionally one purpose)."""
        rows = self.q(
            "SELECT request -> 'messages' FROM pgrag__control.llm_cache WHERE model = %s"
            " AND (%s::text IS NULL OR purpose = %s)",
            model,
            purpose,
            purpose,
        )
        return [canonical(m) for (m,) in rows]


# -- the canonical snapshot ---------------------------------------------------------------------
SNAPSHOT = {
    "documents": """SELECT doc_key, chunk_index, content_hash, embed_hash FROM {s}.documents
                    WHERE space = 'main'
                    ORDER BY 1, 2""",
    "raw_extractions": """SELECT d.doc_key, d.chunk_index, r.pass, r.parse_status, r.raw_text,
                            r.prompt_version
                            FROM {s}.raw_extractions r JOIN {s}.documents d ON d.id = r.chunk_id
                           WHERE r.space = 'main' ORDER BY 1, 2, 3""",
    "gate_counts": """SELECT kind, accepted, coalesce(gate, ''), count(*) FROM {s}.gate_decisions
                      WHERE space = 'main'
                      GROUP BY 1, 2, 3 ORDER BY 1, 2, 3""",
    "gate_accepted": """SELECT d.doc_key, d.chunk_index, g.pass, g.kind, coalesce(g.name, ''),
                               coalesce(g.subject, ''),
                               coalesce(g.predicate, ''), coalesce(g.object, ''), coalesce(g.negated, false)
                          FROM {s}.gate_decisions g JOIN {s}.documents d ON d.id = g.chunk_id
                         WHERE g.space = 'main' AND g.accepted ORDER BY 1, 2, 3, 4, 5, 6, 7, 8, 9""",
    "entities": """SELECT name, entity_type, description, ARRAY(SELECT unnest(aliases) ORDER BY 1),
                          dormant_since IS NOT NULL, embed_hash FROM {s}.entities WHERE space = 'main'
                          ORDER BY 1""",
    "mentions": """SELECT d.doc_key, d.chunk_index, e.name FROM {s}.doc_mentions m
                     JOIN {s}.documents d ON d.id = m.chunk_id JOIN {s}.entities e ON e.id = m.entity_id
                    WHERE m.space = 'main' ORDER BY 1, 2, 3""",
    "relations": """SELECT s.name, r.predicate, o.name, r.negated, r.weight, r.superseded_by IS NOT NULL,
                           r.dormant_since IS NOT NULL, r.rendered, r.embed_hash,
                           ARRAY(SELECT d.doc_key || '#' || d.chunk_index FROM unnest(r.chunk_ids) c(id)
                                   JOIN {s}.documents d ON d.id = c.id ORDER BY 1)
                      FROM {s}.relations r JOIN {s}.entities s ON s.id = r.source_id
                      JOIN {s}.entities o ON o.id = r.target_id
                     WHERE r.space = 'main' ORDER BY 1, 2, 3, 4""",
    "communities": """SELECT c.level, c.title, c.size, c.rating, c.embed_hash,
                             ARRAY(SELECT e.name FROM {s}.community_members m
                             JOIN {s}.entities e ON e.id = m.entity_id
                                    WHERE m.community_id = c.id ORDER BY 1),
                             ARRAY(SELECT k.title FROM {s}.community_children h
                             JOIN {s}.communities k ON k.id = h.child_id
                                    WHERE h.parent_id = c.id ORDER BY 1),
                             (SELECT p.title FROM {s}.communities p WHERE p.id = c.parent_id)
                        FROM {s}.communities c WHERE c.space = 'main' ORDER BY 1, 2""",
}
UNIQUE = {  # rows whose natural key must be unique in a space
    "documents": "SELECT doc_key, chunk_index FROM {s}.documents WHERE space = 'main'",
    "raw_extractions": "SELECT chunk_id, pass FROM {s}.raw_extractions WHERE space = 'main'",
    "entities": "SELECT lower(name) FROM {s}.entities WHERE space = 'main'",
    "relations": "SELECT source_id, predicate, target_id, negated FROM {s}.relations WHERE space = 'main'",
    "communities": "SELECT level, title FROM {s}.communities WHERE space = 'main'",
    "community_members": "SELECT community_id, entity_id FROM {s}.community_members WHERE space = 'main'",
    "gate_decisions": """SELECT chunk_id, pass, kind, name, subject, predicate, object, negated, accepted,
                         gate
                         FROM {s}.gate_decisions WHERE space = 'main'""",
}


def snapshot(lab: Lab, realm: str) -> dict[str, list[tuple]]:
    return {name: lab.q(query, realm=realm) for name, query in SNAPSHOT.items()}


def duplicates(lab: Lab, realm: str) -> dict[str, list[tuple]]:
    """Per table, the natural keys stored more than once (empty lists when none is)."""
    return {
        table: [k for k, n in Counter(lab.q(query, realm=realm)).items() if n > 1]
        for table, query in UNIQUE.items()
    }


# -- fixtures -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def lab(pg_dsn: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """The documents, the config file, the stub and the baseline realm, indexed once without interruption."""
    if not PGRAG.is_file():
        pytest.fail(f"{PGRAG} is missing: run `make install`")
    root = tmp_path_factory.mktemp("kill")
    (root / "docs").mkdir()
    for name, article in DOCS.items():
        (root / "docs" / name).write_text(opening(ARTICLES / article), encoding="utf-8")
    (root / "logs").mkdir()
    with HoldingStub() as stub:
        lab = Lab(pg_dsn, stub, root / "pgrag.yaml", root / "logs", f"{os.getpid()}")
        lab.realms = [lab.realm(n) for n in ("base", "extract", "between", "reports")]
        space = {"sources": [{"path": "docs", "glob": "*.txt"}]}
        cfg = {
            "llm": {
                "models": ["replay"],
                "api_base": stub.base_url,
                "api_key": "x",
                "deadline_s": 60,
                "max_retries": 0,
                "request_timeout_s": 60,
            },
            "embedding": {
                "model": "openai/stub-embed",
                "dim": 384,
                "api_base": stub.base_url,
                "api_key": "x",
                "batch_size": 16,
            },
            "chunking": {"chunk_chars": 300, "overlap_chars": 0},
            "extraction": {"concurrency": 2, "batch_size": 1, "gleaning_passes": 1},
            "communities": {"min_size": 2, "levels": 1},
            "realms": {r: {"spaces": {"main": space}} for r in lab.realms},
        }
        lab.config.write_text(yaml.safe_dump(cfg), encoding="utf-8")
        base = lab.realms[0]
        model = lab.model(base)
        start = len(stub.requests)
        lab.baseline = {
            "realm": base,
            "model": model,
            "stdout": lab.run(base, model, "clean"),
            "chats": stub.chats(start, model.removeprefix("openai/")),
            "snapshot": snapshot(lab, base),
        }
        try:
            yield lab
        finally:
            stub.release()
            with db.connect(pg_dsn, autocommit=True) as conn:
                for r in lab.realms:
                    conn.execute(
                        sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema_for(r)))
                    )
                    conn.execute("DELETE FROM pgrag__control.realms WHERE realm = %s", (r,))
                conn.execute(
                    "DELETE FROM pgrag__control.llm_cache WHERE model LIKE %s",
                    (f"openai/kill-kr{lab.tag}_%",),
                )


def test_the_baseline_is_a_whole_graph_with_every_kind_of_model_call(lab: Lab) -> None:
    """The comparisons below are only worth something if the clean run built every table, embedded every
    row and called the model for every purpose."""
    snap = lab.baseline["snapshot"]
    chunks = len(snap["documents"])
    purposes = Counter(purpose_of(m) for m in lab.baseline["chats"])
    assert chunks >= 8 and {d for d, *_ in snap["documents"]} == set(DOCS)
    assert (
        purposes["extract"] == purposes["glean"] == chunks
    )  # one first pass and one gleaning pass per chunk
    assert purposes["community_report"] >= 4 and purposes["parent_report"] >= 1
    assert len(snap["raw_extractions"]) == 2 * chunks and all(r[3] == "ok" for r in snap["raw_extractions"])
    assert len(snap["entities"]) >= 12 and len(snap["relations"]) >= 12
    assert all(e[5] is not None for e in snap["entities"]) and all(
        d[3] is not None for d in snap["documents"]
    )
    assert all(r[8] is not None for r in snap["relations"]) and all(
        c[4] is not None for c in snap["communities"]
    )
    base = [c for c in snap["communities"] if c[0] == 0]
    assert len(base) == purposes["community_report"] and all(len(c[5]) == c[2] >= 2 for c in base)
    assert len(snap["communities"]) - len(base) == purposes["parent_report"]
    assert duplicates(lab, lab.baseline["realm"]) == {t: [] for t in UNIQUE}


@dataclass
class Killed:
    """What a killed run left: its realm and model, the chat requests it sent, what it had cached; and
    the stage metadata of the rerun."""

    realm: str
    model: str
    sent: list[str]
    cached: list[str]
    rerun: dict[str, dict[str, Any]] = field(default_factory=dict)


def kill_then_rerun(
    lab: Lab,
    name: str,
    hold: dict[str, Any],
    ready: Callable[[str, str], bool],
    at_kill: Callable[[Killed], None],
) -> Killed:
    """Start a run of realm ``name`` with the stub holding ``hold``, SIGKILL it once ``ready(realm, model)``,
    check ``at_kill`` against what it left, then release the stub and run the realm again to completion;
    assert the rerun asked the model exactly for the prompts the killed run had not cached, and that the
    result equals the baseline."""
    realm = lab.realm(name)
    model = lab.model(realm)
    start = len(lab.stub.requests)
    lab.stub.hold(**hold)
    try:
        proc = lab.start(realm, model, "killed")
        lab.kill_when(proc, realm, "killed", lambda: ready(realm, model))
    finally:
        lab.stub.release()
    killed = Killed(
        realm,
        model,
        [canonical(m) for m in lab.stub.chats(start, model.removeprefix("openai/"))],
        lab.cached(model),
    )
    at_kill(killed)

    start = len(lab.stub.requests)
    killed.rerun = stages(lab.run(realm, model, "rerun"))
    rerun = Counter(canonical(m) for m in lab.stub.chats(start, model.removeprefix("openai/")))
    baseline = Counter(canonical(m) for m in lab.baseline["chats"])
    cached = Counter(killed.cached)
    assert (
        len(killed.cached) == len(cached) and cached <= baseline
    )  # the killed run cached only real prompts, once each
    assert set(killed.sent) <= set(baseline)
    assert (
        rerun == baseline - cached
    )  # every prompt not cached is asked once more, and nothing cached is asked again
    assert snapshot(lab, realm) == lab.baseline["snapshot"]
    assert duplicates(lab, realm) == {t: [] for t in UNIQUE}
    return killed


def test_killed_during_extraction_with_calls_in_flight(lab: Lab) -> None:
    """Killed in ``raw_extractions`` once 5 chunks are extracted (first pass and gleaning pass, cached)
    and the stub holds every further first pass: the rerun takes those 10 answers from the cache and
    asks the model for every other prompt, including the ones in flight at the kill."""
    answered = 5

    def ready(realm: str, model: str) -> bool:
        # 5 first passes answered, their 5 gleaning passes cached, the next first pass held: nothing
        # more can happen until the stub releases it, so the kill point is exact
        return len(lab.cached(model)) == 2 * answered and lab.stub.held >= 1

    def at_kill(k: Killed) -> None:
        assert Counter(purpose_of(json.loads(m)) for m in k.cached) == {
            "extract": answered,
            "glean": answered,
        }
        assert len(k.sent) - len(k.cached) == lab.stub.held >= 1  # model calls were in flight when it died
        assert lab.count(k.realm, "documents") == len(
            lab.baseline["snapshot"]["documents"]
        )  # chunks committed
        assert lab.count(k.realm, "entities") == lab.count(k.realm, "relations") == 0

    killed = kill_then_rerun(lab, "extract", {"purpose": "extract", "allow": answered}, ready, at_kill)
    chunks = len(lab.baseline["snapshot"]["documents"])
    assert killed.rerun["chunks"]["chunks_inserted"] == 0  # the chunks committed before the kill are kept
    assert killed.rerun["raw_extractions"]["model_calls"] == 2 * chunks - 2 * answered


def test_killed_between_relations_and_embeddings(lab: Lab) -> None:
    """Killed once ``relations`` is committed and ``embeddings`` has opened its transaction and waits on
    its first batch (the stub holds it): the rerun makes no extraction call (the extractions are stored),
    rewrites no relation, embeds every row and writes every report."""

    def ready(realm: str, model: str) -> bool:
        return lab.stub.embeddings_held.is_set() and lab.count(realm, "relations") > 0

    def at_kill(k: Killed) -> None:
        snap = lab.baseline["snapshot"]
        assert lab.count(k.realm, "relations") == len(snap["relations"])
        assert lab.count(k.realm, "raw_extractions") == len(snap["raw_extractions"])
        assert lab.q("SELECT count(*) FROM {s}.documents WHERE embedding IS NOT NULL", realm=k.realm) == [
            (0,)
        ]
        assert lab.count(k.realm, "communities") == 0
        assert {purpose_of(json.loads(m)) for m in k.cached} == {"extract", "glean"}

    killed = kill_then_rerun(lab, "between", {"embeddings": True}, ready, at_kill)
    chunks = len(lab.baseline["snapshot"]["documents"])
    assert len(killed.cached) == 2 * chunks
    assert killed.rerun["raw_extractions"]["chunks_extracted"] == 0
    assert (
        killed.rerun["relations"]["relations_inserted"] == killed.rerun["relations"]["relations_updated"] == 0
    )
    assert (
        killed.rerun["embeddings"]["documents_embedded"] == chunks
    )  # the killed transaction stored no vector


def test_killed_during_community_reports(lab: Lab) -> None:
    """Killed in ``communities`` after one report was written by the model and cached, the others held:
    the rerun writes the remaining reports and the topic report, and no extraction call."""

    def ready(realm: str, model: str) -> bool:
        return len(lab.cached(model, "community_report")) >= 1 and lab.stub.held >= 1

    def at_kill(k: Killed) -> None:
        assert Counter(purpose_of(json.loads(m)) for m in k.cached)["community_report"] == 1
        largest = max(c[2] for c in lab.baseline["snapshot"]["communities"] if c[0] == 0)
        committed = lab.q("SELECT size FROM {s}.communities WHERE space = 'main'", realm=k.realm)
        assert committed in ([], [(largest,)])  # committed largest first: nothing yet, or the largest cluster
        assert lab.q("SELECT count(*) FROM {s}.documents WHERE embedding IS NULL", realm=k.realm) == [(0,)]

    killed = kill_then_rerun(lab, "reports", {"purpose": "community_report", "allow": 1}, ready, at_kill)
    reports = sum(1 for c in lab.baseline["snapshot"]["communities"] if c[0] == 0)
    assert killed.rerun["raw_extractions"]["chunks_extracted"] == 0
    assert killed.rerun["embeddings"]["documents_embedded"] == 0  # embedded before the kill
    assert (killed.rerun["communities"]["model_calls"], killed.rerun["communities"]["cache_hits"]) == (
        reports - 1,
        1,
    )
