"""Validity dates (paper §5.1): normalisation to YYYY, YYYY-MM or YYYY-MM-DD, and padding for comparison;
the temporal predicates of a query (§5.3–5.4: ``as_of``, ``as_believed_at``), whose SQL is
:mod:`pgrag_dag.store.retrieval`.

A date the text states vaguely ("later", "in his youth", "mid-1990s", "c. 1840") is discarded, never
coerced: a wrong date is worse than no date. Partial dates are padded for comparison — a start pads
down (1625 → 1625-01-01), an end pads up (1625 → 1625-12-31, 1625-06 → 1625-06-31) — so ISO strings
order lexically: 1625 orders below 1625-06-01.
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pgrag_dag.errors import QueryError

_MONTHS = {m.lower(): i for i, m in enumerate(calendar.month_name) if m}
_MONTHS.update({m.lower(): i for i, m in enumerate(calendar.month_abbr) if m})
_ISO = re.compile(r"^(\d{4})(?:[-/](\d{1,2})(?:[-/](\d{1,2}))?)?$")
_MONTH_DAY_YEAR = re.compile(r"^([A-Za-z]+)\.? (\d{1,2}),? (\d{4})$")
_DAY_MONTH_YEAR = re.compile(r"^(\d{1,2}) ([A-Za-z]+)\.?,? (\d{4})$")
_MONTH_YEAR = re.compile(r"^([A-Za-z]+)\.?,? (\d{4})$")
_TIMESTAMP = re.compile(
    r"^(\d{4})-(\d{1,2})-(\d{1,2})[Tt ](\d{1,2}):(\d{2})(?::(\d{2})(?:[.,]\d+)?)?"
    r" ?(?:[Zz]|UTC|GMT|[+-](\d{2})(?::?(\d{2}))?)?$"
)
"""An ISO-8601 timestamp as models copy it from logs and filings: ``T`` or a space before the time,
optional seconds and fraction, an optional ``Z`` / ``UTC`` / ``±hh[:mm]`` offset."""


def _format(year: int, month: int | None = None, day: int | None = None) -> str | None:
    if not 1 <= year <= 9999:
        return None
    if month is None:
        return f"{year:04d}"
    if not 1 <= month <= 12:
        return None
    if day is None:
        return f"{year:04d}-{month:02d}"
    if not 1 <= day <= calendar.monthrange(year, month)[1]:
        return None
    return f"{year:04d}-{month:02d}-{day:02d}"


def normalise_date(value: object) -> str | None:
    """``YYYY``, ``YYYY-MM`` or ``YYYY-MM-DD`` for a stated date, else ``None``.

    Accepts ISO forms (``2015``, ``2015-06``, ``2015-6-30``, ``2015/06/30``), ISO timestamps, whose
    date is kept as written and whose time of day and offset are dropped (``2019-03-04T10:00:00+02:00``,
    ``2019-03-04 10:00:00``, ``2019-03-04T23:30:00.5Z`` → ``2019-03-04``; a validity period is kept to
    the day, never shifted to UTC), and written dates (``June 30, 2015``, ``30 June 2015``,
    ``June 2015``). Impossible dates (2015-02-30), impossible times (25:00) and vague ones are
    discarded. A value already normalised comes back unchanged.
    """
    if isinstance(value, int) and not isinstance(value, bool):
        return _format(value)
    if not isinstance(value, str):
        return None
    text = " ".join(value.strip().split())
    if m := _ISO.match(text):
        y, mo, d = m.groups()
        return _format(int(y), int(mo) if mo else None, int(d) if d else None)
    if m := _TIMESTAMP.match(text):
        return _timestamp_date(*m.groups())
    if (m := _MONTH_DAY_YEAR.match(text)) and m.group(1).lower() in _MONTHS:
        return _format(int(m.group(3)), _MONTHS[m.group(1).lower()], int(m.group(2)))
    if (m := _DAY_MONTH_YEAR.match(text)) and m.group(2).lower() in _MONTHS:
        return _format(int(m.group(3)), _MONTHS[m.group(2).lower()], int(m.group(1)))
    if (m := _MONTH_YEAR.match(text)) and m.group(1).lower() in _MONTHS:
        return _format(int(m.group(2)), _MONTHS[m.group(1).lower()])
    return None


def _timestamp_date(
    y: str, mo: str, d: str, hh: str, mm: str, ss: str | None, oh: str | None, om: str | None
) -> str | None:
    """The date of a :data:`_TIMESTAMP` match when its time of day and offset are possible, else ``None``."""
    if int(hh) > 23 or int(mm) > 59 or (ss is not None and int(ss) > 60):  # 60: a leap second
        return None
    if (oh is not None and int(oh) > 23) or (om is not None and int(om) > 59):
        return None
    return _format(int(y), int(mo), int(d))


def lower_bound(date: str) -> str:
    """The first day a normalised date can mean: ``1625`` → ``1625-01-01``, ``1625-06`` → ``1625-06-01``."""
    return {4: date + "-01-01", 7: date + "-01"}.get(len(date), date)


def upper_bound(date: str) -> str:
    """A key no later day of a normalised date exceeds: ``1625`` → ``1625-12-31``, ``1625-06`` →
    ``1625-06-31`` (lexical, like the database's ``valid_to_key``)."""
    return {4: date + "-12-31", 7: date + "-31"}.get(len(date), date)


def as_of_bounds(as_of: str) -> tuple[str, str]:
    """The padded ``(lower, upper)`` day keys an ``as_of`` date covers (§5.1, §5.4).

    ``2016`` → ``("2016-01-01", "2016-12-31")``, ``2016-06`` → ``("2016-06-01", "2016-06-31")``,
    ``2016-06-15`` → itself twice — padded exactly as the ``valid_from_key`` / ``valid_to_key``
    columns are (:func:`pgrag_dag.temporal.lower_bound` / ``upper_bound``), so keys compare lexically.

    Raises:
        QueryError: anything but a real calendar date written ``YYYY``, ``YYYY-MM`` or ``YYYY-MM-DD``.
    """
    if not isinstance(as_of, str) or not _STRICT_DATE.fullmatch(as_of) or normalise_date(as_of) != as_of:
        raise QueryError(f"as_of must be a calendar date written YYYY, YYYY-MM or YYYY-MM-DD, got {as_of!r}")
    return lower_bound(as_of), upper_bound(as_of)


_STRICT_DATE = re.compile(r"\d{4}(?:-\d{2}(?:-\d{2})?)?")


def belief_instant(value: str | datetime) -> datetime:
    """An ISO-8601 instant as an aware UTC :class:`datetime`; a naive one is taken as UTC (§5.3).

    Raises:
        QueryError: not a :class:`datetime` or an ISO-8601 string.
    """
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.strip())
        except ValueError:
            raise QueryError(f"as_believed_at must be an ISO-8601 instant, got {value!r}") from None
    if not isinstance(value, datetime):
        raise QueryError(f"as_believed_at must be an ISO-8601 string or a datetime, got {value!r}")
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


