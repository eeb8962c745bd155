"""Delta tables: the only module that talks to ``deltalake``.

Spark writes a run's data files into a fresh folder inside the table; :func:`commit_staged` then makes
them visible in ONE Delta transaction that also removes the files of the partitions it replaces. Until
that commit succeeds, readers see the previous version whole; a failed or killed run leaves only
unreferenced files behind, which no reader ever lists (tables are read from the committed file list).

Incremental tables are partitioned by the interval that holds each row (column ``ia_interval``: the
interval start as text, e.g. ``2024-01-01`` or ``2024-01-01T05``), so replacing a window is a partition
replace, and reading a window prunes to exactly its partitions.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Mapping, Sequence

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import CommitProperties, DeltaTable, Schema
from deltalake.exceptions import TableNotFoundError
from deltalake.transaction import AddAction, create_table_with_add_actions
from pyarrow import fs as pafs

from incremental_assets.errors import StorageError
from incremental_assets.time_window import TimeWindow, ceil, floor

PARTITION_COLUMN = "ia_interval"
# Keyed tables (unique key, SCD type 2) are partitioned by a hash bucket of the key instead.
BUCKET_COLUMN = "ia_bucket"
METADATA_PREFIX = "incremental_assets."


def table_uri(warehouse: str, model_name: str) -> str:
    """Where a model's table lives: ``<warehouse>/<schema>/<table>``.

    >>> table_uri("/w", "shop.orders")
    '/w/shop/orders'
    """
    return warehouse.rstrip("/") + "/" + "/".join(model_name.split("."))


def interval_key(instant: datetime, unit: str) -> str:
    """The partition value of the interval starting at ``instant``.

    >>> from incremental_assets.time_window import utc
    >>> interval_key(utc(2024, 3, 1), "day"), interval_key(utc(2024, 3, 1, 5), "hour")
    ('2024-03-01', '2024-03-01T05')
    """
    instant = instant.astimezone(timezone.utc)
    return instant.strftime("%Y-%m-%dT%H") if unit == "hour" else instant.strftime("%Y-%m-%d")


def _filesystem(uri: str) -> tuple[pafs.FileSystem, str]:
    if "://" in uri:
        return pafs.FileSystem.from_uri(uri)
    return pafs.LocalFileSystem(), uri


def exists(uri: str) -> bool:
    return DeltaTable.is_deltatable(uri)


def new_staging_dir(uri: str) -> str:
    """A fresh folder inside the table for one run's data files (never listed by readers)."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
    return f"{uri.rstrip('/')}/run-{stamp}-{uuid.uuid4().hex[:12]}"


@dataclass(frozen=True)
class CommitResult:
    version: int
    rows: int
    files: int
    bytes: int
    partitions: int


def _add_actions(uri: str, staging: str) -> tuple[list[AddAction], int]:
    fs, base = _filesystem(staging)
    try:
        infos = fs.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True))
    except OSError as exc:
        raise StorageError(f"cannot list the staged files in {staging}: {exc}") from exc
    _, table_base = _filesystem(uri)
    prefix = table_base.rstrip("/") + "/"
    actions: list[AddAction] = []
    rows = 0
    for info in sorted(infos, key=lambda i: i.path):
        if info.type != pafs.FileType.File or not info.base_name.endswith(".parquet"):
            continue
        relative = info.path[len(prefix) :] if info.path.startswith(prefix) else info.path
        partition_values: dict[str, str | None] = {}
        for part in relative.split("/")[:-1]:
            if "=" in part:
                key, value = part.split("=", 1)
                partition_values[key] = None if value == "__HIVE_DEFAULT_PARTITION__" else value
        with fs.open_input_file(info.path) as handle:
            num_rows = pq.ParquetFile(handle).metadata.num_rows
        rows += num_rows
        actions.append(
            AddAction(
                path=relative,
                size=info.size,
                partition_values=partition_values,
                modification_time=int((info.mtime or datetime.now(timezone.utc)).timestamp() * 1000),
                data_change=True,
                stats=json.dumps({"numRecords": num_rows}),
            )
        )
    return actions, rows


