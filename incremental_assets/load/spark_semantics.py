"""A query written in another dialect keeps its meaning on Spark: functions that sqlglot carries over by name
but that count or number differently in Spark are rewritten to the Spark expression giving the source
dialect's value.

* ``DATE_DIFF(part, a, b)`` of DuckDB, Snowflake, BigQuery and T-SQL counts the ``part`` boundaries crossed
  (from 23:30 to 00:10 is one day); Spark's ``DATEDIFF(part, a, b)`` counts whole parts elapsed (zero days).
  It becomes ``TIMESTAMPDIFF(part, DATE_TRUNC(part, a), DATE_TRUNC(part, b))``, with DuckDB's other names of
  parts (``'d'``, ``'hr'``, ``'mons'``) Spark's; DuckDB's ``week`` counts whole weeks between the two days.
* DuckDB numbers the days of the week from Sunday = 0 (``DAYOFWEEK``, ``DATE_PART('dow', x)``,
  ``EXTRACT(dow FROM x)``), ISO days from Monday = 1 (``ISODOW``, ``DATE_PART('isodow', x)``), and ``WEEK`` is
  the ISO week; Spark's ``DAYOFWEEK`` counts from Sunday = 1 and has no ``WEEK``.
* DuckDB's ``DAYNAME``/``MONTHNAME`` are full names (``Wednesday``; Spark's are ``Wed``), ``EPOCH(x)`` and
  ``EXTRACT(epoch FROM x)`` seconds with their fraction (a DOUBLE), ``QUANTILE_CONT`` Spark's interpolating
  ``PERCENTILE`` and ``REGEXP_FULL_MATCH`` a match of the whole text.
* DuckDB's ``/`` divides as DOUBLE whatever the numbers' types (Spark keeps a DECIMAL's, to six places), and
  ``//`` is NULL for a zero divisor (Spark's ``DIV`` fails the run) and, of a DECIMAL or DOUBLE the query shows,
  plain division.
* DuckDB's ``LEN`` / ``LENGTH`` of a list is its number of elements (Spark's ``LENGTH`` takes only text): a
  list the query shows (a literal, a cast, a function returning one) is counted with ``SIZE``.
* DuckDB's date and time functions: :mod:`~incremental_assets.load.duckdb_time`; its list aggregates and
  ordered ``FIRST`` / ``LAST``: :mod:`~incremental_assets.load.duckdb_lists`; its functions Spark names
  otherwise or lacks: :mod:`~incremental_assets.load.duckdb_functions`; its JSON:
  :mod:`~incremental_assets.load.duckdb_json`; its ``range`` / ``generate_series``:
  :mod:`~incremental_assets.load.duckdb_series`.
* DuckDB's cast of a DOUBLE (a DECIMAL) the query shows to an integer rounds half to even (half away from
  zero), where Spark's truncates.
* DuckDB's ``REGEXP_REPLACE`` replaces the first match unless its options hold ``g`` (Spark's replaces every
  match), ignores case with ``i`` (as ``REGEXP_MATCHES`` does) and writes groups ``\\1`` in the replacement
  (Spark: ``$1``).
* ``GROUPING(a, b)`` with more than one column (standard SQL: a bit per column) is Spark's ``GROUPING_ID(a, b)``;
  Spark's ``GROUPING`` takes one.

What no Spark expression computes the same is refused with :class:`NoSparkEquivalent`, naming the node.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import sqlglot
from sqlglot import exp

from incremental_assets.load import duckdb_functions, duckdb_json, duckdb_time
from incremental_assets.load.duckdb_lists import nested_unnests, ordered_aggregates
from incremental_assets.load.duckdb_series import series, series_tables
from incremental_assets.load.duckdb_time import NoSparkEquivalent
from incremental_assets.load.duckdb_types import INTEGER_TYPES, is_list, shown_type, type_columns, unions_by_name

__all__ = ["NoSparkEquivalent", "tilde_as_full_match", "with_spark_semantics"]

DUCKDB_DOW = {"dow", "dayofweek", "weekday"}
DUCKDB_ISODOW = {"isodow"}


def with_spark_semantics(
    query: exp.Expr, dialect: str, schemas: Mapping[str, Mapping[str, str]] | None = None
) -> exp.Expr:
    """``query`` (parsed in ``dialect``) with the rewrites above applied, in place; returned. ``schemas``: the
    declared columns of tables (``{"db.table": {column: Spark SQL type}}``), for rewrites a column's type decides."""
    for grouping in list(query.find_all(exp.Grouping)):
        if len(grouping.expressions) > 1:
            grouping.replace(exp.GroupingId(expressions=[e.copy() for e in grouping.expressions]))
    if dialect == "spark":
        return query
    for diff in list(query.find_all(exp.DateDiff)):
        if diff.args.get("unit") is None:
            continue
        if dialect == "duckdb" and _duckdb_part(diff) == "WEEK":  # whole weeks between the two days
            diff.set("unit", exp.var("DAY"))
            diff.replace(exp.IntDiv(this=_boundaries_crossed(diff), expression=exp.Literal.number(7)))
        elif diff.args.get("date_part_boundary"):
            diff.replace(_boundaries_crossed(diff))
    if dialect == "duckdb":
        type_columns(query, schemas or {})
        unions_by_name(query, schemas or {})
        series_tables(query)
        # innermost first: a rewrite copies its arguments, so they must be rewritten already
        for node in reversed(list(query.find_all(*_DUCKDB_FUNCTIONS, *_DUCKDB_CALLS))):
            rewrite = _DUCKDB_FUNCTIONS.get(type(node))
            replacement = rewrite(node) if rewrite else _duckdb_call(node)
            if replacement is not None and replacement is not node:
                node.replace(replacement)
        ordered_aggregates(query)
        nested_unnests(query)
    return query


