"""The files of an hourly table cut by day, and which of them a window's replace removes or copies from.

Each file of such a table records in the log the first and last ``ia_interval`` it holds (its statistics,
written with the commit that adds it). Replacing a window removes the files whose range overlaps the
window's intervals; those that also hold intervals outside the window are rewritten first (their other
rows copied into the run's staged files), the others are left as they are. A run that adds a new hour to
a day therefore copies nothing, and a backfill's one file per day is rewritten only when one of its hours
is replaced.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable

from incremental_assets.delta.tables import (
    DAY_COLUMN,
    PARTITION_COLUMN,
    interval_bounds,
    open_table,
    partial_days,
    window_filters,
)
from incremental_assets.model.intervals import IntervalUnit, TimeWindow


@dataclass(frozen=True)
class DayFile:
    """One data file of a day-cut table: where it is, its day, and the first and last interval it holds
    (None: the log has no statistics for it, so it is taken to hold every interval of its day)."""

    uri: str
    path: str
    size: int
    day: str
    first: str | None
    last: str | None

    def overlaps(self, first: str, end: str) -> bool:
        """Whether the file may hold rows of the intervals ``[first, end)``."""
        return self.first is None or self.last is None or (self.first < end and self.last >= first)

    def inside(self, first: str, end: str) -> bool:
        """Whether every row of the file is in the intervals ``[first, end)``."""
        return self.first is not None and self.last is not None and self.first >= first and self.last < end


def day_files(table: DeltaTable, window: TimeWindow) -> list[DayFile]:
    """The files of the days ``window`` touches, in the table's current version."""
    rows = pa.table(table.get_add_actions(flatten=True)).to_pylist()
    lo, hi = (value for _, _, value in window_filters(window, IntervalUnit.DAY, by_day=True))
    base = table.table_uri.rstrip("/")
    out = []
    for row in rows:
        day = row.get(f"partition.{DAY_COLUMN}")
        if day is None or not lo <= day < hi:
            continue
        path = row["path"]
        out.append(
            DayFile(
                path if "://" in path or path.startswith("/") else f"{base}/{path}",
                path,
                int(row["size_bytes"] or 0),
                day,
                row.get(f"min.{PARTITION_COLUMN}"),
                row.get(f"max.{PARTITION_COLUMN}"),
            )
        )
    return out


def replaced_files(
    table: DeltaTable, window: TimeWindow, unit: IntervalUnit | str | None
) -> tuple[list[DayFile], list[DayFile]]:
    """The files a replace of ``window`` removes, and among them those holding other intervals too (to copy from)."""
    first, end = interval_bounds(window, unit)
    removed = [f for f in day_files(table, window) if f.overlaps(first, end)]
    return removed, [f for f in removed if not f.inside(first, end)]


def column_range(metadata: pq.FileMetaData, column: str) -> tuple[list[object], list[object]] | None:
    """The min and max statistics of ``column`` in each row group of a Parquet file that holds rows (None:
    no such column, or a row group with rows but without statistics, so nothing is known)."""
    names = [metadata.schema.column(i).name for i in range(metadata.num_columns)]
    if column not in names:
        return None
    index = names.index(column)
    lows, highs = [], []
    for group in range(metadata.num_row_groups):
        stats = metadata.row_group(group).column(index).statistics
        if stats is None or not stats.has_min_max:
            if metadata.row_group(group).num_rows:
                return None
            continue
        lows.append(stats.min)
        highs.append(stats.max)
    return lows, highs


def interval_range(metadata: pq.FileMetaData) -> tuple[str, str] | None:
    """The first and last ``ia_interval`` of a Parquet file, from its footer's statistics (None: not recorded)."""
    found = column_range(metadata, PARTITION_COLUMN)
    if not found or not found[0]:
        return None
    lows, highs = ([v.decode() if isinstance(v, bytes) else str(v) for v in values] for values in found)
    return min(lows), max(highs)


def copied_files(
    table: DeltaTable | str, window: TimeWindow, unit: IntervalUnit | str | None, *, whole_days: bool
) -> list[str]:
    """The files whose rows outside ``window`` a replace of it copies: those it removes that hold other
    intervals too, or with ``whole_days`` (the table's columns change, so every file of a touched day is
    rewritten) every file of the days it covers in part."""
    table = open_table(table) if isinstance(table, str) else table
    if whole_days:
        days = set(partial_days(window))
        return sorted(f.uri for f in day_files(table, window) if f.day in days)
    return sorted(f.uri for f in replaced_files(table, window, unit)[1])
