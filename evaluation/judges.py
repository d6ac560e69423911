"""LLM-judge protocols: the element-wise judge, the majority panel and blind transposed pairwise comparison.

- **Element-wise judge** (ECT-QA's native protocol, §8.11 and Table 11): a judge model classifies each
  gold answer element as ``Correct``, ``Refusal`` or ``Incorrect``; a query's three rates sum to one.
  The authors' verbatim rubric is not public in full, so :func:`element_prompt` follows their described
  categories, not their text (§9). For an unanswerable question the one element is ``unanswerable`` and
  a declining answer is ``Correct`` (Table 11's "unanswerable" row rewards correct refusal).
- **Majority panel** (§8.2): N judge models, the answering model excluded from its own jury
  (:func:`same_model`); over any hashable verdict type; a tie for most votes is reported as a tie.
- **Blind pairwise comparison** (§8.13): the judge sees only the question and two answers labelled A
  and B; every pair is asked twice with the labels swapped; a win counts only when the judge picks the
  same underlying answer both times, otherwise the judgement is position-determined and reported as a
  tie; no judge grades an answer written by its own model.

Every judge call goes through :class:`pgrag_dag.providers.llm.ModelClient` (litellm with the response cache),
one client per judge model (:func:`judge_clients`), with ``purpose="judge"``. A reply that is not the JSON
asked for raises :class:`JudgeReplyError` naming the judge, and its cached response is dropped
(:meth:`~pgrag_dag.providers.llm.ModelClient.forget`) so that a rerun asks again.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any, Generic, Literal, TypeVar

from pgrag_dag.config import LLMSettings
from pgrag_dag.errors import PgragError
from pgrag_dag.providers.llm import ModelClient

V = TypeVar("V", bound=Hashable)
Label = Literal["Correct", "Refusal", "Incorrect"]
LABELS: tuple[Label, ...] = ("Correct", "Refusal", "Incorrect")
Messages = list[dict[str, str]]


class JudgeReplyError(PgragError):
    """A judge model's reply is not the JSON its prompt asked for (``judge``: the model, ``reply``: the
    text, ``reason``: what is wrong)."""

    def __init__(self, judge: str, reason: str, reply: str) -> None:
        super().__init__(f"judge {judge} gave an unusable reply ({reason}): {reply[:200]!r}")
        self.judge, self.reason, self.reply = judge, reason, reply


class PanelError(PgragError):
    """No judge is left to grade once the answering models are excluded (``excluded``: the judges left
    out)."""

    def __init__(self, message: str, excluded: Sequence[str]) -> None:
        super().__init__(message)
        self.excluded = tuple(excluded)


def same_model(a: str, b: str) -> bool:
    """Whether two litellm model names name the same model: the last ``/``-separated part, case-folded
    (``openai/gpt-4o`` = ``gpt-4o`` = ``azure/GPT-4o``; ``gpt-4o-mini`` ≠ ``gpt-4o``)."""
    return a.rsplit("/", 1)[-1].casefold() == b.rsplit("/", 1)[-1].casefold()


def judge_clients(
    dsn: str, settings: LLMSettings, models: Sequence[str], *, spool_dir: Path | None = None
) -> dict[str, ModelClient]:
    """One :class:`ModelClient` per judge model (name → client), each with ``settings`` (``api_base``,
    key, deadline, temperature, …) and a failover list of that one model — as
    :meth:`pgrag_dag.engine.Engine.client` builds the engine's. Close them when done."""
    return {
        m: ModelClient(dsn, settings.model_copy(update={"models": [m]}), spool_dir=spool_dir) for m in models
    }


def _json_object(judge: str, reply: str) -> dict[str, Any]:
    text = reply.strip()
    if text.startswith("```"):  # a fenced block is still JSON; anything else around it is not
        text = text.strip("`").removeprefix("json").strip()
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise JudgeReplyError(judge, f"not JSON: {exc.msg}", reply) from None
    if not isinstance(obj, dict):
        raise JudgeReplyError(judge, "not a JSON object", reply)
    return obj


