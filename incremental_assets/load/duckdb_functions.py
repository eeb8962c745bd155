"""DuckDB's scalar functions that Spark has under another name, or computes from functions of its own, as the
Spark expressions giving DuckDB's values (sqlglot carries them over by name, and Spark does not know them).

* Text: ``PREFIX`` / ``SUFFIX`` (Spark's ``STARTSWITH`` / ``ENDSWITH``), ``STRLEN`` (bytes, Spark's
  ``OCTET_LENGTH``), ``LENGTH_GRAPHEME`` (the characters a reader sees: an accent written as a combining
  mark is part of its letter), ``ORD`` (the first character's code point; -1 for no text).
* Numbers: ``EVEN`` (rounded away from zero to an even number, a DOUBLE), ``ROUND_EVEN`` (half to even,
  a DOUBLE: Spark's ``BROUND``), ``ISFINITE`` and ``ISINF``, ``LOG(x)`` (to base 10; Spark's is the natural one).
* ``x % y``: NULL where ``y`` is 0 (Spark's fails the run).
* ``CONCAT`` of numbers, decimals or dates (each written as text: sqlglot's ``COALESCE(x, '')`` fails the run
  for a number) and ``s GLOB 'pattern'`` (a match of the whole text).
* Lists: ``LIST_REVERSE`` / ``ARRAY_REVERSE``; ``LIST_EXTRACT`` / ``LIST_ELEMENT`` / ``ARRAY_EXTRACT`` (from 1,
  negative from the end, NULL out of range or at 0, where Spark fails the run), and ``l[i]`` alike (of a text
  the i-th character); ``x[a:b]`` of a list or a text whose type is shown or declared (as ``LIST_SLICE``);
  ``LIST_POSITION`` and its other names (NULL when absent: Spark's ``ARRAY_POSITION`` gives 0); ``LIST_COUNT``
  (elements not NULL),
  ``LIST_UNIQUE`` (distinct elements not NULL), ``LIST_SLICE`` / ``ARRAY_SLICE`` (from 1, both ends kept,
  negative from the end), ``LIST_HAS_ANY`` (NULL elements match nothing), ``LIST_STRING_AGG``,
  ``LIST_APPLY`` / ``ARRAY_APPLY`` / ``ARRAY_TRANSFORM``.
* ``LEFT`` / ``RIGHT`` of a negative count (all but the last, first, characters), ``TRY_STRPTIME``,
  ``REGEXP_SPLIT_TO_ARRAY``, ``COUNT(DISTINCT x) OVER (...)`` (Spark refuses it: the size of the window's set),
  ``ROW_NUMBER()``, ``RANK()``, ``LAG`` ... over a window without an order (Spark refuses it: ordered by NULL).
* Aggregates: ``QUANTILE`` / ``QUANTILE_DISC`` (discrete), ``SKEWNESS`` / ``KURTOSIS`` (sample statistics),
  ``PRODUCT`` (not inside ``FILTER`` or ``OVER``), ``FSUM`` / ``KAHAN_SUM`` and ``FAVG`` (as DOUBLE).
* Intervals of an expression: ``INTERVAL (n) DAY``, ``TO_DAYS(n)``, ``TO_HOURS(n)`` ... (Spark's INTERVAL takes
  constants only), and ``INTERVAL (3) DAY`` of a constant written as Spark reads it.
* Times: ``NANOSECOND`` (of the minute, seconds included, as DuckDB counts it), ``EPOCH_US`` / ``EPOCH_NS``,
  ``EPOCH_MS`` of a time, and
  ``DATE_SUB(part, a, b)`` (the whole parts elapsed from ``a`` to ``b``: Spark's ``TIMESTAMPDIFF``);
  ``MILLISECOND(x)``, ``DECADE(x)`` and the other parts are :mod:`~incremental_assets.load.spark_semantics`'
  ``DATE_PART`` of them.

A call with another number of arguments than DuckDB's is left as written; Spark then names it.
"""

from __future__ import annotations

import functools
import re

import sqlglot
from sqlglot import exp

from incremental_assets.load.duckdb_time import PARTS
from incremental_assets.load.duckdb_types import INTEGER_TYPES, is_list, shown_type

