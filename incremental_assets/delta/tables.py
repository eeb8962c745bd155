"""Delta tables: the only module that talks to ``deltalake``.

Spark writes a run's data files into a fresh folder inside the table; :func:`commit_staged` then makes
them visible in ONE Delta transaction that also removes the files of the partitions it replaces. Until
that commit succeeds, readers see the previous version whole; a failed or killed run leaves only
unreferenced files behind, which no reader ever lists (tables are read from the committed file list),
and which :func:`remove_orphan_staging` deletes once their run is known dead.

Every commit holds the table's single-writer lock (:func:`writer_lock`) from the snapshot it replaces
to the new version: delta-rs alone lets two concurrent first writes of the same window both land
(duplicate rows), so the storage cannot arbitrate and the lock does.

Incremental tables are partitioned by the interval that holds each row (column ``ia_interval``: the
interval start as text, e.g. ``2024-01-01`` or ``2024-01-01T05``), so replacing a window is a partition
replace, and reading a window prunes to exactly its partitions.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import socket
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Iterator, Mapping, Sequence

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


STAGING_PREFIX = "run-"
LOCK_FILE = "_ia_writer.lock"
LOCK_TIMEOUT_ENV = "INCREMENTAL_ASSETS_LOCK_TIMEOUT"
STALE_LOCK_SECONDS = 600.0  # a commit holds the lock for seconds; an older lock belongs to a dead writer


def _host_tag(host: str | None = None) -> str:
    return hashlib.sha1((host or socket.gethostname()).encode()).hexdigest()[:8]


def new_staging_dir(uri: str) -> str:
    """A fresh folder inside the table for one run's data files (never listed by readers).

    Its name says when, on which host and by which process it was made, so a later run can tell the
    folders of dead runs from those of running ones: ``run-<utc stamp>-<host tag>-<pid>-<random>``.
    """
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
    return f"{uri.rstrip('/')}/{STAGING_PREFIX}{stamp}-{_host_tag()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by another user
        return True
    return True


def _is_local(uri: str) -> bool:
    return "://" not in uri or uri.startswith("file://")


def _local_path(uri: str) -> str:
    return uri[len("file://") :] if uri.startswith("file://") else uri


# -- the single-writer guard -------------------------------------------------------------------


def _read_lock(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as handle:
            return json.loads(handle.read() or "{}")
    except (OSError, ValueError):
        return {}


def _lock_is_stale(holder: dict, path: str) -> bool:
    """A lock whose process is dead (same host), or older than any commit can take."""
    if holder.get("host") == _host_tag() and isinstance(holder.get("pid"), int) and not _pid_alive(holder["pid"]):
        return True
    try:
        age = time.time() - os.path.getmtime(path)
    except OSError:
        return False
    return age > STALE_LOCK_SECONDS


@contextlib.contextmanager
def writer_lock(uri: str, *, owner: str = "", timeout: float | None = None) -> Iterator[None]:
    """Hold the table's single-writer lock: a file created with O_EXCL in the table folder.

    A writer that finds the lock held waits (polling) up to ``timeout`` seconds (default 300, or
    ``INCREMENTAL_ASSETS_LOCK_TIMEOUT``), then fails naming the holder. A lock left by a killed
    process (same host, pid gone) or older than ten minutes is taken over. Object stores have no
    O_EXCL: there delta-rs's own locking (e.g. a DynamoDB lock for S3) must arbitrate.
    """
    if not _is_local(uri):
        yield
        return
    folder = _local_path(uri).rstrip("/")
    os.makedirs(folder, exist_ok=True)
    path = f"{folder}/{LOCK_FILE}"
    me = {"pid": os.getpid(), "host": _host_tag(), "hostname": socket.gethostname(), "owner": owner,
          "since": datetime.now(timezone.utc).isoformat(), "token": uuid.uuid4().hex}
    wait = float(os.environ.get(LOCK_TIMEOUT_ENV, "300")) if timeout is None else timeout
    deadline = time.monotonic() + wait
    while True:
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            holder = _read_lock(path)
            if _lock_is_stale(holder, path):
                with contextlib.suppress(FileNotFoundError):
                    # rename first: of two writers taking over the same stale lock, only one succeeds
                    os.rename(path, f"{path}.stale-{uuid.uuid4().hex[:8]}")
                    for stale in (p for p in os.listdir(folder) if p.startswith(LOCK_FILE + ".stale-")):
                        os.remove(f"{folder}/{stale}")
                continue
            if time.monotonic() >= deadline:
                raise StorageError(
                    f"table {uri} is being written by {holder.get('owner') or 'another run'} (pid {holder.get('pid')} on "
                    f"{holder.get('hostname')}, since {holder.get('since')}); waited {wait:.0f}s. Retry when it is done, "
                    f"or raise {LOCK_TIMEOUT_ENV}; if that process is gone, delete {path}"
                ) from None
            time.sleep(0.05)
            continue
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(json.dumps(me))
        break
    try:
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            if _read_lock(path).get("token") == me["token"]:  # never remove a lock another writer took over
                os.remove(path)


@dataclass(frozen=True)
class CommitResult:
    version: int
    rows: int
    files: int
    bytes: int
    partitions: int


def _staged_parquet(staging: str) -> Iterator[tuple[pafs.FileInfo, int]]:
    """Each parquet file under ``staging`` (in path order) with its row count, read from its footer."""
    fs, base = _filesystem(staging)
    try:
        infos = fs.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True))
    except OSError as exc:
        raise StorageError(f"cannot list the staged files in {staging}: {exc}") from exc
    for info in sorted(infos, key=lambda i: i.path):
        if info.type != pafs.FileType.File or not info.base_name.endswith(".parquet"):
            continue
        with fs.open_input_file(info.path) as handle:
            yield info, pq.ParquetFile(handle).metadata.num_rows


def has_staged_rows(staging: str) -> bool:
    """Whether a run staged any row (Spark may write row-less files for an empty result)."""
    return any(rows for _, rows in _staged_parquet(staging))


def _add_actions(uri: str, staging: str) -> tuple[list[AddAction], int]:
    _, table_base = _filesystem(uri)
    prefix = table_base.rstrip("/") + "/"
    actions: list[AddAction] = []
    rows = 0
    for info, num_rows in _staged_parquet(staging):
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
    custom = {METADATA_PREFIX + k: str(v) for k, v in (metadata or {}).items()}
    custom[METADATA_PREFIX + "staging"] = staging.rstrip("/").rsplit("/", 1)[-1]
    properties = CommitProperties(custom_metadata=custom)
    owner = f"run {(metadata or {}).get('run_id') or '?'} of {name or uri}"
    with writer_lock(uri, owner=owner):
        # Under the lock the snapshot read here is still the latest when the commit lands, so the
        # overwrite removes every file of the window, including those of a writer that just finished.
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
                    raise StorageError(
                        f"table {uri} is partitioned by {list(current) or 'nothing'}, this write needs {partition_by or 'no partitions'}; {fix}"
                    )
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
    out = []
    for entry in DeltaTable(uri).history():
        model = entry.get(METADATA_PREFIX + "model")
        if not model:
            continue
        start, end = entry.get(METADATA_PREFIX + "window_start"), entry.get(METADATA_PREFIX + "window_end")
        window = TimeWindow(datetime.fromisoformat(start), datetime.fromisoformat(end)) if start and end else None
        out.append(
            Commit(
                version=int(entry["version"]),
                model=str(model),
                fingerprint=str(entry.get(METADATA_PREFIX + "fingerprint", "")),
                run_id=str(entry.get(METADATA_PREFIX + "run_id", "")),
                window=window,
                staging=str(entry.get(METADATA_PREFIX + "staging", "")),
            )
        )
    return sorted(out, key=lambda c: c.version)


# -- orphans and vacuum ----------------------------------------------------------------------------


def _staging_owner(name: str) -> tuple[str | None, int | None, datetime | None]:
    """(host tag, pid, creation time) from a staging folder's name; None where an older name lacks it."""
    parts = name[len(STAGING_PREFIX) :].split("-")
    try:
        made = datetime.strptime(parts[0], "%Y%m%dT%H%M%S").replace(tzinfo=timezone.utc)
    except ValueError:
        made = None
    if len(parts) == 4 and parts[2].isdigit():
        return parts[1], int(parts[2]), made
    return None, None, made


