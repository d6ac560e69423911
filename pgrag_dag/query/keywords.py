"""Query conditioning: dual-level keywords and two-event decomposition (paper §7.2, §7.4).

:func:`extract` asks the model once for low-level keywords (the concrete things a question names)
and high-level keywords (its themes). It is the one place a fallback is allowed (§7.2): on any
failure — no client, a model or replay error, a response that is not the expected JSON, or two
empty lists — :func:`lexical` derives both from the question's surface: capitalised phrases and
tokens with digits are low level, the remaining content words (minus stopwords) high level. A
weak keyword list is never persisted and only widens retrieval.

Low-level keywords are appended to the question before embedding the entity query vector;
high-level keywords steer relation ranking in global mode; both feed the lexical channel.

:func:`decompose` splits a two-event question ("X before Y", "X and Y", "X after Y", "X or Y")
into two sub-questions when each side carries at least two content words.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from pgrag_dag.providers.prompts import KEYWORDS_SYSTEM, KEYWORDS_USER
from pgrag_dag.storable import clean_json, clean_text

if TYPE_CHECKING:
    from pgrag_dag.providers.llm import ModelClient

logger = logging.getLogger(__name__)

KeywordSource = Literal["model", "lexical", "off"]

STOPWORDS = frozenset(
    """
