"""A Dagster schedule per model from its cron: each tick runs the model's missing complete intervals.

A daily model ticks once a day and requests the intervals that ended by then and are neither recorded
as materialized nor already running; a FULL model's schedule simply rebuilds it. Ranges are requested
as one run each (the asset splits them into batches by its execution class), keyed so that a retried
tick never requests the same range twice.
"""

from __future__ import annotations

from datetime import datetime, timezone

import dagster as dg

from incremental_assets.model.cron import expand_cron
from incremental_assets.model.intervals import (
    TimeWindow,
    subtract,
    to_utc,
)
from incremental_assets.model.kinds import IncrementalByTimeRange
from incremental_assets.model.project import Project
from incremental_assets.model.sql_model import SqlModel
from incremental_assets.orchestration import tags
from incremental_assets.orchestration.status import model_status
from incremental_assets.orchestration.translator import ModelTranslator


def schedule_name(model: SqlModel) -> str:
    return model.name.replace(".", "__") + "_schedule"


def cron_of(model: SqlModel) -> str | None:
    """The model's cron in five fields (aliases expanded), else the cron of its interval unit; None for
    models that are never scheduled. A model's cron was checked when it loaded."""
    if model.cron:
        return expand_cron(model.cron)
    if isinstance(model.kind, IncrementalByTimeRange):
        return model.unit.cron
    return None


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
    launch runs of these. The automation's ``in_table`` check is not part of a run (see :mod:`.watch`)."""
    from incremental_assets.orchestration.watch import model_selection

    return {
        m.name: dg.define_asset_job(job_name(m), selection=model_selection(translator.get_asset_key(m), m.has_table), partitions_def=translator.get_partitions_def(m))
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
            return dg.RunRequest(run_key=f"{model.name}@{now.isoformat()}", tags={tags.LAUNCHED_BY_TAG: "schedule"})
        windows = missing_windows(context.instance, model, translator, now)
        if not windows:
            return dg.SkipReason(f"{model.name}: every complete interval up to {now.isoformat()} is materialized")
        unit = model.unit
        return [
            dg.RunRequest(
                run_key=f"{model.name}:{w.start.isoformat()}..{w.end.isoformat()}",
                tags={**tags.range_tags(partitions, w, unit), tags.LAUNCHED_BY_TAG: "schedule"},
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
