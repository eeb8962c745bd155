"""One automation sensor keeps the whole project correct as data arrives and definitions change.

On every tick it decides, for every model in dependency order, what must be (re)computed:

- complete intervals that are missing (new hours, a day without rows: an empty interval is ordinary);
- intervals touched by new or late source data (new Delta versions, new files), lookback included;
- intervals made stale by an upstream interval materialized again after them (late data re-ran it, or
  the upstream was rebuilt because its definition changed), see :mod:`.staleness`;
- the whole model, rebuilt from its start, when its definition changed since its table was built;
  changes that recompute nothing (metadata, forward-only) are applied without a run (see :mod:`.apply`).

An interval is requested only when every upstream interval it reads is settled: materialized and not
about to change or being changed. Otherwise it waits, and the tick says what for; it is never launched to
fail. Intervals already queued or running are not requested again, and a failed interval is not retried
until something it depends on changes. However many sources change in one tick, each (model, interval)
is requested once: one run per model and contiguous range.

What new source data touched is read and kept by :func:`.source_watch.observe_sources`, in the Dagster
instance, the same for ``run --auto`` and the schedules; the cursor (JSON) keeps only which changed
definitions were reported. A cursor of an older version (its per-source watermarks and pending windows)
is taken over into that record on the first tick.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import dagster as dg

from incremental_assets import delta
from incremental_assets.model.intervals import TimeWindow, last_complete_end, merge, subtract, to_utc
from incremental_assets.model.kinds import IncrementalByTimeRange
from incremental_assets.model.project import Project
from incremental_assets.model.sql_model import SqlModel
from incremental_assets.orchestration import tags
from incremental_assets.orchestration.apply import apply_without_compute, current_plan
from incremental_assets.orchestration.code_reload import own_code_server, request_reload
from incremental_assets.orchestration.instance import fail_dead_runs, materialized_windows
from incremental_assets.orchestration.live import FULL, LiveProject, active_runs, change_categories, changed_marks
from incremental_assets.orchestration.schedules import job_name, model_jobs
from incremental_assets.orchestration.source_watch import Observed, observe_sources
from incremental_assets.orchestration.staleness import latest_id, stale_intervals
from incremental_assets.orchestration.translator import ModelTranslator
from incremental_assets.orchestration.watch import hold_runs, watch_tables
from incremental_assets.plan.compile import input_bound
from incremental_assets.plan.rebuild import definition_changed, needs_rebuild

SENSOR_NAME = "incremental_assets_automation"
# An ISO instant the automation takes as "now" instead of the clock (or @FILE holding one, read every tick).
CLOCK_ENV = "INCREMENTAL_ASSETS_CLOCK"
CURSOR_VERSION = 3
LEGACY_CURSOR_VERSIONS = (2,)  # kept the sources' watermarks and pending windows, now in the instance


@dataclass
class AutomationCursor:
    """What the sensor remembers between ticks."""

    # An older cursor's watermarks and pending windows, handed to the shared record on the next tick.
    sources: dict[str, str] = field(default_factory=dict)
    pending: dict[str, list[TimeWindow] | str] = field(default_factory=dict)
    changed: dict[str, str] = field(default_factory=dict)  # model -> the fingerprint its changed mark was reported for
    watch: dict = field(default_factory=dict)  # the look at the tables' integrity, see :mod:`.watch`

    @classmethod
    def parse(cls, text: str | None) -> tuple["AutomationCursor", str | None]:
        """The cursor, or a fresh one with a note when there is none or it is not this version's."""
        if not text:
            return cls(), None
        try:
            raw = json.loads(text)
            if not isinstance(raw, dict) or raw.get("version") not in (CURSOR_VERSION, *LEGACY_CURSOR_VERSIONS):
                raise ValueError
            pending: dict[str, list[TimeWindow] | str] = {}
            for name, value in raw.get("pending", {}).items():
                pending[name] = FULL if value == FULL else [TimeWindow.parse(s, e) for s, e in value]
            sources = {str(k): str(v) for k, v in raw.get("sources", {}).items()}
            return cls(sources, pending, {str(k): str(v) for k, v in raw.get("changed", {}).items()}, dict(raw.get("watch", {}))), None
        except (ValueError, TypeError, AttributeError):
            return cls(), "the sensor's cursor is from another version of incremental_assets: replaced by a fresh one"

    def dump(self) -> str:
        pending = {
            name: FULL if value == FULL else [[w.start.isoformat(), w.end.isoformat()] for w in value]  # type: ignore[union-attr]
            for name, value in sorted(self.pending.items())
        }
        out: dict = {"version": CURSOR_VERSION}
        if self.sources or pending:  # not taken over yet
            out.update(sources=self.sources, pending=pending)
        out.update({k: v for k, v in (("changed", self.changed), ("watch", self.watch)) if v})
        return json.dumps(out, sort_keys=True)


