"""Between the daemon's looks at the automation sensor: a tick that launches nothing keeps watching.

Dagster's daemon looks at its sensors every 5 s (a fixed loop, no push), so data arriving just after a look
waited up to 5 s for the next one. A tick of the automation sensor that the daemon runs and that finds
nothing to launch therefore watches, until ``INCREMENTAL_ASSETS_SENSOR_WATCH`` seconds (4 s, inside the
daemon's loop) from its start, for what could change its decision, and plans again as soon as something does:

- a local source's data: a Delta source's log folder (each commit adds a file to it), a file source's
  files (one new, rewritten or still being written);
- the runs queued or in flight (an upstream run that ended lets the intervals waiting for it go);
- the hour of the tick's clock (intervals that became complete), a pinned clock included.

A look is one listing per source and one query of the run storage, repeated every 0.2-1 s (slower when a
look is slower); after a change the watch waits until the looks hold still for 0.4 s (at most 2 s), so that
sources written one after another are planned for together; so does a tick's first look when a source
changed since the previous tick's last. Sources in an object store are not watched: their news waits for the
next tick, as before. An evaluation outside the daemon (a test's context, the UI's "Test sensor") does not
watch.
"""

from __future__ import annotations

import os
import time
from datetime import datetime
from typing import Callable, Hashable, Iterable, Mapping

import dagster as dg

from incremental_assets.delta.files import local_path, source_files_state
from incremental_assets.model.intervals import IntervalUnit
from incremental_assets.model.project import Project
from incremental_assets.model.settings import is_local
from incremental_assets.orchestration.instance import ACTIVE_RUN_STATUSES

RUNS = "the runs queued or in flight"
CLOCK = "the hour"
SHORTEST_STEP, LONGEST_STEP = 0.2, 1.0
QUIET, SETTLE = 0.4, 2.0


def from_daemon(context: dg.SensorEvaluationContext) -> bool:
    """Whether the daemon runs this evaluation: Dagster names a daemon tick's captured logs after the
    tick's id, and an evaluation outside it (``build_sensor_context``, the UI's test) after the time."""
    key = context.log_key or ()
    return bool(key) and str(key[-1]).isdigit()


def _changed(
    now: Mapping[str, Hashable], before: Mapping[str, Hashable], names: Iterable[str] | None = None
) -> set[str]:
    """What differs between two looks (among ``names``, default: all)."""
    return {name for name in (now if names is None else names) if now[name] != before.get(name)}


def _source_state(location: str, fmt: str) -> Hashable:
    path = local_path(location)
    if fmt == "delta":
        try:
            log = os.stat(os.path.join(path, "_delta_log"))
        except OSError:
            return None
        return (log.st_mtime_ns, log.st_size)
    return source_files_state(path)


class TickWatch:
    """What a tick's decision was made from, looked at again and again until it changes or time is up."""

    def __init__(self, project: Project, instance: dg.DagsterInstance, now: Callable[[], datetime]):
        self._sources = {s.name: (s.location, s.format) for s in project.sources.values() if is_local(s.location)}
        self._instance = instance
        self._now = now

    def look(self) -> Mapping[str, Hashable]:
        seen: dict[str, Hashable] = {
            name: _source_state(location, fmt) for name, (location, fmt) in self._sources.items()
        }
        runs = self._instance.get_run_ids(filters=dg.RunsFilter(statuses=ACTIVE_RUN_STATUSES))
        seen[RUNS] = frozenset(runs)
        seen[CLOCK] = IntervalUnit.of("hour").floor(self._now())
        return seen

    def first_look(self, last: Mapping[str, Hashable]) -> tuple[str | None, Mapping[str, Hashable]]:
        """A tick's first look. A source that changed since the previous tick's last look (``last``) may be
        one of several being written: the look is taken again until it holds still (what changed, if so)."""
        now = self.look()
        changed = _changed(now, last, self._sources) if last else set()
        return self.settled(now, changed) if changed else (None, now)

    def wait(self, seen: Mapping[str, Hashable], until: float) -> tuple[str | None, Mapping[str, Hashable]]:
        """Wait until what ``seen`` holds changes (what changed, and the new look) or ``until``
        (``time.monotonic``) passes (None, and the last look)."""
        step = SHORTEST_STEP
        while time.monotonic() + step < until:
            time.sleep(step)
            looked = time.monotonic()
            now = self.look()
            step = min(LONGEST_STEP, max(SHORTEST_STEP, 20 * (time.monotonic() - looked)))
            changed = _changed(now, seen)
            if changed:
                return self.settled(now, changed)
            seen = now
        return None, seen

    def settled(self, now: Mapping[str, Hashable], changed: set[str]) -> tuple[str, Mapping[str, Hashable]]:
        """Sources are often written one after another (orders, then their lines) and a file a while: the
        look is taken again until it holds still for ``QUIET`` seconds (at most ``SETTLE``), so that one
        plan sees them all and no interval is computed twice, once for each."""
        stop = time.monotonic() + SETTLE
        while time.monotonic() < stop:
            time.sleep(QUIET)
            later = self.look()
            more = _changed(later, now)
            if not more:
                break
            changed, now = changed | more, later
        return ", ".join(sorted(changed)), now


def watched_plan(
    plan: Callable[[str | None], tuple[dg.SensorResult, bool]],
    context: dg.SensorEvaluationContext,
    watch: TickWatch | None,
    last: Mapping[str, Hashable],
    until: float,
) -> tuple[dg.SensorResult, Mapping[str, Hashable]]:
    """One tick: ``plan`` (from a cursor: the result, and whether the project loaded) made once, or, for a
    daemon's tick (``watch``), again each time what it watches changes, until one requests runs or ``until``
    (``time.monotonic``) passes; the asset events of every plan are kept. Also the tick's last look."""
    if watch is None:
        return plan(context.cursor)[0], {}
    began = time.monotonic()
    changed, seen = watch.first_look(last)
    if changed:
        context.log.info(f"{changed} changed since the last tick: planned once the sources held still")
    result, loaded = plan(context.cursor)
    events: list = []
    while loaded and not result.run_requests:
        changed, seen = watch.wait(seen, until)
        if changed is None:
            break
        context.log.info(f"{changed} changed {time.monotonic() - began:.1f} s into the tick: planned again")
        events += result.asset_events
        result, loaded = plan(result.cursor)
    return (result._replace(asset_events=events + list(result.asset_events)) if events else result), seen
