"""One opening of a table's log per command: the snapshot a command already read, reused while it is current.

Opening a Delta table replays its log and materializes its active files (delta-rs 1.6 does so even when asked
not to list them): a few milliseconds on a new table, 10-40 ms on one with a few hundred files or thousands of
source files. A command asks the same tables the same questions many times (version, schema, layout, latest
commit, files for the integrity check...). Inside :func:`one_snapshot_per_table` (the CLI wraps each command
in it) :func:`~.tables.open_table` hands back the snapshot it already opened for a local table as long as it
is still the latest one: the commit file of its version is the same file (same inode, size and modification
time) and no next commit file exists. Delta versions are consecutive and each commit file is created once,
so a commit made since (by this command, or by any other writer) is seen by that check and the table is
opened again. Outside the scope, and for tables on an object store, every call opens the log as before.

The scope is per thread (a context variable): a daemon's threads never share snapshots.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, NamedTuple

from incremental_assets.delta.files import commit_name


class _Entry(NamedTuple):
    table: Any  # deltalake.DeltaTable
    version: int
    commit_file: tuple[int, int, int]  # inode, size, modification time (ns) of the version's commit file


_SNAPSHOTS: ContextVar[dict[str, _Entry] | None] = ContextVar("ia_delta_snapshots", default=None)


@contextmanager
def one_snapshot_per_table() -> Iterator[None]:
    """Reuse each local table's current snapshot within this block (nested blocks share the outer one's)."""
    if _SNAPSHOTS.get() is not None:
        yield
        return
    token = _SNAPSHOTS.set({})
    try:
        yield
    finally:
        _SNAPSHOTS.reset(token)


def _log_file(folder: str, version: int) -> str:
    return os.path.join(folder, "_delta_log", commit_name(version))


def _commit_file(folder: str, version: int) -> tuple[int, int, int] | None:
    try:
        info = os.stat(_log_file(folder, version))
    except OSError:
        return None
    return info.st_ino, info.st_size, info.st_mtime_ns


def reusing() -> bool:
    """Whether snapshots are reused here (then a table is opened with its files even for its version alone:
    the next question about it usually needs them)."""
    return _SNAPSHOTS.get() is not None


def cached(folder: str) -> Any | None:
    """The snapshot of the local table in ``folder`` opened earlier in this scope, if still the latest one."""
    snapshots = _SNAPSHOTS.get()
    entry = snapshots.get(folder) if snapshots is not None else None
    if snapshots is None or entry is None:
        return None
    if (
        entry.table.version() == entry.version
        and _commit_file(folder, entry.version) == entry.commit_file
        and not os.path.exists(_log_file(folder, entry.version + 1))
    ):
        return entry.table
    del snapshots[folder]
    return None


def remember(folder: str, table: Any) -> None:
    """Keep a snapshot just opened (with its files) for the rest of the scope (nothing outside a scope)."""
    snapshots = _SNAPSHOTS.get()
    if snapshots is None:
        return
    version = table.version()
    commit_file = _commit_file(folder, version)
    if commit_file is not None:
        snapshots[folder] = _Entry(table, version, commit_file)
