"""What a ``run --start S --end E`` does to each selected model's window, said before it runs.

A window is cut to each model's range (its start and end); a model without time intervals (FULL,
VIEW, SEED, keyed kinds) ignores it, as in SQLMesh. Both are said in one line per model; a window that
leaves nothing to run for any selected model is refused, like a misaligned one.

>>> from datetime import datetime, timezone
>>> from types import SimpleNamespace
>>> from incremental_assets.model.kinds import Full
>>> m = SimpleNamespace(name="s.full", kind=Full())
>>> t = datetime(2024, 1, 1, tzinfo=timezone.utc)
>>> window_notes([m], t, t)[0]
['s.full is FULL: --start/--end do not apply to it; it is rebuilt whole']
"""

from __future__ import annotations

from datetime import datetime
from typing import Sequence

from incremental_assets.errors import WindowError
from incremental_assets.model.intervals import TimeWindow, format_instant
from incremental_assets.model.kinds import IncrementalByTimeRange

_WHOLE = {
    "FULL": "it is rebuilt whole",
    "VIEW": "its view is replaced",
    "SEED": "its CSV file is loaded whole",
}


def window_notes(models: Sequence, start: datetime, end: datetime) -> tuple[list[str], list[str]]:
    """One line per model whose window is not the one given: (notes, models with nothing to run)."""
    notes: list[str] = []
    empty: list[str] = []
    for model in models:
        kind = model.kind.name
        if not isinstance(model.kind, IncrementalByTimeRange):
            what = _WHOLE.get(kind, "it processes every row its query returns, by key or cursor")
            notes.append(f"{model.name} is {kind}: --start/--end do not apply to it; {what}")
            continue
        if model.start is None:
            continue
        lo = max(start, model.start)
        hi = min(end, model.end) if model.end else end
        bounds = _bounds(model)
        if hi <= lo:
            side = "before its start" if end <= model.start else "after its end"
            notes.append(
                f"{model.name}: nothing to run: the window {TimeWindow(start, end)} lies {side} (the model {bounds})"
            )
            empty.append(model.name)
        elif (lo, hi) != (start, end):
            notes.append(
                f"{model.name}: runs {TimeWindow(lo, hi)} of the window {TimeWindow(start, end)}: the model {bounds}"
            )
    return notes, empty


def check_window_reaches(models: Sequence, start: datetime, end: datetime) -> list[str]:
    """The notes of :func:`window_notes`; a :class:`WindowError` when the window reaches no selected model."""
    notes, empty = window_notes(models, start, end)
    if models and len(empty) == len(models):
        ranges = "; ".join(f"{m.name} {_bounds(m)}" for m in models)
        raise WindowError(
            f"the window {TimeWindow(start, end)} lies outside every selected model's range ({ranges}): "
            "nothing would run "
            "(fix: give --start/--end inside a model's range, or --auto to fill its missing intervals)"
        )
    return notes


def _bounds(model) -> str:
    return f"starts {format_instant(model.start)}" + (f" and ends {format_instant(model.end)}" if model.end else "")
