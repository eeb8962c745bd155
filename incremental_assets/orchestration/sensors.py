"""One automation sensor keeps the whole project correct as data arrives and definitions change.

On every tick it decides, for every model in dependency order, what must be (re)computed:

- complete intervals that are missing (new hours, a day without rows: an empty interval is ordinary);
- intervals touched by new or late source data (new Delta versions, new files), lookback included;
- intervals made stale by an upstream interval materialized again after them (late data re-ran it, or
  the upstream was rebuilt because its definition changed), see :mod:`.staleness`;
- the whole model, rebuilt from its start, when its definition changed since its table was built;
  changes that recompute nothing (metadata, forward-only) are applied without a run (see :mod:`.apply`).

An interval is requested only when every upstream interval it reads is settled: materialized and not
about to change or being changed, or computed before it in the same run. Otherwise it waits, and the
tick says what for; it is never launched to fail. Where the project's queue allows it (see
:func:`.run_coordinator.runs_may_follow`), an interval of another partitions definition that waits only for
runs this tick requests is requested with them, in a run of its own that waits for theirs: it does not
wait for the next tick. Intervals already queued or running are not requested
again, and a failed interval is not retried until something it depends on changes. However many sources
change in one tick, each (model, interval) is requested once: one run per partitions definition and
contiguous range, holding every model launched over it (see :mod:`.run_groups`).

What new source data touched is read and kept by :func:`.source_watch.observe_sources`, in the Dagster
instance, the same for ``run --auto`` and the schedules; the cursor (JSON) keeps only which changed
definitions were reported. A cursor of an older version (its per-source watermarks and pending windows)
is taken over into that record on the first tick.
"""

from __future__ import annotations

import functools
import hashlib
import time
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Hashable, Mapping, Sequence

import dagster as dg

from incremental_assets import delta
from incremental_assets.model import clock
from incremental_assets.model.intervals import (
    EVERY_INTERVAL,
    NO_INTERVAL,
    START_OF_TIME,
    Coverage,
    TimeWindow,
    last_complete_end,
    subtract,
    to_utc,
)
from incremental_assets.model.kinds import IncrementalByTimeRange
from incremental_assets.model.project import Project
from incremental_assets.model.settings import CLOCK_ENV, read_env_settings
from incremental_assets.model.sql_model import SqlModel
from incremental_assets.orchestration.apply import apply_without_compute, current_plan
from incremental_assets.orchestration.code_reload import own_code_server, request_reload
from incremental_assets.orchestration.decisions import (
    AutomationCursor,
    Decision,
    ModelDecision,
    Upstreams,
    Wanted,
)
from incremental_assets.orchestration.instance import fail_dead_runs, materialized_windows
from incremental_assets.orchestration.live import LiveProject, active_runs, change_categories, changed_marks
from incremental_assets.orchestration.partition_keys import failed_and_running, time_partitions
from incremental_assets.orchestration.reads import following_upstream_runs, intervals_reading, overlaps
from incremental_assets.orchestration.run_coordinator import runs_may_follow
from incremental_assets.orchestration.run_groups import Launch, group_jobs, run_requests
from incremental_assets.orchestration.schedules import model_jobs
from incremental_assets.orchestration.source_watch import Observed, observe_sources
from incremental_assets.orchestration.staleness import cron_reason, latest_id, stale_intervals
from incremental_assets.orchestration.tick_watch import TickWatch, from_daemon, watched_plan
from incremental_assets.orchestration.translator import ModelTranslator
from incremental_assets.orchestration.watch import hold_runs, watch_tables
from incremental_assets.plan.rebuild import definition_changed, needs_rebuild

SENSOR_NAME = "incremental_assets_automation"
SENSOR_DESCRIPTION = (
    "Keeps every model up to date: missing complete intervals, new and late source data, upstream "
    "intervals materialized again, changed definitions (edited model files are seen on the next "
    "tick, without reloading the code location); each interval once, upstreams first"
)


# -- what each model needs, and what it waits for -----------------------------------------------------


def _failed_windows(
    instance: dg.DagsterInstance, key: dg.AssetKey, partitions: dg.TimeWindowPartitionsDefinition
) -> Coverage:
    return Coverage.of(failed_and_running(instance, key, partitions)[0])


