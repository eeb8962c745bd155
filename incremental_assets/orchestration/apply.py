"""Applying a plan: each model costs what its category in :func:`incremental_assets.plan.changes.plan_changes`
says, in ``run --auto``, in the automation sensor and in any run Dagster launches.

- ``breaking`` / ``non-breaking`` (an incremental model's definition changed): rebuilt from its start in
  one commit, by the model's own run (see :mod:`incremental_assets.plan.rebuild`).
- ``metadata`` (description, owner, tags, audits, cron, grain): nothing is recomputed; the definition
  kept with the table is rewritten, so the next plan finds the model unchanged. The code version is the
  fingerprint, which metadata does not enter: Dagster marks nothing.
- ``indirect-non-breaking`` (downstream of a rebuilt model, reading none of the columns whose values
  changed): nothing is recomputed. The upstream's rebuild decides it, from the plan made before its
  commit (afterwards the upstream's previous definition is gone), and once its materializations are
  recorded it confirms the downstream model's partitions as current (see :mod:`.confirm`): neither our
  staleness nor Dagster's stale status then calls them stale, and they keep their materializations.
  Partitions that were already stale before the rebuild (late upstream data not yet read) are not
  confirmed: they are recomputed as before; nor are those reading intervals of the upstream that its
  rebuild changes by more than the definition (new source rows it reads too, intervals of it that were
  stale): the rebuild's rows differ there in every column.
- ``indirect-breaking``: its built intervals are stale (they are older than the upstream's rebuild) and
  recomputed by :mod:`.staleness`, as any interval whose input changed.
- ``forward-only`` (a ``forward_only`` model, or ``run --forward-only``): the new definition is recorded
  with the table by a commit without files, and the built partitions are confirmed under the new code
  version: they are kept as they are, new intervals use the new definition, and nothing downstream is
  restated because of it (nothing upstream of it was materialized again).

The plan reads only each table's latest commit and its definition file (no statistics): cheap enough
for every tick of the sensor.
"""

from __future__ import annotations

from typing import Iterable

import dagster as dg

from incremental_assets import delta
from incremental_assets.model.intervals import TimeWindow, batches
from incremental_assets.model.project import Project
from incremental_assets.model.sql_model import SqlModel
from incremental_assets.orchestration import tags
from incremental_assets.orchestration.confirm import DATA_VERSION_TAG, confirm, latest_record
from incremental_assets.orchestration.partition_keys import key_of
from incremental_assets.orchestration.source_watch import read_state
from incremental_assets.orchestration.staleness import stale_intervals
from incremental_assets.orchestration.translator import ModelTranslator
from incremental_assets.plan.analyses import input_bound
from incremental_assets.plan.changes import FORWARD_ONLY, INDIRECT_NON_BREAKING, METADATA, ModelChange, plan_changes
from incremental_assets.plan.definition import definition_of, project_definitions


def current_plan(project: Project, *, forward_only: bool = False) -> list[ModelChange]:
    """Each model's category, from what its table says now (its definition, not its statistics)."""
    tables = delta.production_tables(project, counts=False)
    return plan_changes(project, project_definitions(project), tables, forward_only=forward_only)


def parent_keys(project: Project, model: SqlModel, translator: ModelTranslator) -> dict[dg.AssetKey, bool]:
    """The asset keys the model's asset depends on (upstream models and sources), each saying whether
    it is partitioned."""
    keys = {}
    for name in model.depends_on:
        if name == model.name:
            continue
        if name in project.models:
            upstream = project.models[name]
            keys[translator.get_asset_key(upstream)] = translator.get_partitions_def(upstream) is not None
        elif name in project.sources:
            keys[translator.get_source_key(project.sources[name])] = False
    return keys


def apply_without_compute(
    project: Project,
    instance: dg.DagsterInstance,
    translator: ModelTranslator,
    changes: Iterable[ModelChange],
    models: set[str] | None = None,
) -> list[str]:
    """Apply the changes that recompute nothing (metadata, forward-only) to the tables and to Dagster;
    say what was done, one line per model. ``models`` limits it to a selection."""
    notes = []
    for change in changes:
        model = project.models.get(change.name)
        if model is None or not model.has_table or (models is not None and change.name not in models):
            continue
        forward = change.category == FORWARD_ONLY and change.change == "modified"
        if not forward and change.category != METADATA:
            continue
        definition = definition_of(project, model.name)
        uri = delta.table_uri(project.settings.warehouse, model.name)
        if definition is None or not delta.exists(uri):
            continue
        version = delta.record_definition(uri, definition)
        if forward:
            count = keep_built_intervals(
                instance,
                project,
                model,
                translator,
                "forward-only change: built intervals are kept, new intervals use the new definition",
            )
            where = f"Delta version {version}" if version is not None else "its table"
            notes.append(
                f"{model.name}: forward-only change recorded in {where}; {count} built interval(s) kept as they are"
            )
        elif change.change == "modified":
            notes.append(f"{model.name}: metadata change recorded with its table; nothing recomputed")
    return notes


