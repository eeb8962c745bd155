"""Delta tables: where a model's table lives and what its log says (files, schema, versions, commits).

The ``delta`` package is the only user of ``deltalake``. Spark writes a run's data files into a fresh
staging folder inside the table (:mod:`.staging`); :func:`~.commit.commit_staged` then makes them visible
in ONE Delta transaction that also removes the files of the partitions it replaces. Until that commit
succeeds, readers see the previous version whole; a failed or killed run leaves only unreferenced files
behind, which no reader ever lists (tables are read from the committed file list), and which
:func:`~.staging.remove_orphan_staging` deletes once their run is known dead.

Every commit holds the table's single-writer lock (:func:`~.lock.writer_lock`) from the snapshot it
replaces to the new version: delta-rs alone lets two concurrent first writes of the same window both land
(duplicate rows), so the storage cannot arbitrate and the lock does.

Incremental tables are partitioned by the interval that holds each row (column ``ia_interval``: the
interval start as text, e.g. ``2024-01-01`` or ``2024-01-01T05``), so replacing a window is a partition
replace, and reading a window prunes to exactly its partitions. New tables of hourly models are
partitioned by the day instead (column ``ia_day``, ``ia_interval`` then a plain column of the data
files): a backfilled day's rows are one file, not 24, so a long backfill writes, lists and commits 24x
fewer files. Replacing some hours removes the files holding them, rewriting in the same commit those
that hold other hours too (see :mod:`.day_files`); readers of a window prune by day and by each file's
interval statistics, and filter rows on ``ia_interval``. A table keeps the layout it was created with
(read from its Delta metadata); see :func:`partitioned_by_day`.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone, tzinfo
from typing import Sequence

import pyarrow as pa
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError, DeltaProtocolError, TableNotFoundError

from incremental_assets.delta.files import (
    check_credentials,
    commit_name,
    filesystem,
    is_local,
    local_path,
    short_reason,
)
from incremental_assets.delta.snapshots import cached, remember, reusing
from incremental_assets.errors import DamagedTableError, StorageError
from incremental_assets.model.intervals import IntervalUnit, TimeWindow
from incremental_assets.model.source_time import EPOCH_FORMATS, epoch_value, sorts_as_time, true_instant, wall_time

PARTITION_COLUMN = "ia_interval"
# Hourly tables are partitioned by the day of the interval; ``ia_interval`` is then a data column.
DAY_COLUMN = "ia_day"
# Keyed tables (unique key, SCD type 2) are partitioned by a hash bucket of the key instead.
BUCKET_COLUMN = "ia_bucket"
METADATA_PREFIX = "incremental_assets."


def table_uri(warehouse: str, model_name: str) -> str:
    """Where a model's table lives: ``<warehouse>/<schema>/<table>``.

    >>> table_uri("/w", "shop.orders")
    '/w/shop/orders'
    """
    return warehouse.rstrip("/") + "/" + "/".join(model_name.split("."))


def exists(uri: str) -> bool:
    check_credentials(uri)
    try:
        return DeltaTable.is_deltatable(uri)
    except OSError as exc:
        raise StorageError(f"cannot reach table {uri}: {short_reason(exc)}") from None


def open_table(uri: str, *, version: int | None = None, without_files: bool = False) -> DeltaTable:
    """The Delta table at ``uri`` (inside :func:`.snapshots.one_snapshot_per_table`, a local table's latest
    snapshot already opened and still current). A log that cannot be read is a :class:`DamagedTableError` naming the
    file; a store that cannot be reached a StorageError. No table at all stays ``TableNotFoundError``."""
    check_credentials(uri)
    folder = os.path.abspath(local_path(uri)) if version is None and is_local(uri) and reusing() else None
    reused = cached(folder) if folder is not None else None
    if reused is not None:
        return reused
    try:
        table = DeltaTable(uri, version=version, without_files=without_files and folder is None)
    except TableNotFoundError:
        raise
    except (DeltaError, OSError) as exc:
        raise unreadable(uri, exc) from None
    if folder is not None:
        remember(folder, table)
    return table


def history(uri: str, limit: int | None = None) -> list[dict]:
    """The table's commits, newest first (``limit`` of them), each as delta-rs reports it."""
    table = open_table(uri)
    try:
        entries = table.history(limit)
    except (DeltaError, OSError) as exc:
        raise unreadable(uri, exc) from None
    return _numbered(uri, table.version(), entries)


