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

The cursor (JSON) keeps, per source, the last Delta version or file modification time seen, and the
windows touched by new source data that are still waiting for their upstream.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone, tzinfo
from pathlib import Path

import dagster as dg

from incremental_assets import delta
from incremental_assets.model.intervals import IntervalUnit, TimeWindow, last_complete_end, merge, subtract, to_utc
from incremental_assets.model.kinds import IncrementalByTimeRange
from incremental_assets.model.project import Project, Source
from incremental_assets.model.source_time import instant, zone
from incremental_assets.model.sql_model import SqlModel
from incremental_assets.orchestration import tags
from incremental_assets.orchestration.apply import apply_without_compute, current_plan
from incremental_assets.orchestration.code_reload import own_code_server, request_reload
from incremental_assets.orchestration.instance import fail_dead_runs, materialized_windows
from incremental_assets.orchestration.live import FULL, LiveProject, active_runs, change_categories, changed_marks
from incremental_assets.orchestration.schedules import job_name, model_jobs
from incremental_assets.orchestration.staleness import latest_id, stale_intervals
from incremental_assets.orchestration.translator import ModelTranslator
from incremental_assets.plan.compile import input_bound
from incremental_assets.plan.rebuild import definition_changed, needs_rebuild

SENSOR_NAME = "incremental_assets_automation"
# An ISO instant the automation takes as "now" instead of the clock (or @FILE holding one, read every tick).
CLOCK_ENV = "INCREMENTAL_ASSETS_CLOCK"
CURSOR_VERSION = 2
TICK = timedelta(microseconds=1)


@dataclass
class AutomationCursor:
    """What the sensor remembers between ticks."""

    sources: dict[str, str] = field(default_factory=dict)  # source -> "v<delta version>" or "t<newest mtime>"
    pending: dict[str, list[TimeWindow] | str] = field(default_factory=dict)  # touched by new data, not launched yet
    changed: dict[str, str] = field(default_factory=dict)  # model -> the fingerprint its changed mark was reported for

    @classmethod
    def parse(cls, text: str | None) -> tuple["AutomationCursor", str | None]:
        """The cursor, or a fresh one with a note when there is none or it is not this version's."""
        if not text:
            return cls(), None
        try:
            raw = json.loads(text)
            if not isinstance(raw, dict) or raw.get("version") != CURSOR_VERSION:
                raise ValueError
            pending: dict[str, list[TimeWindow] | str] = {}
            for name, value in raw.get("pending", {}).items():
                pending[name] = FULL if value == FULL else [TimeWindow.parse(s, e) for s, e in value]
            sources = {str(k): str(v) for k, v in raw.get("sources", {}).items()}
            return cls(sources, pending, {str(k): str(v) for k, v in raw.get("changed", {}).items()}), None
        except (ValueError, TypeError, AttributeError):
            return cls(), "the sensor's cursor is from another version of incremental_assets: watching sources from their current state"

    def dump(self) -> str:
        pending = {
            name: FULL if value == FULL else [[w.start.isoformat(), w.end.isoformat()] for w in value]  # type: ignore[union-attr]
            for name, value in sorted(self.pending.items())
        }
        out = {"version": CURSOR_VERSION, "sources": self.sources, "pending": pending}
        if self.changed:
            out["changed"] = self.changed
        return json.dumps(out, sort_keys=True)

    def add_pending(self, name: str, windows: list[TimeWindow] | str) -> None:
        current = self.pending.get(name)
        if windows == FULL or current == FULL:
            self.pending[name] = FULL
        else:
            self.pending[name] = merge([*(current or []), *windows])  # type: ignore[list-item]


# -- what changed in the sources --------------------------------------------------------------------


def changed_windows(ranges: list[tuple[datetime | None, datetime | None]], unit: IntervalUnit | str) -> list[TimeWindow]:
    """Whole source intervals covering each changed (min, max) range."""
    unit = IntervalUnit.of(unit)
    out = []
    for lo, hi in ranges:
        if lo is None or hi is None:
            continue
        lo, hi = to_utc(lo), to_utc(hi)
        out.append(TimeWindow(unit.floor(lo), unit.ceil(hi + TICK)))
    return merge(out)