def unaffected_downstream(project: Project, model: SqlModel) -> list[str]:
    """Models reading ``model`` directly that its pending change (decided by the plan, before the model's
    table is rebuilt) leaves unchanged: they read none of its columns whose values change."""
    names = []
    for change in current_plan(project):
        other = project.models.get(change.name)
        if other is None or not other.has_table or model.name not in other.depends_on:
            continue
        if change.change == "indirectly modified" and change.category in (INDIRECT_NON_BREAKING, METADATA):
            names.append(other.name)
    return names


def kept_data_version(
    instance: dg.DagsterInstance, project: Project, model: SqlModel, translator: ModelTranslator, unaffected: set[str]
) -> str | None:
    """The data version a rebuild of ``model`` keeps: that of its materializations so far, when every
    model reading it is left unchanged by the rebuild (None: Dagster's own, a new one). Dagster's stale
    status compares an upstream's data version before and after: kept, no downstream partition is stale
    by Dagster either; changed, every one is (Dagster has no column level), so a rebuild any reader
    depends on changes it. A plain view holds no data: it reads the new rows when queried."""
    readers = [
        m.name for m in project.models.values() if model.name in m.depends_on and m.name != model.name and m.has_table
    ]
    if not readers or set(readers) - unaffected:
        return None
    record = latest_record(instance, translator.get_asset_key(model), observations=False)
    return (record.event_log_entry.tags or {}).get(DATA_VERSION_TAG) if record is not None else None


def stale_partitions(
    instance: dg.DagsterInstance, project: Project, model: SqlModel, translator: ModelTranslator
) -> set[str]:
    """The partition keys of a model's intervals that are stale now (before an upstream's rebuild)."""
    partitions = translator.get_partitions_def(model)
    if not isinstance(partitions, dg.TimeWindowPartitionsDefinition):
        return set()
    windows = stale_intervals(instance, project, model, translator).windows
    return {tags.partition_key(partitions, part.start) for w in windows for part in batches(w, model.unit, 1)}


def new_data_windows(
    instance: dg.DagsterInstance, project: Project, model: SqlModel, translator: ModelTranslator
) -> list[TimeWindow] | None:
    """The intervals of ``model`` whose rows change by more than its definition when it is rebuilt now: new
    source rows the watch noticed and no run has read yet, and intervals an upstream's new materialization
    made stale (None: every interval, a source read whole changed)."""
    windows: list[TimeWindow] = []
    for entry in read_state(instance, project).touched.get(model.name, []):
        if entry.windows.every:
            return None
        windows += entry.windows.windows
    return windows + list(stale_intervals(instance, project, model, translator).windows)


def partitions_reading(
    project: Project, translator: ModelTranslator, reader: SqlModel, model: SqlModel, windows: list[TimeWindow]
) -> set[str] | None:
    """The partition keys of ``reader`` whose input from ``model`` (its lookback included) overlaps
    ``windows`` of it (None: ``reader`` has no time partitions, it reads ``model`` whole)."""
    partitions = translator.get_partitions_def(reader)
    if not isinstance(partitions, dg.TimeWindowPartitionsDefinition):
        return None
    bound = input_bound(project, reader.name, model.name)
    keys = set()
    for window in windows:
        reach = window.widen(bound.after, bound.before) if bound is not None else window
        cursor = reader.unit.floor(reach.start)
        while cursor < reach.end:
            keys.add(key_of(partitions, cursor))
            cursor = reader.unit.next(cursor)
    return keys


def confirm_unaffected(
    instance: dg.DagsterInstance,
    project: Project,
    model: SqlModel,
    translator: ModelTranslator,
    kept: dict[str, set[str]],
) -> list[str]:
    """After ``model``'s rebuild is recorded: confirm the partitions of each unaffected downstream model
    (``kept``: model -> partitions stale before the rebuild, left to be recomputed)."""
    notes = []
    for name, stale in kept.items():
        other = project.models[name]
        count = confirm(
            instance,
            translator.get_asset_key(other),
            parent_keys(project, other, translator),
            code_version=translator.get_code_version(other),
            partitioned=translator.get_partitions_def(other) is not None,
            reason=f"{model.name} was rebuilt; {name} reads none of its changed columns: nothing recomputed",
            refreshed=[translator.get_asset_key(model)],
            skip=stale,
        )
        notes.append(
            f"{name}: reads none of the changed columns of {model.name}: {count} interval(s) kept, nothing recomputed"
        )
    return notes


def keep_built_intervals(
    instance: dg.DagsterInstance, project: Project, model: SqlModel, translator: ModelTranslator, reason: str
) -> int:
    """Confirm in Dagster, with the model's new code version, the intervals its table holds (a forward-only
    change keeps them as they are); how many."""
    return confirm(
        instance,
        translator.get_asset_key(model),
        parent_keys(project, model, translator),
        code_version=translator.get_code_version(model),
        partitioned=translator.get_partitions_def(model) is not None,
        reason=reason,
    )