def _numbered(uri: str, current: int, entries: list[dict]) -> list[dict]:
    """delta-rs numbers the commits it read down from the current version as if none were missing; where
    a commit file is gone (a checkpoint holds its state) the older ones would carry the next version's
    number. A local table's are numbered by the commit files present instead."""
    if not is_local(uri):
        return entries
    folder = os.path.join(local_path(uri), "_delta_log")
    try:
        present = sorted(
            (
                int(n[:-5])
                for n in os.listdir(folder)
                if n.endswith(".json") and n[:-5].isdigit() and int(n[:-5]) <= current
            ),
            reverse=True,
        )
    except OSError:
        return entries
    if len(present) < len(entries) or present[: len(entries)] == [e.get("version") for e in entries]:
        return entries
    return [{**entry, "version": version} for entry, version in zip(entries, present)]


def unreadable(uri: str, exc: BaseException) -> StorageError:
    """The error to raise when delta-rs cannot read a table: damage named by file where it can be found."""
    reason = short_reason(exc).split(": ")[-1] if isinstance(exc, DeltaError) else short_reason(exc)
    if isinstance(exc, DeltaProtocolError) or not isinstance(exc, DeltaError):
        return StorageError(f"cannot read table {uri}: {reason}")
    damage = damaged_log_file(uri)
    if damage is not None:
        return DamagedTableError(uri, *damage, newest=damage[0] == _newest_commit_file(uri))
    return DamagedTableError(uri, None, short_reason(exc))


def check_log(uri: str) -> None:
    """Raise :class:`DamagedTableError` when a file of a local table's log is damaged (an empty newest
    commit file, for one, reads as a commit that changed nothing)."""
    damage = damaged_log_file(uri)
    if damage is not None:
        raise DamagedTableError(uri, *damage, newest=damage[0] == _newest_commit_file(uri))


def _newest_commit_file(uri: str) -> str | None:
    folder = os.path.join(local_path(uri), "_delta_log")
    names = (
        sorted(n for n in os.listdir(folder) if n.endswith(".json") and n[:-5].isdigit())
        if os.path.isdir(folder)
        else []
    )
    return f"_delta_log/{names[-1]}" if names else None


def damaged_log_file(uri: str) -> tuple[str, str] | None:
    """The first file of a local table's log that no Delta reader can read, and why (None: none found).

    Commit files are written whole by every Delta writer, so an empty or cut-off one, or a version
    missing from the sequence, was damaged after the fact.
    """
    if not is_local(uri):
        return None
    folder = os.path.join(local_path(uri), "_delta_log")
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return None
    checkpoint = -1
    if "_last_checkpoint" in names:
        try:
            with open(os.path.join(folder, "_last_checkpoint"), encoding="utf-8") as handle:
                checkpoint = int(json.load(handle)["version"])
        except (OSError, ValueError, KeyError, TypeError):
            return "_delta_log/_last_checkpoint", "not a valid checkpoint pointer"
    versions = sorted(int(n[:-5]) for n in names if n.endswith(".json") and n[:-5].isdigit())
    # Commit files before the newest checkpoint may be gone (past the log retention): only those after it are needed.
    expected = checkpoint + 1 if checkpoint >= 0 and versions and versions[0] > checkpoint + 1 else None
    for version in versions:
        name = f"_delta_log/{commit_name(version)}"
        if expected is not None and version != expected and version > checkpoint + 1:
            return (
                f"_delta_log/{commit_name(expected)}",
                f"missing: the log jumps from version {expected - 1} to {version}",
            )
        expected = version + 1
        problem = _commit_file_problem(os.path.join(folder, commit_name(version)))
        if problem:
            return name, problem
    return None


