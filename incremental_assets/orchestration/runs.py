"""Runs and status through Dagster: what the CLI does, recorded in the same instance as the UI's runs.

Interval status is Dagster's partition status (no second state store). A CLI ``run`` executes each
model's windows as in-process Dagster runs of the implicit asset job, upstreams first, so the Spark
session starts once per command and every run shows in the UI.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import dagster as dg

from incremental_assets import storage
from incremental_assets.errors import IncrementalAssetsError, WindowError
from incremental_assets.model import IncrementalByTimeRange, SqlModel
from incremental_assets.project import Project
from incremental_assets.time_window import (
    TimeWindow,
    batches,
    ceil,
    check_aligned,
    floor,
    format_instant,
    last_complete_end,
    merge,
    subtract,
    to_utc,
)
from incremental_assets.assets import ALLOW_DOWNGRADE_TAG, BUILT_WITH_TAG, REBUILD_TAG, materialized_windows
from incremental_assets.plan import change_effect, needs_rebuild, run_size
from incremental_assets.translator import ModelTranslator

DAGSTER_YAML = """\
# Dagster instance of this project: runs from the CLI and from `dagster dev` are recorded here.
telemetry:
  enabled: false
run_coordinator:
  module: dagster.core.run_coordinator
  class: DefaultRunCoordinator
"""

# What `status` shows of an unpartitioned model's last materialization.
STATUS_DETAILS = ("rows_written", "rows_inserted", "rows_updated", "rows_closed", "cursor_after", "delta_version")
QUIET_RUN_CONFIG = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}


def open_instance(home: Path | str) -> dg.DagsterInstance:
    """The project's Dagster instance (SQLite under ``home`` unless its dagster.yaml says otherwise)."""
    home = Path(home)
    home.mkdir(parents=True, exist_ok=True)
    config = home / "dagster.yaml"
    if not config.exists():
        config.write_text(DAGSTER_YAML)
    os.environ["DAGSTER_HOME"] = str(home)
    return dg.DagsterInstance.from_config(str(home))


# -- status -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelStatus:
    model: str
    partitioned: bool
    covered: tuple[TimeWindow, ...] = ()
    failed: tuple[TimeWindow, ...] = ()
    in_progress: tuple[TimeWindow, ...] = ()
    gaps: tuple[TimeWindow, ...] = ()
    expected: TimeWindow | None = None
    last_materialized: datetime | None = None
    intervals_done: int = 0
    intervals_expected: int = 0
    last_details: Mapping[str, str] = field(default_factory=dict)  # unpartitioned: rows, cursor, version of the last run
    changed: bool = False  # built with another definition: the next run rebuilds ``rebuild``
    rebuild: TimeWindow | None = None
    on_change: str | None = None  # a changed merge-style model: what its next run does (start over, or keep its rows)


def _window_of_key(partitions: dg.TimeWindowPartitionsDefinition, key: str) -> TimeWindow:
    tw = partitions.time_window_for_partition_key(key)
    return TimeWindow(to_utc(tw.start), to_utc(tw.end))


