"""Every Delta transaction of the product, and what follows it: a checkpoint when one is due, and the
removal of log files past the table's log retention.

A Delta table's log grows by one commit file per transaction; a reader opens the newest checkpoint (the
table's state at that version, one Parquet file) and replays only the commit files after it. Every
transaction the product makes (a run's commit, a day-file rewrite, a merge, a definition-only commit,
a promotion, an environment's build) goes through :func:`create_table` or :func:`write_transaction`,
and then :func:`after_commit`, under the table's writer lock:

- a checkpoint is written once the table's version is :data:`CHECKPOINT_INTERVAL` commits past the
  newest checkpoint (``delta.checkpointInterval``, 10 as in the Delta protocol's reference writer; a
  version missed by a crash or another writer is caught up at the next commit);
- commit files and older checkpoints before the newest checkpoint and older than the table's
  ``delta.logRetentionDuration`` (30 days) are deleted: versions older than that can no longer be read
  by time travel, every newer one still can.

Tables the product creates carry both properties (:data:`TABLE_PROPERTIES`); a table without them
(created by another tool) is kept with the same defaults. delta-rs's own post-commit hooks are turned
off so that this module is the only place deciding when to checkpoint and clean.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal, Mapping, Sequence

from deltalake import CommitProperties, DeltaTable, PostCommitHookProperties, Schema
from deltalake.exceptions import DeltaError
from deltalake.transaction import AddAction, RemoveAction, create_table_with_add_actions
from pyarrow import fs as pafs

from incremental_assets.delta.files import commit_name, filesystem, short_reason
from incremental_assets.delta.lock import writer_lock
from incremental_assets.delta.tables import open_table
from incremental_assets.model import clock

CHECKPOINT_INTERVAL = 10  # commits between two checkpoints (``delta.checkpointInterval``)
LOG_RETENTION = "interval 30 days"  # how long commit files stay readable (``delta.logRetentionDuration``)
TABLE_PROPERTIES = {"delta.checkpointInterval": str(CHECKPOINT_INTERVAL), "delta.logRetentionDuration": LOG_RETENTION}

# delta-rs would checkpoint every 100 versions and clean on its own: this module does both instead.
_NO_HOOKS = PostCommitHookProperties(create_checkpoint=False, cleanup_expired_logs=False)


@dataclass(frozen=True)
class Maintained:
    """What :func:`after_commit` did to a table's log."""

    version: int
    checkpoint: int | None  # the version checkpointed now (None: none was due, or it failed)
    problem: str | None = None  # why a due checkpoint was not written (the next commit tries again)


def create_table(
    uri: str,
    schema: Schema,
    actions: list[AddAction],
    *,
    partition_by: list[str] | None,
    name: str | None,
    properties: CommitProperties | None = None,
    mode: Literal["error", "ignore"] = "error",
) -> Maintained:
    """Create the table at ``uri`` with ``actions`` as version 0, with the product's log settings."""
    create_table_with_add_actions(
        uri,
        schema,
        actions,
        mode=mode,
        partition_by=partition_by or None,
        name=name,
        configuration=TABLE_PROPERTIES,
        commit_properties=properties,
        post_commithook_properties=_NO_HOOKS,
    )
    return after_commit(uri)


def write_transaction(
    table: DeltaTable,
    actions: Sequence[AddAction | RemoveAction],
    *,
    mode: str,
    schema: Schema,
    partition_by: list[str] | None,
    properties: CommitProperties,
    partition_filters: list[tuple[str, str, object]] | None = None,
) -> Maintained:
    """Commit ``actions`` on ``table``'s snapshot as one transaction, then keep its log (see the module)."""
    restore_checkpointed_commit(table.table_uri, table.version())
    table.create_write_transaction(
        list(actions),
        mode=mode,
        schema=schema,
        partition_by=partition_by or None,
        partition_filters=partition_filters,
        commit_properties=properties,
        post_commithook_properties=_NO_HOOKS,
    )
    return after_commit(table.table_uri)


