"""Paired ablation, re-indexing noise floor and reader sweep (evaluation/ablation.py; paper §8.4 Table 5,
§8.12 Table 12, §8.14; issue 17 items 4 and 6), end to end: the shipped fixtures indexed for real into the
embedded PostgreSQL, every model a real litellm call to its own local stub server with scripted replies
(extraction, two readers, a three-judge panel), the tables checked against hand-computed values, and a
replayed run (cassette, no model call) reproducing the same record."""

from __future__ import annotations

import json
import os
import re
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml
from psycopg import sql

from evaluation.ablation import arms_for, main
from evaluation.answering import ReplayIncompleteError
from evaluation.paired import paired_rows, reader_rows, union_over_readers, unreached
from evaluation.scoring import is_refusal
from pgrag_dag.errors import ReplayMissError
from pgrag_dag.store import cache, schema
from pgrag_dag.testing.stub_server import StubServer, StubStatus

FIXTURES = Path(__file__).resolve().parents[2] / "evaluation" / "fixtures"
LME = FIXTURES / "longmemeval" / "longmemeval_tiny.json"
ECT_CORPUS = FIXTURES / "ectqa" / "corpus" / "base.jsonl"
ECT_QUESTIONS = FIXTURES / "ectqa" / "questions" / "local_base.jsonl"
CHUNK = re.compile(r"<<<CHUNK\n(.*)\nCHUNK>>>", re.DOTALL)
Reply = Callable[[list[dict[str, str]]], str]
EMPTY = '{"entities": [], "triples": []}'

# -- pure arithmetic --------------------------------------------------------------------------------


def test_paired_rows_mean_over_readers_and_count_items_whose_summed_score_moved() -> None:
    cats = {"q1": "x", "q2": "x", "q3": "y"}
    off = {
        ("q1", "a"): 1.0,
        ("q1", "b"): 0.0,
        ("q2", "a"): 1.0,
        ("q2", "b"): 1.0,
        ("q3", "a"): 0.0,
        ("q3", "b"): 0.5,
    }
    on = {
        ("q1", "a"): 0.0,
        ("q1", "b"): 1.0,
        ("q2", "a"): 0.0,
        ("q2", "b"): 1.0,
        ("q3", "a"): 1.0,
        ("q3", "b"): 1.0,
    }
    rows = {r.category: r for r in paired_rows(off, on, cats)}
    assert [r.category for r in paired_rows(off, on, cats)] == ["y", "x", "overall"]  # largest delta first
    # x: off (1+0+1+1)/4 = 0.75, on (0+1+0+1)/4 = 0.5; q1 summed 1 → 1 (moved neither way), q2 2 → 1 (worse)
    assert (rows["x"].a, rows["x"].b, rows["x"].delta, rows["x"].better, rows["x"].worse) == (
        0.75,
        0.5,
        -0.25,
        0,
        1,
    )
    assert (rows["x"].agreed, rows["x"].cells) == (1, 4)  # only (q2, b) kept its score
    assert (rows["y"].n, rows["y"].a, rows["y"].b, rows["y"].better) == (1, 0.25, 1.0, 1)
    assert (rows["overall"].n, rows["overall"].better, rows["overall"].worse) == (3, 1, 1)
    assert rows["overall"].a == pytest.approx(3.5 / 6) and rows["overall"].b == pytest.approx(4 / 6)
    # a cell on one side only is not compared
    assert paired_rows({**off, ("q9", "a"): 1.0}, on, {**cats, "q9": "z"})[-1].n == 3