__all__ = [
    "concat",
    "contains",
    "discrete_quantile",
    "duckdb_function",
    "element",
    "epoch_ms",
    "filled",
    "glob",
    "infinite",
    "interval_of",
    "joined",
    "left_right",
    "list_aggregate",
    "list_position",
    "log10",
    "not_a_number",
    "null_if_any",
    "overlap",
    "remainder",
    "reversed_list",
    "sample_moment",
    "to_days",
    "window_function",
]

_ONE = exp.Literal.number(1)
_OPERATIONS = (exp.Binary, exp.Unary, exp.Predicate)
_POSITION = "NULLIF(ARRAY_POSITION(__0, __1), 0)"
_APPLY = "TRANSFORM(__0, __1)"
_ELEMENT = "TRY_ELEMENT_AT(__0, NULLIF(__1, 0))"
_SECONDS = "EXTRACT(SECOND FROM CAST(__0 AS TIMESTAMP))"
_FINITE = "CAST(__0 AS DOUBLE) NOT IN (CAST('Infinity' AS DOUBLE), CAST('-Infinity' AS DOUBLE), CAST('NaN' AS DOUBLE))"
_UNIQUE = "SIZE(ARRAY_DISTINCT(FILTER(__0, __iam_e -> __iam_e IS NOT NULL)))"
_N = "COUNT(__0)"
_KEPT = "FILTER(COLLECT_LIST(CAST(__0 AS DOUBLE)), __iam_e -> __iam_e IS NOT NULL)"
_PRODUCT = f"CASE WHEN {_N} > 0 THEN AGGREGATE({_KEPT}, 1D, (__iam_a, __iam_e) -> __iam_a * __iam_e) END"
_SKEWNESS = f"CASE WHEN {_N} > 2 THEN SKEWNESS(__0) * SQRT({_N} * ({_N} - 1)) / ({_N} - 2) END"
_KURTOSIS = f"CASE WHEN {_N} > 3 THEN (({_N} + 1) * KURTOSIS(__0) + 6) * ({_N} - 1) / (({_N} - 2) * ({_N} - 3)) END"
# NULL elements are no match (Spark's ARRAYS_OVERLAP is NULL when only they could be); a NULL list is NULL.
_OVERLAP = "CASE WHEN __0 IS NULL OR __1 IS NULL THEN NULL ELSE COALESCE(ARRAYS_OVERLAP(__0, __1), FALSE) END"
_FROM = "GREATEST(CASE WHEN __1 < 0 THEN SIZE(__0) + __1 + 1 ELSE __1 END, 1)"
_UPTO = "LEAST(CASE WHEN __2 < 0 THEN SIZE(__0) + __2 + 1 ELSE __2 END, SIZE(__0))"
_SLICE = f"IF(__1 IS NULL OR __2 IS NULL, NULL, SLICE(__0, {_FROM}, GREATEST({_UPTO} - {_FROM} + 1, 0)))"
# A text indexed or sliced as the list of its characters (DuckDB: '' out of range or at 0).
_TEXT_SLICE = "ARRAY_JOIN(" + _SLICE.replace("__0", "SPLIT(__0, '')") + ", '')"
_CHARACTER = "IF(__1 = 0, '', SUBSTRING(__0, __1, 1))"
_TEXT_TYPES = {exp.DataType.Type.TEXT, exp.DataType.Type.VARCHAR, exp.DataType.Type.CHAR}
# DuckDB's list_contains: false where Spark's is NULL for a list holding NULLs; NULL for a NULL list or value.
_CONTAINS = "CASE WHEN __0 IS NULL OR __1 IS NULL THEN NULL ELSE COALESCE(ARRAY_CONTAINS(__0, __1), FALSE) END"
_VALUES = "FILTER(__0, __iam_e -> __iam_e IS NOT NULL)"
# DuckDB's array_to_string: NULL for a list of NULLs only (Spark's gives ''); '' for an empty list.
_JOINED = f"CASE WHEN SIZE(__0) > 0 AND SIZE({_VALUES}) = 0 THEN NULL ELSE ARRAY_JOIN(__0, __1) END"
# DuckDB's list_sum / list_avg / list_product of a list's values: NULL for a list without any.
_FOLDED = f"CASE WHEN SIZE({_VALUES}) > 0 THEN AGGREGATE({_VALUES}, __zero, (__iam_a, __iam_e) -> __step) END"
_AS_DOUBLE = ("0D", "__iam_a + CAST(__iam_e AS DOUBLE)")

