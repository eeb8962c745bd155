"""New data in a Delta source: the time range of each data file added or removed since a version the automation saw.

Only the commits after that version are read (one small JSON file each), and in them only ``add`` and
``remove`` actions with ``dataChange: true`` (a removed file's time range is the one the snapshot at that
version recorded): a compaction (files rewritten with ``dataChange: false``), a
checkpoint or a metadata change adds no rows and is never taken for new data. When the commit files
after that version were cleaned up (log retention), the current snapshot is compared with the one at
that version instead; when that version cannot be read either, every file of the current snapshot
modified after that version's commit counts as new (more recomputed than needed, nothing missed).
"""

from __future__ import annotations

import json
import os
from datetime import date, datetime, timezone
from typing import Iterable
from urllib.parse import unquote

import pyarrow as pa
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError

from incremental_assets.delta.files import commit_name, filesystem, is_local, local_path
from incremental_assets.delta.tables import _column_type, open_table
from incremental_assets.errors import StorageError

Range = tuple[object | None, object | None]
# A removed file whose rows' times are not known: they may have been anywhere.
EVERY_RANGE: tuple[datetime, datetime] = (
    datetime(1000, 1, 1, tzinfo=timezone.utc),
    datetime(9000, 1, 1, tzinfo=timezone.utc),
)


def still_at(uri: str, version: int) -> bool:
    """Whether a local table's latest commit is still ``version``: its commit file is there and the next
    one is not (two ``stat`` calls, however long the table's history; a table in an object store: False,
    it is opened to know)."""
    if not is_local(uri) or version < 0:
        return False
    log = os.path.join(local_path(uri), "_delta_log")
    return os.path.exists(os.path.join(log, commit_name(version))) and not os.path.exists(
        os.path.join(log, commit_name(version + 1))
    )


def changed_time_ranges(uri: str, since_version: int, time_column: str) -> tuple[int, list[Range]]:
    """The current version of a Delta table and the (min, max) of ``time_column`` in each data file added
    with new data after ``since_version`` ((None, None) when a file has no statistics), and in each file
    removed with its data since (a delete): its range as the snapshot at ``since_version`` had it, or all
    time when that snapshot cannot be read."""
    current = open_table(uri)
    version = current.version()
    if version <= since_version:
        return version, []
    actions = _commit_actions(uri, range(since_version + 1, version + 1))
    if actions is None:
        return version, _snapshot_ranges(uri, current, since_version, time_column)
    kind = _column_type(current, time_column.split(".")[0])
    partition_columns = set(current.metadata().partition_columns)
    ranges, removed = [], []
    for name, action in actions:
        if action.get("dataChange") is False:
            continue
        if name == "add":
            ranges.append(_add_range(action, time_column, kind, partition_columns))
        elif isinstance(action.get("path"), str):
            removed.append(unquote(action["path"]))
    if removed:
        ranges.extend(_removed_ranges(uri, since_version, set(removed), time_column))
    return version, ranges


def _removed_ranges(uri: str, since_version: int, removed: set[str], time_column: str) -> list[Range]:
    """The (min, max) of ``time_column`` of each removed file that the snapshot at ``since_version`` holds
    (one added and removed after it is not); all time when that snapshot cannot be read."""
    try:
        before = open_table(uri, version=since_version)
    except (DeltaError, StorageError, OSError):
        return [EVERY_RANGE]
    actions = pa.table(before.get_add_actions(flatten=True))
    names = actions.column_names
    out: list[Range] = []
    for row in actions.to_pylist():
        if unquote(row["path"]) not in removed:
            continue
        lo, hi = _row_range(row, names, time_column)
        out.append((lo, hi) if lo is not None and hi is not None else EVERY_RANGE)
    return out


