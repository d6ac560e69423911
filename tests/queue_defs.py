"""A one-op job as a code location, for the run-queue test (``tests/assets/test_slots.py``): cheap to load and
run."""

from __future__ import annotations

import dagster as dg


@dg.op
def noop() -> None:
    """Does nothing."""


@dg.job
def noop_job() -> None:
    noop()


defs = dg.Definitions(jobs=[noop_job])
