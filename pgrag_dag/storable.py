"""Text PostgreSQL can store (issue 13): no NUL (U+0000) and no lone surrogate (U+D800–U+DFFF).

PostgreSQL ``text`` and ``jsonb`` refuse NUL, and a lone surrogate cannot be encoded as UTF-8 at all
(psycopg raises ``UnicodeEncodeError`` before the statement is sent). Both reach Python strings from
JSON (``"\\u0000"``, ``"\\ud800"``), from model responses, and from file names the file system could
not decode (``os`` maps their bytes onto surrogates). Everything that stores a string it did not write
itself passes it through one of these first:

- :func:`clean_text` — document text, titles, metadata values: NUL removed, a lone surrogate replaced by
  U+FFFD; says what it changed;
- :func:`clean_key` — identities (doc_keys, file names): NUL removed, an undecodable file-name byte or a
  lone surrogate written as a backslash escape (``\\xe9``, ``\\ud800``), so distinct keys stay distinct;
- :func:`escape_unstorable` — raw model text, kept verbatim for audit and replay: NUL and lone
  surrogates written as their JSON escapes, which a JSON parser reads back as the same characters;
- :func:`clean_json` — any of these over every string (keys and values) of a parsed JSON value.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

_NUL = "\x00"
_SURROGATE = re.compile("[\ud800-\udfff]")
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def has_lone_surrogate(text: str) -> bool:
    """Whether ``text`` holds a lone surrogate (a character no UTF-8 encoder accepts)."""
    return _SURROGATE.search(text) is not None


def clean_text(text: str) -> tuple[str, list[str]]:
    """``text`` with NUL removed and lone surrogates replaced by U+FFFD, and what was changed (one
    phrase per kind, e.g. ``"2 NUL (U+0000) removed"``; empty when nothing was)."""
    if not _UNSTORABLE.search(text):
        return text, []
    notes = []
    if n := text.count(_NUL):
        notes.append(f"{n} NUL (U+0000) removed")
        text = text.replace(_NUL, "")
    text, n = _SURROGATE.subn("\ufffd", text)
    if n:
        notes.append(f"{n} lone surrogate(s) replaced by U+FFFD")
    return text, notes


def clean_key(key: str) -> str:
    """An identity PostgreSQL can store and index: NUL removed; a file name's undecodable bytes
    (``os``' surrogate escapes) and any other lone surrogate written as backslash escapes."""
    if not _UNSTORABLE.search(key):
        return key
    key = key.replace(_NUL, "")
    try:
        return key.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a surrogate outside the file-system escape range
        return key.encode("utf-8", "backslashreplace").decode("utf-8")


def escape_unstorable(text: str) -> str:
    """``text`` with NUL and lone surrogates written as JSON escapes (``\\u0000``, ``\\ud800``): ASCII,
    storable, and read back by a JSON parser as the same characters."""
    return _UNSTORABLE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def clean_json(value: Any, clean: Callable[[str], str]) -> Any:
    """``value`` (parsed JSON) with ``clean`` applied to every string in it, object keys included."""
    if isinstance(value, str):
        return clean(value)
    if isinstance(value, dict):
        return {clean_json(k, clean): clean_json(v, clean) for k, v in value.items()}
    if isinstance(value, list):
        return [clean_json(v, clean) for v in value]
    return value


def unstorable(value: Any) -> bool:
    """Whether any string in ``value`` (parsed JSON: keys and values) holds NUL or a lone surrogate."""
    if isinstance(value, str):
        return _UNSTORABLE.search(value) is not None
    if isinstance(value, dict):
        return any(unstorable(k) or unstorable(v) for k, v in value.items())
    if isinstance(value, list):
        return any(unstorable(v) for v in value)
    return False
