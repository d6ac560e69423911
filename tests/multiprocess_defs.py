"""The job of the multiprocess-executor test (``tests/e2e/test_parallel_backfill.py``, issue 18 item 2): the
project's definitions with Dagster's multiprocess executor and an ``index`` job over the eight stages and
their checks, as :mod:`pgrag_dag.assets.distributed` has them for Celery; each step is a subprocess that
rebuilds the job from this module."""

from __future__ import annotations

import dagster as dg

from pgrag_dag.assets.definitions import build_defs

INDEX_JOB = "index"


def index_job() -> dg.JobDefinition:
    """The ``index`` job with ``dg.multiprocess_executor``, from definitions built now (``PGRAG_CONFIG``)."""
    index = dg.define_asset_job(INDEX_JOB, selection=dg.AssetSelection.all())
    return build_defs(executor=dg.multiprocess_executor, jobs=[index]).resolve_job_def(INDEX_JOB)
