"""The Delta log against Dagster's records: commits Dagster never recorded are recorded, not recomputed.

Once every commit up to a version is accounted for (recorded by its run, or here), that version is
remembered in the Dagster instance's key-value store with the identity of its commit (see
:func:`~incremental_assets.delta.log_tail.identity`): the next look reads only the commit files after it,
so its cost does not grow with the table's history. The whole log is read again when there is no such
mark, when its commit is no longer the same (the log fell back, or was cleaned up past it), when the
model's definition changed, or when Dagster's records of the model were wiped since (the asset's wipe time
changed). The materialized intervals themselves are read only when there are commits to judge.
"""

from __future__ import annotations

from dataclasses import dataclass

import dagster as dg

from incremental_assets import delta
from incremental_assets.delta.log_tail import identity, read_after, read_entry
from incremental_assets.model.intervals import TimeWindow, batches
from incremental_assets.model.project import Project
from incremental_assets.model.sql_model import SqlModel
from incremental_assets.orchestration import tags
from incremental_assets.orchestration.instance import report_materializations
from incremental_assets.orchestration.integrity_since import read_state, write_state
from incremental_assets.orchestration.partition_keys import window_of_key
from incremental_assets.orchestration.translator import ModelTranslator


@dataclass(frozen=True)
class Reconciled:
    model: str
    version: int
    run_id: str
    window: TimeWindow | None
    partitions: tuple[str, ...] = ()


KEY_PREFIX = "incremental_assets.reconciled:"


@dataclass(frozen=True)
class Mark:
    """Every commit up to ``version`` (whose commit has ``identity``) is accounted for, when the model had
    ``fingerprint`` and Dagster's records of it were last wiped at ``wiped`` (see :func:`wiped_at`)."""

    version: int
    identity: str
    fingerprint: str
    wiped: float | None


def remembered_mark(instance: dg.DagsterInstance, uri: str) -> Mark | None:
    return read_state(instance, KEY_PREFIX + uri, Mark)


def _remember(instance: dg.DagsterInstance, uri: str, mark: Mark | None) -> None:
    if mark is not None:
        write_state(instance, KEY_PREFIX + uri, mark)


NO_RECORDS = -1.0  # Dagster holds no record of the asset (never materialized, or wiped since)


def wiped_at(instance: dg.DagsterInstance, key: dg.AssetKey) -> float | None:
    """When Dagster's records of an asset were last wiped (None: never; ``NO_RECORDS``: it holds none now):
    one query, however many intervals it records."""
    records = instance.get_asset_records([key])
    if not records:
        return NO_RECORDS
    details = records[0].asset_entry.asset_details
    return details.last_wipe_timestamp if details is not None else None


def _log_to_judge(
    instance: dg.DagsterInstance, uri: str, model: SqlModel, wiped: float | None
) -> tuple[list[delta.Commit], Mark | None]:
    """The model's commits not yet accounted for (all of them without a valid mark), and the mark that
    holds once they are (None: the current commit cannot be named)."""
    current = delta.version(uri)
    if current is None:
        return [], None
    mark = remembered_mark(instance, uri)
    entries = None
    if mark is not None and mark.version <= current and mark.fingerprint == model.fingerprint and mark.wiped == wiped:
        entry = read_entry(uri, mark.version)
        if entry is not None and identity(entry.info) == mark.identity:
            entries = [entry, *read_after(uri, mark.version, current)]
            commits = [delta.commit_of(e.info, e.version) for e in entries[1:]]
            log = [c for c in commits if c is not None and c.model == model.name]
    if entries is None:
        log = [c for c in delta.commits(uri) if c.model == model.name]
        last_entry = read_entry(uri, current) if log else None
        entries = [last_entry] if last_entry is not None else []
    last = entries[-1] if entries else None
    return log, Mark(
        current, identity(last.info), model.fingerprint, wiped
    ) if last is not None and last.version == current else None


def unrecorded_commits(
    instance: dg.DagsterInstance, project: Project, model: SqlModel, translator: ModelTranslator
) -> list[Reconciled]:
    """Commits in the model's Delta log that Dagster never recorded (the process died between the
    commit and the materialization event), made by the current version of the model's query.

    Per interval only the newest commit counts: an interval a later commit replaced is judged by it.
    Only the commits after the last look that found none are read (see the module docstring).
    """
    found, mark = _unrecorded(instance, project, model, translator)
    if not found:
        _remember(instance, project.settings.table_location(model.name), mark)
    return found


def _unrecorded(
    instance: dg.DagsterInstance, project: Project, model: SqlModel, translator: ModelTranslator
) -> tuple[list[Reconciled], Mark | None]:
    uri = project.settings.table_location(model.name)
    key = translator.get_asset_key(model)
    partitions = translator.get_partitions_def(model)
    timed = isinstance(partitions, dg.TimeWindowPartitionsDefinition)
    log, mark = _log_to_judge(instance, uri, model, wiped_at(instance, key))
    if not log:
        return [], mark
    done = set(instance.get_materialized_partitions(key)) if timed else set()
    if not isinstance(partitions, dg.TimeWindowPartitionsDefinition):
        newest = log[-1]
        event = instance.get_latest_materialization_event(key)
        recorded = (
            event.asset_materialization.metadata.get("delta_version") if event and event.asset_materialization else None
        )
        if newest.fingerprint != model.fingerprint or (
            recorded is not None and isinstance(recorded.value, int) and recorded.value >= newest.version
        ):
            return [], mark
        if recorded is None and event is not None:
            return [], mark
        return [Reconciled(model.name, newest.version, newest.run_id, None)], mark
    latest: dict[str, delta.Commit] = {}
    for commit in log:
        if commit.window is None:  # a full rebuild replaced every interval
            latest.clear()
            continue
        for part in batches(commit.window, model.unit, 1):
            latest[tags.partition_key(partitions, part.start)] = commit
    by_version: dict[int, list[str]] = {}
    for pk, commit in latest.items():
        if pk not in done and commit.fingerprint == model.fingerprint and window_of_key(partitions, pk) is not None:
            by_version.setdefault(commit.version, []).append(pk)
    found = []
    for version, keys in sorted(by_version.items()):
        commit = next(c for c in log if c.version == version)
        found.append(Reconciled(model.name, version, commit.run_id, commit.window, tuple(sorted(keys))))
    return found, mark


def reconcile(
    instance: dg.DagsterInstance, project: Project, model: SqlModel, translator: ModelTranslator
) -> list[Reconciled]:
    """Record in Dagster the commits it missed (see :func:`unrecorded_commits`), as materializations
    whose metadata names the Delta version, instead of computing those intervals again."""
    found, mark = _unrecorded(instance, project, model, translator)
    key = translator.get_asset_key(model)
    uri = project.settings.table_location(model.name)
    for item in found:
        meta: dict[str, str | int | dg.PathMetadataValue] = {
            "reconciled_from": f"Delta version {item.version}",
            "delta_version": item.version,
            "committed_by_run": item.run_id,
            "table_uri": dg.MetadataValue.path(uri),
        }
        report_materializations(
            instance,
            [dg.AssetMaterialization(asset_key=key, partition=pk, metadata=meta) for pk in item.partitions or (None,)],
        )
    if mark is not None:
        _remember(instance, uri, mark)  # what was found is recorded now: every commit is accounted for
    return found