def test_reader_rows_union_and_unreached() -> None:
    cats, ans = {"q1": "x", "q2": "y", "q3": "y"}, {"q1": True, "q2": True, "q3": False}
    scores = {
        ("q1", "a"): 1.0,
        ("q2", "a"): 0.0,
        ("q3", "a"): 1.0,
        ("q1", "b"): 0.0,
        ("q2", "b"): 0.0,
        ("q3", "b"): 0.0,
    }
    refused = {("q2", "a"): True, ("q3", "a"): True, ("q1", "b"): True}
    a, b = reader_rows(scores, refused, cats, ans, ["a", "b", "c"])
    assert (a.reader, a.n, a.overall, a.refused, dict(a.by_category)) == (
        "a",
        3,
        2 / 3,
        1,
        {"x": 1.0, "y": 0.5},
    )
    assert (b.overall, b.refused) == (0.0, 1)
    union = union_over_readers(scores, cats)
    assert (union.overall, dict(union.by_category)) == (2 / 3, {"x": 1.0, "y": 0.5})
    assert unreached(scores) == ["q2"]


def test_arms_differ_by_one_setting() -> None:
    assert arms_for("render_relation_validity") == {
        "off": {"render_relation_validity": False},
        "on": {"render_relation_validity": True},
    }
    caps = arms_for("caps", caps_tokens=4000)
    assert caps["off"] == dict.fromkeys(caps["on"]) and caps["on"]["max_passage_tokens"] == 2000
    assert sum(caps["on"].values()) == 2000 + 3 * 666
    with pytest.raises(ValueError, match="boolean QueryParam field"):
        arms_for("top_k")


# -- scripted models --------------------------------------------------------------------------------

# LongMemEval fixture: (phrase in the chunk, entities, triples (s, p, o, valid_from)) — what the extraction
# "model" reads from each session
LME_FACTS: list[tuple[str, list[tuple[str, str]], list[tuple[str, str, str, str | None]]]] = [
    (
        "beagle named Biscuit",
        [("User", "Person"), ("Biscuit", "Animal")],
        [("User", "adopted", "Biscuit", "2023-05-21")],
    ),
    (
        "weeknight pasta",
        [("User", "Person"), ("Garlic Spaghetti", "Dish")],
        [("User", "asked_for_recipe_of", "Garlic Spaghetti", None)],
    ),
    (
        "three days a week",
        [("User", "Person"), ("Gym", "Place")],
        [("User", "trains_three_days_a_week_at", "Gym", "2023-07-01")],
    ),
    (
        "four days a week",
        [("User", "Person"), ("Gym", "Place")],
        [("User", "trains_four_days_a_week_at", "Gym", "2023-08-15")],
    ),
    (
        "weekend hike",
        [("User", "Person"), ("Weekend Hike", "Event")],
        [("User", "plans", "Weekend Hike", None)],
    ),
    (
        "sister's wedding",
        [("User", "Person"), ("Sister Wedding", "Event")],
        [("User", "gives_speech_at", "Sister Wedding", "2023-09-23")],
    ),
]


def lme_extraction(*, second_pass_drops: str | None = None) -> Reply:
    """The scripted extraction model; with ``second_pass_drops``, the second time it is asked about a chunk
    holding that phrase it returns the entities without the triple (a model that varies between runs)."""
    seen: dict[str, int] = {}
    lock = threading.Lock()

    def reply(messages: list[dict[str, str]]) -> str:
        user = messages[-1]["content"]
        if user.startswith("Some entities and triples were missed"):
            return EMPTY
        text = CHUNK.search(user).group(1)  # type: ignore[union-attr]
        with lock:
            seen[text] = seen.get(text, 0) + 1
            again = seen[text] > 1
        ents: dict[str, str] = {}
        triples = []
        for phrase, es, ts in LME_FACTS:
            if phrase in text:
                ents.update(es)
                if not (again and second_pass_drops == phrase):
                    triples += [
                        {
                            "subject": s,
                            "predicate": p,
                            "object": o,
                            "negated": False,
                            "confidence": 0.9,
                            "valid_from": vf,
                            "valid_to": None,
                            "description": f"{s} {p.replace('_', ' ')} {o}.",
                        }
                        for s, p, o, vf in ts
                    ]
        return json.dumps(
            {
                "entities": [
                    {"name": n, "type": t, "description": f"{n}.", "aliases": []} for n, t in ents.items()
                ],
                "triples": triples,
            }
        )

    return reply


