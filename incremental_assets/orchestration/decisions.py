"""The automation sensor's values: its cursor, and what one tick decides for each model and in all."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Mapping

import dagster as dg

from incremental_assets.model.intervals import NO_INTERVAL, Coverage
from incremental_assets.orchestration.run_groups import Launch

CURSOR_VERSION = 3
LEGACY_CURSOR_VERSIONS = (2,)  # kept the sources' watermarks and pending windows, now in the instance


@dataclass
class AutomationCursor:
    """What the sensor remembers between ticks."""

    # An older cursor's watermarks and pending windows, handed to the shared record on the next tick.
    sources: dict[str, str] = field(default_factory=dict)
    pending: dict[str, Coverage] = field(default_factory=dict)
    changed: dict[str, str] = field(default_factory=dict)  # model -> the fingerprint its changed mark was reported for
    watch: dict = field(default_factory=dict)  # the look at the tables' integrity, see :mod:`.watch`

    @classmethod
    def parse(cls, text: str | None) -> tuple[AutomationCursor, str | None]:
        """The cursor, or a fresh one with a note when there is none or it is not this version's."""
        if not text:
            return cls(), None
        try:
            raw = json.loads(text)
            if not isinstance(raw, dict) or raw.get("version") not in (CURSOR_VERSION, *LEGACY_CURSOR_VERSIONS):
                raise ValueError
            pending = {name: Coverage.from_json(value) for name, value in raw.get("pending", {}).items()}
            sources = {str(k): str(v) for k, v in raw.get("sources", {}).items()}
            return cls(
                sources,
                pending,
                {str(k): str(v) for k, v in raw.get("changed", {}).items()},
                dict(raw.get("watch", {})),
            ), None
        except (ValueError, TypeError, AttributeError):
            return cls(), "the sensor's cursor is from another version of incremental_assets: replaced by a fresh one"

    def dump(self) -> str:
        pending = {name: value.to_json() for name, value in sorted(self.pending.items())}
        out: dict = {"version": CURSOR_VERSION}
        if self.sources or pending:  # not taken over yet
            out.update(sources=self.sources, pending=pending)
        out.update({k: v for k, v in (("changed", self.changed), ("watch", self.watch)) if v})
        return json.dumps(out, sort_keys=True)


@dataclass(frozen=True)
class ModelDecision:
    """What one tick decides for one model (its runs, what waits and why), and what the models below it
    need to know of it: which of its intervals are about to change (``changing``) or not settled yet
    (``unsettled``: also missing or failed), whether it was never materialized, and what it is doing
    (None: what was said of it before the tick still holds)."""

    launches: tuple[Launch, ...] = ()
    launched: Coverage = NO_INTERVAL
    waiting: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    changes: tuple[str, ...] = ()
    changing: Coverage = NO_INTERVAL
    unsettled: Coverage = NO_INTERVAL
    never_materialized: bool = False
    doing: str | None = None


@dataclass(frozen=True)
class Upstreams:
    """What the models decided so far tell the models below them: per model the intervals about to be
    (re)computed (``changing``: requested this tick, queued or running) and those not settled
    (``unsettled``: also missing or failed), the models never materialized (nothing downstream can read
    them yet), what each is doing or waiting for, for the lines of the models below it, and what each
    launches this tick (a model below may join its run). A partitioned model waits for unsettled upstream
    intervals it reads; a whole-table model only for changing upstreams."""

    changing: Mapping[str, Coverage] = field(default_factory=dict)
    unsettled: Mapping[str, Coverage] = field(default_factory=dict)
    never_materialized: frozenset[str] = frozenset()
    doing: Mapping[str, str] = field(default_factory=dict)
    launching: Mapping[str, tuple[Launch, ...]] = field(default_factory=dict)

    def after(self, name: str, decided: ModelDecision) -> "Upstreams":
        """These upstreams and one more model, decided."""
        return Upstreams(
            {**self.changing, name: decided.changing} if decided.changing else self.changing,
            {**self.unsettled, name: decided.unsettled} if decided.unsettled else self.unsettled,
            self.never_materialized | {name} if decided.never_materialized else self.never_materialized,
            {**self.doing, name: decided.doing} if decided.doing else self.doing,
            {**self.launching, name: decided.launches} if decided.launches else self.launching,
        )


@dataclass
class Decision:
    """One tick's outcome: the runs to launch, what waits and why, the next cursor."""

    requests: list[dg.RunRequest] = field(default_factory=list)
    launches: list[Launch] = field(default_factory=list)  # what the requests run, before they are grouped
    launched: dict[str, Coverage] = field(default_factory=dict)
    waiting: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    cursor: AutomationCursor = field(default_factory=AutomationCursor)
    changes: list[str] = field(default_factory=list)  # changed definitions and what is done about them
    running: list[str] = field(default_factory=list)  # models a queued or running run is computing
    events: list[dg.AssetCheckEvaluation] = field(default_factory=list)  # the tables' integrity checks

    def summary(self) -> str:
        """The tick's skip reason: "up to date" only when nothing is changed, running, waiting or to be said."""
        return "; ".join(self.changes + self.running + self.waiting + self.notes) or "every model is up to date"

    def add(self, name: str, decided: ModelDecision) -> None:
        """One model's decision, in dependency order."""
        self.launches += decided.launches
        if decided.launched:
            self.launched[name] = decided.launched
        self.waiting += decided.waiting
        self.notes += decided.notes
        self.changes += decided.changes


@dataclass(frozen=True)
class Wanted:
    """What a partitioned model needs computed, before what is running and what waits are taken out: its
    missing intervals, the intervals to compute and why, whether it is rebuilt whole, and lines to say."""

    missing: Coverage
    intervals: Coverage
    reasons: tuple[str, ...]
    rebuild: bool = False
    notes: tuple[str, ...] = ()
    changes: tuple[str, ...] = ()