def _run_key(model: SqlModel, window: TimeWindow | None, reasons: Sequence[str], input_versions: list[str]) -> str:
    token = hashlib.sha256("|".join([model.fingerprint, *sorted(reasons), *input_versions]).encode()).hexdigest()[:12]
    where = f"{window.start.isoformat()}..{window.end.isoformat()}" if window else "full"
    return f"{model.name}:{where}:{token}"


def _joinable_group(waits: Sequence[str], upstreams: Upstreams) -> tuple[dg.PartitionsDefinition, TimeWindow] | None:
    """The run a whole-table model joins: the one run this tick that computes every upstream it waits
    for, all they lack (None: there is none, it waits)."""
    groups = {launch.group for name in waits for launch in upstreams.launching.get(name, ())}
    if len(groups) != 1 or None in groups:
        return None
    (group,) = groups
    for name in waits:
        launches = upstreams.launching.get(name, ())
        windows = [launch.window for launch in launches]
        launched = Coverage.of(w for w in windows if w is not None)
        if not launches or (upstreams.unsettled.get(name, NO_INTERVAL).minus(launched) and None not in windows):
            return None
    return group


@dataclass(frozen=True)
class Tick:
    """What one tick reads (the instance, what new source data touched, the queued and running runs, the
    plan's category of each changed model), and each model's decision from it and from its upstreams'."""

    instance: dg.DagsterInstance
    project: Project
    translator: ModelTranslator
    now: datetime
    observed: Observed
    active: Mapping[str, Coverage]
    categories: Mapping[str, str]
    chain: bool = False  # requests may wait in their runs for upstream runs of the same tick

    def decide(self, model: SqlModel, upstreams: Upstreams) -> ModelDecision:
        if isinstance(model.kind, IncrementalByTimeRange):
            return self._partitioned(model, upstreams)
        return self._unpartitioned(model, upstreams)

    def _partitioned(self, model: SqlModel, upstreams: Upstreams) -> ModelDecision:
        assert model.start is not None
        end = (
            min(last_complete_end(self.now, model.unit, self.project.settings.zone), model.end)
            if model.end
            else last_complete_end(self.now, model.unit, self.project.settings.zone)
        )
        empty = latest_id(self.instance, self.translator.get_asset_key(model)) is None
        if end <= model.start:
            return ModelDecision(never_materialized=empty)
        running = self.active.get(model.name, NO_INTERVAL)
        if running.every:
            return ModelDecision(changing=EVERY_INTERVAL, unsettled=EVERY_INTERVAL, never_materialized=empty)
        wanted = self._wanted(model, TimeWindow(model.start, end))
        desired = wanted.intervals.minus(running)
        # Intervals that read upstream intervals about to change will change too: their downstream waits.
        predicted, changing_upstreams = intervals_reading(
            self.project, model, upstreams.changing, frozenset(), upstreams.doing
        )
        predicted = predicted.within(TimeWindow(START_OF_TIME, end))
        joined = NO_INTERVAL if wanted.rebuild else self._joined(model, desired.union(predicted), running, upstreams)
        following, follows = (
            following_upstream_runs(
                self.project, model, desired.union(predicted).minus(running).minus(joined), upstreams
            )
            if self.chain and not wanted.rebuild
            else (NO_INTERVAL, ())
        )
        decided = ModelDecision(
            notes=wanted.notes,
            changes=wanted.changes,
            never_materialized=empty,
            changing=desired.union(running, predicted),
            unsettled=wanted.missing.union(desired, running, predicted),
        )
        if desired or joined or following:
            return self._launch(model, desired, wanted, upstreams, decided, joined, (following, follows))
        if not predicted or model.name in upstreams.doing:
            return decided
        names = ", ".join(u.name for u in self.project.upstream_models(model) if upstreams.changing.get(u.name))
        return replace(
            decided, waiting=(f"{model.name} waits for {'; '.join(changing_upstreams)}",), doing=f"waits for {names}"
        )

    def _wanted(self, model: SqlModel, expected: TimeWindow) -> Wanted:
        """What ``model`` needs computed in ``expected`` (from its start to its last complete interval)."""
        key = self.translator.get_asset_key(model)
        partitions = self.translator.get_partitions_def(model)
        partitions = time_partitions(partitions, model.name)
        missing = Coverage.of(subtract(expected, materialized_windows(self.instance, key, partitions)))
        built = delta.built_with(self.project.settings.table_location(model.name))
        if needs_rebuild(model, built):
            return Wanted(
                missing,
                Coverage.of([expected]),
                (f"definition changed: rebuilt from {expected.start.date()}",),
                rebuild=True,
            )
        changes = (
            (self._changed_line(model, "applies to new intervals only (forward_only)"),)
            if definition_changed(model, built)
            else ()
        )
        failed = _failed_windows(self.instance, key, partitions) if missing else NO_INTERVAL
        gaps = missing.minus(failed)
        stale = stale_intervals(self.instance, self.project, model, self.translator)
        pending = self.observed.windows(model, end=expected.end)
        reasons = ["missing intervals"] if gaps else []
        reasons += [f"upstream {', '.join(stale.causes)} changed"] if stale.windows else []
        reasons += ["new source data"] if pending else []
        failed_lines = [
            f"{model.name}: failed {', '.join(str(w) for w in failed.windows[:3])} not retried until an input changes"
        ]
        intervals = gaps.union(Coverage.of([*stale.windows, *pending]))
        return Wanted(missing, intervals, tuple(reasons), notes=tuple(failed_lines if failed else ()), changes=changes)

    def _joined(self, model: SqlModel, needed: Coverage, running: Coverage, upstreams: Upstreams) -> Coverage:
        """The windows upstreams of ``model`` launch this tick in runs ``model`` can join: runs of its own
        partitions definition over a window it needs whole, where every other upstream interval it reads is
        settled (Dagster runs the upstream steps first)."""
        partitions = self.translator.get_partitions_def(model)
        windows = {
            launch.window
            for u in self.project.upstream_models(model)
            for launch in upstreams.launching.get(u.name, ())
            if launch.group is not None and launch.group[0] == partitions and launch.window is not None
        }
        joined = []
        for window in sorted(windows, key=lambda w: w.start):
            whole = Coverage.of([window])
            if whole.minus(needed) or overlaps(whole, running):
                continue
            in_run = {
                u.name
                for u in self.project.upstream_models(model)
                if any(launch.group == (partitions, window) for launch in upstreams.launching.get(u.name, ()))
            }
            unsettled = {n: c.minus(whole) if n in in_run else c for n, c in upstreams.unsettled.items()}
            blocked, _ = intervals_reading(
                self.project, model, unsettled, upstreams.never_materialized - in_run, upstreams.doing
            )
            if not overlaps(whole, blocked):
                joined.append(window)
        return Coverage.of(joined)

    def _launch(
        self,
        model: SqlModel,
        desired: Coverage,
        wanted: Wanted,
        upstreams: Upstreams,
        decided: ModelDecision,
        joined: Coverage = NO_INTERVAL,
        following: tuple[Coverage, tuple[str, ...]] = (NO_INTERVAL, ()),
    ) -> ModelDecision:
        """The runs of the desired intervals whose upstream intervals are settled, of the windows joining
        an upstream's run (``joined``), and of the intervals following upstream runs of this tick (runs of
        their own that wait for those, see :func:`.reads.following_upstream_runs`); the others wait."""
        blocked, waits = intervals_reading(
            self.project, model, upstreams.unsettled, upstreams.never_materialized, upstreams.doing
        )
        alone = desired.minus(blocked).minus(joined)
        after, follows = following
        chained = after.minus(alone).minus(joined)
        launch = alone.union(joined, chained)
        held = desired.minus(launch)
        waiting = (
            (f"{model.name} {', '.join(str(w) for w in held.windows[:3])} waits for {'; '.join(waits)}",)
            if held
            else ()
        )
        doing = "waits for its upstreams" if held and model.name not in upstreams.doing else None
        if launch:
            doing = (
                "rebuild requested" if wanted.rebuild else f"requested {', '.join(str(w) for w in launch.windows[:3])}"
            )
        input_versions = self._input_versions(model) if launch else []
        partitions = self.translator.get_partitions_def(model)
        launches = []
        for window in [*alone, *joined]:
            reasons = wanted.reasons if window in alone.windows else (*wanted.reasons, "upstream in the same run")
            key = _run_key(model, window, reasons, input_versions)
            group = None if wanted.rebuild or partitions is None else (partitions, window)
            launches.append(Launch(model.name, window, tuple(reasons), key, group, joins=window not in alone.windows))
        names = " and ".join(follows)
        for window in chained:
            reasons = (
                *(wanted.reasons or (f"upstream {names} changes",)),
                f"after the run of {names} requested with it",
            )
            key = _run_key(model, window, reasons, input_versions)
            launches.append(Launch(model.name, window, reasons, key, None, follows=follows))
        changes = decided.changes
        if wanted.rebuild:
            changes += (
                self._changed_line(model, "rebuild requested" if launch else "rebuild waits for its upstreams"),
            )
        return replace(
            decided, launches=tuple(launches), launched=launch, waiting=waiting, changes=changes, doing=doing
        )

    def _unpartitioned(self, model: SqlModel, upstreams: Upstreams) -> ModelDecision:
        if not model.has_table:
            return ModelDecision()  # a plain view or an embedded model: nothing to compute
        if self.active.get(model.name):
            return ModelDecision(changing=EVERY_INTERVAL, unsettled=EVERY_INTERVAL)
        reasons = []
        empty = latest_id(self.instance, self.translator.get_asset_key(model)) is None
        if empty:
            reasons.append("never materialized")
        changed = definition_changed(model, delta.built_with(self.project.settings.table_location(model.name)))
        if changed:
            reasons.append("definition changed")
        stale = stale_intervals(self.instance, self.project, model, self.translator)
        if stale.causes:
            reasons.append(f"upstream {', '.join(stale.causes)} changed")
        if self.observed.pending.get(model.name):
            reasons.append("new source data")
        if not empty and (ticked := cron_reason(self.instance, self.project, model, self.translator, self.now)):
            reasons.append(ticked)
        # A whole-table model reads what its upstreams hold: it waits only for those about to change (and
        # will change itself once they have).
        never = upstreams.never_materialized
        waits = [
            u.name for u in self.project.upstream_models(model) if upstreams.changing.get(u.name) or u.name in never
        ]
        whole = EVERY_INTERVAL if waits or reasons else NO_INTERVAL
        group = _joinable_group(waits, upstreams)
        if group is not None:
            waits, reasons = [], [*reasons, "upstream in the same run"]
        decided = ModelDecision(
            changing=whole,
            unsettled=whole,
            never_materialized=empty,
            doing=f"waits for {', '.join(waits)}" if waits else None,
        )
        if waits:
            said = [
                f"{u}: {upstreams.doing[u]}" if u in upstreams.doing else (f"{u} (no data yet)" if u in never else u)
                for u in waits
            ]
            line = f"{model.name} waits for {'; '.join(said)}" + (f" ({'; '.join(reasons)})" if reasons else "")
            changes = (self._changed_line(model, "run waits for its upstreams"),) if changed else ()
            return replace(decided, waiting=(line,), changes=changes)
        if not reasons:
            return decided
        key = _run_key(model, None, reasons, self._input_versions(model))
        launch = Launch(model.name, None, tuple(reasons), key, group, joins=group is not None)
        changes = (self._changed_line(model, "run requested"),) if changed else ()
        return replace(decided, launches=(launch,), launched=EVERY_INTERVAL, changes=changes, doing="run requested")

    def _input_versions(self, model: SqlModel) -> list[str]:
        """What a run of ``model`` reads, as of now (each upstream's latest materialization, each source's
        watermark): a run key changes when any of them does."""
        latest = [
            f"{u.name}@{latest_id(self.instance, self.translator.get_asset_key(u))}"
            for u in self.project.upstream_models(model)
        ]
        return latest + [f"{s}={self.observed.markers.get(s)}" for s in model.depends_on if s in self.project.sources]

    def _changed_line(self, model: SqlModel, what: str) -> str:
        return f"{model.name} changed ({self.categories.get(model.name) or 'definition'}): {what}"


