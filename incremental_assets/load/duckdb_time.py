"""DuckDB's date and time functions whose Spark namesake (or sqlglot's Spark rendering) gives other values,
rewritten to the Spark expressions giving DuckDB's; what has no such expression is refused at load.

* ``TIME_BUCKET(width, ts[, offset | origin])``: Spark has no such function. Buckets of a fixed length
  (microseconds to weeks) are counted from Monday 2000-01-03 00:00 or from the origin given, buckets of
  months from January 2000 or from the origin's month; an offset moves every bucket's start by itself. The
  bucket of a value the query shows as a DATE is a DATE, as in DuckDB; of a timestamp, a timestamp.
* ``STRFTIME(ts, format)``: each DuckDB specifier becomes Spark's pattern letter or, where Spark has none
  (``%W``, ``%U``, ``%u``, ``%w``, ``%V``, ``%G``, ``%-y``), an expression; literal text is quoted for Spark.
  A specifier DuckDB rejects (``%e``, ``%C`` ...) is refused here too.
* ``DATE_TRUNC(part, x)``: DuckDB's names of parts (``d``, ``hr``, ``mon``, plurals ...) become Spark's, and
  ``decade``, ``century``, ``millennium`` and ``isoyear`` expressions of their own. Of a DATE it is a TIMESTAMP
  at midnight, as in DuckDB (sqlglot's Spark ``TRUNC`` keeps a DATE and knows no ``day``).
* ``YEARWEEK(x)``: the ISO year times 100 plus the ISO week.
"""

from __future__ import annotations

import re
from decimal import Decimal
from functools import lru_cache

import sqlglot
from sqlglot import exp
from sqlglot.errors import UnsupportedError

from incremental_assets.load.duckdb_types import shown_type


class NoSparkEquivalent(UnsupportedError):
    """A construct of the query's dialect that no Spark expression computes the same: ``node`` is where it is."""

    def __init__(self, node: exp.Expr, message: str, hint: str):
        super().__init__(message)
        self.node = node
        self.hint = hint


# DuckDB's names of date parts, each with its other spellings.
_PART_NAMES = {
    "MICROSECOND": "microseconds us usec usecs usecond useconds",
    "MILLISECOND": "milliseconds ms msec msecs msecond mseconds",
    "SECOND": "seconds s sec secs epoch",
    "MINUTE": "minutes m min mins",
    "HOUR": "hours h hr hrs",
    "DAY": "days d dayofmonth dow isodow doy dayofweek dayofyear",
    "WEEK": "weeks w weekofyear",
    "MONTH": "months mon mons",
    "QUARTER": "quarters",
    "YEAR": "years y yr yrs",
    "DECADE": "decades dec decs",
    "CENTURY": "centuries c cent cents",
    "MILLENNIUM": "millennia mil mils millenium",
    "ISOYEAR": "",
}
PARTS = {alias: part for part, aliases in _PART_NAMES.items() for alias in (part.lower(), *aliases.split())}

# Lengths of the parts an interval can be written in: microseconds for fixed ones, months for the others.
_MICROS = {"MICROSECOND": 1, "MILLISECOND": 1000, "SECOND": 10**6, "MINUTE": 60 * 10**6, "HOUR": 3600 * 10**6}
_MICROS.update({"DAY": 86400 * 10**6, "WEEK": 7 * 86400 * 10**6})
_MONTHS = {"MONTH": 1, "QUARTER": 3, "YEAR": 12, "DECADE": 120, "CENTURY": 1200, "MILLENNIUM": 12000}
_AMOUNT = re.compile(r"\s*([+-]?\d+(?:\.\d+)?)\s*([a-z]+)", re.IGNORECASE)


def interval_length(node: exp.Expr) -> tuple[int, int] | None:
    """(months, microseconds) of a constant ``INTERVAL``; None for anything else.

    >>> interval_length(sqlglot.parse_one("INTERVAL '1 day 2 hours'", read="duckdb"))
    (0, 93600000000)
    >>> interval_length(sqlglot.parse_one("INTERVAL 3 MONTH", read="duckdb"))
    (3, 0)
    """
    if not isinstance(node, exp.Interval) or not isinstance(node.this, exp.Literal):
        return None
    unit = node.args.get("unit")
    if unit is not None and not isinstance(unit, (exp.Var, exp.Identifier, exp.Literal)):
        return None
    text = f"{node.this.name} {unit.name}" if unit is not None else node.this.name
    if not re.fullmatch(f"(?:{_AMOUNT.pattern})+\\s*", text, re.IGNORECASE):
        return None
    months = micros = 0
    for amount, name in _AMOUNT.findall(text):
        part = PARTS.get(name.lower())
        if part in _MICROS:
            micros += int(Decimal(amount) * _MICROS[part])
        elif part in _MONTHS and Decimal(amount) == int(Decimal(amount)):
            months += int(Decimal(amount)) * _MONTHS[part]
        else:
            return None
    return months, micros


