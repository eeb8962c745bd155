"""``sqlmesh.utils.date`` for project files when SQLMesh is not installed: its small conversions, with
SQLMesh's results (times are UTC; text is ISO, epoch milliseconds, or relative: ``1 week ago``,
``yesterday``, ``today``, ``now``).

>>> to_ds("2024-01-02 03:04:05"), to_ds(1700000000000), to_ds(20240105), to_ts(dt.date(2024, 1, 2))
('2024-01-02', '2023-11-14', '2024-01-05', '2024-01-02 00:00:00')
>>> to_datetime("2024-01-02"), to_timestamp("2024-01-02")
(datetime.datetime(2024, 1, 2, 0, 0, tzinfo=datetime.timezone.utc), 1704153600000)
>>> to_datetime("2 days ago", relative_base=dt.datetime(2024, 1, 3, 12, tzinfo=dt.timezone.utc))
datetime.datetime(2024, 1, 1, 0, 0, tzinfo=datetime.timezone.utc)
"""

from __future__ import annotations

import calendar
import datetime as dt
import re
from typing import Any, Union

from incremental_assets.model import clock

TimeLike = Union[dt.date, dt.datetime, str, int, float]
UTC = dt.timezone.utc
_UNITS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400, "week": 7 * 86400}
_RELATIVE = re.compile(r"^\s*(\d+)\s+(second|minute|hour|day|week|month|year)s?\s+ago\s*$", re.IGNORECASE)


def now() -> dt.datetime:
    return clock.now()


def _relative(text: str, base: dt.datetime) -> dt.datetime | None:
    word = text.strip().lower()
    if word == "now":
        return base
    if word in ("today", "yesterday", "tomorrow"):
        days = {"today": 0, "yesterday": -1, "tomorrow": 1}[word]
        return dt.datetime.combine(base.date() + dt.timedelta(days=days), dt.time(), UTC)
    found = _RELATIVE.match(text)
    if not found:
        return None
    count, unit = int(found.group(1)), found.group(2).lower()
    if unit in ("month", "year"):
        months = base.year * 12 + base.month - 1 - count * (12 if unit == "year" else 1)
        year, month = months // 12, months % 12 + 1
        moved = base.replace(year=year, month=month, day=min(base.day, calendar.monthrange(year, month)[1]))
    else:
        moved = base - dt.timedelta(seconds=count * _UNITS[unit])
    # SQLMesh truncates a relative date of whole days or more to midnight
    return moved if unit in ("second", "minute", "hour") else dt.datetime.combine(moved.date(), dt.time(), UTC)


def to_datetime(value: TimeLike, relative_base: dt.datetime | None = None) -> dt.datetime:
    """A time as an aware UTC datetime."""
    if isinstance(value, dt.datetime):
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    if isinstance(value, dt.date):
        return dt.datetime.combine(value, dt.time(), UTC)
    digits = str(int(value)) if isinstance(value, (int, float)) else value.strip()
    if digits.isdigit():  # yyyymmdd, or epoch milliseconds
        if len(digits) == 8:
            return dt.datetime.strptime(digits, "%Y%m%d").replace(tzinfo=UTC)
        return dt.datetime.fromtimestamp(int(digits) / 1000, UTC)
    text = str(value)
    relative = _relative(text, relative_base or now())
    if relative is not None:
        return relative
    try:
        return to_datetime(dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00")))
    except ValueError:
        raise ValueError(f"'{text}' is not a date or time SQLMesh's to_datetime reads here") from None


def to_date(value: TimeLike, relative_base: dt.datetime | None = None) -> dt.date:
    return to_datetime(value, relative_base).date()


def to_ds(value: TimeLike) -> str:
    return to_datetime(value).strftime("%Y-%m-%d")


def to_ts(value: TimeLike) -> str:
    return to_datetime(value).strftime("%Y-%m-%d %H:%M:%S")


def to_timestamp(value: TimeLike, relative_base: dt.datetime | None = None) -> int:
    return int(to_datetime(value, relative_base).timestamp() * 1000)


def now_timestamp() -> int:
    return to_timestamp(now())


def now_ds() -> str:
    return to_ds(now())


def yesterday_ds() -> str:
    return to_ds("yesterday")


def yesterday_timestamp() -> int:
    return to_timestamp("yesterday")


EXPORTS: dict[str, Any] = {
    name: globals()[name]
    for name in (
        "TimeLike",
        "now",
        "to_datetime",
        "to_date",
        "to_ds",
        "to_ts",
        "to_timestamp",
        "now_timestamp",
        "now_ds",
        "yesterday_ds",
        "yesterday_timestamp",
    )
}
