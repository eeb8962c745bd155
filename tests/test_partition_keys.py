"""Partition keys read with the units' calendar rules agree with Dagster's own answers, key by key."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import dagster as dg
import pytest

from incremental_assets.model.intervals import IntervalUnit, TimeWindow, merge, utc
from incremental_assets.orchestration.partition_keys import failed_and_running, partition_states, window_of_key
from incremental_assets.orchestration.translator import partitions_for


def _dagsters(partitions: dg.TimeWindowPartitionsDefinition, key: str) -> TimeWindow | None:
    if not partitions.has_partition_key(key):
        return None
    tw = partitions.time_window_for_partition_key(key)
    return TimeWindow(tw.start.astimezone(timezone.utc), tw.end.astimezone(timezone.utc))


@pytest.mark.parametrize("unit", list(IntervalUnit))
@pytest.mark.parametrize("end", [None, utc(2025, 7, 1)])
def test_every_key_reads_as_dagster_reads_it(unit, end):
    start = utc(2023, 12, 31) if unit is IntervalUnit.WEEK else utc(2024, 1, 1)
    partitions = partitions_for(unit, start, end)
    now = datetime.now(timezone.utc)
    keys = partitions.get_partition_keys()[:50] + partitions.get_partition_keys()[-50:]
    # keys it does not have: before the start, not aligned, not complete yet, in another unit's format, not a key
    instant = unit.floor(now)
    keys += [
        (start - timedelta(days=400)).strftime(unit.partition_format),
        (start + timedelta(hours=1)).strftime(unit.partition_format),
        (start + timedelta(days=3)).strftime(unit.partition_format),
        instant.strftime(unit.partition_format),
        unit.next(instant).strftime(unit.partition_format),
        "2024-01-02-05:00",
        "2024-01-02",
        "2024-13-01",
        "nonsense",
        "",
    ]
    for key in keys:
        assert window_of_key(partitions, key) == _dagsters(partitions, key), key


def test_failed_and_running_intervals_are_those_dagster_reports_per_partition(tmp_path):
    partitions = partitions_for("day", utc(2024, 1, 1))
    calls = {"n": 0}

    @dg.asset(partitions_def=partitions, key=["s", "daily"])
    def daily(context) -> None:
        calls["n"] += 1
        if context.partition_key in ("2024-01-03", "2024-01-04", "2024-01-09"):
            raise ValueError("an input was bad")

    with dg.instance_for_test(temp_dir=str(tmp_path)) as instance:
        for day in range(1, 11):
            dg.materialize([daily], partition_key=f"2024-01-{day:02d}", instance=instance, raise_on_error=False)
        dg.materialize([daily], partition_key="2024-01-04", instance=instance, raise_on_error=False)  # fails again
        key = dg.AssetKey(["s", "daily"])
        keys = partitions.get_partition_keys()
        statuses = instance.get_status_by_partition(key, keys, partitions)
        failed, running = failed_and_running(instance, key, partitions)
        expected = {pk for pk, state in statuses.items() if state is not None and state.value == "FAILED"}
        assert expected == {"2024-01-03", "2024-01-04", "2024-01-09"}
        assert {pk for pk in keys if any(w.contains(window_of_key(partitions, pk)) for w in failed)} == expected
        assert running == []
        materialized = [window_of_key(partitions, pk) for pk in instance.get_materialized_partitions(key)]
        assert (
            partition_states(instance, key, partitions).materialized
            == merge(materialized)
            == [
                TimeWindow(utc(2024, 1, 1), utc(2024, 1, 3)),
                TimeWindow(utc(2024, 1, 5), utc(2024, 1, 9)),
                TimeWindow(utc(2024, 1, 10), utc(2024, 1, 11)),
            ]
        )
