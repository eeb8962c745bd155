"""The Delta log against Dagster's records: commits Dagster never recorded are recorded, not recomputed."""

from __future__ import annotations

from dataclasses import dataclass

import dagster as dg

from incremental_assets import delta
from incremental_assets.model.intervals import TimeWindow, batches
from incremental_assets.model.project import Project
from incremental_assets.model.sql_model import SqlModel
from incremental_assets.orchestration import tags
from incremental_assets.orchestration.instance import report_materializations
from incremental_assets.orchestration.translator import ModelTranslator


@dataclass(frozen=True)
class Reconciled:
    model: str
    version: int
    run_id: str
    window: TimeWindow | None
    partitions: tuple[str, ...] = ()


def unrecorded_commits(instance: dg.DagsterInstance, project: Project, model: SqlModel, translator: ModelTranslator) -> list[Reconciled]:
    """Commits in the model's Delta log that Dagster never recorded (the process died between the
    commit and the materialization event), made by the current version of the model's query.

    Per interval only the newest commit counts: an interval a later commit replaced is judged by it.
    """
    uri = project.settings.table_location(model.name)
    log = [c for c in delta.commits(uri) if c.model == model.name]
    if not log:
        return []
    key = translator.get_asset_key(model)
    partitions = translator.get_partitions_def(model)
    if not isinstance(partitions, dg.TimeWindowPartitionsDefinition):
        newest = log[-1]
        event = instance.get_latest_materialization_event(key)
        recorded = event.asset_materialization.metadata.get("delta_version") if event and event.asset_materialization else None
        if newest.fingerprint != model.fingerprint or (recorded is not None and recorded.value >= newest.version):
            return []
        if recorded is None and event is not None:
            return []
        return [Reconciled(model.name, newest.version, newest.run_id, None)]
    latest: dict[str, delta.Commit] = {}
    for commit in log:
        if commit.window is None:  # a full rebuild replaced every interval
            latest.clear()
            continue
        for part in batches(commit.window, model.unit, 1):
            latest[tags.partition_key(partitions, part.start)] = commit
    done = set(instance.get_materialized_partitions(key))
    by_version: dict[int, list[str]] = {}
    for pk, commit in latest.items():
        if pk not in done and commit.fingerprint == model.fingerprint and partitions.has_partition_key(pk):
            by_version.setdefault(commit.version, []).append(pk)
    found = []
    for version, keys in sorted(by_version.items()):
        commit = next(c for c in log if c.version == version)
        found.append(Reconciled(model.name, version, commit.run_id, commit.window, tuple(sorted(keys))))
    return found


def reconcile(instance: dg.DagsterInstance, project: Project, model: SqlModel, translator: ModelTranslator) -> list[Reconciled]:
    """Record in Dagster the commits it missed (see :func:`unrecorded_commits`), as materializations
    whose metadata names the Delta version, instead of computing those intervals again."""
    found = unrecorded_commits(instance, project, model, translator)
    key = translator.get_asset_key(model)
    uri = project.settings.table_location(model.name)
    for item in found:
        meta = {
            "reconciled_from": f"Delta version {item.version}",
            "delta_version": item.version,
            "committed_by_run": item.run_id,
            "table_uri": dg.MetadataValue.path(uri),
        }
        report_materializations(instance, [dg.AssetMaterialization(asset_key=key, partition=pk, metadata=meta) for pk in item.partitions or (None,)])
    return found
