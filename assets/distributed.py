"""The code location with every step on a Celery worker (issue 18 item 3): the same definitions as
:mod:`pgrag_dag.assets.definitions` — eight assets, checks, sensors, schedule, resources — with
``dagster_celery``'s executor and an ``index`` job over the eight stages and their checks.

Needs the ``celery`` extra (``pip install 'pgrag-dag[celery]'``: dagster-celery, redis). The run process
(``dg dev`` / the daemon's run worker, or :func:`run_partition`) puts each step on the broker named by
``PGRAG_CELERY_BROKER`` (e.g. ``redis://127.0.0.1:6379/0``) with results on ``PGRAG_CELERY_BACKEND``
(e.g. ``redis://127.0.0.1:6379/1``); workers started with the same two URLs execute them::

    # celery.yaml: execution: {config: {broker: redis://…/0, backend: redis://…/1}}
    dagster-celery worker start -A dagster_celery.app -y celery.yaml

A worker imports this module (the job's code pointer) with its own environment: it needs the same
``PGRAG_CONFIG`` file, ``PGRAG_DATABASE_URL`` (or the file's ``database_url``), model keys and
``DAGSTER_HOME``-independent instance access (each step carries the run's instance reference, so the
instance storage must be reachable from the worker — PostgreSQL storage for more than one machine).
Nothing passes between steps but the database: assets return ``MaterializeResult`` and read their
inputs with SQL, so no IO manager file is written.

Loaded as a code location with ``python_module: pgrag_dag.assets.distributed`` in a workspace file.
"""

from __future__ import annotations

import dagster as dg
from dagster_celery import celery_executor

from pgrag_dag.assets.definitions import build_defs
from pgrag_dag.assets.runner import run_job_partition

INDEX_JOB = "index"
"""The asset job over the eight stages, their checks and the community lag check."""

CELERY_EXECUTOR = celery_executor.configured(
    {"broker": {"env": "PGRAG_CELERY_BROKER"}, "backend": {"env": "PGRAG_CELERY_BACKEND"}},
    name="pgrag_celery",
)
"""``dagster_celery``'s executor, its broker and result backend read from the run process's environment
when a run starts (``PGRAG_CELERY_BROKER``, ``PGRAG_CELERY_BACKEND``)."""


def build_celery_defs() -> dg.Definitions:
    """:func:`~pgrag_dag.assets.definitions.build_defs` with :data:`CELERY_EXECUTOR` and the
    :data:`INDEX_JOB` job (settings from ``PGRAG_CONFIG``/``pgrag.yaml``, read now)."""
    index = dg.define_asset_job(
        INDEX_JOB,
        selection=dg.AssetSelection.all(),
        description="The eight stages of one partition, each step on a Celery worker.",
    )
    return build_defs(executor=CELERY_EXECUTOR, jobs=[index])


def index_job() -> dg.JobDefinition:
    """The :data:`INDEX_JOB` job, resolved from freshly built definitions (the settings of this process's
    environment); the reconstructable target a run's steps are re-created from in a worker."""
    return build_celery_defs().resolve_job_def(INDEX_JOB)


def run_partition(instance: dg.DagsterInstance, partition: str) -> dg.DagsterRun:
    """Run :data:`INDEX_JOB` for ``partition`` in this process as the run worker, every step executed by a
    Celery worker (:func:`~pgrag_dag.assets.runner.run_job_partition`); returns the finished run. Blocks
    until every step has ended — with no worker listening on the broker, forever. Raises
    :class:`~pgrag_dag.errors.ConfigurationError` for invalid settings and Dagster's config error when
    ``PGRAG_CELERY_BROKER``/``PGRAG_CELERY_BACKEND`` are unset.
    """
    return run_job_partition(instance, partition, dg.reconstructable(index_job))


defs = build_celery_defs()
