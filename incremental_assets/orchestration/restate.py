"""A restatement through Dagster: planned from what the instance records, run in-process as the CLI's
``run`` does (one run per window, each an atomic replacement of its intervals), or submitted as ONE
Dagster asset backfill (the models and exactly the partitions to recompute) that the daemon executes."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Callable

import dagster as dg
from dagster._core.definitions.assets.graph.asset_graph_subset import AssetGraphSubset
from dagster._core.execution.backfill import PartitionBackfill
from dagster._core.utils import make_new_backfill_id

from incremental_assets.model import clock
from incremental_assets.model.intervals import TimeWindow, batches, intervals, last_complete_end
from incremental_assets.model.sql_model import SqlModel
from incremental_assets.orchestration import tags
from incremental_assets.orchestration.instance import fail_dead_runs, materialized_windows
from incremental_assets.orchestration.partition_keys import time_partitions
from incremental_assets.orchestration.runner import _UNREAD, Runner, RunRecord, RunReport
from incremental_assets.orchestration.staleness import latest_id
from incremental_assets.plan.analyses import run_size
from incremental_assets.plan.restate import INTERVALS, REBUILD, Restatement, plan_restatement


def plan(runner: Runner, chosen: list[SqlModel], window: TimeWindow, now: datetime | None = None) -> Restatement:
    """The restatement of ``window`` of ``chosen``, against what the runner's instance has recorded."""
    translator, instance = runner.translator, runner.instance
    now = now or clock.now()

    def materialized(model: SqlModel):
        partitions = translator.get_partitions_def(model)
        if isinstance(partitions, dg.TimeWindowPartitionsDefinition):
            return materialized_windows(instance, translator.get_asset_key(model), partitions)
        return latest_id(instance, translator.get_asset_key(model)) is not None

    return plan_restatement(
        runner.project,
        chosen,
        window,
        available_end=lambda m: last_complete_end(now, m.unit, runner.project.settings.zone),
        materialized=materialized,
        built_with=runner.built_with,
    )


def execute(runner: Runner, restatement: Restatement, progress: Callable[[str], None] | None = None) -> RunReport:
    """Run the restatement in dependency order; a model whose run failed skips what reads it."""
    fail_dead_runs(runner.instance)
    report = RunReport()
    failed: set[str] = set()
    began = time.perf_counter()
    for item in restatement.models:
        model = item.model
        built = runner.built_with(model) if item.how == INTERVALS else None
        runs: list[TimeWindow | None] = (
            [part for w in item.windows for part in batches(w, model.unit, run_size(runner.project, model))]
            if item.how == INTERVALS
            else [None]
        )
        for window in runs:
            if failed & {model.name, *model.depends_on}:
                report.records.append(
                    RunRecord(model.name, window, False, "", 0.0, error="skipped: an upstream model failed")
                )
                failed.add(model.name)
                continue
            record = runner.run_window(
                model, window, rebuild=item.how == REBUILD, built_with=built if item.how == INTERVALS else _UNREAD
            )
            report.records.append(record)
            if not record.success:
                failed.add(model.name)
            if progress:
                where = (
                    str(window)
                    if window
                    else ("full (rebuilt from scratch, one commit)" if item.how == REBUILD else "full")
                )
                progress(
                    f"[{time.perf_counter() - began:.1f}s] {model.name} {where}: {'ok' if record.success else 'FAILED'}"
                    + (f", {record.rows:,} rows" if record.rows is not None else "")
                    + (f"\n    {record.error}" if record.error else "")
                )
    return report


def submit_backfill(runner: Runner, restatement: Restatement, title: str) -> str:
    """Submit the restatement as one Dagster asset backfill (the daemon runs it, upstreams first, each
    asset's partitions in runs as its backfill policy says); returns the backfill's id."""
    translator, instance = runner.translator, runner.instance
    subsets = {}
    whole = set()
    for item in restatement.models:
        key = translator.get_asset_key(item.model)
        partitions = translator.get_partitions_def(item.model)
        if item.how == INTERVALS:
            partitions = time_partitions(partitions, item.model.name)
            keys = [
                tags.partition_key(partitions, i.start) for w in item.windows for i in intervals(w, item.model.unit)
            ]
            subsets[key] = partitions.empty_subset().with_partition_keys(keys)
        else:
            whole.add(key)
    backfill = PartitionBackfill.from_asset_graph_subset(
        backfill_id=make_new_backfill_id(),
        backfill_timestamp=clock.wall_time().timestamp(),
        tags={},
        dynamic_partitions_store=instance,
        asset_graph_subset=AssetGraphSubset(  # type: ignore[call-arg]  # reason: mypy reads Dagster's `__hash__ = None` as a field
            partitions_subsets_by_asset_key=subsets, non_partitioned_asset_keys=whole
        ),
        title=title,
        description=None,
        run_config=None,
    )
    instance.add_backfill(backfill)
    return backfill.backfill_id
