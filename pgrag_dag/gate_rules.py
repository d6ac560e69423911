"""Gate rules on one value: the refusals of the paper's Table 2 that judge a single name or predicate,
and the identity form names are compared in (§4.3, §4.5, §4.6).

A leaf: the slot contracts, the store and the domain read these rules; :mod:`pgrag_dag.extract.gates`
applies them, with the triple-level gates, to whole frames of extractor output.
"""

from __future__ import annotations

import enum
import functools
import re
import unicodedata
from typing import Any

from pgrag_dag.config.sections import GateSettings


class Gate(str, enum.Enum):  # noqa: UP042 -- StrEnum would change str()/format() of a member
    """One member per gate of the paper's Table 2, plus malformed records and records holding text no
    database can store (a lone surrogate, issue 13)."""

    VAGUE_PREDICATE = "vague_predicate"
    PRONOMINAL_NAME = "pronominal_name"
    CONJUNCTIVE_NAME = "conjunctive_name"
    BARE_QUANTITY = "bare_quantity"
    OVERLONG_NAME = "overlong_name"
    POSSESSIVE_ROLE = "possessive_role"
    SELF_LOOP = "self_loop"
    CONFIDENCE_FLOOR = "confidence_floor"
    ORPHANED_ENDPOINT = "orphaned_endpoint"
    MALFORMED = "malformed"
    UNENCODABLE_TEXT = "unencodable_text"


UNENCODABLE = "_unencodable"
"""The key :func:`pgrag_dag.extract.model_extraction.parse_extraction` sets on an entity or triple that held a
lone surrogate (``"<field>: <escaped value>"``); such a record is refused as :attr:`Gate.UNENCODABLE_TEXT`."""


VAGUE_PREDICATES = frozenset(
    {
        "relates_to",
        "related_to",
        "is_related_to",
        "associated_with",
        "is_associated_with",
        "see_also",
        "connected_to",
        "connected_with",
        "linked_to",
        "linked_with",
        "involves",
        "involved_with",
        "has_relation",
        "relation",
        "related",
        "association",
        "mentions",
        "mentioned_with",
        "co_occurs_with",
        "about",
        "concerns",
    }
)
PRONOUNS = frozenset(
    {
        "he",
        "she",
        "it",
        "they",
        "them",
        "him",
        "her",
        "his",
        "hers",
        "its",
        "their",
        "theirs",
        "we",
        "us",
        "our",
        "you",
        "your",
        "i",
        "me",
        "my",
        "this",
        "that",
        "these",
        "those",
        "who",
        "whom",
        "which",
        "himself",
        "herself",
        "itself",
        "themselves",
        "someone",
        "somebody",
        "everyone",
        "one",
    }
)
_RELATIVE = re.compile(
    r"^(?:(?:his|her|their|its|my|our|your|this|that|these|those)\s"
    r"|the (?:company|firm|author|man|woman|city|country|group|team|government|person)$)"
)
_AUXILIARIES = ("has_been_", "have_been_", "had_been_", "was_", "were_", "is_", "are_", "been_", "being_")
_QUANTITY = re.compile(
    r"^[~≈<>]?\s*[$£€¥]?\s*\d[\d.,]*\s*(?i:%|percent|per\s*cent|k|m|bn|thousand|million|billion|trillion)?"
    r"(\s+[a-z]+){0,2}$"
)
_CURRENCY_WORD = re.compile(r"^(about |around |over |nearly |some )?[$£€¥][\d.,]+", re.IGNORECASE)
_POSSESSIVE = re.compile(r"^[A-Z][\w.\- ]*['’]s\s+[a-z][a-z ]*$")
_PROPER = r"(?:[A-Z][\w.'’\-]*)(?:\s+(?:[A-Z][\w.'’\-]*|de|da|von|van|of|la|le|du))*"
_CONJUNCTION = re.compile(rf"^{_PROPER}(?:\s*,\s*{_PROPER})*(?:\s*,)?\s+(?:and|&)\s+{_PROPER}$")
_CONJ_SPLIT = re.compile(r"\s*(?:,\s*and\s+|\s+and\s+|\s*&\s*|\s*,\s*)")
_ZERO_WIDTH = dict.fromkeys(map(ord, "\u200b\u2060\ufeff"))  # removed from every stored name
# a zero-width (non-)joiner with an ASCII character, a space or nothing beside it: stored only inside an
# emoji sequence or a non-Latin word
_STRAY_JOINER = re.compile(r"(?<![^\x00-\x7f\s\u200c\u200d])[\u200c\u200d]|[\u200c\u200d](?![^\x00-\x7f\s])")
_IDENTITY_DROP = dict.fromkeys(
    map(
        ord,
        "\u00ad\u061c\u200b\u200c\u200d\u200e\u200f\u202a\u202b\u202c\u202d\u202e"
        "\u2060\u2066\u2067\u2068\u2069\ufeff",
    )
)  # invisible: never part of an identity
_QUOTES = "\"'“”‘’«»`"