def _ask(client: ModelClient, judge: str, messages: Messages, parse: Callable[[str, str], Any]) -> Any:
    completion = client.complete(messages, purpose="judge", json_mode=True)
    try:
        return parse(judge, completion.text)
    except JudgeReplyError:
        client.forget(completion)
        raise


# -- element-wise judge -------------------------------------------------------------------------

ELEMENT_SYSTEM = """You grade an answer against the reference answer of a question, one reference element at \
a time.
For each numbered reference element decide exactly one verdict:
- "Correct": the answer states this element with the same value or meaning (figures may differ only by \
rounding).
- "Refusal": the answer declines to give this element (says it is unavailable, unknown or cannot be \
determined).
- "Incorrect": the answer gives a different value or meaning for this element, or leaves it out without \
declining.
If the reference element is "unanswerable", an answer that declines is "Correct" and an answer that gives a \
value is "Incorrect".
Reply with one JSON object only: {"elements": [{"index": 1, "verdict": "Correct"}, ...]}, one entry per \
reference element, in order."""


@dataclass(frozen=True)
class ElementVerdict:
    """One judge's element-wise verdict on one answer: ``labels[i]`` for gold element ``i``; the rates
    (fractions of the elements) sum to one."""

    judge: str
    elements: tuple[str, ...]
    labels: tuple[Label, ...]

    def rate(self, label: Label) -> Fraction:
        """Exact share of the elements judged ``label``."""
        return Fraction(self.labels.count(label), len(self.labels))

    @property
    def rates(self) -> dict[Label, float]:
        """``{"Correct": c, "Refusal": r, "Incorrect": i}`` with c + r + i = 1."""
        return {lab: float(self.rate(lab)) for lab in LABELS}


def element_prompt(question: str, elements: Sequence[str], answer: str) -> Messages:
    """The element-wise judge prompt (chat messages): the question, the numbered gold elements, the answer."""
    if not elements:
        raise ValueError("an element-wise judgement needs at least one gold element")
    ref = "\n".join(f"{i}. {e}" for i, e in enumerate(elements, 1))
    return [
        {"role": "system", "content": ELEMENT_SYSTEM},
        {
            "role": "user",
            "content": f"Question:\n{question}\n\nReference elements:\n{ref}\n\nAnswer:\n{answer}",
        },
    ]


def parse_element_reply(judge: str, reply: str, elements: Sequence[str]) -> ElementVerdict:
    """Parse a judge's reply strictly: one JSON object ``{"elements": [...]}`` with exactly one entry per
    gold element, ``index`` 1…n in order and ``verdict`` one of ``Correct``/``Refusal``/``Incorrect``
    (case-insensitive; nothing else). Raises :class:`JudgeReplyError` otherwise."""
    obj = _json_object(judge, reply)
    rows = obj.get("elements")
    if not isinstance(rows, list):
        raise JudgeReplyError(judge, 'no "elements" list', reply)
    if len(rows) != len(elements):
        raise JudgeReplyError(judge, f"{len(rows)} verdicts for {len(elements)} elements", reply)
    labels: list[Label] = []
    by_name = {lab.casefold(): lab for lab in LABELS}
    for i, row in enumerate(rows, 1):
        if not isinstance(row, dict) or row.get("index") != i:
            raise JudgeReplyError(judge, f'entry {i} is not {{"index": {i}, ...}}', reply)
        verdict = row.get("verdict")
        if not isinstance(verdict, str) or verdict.strip().casefold() not in by_name:
            raise JudgeReplyError(judge, f"entry {i} has verdict {verdict!r}", reply)
        labels.append(by_name[verdict.strip().casefold()])
    return ElementVerdict(judge, tuple(elements), tuple(labels))


def judge_elements(
    client: ModelClient, *, question: str, elements: Sequence[str], answer: str, judge: str | None = None
) -> ElementVerdict:
    """Ask one judge model (``client``; ``judge`` its name, default the client's first model) for the
    element-wise verdict on ``answer``. Raises :class:`JudgeReplyError` on a malformed reply and the
    client's :class:`~pgrag_dag.errors.ModelError` family when the model cannot be reached."""
    name = judge or client.settings.models[0]
    return _ask(
        client,
        name,
        element_prompt(question, elements, answer),
        lambda j, text: parse_element_reply(j, text, elements),
    )


