"""Production takes an environment's table without recomputing it: the environment's data files become
the production table's in ONE Delta commit.

The files are hard-linked into the production table's folder (copied on an object store, where links do
not exist), under the same relative paths, so both tables reference the same bytes and dropping the
environment later removes only its own names. The commit removes every file of production's current
version and adds the environment's, with their statistics and the environment table's schema; its
metadata is a run's (model, fingerprint, window, ...), so every reader of the log (``built_with``,
``commits``, the definition kept with the table) treats it as the environment's build committed here.
It is made under production's writer lock, after checking that production is still at the version the
environment was planned against: otherwise production moved on, and the commit would drop its work.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import uuid
from dataclasses import dataclass
from typing import Iterator, Mapping, Sequence
from urllib.parse import unquote

import pyarrow as pa
from deltalake import CommitProperties, Transaction
from deltalake.transaction import AddAction

from incremental_assets.delta.checkpoints import create_table, write_transaction
from incremental_assets.delta.commit import APP_ID, version_or_none
from incremental_assets.delta.definition import keep_only, stored_definition, write_definition
from incremental_assets.delta.files import filesystem, is_local, local_path
from incremental_assets.delta.lock import writer_lock
from incremental_assets.delta.tables import (
    METADATA_PREFIX,
    PARTITION_COLUMN,
    built_with,
    exists,
    last_commit_metadata,
    open_table,
)
from incremental_assets.errors import PromotionRefusedError, StorageError
from incremental_assets.model import clock


@dataclass(frozen=True)
class PromotedTable:
    model: str
    version: int  # production's version after the commit
    files: int
    bytes: int
    linked: int  # files hard-linked (the others were copied)
    rows: int


@contextlib.contextmanager
def writer_locks(uris: Sequence[str], *, owner: str) -> Iterator[None]:
    """Hold the writer locks of several tables at once, taken in the order given (every promotion takes
    them upstream first, so two never wait on each other; a run holds one lock at a time)."""
    with contextlib.ExitStack() as stack:
        for uri in uris:
            stack.enter_context(writer_lock(uri, owner=owner))
        yield


def check_version(uri: str, expected: int | None, what: str, fix: str) -> None:
    """Refuse when the table at ``uri`` is no longer at the Delta version ``expected`` (None: no table)."""
    current = version_or_none(uri)
    if current != expected:
        said = "no table" if expected is None else f"version {expected}"
        raise PromotionRefusedError(
            f"{what}: production's table is at version {current} but the environment was built against {said}; {fix}"
        )


def _promotion_metadata(env_uri: str, metadata: Mapping[str, str]) -> dict[str, str]:
    """The promotion commit's metadata: the environment's last commit's, with ``metadata`` over it."""
    custom = {METADATA_PREFIX + k: v for k, v in last_commit_metadata(env_uri).items()}
    custom.update({METADATA_PREFIX + k: str(v) for k, v in metadata.items()})
    custom[METADATA_PREFIX + "staging"] = f"promote-{uuid.uuid4().hex[:12]}"
    custom[METADATA_PREFIX + "committed_at"] = clock.wall_time().isoformat()
    return custom


