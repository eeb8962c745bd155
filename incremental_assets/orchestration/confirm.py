"""Confirmations: Dagster records saying an asset's materialized data is current as it is, without a run.

A change the plan says a model's data does not depend on (its upstream was rebuilt, but the model reads
none of the columns whose values changed; or the model itself changed forward-only) recomputes nothing.
Dagster would still call its partitions stale: their provenance names the upstream materializations they
read, or the code version they were computed with. A confirmation is an ``AssetObservation`` per
materialized partition carrying the provenance Dagster's stale-status resolver reads
(``dagster/code_version``, ``dagster/input_event_pointer/*``, ``dagster/input_data_version/*``) brought up
to date, and the partition's own data version unchanged. Dagster's resolver takes the latest
materialization or observation of a partition as its current state, so the partition is fresh, and its
downstream partitions (which compare the data version before and after) are not made stale by it. The
materializations stay as they were: the history shows what was computed, and when.

Our own staleness (:mod:`.staleness`) reads a confirmation as the moment a partition was last known
current: one more query per model, the latest observation id per partition.

Cost: two queries to read the current tags of every partition, one transaction to write all the
confirmations of a model (the event log's batch write): cheap at a year of hourly partitions.
"""

from __future__ import annotations

import logging
from typing import Iterable, Mapping, Sequence

import dagster as dg
from dagster._core.definitions.data_version import (
    CODE_VERSION_TAG,
    DATA_VERSION_IS_USER_PROVIDED_TAG,
    DATA_VERSION_TAG,
    DEFAULT_DATA_VERSION,
    NULL_EVENT_POINTER,
    get_input_data_version_tag,
    get_input_event_pointer_tag,
)
from dagster._core.events import AssetObservationData, DagsterEvent, DagsterEventType
from dagster._core.events.log import EventLogEntry
from dagster._core.instance.utils import RUNLESS_JOB_NAME, RUNLESS_RUN_ID

from incremental_assets.model import clock

MATERIALIZATION = DagsterEventType.ASSET_MATERIALIZATION
OBSERVATION = DagsterEventType.ASSET_OBSERVATION
CONFIRMED = "confirmed_current"  # the metadata entry of a confirmation: why nothing was recomputed


def latest_ids(
    instance: dg.DagsterInstance,
    key: dg.AssetKey,
    event_type: DagsterEventType = MATERIALIZATION,
    partitions: set[str] | None = None,
    after_cursor: int | None = None,
) -> dict[str, int]:
    """The storage id of the latest event of ``event_type`` of each partition of an asset (of ``partitions``
    only, when given; only partitions with an event after the storage id ``after_cursor``, when given)."""
    if partitions is not None and not partitions:
        return {}
    return dict(
        instance.get_latest_storage_id_by_partition(key, event_type, partitions=partitions, after_cursor=after_cursor)
    )


def current_ids(instance: dg.DagsterInstance, key: dg.AssetKey, partitions: set[str] | None = None) -> dict[str, int]:
    """Per partition (of ``partitions`` only, when given), the storage id of the latest materialization or
    confirmation: when the partition was last known current."""
    ids = latest_ids(instance, key, partitions=partitions)
    for partition, sid in latest_ids(instance, key, OBSERVATION, partitions).items():
        if partition in ids and sid > ids[partition]:
            ids[partition] = sid
    return ids


def latest_record(instance: dg.DagsterInstance, key: dg.AssetKey, *, observations: bool = True):
    """The latest materialization (or confirmation) record of an asset, any partition; None if none."""
    records = list(instance.fetch_materializations(key, limit=1).records)
    if observations:
        records += list(instance.fetch_observations(key, limit=1).records)
    return max(records, key=lambda r: r.storage_id) if records else None


def current_id(instance: dg.DagsterInstance, key: dg.AssetKey) -> int | None:
    """The storage id of an unpartitioned asset's latest materialization, or of a later confirmation."""
    materialized = latest_record(instance, key, observations=False)
    if materialized is None:
        return None
    record = latest_record(instance, key)
    return record.storage_id if record is not None else None