# -- majority panel -----------------------------------------------------------------------------


@dataclass(frozen=True)
class PanelVerdict(Generic[V]):
    """A panel's verdict: ``verdict`` the one most votes went to (``None`` on a tie), ``tied`` the verdicts
    sharing the most votes when there is a tie, ``majority`` whether the verdict has more than half the
    votes, ``votes`` judge → verdict, ``excluded`` the judges left out as the answering model."""

    verdict: V | None
    tied: tuple[V, ...]
    majority: bool
    votes: Mapping[str, V]
    excluded: tuple[str, ...] = ()

    @property
    def tie(self) -> bool:
        """Two or more verdicts share the most votes."""
        return len(self.tied) > 1


def eligible_judges(judges: Sequence[str], answering_models: Sequence[str]) -> tuple[list[str], list[str]]:
    """(judges that may grade, judges excluded because they wrote an answer being graded)."""
    out = [j for j in judges if any(same_model(j, m) for m in answering_models)]
    return [j for j in judges if j not in out], out


def tally(votes: Mapping[str, V], *, excluded: Sequence[str] = ()) -> PanelVerdict[V]:
    """Count ``votes`` (judge → verdict): the verdict with the most votes wins; a tie for most is
    reported (``verdict=None``, ``tied`` the tied verdicts, in first-vote order). Raises
    :class:`PanelError` on no votes."""
    if not votes:
        raise PanelError("a panel needs at least one vote", excluded)
    counts = Counter(votes.values())
    top = max(counts.values())
    tied = tuple(v for v in dict.fromkeys(votes.values()) if counts[v] == top)
    winner = tied[0] if len(tied) == 1 else None
    return PanelVerdict(
        winner,
        tied if len(tied) > 1 else (),
        winner is not None and top * 2 > len(votes),
        dict(votes),
        tuple(excluded),
    )


def panel(judges: Sequence[str], *, answering_model: str, ask: Callable[[str], V]) -> PanelVerdict[V]:
    """Majority panel over ``judges`` (model names) for an answer written by ``answering_model``: every
    judge that is not the answering model (:func:`same_model`) gives its verdict ``ask(judge)``, then
    :func:`tally`. Raises :class:`PanelError` when excluding the answering model leaves no judge."""
    keep, excluded = eligible_judges(judges, [answering_model])
    if not keep:
        raise PanelError(
            f"no judge left for answers of {answering_model}: the panel {list(judges)} holds only "
            "the answering model, which may not grade itself",
            excluded,
        )
    return tally({j: ask(j) for j in keep}, excluded=excluded)


def panel_elements(
    clients: Mapping[str, ModelClient],
    *,
    answering_model: str,
    question: str,
    elements: Sequence[str],
    answer: str,
) -> list[PanelVerdict[Label]]:
    """The element-wise judge asked of a panel (judge name → client): one :class:`PanelVerdict` per gold
    element, over the eligible judges' labels for it."""
    verdicts: dict[str, ElementVerdict] = {}

    def ask(judge: str) -> tuple[Label, ...]:
        verdicts[judge] = judge_elements(
            clients[judge], question=question, elements=elements, answer=answer, judge=judge
        )
        return verdicts[judge].labels

    whole = panel(list(clients), answering_model=answering_model, ask=ask)
    return [
        tally({j: v.labels[i] for j, v in verdicts.items()}, excluded=whole.excluded)
        for i in range(len(elements))
    ]


# -- blind pairwise comparison with transposition -----------------------------------------------

PAIRWISE_SYSTEM = """You compare two answers to one question. Judge only what they say: which answers the \
question better, with the right facts and without extraneous material.
Reply with one JSON object only: {"winner": "A"} or {"winner": "B"}, optionally with "reason"."""


@dataclass(frozen=True)
class Candidate:
    """One answer to compare: its ``text``, the ``model`` that wrote it, and the ``setting`` it stands for
    (an arm such as ``q=0.5``; wins are counted per setting)."""

    text: str
    model: str
    setting: str


