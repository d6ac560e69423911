"""The arithmetic of paired comparisons over a fixed set of (item, reader) cells: Table 5's per-category
means, deltas and better/worse counts (§8.4), the re-indexing noise floor (§8.14) and the reader sweep's
per-reader tables with the union over readers (§8.12, Table 12). Pure functions over score mappings; no I/O.

A *cell* is one (item id, reader) pair; a score is in [0, 1]. Two sides — two arms of an ablation, or two
indexings of a noise floor — are compared only over the cells both hold (an excluded item is in neither).

- A category's side value is the mean over its cells (items × readers): Table 5's "mean over the four
  readers". ``delta`` = side b − side a.
- ``better`` / ``worse`` count the category's **items** whose score summed over the readers rose / fell
  from a to b ("instances whose summed score across readers moved").
- ``agreed`` counts cells whose score is the same on both sides ("80 of 80 cells", §8.14).
- Categories are listed by delta, largest first (as Table 5), then ``overall``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

Cell = tuple[str, str]
"""(item id, reader)."""

OVERALL = "overall"


@dataclass(frozen=True)
class PairedRow:
    """One row of a paired table: ``category``, ``n`` (items), ``a`` and ``b`` (mean over the category's
    cells), ``delta`` (b − a), ``better`` / ``worse`` (items whose summed score rose / fell), ``agreed`` and
    ``cells`` (cells with an equal score on both sides, of all)."""

    category: str
    n: int
    a: float
    b: float
    delta: float
    better: int
    worse: int
    agreed: int
    cells: int

    def as_dict(self) -> dict[str, float | int | str]:
        """The row as JSON."""
        return {
            "category": self.category,
            "n": self.n,
            "a": self.a,
            "b": self.b,
            "delta": self.delta,
            "better": self.better,
            "worse": self.worse,
            "agreed": self.agreed,
            "cells": self.cells,
        }


def _row(category: str, cells: Sequence[Cell], a: Mapping[Cell, float], b: Mapping[Cell, float]) -> PairedRow:
    items: dict[str, list[Cell]] = defaultdict(list)
    for c in cells:
        items[c[0]].append(c)
    moved = [sum(b[c] for c in cs) - sum(a[c] for c in cs) for cs in items.values()]
    mean_a = sum(a[c] for c in cells) / len(cells)
    mean_b = sum(b[c] for c in cells) / len(cells)
    return PairedRow(
        category,
        len(items),
        mean_a,
        mean_b,
        mean_b - mean_a,
        sum(1 for m in moved if m > 1e-9),
        sum(1 for m in moved if m < -1e-9),
        sum(1 for c in cells if abs(a[c] - b[c]) <= 1e-9),
        len(cells),
    )


def paired_rows(
    a: Mapping[Cell, float], b: Mapping[Cell, float], categories: Mapping[str, str]
) -> list[PairedRow]:
    """Per-category rows (largest delta first, ties by name), then ``overall``, over the cells in both ``a``
    and ``b`` (cell → score; ``categories``: item id → category). Empty when no cell is in both."""
    cells = sorted(set(a) & set(b))
    if not cells:
        return []
    by_cat: dict[str, list[Cell]] = defaultdict(list)
    for c in cells:
        by_cat[categories[c[0]]].append(c)
    rows = sorted((_row(cat, cs, a, b) for cat, cs in by_cat.items()), key=lambda r: (-r.delta, r.category))
    return rows + [_row(OVERALL, cells, a, b)]


@dataclass(frozen=True)
class ReaderRow:
    """One reader over one fixed graph (Table 12): ``reader``, ``n`` (items), ``overall`` (mean score),
    ``refused`` (answerable items it declined), ``by_category`` (category → mean)."""

    reader: str
    n: int
    overall: float
    refused: int
    by_category: Mapping[str, float]


def reader_rows(
    scores: Mapping[Cell, float],
    refused: Mapping[Cell, bool],
    categories: Mapping[str, str],
    answerable: Mapping[str, bool],
    readers: Sequence[str],
) -> list[ReaderRow]:
    """One :class:`ReaderRow` per reader (in ``readers`` order) over its cells of ``scores``; ``refused``
    counts the cells of answerable items whose answer declined. A reader with no cell is left out."""
    out = []
    for r in readers:
        cells = [c for c in scores if c[1] == r]
        if not cells:
            continue
        by_cat: dict[str, list[float]] = defaultdict(list)
        for c in cells:
            by_cat[categories[c[0]]].append(scores[c])
        out.append(
            ReaderRow(
                r,
                len(cells),
                sum(scores[c] for c in cells) / len(cells),
                sum(1 for c in cells if refused.get(c) and answerable[c[0]]),
                {k: sum(v) / len(v) for k, v in sorted(by_cat.items())},
            )
        )
    return out


def union_over_readers(scores: Mapping[Cell, float], categories: Mapping[str, str]) -> ReaderRow:
    """Table 12's "union over all" row: per item its best score over the readers, averaged (for 0/1 scores
    the share of items some reader answered)."""
    best: dict[str, float] = {}
    for (item, _), s in scores.items():
        best[item] = max(best.get(item, 0.0), s)
    by_cat: dict[str, list[float]] = defaultdict(list)
    for item, s in best.items():
        by_cat[categories[item]].append(s)
    return ReaderRow(
        "union over all",
        len(best),
        sum(best.values()) / len(best) if best else 0.0,
        0,
        {k: sum(v) / len(v) for k, v in sorted(by_cat.items())},
    )


def unreached(scores: Mapping[Cell, float]) -> list[str]:
    """Items no reader scored above 0 on ("answered by none of four readers", §8.12), sorted."""
    best: dict[str, float] = {}
    for (item, _), s in scores.items():
        best[item] = max(best.get(item, 0.0), s)
    return sorted(i for i, s in best.items() if s <= 0.0)