def _synthesis(messages: list[dict[str, str]]) -> tuple[str, str]:
    assert messages[0]["content"].startswith("You answer a question from retrieved context")
    user = messages[-1]["content"]
    return user.split("\n", 1)[0], user


def lme_reader(name: str) -> Reply:
    """Reader ``a`` or ``b``: answers that depend on whether the prompt shows a validity date (``[from …]``)
    and on which relations reached it (known, by construction)."""

    def reply(messages: list[dict[str, str]]) -> str:
        question, prompt = _synthesis(messages)
        dated, four = "[from " in prompt, "trains_four_days_a_week_at" in prompt
        if "dog I adopted" in question:
            if name == "a":
                return "You adopted a beagle named Biscuit [1]."
            return "You adopted a dog [1]." if dated else "A beagle [1]."
        if "gym" in question:
            if name == "a":
                return (
                    "You now go to the gym 4 days a week [2]." if dated and four else "Three days a week [1]."
                )
            return "4 days a week [2]." if four else "Three days a week [1]."
        if "violin" in question:
            if name == "a" and not dated:
                return "You bought your violin 20 days before the wedding."
            return "There is not enough information: you never mentioned buying a violin."
        raise AssertionError(question)

    return reply


def _elements(messages: list[dict[str, str]]) -> list[str]:
    ref = messages[-1]["content"].split("Reference elements:\n")[1].split("\n\nAnswer:\n")[0]
    return [line.split(". ", 1)[1] for line in ref.splitlines()]


def literal_judge(messages: list[dict[str, str]]) -> str:
    """Correct when the answer holds the element (case-insensitive), or declines an ``unanswerable`` one."""
    answer = messages[-1]["content"].split("\n\nAnswer:\n")[1].lower()
    verdicts = [
        ("Correct" if is_refusal(answer) else "Incorrect")
        if e == "unanswerable"
        else "Correct"
        if e.lower() in answer
        else "Incorrect"
        for e in _elements(messages)
    ]
    return json.dumps({"elements": [{"index": i, "verdict": v} for i, v in enumerate(verdicts, 1)]})


def contrarian_judge(messages: list[dict[str, str]]) -> str:
    return json.dumps(
        {"elements": [{"index": i, "verdict": "Incorrect"} for i in range(1, len(_elements(messages)) + 1)]}
    )


# -- the run's setting ------------------------------------------------------------------------------


class Bench:
    """Stub servers per model (``openai/<role>-<random>``), a pgrag.yaml on the test database, and the
    command line that reaches them."""

    def __init__(self, stack: ExitStack, tmp: Path, dsn: str, replies: dict[str, Reply]) -> None:
        tag = uuid.uuid4().hex[:8]
        self.servers = {role: stack.enter_context(StubServer(r)) for role, r in replies.items()}
        self.model = {role: f"openai/{role}-{tag}" for role in replies}
        self.realm = f"abl{os.getpid()}_{tag}"
        self.config = tmp / "pgrag.yaml"
        self.config.write_text(
            yaml.safe_dump(
                {
                    "database_url": dsn,
                    "data_dir": str(tmp / "data"),
                    "llm": {"api_key": "x", "deadline_s": 10, "max_retries": 0},
                }
            )
        )
        self.tmp = tmp

    def argv(
        self,
        command: str,
        *extra: str,
        readers: tuple[str, ...] = ("a", "b"),
        judges: tuple[str, ...] = ("j1", "j2", "j3"),
        out: str = "out",
    ) -> list[str]:
        args = [
            command,
            "--config",
            str(self.config),
            "--realm",
            self.realm,
            "--out",
            str(self.tmp / out),
            "--extraction-model",
            self.model["x"],
        ]
        args += [a for r in readers for a in ("--reader", self.model[r])]
        args += [a for j in judges for a in ("--judge", self.model[j])]
        args += [
            a
            for role, s in self.servers.items()
            for a in ("--model-api-base", f"{self.model[role]}={s.base_url}")
        ]
        return args + list(extra)

    def chats(self) -> int:
        return sum(
            1 for s in self.servers.values() for r in s.requests if r["path"].endswith("/chat/completions")
        )


