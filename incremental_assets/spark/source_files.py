"""The files of a Parquet folder source a window needs, from each file's own statistics.

A folder of Parquet files has no log: Spark would open every file for every window, so one bad file (a
stray, or one whose column changed type) fails all windows, and a year of files is opened for one day.
With a time column, each file's footer gives the min and max of that column; only the files whose range
overlaps the window's read range are given to Spark. A file without statistics for it, or whose footer
cannot be read (it then fails the run with a clear message), is always given.
"""

from __future__ import annotations

from datetime import date, datetime, timezone

import pyarrow as pa
import pyarrow.parquet as pq
from pyarrow import fs as pafs

from incremental_assets import delta
from incremental_assets.model.intervals import TimeWindow


def parquet_files(location: str) -> list[str]:
    """Every Parquet data file under a local folder (hidden and ``_``-prefixed entries skipped, as Spark does)."""
    selector = pafs.FileSelector(location, recursive=True, allow_not_found=True)
    out = []
    for info in pafs.LocalFileSystem().get_file_info(selector):
        relative = info.path[len(location.rstrip("/")) + 1 :]
        if info.type != pafs.FileType.File or any(part.startswith((".", "_")) for part in relative.split("/")):
            continue
        out.append(info.path)
    return sorted(out)


def time_range(path: str, column: str) -> tuple[datetime | None, datetime | None] | None:
    """(min, max) of ``column`` over a file's row groups; None when the footer says nothing usable
    (unreadable, no such column, or no statistics), so the file cannot be pruned."""
    try:
        meta = pq.read_metadata(path)
    except (OSError, pa.ArrowException):
        return None
    found = delta.column_range(meta, column)
    if found is None:
        return None
    lows, highs = ([_instant(v) for v in values] for values in found)
    if any(v is None for v in lows + highs):
        return None
    return (min(lows), max(highs)) if lows else (None, None)  # type: ignore[type-var]


def files_for_window(location: str, column: str, window: TimeWindow) -> tuple[list[str], int, str | None]:
    """The files that may hold rows of ``window``, how many files the folder holds, and one file whose
    footer reads (for the folder's schema when no file is kept)."""
    files = parquet_files(location)
    keep = []
    sample = None
    for path in files:
        found = time_range(path, column)
        if found is None:
            keep.append(path)
            continue
        sample = path
        low, high = found
        if low is None or high is None:
            continue  # a file without rows
        if high >= window.start and low < window.end:
            keep.append(path)
    return keep, len(files), sample


def _instant(value: object) -> datetime | None:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=timezone.utc)
    if isinstance(value, date):
        return datetime(value.year, value.month, value.day, tzinfo=timezone.utc)
    if isinstance(value, (str, bytes)):
        text = value.decode() if isinstance(value, bytes) else value
        try:
            parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            return None
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)
    return None
