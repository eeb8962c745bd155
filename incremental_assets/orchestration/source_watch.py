"""What new source data made out of date: one record in the Dagster instance, shared by the automation
sensor, ``run --auto`` and the per-model schedules, so all three see late data alike.

:func:`observe_sources` is the only writer. Under a lock (a file in the Dagster home) it reads, per
source, what arrived since the watermark it keeps (a Delta version: only the commits after it, and only
their ``add`` and ``remove`` actions with new data; or the newest file modification time, with the files
seen at the last look: one that arrives keeping an older time is new, one that is gone took its rows along,
wherever they were), turns the new rows' time
ranges into the intervals of the models reading the source directly (their lookback included, see
:func:`touched_by_sources`; a source without a time column, read whole, only says that it changed, and
reaches its unpartitioned readers) and stores each as an entry with the event-log storage id and the time at
which it was noticed. An entry clears itself: an interval in it is done once it has been materialized
after that id by a run that started after that time (a run already running when the data came did not
read it). Nothing is consumed by the callers: a failed or killed run leaves its intervals pending, the
sensor's run keys (made from the watermarks) keep it from launching the same run twice, and a ``run
--auto`` from cron computes what the sensor would have. Models further downstream follow by staleness
(:mod:`.staleness`) once these are materialized again.

The record is one JSON value in the instance's key-value store (``run_storage`` cursor values):
``{"version": 1, "sources": {source: marker}, "touched": {model: [{"windows": [[start, end], ...] | "*",
"after": storage id, "at": unix time}, ...]}}``; a marker is ``v<Delta version>``, ``t<newest mtime>`` or
``f<digest of the files>``.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone, tzinfo
from pathlib import Path
from typing import Iterator

import dagster as dg

from incremental_assets import delta
from incremental_assets.delta.files import source_data_files, source_files_state
from incremental_assets.delta.source_log import EVERY_RANGE
from incremental_assets.model import clock
from incremental_assets.model.intervals import (
    END_OF_TIME,
    EVERY_INTERVAL,
    NO_INTERVAL,
    START_OF_TIME,
    Coverage,
    IntervalUnit,
    TimeWindow,
    batches,
    last_complete_end,
    merge,
    to_utc,
)
from incremental_assets.model.kinds import IncrementalByTimeRange
from incremental_assets.model.project import Project, Source
from incremental_assets.model.source_time import clock_time
from incremental_assets.model.sql_model import SqlModel
from incremental_assets.orchestration.confirm import latest_ids
from incremental_assets.orchestration.integrity import run_ids_of
from incremental_assets.orchestration.partition_keys import key_of
from incremental_assets.orchestration.translator import ModelTranslator
from incremental_assets.plan.analyses import input_bound

STATE_KEY = "incremental_assets/source_watch"
STATE_VERSION = 1
LOCK_NAME = ".incremental_assets_source_watch.lock"
FILES_KEY = "incremental_assets/source_files"  # each file source's data files at the last look
MAX_LISTED = 20_000
MICROSECOND = timedelta(microseconds=1)  # the smallest step of a timestamp: a row at `hi` is before `hi + MICROSECOND`
WATCHED_FORMATS = ("delta", "parquet", "csv", "json")

# -- what changed in the sources --------------------------------------------------------------------


def changed_windows(
    ranges: list[tuple[datetime | None, datetime | None]], unit: IntervalUnit | str
) -> list[TimeWindow]:
    """Whole source intervals covering each changed (min, max) range."""
    unit = IntervalUnit.of(unit)
    out = []
    for lo, hi in ranges:
        if lo is None or hi is None:
            continue
        lo, hi = to_utc(lo), to_utc(hi)
        out.append(TimeWindow(unit.floor(lo), unit.ceil(hi + MICROSECOND)))
    return merge(out)


Span = list[str] | None  # a file's first and last interval start (ISO), [] for no rows, None: not read


@dataclass
class FileList:
    """The data files of a file source at the last look (None: not known) and at this one, each with the span
    of intervals its rows were in when it was read: a file that appears with an older modification time
    (moved or copied in keeping its time) is new data all the same, and a file that is gone or rewritten took
    the rows of its span along."""

    before: dict[str, Span] | None = None
    now: dict[str, Span] | None = None


def _span(starts: list[datetime]) -> Span:
    return [starts[0].isoformat(), starts[-1].isoformat()] if starts else []


def _span_range(span: Span) -> tuple[datetime | None, datetime | None]:
    """The source time range of a file's recorded span (all time when it was never read)."""
    if span is None:
        return EVERY_RANGE
    if not span:
        return None, None
    return to_utc(span[0]), to_utc(span[1])


