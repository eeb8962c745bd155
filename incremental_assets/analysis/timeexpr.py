"""Reading time out of single expressions: grains, interval offsets and the window macros.

Nothing here knows about scopes or tables; ``lineage`` builds on it.

A *grain* says how coarse a time value is: ``exact`` (the timestamp itself), ``hour``, ``day``,
``week:monday``, ``month``... A key of grain g groups rows of one g-bucket; it stays inside one model
interval when g *divides* the interval (an hour divides a day, a day does not divide an hour, a month
divides a quarter, an ISO week divides no month).

>>> import sqlglot
>>> grain_function(sqlglot.parse_one("CAST(ts AS DATE)", read="spark"))[0]
'day'
>>> m = read_macro(sqlglot.parse_one("@start_dt - INTERVAL '2' HOUR", read="spark"))
>>> m.edge, m.offset.low
('start', datetime.timedelta(days=-1, seconds=79200))
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta

from sqlglot import exp

from incremental_assets.model.intervals import IntervalUnit

ZERO = timedelta(0)
DAY = timedelta(days=1)

Grain = str
# A model's interval: a named unit ("hour", "day", "week", "week:sunday", "month", ...) or, for
# other fixed lengths, the length itself.
ModelInterval = str | timedelta

_FIXED: dict[str, timedelta] = {
    "exact": ZERO,
    "second": timedelta(seconds=1),
    "minute": timedelta(minutes=1),
    "hour": timedelta(hours=1),
    "day": DAY,
}
# The longest bucket of each calendar unit, as the model's interval units define them.
_CALENDAR_NOMINAL = {
    u.value: u.nominal for u in (IntervalUnit.WEEK, IntervalUnit.MONTH, IntervalUnit.QUARTER, IntervalUnit.YEAR)
}
_CALENDAR_DIVIDES = {"month": {"month", "quarter", "year"}, "quarter": {"quarter", "year"}, "year": {"year"}}

_UNIT_ALIASES = {
    "microsecond": "second",
    "us": "second",
    "millisecond": "second",
    "ms": "second",
    "second": "second",
    "s": "second",
    "ss": "second",
    "sec": "second",
    "minute": "minute",
    "mi": "minute",
    "min": "minute",
    "m": "minute",
    "hour": "hour",
    "h": "hour",
    "hh": "hour",
    "hh24": "hour",
    "day": "day",
    "d": "day",
    "dd": "day",
    "dayofmonth": "day",
    "week": "week",
    "w": "week",
    "wk": "week",
    "weekiso": "week",
    "month": "month",
    "mm": "month",
    "mon": "month",
    "quarter": "quarter",
    "q": "quarter",
    "qtr": "quarter",
    "year": "year",
    "y": "year",
    "yy": "year",
    "yyyy": "year",
}


def interval_unit(interval: timedelta) -> ModelInterval:
    """The unit of a model interval given by its nominal length (7/31/92/366 days for calendar units).

    >>> interval_unit(timedelta(hours=1)), interval_unit(timedelta(days=31)), interval_unit(timedelta(minutes=15))
    ('hour', 'month', datetime.timedelta(seconds=900))
    """
    for name, length in (("hour", _FIXED["hour"]), ("day", DAY), *_CALENDAR_NOMINAL.items()):
        if interval == length:
            return name
    return interval


def nominal(grain: Grain) -> timedelta:
    """The longest bucket of a grain (a month is up to 31 days)."""
    if grain in _FIXED:
        return _FIXED[grain]
    return _CALENDAR_NOMINAL[grain.split(":")[0]]


def divides(grain: Grain, unit: ModelInterval) -> bool:
    """Whether every bucket of ``grain`` lies inside one interval of ``unit``.

    >>> divides("hour", "day"), divides("day", "hour"), divides("week:monday", "month"), divides("month", "year")
    (True, False, False, True)
    """
    if grain == "exact":
        return True
    if unit == "exact":
        return False
    if grain in _FIXED:
        if isinstance(unit, timedelta):
            return unit % _FIXED[grain] == ZERO
        return unit not in _FIXED or _FIXED[unit] % _FIXED[grain] == ZERO
    if grain.startswith("week"):
        # A week bucket fits a weekly interval only when both start on the same, known weekday.
        return ":" in grain and grain == unit
    return isinstance(unit, str) and unit in _CALENDAR_DIVIDES.get(grain, set())


def coarser(a: Grain, b: Grain) -> Grain | None:
    """The coarser of two nested grains (``floor_day(floor_hour(x))`` is a day); None if they cross."""
    if divides(a, b):
        return b
    if divides(b, a):
        return a
    return None


def unit_grain(unit: exp.Expr) -> Grain | None:
    """A truncation unit (``'HOUR'``, ``'MM'``, ``WEEK``, BigQuery's ``WEEK(SUNDAY)``) as a grain."""
    if isinstance(unit, exp.WeekStart):
        return "week:" + unit.name.lower()
    text = unit.name.strip().lower()
    name = _UNIT_ALIASES.get(text) or _UNIT_ALIASES.get(text.rstrip("s"))
    # A plain WEEK is an ISO week (Monday) in Spark, DuckDB, Snowflake and Postgres.
    return "week:monday" if name == "week" else name


# --- spans: offsets whose exact length depends on the calendar -------------------------------


@dataclass(frozen=True)
class Span:
    """An offset known to lie in ``[low, high]`` (``INTERVAL 1 MONTH`` is 28 to 31 days)."""

    low: timedelta
    high: timedelta

    def __add__(self, other: Span) -> Span:
        return Span(self.low + other.low, self.high + other.high)

    def __neg__(self) -> Span:
        return Span(-self.high, -self.low)

    def scale(self, n: float) -> Span:
        a, b = self.low * n, self.high * n
        return Span(min(a, b), max(a, b))


NO_OFFSET = Span(ZERO, ZERO)

_UNIT_SPANS = {
    "second": Span(timedelta(seconds=1), timedelta(seconds=1)),
    "minute": Span(timedelta(minutes=1), timedelta(minutes=1)),
    "hour": Span(timedelta(hours=1), timedelta(hours=1)),
    "day": Span(DAY, DAY),
    "week": Span(timedelta(days=7), timedelta(days=7)),
    "month": Span(timedelta(days=28), timedelta(days=31)),
    "quarter": Span(timedelta(days=89), timedelta(days=92)),
    "year": Span(timedelta(days=365), timedelta(days=366)),
}
_MILLISECOND = Span(timedelta(milliseconds=1), timedelta(milliseconds=1))
_MICROSECOND = Span(timedelta(microseconds=1), timedelta(microseconds=1))


def _unit_span(unit: exp.Expr | str | None) -> Span | None:
    text = unit if unit is None or isinstance(unit, str) else unit.name
    if not text:
        return None
    lowered = text.lower()
    if lowered in ("millisecond", "milliseconds", "ms"):
        return _MILLISECOND
    if lowered in ("microsecond", "microseconds", "us"):
        return _MICROSECOND
    name = _UNIT_ALIASES.get(lowered) or _UNIT_ALIASES.get(lowered.rstrip("s"))
    return _UNIT_SPANS.get(name or "")


def number(node: exp.Expr | None) -> float | None:
    """Fold a constant like ``7``, ``-1``, ``'2'`` or ``7 * -1`` to a number."""
    if node is None:
        return None
    if isinstance(node, exp.Paren):
        return number(node.this)
    if isinstance(node, exp.Literal):
        try:
            return float(node.this)
        except ValueError:
            return None
    if isinstance(node, exp.Neg):
        value = number(node.this)
        return None if value is None else -value
    if isinstance(node, (exp.Mul, exp.Add, exp.Sub)):
        a, b = number(node.this), number(node.expression)
        if a is None or b is None:
            return None
        return a * b if isinstance(node, exp.Mul) else a + b if isinstance(node, exp.Add) else a - b
    return None


_INTERVAL_PART = re.compile(r"(-?\d+(?:\.\d+)?)\s*([a-z]+)", re.IGNORECASE)


def interval_span(node: exp.Expr | None) -> Span | None:
    """``INTERVAL '30' MINUTE``, ``INTERVAL '1 day 2 hours'`` or a sum of them, as a span.

    >>> import sqlglot
    >>> interval_span(sqlglot.parse_one("INTERVAL '36' HOUR", read="spark")).high
    datetime.timedelta(days=1, seconds=43200)
    """
    if isinstance(node, exp.Paren):
        return interval_span(node.this)
    if isinstance(node, exp.Neg):
        inner = interval_span(node.this)
        return None if inner is None else -inner
    if isinstance(node, (exp.Add, exp.Sub)):
        a, b = interval_span(node.this), interval_span(node.expression)
        if a is None or b is None:
            return None
        return a + b if isinstance(node, exp.Add) else a + -b
    if not isinstance(node, exp.Interval):
        return None
    unit = node.args.get("unit")
    if unit is not None and not isinstance(unit, exp.Var):
        return None  # YEAR TO MONTH and friends
    text = node.this.name if isinstance(node.this, exp.Literal) else None
    if text is None:
        amount = number(node.this)
        text = None if amount is None else str(amount)
    if text is None:
        return None
    if unit is not None:
        span = _unit_span(unit)
        return span.scale(float(text)) if span is not None and _is_number(text) else None
    total = NO_OFFSET
    parts = _INTERVAL_PART.findall(text)
    if not parts:
        return None
    for amount, name in parts:
        span = _unit_span(name)
        if span is None:
            return None
        total = total + span.scale(float(amount))
    return total


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


# --- offsets: x + INTERVAL ..., DATE_SUB(x, 7), DATEADD(hour, -2, x) ---------------------------

_ADD_FUNCTIONS = (exp.DateAdd, exp.TsOrDsAdd, exp.TimestampAdd, exp.DatetimeAdd, exp.TimeAdd)
_SUB_FUNCTIONS = (exp.DateSub, exp.TimestampSub, exp.DatetimeSub, exp.TimeSub)


@dataclass(frozen=True)
class Shift:
    """``base`` moved by ``offset``; ``amount`` is a bare number whose unit the base decides."""

    base: exp.Expr
    offset: Span = NO_OFFSET
    amount: float = 0.0


def split_shift(node: exp.Expr) -> Shift:
    """Peel interval arithmetic off an expression.

    >>> import sqlglot
    >>> s = split_shift(sqlglot.parse_one("date_sub(ds, 7)", read="spark"))
    >>> s.base.sql(), s.offset.low.days
    ('ds', -7)
    """
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, (exp.Add, exp.Sub)):
        sign = 1 if isinstance(node, exp.Add) else -1
        pairs = [(node.this, node.expression)]
        if sign == 1:
            pairs.append((node.expression, node.this))  # INTERVAL 1 DAY + x
        for base, delta in pairs:
            span = interval_span(delta)
            amount = number(delta) if span is None else 0.0
            if amount is None:
                continue
            inner = split_shift(base)
            if span is not None:
                return Shift(inner.base, inner.offset + span.scale(sign), inner.amount)
            return Shift(inner.base, inner.offset, inner.amount + sign * amount)
        return Shift(node)
    if isinstance(node, _ADD_FUNCTIONS + _SUB_FUNCTIONS):
        sign = -1 if isinstance(node, _SUB_FUNCTIONS) else 1
        delta = node.expression
        span = interval_span(delta)
        if span is None:
            amount = number(delta)
            unit = node.args.get("unit")
            unit_span = _unit_span(unit) if unit is not None else _UNIT_SPANS["day"]
            if amount is None or unit_span is None:
                return Shift(node)
            span = unit_span.scale(amount)
        inner = split_shift(node.this)
        return Shift(inner.base, inner.offset + span.scale(sign), inner.amount)
    if isinstance(node, exp.AddMonths):
        amount = number(node.expression)
        inner = split_shift(node.this)
        if amount is None:
            return Shift(node)
        return Shift(inner.base, inner.offset + _UNIT_SPANS["month"].scale(amount), inner.amount)
    return Shift(node)


