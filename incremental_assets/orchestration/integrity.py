"""Dagster's record against the tables: every recorded interval must be in its table.

Each materialization Dagster records for a model names the Delta version that wrote it
(``delta_version``), and each commit of ours names the run that made it (``incremental_assets.run_id``
in the commit's metadata). An interval is recorded but absent when:

- its version is newer than the table's current version (the newest log file was deleted: the table
  fell back a version);
- the log's commit of that version was made by another run (the table fell back, and a later commit
  reused the version number);
- the table is gone while Dagster records intervals of it;
- a data file of its partition is missing, or not the size the log recorded (cheap: one metadata call
  per file), or, with ``readable``, cannot be opened as Parquet.

The first check of a table reads the latest materialization of each partition (one query per model)
and the whole log; later checks read only what changed since the last clean one (see
:mod:`.integrity_since`). ``run --auto`` treats absent intervals as missing and
computes them again; a merge-style or unpartitioned table with a missing file is rebuilt whole.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import dagster as dg
import sqlalchemy as db
from dagster._core.storage.event_log.schema import SqlEventLogStorageTable
from dagster._core.storage.event_log.sql_event_log import SqlEventLogStorage

from incremental_assets import delta
from incremental_assets.errors import WindowError
from incremental_assets.model.intervals import IntervalUnit, TimeWindow, format_instant, merge, to_utc
from incremental_assets.model.project import Project
from incremental_assets.model.sql_model import SqlModel
from incremental_assets.orchestration import integrity_since as since_module
from incremental_assets.orchestration.partition_keys import window_of_key
from incremental_assets.orchestration.translator import ModelTranslator

_FETCH = 500  # storage ids per query (below every SQL engine's bound-parameter limit)


@dataclass(frozen=True)
class Integrity:
    """What one model's table lacks of what Dagster recorded for it."""

    model: str
    table_version: int | None = None  # None: no table
    recorded_version: int | None = None  # the newest Delta version Dagster recorded for it
    lost: tuple[TimeWindow, ...] = ()  # recorded intervals whose rows are not in the table
    whole_table: bool = False  # an unpartitioned (or keyed) table lost rows: it is rebuilt whole
    problems: tuple[str, ...] = field(default=())  # one line each: what is wrong
    seen_by_run: bool = True  # whether `run --auto` sees the loss too (not when only opening files shows it)

    @property
    def ok(self) -> bool:
        return not self.problems

    def advice(self) -> str:
        if self.whole_table:
            if not self.seen_by_run:
                return f"`incremental-assets run {self.model} --full-refresh` rebuilds it whole"
            return f"`incremental-assets run --auto` rebuilds {self.model} whole"
        if not self.seen_by_run:
            runs = [
                f"`incremental-assets run {self.model} --start {format_instant(w.start)} --end {format_instant(w.end)}`"
                for w in self.lost
            ]
            return f"{' and '.join(runs)} computes them again"
        return (
            "`incremental-assets run --auto` computes those intervals again (upstream sources must still hold "
            "their data)"
        )


@dataclass(frozen=True)
class _Recorded:
    partition: str | None
    version: int | None  # None: recorded without a Delta version (reported by hand, or by an older release)
    run_id: str


