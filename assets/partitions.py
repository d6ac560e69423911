"""Partitions: one dynamic partition per realm/space, key ``"<realm>.<space>"`` with the space
percent-encoded where Dagster or its UI would read a character (:func:`pgrag_dag.names.partition_key`:
``wiki.demo``, ``acme.tenant%3Aacme%2Feng%20Straße``), from the sources.

Dagster does not validate dynamic keys, so keys are validated by :func:`pgrag_dag.names.split_partition_key`
before they are added or used.
"""

from __future__ import annotations

import dagster as dg

from pgrag_dag.names import split_partition_key

SPACES = dg.DynamicPartitionsDefinition(name="space")


def add_partitions(instance: dg.DagsterInstance, keys: list[str]) -> list[str]:
    """Validate ``keys`` and add those the instance does not know yet; returns the added keys."""
    for key in keys:
        split_partition_key(key)
    known = set(instance.get_dynamic_partitions(SPACES.name))
    new = [k for k in keys if k not in known]
    if new:
        instance.add_dynamic_partitions(SPACES.name, new)
    return new
