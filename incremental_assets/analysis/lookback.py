"""Per-source lookback: how far outside the run window each table reference must be read.

A time-series reference gets its bound from, in order of trust:

1. *Filters* on its time column against the window macros (Form B), in WHERE or JOIN ON, in its
   own scope or in an enclosing one: ``o.ts BETWEEN @start_dt - INTERVAL 1 DAY AND @end_dt`` reads
   one day before the window. A filter in an enclosing scope is widened by the windows between.
2. *Demand*: what the output needs. The output is clamped to the window on the model's time
   column, so a reference that column derives from is needed for the window only, widened by the
   reach of window frames on the way (Form A, ``RANGE BETWEEN INTERVAL 30 MINUTES PRECEDING``); a
   reference related to another one by its time column (``b.ts BETWEEN a.ts - INTERVAL 30 MINUTES
   AND a.ts``) is needed for the other's range, shifted.
3. A declared lookback, for the before-bound of references nothing else bounds.

A reference to a table with an event-time column is measured in event time: the event-time column
is its exact time and the partition (time) column that time truncated to the partition unit, so a
frame over ``event_ts`` in ``event_date`` partitions gets a bound of minutes, which pushdown widens
to whole partitions for reading.

Anything else is refused (``lookback_underivable``), naming the source. Filters are checked against
the demand: a filter narrower than what frames or joins need (``lookback_truncated``) is refused, and
a filter anchored on the other end of the window (``ds = @start_ds``, ``ts >= @end_dt - INTERVAL 7 DAY``)
limits how many intervals one run may cover (``window_relative``).

>>> import sqlglot
>>> from datetime import timedelta
>>> from incremental_assets.analysis.lineage import Lineage
>>> q = sqlglot.parse_one("SELECT ts FROM raw.e WHERE ts BETWEEN @start_dt - INTERVAL 2 HOUR AND @end_dt", read="spark")
>>> lin = Lineage(q, model_name="m", time_column="ts", time_columns={"raw.e": "ts"}, interval=timedelta(hours=1))
>>> bounds, findings = derive_bounds(lin)
>>> bounds["raw.e"].before, findings.refusals
(datetime.timedelta(seconds=7200), ())
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta

from sqlglot import exp
from sqlglot.optimizer.scope import Scope

from incremental_assets.analysis.lineage import Lineage, Ref, TimeKey, line_of, snippet
from incremental_assets.analysis.lookback_report import (
    AFTER,
    BEFORE,
    SIDE_NAMES,
    Report,
    unbounded_reference_refusal,
    unknown_distance_refusal,
)
from incremental_assets.analysis.result import Findings, Reason, SourceBound, iso_duration
from incremental_assets.analysis.timeexpr import (
    ZERO,
    Grain,
    MacroRef,
    Span,
    coarser,
    divides,
    nominal,
    read_macro,
    split_shift,
)
from incremental_assets.analysis.window_functions import path_reach

_CALENDAR_LENGTHS = {
    "hour": (timedelta(hours=1), timedelta(hours=1)),
    "day": (timedelta(days=1), timedelta(days=1)),
    "week": (timedelta(days=7), timedelta(days=7)),
    "month": (timedelta(days=28), timedelta(days=31)),
    "quarter": (timedelta(days=89), timedelta(days=92)),
    "year": (timedelta(days=365), timedelta(days=366)),
}


@dataclass(frozen=True)
class _Edge:
    """A filter of one reference's time column against a window macro.

    It reads from (``side`` BEFORE) or up to (AFTER) ``base - per_interval * k * interval`` around a
    run of k intervals; ``per_interval`` is 1 when the filter is anchored on the opposite end of the
    window (a start-anchored upper bound or an end-anchored lower bound).
    """

    ref: Ref
    side: int
    base: timedelta
    per_interval: int
    node: exp.Expr


@dataclass(frozen=True)
class _Relation:
    """``target op source + offset`` between the time columns of two references."""

    target: TimeKey
    source: TimeKey
    side: int  # BEFORE: target >= source + offset; AFTER: target <= source + offset
    offset: Span


@dataclass
class _State:
    edges: list[_Edge] = field(default_factory=list)
    relations: list[_Relation] = field(default_factory=list)
    demand: dict[int, list[timedelta | None]] = field(default_factory=dict)
    # The references a demand was derived through: a reference's demand never feeds back into itself.
    via: dict[int, list[frozenset[int]]] = field(default_factory=dict)


def derive_bounds(
    lineage: Lineage, *, declared_lookback: int | None = None
) -> tuple[dict[str, SourceBound | None], Findings]:
    """The read bound of every referenced table (by name), with refusals, notes and a batch limit."""
    lengths = _interval_lengths(lineage)
    state = _State()
    for ref in lineage.refs:
        state.demand[id(ref)] = [None, None]
        state.via[id(ref)] = [frozenset(), frozenset()]
    _demand_from_output(lineage, state)
    for scope in lineage.select_scopes():
        for predicate, allowed in _predicates(lineage, scope):
            for comparison in _comparisons(predicate):
                _read_comparison(lineage, state, scope, predicate, comparison, allowed)
    _propagate_relations(lineage, state, lengths)

    report = Report()
    per_ref: dict[int, list[timedelta | None]] = {}
    for ref in lineage.refs:
        if not ref.known:
            report.refusals.append(
                Reason("unknown_source", f"{ref.name} is neither a source nor a model", line_of(ref.table))
            )
        elif ref.time_column:
            per_ref[id(ref)] = [
                _side_bound(lineage, state, ref, side, lengths, declared_lookback, report) for side in (BEFORE, AFTER)
            ]
    _check_output(lineage, report)
    return _bounds_by_name(lineage, per_ref), report.findings()


def _check_output(lineage: Lineage, report: Report) -> None:
    """The output must carry the time column; one computed from a macro makes every run one interval."""
    if not lineage.selects_time_column():
        report.refusals.append(
            Reason(
                "time_column",
                f"the query does not select the model's time column {lineage.time_column}",
                line_of(lineage.root.expression),
            )
        )
    macro = lineage.time_column_from_macro()
    if macro is not None:
        report.notes.append(
            Reason(
                "window_relative",
                f"the time column {lineage.time_column} is computed from @{macro.name}, so every row of a run gets "
                "the same window edge: runs cover one interval each",
                line_of(macro),
            )
        )
        report.limits.append(1)


def _bounds_by_name(lineage: Lineage, per_ref: dict[int, list[timedelta | None]]) -> dict[str, SourceBound | None]:
    """One bound per table name: the widest over its references; names with an underivable side are left out."""
    bounds: dict[str, SourceBound | None] = {}
    underivable = set()
    for ref in lineage.refs:
        if not ref.known:
            continue
        if not ref.time_column:
            bounds.setdefault(ref.name, None)
            continue
        before, after = per_ref[id(ref)]
        if before is None or after is None:
            underivable.add(ref.name)
            continue
        current = bounds.get(ref.name)
        if current is not None:
            before, after = max(before, current.before), max(after, current.after)
        if ref.event_column:
            bounds[ref.name] = SourceBound(before, after, ref.event_column, ref.time_column, ref.partition_unit)
        else:
            bounds[ref.name] = SourceBound(before, after, ref.time_column)
    return {name: bound for name, bound in bounds.items() if name not in underivable}


def _interval_lengths(lineage: Lineage) -> tuple[timedelta, timedelta]:
    unit = lineage.unit
    if isinstance(unit, timedelta):
        return unit, unit
    return _CALENDAR_LENGTHS[unit.split(":")[0]]


def _slack(grain: Grain, offset: timedelta, lineage: Lineage) -> timedelta:
    """How far a value truncated to ``grain`` may stick out of an interval-aligned edge moved by ``offset``."""
    if grain == "exact":
        return ZERO
    aligned = divides(grain, lineage.unit) and (
        offset == ZERO or (grain in ("second", "minute", "hour", "day") and offset % nominal(grain) == ZERO)
    )
    return ZERO if aligned else nominal(grain)


# --- demand from the output clamp ------------------------------------------------------------


def _demand_from_output(lineage: Lineage, state: _State) -> None:
    for origin in lineage.output_time() or []:
        shift = split_shift(origin.expr)
        found = lineage.time_key_of(shift.base) if not shift.amount else None
        if found is None or not divides(found[1], lineage.unit):
            continue
        ref, grain = found
        reach = path_reach(lineage, origin.path)
        # output = floor(tc) + offset lies in the window, so tc lies in the window moved back by offset.
        slack = _slack(grain, shift.offset.high, lineage)
        before, after = reach[BEFORE], reach[AFTER]
        candidate = [
            None if before is None else max(ZERO, shift.offset.high) + before,
            None if after is None else max(ZERO, -shift.offset.low) + slack + after,
        ]
        _lower_demand(state, ref, candidate)


def _lower_demand(
    state: _State, ref: Ref, candidate: list[timedelta | None], via: frozenset[int] = frozenset()
) -> bool:
    current = state.demand[id(ref)]
    changed = False
    for side in (BEFORE, AFTER):
        value = candidate[side]
        if value is not None and ((known := current[side]) is None or max(ZERO, value) < known):
            current[side] = max(ZERO, value)
            state.via[id(ref)][side] = via
            changed = True
    return changed


# --- filters and relations in WHERE / JOIN ON ------------------------------------------------


def _predicates(lineage: Lineage, scope: Scope) -> Iterator[tuple[exp.Expr, set[int] | None]]:
    """Conjuncts that restrict rows, with the references they may restrict (None: all of them)."""
    select = scope.expression
    where = select.args.get("where")
    if where is not None:
        for conjunct in _conjuncts(where.this):
            yield conjunct, None
    for join in select.args.get("joins") or []:
        on = join.args.get("on")
        if on is None:
            continue
        side, kind = join.side.upper(), join.kind.upper()
        joined = _refs_of_source(lineage, scope, join.this)
        if side == "FULL":
            continue
        if side == "LEFT" or kind in ("SEMI", "ANTI"):
            allowed = joined  # ON only decides which rows of the joined side are used
        elif side == "RIGHT":
            allowed = {id(r) for r in lineage.refs_under(scope)} - joined
        else:
            allowed = None
        for conjunct in _conjuncts(on):
            yield conjunct, allowed


def _refs_of_source(lineage: Lineage, scope: Scope, node: exp.Expr) -> set[int]:
    for ref in lineage.refs:
        if ref.table is node:
            return {id(ref)}
    source = scope.sources.get(node.alias_or_name)
    if isinstance(source, Scope):
        return {id(r) for r in lineage.refs_under(source)}
    return set()


def _conjuncts(node: exp.Expr) -> Iterator[exp.Expr]:
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.And):
        yield from _conjuncts(node.this)
        yield from _conjuncts(node.expression)
    else:
        yield node


def _comparisons(node: exp.Expr) -> Iterator[tuple[exp.Expr, str, exp.Expr, bool]]:
    """``(left, '>=' or '<=', right, inclusive)`` for each one-sided comparison in a predicate."""
    if isinstance(node, exp.Between):
        yield node.this, ">=", node.args["low"], True
        yield node.this, "<=", node.args["high"], True
    elif isinstance(node, (exp.GTE, exp.GT)):
        yield node.this, ">=", node.expression, isinstance(node, exp.GTE)
    elif isinstance(node, (exp.LTE, exp.LT)):
        yield node.this, "<=", node.expression, isinstance(node, exp.LTE)
    elif isinstance(node, exp.EQ):
        yield node.this, ">=", node.expression, True
        yield node.this, "<=", node.expression, True


@dataclass(frozen=True)
class _KeySide:
    keys: list[TimeKey]
    offset: Span


def _side(lineage: Lineage, scope: Scope, node: exp.Expr) -> MacroRef | _KeySide | None:
    macro = read_macro(node)
    if macro is not None:
        return macro
    shift = split_shift(node)
    if shift.amount or shift.base.find(exp.Parameter) is not None:
        return None
    keys = lineage.time_keys(shift.base, scope)
    return _KeySide(keys, shift.offset) if keys else None


def _read_comparison(
    lineage: Lineage,
    state: _State,
    scope: Scope,
    predicate: exp.Expr,
    comparison: tuple[exp.Expr, str, exp.Expr, bool],
    allowed: set[int] | None,
) -> None:
    """Record ``left op right`` as an edge (a time column against a macro) or a relation (two time columns)."""
    left, op, right, inclusive = comparison
    a, b = _side(lineage, scope, left), _side(lineage, scope, right)
    if isinstance(b, _KeySide) and isinstance(a, MacroRef):
        a, b, op = b, a, ("<=" if op == ">=" else ">=")
    if not isinstance(a, _KeySide) or b is None:
        return
    side = BEFORE if op == ">=" else AFTER
    if isinstance(b, MacroRef):
        for key in a.keys:
            if allowed is None or id(key.ref) in allowed:
                edge = _macro_edge(lineage, key, side, b.offset + -a.offset, b, inclusive, predicate)
                if edge is not None:
                    state.edges.append(edge)
        return
    # key op key + offset: each side bounds the other.
    offset = b.offset + -a.offset
    for target in a.keys:
        for source in b.keys:
            if target.ref is source.ref:
                continue
            if allowed is None or id(target.ref) in allowed:
                state.relations.append(_Relation(target, source, side, offset))
            if allowed is None or id(source.ref) in allowed:
                state.relations.append(_Relation(source, target, 1 - side, -offset))


def _macro_edge(
    lineage: Lineage, key: TimeKey, side: int, offset: Span, macro: MacroRef, inclusive: bool, node: exp.Expr
) -> _Edge | None:
    """``key >= macro + offset`` (BEFORE) or ``key <= macro + offset`` (AFTER) as an edge of ``key.ref``."""
    reach = path_reach(lineage, key.path)[side]
    if reach is None:
        return None
    granule = coarser(key.grain, macro.grain) or max(key.grain, macro.grain, key=nominal)
    macro_slack = _slack(macro.grain, ZERO, lineage)
    if side == BEFORE:
        # The row's time is at least the (truncated) key, so only the macro's own truncation matters.
        if macro.edge == "start":
            return _Edge(key.ref, BEFORE, macro_slack - offset.low + reach, 0, node)
        end_value = nominal(macro.grain) if macro.grain != "exact" else ZERO  # @end_ds is the last day
        return _Edge(key.ref, BEFORE, end_value - offset.low + reach, 1, node)
    slack = _slack(granule, offset.high, lineage)
    if macro.edge == "end":
        # SQLMesh's @end_* is the window's last instant (or day): <= and < both cover the window.
        return _Edge(key.ref, AFTER, offset.high + slack + reach, 0, node)
    whole_granule = nominal(granule) if inclusive and granule != "exact" else slack
    return _Edge(key.ref, AFTER, offset.high + whole_granule + reach, 1, node)


def _propagate_relations(lineage: Lineage, state: _State, lengths: tuple[timedelta, timedelta]) -> None:
    """Give each related reference the range of the one it is related to, until nothing changes."""
    for _ in range(len(lineage.refs) + 1):
        changed = False
        for relation in state.relations:
            target, source = relation.target.ref, relation.source.ref
            source_range, via = _current_range(state, source, lengths)[relation.side]
            if source_range is None or id(target) in via:
                continue
            reach = path_reach(lineage, relation.target.path)[relation.side]
            if reach is None:
                continue
            if relation.side == BEFORE:
                value = source_range + _slack(relation.source.grain, source_range, lineage) - relation.offset.low
            else:
                value = (
                    source_range
                    + relation.offset.high
                    + _slack(relation.target.grain, source_range + relation.offset.high, lineage)
                )
            candidate: list[timedelta | None] = [None, None]
            candidate[relation.side] = value + reach
            changed |= _lower_demand(state, target, candidate, via | {id(source)})
        if not changed:
            break


def _current_range(
    state: _State, ref: Ref, lengths: tuple[timedelta, timedelta]
) -> list[tuple[timedelta | None, frozenset[int]]]:
    """Per side, how far the rows of ``ref`` that a run uses can reach, and what that was derived through."""
    values: list[tuple[timedelta | None, frozenset[int]]] = []
    for side in (BEFORE, AFTER):
        filters = [
            max(ZERO, e.base - e.per_interval * lengths[0]) for e in state.edges if e.ref is ref and e.side == side
        ]
        options: list[tuple[timedelta, frozenset[int]]] = [(min(filters), frozenset())] if filters else []
        if (demand := state.demand[id(ref)][side]) is not None:
            options.append((demand, state.via[id(ref)][side]))
        values.append(min(options, key=lambda o: o[0]) if options else (None, frozenset()))
    return values


# --- one side of one reference ---------------------------------------------------------------


def _chain(ref: Ref) -> tuple[Scope, ...]:
    scopes: list[Scope] = []
    scope: Scope | None = ref.scope
    while scope is not None:
        scopes.append(scope)
        scope = scope.parent
    return tuple(scopes)


def _side_bound(
    lineage: Lineage,
    state: _State,
    ref: Ref,
    side: int,
    lengths: tuple[timedelta, timedelta],
    declared: int | None,
    report: Report,
) -> timedelta | None:
    """The bound of one side of one reference: its filters if any (checked against what the query
    needs), else the demand, else the declared lookback; None (with a refusal) if there is none."""
    shortest, longest = lengths
    word = SIDE_NAMES[side]
    chain = _chain(ref)
    needed = path_reach(lineage, chain)[side]
    edges = [e for e in state.edges if e.ref is ref and e.side == side]
    filtered = max(ZERO, min(e.base - e.per_interval * shortest for e in edges)) if edges else None

    if needed is None:
        if side == BEFORE and declared is not None:
            return max(_declared(lineage, ref, declared, report), filtered or ZERO)
        report.refusals.append(unknown_distance_refusal(lineage, ref, chain, side))
        return None

    demand = state.demand[id(ref)][side]
    required = demand if demand is not None else needed
    if edges:
        for edge in edges:
            _check_edge(lineage, ref, edge, required, longest, report)
        return filtered
    if demand is not None:
        return demand
    if declared is not None:
        return _declared(lineage, ref, declared, report) if side == BEFORE else ZERO
    if not any(e.ref is ref for e in state.edges) and state.demand[id(ref)] == [None, None]:
        if side == BEFORE:  # one refusal for the reference, not one per side
            report.refusals.append(unbounded_reference_refusal(lineage, ref))
        return None
    column = ref.event_column or ref.time_column
    bound = f"{column} >= @start_dt" if side == BEFORE else f"{column} <= @end_dt"
    report.refusals.append(
        Reason(
            "lookback_underivable",
            f"nothing bounds how far {word} the window {ref.name} is read; add a filter such as {bound}",
            line_of(ref.table),
        )
    )
    return None


def _declared(lineage: Lineage, ref: Ref, declared: int, report: Report) -> timedelta:
    value = declared * lineage.interval
    report.notes.append(
        Reason(
            "declared_lookback",
            f"{ref.name}: read {iso_duration(value)} before the window, from the declared lookback of "
            f"{declared} intervals",
            line_of(ref.table),
        )
    )
    return value


def _check_edge(
    lineage: Lineage, ref: Ref, edge: _Edge, required: timedelta, longest: timedelta, report: Report
) -> None:
    """A filter narrower than what the query needs: refused if it cuts a lookback, else it limits runs."""
    word = SIDE_NAMES[edge.side]
    if edge.per_interval == 0:
        if edge.base >= required:
            return
        if edge.base >= ZERO:
            report.refusals.append(
                Reason(
                    "lookback_truncated",
                    f"{snippet(edge.node, lineage.dialect)} reads {ref.name} only "
                    f"{iso_duration(edge.base)} {word} the window, "
                    f"but the query needs {iso_duration(required)} (window frames, joins or the output time column); "
                    f"widen the filter to match",
                    line_of(edge.node),
                )
            )
            return
        report.limits.append(1)
        report.notes.append(
            Reason(
                "window_relative",
                f"{snippet(edge.node, lineage.dialect)} reads only part of each run's window from {ref.name}: "
                "runs cover one interval each",
                line_of(edge.node),
            )
        )
        return
    most = math.floor((edge.base - required) / longest)
    report.limits.append(max(1, most))
    anchor = "start" if edge.side == AFTER else "end"
    extent = "one interval" if most <= 1 else f"at most {most} intervals"
    report.notes.append(
        Reason(
            "window_relative",
            f"{snippet(edge.node, lineage.dialect)} reads {ref.name} relative to the {anchor} of the run window, "
            f"so a run may cover {extent}",
            line_of(edge.node),
        )
    )