def _file_ranges(
    source: Source, since: float, tz: tzinfo = timezone.utc, listed: FileList | None = None
) -> tuple[float, list[tuple[datetime | None, datetime | None]], list[str]]:
    """Files of a file source modified after ``since`` (a one-file source rewritten in place is new data), or
    not there at the last look (``listed.before``): the mtime to continue from, each readable file's
    intervals, and the files that could not be read yet (half-written: read again next tick)."""
    root = Path(source.location)
    files = [Path(f) for f in source_data_files(source.location)]
    known = listed.before if listed is not None else None
    stats = [(p, p.stat().st_mtime) for p in files]
    new = [(p, m) for p, m in stats if m > since or (known is not None and str(p) not in known)]
    now: dict[str, Span] = {str(p): (known or {}).get(str(p)) for p in files}
    ranges: list[tuple[datetime | None, datetime | None]] = []
    unreadable: list[tuple[Path, float]] = []
    grain = "hour" if source.interval_unit == "hour" else "day"
    for path, _ in new:
        if known is not None and str(path) in known:  # rewritten in place: the rows it held may be gone
            ranges.append(_span_range(known[str(path)]))
        try:
            starts = _interval_starts(source, root, path, grain, tz)
        except Exception:  # noqa: BLE001 - a file still being written, or not of this format
            unreadable.append((path, path.stat().st_mtime))
            continue
        ranges.extend((start, start) for start in starts)
        now[str(path)] = _span(starts)
    if unreadable:
        # Continue from just before the oldest unreadable file: it is read again (others twice, harmlessly);
        # one that came with an older time is read again because it stays out of the list kept.
        resume = min(m for _, m in unreadable) - 1e-6
        for path, _ in unreadable:
            now.pop(str(path), None)
    else:
        resume = max([since, *(m for _, m in new)])
    if listed is not None:
        listed.now = now
    if known is not None:
        ranges.extend(_span_range(known[p]) for p in sorted(set(known) - {str(f) for f in files}))  # files gone
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
    column = (
        ds.dataset([str(path)], format=_file_format(source), **hive)
        .to_table(columns=[source.time_column])
        .column(0)
        .drop_null()
    )
    if pa.types.is_timestamp(column.type):
        # Fewer values to look at: floored where the floor is the project's clock's (wall time, or UTC in UTC).
        if column.type.tz is None or (column.type.tz in ("UTC", "+00:00") and tz == timezone.utc):
            column = pc.floor_temporal(column, unit=grain)
    found = (clock_time(v, time_format=source.time_format, tz=tz) for v in pc.unique(column).to_pylist())
    return sorted({IntervalUnit.of(grain).floor(t) for t in found if t is not None})


def _file_format(source: Source) -> object:
    """The format pyarrow reads a source's files in: a CSV source as its ``csv_settings`` say."""
    if source.format != "csv":
        return source.format
    import pyarrow.csv as pv
    import pyarrow.dataset as ds

    settings = source.csv
    header = None if settings.header else list(source.columns) or None
    return ds.CsvFileFormat(
        parse_options=pv.ParseOptions(
            delimiter=settings.delimiter, quote_char=settings.quotechar, escape_char=settings.escapechar or False
        ),
        read_options=pv.ReadOptions(encoding=settings.encoding, column_names=header),
    )