# DuckDB's name -> (its numbers of arguments, the Spark SQL with __N its N-th argument).
_TEMPLATES: dict[str, tuple[tuple[int, ...], str]] = {
    "PREFIX": ((2,), "STARTSWITH(__0, __1)"),
    "SUFFIX": ((2,), "ENDSWITH(__0, __1)"),
    "STRLEN": ((1,), "OCTET_LENGTH(__0)"),
    "LENGTH_GRAPHEME": ((1,), r"CHAR_LENGTH(REGEXP_REPLACE(__0, '\\X', '.'))"),
    "ORD": ((1,), "CASE WHEN __0 = '' THEN -1 ELSE ASCII(__0) END"),
    "EVEN": ((1,), "CAST(SIGN(__0) * CEIL(ABS(__0) / 2) * 2 AS DOUBLE)"),
    "ROUND_EVEN": ((2,), "CAST(BROUND(__0, __1) AS DOUBLE)"),
    "ISFINITE": ((1,), _FINITE),
    "LIST_REVERSE": ((1,), "REVERSE(__0)"),
    "LIST_EXTRACT": ((2,), _ELEMENT),
    "LIST_ELEMENT": ((2,), _ELEMENT),
    "ARRAY_EXTRACT": ((2,), _ELEMENT),
    "LIST_POSITION": ((2,), _POSITION),
    "LIST_INDEXOF": ((2,), _POSITION),
    "ARRAY_INDEXOF": ((2,), _POSITION),
    "LIST_UNIQUE": ((1,), _UNIQUE),
    "ARRAY_UNIQUE": ((1,), _UNIQUE),
    "ARRAY_HAS": ((2,), _CONTAINS),
    "LIST_SLICE": ((3,), _SLICE),
    "ARRAY_SLICE": ((3,), _SLICE),
    "ARRAY_HAS_ANY": ((2,), _OVERLAP),
    "LIST_HAS_ANY": ((2,), _OVERLAP),
    "LIST_APPLY": ((2,), _APPLY),
    "ARRAY_APPLY": ((2,), _APPLY),
    "ARRAY_TRANSFORM": ((2,), _APPLY),
    "NANOSECOND": ((1,), f"CAST({_SECONDS} * 1000000 AS BIGINT) * 1000"),
    "REGEXP_SPLIT_TO_ARRAY": ((2,), "SPLIT(__0, __1)"),
    "FSUM": ((1,), "SUM(CAST(__0 AS DOUBLE))"),
    "SUMKAHAN": ((1,), "SUM(CAST(__0 AS DOUBLE))"),
    "KAHAN_SUM": ((1,), "SUM(CAST(__0 AS DOUBLE))"),
    "FAVG": ((1,), "AVG(CAST(__0 AS DOUBLE))"),
    "TO_YEARS": ((1,), "MAKE_YM_INTERVAL(__0)"),
    "TO_MONTHS": ((1,), "MAKE_YM_INTERVAL(0, __0)"),
    "TO_WEEKS": ((1,), "MAKE_DT_INTERVAL(__0 * 7)"),
    "TO_HOURS": ((1,), "MAKE_DT_INTERVAL(0, __0)"),
    "TO_MINUTES": ((1,), "MAKE_DT_INTERVAL(0, 0, __0)"),
    "TO_SECONDS": ((1,), "MAKE_DT_INTERVAL(0, 0, 0, __0)"),
    "EPOCH_US": ((1,), "UNIX_MICROS(CAST(__0 AS TIMESTAMP))"),
    "EPOCH_NS": ((1,), "UNIX_MICROS(CAST(__0 AS TIMESTAMP)) * 1000"),
}