@pytest.fixture
def bench(tmp_path: Path, pg_dsn: str) -> Iterator[Callable[[dict[str, Reply]], Bench]]:
    made: list[Bench] = []
    with ExitStack() as stack:

        def make(replies: dict[str, Reply]) -> Bench:
            made.append(Bench(stack, tmp_path, pg_dsn, replies))
            return made[-1]

        yield make
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        for b in made:
            for realm in (b.realm, f"{b.realm}_1", f"{b.realm}_2"):
                conn.execute(
                    sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
                        sql.Identifier(schema.schema_for(realm))
                    )
                )
                conn.execute("DELETE FROM pgrag__control.realms WHERE realm = %s", (realm,))


def _lme_models(**extraction: Any) -> dict[str, Reply]:
    return {
        "x": lme_extraction(**extraction),
        "a": lme_reader("a"),
        "b": lme_reader("b"),
        "j1": literal_judge,
        "j2": literal_judge,
        "j3": contrarian_judge,
    }


def _table(record: Any, title_start: str) -> list[list[Any]]:
    [t] = [t for t in record.tables if t.title.startswith(title_start)]
    return [list(r) for r in t.rows]


# -- the harnesses end to end -----------------------------------------------------------------------


@pytest.mark.live
@pytest.mark.slow  # two whole runs (recorded, then replayed): about 20 s
def test_paired_validity_ablation_on_longmemeval_and_its_replay(bench, pg_dsn: str) -> None:  # type: ignore[no-untyped-def]
    b = bench(_lme_models())
    record = main(
        b.argv(
            "ablate",
            "--benchmark",
            "longmemeval",
            "--data",
            str(LME),
            "--flag",
            "render_relation_validity",
            "--record-cassette",
        )
    )
    assert record.reportable and record.guard.report()["scored"] == 3
    assert record.models == {
        "extraction": b.model["x"],
        "answering": [b.model["a"], b.model["b"]],
        "judges": [b.model["j1"], b.model["j2"], b.model["j3"]],
    }
    # by hand: single-session-user off a 1 b 1, on a 1 b 0 (b is distracted by the date); knowledge-update off
    # a 0 b 1, on a 1 b 1; temporal-reasoning (abstention) off a 0 b 1, on a 1 b 1 — the majority of the
    # three-judge panel is the two literal judges', the contrarian outvoted
    assert _table(record, "Paired ablation of render_relation_validity, mean over 2 readers") == [
        ["knowledge-update", 1, 0.5, 1.0, "+0.500", 1, 0],
        ["temporal-reasoning", 1, 0.5, 1.0, "+0.500", 1, 0],
        ["single-session-user", 1, 1.0, 0.5, "-0.500", 0, 1],
        ["overall", 3, pytest.approx(4 / 6), pytest.approx(5 / 6), "+0.167", 2, 1],
    ]
    assert _table(record, f"Reader {b.model['b']}") == [
        ["knowledge-update", 1, 1.0, 1.0, "+0.000", 0, 0],
        ["temporal-reasoning", 1, 1.0, 1.0, "+0.000", 0, 0],
        ["single-session-user", 1, 1.0, 0.0, "-1.000", 0, 1],
        ["overall", 3, 1.0, pytest.approx(2 / 3), "-0.333", 0, 1],
    ]
    answers = record.results["answers"]
    assert len(answers) == 3 * 2 * 2 and all(a["scorer"] == "panel" for a in answers)
    # the date reached the prompt only in the "on" arm; every judge prompt went to the panel, none to a reader
    reader_prompts = [r["body"]["messages"][-1]["content"] for r in b.servers["a"].requests]
    assert sum("[from 2023-" in p for p in reader_prompts) == 3 and len(reader_prompts) == 6
    assert all(r["body"]["messages"][0]["content"].startswith("You answer") for r in b.servers["b"].requests)
    # every answer judged by all three (one element each); an answer text repeated for the same question (by
    # the other arm or the other reader) is the same judge prompt, served from the response cache: 8 distinct
    # of 12
    distinct = {(a["item"], a["answer"]) for a in answers}
    assert len(distinct) == 8 and all(len(b.servers[j].requests) == 8 for j in ("j1", "j2", "j3"))
    out = b.tmp / "out"
    md = (out / "ablation_longmemeval_render_relation_validity.md").read_text()
    assert "Reportable: yes" in md and "| knowledge-update | 1 | 0.500 | 1.000 | +0.500 | 1 | 0 |" in md
    saved = json.loads((out / "ablation_longmemeval_render_relation_validity.json").read_text())
    assert (
        saved["models"]["answering"] == [b.model["a"], b.model["b"]]
        and saved["config"]["arms"]["on"] == {"render_relation_validity": True}
        and re.fullmatch(r"[0-9a-f]{40}(-dirty)?", saved["git_revision"])
    )

    # replay: the cassette alone (its entries dropped from the cache, then imported) reproduces the record
    cassette = out / "ablation_longmemeval_render_relation_validity.cassette.jsonl"
    entries = [json.loads(line) for line in cassette.read_text().splitlines()]
    assert {e["purpose"] for e in entries} >= {"extract", "synthesis", "judge"}
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        for e in entries:
            cache.delete(conn, e["key"])
    calls = b.chats()
    again = main(
        b.argv(
            "ablate",
            "--benchmark",
            "longmemeval",
            "--data",
            str(LME),
            "--replay",
            str(cassette),
            out="replayed",
        )
    )
    assert b.chats() == calls and again.results["usage"]["model_calls"] == 0
    strip = lambda r: {k: v for k, v in r.results.items() if k not in ("usage", "cassette")}  # noqa: E731
    assert strip(again) == strip(record) and [t.rows for t in again.tables] == [t.rows for t in record.tables]
    assert again.config["replayed_from"] == str(cassette)

    # a cassette lacking a response fails the replay rather than excluding what it cannot reproduce
    partial = b.tmp / "partial.jsonl"
    partial.write_text(
        "".join(
            line + "\n" for line in cassette.read_text().splitlines() if "beagle named Biscuit" not in line
        ),
        encoding="utf-8",
    )
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        for e in entries:
            cache.delete(conn, e["key"])
    with pytest.raises(ReplayIncompleteError, match="fx_ssu_1: 1 chunk"):
        main(
            b.argv(
                "ablate",
                "--benchmark",
                "longmemeval",
                "--data",
                str(LME),
                "--replay",
                str(partial),
                out="partial",
            )
        )
    assert b.chats() == calls
    # ... and one lacking a reader's answer raises the miss: the question is not quietly excluded
    dropped = next(e for e in entries if e["purpose"] == "synthesis")
    no_answer = b.tmp / "no_answer.jsonl"
    no_answer.write_text(
        "".join(json.dumps(e) + "\n" for e in entries if e["key"] != dropped["key"]), encoding="utf-8"
    )
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        for e in entries:
            cache.delete(conn, e["key"])
    with pytest.raises(
        ReplayMissError, match=f"the run is replayed and {dropped['model']} has no recorded response"
    ):
        main(
            b.argv(
                "ablate",
                "--benchmark",
                "longmemeval",
                "--data",
                str(LME),
                "--replay",
                str(no_answer),
                out="no_answer",
            )
        )
    assert b.chats() == calls


