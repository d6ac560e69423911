"""The numbered sources of an answer (issue 16 item 4): every ``[n]`` the answer may cite resolves to the
passage the context numbered ``n`` (paper §7.5; :mod:`pgrag_dag.query.assembly` numbers the placed passages by
their ``ref`` and lists them under ``References:``).

Only what the context numbered is listed — the passages *placed* in the prompt, in their order (under a
passage cap a retrieved passage that was not placed has no number the model saw).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from pgrag_dag.query.assembly import clip
from pgrag_dag.query_param import QueryResult

EXCERPT_CHARS = 160
"""Characters of a source's excerpt (whitespace collapsed to one line; clipped at a word)."""

_CITATION = re.compile(r"\[(\d+(?:\s*[,;]\s*\d+)*)\]")


def cited(answer: str) -> set[int]:
    """The passage numbers ``answer`` cites: ``[3]``, and each of ``[1, 2]`` / ``[1; 2]``.

    >>> sorted(cited("Babbage designed it [2]; Lovelace wrote notes [1, 3]. Not [x]."))
    [1, 2, 3]
    """
    return {int(n) for group in _CITATION.findall(answer) for n in re.split(r"\s*[,;]\s*", group)}


def sources(result: QueryResult, answer: str = "") -> list[dict[str, Any]]:
    """The passages the context of ``result`` numbered, in their order: ``ref`` (the ``[n]``), ``doc_key``,
    ``title``, ``chunk_index``, ``space``, ``excerpt`` (:data:`EXCERPT_CHARS`, one line) and ``cited``
    (whether ``answer`` cites it)."""
    placed = int(result.assembly.get("passages", {}).get("items_placed", len(result.chunks)))
    marks = cited(answer)
    return [
        {
            "ref": c["ref"],
            "doc_key": c["doc_key"],
            "title": c["title"],
            "chunk_index": c["chunk_index"],
            "space": c["space"],
            "excerpt": clip(" ".join(str(c["text"]).split()), EXCERPT_CHARS),
            "cited": c["ref"] in marks,
        }
        for c in result.chunks[:placed]
    ]


def source_lines(numbered: list[dict[str, Any]]) -> Iterator[str]:
    """``Sources:`` then two lines per source — ``[n] doc_key · title · chunk i`` (``· cited`` when the
    answer cites it) and its indented excerpt; nothing when the context numbered no passage."""
    if not numbered:
        return
    yield "Sources:"
    for s in numbered:
        title = f" · {s['title']}" if s["title"] and s["title"] != s["doc_key"] else ""
        yield f"[{s['ref']}] {s['doc_key']}{title} · chunk {s['chunk_index']}" + (
            " · cited" if s["cited"] else ""
        )
        yield f"    {s['excerpt']}"


__all__ = ["EXCERPT_CHARS", "cited", "source_lines", "sources"]
