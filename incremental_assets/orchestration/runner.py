"""Runs through Dagster: what the CLI does, recorded in the same instance as the UI's runs.

A CLI ``run`` executes each model's windows as in-process Dagster runs of the implicit asset job,
upstreams first, so the Spark session starts once per command and every run shows in the UI.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable, Sequence, overload

import dagster as dg

from incremental_assets import delta
from incremental_assets.errors import DamagedTableError, IncrementalAssetsError, WindowError
from incremental_assets.model import clock
from incremental_assets.model.intervals import (
    TimeWindow,
    batches,
    ceil,
    describe_windows,
    floor,
    last_complete_end,
    merge,
    subtract,
    to_utc,
)
from incremental_assets.model.kinds import IncrementalByTimeRange, ScdType2
from incremental_assets.model.project import Project
from incremental_assets.model.sql_model import SqlModel
from incremental_assets.orchestration import tags
from incremental_assets.orchestration.apply import apply_without_compute, current_plan
from incremental_assets.orchestration.instance import (
    fail_dead_runs,
    materialized_windows,
    register_table_pools,
)
from incremental_assets.orchestration.integrity import Integrity, check_model
from incremental_assets.orchestration.partition_keys import time_partitions
from incremental_assets.orchestration.reconcile import Reconciled, reconcile
from incremental_assets.orchestration.run_records import RunRecord, RunReport, progress_line, record_of_run, skipped
from incremental_assets.orchestration.source_watch import Observed, observe_sources
from incremental_assets.orchestration.staleness import stale_intervals, whole_table_current, why_current
from incremental_assets.orchestration.status import windows_to_run
from incremental_assets.orchestration.translator import ModelTranslator
from incremental_assets.plan.analyses import analysis_of, run_size, windows_independent
from incremental_assets.plan.rebuild import needs_rebuild

QUIET_RUN_CONFIG = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}


_UNREAD: Any = object()  # run_window's built_with when the caller has not read it


class Runner:
    """Launches in-process Dagster runs for models of one project against one instance."""

    def __init__(
        self,
        project: Project,
        instance: dg.DagsterInstance,
        defs: dg.Definitions,
        translator: ModelTranslator | None = None,
    ):
        self.project = project
        self.instance = instance
        self.defs = defs
        self.translator = translator or ModelTranslator()
        self.extra_tags: dict[str, str] = {}  # added to every run's tags (the environment a run builds in)
        register_table_pools(instance, project)

    def built_with(self, model: SqlModel) -> str | None:
        return delta.built_with(self.project.settings.table_location(model.name))

    def rebuild_window(self, model: SqlModel, end: datetime) -> TimeWindow | None:
        """[start, end) of a rebuild, stretched to every interval Dagster has recorded for the model."""
        partitions = self.translator.get_partitions_def(model)
        partitions = time_partitions(partitions, model.name)
        assert model.start is not None
        recorded = materialized_windows(self.instance, self.translator.get_asset_key(model), partitions)
        end = max([end, *(w.end for w in recorded)])
        if model.end:
            end = min(end, model.end)
        return TimeWindow(model.start, end) if end > model.start else None

    def run_window(
        self,
        model: SqlModel,
        window: TimeWindow | None,
        *,
        allow_downgrade: bool = False,
        rebuild: bool = False,
        built_with: str | None = _UNREAD,
        full_refresh: bool = False,
        end: datetime | None = None,
    ) -> RunRecord:
        """One Dagster run of the model over ``window`` (or up to ``end``, a unique-key model); ``built_with`` is
        the table's fingerprint when the caller has read it already (the run then does not read it again)."""
        key = self.translator.get_asset_key(model)
        run_tags: dict[str, str] = {
            tags.LAUNCHED_BY_TAG: "cli",
            tags.PID_TAG: str(os.getpid()),
            tags.HOST_TAG: socket.gethostname(),
            **self.extra_tags,
        }
        if allow_downgrade:
            run_tags[tags.ALLOW_DOWNGRADE_TAG] = "true"
        if rebuild:
            run_tags[tags.REBUILD_TAG] = "true"
        if full_refresh:
            run_tags[tags.FULL_REFRESH_TAG] = "true"
        if window is None and end is not None:
            run_tags[tags.END_TAG] = end.isoformat()
        if window is not None and model.is_incremental and built_with is not _UNREAD:
            run_tags[tags.BUILT_WITH_TAG] = built_with or ""
        partitions = self.translator.get_partitions_def(model)
        if window is not None:
            partitions = time_partitions(partitions, model.name)
            run_tags.update(tags.range_tags(partitions, window, model.unit))
        began = time.perf_counter()
        job = self.defs.resolve_implicit_global_asset_job_def().get_subset(  # none without assets: resolved here
            asset_selection={key}, asset_check_selection=set(self.defs.get_assets_def(key).check_keys)
        )  # not `in_table`
        result = job.execute_in_process(  # the run names its asset (history, status read it)
            instance=self.instance,
            asset_selection=[key],
            tags=run_tags,
            raise_on_error=False,
            run_config=QUIET_RUN_CONFIG,
        )
        return record_of_run(model.name, window, result, time.perf_counter() - began)

    def run(
        self,
        models: Sequence[SqlModel],
        *,
        start: datetime | None = None,
        end: datetime | None = None,
        auto: bool = False,
        now: datetime | None = None,
        progress: Callable[[str], None] | None = None,
        allow_downgrade: bool = False,
        full_refresh: bool = False,
        forward_only: bool = False,
    ) -> RunReport:
        """Run each model (in the given, dependency order) over its windows; report every run.

        With ``full_refresh``, or when a model's definition changed since its table was built (and it
        is not forward_only), an incremental model is rebuilt from its start up to the requested end
        (at least every recorded interval) in ONE run whose commit replaces the whole table.

        With ``auto`` or ``forward_only`` the plan's changes that recompute nothing are applied first
        (see :mod:`.apply`): metadata changes, and forward-only ones (every change of the selected
        models, with ``forward_only``): their built intervals are kept, new ones use the new definition."""
        fail_dead_runs(self.instance)
        observed = self._apply_and_observe(
            models, auto=auto, forward_only=forward_only, full_refresh=full_refresh, now=now, progress=progress
        )
        queue = self.plan_runs(
            models,
            start=start,
            end=end,
            auto=auto,
            now=now,
            progress=progress,
            full_refresh=full_refresh,
            observed=observed,
        )
        report = RunReport()
        total, done, rows = queue.intervals, 0, 0
        began = time.perf_counter()
        failed: dict[str, bool] = {}  # models that failed -> whether their later windows are skipped too
        for model in models:
            runs, stale = self._queued_windows(model, queue, auto, progress)
            total += stale
            for window in runs:
                if failed.get(model.name) or failed.keys() & set(model.depends_on):
                    report.records.append(skipped(model.name, window))
                    failed[model.name] = True
                    continue
                record = self._run_queued(model, window, queue, allow_downgrade, full_refresh, end)
                report.records.append(record)
                queue.ran.add(model.name)
                done += len(batches(window, model.unit, 1)) if window else 1
                rows += record.rows or 0
                if progress:
                    counts = f"[{done}/{total} intervals, {rows:,} rows, {time.perf_counter() - began:.1f}s]"
                    progress(progress_line(counts, model.name, window, model.name in queue.rebuilds, record))
                if not record.success:  # downstream would build on a hole: skipped, as SQLMesh does; later
                    # windows too when they build on this one (SQLMesh runs a model's other batches)
                    failed[model.name] = not windows_independent(self.project, model)
        return report

    def _queued_windows(
        self, model: SqlModel, queue: RunQueue, auto: bool, progress: Callable[[str], None] | None
    ) -> tuple[list[TimeWindow | None], int]:
        """The model's queued windows, and with ``auto`` those its upstreams' runs in this command made
        stale (a current unpartitioned model: one run if any upstream ran); how many intervals those add."""
        runs = [w for m, w in queue.runs if m.name == model.name]
        if model.name in queue.current:
            if set(model.depends_on) & queue.ran:
                return [None], 1
            if progress:
                progress(f"{model.name}: {why_current(model)}; not run again")
            return [], 0
        if not (auto and model.name not in queue.rebuilds and set(model.depends_on) & queue.ran):
            return runs, 0
        # Upstreams ran in this command: what they changed makes intervals of this model stale.
        extra = self.stale_windows(model, runs)
        return [*runs, *extra], sum(len(batches(w, model.unit, 1)) for w in extra)

    def _run_queued(
        self,
        model: SqlModel,
        window: TimeWindow | None,
        queue: RunQueue,
        allow_downgrade: bool,
        full_refresh: bool,
        end: datetime | None,
    ) -> RunRecord:
        """Run one window of the queue: as a rebuild when the queue says so, against the definition the
        table was found built with."""
        return self.run_window(
            model,
            window,
            allow_downgrade=allow_downgrade,
            rebuild=model.name in queue.rebuilds,
            built_with=queue.built.get(model.name, _UNREAD),
            full_refresh=full_refresh,
            end=end,
        )

    def _apply_and_observe(
        self,
        models: Sequence[SqlModel],
        *,
        auto: bool,
        forward_only: bool,
        full_refresh: bool,
        now: datetime | None,
        progress: Callable[[str], None] | None,
    ) -> Observed | None:
        """Before a command's runs: apply the plan's changes that recompute nothing (with ``auto`` or
        ``forward_only``), and with ``auto`` notice new and late source data; what was observed."""
        if (auto or forward_only) and not full_refresh:
            changes = current_plan(self.project, forward_only=forward_only)
            for line in apply_without_compute(
                self.project, self.instance, self.translator, changes, {m.name for m in models}
            ):
                if progress:
                    progress(line)
        if not auto or full_refresh:
            return None
        # New and late source data, noticed exactly as the automation sensor does (the same shared record).
        observed = observe_sources(self.instance, self.project, now or clock.now(), self.translator)
        for line in observed.notes:
            if progress:
                progress(line)
        return observed

    def stale_windows(self, model: SqlModel, planned: list[TimeWindow | None]) -> list[TimeWindow]:
        """Intervals of an incremental model made stale by upstream materializations, not already planned,
        cut to the model's run size (an unpartitioned model runs whole anyway)."""
        if not isinstance(model.kind, IncrementalByTimeRange):
            return []
        stale = stale_intervals(self.instance, self.project, model, self.translator)
        todo = [part for w in stale.windows for part in subtract(w, [p for p in planned if p is not None])]
        return [part for w in merge(todo) for part in batches(w, model.unit, run_size(self.project, model))]

    def plan_runs(
        self,
        models: Sequence[SqlModel],
        *,
        start: datetime | None,
        end: datetime | None,
        auto: bool,
        now: datetime | None,
        progress: Callable[[str], None] | None,
        full_refresh: bool,
        observed: Observed | None = None,
    ) -> "RunQueue":
        """The runs a command launches, in order: per model its windows (cut to its run size), or one
        rebuild from its start, or one unpartitioned run. Commits Dagster missed are recorded first."""
        queue = RunQueue()
        for model in models:
            reconciled = self._reconcile(model, progress)
            if reconciled and auto and not isinstance(model.kind, IncrementalByTimeRange):
                continue  # its last commit is the current query's output: nothing to redo
            integrity = self.check_integrity(model)
            if model.is_incremental and not full_refresh:
                queue.built[model.name] = self.built_with(model)
            if model.is_incremental and (full_refresh or needs_rebuild(model, queue.built[model.name])):
                until = end or last_complete_end(now or clock.now(), model.unit, self.project.settings.zone)
                window = self.rebuild_window(model, ceil(until, model.unit))
                if window is not None:
                    queue.runs.append((model, window))
                    queue.rebuilds.add(model.name)
                self.say_lost(model, integrity, None if window is not None else [], progress)
            elif isinstance(model.kind, IncrementalByTimeRange):
                analysis = analysis_of(self.project, model.name)
                # A refused model run with allow_downgrade is one full rebuild, not a series of windows.
                size = None if analysis is not None and analysis.refused else run_size(self.project, model)
                windows = windows_to_run(
                    self.instance,
                    model,
                    start=start,
                    end=end,
                    auto=auto,
                    translator=self.translator,
                    now=now,
                    lost=integrity.lost,
                    tz=self.project.settings.zone,
                )
                if auto:
                    windows = self._with_stale_and_late(model, windows, observed, start, end, now, progress)
                self.say_lost(model, integrity, windows, progress)
                for window in windows:
                    queue.runs.extend((model, part) for part in batches(window, model.unit, size))
            elif (
                auto and not full_refresh and integrity.ok and self._whole_current(model, observed, now or clock.now())
            ):
                queue.current.add(model.name)  # runs only if an upstream runs in this command
            else:
                self._plan_whole(queue, model, integrity, full_refresh, progress)
        return queue

    def _plan_whole(
        self,
        queue: "RunQueue",
        model: SqlModel,
        integrity: Integrity,
        full_refresh: bool,
        progress: Callable[[str], None] | None,
    ) -> None:
        """One run of an unpartitioned or merge-style model, which starts over when asked or when its table
        lost rows (not SCD type 2: its history cannot be rebuilt)."""
        self.say_lost(model, integrity, None, progress)
        queue.runs.append((model, None))
        lost_rows = (
            integrity.whole_table and integrity.table_version is not None and not isinstance(model.kind, ScdType2)
        )
        if (full_refresh or lost_rows) and model.is_merge_style:
            queue.rebuilds.add(model.name)  # one run that starts over and replaces the whole table

    def _whole_current(self, model: SqlModel, observed: Observed | None, now: datetime) -> bool:
        """Whether an unpartitioned model's table is current (see :func:`.staleness.whole_table_current`)."""
        pending = observed is None or bool(observed.pending.get(model.name))
        return whole_table_current(self.instance, self.project, model, self.translator, pending, now)

    def _reconcile(self, model: SqlModel, progress: Callable[[str], None] | None) -> list[Reconciled]:
        """Record the commits of ``model``'s table Dagster missed, saying each; what was recorded."""
        try:
            reconciled = reconcile(self.instance, self.project, model, self.translator)
        except DamagedTableError as exc:
            raise exc.of_model(model.name) from None
        for item in reconciled:
            if progress:
                where = f"{len(item.partitions)} interval(s) in {item.window}" if item.partitions else "full table"
                progress(
                    f"{model.name}: recorded {where} from Delta version {item.version} (committed by "
                    f"run {item.run_id[:8]}, not recorded)"
                )
        return reconciled

    def _with_stale_and_late(
        self,
        model: SqlModel,
        windows: list[TimeWindow],
        observed: Observed | None,
        start: datetime | None,
        end: datetime | None,
        now: datetime | None,
        progress: Callable[[str], None] | None,
    ) -> list[TimeWindow]:
        """``windows`` with the model's stale intervals and those late source data reached, merged."""
        late = self.late_windows(model, observed, start, end, now, windows, progress)
        stale = stale_intervals(self.instance, self.project, model, self.translator).windows
        return merge([*windows, *stale, *late])

    def late_windows(
        self,
        model: SqlModel,
        observed: Observed | None,
        start: datetime | None,
        end: datetime | None,
        now: datetime | None,
        missing: list[TimeWindow],
        progress: Callable[[str], None] | None,
    ) -> list[TimeWindow]:
        """Complete intervals of the model within the command's range that new source data touched (planned
        like missing intervals); those computed before (not ``missing``) are said."""
        if observed is None:
            return []
        unit = model.unit
        limit = last_complete_end(now or clock.now(), unit, self.project.settings.zone)
        if end is not None:
            limit = min(limit, floor(end, unit))
        late = observed.windows(model, ceil(start, unit) if start is not None else None, limit)
        again = merge([part for w in late for part in subtract(w, missing)])
        if again and progress:
            progress(f"{model.name}: new source data in {describe_windows(again)} since computed; computing again")
        return late

    def check_integrity(self, model: SqlModel) -> Integrity:
        """What the model's table lacks of what Dagster recorded (said by :meth:`say_lost` once planned)."""
        try:
            return check_model(self.instance, self.project, model, self.translator)
        except DamagedTableError as exc:
            raise exc.of_model(model.name) from None

    @staticmethod
    def say_lost(
        model: SqlModel, found: Integrity, planned: list[TimeWindow] | None, progress: Callable[[str], None] | None
    ) -> None:
        """Say what the table lacks: "computing again" only for what this command runs (``planned``: its
        windows of the model; None: the whole model), the rest as advice."""
        if progress is None or found.ok:
            return
        problems = "; ".join(found.problems)
        if planned is None:
            where = describe_windows(found.lost) if found.lost else "its rows"
            progress(f"{model.name}: recorded but not in its table: {where} ({problems}); computing again")
            return
        covered = [
            part
            for w in found.lost
            for p in planned
            for part in ([TimeWindow(max(w.start, p.start), min(w.end, p.end))] if w.overlaps(p) else [])
        ]
        rest = [part for w in found.lost for part in subtract(w, planned)]
        if covered:
            progress(
                f"{model.name}: recorded but not in its table: {describe_windows(merge(covered))} "
                f"({problems}); computing again"
            )
        if rest or not found.lost:
            where = describe_windows(merge(rest)) if rest else "its rows"
            progress(
                f"{model.name}: recorded but not in its table: {where} ({problems}); not computed by this "
                f"command: {found.advice()}"
            )


@dataclass
class RunQueue:
    """What one command will run, in order, and which of those runs rebuild their model from its start."""

    runs: list[tuple[SqlModel, TimeWindow | None]] = field(default_factory=list)
    rebuilds: set[str] = field(default_factory=set)
    ran: set[str] = field(default_factory=set)  # models that ran in this command
    current: set[str] = field(default_factory=set)  # unpartitioned models nothing they read changed for yet
    built: dict[str, str | None] = field(
        default_factory=dict
    )  # fingerprint each incremental table was built with, read once

    @property
    def intervals(self) -> int:
        return sum(len(batches(w, m.unit, 1)) if w else 1 for m, w in self.runs)


@overload
def parse_instant(text: str, what: str) -> datetime: ...
@overload
def parse_instant(text: None, what: str) -> None: ...
def parse_instant(text: str | None, what: str) -> datetime | None:
    if text is None:
        return None
    try:
        return to_utc(text)
    except WindowError as exc:
        raise IncrementalAssetsError(f"--{what}: {exc}") from None