@pytest.mark.live
def test_noise_floor_compares_two_indexings_of_the_same_configuration(bench) -> None:  # type: ignore[no-untyped-def]
    b = bench(_lme_models(second_pass_drops="four days a week"))
    record = main(b.argv("noise", "--benchmark", "longmemeval", "--data", str(LME)))
    r1, r2 = f"{b.realm}_1", f"{b.realm}_2"
    assert record.config["realms"] == [r1, r2] and record.reportable
    # the second indexing asked the extraction model again (its own seed), which dropped one triple
    extraction = [
        r["body"]
        for r in b.servers["x"].requests
        if "<<<CHUNK" in r["body"]["messages"][-1]["content"]
        and not r["body"]["messages"][-1]["content"].startswith("Some entities")
    ]
    assert len(extraction) == 2 * 6 and sorted({e["seed"] for e in extraction}) == [1, 2]
    graphs = {row[0]: row[1:] for row in _table(record, "The two graphs")}
    assert graphs["fx_ku_1"] == [3, 3, 3, 2] and graphs["fx_ssu_1"] == [3, 3, 2, 2]
    # by hand (validity shown): index 1 — ssu a 1 b 0, ku a 1 b 1, tr a 1 b 1; index 2 — ku a 0 b 0 (the
    # four-days relation is missing), the rest as before
    assert _table(record, "Re-indexing noise floor") == [
        ["single-session-user", 1, 0.5, 0.5, "+0.000", 0, 0, "2 of 2"],
        ["temporal-reasoning", 1, 1.0, 1.0, "+0.000", 0, 0, "2 of 2"],
        ["knowledge-update", 1, 1.0, 0.0, "-1.000", 0, 1, "0 of 2"],
        ["overall", 3, pytest.approx(5 / 6), 0.5, "-0.333", 0, 1, "4 of 6"],
    ]