# Tokens after which ``~`` starts an operand (a bitwise not) rather than following one.
_OPERAND_STARTS = set(
    "L_PAREN L_BRACKET COMMA SELECT DISTINCT WHERE HAVING ON AND OR NOT CASE WHEN THEN ELSE BY EQ NEQ NULLSAFE_EQ LT "
    "LTE GT GTE PLUS DASH STAR SLASH DIV MOD CARET AMP PIPE DPIPE TILDE LSHIFT RSHIFT IS IN LIKE ILIKE BETWEEN "
    "COLON RETURNING ARROW FARROW".split()
)


def tilde_as_full_match(sql: str) -> str:
    """DuckDB's SQL text with ``a ~ p`` / ``a !~ p`` written ``a SIMILAR TO p`` / ``a NOT SIMILAR TO p``: a
    match of the whole text, which sqlglot reads as a match anywhere in it (``~ x``, a bitwise not, stays).

    >>> tilde_as_full_match("SELECT s ~ 'a.*', s !~ 'b', ~n, x::TEXT ~ 'c' FROM t WHERE (~n) = 1")
    "SELECT s SIMILAR TO 'a.*', s NOT SIMILAR TO 'b', ~n, x::TEXT SIMILAR TO 'c' FROM t WHERE (~n) = 1"
    """
    if "~" not in sql:
        return sql
    try:
        tokens = sqlglot.Dialect.get_or_raise("duckdb").tokenize(sql)
    except sqlglot.errors.SqlglotError:
        return sql
    out, done = [], 0
    for i, token in enumerate(tokens):
        if token.text != "~" or i == 0:
            continue
        start, before = token.start, tokens[i - 1]
        if before.text == "!" and before.end == token.start - 1 and i > 1:
            start, before, operator = before.start, tokens[i - 2], "NOT SIMILAR TO"
        else:
            operator = "SIMILAR TO"
        if before.token_type.name not in _OPERAND_STARTS:
            out += [sql[done:start], operator]
            done = token.end + 1
    return "".join(out) + sql[done:]


def _duckdb_call(node: exp.Expr) -> exp.Expr | None:
    return (
        _duckdb_weekday(node)
        or duckdb_time.yearweek(node)
        or duckdb_functions.duckdb_function(node)
        or duckdb_json.json_function(node)
    )


def _epoch_seconds(value: exp.Expr) -> exp.Expr:
    micros = exp.Anonymous(this="UNIX_MICROS", expressions=[exp.cast(value.copy(), "TIMESTAMP")])
    return exp.paren(exp.Div(this=micros, expression=exp.cast(exp.Literal.number(1000000), "DOUBLE")))


def _full_match(node: exp.Expr) -> exp.Expr:
    pattern = exp.Concat(expressions=[exp.Literal.string("^(?:"), node.expression.copy(), exp.Literal.string(")$")])
    return exp.RegexpLike(this=node.this.copy(), expression=pattern)


