"""The project's Dagster instance and what the product asks of it: recorded intervals, active runs,
upstream coverage, runs whose process died."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import dagster as dg

from incremental_assets.model.intervals import (
    TimeWindow,
    ceil,
    floor,
    merge,
    subtract,
    to_utc,
)
from incremental_assets.model.kinds import IncrementalByTimeRange
from incremental_assets.model.project import Project
from incremental_assets.model.sql_model import SqlModel
from incremental_assets.orchestration import tags
from incremental_assets.orchestration.translator import ModelTranslator
from incremental_assets.plan.compile import input_bound

DAGSTER_YAML = """\
# Dagster instance of this project: runs from the CLI and from `dagster dev` are recorded here.
telemetry:
  enabled: false
run_coordinator:
  module: dagster.core.run_coordinator
  class: DefaultRunCoordinator
"""

def open_instance(home: Path | str) -> dg.DagsterInstance:
    """The project's Dagster instance (SQLite under ``home`` unless its dagster.yaml says otherwise)."""
    home = Path(home)
    home.mkdir(parents=True, exist_ok=True)
    config = home / "dagster.yaml"
    if not config.exists():
        config.write_text(DAGSTER_YAML)
    os.environ["DAGSTER_HOME"] = str(home)
    return dg.DagsterInstance.from_config(str(home))

def _window_of_key(partitions: dg.TimeWindowPartitionsDefinition, key: str) -> TimeWindow:
    tw = partitions.time_window_for_partition_key(key)
    return TimeWindow(to_utc(tw.start), to_utc(tw.end))

def fail_dead_runs(instance: dg.DagsterInstance) -> list[str]:
    """Mark as failed the CLI runs still recorded as running whose process, on this host, is gone
    (killed, out of memory): their intervals then show as failed, not as running forever."""
    host = socket.gethostname()
    failed = []
    for record in instance.get_run_records(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.STARTING])):
        run = record.dagster_run
        pid = run.tags.get(tags.PID_TAG)
        if run.tags.get(tags.HOST_TAG) != host or not (pid or "").isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
            continue
        except ProcessLookupError:
            pass
        except PermissionError:
            continue
        instance.report_run_failed(run, message=f"the process of this run (pid {pid}) died without finishing it")
        failed.append(run.run_id)
    return failed


def materialized_windows(instance: dg.DagsterInstance, key: dg.AssetKey, partitions: dg.TimeWindowPartitionsDefinition) -> list[TimeWindow]:
    """The intervals Dagster has recorded as materialized, merged into ranges."""
    keys = instance.get_materialized_partitions(key)
    windows = []
    for pk in keys:
        try:
            tw = partitions.time_window_for_partition_key(pk)
        except Exception:  # a key of an older partitions definition
            continue
        windows.append(TimeWindow(to_utc(tw.start), to_utc(tw.end)))
    return merge(windows)

def missing_upstream(
    instance: dg.DagsterInstance, project: Project, model: SqlModel, window: TimeWindow, translator: ModelTranslator
) -> list[str]:
    """Describe upstream intervals the window needs, lookback included, that Dagster has not recorded
    (backfills do not check intervals outside the range they run)."""
    problems = []
    for upstream in project.upstream_models(model):
        if not isinstance(upstream.kind, IncrementalByTimeRange):
            continue
        partitions = translator.get_partitions_def(upstream)
        assert isinstance(partitions, dg.TimeWindowPartitionsDefinition) and upstream.start is not None
        bound = input_bound(project, model.name, upstream.name)
        needed = window.widen(bound.before, bound.after) if bound is not None else window
        unit = upstream.unit
        need_start = max(floor(needed.start, unit), upstream.start)
        need_end = ceil(needed.end, unit)
        if upstream.end:
            need_end = min(need_end, upstream.end)
        if need_end <= need_start:
            continue
        gaps = subtract(TimeWindow(need_start, need_end), materialized_windows(instance, translator.get_asset_key(upstream), partitions))
        if gaps:
            problems.append(f"{upstream.name} is missing {', '.join(str(g) for g in gaps[:5])}" + (" ..." if len(gaps) > 5 else ""))
    return problems

ACTIVE_RUN_STATUSES = [
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
]

def pending_upstream_runs(
    instance: dg.DagsterInstance, project: Project, model: SqlModel, window: TimeWindow | None, translator: ModelTranslator, own_run_id: str
) -> list[str]:
    """Other runs, queued or running, that are rebuilding upstream data this run would read.

    A sensor or a user may launch an upstream re-run and its downstream runs together; the downstream
    must not read the upstream's old rows while the new ones are being written, so it waits for them.
    """
    keys = {translator.get_asset_key(u): u for u in project.upstream_models(model)}
    if not keys:
        return []
    pending = []
    for record in instance.get_run_records(filters=dg.RunsFilter(statuses=ACTIVE_RUN_STATUSES)):
        run = record.dagster_run
        if run.run_id == own_run_id:
            continue
        for key in set(run.asset_selection or ()) & set(keys):
            upstream = keys[key]
            start, end = run.tags.get(tags.RANGE_START_TAG), run.tags.get(tags.RANGE_END_TAG)
            partitions = translator.get_partitions_def(upstream)
            if window is not None and start and end and isinstance(partitions, dg.TimeWindowPartitionsDefinition):
                first = partitions.time_window_for_partition_key(start)
                last = partitions.time_window_for_partition_key(end)
                bound = input_bound(project, model.name, upstream.name)
                needed = window.widen(bound.before, bound.after) if bound is not None else window
                if not TimeWindow(to_utc(first.start), to_utc(last.end)).overlaps(needed):
                    continue
            pending.append(f"{upstream.name} in run {run.run_id[:8]} ({run.status.value.lower()})")
    return pending
