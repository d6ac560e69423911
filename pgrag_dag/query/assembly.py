"""Context assembly: what was retrieved, rendered into the prompt, and how much of it got there
(paper §7.5, §8.3).

The context has four blocks, in :data:`BLOCKS` order — community reports, document passages,
entities, relations — each under a ``-----Title-----`` header. Passages are numbered ``[n]`` by
their rank and followed by a reference list (``[n] title (doc_key, chunk i)``) of the placed
passages, so a citation resolves to a document.

Caps are optional and per block, in **tokens, counted as characters / 4**
(:data:`CHARS_PER_TOKEN`) over the rendered evidence text — report, passage text, entity line,
relation line; headers, passage numbers and the reference list are not counted. No cap is applied
by default: everything retrieved is placed. Under a cap, items are placed in rank order; the
passage or report that overflows is *clipped* to the room left (ending in :data:`CLIP_MARK`),
never dropped, and placing stops there; an entity or relation line is placed whole or not at all,
so a relation cap keeps a prefix of the (hop-major) relation ranking.

:func:`assemble` returns the context and the assembly report: per block ``items_retrieved``,
``items_placed``, ``items_clipped``, ``chars_retrieved``, ``chars_placed`` (characters), then
``total`` (their sums) and ``caps`` (tokens per block, ``None`` = uncapped).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

BLOCKS: tuple[str, ...] = ("communities", "passages", "entities", "relations")
"""Context blocks, in prompt order (§7.5)."""

BLOCK_TITLES = {
    "communities": "Community reports",
    "passages": "Document passages",
    "entities": "Entities",
    "relations": "Relations",
}
CHARS_PER_TOKEN = 4
"""The token unit of the caps: one token is counted as four characters."""
CLIP_MARK = " [...]"
"""Appended to a clipped passage or report (counted in its characters)."""
_CLIPPABLE = frozenset({"communities", "passages"})


def render_validity(valid_from: str | None, valid_to: str | None) -> str:
    """``[from X]``, ``[until Y]``, ``[valid X to Y]``, or ``""`` when no period was stated (§5.1)."""
    if valid_from and valid_to:
        return f"[valid {valid_from} to {valid_to}]"
    if valid_from:
        return f"[from {valid_from}]"
    if valid_to:
        return f"[until {valid_to}]"
    return ""


def render_relation(rel: Mapping[str, Any], *, validity: bool = True) -> str:
    """One relation as a prompt line (§7.5).

    ``(A) --[p]--> (B)``, or ``(A) --[NOT p]--> (B)`` for a denial; with ``validity`` its period
    follows (:func:`render_validity`); a superseded relation (only present with
    ``include_superseded``) is marked ``[superseded]`` — judged by ``superseded`` when present (the
    state at ``as_believed_at``), else by ``superseded_by``; the description follows a colon.

    >>> render_relation(
    ...     {"subject": "A", "predicate": "p", "object": "B", "negated": True, "valid_from": "2020"}
    ... )
    '(A) --[NOT p]--> (B) [from 2020]'
    """
    predicate = f"NOT {rel['predicate']}" if rel.get("negated") else rel["predicate"]
    line = f"({rel['subject']}) --[{predicate}]--> ({rel['object']})"
    period = render_validity(rel.get("valid_from"), rel.get("valid_to")) if validity else ""
    if period:
        line += f" {period}"
    superseded = rel["superseded"] if "superseded" in rel else rel.get("superseded_by") is not None
    if superseded:
        line += " [superseded]"
    if rel.get("description"):
        line += f": {rel['description']}"
    return line


def render_entity(ent: Mapping[str, Any]) -> str:
    """``- name (type): description``."""
    line = f"- {ent['name']} ({ent['entity_type']})"
    return line + (f": {ent['description']}" if ent.get("description") else "")


def render_community(com: Mapping[str, Any]) -> str:
    """``### title`` then the report text."""
    return f"### {com.get('title', '')}\n{com.get('report', '')}".strip()


