"""What a window function needs to see, so that a slice of the data gives the same answer as all of it.

Each window of a scope is one of:

- ``aligned``: its PARTITION BY holds a key that stays inside one interval (the model's time column,
  or an expression of a time column at the same or a finer grain). Every partition is whole in a run.
- ``frame``: ordered by a time column with a ``RANGE BETWEEN INTERVAL ... PRECEDING AND ...``
  frame: it needs rows up to that interval before (and after) each row: its *reach*.
- ``lookback``: ordered by time but reaching an unknown distance (bare LAG/LEAD, ROWS frames).
- ``history``: depends on the whole partition or on all earlier rows (ROW_NUMBER, running totals,
  no ORDER BY, an order that is not time): unsafe on a slice whatever is read.

>>> import sqlglot
>>> from datetime import timedelta
>>> from incremental_assets.analysis.lineage import Lineage
>>> q = sqlglot.parse_one("SELECT ts, SUM(x) OVER (PARTITION BY id ORDER BY ts "
...                       "RANGE BETWEEN INTERVAL 30 MINUTES PRECEDING AND CURRENT ROW) FROM raw.e", read="spark")
>>> lin = Lineage(q, model_name="m", time_column="ts", time_columns={"raw.e": "ts"}, interval=timedelta(hours=1))
>>> [(w.kind, w.reach) for w in window_uses(lin, lin.root)]
[('frame', (datetime.timedelta(seconds=1800), datetime.timedelta(0)))]
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Literal

from sqlglot import exp
from sqlglot.optimizer.scope import Scope, find_all_in_scope

from incremental_assets.analysis.lineage import Lineage
from incremental_assets.analysis.timeexpr import ZERO, divides, interval_span

# (before, after); None on a side means "an unknown distance".
Reach = tuple[timedelta | None, timedelta | None]
NO_REACH: Reach = (ZERO, ZERO)

WindowKind = Literal["aligned", "frame", "lookback", "history"]

_RANKING = (exp.RowNumber, exp.Rank, exp.DenseRank, exp.PercentRank, exp.CumeDist, exp.Ntile)


@dataclass(frozen=True)
class WindowUse:
    node: exp.Window
    kind: WindowKind
    reach: Reach
    # A RANGE frame ordered by a column of a time-series table that is not one of its time columns:
    # (table name, its time column, its event-time column or None, the column), so the refusal can
    # say what to declare.
    untimed_order: tuple[str, str, str | None, str] | None = None


def add_reach(a: Reach, b: Reach) -> Reach:
    return (
        None if a[0] is None or b[0] is None else a[0] + b[0],
        None if a[1] is None or b[1] is None else a[1] + b[1],
    )


def _max_reach(a: Reach, b: Reach) -> Reach:
    return (
        None if a[0] is None or b[0] is None else max(a[0], b[0]),
        None if a[1] is None or b[1] is None else max(a[1], b[1]),
    )


def window_uses(lineage: Lineage, scope: Scope) -> list[WindowUse]:
    """Every window function evaluated in ``scope``, classified."""
    if not isinstance(scope.expression, exp.Select):
        return []
    named = {w.name.lower(): w for w in scope.expression.args.get("windows") or []}
    uses = []
    for node in find_all_in_scope(scope.expression, exp.Window):
        if node.arg_key == "windows":
            continue  # a WINDOW w AS (...) definition, used through OVER w
        kind, reach = _classify(lineage, scope, node, named)
        untimed = _untimed_order(lineage, scope, node, named) if kind == "history" else None
        uses.append(WindowUse(node, kind, reach, untimed))
    return uses


def _untimed_order(
    lineage: Lineage, scope: Scope, node: exp.Window, named: dict[str, exp.Window]
) -> tuple[str, str, str | None, str] | None:
    _, order, spec = _spec(node, named)
    if len(order) != 1 or spec is None or str(spec.args.get("kind", "")).upper() != "RANGE":
        return None
    origins = lineage.resolve(order[0].this, scope, aliases=True)
    if not origins or len(origins) != 1 or not isinstance(origins[0].expr, exp.Column):
        return None
    column = origins[0].expr
    ref = lineage.ref_of_column(column)
    if ref is None or not ref.time_column or column.name.lower() in lineage.time_column_names(ref):
        return None
    return ref.name, ref.time_column, ref.event_column, column.name.lower()


def scope_reach(lineage: Lineage, scope: Scope) -> Reach:
    """How far beyond its output rows a scope's windows read (history windows count as zero: they
    are refused, or admitted by an override that runs one interval at a time)."""
    cache = lineage.memo.setdefault("scope_reach", {})
    if id(scope) not in cache:
        reach = NO_REACH
        for use in window_uses(lineage, scope):
            reach = _max_reach(reach, use.reach)
        cache[id(scope)] = reach
    return cache[id(scope)]


def path_reach(lineage: Lineage, path: tuple[Scope, ...]) -> Reach:
    reach = NO_REACH
    for scope in path:
        reach = add_reach(reach, scope_reach(lineage, scope))
    return reach


def _spec(node: exp.Window, named: dict[str, exp.Window]) -> tuple[list, list, exp.WindowSpec | None]:
    base = named.get(node.alias.lower()) if node.alias else None
    partition = node.args.get("partition_by") or (base.args.get("partition_by") if base else None) or []
    order = node.args.get("order") or (base.args.get("order") if base else None)
    spec = node.args.get("spec") or (base.args.get("spec") if base else None)
    return partition, (order.expressions if order else []), spec


def _classify(
    lineage: Lineage, scope: Scope, node: exp.Window, named: dict[str, exp.Window]
) -> tuple[WindowKind, Reach]:
    partition, order, spec = _spec(node, named)
    if any(lineage.aligned(key, scope) for key in partition):
        return "aligned", NO_REACH
    function = node.this
    while isinstance(function, (exp.IgnoreNulls, exp.RespectNulls)):
        function = function.this
    keys = lineage.time_keys(order[0].this, scope, aliases=True) if order else None
    if not keys or isinstance(function, _RANKING):
        return "history", NO_REACH
    if isinstance(function, (exp.Lag, exp.Lead)):
        return _navigation(lineage, function, order, keys, spec)
    if spec is None:
        return "history", NO_REACH  # the default frame runs from the first row of the partition
    return _frame(lineage, order, keys, spec)


def _navigation(
    lineage: Lineage, function: exp.Expr, order: list, keys: list, spec: exp.WindowSpec | None
) -> tuple[WindowKind, Reach]:
    """LAG reaches back and LEAD forward an unknown distance, unless a RANGE frame states how far
    (smelt's Form A reads ``LAG(x) OVER (... RANGE BETWEEN INTERVAL '30 minutes' PRECEDING ...)``
    as a 30-minute lookback)."""
    backward = isinstance(function, exp.Lag)
    kind, reach = _frame(lineage, order, keys, spec) if spec is not None else ("lookback", (None, None))
    if backward:
        return ("frame", (reach[0], ZERO)) if kind == "frame" and reach[0] else ("lookback", (None, ZERO))
    return ("frame", (ZERO, reach[1])) if kind == "frame" and reach[1] else ("lookback", (ZERO, None))


def _frame(lineage: Lineage, order: list, keys: list, spec: exp.WindowSpec) -> tuple[WindowKind, Reach]:
    """The reach of an explicit frame: intervals on a RANGE over time, unknown for row counts."""
    bounds = [
        (spec.args.get("start"), spec.args.get("start_side")),
        (spec.args.get("end") or "CURRENT ROW", spec.args.get("end_side")),
    ]
    if any(str(value).upper() == "UNBOUNDED" for value, _ in bounds):
        return "history", NO_REACH
    ranged = str(spec.args.get("kind", "")).upper() == "RANGE" and len(order) == 1
    ranged = ranged and all(divides(key.grain, lineage.unit) for key in keys)
    offsets = []
    unknown = {"PRECEDING": False, "FOLLOWING": False}
    for value, side in bounds:
        if isinstance(value, str):  # CURRENT ROW
            offsets.append((ZERO, ZERO))
            continue
        span = interval_span(value) if ranged else None
        side = str(side).upper()
        if span is None:
            unknown[side] = True  # a number of rows (or a RANGE over a number): unknown in time
        else:
            offsets.append((-span.high, -span.low) if side == "PRECEDING" else (span.low, span.high))
    before = max([ZERO, *(-low for low, _ in offsets)])
    after = max([ZERO, *(high for _, high in offsets)])
    if unknown["PRECEDING"] or unknown["FOLLOWING"]:
        return "lookback", (None if unknown["PRECEDING"] else before, None if unknown["FOLLOWING"] else after)
    return "frame", (before, after)
