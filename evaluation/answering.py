"""What the paired harnesses (:mod:`evaluation.ablation`) index, ask and score: benchmark items as questions
over spaces, the model clients of every role, indexing with the exclusion guard, one answer per (item, arm,
reader), and its score (§8.2, §8.4, §8.11, §8.12, §8.14, §9).

- **Items** (:class:`Item`): a LongMemEval instance is one item over its own space (§8.1), asked with its
  question date appended (``(Current date: …)``, as LongMemEval's own prompt states it); an ECT-QA question
  is one item over its company's space, or the combined space ``all`` for cross-company and unanswerable
  questions; any configured space takes a JSONL file of questions (:func:`questions_items`).
- **Clients** (:class:`HarnessClient`): one :class:`~pgrag_dag.providers.llm.ModelClient` per model name (any
  litellm model; ``api_base`` per model or for all), recording every response it served so a run can be
  written as a cassette and replayed (``replay_only``: a prompt not in the cache raises
  :class:`~pgrag_dag.errors.ReplayMissError`, no model is called); ``seed`` is sent with every request (and
  keys the cache), so the noise floor's second indexing is asked again instead of being served the first
  one's responses.
- **Exclusions** (the guard, §9): an item whose space failed to index (a stage raised, or a chunk's
  extraction failed — "a session both extraction prompts refused", §8.2), an item a reader refused or
  failed to answer (:class:`~pgrag_dag.errors.ModelError` other than a replay miss or a refused API key,
  which stop the run) and an item a judge could not grade is excluded, with the reason, on the run's
  :class:`~evaluation.benchmarks.RunGuard`; excluded items are left out of every arm, so the arms stay paired.
- **Scores** (:func:`score_answer`), in [0, 1]: ``strict`` — the strict scorer of §8.11, 1 when F1 ≥ 0.60
  (ECT-QA golds that are figures or periods, refusals on unanswerable questions); ``panel`` — the
  element-wise judge asked of a majority panel without the answering model (§8.2), the share of gold
  elements the panel calls ``Correct`` (a tie is not ``Correct``): LongMemEval, and ECT-QA golds that name
  no figure or period.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from evaluation.benchmarks import (
    Document,
    EctQuestion,
    EctTranscript,
    LongMemEvalInstance,
    RunGuard,
    ectqa_spaces,
    space_spec,
    write_space_jsonl,
)
from evaluation.judges import JudgeReplyError, PanelError, panel_elements
from evaluation.scoring import is_refusal, score_strict, split_elements
from pgrag_dag.config import LLMSettings
from pgrag_dag.engine import Engine
from pgrag_dag.errors import ModelAccessError, ModelError, PgragError, ReplayMissError
from pgrag_dag.providers.llm import Completion, ModelClient
from pgrag_dag.query import QueryParam, query

Scorer = Literal["strict", "panel"]


class ReplayIncompleteError(PgragError):
    """A replayed run (``replay_only``) could not index a space from its cassette: the extraction stage
    recorded failures (a replay miss is a failed chunk there) instead of raising."""


@dataclass(frozen=True)
class Item:
    """One question of a run: ``id`` (unique), ``category`` (the table row), ``question`` (as asked, dates
    appended), ``gold`` (the reference answer), ``answerable`` (false: declining is correct), ``space``
    (what it reads), ``scorer`` (``auto``: strict when the gold is a figure or period, else the panel)."""

    id: str
    category: str
    question: str
    gold: str
    answerable: bool
    space: str
    scorer: Literal["auto", "panel"] = "panel"

    @property
    def elements(self) -> list[str]:
        """The gold elements the judge grades: ``["unanswerable"]`` for an unanswerable item, else the gold
        split (:func:`~evaluation.scoring.split_elements`) for an ``auto`` item and the whole gold for a
        ``panel`` one (LongMemEval's golds are prose)."""
        if not self.answerable:
            return ["unanswerable"]
        return (split_elements(self.gold) or [self.gold]) if self.scorer == "auto" else [self.gold]


Spaces = dict[str, list[Document]]


def longmemeval_items(instances: Sequence[LongMemEvalInstance]) -> tuple[list[Item], Spaces]:
    """One item and one space (named by its ``question_id``) per instance, category its ``question_type``;
    scored by the panel."""
    items, spaces = [], {}
    for inst in instances:
        spaces[inst.question_id] = inst.documents()
        items.append(
            Item(
                inst.question_id,
                inst.question_type,
                f"{inst.question} (Current date: {inst.question_date}.)",
                inst.answer,
                inst.answerable,
                inst.question_id,
            )
        )
    return items, spaces


def ectqa_items(
    questions: Sequence[EctQuestion], transcripts: Sequence[EctTranscript], *, combined: str = "all"
) -> tuple[list[Item], Spaces]:
    """One item per question, category Table 11's row (:attr:`~evaluation.benchmarks.EctQuestion.category`),
    reading its one company's space (stock code, lower-cased), else ``combined``; scored ``auto``. The spaces
    are :func:`~evaluation.benchmarks.ectqa_spaces` (only those an item reads)."""
    spaces = ectqa_spaces(transcripts, combined=combined)
    items = []
    for q in questions:
        companies = [c.lower() for c in q.companies]
        space = companies[0] if q.answerable and len(companies) == 1 and companies[0] in spaces else combined
        items.append(Item(q.id, q.category, q.question, q.answer, q.answerable, space, "auto"))
    read = {i.space for i in items}
    return items, {s: d for s, d in spaces.items() if s in read}


def questions_items(path: Path, *, space: str) -> list[Item]:
    """Questions over a configured space, from a JSONL file: one object per line with ``id``, ``question``,
    ``answer``, optional ``category`` (default ``all``), ``answerable`` (default true), ``space`` (default
    ``space``) and ``scorer`` (``auto`` or ``panel``, default ``auto``). Raises ``ValueError`` naming the line
    of a malformed one."""
    items = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            r = json.loads(line)
            items.append(
                Item(
                    str(r["id"]),
                    str(r.get("category", "all")),
                    str(r["question"]),
                    str(r["answer"]),
                    bool(r.get("answerable", True)),
                    str(r.get("space", space)),
                    r.get("scorer", "auto"),
                )
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{path}:{n}: not a question line ({exc!r})") from None
    return items


# -- model clients ----------------------------------------------------------------------------------


class HarnessClient(ModelClient):
    """A :class:`~pgrag_dag.providers.llm.ModelClient` that records every response it serves
    (:attr:`recorded`: cache key → cassette entry, :mod:`pgrag_dag.store.cache`), optionally sends a sampling
    ``seed`` with every request (with litellm's ``drop_params`` for providers without one; both key the cache)
    and, with ``replay_only``, never calls a model: a prompt missing from the cache raises
    :class:`~pgrag_dag.errors.ReplayMissError`."""

    def __init__(
        self,
        dsn: str,
        settings: LLMSettings,
        *,
        seed: int | None = None,
        replay_only: bool = False,
        spool_dir: Path | None = None,
    ) -> None:
        super().__init__(dsn, settings, spool_dir=spool_dir, cached_only=replay_only)
        self.seed, self.replay_only = seed, replay_only
        self.recorded: dict[str, dict[str, Any]] = {}
        self._rec = threading.Lock()

    def params(self, *, json_mode: bool) -> dict[str, Any]:
        """The parent's parameters, plus ``seed`` and ``drop_params`` when a seed is set."""
        p = super().params(json_mode=json_mode)
        return {**p, "seed": self.seed, "drop_params": True} if self.seed is not None else p

    def complete(
        self,
        messages: list[dict[str, str]],
        *,
        purpose: str,
        json_mode: bool = True,
        on_text: Callable[[str], None] | None = None,
    ) -> Completion:
        """As :meth:`ModelClient.complete`, recording the response served."""
        c = super().complete(messages, purpose=purpose, json_mode=json_mode, on_text=on_text)
        with self._rec:
            self.recorded[c.key] = {
                "key": c.key,
                "prompt_key": c.prompt_key,
                "model": c.model,
                "purpose": purpose,
                "request": {"messages": messages, "params": self.params(json_mode=json_mode)},
                "response": c.text,
                "prompt_tokens": c.prompt_tokens,
                "completion_tokens": c.completion_tokens,
            }
        return c

    def forget(self, completion: Completion) -> None:
        """As :meth:`ModelClient.forget`, and no longer recorded."""
        super().forget(completion)
        with self._rec:
            self.recorded.pop(completion.key, None)


@dataclass
class Models:
    """The models of a run by role — ``extraction`` (one name), ``readers`` and ``judges`` (litellm names) —
    and how to reach them: ``llm`` (the configured :class:`~pgrag_dag.config.LLMSettings`: key, deadline,
    temperature, default ``api_base``), ``api_bases`` (model → its own ``api_base``), ``replay_only``."""

    extraction: str
    readers: list[str]
    judges: list[str]
    llm: LLMSettings
    api_bases: dict[str, str] = field(default_factory=dict)
    replay_only: bool = False
    clients: list[HarnessClient] = field(default_factory=list)

    def settings_for(self, model: str) -> LLMSettings:
        """``llm`` with ``model`` alone as its failover list, at its own ``api_base`` when it has one."""
        return self.llm.model_copy(
            update={"models": [model], "api_base": self.api_bases.get(model, self.llm.api_base)}
        )

    def client(self, dsn: str, model: str, *, seed: int | None = None) -> HarnessClient:
        """A new recording client for ``model`` (closed by :meth:`close`)."""
        c = HarnessClient(dsn, self.settings_for(model), seed=seed, replay_only=self.replay_only)
        self.clients.append(c)
        return c

    def as_record(self) -> dict[str, Any]:
        """The names per role, as the run record lists them."""
        return {"extraction": self.extraction, "answering": list(self.readers), "judges": list(self.judges)}

    def recorded(self) -> list[dict[str, Any]]:
        """Every response any client served, one per cache key, sorted by key (a cassette's lines)."""
        out: dict[str, dict[str, Any]] = {}
        for c in self.clients:
            out.update(c.recorded)
        return [out[k] for k in sorted(out)]

    def close(self) -> None:
        """Close every client made."""
        for c in self.clients:
            c.close()


# -- indexing ---------------------------------------------------------------------------------------


def declare_spaces(spaces: Spaces, directory: Path) -> dict[str, dict[str, Any]]:
    """Write each space's documents as JSONL under ``directory`` and return the ``spaces:`` mapping of a
    realm in ``pgrag.yaml`` that reads them (:func:`~evaluation.benchmarks.space_spec`)."""
    return {
        name: space_spec(write_space_jsonl(docs, directory / f"space_{n:04d}.jsonl"))
        for n, (name, docs) in enumerate(sorted(spaces.items()))
    }


def index_space(engine: Engine, realm: str, space: str, *, communities: bool) -> dict[str, Any]:
    """Index one space (every stage, :func:`~pgrag_dag.pipeline.index_documents`) and return what it holds:
    ``chunks``, ``entities``, ``relations``, ``chunks_failed``, ``failures``. Raises the stage's
    :class:`~pgrag_dag.errors.PgragError`."""
    from pgrag_dag.pipeline import index_documents

    results = {r.stage: r for r in index_documents(engine, realm, space, communities=communities)}
    raw, quality = results["raw_extractions"].metadata, results["relations"].checks["graph_quality"][1]
    return {
        "chunks": results["chunks"].metadata.get("chunks"),
        "entities": quality.get("entities"),
        "relations": quality.get("relations"),
        "chunks_failed": raw["chunks_failed"],
        "failures": raw["failures"],
    }


def index_all(
    engine: Engine,
    realm: str,
    spaces: Sequence[str],
    items: Sequence[Item],
    guard: RunGuard,
    *,
    communities: bool,
    progress: Callable[..., Any],
    replay: bool = False,
) -> dict[str, dict[str, Any]]:
    """Index every space of ``spaces`` into ``realm``; a space that raised a :class:`PgragError` (other than
    a refused model configuration, which is raised) or lost a chunk to a failed extraction excludes every
    item reading it on ``guard``. Returns space → :func:`index_space`'s counts (or ``{"error": …}``). With
    ``replay`` (the run is replayed from a cassette) such a space raises :class:`ReplayIncompleteError`
    instead: a replay reproduces the run or fails."""
    out: dict[str, dict[str, Any]] = {}
    for space in progress(list(spaces), f"indexing {realm}", total=len(spaces)):
        try:
            out[space] = index_space(engine, realm, space, communities=communities)
            reason = (
                f"indexing {realm}.{space}: {out[space]['chunks_failed']} chunk(s) failed extraction "
                f"({'; '.join(out[space]['failures'][:2])})"
                if out[space]["chunks_failed"]
                else None
            )
        except ModelAccessError:
            raise
        except PgragError as exc:
            out[space] = {"error": f"{type(exc).__name__}: {exc}"}
            reason = f"indexing {realm}.{space} failed: {type(exc).__name__}: {exc}"
        if reason and replay:
            raise ReplayIncompleteError(
                f"{reason} — the cassette does not hold every response this run needs"
            )
        if reason:
            for item in items:
                if item.space == space:
                    guard.exclude(item.id, reason)
    return out


# -- answering and scoring --------------------------------------------------------------------------


@dataclass(frozen=True)
class Scored:
    """One answer and its score: ``item``, ``arm`` (the setting, or the realm of a noise-floor pass),
    ``reader``, ``answer`` (text), ``score`` in [0, 1], ``scorer`` (``strict``/``panel``), ``refused`` (the
    answer declines, :func:`~evaluation.scoring.is_refusal`), ``detail`` (F1 or the panel's labels and
    ties), ``context_chars`` (characters of context the reader was given)."""

    item: Item
    arm: str
    reader: str
    answer: str
    score: float
    scorer: Scorer
    refused: bool
    detail: Mapping[str, Any]
    context_chars: int

    def as_dict(self) -> dict[str, Any]:
        """The answer as a JSON row of the run record."""
        return {
            "item": self.item.id,
            "category": self.item.category,
            "arm": self.arm,
            "reader": self.reader,
            "score": self.score,
            "scorer": self.scorer,
            "refused": self.refused,
            "answer": self.answer,
            "detail": dict(self.detail),
            "context_chars": self.context_chars,
        }


def score_answer(
    item: Item, answer: str, *, reader: str, judges: Mapping[str, ModelClient]
) -> tuple[float, Scorer, dict[str, Any]]:
    """Score one answer (module docstring): ``(score, scorer, detail)``. Raises
    :class:`~evaluation.judges.PanelError` when no judge may grade ``reader``'s answer and
    :class:`~evaluation.judges.JudgeReplyError` on a malformed verdict."""
    if item.scorer == "auto":
        s = score_strict(answer, item.gold, answerable=item.answerable)
        if s.mode != "judge":
            return (
                (1.0 if s.correct else 0.0),
                "strict",
                {"mode": s.mode, "f1": s.f1, "asserted": list(s.asserted)},
            )
    verdicts = panel_elements(
        judges, answering_model=reader, question=item.question, elements=item.elements, answer=answer
    )
    correct = sum(1 for v in verdicts if v.verdict == "Correct")
    return (
        correct / len(verdicts),
        "panel",
        {
            "labels": [v.verdict for v in verdicts],
            "ties": sum(1 for v in verdicts if v.tie),
            "excluded_judges": list(verdicts[0].excluded) if verdicts else [],
        },
    )


def answer_item(
    engine: Engine,
    realm: str,
    item: Item,
    param: QueryParam,
    *,
    arm: str,
    reader: str,
    client: ModelClient,
    judges: Mapping[str, ModelClient],
    guard: RunGuard,
) -> Scored | None:
    """Answer ``item`` in ``realm`` with ``param`` through ``reader`` (:func:`pgrag_dag.query.query`) and
    score it; ``None`` when the item is (now) excluded on ``guard``: the reader refused or failed
    (:class:`ModelError`), or no judge could grade it. A replay miss and a refused model configuration are
    raised: they are the harness's setup, not the item's."""
    try:
        text, result = query(
            item.question, param, dsn=engine.dsn, realm=realm, embedder=engine.embedder(), client=client
        )
    except (ReplayMissError, ModelAccessError):
        raise
    except ModelError as exc:
        guard.exclude(item.id, f"reader {reader} ({arm}, {realm}) did not answer: {exc}")
        return None
    try:
        score, scorer, detail = score_answer(item, text, reader=reader, judges=judges)
    except (JudgeReplyError, PanelError) as exc:
        guard.exclude(item.id, f"answer of {reader} ({arm}, {realm}) not graded: {exc}")
        return None
    except (ReplayMissError, ModelAccessError):
        raise
    except ModelError as exc:
        guard.exclude(item.id, f"answer of {reader} ({arm}, {realm}) not graded: a judge failed: {exc}")
        return None
    return Scored(item, arm, reader, text, score, scorer, is_refusal(text), detail, len(result.context))