# --- value-preserving conversions and truncations ----------------------------------------------

_DATE_TYPES = {exp.DataType.Type.DATE, exp.DataType.Type.DATE32}
_KEEP_TYPES = {
    exp.DataType.Type.TIMESTAMP,
    exp.DataType.Type.TIMESTAMPTZ,
    exp.DataType.Type.TIMESTAMPLTZ,
    exp.DataType.Type.TIMESTAMPNTZ,
    exp.DataType.Type.DATETIME,
    exp.DataType.Type.DATETIME64,
    exp.DataType.Type.TEXT,
    exp.DataType.Type.VARCHAR,
    exp.DataType.Type.CHAR,
    exp.DataType.Type.NVARCHAR,
}
_TO_DATE = (exp.TsOrDsToDate, exp.Date, exp.StrToDate, exp.DateStrToDate)
_TO_TIME = (exp.TsOrDsToTimestamp, exp.TimeStrToTime, exp.StrToTime, exp.UnixToTime)
_FROM_EPOCH = ("TIMESTAMP_SECONDS", "TIMESTAMP_MILLIS", "TIMESTAMP_MICROS")
_TRUNCATIONS = (exp.DateTrunc, exp.TimestampTrunc, exp.DatetimeTrunc, exp.TimeTrunc)


def grain_function(node: exp.Expr) -> tuple[Grain, exp.Expr] | None:
    """If ``node`` is a truncation or conversion of one argument, its grain and that argument.

    >>> import sqlglot
    >>> g, arg = grain_function(sqlglot.parse_one("DATE_TRUNC('HOUR', order_ts)", read="spark"))
    >>> g, arg.sql()
    ('hour', 'order_ts')
    """
    if isinstance(node, exp.Paren):
        return "exact", node.this
    if isinstance(node, (exp.Cast, exp.TryCast)):
        to = node.to.this if isinstance(node.to, exp.DataType) else None
        if to in _DATE_TYPES:
            return "day", node.this
        if to in _KEEP_TYPES:
            return "exact", node.this
        return None
    if isinstance(node, _TO_DATE):
        return "day", node.this
    if isinstance(node, _TO_TIME):
        return "exact", node.this
    if isinstance(node, exp.Anonymous) and node.name.upper() in _FROM_EPOCH and len(node.expressions) == 1:
        return "exact", node.expressions[0]  # Spark's TIMESTAMP_SECONDS/MILLIS/MICROS(epoch number)
    if isinstance(node, (exp.TimeToStr, exp.UnixToStr)):
        fmt = node.args.get("format")
        grain = _format_grain(fmt.name) if fmt is not None else "second"
        return (grain, node.this) if grain else None
    if isinstance(node, _TRUNCATIONS):
        unit = node.args.get("unit")
        grain = unit_grain(unit) if unit is not None else None
        return (grain, node.this) if grain else None
    return _week_floor(node)