def _call(name: str, *args: exp.Expr | str) -> exp.Expr:
    """A Spark function call; a ``str`` argument is a unit keyword (``MICROSECOND``)."""
    return exp.Anonymous(this=name, expressions=[exp.var(a) if isinstance(a, str) else a for a in args])


def _number(value: int) -> exp.Expr:
    return exp.Literal.number(value) if value >= 0 else exp.Neg(this=exp.Literal.number(-value))


def _ntz(text: str) -> exp.Expr:
    return exp.cast(exp.Literal.string(text), exp.DataType(this=exp.DataType.Type.TIMESTAMPNTZ))


def _is_date(node: exp.Expr, *, columns: bool = True) -> bool:
    kind = shown_type(node, columns=columns)
    return kind is not None and kind.this in (exp.DataType.Type.DATE, exp.DataType.Type.DATE32)


def _shifted(value: exp.Expr, length: tuple[int, int], sign: int) -> exp.Expr:
    """``value`` moved by ``length`` (months, microseconds) times ``sign``, as sqlglot's TIMESTAMPADD node, which
    the analysis reads as a shift of its argument (``DATE_ADD(@start_dt, INTERVAL -7 DAY)``: a 7-day lookback)."""
    months, micros = length
    if micros:
        value = exp.TimestampAdd(this=value, expression=_number(sign * micros), unit=exp.var("MICROSECOND"))
    if months:
        value = exp.TimestampAdd(this=value, expression=_number(sign * months), unit=exp.var("MONTH"))
    return value


def date_add(node: exp.DateAdd) -> exp.Expr:
    """DuckDB's ``DATE_ADD(x, INTERVAL ...)``: a TIMESTAMP, of a DATE too (Spark's takes a number of days only)."""
    length = interval_length(node.expression)
    if length is None or length == (0, 0):
        return node
    return _shifted(node.this.copy(), length, 1)


def date_arithmetic(node: exp.Add | exp.Sub) -> exp.Expr:
    """DuckDB's ``+`` / ``-`` of a DATE: a DATE the query shows and an INTERVAL make a TIMESTAMP (Spark keeps a
    DATE), and a DATE less a DATE is a number of days (Spark gives an INTERVAL, which no table can hold).

    A DATE column (its type declared) and an INTERVAL of days or more stay a DATE, as SQLMesh writes them when it
    knows every column's type (it casts the rows to sqlglot's reading, a DATE); with hours, a TIMESTAMP."""
    left, right = node.this, node.expression
    if isinstance(right, exp.Interval) or (isinstance(left, exp.Interval) and isinstance(node, exp.Add)):
        value, interval = (left, right) if isinstance(right, exp.Interval) else (right, left)
        length = interval_length(interval)
        if length is None or length == (0, 0) or not _is_date(value, columns=False):
            return node
        return _shifted(value.copy(), length, -1 if isinstance(node, exp.Sub) else 1)
    if isinstance(node, exp.Add) or any(isinstance(side, (exp.Literal, exp.Binary)) for side in (left, right)):
        return node  # a number is no DATE, and arithmetic is left unannotated
    if _is_date(left) and _is_date(right):
        return _call("DATEDIFF", left.copy(), right.copy())
    return node


def time_bucket(node: exp.Expr) -> exp.Expr:
    """Spark's value of DuckDB's ``TIME_BUCKET(width, value[, offset | origin])`` (sqlglot's DateBin)."""
    width = interval_length(node.this)
    if width is None or (width[0] and width[1]) or min(width) < 0 or max(width) == 0:
        raise NoSparkEquivalent(
            node,
            f"TIME_BUCKET({node.this.sql('duckdb')}, ...) needs a constant positive width, either of months "
            "or of a fixed length",
            hint="write the width as a literal such as INTERVAL '15 minutes', INTERVAL '1 week' or INTERVAL '3 months'",
        )
    value, third = node.expression, node.args.get("unit") or node.args.get("origin")
    offset = interval_length(third) if third is not None else None
    if node.args.get("zone") is not None or isinstance(third, (exp.Var, exp.Literal)):
        raise NoSparkEquivalent(
            node,
            "TIME_BUCKET in a time zone (a text argument after the value) has no Spark translation",
            hint="bucket a timestamp without zone: convert the value to the zone's wall time first",
        )
    if isinstance(third, exp.Interval) and not offset:
        raise NoSparkEquivalent(
            node,
            f"TIME_BUCKET's offset {third.sql('duckdb')} is not a constant interval",
            hint="write the offset as a literal such as INTERVAL '5 minutes'",
        )
    origin = third if third is not None and offset is None else None
    start = _shifted(value.copy(), offset, -1) if offset else value.copy()
    if width[0]:
        bucket = _month_bucket(start, width[0], origin)
    else:
        origin_at = origin.copy() if origin is not None else _ntz("2000-01-03 00:00:00")
        into = _call("PMOD", _call("TIMESTAMPDIFF", "MICROSECOND", origin_at, start), exp.Literal.number(width[1]))
        bucket = _call("TIMESTAMPADD", "MICROSECOND", exp.Neg(this=into), start.copy())
    if offset:
        bucket = _shifted(bucket, offset, 1)
    return exp.cast(bucket, "DATE") if _is_date(value) else bucket


