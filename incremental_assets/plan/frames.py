"""LAG and LEAD with a RANGE frame, run the way the analysis reads them.

``LAG(x) OVER (PARTITION BY k ORDER BY ts RANGE BETWEEN INTERVAL '30 minutes' PRECEDING AND CURRENT ROW)``
means, as in smelt's Form A, the previous row *inside the frame*: the row before when it lies at
most 30 minutes earlier, else the default. The safety analysis derives a 30-minute lookback from
it, which is sound only with that meaning. Spark takes no frame on LAG/LEAD (and other engines
ignore it), so the frame becomes a condition on the order key of the row LAG picks:

>>> import sqlglot
>>> q = sqlglot.parse_one("SELECT LAG(v) OVER (PARTITION BY k ORDER BY ts "
...                       "RANGE BETWEEN INTERVAL '30' MINUTE PRECEDING AND CURRENT ROW) AS p FROM t", read="spark")
>>> print(navigation_frames(q).sql("spark"))  # doctest: +NORMALIZE_WHITESPACE
SELECT CASE WHEN LAG(ts, 1) OVER (PARTITION BY k ORDER BY ts) >= ts - INTERVAL '30' MINUTE
THEN LAG(v) OVER (PARTITION BY k ORDER BY ts) END AS p FROM t
"""

from __future__ import annotations

from sqlglot import exp


def navigation_frames(query: exp.Expr) -> exp.Expr:
    """``query`` with every LAG/LEAD over a RANGE frame rewritten to a frameless window plus the frame
    as a condition; the query itself is returned when it has none (it is never modified)."""
    windows = [w for w in query.find_all(exp.Window) if _rewritable(w)]
    if not windows:
        return query
    copy = query.copy()
    for window in [w for w in copy.find_all(exp.Window) if _rewritable(w)]:
        window.replace(_within_frame(window))
    return copy


def _rewritable(window: exp.Window) -> bool:
    spec = window.args.get("spec")
    order = window.args.get("order")
    return (
        isinstance(window.this, (exp.Lag, exp.Lead))
        and spec is not None
        and str(spec.args.get("kind", "")).upper() == "RANGE"
        and order is not None
        and len(order.expressions) == 1
    )


def _within_frame(window: exp.Window) -> exp.Expr:
    function = window.this
    spec = window.args["spec"]
    ordered = window.args["order"].expressions[0]
    key, descending = ordered.this, bool(ordered.args.get("desc"))
    frameless = window.copy()
    frameless.set("spec", None)
    backward = isinstance(function, exp.Lag)
    edge, side = (
        (spec.args.get("start"), spec.args.get("start_side"))
        if backward
        else (spec.args.get("end"), spec.args.get("end_side"))
    )
    if isinstance(edge, str) and edge.upper() == "UNBOUNDED":
        return frameless  # every earlier (later) row is in the frame
    offset = function.args.get("offset") or exp.Literal.number(1)
    picked = frameless.copy()
    picked.set("this", function.__class__(this=key.copy(), offset=offset.copy()))
    if not isinstance(edge, exp.Expression):  # CURRENT ROW: only peers are in the frame
        condition: exp.Expr = exp.EQ(this=picked, expression=key.copy())
    else:
        # The frame's far edge, in the order of the rows: before the key when it precedes in that order.
        earlier = (str(side).upper() == "PRECEDING") != descending
        limit = (
            exp.Sub(this=key.copy(), expression=edge.copy())
            if earlier
            else exp.Add(this=key.copy(), expression=edge.copy())
        )
        at_or_after = backward != descending
        condition = exp.GTE(this=picked, expression=limit) if at_or_after else exp.LTE(this=picked, expression=limit)
    default = function.args.get("default")
    case = exp.Case().when(condition, frameless)
    return case.else_(default.copy()) if default is not None else case