def orphan_staging_dirs(uri: str, *, older_than: timedelta = timedelta(hours=24), now: datetime | None = None) -> list[str]:
    """Staging folders of runs that died before committing: no file of theirs is in the table's log.

    A folder is an orphan when no commit in the log names it and no file of the current version lies
    in it, and its run is gone: its process is dead (same host), or, for a folder made elsewhere, it
    is older than ``older_than``. Folders of live runs are never listed.
    """
    if not _is_local(uri) or not exists(uri):
        return []
    folder = _local_path(uri).rstrip("/")
    candidates = [n for n in sorted(os.listdir(folder)) if n.startswith(STAGING_PREFIX) and os.path.isdir(f"{folder}/{n}")]
    if not candidates:  # the usual case: no need to read the log
        return []
    now = now or datetime.now(timezone.utc)
    named = {c.staging for c in commits(uri)}
    table = DeltaTable(uri)
    base = table.table_uri.rstrip("/")
    live = set()
    for path in table.file_uris():
        relative = path[len(base) + 1 :] if path.startswith(base) else _local_path(path)[len(folder) + 1 :]
        live.add(relative.split("/", 1)[0])
    here = _host_tag()
    out = []
    for name in candidates:
        if name in named or name in live:
            continue
        host, pid, made = _staging_owner(name)
        if host == here and pid is not None:
            if pid != os.getpid() and not _pid_alive(pid):
                out.append(f"{folder}/{name}")
        elif made is not None and now - made > older_than:
            out.append(f"{folder}/{name}")
    return out


