"""Source-filter pushdown: read each time-series table only for the range its bound allows.

Every reference to a time-series table (in the main query, CTEs, subqueries, each side of a
self-join) becomes a derived table under the reference's own alias, filtered on the table's time
column to ``[run_start - before, run_end + after)``. The model's own output clamp is separate.

A table with an event-time column has its bound in event time: it is read in whole partitions of its
time column (for pruning) and filtered on the event time itself (exact), since each partition holds
exactly the rows whose event time truncates to it.

>>> import sqlglot
>>> from datetime import datetime, timedelta
>>> q = sqlglot.parse_one("SELECT o.id FROM raw.orders AS o JOIN dim.c ON c.id = o.cid", read="spark")
>>> out = pushdown(q, bounds={"raw.orders": SourceBound(timedelta(hours=1), timedelta(0)), "dim.c": None},
...                time_columns={"raw.orders": "ts", "dim.c": None},
...                run_start=datetime(2024, 1, 2), run_end=datetime(2024, 1, 3))
>>> print(out.sql("spark"))  # doctest: +NORMALIZE_WHITESPACE
SELECT o.id FROM (SELECT * FROM raw.orders WHERE ts >= CAST('2024-01-01 23:00:00' AS TIMESTAMP)
AND ts < CAST('2024-01-03 00:00:00' AS TIMESTAMP)) AS o JOIN dim.c ON c.id = o.cid
>>> from datetime import timezone
>>> out = pushdown(sqlglot.parse_one("SELECT * FROM raw.e", read="spark"),
...                bounds={"raw.e": SourceBound(timedelta(minutes=30), timedelta(0))}, time_columns={"raw.e": "ds"},
...                event_time_columns={"raw.e": ("ts", "day")},
...                run_start=datetime(2024, 1, 2, tzinfo=timezone.utc),
...                run_end=datetime(2024, 1, 3, tzinfo=timezone.utc))
>>> print(out.find(exp.Where).sql("spark"))  # doctest: +NORMALIZE_WHITESPACE
WHERE ds >= CAST('2024-01-01 00:00:00' AS TIMESTAMP) AND ds < CAST('2024-01-03 00:00:00' AS TIMESTAMP)
AND ts >= CAST('2024-01-01 23:30:00' AS TIMESTAMP) AND ts < CAST('2024-01-03 00:00:00' AS TIMESTAMP)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime, timezone

from sqlglot import exp
from sqlglot.optimizer.scope import build_scope

from incremental_assets.analysis.result import SourceBound
from incremental_assets.model.intervals import IntervalUnit


def timestamp_literal(table_name: str, value: datetime) -> exp.Expr:
    """``CAST('YYYY-MM-DD HH:MM:SS' AS TIMESTAMP)`` in UTC; the default literal of ``pushdown``."""
    if value.tzinfo is not None:
        value = value.astimezone(timezone.utc).replace(tzinfo=None)
    text = value.strftime("%Y-%m-%d %H:%M:%S") + (f".{value.microsecond:06d}" if value.microsecond else "")
    return exp.cast(exp.Literal.string(text), exp.DataType.build("TIMESTAMP"))


def pushdown(
    query: exp.Expr,
    *,
    bounds: Mapping[str, SourceBound | None],
    time_columns: Mapping[str, str | None],
    run_start: datetime,
    run_end: datetime,
    literal: Callable[[str, datetime], exp.Expr] | None = None,
    event_time_columns: Mapping[str, tuple[str, str]] | None = None,
) -> exp.Expr:
    """A new query in which every time-series table reference reads only its bounded range.

    ``literal(table_name, instant)`` builds the value compared with that table's time column
    (default: a UTC ``TIMESTAMP``). Tables with no bound (None, or absent) are read in full.
    ``event_time_columns`` maps a table to its event-time column and its partition unit. The input
    expression is not modified.
    """
    make_literal = literal or timestamp_literal
    by_lower_bound = {name.lower(): (name, bound) for name, bound in bounds.items()}
    by_lower_column = {name.lower(): column for name, column in time_columns.items()}
    by_lower_event = {name.lower(): event for name, event in (event_time_columns or {}).items()}
    result = query.copy()
    root = build_scope(result)
    if root is None:
        return result
    seen: set[int] = set()
    for scope in root.traverse():
        sources = {id(s) for s in scope.sources.values() if isinstance(s, exp.Table)}
        for table in scope.tables:
            if id(table) in seen or id(table) not in sources or not isinstance(table.this, exp.Identifier):
                continue
            seen.add(id(table))
            written = ".".join(part.name for part in table.parts).lower()
            name, bound = by_lower_bound.get(written, (written, None))
            column = by_lower_column.get(written)
            if bound is None or not column:
                continue
            low, high = run_start - bound.before, run_end + bound.after
            event = by_lower_event.get(written)
            if event is None:
                condition = exp.and_(*_in_range(column, make_literal(name, low), make_literal(name, high)))
            else:
                unit = IntervalUnit.of(event[1])
                condition = exp.and_(
                    *_in_range(column, make_literal(name, unit.floor(low)), make_literal(name, unit.ceil(high))),
                    *_in_range(event[0], timestamp_literal(name, low), timestamp_literal(name, high)),
                )
            _drop_table_qualifier(scope, table)
            table.replace(_bounded(table, condition))
    return result


def _in_range(column: str, low: exp.Expr, high: exp.Expr) -> tuple[exp.Expr, exp.Expr]:
    time = exp.column(exp.to_identifier(column))
    return exp.GTE(this=time, expression=low), exp.LT(this=time.copy(), expression=high)


def _bounded(table: exp.Table, condition: exp.Expr) -> exp.Subquery:
    alias = table.args.get("alias")
    inner = table.copy()
    inner.set("alias", None)
    if alias is None:
        alias = exp.TableAlias(this=table.this.copy())
    return exp.Subquery(this=exp.select("*").from_(inner).where(condition), alias=alias.copy())


def _drop_table_qualifier(scope, table: exp.Table) -> None:
    """``raw.orders.ts`` names the table; once it is a derived table aliased ``orders``, ``orders.ts`` does."""
    if table.alias or not table.db:
        return
    for column in scope.columns:
        if column.table == table.name and column.db == table.db:
            column.set("db", None)
            column.set("catalog", None)