def evaluate(
    project: Project,
    translator: ModelTranslator,
    instance: dg.DagsterInstance,
    cursor_text: str | None,
    now: datetime,
    *,
    categories: dict[str, str] | None = None,
    served: set[str] | None = None,
    jobs: set[str] | None = None,
    chain: bool = False,
) -> Decision:
    """Decide one tick (reading the instance and the sources). The plan's changes that recompute nothing
    (metadata, ``forward_only`` models) are applied first, as ``run --auto`` does. ``categories``: the
    plan's category of each changed model; ``served``: the models the running code location has (None:
    all), a model only the edited files have waits for the code location to reload; ``jobs``: the
    code location's jobs for runs of several models (None: those of ``project``); ``chain``: a model may be
    requested with the upstream runs it waits for (its run waits for them, see
    :func:`.reads.following_upstream_runs`)."""
    cursor, note = AutomationCursor.parse(cursor_text)
    decision = Decision(cursor=cursor)
    if note:
        decision.notes.append(note)
    decision.notes += apply_without_compute(project, instance, translator, current_plan(project))
    # Lost intervals the look at the tables' integrity found are computed again as new data's are: they go
    # to the record shared with `run --auto` with what new source data touched (an older cursor's too).
    damaged = watch_tables(instance, project, translator, cursor, decision)
    observed = observe_sources(
        instance, project, now, translator, legacy_sources=cursor.sources, legacy_pending=cursor.pending
    )
    cursor.sources, cursor.pending = {}, {}
    decision.notes += observed.notes
    active, doing = active_runs(instance, project, translator)
    decision.running += [f"{name}: {what}" for name, what in doing.items()]
    tick = Tick(instance, project, translator, now, observed, active, dict(categories or {}), chain)
    upstreams = Upstreams(doing=dict(doing))
    for model in project.ordered():
        decided = tick.decide(model, upstreams)
        decision.add(model.name, decided)
        upstreams = upstreams.after(model.name, decided)
    hold_runs(project, translator, decision, damaged)
    if served is not None:
        new = sorted({n for n in decision.launched if n not in served})
        for name in new:
            del decision.launched[name]
            decision.waiting.append(f"{name} is new: waits for the code location to reload")
    # A run that would have held a model left out (a damaged table, a model the code location lacks) is
    # not launched: the others in it wait for the next tick, and so do the runs that would have followed it.
    held = {launch.group for launch in decision.launches if launch.model not in decision.launched}
    decision.launches = [launch for launch in decision.launches if launch.model in decision.launched]
    decision.launches = [launch for launch in decision.launches if launch.group is None or launch.group not in held]
    roots = {launch.model for launch in decision.launches if not launch.follows}
    decision.launches = [launch for launch in decision.launches if set(launch.follows) <= roots]
    decision.requests = run_requests(project, translator, decision.launches, jobs)
    return decision


