"""Safety rules: constructs that give a different answer on a slice of the data than on all of it.

Refused by default, each admitted by its override, set in the MODEL header as
``physical_properties (allow_distinct = true)`` (a spelling SQLMesh loads too) or in the kind
(``allow_distinct true``). An admitted construct stays in the notes, and when a multi-interval run
could still differ from one interval at a time, runs cover one interval each:

========================  =========================  ============================================
rule                      override                   refused
========================  =========================  ============================================
window_function           allow_window_functions     windows not partitioned by the time column
                                                     and not a lookback frame (ROW_NUMBER, running
                                                     totals, whole-partition aggregates)
aggregate                 allow_aggregates           GROUP BY (or a global aggregate) over time
                                                     series with no key aligned to the interval
having                    allow_having               HAVING with an aggregate, on such groups
distinct                  allow_distinct             aggregate DISTINCT on such groups; SELECT
                                                     DISTINCT and UNION without a column aligned
                                                     to the interval
limit                     allow_limit                LIMIT / FETCH anywhere
nondeterministic          allow_nondeterministic     rand, uuid, now, current_*, TABLESAMPLE, ...
subquery                  allow_subqueries           an expression subquery (scalar, IN, EXISTS)
                                                     that reads time-series data
========================  =========================  ============================================

A key is aligned with the interval (:meth:`Lineage.aligned`, the notion partition-aligned windows
use too) when it is the model's time column or a source's time column truncated to the model's grain
or finer (``CAST(ts AS DATE)`` or ``DATE_TRUNC('hour', ts)`` in a daily model; not a month). Each of
its groups then lies inside one interval, which a run reads whole (a wider read, for a lookback,
only adds groups outside the window, which the clamp on the output drops), so HAVING, COUNT(DISTINCT)
and SELECT DISTINCT over aligned keys are admitted without an override.

Window, aggregate, HAVING and DISTINCT rules only look at parts of the query that read time-series
data: computed from tables read in full, they give the same answer on every run. Derived tables and
CTEs are not subqueries here: they are analysed like the rest of the query. A model that reads its
own table gets the note ``self_reference`` (one interval per run, in order); ``WITH RECURSIVE`` is
refused (``recursive_cte``).

>>> import sqlglot
>>> from datetime import timedelta
>>> from incremental_assets.analysis.lineage import Lineage
>>> q = sqlglot.parse_one("SELECT ds, RAND() AS r FROM raw.e", read="spark")
>>> lin = Lineage(q, model_name="m", time_column="ds", time_columns={"raw.e": "ds"}, interval=timedelta(days=1))
>>> [r.rule for r in check_safety(lin).refusals]
['nondeterministic']
>>> def refused(sql):
...     q = sqlglot.parse_one(sql, read="spark")
...     lin = Lineage(q, model_name="m", time_column="ds", time_columns={"raw.e": "ts"}, interval=timedelta(days=1))
...     return [r.rule for r in check_safety(lin).refusals]
>>> refused("SELECT CAST(ts AS DATE) AS ds, COUNT(DISTINCT u) AS n FROM raw.e GROUP BY 1 HAVING COUNT(*) > 1")
[]
>>> refused("SELECT DATE_TRUNC('month', ts) AS ds, COUNT(DISTINCT u) AS n FROM raw.e GROUP BY 1")
['aggregate', 'distinct']
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from sqlglot import exp
from sqlglot.optimizer.scope import Scope, ScopeType, find_all_in_scope

from incremental_assets.analysis.lineage import Lineage, line_of, snippet
from incremental_assets.analysis.result import Findings, Reason
from incremental_assets.analysis.timeexpr import macro_name
from incremental_assets.analysis.window_functions import window_uses
from incremental_assets.model.kinds import SAFETY_OVERRIDES

OVERRIDES = SAFETY_OVERRIDES  # rule -> the kind flag that admits it

# Classes of the sqlglot in use (older 30.x releases, such as the one SQLMesh pins, lack some: their names below
# catch those functions as anonymous calls).
_NONDETERMINISTIC = tuple(
    getattr(exp, name)
    for name in (
        "Rand",
        "Randn",
        "Uuid",
        "Shuffle",
        "CurrentTimestamp",
        "CurrentDate",
        "CurrentTime",
        "CurrentDatetime",
        "Localtimestamp",
        "Localtime",
        "CurrentTimestampLTZ",
        "TableSample",
    )
    if hasattr(exp, name)
)
_NONDETERMINISTIC_NAMES = {
    "now",
    "rand",
    "random",
    "randn",
    "randstr",
    "uniform",
    "uuid",
    "shuffle",
    "monotonically_increasing_id",
    "spark_partition_id",
    "input_file_name",
    "input_file_block_start",
    "input_file_block_length",
    "current_timestamp",
    "current_date",
    "sysdate",
    "getdate",
    "systimestamp",
    "gen_random_uuid",
}


@dataclass(frozen=True)
class _Hit:
    rule: str
    node: exp.Expr
    problem: str  # what the construct does wrong on a slice of the data
    fix: str  # what the user can do about it
    # Whether, once admitted, a run over several intervals still equals one interval at a time.
    batch_safe: bool = False


def check_safety(lineage: Lineage, *, overrides: frozenset[str] = frozenset()) -> Findings:
    """Apply every safety rule to every scope; refusals for the rules not overridden."""
    hits: list[_Hit] = []
    per_interval = lineage.time_column_from_macro() is not None
    for scope in lineage.scopes:
        hits += _nondeterministic(lineage, scope)
        hits += _limit(lineage, scope)
        if not lineage.reads_time_series(scope):
            continue
        if scope.scope_type == ScopeType.SUBQUERY and not _inside_time_series_subquery(lineage, scope.parent):
            hits.append(_subquery(lineage, scope))
        if _inside_time_series_subquery(lineage, scope):
            continue  # refused (or admitted) as a whole above
        if isinstance(scope.expression, exp.Select):
            hits += _windows(lineage, scope)
            hits += _aggregates(lineage, scope, per_interval=per_interval)
        elif isinstance(scope.expression, exp.SetOperation) and scope.expression.args.get("distinct"):
            hits += filter(None, [_set_distinct(lineage, scope)])

    refusals, notes, batch_limit = [], [], None
    for hit in hits:
        override = OVERRIDES[hit.rule]
        if override not in overrides:
            refusals.append(Reason(hit.rule, f"{hit.problem}; {hit.fix}", line_of(hit.node), hit.node.meta.get("path")))
            continue
        limited = "" if hit.batch_safe else "; runs cover one interval each"
        notes.append(
            Reason(
                hit.rule,
                f"admitted by {override}: {hit.problem}{limited}",
                line_of(hit.node),
                hit.node.meta.get("path"),
            )
        )
        if not hit.batch_safe:
            batch_limit = 1
    if lineage.recursive:
        refusals.append(
            Reason("recursive_cte", "WITH RECURSIVE cannot be analysed for partial runs", line_of(lineage.query))
        )
    for ref in lineage.refs:
        if ref.is_self:
            notes.append(
                Reason(
                    "self_reference",
                    f"reads its own earlier output ({ref.name}): runs go one interval at a time, in order",
                    line_of(ref.table),
                )
            )
            batch_limit = 1
    return Findings(tuple(refusals), tuple(notes), batch_limit)


def override_hint(rule: str) -> str:
    """How a model admits ``rule`` anyway, in a spelling SQLMesh loads too (it refuses unknown kind
    properties, and keeps physical properties as they are).

    >>> override_hint("distinct")
    'set `physical_properties (allow_distinct = true)` in the MODEL header'
    """
    return f"set `physical_properties ({OVERRIDES[rule]} = true)` in the MODEL header"


def _inside_time_series_subquery(lineage: Lineage, scope: Scope | None) -> bool:
    while scope is not None:
        if scope.scope_type == ScopeType.SUBQUERY and lineage.reads_time_series(scope):
            return True
        scope = scope.parent
    return False


def _nondeterministic(lineage: Lineage, scope: Scope) -> list[_Hit]:
    hits = []
    for node in find_all_in_scope(scope.expression, exp.Func, exp.TableSample, exp.Parameter):
        if isinstance(node, exp.Parameter):
            named = macro_name(node)
            if named is None or named[0] != "execution":
                continue
            what = f"@{node.name}"
        elif not _draws_or_reads_clock(node):
            continue
        elif isinstance(node, _NONDETERMINISTIC):
            what = "TABLESAMPLE" if isinstance(node, exp.TableSample) else snippet(node, lineage.dialect, 40)
            if isinstance(node.parent, exp.StrToUnix):
                node, what = node.parent, "unix_timestamp()"  # without an argument it reads the clock
        else:
            what = snippet(node, lineage.dialect, 40)
        changes = "picks different rows" if isinstance(node, exp.TableSample) else "gives a different value"
        hits.append(
            _Hit(
                "nondeterministic",
                node,
                f"{what} {changes} on every run, so re-running a window would not reproduce its rows",
                f"compute it elsewhere or {override_hint('nondeterministic')}",
                batch_safe=True,
            )
        )
    return hits


def _draws_or_reads_clock(node: exp.Expr) -> bool:
    """A function (or TABLESAMPLE) that gives another value on every run: the clock, a random draw."""
    if isinstance(node, _NONDETERMINISTIC):
        return True
    return isinstance(node, exp.Anonymous) and node.name.lower() in _NONDETERMINISTIC_NAMES


def _limit(lineage: Lineage, scope: Scope) -> list[_Hit]:
    node = scope.expression.args.get("limit") or scope.expression.args.get("fetch")
    if node is None:
        return []
    return [
        _Hit(
            "limit",
            node,
            f"{snippet(node, lineage.dialect, 40)} keeps a subset of each run's rows, which depends on how the "
            "window is cut into runs",
            f"remove it or {override_hint('limit')}",
        )
    ]


def _subquery(lineage: Lineage, scope: Scope) -> _Hit:
    names = sorted({ref.name for ref in lineage.refs_under(scope) if ref.time_column})
    return _Hit(
        "subquery",
        scope.expression,
        f"subquery ({snippet(scope.expression, lineage.dialect, 60)}) reads time-series data "
        f"({', '.join(names)}) that a run only has for its window",
        f"join it as a table or CTE, or {override_hint('subquery')}",
    )


def _windows(lineage: Lineage, scope: Scope) -> list[_Hit]:
    hits = []
    for use in window_uses(lineage, scope):
        if use.kind != "history":
            continue
        if use.untimed_order is not None:
            hits.append(_untimed_frame(lineage, use.node, *use.untimed_order))
            continue
        hits.append(
            _Hit(
                "window_function",
                use.node,
                f"window function {snippet(use.node, lineage.dialect)} is not partitioned by the time column "
                f"{lineage.time_column}, so a run sees only part of each partition",
                f"partition it by {lineage.time_column} (or an expression of it at the model's grain), bound it with "
                f"RANGE BETWEEN INTERVAL ... PRECEDING AND CURRENT ROW, or {override_hint('window_function')}",
            )
        )
    return hits


def _untimed_frame(
    lineage: Lineage, node: exp.Window, table: str, time_column: str, event_column: str | None, column: str
) -> _Hit:
    """A RANGE frame over a column of a time-series table that says nothing about its time."""
    message = (
        f"window function {snippet(node, lineage.dialect)} has a RANGE frame over {column} of {table}, which is "
        f"neither its time column ({time_column}) nor "
        + (f"its event-time column ({event_column})" if event_column else "a declared event-time column")
        + ", so how far it reaches in time is unknown"
    )
    if event_column:
        hint = f"order the frame by {event_column} or {time_column}, or {override_hint('window_function')}"
    else:
        hint = (
            f"declare {column} as the event-time column of {table} (`event_time_column: {column}` in its sources.yaml "
            f"entry, or `event_time_column {column}` in its MODEL header; {time_column} must hold {column} truncated "
            f"to the table's interval unit), or {override_hint('window_function')}"
        )
    return _Hit("window_function", node, message, hint)


def _unaligned_group(lineage: Lineage, select: exp.Expr, aggregates: Sequence[exp.AggFunc]) -> _Hit:
    """The hit for a grouping (GROUP BY, or aggregates alone) with no key aligned with the time column."""
    group = select.args.get("group")
    what = (
        snippet(group, lineage.dialect, 60)
        if group is not None
        else f"aggregate {snippet(aggregates[0], lineage.dialect, 40)} without GROUP BY"
    )
    return _Hit(
        "aggregate",
        group if group is not None else aggregates[0],
        f"{what} over time-series data has no key aligned with the time column {lineage.time_column}: "
        "a group can span several intervals and a run sees only part of it",
        f"group by {lineage.time_column} (or an expression of it at the model's grain) or {override_hint('aggregate')}",
    )


def _aggregates(lineage: Lineage, scope: Scope, *, per_interval: bool) -> list[_Hit]:
    select = scope.expression
    aggregates = lineage.aggregates(scope)
    keys = lineage.group_keys(select)
    grouped = select.args.get("group") is not None or bool(aggregates)
    # When the time column is a window macro every run is one interval, so its rows are one group.
    aligned = grouped and (per_interval or any(lineage.aligned(key, scope) for key in keys))
    hits = [_unaligned_group(lineage, select, aggregates)] if grouped and not aligned else []
    # Groups aligned with the time column lie inside one interval, which a run reads whole: HAVING
    # and DISTINCT then see every row of their group and are admitted as they are.
    having = select.args.get("having")
    if having is not None and having.find(exp.AggFunc) is not None and not aligned:
        hits.append(
            _Hit(
                "having",
                having,
                f"{snippet(having, lineage.dialect, 60)} filters groups on aggregates, which differ when a group is "
                "only partly in a run",
                f"group by {lineage.time_column} (or an expression of it at the model's grain) or "
                f"{override_hint('having')}",
            )
        )
    if select.args.get("distinct") is not None and not _keeps_time(lineage, scope, per_interval=per_interval):
        hits.append(
            _Hit(
                "distinct",
                select.expressions[0],
                f"SELECT DISTINCT without a column aligned with the time column {lineage.time_column} removes "
                "duplicates only among the rows of one run",
                f"select {lineage.time_column} (or an expression of it at the model's grain) too, or "
                f"{override_hint('distinct')}",
            )
        )
    if not aligned:
        for aggregate in aggregates:
            if isinstance(aggregate.this, exp.Distinct):
                hits.append(
                    _Hit(
                        "distinct",
                        aggregate,
                        f"{snippet(aggregate, lineage.dialect, 40)} counts distinct values only among the "
                        "rows of one run",
                        f"group by {lineage.time_column} (or an expression of it at the model's grain) or "
                        f"{override_hint('distinct')}",
                    )
                )
    return hits


def _keeps_time(lineage: Lineage, scope: Scope, *, per_interval: bool) -> bool:
    """Whether SELECT DISTINCT keeps a column aligned with the time column (each row stays in one interval)."""
    if per_interval:
        return True
    projections = [p.unalias() for p in scope.expression.expressions]
    if any(isinstance(p, exp.Star) for p in projections):
        projections = [exp.column(lineage.time_column)]  # the star brings the time column along
    return any(lineage.aligned(p, scope) for p in projections)


def _set_distinct(lineage: Lineage, scope: Scope) -> _Hit | None:
    operation = scope.expression
    branches = _leaf_queries(scope)
    width = min((len(branch.expression.expressions) for branch in branches), default=0)
    keeps_time = any(
        all(lineage.aligned(branch.expression.expressions[i].unalias(), branch) for branch in branches)
        for i in range(width)
    )
    if keeps_time:
        return None
    keyword = operation.key.upper()
    return _Hit(
        "distinct",
        operation.expression,  # the right-hand query, just after the keyword
        f"{keyword} without ALL and without a column aligned with the time column {lineage.time_column} in every "
        "branch removes duplicates only among the rows of one run",
        f"write {keyword} ALL or {override_hint('distinct')}",
    )


def _leaf_queries(scope: Scope) -> list[Scope]:
    if not scope.set_operation_scopes:
        return [scope] if isinstance(scope.expression, exp.Select) else []
    return [leaf for branch in scope.set_operation_scopes for leaf in _leaf_queries(branch)]


def same_rows_from_same_inputs(query: exp.Expr) -> bool:
    """Whether ``query`` gives the same rows whenever its inputs hold the same rows: no macro (a window or
    execution time, or any other, rendered per run) and nothing that reads the clock or draws at random."""
    found = query.find_all(exp.Func, exp.TableSample, exp.Parameter)
    if any(isinstance(n, exp.Parameter) or _draws_or_reads_clock(n) for n in found):
        return False
    try:
        return "@" not in query.sql(dialect="spark")  # a macro function sqlglot keeps as text
    except Exception:  # noqa: BLE001 - a node that does not print as Spark SQL: not known to be the same
        return False
