"""Deterministic coordinates for the graph view (issue 31 item 4): computed once in Python when the page is
written and embedded in it, so the same graph gives the same picture on every load and in every browser.

:func:`layout` places the vertices of one drawing (the communities of the overview, or the members of one
community) as circles of given radii: each connected component is laid out by igraph's Fruchterman–Reingold
from a seeded start under a seeded random number generator, scaled so that an edge is a few radii long and
pushed apart until no two circles overlap; the largest component stays at the centre and the others follow
in rows below it. Nothing depends on the clock, the process or the order of a hash: the same vertices,
edges and radii in the same order give the same coordinates.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

import igraph as ig
import numpy as np

SEED = 31
"""The seed of every layout (start positions and igraph's random number generator)."""
GAP = 6.0
"""The least distance between two circles' rims, in layout units (the radii's units)."""
EDGE_SPAN = 3.0
"""An edge's typical length, in sums of its ends' radii (room for the labels between the circles)."""


def _component_layout(
    n: int, edges: list[tuple[int, int]], weights: list[float], radii: np.ndarray, seed: int, span: float
) -> np.ndarray:
    """One connected component's ``n`` × 2 coordinates, centred on the origin, circles not overlapping."""
    if n == 1:
        return np.zeros((1, 2))
    rng = random.Random(seed)
    start = [[rng.uniform(-1.0, 1.0), rng.uniform(-1.0, 1.0)] for _ in range(n)]
    graph = ig.Graph(n=n, edges=edges, directed=False)
    ig.set_random_number_generator(random.Random(seed))
    try:
        coords = graph.layout_fruchterman_reingold(
            weights=weights or None, niter=1000, seed=start, grid=False
        ).coords
    finally:
        ig.set_random_number_generator(random)
    xy = np.asarray(coords, dtype=float)
    lengths = [float(np.hypot(*(xy[a] - xy[b]))) for a, b in edges if a != b]
    wanted = [span * float(radii[a] + radii[b]) for a, b in edges if a != b]
    if lengths and np.median(lengths) > 0:
        xy *= float(np.median(wanted)) / float(np.median(lengths))
    xy = _separate(xy, radii)
    return xy - xy.mean(axis=0)


def _separate(xy: np.ndarray, radii: np.ndarray, rounds: int = 300) -> np.ndarray:
    """Push overlapping circles apart along the line between their centres (half each) until none
    overlaps by more than a hundredth of the gap, or ``rounds`` is reached; only the pairs within reach
    are looked at (a k-d tree), so a round costs about n log n. Coincident centres separate along a
    direction fixed by their indices."""
    from scipy.spatial import cKDTree

    xy = xy.copy()
    reach = 2 * float(radii.max()) + GAP
    for _ in range(rounds):
        pairs = cKDTree(xy).query_pairs(reach, output_type="ndarray")
        if not len(pairs):
            break
        a, b = pairs[:, 0], pairs[:, 1]
        delta = xy[a] - xy[b]
        dist = np.hypot(delta[:, 0], delta[:, 1])
        overlap = radii[a] + radii[b] + GAP - dist
        hit = overlap > GAP / 100
        if not hit.any():
            break
        a, b, delta, dist, overlap = a[hit], b[hit], delta[hit], dist[hit], overlap[hit]
        angle = (a - b) * 2.399963  # the golden angle: distinct fixed directions for coincident centres
        same = dist < 1e-9
        unit = np.where(
            same[:, None],
            np.column_stack([np.cos(angle), np.sin(angle)]),
            delta / np.maximum(dist, 1e-9)[:, None],
        )
        push = unit * (overlap / 2)[:, None]
        np.add.at(xy, a, push)
        np.add.at(xy, b, -push)
    return xy


def _pack(blocks: list[tuple[np.ndarray, np.ndarray]]) -> list[np.ndarray]:
    """Translate each block (its circles' centres, centred on the origin, and radii; largest first): the
    first stays where it is, the others follow in centred rows below it, left to right, each row as wide
    as the first block (or as the square the others would fill), with two and a half blocks' widths of room
    beside each block and below each row for the labels — the unconnected pieces in a tidy band under the
    main one."""
    if not blocks:
        return []
    lo = [(xy - r[:, None]).min(axis=0) for xy, r in blocks]
    hi = [(xy + r[:, None]).max(axis=0) for xy, r in blocks]
    size = [h - low for low, h in zip(lo, hi, strict=True)]
    room = [2.5 * float(max(s.max(), 4 * GAP)) for s in size]
    rest = zip(size[1:], room[1:], strict=True)
    width = max(float(size[0][0]), math.sqrt(sum((float(s.max()) + r) ** 2 for s, r in rest)))
    rows: list[list[int]] = []
    used = math.inf
    for k in range(1, len(blocks)):
        step = float(size[k][0]) + room[k]
        if used + step > width:
            rows.append([])
            used = 0.0
        rows[-1].append(k)
        used += step
    out = [blocks[0][0]]
    top = float(hi[0][1]) + 4 * GAP
    for row in rows:
        span = sum(float(size[k][0]) + room[k] for k in row) - room[row[-1]]
        x = -span / 2
        for k in row:
            out.append(blocks[k][0] + np.array([x - lo[k][0], top - lo[k][1]]))
            x += float(size[k][0]) + room[k]
        top += max(float(size[k][1]) for k in row) + max(room[k] for k in row) / 2
    return out


def layout(
    radii: Sequence[float],
    edges: Sequence[tuple[int, int]],
    weights: Sequence[float] | None = None,
    *,
    seed: int = SEED,
    span: float = EDGE_SPAN,
) -> list[tuple[float, float]]:
    """Coordinates (x, y; the radii's units, y downwards as on a page, rounded to 0.1) of ``len(radii)``
    circles joined by ``edges`` (vertex index pairs; loops and repeats allowed, ``weights`` one per edge,
    default 1): connected vertices near each other (an edge about ``span`` times its ends' radii long), no
    two circles closer than :data:`GAP`, deterministic for the same arguments. Raises :class:`ValueError`
    for an edge naming a vertex out of range or weights not matching the edges."""
    n = len(radii)
    if weights is not None and len(weights) != len(edges):
        raise ValueError(f"{len(weights)} weights for {len(edges)} edges")
    if any(not (0 <= a < n and 0 <= b < n) for a, b in edges):
        raise ValueError(f"an edge names a vertex outside 0..{n - 1}")
    if n == 0:
        return []
    r = np.asarray(radii, dtype=float)
    w = list(weights) if weights is not None else [1.0] * len(edges)
    graph = ig.Graph(n=n, edges=list(edges), directed=False)
    members = sorted(
        (sorted(c) for c in graph.connected_components()),
        key=lambda c: (-float(r[c].sum()), c[0]),
    )
    blocks = []
    for k, vertices in enumerate(members):
        local = {v: i for i, v in enumerate(vertices)}
        sub = [(e, (local[a], local[b])) for e, (a, b) in enumerate(edges) if a in local and b in local]
        xy = _component_layout(
            len(vertices), [p for _, p in sub], [w[e] for e, _ in sub], r[vertices], seed + k, span
        )
        blocks.append((xy, r[vertices]))
    coords = np.zeros((n, 2))
    for vertices, xy in zip(members, _pack(blocks), strict=True):
        coords[vertices] = xy
    return [(round(float(x), 1), round(float(y), 1)) for x, y in coords]