def _tick_time() -> datetime:
    """The instant a tick plans for: the clock, unless the settings pin one (``@PATH``: the instant in that
    file, read every tick)."""
    given = read_env_settings().clock or ""
    given = Path(given[1:]).read_text().strip() if given.startswith("@") else given
    return to_utc(given) if given else clock.now()


# How far a pinned clock may run ahead of the machine's before the sensor refuses it (clocks drift apart).
CLOCK_AHEAD_SECONDS = 60


def _clock_ahead(now: datetime) -> str | None:
    """Why a tick cannot plan for ``now``: a pinned clock ahead of the machine's. Dagster's partitions end
    at the machine's clock, so the runs of later intervals would fail, and be requested again each tick."""
    wall = clock.wall_time()
    if (now - wall).total_seconds() <= CLOCK_AHEAD_SECONDS:
        return None
    return (
        f"{CLOCK_ENV} is {now.isoformat()}, ahead of this machine's clock ({wall.isoformat(timespec='seconds')}): "
        "Dagster has no partitions after the machine's clock, so nothing is launched; "
        f"fix: set {CLOCK_ENV} to an instant in the past (it is for replaying a past day), or unset it"
    )


def _reload_definitions() -> str:
    """Ask this code location's server to reload the definitions after model files were edited; what
    to tell the user."""
    server = own_code_server()
    if server is not None:
        request_reload(server)
        return f"model files edited: planned from the files; {server} asked to reload the definitions"
    return 'model files edited: planned from the files; the UI shows the new definitions after "Reload definitions"'


