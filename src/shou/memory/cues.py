"""What a text says about time and form, read without a model: the cues memory search weighs.

For a memory: whether it states a time ("yesterday", "last weekend", "two years ago", "in 2019", a month
or weekday) and how much of it is questions. For a query: whether it asks when (or how long, what year),
and which periods it names ("in June", "May 2023", "2022", "last week").

Why these: a question about when something happened is answered by the memory that says when, and in a
conversation that is the turn with the time expression ("I went to the park yesterday"), not the turns
that share its other words. A turn that only asks ("What inspired you?") shares the question's words
but holds no answer; its neighbour does (the ranking still passes its score on to them).
"""

from __future__ import annotations

import datetime as _dt
import math
import re
from dataclasses import dataclass

__all__ = ["Period", "asks_when", "named_periods", "question_share", "states_time"]

MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
          "november", "december")
DAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_MONTH_ALT = "|".join(MONTHS) + "|" + "|".join(m[:3] for m in MONTHS if m != "may") + "|sept"
_UNIT = rf"(?:day|week|weekend|month|year|night|morning|afternoon|evening|summer|winter|spring|fall|autumn|" \
        rf"season|semester|{'|'.join(DAYS)})s?"
_COUNT = r"(?:\d+|a|an|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|few|several|couple(?: of)?)"

_TIME_EXPR = re.compile(
    r"\b(?:yesterday|today|tonight|tomorrow|recently|lately|the other day|earlier this|"
    rf"(?:last|this|next|past|previous|coming|every)\s+(?:\w+\s+)?{_UNIT}|"
    rf"{_COUNT}\s+{_UNIT}\s+(?:ago|before|after|later|earlier)|ago|"
    rf"(?:in|since|by|during|until)\s+(?:early\s+|late\s+|mid-?)?(?:{_MONTH_ALT}|(?:19|20)\d\d)|"
    rf"(?:19|20)\d\d|{'|'.join(MONTHS)}|{'|'.join(DAYS)}|"
    r"\d{1,2}(?:st|nd|rd|th)\b|\d{1,2}[/.]\d{1,2}[/.]\d{2,4})\b",
    re.IGNORECASE,
)
# A leading "(1:56 pm on 8 May, 2023)" or "[2024-05-08 10:00]": when the text was written, not a time it
# tells of. It is left out when asking whether a memory states a time.
_HEADER = re.compile(r"^\s*[(\[][^)\]]{0,60}\d[^)\]]{0,60}[)\]]\s*")

_ASKS_WHEN = re.compile(
    r"\bwhen\b|\bhow\s+long\b|\bsince\s+when\b|\bhow\s+(?:many|much)\s+(?:years|months|weeks|days|time)\b|"
    r"\b(?:what|which)\s+(?:year|month|day|date|time|week|weekend|season|age)\b|\bat\s+what\s+(?:age|point)\b|"
    r"\bhow\s+old\b|\bwhat\s+period\b",
    re.IGNORECASE,
)
_SENTENCE = re.compile(r"[^.!?]+[.!?]*")


def states_time(text: str) -> bool:
    """Whether the text (its timestamp header aside) tells of a time: a date, a period, "ago", "last week"."""
    return bool(_TIME_EXPR.search(_HEADER.sub("", text, count=1)))


def question_share(text: str) -> float:
    """The share of the text's sentences that are questions (0 to 1)."""
    sentences = [s for s in (m.strip() for m in _SENTENCE.findall(text)) if len(s) > 1]
    if not sentences:
        return 0.0
    return sum(s.endswith("?") for s in sentences) / len(sentences)


def asks_when(query: str) -> bool:
    """Whether the query asks for a time: when, how long, what year, since when, how old."""
    return bool(_ASKS_WHEN.search(query))


@dataclass(frozen=True, slots=True)
class Period:
    """A span of time a query names: local timestamps [start, end), and with `month` (1-12) only the moments
    in that month ("in June": June of any year)."""

    start: float = -math.inf
    end: float = math.inf
    month: int = 0

    def __contains__(self, moment: float) -> bool:
        if not self.start <= moment < self.end:
            return False
        if not self.month:
            return True
        try:
            return _dt.datetime.fromtimestamp(moment).month == self.month
        except (OverflowError, OSError, ValueError):
            return False


_NAMED = re.compile(
    rf"\b(?P<month>{'|'.join(MONTHS)})\b(?:\s+(?:of\s+)?(?P<myear>(?:19|20)\d\d))?|\b(?P<year>(?:19|20)\d\d)\b",
    re.IGNORECASE,
)
_RELATIVE = re.compile(
    r"\b(?P<which>last|this|past|previous)\s+(?P<unit>week|month|year)\b|\b(?P<day>yesterday|today)\b", re.IGNORECASE
)


def named_periods(query: str, now: float | None = None) -> list[Period]:
    """The periods a query names: months ("in June": that month of every year; "May 2023"), years, and
    relative ones ("last week", "yesterday") counted back from `now` (default: the current time).

    "may" in lower case is the verb, not the month, unless a year follows it.
    """
    periods: list[Period] = []
    years_named: set[int] = set()
    for m in _NAMED.finditer(query):
        if m.group("month"):
            month_word, year = m.group("month"), m.group("myear")
            if month_word == "may" and not year:
                continue
            month = MONTHS.index(month_word.lower()) + 1
            if year:
                years_named.add(int(year))
                periods.append(_month(int(year), month))
            else:
                periods.append(Period(month=month))
        elif m.group("year") and int(m.group("year")) not in years_named:
            y = int(m.group("year"))
            periods.append(Period(_ts(_dt.datetime(y, 1, 1)), _ts(_dt.datetime(y + 1, 1, 1))))
    today = _dt.datetime.fromtimestamp(now) if now is not None else _dt.datetime.now()
    day = today.replace(hour=0, minute=0, second=0, microsecond=0)
    for m in _RELATIVE.finditer(query):
        if m.group("day"):
            start = day - _dt.timedelta(days=1 if m.group("day").lower() == "yesterday" else 0)
            periods.append(Period(_ts(start), _ts(start + _dt.timedelta(days=1))))
            continue
        back = m.group("which").lower() != "this"
        unit = m.group("unit").lower()
        if unit == "week":
            start = day - _dt.timedelta(days=day.weekday() + (7 if back else 0))
            periods.append(Period(_ts(start), _ts(start + _dt.timedelta(days=7))))
        elif unit == "month":
            first = day.replace(day=1)
            if back:
                first = (first - _dt.timedelta(days=1)).replace(day=1)
            periods.append(_month(first.year, first.month))
        else:
            year = day.year - (1 if back else 0)
            periods.append(Period(_ts(_dt.datetime(year, 1, 1)), _ts(_dt.datetime(year + 1, 1, 1))))
    return periods


def _month(year: int, month: int) -> Period:
    start = _dt.datetime(year, month, 1)
    end = _dt.datetime(year + (month == 12), month % 12 + 1, 1)
    return Period(_ts(start), _ts(end))


def _ts(moment: _dt.datetime) -> float:
    try:
        return moment.timestamp()
    except (OverflowError, OSError, ValueError):  # outside what this platform's clock can show
        return 0.0