def source_changes(
    source: Source, marker: str | None, tz: tzinfo = timezone.utc, listed: FileList | None = None
) -> tuple[str, list[TimeWindow], str | None]:
    """A source's new marker, the source intervals its new data touches, and a note (or None). Rows taken
    away (a data file removed, a Delta commit removing files) touch the intervals they were in; where those
    are not known (a file that is gone), every interval. ``listed``: a file source's files at the last look,
    filled with this look's.

    Without a marker (first tick) the current state is remembered and nothing counts as new: intervals
    that are missing are requested anyway.
    """
    unit = IntervalUnit.of(source.interval_unit)
    if source.format == "delta":
        if marker and marker.startswith("v") and delta.still_at(source.location, int(marker[1:])):
            return marker, [], None  # no commit since: the table is not opened
        if not delta.exists(source.location):
            return marker or "", [], f"{source.name}: no Delta table at {source.location} yet"
        if not marker or not marker.startswith("v"):
            return f"v{delta.version(source.location)}", [], None
        seen = int(marker[1:])
        current = delta.version(source.location)
        if current is not None and current < seen:
            return (
                f"v{current}",
                [],
                f"{source.name}: the table went back from version {seen} to {current}; watching from there",
            )
        version, added = delta.changed_time_ranges(source.location, seen, source.time_column or "")
        ranges = [
            (
                clock_time(lo, time_format=source.time_format, tz=tz),
                clock_time(hi, time_format=source.time_format, tz=tz),
            )
            for lo, hi in added
        ]
        return f"v{version}", changed_windows(ranges, unit), None
    if not marker or not marker.startswith("t"):
        files = [Path(f) for f in source_data_files(source.location)]
        if listed is not None:
            listed.now = {str(p): None for p in files}
        return f"t{max((p.stat().st_mtime for p in files), default=0.0)!r}", [], None
    resume, ranges, unreadable = _file_ranges(source, float(marker[1:]), tz, listed)
    notes = [f"{len(unreadable)} file(s) not readable yet (half-written?), read again next tick"] if unreadable else []
    listed_now = set(listed.now or ()) | set(unreadable) if listed else set()
    gone = sorted(set(listed.before) - listed_now) if listed and listed.before is not None else []
    if gone:
        notes.append(f"{len(gone)} file(s) removed ({gone[0]}...): the intervals of their rows are computed again")
    return f"t{resume!r}", changed_windows(ranges, unit), (f"{source.name}: " + "; ".join(notes)) if notes else None


def whole_source_changes(source: Source, marker: str | None) -> tuple[str, bool, str | None]:
    """A source without a time column (read whole: a CSV of keys, a dimension table): its new marker, whether
    it changed since ``marker``, and a note (or None). The marker is a Delta version, or for files a digest
    of every data file's path, size and modification time (a file added, removed, rewritten or still
    growing changes it). The first look (no marker of this kind) counts as a change: nothing says the
    models reading the source hold its current rows."""
    if source.format == "delta":
        if marker and marker.startswith("v") and delta.still_at(source.location, int(marker[1:])):
            return marker, False, None  # no commit since: the table is not opened
        current = delta.version(source.location)  # None: no table there
        if current is None:
            return marker or "", False, f"{source.name}: no Delta table at {source.location} yet"
        return f"v{current}", marker != f"v{current}", None
    files = source_files_state(source.location)
    if not files:
        return marker or "", False, f"{source.name}: no data file at {source.location} yet"
    digest = hashlib.sha256(repr(files).encode()).hexdigest()[:20]
    return f"f{digest}", marker != f"f{digest}", None


def watched(source: Source) -> bool:
    """Whether :func:`observe_sources` notices every change of ``source``: a Delta table, or files on this
    machine in a format it reads (with a time column: each new row's interval; without: that it changed)."""
    if source.format not in WATCHED_FORMATS:
        return False
    return source.format == "delta" or delta.is_local(source.location)


def touched_by_sources(project: Project, changed: dict[str, list[TimeWindow]], now: datetime) -> dict[str, Coverage]:
    """Models reading a changed source directly: the complete intervals whose read window (the run window
    widened by the model's lookback on that source) overlaps new data; unpartitioned models whole. A
    source without a time column (changed: every interval) reaches only unpartitioned models: the
    intervals an incremental model computed before it changed are kept, as a run of new intervals would.
    Models further downstream follow by staleness once these are materialized again."""
    out: dict[str, Coverage] = {}
    for model in project.ordered():
        reads = [s for s in model.depends_on if s in changed and changed[s]]
        if not reads:
            continue
        if not isinstance(model.kind, IncrementalByTimeRange):
            if model.has_table:
                out[model.name] = EVERY_INTERVAL
            continue
        reads = [s for s in reads if s not in project.sources or project.sources[s].time_column]
        assert model.start is not None
        unit = model.unit
        windows = []
        for name in reads:
            bound = input_bound(project, model.name, name)
            for c in changed[name]:
                w = c.widen(bound.after, bound.before) if bound is not None else c
                start = max(unit.floor(w.start), model.start)
                end = min(
                    unit.ceil(w.end), last_complete_end(now, unit, project.settings.zone), model.end or unit.ceil(w.end)
                )
                if end > start:
                    windows.append(TimeWindow(start, end))
        if windows:
            out[model.name] = Coverage.of(windows)
    return out