def promote_table(env_uri: str, prod_uri: str, model: str, *, metadata: Mapping[str, str]) -> PromotedTable:
    """Commit the environment table's current files as production's whole table, in one transaction.

    The caller holds production's writer lock and has checked its version. ``metadata`` joins the
    environment's last commit metadata (``window_start``/``window_end`` say the intervals taken).
    """
    if not exists(env_uri):
        raise PromotionRefusedError(f"{model}: the environment has no table at {env_uri}; build it again")
    env = open_table(env_uri)
    fingerprint = built_with(env_uri)
    rows = pa.table(env.get_add_actions(flatten=False)).to_pylist()
    actions, linked = [], 0
    for row in rows:
        linked += _link(env_uri, prod_uri, row["path"])
        actions.append(_add_action(row))
    custom = _promotion_metadata(env_uri, metadata)
    definition = stored_definition(env_uri, fingerprint)
    if definition is not None:
        write_definition(prod_uri, definition)
    schema, partition_by = env.schema(), list(env.metadata().partition_columns)
    try:
        if not exists(prod_uri):
            properties = CommitProperties(
                custom_metadata=custom, app_transactions=[Transaction(app_id=APP_ID, version=1)]
            )
            create_table(prod_uri, schema, actions, partition_by=partition_by, name=model, properties=properties)
        else:
            table = open_table(prod_uri)
            current = list(table.metadata().partition_columns)
            if current != partition_by:
                raise PromotionRefusedError(
                    f"{model}: production's table is partitioned by {current or 'nothing'}, the "
                    f"environment's by {partition_by or 'nothing'}; "
                    "a Delta commit cannot change a table's partitioning: run the model in production with "
                    "--full-refresh instead"
                )
            sequence = (table.transaction_version(APP_ID) or 0) + 1
            properties = CommitProperties(
                custom_metadata=custom, app_transactions=[Transaction(app_id=APP_ID, version=sequence)]
            )
            write_transaction(
                table, actions, mode="overwrite", schema=schema, partition_by=partition_by, properties=properties
            )
    except PromotionRefusedError:
        raise
    except Exception as exc:  # delta-rs raises several unrelated exception types
        raise StorageError(
            f"{model}: the promotion commit to {prod_uri} failed, the table is unchanged: {exc}"
        ) from exc
    if fingerprint:
        keep_only(prod_uri, fingerprint)
    return PromotedTable(
        model=model,
        version=open_table(prod_uri).version(),
        files=len(actions),
        bytes=sum(int(r["size_bytes"]) for r in rows),
        linked=linked,
        rows=sum(int(r["num_records"] or 0) for r in rows),
    )


def _add_action(row: dict) -> AddAction:
    """The environment's add action as production's: same path, size, partition values and statistics
    (its row count, and a day-cut file's first and last interval, which later window replaces read)."""
    stats: dict[str, object] = {"numRecords": row["num_records"]}
    low, high = (row.get("min") or {}).get(PARTITION_COLUMN), (row.get("max") or {}).get(PARTITION_COLUMN)
    if low is not None and high is not None:
        stats.update(minValues={PARTITION_COLUMN: low}, maxValues={PARTITION_COLUMN: high})
    return AddAction(
        row["path"],
        int(row["size_bytes"]),
        dict(row.get("partition") or {}),
        int(row["modification_time"]),
        True,
        json.dumps(stats),
    )


def _link(env_uri: str, prod_uri: str, path: str) -> int:
    """Make the environment's file ``path`` (relative to its table) production's under the same path:
    a hard link on a local disk (1), a copy on an object store (0)."""
    if "://" in path or path.startswith("/"):
        raise StorageError(f"{env_uri}: its file {path} lies outside the table folder; promote cannot take it")
    relative = unquote(path)
    if is_local(env_uri) and is_local(prod_uri):
        source, target = os.path.join(local_path(env_uri), relative), os.path.join(local_path(prod_uri), relative)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        try:
            os.link(source, target)
        except FileExistsError:
            if not os.path.samefile(source, target):  # a file of production's own under that name
                raise StorageError(f"{prod_uri}: a file {relative} already exists; nothing was committed") from None
        except OSError as exc:
            if exc.errno != errno.EXDEV:  # another device: copy instead
                raise StorageError(f"cannot link {source} into {prod_uri}: {exc}") from None
            shutil.copy2(source, target)
            return 0
        return 1
    fs, source_base = filesystem(env_uri)
    _, target_base = filesystem(prod_uri)
    try:
        fs.copy_file(f"{source_base.rstrip('/')}/{relative}", f"{target_base.rstrip('/')}/{relative}")
    except OSError as exc:
        raise StorageError(f"cannot copy {relative} from {env_uri} to {prod_uri}: {exc}") from None
    return 0