def _commit_actions(uri: str, versions: Iterable[int]) -> list[tuple[str, dict]] | None:
    """Every ``add`` and ``remove`` action of these commits, in order, each with its name; None when a commit
    file is gone."""
    fs, base = filesystem(uri)
    out = []
    for version in versions:
        path = f"{base.rstrip('/')}/_delta_log/{commit_name(version)}"
        try:
            with fs.open_input_stream(path) as handle:
                text = handle.read().decode("utf-8")
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as exc:
            if "not found" in str(exc).lower() or "no such file" in str(exc).lower():
                return None
            raise StorageError(f"cannot read {path}: {exc}") from None
        for line in text.splitlines():
            if '"add"' not in line and '"remove"' not in line:
                continue
            try:
                action = json.loads(line)
            except ValueError:
                continue  # a damaged commit file is reported by the integrity check of its own table
            for name in ("add", "remove"):
                if isinstance(action, dict) and isinstance(action.get(name), dict):
                    out.append((name, action[name]))
    return out


def _add_range(add: dict, time_column: str, kind: str | None, partition_columns: set[str]) -> Range:
    """(min, max) of the time column in one add action: its statistics, or its partition value."""
    if time_column in partition_columns:
        value = _partition_value((add.get("partitionValues") or {}).get(time_column))
        return value, value
    try:
        stats = json.loads(add.get("stats") or "{}")
    except ValueError:
        return None, None
    lo, hi = _nested(stats.get("minValues"), time_column), _nested(stats.get("maxValues"), time_column)
    return _typed(lo, kind), _typed(hi, kind)


def _partition_value(value: object) -> object | None:
    """A partition value as a time: a date stays one, text is read as a date or a (naive) timestamp."""
    if not isinstance(value, str):
        return value if isinstance(value, date) else None
    try:
        return date.fromisoformat(value) if len(value) == 10 else datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def _nested(values: object, column: str) -> object | None:
    for part in column.split("."):
        if not isinstance(values, dict):
            return None
        values = values.get(part)
    return values


def _typed(value: object, kind: str | None) -> object | None:
    """A statistics value (JSON text for times) as the column's Python value."""
    if not isinstance(value, str) or kind not in ("timestamp", "timestamp_ntz", "date"):
        return value
    try:
        if kind == "date":
            return date.fromisoformat(value[:10])
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if kind == "timestamp":
        return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)
    return moment.replace(tzinfo=None)


def _snapshot_ranges(uri: str, current: DeltaTable, since_version: int, time_column: str) -> list[Range]:
    """Files of the current snapshot that were not in the one at ``since_version`` (or, when that version
    cannot be read any more, that were modified after its commit)."""
    before: set[str] | None
    modified_after: float | None = None
    try:
        before = set(open_table(uri, version=since_version).file_uris()) if since_version >= 0 else set()
    except (DeltaError, StorageError, OSError):
        before = None
        modified_after = _commit_time(current, since_version)
    actions = pa.table(current.get_add_actions(flatten=True))
    base = current.table_uri.rstrip("/")
    names = actions.column_names
    ranges: list[Range] = []
    for row in actions.to_pylist():
        path = row["path"]
        full = path if "://" in path or path.startswith("/") else f"{base}/{path}"
        if before is not None and (full in before or full.replace("file://", "") in before or path in before):
            continue
        if before is None and modified_after is not None and _millis(row.get("modification_time")) < modified_after:
            continue
        ranges.append(_row_range(row, names, time_column))
    return ranges


def _row_range(row: dict, names: list[str], time_column: str) -> Range:
    """(min, max) of the time column in one row of ``get_add_actions(flatten=True)``: its statistics, or its
    partition value for a table partitioned by its time column."""
    lo = row.get(f"min.{time_column}") if f"min.{time_column}" in names else None
    hi = row.get(f"max.{time_column}") if f"max.{time_column}" in names else None
    if lo is None and f"partition.{time_column}" in names:
        lo = hi = _partition_value(row[f"partition.{time_column}"])
    return lo, hi


def _commit_time(table: DeltaTable, version: int) -> float | None:
    """The commit time (ms) of ``version`` less a minute (writers' clocks), when the log still says it."""
    for entry in table.history():
        if int(entry.get("version", -1)) == version and entry.get("timestamp") is not None:
            return float(entry["timestamp"]) - 60_000
    return None


def _millis(value: object) -> float:
    if isinstance(value, datetime):
        return value.timestamp() * 1000
    return float(value) if isinstance(value, (int, float)) else float("inf")
