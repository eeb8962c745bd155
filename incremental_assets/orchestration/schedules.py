"""A Dagster schedule per model from its cron: each tick runs the model's missing complete intervals.

A daily model ticks once a day and requests the intervals that ended by then and are neither recorded
as materialized nor already running; a FULL model's schedule simply rebuilds it. Ranges are requested
as one run each (the asset splits them into batches by its execution class), keyed so that a retried
tick never requests the same range twice.
"""

from __future__ import annotations

from datetime import datetime, timezone

import dagster as dg

from incremental_assets.model import IncrementalByTimeRange, SqlModel
from incremental_assets.project import Project
from incremental_assets.runs import model_status
from incremental_assets.time_window import UNIT_CRON, TimeWindow, batches, subtract, to_utc
from incremental_assets.translator import ModelTranslator

RANGE_START_TAG = "dagster/asset_partition_range_start"
RANGE_END_TAG = "dagster/asset_partition_range_end"


def schedule_name(model: SqlModel) -> str:
    return model.name.replace(".", "__") + "_schedule"


def cron_of(model: SqlModel) -> str | None:
    """The model's cron, else the cron of its interval unit; None for models that are never scheduled."""
    if model.cron:
        return {"@hourly": UNIT_CRON["hour"], "@daily": UNIT_CRON["day"], "@weekly": UNIT_CRON["week"],
                "@monthly": UNIT_CRON["month"], "@yearly": UNIT_CRON["year"]}.get(model.cron, model.cron)
    if isinstance(model.kind, IncrementalByTimeRange):
        return UNIT_CRON[model.interval_unit or "day"]
    return None


def range_tags(partitions: dg.TimeWindowPartitionsDefinition, window: TimeWindow, unit: str) -> dict[str, str]:
    """Tags of one run over ``window``: its first and last partition keys."""
    last = batches(window, unit, 1)[-1]
    return {
        RANGE_START_TAG: partitions.get_partition_key_for_timestamp(window.start.timestamp()),
        RANGE_END_TAG: partitions.get_partition_key_for_timestamp(last.start.timestamp()),
    }


def missing_windows(instance: dg.DagsterInstance, model: SqlModel, translator: ModelTranslator, now: datetime) -> list[TimeWindow]:
    """Complete intervals up to ``now`` that are not materialized and not being materialized."""
    status = model_status(instance, model, translator=translator, now=now)
    windows = list(status.gaps)
    for running in status.in_progress:
        windows = [part for w in windows for part in subtract(w, [running])]
    return windows


def job_name(model: SqlModel) -> str:
    return model.name.replace(".", "__") + "_job"


def model_jobs(project: Project, translator: ModelTranslator) -> dict[str, dg.UnresolvedAssetJobDefinition]:
    """One asset job per model (a job's assets share one partitions definition); schedules and sensors
    launch runs of these."""
    return {
        m.name: dg.define_asset_job(job_name(m), selection=[translator.get_asset_key(m)], partitions_def=translator.get_partitions_def(m))
        for m in project.ordered()
    }


def build_model_schedule(
    project: Project, model: SqlModel, translator: ModelTranslator, job: dg.UnresolvedAssetJobDefinition
) -> dg.ScheduleDefinition | None:
    cron = cron_of(model)
    if cron is None:
        return None
    partitions = translator.get_partitions_def(model)

    @dg.schedule(name=schedule_name(model), cron_schedule=cron, job=job, execution_timezone="UTC",
                 description=f"Runs the missing complete intervals of {model.name} ({cron})")
    def _tick(context: dg.ScheduleEvaluationContext):
        now = to_utc(context.scheduled_execution_time or datetime.now(timezone.utc))
        if not isinstance(partitions, dg.TimeWindowPartitionsDefinition):
            return dg.RunRequest(run_key=f"{model.name}@{now.isoformat()}", tags={"incremental_assets/launched_by": "schedule"})
        windows = missing_windows(context.instance, model, translator, now)
        if not windows:
            return dg.SkipReason(f"{model.name}: every complete interval up to {now.isoformat()} is materialized")
        unit = model.interval_unit or "day"
        return [
            dg.RunRequest(
                run_key=f"{model.name}:{w.start.isoformat()}..{w.end.isoformat()}",
                tags={**range_tags(partitions, w, unit), "incremental_assets/launched_by": "schedule"},
            )
            for w in windows
        ]

    return _tick


def build_schedules(
    project: Project, translator: ModelTranslator | None = None, jobs: dict[str, dg.UnresolvedAssetJobDefinition] | None = None
) -> list[dg.ScheduleDefinition]:
    """One schedule per enabled model with a cron or an interval unit."""
    translator = translator or ModelTranslator()
    jobs = jobs or model_jobs(project, translator)
    out = [build_model_schedule(project, m, translator, jobs[m.name]) for m in project.ordered()]
    return [s for s in out if s is not None]
