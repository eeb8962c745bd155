"""Delta Lake storage: the only package that uses ``deltalake``.

Callers use this package's names (``delta.commit_staged(...)``); the modules say where each step lives:
:mod:`.tables` (locations, the log, reads), :mod:`.stats` (row counts and column types from the log),
:mod:`.staging` (a run's files before the commit), :mod:`.commit` (one transaction per run, by commit mode),
:mod:`.definition` (the definition a table was built with), :mod:`.lock` (one writer per table),
:mod:`.source_log` (new data in a source), :mod:`.vacuum` (cleanup), :mod:`.compact` (small files rewritten into
one, no row changed), :mod:`.verify` (the files the log references, checked).
"""

from incremental_assets.delta.checkpoints import checkpoint_if_due
from incremental_assets.delta.commit import (
    Append,
    CommitMode,
    CommitResult,
    ReplaceBuckets,
    ReplaceTable,
    ReplaceWindow,
    commit_staged,
    record_definition,
    record_definition_locked,
)
from incremental_assets.delta.compact import CompactResult, compact, plan_compaction
from incremental_assets.delta.day_files import column_range, copied_files
from incremental_assets.delta.definition import (
    production_tables,
    stored_definition,
    table_names,
    table_state,
    write_definition,
)
from incremental_assets.delta.files import host_tag, is_local
from incremental_assets.delta.lock import LOCK_FILE, LOCK_TIMEOUT_ENV, writer_lock
from incremental_assets.delta.snapshots import one_snapshot_per_table
from incremental_assets.delta.source_log import changed_time_ranges, still_at
from incremental_assets.delta.staging import (
    discard_staging,
    has_staged_rows,
    keep_staged_schema,
    new_staging_dir,
    orphan_staging_dirs,
    remove_orphan_staging,
)
from incremental_assets.delta.stats import column_types, interval_row_counts, row_count
from incremental_assets.delta.tables import (
    BUCKET_COLUMN,
    DAY_COLUMN,
    METADATA_PREFIX,
    PARTITION_COLUMN,
    Commit,
    arrow_schema,
    built_with,
    check_log,
    commit_of,
    commits,
    committed_files,
    damaged_log_file,
    exists,
    history,
    interval_bounds,
    last_commit_metadata,
    last_run_commit,
    open_table,
    partial_days,
    partitioned_by_day,
    row_filter,
    source_files,
    table_uri,
    version,
)
from incremental_assets.delta.vacuum import VacuumResult, vacuum
from incremental_assets.delta.verify import TableFile, file_problems, log_mark, snapshot_files

__all__ = [
    "Append",
    "BUCKET_COLUMN",
    "Commit",
    "DAY_COLUMN",
    "CommitMode",
    "CommitResult",
    "LOCK_FILE",
    "LOCK_TIMEOUT_ENV",
    "METADATA_PREFIX",
    "PARTITION_COLUMN",
    "ReplaceBuckets",
    "ReplaceTable",
    "ReplaceWindow",
    "TableFile",
    "file_problems",
    "log_mark",
    "snapshot_files",
    "VacuumResult",
    "changed_time_ranges",
    "arrow_schema",
    "built_with",
    "check_log",
    "commit_of",
    "commit_staged",
    "commits",
    "committed_files",
    "damaged_log_file",
    "discard_staging",
    "exists",
    "history",
    "is_local",
    "one_snapshot_per_table",
    "open_table",
    "has_staged_rows",
    "keep_staged_schema",
    "host_tag",
    "last_commit_metadata",
    "last_run_commit",
    "new_staging_dir",
    "orphan_staging_dirs",
    "remove_orphan_staging",
    "source_files",
    "table_uri",
    "vacuum",
    "version",
    "writer_lock",
    "production_tables",
    "record_definition",
    "record_definition_locked",
    "still_at",
    "stored_definition",
    "table_names",
    "table_state",
    "write_definition",
    "CompactResult",
    "checkpoint_if_due",
    "compact",
    "plan_compaction",
    "column_types",
    "interval_row_counts",
    "row_count",
    "partitioned_by_day",
    "row_filter",
    "interval_bounds",
    "partial_days",
    "copied_files",
    "column_range",
]