# -- what each model needs, and what it waits for -----------------------------------------------------


@dataclass
class Decision:
    """One tick's outcome: the runs to launch, what waits and why, the next cursor."""

    requests: list[dg.RunRequest] = field(default_factory=list)
    launched: dict[str, list[TimeWindow] | str] = field(default_factory=dict)
    waiting: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    cursor: AutomationCursor = field(default_factory=AutomationCursor)
    changes: list[str] = field(default_factory=list)  # changed definitions and what is done about them
    running: list[str] = field(default_factory=list)  # models a queued or running run is computing
    events: list[dg.AssetCheckEvaluation] = field(default_factory=list)  # the tables' integrity checks

    def summary(self) -> str:
        """The tick's skip reason: "up to date" only when nothing is changed, running, waiting or to be said."""
        return "; ".join(self.changes + self.running + self.waiting + self.notes) or "every model is up to date"


def _failed_windows(instance: dg.DagsterInstance, key: dg.AssetKey, partitions: dg.TimeWindowPartitionsDefinition) -> list[TimeWindow]:
    keys = partitions.get_partition_keys()
    statuses = instance.get_status_by_partition(key, keys, partitions) or {}
    out = []
    for pk, state in statuses.items():
        if state is not None and state.value == "FAILED":
            tw = partitions.time_window_for_partition_key(pk)
            out.append(TimeWindow(to_utc(tw.start), to_utc(tw.end)))
    return merge(out)


def _minus(windows: list[TimeWindow], taken: list[TimeWindow]) -> list[TimeWindow]:
    return merge([part for w in windows for part in subtract(w, taken)])


def _reach(
    project: Project, model: SqlModel, upstream_windows: dict[str, list[TimeWindow] | str], empty: set[str], doing: dict[str, str] | None = None
) -> tuple[list[TimeWindow], list[str]]:
    """The intervals of ``model`` that read any of the given upstream windows (lookback included), and a
    description per upstream (what it is doing, when ``doing`` says); an upstream given as ``FULL`` or
    without data reaches every interval."""
    doing = doing or {}
    assert model.start is not None
    unit = model.unit
    reached: list[TimeWindow] = []
    reasons = []
    for upstream in project.upstream_models(model):
        busy = upstream_windows.get(upstream.name)
        if upstream.name in empty and not busy:
            busy = FULL
        if not busy:
            continue
        if busy == FULL:
            reached.append(TimeWindow(model.start, model.end or datetime(9999, 1, 1, tzinfo=timezone.utc)))
            if upstream.name in doing:
                reasons.append(f"{upstream.name}: {doing[upstream.name]}")
            else:
                reasons.append(f"{upstream.name} (no data yet)" if upstream.name in empty else f"{upstream.name} (being recomputed)")
            continue
        bound = input_bound(project, model.name, upstream.name)
        for n in busy:  # type: ignore[union-attr]
            reach = n.widen(bound.after, bound.before) if bound is not None else n
            reached.append(TimeWindow(unit.floor(reach.start), unit.ceil(reach.end)))
        if upstream.name in doing:
            reasons.append(f"{upstream.name}: {doing[upstream.name]}")
        else:
            reasons.append(f"{upstream.name} {', '.join(str(w) for w in busy[:3])}" + (" ..." if len(busy) > 3 else ""))  # type: ignore[index]
    return merge(reached), reasons


def _run_key(model: SqlModel, window: TimeWindow | None, reasons: list[str], marks: list[str]) -> str:
    token = hashlib.sha256("|".join([model.fingerprint, *sorted(reasons), *marks]).encode()).hexdigest()[:12]
    where = f"{window.start.isoformat()}..{window.end.isoformat()}" if window else "full"
    return f"{model.name}:{where}:{token}"