def duckdb_function(node: exp.Expr) -> exp.Expr | None:
    """The Spark expression of a DuckDB function call above (None: not one)."""
    if not isinstance(node, exp.Anonymous):
        return None
    name, args = node.name.upper(), node.expressions
    if name in ("DATE_SUB", "DATESUB") and len(args) == 3:
        return _whole_parts(args)
    if name == "TRY_STRPTIME" and len(args) == 2 and args[1].is_string:
        parsing = exp.StrToTime(this=exp.column("__0"), format=args[1].copy()).sql("spark")
        return filled("TRY_" + parsing, args)
    if name == "PRODUCT" and len(args) == 1 and not isinstance(node.parent, (exp.Filter, exp.Window)):
        return filled(_PRODUCT, args)
    if name == "PRINTF" and len(args) > 1:  # NULL when an argument is (Spark's writes 'null')
        return null_if_any(args, node.copy())
    if name in _LIST_AGGREGATES and len(args) == 1:
        return list_aggregate(args[0], _LIST_AGGREGATES[name])
    if name in ("LIST_AGGREGATE", "ARRAY_AGGREGATE", "LIST_AGGR", "AGGREGATE") and len(args) == 2:
        return list_aggregate(args[0], args[1].name.lower()) if args[1].is_string else None
    known = _TEMPLATES.get(name)
    if known is None or len(args) not in known[0]:
        return None
    return filled(known[1], args)


# DuckDB's list aggregates of one argument, by the aggregate they apply.
_LIST_AGGREGATES = {
    "LIST_COUNT": "count",
    "LIST_MIN": "min",
    "LIST_MAX": "max",
    "LIST_STRING_AGG": "string_agg",
    "LIST_SUM": "sum",
    "ARRAY_SUM": "sum",
    "LIST_AVG": "avg",
    "ARRAY_AVG": "avg",
    "LIST_PRODUCT": "product",
    "ARRAY_PRODUCT": "product",
}


def list_aggregate(values: exp.Expr, aggregate: str) -> exp.Expr | None:
    """DuckDB's ``LIST_AGGREGATE(l, 'sum')`` and its short forms (``LIST_SUM(l)``): the aggregate of the list's
    values, NULL for a list without any. A sum keeps integers (as BIGINT) and a DECIMAL's scale where the list's
    type shows them, else it is a DOUBLE; an average and a product are DOUBLEs, as in DuckDB. None: an
    aggregate not translated here."""
    if aggregate in ("min", "max"):
        return filled(f"ARRAY_{aggregate.upper()}(__0)", [values])
    if aggregate == "count":
        return filled(f"SIZE({_VALUES})", [values])
    if aggregate == "string_agg":
        return filled(_JOINED.replace("__1", "','"), [values])
    if aggregate not in ("sum", "avg", "product"):
        return None
    zero, step = _AS_DOUBLE
    kind = shown_type(values)
    element = kind.expressions[0] if kind is not None and kind.this == exp.DataType.Type.ARRAY else None
    if aggregate == "product":
        zero, step = "1D", "__iam_a * CAST(__iam_e AS DOUBLE)"
    elif aggregate == "sum" and element is not None and element.this in INTEGER_TYPES:
        zero, step = "0L", "__iam_a + __iam_e"
    elif aggregate == "sum" and element is not None and element.this == exp.DataType.Type.DECIMAL:
        scale = element.expressions[1].name if len(element.expressions) == 2 else "3"
        zero, step = f"CAST(0 AS DECIMAL(38, {scale}))", f"CAST(__iam_a + __iam_e AS DECIMAL(38, {scale}))"
    folded = filled(_FOLDED.replace("__zero", zero).replace("__step", step), [values])
    counted = _VALUES.replace("__0", "__1")
    return filled(f"__0 / SIZE({counted})", [folded, values]) if aggregate == "avg" else folded


def null_if_any(args: list[exp.Expr], value: exp.Expr) -> exp.Expr:
    """``value``, or NULL where any of ``args`` is NULL (DuckDB's formatting functions)."""
    if not args:
        return value
    nulls = [exp.Is(this=a.copy(), expression=exp.Null()) for a in args]
    return exp.If(this=exp.or_(*nulls), true=exp.Null(), false=value)


def contains(node: exp.ArrayContains) -> exp.Expr:
    """DuckDB's ``LIST_CONTAINS(l, x)`` (``ARRAY_HAS``): false where ``x`` is absent, NULLs in ``l`` or not."""
    return filled(_CONTAINS, [node.this, node.expression])


def joined(node: exp.ArrayToString) -> exp.Expr:
    """DuckDB's ``ARRAY_TO_STRING(l, sep)``: NULL for a list of NULLs only, where Spark's gives ''."""
    return filled(_JOINED, [node.this, node.expression]) if node.args.get("null") is None else node


