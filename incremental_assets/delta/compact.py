"""Compaction: the many small files of a partition rewritten into one, in a commit that changes no row.

An hourly model run hour by hour adds one file per hour to its day; a late hour rewrites the day's
files holding it; an appending model adds a file per run. Nothing else ever folds them together, so
readers list and open more files every day. :func:`compact` rewrites the small files of each partition
(a day of a table cut by day, an interval, a key bucket, or the whole unpartitioned table) into as few
files as the target size allows, and commits the swap as ONE Delta transaction whose add and remove
actions all say ``dataChange: false``: the rows are the same, so readers of changes, the automation and
Dagster see nothing new, and no materialization is recorded.

The rewrite reads the files with pyarrow (no Spark), writes one Parquet file per group with the rows of
the files (their columns unified: a column added later reads as NULL in older files, as in the table),
sorted by ``ia_interval`` where the files hold it, and records the statistics every writer records
(:func:`~.stats.file_stats`: row count, and the first and last interval of a day file). The commit
carries the latest commit's metadata (fingerprint, window end, buckets) without a model or run, so the
table reads as built exactly as before and no run's record points at it.

Writers are not held up while files are rewritten: only the commit takes the table's writer lock, and
it first checks that every file it removes is still in the table. If a writer replaced one of them in
between, nothing is committed (the rewritten file is deleted, the old files stay) and the next
compaction tries again.
"""

from __future__ import annotations

import os
import shutil
import uuid
from dataclasses import dataclass
from typing import Collection

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import CommitProperties, Transaction
from deltalake.transaction import AddAction, RemoveAction

from incremental_assets.delta.checkpoints import write_transaction
from incremental_assets.delta.commit import APP_ID, carried_metadata
from incremental_assets.delta.files import filesystem, host_tag, is_local, local_path
from incremental_assets.delta.fingerprints import record_footers
from incremental_assets.delta.lock import writer_lock
from incremental_assets.delta.staging import COMPACT_PREFIX
from incremental_assets.delta.stats import file_stats
from incremental_assets.delta.tables import DAY_COLUMN, METADATA_PREFIX, PARTITION_COLUMN, exists, open_table
from incremental_assets.errors import StorageError
from incremental_assets.model import clock

# Files smaller than this are compacted, and a compacted file holds at most about this much (compressed):
# small enough to rewrite in memory on a small machine, large enough that a year of days is 365 files.
DEFAULT_TARGET_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class _File:
    path: str  # as the log names it (relative to the table)
    size: int
    rows: int | None
    partition: tuple[tuple[str, str | None], ...]
    first: str | None  # the first ``ia_interval`` it holds (tables cut by day)


@dataclass(frozen=True)
class Group:
    """Files of one partition rewritten into one."""

    partition: tuple[tuple[str, str | None], ...]
    files: tuple[_File, ...]

    @property
    def label(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.partition) or "table"

    @property
    def bytes(self) -> int:
        return sum(f.size for f in self.files)


@dataclass(frozen=True)
class CompactResult:
    """What a compaction did (or, as a dry run or when skipped, would do)."""

    groups: tuple[str, ...] = ()  # the partitions rewritten, e.g. ``ia_day=2025-06-01``
    files_before: int = 0  # files those partitions had
    files_after: int = 0  # files they have after
    version: int | None = None  # the Delta version of the commit (None: nothing committed)
    skipped: str | None = None  # why nothing was committed although there was something to do

    def summary(self) -> str:
        if not self.groups:
            return "nothing to compact"
        what = f"{self.files_before} file(s) of {len(self.groups)} partition(s) into {self.files_after}"
        if self.skipped:
            return f"skipped compacting {what}: {self.skipped}"
        return f"compacted {what}" + (f" (Delta version {self.version})" if self.version is not None else " (dry run)")


def _active_files(uri: str) -> tuple[list[_File], list[str]]:
    table = open_table(uri)
    columns = list(table.metadata().partition_columns)
    out = []
    for row in pa.table(table.get_add_actions(flatten=True)).to_pylist():
        rows = row.get("num_records")
        partition = tuple((c, row.get(f"partition.{c}")) for c in columns)
        out.append(
            _File(
                row["path"],
                int(row["size_bytes"] or 0),
                None if rows is None else int(rows),
                partition,
                row.get(f"min.{PARTITION_COLUMN}"),
            )
        )
    return out, columns


def plan_compaction(
    uri: str, *, days: Collection[str] | None = None, target_bytes: int = DEFAULT_TARGET_BYTES
) -> list[Group]:
    """The groups of files :func:`compact` would rewrite: per partition, its files smaller than
    ``target_bytes`` packed in order into groups of at most about ``target_bytes``, those of two files or
    more. On a table cut by day only the ``days`` given are considered (None: every day); a day whose
    hours are not all computed yet would only be compacted again when its next hour lands."""
    if not exists(uri):
        return []
    files, columns = _active_files(uri)
    by_partition: dict[tuple, list[_File]] = {}
    for f in files:
        if f.size >= target_bytes or f.rows is None:
            continue  # large enough already, or written without statistics (not ours to judge)
        if DAY_COLUMN in columns and days is not None and dict(f.partition).get(DAY_COLUMN) not in days:
            continue
        by_partition.setdefault(f.partition, []).append(f)
    groups = []
    for partition, members in sorted(by_partition.items(), key=lambda item: str(item[0])):
        members.sort(key=lambda f: (f.first or "", f.path))
        current: list[_File] = []
        for f in members:
            if current and sum(m.size for m in current) + f.size > target_bytes:
                groups.append(Group(partition, tuple(current)))
                current = []
            current.append(f)
        groups.append(Group(partition, tuple(current)))
    return [g for g in groups if len(g.files) > 1]