def _request(model: SqlModel, translator: ModelTranslator, window: TimeWindow | None, key: str, reasons: list[str]) -> dg.RunRequest:
    run_tags = {tags.LAUNCHED_BY_TAG: "automation", tags.REASON_TAG: "; ".join(reasons)[:500]}
    if window is not None:
        partitions = translator.get_partitions_def(model)
        assert isinstance(partitions, dg.TimeWindowPartitionsDefinition)
        run_tags.update(tags.range_tags(partitions, window, model.unit))
    return dg.RunRequest(run_key=key, job_name=job_name(model), asset_selection=[translator.get_asset_key(model)], tags=run_tags)


def _changed_line(model: SqlModel, state: "Settling", what: str) -> str:
    return f"{model.name} changed ({state.categories.get(model.name) or 'definition'}): {what}"


def _decide_partitioned(
    instance: dg.DagsterInstance, project: Project, translator: ModelTranslator, model: SqlModel, now: datetime,
    observed: Observed, active: dict[str, list[TimeWindow] | str], state: "Settling", decision: Decision,
) -> None:
    assert model.start is not None
    unit = model.unit
    end = min(last_complete_end(now, unit), model.end) if model.end else last_complete_end(now, unit)
    key = translator.get_asset_key(model)
    if latest_id(instance, key) is None:
        state.empty.add(model.name)
    if end <= model.start:
        return
    expected = TimeWindow(model.start, end)
    partitions = translator.get_partitions_def(model)
    assert isinstance(partitions, dg.TimeWindowPartitionsDefinition)
    running = active.get(model.name) or []
    if running == FULL:
        state.unsettled[model.name] = state.changing[model.name] = FULL
        return
    missing = subtract(expected, materialized_windows(instance, key, partitions))
    built = delta.built_with(project.settings.table_location(model.name))
    reasons: list[str] = []
    rebuild = needs_rebuild(model, built)
    if rebuild:
        desired, reasons = [expected], [f"definition changed: rebuilt from {model.start.date()}"]
    else:
        if definition_changed(model, built):
            decision.changes.append(_changed_line(model, state, "applies to new intervals only (forward_only)"))
        failed = _failed_windows(instance, key, partitions) if missing else []
        gaps = _minus(missing, failed)
        stale = stale_intervals(instance, project, model, translator)
        pending = observed.windows(model, end=end)
        desired = merge([*gaps, *stale.windows, *pending])
        reasons += ["missing intervals"] if gaps else []
        reasons += [f"upstream {', '.join(stale.causes)} changed"] if stale.windows else []
        reasons += ["new source data"] if pending else []
        if failed:
            decision.notes.append(f"{model.name}: failed {', '.join(str(w) for w in failed[:3])} not retried until an input changes")
    desired = _minus(desired, running)  # type: ignore[arg-type]
    # Intervals that read upstream intervals about to change will change too: their downstream waits.
    predicted, upstream_busy = _reach(project, model, state.changing, set(), state.doing)
    predicted = [w for p in predicted for w in subtract(p, [TimeWindow(end, datetime(9999, 1, 1, tzinfo=timezone.utc))])]
    state.changing[model.name] = merge([*desired, *running, *predicted])  # type: ignore[misc]
    state.unsettled[model.name] = merge([*missing, *desired, *running, *predicted])  # type: ignore[misc]
    if not desired:
        if predicted and model.name not in state.doing:
            decision.waiting.append(f"{model.name} waits for {'; '.join(upstream_busy)}")
            state.doing[model.name] = f"waits for {', '.join(u.name for u in project.upstream_models(model) if state.changing.get(u.name))}"
        return
    blocked, waits = _reach(project, model, state.unsettled, state.empty, state.doing)
    launch = _minus(desired, blocked)
    held = _minus(desired, launch)
    if held:
        decision.waiting.append(f"{model.name} {', '.join(str(w) for w in held[:3])} waits for {'; '.join(waits)}")
        state.doing.setdefault(model.name, "waits for its upstreams")
    marks = [f"{u.name}@{latest_id(instance, translator.get_asset_key(u))}" for u in project.upstream_models(model)]
    marks += [f"{s}={observed.markers.get(s)}" for s in model.depends_on if s in project.sources]
    for window in launch:
        decision.requests.append(_request(model, translator, window, _run_key(model, window, reasons, marks), reasons))
    if launch:
        decision.launched[model.name] = launch
        state.doing[model.name] = "rebuild requested" if rebuild else f"requested {', '.join(str(w) for w in launch[:3])}"
    if rebuild:
        decision.changes.append(_changed_line(model, state, "rebuild requested" if launch else "rebuild waits for its upstreams"))