def _commit_file_problem(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        return f"cannot be read ({exc})"
    if not any(line.strip() for line in lines):
        return "empty"
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            action = json.loads(line)
        except ValueError:
            return f"line {number} is not complete JSON (the file was cut off or overwritten)"
        if not isinstance(action, dict):
            return f"line {number} is not a Delta action"
    return None


def commit_info(uri: str, version: int) -> dict:
    """The commit info of one version, read from its commit file ({} when it has none)."""
    fs, base = filesystem(uri)
    try:
        with fs.open_input_stream(f"{base.rstrip('/')}/_delta_log/{commit_name(version)}") as handle:
            lines = handle.read().decode("utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise unreadable(uri, exc) from None
    for line in lines:
        if '"commitInfo"' in line:
            try:
                return dict(json.loads(line).get("commitInfo") or {})
            except ValueError:
                raise DamagedTableError(
                    uri, f"_delta_log/{commit_name(version)}", "a commit info line is not complete JSON"
                ) from None
    return {}


def window_filters(
    window: TimeWindow, unit: IntervalUnit | str | None, *, by_day: bool = False
) -> list[tuple[str, str, object]]:
    """Partition filters selecting every interval partition that overlaps ``window`` (widened to boundaries),
    or with ``by_day`` every day partition.

    >>> from incremental_assets.model.intervals import utc
    >>> window_filters(TimeWindow(utc(2024, 1, 1, 5), utc(2024, 1, 2, 1)), "hour", by_day=True)
    [('ia_day', '>=', '2024-01-01'), ('ia_day', '<', '2024-01-03')]
    """
    if by_day:
        window, unit, column = day_window(window), IntervalUnit.DAY, DAY_COLUMN
    else:
        unit, column = IntervalUnit.of(unit), PARTITION_COLUMN
    return [
        (column, ">=", unit.partition_key(unit.floor(window.start))),
        (column, "<", unit.partition_key(unit.ceil(window.end))),
    ]


def day_window(window: TimeWindow) -> TimeWindow:
    """``window`` widened to whole days (the day partitions it touches)."""
    return TimeWindow(IntervalUnit.DAY.floor(window.start), IntervalUnit.DAY.ceil(window.end))


def partial_days(window: TimeWindow) -> tuple[str, ...]:
    """The ``ia_day`` keys of the days ``window`` covers only in part (their other rows must be kept).

    >>> from incremental_assets.model.intervals import utc
    >>> partial_days(TimeWindow(utc(2024, 1, 1, 5), utc(2024, 1, 3, 2))), partial_days(
    ...     TimeWindow(utc(2024, 1, 1), utc(2024, 1, 3)))
    (('2024-01-01', '2024-01-03'), ())
    >>> partial_days(TimeWindow(utc(2024, 1, 1, 5), utc(2024, 1, 1, 6)))
    ('2024-01-01',)
    """
    day = IntervalUnit.DAY
    candidates = {day.floor(window.start)} | ({day.floor(window.end)} if not day.is_boundary(window.end) else set())
    return tuple(day.partition_key(d) for d in sorted(candidates) if d < window.start or day.next(d) > window.end)


def interval_bounds(window: TimeWindow, unit: IntervalUnit | str | None) -> tuple[str, str]:
    """The ``ia_interval`` keys ``[first, end)`` of the intervals ``window`` overlaps: rows of a day file
    belong to the window when their key is in this range (keys sort as their instants)."""
    unit = IntervalUnit.of(unit)
    return unit.partition_key(unit.floor(window.start)), unit.partition_key(unit.ceil(window.end))


def partitioned_by_day(table: DeltaTable | str) -> bool:
    """Whether a table's files are cut by day (partition column ``ia_day``) rather than by interval."""
    table = open_table(table) if isinstance(table, str) else table
    return DAY_COLUMN in table.metadata().partition_columns


def last_run_commit(uri: str) -> tuple[int | None, str]:
    """The version and run id of the table's newest commit made by a run (not a compaction's or a
    definition-only commit's): what holds the rows a run that changed nothing found there."""
    if not exists(uri):
        return None, ""
    for limit in (10, None):
        for entry in history(uri, limit):  # newest first
            run_id = entry.get(METADATA_PREFIX + "run_id")
            if run_id:
                return int(entry["version"]), str(run_id)
    return version(uri), ""


def last_commit_metadata(uri: str) -> dict[str, str]:
    """What this framework recorded with the table's latest commit (model, fingerprint, window, ...).

    The metadata travels in the same Delta transaction as the data, so it can never disagree with it.
    """
    if not exists(uri):
        return {}
    history_ = history(uri, 1)
    entry = history_[0] if history_ else {}
    return {k[len(METADATA_PREFIX) :]: str(v) for k, v in entry.items() if k.startswith(METADATA_PREFIX)}


def committed_files(
    uri: str,
    *,
    window: TimeWindow | None = None,
    unit: str | None = None,
    buckets: Sequence[str] | None = None,
    days: Sequence[str] | None = None,
) -> list[str]:
    """The files of the current version, pruned to the partitions of ``window``, to ``buckets`` or to the
    ``days`` of a table cut by day when given.

    On a table cut by day the files are those of the days ``window`` touches: see :func:`row_filter`."""
    table = open_table(uri)
    columns = table.metadata().partition_columns
    if days is not None:
        return table.file_uris(file_pruning_predicate=[(DAY_COLUMN, "in", sorted(days))]) if days else []
    if buckets is not None and BUCKET_COLUMN in columns:
        return table.file_uris(file_pruning_predicate=[(BUCKET_COLUMN, "in", sorted(buckets))]) if buckets else []
    if window is not None and DAY_COLUMN in columns:
        # By day, then by the first and last interval each file holds (its statistics).
        first, end = interval_bounds(window, unit)
        intervals = (
            [(PARTITION_COLUMN, ">=", first), (PARTITION_COLUMN, "<", end)] if day_window(window) != window else []
        )
        return table.file_uris(file_pruning_predicate=window_filters(window, unit, by_day=True) + intervals)
    if window is None or PARTITION_COLUMN not in columns:
        return table.file_uris()
    return table.file_uris(file_pruning_predicate=window_filters(window, unit))


def row_filter(uri: str, window: TimeWindow | None, unit: str | None) -> tuple[str, str] | None:
    """The ``ia_interval`` range ``[first, end)`` a reader of :func:`committed_files` must keep rows in:
    None when the files hold exactly the window's rows (no window, a table cut by interval, whole days)."""
    if window is None or not partitioned_by_day(uri):
        return None
    if day_window(window) == window:
        return None
    return interval_bounds(window, unit)


def source_files(
    uri: str,
    *,
    time_column: str | None = None,
    window: TimeWindow | None = None,
    time_format: str | None = None,
    tz: tzinfo = timezone.utc,
) -> tuple[list[str], pa.Schema]:
    """Files of a Delta source, pruned by partition values or min/max statistics of its time column, the
    window's bounds given in the column's own type (see :mod:`~incremental_assets.model.source_time`);
    and the schema of the same version (a source appended to meanwhile is read at one version)."""
    table = open_table(uri)
    schema = pa.schema(table.schema().to_arrow())
    if window is None or time_column is None:
        return table.file_uris(), schema
    bounds = _bounds_in_type(_column_type(table, time_column), window, time_format, tz)
    if bounds is None:
        return table.file_uris(), schema  # a type the window cannot be said in (text of no sortable format): every file
    (low_op, low), (high_op, high) = bounds
    return table.file_uris(file_pruning_predicate=[(time_column, low_op, low), (time_column, high_op, high)]), schema


def _bounds_in_type(
    column_type: str | None, window: TimeWindow, time_format: str | None, tz: tzinfo
) -> tuple[tuple[str, object], tuple[str, object]] | None:
    """The window as two comparisons with values of the time column's type.

    >>> from incremental_assets.model.intervals import utc
    >>> w = TimeWindow(utc(2025, 3, 1), utc(2025, 3, 2))
    >>> _bounds_in_type("timestamp_ntz", w, None, timezone.utc)
    (('>=', datetime.datetime(2025, 3, 1, 0, 0)), ('<', datetime.datetime(2025, 3, 2, 0, 0)))
    >>> _bounds_in_type("string", w, "%Y-%m-%d", timezone.utc)
    (('>=', '2025-03-01'), ('<=', '2025-03-01'))
    """
    start, end = wall_time(window.start), wall_time(window.end)
    if column_type == "date":
        # A DATE column compares with dates (a timestamp does not parse as one): every day the window touches.
        last = end - timedelta(microseconds=1)
        return (">=", start.date()), ("<=", last.date())
    if column_type == "timestamp_ntz":
        return (">=", start), ("<", end)
    if column_type == "timestamp":
        return (">=", true_instant(window.start, tz)), ("<", true_instant(window.end, tz))
    if column_type in ("long", "integer", "double") and time_format in EPOCH_FORMATS:
        return (">=", epoch_value(window.start, time_format, tz)), ("<", epoch_value(window.end, time_format, tz))
    if column_type == "string" and sorts_as_time(time_format):
        # Text truncates (a day for %Y-%m-%d): the last text of the window is that of its last instant.
        assert time_format is not None
        return (">=", start.strftime(time_format)), ("<=", (end - timedelta(microseconds=1)).strftime(time_format))
    return None


def _column_type(table: DeltaTable, column: str) -> str | None:
    """A column's Delta type name (``date``, ``timestamp``, ``timestamp_ntz``, ``string``, ...)."""
    for schema_field in table.schema().fields:
        if schema_field.name.lower() == column.lower():
            return getattr(schema_field.type, "type", None)
    return None


def arrow_schema(uri: str, *, drop: Sequence[str] = (PARTITION_COLUMN, DAY_COLUMN, BUCKET_COLUMN)) -> pa.Schema:
    """The table's schema as Arrow, without the framework's partition columns readers don't need."""
    schema = pa.schema(open_table(uri).schema().to_arrow())
    for name in drop:
        index = schema.get_field_index(name)
        if index >= 0:
            schema = schema.remove(index)
    return schema


def built_with(uri: str) -> str | None:
    """The model fingerprint recorded with the table's latest commit (None: no table, or not ours)."""
    try:
        latest = history(uri, 1)
    except TableNotFoundError:
        return None
    return latest[0].get(METADATA_PREFIX + "fingerprint") if latest else None


def version(uri: str) -> int | None:
    try:
        return open_table(uri, without_files=True).version()  # the log replayed without listing its files
    except TableNotFoundError:
        return None


# -- commit log: what was written by which run -----------------------------------------------------


@dataclass(frozen=True)
class Commit:
    """One Delta commit made by this framework, with the metadata it was made with."""

    version: int
    model: str
    fingerprint: str
    run_id: str
    window: TimeWindow | None
    staging: str


def commits(uri: str) -> list[Commit]:
    """The framework's commits still in the table's log, oldest first (other writers' are skipped)."""
    if not exists(uri):
        return []
    found = (commit_of(entry, int(entry["version"])) for entry in history(uri))
    return sorted((c for c in found if c is not None), key=lambda c: c.version)


def commit_of(info: dict, version: int) -> Commit | None:
    """The framework's commit described by a commit info (None: another writer's).

    >>> commit_of({"incremental_assets.model": "s.m", "incremental_assets.run_id": "r1"}, 3).run_id
    'r1'
    >>> commit_of({"operation": "WRITE"}, 3) is None
    True
    """
    model = info.get(METADATA_PREFIX + "model")
    if not model:
        return None
    start, end = info.get(METADATA_PREFIX + "window_start"), info.get(METADATA_PREFIX + "window_end")
    window = TimeWindow(datetime.fromisoformat(start), datetime.fromisoformat(end)) if start and end else None
    return Commit(
        version=version,
        model=str(model),
        fingerprint=str(info.get(METADATA_PREFIX + "fingerprint", "")),
        run_id=str(info.get(METADATA_PREFIX + "run_id", "")),
        window=window,
        staging=str(info.get(METADATA_PREFIX + "staging", "")),
    )


# -- orphans and vacuum ----------------------------------------------------------------------------
