"""What a table's current version references, and whether those files are really there.

The Delta log is the table: a reader lists the files of the current version from it and opens them.
A file the log references but the store no longer holds (deleted by hand, lost with a disk) makes every
reader of the table fail; a file that is there but cut off or overwritten fails the reader that opens it.
:func:`snapshot_files` lists the current version's files from the log alone (no data read);
:func:`file_problems` checks them: that each exists with the size the log recorded (cheap, one metadata
call per file), and with ``readable`` also that its Parquet footer can be read.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq
from pyarrow import fs as pafs

from incremental_assets.delta.files import filesystem as open_filesystem
from incremental_assets.delta.files import local_path
from incremental_assets.delta.fingerprints import Footers
from incremental_assets.delta.tables import BUCKET_COLUMN, DAY_COLUMN, PARTITION_COLUMN, open_table


@dataclass(frozen=True)
class TableFile:
    """One data file of a table's current version, as the log describes it."""

    uri: str
    size: int | None
    rows: int | None
    interval: str | None = None  # the ``ia_interval`` partition it belongs to (time-partitioned tables)
    bucket: str | None = None  # the ``ia_bucket`` partition it belongs to (keyed tables)
    day: str | None = (
        None  # the ``ia_day`` partition it belongs to (hourly tables cut by day: every interval of that day)
    )


def snapshot_files(uri: str) -> list[TableFile]:
    """Every data file of the table's current version, with its size, row count and partition (from the log)."""
    table = open_table(uri)
    actions = pa.table(table.get_add_actions(flatten=True)).to_pylist()
    base = table.table_uri.rstrip("/")
    out = []
    for row in actions:
        path = row["path"]
        full = path if "://" in path or path.startswith("/") else f"{base}/{path}"
        out.append(
            TableFile(
                uri=full,
                size=row.get("size_bytes"),
                rows=row.get("num_records"),
                interval=row.get(f"partition.{PARTITION_COLUMN}"),
                bucket=row.get(f"partition.{BUCKET_COLUMN}"),
                day=row.get(f"partition.{DAY_COLUMN}"),
            )
        )
    return out


def file_problems(uri: str, files: list[TableFile], *, readable: bool = False) -> list[tuple[TableFile, str]]:
    """The files among ``files`` that are missing, of another size than the log recorded, whose content
    is not what was committed (another footer than the one recorded, see :mod:`.fingerprints`), or (with
    ``readable``) whose Parquet footer cannot be read; each with the reason."""
    filesystem, _ = open_filesystem(uri)
    footers = Footers(filesystem)
    problems = []
    for item in files:
        path = _path_in(filesystem, item.uri)
        info = filesystem.get_file_info(path)
        if info.type == pafs.FileType.NotFound:
            problems.append((item, "missing"))
        elif item.size is not None and info.size is not None and info.size != item.size:
            problems.append((item, f"{info.size} bytes where the log recorded {item.size}"))
        elif footers.differs(path, info.size or 0):
            problems.append(
                (item, "not what was committed (its Parquet footer differs from the one recorded at its commit)")
            )
        elif readable:
            try:
                pq.read_metadata(path, filesystem=filesystem)
            except (OSError, pa.ArrowException) as exc:
                problems.append((item, f"not readable as Parquet ({str(exc).splitlines()[0][:160]})"))
    return problems


def _path_in(filesystem: pafs.FileSystem, file_uri: str) -> str:
    if isinstance(filesystem, pafs.LocalFileSystem):
        return local_path(file_uri)
    return file_uri.split("://", 1)[-1]


def log_mark(uri: str) -> str:
    """A cheap mark of the table's log (one listing of ``_delta_log``, nothing read): how many files it
    holds, the newest, and the size and time of each of the newest and ``_last_checkpoint``. A commit, a
    checkpoint, a deleted or emptied log file each change it; "" when there is no log."""
    filesystem, _ = open_filesystem(uri)
    folder = _path_in(filesystem, f"{uri.rstrip('/')}/_delta_log")
    try:
        infos = filesystem.get_file_info(pafs.FileSelector(folder, allow_not_found=True))
    except OSError:
        return ""
    files = sorted((i for i in infos if i.type == pafs.FileType.File), key=lambda i: i.base_name)
    commits = [i for i in files if i.base_name.endswith(".json")]
    marked = commits[-1:] + [i for i in files if i.base_name == "_last_checkpoint"]
    return f"{len(files)}|" + "|".join(f"{i.base_name}:{i.size}:{i.mtime_ns}" for i in marked)