def _month_bucket(value: exp.Expr, months: int, origin: exp.Expr | None) -> exp.Expr:
    """The start of the bucket of ``months`` months holding ``value``, counted from the origin's month."""

    def month_of(node: exp.Expr) -> exp.Expr:
        return exp.cast(
            _call("TRUNC", node, exp.Literal.string("MM")), exp.DataType(this=exp.DataType.Type.TIMESTAMPNTZ)
        )

    first = month_of(origin.copy()) if origin is not None else _ntz("2000-01-01 00:00:00")
    into = _call("PMOD", _call("TIMESTAMPDIFF", "MONTH", first, month_of(value.copy())), exp.Literal.number(months))
    start = _call("TIMESTAMPADD", "MONTH", exp.Neg(this=into), month_of(value.copy()))
    # back from the value by its distance to that start: a timestamp stays of its own type (with or without zone)
    return _call(
        "TIMESTAMPADD", "MICROSECOND", exp.Neg(this=_call("TIMESTAMPDIFF", "MICROSECOND", start, value)), value.copy()
    )


def yearweek(node: exp.Expr) -> exp.Expr | None:
    """DuckDB's ``YEARWEEK(x)``: ISO year * 100 + ISO week, a BIGINT (None: not that call)."""
    if not (isinstance(node, exp.Anonymous) and node.name.upper() == "YEARWEEK" and len(node.expressions) == 1):
        return None
    value = node.expressions[0]
    year = exp.Extract(this=exp.var("YEAROFWEEK"), expression=value.copy())
    week = exp.WeekOfYear(this=value.copy())
    return exp.cast(exp.Add(this=exp.Mul(this=year, expression=exp.Literal.number(100)), expression=week), "BIGINT")


def date_trunc(node: exp.DateTrunc | exp.TimestampTrunc) -> exp.Expr:
    """DuckDB's ``DATE_TRUNC(part, x)``: a TIMESTAMP, with DuckDB's names of parts."""
    unit = node.args.get("unit")
    part = PARTS.get(unit.name.lower()) if isinstance(unit, (exp.Var, exp.Literal, exp.Identifier)) else None
    if part is None or node.args.get("zone") is not None:
        return node
    value = node.this.copy()
    years = {"DECADE": 10, "CENTURY": 100, "MILLENNIUM": 1000}.get(part)
    if years:
        first = exp.Mul(
            this=exp.IntDiv(this=exp.Year(this=value), expression=exp.Literal.number(years)),
            expression=exp.Literal.number(years),
        )
        return exp.TimestampTrunc(
            this=_call("MAKE_DATE", first, exp.Literal.number(1), exp.Literal.number(1)), unit=exp.var("YEAR")
        )
    if part == "ISOYEAR":  # the Monday of ISO week 1
        weeks_back = exp.Sub(this=exp.Literal.number(1), expression=exp.WeekOfYear(this=value))
        return _call("TIMESTAMPADD", "WEEK", weeks_back, exp.TimestampTrunc(this=value.copy(), unit=exp.var("WEEK")))
    return exp.TimestampTrunc(this=value, unit=exp.var(part))


