"""What the lookback pass tells the user: refusals that name the reference, the window and the fix; notes;
limits on how many intervals a run covers."""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlglot import exp
from sqlglot.optimizer.scope import Scope

from incremental_assets.analysis.lineage import Lineage, Ref, line_of, snippet
from incremental_assets.analysis.result import Findings, Reason
from incremental_assets.analysis.window_functions import window_uses

BEFORE, AFTER = 0, 1  # the side of the window a reference reads: before its start, after its end
SIDE_NAMES = ("before", "after")


@dataclass
class Report:
    """What the pass tells the user: refusals, notes, and limits on how many intervals a run covers."""

    refusals: list[Reason] = field(default_factory=list)
    notes: list[Reason] = field(default_factory=list)
    limits: list[int] = field(default_factory=list)

    def findings(self) -> Findings:
        limit = min(self.limits) if self.limits else None
        return Findings(tuple(dict.fromkeys(self.refusals)), tuple(dict.fromkeys(self.notes)), limit)


def unknown_distance_refusal(lineage: Lineage, ref: Ref, chain: tuple[Scope, ...], side: int) -> Reason:
    """The refusal for a reference that feeds a window function reaching an unknown distance to one side."""
    window = unknown_window(lineage, chain, side)
    hint = (
        "a declared lookback only covers data before the window"
        if side == AFTER
        else "give it a RANGE BETWEEN INTERVAL '...' PRECEDING AND CURRENT ROW frame or declare a lookback"
    )
    return Reason(
        "lookback_underivable",
        f"{ref.name} feeds "
        f"{snippet(window, lineage.dialect) if window is not None else 'a window'}, which needs "
        "rows an "
        f"unknown distance {SIDE_NAMES[side]} each row; {hint}",
        line_of(window) if window is not None else line_of(ref.table),
    )


def unbounded_reference_refusal(lineage: Lineage, ref: Ref) -> Reason:
    """The refusal for a time series reference that no filter, relation or demand bounds on either side."""
    column = ref.event_column or ref.time_column
    return Reason(
        "lookback_underivable",
        f"{ref.name} is a time series but nothing bounds which of its rows a run needs: filter {column} on "
        f"the window (e.g. {column} BETWEEN @start_dt AND @end_dt), derive {lineage.time_column} from it, "
        "relate it to another source's time column, or declare a lookback",
        line_of(ref.table),
    )


def unknown_window(lineage: Lineage, chain: tuple[Scope, ...], side: int) -> exp.Window | None:
    for scope in chain:
        for use in window_uses(lineage, scope):
            if use.reach[side] is None:
                return use.node
    return None