def _window_filters(window: TimeWindow, unit: str) -> list[tuple[str, str, str]]:
    """Partition filters selecting every interval that overlaps ``window`` (widened to boundaries)."""
    return [
        (PARTITION_COLUMN, ">=", interval_key(floor(window.start, unit), unit)),
        (PARTITION_COLUMN, "<", interval_key(ceil(window.end, unit), unit)),
    ]


def commit_staged(
    uri: str,
    staging: str,
    schema: pa.Schema,
    *,
    replace_window: TimeWindow | None,
    unit: str | None,
    partitioned: bool | None = None,
    metadata: Mapping[str, str] | None = None,
    name: str | None = None,
    buckets: Sequence[str] | None = None,
    append: bool = False,
) -> CommitResult:
    """Commit the files Spark wrote under ``staging`` as one Delta transaction.

    With ``replace_window`` the transaction removes every file of the window's partitions and adds the
    new ones (rows of other intervals are untouched); with ``buckets`` (a table partitioned by
    ``ia_bucket``) it replaces exactly those buckets; with ``append`` it only adds files; with none of
    them the whole table is replaced (by an interval-partitioned table when ``partitioned``). The
    schema given becomes the table's: columns added to it read as NULL in older files.
    """
    actions, rows = _add_actions(uri, staging)
    partitioned = replace_window is not None if partitioned is None else partitioned
    if partitioned:
        partition_by = [PARTITION_COLUMN]
    elif buckets is not None:
        partition_by = [BUCKET_COLUMN]
    else:
        partition_by = []
    for column in partition_by:
        if column not in schema.names:
            schema = schema.append(pa.field(column, pa.string()))
    delta_schema = Schema.from_arrow(schema)
    properties = CommitProperties(custom_metadata={METADATA_PREFIX + k: str(v) for k, v in (metadata or {}).items()})
    try:
        if not exists(uri):
            create_table_with_add_actions(
                uri,
                delta_schema,
                actions,
                mode="error",
                partition_by=partition_by or None,
                name=name,
                commit_properties=properties,
            )
        else:
            table = DeltaTable(uri)
            current = table.metadata().partition_columns
            if list(current) != partition_by:
                fix = (
                    "a Delta table's partitioning cannot be changed by a commit: the model's kind changed, so remove the "
                    "table folder and run the model again"
                    if replace_window is None
                    else "rebuild it with --full-refresh"
                )
                raise StorageError(f"table {uri} is partitioned by {list(current) or 'nothing'}, this write needs {partition_by or 'no partitions'}; {fix}")
            if replace_window is not None:
                filters = _window_filters(replace_window, unit or "day")
            elif buckets is not None:
                filters = [(BUCKET_COLUMN, "in", sorted(buckets))]
            else:
                filters = None
            table.create_write_transaction(
                actions,
                mode="append" if append else "overwrite",
                schema=delta_schema,
                partition_by=partition_by or None,
                partition_filters=None if append else filters,
                commit_properties=properties,
            )
    except StorageError:
        raise
    except Exception as exc:  # delta-rs raises several unrelated exception types
        raise StorageError(f"the commit to {uri} failed, the table is unchanged: {exc}") from exc
    version = DeltaTable(uri).version()
    return CommitResult(
        version=version,
        rows=rows,
        files=len(actions),
        bytes=sum(a.size for a in actions),
        partitions=len({tuple(a.partition_values.items()) for a in actions}),
    )


def last_commit_metadata(uri: str) -> dict[str, str]:
    """What this framework recorded with the table's latest commit (model, fingerprint, window, ...).

    The metadata travels in the same Delta transaction as the data, so it can never disagree with it.
    """
    if not exists(uri):
        return {}
    history = DeltaTable(uri).history(1)
    entry = history[0] if history else {}
    return {k[len(METADATA_PREFIX) :]: str(v) for k, v in entry.items() if k.startswith(METADATA_PREFIX)}