def compact(
    uri: str,
    *,
    days: Collection[str] | None = None,
    target_bytes: int = DEFAULT_TARGET_BYTES,
    dry_run: bool = False,
    owner: str = "compaction",
) -> CompactResult:
    """Rewrite the groups :func:`plan_compaction` finds into one file each, as one commit that changes
    no row (see the module docstring). A writer that replaced one of the files meanwhile makes it skip."""
    groups = plan_compaction(uri, days=days, target_bytes=target_bytes)
    if not groups:
        return CompactResult()
    planned = CompactResult(tuple(g.label for g in groups), sum(len(g.files) for g in groups), len(groups))
    if dry_run:
        return planned
    stamp = f"{clock.wall_time():%Y%m%dT%H%M%S}-{host_tag()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    folder = f"{uri.rstrip('/')}/{COMPACT_PREFIX}{stamp}"
    committed = False
    try:
        table = open_table(uri)
        by_day = DAY_COLUMN in table.metadata().partition_columns
        adds = [_rewrite(uri, folder, g, by_day) for g in groups]
        record_footers(folder)  # as a run's commit does: `verify` compares each file with what was committed
        with writer_lock(uri, owner=owner):
            result = _commit_rewritten(uri, groups, adds, planned)
            committed = result.version is not None
            return result
    finally:
        if not committed and is_local(folder):
            shutil.rmtree(local_path(folder), ignore_errors=True)


def _commit_rewritten(uri: str, groups: list[Group], adds: list[AddAction], planned: CompactResult) -> CompactResult:
    """Under the writer lock: the rewritten files in place of the groups' files, as one commit, unless a
    writer replaced one of them or committed meanwhile (then nothing is committed, and the result says why)."""
    table = open_table(uri)
    active = {row["path"] for row in pa.table(table.get_add_actions(flatten=True)).select(["path"]).to_pylist()}
    if any(f.path not in active for g in groups for f in g.files):
        return CompactResult(
            planned.groups,
            planned.files_before,
            planned.files_after,
            None,
            "a writer replaced some of those files meanwhile; the next compaction tries again",
        )
    before = table.version()
    now = int(clock.wall_time().timestamp() * 1000)
    removes = [RemoveAction(f.path, False, now, f.size, dict(g.partition)) for g in groups for f in g.files]
    custom = carried_metadata((table.history(1) or [{}])[0])
    custom[METADATA_PREFIX + "compaction"] = f"{planned.files_before} files into {planned.files_after}"
    sequence = (table.transaction_version(APP_ID) or 0) + 1
    properties = CommitProperties(
        custom_metadata=custom, app_transactions=[Transaction(app_id=APP_ID, version=sequence)]
    )
    partition_by = list(table.metadata().partition_columns) or None
    try:
        write_transaction(
            table,
            [*adds, *removes],
            mode="append",
            schema=table.schema(),
            partition_by=partition_by,
            properties=properties,
        )
    except Exception as exc:  # delta-rs raises several unrelated types; a concurrent commit is one of them
        if open_table(uri).version() != before:
            return CompactResult(
                planned.groups,
                planned.files_before,
                planned.files_after,
                None,
                "another writer committed meanwhile; the next compaction tries again",
            )
        raise StorageError(f"the compaction of {uri} failed, the table is unchanged: {exc}") from exc
    return CompactResult(planned.groups, planned.files_before, planned.files_after, open_table(uri).version())


def _rewrite(uri: str, folder: str, group: Group, by_day: bool) -> AddAction:
    """Write the rows of ``group``'s files as one Parquet file under ``folder``; its add action."""
    fs, base = filesystem(uri)
    parts = []
    for f in group.files:
        with fs.open_input_file(
            f"{base.rstrip('/')}/{f.path}"
        ) as handle:  # by handle: no partition column from the path
            parts.append(pq.read_table(handle))
    data = _concat(parts)
    expected = sum(f.rows or 0 for f in group.files)
    if data.num_rows != expected:
        raise StorageError(
            f"table {uri}: the files of {group.label} hold {data.num_rows} rows, the log says {expected}; "
            "nothing was compacted"
        )
    if PARTITION_COLUMN in data.column_names:
        data = data.sort_by(PARTITION_COLUMN)  # tight interval statistics per row group
    relative_dir = "/".join(f"{k}={'__HIVE_DEFAULT_PARTITION__' if v is None else v}" for k, v in group.partition)
    name = f"part-00000-{uuid.uuid4()}.c000.snappy.parquet"
    relative = "/".join(p for p in (folder.rstrip("/").rsplit("/", 1)[-1], relative_dir, name) if p)
    path = f"{base.rstrip('/')}/{relative}"
    fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
    with fs.open_output_stream(path) as out:
        pq.write_table(data, out, compression="snappy")
    with fs.open_input_file(path) as handle:
        footer = pq.ParquetFile(handle).metadata
        size = handle.size()
    now = int(clock.wall_time().timestamp() * 1000)
    return AddAction(relative, int(size), dict(group.partition), now, False, file_stats(footer, by_day=by_day))


def _concat(parts: list[pa.Table]) -> pa.Table:
    """The tables as one, their columns unified (a column a file lacks reads as NULL)."""
    schema = pa.unify_schemas([p.schema.remove_metadata() for p in parts], promote_options="permissive")
    aligned = []
    for part in parts:
        columns = [
            part.column(f.name).cast(f.type) if f.name in part.column_names else pa.nulls(part.num_rows, f.type)
            for f in schema
        ]
        aligned.append(pa.table(columns, schema=schema))
    return pa.concat_tables(aligned)