def model_status(
    instance: dg.DagsterInstance,
    model: SqlModel,
    *,
    translator: ModelTranslator | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    now: datetime | None = None,
    built_with: str | None = None,
) -> ModelStatus:
    """Covered ranges, gaps and failed intervals of a model, from Dagster's partition status.

    ``built_with`` is the fingerprint the table was built with: when it differs from the model's (and
    the model is not forward_only) the status says the model changed and which intervals the next run
    rebuilds; for a merge-style model it says what the next run does (start over, or keep its rows)."""
    translator = translator or ModelTranslator()
    key = translator.get_asset_key(model)
    partitions = translator.get_partitions_def(model)
    if not isinstance(partitions, dg.TimeWindowPartitionsDefinition):
        event = instance.get_latest_materialization_event(key)
        when = datetime.fromtimestamp(event.timestamp, timezone.utc) if event else None
        details: dict[str, str] = {}
        if event is not None and event.asset_materialization is not None:
            meta = event.asset_materialization.metadata
            details = {k: str(meta[k].value) for k in STATUS_DETAILS if k in meta}
        changed = built_with is not None and built_with != model.fingerprint
        on_change = change_effect(model) if changed and model.is_merge_style else None
        return ModelStatus(model.name, False, last_materialized=when, last_details=details, changed=changed, on_change=on_change)
    unit = model.interval_unit or "day"
    assert model.start is not None
    # Only whole intervals count: since is rounded up and until down to interval boundaries.
    start = max(model.start, ceil(since, unit)) if since else model.start
    end = last_complete_end(now or datetime.now(timezone.utc), unit)
    if model.end:
        end = min(end, model.end)
    if until:
        end = min(end, floor(until, unit))
    # Covered: intervals with a successful materialization, whose data is in the table. A later failed
    # attempt does not remove them (the failed run committed nothing); it is listed under failed.
    by_state: dict[str, list[TimeWindow]] = {"MATERIALIZED": [], "FAILED": [], "IN_PROGRESS": []}
    by_state["MATERIALIZED"] = [_window_of_key(partitions, pk) for pk in instance.get_materialized_partitions(key) if partitions.has_partition_key(pk)]
    keys = partitions.get_partition_keys()
    statuses = instance.get_status_by_partition(key, keys, partitions) or {}
    for pk, state in statuses.items():
        if state is not None and state.value in ("FAILED", "IN_PROGRESS"):
            by_state[state.value].append(_window_of_key(partitions, pk))
    expected = TimeWindow(start, end) if end > start else None

    def clip(ws: list[TimeWindow]) -> tuple[TimeWindow, ...]:
        out = []
        for w in merge(ws):
            if since and w.end <= start or until and w.start >= until:
                continue
            out.append(w)
        return tuple(out)

    covered = clip(by_state["MATERIALIZED"])
    gaps = tuple(subtract(expected, covered)) if expected else ()
    done = sum(1 for w in by_state["MATERIALIZED"] if expected is None or expected.contains(w))
    total = len(batches(expected, unit, 1)) if expected else 0
    changed = needs_rebuild(model, built_with)
    rebuild = None
    if changed and covered:
        rebuild = TimeWindow(model.start, max(covered[-1].end, expected.end if expected else covered[-1].end))
    return ModelStatus(
        model.name,
        True,
        changed=changed,
        rebuild=rebuild,
        covered=covered,
        failed=clip(by_state["FAILED"]),
        in_progress=clip(by_state["IN_PROGRESS"]),
        gaps=gaps,
        expected=expected,
        intervals_done=done,
        intervals_expected=total,
    )


# -- reconciliation: the Delta log against Dagster's records -------------------------------------

PID_TAG = "incremental_assets/pid"
HOST_TAG = "incremental_assets/host"


def fail_dead_runs(instance: dg.DagsterInstance) -> list[str]:
    """Mark as failed the CLI runs still recorded as running whose process, on this host, is gone
    (killed, out of memory): their intervals then show as failed, not as running forever."""
    host = socket.gethostname()
    failed = []
    for record in instance.get_run_records(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.STARTING])):
        run = record.dagster_run
        pid = run.tags.get(PID_TAG)
        if run.tags.get(HOST_TAG) != host or not (pid or "").isdigit() or int(pid) == os.getpid():
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
    uri = storage.table_uri(project.settings.warehouse, model.name)
    log = [c for c in storage.commits(uri) if c.model == model.name]
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
    latest: dict[str, storage.Commit] = {}
    for commit in log:
        if commit.window is None:  # a full rebuild replaced every interval
            latest.clear()
            continue
        for part in batches(commit.window, model.interval_unit or "day", 1):
            latest[_partition_key(partitions, part.start)] = commit
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
    uri = storage.table_uri(project.settings.warehouse, model.name)
    for item in found:
        meta = {
            "reconciled_from": f"Delta version {item.version}",
            "delta_version": item.version,
            "committed_by_run": item.run_id,
            "table_uri": dg.MetadataValue.path(uri),
        }
        for pk in item.partitions or (None,):
            instance.report_runless_asset_event(dg.AssetMaterialization(asset_key=key, partition=pk, metadata=meta))
    return found


# -- runs -------------------------------------------------------------------------------------


@dataclass
class RunRecord:
    model: str
    window: TimeWindow | None
    success: bool
    run_id: str
    seconds: float
    rows: int | None = None
    error: str | None = None


@dataclass
class RunReport:
    records: list[RunRecord] = field(default_factory=list)

    @property
    def success(self) -> bool:
        return all(r.success for r in self.records)


def _partition_key(partitions: dg.TimeWindowPartitionsDefinition, instant: datetime) -> str:
    return instant.astimezone(timezone.utc).strftime(partitions.fmt)