def remove_orphan_staging(uri: str, *, older_than: timedelta = timedelta(hours=24), dry_run: bool = False) -> list[str]:
    """Delete (or with ``dry_run`` only list) the staging folders of dead runs; returns them."""
    found = orphan_staging_dirs(uri, older_than=older_than)
    if not dry_run:
        for path in found:
            shutil.rmtree(path, ignore_errors=True)
    return found


def discard_staging(uri: str, staging: str) -> None:
    """Delete a live run's staging folder after its commit was refused or failed; never one whose
    files the table references (should a commit have landed after all)."""
    if not _is_local(staging):
        return
    name = staging.rstrip("/").rsplit("/", 1)[-1]
    try:
        if exists(uri) and any(f"/{name}/" in f for f in DeltaTable(uri).file_uris()):
            return
    except Exception:  # cannot tell: keep the files, vacuum decides later
        return
    shutil.rmtree(_local_path(staging), ignore_errors=True)


@dataclass(frozen=True)
class VacuumResult:
    removed_files: list[str]
    orphan_dirs: list[str]


def vacuum(uri: str, *, retention_hours: int = 168, staging_age: timedelta = timedelta(hours=24), dry_run: bool = True) -> VacuumResult:
    """Delete data files no version younger than ``retention_hours`` needs, and dead runs' staging folders.

    Files replaced by later commits stay readable by time travel until the retention passes. Runs
    under the table's writer lock so no commit lands while files are removed.
    """
    if not exists(uri):
        return VacuumResult([], [])
    with writer_lock(uri, owner="vacuum"):
        orphans = remove_orphan_staging(uri, older_than=staging_age, dry_run=dry_run)
        removed = DeltaTable(uri).vacuum(retention_hours=retention_hours, dry_run=dry_run, enforce_retention_duration=False)
    return VacuumResult(sorted(removed), orphans)
