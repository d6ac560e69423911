"""Judge protocols (evaluation/judges.py; paper §8.2, §8.11 Table 11, §8.13; issue 17 item 3): the
element-wise judge, the majority panel without the answering model, and blind pairwise comparison with
transposition. Model calls are real litellm calls through ModelClient to local stub servers, one per judge
model, with scripted replies."""

from __future__ import annotations

import contextlib
import json
import re
import uuid
from collections.abc import Callable, Iterator
from fractions import Fraction

import psycopg
import pytest

from evaluation.judges import (
    ELEMENT_SYSTEM,
    Candidate,
    JudgeReplyError,
    PanelError,
    compare_pairs,
    element_prompt,
    judge_clients,
    judge_elements,
    panel,
    panel_elements,
    parse_element_reply,
    parse_pairwise_reply,
    same_model,
    tally,
    transposed,
)
from evaluation.scoring import split_elements
from pgrag_dag.config import LLMSettings
from pgrag_dag.providers.llm import ModelClient
from pgrag_dag.testing.stub_server import StubServer

GOLD = "33.9%, 33.6%, 31.7% and 32.3%"
ANSWER = "Gross margin was 33.9% in Q1 2022, 33.6% in Q2 2022, 31.7% in Q3 2022 and 32.0% in Q4 2022."
QUESTION = "What was Acme Semiconductor Corp.'s gross margin in each quarter of 2022?"
Reply = Callable[[list[dict[str, str]]], str]


def _elements_of(messages: list[dict[str, str]]) -> list[str]:
    ref = messages[-1]["content"].split("Reference elements:\n")[1].split("\n\nAnswer:\n")[0]
    return [line.split(". ", 1)[1] for line in ref.splitlines()]


def literal_judge(messages: list[dict[str, str]]) -> str:
    """A judge that calls an element Correct when the answer repeats it verbatim, Refusal when the answer
    says it cannot be determined, else Incorrect."""
    answer = messages[-1]["content"].split("\n\nAnswer:\n")[1]
    verdicts = [
        "Correct" if e in answer else "Refusal" if "cannot be determined" in answer else "Incorrect"
        for e in _elements_of(messages)
    ]
    return json.dumps({"elements": [{"index": i, "verdict": v} for i, v in enumerate(verdicts, 1)]})


@pytest.fixture
def judges(pg_dsn: str, conn: psycopg.Connection) -> Iterator[Callable[..., dict[str, ModelClient]]]:
    """Factory: ``judges(name=reply, ...)`` starts one stub server per judge and returns name → ModelClient
    (model ``openai/<name>-<random>`` so no cached response of another test is served); ``.servers`` maps
    the same names to their servers."""
    with contextlib.ExitStack() as stack:
        made: list[ModelClient] = []

        def make(**replies: Reply) -> dict[str, ModelClient]:
            out: dict[str, ModelClient] = {}
            make.servers = {}  # type: ignore[attr-defined]
            for name, reply in replies.items():
                server = stack.enter_context(StubServer(reply))
                model = f"openai/{name}-{uuid.uuid4().hex[:8]}"
                settings = LLMSettings(
                    models=[model], api_base=server.base_url, api_key="x", deadline_s=5, max_retries=0
                )
                [client] = judge_clients(pg_dsn, settings, [model]).values()
                made.append(client)
                out[model] = client
                make.servers[model] = server  # type: ignore[attr-defined]
            return out

        yield make
        for c in made:
            c.close()


def _chats(server: StubServer) -> list[dict]:
    return [r for r in server.requests if r["path"].endswith("/chat/completions")]


# -- element-wise judge -------------------------------------------------------------------------


def test_the_element_prompt_numbers_every_gold_element_and_the_parser_is_strict() -> None:
    elements = split_elements(GOLD)
    msgs = element_prompt(QUESTION, elements, ANSWER)
    assert msgs[0] == {"role": "system", "content": ELEMENT_SYSTEM}
    assert "1. 33.9%\n2. 33.6%\n3. 31.7%\n4. 32.3%" in msgs[1]["content"] and ANSWER in msgs[1]["content"]
    ok = (
        '{"elements": [{"index": 1, "verdict": "Correct"}, {"index": 2, "verdict": "correct"}, '
        '{"index": 3, "verdict": "Refusal"}, {"index": 4, "verdict": "Incorrect"}]}'
    )
    v = parse_element_reply("j", ok, elements)
    assert v.labels == ("Correct", "Correct", "Refusal", "Incorrect")
    assert v.rates == {"Correct": 0.5, "Refusal": 0.25, "Incorrect": 0.25}
    assert sum(v.rate(lab) for lab in ("Correct", "Refusal", "Incorrect")) == Fraction(1)
    assert parse_element_reply("j", f"```json\n{ok}\n```", elements).labels == v.labels
    bad = {
        "not JSON": "Correct, Correct, Refusal, Incorrect",
        "3 verdicts for 4 elements": '{"elements": [{"index": 1, "verdict": "Correct"}, '
        '{"index": 2, "verdict": "Correct"},'
        ' {"index": 3, "verdict": "Correct"}]}',
        "entry 2 is not": ok.replace('"index": 2', '"index": 3'),
        "entry 4 has verdict 'Partially correct'": ok.replace('"Incorrect"', '"Partially correct"'),
        'no "elements" list': '{"verdicts": []}',
    }
    for reason, reply in bad.items():
        with pytest.raises(JudgeReplyError, match=re.escape(reason)):
            parse_element_reply("j", reply, elements)