def windows_to_run(
    instance: dg.DagsterInstance,
    model: SqlModel,
    *,
    start: datetime | None,
    end: datetime | None,
    auto: bool,
    translator: ModelTranslator,
    now: datetime | None = None,
) -> list[TimeWindow]:
    """The windows one model should run: the requested one (aligned), or with ``auto`` its gaps."""
    assert isinstance(model.kind, IncrementalByTimeRange) and model.start is not None
    unit = model.interval_unit or "day"
    if auto:
        status = model_status(instance, model, translator=translator, since=start, until=end, now=now)
        return list(status.gaps)
    if start is None or end is None:
        raise WindowError(f"model {model.name} is incremental: give --start and --end, or --auto")
    window = TimeWindow(start, end)
    check_aligned(window, unit, model=model.name)
    lo = max(window.start, model.start)
    hi = min(window.end, model.end) if model.end else window.end
    return [TimeWindow(lo, hi)] if hi > lo else []


_UNREAD: Any = object()  # run_window's built_with when the caller has not read it


class Runner:
    """Launches in-process Dagster runs for models of one project against one instance."""

    def __init__(self, project: Project, instance: dg.DagsterInstance, defs: dg.Definitions, translator: ModelTranslator | None = None):
        self.project = project
        self.instance = instance
        self.defs = defs
        self.translator = translator or ModelTranslator()
        self.job = defs.resolve_implicit_global_asset_job_def()

    def built_with(self, model: SqlModel) -> str | None:
        return storage.built_with(storage.table_uri(self.project.settings.warehouse, model.name))

    def rebuild_window(self, model: SqlModel, end: datetime) -> TimeWindow | None:
        """[start, end) of a rebuild, stretched to every interval Dagster has recorded for the model."""
        partitions = self.translator.get_partitions_def(model)
        assert isinstance(partitions, dg.TimeWindowPartitionsDefinition) and model.start is not None
        recorded = materialized_windows(self.instance, self.translator.get_asset_key(model), partitions)
        end = max([end, *(w.end for w in recorded)])
        if model.end:
            end = min(end, model.end)
        return TimeWindow(model.start, end) if end > model.start else None

    def run_window(
        self, model: SqlModel, window: TimeWindow | None, *, allow_downgrade: bool = False, rebuild: bool = False, built_with: str | None = _UNREAD
    ) -> RunRecord:
        """One Dagster run of the model over ``window``; ``built_with`` is the table's fingerprint when the
        caller has already read it (the run then does not read it again; otherwise the run reads it)."""
        key = self.translator.get_asset_key(model)
        tags: dict[str, str] = {"incremental_assets/launched_by": "cli", PID_TAG: str(os.getpid()), HOST_TAG: socket.gethostname()}
        if allow_downgrade:
            tags[ALLOW_DOWNGRADE_TAG] = "true"
        if rebuild:
            tags[REBUILD_TAG] = "true"
        elif window is not None and model.is_incremental and built_with is not _UNREAD:
            tags[BUILT_WITH_TAG] = built_with or ""
        partitions = self.translator.get_partitions_def(model)
        if window is not None:
            assert isinstance(partitions, dg.TimeWindowPartitionsDefinition)
            last = batches(window, model.interval_unit or "day", 1)[-1]
            tags["dagster/asset_partition_range_start"] = _partition_key(partitions, window.start)
            tags["dagster/asset_partition_range_end"] = _partition_key(partitions, last.start)
        began = time.perf_counter()
        result = self.job.execute_in_process(
            instance=self.instance, asset_selection=[key], tags=tags, raise_on_error=False, run_config=QUIET_RUN_CONFIG
        )
        seconds = time.perf_counter() - began
        rows = None
        error = None
        for event in result.all_events:
            if event.event_type_value == "ASSET_MATERIALIZATION":
                meta = event.event_specific_data.materialization.metadata  # type: ignore[union-attr]
                if "rows_written" in meta:
                    rows = meta["rows_written"].value
            if event.is_step_failure:
                data = event.step_failure_data
                error = data.error.cause.message.strip() if data.error and data.error.cause else (data.error.message if data.error else "failed")
        return RunRecord(model.name, window, result.success, result.run_id, seconds, rows, error)

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
    ) -> RunReport:
        """Run each model (in the given, dependency order) over its windows; report every run.

        With ``full_refresh``, or when a model's definition changed since its table was built (and it
        is not forward_only), an incremental model is rebuilt from its start up to the requested end
        (at least every recorded interval) in ONE run whose commit replaces the whole table."""
        report = RunReport()
        plan: list[tuple[SqlModel, TimeWindow | None]] = []
        rebuilds: set[str] = set()
        built: dict[str, str | None] = {}  # the fingerprint each incremental model's table was built with, read once
        fail_dead_runs(self.instance)
        for model in models:
            reconciled = reconcile(self.instance, self.project, model, self.translator)
            for item in reconciled:
                if progress:
                    where = f"{len(item.partitions)} interval(s) in {item.window}" if item.partitions else "full table"
                    progress(f"{model.name}: recorded {where} from Delta version {item.version} (committed by run {item.run_id[:8]}, not recorded)")
            if reconciled and auto and not isinstance(model.kind, IncrementalByTimeRange):
                continue  # its last commit is the current query's output: nothing to redo
            if model.is_incremental and not full_refresh:
                built[model.name] = self.built_with(model)
            if model.is_incremental and (full_refresh or needs_rebuild(model, built[model.name])):
                unit = model.interval_unit or "day"
                until = end or last_complete_end(now or datetime.now(timezone.utc), unit)
                window = self.rebuild_window(model, ceil(until, unit))
                if window is not None:
                    plan.append((model, window))
                    rebuilds.add(model.name)
            elif isinstance(model.kind, IncrementalByTimeRange):
                for window in windows_to_run(self.instance, model, start=start, end=end, auto=auto, translator=self.translator, now=now):
                    analysis = self.project.analysis(model.name)
                    # A refused model run with allow_downgrade is one full rebuild, not a series of windows.
                    size = None if analysis is not None and analysis.refused else run_size(self.project, model)
                    plan.extend((model, part) for part in batches(window, model.interval_unit or "day", size))
            else:
                plan.append((model, None))
                if full_refresh and model.is_merge_style:
                    rebuilds.add(model.name)  # one run that starts over and replaces the whole table
        total_intervals = sum(len(batches(w, m.interval_unit or "day", 1)) if w else 1 for m, w in plan)
        done = 0
        rows = 0
        began = time.perf_counter()
        failed_models: set[str] = set()
        for model, window in plan:
            if model.name in failed_models or failed_models & set(model.depends_on):
                report.records.append(RunRecord(model.name, window, False, "", 0.0, error="skipped: an upstream model failed"))
                failed_models.add(model.name)
                continue
            record = self.run_window(
                model, window, allow_downgrade=allow_downgrade, rebuild=model.name in rebuilds, built_with=built.get(model.name, _UNREAD)
            )
            report.records.append(record)
            done += len(batches(window, model.interval_unit or "day", 1)) if window else 1
            rows += record.rows or 0
            if progress:
                state = "ok" if record.success else "FAILED"
                where = (str(window) if window else "full") + (" (rebuilt from start, one commit)" if model.name in rebuilds else "")
                progress(
                    f"[{done}/{total_intervals} intervals, {rows:,} rows, {time.perf_counter() - began:.1f}s] "
                    f"{model.name} {where}: {state}" + (f", {record.rows:,} rows" if record.rows is not None else "")
                    + (f"\n    {record.error}" if record.error else "")
                )
            if not record.success:
                # Later windows of this model and everything downstream would build on a hole: skip them.
                failed_models.add(model.name)
        return report


def rebuilt_upstreams(project: Project, model: SqlModel) -> list[str]:
    """Upstream models rebuilt from their start after this model's table was last written: its rows
    were computed from their old definition (Dagster flags this too, except for an unpartitioned model
    reading a partitioned one, which it does not track)."""
    built = storage.last_commit_ms(storage.table_uri(project.settings.warehouse, model.name))
    if built is None:
        return []
    return [u.name for u in project.upstream_models(model) if storage.rebuilt_since(storage.table_uri(project.settings.warehouse, u.name), built)]


def describe_windows(windows: Iterable[TimeWindow]) -> str:
    items = [str(w) for w in windows]
    return ", ".join(items) if items else "none"


def parse_instant(text: str | None, what: str) -> datetime | None:
    if text is None:
        return None
    try:
        return to_utc(text)
    except WindowError as exc:
        raise IncrementalAssetsError(f"--{what}: {exc}") from None


__all__ = ["ModelStatus", "Runner", "RunReport", "model_status", "open_instance", "windows_to_run", "format_instant"]
