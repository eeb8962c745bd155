"""The files of a Parquet folder source a window needs, from each file's own statistics.

A folder of Parquet files has no log: Spark would open every file for every window, so one bad file (a
stray, or one whose column changed type) fails all windows, and a year of files is opened for one day.
With a time column, each file's footer gives the min and max of that column; only the files whose range
overlaps the window's read range are given to Spark. A file without statistics for it, or whose footer
cannot be read (it then fails the run with a clear message), is always given.
"""

from __future__ import annotations

import functools
import os
from datetime import date, datetime, timedelta, timezone, tzinfo

import pyarrow as pa
import pyarrow.parquet as pq

from incremental_assets import delta
from incremental_assets.delta.files import source_data_files
from incremental_assets.model.intervals import TimeWindow
from incremental_assets.model.source_time import clock_time, sorts_as_time

_TICK = timedelta(microseconds=1)


def time_range(
    path: str, column: str, *, time_format: str | None = None, tz: tzinfo = timezone.utc
) -> tuple[datetime | None, datetime | None] | None:
    """(min, max) of ``column`` over a file's row groups; None when the footer says nothing usable
    (unreadable, no such column, no statistics, or text whose order is not the time order), so the file
    cannot be pruned."""
    try:
        meta = pq.read_metadata(path)
    except (OSError, pa.ArrowException):
        return None
    found = delta.column_range(meta, column)
    if found is None:
        return None
    if (
        any(isinstance(v, (str, bytes)) for values in found for v in values)
        and time_format
        and not sorts_as_time(time_format)
    ):
        return None
    lows, highs = ([clock_time(v, time_format=time_format, tz=tz) for v in values] for values in found)
    starts, ends = [v for v in lows if v is not None], [v for v in highs if v is not None]
    if len(starts) < len(lows) or len(ends) < len(highs):
        return None
    if any(isinstance(v, date) and not isinstance(v, datetime) for v in found[1]):
        ends = [h + timedelta(days=1) - _TICK for h in ends]  # a date holds its whole day
    return (min(starts), max(ends)) if starts else (None, None)


def nanosecond_columns(path: str) -> tuple[tuple[str, bool], ...]:
    """The columns of a Parquet file that hold timestamps in nanoseconds (pandas writes them so by default),
    each with whether it holds instants (adjusted to UTC) or wall times; () when the footer does not read.
    A file's footer is read once while the file stays the same (its size and modification time)."""
    try:
        stat = os.stat(path)
    except OSError:
        return ()
    return _nanosecond_columns(path, stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=65536)
def _nanosecond_columns(path: str, size: int, mtime_ns: int) -> tuple[tuple[str, bool], ...]:
    try:
        schema = pq.read_schema(path)
    except (OSError, pa.ArrowException):
        return ()
    return tuple(
        (field.name, field.type.tz is not None)
        for field in schema
        if pa.types.is_timestamp(field.type) and field.type.unit == "ns"
    )


def files_for_window(
    location: str, column: str, window: TimeWindow, *, time_format: str | None = None, tz: tzinfo = timezone.utc
) -> tuple[list[str], int, str | None]:
    """The files that may hold rows of ``window``, how many files the source holds, and one file whose
    footer reads (for the source's schema when no file is kept).

    A text time column's statistics are its first and last text: with a format that truncates (a day
    for ``%Y-%m-%d``), a file is kept when its range of truncated times meets the window's."""
    files = source_data_files(location)
    keep = []
    sample = None
    for path in files:
        found = time_range(path, column, time_format=time_format, tz=tz)
        if found is None:
            keep.append(path)
            continue
        sample = path
        low, high = found
        if low is None or high is None:
            continue  # a file without rows
        if high >= _truncated(window.start, time_format) and low < window.end:
            keep.append(path)
    return keep, len(files), sample


def _truncated(moment: datetime, time_format: str | None) -> datetime:
    """``moment`` (on the project's clock) as the time its text in ``time_format`` reads back as (itself without
    a format)."""
    if not time_format:
        return moment
    return clock_time(moment.strftime(time_format), time_format=time_format) or moment
