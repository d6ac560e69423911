"""Strict numeric F1 with asserted-answer extraction: the ECT-QA scorer of the paper's §8.11.

:func:`score_strict` scores one answer against one gold answer (both free text) and is a pure function:

1. **Unanswerable gold** (the gold text is a refusal, e.g. ECT-QA's ``"unanswerable"``, or the caller
   says ``answerable=False``): 1.0 when the answer refuses (:func:`is_refusal`), else 0.0. A refusal
   that quotes figures or years as context still counts as a refusal.
2. **Figure gold** (the gold holds at least one figure): F1 over figures. Figures are numbers with
   their units (``%``, ``percent``, basis points), scale words (thousand, million/``M``/``mn``,
   billion/``B``/``bn``, trillion) and currency; thousands separators are read (``1,234``); the
   accounting form ``$(45)`` and a leading minus give a negative figure, but the sign is recorded and
   **not compared** (prose states direction in words: "fell 5%"), so figures match on magnitude.
3. **Period gold** (no figure, at least one period): F1 over normalised period tokens — ``YYYY-Qn``
   (``Q2 2021``, ``2021-Q2``, ``fiscal 2023-q2``, ``2Q21``, ``Q2'21``, ``second quarter of 2021``,
   ``Q1 and Q3 2022``), ``Qn`` (a quarter without a year), ``YYYY-Hn`` (halves) and ``YYYY``
   (``2024``, ``FY24``, ``fiscal year 2024``); a range ``Q1–Q3 2022`` names each quarter in it.
4. Anything else (a gold naming a company, say) is ``mode="judge"``: no strict score (``f1`` is
   ``None``); §8.11 has a single judge read those (:mod:`evaluation.judges`).

**Never figures**: chronology — period expressions (above), dates (``March 3, 2022``, ``3 March
2022``, ``2022-03-03``, ``03/03/2022``, ``March 2022``), bare integers 1900–2099 (read as years),
durations (``12 months``, ``3-year``), form names (``10-K``, ``10-Q``, ``8-K``) and ordinals (``1st``)
— and citation markers (``[1]``, ``[3][4]``, ``[2, 5]``).

**Tolerance** (:data:`REL_TOL`): two figures match when their values differ by at most 0.5% of the
larger, or by at most half a unit of the last decimal written in the coarser of the two when it has
decimals (``1.3`` billion matches ``1.28`` billion; ``2`` billion does not match ``2.4`` billion;
``32.0%`` does not match ``32.3%``). Values are compared after scaling (``$5.1 billion`` = ``5,100
million``); when one side has no scale word, the numbers as written are compared too (``33.9`` matches
``33.9%``; ``$740`` in ``$740-760 million`` matches ``$740 million``). Kinds must agree when both have
one: a percentage, basis points, or an amount (a currency or a scale word).
Matching is one-to-one (a maximum matching); an answer figure repeating one already matched is not
counted against precision.

**Asserted answer** ("score what an answer asserts", §8.11), in order: the text after an ``Answer:`` /
``Final answer:`` line; else the model's emphasis (``**…**``, ``__…__``) — each only when it holds
something of the kind scored; else, for a period gold of one period, the first period after a superlative
(highest, lowest, largest, record, …) that is not inside a constraint clause (``prior to Q2 2021``,
``between Q1 and Q4 2022``, ``compared with Q2``, ``after 2021``, ``ahead of Q1``) — and when no period
follows the superlative, every period outside a constraint clause; else the whole answer (periods
outside constraint clauses when there are any). Precision is taken over the asserted items only.

**Accuracy**: a question is correct at F1 ≥ :data:`ACCURACY_F1` (0.60), as Table 10 counts it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, TypeVar

T = TypeVar("T")

REL_TOL = 0.005
"""Relative tolerance of figure matching (0.5% of the larger magnitude); see the module docstring for
the rounding allowance beside it."""
ACCURACY_F1 = 0.60
"""F1 at or above which an answer counts as correct (§8.11, Table 10)."""

Mode = Literal["figures", "periods", "unanswerable", "judge"]
AssertedBy = Literal["answer_line", "emphasis", "superlative", "whole", "refusal"]

_I = re.IGNORECASE
_CITATION = re.compile(r"\[\s*\d+(?:\s*[,;–-]\s*\d+)*\s*\]")
_MONTH = (
    r"(?:Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?|"
    r"Sep(?:t(?:ember)?)?|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)\.?"
)
_DATES = [
    re.compile(p)
    for p in (
        rf"\b{_MONTH}\s+\d{{1,2}}(?:st|nd|rd|th)?\b(?:,?\s+\d{{4}}\b)?",
        rf"\b\d{{1,2}}(?:st|nd|rd|th)?\s+(?:of\s+)?{_MONTH}(?:,?\s+\d{{4}}\b)?",
        rf"\b{_MONTH},?\s+\d{{4}}\b",
        r"\b\d{4}[-/]\d{1,2}[-/]\d{1,2}\b",
        r"\b\d{1,2}/\d{1,2}/\d{2,4}\b",
    )
]
_OTHER_CHRONOLOGY = [
    re.compile(p, _I)
    for p in (
        r"\b\d+(?:\.\d+)?[-\s](?:months?|weeks?|days?|years?|yrs?|quarters?)\b",
        r"\b(?:10|8|20|6)-[KQF]\b",
        r"\b\d+(?:st|nd|rd|th)\b",
    )
]
_FY = r"(?:(?:fiscal|FY|CY|calendar)\s*(?:year\s+)?)"
_YR4 = r"((?:19|20)\d{2})"
_YR = rf"(?:{_YR4}|'(\d{{2}})|(?<=FY)(\d{{2}})|(?<=FY\s)(\d{{2}}))"
_ORD = {"first": 1, "1st": 1, "second": 2, "2nd": 2, "third": 3, "3rd": 3, "fourth": 4, "4th": 4}
# (pattern, kind); kinds are read by _period_tokens. Earlier patterns win where they overlap.
_PERIODS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(p, _I), k)
    for p, k in (
        (
            rf"\bQ([1-4])((?:\s*(?:,|and|&|or|/|-|–|to|through)\s*(?:and\s+)?Q[1-4])+)\s*(?:of\s+|in\s+)?{_FY}?{_YR}",
            "qlist",
        ),
        (
            rf"\b{_FY}?{_YR4}(?:[-/_]|(?=Q))\s*(?:fiscal\s+)?Q([1-4])\b"  # not "Q4 2021-Q1 2022"
            r"(?!\s*(?:19|20)\d{2}\b(?!\s*[-/_]?\s*Q[1-4]))",
            "yq",
        ),
        (rf"\bQ([1-4])\s*(?:[-/]\s*|of\s+|\s*)?{_FY}?{_YR}\b", "qy"),
        (rf"\b([1-4])Q\s*(?:'?(\d{{2}})|{_YR4})\b", "nq"),
        (rf"\b{_FY}?{_YR4}\s+(?:fiscal\s+)?Q([1-4])\b", "yq"),
        (
            r"\b(first|second|third|fourth|1st|2nd|3rd|4th)[\s-]+(?:fiscal\s+)?quarter\b"
            rf"(?:\s+(?:of\s+)?(?:the\s+)?{_FY}?{_YR4})?",
            "ordq",
        ),
        (rf"\b(?:H([12])|([12])H)\s*(?:'?(\d{{2}})\b|{_YR4})", "half"),
        (rf"\b(first|second)\s+half\s+(?:of\s+)?(?:the\s+)?{_FY}?{_YR4}", "halfw"),
        (r"\bQ([1-4])\b", "q"),
        (r"\bFY\s*'?(\d{4}|\d{2})\b", "fy"),
        (rf"\b(?:fiscal|calendar)\s+(?:year\s+)?{_YR4}\b", "year"),
    )
]
_NUMBER = re.compile(
    r"(?<![\w.])(?P<neg>[-−](?=[$€£¥]?\(?\d))?(?P<cur>US\$|[$€£¥])?\s?(?P<open>\()?"
    r"(?P<num>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)(?P<close>\))?"
    r"(?:\s*(?P<unit>%|percent\b|per\s+cent\b|pct\b|percentage\s+points?\b|basis\s+points?\b|bps\b|bp\b)"
    r"|\s*(?P<scale>thousand|million|billion|trillion|mn|mm|bn|tn)\b|(?P<letter>(?<=\d)[kKmMbB]\b))?"
    r"(?![A-Za-z0-9])"
)
_SCALES = {
    "thousand": 1e3,
    "k": 1e3,
    "million": 1e6,
    "mn": 1e6,
    "mm": 1e6,
    "m": 1e6,
    "billion": 1e9,
    "bn": 1e9,
    "b": 1e9,
    "trillion": 1e12,
    "tn": 1e12,
}
_SUPERLATIVE = re.compile(
    r"\b(?:highest|lowest|largest|smallest|greatest|least|most|biggest|strongest|weakest|"
    r"best|worst|peak(?:ed|s)?|maximum|minimum|record|top)\b",
    _I,
)
_CONSTRAINT = re.compile(
    r"\b(?:prior\s+to|before|after|since|until|till|through|thru|up\s+to|as\s+of|from|between|compared\s+(?:to|with)|"
    r"relative\s+to|versus|vs\.?|than|over|across|among|excluding|other\s+than|ahead\s+of|beyond|followed\s+by)"
    r"\s+(?:the\s+)?(?:(?:end|start|beginning|close)\s+of\s+(?:the\s+)?)?(?:fiscal\s+)?(?:year\s+)?$",
    _I,
)
_CONTINUATION = re.compile(r"\s*(?:,\s*)?(?:and|to|through|until|till|-|–|—|&)\s*(?:the\s+)?$", _I)
_ANSWER_LINE = re.compile(r"^[ \t>*_#-]*(?:final\s+)?answer[*_ \t]*[:：][*_ \t]*(.+)$", _I | re.MULTILINE)
_EMPHASIS = re.compile(r"\*\*(.+?)\*\*|__(.+?)__", re.DOTALL)
_REFUSAL = re.compile(
    r"\bunanswerable\b|\bnot\s+answerable\b"
    r"|\b(?:cannot|can\s*not|can't|could\s+not|couldn't)\s+(?:be\s+)?(?:determined?|answered|answer|found|find|"
    r"computed?|calculated?|identified|identify|established?|confirmed?|verified|verify)\b"
    r"|\b(?:unable|not\s+able|impossible|not\s+possible)\s+to\s+(?:determine|answer|find|identify|say|tell|compute|calculate)\b"
    r"|\b(?:not|no)\s+(?:enough|sufficient)\s+(?:information|data|evidence|context)\b"
    r"|\binsufficient\s+(?:information|data|evidence|context)\b"
    r"|\b(?:context|documents?|transcripts?|sources?|records?|facts|materials?|data|information|passages?|evidence)"
    r"\s+(?:provided\s+|available\s+|given\s+)?(?:do|does|did)\s*(?:not|n't)\s+(?:contain|provide|include|mention|"
    r"specify|state|cover|say|report|disclose|give)\b"
    r"|\bthere\s+(?:is|are|was|were)\s+no\s+(?:information|data|mention|record|figures?|details?|evidence)\b"
    r"|\bno\s+(?:information|data|figures?|details?)\s+(?:is\s+|are\s+|was\s+)?(?:available|provided|given|reported|disclosed)\b"
    r"|\bI\s+(?:do\s+not|don't)\s+know\b",
    _I,
)


@dataclass(frozen=True)
class Figure:
    """A figure read from text: ``text`` as written, ``value`` its magnitude scaled (``$5.1 billion`` →
    5.1e9), ``written`` the magnitude as written (5.1), ``decimals`` written after the point, ``unit``
    (``"%"``, ``"bp"`` or ``None``), ``scaled`` (a scale word was present), ``currency`` (``"$"``… or
    ``None``), ``negative`` (minus or accounting parentheses; not compared)."""

    text: str
    value: float
    written: float
    decimals: int
    unit: str | None
    scaled: bool
    currency: str | None
    negative: bool

    @property
    def bare(self) -> bool:
        """No unit, scale word or currency: the number could be written in any unit."""
        return self.unit is None and not self.scaled and self.currency is None

    @property
    def kind(self) -> str | None:
        """``"%"`` / ``"bp"`` (its unit), ``"amount"`` (currency or a scale word) or ``None`` (bare)."""
        return self.unit or ("amount" if self.currency or self.scaled else None)


@dataclass(frozen=True)
class PeriodHit:
    """A period expression found at ``start``–``end`` of a text, its normalised ``tokens`` (a list of
    quarters gives several) and whether it sits in a constraint clause (``prior to Q2 2021``)."""

    start: int
    end: int
    tokens: tuple[str, ...]
    constraint: bool = False


@dataclass(frozen=True)
class Extracted:
    """What :func:`extract` reads from a text: its figures and its period expressions (in text order)."""

    figures: tuple[Figure, ...]
    periods: tuple[PeriodHit, ...]

    def period_tokens(self, *, skip_constraints: bool = False) -> list[str]:
        """Every period token, in text order (those in constraint clauses left out when asked)."""
        return [t for p in self.periods if not (skip_constraints and p.constraint) for t in p.tokens]


@dataclass(frozen=True)
class StrictScore:
    """The strict score of one answer (:func:`score_strict`).

    ``mode``: how it was scored (module docstring); ``precision``/``recall``/``f1`` in [0, 1] (``None``
    for ``judge``; for ``unanswerable`` all three are the refusal score 0 or 1); ``refused``: the answer
    refuses (:func:`is_refusal`); ``asserted_by``: where the scored items came from; ``asserted``: the
    answer items scored (figures as written, or period tokens); ``gold``: the gold items; ``matched``: the
    one-to-one matches.
    """

    mode: Mode
    precision: float | None
    recall: float | None
    f1: float | None
    refused: bool
    asserted_by: AssertedBy
    asserted: tuple[str, ...]
    gold: tuple[str, ...]
    matched: int

    @property
    def correct(self) -> bool | None:
        """F1 ≥ :data:`ACCURACY_F1` (``None`` for ``judge``)."""
        return None if self.f1 is None else self.f1 >= ACCURACY_F1 - 1e-12


def _year(*groups: str | None) -> str | None:
    for g in groups:
        if g:
            return g if len(g) == 4 else f"20{g}"
    return None


def _period_tokens(kind: str, m: re.Match[str]) -> tuple[str, ...]:
    g = m.groups()
    if kind == "qlist":
        year = _year(*g[2:])
        quarters = [int(g[0])]
        for sep, q in re.findall(r"\s*(,|and|&|or|/|-|–|to|through)\s*(?:and\s+)?Q([1-4])", g[1], _I):
            start = quarters[-1] + 1 if sep.lower() in ("-", "–", "to", "through") else int(q)
            quarters += range(start, int(q) + 1)  # a range "Q1–Q3" names every quarter in it
        return tuple(f"{year}-Q{q}" for q in dict.fromkeys(quarters))
    if kind == "yq":
        return (f"{g[0]}-Q{g[1]}",)
    if kind == "qy":
        return (f"{_year(*g[1:])}-Q{g[0]}",)
    if kind == "nq":
        return (f"{_year(g[1], g[2])}-Q{g[0]}",)
    if kind == "ordq":
        q = _ORD[g[0].lower()]
        return (f"{g[1]}-Q{q}",) if g[1] else (f"Q{q}",)
    if kind == "half":
        return (f"{_year(g[2], g[3])}-H{g[0] or g[1]}",)
    if kind == "halfw":
        return (f"{g[1]}-H{1 if g[0].lower() == 'first' else 2}",)
    if kind == "q":
        return (f"Q{g[0]}",)
    if kind == "fy":
        return (_year(g[0]) or "",)
    return (g[0],)  # year


def _mask(text: str, start: int, end: int) -> str:
    return text[:start] + " " * (end - start) + text[end:]


def _figure(m: re.Match[str], text: str) -> Figure:
    num = m["num"]
    written = float(num.replace(",", ""))
    decimals = len(num.split(".")[1]) if "." in num else 0
    unit = m["unit"]
    if unit:
        unit = "bp" if unit.lower().startswith(("b", "basis")) else "%"
    scale_word = (m["scale"] or m["letter"] or "").lower()
    scale = _SCALES.get(scale_word, 1.0)
    # accounting negatives only with a currency: "$(45)", "($45)"; a bare "(33.6)" is prose's parenthesis
    accounting = (
        m["cur"] is not None
        and bool(m["close"])
        and (bool(m["open"]) or (m.start() > 0 and text[m.start() - 1] == "("))
    )
    return Figure(
        m.group(0).strip().lstrip("("),
        written * scale,
        written,
        decimals,
        unit,
        bool(scale_word),
        m["cur"],
        bool(m["neg"]) or accounting,
    )


def extract(text: str) -> Extracted:
    """Read ``text``'s figures and period expressions (module docstring: what counts as chronology).

    Citation markers and dates are removed first; period expressions are read and removed; bare
    integers 1900–2099 among the remaining numbers are years (period tokens), everything else a
    :class:`Figure`. Constraint clauses are marked on the periods (:attr:`PeriodHit.constraint`).
    """
    work = text
    for pattern in (_CITATION, *_DATES):
        for m in list(pattern.finditer(work)):
            work = _mask(work, m.start(), m.end())
    hits: list[PeriodHit] = []
    for pattern, kind in _PERIODS:
        for m in list(pattern.finditer(work)):
            hits.append(PeriodHit(m.start(), m.end(), _period_tokens(kind, m)))
            work = _mask(work, m.start(), m.end())
    for pattern in _OTHER_CHRONOLOGY:
        for m in list(pattern.finditer(work)):
            work = _mask(work, m.start(), m.end())
    figures: list[Figure] = []
    for m in _NUMBER.finditer(work):
        f = _figure(m, work)
        if (
            f.bare
            and not f.negative
            and f.decimals == 0
            and "," not in m["num"]
            and 1900 <= f.written <= 2099
        ):
            hits.append(PeriodHit(m.start("num"), m.end("num"), (m["num"],)))
        else:
            figures.append(f)
    hits.sort(key=lambda h: h.start)
    marked: list[PeriodHit] = []
    for i, h in enumerate(hits):
        prev_end = hits[i - 1].end if i else 0
        before = text[max(prev_end, h.start - 60) : h.start]
        constraint = bool(_CONSTRAINT.search(before)) or (
            bool(marked) and marked[-1].constraint and bool(_CONTINUATION.fullmatch(text[prev_end : h.start]))
        )
        marked.append(PeriodHit(h.start, h.end, h.tokens, constraint))
    return Extracted(tuple(figures), tuple(marked))


def is_refusal(text: str) -> bool:
    """Whether ``text`` declines to answer ("unanswerable", "cannot be determined", "the transcripts do
    not mention …", "not enough information", "I don't know", …). Numbers in it do not matter."""
    return bool(_REFUSAL.search(text))


def _close(a: float, b: float, allowance: float) -> bool:
    """Magnitudes within :data:`REL_TOL` of the larger, or within ``allowance`` (rounding)."""
    return abs(abs(a) - abs(b)) <= max(REL_TOL * max(abs(a), abs(b)), allowance) * (1 + 1e-9)


def figures_match(a: Figure, b: Figure) -> bool:
    """Whether two figures state the same quantity (module docstring: tolerance and units)."""
    if a.kind is not None and b.kind is not None and a.kind != b.kind:
        return False
    coarse = a if a.decimals <= b.decimals else b  # rounding allowance: half a unit of its last decimal
    half = 0.5 * 10.0**-coarse.decimals if coarse.decimals else 0.0
    if _close(a.value, b.value, half * (coarse.value / coarse.written if coarse.written else 1.0)):
        return True
    return (not a.scaled or not b.scaled) and _close(a.written, b.written, half)


def _max_matching(n_gold: int, n_ans: int, ok: list[list[bool]]) -> tuple[int, list[int]]:
    """Maximum one-to-one matching (augmenting paths); ``ok[g][a]``. Returns (size, answer → gold or -1)."""
    owner = [-1] * n_ans

    def augment(g: int, seen: list[bool]) -> bool:
        for a in range(n_ans):
            if ok[g][a] and not seen[a]:
                seen[a] = True
                if owner[a] < 0 or augment(owner[a], seen):
                    owner[a] = g
                    return True
        return False

    size = sum(augment(g, [False] * n_ans) for g in range(n_gold))
    return size, owner


def _f1(
    gold: Sequence[T], answer: Sequence[T], same: Callable[[T, T], bool]
) -> tuple[float, float, float, int]:
    """(precision, recall, F1, matches) of a maximum one-to-one matching of ``answer`` to ``gold``."""
    ok = [[same(g, a) for a in answer] for g in gold]
    size, owner = _max_matching(len(gold), len(answer), ok)
    # an unmatched answer item that repeats a matched gold item is a repetition, not a wrong assertion
    repeats = sum(
        1
        for a in range(len(answer))
        if owner[a] < 0 and any(ok[g][a] and g in owner for g in range(len(gold)))
    )
    denom = len(answer) - repeats
    p = size / denom if denom else 0.0
    r = size / len(gold) if gold else 0.0
    return p, r, (2 * p * r / (p + r) if p + r else 0.0), size


def _emphasis(answer: str) -> list[tuple[AssertedBy, str]]:
    """The answer's own emphasis, strongest first: its ``Answer:`` line, then its bold spans."""
    out: list[tuple[AssertedBy, str]] = []
    line = _ANSWER_LINE.search(answer)
    if line and line.group(1).strip(" *_"):
        out.append(("answer_line", line.group(1).replace("**", "").replace("__", "")))
    bold = [m.group(1) or m.group(2) for m in _EMPHASIS.finditer(answer)]
    if bold:
        out.append(("emphasis", " ; ".join(bold)))
    return out


def asserted_periods(answer: str, *, single: bool) -> tuple[AssertedBy, list[str]]:
    """The period tokens ``answer`` asserts (module docstring); ``single``: the gold is one period, so
    the superlative rule applies. Returns (where they came from, tokens)."""
    for how, text in _emphasis(answer):
        tokens = extract(text).period_tokens()
        if tokens:
            return how, tokens
    found = extract(answer)
    free = [p for p in found.periods if not p.constraint]
    sup = _SUPERLATIVE.search(answer)
    if single and sup:
        after = [p for p in free if p.start >= sup.end()]
        if after:
            return "superlative", list(after[0].tokens)
    return "whole", [t for p in (free or found.periods) for t in p.tokens]


def asserted_figures(answer: str) -> tuple[AssertedBy, list[Figure]]:
    """The figures ``answer`` asserts: those of its ``Answer:`` line or emphasis when they hold any, else
    every figure of the answer. Returns (where they came from, figures)."""
    for how, text in _emphasis(answer):
        figures = list(extract(text).figures)
        if figures:
            return how, figures
    return "whole", list(extract(answer).figures)


def score_strict(answer: str, gold: str, *, answerable: bool | None = None) -> StrictScore:
    """Score ``answer`` against ``gold`` by strict figure or period matching (module docstring).

    ``answerable``: ``False`` scores a refusal as 1 (LongMemEval ``_abs`` questions, ECT-QA
    ``unanswerable`` ones); ``None`` reads it from the gold (a gold that is itself a refusal). Pure: no
    I/O, no model.
    """
    refused = is_refusal(answer)
    if answerable is False or (answerable is None and is_refusal(gold)):
        s = 1.0 if refused else 0.0
        return StrictScore("unanswerable", s, s, s, refused, "refusal", (), ("unanswerable",), int(s))
    gold_found = extract(gold)
    if gold_found.figures:
        how, figs = asserted_figures(answer)
        gfigs = list(gold_found.figures)
        p, r, f, n = _f1(gfigs, figs, figures_match)
        return StrictScore(
            "figures", p, r, f, refused, how, tuple(x.text for x in figs), tuple(x.text for x in gfigs), n
        )
    gold_periods = gold_found.period_tokens()
    if gold_periods:
        how, tokens = asserted_periods(answer, single=len(set(gold_periods)) == 1)
        p, r, f, n = _f1(gold_periods, tokens, lambda a, b: a == b)
        return StrictScore("periods", p, r, f, refused, how, tuple(tokens), tuple(gold_periods), n)
    return StrictScore("judge", None, None, None, refused, "whole", (), (gold,), 0)


def split_elements(gold: str) -> list[str]:
    """A gold answer's elements, for the element-wise judge: split at semicolons when it has any, else at
    commas and ``and`` between items (never inside a number such as ``1,234``); a trailing period and
    ``and`` joiners are dropped. ``"33.9%, 33.6%, 31.7% and 32.3%"`` → four elements."""
    text = gold.strip().rstrip(".").strip()
    if ";" in text:
        parts = text.split(";")
    else:
        parts = re.split(r"(?<!\d),\s*(?:and\s+)?|,(?!\d{3}\b)\s*(?:and\s+)?|\s+and\s+", text)
    return [p.strip() for p in parts if p and p.strip()]