# -- the shared record --------------------------------------------------------------------------------


@dataclass
class Entry:
    """Intervals of one model touched by new source data, noticed after event ``after`` at time ``at``."""

    windows: Coverage
    after: int
    at: float

    def dump(self) -> dict:
        return {"windows": self.windows.to_json(), "after": self.after, "at": self.at}

    @classmethod
    def parse(cls, raw: dict) -> "Entry":
        return cls(Coverage.from_json(raw["windows"]), int(raw["after"]), float(raw["at"]))


@dataclass
class WatchState:
    sources: dict[str, str] = field(default_factory=dict)  # source -> its marker ("v...", "t..." or "f...")
    touched: dict[str, list[Entry]] = field(default_factory=dict)  # model -> entries not done yet

    @classmethod
    def parse(cls, text: str | None) -> "WatchState":
        if not text:
            return cls()
        try:
            raw = json.loads(text)
            if raw.get("version") != STATE_VERSION:
                return cls()
            touched = {str(m): [Entry.parse(e) for e in entries] for m, entries in raw.get("touched", {}).items()}
            return cls({str(k): str(v) for k, v in raw.get("sources", {}).items()}, touched)
        except (ValueError, TypeError, KeyError, AttributeError):
            return cls()  # unreadable: sources are watched from their current state

    def dump(self) -> str:
        touched = {m: [e.dump() for e in entries] for m, entries in sorted(self.touched.items()) if entries}
        return json.dumps({"version": STATE_VERSION, "sources": self.sources, "touched": touched}, sort_keys=True)


@dataclass
class Observed:
    """What :func:`observe_sources` found: per model the intervals still to compute for new source data,
    each source's watermark, the intervals noticed by this call, and notes for the user."""

    pending: dict[str, Coverage] = field(default_factory=dict)
    markers: dict[str, str] = field(default_factory=dict)
    noticed: dict[str, Coverage] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def windows(self, model: SqlModel, start: datetime | None = None, end: datetime | None = None) -> list[TimeWindow]:
        """A partitioned model's pending intervals within [start, end) (complete ones: ``end`` is a bound)."""
        pending = self.pending.get(model.name)
        if pending is None or pending.every:
            return []
        return list(pending.within(TimeWindow(start or START_OF_TIME, end or END_OF_TIME)))


def _key(project: Project) -> str:
    return f"{STATE_KEY}:{project.settings.warehouse}"


