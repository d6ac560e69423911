"""Validation of realm and space names (paper §3.3).

Names are checked at the boundary and, where they become SQL identifiers, still passed as
``psycopg.sql.Identifier``: a hostile name never reaches SQL text.
"""

from __future__ import annotations

import re

from pgrag_dag.errors import InvalidNameError

WILDCARD_SPACE = "*"
"""The read-only wildcard space: accepted by queries, rejected on every write."""

_NAME = re.compile(r"[a-z][a-z0-9_]{0,39}")
_SCHEMA_PREFIX = "pgrag_"


def validate_name(kind: str, value: object) -> str:
    """Return ``value`` if it is a valid realm or space name, else raise.

    A valid name is 1–40 characters of lowercase ASCII letters, digits and underscores, starting
    with a letter. Raises :class:`InvalidNameError` naming the value and the reason.
    """
    if not isinstance(value, str):
        raise InvalidNameError(kind, repr(value), "must be a string")
    if not value:
        raise InvalidNameError(kind, value, "is empty")
    if len(value.encode("utf-8")) > 40:
        raise InvalidNameError(kind, value, "is longer than 40 bytes")
    if not _NAME.fullmatch(value):
        raise InvalidNameError(
            kind, value, "only lowercase ASCII letters, digits and '_' are allowed, starting with a letter"
        )
    return value


def validate_realm(realm: object) -> str:
    """Validate a realm name; see :func:`validate_name`."""
    return validate_name("realm", realm)


def validate_space(space: object, *, for_write: bool = True) -> str:
    """Validate a space name; the wildcard ``*`` is accepted only when ``for_write`` is false."""
    if space == WILDCARD_SPACE:
        if for_write:
            raise InvalidNameError("space", "*", "the wildcard space is read-only and cannot be written")
        return WILDCARD_SPACE
    return validate_name("space", space)


def schema_for(realm: str) -> str:
    """PostgreSQL schema holding a realm's tables (``pgrag_<realm>``); the realm is validated."""
    return _SCHEMA_PREFIX + validate_realm(realm)


def partition_key(realm: str, space: str) -> str:
    """Dagster partition key ``"<realm>.<space>"`` for a validated realm and space."""
    return f"{validate_realm(realm)}.{validate_space(space)}"


def split_partition_key(key: str) -> tuple[str, str]:
    """Inverse of :func:`partition_key`; raises :class:`InvalidNameError` on a malformed key."""
    if not isinstance(key, str) or key.count(".") != 1:
        raise InvalidNameError("partition", str(key), "expected '<realm>.<space>'")
    realm, space = key.split(".")
    return validate_realm(realm), validate_space(space)