def not_a_number(node: exp.IsNan) -> exp.Expr:
    """DuckDB's ``ISNAN(x)``: NULL of NULL, where Spark's is false."""
    return filled("IF(__0 IS NULL, NULL, ISNAN(__0))", [node.this])


def reversed_list(node: exp.Expr) -> exp.Expr:
    """DuckDB's ``ARRAY_REVERSE(l)``, which sqlglot writes as a function Spark lacks: Spark's ``REVERSE``."""
    return exp.Anonymous(this="REVERSE", expressions=[node.this.copy()])


def list_position(node: exp.Expr) -> exp.Expr:
    """DuckDB's ``ARRAY_POSITION(l, x)``: NULL when ``x`` is absent (Spark's gives 0)."""
    return filled(_POSITION, [node.this, node.expression])


def element(node: exp.Bracket) -> exp.Expr:
    """DuckDB's ``l[i]`` of a list (from 1, negative from the end, NULL out of range) or ``m[k]`` of a map, as
    ``TRY_ELEMENT_AT`` (Spark's ``l[i]`` counts from 0 and fails the run out of range); of a text its i-th
    character. A slice ``x[a:b]`` (from 1, both ends kept, negative from the end) of a list or a text whose
    type is shown; a field named by text stays."""
    index = node.expressions[0] if len(node.expressions) == 1 else None
    if index is None or index.is_string:
        return node
    container = shown_type(node.this)
    text = container is not None and container.this in _TEXT_TYPES
    if isinstance(index, exp.Slice):
        if not text and not is_list(node.this):
            return node
        start, end = index.this or _ONE, index.expression or exp.Neg(this=_ONE)
        return filled(_TEXT_SLICE if text else _SLICE, [node.this, start, end])
    if _counted_from_zero(node.this, index):
        index = exp.Literal.number(index.to_py() + 1) if index.is_int else exp.Add(this=index, expression=_ONE)
    return filled(_CHARACTER if text else _ELEMENT, [node.this, index])


def _counted_from_zero(container: exp.Expr, index: exp.Expr) -> bool:
    """Whether sqlglot moved ``index`` to count from 0 when it parsed ``container[index]``: it does when it sees
    the index is an integer and the container a list or of unknown type (the columns' types unknown to it)."""
    seen = shown_type(container, columns=False)
    if seen is not None and seen.this != exp.DataType.Type.ARRAY:
        return False
    kind = shown_type(index, columns=False)
    return kind is not None and kind.this in exp.DataType.INTEGER_TYPES


def epoch_ms(node: exp.UnixToTime) -> exp.Expr:
    """DuckDB's ``EPOCH_MS(x)``: of a number the timestamp so many milliseconds after 1970 (sqlglot's reading), of
    a timestamp or a date whose type is shown or declared its milliseconds since 1970."""
    kind = shown_type(node.this)
    if kind is None or kind.this not in exp.DataType.TEMPORAL_TYPES or node.args.get("scale") is None:
        return node
    return filled("UNIX_MILLIS(CAST(__0 AS TIMESTAMP))", [node.this])


def remainder(node: exp.Mod) -> exp.Expr:
    """DuckDB's ``x % y`` is NULL where ``y`` is 0 (Spark's fails the run)."""
    divisor = node.expression.unnest()
    if divisor.is_number and divisor.to_py() != 0:
        return node
    return exp.Mod(
        this=node.this.copy(), expression=exp.Nullif(this=node.expression.copy(), expression=exp.Literal.number(0))
    )


def log10(node: exp.Log) -> exp.Expr:
    """DuckDB's ``LOG(x)`` is the logarithm to base 10 (Spark's, with one argument, the natural one)."""
    if node.expression is not None:
        return node
    return exp.Log(this=exp.Literal.number(10), expression=node.this.copy())


def concat(node: exp.Concat) -> exp.Expr:
    """DuckDB's ``CONCAT(...)``, which writes each argument as text and skips NULLs: sqlglot writes Spark's
    ``COALESCE(arg, '')`` of each, which fails the run for a number; each argument is cast to text first."""
    if not node.args.get("coalesce"):
        return node
    args = [a if a.is_string else exp.cast(a.copy(), "STRING") for a in node.expressions]
    return exp.Concat(expressions=args, safe=node.args.get("safe"), coalesce=True)