def ect_extraction(messages: list[dict[str, str]]) -> str:
    user = messages[-1]["content"]
    if user.startswith("Some entities and triples were missed"):
        return EMPTY
    text = CHUNK.search(user).group(1).lower()  # type: ignore[union-attr]
    metrics = [
        m.title()
        for m in ("revenue", "gross margin", "free cash flow", "operating margin", "comparable sales")
        if m in text
    ]
    return json.dumps(
        {
            "entities": [
                {"name": m, "type": "Metric", "description": f"{m}.", "aliases": []} for m in metrics
            ],
            "triples": [
                {
                    "subject": s,
                    "predicate": "reported_with",
                    "object": o,
                    "negated": False,
                    "confidence": 0.9,
                    "valid_from": None,
                    "valid_to": None,
                    "description": f"{s}, {o}.",
                }
                for s, o in zip(metrics, metrics[1:])
            ],
        }
    )


ECT_ANSWERS = {  # question start → (reader a, reader b); b refuses to process the cross-company question
    "What was Acme Semiconductor Corp.'s gross margin": (
        "Gross margin was 33.9%, 33.6%, 31.7% and 32.0% [1][2][3][4].",
        "Gross margin was 33.9% in Q1 2022 [1].",
    ),
    "What was Acme Semiconductor Corp.'s free cash flow": (
        "Free cash flow was $210 million [1].",
        "Free cash flow was $210 million in 2022-Q2 [1].",
    ),
    "In which quarter": (
        "Operating margin peaked in 2022-Q4 at 9.4% [4].",
        "There is not enough information to say.",
    ),
    "What were the gross margin": (
        "Acme's gross margin was 32.3% and Birch's operating margin was 9.4%.",
        None,
    ),
    "What was Birch Retail Inc.'s operating margin": (
        "The transcripts do not cover any quarter after 2026-Q1.",
        "Operating margin was 9.4% [2].",
    ),
    "What was Acme Semiconductor Corp.'s EMEA": (
        "The transcripts do not mention an EMEA store count.",
        "The transcripts do not mention it.",
    ),
}


