"""What the automation sensor sees as it happens: edited project files, the category of each changed
definition (as ``incremental-assets plan`` gives it), and what queued and running runs are computing.

See docs/automation.md, "Edited model files"."""

from __future__ import annotations

import dagster as dg

from incremental_assets import delta
from incremental_assets.errors import ProjectError
from incremental_assets.load.project import load_project
from incremental_assets.load.stamp import project_stamp
from incremental_assets.model.intervals import EVERY_INTERVAL, NO_INTERVAL, Coverage, TimeWindow, to_utc
from incremental_assets.model.project import Project
from incremental_assets.orchestration import tags
from incremental_assets.orchestration.checks import definition_evaluation
from incremental_assets.orchestration.instance import ACTIVE_RUN_STATUSES
from incremental_assets.orchestration.translator import ModelTranslator
from incremental_assets.plan.changes import ModelChange, plan_changes
from incremental_assets.plan.definition import project_definitions
from incremental_assets.plan.rebuild import definition_changed


def active_runs(
    instance: dg.DagsterInstance, project: Project, translator: ModelTranslator
) -> tuple[dict[str, Coverage], dict[str, str]]:
    """What queued and running runs are producing: per model its intervals (every interval for a run
    without a partition range), and what it is doing, said for the tick (``rebuilding in run 1a2b3c4d``,
    ``computing [..) in run 1a2b3c4d``)."""
    by_key = {translator.get_asset_key(m): m for m in project.ordered()}
    out: dict[str, Coverage] = {}
    doing: dict[str, str] = {}
    for record in instance.get_run_records(filters=dg.RunsFilter(statuses=ACTIVE_RUN_STATUSES)):
        run = record.dagster_run
        for key in run.asset_selection or ():
            model = by_key.get(key)
            if model is None:
                continue
            partitions = translator.get_partitions_def(model)
            keys = tags.range_of(run.tags) or (
                (run.tags[tags.PARTITION_TAG],) * 2 if tags.PARTITION_TAG in run.tags else None
            )
            queued = " (queued)" if run.status in (dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED) else ""
            if "definition changed" in run.tags.get(tags.REASON_TAG, ""):
                doing.setdefault(model.name, f"rebuilding in run {run.run_id[:8]}{queued}")
            if not isinstance(partitions, dg.TimeWindowPartitionsDefinition) or keys is None:
                out[model.name] = EVERY_INTERVAL
                doing.setdefault(model.name, f"computing in run {run.run_id[:8]}{queued}")
                continue
            first, last = (
                partitions.time_window_for_partition_key(keys[0]),
                partitions.time_window_for_partition_key(keys[1]),
            )
            window = TimeWindow(to_utc(first.start), to_utc(last.end))
            doing.setdefault(model.name, f"computing {window} in run {run.run_id[:8]}{queued}")
            out[model.name] = out.get(model.name, NO_INTERVAL).union(Coverage.of([window]))
    return out, doing


class LiveProject:
    """The project as its files say now. While no project file changed since the definitions were
    loaded (see :mod:`incremental_assets.load.stamp`), the definitions' project; after an edit, the
    project loaded afresh from the files (once per state of the files), or the errors that keep it from
    loading. The runs the sensor launches import the code afresh, so they run what it planned."""

    def __init__(self, project: Project):
        self.loaded = project
        self.directories = list(project.directories or (project.directory,))
        self.stamp = self.seen = project_stamp(self.directories)
        self._fresh: tuple[str, Project | None, list[str]] | None = None

    def current(self) -> tuple[Project | None, list[str], bool]:
        """The project (None when the edited files do not load), the load errors, and whether the files
        changed since the definitions were loaded."""
        stamp = self.seen = project_stamp(self.directories)
        if stamp == self.stamp:
            return self.loaded, [], False
        if self._fresh is None or self._fresh[0] != stamp:
            try:
                self._fresh = (stamp, load_project(self.directories), [])
            except ProjectError as exc:
                self._fresh = (stamp, None, [e.render() for e in exc.errors])
        return self._fresh[1], self._fresh[2], True


def change_categories(project: Project) -> dict[str, ModelChange]:
    """The models whose table was built with another definition, with the change ``plan`` shows for
    them (category, reasons); empty, without reading more than each table's fingerprint, when none."""
    warehouse = project.settings.warehouse
    built = {m.name: delta.built_with(delta.table_uri(warehouse, m.name)) for m in project.ordered() if m.has_table}
    if not any(definition_changed(project.models[name], fingerprint) for name, fingerprint in built.items()):
        return {}
    tables = {name: delta.table_state(delta.table_uri(warehouse, name), by_interval=False) for name in built}
    changes = plan_changes(project, project_definitions(project), tables)
    return {c.name: c for c in changes if c.name in built and definition_changed(project.models[c.name], built[c.name])}


def changed_marks(
    project: Project,
    translator: ModelTranslator,
    changes: dict[str, ModelChange],
    reported: dict[str, str],
    served: set[str],
) -> list[dg.AssetCheckEvaluation]:
    """A failed ``definition_current`` check per model newly seen changed (once per definition): the
    asset's page and the lineage graph show it at asset level, with the plan's category. The model's
    next materialization reports the check again (passed once its table holds the new definition)."""
    events = []
    for name, change in changes.items():
        model = project.models[name]
        if name not in served or reported.get(name) == model.fingerprint:
            continue
        events.append(definition_evaluation(translator.get_asset_key(model), model, change.category, change.reasons))
        reported[name] = model.fingerprint
    for name in [n for n in reported if n not in changes]:
        del reported[name]
    return events
