"""Partition keys and partition states as time windows, at a cost that does not grow with the history.

Dagster's ``TimeWindowPartitionsDefinition`` answers ``has_partition_key`` and
``time_window_for_partition_key`` by iterating its cron schedule (about 0.1-0.4 ms a key), and
``get_status_by_partition`` tests every key of the definition against its cached subsets: over a year of
hourly intervals a command spent seconds there. A model's partitions are ours (:func:`.translator.partitions_for`:
a unit's cron and key format, in UTC), so a key is read with the unit's calendar rules instead, and the
failed and running intervals are read as the time windows Dagster's status cache already holds.
A definition that is not one of ours is asked through Dagster's own methods.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

import dagster as dg
from dagster._core.storage.partition_status_cache import AssetStatusCacheValue, get_and_update_asset_status_cache_value

from incremental_assets.errors import TranslatorError
from incremental_assets.model import clock
from incremental_assets.model.intervals import IntervalUnit, TimeWindow, merge, subtract, to_utc

_UNIT_OF_CRON = {unit.cron: unit for unit in IntervalUnit}


def time_partitions(partitions: dg.PartitionsDefinition | None, model_name: str) -> dg.TimeWindowPartitionsDefinition:
    """An incremental model's partitions, which are time windows (its intervals): a translator that returns
    another kind is refused here, naming the model and the method.

    >>> time_partitions(dg.StaticPartitionsDefinition(["a"]), "s.m")
    Traceback (most recent call last):
    ...
    incremental_assets.errors.TranslatorError: get_partitions_def returned StaticPartitionsDefinition for ...
    """
    if isinstance(partitions, dg.TimeWindowPartitionsDefinition):
        return partitions
    raise TranslatorError(
        f"get_partitions_def returned {type(partitions).__name__} for the incremental model {model_name}: its "
        "intervals are time partitions (fix: return a TimeWindowPartitionsDefinition, e.g. ModelTranslator's own)"
    )


def unit_of(partitions: dg.TimeWindowPartitionsDefinition) -> IntervalUnit | None:
    """The interval unit of one of our partitions definitions (None: another kind of definition).

    >>> from incremental_assets.orchestration.translator import partitions_for
    >>> from incremental_assets.model.intervals import utc
    >>> unit_of(partitions_for("hour", utc(2024, 1, 1)))
    <IntervalUnit.HOUR: 'hour'>
    """
    unit = _UNIT_OF_CRON.get(partitions.cron_schedule)
    if unit is None or partitions.fmt != unit.partition_format or partitions.timezone != "UTC" or partitions.end_offset:
        return None
    return unit


def key_of(partitions: dg.TimeWindowPartitionsDefinition, start: datetime) -> str:
    """The key of the partition that starts at ``start`` (for ours, formatted without the cron stepping).

    >>> from incremental_assets.orchestration.translator import partitions_for
    >>> from incremental_assets.model.intervals import utc
    >>> key_of(partitions_for("hour", utc(2024, 1, 1)), utc(2024, 3, 5, 7))
    '2024-03-05-07:00'
    """
    unit = unit_of(partitions)
    if unit is None:
        return partitions.get_partition_key_for_timestamp(start.timestamp())
    return start.astimezone(timezone.utc).strftime(unit.partition_format)


def window_of_key(
    partitions: dg.TimeWindowPartitionsDefinition, key: str, *, now: datetime | None = None, strict: bool = True
) -> TimeWindow | None:
    """The interval of partition ``key``; None when the definition has no such key (a key of an older
    definition, or an interval not complete yet, as Dagster's ``has_partition_key`` says). Not ``strict``:
    any key in the definition's format names its interval (as ``time_window_for_partition_key`` reads it).

    >>> from incremental_assets.orchestration.translator import partitions_for
    >>> from incremental_assets.model.intervals import utc
    >>> hourly = partitions_for("hour", utc(2024, 1, 1))
    >>> str(window_of_key(hourly, "2024-01-02-05:00"))
    '[2024-01-02 05:00, 2024-01-02 06:00)'
    >>> [window_of_key(hourly, key) for key in ("2023-12-31-23:00", "2024-01-02", "2099-01-01-00:00")]
    [None, None, None]
    """
    unit = unit_of(partitions)
    if unit is None:
        if strict and not partitions.has_partition_key(key):
            return None
        try:
            tw = partitions.time_window_for_partition_key(key)
        except Exception:  # a key of another definition
            return None
        return TimeWindow(to_utc(tw.start), to_utc(tw.end))
    try:
        start = datetime.strptime(key, unit.partition_format).replace(tzinfo=timezone.utc)
    except ValueError:
        return None
    end = unit.next(start)
    if not strict:
        return TimeWindow(unit.floor(start), unit.next(unit.floor(start)))
    if start < to_utc(partitions.start) or not unit.is_boundary(start):
        return None
    if end > (to_utc(partitions.end) if partitions.end else (now or clock.now())):
        return None
    return TimeWindow(start, end)


def windows_of_keys(partitions: dg.TimeWindowPartitionsDefinition, keys) -> list[TimeWindow]:
    """The intervals of the keys the definition has, merged into ranges."""
    now = clock.now()
    return merge([w for w in (window_of_key(partitions, k, now=now) for k in keys) if w is not None])


@dataclass(frozen=True)
class PartitionStates:
    """An asset's intervals by Dagster's partition status, as merged ranges: ``materialized`` ever (a
    later failed attempt does not remove it), ``failed`` (the latest attempt failed) and ``running``
    (a running attempt hides a failed one, as in ``get_status_by_partition``)."""

    materialized: list[TimeWindow]
    failed: list[TimeWindow]
    running: list[TimeWindow]


def partition_states(
    instance: dg.DagsterInstance,
    key: dg.AssetKey,
    partitions: dg.TimeWindowPartitionsDefinition,
    *,
    within: bool = True,
) -> PartitionStates:
    """The asset's intervals by state, read from Dagster's partition status cache (brought up to date
    first, as ``get_status_by_partition`` does); ``within``: only intervals the definition has now."""
    cached = get_and_update_asset_status_cache_value(instance, key, partitions)
    if not isinstance(cached, AssetStatusCacheValue):
        return PartitionStates([], [], [])
    states = [
        _windows_of_subset(subset, partitions)
        for subset in (
            cached.deserialize_materialized_partition_subsets(partitions),
            cached.deserialize_failed_partition_subsets(partitions),
            cached.deserialize_in_progress_partition_subsets(partitions),
        )
    ]
    if within:
        bounds = _bounds(partitions)
        states = [[part for w in windows for part in _clip(w, bounds)] for windows in states]
    materialized, failed, running = (merge(windows) for windows in states)
    return PartitionStates(materialized, merge([part for w in failed for part in subtract(w, running)]), running)


def failed_and_running(
    instance: dg.DagsterInstance, key: dg.AssetKey, partitions: dg.TimeWindowPartitionsDefinition
) -> tuple[list[TimeWindow], list[TimeWindow]]:
    """The intervals whose latest attempt failed, and those being computed (see :class:`PartitionStates`)."""
    states = partition_states(instance, key, partitions)
    return states.failed, states.running


def _windows_of_subset(subset, partitions: dg.TimeWindowPartitionsDefinition) -> list[TimeWindow]:
    windows = getattr(subset, "included_time_windows", None)
    if windows is not None:
        return [TimeWindow(to_utc(w.start), to_utc(w.end)) for w in windows]
    return windows_of_keys(partitions, subset.get_partition_keys())


def _bounds(partitions: dg.TimeWindowPartitionsDefinition) -> TimeWindow:
    end = to_utc(partitions.end) if partitions.end else clock.now()
    unit = unit_of(partitions)
    if unit is not None and not partitions.end:
        end = unit.floor(end)  # the last complete interval's end
    return TimeWindow(to_utc(partitions.start), max(end, to_utc(partitions.start)))


def _clip(window: TimeWindow, bounds: TimeWindow) -> list[TimeWindow]:
    start, end = max(window.start, bounds.start), min(window.end, bounds.end)
    return [TimeWindow(start, end)] if end > start else []
