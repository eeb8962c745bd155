"""Which intervals of a model read which upstream intervals (lookback included), and which of them wait
for nothing but upstream runs a tick requests (see :mod:`.sensors`)."""

from __future__ import annotations

from typing import Mapping

from incremental_assets.model.intervals import END_OF_TIME, EVERY_INTERVAL, NO_INTERVAL, Coverage, TimeWindow
from incremental_assets.model.project import Project
from incremental_assets.model.sql_model import SqlModel
from incremental_assets.orchestration.decisions import Upstreams
from incremental_assets.plan.analyses import input_bound


def intervals_reading(
    project: Project,
    model: SqlModel,
    upstream_intervals: Mapping[str, Coverage],
    never_materialized: frozenset[str],
    doing: Mapping[str, str],
) -> tuple[Coverage, list[str]]:
    """The intervals of ``model`` that read any of the given upstream intervals (lookback included), and a
    line per upstream read (what it is doing, when ``doing`` says); an upstream covering every interval,
    or never materialized, reaches every interval."""
    assert model.start is not None
    unit = model.unit
    reached: list[TimeWindow] = []
    lines = []
    for upstream in project.upstream_models(model):
        intervals = upstream_intervals.get(upstream.name, NO_INTERVAL)
        if upstream.name in never_materialized and not intervals:
            intervals = EVERY_INTERVAL
        if not intervals:
            continue
        if intervals.every:
            reached.append(TimeWindow(model.start, model.end or END_OF_TIME))
        else:
            bound = input_bound(project, model.name, upstream.name)
            for window in intervals:
                read = window.widen(bound.after, bound.before) if bound is not None else window
                reached.append(TimeWindow(unit.floor(read.start), unit.ceil(read.end)))
        lines.append(upstream_line(upstream.name, intervals, upstream.name in never_materialized, doing))
    return Coverage.of(reached), lines


def upstream_line(name: str, intervals: Coverage, never_materialized: bool, doing: Mapping[str, str]) -> str:
    if name in doing:
        return f"{name}: {doing[name]}"
    if intervals.every:
        return f"{name} (no data yet)" if never_materialized else f"{name} (being recomputed)"
    return f"{name} {', '.join(str(w) for w in intervals.windows[:3])}" + (" ..." if len(intervals.windows) > 3 else "")


def overlaps(one: Coverage, other: Coverage) -> bool:
    return bool(one.minus(one.minus(other)))


def following_upstream_runs(
    project: Project, model: SqlModel, candidates: Coverage, upstreams: Upstreams
) -> tuple[Coverage, tuple[str, ...]]:
    """The intervals of ``candidates`` that wait for nothing but upstream runs requested this tick (runs
    that wait for no other run themselves), and those upstreams: a run of these intervals can be
    requested now, start beside those runs and wait for them in its run."""
    if not candidates:
        return NO_INTERVAL, ()
    roots: dict[str, Coverage] = {}
    for upstream in project.upstream_models(model):
        windows = [launch.window for launch in upstreams.launching.get(upstream.name, ()) if not launch.follows]
        if windows:
            roots[upstream.name] = EVERY_INTERVAL if None in windows else Coverage.of(w for w in windows if w)
    if not roots:
        return NO_INTERVAL, ()
    rest = {}
    for name, unsettled in upstreams.unsettled.items():
        launched = roots.get(name)
        # An upstream run of some intervals does not settle an upstream unsettled as a whole.
        if launched is None or (unsettled.every and not launched.every):
            rest[name] = unsettled
        else:
            rest[name] = unsettled.minus(launched)
    still, _ = intervals_reading(project, model, rest, upstreams.never_materialized - set(roots), upstreams.doing)
    following = candidates.minus(still)
    follows = tuple(
        name
        for name, launched in roots.items()
        if overlaps(following, intervals_reading(project, model, {name: launched}, frozenset(), {})[0])
    )
    return (following, follows) if follows else (NO_INTERVAL, ())
