"""Validity dates (paper §5.1): normalisation to YYYY, YYYY-MM or YYYY-MM-DD, and padding for comparison.

A date the text states vaguely ("later", "in his youth", "mid-1990s", "c. 1840") is discarded, never
coerced: a wrong date is worse than no date. Partial dates are padded for comparison — a start pads
down (1625 → 1625-01-01), an end pads up (1625 → 1625-12-31, 1625-06 → 1625-06-31) — so ISO strings
order lexically: 1625 orders below 1625-06-01.
"""

from __future__ import annotations

import calendar
import re

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