def _decide_unpartitioned(
    instance: dg.DagsterInstance, project: Project, translator: ModelTranslator, model: SqlModel,
    observed: Observed, active: dict[str, list[TimeWindow] | str], state: "Settling", decision: Decision,
) -> None:
    if not model.has_table:
        return  # a plain view or an embedded model: nothing to compute
    if active.get(model.name):
        state.unsettled[model.name] = state.changing[model.name] = FULL
        return
    key = translator.get_asset_key(model)
    reasons = []
    if latest_id(instance, key) is None:
        reasons.append("never materialized")
        state.empty.add(model.name)
    changed = definition_changed(model, delta.built_with(project.settings.table_location(model.name)))
    if changed:
        reasons.append("definition changed")
    stale = stale_intervals(instance, project, model, translator)
    if stale.causes:
        reasons.append(f"upstream {', '.join(stale.causes)} changed")
    if observed.pending.get(model.name):
        reasons.append("new source data")
    # A whole-table model reads what its upstreams hold: it waits only for those about to change (and
    # will change itself once they have).
    waits = [u.name for u in project.upstream_models(model) if state.changing.get(u.name) or u.name in state.empty]
    said = [f"{u}: {state.doing[u]}" if u in state.doing else (f"{u} (no data yet)" if u in state.empty else u) for u in waits]
    if waits:
        state.unsettled[model.name] = state.changing[model.name] = FULL
        state.doing[model.name] = f"waits for {', '.join(waits)}"
    if not reasons:
        if waits:
            decision.waiting.append(f"{model.name} waits for {'; '.join(said)}")
        return
    state.unsettled[model.name] = state.changing[model.name] = FULL
    if waits:
        decision.waiting.append(f"{model.name} waits for {'; '.join(said)} ({'; '.join(reasons)})")
        if changed:
            decision.changes.append(_changed_line(model, state, "run waits for its upstreams"))
        return
    marks = [f"{u.name}@{latest_id(instance, translator.get_asset_key(u))}" for u in project.upstream_models(model)]
    marks += [f"{s}={observed.markers.get(s)}" for s in model.depends_on if s in project.sources]
    decision.requests.append(_request(model, translator, None, _run_key(model, None, reasons, marks), reasons))
    decision.launched[model.name] = FULL
    state.doing[model.name] = "run requested"
    if changed:
        decision.changes.append(_changed_line(model, state, "run requested"))


@dataclass
class Settling:
    """Per model, what is not settled yet: ``changing`` is about to be (re)computed (requested this tick,
    queued or running); ``unsettled`` adds intervals that are missing or failed. A partitioned model
    waits for unsettled upstream intervals it reads; a whole-table model only for changing upstreams.
    ``doing`` says, per model, what it is doing or waiting for, for the lines of the models below it."""

    changing: dict[str, list[TimeWindow] | str] = field(default_factory=dict)
    unsettled: dict[str, list[TimeWindow] | str] = field(default_factory=dict)
    empty: set[str] = field(default_factory=set)  # models never materialized: nothing downstream can read them yet
    doing: dict[str, str] = field(default_factory=dict)
    categories: dict[str, str] = field(default_factory=dict)  # changed models: the category `plan` gives