class _Planner:
    """The sensor's look at the project, each time it is asked: the runs to request and the cursor."""

    def __init__(self, project: Project, translator: ModelTranslator, jobs: set[str]):
        self.live, self.translator, self.jobs = LiveProject(project), translator, jobs
        self.served = set(project.models)
        self.reload_asked: set[str] = set()
        self.last_look: Mapping[str, Hashable] = {}  # a daemon's tick's last look (see .tick_watch)

    def plan(self, context: dg.SensorEvaluationContext, cursor_text: str | None) -> tuple[dg.SensorResult, bool]:
        """One look; whether the project loaded (if not, there is nothing to watch for)."""
        now = _tick_time()
        for run_id in fail_dead_runs(context.instance):  # a killed CLI run's intervals are failed, not running
            context.log.info(f"run {run_id} was left running by a process that died: marked failed")
        current, errors, edited = self.live.current()
        if current is None:
            cursor, _ = AutomationCursor.parse(cursor_text)
            summary = "the edited project does not load, nothing is launched until it does: " + "; ".join(errors)
            context.log.warning(summary)
            return dg.SensorResult(skip_reason=summary[:2000], cursor=cursor.dump()), False
        notes = []
        if edited and self.live.seen not in self.reload_asked:
            self.reload_asked.add(self.live.seen)
            notes.append(_reload_definitions())
        changes = change_categories(current)
        decision = evaluate(
            current,
            self.translator,
            context.instance,
            cursor_text,
            now,
            categories={n: c.category for n, c in changes.items()},
            served=self.served,
            jobs=self.jobs,
            chain=runs_may_follow(context.instance),
        )
        decision.notes += notes
        events = changed_marks(current, self.translator, changes, decision.cursor.changed, self.served)
        for line in decision.changes + decision.running + decision.waiting + decision.notes:
            context.log.info(line)
        cursor_out, events = decision.cursor.dump(), events + decision.events
        if decision.requests:
            return dg.SensorResult(run_requests=decision.requests, cursor=cursor_out, asset_events=events), True
        return dg.SensorResult(skip_reason=decision.summary()[:2000], cursor=cursor_out, asset_events=events), True