def committed_files(
    uri: str, *, window: TimeWindow | None = None, unit: str | None = None, buckets: Sequence[str] | None = None
) -> list[str]:
    """The files of the current version, pruned to the partitions of ``window`` or to ``buckets`` when given."""
    table = DeltaTable(uri)
    if buckets is not None and BUCKET_COLUMN in table.metadata().partition_columns:
        return table.file_uris(file_pruning_predicate=[(BUCKET_COLUMN, "in", sorted(buckets))]) if buckets else []
    if window is None or PARTITION_COLUMN not in table.metadata().partition_columns:
        return table.file_uris()
    return table.file_uris(file_pruning_predicate=_window_filters(window, unit or "day"))


def source_files(uri: str, *, time_column: str | None = None, window: TimeWindow | None = None) -> list[str]:
    """Files of a Delta source, pruned by partition values or min/max statistics of its time column."""
    table = DeltaTable(uri)
    if window is None or time_column is None:
        return table.file_uris()
    return table.file_uris(file_pruning_predicate=[(time_column, ">=", window.start), (time_column, "<", window.end)])


def arrow_schema(uri: str, *, drop: Sequence[str] = (PARTITION_COLUMN, BUCKET_COLUMN)) -> pa.Schema:
    """The table's schema as Arrow, without the interval partition column readers don't need."""
    schema = pa.schema(DeltaTable(uri).schema().to_arrow())
    for name in drop:
        index = schema.get_field_index(name)
        if index >= 0:
            schema = schema.remove(index)
    return schema


def built_with(uri: str) -> str | None:
    """The model fingerprint recorded with the table's latest commit (None: no table, or not ours)."""
    try:
        history = DeltaTable(uri).history(1)
    except TableNotFoundError:
        return None
    return history[0].get(METADATA_PREFIX + "fingerprint") if history else None


def last_commit_ms(uri: str) -> int | None:
    """When the table's latest commit was made (ms since the epoch), None without a table."""
    try:
        history = DeltaTable(uri).history(1)
    except TableNotFoundError:
        return None
    return int(history[0]["timestamp"]) if history else None


def rebuilt_since(uri: str, since_ms: int) -> bool:
    """Whether a whole-table rebuild of an incremental model was committed after ``since_ms``."""
    try:
        history = DeltaTable(uri).history()
    except TableNotFoundError:
        return False
    return any(int(c["timestamp"]) > since_ms and c.get(METADATA_PREFIX + "write") == "rebuild" for c in history)


def version(uri: str) -> int | None:
    try:
        return DeltaTable(uri).version()
    except TableNotFoundError:
        return None


def added_time_ranges(uri: str, since_version: int, time_column: str) -> tuple[int, list[tuple[datetime | None, datetime | None]]]:
    """The current version of a Delta table and the (min, max) of ``time_column`` in each data file
    added after ``since_version`` (from the add actions' statistics; (None, None) when a file has none)."""
    current = DeltaTable(uri)
    version = current.version()
    if version <= since_version:
        return version, []
    before = set(DeltaTable(uri, version=since_version).file_uris()) if since_version >= 0 else set()
    actions = pa.table(current.get_add_actions(flatten=True))
    base = current.table_uri.rstrip("/")
    ranges = []
    names = actions.column_names
    for row in actions.to_pylist():
        path = row["path"]
        full = path if "://" in path or path.startswith("/") else f"{base}/{path}"
        if full in before or full.replace("file://", "") in before or path in before:
            continue
        lo = row.get(f"min.{time_column}") if f"min.{time_column}" in names else None
        hi = row.get(f"max.{time_column}") if f"max.{time_column}" in names else None
        ranges.append((lo, hi))
    return version, ranges