_DUCKDB_FUNCTIONS: dict[type[exp.Expr], Callable[[Any], exp.Expr | None]] = {
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
    exp.Div: lambda node: _double_division(node.this, node.expression),
    exp.IntDiv: lambda node: _integer_division(node),
    exp.Length: lambda node: exp.ArraySize(this=node.this.copy()) if is_list(node.this) else node,
    exp.DateBin: duckdb_time.time_bucket,
    exp.DateAdd: duckdb_time.date_add,
    exp.RegexpReplace: lambda node: _regexp_replace(node),
    exp.RegexpLike: lambda node: _regexp_matches(node),
    exp.SimilarTo: _full_match,
    exp.Format: lambda node: _format(node),
    exp.Cast: lambda node: duckdb_json.json_function(node) or _rounded_cast(node),
    exp.TryCast: lambda node: _rounded_cast(node),
    exp.JSONExtract: duckdb_json.json_function,
    exp.JSONObject: duckdb_json.json_function,
    exp.JSONArray: duckdb_json.json_function,
    exp.GenerateSeries: series,
    exp.TimeToStr: duckdb_time.strftime,
    exp.DateTrunc: duckdb_time.date_trunc,
    exp.TimestampTrunc: duckdb_time.date_trunc,
    exp.ArrayReverse: duckdb_functions.reversed_list,
    exp.ArrayPosition: duckdb_functions.list_position,
    exp.IsInf: duckdb_functions.infinite,
    exp.IsNan: duckdb_functions.not_a_number,
    exp.ArrayContains: duckdb_functions.contains,
    exp.ArrayToString: duckdb_functions.joined,
    exp.Bracket: duckdb_functions.element,
    exp.Mod: duckdb_functions.remainder,
    exp.UnixToTime: duckdb_functions.epoch_ms,
    exp.Add: duckdb_time.date_arithmetic,
    exp.Sub: duckdb_time.date_arithmetic,
    exp.Log: duckdb_functions.log10,
    exp.Concat: duckdb_functions.concat,
    exp.Glob: duckdb_functions.glob,
    exp.ArrayOverlaps: duckdb_functions.overlap,
    exp.Interval: duckdb_functions.interval_of,
    exp.Left: duckdb_functions.left_right,
    exp.Right: duckdb_functions.left_right,
    exp.Window: duckdb_functions.window_function,
    exp.ToDays: duckdb_functions.to_days,
    exp.PercentileDisc: duckdb_functions.discrete_quantile,
    exp.Quantile: duckdb_functions.discrete_quantile,
    exp.Skewness: duckdb_functions.sample_moment,
    exp.Kurtosis: duckdb_functions.sample_moment,
    exp.Count: lambda node: node if node.this is not None or node.expressions else exp.Count(this=exp.Star()),
}
_DUCKDB_CALLS = (exp.DayOfWeek, exp.DayOfWeekIso, exp.Week, exp.Extract, exp.Anonymous)

_NOT_INTEGER = {exp.DataType.Type.DECIMAL, exp.DataType.Type.DOUBLE, exp.DataType.Type.FLOAT}


def _rounded_cast(node: exp.Cast) -> exp.Expr:
    """DuckDB's cast of a DOUBLE to an integer rounds half to even, of a DECIMAL half away from zero (Spark's
    truncates); only for a value the query shows the type of."""
    if node.to.this not in INTEGER_TYPES:
        return node
    value = node.this.unnest()
    kind = exp.DataType.build("DOUBLE") if isinstance(value, exp.Div) else shown_type(value)  # DuckDB's `/`
    if kind is None or kind.this not in _NOT_INTEGER:
        return node
    rounding = "ROUND" if kind.this == exp.DataType.Type.DECIMAL else "BROUND"
    rounded = node.copy()
    rounded.set("this", exp.Anonymous(this=rounding, expressions=[node.this.copy(), exp.Literal.number(0)]))
    return rounded


def _regexp_replace(node: exp.RegexpReplace) -> exp.Expr:
    """DuckDB's ``REGEXP_REPLACE``: the first match only unless the options say ``g``, ``i`` ignoring case, and
    ``\\1`` (``\\0`` the match) in the replacement, which Java writes ``$1``."""
    options = node.args.get("modifiers")
    if options is not None and not isinstance(options, exp.Literal) or node.args.get("position") is not None:
        return node
    flags = options.name if options is not None else ""
    every = "g" in flags
    pieces = [node.expression.copy()]
    if not every:  # the text before the first match is group 1, the match group 2
        pieces = [exp.Literal.string("^(?s:(.*?))("), *pieces, exp.Literal.string(")")]
    if flags.rfind("i") > flags.rfind("c"):
        pieces.insert(0, exp.Literal.string("(?i)"))
    replacement = node.args.get("replacement")
    if isinstance(replacement, exp.Literal):
        text = _java_replacement(replacement.name, 0 if every else 2)
        replacement = exp.Literal.string(text if every else "$1" + text)
    elif replacement is not None and not every:
        replacement = exp.Concat(expressions=[exp.Literal.string("$1"), replacement.copy()], safe=True)
    return exp.RegexpReplace(this=node.this.copy(), expression=_joined(pieces), replacement=replacement)


