"""The ``yield`` check and the run's fail-closed judgement: a run that produced nothing is loud (issue 13
item 4) and raises (issue 28 item 3; paper §3.5, §4.3).

Two measurements, each ``(passed, metadata)`` as :attr:`~pgrag_dag.pipeline.StageResult.checks` carries
them (the Dagster assets report them as a non-blocking asset check of severity ERROR):

- :func:`extraction_yield` on ``raw_extractions``: fails when there are chunks but no successful pass
  of any of them holds an entity or a triple — the model, prompt or extractor found nothing;
- :func:`gate_yield` on ``gated_triples``: fails when something was extracted but no entity and no
  triple was accepted — every candidate was refused, with the count per gate.

Measured on what one run extracted or gated, a failure is fatal: :func:`require_yield` raises
:class:`~pgrag_dag.errors.ExtractionError` before the stage writes anything, unless the space opts out
(``extraction.allow_empty_runs``, or ``allow_empty_runs`` on the space). A run with nothing to do (no
chunk changed) passes. The ``yield`` check a stage reports is judged on the whole space
(:func:`~pgrag_dag.pipeline.common.space_yield`). A space without chunks passes both (there was nothing to
extract). Failed first passes are the ``pending_work`` check's business; every first pass failing is
already an :class:`~pgrag_dag.errors.ExtractionError`.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Sequence
from typing import Any

import polars as pl

from pgrag_dag.errors import ExtractionError

log = logging.getLogger(__name__)

YIELD_CHECK = "yield"
"""The check's name on ``raw_extractions`` and ``gated_triples``."""

YIELD_DESCRIPTION = (
    "The stage produced something: some chunk yielded an entity or a triple (raw_extractions), some "
    "candidate passed the gates (gated_triples). Red with the counts per gate when a whole space "
    "came to nothing. Non-blocking; a run whose own chunks yield nothing fails the step instead, unless "
    "the space sets extraction.allow_empty_runs."
)


def _counts(parsed: str | None) -> tuple[int, int]:
    obj = json.loads(parsed) if parsed else {}
    return len(obj.get("entities") or []), len(obj.get("triples") or [])


def extraction_yield(raw: pl.DataFrame) -> tuple[bool, dict[str, Any]]:
    """Whether the space's extractions yielded anything.

    Args:
        raw: a ``raw_extractions`` frame (every pass of the chunks one run extracted, or of the space).

    Returns:
        ``(passed, metadata)``: metadata ``chunks``, ``chunks_with_output`` (some ``ok`` pass holds an
        entity or triple), ``chunks_empty`` (an ``ok`` first pass, nothing in any pass),
        ``chunks_failed`` (no ``ok`` first pass), ``entities`` and ``triples`` (candidates over every
        pass), and when failed a one-line ``reason`` saying what to look at.
        Passed when there is no chunk or ``chunks_with_output > 0``. :class:`ExtractionTally` gives the
        same over batches.
    """
    return ExtractionTally().add(raw).result()


