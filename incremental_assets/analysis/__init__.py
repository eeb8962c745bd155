"""Static analysis of incremental-by-time model queries: pure sqlglot, no engine.

Passes, each one module with one public function:

- ``safety.check_safety``: constructs unsafe on a slice of the data (window functions, aggregates,
  HAVING, DISTINCT, LIMIT, non-deterministic functions, subqueries), refused unless overridden;
- ``lookback.derive_bounds``: how far before / after the run window each source is read;
- ``classify.analyze_query``: both of the above, and the execution class;
- ``pushdown.pushdown``: the query rewritten so each time-series source reads only its bound.

Reason rules a user may see: refusals ``window_function``, ``aggregate``, ``having``, ``distinct``,
``limit``, ``nondeterministic``, ``subquery`` (each with an ``allow_*`` override, see ``safety``),
``lookback_underivable``, ``lookback_truncated``, ``unknown_source``, ``time_column``,
``recursive_cte``; notes ``self_reference``, ``window_condition`` (a macro condition on the run window),
``window_relative`` (runs limited to what a filter covers), ``declared_lookback``, and any admitted rule.

>>> import sqlglot
>>> from datetime import timedelta
>>> q = sqlglot.parse_one("SELECT ts, id FROM raw.e WHERE ts BETWEEN @start_dt AND @end_dt LIMIT 5", read="spark")
>>> a = analyze_query(q, model_name="m", time_column="ts", time_columns={"raw.e": "ts"}, interval=timedelta(hours=1))
>>> a.safety_class, [r.rule for r in a.reasons]
('Refused', ['limit'])
"""

from incremental_assets.analysis.classify import analyze_query
from incremental_assets.analysis.pushdown import pushdown, timestamp_literal
from incremental_assets.analysis.result import (
    Analysis,
    Reason,
    SafetyClass,
    SourceBound,
    describe_bound,
    iso_duration,
)

__all__ = [
    "Analysis",
    "Reason",
    "SafetyClass",
    "SourceBound",
    "analyze_query",
    "describe_bound",
    "iso_duration",
    "pushdown",
    "timestamp_literal",
]