def ect_reader(index: int) -> Reply:
    def reply(messages: list[dict[str, str]]) -> str:
        question, _ = _synthesis(messages)
        [text] = [
            v[index] for k, v in ECT_ANSWERS.items() if question.removeprefix("Question: ").startswith(k)
        ]
        if text is None:
            raise StubStatus(400, "the request was rejected by the provider's content filter")
        return text

    return reply


@pytest.mark.live
def test_reader_sweep_over_one_ectqa_graph_scores_strictly_and_lists_what_was_excluded(bench) -> None:  # type: ignore[no-untyped-def]
    b = bench({"x": ect_extraction, "a": ect_reader(0), "b": ect_reader(1)})
    record = main(
        b.argv(
            "sweep",
            "--benchmark",
            "ectqa",
            "--corpus",
            str(ECT_CORPUS),
            "--questions",
            str(ECT_QUESTIONS),
            "--expected-quarters",
            "4",
            judges=(),
        )
    )
    # reader b refused to process the cross-company question: it is excluded for both readers, listed, and the
    # run is not reportable (§9)
    assert not record.reportable
    assert (
        list(record.guard.excluded) == ["local_base:4"]
        and "content filter" in record.guard.excluded["local_base:4"]
    )
    assert (
        all(a["scorer"] == "strict" for a in record.results["answers"])
        and len(record.results["answers"]) == 10
    )
    # by hand over the five kept questions: a — multi-time F1 0.75 (32.0 ≠ 32.3) correct, single-time $210M ≠
    # $250M wrong, relative-time 2022-Q4 correct, both unanswerable declined; b — F1 0.4, wrong, declined an
    # answerable question (refused 1), gave a figure for an unanswerable one, declined the other
    a, b_ = b.model["a"], b.model["b"]
    assert _table(record, "2 answering models over one fixed graph") == [
        [a, 5, 0.8, 0, 1.0, 1.0, 0.0, 1.0],
        [b_, 5, 0.2, 1, 0.0, 0.0, 0.0, 0.5],
        ["union over all", 5, 0.8, "—", 1.0, 1.0, 0.0, 1.0],
    ]
    assert [t.headers for t in record.tables][0] == [
        "Answering model",
        "n",
        "overall",
        "refused",
        "multi-time",
        "relative-time",
        "single-time",
        "unanswerable",
    ]
    assert record.results["unreached"] == ["local_base:2"]
    assert _table(record, f"Reader {b_}") == [
        ["multi-time", 0.0],
        ["relative-time", 0.0],
        ["single-time", 0.0],
        ["unanswerable", 0.5],
        ["overall", 0.2],
    ]
    assert set(record.results["graphs"][b.realm]) == {"acme", "brch", "all"}
    md = (b.tmp / "out" / "reader_sweep_ect_qa.md").read_text()
    assert "**Not reportable**" in md and "local_base:4" in md


@pytest.mark.live
def test_an_instance_whose_indexing_failed_is_excluded_and_the_run_is_not_reportable(bench) -> None:  # type: ignore[no-untyped-def]
    extract = lme_extraction()

    def refusing(messages: list[dict[str, str]]) -> str:
        if "weekend hike" in messages[-1]["content"]:
            raise StubStatus(400, "the extraction prompt was refused")
        return extract(messages)

    b = bench({"x": refusing, "a": lme_reader("a"), "j1": literal_judge})
    record = main(
        b.argv("sweep", "--benchmark", "longmemeval", "--data", str(LME), readers=("a",), judges=("j1",))
    )
    assert not record.reportable and list(record.guard.excluded) == ["fx_ku_1"]
    assert re.search(r"indexing .*fx_ku_1: 1 chunk\(s\) failed extraction", record.guard.excluded["fx_ku_1"])
    assert record.guard.report()["scored"] == 2 and {a["item"] for a in record.results["answers"]} == {
        "fx_ssu_1",
        "fx_tr_1_abs",
    }
    # validity shown (the default): reader a answers both kept questions right
    assert _table(record, "1 answering models") == [
        [b.model["a"], 2, 1.0, 0, 1.0, 1.0],
        ["union over all", 2, 1.0, "—", 1.0, 1.0],
    ]