def _own_state(
    instance: dg.DagsterInstance, key: dg.AssetKey, partitioned: bool
) -> dict[str | None, tuple[int, Mapping[str, str]]]:
    """Per materialized partition (None: the unpartitioned asset) the storage id of its latest record
    (materialization or confirmation) and that record's tags (for a partition: its data version only,
    the one tag Dagster indexes per partition)."""
    if not partitioned:
        record = latest_record(instance, key)
        if record is None or latest_record(instance, key, observations=False) is None:
            return {}
        return {None: (record.storage_id, dict(record.event_log_entry.tags or {}))}
    storage = instance.event_log_storage
    materialized = latest_ids(instance, key)
    versions = dict(storage.get_latest_tags_by_partition(key, MATERIALIZATION, [DATA_VERSION_TAG]))
    observed = {p: sid for p, sid in latest_ids(instance, key, OBSERVATION).items() if sid > materialized.get(p, sid)}
    if observed:
        versions.update(
            storage.get_latest_tags_by_partition(
                key, OBSERVATION, [DATA_VERSION_TAG], asset_partitions=sorted(observed)
            )
        )
    return {p: (observed.get(p, sid), versions.get(p, {})) for p, sid in materialized.items()}


def _upstream_state(instance: dg.DagsterInstance, key: dg.AssetKey) -> tuple[int | None, str]:
    """An upstream asset's latest storage id (materialization or confirmation) and data version."""
    record = latest_record(instance, key)
    if record is None:
        return None, DEFAULT_DATA_VERSION.value
    return record.storage_id, (record.event_log_entry.tags or {}).get(DATA_VERSION_TAG) or DEFAULT_DATA_VERSION.value


def confirm(
    instance: dg.DagsterInstance,
    key: dg.AssetKey,
    parents: Mapping[dg.AssetKey, bool],
    *,
    code_version: str,
    partitioned: bool,
    reason: str,
    refreshed: Sequence[dg.AssetKey] = (),
    skip: Iterable[str] = (),
) -> int:
    """Record that the asset's materialized partitions (but ``skip``) are current: their code version is
    ``code_version`` and they have read the latest materializations of the ``refreshed`` upstream assets.
    ``parents`` are the asset's dependencies, each saying whether it is partitioned. Returns the number
    of partitions confirmed.

    The provenance written: for a refreshed parent, its latest record; for another partitioned parent,
    the partition's own latest record (what it read is older: any later upstream record still makes it
    stale); for an unpartitioned parent its current data version (a refreshed whole-table upstream does
    not make built intervals stale, see :mod:`.staleness`)."""
    skipped = set(skip)
    upstream = {parent: _upstream_state(instance, parent) for parent in parents}
    now = clock.wall_time().timestamp()
    entries = []
    for partition, (own_id, current) in _own_state(instance, key, partitioned).items():
        if partition in skipped:
            continue
        tags = {k: v for k, v in current.items() if v is not None and k != DATA_VERSION_IS_USER_PROVIDED_TAG}
        tags.setdefault(DATA_VERSION_TAG, DEFAULT_DATA_VERSION.value)
        tags[CODE_VERSION_TAG] = code_version
        for parent, parent_partitioned in parents.items():
            sid, data_version = upstream[parent]
            pointer = sid if parent in refreshed or not parent_partitioned else own_id
            tags[get_input_event_pointer_tag(parent)] = str(pointer) if pointer is not None else NULL_EVENT_POINTER
            tags[get_input_data_version_tag(parent)] = data_version
        observation = dg.AssetObservation(asset_key=key, partition=partition, metadata={CONFIRMED: reason}, tags=tags)
        event = DagsterEvent(
            event_type_value=OBSERVATION.value,
            event_specific_data=AssetObservationData(observation),
            job_name=RUNLESS_JOB_NAME,
        )
        entries.append(
            EventLogEntry(
                user_message="",
                level=logging.INFO,
                job_name=RUNLESS_JOB_NAME,
                run_id=RUNLESS_RUN_ID,
                error_info=None,
                timestamp=now,
                step_key=None,
                dagster_event=event,
            )
        )
    if entries:
        instance.event_log_storage.store_event_batch(entries)
    return len(entries)