def _format_grain(fmt: str) -> Grain | None:
    # date_format(ts, 'yyyy-MM-dd') keeps the day; a format that drops the day or reorders fields does not.
    return {"%Y-%m-%d": "day", "%Y-%m-%d %H": "hour", "%Y-%m-%d %H:%M": "minute", "%Y-%m-%d %H:%M:%S": "second"}.get(
        fmt.replace("strict", "")
    )


def _week_floor(node: exp.Expr) -> tuple[Grain, exp.Expr] | None:
    """``DATE_SUB(d, DAYOFWEEK(d) - 1)`` (Sunday weeks) and ``DATE_SUB(d, WEEKDAY(d))`` (Monday weeks)."""
    if not isinstance(node, (exp.TsOrDsAdd, exp.DateAdd, exp.DateSub)):
        return None
    unit = node.args.get("unit")
    if unit is not None and unit.name.upper() not in ("DAY", "DAYS"):
        return None
    back = node.expression
    if not isinstance(node, exp.DateSub):
        back = _negated(back)
    while isinstance(back, exp.Paren):
        back = back.this
    start, arg = None, None
    if isinstance(back, exp.Sub) and number(back.expression) == 1:
        weekday = back.this
        if isinstance(weekday, exp.DayOfWeek):
            start = "sunday"
        elif isinstance(weekday, exp.DayOfWeekIso):
            start = "monday"
        arg = weekday.this if start else None
    elif isinstance(back, exp.Anonymous) and back.name.upper() == "WEEKDAY" and back.expressions:
        start, arg = "monday", back.expressions[0]
    if start is None:
        return None
    while isinstance(arg, (exp.TsOrDsToDate, exp.Cast, exp.TryCast, exp.Date)):
        arg = arg.this
    target = node.this
    while isinstance(target, (exp.TsOrDsToDate, exp.Cast, exp.TryCast, exp.Date)):
        target = target.this
    return ("week:" + start, node.this) if arg == target else None


