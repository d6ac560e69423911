"""Realm names are identifiers, space names are values (paper §3.3; issue 13 item 6).

- A **realm** becomes a PostgreSQL schema (``pgrag_<realm>``): 1–40 bytes of lowercase ASCII letters,
  digits and ``_``, starting with a letter, and still passed as ``psycopg.sql.Identifier``.
- A **space** is only ever a bound parameter (a ``space`` column value), so it may be any non-empty
  string of at most :data:`MAX_SPACE_CHARS` characters — ``tenant:acme``, ``org/eng``, ``Straße``,
  ``two words`` — without control, format (zero-width, bidi), private-use or unassigned characters,
  line separators, or whitespace at either end. ``*`` is the read-only wildcard.
- A **Dagster partition key** is ``"<realm>.<space>"`` with the space percent-encoded
  (:func:`partition_key`): ASCII letters, digits, ``_`` and ``-`` and printable non-ASCII characters
  stay as they are, every other character becomes ``%XX`` per UTF-8 byte. So today's keys
  (``wiki.demo``) are unchanged, and no key holds what Dagster or its UI give a meaning (``...``
  ranges, ``,`` lists, ``|`` multi-partitions, ``/`` paths, ``*``, control characters);
  :func:`split_partition_key` is its exact inverse and accepts only canonical keys.
"""

from __future__ import annotations

import contextlib
import re
import string
import unicodedata
from collections.abc import Collection
from urllib.parse import unquote

from pgrag_dag.errors import InvalidNameError

WILDCARD_SPACE = "*"
"""The read-only wildcard space: accepted by queries, rejected on every write."""

MAX_SPACE_CHARS = 200
"""The longest space name, in characters (Unicode code points)."""

_NAME = re.compile(r"[a-z][a-z0-9_]{0,39}")
_SCHEMA_PREFIX = "pgrag_"
_KEY_SAFE = frozenset(string.ascii_letters + string.digits + "_-")


def validate_name(kind: str, value: object) -> str:
    """Return ``value`` if it is a valid identifier name (a realm's), else raise.

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
    """Return ``space`` if it is a valid space name, else raise :class:`InvalidNameError` naming it and why.

    Valid: a string of 1–:data:`MAX_SPACE_CHARS` characters with no character of Unicode category
    ``C*`` (control, format such as zero-width or bidi marks, surrogate, private use, unassigned) or
    ``Zl``/``Zp`` (line and paragraph separators), and no whitespace at either end. The wildcard ``*``
    is accepted only when ``for_write`` is false (reads across the realm's spaces).
    """
    if space == WILDCARD_SPACE:
        if for_write:
            raise InvalidNameError("space", "*", "the wildcard space is read-only and cannot be written")
        return WILDCARD_SPACE
    if not isinstance(space, str):
        raise InvalidNameError("space", repr(space), "must be a string")
    if not space:
        raise InvalidNameError("space", space, "is empty")
    if len(space) > MAX_SPACE_CHARS:
        raise InvalidNameError("space", space, f"is longer than {MAX_SPACE_CHARS} characters ({len(space)})")
    for i, ch in enumerate(space):
        category = unicodedata.category(ch)
        if category[0] == "C" or category in ("Zl", "Zp"):
            raise InvalidNameError(
                "space",
                space,
                f"character {i} is U+{ord(ch):04X}, a control, format, "
                "unassigned or line-separator character (not allowed in a space name)",
            )
    if space != space.strip():
        raise InvalidNameError("space", space, "starts or ends with whitespace")
    return space


def schema_for(realm: str) -> str:
    """PostgreSQL schema holding a realm's tables (``pgrag_<realm>``); the realm is validated."""
    return _SCHEMA_PREFIX + validate_realm(realm)


def _encode_space(space: str) -> str:
    return "".join(
        ch
        if ch in _KEY_SAFE or (not ch.isascii() and ch.isprintable())
        else "".join(f"%{b:02X}" for b in ch.encode("utf-8"))
        for ch in space
    )


def partition_key(realm: str, space: str) -> str:
    """Dagster partition key ``"<realm>.<encoded space>"`` of a valid realm and (writable) space.

    The space is percent-encoded as the module docstring says: ``partition_key("wiki", "demo")`` is
    ``"wiki.demo"``, ``partition_key("t", "tenant:acme/eng Straße")`` is ``"t.tenant%3Aacme%2Feng%20Straße"``.
    Raises :class:`InvalidNameError` for an invalid realm or space (the wildcard included).
    """
    return f"{validate_realm(realm)}.{_encode_space(validate_space(space))}"


def split_partition_key(key: str) -> tuple[str, str]:
    """``(realm, space)`` of a key :func:`partition_key` made (the realm ends at the first ``.``).

    Raises :class:`InvalidNameError` on a malformed key: no ``.``, an invalid realm, a space that does not
    decode (invalid percent-encoded UTF-8) or is invalid, or a key that is not the canonical encoding of
    its space (e.g. ``wiki.a%41`` for ``wiki.aA``, ``a...b``), so one space has exactly one key.
    """
    if not isinstance(key, str) or "." not in key:
        raise InvalidNameError("partition", str(key), "expected '<realm>.<space>'")
    realm, encoded = key.split(".", 1)
    validate_realm(realm)
    try:
        space = validate_space(unquote(encoded, errors="strict"))
    except UnicodeDecodeError:
        raise InvalidNameError("partition", key, "its space is not valid percent-encoded UTF-8") from None
    if _encode_space(space) != encoded:
        raise InvalidNameError(
            "partition",
            key,
            f"not the partition key of space {space!r}, which is {partition_key(realm, space)!r}",
        )
    return realm, space


def parse_partition(text: str, declared: Collection[tuple[str, str]] = ()) -> tuple[str, str]:
    """``(realm, space)`` of ``"<realm>.<space>"`` as a person types it (``pgrag index``): the space verbatim
    after the first ``.``, as written in the configuration — or, when that space is not among
    ``declared`` (``(realm, space)`` pairs) but the text is the Dagster partition key of a declared one
    (:func:`partition_key`, e.g. copied from the UI), that space.

    Raises :class:`InvalidNameError` when there is no ``.`` or the realm or space is invalid.
    """
    realm, dot, rest = text.partition(".")
    if not dot:
        raise InvalidNameError("partition", text, "expected '<realm>.<space>'")
    validate_realm(realm)
    if (realm, rest) not in declared:
        with contextlib.suppress(InvalidNameError):
            decoded = split_partition_key(text)
            if decoded in declared:
                return decoded
    return realm, validate_space(rest)