def evaluate(
    project: Project, translator: ModelTranslator, instance: dg.DagsterInstance, cursor_text: str | None, now: datetime,
    *, categories: dict[str, str] | None = None, served: set[str] | None = None,
) -> Decision:
    """Decide one tick (reading the instance and the sources). The plan's changes that recompute nothing
    (metadata, ``forward_only`` models) are applied first, as ``run --auto`` does. ``categories``: the
    plan's category of each changed model; ``served``: the models the running code location has (None:
    all), a model only the edited files have waits for the code location to reload."""
    cursor, note = AutomationCursor.parse(cursor_text)
    decision = Decision(cursor=cursor)
    if note:
        decision.notes.append(note)
    decision.notes += apply_without_compute(project, instance, translator, current_plan(project))
    # Lost intervals the look at the tables' integrity found are computed again as new data's are: they go
    # to the record shared with `run --auto` with what new source data touched (an older cursor's too).
    damaged = watch_tables(instance, project, translator, cursor, decision)
    observed = observe_sources(instance, project, now, translator, legacy_sources=cursor.sources, legacy_pending=cursor.pending)
    cursor.sources, cursor.pending = {}, {}
    decision.notes += observed.notes
    active, doing = active_runs(instance, project, translator)
    state = Settling(doing=dict(doing), categories=dict(categories or {}))
    decision.running += [f"{name}: {what}" for name, what in doing.items()]
    for model in project.ordered():
        if isinstance(model.kind, IncrementalByTimeRange):
            _decide_partitioned(instance, project, translator, model, now, observed, active, state, decision)
        else:
            _decide_unpartitioned(instance, project, translator, model, observed, active, state, decision)
    hold_runs(project, translator, decision, damaged)
    if served is not None:
        new = sorted({n for n in decision.launched if n not in served})
        if new:
            keys = {translator.get_asset_key(project.models[n]) for n in new}
            decision.requests = [r for r in decision.requests if not keys.intersection(r.asset_selection or ())]
            for name in new:
                del decision.launched[name]
                decision.waiting.append(f"{name} is new: waits for the code location to reload")
    return decision


def build_automation_sensor(
    project: Project, translator: ModelTranslator, jobs: dict[str, dg.UnresolvedAssetJobDefinition], *, interval_seconds: int = 5
) -> dg.SensorDefinition:
    live = LiveProject(project)
    served = set(project.models)
    reload_asked: set[str] = set()

    @dg.sensor(
        name=SENSOR_NAME,
        jobs=list(jobs.values()),
        minimum_interval_seconds=interval_seconds,
        description=(
            "Keeps every model up to date: missing complete intervals, new and late source data, upstream "
            "intervals materialized again, changed definitions (edited model files are seen on the next "
            "tick, without reloading the code location); each interval once, upstreams first"
        ),
    )
    def _automate(context: dg.SensorEvaluationContext):
        clock = os.environ.get(CLOCK_ENV, "").strip()  # "@PATH": the instant in that file, read every tick
        clock = Path(clock[1:]).read_text().strip() if clock.startswith("@") else clock
        now = to_utc(clock) if clock else datetime.now(timezone.utc)
        for run_id in fail_dead_runs(context.instance):  # a killed CLI run's intervals are failed, not running
            context.log.info(f"run {run_id} was left running by a process that died: marked failed")
        current, errors, edited = live.current()
        if current is None:
            cursor, _ = AutomationCursor.parse(context.cursor)
            summary = "the edited project does not load, nothing is launched until it does: " + "; ".join(errors)
            context.log.warning(summary)
            return dg.SensorResult(skip_reason=summary[:2000], cursor=cursor.dump())
        notes = []
        if edited and live.seen not in reload_asked:
            reload_asked.add(live.seen)
            server = own_code_server()
            if server is not None:
                request_reload(server)
                notes.append(f"model files edited: planned from the files; {server} asked to reload the definitions")
            else:
                notes.append("model files edited: planned from the files; the UI shows the new definitions after \"Reload definitions\"")
        changes = change_categories(current)
        decision = evaluate(
            current, translator, context.instance, context.cursor, now,
            categories={n: c.category for n, c in changes.items()}, served=served,
        )
        decision.notes += notes
        events = changed_marks(current, translator, changes, decision.cursor.changed, served) + decision.events
        for line in decision.changes + decision.running + decision.waiting + decision.notes:
            context.log.info(line)
        if decision.requests:
            return dg.SensorResult(run_requests=decision.requests, cursor=decision.cursor.dump(), asset_events=events)
        return dg.SensorResult(skip_reason=decision.summary()[:2000], cursor=decision.cursor.dump(), asset_events=events)

    return _automate


def build_sensors(
    project: Project, translator: ModelTranslator | None = None, jobs: dict[str, dg.UnresolvedAssetJobDefinition] | None = None
) -> list[dg.SensorDefinition]:
    """The project's automation sensor (none for a project without models)."""
    translator = translator or ModelTranslator()
    jobs = jobs or model_jobs(project, translator)
    if not project.order:
        return []
    return [build_automation_sensor(project, translator, jobs)]
