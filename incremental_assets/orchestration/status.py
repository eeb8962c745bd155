"""Interval status from Dagster's partition status (no second state store): covered ranges, gaps,
failed and running intervals, and whether a model changed since its table was built."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone, tzinfo
from typing import Mapping, Sequence

import dagster as dg

from incremental_assets.errors import WindowError
from incremental_assets.model import clock
from incremental_assets.model.intervals import (
    TimeWindow,
    ceil,
    check_aligned,
    count_intervals,
    floor,
    last_complete_end,
    merge,
    subtract,
)
from incremental_assets.model.kinds import IncrementalByTimeRange
from incremental_assets.model.sql_model import SqlModel
from incremental_assets.orchestration.partition_keys import partition_states
from incremental_assets.orchestration.translator import ModelTranslator
from incremental_assets.plan.rebuild import (
    change_effect,
    definition_changed,
    needs_rebuild,
)

# What `status` shows of an unpartitioned model's last materialization.
STATUS_DETAILS = (
    "run_rows_written",
    "rows_written",
    "rows_inserted",
    "rows_updated",
    "rows_closed",
    "cursor_after",
    "delta_version",
)


@dataclass(frozen=True)
class ModelStatus:
    model: str
    partitioned: bool
    covered: tuple[TimeWindow, ...] = ()
    failed: tuple[TimeWindow, ...] = ()
    in_progress: tuple[TimeWindow, ...] = ()
    gaps: tuple[TimeWindow, ...] = ()
    expected: TimeWindow | None = None
    last_materialized: datetime | None = None
    intervals_done: int = 0
    intervals_expected: int = 0
    last_details: Mapping[str, str] = field(
        default_factory=dict
    )  # unpartitioned: rows, cursor, version of the last run
    changed: bool = False  # built with another definition: the next run rebuilds ``rebuild``
    rebuild: TimeWindow | None = None
    on_change: str | None = None  # a changed merge-style model: what its next run does (start over, or keep its rows)
    lost: tuple[TimeWindow, ...] = ()  # recorded by Dagster, but not in the table (see orchestration.integrity)


def model_status(
    instance: dg.DagsterInstance,
    model: SqlModel,
    *,
    translator: ModelTranslator | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    now: datetime | None = None,
    built_with: str | None = None,
    lost: Sequence[TimeWindow] = (),
    tz: tzinfo = timezone.utc,
) -> ModelStatus:
    """Covered ranges, gaps and failed intervals of a model, from Dagster's partition status.

    ``built_with`` is the fingerprint the table was built with: when it differs from the model's (and the model
    is not forward_only) the status says the model changed and which intervals the next run rebuilds; for a
    merge-style model what the next run does (start over, or keep its rows). ``lost`` are recorded intervals
    the table does not hold (:func:`~.integrity.check_model`): they count as gaps, not as covered."""
    translator = translator or ModelTranslator()
    key = translator.get_asset_key(model)
    partitions = translator.get_partitions_def(model)
    if not isinstance(partitions, dg.TimeWindowPartitionsDefinition):
        return _unpartitioned_status(instance, model, key, built_with)
    unit = model.unit
    assert model.start is not None
    start, expected = _expected_window(model, since, until, now, tz)
    # Covered: intervals with a successful materialization, whose data is in the table. A later failed
    # attempt does not remove them (the failed run committed nothing); it is listed under failed.
    states = partition_states(instance, key, partitions)
    by_state = {"MATERIALIZED": states.materialized, "FAILED": states.failed, "IN_PROGRESS": states.running}

    def clip(ws: list[TimeWindow]) -> tuple[TimeWindow, ...]:
        return tuple(w for w in merge(ws) if not (since and w.end <= start or until and w.start >= until))

    if lost:
        by_state["MATERIALIZED"] = [part for w in by_state["MATERIALIZED"] for part in subtract(w, lost)]
    covered = clip(by_state["MATERIALIZED"])
    gaps = tuple(subtract(expected, covered)) if expected else ()
    done = sum(
        count_intervals(part, unit)
        for w in by_state["MATERIALIZED"]
        for part in ([w] if expected is None else _within(w, expected))
    )
    total = count_intervals(expected, unit) if expected else 0
    changed = needs_rebuild(model, built_with)
    rebuild = _rebuild_window(model.start, covered, expected) if changed else None
    return ModelStatus(
        model.name,
        True,
        changed=changed,
        rebuild=rebuild,
        covered=covered,
        failed=clip(by_state["FAILED"]),
        in_progress=clip(by_state["IN_PROGRESS"]),
        gaps=gaps,
        expected=expected,
        intervals_done=done,
        intervals_expected=total,
        lost=clip(list(lost)),
    )


def _expected_window(
    model: SqlModel, since: datetime | None, until: datetime | None, now: datetime | None, tz: tzinfo
) -> tuple[datetime, TimeWindow | None]:
    """Where the status starts, and the window of whole intervals it expects covered (None: none yet).
    Only whole intervals count: ``since`` is rounded up and ``until`` down to interval boundaries."""
    assert model.start is not None
    unit = model.unit
    start = max(model.start, ceil(since, unit)) if since else model.start
    end = last_complete_end(now or clock.now(), unit, tz)
    if model.end:
        end = min(end, model.end)
    if until:
        end = min(end, floor(until, unit))
    return start, TimeWindow(start, end) if end > start else None


def _rebuild_window(start: datetime, covered: tuple[TimeWindow, ...], expected: TimeWindow | None) -> TimeWindow | None:
    """What the next run of a changed model rebuilds: from its start to the end of what is covered or expected."""
    if not covered:
        return None
    return TimeWindow(start, max(covered[-1].end, expected.end if expected else covered[-1].end))


def _within(window: TimeWindow, bounds: TimeWindow) -> list[TimeWindow]:
    start, end = max(window.start, bounds.start), min(window.end, bounds.end)
    return [TimeWindow(start, end)] if end > start else []


def _unpartitioned_status(
    instance: dg.DagsterInstance, model: SqlModel, key: dg.AssetKey, built_with: str | None
) -> ModelStatus:
    """A FULL, VIEW, SEED or merge-style model: its last materialization and what a changed definition does."""
    event = instance.get_latest_materialization_event(key)
    when = datetime.fromtimestamp(event.timestamp, timezone.utc) if event else None
    details: dict[str, str] = {}
    if event is not None and event.asset_materialization is not None:
        meta = event.asset_materialization.metadata
        details = {k: str(meta[k].value) for k in STATUS_DETAILS if k in meta}
    changed = definition_changed(model, built_with)
    on_change = change_effect(model) if changed and model.is_merge_style else None
    return ModelStatus(
        model.name, False, last_materialized=when, last_details=details, changed=changed, on_change=on_change
    )


def windows_to_run(
    instance: dg.DagsterInstance,
    model: SqlModel,
    *,
    start: datetime | None,
    end: datetime | None,
    auto: bool,
    translator: ModelTranslator,
    now: datetime | None = None,
    lost: Sequence[TimeWindow] = (),
    tz: tzinfo = timezone.utc,
) -> list[TimeWindow]:
    """The windows one model should run: the requested one (aligned), or with ``auto`` its gaps (the
    ``lost`` intervals included)."""
    assert isinstance(model.kind, IncrementalByTimeRange) and model.start is not None
    unit = model.unit
    if auto:
        status = model_status(instance, model, translator=translator, since=start, until=end, now=now, lost=lost, tz=tz)
        return list(status.gaps)
    if start is None or end is None:
        raise WindowError(f"model {model.name} is incremental: give --start and --end, or --auto")
    window = TimeWindow(start, end)
    check_aligned(window, unit, model=model.name)
    lo = max(window.start, model.start)
    hi = min(window.end, model.end) if model.end else window.end
    return [TimeWindow(lo, hi)] if hi > lo else []