class ExtractionTally:
    """:func:`extraction_yield` of a run extracted in batches (issue 30): :meth:`add` each batch's
    ``raw_extractions`` frame — every pass of a chunk in one batch — then :meth:`result` is what
    :func:`extraction_yield` says of them all."""

    def __init__(self) -> None:
        self.chunks = self.with_output = self.failed = self.entities = self.triples = 0
        self.models: set[str] = set()

    def add(self, raw: pl.DataFrame) -> ExtractionTally:
        """Count one batch's rows; returns the tally."""
        per_chunk: dict[int, list[int]] = {}  # chunk_id -> [ok first pass, entities, triples]
        for cid, p, status, parsed in raw.select("chunk_id", "pass", "parse_status", "parsed").iter_rows():
            entry = per_chunk.setdefault(int(cid), [0, 0, 0])
            if status != "ok":
                continue
            entry[0] |= int(p == 0)
            e, t = _counts(parsed)
            entry[1] += e
            entry[2] += t
        self.chunks += len(per_chunk)
        self.with_output += sum(1 for ok, e, t in per_chunk.values() if e + t)
        self.failed += sum(1 for ok, _, _ in per_chunk.values() if not ok)
        self.entities += sum(e for _, e, _ in per_chunk.values())
        self.triples += sum(t for _, _, t in per_chunk.values())
        self.models |= set(raw["model"].drop_nulls().to_list())
        return self

    def result(self) -> tuple[bool, dict[str, Any]]:
        """``(passed, metadata)`` as :func:`extraction_yield` gives them for every batch added."""
        meta: dict[str, Any] = {
            "chunks": self.chunks,
            "chunks_with_output": self.with_output,
            "chunks_empty": self.chunks - self.with_output - self.failed,
            "chunks_failed": self.failed,
            "entities": self.entities,
            "triples": self.triples,
        }
        passed = not self.chunks or self.with_output > 0
        if not passed:
            meta["reason"] = (
                f"every one of {self.chunks} chunk(s) came back with no entity and no triple "
                f"({self.failed} without a usable first pass; models {sorted(self.models)}): check the "
                "extractor's model, prompt and the documents"
            )
        return passed, meta


def gate_yield(raw: pl.DataFrame, decisions: pl.DataFrame) -> tuple[bool, dict[str, Any]]:
    """Whether any extracted candidate passed the gates.

    Args:
        raw: a ``raw_extractions`` frame: the chunks one run gated (or every chunk of the space).
        decisions: their ``gate_decisions`` frame (accepted and refused rows).

    Returns:
        ``(passed, metadata)``: metadata ``chunks`` (in ``raw``), ``candidates``, ``entities_accepted``,
        ``triples_accepted``, ``rejections_per_gate`` (gate → refused rows), up to five ``examples``
        (``gate: offending value``), and when failed a one-line ``reason``. Passed when ``raw`` holds no
        extraction at all or something was accepted. :class:`GateTally` gives the same over batches.
    """
    return GateTally().add(raw, decisions).result()


class GateTally:
    """:func:`gate_yield` of a run gated in batches (issue 30): :meth:`add` each batch's ``raw`` and
    ``decisions`` frames in order, then :meth:`result` is what :func:`gate_yield` says of them all."""

    def __init__(self) -> None:
        self.chunks: set[int] = set()
        self.raw_rows = self.candidates = self.accepted = self.entities_accepted = self.triples_accepted = 0
        self.per_gate: Counter[str] = Counter()
        self.examples: list[str] = []

    def add(self, raw: pl.DataFrame, decisions: pl.DataFrame) -> GateTally:
        """Count one batch (its raw rows and their decisions); returns the tally."""
        accepted = decisions.filter(pl.col("accepted"))
        refused = decisions.filter(~pl.col("accepted"))
        self.chunks |= set(raw["chunk_id"].to_list())
        self.raw_rows += raw.height
        self.candidates += decisions.height
        self.accepted += accepted.height
        self.entities_accepted += accepted.filter(pl.col("kind") == "entity").height
        self.triples_accepted += accepted.filter(pl.col("kind") == "triple").height
        self.per_gate.update(refused["gate"].to_list())
        need = 5 - len(self.examples)
        if need > 0:
            self.examples += [
                f"{g}: {v}" for g, v in refused.select("gate", "offending_value").head(need).iter_rows()
            ]
        return self

    def result(self) -> tuple[bool, dict[str, Any]]:
        """``(passed, metadata)`` as :func:`gate_yield` gives them for every batch added."""
        per_gate = dict(self.per_gate.most_common())
        meta: dict[str, Any] = {
            "chunks": len(self.chunks),
            "candidates": self.candidates,
            "entities_accepted": self.entities_accepted,
            "triples_accepted": self.triples_accepted,
            "rejections_per_gate": per_gate,
            "examples": list(self.examples),
        }
        passed = self.raw_rows == 0 or self.accepted > 0
        if not passed:
            gates = ", ".join(f"{g} {n}" for g, n in per_gate.items())
            meta["reason"] = (
                f"every one of {self.candidates} candidate(s) was refused by a gate ({gates}); check the "
                "gate settings and extra gates against the examples"
                if self.candidates
                else "nothing was extracted, so no candidate reached the gates (see raw_extractions' yield "
                "check)"
            )
        return passed, meta