def glob(node: exp.Glob) -> exp.Expr:
    """DuckDB's ``s GLOB 'pattern'`` (``*`` any text, ``?`` one character, ``[...]`` / ``[!...]`` a class, the
    whole text matched) as a regular expression; a pattern that is not a constant text stays."""
    if not node.expression.is_string:
        return node
    pattern, out, i = node.expression.name, ["^(?s:"], 0
    while i < len(pattern):
        char = pattern[i]
        close = pattern.find("]", i + 2) if char == "[" else -1
        if close > 0:
            inner = pattern[i + 1 : close]
            members = "^" + inner[1:] if inner.startswith("!") else inner
            out.append("[" + members.replace("\\", "\\\\").replace("[", "\\[") + "]")
            i = close + 1
            continue
        out.append({"*": ".*", "?": "."}.get(char) or re.escape(char))
        i += 1
    return exp.RegexpLike(this=node.this.copy(), expression=exp.Literal.string("".join(out) + ")$"))


def overlap(node: exp.Expr) -> exp.Expr:
    """DuckDB's ``LIST_HAS_ANY(a, b)`` (sqlglot's ``a && b``, which Spark does not know)."""
    return filled(_OVERLAP, [node.this, node.expression])


_INTERVAL_OF = {
    "YEAR": "MAKE_YM_INTERVAL(__0)",
    "QUARTER": "MAKE_YM_INTERVAL(0, __0 * 3)",
    "MONTH": "MAKE_YM_INTERVAL(0, __0)",
    "WEEK": "MAKE_DT_INTERVAL(__0 * 7)",
    "DAY": "MAKE_DT_INTERVAL(__0)",
    "HOUR": "MAKE_DT_INTERVAL(0, __0)",
    "MINUTE": "MAKE_DT_INTERVAL(0, 0, __0)",
    "SECOND": "MAKE_DT_INTERVAL(0, 0, 0, __0)",
}


def interval_of(node: exp.Interval) -> exp.Expr:
    """DuckDB's ``INTERVAL (n) DAY`` of an expression (Spark's INTERVAL takes constants only): Spark's
    ``MAKE_DT_INTERVAL`` / ``MAKE_YM_INTERVAL`` of it. A constant interval stays, as the analysis reads it."""
    amount, unit = node.this, node.args.get("unit")
    if isinstance(node.parent, exp.DateBin):
        return node  # TIME_BUCKET's width and offset: its own translation reads them
    while isinstance(amount, exp.Paren):
        amount = amount.this
    if amount is None or isinstance(amount, exp.Literal):
        if isinstance(node.this, exp.Paren) and amount is not None:  # INTERVAL (3) DAY: Spark reads '3' only
            return exp.Interval(this=exp.Literal.string(amount.name), unit=unit)
        return node
    if isinstance(amount, exp.Neg) and amount.this.is_number:
        return exp.Interval(this=exp.Literal.string("-" + amount.this.name), unit=unit)
    part = PARTS.get(unit.name.lower()) if isinstance(unit, exp.Var) else None
    template = _INTERVAL_OF.get(part or "")
    return node if template is None else filled(template, [amount])


def left_right(node: exp.Left | exp.Right) -> exp.Expr:
    """DuckDB's ``LEFT(s, -n)`` / ``RIGHT(s, -n)``: all but the last (first) ``n`` characters (Spark's give no
    text); a count that is a constant not below zero stays as written."""
    count = node.expression
    if count.is_int and count.to_py() >= 0:
        return node
    if isinstance(node, exp.Left):
        sql = "CASE WHEN __1 < 0 THEN SUBSTRING(__0, 1, GREATEST(CHAR_LENGTH(__0) + __1, 0)) ELSE LEFT(__0, __1) END"
    else:
        sql = "CASE WHEN __1 < 0 THEN SUBSTRING(__0, 1 - __1) ELSE RIGHT(__0, __1) END"
    return filled(sql, [node.this, count])


# Window functions Spark computes only over an ordered window.
_ORDERED = tuple(
    getattr(exp, name)
    for name in "RowNumber Rank DenseRank PercentRank CumeDist Ntile Lag Lead NthValue".split()
    if hasattr(exp, name)
)