def test_rates_of_three_elements_sum_exactly_to_one() -> None:
    v = parse_element_reply(
        "j",
        json.dumps(
            {
                "elements": [
                    {"index": i, "verdict": lab}
                    for i, lab in enumerate(["Correct", "Refusal", "Incorrect"], 1)
                ]
            }
        ),
        ["a", "b", "c"],
    )
    assert [v.rate(lab) for lab in ("Correct", "Refusal", "Incorrect")] == [Fraction(1, 3)] * 3
    assert sum(v.rate(lab) for lab in ("Correct", "Refusal", "Incorrect")) == 1


@pytest.mark.live
def test_the_element_judge_runs_through_the_model_client(judges) -> None:  # type: ignore[no-untyped-def]
    [(model, client)] = judges(literal=literal_judge).items()
    server = judges.servers[model]
    v = judge_elements(client, question=QUESTION, elements=split_elements(GOLD), answer=ANSWER)
    # 33.9%, 33.6%, 31.7% repeated verbatim, 32.3% not: 3/4 Correct, 1/4 Incorrect (the strict F1 is 0.75 too)
    assert (v.judge, v.labels) == (model, ("Correct", "Correct", "Correct", "Incorrect"))
    assert v.rates == {"Correct": 0.75, "Refusal": 0.0, "Incorrect": 0.25}
    [req] = _chats(server)
    assert req["body"]["model"] == model.removeprefix("openai/") and req["body"]["response_format"] == {
        "type": "json_object"
    }
    # the unanswerable row: one element "unanswerable"; the scripted judge calls a refusal a Refusal
    refused = judge_elements(
        client,
        question="What was it in 2026-Q2?",
        elements=["unanswerable"],
        answer="This cannot be determined from the transcripts.",
    )
    assert refused.rates == {"Correct": 0.0, "Refusal": 1.0, "Incorrect": 0.0}


@pytest.mark.live
def test_a_malformed_judge_reply_is_an_error_and_is_not_kept_in_the_cache(judges) -> None:  # type: ignore[no-untyped-def]
    [(model, client)] = judges(sloppy=lambda messages: "All four look right to me.").items()
    server = judges.servers[model]
    with pytest.raises(JudgeReplyError, match=rf"judge {re.escape(model)} gave an unusable reply \(not JSON"):
        judge_elements(client, question=QUESTION, elements=split_elements(GOLD), answer=ANSWER)
    server.answer = literal_judge  # the judge is asked again, not served the bad reply from the cache
    assert judge_elements(client, question=QUESTION, elements=split_elements(GOLD), answer=ANSWER).rate(
        "Correct"
    ) == Fraction(3, 4)
    assert len(_chats(server)) == 2


# -- majority panel -----------------------------------------------------------------------------


def test_tally_majority_plurality_and_ties_over_any_verdict_type() -> None:
    three = tally({"a": "Correct", "b": "Correct", "c": "Incorrect"})
    assert (three.verdict, three.majority, three.tie) == ("Correct", True, False)
    split = tally({"a": True, "b": False})
    assert (split.verdict, split.tie, split.tied) == (None, True, (True, False))
    four = tally({"a": "Correct", "b": "Correct", "c": "Refusal", "d": "Incorrect"})
    assert (four.verdict, four.majority, four.tie) == (
        "Correct",
        False,
        False,
    )  # most votes, not more than half
    spread = tally({"a": "Correct", "b": "Refusal", "c": "Incorrect"})
    assert (spread.verdict, spread.tied) == (None, ("Correct", "Refusal", "Incorrect"))
    tuples = tally(
        {"a": ("Correct", "Incorrect"), "b": ("Correct", "Incorrect"), "c": ("Correct", "Correct")}
    )
    assert tuples.verdict == ("Correct", "Incorrect")
    with pytest.raises(PanelError):
        tally({})


def test_the_answering_model_is_excluded_from_its_own_jury() -> None:
    asked: list[str] = []

    def ask(judge: str) -> bool:
        asked.append(judge)
        return judge != "groq/llama-3.3-70b"

    p = panel(
        ["gemini/gemini-3.6-flash", "groq/llama-3.3-70b", "openai/gpt-oss-120b"],
        answering_model="vertex_ai/gemini-3.6-flash",
        ask=ask,
    )
    assert asked == ["groq/llama-3.3-70b", "openai/gpt-oss-120b"]
    assert (p.excluded, p.verdict, p.tie) == (
        ("gemini/gemini-3.6-flash",),
        None,
        True,
    )  # 1–1 without the author
    with pytest.raises(PanelError, match="no judge left for answers of openai/gpt-4o"):
        panel(["gpt-4o", "azure/GPT-4o"], answering_model="openai/gpt-4o", ask=ask)
    assert same_model("openai/gpt-4o", "gpt-4o") and not same_model("gpt-4o-mini", "openai/gpt-4o")


