"""The graph view's layout (issue 31 item 4): deterministic — the same coordinates in another process —
circles never overlapping, connected vertices near each other, unconnected pieces in rows below the main
one, and clear errors for edges that name no vertex."""

from __future__ import annotations

import json
import random
import subprocess
import sys

import numpy as np
import pytest

from pgrag_dag.graph.view_layout import GAP, layout


def _graph() -> tuple[list[float], list[tuple[int, int]], list[float]]:
    """A hub of 30 spokes, a ring of 12, a chain of 5 and 8 singletons; repeated edges and a loop."""
    rng = random.Random(7)
    n = 1 + 30 + 12 + 5 + 8
    radii = [30.0] + [round(5 + 10 * rng.random(), 1) for _ in range(n - 1)]
    edges = [(0, k) for k in range(1, 31)] + [(31 + k, 31 + (k + 1) % 12) for k in range(12)]
    edges += [(43 + k, 44 + k) for k in range(4)] + [(0, 1), (5, 5)]
    return radii, edges, [1.0 + (k % 3) for k in range(len(edges))]


def test_the_same_graph_gets_the_same_coordinates_in_another_process() -> None:
    radii, edges, weights = _graph()
    here = layout(radii, edges, weights)
    assert here == layout(radii, edges, weights)
    code = (
        "import json, sys; from pgrag_dag.graph.view_layout import layout; a = json.load(sys.stdin); "
        "print(json.dumps(layout(a[0], [tuple(e) for e in a[1]], a[2])))"
    )
    there = subprocess.run(
        [sys.executable, "-c", code],
        input=json.dumps([radii, edges, weights]),
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONHASHSEED": "123"},
    ).stdout
    assert [tuple(p) for p in json.loads(there)] == here


def _distances(xy: np.ndarray) -> np.ndarray:
    return np.hypot(*(xy[:, None, :] - xy[None, :, :]).transpose(2, 0, 1))


def test_circles_do_not_overlap_and_neighbours_sit_near_each_other() -> None:
    radii, edges, weights = _graph()
    r = np.array(radii)
    # even with edges as short as their ends' radii (the spokes crowd round the hub) no circle overlaps
    for span in (1.0, 3.0):
        room = _distances(np.array(layout(radii, edges, weights, span=span))) - r[:, None] - r[None, :]
        np.fill_diagonal(room, np.inf)
        assert room.min() >= GAP - 0.5, span  # coordinates are rounded to 0.1
    xy = np.array(layout(radii, edges, weights))
    dist = _distances(xy)
    # the hub's spokes are nearer the hub than the ring's vertices are
    spokes = dist[0, 1:31].mean()
    assert spokes < dist[0, 31:43].mean() and spokes < 6 * (r[0] + r[1:31].mean())
    # a ring's neighbours are nearer each other than its opposite vertices
    ring = [dist[31 + k, 31 + (k + 1) % 12] for k in range(12)]
    assert max(ring) < min(dist[31 + k, 31 + (k + 6) % 12] for k in range(12))
    # the hub's component (the largest) is at the centre, every other piece below it
    hub_bottom = max(xy[k, 1] + r[k] for k in range(31))
    assert abs(xy[:31, 0].mean()) < 50 and all(xy[k, 1] - r[k] > hub_bottom for k in range(31, len(radii)))


def test_small_and_empty_drawings_and_bad_edges() -> None:
    assert layout([], []) == []
    assert layout([10.0], []) == [(0.0, 0.0)]
    a, b = layout([10.0, 10.0], [(0, 1)])
    assert np.hypot(a[0] - b[0], a[1] - b[1]) >= 20 + GAP - 0.2
    with pytest.raises(ValueError, match="outside 0..1"):
        layout([1.0, 1.0], [(0, 2)])
    with pytest.raises(ValueError, match="1 weights for 2 edges"):
        layout([1.0, 1.0], [(0, 1), (1, 0)], [1.0])