def window_function(node: exp.Window) -> exp.Expr:
    """DuckDB's window functions over a window Spark refuses: ``ROW_NUMBER()``, ``RANK()``, ``LAG`` ... ``OVER
    ()`` without an order (every row a peer: ordered by NULL), and ``COUNT(DISTINCT x) OVER (...)`` (the size of
    ``COLLECT_SET(x)`` over the same window; NULLs are not counted by either)."""
    if isinstance(node.this, _ORDERED) and node.args.get("order") is None:
        ordered = node.copy()
        ordered.set("order", exp.Order(expressions=[exp.Ordered(this=exp.Null())]))
        return ordered
    count = node.this
    distinct = count.this if isinstance(count, exp.Count) else None
    if not isinstance(distinct, exp.Distinct) or len(distinct.expressions) != 1:
        return node
    window = node.copy()
    window.set("this", exp.Anonymous(this="COLLECT_SET", expressions=[distinct.expressions[0].copy()]))
    return exp.Anonymous(this="SIZE", expressions=[window])


def to_days(node: exp.Expr) -> exp.Expr:
    """DuckDB's ``TO_DAYS(n)``, an interval of ``n`` days (sqlglot keeps the name, which Spark lacks)."""
    return filled("MAKE_DT_INTERVAL(__0)", [node.this])


def discrete_quantile(node: exp.Expr) -> exp.Expr:
    """DuckDB's ``QUANTILE_DISC(x, q)`` and ``QUANTILE(x, q)``: the ``ceil(q * n)``-th value in order, as Spark's
    ``PERCENTILE_DISC(q) WITHIN GROUP (ORDER BY x)`` gives it (sqlglot writes the interpolating ``PERCENTILE``
    for ``QUANTILE`` and a call Spark refuses for ``QUANTILE_DISC``); a list of fractions stays."""
    fraction = node.args.get("quantile") or node.args.get("expression")
    if fraction is None or not fraction.is_number:
        return node
    order = exp.Order(expressions=[exp.Ordered(this=node.this.copy())])
    return exp.WithinGroup(this=exp.Anonymous(this="PERCENTILE_DISC", expressions=[fraction.copy()]), expression=order)


def sample_moment(node: exp.Skewness | exp.Kurtosis) -> exp.Expr:
    """DuckDB's ``SKEWNESS`` and ``KURTOSIS`` are the sample statistics (bias-corrected; NULL under 3 and 4
    values), Spark's the population ones; inside ``FILTER`` or ``OVER`` they stay as written."""
    if isinstance(node.parent, (exp.Filter, exp.Window)):
        return node
    return filled(_SKEWNESS if isinstance(node, exp.Skewness) else _KURTOSIS, [node.this])


def infinite(node: exp.Expr) -> exp.Expr:
    """DuckDB's ``ISINF(x)``, which sqlglot writes as a function Spark lacks."""
    return filled("ABS(CAST(__0 AS DOUBLE)) = CAST('Infinity' AS DOUBLE)", [node.this])


def _whole_parts(args: list[exp.Expr]) -> exp.Expr | None:
    part = PARTS.get(args[0].name.lower()) if isinstance(args[0], exp.Literal) else None
    if part is None or part in ("DECADE", "CENTURY", "MILLENNIUM", "ISOYEAR"):
        return None
    return exp.TimestampDiff(
        this=exp.cast(args[2].copy(), "TIMESTAMP"), expression=exp.cast(args[1].copy(), "TIMESTAMP"), unit=exp.var(part)
    )


@functools.cache
def _parsed(sql: str) -> exp.Expr:
    parsed = sqlglot.parse_one(sql, read="spark")  # a call stays one, so FILTER (...) or OVER (...) may follow it
    return parsed if isinstance(parsed, exp.Func) else exp.paren(parsed)


def filled(sql: str, args: list[exp.Expr]) -> exp.Expr:
    """The Spark SQL ``sql`` with each ``__N`` the N-th of ``args`` (a copy; an operation in parentheses)."""
    out = _parsed(sql).copy()
    for placeholder in list(out.find_all(exp.Column)):
        index = placeholder.name[2:]
        if placeholder.name.startswith("__") and index.isdigit():
            arg = args[int(index)].copy()  # an operation keeps its precedence inside the template's
            placeholder.replace(exp.paren(arg) if isinstance(arg, _OPERATIONS) else arg)
    return out
