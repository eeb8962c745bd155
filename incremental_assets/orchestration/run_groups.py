"""The automation's runs: the intervals one tick launches, put together in as few Dagster runs as Dagster
allows.

Every model launched in the same tick over the same window of the same partitions definition goes in one
run (Dagster runs its steps upstream first, on the in-process executor), with the whole-table models that
only wait for those; a Dagster run holds one partitions definition, so models of other units or starts
have runs of their own. Each group of models has a job (:func:`group_jobs`) holding every model of its
partitions definition and every whole-table model; a model launched alone runs in its own job. A model of
another partitions definition that reads what a run of the tick computes may be launched in the same tick,
in a run of its own tagged :data:`~.tags.AFTER_UPSTREAM_TAG` that waits for that run (see
:mod:`.sensors`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Collection, Sequence

import dagster as dg

from incremental_assets.model.intervals import TimeWindow
from incremental_assets.model.project import Project
from incremental_assets.model.sql_model import SqlModel
from incremental_assets.orchestration import tags
from incremental_assets.orchestration.partition_keys import time_partitions
from incremental_assets.orchestration.schedules import job_name
from incremental_assets.orchestration.translator import ModelTranslator


@dataclass(frozen=True)
class Launch:
    """One model's interval range (None: the whole table) that a tick launches, why, its run key, the run
    it may share (``group``: its partitions definition and window; None: a run of its own), whether it is
    launched only because it joins that run (it reads what an upstream in it computes), and the upstream
    models whose runs of the same tick its own run waits for (``follows``: a run of its own)."""

    model: str
    window: TimeWindow | None
    reasons: tuple[str, ...]
    key: str
    group: tuple[dg.PartitionsDefinition, TimeWindow] | None = None
    joins: bool = False
    follows: tuple[str, ...] = ()


def group_job_name(partitions: dg.TimeWindowPartitionsDefinition) -> str:
    """The job of the models sharing ``partitions``: named by its cron, start and end (stable across loads)."""
    text = "|".join(str(p) for p in (partitions.cron_schedule, partitions.start, partitions.end, partitions.timezone))
    return f"models_{hashlib.sha256(text.encode()).hexdigest()[:10]}_job"


def group_jobs(project: Project, translator: ModelTranslator) -> dict[str, dg.UnresolvedAssetJobDefinition]:
    """One job per partitions definition that two models share or that a whole-table model reads: every
    model of that definition and every whole-table model, for the runs holding several of them."""
    from incremental_assets.orchestration.watch import models_selection

    whole = [m for m in project.ordered() if m.has_table and translator.get_partitions_def(m) is None]
    by_def: dict[dg.PartitionsDefinition, list[SqlModel]] = {}
    for model in project.ordered():
        partitions = translator.get_partitions_def(model)
        if partitions is not None:
            by_def.setdefault(partitions, []).append(model)
    jobs = {}
    for partitions, models in by_def.items():
        if len(models) < 2 and not whole:
            continue
        name = group_job_name(time_partitions(partitions, models[0].name))
        jobs[name] = dg.define_asset_job(
            name,
            selection=models_selection([(translator.get_asset_key(m), m.has_table) for m in [*models, *whole]]),
            partitions_def=partitions,
            description="The automation's runs of several models over one window: " + ", ".join(m.name for m in models),
        )
    return jobs


def run_requests(
    project: Project, translator: ModelTranslator, launches: Sequence[Launch], jobs: Collection[str] | None = None
) -> list[dg.RunRequest]:
    """The runs of a tick's launches: one per group (its models upstream first), one per launch without.
    ``jobs``: the group jobs the code location has (None: all); without its job a group's models run
    alone, and those that only joined it wait for the next tick."""
    groups: dict[object, list[Launch]] = {}
    for n, launch in enumerate(launches):
        groups.setdefault(launch.group if launch.group is not None else n, []).append(launch)
    out = []
    for members in groups.values():
        group = members[0].group
        if len(members) > 1 and group is not None and jobs is not None:
            if group_job_name(time_partitions(group[0], members[0].model)) not in jobs:
                out += [_request(project, translator, [launch]) for launch in members if not launch.joins]
                continue
        out.append(_request(project, translator, members))
    return out


def _request(project: Project, translator: ModelTranslator, members: list[Launch]) -> dg.RunRequest:
    models = [project.models[launch.model] for launch in members]
    windowed = next((launch for launch in members if launch.window is not None), None)
    window = windowed.window if windowed is not None else None
    if len(members) == 1:
        reasons, key, job = members[0].reasons, members[0].key, job_name(models[0])
    else:
        reasons = tuple(f"{launch.model}: {', '.join(launch.reasons)}" for launch in members)
        token = hashlib.sha256("|".join(launch.key for launch in members).encode()).hexdigest()[:12]
        where = f"{window.start.isoformat()}..{window.end.isoformat()}" if window else "full"
        key = f"{'+'.join(m.name for m in models)}:{where}:{token}"
        assert windowed is not None and windowed.group is not None  # only a window's run holds several models
        job = group_job_name(time_partitions(windowed.group[0], windowed.model))
    run_tags = {tags.LAUNCHED_BY_TAG: "automation", tags.REASON_TAG: "; ".join(reasons)[:500]}
    if any(launch.follows for launch in members):
        run_tags[tags.AFTER_UPSTREAM_TAG] = "true"
    if windowed is not None and window is not None:
        model = project.models[windowed.model]
        partitions = time_partitions(translator.get_partitions_def(model), model.name)
        run_tags.update(tags.range_tags(partitions, window, model.unit))
    return dg.RunRequest(
        run_key=key, job_name=job, asset_selection=[translator.get_asset_key(m) for m in models], tags=run_tags
    )