def restore_checkpointed_commit(uri: str, version: int) -> bool:
    """Write again the commit file of ``version`` when it is gone but a checkpoint of that version holds
    the table's state: the table reads as it was, but delta-rs refuses the next commit ("Invalid table
    version"). The file written holds a ``commitInfo`` only (readers start from the checkpoint; the run
    that made the version is no longer known). True when it was written; the caller holds the writer lock.
    """
    fs, base = filesystem(uri)
    log = f"{base.rstrip('/')}/_delta_log"
    path = f"{log}/{commit_name(version)}"
    if fs.get_file_info(path).type != pafs.FileType.NotFound or last_checkpoint(uri) != version:
        return False
    if fs.get_file_info(f"{log}/{version:020d}.checkpoint.parquet").type == pafs.FileType.NotFound:
        return False  # a multi-part checkpoint (other writers'): left to them
    info = {
        "timestamp": int(clock.wall_time().timestamp() * 1000),
        "operation": "RESTORE COMMIT FILE",
        "operationParameters": {"reason": "commit file lost; the state is the checkpoint's"},
    }
    with fs.open_output_stream(path) as out:
        out.write((json.dumps({"commitInfo": info}) + "\n").encode())
    return True


def after_commit(uri: str) -> Maintained:
    """Checkpoint the table if :func:`checkpoint_due`, and then delete its expired log files. The caller
    holds the table's writer lock (or, on an object store, has just committed)."""
    table = open_table(uri)
    version = table.version()
    if not checkpoint_due(version, last_checkpoint(uri), interval(table.metadata().configuration)):
        return Maintained(version, None)
    try:
        table.create_checkpoint()
        table.cleanup_metadata()  # only files before this checkpoint and older than delta.logRetentionDuration
    except (DeltaError, OSError) as exc:  # the commit itself landed: a reader replays a few more commit files
        return Maintained(version, None, short_reason(exc))
    return Maintained(version, version)


def checkpoint_if_due(uri: str) -> int | None:
    """Outside a commit (the maintenance job): under the table's writer lock, :func:`after_commit`; the
    version checkpointed, or None when none was due."""
    with writer_lock(uri, owner="checkpoint"):
        return after_commit(uri).checkpoint


def checkpoint_due(version: int, last: int | None, every: int) -> bool:
    """Whether ``version`` needs a checkpoint: ``every`` commits past the newest one (or version 0).

    >>> last, made = None, []
    >>> for v in range(25):
    ...     if checkpoint_due(v, last, 10):
    ...         last = v
    ...         made.append(v)
    >>> made
    [10, 20]
    >>> checkpoint_due(13, None, 10), checkpoint_due(13, 10, 10), checkpoint_due(0, None, 10)
    (True, False, False)
    """
    return version - (last if last is not None else 0) >= every


def interval(configuration: Mapping[str, str | None]) -> int:
    """The table's ``delta.checkpointInterval`` (the product's default when unset or not a count).

    >>> interval({}), interval({"delta.checkpointInterval": "100"}), interval({"delta.checkpointInterval": "x"})
    (10, 100, 10)
    """
    try:
        value = int(configuration.get("delta.checkpointInterval") or CHECKPOINT_INTERVAL)
    except ValueError:
        return CHECKPOINT_INTERVAL
    return value if value > 0 else CHECKPOINT_INTERVAL


def last_checkpoint(uri: str) -> int | None:
    """The version of the table's newest checkpoint, from ``_delta_log/_last_checkpoint`` (None: none, or
    a pointer that cannot be read, which the next checkpoint rewrites)."""
    fs, base = filesystem(uri)
    try:
        with fs.open_input_stream(f"{base.rstrip('/')}/_delta_log/_last_checkpoint") as handle:
            return int(json.loads(handle.read().decode("utf-8"))["version"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