def _file_ranges(source: Source, since: float, tz: tzinfo = timezone.utc) -> tuple[float, list[tuple[datetime | None, datetime | None]], list[str]]:
    """Files of a file source modified after ``since`` (a one-file source rewritten in place is new data):
    the mtime to continue from, each readable file's intervals, and the files that could not be read yet
    (half-written: read again next tick)."""
    root = Path(source.location)
    files = [p for p in ([root] if root.is_file() else root.rglob("*")) if p.is_file() and not p.name.startswith((".", "_"))]
    new = [(p, p.stat().st_mtime) for p in files if p.stat().st_mtime > since]
    ranges: list[tuple[datetime | None, datetime | None]] = []
    unreadable: list[tuple[Path, float]] = []
    grain = "hour" if source.interval_unit == "hour" else "day"
    for path, _ in new:
        try:
            starts = _interval_starts(source, root, path, grain, tz)
        except Exception:  # noqa: BLE001 - a file still being written, or not of this format
            unreadable.append((path, path.stat().st_mtime))
            continue
        ranges.extend((start, start) for start in starts)
    if unreadable:
        # Continue from just before the oldest unreadable file: it is read again (others twice, harmlessly).
        resume = min(m for _, m in unreadable) - 1e-6
    else:
        resume = max([since, *(m for _, m in new)])
    return resume, ranges, [str(p) for p, _ in unreadable]