def check_model(
    instance: dg.DagsterInstance,
    project: Project,
    model: SqlModel,
    translator: ModelTranslator,
    *,
    files: bool | None = None,
    readable: bool = False,
) -> Integrity:
    """Compare what Dagster recorded for ``model`` with its Delta table (see the module docstring).

    ``files`` checks that every file of the current version exists with its logged size (None: only for
    a local table, where it costs a stat per file); ``readable`` also opens each file's Parquet footer. A damaged log
    raises :class:`DamagedTableError`."""
    if not model.has_table:
        return Integrity(model.name)  # a plain view has no table
    key = translator.get_asset_key(model)
    partitions = translator.get_partitions_def(model)
    timed = isinstance(partitions, dg.TimeWindowPartitionsDefinition)
    uri = project.settings.table_location(model.name)
    if files is None:
        files = delta.is_local(uri)
        every_file = False  # new files and a rotating sample (see .integrity_since)
    else:
        every_file = files
    looked = since_module.remembered(instance, uri) if not readable else None
    since = since_module.check_since(instance, key, uri, looked, _decode) if looked is not None else None
    current: int | None
    if since is not None:
        records, current, newest = since.records, since.current, since.looked.newest
        gone = [
            r
            for r in records
            if r.version is not None and _gone(r.version, r.run_id, current, since.runs, since.oldest)
        ]
        checked = (delta.snapshot_files(uri) if every_file else since.files) if files else []
    else:
        storage_id = since_module.newest_storage_id(instance, key)
        records = _recorded(instance, key, partitioned=timed)
        if not records:
            return Integrity(model.name)
        newest = max((r.version for r in records if r.version is not None), default=None)
        current = delta.version(uri)
        if current is None:
            return _no_table(model, partitions, timed, uri, records, newest)
        log = {c.version: c.run_id for c in delta.commits(uri)}
        oldest = min(log, default=current + 1)
        gone = [r for r in records if r.version is not None and _gone(r.version, r.run_id, current, log, oldest)]
        checked = delta.snapshot_files(uri) if files or readable else []
    found = _judged(model, partitions, timed, uri, current, newest, gone, checked, readable)
    if found.ok:
        state = since.looked if since is not None else since_module.looked_now(uri, current, storage_id, newest)
        since_module.remember(instance, uri, state)
    elif looked is not None:
        since_module.remember(instance, uri, None)  # look at everything next time
    return found


def _no_table(model: SqlModel, partitions, timed: bool, uri: str, records: list, newest: int | None) -> Integrity:
    """Dagster records intervals (or a materialization) of ``model`` but its table is gone: all of them are lost."""
    lost = _windows(partitions, [r.partition for r in records]) if timed else ()
    kind = "intervals" if timed else "a materialization"
    problem = f"Dagster records {kind} of {model.name} but there is no table at {uri}"
    return Integrity(model.name, None, newest, lost, not timed, (problem,))


def _judged(
    model,
    partitions,
    timed: bool,
    uri: str,
    current: int,
    newest: int | None,
    gone: list[_Recorded],
    checked,
    readable: bool,
) -> Integrity:
    """The integrity found from the records gone from the log and the files checked."""
    if gone:
        delta.check_log(uri)  # a damaged log file (e.g. an empty newest commit) is said as such, with its fix
    problems = []
    if any(r.version is not None and r.version > current for r in gone):
        problems.append(
            f"table {uri} is at Delta version {current}, behind version {newest} that Dagster recorded "
            "(its newest log file was lost)"
        )
    elif gone:
        problems.append(
            f"table {uri}: Delta versions {_versions(gone)} were written by other runs than Dagster "
            "recorded (the log was rewritten)"
        )
    damaged = delta.file_problems(uri, checked, readable=readable) if checked else []
    for item, reason in damaged[:3]:
        problems.append(f"file {item.uri.removeprefix('file://')} is {reason}")
    if len(damaged) > 3:
        problems.append(f"... and {len(damaged) - 3} more damaged file(s)")
    # Only opening a file shows it unreadable: `run --auto` (which does not open them) cannot see it.
    seen = bool(gone) or any(not reason.startswith("not readable") for _, reason in damaged)
    if not timed or any(item.interval is None and item.day is None for item, _ in damaged):
        return Integrity(model.name, current, newest, (), bool(problems), tuple(problems), seen)
    keys = {r.partition for r in gone}
    for item, _ in damaged:
        keys |= (
            _keys_of_day(partitions, item.day) if item.day is not None else {_key_of(partitions, model, item.interval)}
        )
    lost = _windows(partitions, sorted(k for k in keys if k))
    return Integrity(model.name, current, newest, lost, False, tuple(problems), seen)


def _recorded(instance: dg.DagsterInstance, key: dg.AssetKey, *, partitioned: bool) -> list[_Recorded]:
    """The Delta version (and writing run) of the latest materialization of each partition, or of the
    asset when it is unpartitioned."""
    if not partitioned:
        latest = instance.fetch_materializations(key, limit=1).records
        return list(_read(instance, key, [latest[0].storage_id] if latest else []).values())
    by_partition = instance.get_latest_storage_id_by_partition(key, dg.DagsterEventType.ASSET_MATERIALIZATION)
    ids = sorted(set(by_partition.values()))
    runs = run_ids_of(instance, ids)
    if runs is None:
        return list(_read(instance, key, ids).values())
    # A run records one materialization per partition with the same Delta version and writer: read the
    # first and last of each run's, and all of a run whose two differ (and every runless one).
    groups: dict[str, list[int]] = {}
    for sid in ids:
        groups.setdefault(runs.get(sid, ""), []).append(sid)
    read = _read(
        instance, key, sorted({sid for run, sids in groups.items() for sid in ((sids[0], sids[-1]) if run else sids)})
    )
    partition_of = {sid: pk for pk, sid in by_partition.items()}
    out = []
    for run, sids in groups.items():
        first, last = read.get(sids[0]), read.get(sids[-1])
        if not run or first is None or last is None or (first.version, first.run_id) != (last.version, last.run_id):
            read.update(_read(instance, key, [sid for sid in sids if sid not in read]))
            out += [read[sid] for sid in sids if sid in read]
        else:
            out += [_Recorded(partition_of[sid], first.version, first.run_id) for sid in sids]
    return out