def _regexp_matches(node: exp.RegexpLike) -> exp.Expr:
    """DuckDB's ``REGEXP_MATCHES(s, pattern, options)``: ``i`` ignores case (``c`` after it does not),
    ``s`` lets ``.`` match a newline; Spark's ``RLIKE`` takes them inside the pattern."""
    options = node.args.get("flag")
    if not isinstance(options, exp.Literal):
        return node
    flags = options.name
    prefix = ("(?i)" if flags.rfind("i") > flags.rfind("c") else "") + ("(?s)" if "s" in flags else "")
    pattern = _joined([exp.Literal.string(prefix), node.expression.copy()]) if prefix else node.expression.copy()
    return exp.RegexpLike(this=node.this.copy(), expression=pattern)


def _format(node: exp.Format) -> exp.Expr:
    """DuckDB's ``FORMAT('{} of {}', a, b)`` (fmt's ``{}`` placeholders; NULL when an argument is) as Spark's
    ``FORMAT_STRING``; a format other than a constant text of ``{}``, ``{{`` and ``}}`` is refused."""
    text = node.this.name if isinstance(node.this, exp.Literal) and node.this.is_string else None
    java = None if text is None else _printf_of_fmt(text)
    if java is None:
        raise NoSparkEquivalent(
            node,
            f"{node.sql(dialect='duckdb')[:60]}: a FORMAT other than a constant text of {{}} placeholders",
            "write the text with || and CAST(x AS TEXT), or PRINTF",
        )
    args = [a.copy() for a in node.expressions]
    formatted = exp.Anonymous(this="FORMAT_STRING", expressions=[exp.Literal.string(java), *args])
    return duckdb_functions.null_if_any(args, formatted)


def _printf_of_fmt(text: str) -> str | None:
    """A fmt format of plain ``{}`` placeholders as a printf one (``%s``); None for any other ``{...}``."""
    out, i = [], 0
    while i < len(text):
        pair = text[i : i + 2]
        if pair in ("{{", "}}"):
            out.append(pair[0])
            i += 2
        elif pair == "{}":
            out.append("%s")
            i += 2
        elif text[i] in "{}":
            return None
        else:
            out.append("%%" if text[i] == "%" else text[i])
            i += 1
    return "".join(out)


def _joined(pieces: list[exp.Expr]) -> exp.Expr:
    """The text of ``pieces`` one after the other: one literal when they all are."""
    if all(isinstance(p, exp.Literal) and p.is_string for p in pieces):
        return exp.Literal.string("".join(p.name for p in pieces))
    return pieces[0] if len(pieces) == 1 else exp.Concat(expressions=pieces, safe=True)


def _java_replacement(text: str, shift: int) -> str:
    """DuckDB's replacement text (``\\N`` a group, ``\\\\`` a backslash) in Java's (``$N``, ``\\$``)."""
    out, i, after_group = [], 0, False
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text) and text[i + 1].isdigit():
            out.append(f"${int(text[i + 1]) + shift}")
            i, after_group = i + 2, True
            continue
        if ch == "\\" and i + 1 < len(text):
            out.append("\\" + text[i + 1])
            i += 2
        else:
            out.append("\\" + ch if ch == "$" or (after_group and ch.isdigit()) else ch)
            i += 1
        after_group = False
    return "".join(out)


def _double_division(dividend: exp.Expr, divisor: exp.Expr, *, zero_is_null: bool = False) -> exp.Expr:
    """DuckDB's ``/``: a DOUBLE, and by zero (where Spark fails the run) Infinity, -Infinity or NaN as the
    dividend's sign says (NULL for ``//`` of a DECIMAL or DOUBLE, as DuckDB gives)."""
    if not (isinstance(divisor, exp.Cast) and divisor.to.this == exp.DataType.Type.DOUBLE):
        divisor = exp.cast(divisor.copy(), "DOUBLE")
    if divisor.this.is_number and divisor.this.to_py() != 0:
        return exp.Div(this=dividend.copy(), expression=divisor)
    if zero_is_null:
        return exp.Div(this=dividend.copy(), expression=exp.Nullif(this=divisor, expression=exp.Literal.number(0)))
    infinite = exp.Mul(
        this=exp.cast(dividend.copy(), "DOUBLE"), expression=exp.cast(exp.Literal.string("Infinity"), "DOUBLE")
    )
    by_zero = exp.EQ(this=divisor.copy(), expression=exp.Literal.number(0))
    return exp.If(this=by_zero, true=infinite, false=exp.Div(this=dividend.copy(), expression=divisor))


