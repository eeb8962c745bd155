"""A sensor per time-series source: new data (a new Delta version, new files) re-runs exactly the
intervals it touches, in every model downstream of the source, lookback included.

The cursor is the last Delta version seen (for file sources, the newest modification time seen). On a
tick, the files added since the cursor give the time ranges that changed (from the add actions'
min/max statistics of the time column); each downstream model's affected intervals are those whose
read window (run window widened by the model's derived lookback on that input) overlaps a changed
range, propagated model by model. Only complete intervals are requested; the run key names the source
version, so a tick evaluated twice never requests a range twice.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import dagster as dg

from incremental_assets import delta
from incremental_assets.model.intervals import (
    IntervalUnit,
    TimeWindow,
    ceil,
    floor,
    last_complete_end,
    merge,
    to_utc,
)
from incremental_assets.model.project import Project, Source
from incremental_assets.model.sql_model import SqlModel
from incremental_assets.orchestration import tags
from incremental_assets.orchestration.schedules import job_name, model_jobs
from incremental_assets.orchestration.translator import ModelTranslator
from incremental_assets.plan.compile import input_bound

TICK = timedelta(microseconds=1)


def sensor_name(source: Source) -> str:
    return source.name.replace(".", "__") + "_new_data"


def changed_windows(ranges: list[tuple[datetime | None, datetime | None]], unit: str) -> list[TimeWindow]:
    """Whole source intervals covering each changed (min, max) range."""
    out = []
    for lo, hi in ranges:
        if lo is None or hi is None:
            continue
        lo, hi = to_utc(lo), to_utc(hi)
        out.append(TimeWindow(floor(lo, unit), ceil(hi + TICK, unit)))
    return merge(out)


def affected_windows(project: Project, source_name: str, changed: list[TimeWindow], now: datetime) -> dict[str, list[TimeWindow]]:
    """For each incremental model downstream of ``source_name``: the complete intervals to re-run.

    A run window W reads an input over ``W.widen(before, after)``; it is affected by a change C when
    that overlaps C, i.e. when W overlaps ``C.widen(after, before)``.
    """
    touched: dict[str, list[TimeWindow]] = {source_name: changed}
    out: dict[str, list[TimeWindow]] = {}
    for model in project.ordered():
        if not model.is_incremental or model.start is None:
            continue
        unit = model.unit
        windows: list[TimeWindow] = []
        for upstream in model.depends_on:
            if upstream == model.name or upstream not in touched:
                continue
            bound = input_bound(project, model.name, upstream)
            for c in touched[upstream]:
                w = c.widen(bound.after, bound.before) if bound is not None else c
                start = max(floor(w.start, unit), model.start)
                end = min(ceil(w.end, unit), last_complete_end(now, unit))
                if model.end:
                    end = min(end, model.end)
                if end > start:
                    windows.append(TimeWindow(start, end))
        if windows:
            touched[model.name] = out[model.name] = merge(windows)
    return out


def run_requests(
    project: Project, translator: ModelTranslator, affected: dict[str, list[TimeWindow]], version_tag: str
) -> list[dg.RunRequest]:
    """One run request per model and affected range, upstream models first."""
    requests = []
    for name in project.order:
        model: SqlModel = project.models[name]
        for window in affected.get(name, []):
            partitions = translator.get_partitions_def(model)
            assert isinstance(partitions, dg.TimeWindowPartitionsDefinition)
            requests.append(
                dg.RunRequest(
                    run_key=f"{name}:{window.start.isoformat()}..{window.end.isoformat()}@{version_tag}",
                    job_name=job_name(model),
                    asset_selection=[translator.get_asset_key(model)],
                    tags={**tags.range_tags(partitions, window, model.unit), tags.LAUNCHED_BY_TAG: "sensor"},
                )
            )
    return requests


def _file_ranges(source: Source, since: float) -> tuple[float, list[tuple[datetime | None, datetime | None]]]:
    """Files of a file source modified after ``since``: the newest mtime and each file's time range."""
    import pyarrow.dataset as ds

    root = Path(source.location)
    files = [p for p in ([root] if root.is_file() else root.rglob("*")) if p.is_file() and not p.name.startswith((".", "_"))]
    new = [p for p in files if p.stat().st_mtime > since]
    if not new:
        return since, []
    import pyarrow.compute as pc

    ranges = []
    grain = "hour" if source.interval_unit == "hour" else "day"
    for path in new:
        column = ds.dataset(str(path), format=source.format).to_table(columns=[source.time_column]).column(0)
        # Each distinct interval the file's rows fall in, not the file's whole min..max span.
        for start in pc.unique(pc.floor_temporal(column.drop_null(), unit=grain)).to_pylist():
            ranges.append((start, start))
    return max(p.stat().st_mtime for p in new), ranges


def build_source_sensor(
    project: Project, source: Source, translator: ModelTranslator, jobs: dict[str, dg.UnresolvedAssetJobDefinition]
) -> dg.SensorDefinition:
    @dg.sensor(
        name=sensor_name(source),
        jobs=[jobs[m.name] for m in project.ordered() if m.is_incremental],
        minimum_interval_seconds=60,
        description=f"Re-runs the intervals of the models downstream of {source.name} that new data touches",
    )
    def _sense(context: dg.SensorEvaluationContext):
        now = datetime.now(timezone.utc)
        unit = IntervalUnit.of(source.interval_unit)
        if source.format == "delta":
            if not delta.exists(source.location):
                return dg.SkipReason(f"no Delta table at {source.location} yet")
            seen = int(context.cursor) if context.cursor else None
            if seen is None:
                # First tick: remember where the table is; existing data is the schedules' business.
                version = delta.version(source.location)
                return dg.SensorResult(skip_reason=f"{source.name}: watching from version {version}", cursor=str(version))
            version, ranges = delta.added_time_ranges(source.location, seen, source.time_column or "")
            tag = f"v{version}"
            cursor = str(version)
        else:
            since = float(context.cursor) if context.cursor else None
            if since is None:
                newest, _ = _file_ranges(source, float("-inf"))
                return dg.SensorResult(skip_reason=f"{source.name}: watching files newer than now", cursor=repr(newest))
            newest, ranges = _file_ranges(source, since)
            tag = f"t{newest}"
            cursor = repr(newest)
        changed = changed_windows(ranges, unit)
        affected = affected_windows(project, source.name, changed, now)
        requests = run_requests(project, translator, affected, tag)
        if not requests:
            return dg.SensorResult(skip_reason=f"{source.name}: no complete interval affected", cursor=cursor)
        context.log.info(json.dumps({m: [str(w) for w in ws] for m, ws in affected.items()}))
        return dg.SensorResult(run_requests=requests, cursor=cursor)

    return _sense


def build_sensors(
    project: Project, translator: ModelTranslator | None = None, jobs: dict[str, dg.UnresolvedAssetJobDefinition] | None = None
) -> list[dg.SensorDefinition]:
    """One sensor per time-series source that some model reads."""
    translator = translator or ModelTranslator()
    jobs = jobs or model_jobs(project, translator)
    read = {n for m in project.models.values() for n in m.depends_on}
    return [
        build_source_sensor(project, s, translator, jobs)
        for s in project.sources.values()
        if s.time_column and s.name in read and s.format in ("delta", "parquet", "csv", "json")
    ]