@contextlib.contextmanager
def _locked(instance: dg.DagsterInstance) -> Iterator[None]:
    """One observer at a time per Dagster home (a flock on a file in it; none for a home without a folder).
    Without it two observers could both notice the same data: harmless, only work done twice."""
    root = getattr(instance, "root_directory", None)
    if not root or not os.path.isdir(root):
        yield
        return
    fd = os.open(os.path.join(root, LOCK_NAME), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing drops the flock


def _listed_key(project: Project, source: Source) -> str:
    return f"{FILES_KEY}:{project.settings.warehouse}:{source.name}"


def _listed(instance: dg.DagsterInstance, project: Project, source: Source) -> FileList:
    """A file source's data files at the last look, kept in the instance beside the record (not known for a
    source of more than :data:`MAX_LISTED` files)."""
    key = _listed_key(project, source)
    raw = json.loads(instance.run_storage.get_cursor_values({key}).get(key) or "null")
    return FileList(dict.fromkeys(raw) if isinstance(raw, list) else raw if isinstance(raw, dict) else None)


def _keep_listed(instance: dg.DagsterInstance, project: Project, source: Source, listed: FileList) -> None:
    if listed.now is None or listed.now == listed.before:
        return
    value = json.dumps(dict(sorted(listed.now.items()))) if len(listed.now) <= MAX_LISTED else ""
    instance.run_storage.set_cursor_values({_listed_key(project, source): value})


def read_state(instance: dg.DagsterInstance, project: Project) -> WatchState:
    key = _key(project)
    return WatchState.parse(instance.run_storage.get_cursor_values({key}).get(key))


def observe_sources(
    instance: dg.DagsterInstance,
    project: Project,
    now: datetime,
    translator: ModelTranslator | None = None,
    *,
    legacy_sources: dict[str, str] | None = None,
    legacy_pending: dict[str, Coverage] | None = None,
) -> Observed:
    """Read what arrived in the sources since the last look (by anyone), record what it touched, drop what
    has been computed since, and return what is still pending. ``legacy_*``: what an older automation
    sensor kept in its own cursor, taken over (a watermark only for a source the record does not have)."""
    translator = translator or ModelTranslator()
    observed = Observed()
    with _locked(instance):
        state = read_state(instance, project)
        before = state.dump()
        for name, marker in (legacy_sources or {}).items():
            state.sources.setdefault(name, marker)
        mark = instance.event_log_storage.get_maximum_record_id() or 0
        at = clock.wall_time().timestamp()
        for name, windows in (legacy_pending or {}).items():
            if name in project.models and windows:
                state.touched.setdefault(name, []).append(Entry(windows, mark, at))
        read = {n for m in project.models.values() for n in m.depends_on}
        changed: dict[str, list[TimeWindow]] = {}
        for source in project.sources.values():
            if source.name not in read or not watched(source):
                continue
            if source.time_column:
                listed = _listed(instance, project, source) if source.format != "delta" else None
                marker, touched, note = source_changes(
                    source, state.sources.get(source.name), project.settings.zone, listed
                )
                if listed is not None:
                    _keep_listed(instance, project, source, listed)
            else:
                marker, whole, note = whole_source_changes(source, state.sources.get(source.name))
                touched = [TimeWindow(START_OF_TIME, END_OF_TIME)] if whole else []
            state.sources[source.name] = marker
            changed[source.name] = touched
            if note:
                observed.notes.append(note)
        for name, windows in touched_by_sources(project, changed, now).items():
            state.touched.setdefault(name, []).append(Entry(windows, mark, at))
            observed.noticed[name] = windows
        for name in list(state.touched):
            model = project.models.get(name)
            entries = _not_done(instance, model, translator, state.touched[name]) if model is not None else []
            if entries:
                state.touched[name] = entries
            else:
                del state.touched[name]
        if state.dump() != before:
            instance.run_storage.set_cursor_values({_key(project): state.dump()})
    observed.markers = dict(state.sources)
    for name, entries in state.touched.items():
        observed.pending[name] = NO_INTERVAL.union(*(e.windows for e in entries))
    return observed


def _not_done(
    instance: dg.DagsterInstance, model: SqlModel, translator: ModelTranslator, entries: list[Entry]
) -> list[Entry]:
    """The entries, each cut to its intervals not yet materialized by a run that could read the new data."""
    key = translator.get_asset_key(model)
    partitions = translator.get_partitions_def(model)
    if not isinstance(partitions, dg.TimeWindowPartitionsDefinition):
        records = instance.fetch_materializations(key, limit=1).records
        latest = {"": records[0].storage_id} if records else {}
        started = _run_starts(instance, list(latest.values()))
        return [e for e in entries if not _covers(latest.get(""), e, started)]
    parts = [
        [
            (part, key_of(partitions, part.start))
            for w in entry.windows
            for part in batches(
                TimeWindow(model.unit.floor(w.start), model.unit.ceil(w.end)), model.unit, 1
            )  # its unit may have changed
        ]
        if not entry.windows.every  # else the model was unpartitioned when it was noticed
        else []
        for entry in entries
    ]
    ids = latest_ids(instance, key, partitions={pk for found in parts for _, pk in found})
    started = _run_starts(instance, sorted({sid for sid in ids.values() if sid > min(e.after for e in entries)}))
    out = []
    for entry, found in zip(entries, parts):
        left = [part for part, pk in found if not _covers(ids.get(pk), entry, started)]
        if left:
            out.append(Entry(Coverage.of(left), entry.after, entry.at))
    return out


def _covers(storage_id: int | None, entry: Entry, started: dict[int, float | None]) -> bool:
    if storage_id is None or storage_id <= entry.after:
        return False
    start = started.get(storage_id)
    return start is None or start >= entry.at


def _run_starts(instance: dg.DagsterInstance, ids: list[int]) -> dict[int, float | None]:
    """When the run that wrote each event started (None: not known)."""
    if not ids:
        return {}
    runs = run_ids_of(instance, ids) or {}
    wanted = sorted({r for r in runs.values() if r})
    starts = {}
    for first in range(0, len(wanted), 500):
        for record in instance.get_run_records(filters=dg.RunsFilter(run_ids=wanted[first : first + 500])):
            starts[record.dagster_run.run_id] = record.start_time
    return {sid: starts.get(runs.get(sid, "")) for sid in ids}