def _interval_starts(source: Source, root: Path, path: Path, grain: str, tz: tzinfo) -> list[datetime]:
    """Each distinct interval the rows of one file fall in (not the file's whole min..max span); a time
    column held by the file's ``key=value`` folder is read from its path."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    if path.stat().st_size == 0:
        return []  # an empty file (a day without rows): nothing to read
    hive = {"partitioning": "hive", "partition_base_dir": str(root)} if root.is_dir() else {}
    column = ds.dataset([str(path)], format=source.format, **hive).to_table(columns=[source.time_column]).column(0).drop_null()
    if pa.types.is_timestamp(column.type):
        # Fewer values to look at: floored where the floor is UTC's (wall time elsewhere is not).
        if (column.type.tz or "") in ("UTC", "+00:00") or (column.type.tz is None and tz == timezone.utc):
            column = pc.floor_temporal(column, unit=grain)
    found = (instant(v, time_format=source.time_format, tz=tz) for v in pc.unique(column).to_pylist())
    return sorted({IntervalUnit.of(grain).floor(t) for t in found if t is not None})


def source_changes(source: Source, marker: str | None, tz: tzinfo = timezone.utc) -> tuple[str, list[TimeWindow], str | None]:
    """A source's new marker, the source intervals its new data touches, and a note (or None).

    Without a marker (first tick) the current state is remembered and nothing counts as new: intervals
    that are missing are requested anyway.
    """
    unit = IntervalUnit.of(source.interval_unit)
    if source.format == "delta":
        if not delta.exists(source.location):
            return marker or "", [], f"{source.name}: no Delta table at {source.location} yet"
        if not marker or not marker.startswith("v"):
            return f"v{delta.version(source.location)}", [], None
        seen = int(marker[1:])
        current = delta.version(source.location)
        if current is not None and current < seen:
            return f"v{current}", [], f"{source.name}: the table went back from version {seen} to {current}; watching from there"
        version, ranges = delta.added_time_ranges(source.location, seen, source.time_column or "")
        ranges = [(instant(lo, time_format=source.time_format, tz=tz), instant(hi, time_format=source.time_format, tz=tz)) for lo, hi in ranges]
        return f"v{version}", changed_windows(ranges, unit), None
    if not marker or not marker.startswith("t"):
        root = Path(source.location)
        files = [root] if root.is_file() else [p for p in root.rglob("*") if p.is_file()] if root.is_dir() else []
        return f"t{max((p.stat().st_mtime for p in files), default=0.0)!r}", [], None
    resume, ranges, unreadable = _file_ranges(source, float(marker[1:]), tz)
    note = f"{source.name}: {len(unreadable)} file(s) not readable yet (half-written?), read again next tick" if unreadable else None
    return f"t{resume!r}", changed_windows(ranges, unit), note


def touched_by_sources(project: Project, changed: dict[str, list[TimeWindow]], now: datetime) -> dict[str, list[TimeWindow] | str]:
    """Models reading a changed source directly: the complete intervals whose read window (the run window
    widened by the model's lookback on that source) overlaps new data; unpartitioned models whole.
    Models further downstream follow by staleness once these are materialized again."""
    out: dict[str, list[TimeWindow] | str] = {}
    for model in project.ordered():
        reads = [s for s in model.depends_on if s in changed and changed[s]]
        if not reads:
            continue
        if not isinstance(model.kind, IncrementalByTimeRange):
            if model.has_table:
                out[model.name] = FULL
            continue
        assert model.start is not None
        unit = model.unit
        windows = []
        for name in reads:
            bound = input_bound(project, model.name, name)
            for c in changed[name]:
                w = c.widen(bound.after, bound.before) if bound is not None else c
                start = max(unit.floor(w.start), model.start)
                end = min(unit.ceil(w.end), last_complete_end(now, unit), model.end or unit.ceil(w.end))
                if end > start:
                    windows.append(TimeWindow(start, end))
        if windows:
            out[model.name] = merge(windows)
    return out


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
    cursor: AutomationCursor, active: dict[str, list[TimeWindow] | str], state: "Settling", decision: Decision,
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
        pending = cursor.pending.get(model.name) or []
        pending = [w for p in pending for w in subtract(p, [TimeWindow(end, datetime(9999, 1, 1, tzinfo=timezone.utc))])]  # type: ignore[union-attr]
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
    marks += [f"{s}={cursor.sources.get(s)}" for s in model.depends_on if s in project.sources]
    for window in launch:
        decision.requests.append(_request(model, translator, window, _run_key(model, window, reasons, marks), reasons))
    if launch:
        decision.launched[model.name] = launch
        state.doing[model.name] = "rebuild requested" if rebuild else f"requested {', '.join(str(w) for w in launch[:3])}"
    if rebuild:
        decision.changes.append(_changed_line(model, state, "rebuild requested" if launch else "rebuild waits for its upstreams"))


def _decide_unpartitioned(
    instance: dg.DagsterInstance, project: Project, translator: ModelTranslator, model: SqlModel,
    cursor: AutomationCursor, active: dict[str, list[TimeWindow] | str], state: "Settling", decision: Decision,
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
    if cursor.pending.get(model.name):
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
    marks += [f"{s}={cursor.sources.get(s)}" for s in model.depends_on if s in project.sources]
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
    read = {n for m in project.models.values() for n in m.depends_on}
    changed: dict[str, list[TimeWindow]] = {}
    for source in project.sources.values():
        if source.name not in read or not source.time_column or source.format not in ("delta", "parquet", "csv", "json"):
            continue
        marker, windows, source_note = source_changes(source, cursor.sources.get(source.name), zone(project.settings.timezone))
        cursor.sources[source.name] = marker
        changed[source.name] = windows
        if source_note:
            decision.notes.append(source_note)
    for name, windows in touched_by_sources(project, changed, now).items():
        cursor.add_pending(name, windows)
    active, doing = active_runs(instance, project, translator)
    state = Settling(doing=dict(doing), categories=dict(categories or {}))
    decision.running += [f"{name}: {what}" for name, what in doing.items()]
    for model in project.ordered():
        if isinstance(model.kind, IncrementalByTimeRange):
            _decide_partitioned(instance, project, translator, model, now, cursor, active, state, decision)
        else:
            _decide_unpartitioned(instance, project, translator, model, cursor, active, state, decision)
    if served is not None:
        new = sorted({n for n in decision.launched if n not in served})
        if new:
            keys = {translator.get_asset_key(project.models[n]) for n in new}
            decision.requests = [r for r in decision.requests if not keys.intersection(r.asset_selection or ())]
            for name in new:
                del decision.launched[name]
                decision.waiting.append(f"{name} is new: waits for the code location to reload")
    for name, launched in decision.launched.items():
        current = cursor.pending.get(name)
        if current is None:
            continue
        rest = [] if launched == FULL or current == FULL else _minus(current, launched)  # type: ignore[arg-type]
        if rest:
            cursor.pending[name] = rest
        else:
            del cursor.pending[name]
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
        events = changed_marks(current, translator, changes, decision.cursor.changed, served)
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