# STRFTIME specifiers that are one Spark pattern (``-`` drops the leading zero) ...
_PATTERNS = {
    "a": "EEE",
    "A": "EEEE",
    "b": "MMM",
    "h": "MMM",
    "B": "MMMM",
    "c": "yyyy-MM-dd HH:mm:ss",
    "d": "dd",
    "-d": "d",
    "f": "SSSSSS",
    "g": "SSS",
    "n": "SSSSSSSSS",
    "H": "HH",
    "-H": "H",
    "I": "hh",
    "-I": "h",
    "j": "DDD",
    "-j": "D",
    "m": "MM",
    "-m": "M",
    "M": "mm",
    "-M": "m",
    "p": "a",
    "S": "ss",
    "-S": "s",
    "x": "yyyy-MM-dd",
    "X": "HH:mm:ss",
    "T": "HH:mm:ss",
    "y": "yy",
    "Y": "yyyy",
    "z": "x",
}
_TEXT = {"%": "%", "Z": ""}  # a TIMESTAMP has no zone name
# ... and those Spark's patterns have no letter for (week-based fields), as Spark SQL of the value ``v``.
_EXPRESSIONS = {
    "u": "CAST(WEEKDAY(v) + 1 AS STRING)",
    "w": "CAST(DAYOFWEEK(v) - 1 AS STRING)",
    "V": "LPAD(CAST(WEEKOFYEAR(v) AS STRING), 2, '0')",
    "G": "LPAD(CAST(EXTRACT(YEAROFWEEK FROM v) AS STRING), 4, '0')",
    "W": "LPAD(CAST((DAYOFYEAR(v) + 6 - WEEKDAY(v)) DIV 7 AS STRING), 2, '0')",  # weeks from the first Monday
    "U": "LPAD(CAST((DAYOFYEAR(v) + 7 - DAYOFWEEK(v)) DIV 7 AS STRING), 2, '0')",  # from the first Sunday
    "-y": "CAST(YEAR(v) % 100 AS STRING)",
}
_SPECIFIER = re.compile(r"%(-?.?)", re.DOTALL)
_PATTERN_TEXT = re.compile(r"[A-Za-z'\[\]{}#]")  # what Spark's patterns read as other than literal text


@lru_cache(maxsize=None)
def _template(sql: str) -> exp.Expr:
    return sqlglot.parse_one(sql, read="spark")


def strftime(node: exp.TimeToStr) -> exp.Expr:
    """DuckDB's ``STRFTIME(value, format)`` as Spark SQL: ``DATE_FORMAT`` with Spark's pattern for the format,
    in pieces joined by ``CONCAT`` around the specifiers Spark's patterns cannot write. Kept as it is when
    sqlglot's own rendering is already that pattern (later analysis reads the format)."""
    value, fmt = node.this, node.args.get("format")
    if value.is_string and fmt is not None and not fmt.is_string:
        value, fmt = fmt, value  # DuckDB takes the format first too
    if fmt is None or not fmt.is_string:
        raise NoSparkEquivalent(
            node,
            f"STRFTIME with the format {fmt.sql('duckdb') if fmt else 'missing'}, not a constant text, "
            "has no Spark translation",
            hint="write the format as a string literal such as '%Y-%m-%d'",
        )
    runs: list[list[tuple[str, str]]] = [[]]  # runs of patterns and texts between the expressions
    expressions: list[exp.Expr] = []
    for kind, item in _format_items(node, fmt.name):
        if kind == "expression":
            expressions.append(_template(_EXPRESSIONS[item]).transform(lambda n: value.copy() if n == _V else n))
            runs.append([])
        else:
            runs[-1].append((kind, item))
    parts: list[exp.Expr] = []
    for run, expression in zip(runs, [*expressions, None]):
        if any(kind == "pattern" for kind, _ in run) or not expressions:
            pattern = "".join(item if kind == "pattern" else _quoted(item) for kind, item in run)
            parts.append(_call("DATE_FORMAT", value.copy(), exp.Literal.string(pattern)))
        elif run:
            parts.append(exp.Literal.string("".join(item for _, item in run)))
        parts += [expression] if expression is not None else []
    if len(parts) == 1 and parts[0].sql("spark") == node.sql("spark"):
        return node
    return parts[0] if len(parts) == 1 else _call("CONCAT", *parts)


_V = exp.column("v")


def _format_items(node: exp.Expr, fmt: str) -> list[tuple[str, str]]:
    """A DuckDB format as ``pattern`` (Spark's), ``expression`` (a key of ``_EXPRESSIONS``) and ``text`` items."""
    items: list[tuple[str, str]] = []
    at = 0
    for spec in _SPECIFIER.finditer(fmt):
        items.append(("text", fmt[at : spec.start()] + _TEXT.get(spec.group(1), "")))
        at = spec.end()
        key = spec.group(1)
        if key in _PATTERNS:
            items.append(("pattern", _PATTERNS[key]))
        elif key in _EXPRESSIONS:
            items.append(("expression", key))
        elif key not in _TEXT:
            raise NoSparkEquivalent(
                node,
                f"STRFTIME specifier %{key} is not one DuckDB knows",
                hint="use DuckDB's specifiers (%Y %m %d %H %M %S %j %W ...)",
            )
    items.append(("text", fmt[at:]))
    merged: list[tuple[str, str]] = []
    for kind, item in items:  # adjacent texts as one: two quoted texts side by side would read as a quote
        if merged and kind == "text" and merged[-1][0] == "text":
            merged[-1] = ("text", merged[-1][1] + item)
        elif kind != "text" or item:
            merged.append((kind, item))
    return merged


def _quoted(text: str) -> str:
    """Literal text in a Spark date pattern: quoted where Spark would read letters or brackets in it."""
    if not _PATTERN_TEXT.search(text):
        return text
    return "'" + text.replace("'", "''") + "'"