def _negated(node: exp.Expr) -> exp.Expr | None:
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.Neg):
        return node.this
    if isinstance(node, exp.Mul):
        if number(node.expression) == -1:
            return node.this
        if number(node.this) == -1:
            return node.expression
    return None


# --- the SQLMesh window macros ---------------------------------------------------------------

MACRO_KINDS = ("ds", "date", "ts", "dt", "dtntz", "tstz", "epoch", "millis")
_DATE_KINDS = ("ds", "date")


@dataclass(frozen=True)
class MacroRef:
    """A window macro moved by an offset: ``@start_dt - INTERVAL 1 DAY`` is (start, dt, -1 day).

    ``grain`` is ``day`` when the value is a date (``@start_ds``, ``CAST(@start_dt AS DATE)``).
    """

    edge: str
    kind: str
    offset: Span
    grain: Grain


def macro_name(node: exp.Expr) -> tuple[str, str] | None:
    """``(edge, kind)`` of a macro parameter such as ``@start_ds``; edge is start, end or execution."""
    if not isinstance(node, exp.Parameter):
        return None
    name = node.name.lower()
    edge, _, kind = name.partition("_")
    if edge in ("start", "end", "execution", "latest") and kind in MACRO_KINDS:
        return edge, kind
    return None


def read_macro(node: exp.Expr) -> MacroRef | None:
    """A window macro with its offset and conversions peeled off, or None if ``node`` is not one."""
    shift = split_shift(node)
    base = shift.base
    named = macro_name(base)
    if named is not None:
        edge, kind = named
        if edge in ("execution", "latest"):
            return None
        ref = MacroRef(edge, kind, NO_OFFSET, "day" if kind in _DATE_KINDS else "exact")
    else:
        converted = grain_function(base)
        if converted is None or converted[1] is base:
            return None
        inner = read_macro(converted[1])
        if inner is None:
            return None
        grain = coarser(inner.grain, converted[0]) or converted[0]
        ref = MacroRef(inner.edge, inner.kind, inner.offset, grain)
    offset = shift.offset
    if shift.amount:
        unit = {"ds": "day", "date": "day", "epoch": "second"}.get(ref.kind)
        if ref.kind == "millis":
            offset = offset + _MILLISECOND.scale(shift.amount)
        elif unit is None:
            return None  # a bare number added to a timestamp has no unit
        else:
            offset = offset + _UNIT_SPANS[unit].scale(shift.amount)
    return MacroRef(ref.edge, ref.kind, ref.offset + offset, ref.grain)
