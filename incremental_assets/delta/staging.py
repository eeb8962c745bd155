"""Staging folders: where Spark writes a run's data files inside the table before the commit.

A folder's name says when, on which host and by which process it was made, so the folders of dead runs
can be told from those of running ones and deleted.
"""

from __future__ import annotations

import os
import shutil
import uuid
from datetime import datetime, timedelta, timezone
from typing import Iterator

import pyarrow as pa
import pyarrow.parquet as pq
from pyarrow import fs as pafs

from incremental_assets.delta.definition import DEFINITION_DIR
from incremental_assets.delta.files import (
    filesystem,
    host_tag,
    is_local,
    local_path,
    pid_alive,
)
from incremental_assets.delta.tables import (
    commits,
    exists,
    open_table,
)
from incremental_assets.errors import StorageError
from incremental_assets.model import clock

STAGING_PREFIX = "run-"
# Written into a staging folder once a commit made its files the table's: telling a committed folder
# from a dead run's then needs no reading of the table's log (see orphan_staging_dirs).
COMMITTED_MARK = "_ia_committed"
COMPACT_PREFIX = "compact-"  # a compaction's rewritten files (see :mod:`.compact`)


def new_staging_dir(uri: str) -> str:
    """A fresh folder inside the table for one run's data files (never listed by readers).

    Its name says when, on which host and by which process it was made, so a later run can tell the
    folders of dead runs from those of running ones: ``run-<utc stamp>-<host tag>-<pid>-<random>``.
    """
    stamp = clock.wall_time().strftime("%Y%m%dT%H%M%S")
    return f"{uri.rstrip('/')}/{STAGING_PREFIX}{stamp}-{host_tag()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def staged_footers(staging: str) -> Iterator[tuple[pafs.FileInfo, pq.FileMetaData]]:
    """Each parquet file under ``staging`` (in path order) with its footer."""
    fs, base = filesystem(staging)
    try:
        infos = fs.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True))
    except OSError as exc:
        raise StorageError(f"cannot list the staged files in {staging}: {exc}") from exc
    for info in sorted(infos, key=lambda i: i.path):
        if info.type != pafs.FileType.File or not info.base_name.endswith(".parquet"):
            continue
        with fs.open_input_file(info.path) as handle:
            yield info, pq.ParquetFile(handle).metadata


def staged_parquet(staging: str) -> Iterator[tuple[pafs.FileInfo, int]]:
    """Each parquet file under ``staging`` (in path order) with its row count, read from its footer."""
    for info, metadata in staged_footers(staging):
        yield info, metadata.num_rows


def staged_interval_rows(staging: str, column: str) -> dict[str, int]:
    """Rows per value of ``column`` over the parquet files under ``staging`` (only that column is read)."""
    fs, _ = filesystem(staging)
    out: dict[str, int] = {}
    for info, rows in staged_parquet(staging):
        if not rows:
            continue
        with fs.open_input_file(info.path) as handle:
            values = pq.read_table(handle, columns=[column]).column(column)
        for item in values.value_counts().to_pylist():
            key = str(item["values"])
            out[key] = out.get(key, 0) + int(item["counts"])
    return out


EMPTY_STAGED_FILE = "part-00000-ia-no-rows.parquet"


def keep_staged_schema(staging: str, schema: pa.Schema) -> None:
    """Make sure ``staging`` holds at least one parquet file, so its readers see its columns.

    Spark writes no file at all for an empty result partitioned by interval or bucket (a quiet hour, a
    day without events, a window past the end of the data): the staged output of such a window is then
    one row-less file with ``schema`` (never committed: a commit adds only files that hold rows).
    """
    if any(True for _ in staged_parquet(staging)):
        return
    fs, base = filesystem(staging)
    fs.create_dir(base, recursive=True)
    with fs.open_output_stream(f"{base.rstrip('/')}/{EMPTY_STAGED_FILE}") as handle:
        pq.write_table(schema.empty_table(), handle)


def has_staged_rows(staging: str) -> bool:
    """Whether a run staged any row (Spark may write row-less files for an empty result)."""
    return any(rows for _, rows in staged_parquet(staging))


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


def mark_committed(staging: str, version: int) -> None:
    """Say in ``staging`` that the commit of ``version`` made its files the table's (a local folder only)."""
    if is_local(staging):
        with open(os.path.join(local_path(staging), COMMITTED_MARK), "w") as out:
            out.write(str(version))


def orphan_staging_dirs(
    uri: str, *, older_than: timedelta = timedelta(hours=24), now: datetime | None = None
) -> list[str]:
    """Staging folders of runs that died before committing: no file of theirs is in the table's log.

    A folder is an orphan when no commit in the log names it and no file of the current version lies
    in it, and its run is gone: its process is dead (same host), or, for a folder made elsewhere, it
    is older than ``older_than``. Folders of live runs are never listed. A folder marked committed
    (:func:`mark_committed`) is not one; the log is read only when an unmarked folder of a gone run
    remains, and the folders it names are marked then.
    """
    if not is_local(uri) or not exists(uri):
        return []
    folder = local_path(uri).rstrip("/")
    candidates = [
        n
        for n in sorted(os.listdir(folder))
        if n.startswith(STAGING_PREFIX)
        and os.path.isdir(f"{folder}/{n}")
        and not os.path.exists(f"{folder}/{n}/{COMMITTED_MARK}")
    ]
    now = now or clock.wall_time()
    gone = [name for name in candidates if _run_gone(name, older_than, now)]
    if not gone:  # the usual case: no need to read the table
        return []
    table = open_table(uri)
    base = table.table_uri.rstrip("/")
    live = set()
    for path in table.file_uris():
        relative = path[len(base) + 1 :] if path.startswith(base) else local_path(path)[len(folder) + 1 :]
        live.add(relative.split("/", 1)[0])
    gone = [name for name in gone if name not in live]
    if not gone:
        return []
    named = {c.staging: c.version for c in commits(uri)}
    out = []
    for name in gone:
        if name in named:
            mark_committed(f"{folder}/{name}", named[name])
        else:
            out.append(f"{folder}/{name}")
    return out


def _run_gone(name: str, older_than: timedelta, now: datetime) -> bool:
    """Whether the run that made staging folder ``name`` is over: its process (on this host) is dead, or
    the folder, made elsewhere, is older than ``older_than``."""
    host, pid, made = _staging_owner(name)
    if host == host_tag() and pid is not None:
        return pid != os.getpid() and not pid_alive(pid)
    return made is not None and now - made > older_than


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
    if not is_local(staging):
        return
    name = staging.rstrip("/").rsplit("/", 1)[-1]
    try:
        if exists(uri) and any(f"/{name}/" in f for f in open_table(uri).file_uris()):
            return
    except Exception:  # cannot tell: keep the files, vacuum decides later
        return
    shutil.rmtree(local_path(staging), ignore_errors=True)
    _remove_unborn_table(uri)


def _remove_unborn_table(uri: str) -> None:
    """Remove the folder of a table whose first run failed (no Delta log): left behind empty, readers would
    take it for a broken table. Never while anything else is in it (another run's staging folder, a lock)."""
    folder = local_path(uri)
    try:
        if exists(uri) or not set(os.listdir(folder)) <= {DEFINITION_DIR}:
            return
        shutil.rmtree(os.path.join(folder, DEFINITION_DIR), ignore_errors=True)
        os.rmdir(folder)
    except Exception:  # cannot tell, or someone wrote into it meanwhile: keep it
        return
