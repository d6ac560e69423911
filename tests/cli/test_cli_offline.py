"""``pgrag query`` with no model answer (issue 26 item 4): offline (``llm.models: [replay]``) a question never
recorded prints the sentences of each passage closest to the question, best match first, by the realm's local
embedder — and global mode its community reports and ranked relations — exit 0, after one warning."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from pgrag_dag.cli import app
from pgrag_dag.extract.cooccurrence import sentences_of
from pgrag_dag.query.assembly import clip, render_relation
from pgrag_dag.query.citations import EXCERPT_CHARS
from pgrag_dag.query.extractive import SOURCES_HEADER
from tests.fix_corpus import SmallCorpus
from tests.query.test_extractive import ANSWER, QUESTION, index_with_local_embedder

runner = CliRunner()

HEAD = re.compile(r"^\[(\d+)\] (\S+) · (.+) · chunk (\d+) · similarity (-?\d\.\d\d)( · best match)?$")


@pytest.fixture
def offline(small_corpus: SmallCorpus, realm: str, monkeypatch: pytest.MonkeyPatch) -> SmallCorpus:
    """The corpus indexed with community reports by the stub model, re-embedded by MiniLM; then offline."""
    index_with_local_embedder(small_corpus, realm, monkeypatch, communities=True)
    monkeypatch.setenv("PGRAG_CONFIG", str(small_corpus.config))
    monkeypatch.setenv("PGRAG_LLM__MODELS", '["replay"]')  # nothing recorded the synthesis prompt
    return small_corpus


def _json(realm: str, *args: str) -> dict:
    out = runner.invoke(app, ["query", QUESTION, "--realm", realm, "--space", "main", "--json", *args])
    assert out.exit_code == 0, out.output
    return json.loads(out.stdout)


def test_offline_query_prints_the_answering_sentences_with_their_source(
    offline: SmallCorpus, realm: str
) -> None:
    data = _json(realm)
    chunks = {c["ref"]: c for c in data["chunks"]}
    out = runner.invoke(app, ["query", QUESTION, "--realm", realm, "--space", "main"])
    assert out.exit_code == 0, out.output
    assert out.stderr.splitlines()[-1] == (
        "warning: no model answer is available: no model writes answers offline (llm.models: [replay]) and "
        "this question was never recorded; what retrieval found follows (each passage's sentences closest "
        "to the question, best match first and the top relations) — name a live model in llm.models for "
        "answers"
    )
    lines = out.stdout.splitlines()
    # after the passages, the graph's best relations (what no passage may state as plainly)
    at = lines.index(
        f"Relations, best first ({min(5, len(data['relations']))} of {len(data['relations'])}; "
        "--json has all):"
    )
    assert lines[at - 1] == "" and lines[at + 1 :] == [
        f"{i:>3}. {render_relation(r)} · weight {r['weight']}" for i, r in enumerate(data["relations"][:5], 1)
    ]
    lines = lines[: at - 1]
    assert lines[0] == SOURCES_HEADER
    first = HEAD.match(lines[1])
    assert first and first.group(2) == "02_lovelace.txt" and first.group(6) == " · best match"
    assert lines[2] == f"    {ANSWER}"  # the sentence that answers, first
    heads = [(i, m) for i, line in enumerate(lines) if (m := HEAD.match(line))]
    assert sorted(int(m.group(1)) for _, m in heads) == sorted(chunks)  # every numbered passage, once
    scores = [float(m.group(5)) for _, m in heads]
    assert scores == sorted(scores, reverse=True) and any(m.group(6) is None for _, m in heads)
    for (i, m), end in zip(heads, [i for i, _ in heads[1:]] + [len(lines)]):
        chunk = chunks[int(m.group(1))]
        assert (m.group(2), int(m.group(4))) == (chunk["doc_key"], chunk["chunk_index"])
        shown = [line[4:] for line in lines[i + 1 : end]]
        whole = [" ".join(s.split()) for s in sentences_of(chunk["text"])]
        assert 1 <= len(shown) <= 2 and all(s in whole for s in shown)  # whole sentences of that passage
        assert shown != [clip(" ".join(chunk["text"].split()), EXCERPT_CHARS)]  # not the 160-character prefix
    assert "[...]" not in out.stdout


def test_offline_global_mode_prints_its_reports_and_relations(offline: SmallCorpus, realm: str) -> None:
    data = _json(realm, "--mode", "global")
    assert data["chunks"] == [] and data["communities"] and data["relations"]
    out = runner.invoke(app, ["query", QUESTION, "--realm", realm, "--space", "main", "--mode", "global"])
    assert out.exit_code == 0, out.output
    assert "ReplayMissError" not in out.output
    assert out.stderr.splitlines()[-1] == (
        "warning: no model answer is available: no model writes answers offline (llm.models: [replay]) and "
        "this question was never recorded; what retrieval found follows (community reports and the ranked "
        "relations) — name a live model in llm.models for answers"
    )
    expected = ["Community reports:"]
    for c in data["communities"]:
        subject = c["title"].removesuffix(" and its neighbours")  # the stub's report (tests/fix_corpus.py)
        assert c["summary"] == f"A community around {subject}." and c["rating"] == 6
        expected += [f"{c['title']} · rating 6 · level {c['level']}", f"    {c['summary']}"]
        expected += [f"    - {subject} is central."]
    expected.append("Relations:")
    expected += [
        f"{i:>3}. {render_relation(r)} · weight {r['weight']}" for i, r in enumerate(data["relations"], 1)
    ]
    assert out.stdout.splitlines() == expected
    assert any("(Ada Lovelace) --[worked_with]--> (Charles Babbage)" in line for line in expected)


def test_offline_bypass_has_nothing_to_show_and_the_miss_is_the_error(
    offline: SmallCorpus, realm: str
) -> None:
    out = runner.invoke(app, ["query", QUESTION, "--realm", realm, "--space", "main", "--mode", "bypass"])
    assert out.exit_code == 2 and out.stdout == ""
    assert out.stderr.splitlines()[-1].startswith("error: ReplayMissError: ")


def test_offline_nothing_retrieved_says_so_and_json_shows_the_walk_channels(
    offline: SmallCorpus, realm: str
) -> None:
    out = runner.invoke(
        app,
        ["query", QUESTION, "--realm", realm, "--space", "main", "--as-believed-at", "2001-01-01T00:00:00Z"],
    )
    assert out.exit_code == 1 and out.stdout == ""
    assert "nothing was retrieved for this question" in out.stderr and "ReplayMissError" not in out.stderr
    channels = _json(realm)["channels"]
    assert channels["ppr_seeds"] >= 1 and channels["ppr_chunks"] >= 1  # the question names Ada Lovelace
