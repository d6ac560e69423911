"""The ``yield`` check: a run that produced nothing is loud (issue 13 item 4; paper §3.5, §4.3).

Two measurements over what a space holds after a stage, each ``(passed, metadata)`` as
:attr:`~pgrag_dag.pipeline.StageResult.checks` carries them (the Dagster assets report them as a
non-blocking asset check of severity ERROR):

- :func:`extraction_yield` on ``raw_extractions``: fails when the space has chunks but no successful
  pass of any of them holds an entity or a triple — the model, prompt or extractor found nothing;
- :func:`gate_yield` on ``gated_triples``: fails when something was extracted but no entity and no
  triple was accepted — every candidate was refused, with the count per gate.

A space without chunks passes both (there was nothing to extract). Failed first passes are the
``pending_work`` check's business; every first pass failing is already an :class:`ExtractionError`.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from typing import Any

import polars as pl

log = logging.getLogger(__name__)

YIELD_CHECK = "yield"
"""The check's name on ``raw_extractions`` and ``gated_triples``."""

YIELD_DESCRIPTION = (
    "The stage produced something: some chunk yielded an entity or a triple (raw_extractions), some "
    "candidate passed the gates (gated_triples). Red with the counts per gate when a whole space "
    "came to nothing. Non-blocking."
)


def _counts(parsed: str | None) -> tuple[int, int]:
    obj = json.loads(parsed) if parsed else {}
    return len(obj.get("entities") or []), len(obj.get("triples") or [])


def extraction_yield(raw: pl.DataFrame) -> tuple[bool, dict[str, Any]]:
    """Whether the space's extractions yielded anything.

    Args:
        raw: the space's stored ``raw_extractions`` frame (every chunk, every pass).

    Returns:
        ``(passed, metadata)``: metadata ``chunks``, ``chunks_with_output`` (some ``ok`` pass holds an
        entity or triple), ``chunks_empty`` (an ``ok`` first pass, nothing in any pass),
        ``chunks_failed`` (no ``ok`` first pass), ``entities`` and ``triples`` (candidates over every
        pass), and when failed a one-line ``reason`` saying what to look at.
        Passed when there is no chunk or ``chunks_with_output > 0``.
    """
    per_chunk: dict[int, list[int]] = {}  # chunk_id -> [ok first pass, entities, triples]
    for cid, p, status, parsed in raw.select("chunk_id", "pass", "parse_status", "parsed").iter_rows():
        entry = per_chunk.setdefault(int(cid), [0, 0, 0])
        if status != "ok":
            continue
        entry[0] |= int(p == 0)
        e, t = _counts(parsed)
        entry[1] += e
        entry[2] += t
    with_output = sum(1 for ok, e, t in per_chunk.values() if e + t)
    failed = sum(1 for ok, _, _ in per_chunk.values() if not ok)
    meta: dict[str, Any] = {
        "chunks": len(per_chunk),
        "chunks_with_output": with_output,
        "chunks_empty": len(per_chunk) - with_output - failed,
        "chunks_failed": failed,
        "entities": sum(e for _, e, _ in per_chunk.values()),
        "triples": sum(t for _, _, t in per_chunk.values()),
    }
    passed = not per_chunk or with_output > 0
    if not passed:
        models = sorted(set(raw["model"].drop_nulls().to_list()))
        meta["reason"] = (
            f"every one of {len(per_chunk)} chunk(s) came back with no entity and no triple "
            f"({failed} without a usable first pass; models {models}): check the extractor's model, "
            "prompt and the documents"
        )
    return passed, meta


def gate_yield(raw: pl.DataFrame, decisions: pl.DataFrame) -> tuple[bool, dict[str, Any]]:
    """Whether any extracted candidate passed the gates.

    Args:
        raw: the space's stored ``raw_extractions`` frame.
        decisions: the space's ``gate_decisions`` frame (accepted and refused rows).

    Returns:
        ``(passed, metadata)``: metadata ``candidates``, ``entities_accepted``, ``triples_accepted``,
        ``rejections_per_gate`` (gate → refused rows), up to five ``examples`` (``gate: offending
        value``), and when failed a one-line ``reason``. Passed when the space has no extraction at
        all or something was accepted.
    """
    accepted = decisions.filter(pl.col("accepted"))
    refused = decisions.filter(~pl.col("accepted"))
    per_gate = dict(Counter(refused["gate"].to_list()).most_common())
    meta: dict[str, Any] = {
        "candidates": decisions.height,
        "entities_accepted": accepted.filter(pl.col("kind") == "entity").height,
        "triples_accepted": accepted.filter(pl.col("kind") == "triple").height,
        "rejections_per_gate": per_gate,
        "examples": [f"{g}: {v}" for g, v in refused.select("gate", "offending_value").head(5).iter_rows()],
    }
    passed = raw.height == 0 or accepted.height > 0
    if not passed:
        gates = ", ".join(f"{g} {n}" for g, n in per_gate.items())
        meta["reason"] = (
            f"every one of {decisions.height} candidate(s) was refused by a gate ({gates}); check the "
            "gate settings and extra gates against the examples"
            if decisions.height
            else "nothing was extracted, so no candidate reached the gates (see raw_extractions' yield check)"
        )
    return passed, meta


def logged(
    check: tuple[bool, dict[str, Any]], *, stage: str, realm: str, space: str
) -> tuple[bool, dict[str, Any]]:
    """``check`` unchanged, after logging a warning with its reason when it failed."""
    if not check[0]:
        log.warning("%s %s.%s: check %s failed: %s", stage, realm, space, YIELD_CHECK, check[1].get("reason"))
    return check