a about above after again against all also am an and any are as at be because been before being below
between both but by can could did do does doing done down during each either else ever every few first
for from further had has have having he her here hers herself him himself his how i if in into is it
its itself just last least less let like many may me might more most much must my myself neither no
nor not now of off on once one only or other our ours ourselves out over own same shall she should
since so some still such than that the their theirs them themselves then there these they this those
though through thus to too under until up upon us very was we were what whatever when where whether
which while who whom whose why will with within without would yes yet you your yours yourself
yourselves describe explain tell list name give show find compare summarise summarize according
please kind sort way thing things happen happened happens
""".split()
)

_CONNECTORS = frozenset(
    {"of", "de", "du", "da", "del", "der", "van", "von", "la", "le", "al", "bin", "y", "&"}
)
_TOKEN = re.compile(r"[\w&][\w'’.\-&]*", re.UNICODE)
_SENTENCE_END = re.compile(r"[.?!:;]\s*$")


@dataclass(frozen=True)
class Keywords:
    """Low- and high-level keywords of one question, and where they came from.

    Unpacks as ``low_level, high_level``. ``source``: ``"model"``, ``"lexical"`` (chosen, or the
    fallback after a model failure) or ``"off"``.
    """

    low_level: list[str] = field(default_factory=list)
    high_level: list[str] = field(default_factory=list)
    source: KeywordSource = "lexical"

    def __iter__(self) -> Iterator[list[str]]:
        return iter((self.low_level, self.high_level))


def _clean(token: str) -> str:
    token = token.rstrip(".'’-")
    return token[:-2] if token.lower().endswith(("'s", "’s")) else token


def _tokens(question: str) -> list[tuple[str, bool]]:
    """``(token, starts_sentence)`` pairs."""
    out: list[tuple[str, bool]] = []
    for m in _TOKEN.finditer(question):
        start = m.start() == 0 or bool(_SENTENCE_END.search(question[: m.start()]))
        tok = _clean(m.group())
        if tok:
            out.append((tok, start))
    return out


def _is_named(token: str) -> bool:
    return token[0].isupper() or any(ch.isdigit() for ch in token) or any(ch.isupper() for ch in token[1:])


def lexical(question: str) -> Keywords:
    """Keywords from the question's surface alone (no model): see the module docstring.

    >>> lexical("Who worked with Charles Babbage on the Analytical Engine?")
    Keywords(low_level=['Charles Babbage', 'Analytical Engine'], high_level=['worked'], source='lexical')
    """
    toks = _tokens(question)
    low: list[str] = []
    used: set[int] = set()
    i = 0
    while i < len(toks):
        tok, _ = toks[i]
        if not _is_named(tok) or tok.lower() in STOPWORDS:
            i += 1
            continue
        j = i + 1
        while j < len(toks):
            nxt = toks[j][0]
            if _is_named(nxt) and not toks[j][1] and nxt.lower() not in STOPWORDS - {"i"}:
                j += 1
            elif (
                nxt.lower() in _CONNECTORS | {"the"}
                and j + 1 < len(toks)
                and _is_named(toks[j + 1][0])
                and toks[j + 1][0].lower() not in STOPWORDS
            ):
                j += 2
            else:
                break
        low.append(" ".join(t for t, _ in toks[i:j]))
        used.update(range(i, j))
        i = j
    high = [
        t.lower()
        for k, (t, _) in enumerate(toks)
        if k not in used and t.lower() not in STOPWORDS and len(t) >= 3 and not t.isdigit()
    ]
    return Keywords(list(dict.fromkeys(low)), list(dict.fromkeys(high)), "lexical")


def extract(question: str, client: ModelClient | None = None) -> Keywords:
    """Dual-level keywords of ``question`` (§7.2): one JSON call to ``client`` (purpose
    ``"keywords"``, :data:`~pgrag_dag.providers.prompts.KEYWORDS_SYSTEM`), else — no client, or any failure —
    :func:`lexical`. Never raises for a model failure; the fallback is logged at WARNING.
    """
    if client is None:
        return lexical(question)
    messages = [
        {"role": "system", "content": KEYWORDS_SYSTEM},
        {"role": "user", "content": KEYWORDS_USER.format(question=question)},
    ]
    try:
        completion = client.complete(messages, purpose="keywords", json_mode=True)
        low, high = _parse(completion.text)
    except Exception as exc:  # the one allowed fallback (§7.2): any failure widens, never fails
        logger.warning("keyword extraction fell back to lexical keywords: %s: %s", type(exc).__name__, exc)
        return lexical(question)
    return Keywords(low, high, "model")


def _parse(text: str) -> tuple[list[str], list[str]]:
    data = clean_json(json.loads(text), lambda s: clean_text(s)[0])  # storable: they become query parameters
    if not isinstance(data, dict):
        raise ValueError("the keyword response is not a JSON object")
    out: list[list[str]] = []
    for name in ("low_level_keywords", "high_level_keywords"):
        value = data.get(name, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ValueError(f"{name} is not a list of strings")
        out.append(list(dict.fromkeys(v.strip() for v in value if v.strip())))
    if not out[0] and not out[1]:
        raise ValueError("the model returned no keyword")
    return out[0], out[1]


_JOINER = re.compile(r",?\s+\b(?:and then|and|before|after|or)\b\s+", re.IGNORECASE)


def _content_words(text: str) -> int:
    return sum(1 for t, _ in _tokens(text) if t.lower() not in STOPWORDS and len(t) >= 2)


def decompose(question: str) -> list[str]:
    """Two sub-questions for a two-event question, or ``[]`` (§7.4; off by default in queries).

    Splits at the first ``and`` / ``and then`` / ``before`` / ``after`` / ``or`` whose two sides
    each carry at least two content words; a conjunction of two bare names is not split.

    >>> decompose("Did Ada Lovelace meet Charles Babbage before she wrote the notes?")
    ['Did Ada Lovelace meet Charles Babbage', 'she wrote the notes']
    >>> decompose("Who worked with Ada and Babbage?")
    []
    """
    text = question.strip().rstrip("?.! ")
    for m in _JOINER.finditer(text):
        left, right = text[: m.start()].strip(" ,"), text[m.end() :].strip(" ,")
        if _content_words(left) >= 2 and _content_words(right) >= 2:
            return [left, right]
    return []


__all__ = ["STOPWORDS", "KeywordSource", "Keywords", "decompose", "extract", "lexical"]