def run_ids_of(instance: dg.DagsterInstance, ids: list[int]) -> dict[int, str] | None:
    """The run of each event (by storage id), read from the event log's index without decoding the
    events; None when the storage is not Dagster's SQL event log."""
    storage = instance.event_log_storage
    if not isinstance(storage, SqlEventLogStorage):
        return None
    table = SqlEventLogStorageTable
    runs: dict[int, str] = {}
    with storage.index_connection() as conn:
        for first in range(0, len(ids), _FETCH):
            query = db.select(table.c.id, table.c.run_id).where(table.c.id.in_(ids[first : first + _FETCH]))
            runs.update((int(sid), run or "") for sid, run in conn.execute(query))
    return runs


def _read(instance: dg.DagsterInstance, key: dg.AssetKey, ids: list[int]) -> dict[int, _Recorded]:
    """The materializations with these storage ids, decoded: partition, Delta version, writing run."""
    out: dict[int, _Recorded] = {}
    for first in range(0, len(ids), _FETCH):
        chunk = ids[first : first + _FETCH]
        result = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=key, storage_ids=chunk), limit=len(chunk)
        )
        for record in result.records:
            decoded = _decode(record)
            if decoded is not None:
                out[record.storage_id] = decoded
    return out


def _decode(record: dg.EventLogRecord) -> _Recorded | None:
    materialization = record.asset_materialization
    if materialization is None:
        return None
    meta = materialization.metadata
    writer = meta["committed_by_run"].value if "committed_by_run" in meta else record.run_id
    recorded = meta["delta_version"].value if "delta_version" in meta else None
    version = int(recorded) if isinstance(recorded, (int, float, str)) else None
    return _Recorded(materialization.partition, version, str(writer or ""))


def _gone(version: int, run_id: str, current: int, log: dict[int, str], oldest: int) -> bool:
    """Whether the commit recorded as ``version`` by ``run_id`` is no longer the table's (versions before
    the oldest commit of ours still in the log cannot be judged)."""
    if version > current:
        return True
    if version in log:
        return log[version] not in ("", run_id)
    return version >= oldest  # that version is someone else's commit now


def _versions(records: list[_Recorded]) -> str:
    return ", ".join(str(v) for v in sorted({r.version for r in records if r.version is not None}))


def _key_of(partitions: dg.TimeWindowPartitionsDefinition, model: SqlModel, interval: str | None) -> str | None:
    """The Dagster partition key of the table partition ``ia_interval=<interval>``."""
    if interval is None:
        return None
    try:
        start = to_utc(interval)
    except WindowError:
        return None
    return partitions.get_partition_key_for_timestamp(start.timestamp())


def _keys_of_day(partitions: dg.TimeWindowPartitionsDefinition, day: str) -> set[str | None]:
    """The Dagster partition keys of every interval of the table partition ``ia_day=<day>`` (a file of a
    table cut by day holds all of them)."""
    try:
        start = to_utc(day)
    except WindowError:
        return set()
    end = IntervalUnit.DAY.next(start)
    keys = partitions.get_partition_keys_in_time_window(dg.TimeWindow(start, end))
    return set(keys)


def _windows(partitions: dg.PartitionsDefinition | None, keys: Sequence[str | None]) -> tuple[TimeWindow, ...]:
    assert isinstance(partitions, dg.TimeWindowPartitionsDefinition)
    windows = []
    for pk in keys:
        window = window_of_key(partitions, pk) if pk is not None else None
        if window is not None:  # else a key of an older partitions definition
            windows.append(window)
    return tuple(merge(windows))