def clip(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, at a word boundary when one lies in the last
    fifth, ending in :data:`CLIP_MARK`; unchanged when it fits."""
    if len(text) <= limit:
        return text
    cut = limit - len(CLIP_MARK)
    if cut <= 0:
        return text[: max(limit, 0)]
    space = text.rfind(" ", 0, cut + 1)
    end = space if space >= cut * 0.8 else cut
    return text[:end].rstrip() + CLIP_MARK


def place(items: Sequence[str], cap_tokens: int | None, *, clippable: bool) -> tuple[list[str], int]:
    """Fit rendered ``items`` under ``cap_tokens`` (see the module docstring); returns the placed
    texts (a prefix, the last possibly clipped) and how many were clipped (0 or 1)."""
    if cap_tokens is None:
        return list(items), 0
    room = cap_tokens * CHARS_PER_TOKEN
    placed: list[str] = []
    for text in items:
        if len(text) <= room:
            placed.append(text)
            room -= len(text)
            continue
        if clippable and room > 0:
            placed.append(clip(text, room))
            return placed, 1
        break
    return placed, 0


@dataclass(frozen=True)
class Assembly:
    """The assembled ``context`` and its ``report`` (see the module docstring)."""

    context: str
    report: dict[str, dict[str, Any]]


def assemble(
    *,
    communities: Sequence[Mapping[str, Any]],
    chunks: Sequence[Mapping[str, Any]],
    entities: Sequence[Mapping[str, Any]],
    relations: Sequence[Mapping[str, Any]],
    caps: Mapping[str, int | None] | None = None,
    validity: bool = True,
) -> Assembly:
    """Render the four blocks under their optional token ``caps`` (block → tokens; absent = none).

    ``chunks`` need ``text, ref, title, doc_key, chunk_index``; ``validity`` renders relation
    periods (``render_relation_validity``). Raises :class:`ValueError` for an unknown block or a
    negative cap.
    """
    caps = dict(caps or {})
    unknown = set(caps) - set(BLOCKS)
    if unknown:
        raise ValueError(f"unknown context block(s) {sorted(unknown)}; blocks are {', '.join(BLOCKS)}")
    if any(v is not None and v < 0 for v in caps.values()):
        raise ValueError("a block cap must be a non-negative number of tokens")
    items: dict[str, list[str]] = {
        "communities": [render_community(c) for c in communities],
        "passages": [str(c["text"]) for c in chunks],
        "entities": [render_entity(e) for e in entities],
        "relations": [render_relation(r, validity=validity) for r in relations],
    }
    sections: list[str] = []
    report: dict[str, dict[str, Any]] = {}
    for block in BLOCKS:
        retrieved = items[block]
        placed, clipped = place(retrieved, caps.get(block), clippable=block in _CLIPPABLE)
        report[block] = {
            "items_retrieved": len(retrieved),
            "items_placed": len(placed),
            "items_clipped": clipped,
            "chars_retrieved": sum(map(len, retrieved)),
            "chars_placed": sum(map(len, placed)),
        }
        if placed:
            sections.append(_section(block, placed, chunks))
    report["total"] = {k: sum(report[b][k] for b in BLOCKS) for k in report[BLOCKS[0]]}
    report["caps"] = {b: caps.get(b) for b in BLOCKS}
    return Assembly("\n\n".join(sections), report)


def _section(block: str, placed: list[str], chunks: Sequence[Mapping[str, Any]]) -> str:
    header = f"-----{BLOCK_TITLES[block]}-----"
    if block != "passages":
        return "\n".join([header, *placed])
    body = [f"[{c['ref']}] {text}" for c, text in zip(chunks, placed)]
    refs = [
        f"[{c['ref']}] {c['title']} ({c['doc_key']}, chunk {c['chunk_index']})" for c in chunks[: len(placed)]
    ]
    return "\n\n".join([header, *body, "References:\n" + "\n".join(refs)])


def summary(report: Mapping[str, Mapping[str, Any]]) -> str:
    """One log line's worth: ``communities=placed/retrieved chars ...`` per block."""
    return " ".join(
        f"{b}={report[b]['chars_placed']}/{report[b]['chars_retrieved']}chars"
        f"({report[b]['items_placed']}/{report[b]['items_retrieved']})"
        for b in BLOCKS
    )


__all__ = [
    "BLOCKS",
    "BLOCK_TITLES",
    "CHARS_PER_TOKEN",
    "CLIP_MARK",
    "Assembly",
    "assemble",
    "clip",
    "place",
    "render_community",
    "render_entity",
    "render_relation",
    "render_validity",
    "summary",
]
