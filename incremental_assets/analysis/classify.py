"""The execution class of a model: run any window at once, in chunks, one interval at a time, or not at all.

- ``FullyBatchSafe``: every time-series source has a derived bound and no rule fired; a run over any
  number of intervals gives the same rows as one interval at a time, so a backfill is one query.
- ``BoundedSafe(n)``: a filter is anchored on the other end of the window (``ts < @start_dt +
  INTERVAL 7 DAY``), so a run is correct for at most n intervals.
- ``PerPartitionOnly``: one interval per run, in order: the model reads its own earlier output, an
  override admitted a construct that sees one run's rows at a time (LIMIT, ROW_NUMBER, ...), or a
  filter covers less than the run window (``ds = @start_ds``).
- ``Refused``: a rule fired without its override, or a source's bound cannot be derived.

>>> import sqlglot
>>> from datetime import timedelta
>>> q = sqlglot.parse_one(
...     "SELECT CAST(ts AS DATE) AS ds, COUNT(*) AS n FROM raw.events "
...     "WHERE ts BETWEEN @start_dt AND @end_dt GROUP BY 1", read="spark")
>>> a = analyze_query(q, model_name="m.daily", time_column="ds", time_columns={"raw.events": "ts"},
...                   interval=timedelta(days=1))
>>> a.safety_class, dict(a.bounds)
('FullyBatchSafe', {'raw.events': SourceBound(before=datetime.timedelta(0), after=datetime.timedelta(0))})
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta

from sqlglot import exp

from incremental_assets.analysis.lineage import Lineage
from incremental_assets.analysis.lookback import derive_bounds
from incremental_assets.analysis.result import Analysis, Reason, SourceBound
from incremental_assets.analysis.safety import OVERRIDES, check_safety

KNOWN_OVERRIDES = frozenset(OVERRIDES.values())


def analyze_query(
    query: exp.Expr,
    *,
    model_name: str,
    time_column: str,
    time_columns: Mapping[str, str | None],
    interval: timedelta,
    overrides: frozenset[str] = frozenset(),
    declared_lookback: int | None = None,
    dialect: str = "spark",
    event_time_columns: Mapping[str, tuple[str, str]] | None = None,
) -> Analysis:
    """Classify an incremental-by-time model's query and derive the read bound of each source.

    ``query`` is parsed with ``read=dialect`` before macro rendering; ``time_columns`` gives, per
    referenced table name, its time column or None; ``interval`` is the model's interval length
    (nominal 7/31/92/366 days for week/month/quarter/year). ``event_time_columns`` gives, per table
    with one, its event-time column and the unit its time column truncates it to: the table's bound is
    then derived in event time. The query is not modified.
    """
    unknown = set(overrides) - KNOWN_OVERRIDES
    if unknown:
        raise ValueError(f"unknown safety override(s) {sorted(unknown)}; known: {sorted(KNOWN_OVERRIDES)}")
    lineage = Lineage(
        query,
        model_name=model_name,
        time_column=time_column,
        time_columns=time_columns,
        interval=interval,
        dialect=dialect,
        event_time_columns=event_time_columns,
    )
    safety = check_safety(lineage, overrides=overrides)
    bounds, lookback = derive_bounds(lineage, declared_lookback=declared_lookback)

    refusals = _ordered(safety.refusals + lookback.refusals)
    if refusals:
        return Analysis("Refused", None, refusals, bounds)
    limits = [n for n in (safety.batch_limit, lookback.batch_limit) if n is not None]
    notes = _ordered(safety.notes + lookback.notes)
    if not limits:
        return Analysis("FullyBatchSafe", None, notes, bounds)
    limit = min(limits)
    return Analysis("PerPartitionOnly" if limit == 1 else "BoundedSafe", limit, notes, bounds)


def _ordered(reasons: tuple[Reason, ...]) -> tuple[Reason, ...]:
    unique = dict.fromkeys(reasons)
    return tuple(sorted(unique, key=lambda r: (r.line if r.line is not None else 0, r.rule)))


def strictest(analyses: list[Analysis]) -> Analysis:
    """One analysis for several variants of a query (a macro condition on the run window chooses among
    them per run): refused if any variant is, else the smallest run-size limit, each source's widest bound.

    >>> from datetime import timedelta as td
    >>> from incremental_assets.analysis.result import SourceBound as B
    >>> a = Analysis("FullyBatchSafe", None, (), {"s": B(td(0), td(0))})
    >>> b = Analysis("BoundedSafe", 7, (), {"s": B(td(days=1), td(0))})
    >>> c = strictest([a, b]); c.safety_class, c.batch_limit, c.bounds["s"].before
    ('BoundedSafe', 7, datetime.timedelta(days=1))
    """
    if len(analyses) == 1:
        return analyses[0]
    bounds: dict[str, SourceBound | None] = {}
    for analysis in analyses:
        for name, bound in analysis.bounds.items():
            seen = bounds.get(name)
            if name not in bounds:
                bounds[name] = bound
            elif bound is None or seen is None:
                bounds[name] = None
            else:
                bounds[name] = SourceBound(max(seen.before, bound.before), max(seen.after, bound.after))
    reasons = _ordered(tuple(r for a in analyses for r in a.reasons))
    if any(a.refused for a in analyses):
        return Analysis("Refused", None, _ordered(tuple(r for a in analyses if a.refused for r in a.reasons)), bounds)
    limits = [a.batch_limit for a in analyses if a.batch_limit is not None]
    if not limits:
        return Analysis("FullyBatchSafe", None, reasons, bounds)
    limit = min(limits)
    return Analysis("PerPartitionOnly" if limit == 1 else "BoundedSafe", limit, reasons, bounds)


def one_interval_per_run(analysis: Analysis, reason: Reason) -> Analysis:
    """``analysis`` limited to one interval per run, with ``reason`` noted (a refusal stays a refusal)."""
    if analysis.refused:
        return analysis
    return Analysis("PerPartitionOnly", 1, _ordered(analysis.reasons + (reason,)), analysis.bounds)