def logged(
    check: tuple[bool, dict[str, Any]], *, stage: str, realm: str, space: str
) -> tuple[bool, dict[str, Any]]:
    """``check`` unchanged, after logging a warning with its reason when it failed."""
    if not check[0]:
        log.warning("%s %s.%s: check %s failed: %s", stage, realm, space, YIELD_CHECK, check[1].get("reason"))
    return check


def _short(text: str, limit: int = 80) -> str:
    # an offending value may be a whole over-long name: the message stays one readable line
    return text if len(text) <= limit else text[: limit - 1] + "…"


OPT_OUT = (
    "set extraction.allow_empty_runs: true (or allow_empty_runs: true on the space) for a corpus where "
    "that is expected"
)
"""How a space opts out of :func:`require_yield`, as its error says."""


def require_yield(
    check: tuple[bool, dict[str, Any]],
    *,
    stage: str,
    where: str,
    allowed: bool,
    documents: Sequence[str] = (),
    offline: bool = False,
) -> None:
    """Fail closed on one run's own yield (§3.5): raise unless the run produced something usable.

    Args:
        check: :func:`extraction_yield` of the rows this run extracted (``stage`` ``raw_extractions``)
            or :func:`gate_yield` of the chunks and decisions this run gated (``gated_triples``) — the
            run's batch, never the space's totals.
        stage: ``raw_extractions`` or ``gated_triples``: which metadata ``check`` holds.
        where: the partition (``realm.space``), for the message.
        allowed: the space opted out (``extraction.allow_empty_runs`` or the space's ``allow_empty_runs``).
        documents: the doc_keys of the chunks ``check`` measured, named in the message (the first five).
        offline: the extractor calls no model (``nlp``, ``cooccurrence``): the advice is about the
            documents' text, not a model or a prompt.

    Raises:
        ExtractionError: ``check`` failed and ``allowed`` is false. The message names the counts — chunks
            empty and without a usable first pass, or candidates and the refusals per gate with examples —
            and how to opt out; the caller has written nothing of the stage yet.
    """
    passed, meta = check
    if passed or allowed:
        return
    named = ""
    if documents:
        shown = sorted(set(documents))
        more = f" and {len(shown) - 5} more" if len(shown) > 5 else ""
        named = f" (documents {', '.join(shown[:5])}{more})"
    advice = (
        "the offline extractor found no name in them — check that they hold prose (not empty, not a scan or "
        "markup only)"
        if offline
        else "check the extractor's model, prompt and the documents"
    )
    if stage == "raw_extractions":
        what = (
            f"every one of {meta['chunks']} chunk(s) this run extracted{named} came back with no entity and "
            f"no triple ({meta['chunks_empty']} empty, {meta['chunks_failed']} without a usable first pass), "
            f"so no candidate reached the gates: {advice}"
        )
    elif meta["candidates"]:
        gates = ", ".join(f"{g} {n}" for g, n in meta["rejections_per_gate"].items())
        what = (
            f"no candidate of the {meta['chunks']} chunk(s) this run gated survived the gates: "
            f"{meta['candidates']} candidate(s), 0 entities and 0 triples accepted; refused per gate: "
            f"{gates} (e.g. {'; '.join(map(_short, meta['examples']))}): check the gate settings and "
            "extra gates"
        )
    else:
        what = (
            f"the {meta['chunks']} chunk(s) this run gated hold no entity and no triple, so no candidate "
            "reached the gates: check the extractor's model, prompt and the documents"
        )
    raise ExtractionError(f"run of {where}: {what}; nothing was written by {stage} — or {OPT_OUT}")
