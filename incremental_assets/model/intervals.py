"""Interval units, time windows and interval arithmetic, pure and UTC.

A window is half-open: ``start`` is included, ``end`` is excluded. Intervals are cut from a model's
``start`` on the boundaries of its interval unit (weeks start on Sunday, as in SQLMesh and Dagster).

>>> w = TimeWindow(utc(2024, 1, 1), utc(2024, 1, 4))
>>> [i.start.day for i in intervals(w, "day")]
[1, 2, 3]
>>> [(b.start.day, b.end.day) for b in batches(w, "day", 2)]
[(1, 3), (3, 4)]
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone, tzinfo
from enum import Enum
from typing import Iterable, Iterator, Sequence

from incremental_assets.errors import WindowError
from incremental_assets.model import clock
from incremental_assets.model.time_formats import spark_format_sql


class IntervalUnit(str, Enum):
    """The granularity of a model's intervals; owns every calendar rule about it.

    A str enum, so ``IntervalUnit.DAY == "day"`` and units read from files compare as text.

    >>> IntervalUnit.of("week").floor(utc(2024, 1, 3)).date().isoformat()   # weeks start on Sunday
    '2023-12-31'
    >>> IntervalUnit.MONTH.next(utc(2024, 11, 1)).date().isoformat()
    '2024-12-01'
    >>> IntervalUnit.HOUR.partition_key(utc(2024, 3, 1, 5)), IntervalUnit.DAY.partition_key(utc(2024, 3, 1))
    ('2024-03-01T05', '2024-03-01')
    """

    HOUR = "hour"
    DAY = "day"
    WEEK = "week"
    MONTH = "month"
    QUARTER = "quarter"
    YEAR = "year"

    def __str__(self) -> str:
        return self.value

    @classmethod
    def of(cls, unit: "IntervalUnit | str | None") -> "IntervalUnit":
        """The unit named by ``unit``; None is the default unit, a day."""
        if unit is None:
            return cls.DAY
        try:
            return cls(str(unit).lower())
        except ValueError:
            raise WindowError(f"unknown interval unit '{unit}'; use one of {', '.join(INTERVAL_UNITS)}") from None

    @property
    def nominal(self) -> timedelta:
        """The longest interval of this unit; turns durations into counts of intervals (rounded up)."""
        return _NOMINAL[self]

    @property
    def cron(self) -> str:
        """The cron expression whose ticks are the interval boundaries (Dagster partitions use it too)."""
        return _CRON[self]

    @property
    def partition_format(self) -> str:
        """The strftime format of this unit's Dagster partition keys."""
        return "%Y-%m-%d-%H:%M" if self is IntervalUnit.HOUR else "%Y-%m-%d"

    @property
    def key_format(self) -> str:
        """The strftime format of this unit's interval keys (the ``ia_interval`` partition values), applied to
        an interval's start: the one definition :meth:`partition_key` and :meth:`partition_key_sql` share."""
        return "%Y-%m-%dT%H" if self is IntervalUnit.HOUR else "%Y-%m-%d"

    def partition_key(self, instant: datetime) -> str:
        """The ``ia_interval`` value of the Delta partition holding the interval that contains ``instant``."""
        return self.floor(instant).strftime(self.key_format)

    def partition_key_sql(self, instant: str) -> str:
        """Spark SQL for :meth:`partition_key` of the timestamp that the Spark SQL ``instant`` computes: the
        start of its interval (:meth:`floor`'s rules in Spark) formatted by :attr:`key_format`.

        >>> IntervalUnit.HOUR.key_format, IntervalUnit.HOUR.partition_key(utc(2024, 3, 1, 5, 30))
        ('%Y-%m-%dT%H', '2024-03-01T05')
        >>> print(IntervalUnit.HOUR.partition_key_sql("ts"))
        concat(date_format(ts, 'yyyy-MM-dd'), 'T', date_format(ts, 'HH'))
        >>> IntervalUnit.WEEK.partition_key(utc(2024, 1, 3))   # weeks start on Sunday
        '2023-12-31'
        >>> print(IntervalUnit.WEEK.partition_key_sql("ts"))
        date_format(date_sub(to_date(ts), dayofweek(to_date(ts)) - 1), 'yyyy-MM-dd')
        """
        day = f"to_date({instant})"
        start = {
            IntervalUnit.HOUR: instant,  # the key format keeps no minutes
            IntervalUnit.DAY: day,
            IntervalUnit.WEEK: f"date_sub({day}, dayofweek({day}) - 1)",  # dayofweek: Sunday is 1
            IntervalUnit.MONTH: f"trunc({day}, 'MM')",
            IntervalUnit.QUARTER: f"trunc({day}, 'QUARTER')",
            IntervalUnit.YEAR: f"trunc({day}, 'YEAR')",
        }[self]
        return spark_format_sql(self.key_format, start)

    def floor(self, instant: datetime) -> datetime:
        """The start of the interval that contains ``instant``."""
        instant = instant.astimezone(timezone.utc)
        if self is IntervalUnit.HOUR:
            return instant.replace(minute=0, second=0, microsecond=0)
        day = instant.replace(hour=0, minute=0, second=0, microsecond=0)
        if self is IntervalUnit.DAY:
            return day
        if self is IntervalUnit.WEEK:
            # Python: Monday=0 ... Sunday=6; days since the last Sunday:
            return day - timedelta(days=(day.weekday() + 1) % 7)
        if self is IntervalUnit.MONTH:
            return day.replace(day=1)
        if self is IntervalUnit.QUARTER:
            return day.replace(day=1, month=3 * ((day.month - 1) // 3) + 1)
        return day.replace(day=1, month=1)

    def ceil(self, instant: datetime) -> datetime:
        """The first interval boundary at or after ``instant``."""
        start = self.floor(instant)
        return start if start == instant.astimezone(timezone.utc) else self.next(start)

    def next(self, boundary: datetime) -> datetime:
        """The start of the interval after the one that begins at ``boundary``."""
        if self is IntervalUnit.HOUR:
            return boundary + timedelta(hours=1)
        if self is IntervalUnit.DAY:
            return boundary + timedelta(days=1)
        if self is IntervalUnit.WEEK:
            return boundary + timedelta(days=7)
        months = {IntervalUnit.MONTH: 1, IntervalUnit.QUARTER: 3, IntervalUnit.YEAR: 12}[self]
        index = boundary.year * 12 + boundary.month - 1 + months
        return boundary.replace(year=index // 12, month=index % 12 + 1)

    def is_boundary(self, instant: datetime) -> bool:
        return self.floor(instant) == instant.astimezone(timezone.utc)


INTERVAL_UNITS: tuple[str, ...] = tuple(u.value for u in IntervalUnit)

_CRON = {
    IntervalUnit.HOUR: "0 * * * *",
    IntervalUnit.DAY: "0 0 * * *",
    IntervalUnit.WEEK: "0 0 * * 0",
    IntervalUnit.MONTH: "0 0 1 * *",
    IntervalUnit.QUARTER: "0 0 1 1,4,7,10 *",
    IntervalUnit.YEAR: "0 0 1 1 *",
}
_NOMINAL = {
    IntervalUnit.HOUR: timedelta(hours=1),
    IntervalUnit.DAY: timedelta(days=1),
    IntervalUnit.WEEK: timedelta(days=7),
    IntervalUnit.MONTH: timedelta(days=31),
    IntervalUnit.QUARTER: timedelta(days=92),
    IntervalUnit.YEAR: timedelta(days=366),
}


def utc(year: int, month: int = 1, day: int = 1, hour: int = 0, minute: int = 0) -> datetime:
    """A timezone-aware UTC datetime.

    >>> utc(2024, 2, 3).isoformat()
    '2024-02-03T00:00:00+00:00'
    """
    return datetime(year, month, day, hour, minute, tzinfo=timezone.utc)


def to_utc(value: datetime | date | str) -> datetime:
    """Parse a date, datetime or ISO string into an aware UTC datetime (naive values are UTC).

    >>> to_utc("2024-03-01").isoformat()
    '2024-03-01T00:00:00+00:00'
    >>> to_utc("2024-03-01 05:00").hour
    5
    """
    if isinstance(value, str):
        text = value.strip()
        if not text:
            raise WindowError("empty date")
        if re.search(r"\d:\d\d[.,]\d{7,}", text):  # Python would silently drop the digits past the 6th
            raise WindowError(
                f"'{value}' is more precise than a microsecond; write at most six fractional digits "
                "(YYYY-MM-DD HH:MM:SS.ffffff), or better a date or hour on an interval boundary"
            )
        try:
            parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            raise WindowError(
                f"'{value}' is not a date or timestamp; write it as YYYY-MM-DD or YYYY-MM-DD HH:MM"
            ) from None
        value = parsed
    if isinstance(value, datetime):
        if value.tzinfo is None:
            return value.replace(tzinfo=timezone.utc)
        return value.astimezone(timezone.utc)
    if isinstance(value, date):
        return datetime(value.year, value.month, value.day, tzinfo=timezone.utc)
    raise WindowError(f"cannot read {value!r} as a date")


@dataclass(frozen=True, order=True)
class TimeWindow:
    """A half-open UTC time range ``[start, end)``."""

    start: datetime
    end: datetime

    def __post_init__(self) -> None:
        if self.start.tzinfo is None or self.end.tzinfo is None:
            raise WindowError("window bounds must be timezone-aware (UTC)")
        if self.end <= self.start:
            raise WindowError(f"empty window: end {self.end.isoformat()} is not after start {self.start.isoformat()}")

    @classmethod
    def parse(cls, start: datetime | date | str, end: datetime | date | str) -> "TimeWindow":
        return cls(to_utc(start), to_utc(end))

    @property
    def duration(self) -> timedelta:
        return self.end - self.start

    def widen(self, before: timedelta, after: timedelta) -> "TimeWindow":
        """The window grown by ``before`` at the start and ``after`` at the end."""
        return TimeWindow(self.start - before, self.end + after)

    def overlaps(self, other: "TimeWindow") -> bool:
        return self.start < other.end and other.start < self.end

    def contains(self, other: "TimeWindow") -> bool:
        return self.start <= other.start and other.end <= self.end

    def __str__(self) -> str:
        return f"[{format_instant(self.start)}, {format_instant(self.end)})"


def format_instant(value: datetime) -> str:
    """Short ISO text: a date when the instant is midnight, else date and time."""
    value = value.astimezone(timezone.utc)
    if value.hour == value.minute == value.second == value.microsecond == 0:
        return value.date().isoformat()
    return value.strftime("%Y-%m-%d %H:%M")


def floor(instant: datetime, unit: IntervalUnit | str) -> datetime:
    """The start of the interval of ``unit`` that contains ``instant``.

    >>> floor(utc(2024, 5, 15, 13), "quarter").isoformat()
    '2024-04-01T00:00:00+00:00'
    >>> floor(utc(2024, 1, 3), "week").isoformat()   # a Wednesday; weeks start on Sunday
    '2023-12-31T00:00:00+00:00'
    """
    return IntervalUnit.of(unit).floor(instant)


def ceil(instant: datetime, unit: IntervalUnit | str) -> datetime:
    """The first interval boundary at or after ``instant``."""
    return IntervalUnit.of(unit).ceil(instant)


def next_boundary(instant: datetime, unit: IntervalUnit | str) -> datetime:
    """The start of the interval after the one that begins at ``instant`` (which must be a boundary)."""
    return IntervalUnit.of(unit).next(instant)


def is_boundary(instant: datetime, unit: IntervalUnit | str) -> bool:
    return IntervalUnit.of(unit).is_boundary(instant)


def check_aligned(window: TimeWindow, unit: str, *, model: str | None = None) -> None:
    """Raise a WindowError naming the nearest boundaries when the window is not on interval boundaries."""
    for label, instant in (("start", window.start), ("end", window.end)):
        if not is_boundary(instant, unit):
            below = floor(instant, unit)
            above = next_boundary(below, unit)
            who = f"model {model}: " if model else ""
            raise WindowError(
                f"{who}window {window} is not on {unit} boundaries: {label} {format_instant(instant)} "
                f"falls inside the interval [{format_instant(below)}, {format_instant(above)}); "
                f"use {format_instant(below)} or {format_instant(above)}"
            )


def intervals(window: TimeWindow, unit: str) -> list[TimeWindow]:
    """The intervals of ``unit`` that make up an aligned window, in order."""
    check_aligned(window, unit)
    out: list[TimeWindow] = []
    cursor = window.start
    while cursor < window.end:
        nxt = next_boundary(cursor, unit)
        out.append(TimeWindow(cursor, nxt))
        cursor = nxt
    return out


def count_intervals(window: TimeWindow, unit: "IntervalUnit | str") -> int:
    """How many intervals of ``unit`` an aligned window holds, without listing them.

    >>> year = TimeWindow(utc(2024, 1, 1), utc(2025, 1, 1))
    >>> count_intervals(year, "hour"), count_intervals(year, "quarter")
    (8784, 4)
    """
    unit = IntervalUnit.of(unit)
    if unit in (IntervalUnit.HOUR, IntervalUnit.DAY, IntervalUnit.WEEK):
        return (window.end - window.start) // unit.nominal
    months = (window.end.year - window.start.year) * 12 + window.end.month - window.start.month
    return months // {IntervalUnit.MONTH: 1, IntervalUnit.QUARTER: 3, IntervalUnit.YEAR: 12}[unit]


def batches(window: TimeWindow, unit: str, size: int | None) -> list[TimeWindow]:
    """Cut an aligned window into consecutive runs of at most ``size`` intervals (None: one run)."""
    if size is None:
        check_aligned(window, unit)
        return [window]
    if size < 1:
        raise WindowError(f"batch size must be at least 1, got {size}")
    parts = intervals(window, unit)
    return [TimeWindow(parts[i].start, parts[min(i + size, len(parts)) - 1].end) for i in range(0, len(parts), size)]


def merge(windows: Sequence[TimeWindow]) -> list[TimeWindow]:
    """Union of windows as sorted, disjoint, non-adjacent ranges."""
    out: list[TimeWindow] = []
    for w in sorted(windows):
        if out and w.start <= out[-1].end:
            if w.end > out[-1].end:
                out[-1] = TimeWindow(out[-1].start, w.end)
        else:
            out.append(w)
    return out


def subtract(window: TimeWindow, covered: Sequence[TimeWindow]) -> list[TimeWindow]:
    """The parts of ``window`` not covered by any of ``covered`` (the gaps)."""
    gaps: list[TimeWindow] = []
    cursor = window.start
    for c in merge(covered):
        if c.end <= cursor or c.start >= window.end:
            continue
        if c.start > cursor:
            gaps.append(TimeWindow(cursor, c.start))
        cursor = max(cursor, c.end)
        if cursor >= window.end:
            break
    if cursor < window.end:
        gaps.append(TimeWindow(cursor, window.end))
    return gaps


def describe_windows(windows: Iterable[TimeWindow]) -> str:
    """Windows as messages and ``status`` list them, ``none`` for no window.

    >>> describe_windows([TimeWindow(utc(2024, 1, 1), utc(2024, 1, 3)),
    ...                   TimeWindow(utc(2024, 1, 5, 6), utc(2024, 1, 6))])
    '[2024-01-01, 2024-01-03), [2024-01-05 06:00, 2024-01-06)'
    >>> describe_windows([])
    'none'
    """
    items = [str(w) for w in windows]
    return ", ".join(items) if items else "none"


START_OF_TIME = datetime(1, 1, 1, tzinfo=timezone.utc)  # the start of a window without one
END_OF_TIME = datetime(9999, 1, 1, tzinfo=timezone.utc)  # the end of a window without one (a model without an end)


@dataclass(frozen=True)
class Coverage:
    """Which intervals of a model something covers: every interval (a model computed whole, a run
    without a partition range) or some windows, kept sorted, disjoint and non-adjacent.

    >>> days = Coverage.of([TimeWindow(utc(2024, 1, 2), utc(2024, 1, 3)), TimeWindow(utc(2024, 1, 1), utc(2024, 1, 2))])
    >>> [str(w) for w in days]
    ['[2024-01-01, 2024-01-03)']
    >>> [str(w) for w in days.minus(Coverage.of([TimeWindow(utc(2024, 1, 1, 12), utc(2024, 1, 2))]))]
    ['[2024-01-01, 2024-01-01 12:00)', '[2024-01-02, 2024-01-03)']
    >>> days.union(EVERY_INTERVAL) == EVERY_INTERVAL, bool(days.minus(EVERY_INTERVAL)), bool(NO_INTERVAL)
    (True, False, False)
    >>> Coverage.from_json(days.to_json()) == days, EVERY_INTERVAL.to_json()
    (True, '*')
    """

    windows: tuple[TimeWindow, ...] = ()
    every: bool = False

    def __post_init__(self) -> None:
        if self.every and self.windows:
            raise WindowError("a coverage of every interval lists no windows")
        object.__setattr__(self, "windows", tuple(merge(self.windows)))

    @classmethod
    def of(cls, windows: Iterable[TimeWindow]) -> "Coverage":
        return cls(tuple(windows))

    def __bool__(self) -> bool:
        return self.every or bool(self.windows)

    def __iter__(self) -> Iterator[TimeWindow]:
        """The windows; every interval has none to list (check ``every`` first)."""
        if self.every:
            raise WindowError("every interval: bound the coverage to a window before listing its windows")
        return iter(self.windows)

    def union(self, *others: "Coverage") -> "Coverage":
        if self.every or any(o.every for o in others):
            return EVERY_INTERVAL
        return Coverage.of([w for c in (self, *others) for w in c.windows])

    def minus(self, other: "Coverage") -> "Coverage":
        """What this covers and ``other`` does not; every interval less some windows is not a set of windows."""
        if other.every:
            return NO_INTERVAL
        if self.every and other.windows:
            raise WindowError("every interval less some windows: bound the coverage to a window first")
        return Coverage.of([part for w in self.windows for part in subtract(w, other.windows)])

    def within(self, window: TimeWindow) -> "Coverage":
        """The part of this coverage inside ``window``."""
        if self.every:
            return Coverage.of([window])
        return Coverage.of(
            [TimeWindow(max(w.start, window.start), min(w.end, window.end)) for w in self.windows if w.overlaps(window)]
        )

    def to_json(self) -> str | list[list[str]]:
        """``"*"`` for every interval, else ``[[start, end], ...]`` in ISO text (the sensor's cursor and the
        shared record of new source data keep it so)."""
        return EVERY if self.every else [[w.start.isoformat(), w.end.isoformat()] for w in self.windows]

    @classmethod
    def from_json(cls, value: str | list[list[str]]) -> "Coverage":
        if value == EVERY:
            return EVERY_INTERVAL
        if isinstance(value, str):
            raise ValueError(f"not the JSON of a coverage: {value!r}")
        return cls.of(TimeWindow.parse(s, e) for s, e in value)


EVERY = "*"  # every interval, as the JSON of a coverage says it
EVERY_INTERVAL = Coverage(every=True)
NO_INTERVAL = Coverage()


def last_complete_end(now: datetime, unit: str, tz: tzinfo = timezone.utc) -> datetime:
    """End of the last interval complete at ``now`` in a project of zone ``tz`` (its intervals are the zone's
    days): behind UTC a day ends after UTC's; ahead of it, it waits for UTC's (Dagster's partition's end).

    >>> [last_complete_end(utc(2025, 3, 2, 1), "day", z).day for z in (timezone.utc, timezone(timedelta(hours=-5)))]
    [2, 1]
    """
    wall = now.astimezone(tz).replace(tzinfo=timezone.utc)
    return floor(min(now.astimezone(timezone.utc), wall), unit)


def unit_from_cron(cron: str) -> str | None:
    """Derive the interval unit from a cron expression, as SQLMesh does when interval_unit is absent.

    >>> unit_from_cron("@daily"), unit_from_cron("0 * * * *"), unit_from_cron("0 0 * * 1")
    ('day', 'hour', 'week')
    """
    aliases = {
        "@hourly": "hour",
        "@daily": "day",
        "@midnight": "day",
        "@weekly": "week",
        "@monthly": "month",
        "@quarterly": "quarter",
        "@yearly": "year",
        "@annually": "year",
    }
    text = cron.strip().lower()
    if text in aliases:
        return aliases[text]
    fields = text.split()
    if len(fields) != 5:
        return None
    minute, hour, dom, month, dow = fields
    star = "*"
    if hour == star and dom == star and month == star and dow == star:
        return "hour"
    if dom == star and month == star and dow == star:
        return "day"
    if dom == star and month == star:
        return "week"
    if month == star:
        return "month"
    if dom != star and len(month.split(",")) == 4:
        return "quarter"
    if dom != star:
        return "year"
    return None


_RELATIVE_DAYS = {"today": 0, "yesterday": -1, "tomorrow": 1}
_RELATIVE_PART = re.compile(r"(\d+|an?|one)\s+(second|minute|hour|day|week|month|year)s?", re.IGNORECASE)
_RELATIVE = re.compile(
    r"\s*((?:(?:\d+|an?|one)\s+(?:second|minute|hour|day|week|month|year)s?[\s,]*(?:and\s+)?)+)ago\s*", re.IGNORECASE
)
_CLOCK_UNITS = {"second", "minute", "hour"}


def relative_instant(text: str, now: datetime) -> datetime | None:
    """A relative time as SQLMesh reads it (``'1 year ago'``, ``'2 months ago'``, ``'yesterday'``), else None.

    Day-or-longer amounts count from midnight UTC of ``now``'s day, hours and minutes from ``now`` to
    the minute; months and years keep the day of the month, clipped to the month's last day.

    >>> now = datetime(2024, 3, 31, 15, 42, 7, tzinfo=timezone.utc)
    >>> [relative_instant(t, now).isoformat() for t in ("1 year ago", "1 month ago", "yesterday", "2 hours ago")]
    ['2023-03-31T00:00:00+00:00', '2024-02-29T00:00:00+00:00', '2024-03-30T00:00:00+00:00', '2024-03-31T13:42:00+00:00']
    >>> relative_instant("2024-01-01", now) is None
    True
    """
    word = text.strip().lower()
    match = _RELATIVE.fullmatch(word)
    if match is None and word not in _RELATIVE_DAYS and word != "now":
        return None
    clock.count_relative()
    midnight = now.astimezone(timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
    if word in _RELATIVE_DAYS:
        return midnight + timedelta(days=_RELATIVE_DAYS[word])
    if match is None:
        return now.astimezone(timezone.utc).replace(second=0, microsecond=0)
    parts = [(1 if n in ("a", "an", "one") else int(n), unit) for n, unit in _RELATIVE_PART.findall(match.group(1))]
    base = (
        now.astimezone(timezone.utc).replace(second=0, microsecond=0)
        if any(u in _CLOCK_UNITS for _, u in parts)
        else midnight
    )
    months = sum(n * (12 if u == "year" else 1) for n, u in parts if u in ("month", "year"))
    seconds = sum(
        n * {"second": 1, "minute": 60, "hour": 3600, "day": 86400, "week": 604800}[u]
        for n, u in parts
        if u not in ("month", "year")
    )
    return _months_back(base, months) - timedelta(seconds=seconds)


def _months_back(value: datetime, months: int) -> datetime:
    index = value.year * 12 + value.month - 1 - months
    year, month = divmod(index, 12)
    last_day = calendar.monthrange(year, month + 1)[1]
    return value.replace(year=year, month=month + 1, day=min(value.day, last_day))
