"""What a source's time value means, whatever its type: the one reading shared by every reader that prunes a
source (Parquet footers, Delta statistics and partition values) and the automation that watches it.

Intervals are cut on the project's clock: the wall time of the project's time zone (setting ``timezone``, UTC by
default), held as UTC-labelled datetimes. A window's bounds are rendered as text that Spark reads in the session's
zone, which is the project's, so the interval ``2025-03-01`` of a project in ``America/New_York`` holds the rows
of that day in New York, whatever the column's type:

- a timestamp with a time zone is that instant, read as the wall time it has in the project's zone;
- a timestamp without one (``timestamp_ntz``, what pandas and pyarrow write by default) is that wall time;
- a date is its midnight;
- text is parsed with the source's ``time_column_format`` (ISO-8601 without one);
- a number counts seconds, milliseconds or microseconds since 1970-01-01 UTC when the format says so
  (``epoch_seconds``, ``epoch_millis``, ``epoch_micros``).
"""

from __future__ import annotations

import re
import zoneinfo
from datetime import date, datetime, timedelta, timezone, tzinfo

_OFFSET = re.compile(r"(?:UTC|GMT)?(?P<sign>[+-])(?P<hours>\d{2})(?::?(?P<minutes>\d{2}))?")
# strftime directives from the most to the least significant: a format listing them in this order,
# with nothing else between them but fixed separators, sorts as text in time order.
_ORDER = ("Y", "m", "d", "H", "M", "S", "f")
# time_column_format of a number counting from the epoch: how many of its units make a second.
EPOCH_FORMATS = {"epoch_seconds": 1, "epoch_millis": 1_000, "epoch_micros": 1_000_000}
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def zone(name: str | None) -> tzinfo:
    """The time zone of the project's ``timezone`` setting (an IANA name or a UTC offset).

    >>> zone("UTC"), zone("+01:30").utcoffset(None)
    (datetime.timezone.utc, datetime.timedelta(seconds=5400))
    """
    if not name or name.upper() in ("UTC", "Z", "GMT"):
        return timezone.utc
    found = _OFFSET.fullmatch(name)
    if found:
        offset = timedelta(hours=int(found["hours"]), minutes=int(found["minutes"] or 0))
        return timezone(-offset if found["sign"] == "-" else offset)
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return timezone.utc


def clock_time(value: object, *, time_format: str | None = None, tz: tzinfo = timezone.utc) -> datetime | None:
    """A time value on the project's clock, in zone ``tz`` (None: not a time, or text that does not parse).

    >>> clock_time("2025-03-01", time_format="%Y-%m-%d"), clock_time(datetime(2025, 3, 1, 10), tz=zone("+01:00"))
    ... # doctest: +NORMALIZE_WHITESPACE
    (datetime.datetime(2025, 3, 1, 0, 0, tzinfo=datetime.timezone.utc),
     datetime.datetime(2025, 3, 1, 10, 0, tzinfo=datetime.timezone.utc))
    >>> clock_time(datetime(2025, 3, 1, 23, tzinfo=timezone.utc), tz=zone("+01:00"))
    datetime.datetime(2025, 3, 2, 0, 0, tzinfo=datetime.timezone.utc)
    """
    if isinstance(value, datetime):
        wall = value.astimezone(tz).replace(tzinfo=None) if value.tzinfo else value
        return wall.replace(tzinfo=timezone.utc)
    if isinstance(value, date):
        return datetime(value.year, value.month, value.day, tzinfo=timezone.utc)
    if time_format in EPOCH_FORMATS and isinstance(value, (int, float)) and not isinstance(value, bool):
        return clock_time(_EPOCH + timedelta(microseconds=value * (1_000_000 // EPOCH_FORMATS[time_format])), tz=tz)
    if isinstance(value, (str, bytes)):
        text = value.decode() if isinstance(value, bytes) else value
        if time_format in EPOCH_FORMATS:
            try:
                return clock_time(float(text), time_format=time_format, tz=tz)
            except ValueError:
                return None
        try:
            parsed = (
                datetime.strptime(text, time_format)
                if time_format
                else datetime.fromisoformat(text.replace("Z", "+00:00"))
            )
        except ValueError:
            return None
        return clock_time(parsed, tz=tz)
    return None


def wall_time(moment: datetime) -> datetime:
    """A time on the project's clock as the naive wall time a ``timestamp_ntz`` column holds for it.

    >>> wall_time(datetime(2025, 3, 1, tzinfo=timezone.utc))
    datetime.datetime(2025, 3, 1, 0, 0)
    """
    return moment.replace(tzinfo=None)


def true_instant(moment: datetime, tz: tzinfo = timezone.utc) -> datetime:
    """A time on the project's clock (zone ``tz``) as the instant it is, in UTC: what a timestamp with a time
    zone holds for it.

    >>> true_instant(datetime(2025, 3, 1, tzinfo=timezone.utc), zone("-02:00"))
    datetime.datetime(2025, 3, 1, 2, 0, tzinfo=datetime.timezone.utc)
    """
    return moment.replace(tzinfo=None).replace(tzinfo=tz).astimezone(timezone.utc)


def epoch_value(moment: datetime, time_format: str, tz: tzinfo = timezone.utc) -> int:
    """A time on the project's clock as the number an epoch column (``time_format`` one of
    :data:`EPOCH_FORMATS`) holds for it.

    >>> epoch_value(datetime(2025, 3, 1, tzinfo=timezone.utc), "epoch_millis")
    1740787200000
    """
    return (true_instant(moment, tz) - _EPOCH) // timedelta(microseconds=1_000_000 // EPOCH_FORMATS[time_format])


def sorts_as_time(time_format: str | None) -> bool:
    """Whether text in ``time_format`` sorts as the times it holds (so min/max statistics of the text bound
    the times): the directives go from year down, none skipped, with fixed separators between.

    >>> [sorts_as_time(f) for f in ("%Y-%m-%d", "%Y%m%d%H", "%d/%m/%Y", "%Y-%d", "%Y-%m-%dT%H:%M:%S")]
    [True, True, False, False, True]
    """
    if not time_format:
        return False
    if time_format in EPOCH_FORMATS:
        return True
    directives = re.findall(r"%(.)", time_format)
    return bool(directives) and tuple(directives) == _ORDER[: len(directives)]
