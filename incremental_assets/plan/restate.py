"""What a restatement recomputes: chosen intervals of chosen models, then exactly what reads them.

``incremental-assets restate MODEL --start S --end E`` recomputes the intervals of [S, E) of each chosen
model with its current definition (a forward_only model too: that is how a forward-only change reaches
chosen history), then, in dependency order, every downstream model over the intervals whose read window
(the lookback the analysis derives for that input) overlaps what was recomputed upstream, limited to
the intervals it has already materialized. An unpartitioned downstream model (FULL, materialized VIEW)
runs once; a unique-key or cursor model is rebuilt from scratch (its rows cannot be replaced by
window); an SCD type 2 model keeps its history unless its kind sets ``disable_restatement false``, as in
SQLMesh. As in ``run --auto``'s staleness, a partitioned model reading an unpartitioned one that was
recomputed is not restated: only its new intervals read the new rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from incremental_assets.errors import IncrementalAssetsError, ModelFileError, WindowError
from incremental_assets.model.intervals import TimeWindow, check_aligned, format_instant, merge, subtract
from incremental_assets.model.kinds import IncrementalByTimeRange, ScdType2
from incremental_assets.model.project import Project
from incremental_assets.model.sql_model import SqlModel
from incremental_assets.plan.analyses import input_bound
from incremental_assets.plan.rebuild import needs_rebuild

INTERVALS = "intervals"  # the model's intervals are replaced, window by window, each run one atomic commit
WHOLE = "whole"  # an unpartitioned model runs once (FULL, materialized VIEW, SEED)
REBUILD = "rebuild"  # a unique-key / cursor / SCD type 2 (restatement allowed) table starts over


@dataclass(frozen=True)
class Restated:
    """One model of a restatement: how it is recomputed and, when by interval, over which windows."""

    model: SqlModel
    how: str
    windows: tuple[TimeWindow, ...] = ()
    because: tuple[str, ...] = ()  # the upstream models that make it recomputed (empty: chosen)


@dataclass(frozen=True)
class Restatement:
    models: tuple[Restated, ...]
    skipped: tuple[str, ...] = ()  # downstream models left alone, with the reason


def restate_window(model: SqlModel, window: TimeWindow, available_end) -> None:
    """Refuse a window that is not made of whole intervals of ``model`` inside its range."""
    if window.start >= window.end:
        raise WindowError(f"--start {format_instant(window.start)} must be before --end {format_instant(window.end)}")
    check_aligned(window, model.unit, model=model.name)
    assert model.start is not None
    last = min(model.end, available_end) if model.end else available_end
    if window.start < model.start or window.end > last:
        raise WindowError(
            f"model {model.name}: window {window} is outside its range [{format_instant(model.start)}, "
            f"{format_instant(last)}) "
            "(its start to its end or the last complete interval); choose a window inside it"
        )


def refuse_restatement(model: SqlModel) -> None:
    """A model a restatement cannot recompute, said with the fix."""
    kind = model.kind
    if isinstance(kind, ScdType2) and kind.disable_restatement:
        raise ModelFileError(
            model.path,
            model.line_of("kind"),
            f"model {model.name} is SCD_TYPE_2: restating it would throw away its history, which cannot be "
            "rebuilt from the current source rows",
            hint="leave it out (its new history follows from the next run), or set `disable_restatement false` "
            "in the kind to rebuild it from the current source rows",
        )
    if not model.has_table:
        raise IncrementalAssetsError(
            f"model {model.name} has no table of its own (a plain VIEW or EMBEDDED): there is nothing to "
            "restate; restate the models it reads"
        )


def plan_restatement(
    project: Project,
    chosen: Sequence[SqlModel],
    window: TimeWindow,
    *,
    available_end: Callable[[SqlModel], object],
    materialized: Callable[[SqlModel], Sequence[TimeWindow]],
    built_with: Callable[[SqlModel], str | None],
) -> Restatement:
    """The models a restatement of ``window`` of ``chosen`` recomputes, in dependency order.

    ``available_end(model)`` is the end of its last complete interval, ``materialized(model)`` the
    intervals a partitioned model has recorded as materialized (for an unpartitioned one: non-empty when
    it has been materialized), ``built_with(model)`` the fingerprint its table was built with."""
    names = {m.name for m in chosen}
    affected: dict[str, tuple[TimeWindow, ...] | None] = {}  # None: recomputed whole
    out: list[Restated] = []
    skipped: list[str] = []
    for model in project.ordered():
        entry: Restated | None
        if model.name in names:
            refuse_restatement(model)
            if isinstance(model.kind, IncrementalByTimeRange):
                restate_window(model, window, available_end(model))
                entry = Restated(model, INTERVALS, (window,))
            else:
                entry = Restated(model, REBUILD if model.is_merge_style else WHOLE)
        else:
            upstream = [u for u in model.depends_on if u in affected and u != model.name]
            if not upstream:
                continue
            if not model.has_table:  # a plain view: nothing to run; what reads it reads the new rows
                affected[model.name] = None
                continue
            entry = _downstream(project, model, upstream, affected, materialized, skipped)
            if entry is None:
                continue
        _refuse_changed(entry.model, built_with)
        out.append(entry)
        affected[model.name] = entry.windows if entry.how == INTERVALS else None
    return Restatement(tuple(out), tuple(skipped))


def _downstream(project, model, upstream, affected, materialized, skipped) -> Restated | None:
    if isinstance(model.kind, IncrementalByTimeRange):
        timed = [u for u in upstream if affected[u] is not None]
        if not timed:
            return None  # only unpartitioned upstreams changed: new intervals read their new rows
        done = merge(list(materialized(model)))
        reach: list[TimeWindow] = []
        for name in timed:
            bound = input_bound(project, model.name, name)
            if bound is None:  # read without a derived bound: every interval may read what changed
                reach += done
                continue
            for w in affected[name] or ():
                grown = w.widen(bound.after, bound.before)  # intervals whose read window overlaps w
                reach.append(TimeWindow(model.unit.floor(grown.start), model.unit.ceil(grown.end)))
        windows = _intersect(merge(reach), done)
        if not windows:
            return None
        return Restated(model, INTERVALS, tuple(windows), tuple(timed))
    if not materialized(model):
        return None
    if isinstance(model.kind, ScdType2) and model.kind.disable_restatement:
        skipped.append(
            f"{model.name}: not restated: SCD_TYPE_2 keeps its history (disable_restatement); its next run "
            "adds what changed as new versions"
        )
        return None
    return Restated(model, REBUILD if model.is_merge_style else WHOLE, (), tuple(upstream))


def _intersect(windows: Sequence[TimeWindow], within: Sequence[TimeWindow]) -> list[TimeWindow]:
    """The parts of ``windows`` inside ``within``: each window less what ``within`` leaves out of it."""
    return merge([part for w in windows for part in subtract(w, subtract(w, list(within)))])


def _refuse_changed(model: SqlModel, built_with: Callable[[SqlModel], str | None]) -> None:
    """A model whose definition changed since its table was built (and is not forward_only) is rebuilt
    from its start by its next run: a restatement of some of its intervals cannot come first."""
    if model.is_incremental and needs_rebuild(model, built_with(model)):
        raise IncrementalAssetsError(
            f"model {model.name} changed since its table was built: its next run rebuilds it from its "
            "start, so restating "
            "some intervals would mix definitions; run `incremental-assets plan` and `incremental-assets "
            f"run {model.name}+ --auto` "
            "first, or set forward_only true in its kind to apply the change to chosen intervals only"
        )