@dataclass(frozen=True)
class PairwiseJudgement:
    """One judge on one pair, asked twice: ``first`` the label it chose with ``x`` as A, ``second`` the label
    it chose with ``y`` as A; ``winner`` the setting it chose both times, or ``None`` when its two choices
    name different answers (position-determined: a tie)."""

    question_id: str
    judge: str
    first: Literal["A", "B"]
    second: Literal["A", "B"]
    winner: str | None

    @property
    def position_determined(self) -> bool:
        """The judge's pick followed the label, not the answer."""
        return self.winner is None


@dataclass
class PairwiseReport:
    """Blind pairwise results: ``wins`` per setting (content-determined judgements only), ``ties``
    (position-determined judgements), ``position_determined`` per judge, ``excluded`` per question the
    judges left out as authors, and every judgement."""

    wins: dict[str, int] = field(default_factory=dict)
    ties: int = 0
    position_determined: dict[str, int] = field(default_factory=dict)
    excluded: dict[str, list[str]] = field(default_factory=dict)
    judgements: list[PairwiseJudgement] = field(default_factory=list)


def pairwise_prompt(question: str, answer_a: str, answer_b: str) -> Messages:
    """The blind comparison prompt: the question and two answers labelled A and B, nothing about who or
    what produced them."""
    return [
        {"role": "system", "content": PAIRWISE_SYSTEM},
        {
            "role": "user",
            "content": f"Question:\n{question}\n\nAnswer A:\n{answer_a}\n\nAnswer B:\n{answer_b}",
        },
    ]


def parse_pairwise_reply(judge: str, reply: str) -> Literal["A", "B"]:
    """Parse ``{"winner": "A" | "B"}`` strictly (other keys ignored). Raises :class:`JudgeReplyError`."""
    winner = _json_object(judge, reply).get("winner")
    if winner not in ("A", "B"):
        raise JudgeReplyError(judge, f'"winner" is {winner!r}, not "A" or "B"', reply)
    return winner  # type: ignore[return-value]


def transposed(
    question_id: str,
    judge: str,
    first: Literal["A", "B"],
    second: Literal["A", "B"],
    x: Candidate,
    y: Candidate,
) -> PairwiseJudgement:
    """Combine the two presentations (``x`` as A, then ``y`` as A): a win for the answer picked both times,
    else a position-determined tie."""
    pick1 = x if first == "A" else y
    pick2 = y if second == "A" else x
    return PairwiseJudgement(question_id, judge, first, second, pick1.setting if pick1 is pick2 else None)


def compare_pairs(
    items: Sequence[tuple[str, str, Candidate, Candidate]], clients: Mapping[str, ModelClient]
) -> PairwiseReport:
    """Blind transposed comparison of ``items`` — (question id, question, x, y) — by every judge of
    ``clients`` (name → client) that wrote neither answer. Raises :class:`PanelError` naming the question
    when no judge may grade a pair, and :class:`JudgeReplyError` on a malformed reply."""
    report = PairwiseReport()
    for qid, question, x, y in items:
        keep, excluded = eligible_judges(list(clients), [x.model, y.model])
        if not keep:
            raise PanelError(
                f"no judge may grade question {qid}: every judge wrote one of its answers "
                f"({x.model}, {y.model})",
                excluded,
            )
        if excluded:
            report.excluded[qid] = excluded
        for judge in keep:
            first = _ask(
                clients[judge], judge, pairwise_prompt(question, x.text, y.text), parse_pairwise_reply
            )
            second = _ask(
                clients[judge], judge, pairwise_prompt(question, y.text, x.text), parse_pairwise_reply
            )
            j = transposed(qid, judge, first, second, x, y)
            report.judgements.append(j)
            report.position_determined.setdefault(judge, 0)
            if j.winner is None:
                report.ties += 1
                report.position_determined[judge] += 1
            else:
                report.wins[j.winner] = report.wins.get(j.winner, 0) + 1
        for s in (x.setting, y.setting):
            report.wins.setdefault(s, 0)
    return report
