"""The integrity check of a table from where it last looked: only what changed since is read.

After a check that found nothing wrong, what it saw is remembered in the Dagster instance's key-value
store (one small JSON value per table): the table's version and the identity of that commit (see
:func:`~incremental_assets.delta.log_tail.identity`), the newest materialization storage id of the
asset, the newest Delta version Dagster recorded, and where the rotating sample of data files stands.
The instance holds it, not the table folder: the storage ids only mean something in that instance (a
new Dagster home starts them over and must look at everything again), and a command that only reads
(``status``) writes nothing into the table.

The next check then reads:

- the remembered commit's file, to see it is still the same commit (a table that fell back and reused
  the version, or was rebuilt, no longer matches: everything is checked again);
- the commit files after it (one per new version), and the materializations Dagster recorded after
  the remembered storage id (one query), judging each new record as a full check would;
- the data files those commits added, and :data:`SAMPLE` more files of the current version in turn,
  so that a deleted or resized older file is found within ``files / SAMPLE`` checks (``verify`` checks
  every file at once).

A check that finds a problem forgets the table's state: the next one looks at everything again.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

import dagster as dg

from incremental_assets import delta
from incremental_assets.delta.log_tail import identity, read_after, read_entry

KEY_PREFIX = "incremental_assets.integrity:"
SAMPLE = 64  # files of the current version stat'ed per check besides the new ones
_FETCH = 500


@dataclass(frozen=True)
class Looked:
    """What the last clean check of a table saw (see the module docstring)."""

    version: int
    identity: str
    storage_id: int
    newest: int | None  # the newest Delta version Dagster recorded
    sample_at: int = 0


@dataclass(frozen=True)
class Since:
    """What changed since the last look: new records, the log's run per version they name, the files to check."""

    current: int
    records: list  # the new records (integrity._Recorded)
    runs: dict[int, str]  # the run of each version the records name that the log still holds
    oldest: int  # versions before it are not in the log
    files: list[delta.TableFile]
    looked: Looked


def read_state(instance: dg.DagsterInstance, key: str, kind):
    """A dataclass value kept under ``key`` in the instance's key-value store (None: none, or unreadable)."""
    try:
        value = instance.run_storage.get_cursor_values({key}).get(key)
        return kind(**json.loads(value)) if value else None
    except (TypeError, ValueError):
        return None


def write_state(instance: dg.DagsterInstance, key: str, state) -> None:
    """Keep a dataclass value under ``key`` (None: forget it)."""
    instance.run_storage.set_cursor_values({key: json.dumps(asdict(state)) if state else ""})


def remembered(instance: dg.DagsterInstance, uri: str) -> Looked | None:
    return read_state(instance, KEY_PREFIX + uri, Looked)


def remember(instance: dg.DagsterInstance, uri: str, looked: Looked | None) -> None:
    write_state(instance, KEY_PREFIX + uri, looked)


def newest_storage_id(instance: dg.DagsterInstance, key: dg.AssetKey) -> int:
    latest = instance.fetch_materializations(key, limit=1).records
    return latest[0].storage_id if latest else 0


def looked_now(uri: str, current: int, storage_id: int, newest: int | None) -> Looked | None:
    """The state after a full check found the table at ``current`` (None: that commit's file is not readable)."""
    entry = read_entry(uri, current)
    return Looked(current, identity(entry.info), storage_id, newest) if entry else None


def check_since(instance: dg.DagsterInstance, key: dg.AssetKey, uri: str, looked: Looked, decode) -> Since | None:
    """What changed in the table and in Dagster's records since ``looked`` (None: the table is not the one
    remembered, or fell back: check everything). ``decode`` turns an event record into a record."""
    current = delta.version(uri)
    if current is None or current < looked.version:
        return None
    entry = read_entry(uri, looked.version)
    if entry is None or identity(entry.info) != looked.identity:
        return None
    entries = read_after(uri, looked.version, current)
    records, storage_id = [], looked.storage_id
    while True:
        page = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=key, after_storage_id=storage_id), limit=_FETCH, ascending=True
        ).records
        for record in page:
            decoded = decode(record)
            if decoded is not None:
                records.append(decoded)
        storage_id = page[-1].storage_id if page else storage_id
        if len(page) < _FETCH:
            break
    runs = {e.version: e.run_id for e in [entry, *entries]}
    oldest = looked.version
    for version in sorted({r.version for r in records if r.version is not None and r.version < looked.version}):
        older = read_entry(uri, version)  # a record naming an older commit (rare): read that one file
        if older is not None:
            runs[version], oldest = older.run_id, min(oldest, version)
    files, sample_at = _files_to_check(uri, entries, looked.sample_at)
    newest = max([v for v in [looked.newest, *(r.version for r in records)] if v is not None], default=None)
    last = entries[-1] if entries else entry
    return Since(
        current, records, runs, oldest, files, Looked(current, identity(last.info), storage_id, newest, sample_at)
    )


def _files_to_check(uri: str, entries: list, sample_at: int) -> tuple[list[delta.TableFile], int]:
    """The files the new commits added (and no later one removed), and the next :data:`SAMPLE` of the
    current version's files from ``sample_at`` on (wrapping around)."""
    added: dict[str, dict] = {}
    for entry in entries:
        for path in entry.removed:
            added.pop(path, None)
        added.update(entry.added)
    snapshot = delta.snapshot_files(uri)
    base = uri.rstrip("/")
    fresh = {f"{base}/{path}": action for path, action in added.items()}
    chosen = [f for f in snapshot if f.uri.removeprefix("file://") in fresh or f.uri in fresh]
    if not snapshot:
        return chosen, 0
    start = sample_at % len(snapshot)
    sample = (snapshot[start:] + snapshot[:start])[:SAMPLE]
    seen = {f.uri for f in chosen}
    return chosen + [f for f in sample if f.uri not in seen], (start + len(sample)) % len(snapshot)