@dataclass(frozen=True)
class Temporal:
    """The temporal predicates of one query (§5.4); they compose.

    Attributes:
        as_of: valid time — keep relations whose validity interval overlaps this date's interval
            (:func:`as_of_bounds`); undated relations always match. ``None``: no valid-time filter.
        believed_at: belief time — read the graph as it stood at that instant (issue 14): relations,
            entities and chunks from the append-only history (the SQL of
            :mod:`pgrag_dag.store.retrieval`), superseded relations excluded unless
            ``include_superseded``. A relation from before the history with no ``t_created`` is always known.
        include_superseded: keep superseded relations too. Without ``believed_at`` a relation is
            superseded when ``superseded_by`` is set; with it, when it was superseded at ``believed_at``.
    """

    as_of: str | None = None
    believed_at: datetime | None = None
    include_superseded: bool = False

    def __post_init__(self) -> None:
        if self.as_of is not None:
            as_of_bounds(self.as_of)
        if self.believed_at is not None:
            object.__setattr__(self, "believed_at", belief_instant(self.believed_at))

    def params(self) -> dict[str, Any]:
        """The query parameters :func:`pgrag_dag.store.retrieval.relation_filter` and the chunk/entity
        filters refer to."""
        lo, hi = as_of_bounds(self.as_of) if self.as_of is not None else (None, None)
        return {"as_of_lo": lo, "as_of_hi": hi, "believed_at": self.believed_at}


CURRENT = Temporal()
"""No valid-time or belief-time filter; superseded relations excluded (the default)."""