def build_automation_sensor(
    project: Project,
    translator: ModelTranslator,
    jobs: dict[str, dg.UnresolvedAssetJobDefinition],
    *,
    interval_seconds: int = 1,
) -> dg.SensorDefinition:
    """The automation sensor, ticking on each of the daemon's looks (every 5 s: a 5 s minimum interval skipped
    some to 10 s); a tick that launches nothing watches until the next look (see :mod:`.tick_watch`)."""
    together = group_jobs(project, translator)
    planner = _Planner(project, translator, set(together))

    @dg.sensor(
        name=SENSOR_NAME,
        jobs=[*jobs.values(), *together.values()],
        minimum_interval_seconds=interval_seconds,
        description=SENSOR_DESCRIPTION,
    )
    def _automate(context: dg.SensorEvaluationContext):
        began = time.monotonic()
        if (ahead := _clock_ahead(_tick_time())) is not None:
            context.log.warning(ahead)
            return dg.SensorResult(skip_reason=ahead, cursor=context.cursor)
        watch_seconds = read_env_settings().sensor_watch_seconds
        watch = TickWatch(project, context.instance, _tick_time) if watch_seconds > 0 and from_daemon(context) else None
        plan = functools.partial(planner.plan, context)
        result, planner.last_look = watched_plan(plan, context, watch, planner.last_look, began + watch_seconds)
        return result

    return _automate


def build_sensors(
    project: Project,
    translator: ModelTranslator | None = None,
    jobs: dict[str, dg.UnresolvedAssetJobDefinition] | None = None,
) -> list[dg.SensorDefinition]:
    """The project's automation sensor (none for a project without models)."""
    translator = translator or ModelTranslator()
    jobs = jobs or model_jobs(project, translator)
    if not project.order:
        return []
    return [build_automation_sensor(project, translator, jobs)]