def _integer_division(node: exp.IntDiv) -> exp.Expr:
    for operand in (node.this, node.expression):
        kind = shown_type(operand)
        if kind is not None and kind.this in _NOT_INTEGER:
            return _double_division(node.this, node.expression, zero_is_null=True)
    if node.expression.is_number and node.expression.to_py() != 0:
        return node
    zero_is_null = exp.Nullif(this=node.expression.copy(), expression=exp.Literal.number(0))
    return exp.IntDiv(this=node.this.copy(), expression=zero_is_null)


def _duckdb_part(node: exp.DateDiff) -> str | None:
    """The Spark name of a DuckDB ``DATE_DIFF``'s part (``'d'``, ``'hr'``, ``'mons'`` ...), set on ``node``."""
    unit = node.args["unit"]
    part = duckdb_time.PARTS.get(unit.name.lower()) if isinstance(unit, (exp.Var, exp.Literal)) else None
    if part is not None:
        node.set("unit", exp.var(part))
    return part


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
    elif isinstance(node, exp.Anonymous) and node.name.lower() in _PART_FUNCTIONS and len(node.expressions) == 1:
        part, value = node.name.lower(), node.expressions[0]  # MILLISECOND(x), DECADE(x) ...: DATE_PART of it
    else:
        return None
    if part == "epoch":
        return _epoch_seconds(value)
    if part in DUCKDB_DOW:
        return _sunday_zero(value)
    if part in DUCKDB_ISODOW:
        return _monday_one(value)
    template = _PART_OF.get(part)
    return None if template is None else _spark_template(template, value)


# DuckDB's date parts (each with its other spellings) Spark names otherwise or counts differently: whole seconds
# (Spark's EXTRACT keeps the fraction), milliseconds and microseconds counting the seconds too, ISO years and
# weeks, decades, centuries. Spark's own names of the other parts mean what DuckDB's do.
_DATE_PART_SQL = {
    "SECOND(__v)": "second seconds s sec secs",
    "CAST(FLOOR(EXTRACT(SECOND FROM __v) * 1000) AS BIGINT)": "millisecond milliseconds ms msec msecs msecond mseconds",
    "CAST(EXTRACT(SECOND FROM __v) * 1000000 AS BIGINT)": "microsecond microseconds us usec usecs usecond useconds",
    "DAYOFMONTH(__v)": "dayofmonth",
    "DAYOFYEAR(__v)": "dayofyear",
    "WEEKOFYEAR(__v)": "weekofyear",
    "QUARTER(__v)": "quarters",
    "EXTRACT(YEAROFWEEK FROM __v)": "isoyear",
    "EXTRACT(YEAROFWEEK FROM __v) * 100 + WEEKOFYEAR(__v)": "yearweek",
    "YEAR(__v) DIV 10": "decade decades dec decs",
    "(YEAR(__v) - 1) DIV 100 + 1": "century centuries c cent cents",
    "(YEAR(__v) - 1) DIV 1000 + 1": "millennium millennia mil mils millenium",
}
_PART_OF = {alias: sql for sql, aliases in _DATE_PART_SQL.items() for alias in aliases.split()}
# DuckDB's functions named after a part Spark has no function of (``DECADE(x)`` is ``DATE_PART('decade', x)``).
_PART_FUNCTIONS = {"millisecond", "microsecond", "decade", "century", "millennium", "isoyear"}


def _spark_template(sql: str, value: exp.Expr) -> exp.Expr:
    """Spark SQL ``sql`` with each ``__v`` the expression ``value``."""
    parsed = exp.paren(sqlglot.parse_one(sql, read="spark"))
    for placeholder in list(parsed.find_all(exp.Column)):
        if placeholder.name == "__v":
            placeholder.replace(value.copy())
    return parsed


def _sunday_zero(value: exp.Expr) -> exp.Expr:
    return exp.paren(exp.Sub(this=exp.DayOfWeek(this=value.copy()), expression=exp.Literal.number(1)))


def _monday_one(value: exp.Expr) -> exp.Expr:
    return exp.paren(
        exp.Add(this=exp.Anonymous(this="WEEKDAY", expressions=[value.copy()]), expression=exp.Literal.number(1))
    )