@pytest.mark.live
def test_an_element_panel_through_the_model_client_skips_the_author(judges) -> None:  # type: ignore[no-untyped-def]
    def harsh(messages: list[dict[str, str]]) -> str:
        n = len(_elements_of(messages))
        return json.dumps({"elements": [{"index": i, "verdict": "Incorrect"} for i in range(1, n + 1)]})

    clients = judges(literal=literal_judge, harsh=harsh, author=literal_judge, second=literal_judge)
    author = next(m for m in clients if "/author-" in m)
    verdicts = panel_elements(
        clients, answering_model=author, question=QUESTION, elements=split_elements(GOLD), answer=ANSWER
    )
    # literal and second say Correct on the first three elements, harsh says Incorrect: 2–1 Correct.
    # Element 4: all three say Incorrect.
    assert [v.verdict for v in verdicts] == ["Correct", "Correct", "Correct", "Incorrect"]
    assert [v.majority for v in verdicts] == [True] * 4
    assert all(v.excluded == (author,) and len(v.votes) == 3 for v in verdicts)
    assert _chats(judges.servers[author]) == []  # the author was never asked


# -- blind pairwise comparison with transposition -----------------------------------------------


def test_transposition_a_win_needs_the_same_answer_in_both_orders() -> None:
    x, y = Candidate("x text", "m1", "q=0.5"), Candidate("y text", "m2", "q=1.0")
    assert transposed("q", "j", "A", "B", x, y).winner == "q=0.5"  # x as A, then x as B: x both times
    assert transposed("q", "j", "B", "A", x, y).winner == "q=1.0"
    first_always = transposed("q", "j", "A", "A", x, y)  # picks whatever is shown first
    assert (first_always.winner, first_always.position_determined) == (None, True)
    assert parse_pairwise_reply("j", '{"winner": "B", "reason": "figures"}') == "B"
    with pytest.raises(JudgeReplyError, match="\"winner\" is 'tie'"):
        parse_pairwise_reply("j", '{"winner": "tie"}')


@pytest.mark.live
def test_blind_pairwise_counts_wins_position_ties_and_skips_authors(judges) -> None:  # type: ignore[no-untyped-def]
    def content(messages: list[dict[str, str]]) -> str:  # prefers the answer quoting $250 million
        a = messages[-1]["content"].split("Answer A:\n")[1].split("\n\nAnswer B:\n")[0]
        return json.dumps({"winner": "A" if "$250 million" in a else "B"})

    def first(messages: list[dict[str, str]]) -> str:  # always the first-presented answer
        return '{"winner": "A"}'

    clients = judges(content=content, first=first, reader=content)
    reader = next(m for m in clients if "/reader-" in m)
    good = Candidate("Free cash flow was $250 million.", reader, "q=0.5")
    vague = Candidate("Free cash flow improved.", "openai/other-reader", "q=1.0")
    worse = Candidate("It was roughly flat.", "openai/other-reader", "q=1.0")
    good2 = Candidate("About $250 million of free cash flow.", "openai/third-reader", "q=0.5")
    report = compare_pairs(
        [
            ("fcf", "What was free cash flow?", good, vague),
            ("fcf2", "And in the next quarter?", worse, good2),
        ],
        clients,
    )
    content_judge = next(m for m in clients if "/content-" in m)
    first_judge = next(m for m in clients if "/first-" in m)
    # fcf: the reader wrote answer x, so it may not judge; content picks q=0.5, first is position-determined.
    # fcf2: all three judge; both content judges pick q=0.5, first is position-determined again.
    assert report.wins == {"q=0.5": 3, "q=1.0": 0}
    assert report.ties == 2
    assert report.position_determined == {content_judge: 0, first_judge: 2, reader: 0}
    assert report.excluded == {"fcf": [reader]}
    assert [
        (j.question_id, j.first, j.second, j.winner) for j in report.judgements if j.judge == first_judge
    ] == [("fcf", "A", "A", None), ("fcf2", "A", "A", None)]
    # every pair was asked twice with the labels swapped, and the prompts are blind
    asked = [r["body"]["messages"][-1]["content"] for r in _chats(judges.servers[content_judge])]
    assert len(asked) == 4
    assert asked[0].index(good.text) < asked[0].index(vague.text) and asked[1].index(vague.text) < asked[
        1
    ].index(good.text)
    for text in asked:
        assert "q=0.5" not in text and "q=1.0" not in text and "reader" not in text
    with pytest.raises(PanelError, match="no judge may grade question solo"):
        compare_pairs(
            [("solo", "?", Candidate("a", content_judge, "s"), Candidate("b", first_judge, "t"))],
            {m: c for m, c in clients.items() if m in (content_judge, first_judge)},
        )
