"""One Delta transaction per run: the staged files become visible, replacing what the commit mode says.

A :data:`CommitMode` is one value: replace a window's intervals, replace key buckets, replace the whole
table, or append. The commit holds the table's writer lock from the snapshot it replaces to the new
version.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Schema, Transaction
from deltalake.transaction import AddAction, RemoveAction

from incremental_assets.delta.checkpoints import create_table, write_transaction
from incremental_assets.delta.day_files import copied_files, replaced_files
from incremental_assets.delta.definition import keep_only, write_definition
from incremental_assets.delta.files import filesystem, is_local
from incremental_assets.delta.fingerprints import record_footers
from incremental_assets.delta.lock import writer_lock
from incremental_assets.delta.staging import mark_committed, staged_footers, staged_interval_rows
from incremental_assets.delta.stats import file_stats, spark_type
from incremental_assets.delta.tables import (
    BUCKET_COLUMN,
    DAY_COLUMN,
    METADATA_PREFIX,
    PARTITION_COLUMN,
    commit_info,
    exists,
    interval_bounds,
    open_table,
    window_filters,
)
from incremental_assets.errors import StorageError
from incremental_assets.model import clock
from incremental_assets.model.intervals import IntervalUnit, TimeWindow
from incremental_assets.plan.rebuild import ASK_FULL_REFRESH

# Every commit is one step of this application transaction: two writers committing on the same snapshot
# conflict (delta-rs's ConcurrentTransaction), where two overwrites of a window nobody had written would not.
APP_ID = "incremental_assets.writer"
COMMIT_ATTEMPTS = 8


@dataclass(frozen=True)
class CommitResult:
    version: int
    rows: int
    files: int
    bytes: int
    partitions: int
    interval_rows: Mapping[str, int] = field(
        default_factory=dict
    )  # rows added per ``ia_interval`` value (none: no key)


def _add_actions(uri: str, staging: str, *, by_day: bool = False) -> tuple[list[AddAction], int]:
    _, table_base = filesystem(uri)
    prefix = table_base.rstrip("/") + "/"
    actions: list[AddAction] = []
    rows = 0
    for info, footer in staged_footers(staging):
        num_rows = footer.num_rows
        if num_rows == 0:
            continue  # a row-less file adds nothing to any interval or bucket: a window with no rows commits no file
        relative = info.path[len(prefix) :] if info.path.startswith(prefix) else info.path
        partition_values: dict[str, str | None] = {}
        for part in relative.split("/")[:-1]:
            if "=" in part:
                key, value = part.split("=", 1)
                partition_values[key] = None if value == "__HIVE_DEFAULT_PARTITION__" else value
        rows += num_rows
        actions.append(
            AddAction(
                path=relative,
                size=info.size,
                partition_values=partition_values,
                modification_time=int((info.mtime or clock.wall_time()).timestamp() * 1000),
                data_change=True,
                stats=file_stats(footer, by_day=by_day),
            )
        )
    return actions, rows


@dataclass(frozen=True)
class ReplaceWindow:
    """Replace every interval partition the window overlaps (widened to boundaries); others are untouched.

    On a table cut by day (``by_day``) the files holding rows of the window's intervals are removed (see
    :mod:`.day_files`); the staged files then also hold those files' rows of other intervals, copied
    from ``copied_from``. With ``whole_days`` (the table's columns change) every file of the days the
    window touches is replaced instead. The commit refuses when the files to copy from are no longer
    those the copy read (another run replaced hours of those days since)."""

    window: TimeWindow
    unit: IntervalUnit
    by_day: bool = False
    whole_days: bool = False
    copied_from: tuple[str, ...] = ()

    @property
    def partition_by(self) -> tuple[str, ...]:
        return (DAY_COLUMN,) if self.by_day else (PARTITION_COLUMN,)

    def filters(self) -> list[tuple[str, str, object]] | None:
        return window_filters(self.window, self.unit, by_day=self.by_day)


@dataclass(frozen=True)
class ReplaceBuckets:
    """Replace exactly these key buckets of a table partitioned by ``ia_bucket``."""

    buckets: tuple[str, ...]
    partition_by: tuple[str, ...] = (BUCKET_COLUMN,)

    def filters(self) -> list[tuple[str, str, object]] | None:
        return [(BUCKET_COLUMN, "in", sorted(self.buckets))]


@dataclass(frozen=True)
class ReplaceTable:
    """Replace the whole table (its schema too), by an interval-partitioned table when ``partitioned``
    (cut by day when ``by_day``)."""

    partitioned: bool = False
    by_day: bool = False

    @property
    def partition_by(self) -> tuple[str, ...]:
        if not self.partitioned:
            return ()
        return (DAY_COLUMN,) if self.by_day else (PARTITION_COLUMN,)

    def filters(self) -> list[tuple[str, str, object]] | None:
        return None


@dataclass(frozen=True)
class Append:
    """Only add the staged files (cursor models)."""

    partition_by: tuple[str, ...] = ()

    def filters(self) -> list[tuple[str, str, object]] | None:
        return None


CommitMode = ReplaceWindow | ReplaceBuckets | ReplaceTable | Append


def _check_partitioning(uri: str, table: DeltaTable, mode: CommitMode) -> None:
    """A commit cannot change a Delta table's partitioning: refuse, saying how to rebuild the table."""
    current = list(table.metadata().partition_columns)
    if current == list(mode.partition_by):
        return
    fix = (
        f"rebuild it with {ASK_FULL_REFRESH}"
        if isinstance(mode, ReplaceWindow)
        else "a Delta table's partitioning cannot be changed by a commit: the model's kind changed, so remove "
        "the table folder and run the model again"
    )
    raise StorageError(
        f"table {uri} is partitioned by {current or 'nothing'}, this write needs "
        f"{list(mode.partition_by) or 'no partitions'}; {fix}"
    )


def _with_partition_columns(schema: pa.Schema, partition_by: list[str]) -> pa.Schema:
    """``schema`` with the partition columns it lacks, as strings: a day-cut table's files hold each row's
    interval key as a plain column."""
    for column in [PARTITION_COLUMN, *partition_by] if DAY_COLUMN in partition_by else partition_by:
        if column not in schema.names:
            schema = schema.append(pa.field(column, pa.string()))
    return schema


def _commit_with_retries(
    uri: str,
    actions: list[AddAction],
    delta_schema: Schema,
    partition_by: list[str],
    mode: CommitMode,
    custom: dict[str, str],
    name: str | None,
) -> int | None:
    """Commit once, again on the new snapshot when another writer committed first; the version before the
    commit that landed.

    Under the lock the snapshot read here is still the latest when the commit lands, so the overwrite
    removes every file of the window, including those of a writer that just finished. On an object store
    (no lock file) the commit's application transaction makes delta-rs refuse a commit racing another
    writer's; it is then made again on the new snapshot.
    """
    for attempt in range(COMMIT_ATTEMPTS):
        before = version_or_none(uri)
        try:
            _commit_once(uri, actions, delta_schema, partition_by, mode, custom, name)
            return before
        except StorageError:
            raise
        except Exception as exc:  # delta-rs raises several unrelated exception types
            if version_or_none(uri) != before and attempt + 1 < COMMIT_ATTEMPTS:
                time.sleep(min(0.05 * 2**attempt, 2.0))  # another writer committed first: replay on its version
                continue
            raise StorageError(f"the commit to {uri} failed, the table is unchanged: {exc}") from exc
    raise AssertionError("unreachable: the last attempt returns or raises")


def commit_staged(
    uri: str,
    staging: str,
    schema: pa.Schema,
    mode: CommitMode,
    *,
    metadata: Mapping[str, str] | None = None,
    name: str | None = None,
    definition: Mapping[str, Any] | None = None,
) -> CommitResult:
    """Commit the files Spark wrote under ``staging`` as one Delta transaction doing what ``mode`` says.

    The schema given becomes the table's: columns added to it read as NULL in older files. The model's
    ``definition`` (naming the fingerprint ``metadata`` records) is kept with the table (see
    :mod:`.definition`), its column types those the commit gives the table.
    """
    partition_by = list(mode.partition_by)
    actions, rows = _add_actions(uri, staging, by_day=DAY_COLUMN in partition_by)
    record_footers(staging)  # what each file held when committed: `verify` and `run --auto` compare
    delta_schema = Schema.from_arrow(_with_partition_columns(schema, partition_by))
    custom = {METADATA_PREFIX + k: str(v) for k, v in (metadata or {}).items()}
    custom[METADATA_PREFIX + "staging"] = staging.rstrip("/").rsplit("/", 1)[-1]
    owner = f"run {(metadata or {}).get('run_id') or '?'} of {name or uri}"
    with writer_lock(uri, owner=owner):
        if definition is not None:
            write_definition(uri, _with_types(definition, delta_schema))
        before = _commit_with_retries(uri, actions, delta_schema, partition_by, mode, custom, name)
        version = _version_of(uri, custom[METADATA_PREFIX + "staging"], before)
        mark_committed(staging, version)
        if definition is not None:
            keep_only(uri, str(definition["fingerprint"]))
    by_interval = _interval_rows(actions) if DAY_COLUMN not in partition_by else _window_rows(staging, mode)
    if DAY_COLUMN in partition_by:
        rows = sum(by_interval.values())  # the rows of other hours copied into rewritten files are not new
    return CommitResult(
        version=version,
        rows=rows,
        files=len(actions),
        bytes=sum(a.size for a in actions),
        partitions=len({tuple(a.partition_values.items()) for a in actions}),
        interval_rows=by_interval,
    )


def _with_types(definition: Mapping[str, Any], schema: Schema) -> dict[str, Any]:
    """The definition with each column's type as the table holds it (inference may not know them all)."""
    written = {f.name.lower(): spark_type(f.type) for f in schema.fields}
    columns = {
        name: {**column, "type": written.get(name.lower(), column.get("type"))}
        for name, column in definition.get("columns", {}).items()
    }
    return {**definition, "columns": columns}


def _commit_once(
    uri: str,
    actions: list[AddAction],
    schema: Schema,
    partition_by: list[str],
    mode: CommitMode,
    custom: dict[str, str],
    name: str | None,
) -> None:
    """One attempt at the commit, on the table's latest snapshot, as one application transaction."""
    if not exists(uri):
        if is_local(uri):  # under the writer lock: nobody else creates it meanwhile
            properties = CommitProperties(
                custom_metadata=custom, app_transactions=[Transaction(app_id=APP_ID, version=1)]
            )
            create_table(uri, schema, actions, partition_by=partition_by, name=name, properties=properties)
            return
        # On an object store two creations can both land (the later one as the next version, keeping
        # the first one's files): create the table empty, then commit the files as any other write.
        create_table(uri, schema, [], partition_by=partition_by, name=name, mode="ignore")
    table = open_table(uri)
    _check_partitioning(uri, table, mode)
    sequence = (table.transaction_version(APP_ID) or 0) + 1
    properties = CommitProperties(
        custom_metadata=custom, app_transactions=[Transaction(app_id=APP_ID, version=sequence)]
    )
    write_mode, filters, removes = "append" if isinstance(mode, Append) else "overwrite", mode.filters(), []
    if isinstance(mode, ReplaceWindow) and mode.by_day:
        removes = _day_removes(uri, table, mode)
        if not mode.whole_days:
            write_mode, filters = "append", None  # only the files holding the window's rows are removed
    write_transaction(
        table,
        [*actions, *removes],
        mode=write_mode,
        schema=schema,
        partition_by=partition_by,
        partition_filters=filters,
        properties=properties,
    )


def _day_removes(uri: str, table: DeltaTable, mode: ReplaceWindow) -> list[RemoveAction]:
    """The remove actions of a day-cut table's window replace, after checking that the files its staged
    copy read are still exactly those to copy from: otherwise another run replaced hours of those days
    since, and committing would bring its replaced rows back or drop its new ones."""
    if set(copied_files(table, mode.window, mode.unit, whole_days=mode.whole_days)) != set(mode.copied_from):
        raise StorageError(
            f"table {uri}: another run replaced hours of the days of {mode.window} while this run copied "
            "their other hours; "
            "nothing was committed, run the window again"
        )
    if mode.whole_days:
        return []  # the overwrite removes every file of the days
    now = int(clock.wall_time().timestamp() * 1000)
    removed, _ = replaced_files(table, mode.window, mode.unit)
    return [RemoveAction(f.path, True, now, f.size, {DAY_COLUMN: f.day}) for f in removed]


def version_or_none(uri: str) -> int | None:
    return open_table(uri).version() if exists(uri) else None


def _version_of(uri: str, staging: str, after: int | None) -> int:
    """The version of the commit that made ``staging``'s files visible: the first one after ``after``
    whose commit info names it (other writers may have committed before and since). Read from the commit
    files themselves: delta-rs's history can number entries wrongly while another writer commits."""
    latest = open_table(uri).version()
    for version in range((after if after is not None else -1) + 1, latest + 1):
        if commit_info(uri, version).get(METADATA_PREFIX + "staging") == staging:
            return version
    return latest


def _window_rows(staging: str, mode: CommitMode) -> dict[str, int]:
    """Rows staged per interval key of a day-cut table, those of the window only (the copied rows of the
    days' other intervals are not new)."""
    counts = staged_interval_rows(staging, PARTITION_COLUMN)
    if isinstance(mode, ReplaceWindow):
        first, end = interval_bounds(mode.window, mode.unit)
        return {k: n for k, n in counts.items() if first <= k < end}
    return counts


def _interval_rows(actions: Sequence[AddAction]) -> dict[str, int]:
    """Rows added per interval partition value, from the add actions' statistics."""
    out: dict[str, int] = {}
    for action in actions:
        value = action.partition_values.get(PARTITION_COLUMN)
        if value is not None:
            out[value] = out.get(value, 0) + int(json.loads(action.stats or "{}").get("numRecords", 0))
    return out


def carried_metadata(latest: Mapping[str, Any]) -> dict[str, str]:
    """The metadata of the latest commit (``latest``, as the table's history gives it) that a commit
    writing no run's data keeps: the fingerprint, window end and key buckets the table reads as built
    with, without the model, run and staging that would make it look like a run's write."""
    dropped = {METADATA_PREFIX + k for k in ("model", "run_id", "staging")}
    return {k: str(v) for k, v in latest.items() if k.startswith(METADATA_PREFIX) and k not in dropped}


def record_definition(uri: str, definition: Mapping[str, Any]) -> int | None:
    """Keep ``definition`` with the table without writing data, under the table's writer lock.

    Its file is rewritten (a change of metadata only keeps the fingerprint, and so the file's name).
    When it names another fingerprint than the table's latest commit (a forward-only change), a commit
    without files records that fingerprint, the latest commit's other facts (window end, key buckets)
    kept, so the table reads as built with the new definition from now on while every file stays.
    That commit names no model or run: it is not a write any run must be recorded for.
    Returns the version of that commit (None: no commit was needed)."""
    fingerprint = str(definition["fingerprint"])
    with writer_lock(uri, owner=f"definition {fingerprint[:12]} of {definition.get('model') or uri}"):
        return record_definition_locked(uri, definition)


def record_definition_locked(uri: str, definition: Mapping[str, Any]) -> int | None:
    """:func:`record_definition` for a caller that already holds the table's writer lock (a promotion)."""
    fingerprint = str(definition["fingerprint"])
    table = open_table(uri)
    write_definition(uri, _with_types(definition, table.schema()))
    latest = (table.history(1) or [{}])[0]
    if latest.get(METADATA_PREFIX + "fingerprint") == fingerprint:
        return None
    custom = carried_metadata(latest)
    custom[METADATA_PREFIX + "fingerprint"] = fingerprint
    custom[METADATA_PREFIX + "definition_only"] = "true"
    sequence = (table.transaction_version(APP_ID) or 0) + 1
    properties = CommitProperties(
        custom_metadata=custom, app_transactions=[Transaction(app_id=APP_ID, version=sequence)]
    )
    write_transaction(
        table,
        [],
        mode="append",
        schema=table.schema(),
        partition_by=list(table.metadata().partition_columns),
        properties=properties,
    )
    keep_only(uri, fingerprint)
    return open_table(uri).version()