@functools.lru_cache(maxsize=200_000)
def identity_key(name: str) -> str:
    """The form names are compared in (§4.6): NFC, every invisible character removed (zero-width space,
    joiners — also inside emoji sequences —, word joiner, soft hyphen, BOM, bidirectional marks and
    controls), wrapping quote marks stripped, whitespace collapsed, lowercased. ``"👩\u200d🔬"`` and
    ``"👩🔬"`` are one identity; CJK and right-to-left names are compared as written."""
    s = unicodedata.normalize("NFC", name).translate(_IDENTITY_DROP)
    s = " ".join(s.split()).strip(_QUOTES).strip()
    return s.lower()


def clean_name(name: Any) -> str:
    """A surface name as stored: NFC, zero-width space, word joiner and BOM removed, a zero-width
    (non-)joiner kept only between two non-ASCII, non-space characters (an emoji sequence such as
    ``👩\u200d🔬``, a Persian or Indic word), wrapping quotes stripped, whitespace collapsed."""
    if not isinstance(name, str):
        return ""
    return _clean(name)


@functools.lru_cache(maxsize=200_000)
def _clean(name: str) -> str:
    s = unicodedata.normalize("NFC", name).translate(_ZERO_WIDTH)
    s = " ".join(s.split()).strip(_QUOTES).strip()
    while (t := _STRAY_JOINER.sub("", s)) != s:
        s = t
    return s.strip(_QUOTES).strip()


def normalise_predicate(predicate: Any) -> str:
    """Lowercase, underscore-joined, leading tense auxiliaries stripped (§4.5): ``Was Appointed`` →
    ``appointed``."""
    if not isinstance(predicate, str):
        return ""
    p = re.sub(r"[^0-9a-z]+", "_", unicodedata.normalize("NFKC", predicate).lower()).strip("_")
    changed = True
    while changed:
        changed = False
        for aux in _AUXILIARIES:
            if p.startswith(aux) and len(p) > len(aux):
                p, changed = p[len(aux) :], True
    return p


def is_conjunctive(name: str, known: frozenset[str] = frozenset(), entity_type: str | None = None) -> bool:
    """A bare conjunction of proper-noun phrases: every conjunct is itself an entity named in the same
    extraction (``known``, identity keys), or — for a record typed Person, or an untyped triple endpoint —
    every conjunct is a multi-word proper name ("Ada Lovelace and Charles Babbage"). Titles and
    organisations survive: "Pride and Prejudice", "Tax Cuts and Jobs Act" (a Work), "Consumer Products &
    Interactive Media" (an Organization)."""
    if not _CONJUNCTION.match(name):
        return False
    parts = [p for p in _CONJ_SPLIT.split(name) if p]
    if len(parts) < 2:
        return False
    if all(identity_key(p) in known for p in parts):
        return True
    return entity_type in (None, "Person") and all(len(p.split()) >= 2 for p in parts)


def name_gate(
    name: str, settings: GateSettings, known: frozenset[str] = frozenset(), entity_type: str | None = None
) -> Gate | None:
    """The gate that refuses ``name`` as an entity name, or ``None`` when it may become a vertex.

    ``known`` holds the identity keys of the other names in the same extraction and ``entity_type`` the
    record's type (``None`` for a triple endpoint); both only inform the conjunction gate.
    """
    if not name:
        return Gate.MALFORMED
    if len(name) > settings.max_name_chars:
        return Gate.OVERLONG_NAME
    low = name.lower()
    if low in PRONOUNS or _RELATIVE.match(low):
        return Gate.PRONOMINAL_NAME
    if _QUANTITY.match(name) or _CURRENCY_WORD.match(name):
        return Gate.BARE_QUANTITY
    if is_conjunctive(name, known, entity_type):
        return Gate.CONJUNCTIVE_NAME
    if settings.possessive_gate and _POSSESSIVE.match(name):
        return Gate.POSSESSIVE_ROLE
    return None
