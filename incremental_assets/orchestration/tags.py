"""Every run tag the product writes or reads, in one place.

Dagster's own range tags make one run cover a range of partitions; ours say who launched a run and
what it must do (rebuild, allow a downgrade, which execution time and fingerprint it works from).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Mapping

import dagster as dg

from incremental_assets.model.intervals import IntervalUnit, TimeWindow

# Dagster's: one run over the partitions from start to end (both keys included).
RANGE_START_TAG = "dagster/asset_partition_range_start"
RANGE_END_TAG = "dagster/asset_partition_range_end"
PARTITION_TAG = "dagster/partition"

# Who started the run: cli, automation, schedule (absent: the UI).
LAUNCHED_BY_TAG = "incremental_assets/launched_by"
# Why the automation sensor requested a run (missing intervals, new source data, an upstream change, ...).
REASON_TAG = "incremental_assets/reason"
# The process that runs a CLI run in-process: a dead one's runs are marked failed by the next command.
PID_TAG = "incremental_assets/pid"
HOST_TAG = "incremental_assets/host"
# Refused models run once as a full rebuild, with a warning.
ALLOW_DOWNGRADE_TAG = "incremental_assets/allow_downgrade"
# ISO-8601 instant a run treats as its execution time (SCD type 2 closes deleted rows at it; macros see it).
EXECUTION_TIME_TAG = "incremental_assets/execution_time"
# ISO-8601 instant a command ended its runs at (--end): a unique-key run reads up to it when it is before the
# execution time, as SQLMesh's run --end does.
END_TAG = "incremental_assets/end"
# A run tagged so rebuilds the model from its start: one commit replacing the whole table.
REBUILD_TAG = "incremental_assets/rebuild"
# A rebuild the user asked for (--full-refresh): its rows may change anywhere, whatever the definition says.
FULL_REFRESH_TAG = "incremental_assets/full_refresh"
# The fingerprint the model's table was built with ("" for none), as the launcher read it from the table's
# latest commit: the run does not read it again. Runs launched without it (the Dagster UI) read it themselves.
BUILT_WITH_TAG = "incremental_assets/built_with"
# The environment a run builds in (absent: production).
ENVIRONMENT_TAG = "incremental_assets/environment"
# A run the automation requested in the same tick as the upstream runs it reads: it starts beside them and
# waits for them in its run (the project's queue keeps one run slot free of such runs).
AFTER_UPSTREAM_TAG = "incremental_assets/after_upstream_runs"


def is_set(tags: Mapping[str, str], name: str) -> bool:
    """Whether a true/false tag is set to true."""
    return tags.get(name, "").lower() == "true"


def partition_key(partitions: dg.TimeWindowPartitionsDefinition, instant: datetime) -> str:
    """The key of the partition that starts at ``instant``."""
    return partitions.get_partition_key_for_timestamp(instant.timestamp())


def range_tags(
    partitions: dg.TimeWindowPartitionsDefinition, window: TimeWindow, unit: IntervalUnit | str
) -> dict[str, str]:
    """Tags of one run over ``window``: its first and last partition keys."""
    last_start = IntervalUnit.of(unit).floor(window.end - timedelta(microseconds=1))  # the window's last interval
    return {
        RANGE_START_TAG: partition_key(partitions, window.start),
        RANGE_END_TAG: partition_key(partitions, last_start),
    }


def range_of(tags: Mapping[str, str]) -> tuple[str, str] | None:
    """The (first, last) partition keys of a ranged run, None for other runs."""
    start, end = tags.get(RANGE_START_TAG), tags.get(RANGE_END_TAG)
    return (start, end) if start and end else None


# Set on a run failing on input the user must fix (a model, a source file, an audit): Dagster's run
# retries would fail the same way (Dagster's own tag).
RETRY_ON_FAILURE_TAG = "dagster/retry_on_asset_or_op_failure"