def test_the_command_line_refuses_what_a_run_cannot_do(capsys: pytest.CaptureFixture[str]) -> None:
    for argv, says in [
        (
            ["ablate", "--benchmark", "longmemeval", "--data", str(LME), "--reader", "m"],
            "give at least one --judge",
        ),
        (
            ["ablate", "--benchmark", "ectqa", "--corpus", str(ECT_CORPUS), "--reader", "m"],
            "needs --questions",
        ),
        (
            [
                "ablate",
                "--benchmark",
                "ectqa",
                "--corpus",
                "c",
                "--questions",
                "q",
                "--reader",
                "m",
                "--flag",
                "top_k",
            ],
            "boolean QueryParam field",
        ),
    ]:
        with pytest.raises(SystemExit):
            main(argv)
        assert says in capsys.readouterr().err


@pytest.mark.live
def test_a_caps_ablation_over_a_configured_space_with_a_questions_file(bench) -> None:  # type: ignore[no-untyped-def]
    from tests.fix_corpus import DOCS, extraction_answer

    def reader(messages: list[dict[str, str]]) -> str:
        question, prompt = _synthesis(messages)
        if "worked with" in question:
            return "Ada Lovelace worked with him." if "worked_with" in prompt else "The context does not say."
        return "She wrote them in 1843 [1]." if "1843" in prompt else "The context does not say."

    b = bench({"x": extraction_answer, "a": reader, "j1": literal_judge})
    docs = b.tmp / "docs"
    docs.mkdir()
    for name, text in DOCS.items():
        (docs / name).write_text(text, encoding="utf-8")
    cfg = yaml.safe_load(b.config.read_text())
    cfg.update(
        chunking={"chunk_chars": 200, "overlap_chars": 60},
        realms={b.realm: {"spaces": {"main": {"sources": [{"path": "docs", "glob": "*.txt"}]}}}},
    )
    b.config.write_text(yaml.safe_dump(cfg))
    questions = b.tmp / "questions.jsonl"
    questions.write_text(
        json.dumps(
            {
                "id": "q1",
                "question": "Who worked with Charles Babbage?",
                "answer": "Ada Lovelace",
                "category": "who",
            }
        )
        + "\n"
        + json.dumps(
            {
                "id": "q2",
                "question": "When did Ada Lovelace write her notes?",
                "answer": "1843",
                "category": "when",
            }
        )
        + "\n"
    )
    record = main(
        b.argv(
            "ablate",
            "--benchmark",
            "questions",
            "--data",
            str(questions),
            "--space",
            "main",
            "--flag",
            "caps",
            "--caps-tokens",
            "24",
            readers=("a",),
            judges=("j1",),
        )
    )
    assert record.reportable and record.config["arms"]["on"]["max_passage_tokens"] == 12
    # uncapped, the relations and the 1843 passage reach the reader; capped at 24 tokens they do not
    assert _table(record, "Paired ablation of caps") == [
        ["when", 1, 1.0, 0.0, "-1.000", 0, 1],
        ["who", 1, 1.0, 0.0, "-1.000", 0, 1],
        ["overall", 2, 1.0, 0.0, "-1.000", 0, 2],
    ]
    assert {a["item"]: a["scorer"] for a in record.results["answers"]} == {"q1": "panel", "q2": "strict"}
    on = [a["context_chars"] for a in record.results["answers"] if a["arm"] == "on"]
    off = [a["context_chars"] for a in record.results["answers"] if a["arm"] == "off"]
    assert max(on) < min(off)
