"""Supersession by document order, and optional LLM contradiction detection (paper §5.2, §7.4).

Input: the space's live ``relations`` frame (see :mod:`pgrag_dag.graph.relations`; rows are identified by
position) with ``asserted_doc_order`` / ``asserted_chunk_index``, the latest assertion of each edge in
document order. Output frame ``supersession``: row, superseded_by_row, reason (``group`` |
``single_valued`` | ``negation`` | ``contradiction``), explanation.

- **Exclusive groups**: on one ordered pair, edges whose predicates share a declared group cannot hold
  together; the one asserted latest in document order is current and the others are superseded by it.
- **Single-valued predicates** (issue 27, beyond §5.2): a predicate declared single-valued on its object
  (``headquartered_in``) holds one object per subject, on its subject (``cfo_of``) one subject per
  object; among the asserted edges of one subject (or object) with that predicate, the one asserted latest
  in document order is current and those with another object (subject) are superseded by it.
- **Negation**: a later denial of the same (subject, predicate, object) supersedes the assertion, and
  a later assertion supersedes the denial.
- **Contradiction** (off by default): for the residue only — current edges with the same subject and
  predicate but another object, the predicate in no group — the model is asked whether the two can
  hold together; if not, the earlier is superseded and the verdict recorded.

Order comes from documents, never from extracted dates: the later document wins. Ties (one chunk
asserting both) supersede nothing.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from typing import Any

import polars as pl

from pgrag_dag.errors import ModelError
from pgrag_dag.providers import prompts
from pgrag_dag.providers.json_reply import parse_json_object
from pgrag_dag.providers.llm import ModelClient

log = logging.getLogger(__name__)
SUPERSESSION_SCHEMA: dict[str, Any] = {
    "row": pl.Int64,
    "superseded_by_row": pl.Int64,
    "reason": pl.String,
    "explanation": pl.String,
}


def _when(r: dict[str, Any]) -> tuple[int, int]:
    return (int(r["asserted_doc_order"]), int(r["asserted_chunk_index"]))


def supersede(
    relations: pl.DataFrame,
    groups: tuple[tuple[str, ...], ...],
    single_valued: dict[str, str] | None = None,
) -> pl.DataFrame:
    """The declarative pass → ``supersession``: exclusive groups and negation flips on each ordered pair,
    and the ``single_valued`` predicates (predicate → ``"object"`` | ``"subject"``, the side holding one
    value) on each subject or object. An edge superseded for two reasons keeps the latest superseder."""
    rows = list(relations.iter_rows(named=True))
    single = single_valued or {}
    group_of = {p: i for i, g in enumerate(groups) for p in g}
    out: dict[int, tuple[int, str]] = {}

    def mark(loser: int, winner: int, reason: str) -> None:
        if _when(rows[loser]) < _when(rows[winner]) and (
            loser not in out or _when(rows[out[loser][0]]) < _when(rows[winner])
        ):
            out[loser] = (winner, reason)

    by_group: dict[tuple[int, int, int], list[int]] = defaultdict(list)
    by_triple: dict[tuple[int, str, int], list[int]] = defaultdict(list)
    by_end: dict[tuple[str, int], list[int]] = defaultdict(list)  # (predicate, the end with many values)
    for i, r in enumerate(rows):
        if not r["negated"] and r["predicate"] in group_of:
            by_group[(r["source_id"], r["target_id"], group_of[r["predicate"]])].append(i)
        if not r["negated"] and r["predicate"] in single:
            end = r["source_id"] if single[r["predicate"]] == "object" else r["target_id"]
            by_end[(r["predicate"], end)].append(i)
        by_triple[(r["source_id"], r["predicate"], r["target_id"])].append(i)
    for members in by_group.values():
        latest = max(members, key=lambda i: _when(rows[i]))
        for i in members:
            mark(i, latest, "group")
    for members in by_end.values():
        latest = max(members, key=lambda i: _when(rows[i]))
        for i in members:
            mark(i, latest, "single_valued")
    for members in by_triple.values():
        if len(members) == 2:  # the assertion and its denial
            a, b = members
            mark(a, b, "negation")
            mark(b, a, "negation")
    data = [
        {"row": i, "superseded_by_row": w, "reason": reason, "explanation": None}
        for i, (w, reason) in sorted(out.items())
    ]
    return pl.DataFrame(data, schema=SUPERSESSION_SCHEMA)


def single_valued_replaces(
    loser: tuple[int, int], latest: tuple[int, int], prior: tuple[tuple[int, int], str] | None
) -> bool:
    """Whether the latest edge of a single-valued predicate's end (asserted at ``latest``: doc_order,
    chunk_index) supersedes an edge of that end asserted at ``loser``, given what supersedes it otherwise
    (``prior``: its superseder's assertion and reason, ``group`` or ``negation``; ``None``) — what
    :func:`supersede` decides when it sees the three together (a group's latest, then the end's latest, then
    the negation; a later one replaces an earlier superseder only when asserted strictly later). Lets a
    batched run decide the ends that span its batches (one subject per object) after the rest."""
    if not loser < latest:
        return False
    if prior is None:
        return True
    when, reason = prior
    return latest > when or (latest == when and reason == "negation")


def contradiction_candidates(
    relations: pl.DataFrame,
    superseded: set[int],
    groups: tuple[tuple[str, ...], ...],
    *,
    max_pairs: int,
    single_valued: dict[str, str] | None = None,
) -> list[tuple[int, int]]:
    """The residue (§7.4): pairs of current, asserted edges with one subject and predicate, another
    object, the predicate in no exclusive group and not single-valued (those the declarative pass
    decided); earlier row first; at most ``max_pairs``."""
    grouped = {p for g in groups for p in g} | set(single_valued or {})
    by_sp: dict[tuple[int, str], list[int]] = defaultdict(list)
    for i, r in enumerate(relations.iter_rows(named=True)):
        if i not in superseded and not r["negated"] and r["predicate"] not in grouped:
            by_sp[(r["source_id"], r["predicate"])].append(i)
    rows = list(relations.iter_rows(named=True))
    pairs = []
    for members in by_sp.values():
        ordered = sorted(members, key=lambda i: _when(rows[i]))
        pairs += [
            (a, b) for k, a in enumerate(ordered) for b in ordered[k + 1 :] if _when(rows[a]) < _when(rows[b])
        ]
    return pairs[:max_pairs]


def detect_contradictions(
    relations: pl.DataFrame,
    declarative: pl.DataFrame,
    groups: tuple[tuple[str, ...], ...],
    client: ModelClient,
    *,
    max_pairs: int = 200,
    single_valued: dict[str, str] | None = None,
) -> pl.DataFrame:
    """Ask the model about the residue the declarative pass left (one call per pair, cached).

    Returns ``supersession`` rows for the pairs judged incompatible (the earlier superseded, the
    model's explanation recorded). An unusable verdict is logged and the pair left alone.
    """
    rows = list(relations.iter_rows(named=True))
    superseded = set(declarative["row"].to_list())
    found: list[dict[str, Any]] = []
    candidates = contradiction_candidates(
        relations, superseded, groups, max_pairs=max_pairs, single_valued=single_valued
    )
    for a, b in candidates:
        if a in {f["row"] for f in found}:
            continue
        messages = [
            {"role": "system", "content": prompts.CONTRADICTION_SYSTEM},
            {
                "role": "user",
                "content": prompts.CONTRADICTION_USER.format(
                    earlier=rows[a]["rendered"], later=rows[b]["rendered"]
                ),
            },
        ]
        try:
            completion = client.complete(messages, purpose="contradiction")
            verdict = parse_json_object(completion.text)
            contradicts = verdict.get("contradicts")
            if not isinstance(contradicts, bool):
                raise ValueError("'contradicts' is not a boolean")
        except (ModelError, ValueError) as exc:
            log.warning(
                "contradiction check of %r vs %r skipped: %s", rows[a]["rendered"], rows[b]["rendered"], exc
            )
            continue
        if contradicts:
            found.append(
                {
                    "row": a,
                    "superseded_by_row": b,
                    "reason": "contradiction",
                    "explanation": str(verdict.get("explanation") or ""),
                }
            )
    return pl.DataFrame(found, schema=SUPERSESSION_SCHEMA)
