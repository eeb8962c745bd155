"""Deleting data files no version within the retention needs, and staging folders of dead runs."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from incremental_assets.delta.lock import writer_lock
from incremental_assets.delta.staging import (
    remove_orphan_staging,
)
from incremental_assets.delta.tables import (
    exists,
    open_table,
)


@dataclass(frozen=True)
class VacuumResult:
    removed_files: list[str]
    orphan_dirs: list[str]


def vacuum(
    uri: str, *, retention_hours: int = 168, staging_age: timedelta = timedelta(hours=24), dry_run: bool = True
) -> VacuumResult:
    """Delete data files no version younger than ``retention_hours`` needs, and dead runs' staging folders.

    Files replaced by later commits stay readable by time travel until the retention passes. Runs
    under the table's writer lock so no commit lands while files are removed.
    """
    if not exists(uri):
        return VacuumResult([], [])
    with writer_lock(uri, owner="vacuum"):
        orphans = remove_orphan_staging(uri, older_than=staging_age, dry_run=dry_run)
        removed = open_table(uri).vacuum(
            retention_hours=retention_hours, dry_run=dry_run, enforce_retention_duration=False
        )
    return VacuumResult(sorted(removed), orphans)
