"""Render SQLMesh date macros as typed literals (in the query and the pre/post statements), and clamp a
query's output to its window.

Ends are exclusive inside the framework; the ``@end_*`` macros keep SQLMesh's inclusive meaning, so
``x BETWEEN @start_dt AND @end_dt`` covers exactly the window. Values are built as AST nodes
(``CAST('2024-01-01' AS DATE)``), never pasted into SQL text.

>>> from incremental_assets.load.query import parse_query
>>> from incremental_assets.model.intervals import IntervalUnit, TimeWindow
>>> q = parse_query("SELECT * FROM t WHERE ds BETWEEN @start_ds AND @end_ds")
>>> render_macros(q, TimeWindow.parse("2024-01-01", "2024-01-08")).sql("spark")
"SELECT * FROM t WHERE ds BETWEEN '2024-01-01' AND '2024-01-07'"
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone, tzinfo
from functools import lru_cache
from typing import Any, Mapping

from sqlglot import exp

from incremental_assets.load.macros.syntax import table_macro, var_name
from incremental_assets.load.macros.window_conditions import resolve_runtime
from incremental_assets.load.query import table_name
from incremental_assets.model import clock
from incremental_assets.model.intervals import IntervalUnit, TimeWindow
from incremental_assets.model.source_time import EPOCH_FORMATS, epoch_value
from incremental_assets.model.sql_model import SqlModel

ONE_MICROSECOND = timedelta(microseconds=1)
ONE_MILLISECOND = timedelta(milliseconds=1)
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _timestamp_text(value: datetime) -> str:
    text = value.strftime("%Y-%m-%d %H:%M:%S")
    if value.microsecond:
        text += f".{value.microsecond:06d}"
    return text


def typed_date(value: datetime) -> exp.Expr:
    return exp.cast(exp.Literal.string(value.date().isoformat()), exp.DataType.build("DATE"))


def typed_timestamp(value: datetime) -> exp.Expr:
    return exp.cast(exp.Literal.string(_timestamp_text(value)), exp.DataType.build("TIMESTAMP"))


def _epoch_millis(instant: datetime) -> int:
    return (instant - EPOCH) // ONE_MILLISECOND


def macro_values(window: TimeWindow, *, execution_time: datetime | None = None) -> dict[str, exp.Expr]:
    """The value of every date macro for a window, as sqlglot expressions, typed as SQLMesh renders them:
    ``*_epoch`` is the instant's whole milliseconds / 1000 as a DOUBLE, ``*_millis`` a whole number,
    ``*_hour`` the UTC hour, ``*_tstz`` text with its ``+00:00`` offset, ``*_dtntz`` a TIMESTAMP;
    ``@latest_*`` are the ``@execution_*`` values under SQLMesh's older name.

    >>> v = macro_values(TimeWindow.parse("2024-01-01", "2024-01-02"))
    >>> v["end_dt"].sql("spark"), v["end_millis"].sql("spark"), v["end_epoch"].sql("spark")
    ("CAST('2024-01-01 23:59:59.999999' AS TIMESTAMP)", '1704153599999', 'CAST(1704153599.999 AS DOUBLE)')
    >>> v["start_tstz"].sql("spark"), v["end_hour"].sql("spark")
    ("'2024-01-01 00:00:00+00:00'", '23')
    """
    start = window.start.astimezone(timezone.utc)
    last = (window.end - ONE_MICROSECOND).astimezone(timezone.utc)
    execution = (execution_time or clock.now()).astimezone(timezone.utc)
    values: dict[str, exp.Expr] = {}
    for edge, instant in (("start", start), ("end", last), ("execution", execution), ("latest", execution)):
        millis = _epoch_millis(instant)
        values[f"{edge}_ds"] = exp.Literal.string(instant.date().isoformat())
        values[f"{edge}_date"] = typed_date(instant)
        values[f"{edge}_ts"] = exp.Literal.string(_timestamp_text(instant))
        values[f"{edge}_dt"] = typed_timestamp(instant)
        values[f"{edge}_dtntz"] = typed_timestamp(instant)
        values[f"{edge}_tstz"] = exp.Literal.string(instant.isoformat(sep=" "))
        values[f"{edge}_epoch"] = exp.cast(exp.Literal.number(repr(millis / 1000)), exp.DataType.build("DOUBLE"))
        values[f"{edge}_millis"] = exp.Literal.number(millis)
        values[f"{edge}_hour"] = exp.Literal.number(instant.hour)
    return values


@lru_cache(maxsize=64)
def _interval_macros(start: datetime, unit: IntervalUnit) -> Mapping[str, Any]:
    return macro_values(TimeWindow(unit.floor(start), unit.next(unit.floor(start))), execution_time=start)


def sample_macros(model: SqlModel) -> dict[str, Any]:
    """Macro values of the model's first interval: typed literals, so the columns they make have types
    and the same definition always gives the same analysed query (the models of a project share a few
    starts and units: the values are made once for each)."""
    start = model.start or TimeWindow.parse("2024-01-01", "2024-01-02").start
    unit = model.unit if model.is_incremental else IntervalUnit.of("day")
    return {**_interval_macros(start, unit), "this_model": exp.to_table(model.name)}


def render_macros(
    query: exp.Expr,
    window: TimeWindow,
    *,
    execution_time: datetime | None = None,
    this_model: str | None = None,
    extra: Mapping[str, exp.Expr] | None = None,
) -> exp.Expr | None:
    """A copy of ``query`` with every date macro replaced by its typed literal for ``window``
    (and the ``extra`` macros, e.g. a cursor model's ``@last_value``, by theirs), and every macro
    condition on the run window decided (a statement an ``@IF`` leaves out gives None)."""
    values = macro_values(window, execution_time=execution_time)
    values.update(extra or {})
    if this_model is not None:
        values["this_model"] = exp.to_table(this_model)

    def replace(node: exp.Expr) -> exp.Expr:
        if isinstance(node, exp.Parameter):
            value = values.get(node.name)
            if value is not None:
                return value.copy()
        return node

    rendered = resolve_runtime(query.copy().transform(replace))
    assert rendered is not None or not isinstance(query, exp.Query), "a query is never left out"
    return rendered


def window_literal(instant: datetime, *, time_format: str | None = None, tz: tzinfo = timezone.utc) -> exp.Expr:
    """The literal a time column is compared with: formatted text for string columns, a number for a column
    counting from the epoch (the instant in the project's zone ``tz``), else a TIMESTAMP.

    A TIMESTAMP literal compares correctly with DATE columns too (Spark widens the date), and every
    boundary of a day-or-longer interval is midnight.
    """
    if time_format in EPOCH_FORMATS:
        return exp.Literal.number(epoch_value(instant, time_format, tz))
    if time_format:
        return exp.Literal.string(instant.strftime(time_format))
    return typed_timestamp(instant)


def cursor_literal(value: str | int | float | None, spark_type: str | None = None) -> exp.Expr:
    """A cursor value as SQL: typed when the column's type is known, else a plain literal; NULL if none.

    >>> cursor_literal("2024-01-01 00:00:00", "TIMESTAMP").sql("spark"), cursor_literal(5).sql("spark")
    ("CAST('2024-01-01 00:00:00' AS TIMESTAMP)", '5')
    """
    if value is None:
        return exp.Null()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return exp.Literal.number(value)
    literal = exp.Literal.string(str(value))
    return exp.cast(literal, exp.DataType.build(spark_type, dialect="spark")) if spark_type else literal


WINDOW_ALIAS = "__window"


def clamp_to_window(
    query: exp.Expr, time_column: str, window: TimeWindow, *, time_format: str | None = None, tz: tzinfo = timezone.utc
) -> exp.Select:
    """Wrap the query so its output keeps only rows whose time column lies in ``[start, end)``.

    This is the leakage guard: whatever the query's own WHERE says, no row outside the window is
    written, and the same window decides which partitions the commit replaces.

    >>> from incremental_assets.load.query import parse_query
    >>> q = parse_query("SELECT ds FROM t")
    >>> clamped = clamp_to_window(q, "ds", TimeWindow.parse("2024-01-01", "2024-01-02"))
    >>> print(clamped.sql("spark"))  # doctest: +NORMALIZE_WHITESPACE
    SELECT * FROM (SELECT ds FROM t) AS __window WHERE __window.ds >= CAST('2024-01-01 00:00:00' AS TIMESTAMP)
    AND __window.ds < CAST('2024-01-02 00:00:00' AS TIMESTAMP)
    """
    column = exp.column(time_column, table=WINDOW_ALIAS)
    condition = exp.and_(
        exp.GTE(this=column, expression=window_literal(window.start, time_format=time_format, tz=tz)),
        exp.LT(this=column.copy(), expression=window_literal(window.end, time_format=time_format, tz=tz)),
    )
    return (
        exp.select("*")
        .from_(exp.Subquery(this=query.copy(), alias=exp.TableAlias(this=exp.to_identifier(WINDOW_ALIAS))))
        .where(condition)
    )


def render_statements(
    model: SqlModel,
    window: TimeWindow,
    *,
    execution_time: datetime | None = None,
    extra: Mapping[str, exp.Expr] | None = None,
    views: Mapping[str, str],
) -> tuple[tuple[exp.Expr, ...], tuple[exp.Expr, ...]]:
    """A model's pre- and post-statements for one run: date macros rendered, tables named as the run's views.

    ``@this_model`` (and the model's own name) becomes the view the model's table is registered as.
    """

    def render(statement: exp.Expr) -> exp.Expr | None:
        rendered = render_macros(statement, window, execution_time=execution_time, this_model=model.name, extra=extra)
        return None if rendered is None else rendered.transform(lambda node: _view_table(node, model.name, views))

    pre = tuple(r for r in (render(s) for s in model.pre_statements) if r is not None)
    return pre, tuple(r for r in (render(s) for s in model.post_statements) if r is not None)


def _view_table(node: exp.Expr, own: str, views: Mapping[str, str]) -> exp.Expr:
    held = table_macro(node)
    if held is not None and var_name(held) == "this_model":
        name = own
    elif isinstance(node, exp.Table) and node.name and table_name(node) in views:
        name = table_name(node)
    else:
        return node
    table = exp.Table(this=exp.to_identifier(views[name]))
    if node.args.get("alias") is not None:
        table.set("alias", node.args["alias"])
    return table
