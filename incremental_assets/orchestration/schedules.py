"""A Dagster schedule per model from its cron: each tick runs what is out of date in the model.

A daily model ticks once a day and requests the complete intervals that are not materialized, those that
new or late source data touched since they were computed (noticed by the same code as the automation
sensor and ``run --auto``: :func:`.source_watch.observe_sources`), and those made stale by upstream
intervals materialized again after them; none already running. A FULL model's schedule simply rebuilds
it. Ranges are requested as one run each (the asset splits them into batches by its execution class),
keyed so that a retried tick never requests the same range twice for the same state of its inputs.
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timezone, tzinfo
from typing import Iterator

import dagster as dg

from incremental_assets.model import clock
from incremental_assets.model.cron import expand_cron
from incremental_assets.model.intervals import (
    TimeWindow,
    merge,
    subtract,
    to_utc,
)
from incremental_assets.model.kinds import IncrementalByTimeRange
from incremental_assets.model.project import Project
from incremental_assets.model.sql_model import SqlModel
from incremental_assets.orchestration import tags
from incremental_assets.orchestration.source_watch import observe_sources
from incremental_assets.orchestration.staleness import latest_id, stale_intervals
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


def missing_windows(
    instance: dg.DagsterInstance,
    model: SqlModel,
    translator: ModelTranslator,
    now: datetime,
    recompute: list[TimeWindow] | None = None,
    tz: tzinfo = timezone.utc,
) -> list[TimeWindow]:
    """Complete intervals up to ``now`` that are not materialized (or are in ``recompute``, clipped to
    them) and not being materialized."""
    status = model_status(instance, model, translator=translator, now=now, tz=tz)
    end = status.expected.end if status.expected else None
    windows = merge(
        [*status.gaps, *(TimeWindow(w.start, min(w.end, end)) for w in recompute or () if end and w.start < end)]
    )
    for running in status.in_progress:
        windows = [part for w in windows for part in subtract(w, [running])]
    return windows


def out_of_date(
    instance: dg.DagsterInstance, project: Project, model: SqlModel, translator: ModelTranslator, now: datetime
) -> tuple[list[TimeWindow], list[TimeWindow], str]:
    """What a partitioned model's schedule tick runs: the windows, those among them computed before (new
    source data, stale), and a token naming the state of the inputs they are recomputed for."""
    observed = observe_sources(instance, project, now, translator)
    recompute = merge([*observed.windows(model), *stale_intervals(instance, project, model, translator).windows])
    marks = [f"{s}={observed.markers.get(s)}" for s in model.depends_on if s in project.sources]
    marks += [f"{u.name}@{latest_id(instance, translator.get_asset_key(u))}" for u in project.upstream_models(model)]
    token = hashlib.sha256("|".join(marks).encode()).hexdigest()[:12]
    return missing_windows(instance, model, translator, now, recompute, project.settings.zone), recompute, token


def job_name(model: SqlModel) -> str:
    return model.name.replace(".", "__") + "_job"


def model_jobs(project: Project, translator: ModelTranslator) -> dict[str, dg.UnresolvedAssetJobDefinition]:
    """One asset job per model (a job's assets share one partitions definition); schedules and sensors
    launch runs of these. The automation's ``in_table`` check is not part of a run (see :mod:`.watch`)."""
    from incremental_assets.orchestration.watch import model_selection

    return {
        m.name: dg.define_asset_job(
            job_name(m),
            selection=model_selection(translator.get_asset_key(m), m.has_table),
            partitions_def=translator.get_partitions_def(m),
        )
        for m in project.ordered()
    }


def build_model_schedule(
    project: Project, model: SqlModel, translator: ModelTranslator, job: dg.UnresolvedAssetJobDefinition
) -> dg.ScheduleDefinition | None:
    cron = cron_of(model)
    if cron is None:
        return None
    partitions = translator.get_partitions_def(model)

    def _tick(context: dg.ScheduleEvaluationContext) -> Iterator[dg.RunRequest | dg.SkipReason]:
        # A generator: a schedule made directly takes what it yields (a list returned would be one item).
        now = to_utc(context.scheduled_execution_time or clock.now())
        if not isinstance(partitions, dg.TimeWindowPartitionsDefinition):
            yield dg.RunRequest(run_key=f"{model.name}@{now.isoformat()}", tags={tags.LAUNCHED_BY_TAG: "schedule"})
            return
        windows, recompute, token = out_of_date(context.instance, project, model, translator, now)
        if not windows:
            yield dg.SkipReason(
                f"{model.name}: every complete interval up to {now.isoformat()} is materialized and current"
            )
            return
        unit = model.unit
        yield from (
            dg.RunRequest(
                # A window computed before is keyed by the state of its inputs too: new data runs it again.
                run_key=f"{model.name}:{w.start.isoformat()}..{w.end.isoformat()}"
                + (f":{token}" if any(w.overlaps(r) for r in recompute) else ""),
                tags={**tags.range_tags(partitions, w, unit), tags.LAUNCHED_BY_TAG: "schedule"},
            )
            for w in windows
        )

    # Made directly, not with ``@dg.schedule``: the decorator inspects the function again for every model.
    return dg.ScheduleDefinition(
        name=schedule_name(model),
        cron_schedule=cron,
        job=job,
        execution_fn=_tick,
        execution_timezone="UTC",
        description=f"Runs the missing complete intervals of {model.name} ({cron})",
    )


def build_schedules(
    project: Project,
    translator: ModelTranslator | None = None,
    jobs: dict[str, dg.UnresolvedAssetJobDefinition] | None = None,
) -> list[dg.ScheduleDefinition]:
    """One schedule per enabled model with a cron or an interval unit."""
    translator = translator or ModelTranslator()
    jobs = jobs or model_jobs(project, translator)
    out = [build_model_schedule(project, m, translator, jobs[m.name]) for m in project.ordered()]
    return [s for s in out if s is not None]
