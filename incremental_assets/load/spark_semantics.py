"""A query written in another dialect keeps its meaning on Spark: functions that sqlglot carries over by name
but that count or number differently in Spark are rewritten to the Spark expression giving the source
dialect's value.

* ``DATE_DIFF(part, a, b)`` of DuckDB, Snowflake, BigQuery and T-SQL counts the ``part`` boundaries crossed
  (from 23:30 to 00:10 is one day); Spark's ``DATEDIFF(part, a, b)`` counts whole parts elapsed (zero days).
  It becomes ``TIMESTAMPDIFF(part, DATE_TRUNC(part, a), DATE_TRUNC(part, b))``.
* DuckDB numbers the days of the week from Sunday = 0 (``DAYOFWEEK``, ``DATE_PART('dow', x)``,
  ``EXTRACT(dow FROM x)``), ISO days from Monday = 1 (``ISODOW``, ``DATE_PART('isodow', x)``), and ``WEEK`` is
  the ISO week; Spark's ``DAYOFWEEK`` counts from Sunday = 1 and has no ``WEEK``.
* DuckDB's ``DAYNAME``/``MONTHNAME`` are full names (``Wednesday``; Spark's are ``Wed``), ``EPOCH(x)`` and
  ``EXTRACT(epoch FROM x)`` seconds with their fraction, ``QUANTILE_CONT`` Spark's interpolating ``PERCENTILE`` and
  ``REGEXP_FULL_MATCH`` a match of the whole text.
* ``GROUPING(a, b)`` with more than one column (standard SQL: a bit per column) is Spark's ``GROUPING_ID(a, b)``;
  Spark's ``GROUPING`` takes one.
"""

from __future__ import annotations

from sqlglot import exp

DUCKDB_DOW = {"dow", "dayofweek", "weekday"}
DUCKDB_ISODOW = {"isodow"}


def with_spark_semantics(query: exp.Expr, dialect: str) -> exp.Expr:
    """``query`` (parsed in ``dialect``) with the rewrites above applied, in place; returned."""
    for grouping in list(query.find_all(exp.Grouping)):
        if len(grouping.expressions) > 1:
            grouping.replace(exp.GroupingId(expressions=[e.copy() for e in grouping.expressions]))
    if dialect == "spark":
        return query
    for diff in list(query.find_all(exp.DateDiff)):
        if diff.args.get("date_part_boundary") and diff.args.get("unit") is not None:
            diff.replace(_boundaries_crossed(diff))
    if dialect == "duckdb":
        for node in list(query.find_all(exp.DayOfWeek, exp.DayOfWeekIso, exp.Week, exp.Extract, exp.Anonymous)):
            replacement = _duckdb_weekday(node)
            if replacement is not None:
                node.replace(replacement)
        for node in list(query.find_all(*_DUCKDB_FUNCTIONS)):
            node.replace(_DUCKDB_FUNCTIONS[type(node)](node))
    return query


def _epoch_seconds(value: exp.Expr) -> exp.Expr:
    micros = exp.Anonymous(this="UNIX_MICROS", expressions=[exp.cast(value.copy(), "TIMESTAMP")])
    return exp.paren(exp.Div(this=micros, expression=exp.Literal.number("1000000.0")))


def _full_match(node: exp.Expr) -> exp.Expr:
    pattern = exp.Concat(expressions=[exp.Literal.string("^(?:"), node.expression.copy(), exp.Literal.string(")$")])
    return exp.RegexpLike(this=node.this.copy(), expression=pattern)


_DUCKDB_FUNCTIONS = {
    exp.Dayname: lambda node: exp.Anonymous(
        this="DATE_FORMAT", expressions=[node.this.copy(), exp.Literal.string("EEEE")]
    ),
    exp.Monthname: lambda node: exp.Anonymous(
        this="DATE_FORMAT", expressions=[node.this.copy(), exp.Literal.string("MMMM")]
    ),
    exp.TimeToUnix: lambda node: _epoch_seconds(node.this),
    exp.PercentileCont: lambda node: exp.Anonymous(
        this="PERCENTILE", expressions=[node.this.copy(), node.expression.copy()]
    ),
    exp.RegexpFullMatch: _full_match,
}


def _boundaries_crossed(node: exp.DateDiff) -> exp.Expr:
    unit = node.args["unit"]
    part = unit.name.upper() if isinstance(unit, (exp.Var, exp.Literal, exp.Identifier, exp.Column)) else str(unit)

    def trunc(value: exp.Expr) -> exp.Expr:
        return exp.Anonymous(this="DATE_TRUNC", expressions=[exp.Literal.string(part), value.copy()])

    return exp.TimestampDiff(
        this=trunc(node.this), expression=trunc(node.expression), unit=exp.Var(this=part)
    )  # TIMESTAMPDIFF(part, start, end): ``expression`` is the start


def _duckdb_weekday(node: exp.Expr) -> exp.Expr | None:
    """Spark's value of a DuckDB day-of-week or week expression (None: not one)."""
    if isinstance(node, exp.DayOfWeek):
        return _sunday_zero(node.this)
    if isinstance(node, exp.DayOfWeekIso):
        return _monday_one(node.this)
    if isinstance(node, exp.Week):
        return exp.WeekOfYear(this=node.this.copy())
    if isinstance(node, exp.Extract):
        part = node.this.name.lower()
        value = node.expression
    elif (
        isinstance(node, exp.Anonymous)
        and node.name.upper() in ("DATE_PART", "DATEPART")
        and len(node.expressions) == 2
    ):
        first = node.expressions[0]
        if not isinstance(first, exp.Literal):
            return None
        part, value = first.name.lower(), node.expressions[1]
    else:
        return None
    if part == "epoch":
        return _epoch_seconds(value)
    if part in DUCKDB_DOW:
        return _sunday_zero(value)
    if part in DUCKDB_ISODOW:
        return _monday_one(value)
    return None


def _sunday_zero(value: exp.Expr) -> exp.Expr:
    return exp.paren(exp.Sub(this=exp.DayOfWeek(this=value.copy()), expression=exp.Literal.number(1)))


def _monday_one(value: exp.Expr) -> exp.Expr:
    return exp.paren(
        exp.Add(this=exp.Anonymous(this="WEEKDAY", expressions=[value.copy()]), expression=exp.Literal.number(1))
    )
