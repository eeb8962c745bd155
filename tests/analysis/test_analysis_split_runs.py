"""Admitted models give the same table whether a window runs at once or cut into runs.

Each run is what the framework executes: the model's query with every source pushed down to its
derived bound, the window macros filled in, and the output clamped to the run window. Queries run on
sqlglot's Python executor over generated rows, so no Spark is needed. For models with a lookback the
derived bound is shown sufficient (property over generated data) and necessary (a zero bound breaks
a concrete example). Models the analysis refuses or limits really do differ when cut.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta

import pytest
from analysis_sql import parse_model_sql
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlglot import exp
from sqlglot.executor import execute

from incremental_assets.analysis import SourceBound, analyze_query, pushdown, timestamp_literal

T0 = datetime(2024, 1, 1)
HOUR = timedelta(hours=1)
HOURS = 4
TIME_COLUMNS = {"raw.events": "ts"}
SCHEMA = {"raw": {"events": {"ts": "TIMESTAMP", "id": "INT", "x": "INT"}}}

ADMITTED = {
    "window_filter": (
        "SELECT ts, id, x FROM raw.events WHERE ts BETWEEN @start_dt AND @end_dt",
        (ZERO := timedelta(0), ZERO),
    ),
    "anchored_aggregate": ("SELECT ts, COUNT(*) AS n, SUM(x) AS total FROM raw.events GROUP BY ts", (ZERO, ZERO)),
    "cross_column_before": (
        "SELECT a.ts, a.id, COUNT(b.x) AS n FROM raw.events AS a "
        "JOIN raw.events AS b ON b.id = a.id AND b.ts BETWEEN a.ts - INTERVAL '30' MINUTE AND a.ts "
        "WHERE a.ts BETWEEN @start_dt AND @end_dt GROUP BY a.ts, a.id",
        (timedelta(minutes=30), ZERO),
    ),
    "cross_column_after": (
        "SELECT a.ts, a.id, b.x AS later_x FROM raw.events AS a "
        "LEFT JOIN raw.events AS b ON b.id = a.id AND b.ts > a.ts AND b.ts <= a.ts + INTERVAL '45' MINUTE "
        "WHERE a.ts >= @start_dt AND a.ts <= @end_dt",
        (ZERO, timedelta(minutes=45)),
    ),
    "window_filter_lookback": (
        "SELECT a.ts, a.id, COUNT(b.x) AS n FROM raw.events AS a "
        "JOIN raw.events AS b ON b.id = a.id AND b.ts >= a.ts - INTERVAL '2' HOUR AND b.ts <= a.ts "
        "WHERE a.ts BETWEEN @start_dt AND @end_dt AND b.ts BETWEEN @start_dt - INTERVAL '2' HOUR AND @end_dt "
        "GROUP BY a.ts, a.id",
        (timedelta(hours=2), ZERO),
    ),
    # DISTINCT and HAVING on groups keyed by the time column: admitted without an override.
    "count_distinct_per_time": ("SELECT ts, COUNT(DISTINCT id) AS ids FROM raw.events GROUP BY ts", (ZERO, ZERO)),
    "select_distinct_with_time": (
        "SELECT DISTINCT ts, id FROM raw.events WHERE ts BETWEEN @start_dt AND @end_dt",
        (ZERO, ZERO),
    ),
    "having_per_time": (
        "SELECT ts, id, SUM(x) AS total FROM raw.events WHERE ts BETWEEN @start_dt AND @end_dt "
        "GROUP BY ts, id HAVING COUNT(*) > 1",
        (ZERO, ZERO),
    ),
    # A read wider than the window: the earlier groups it adds are partial, and dropped by the clamp.
    "count_distinct_with_lookback": (
        "SELECT ts, COUNT(DISTINCT id) AS ids, COUNT(DISTINCT x) AS xs FROM raw.events "
        "WHERE ts BETWEEN @start_dt - INTERVAL '30' MINUTE AND @end_dt GROUP BY ts HAVING COUNT(*) >= 1",
        (timedelta(minutes=30), ZERO),
    ),
}

# Rows that a run needs from before (or after) its window, around the cut at 01:00.
NEEDS_LOOKBACK = {
    "cross_column_before": [(50, 1, 1), (70, 1, 2)],
    "cross_column_after": [(50, 1, 1), (80, 1, 2)],
    "window_filter_lookback": [(10, 1, 1), (70, 1, 2)],
}


def _render(query: exp.Expression, start: datetime, end: datetime) -> exp.Expression:
    values = {"start_dt": start, "end_dt": end - timedelta(microseconds=1)}

    def fill(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Parameter):
            return timestamp_literal("", values[node.name])
        return node

    return query.transform(fill)


def _run(query: exp.Expression, bounds, rows, start: datetime, end: datetime) -> Counter:
    pushed = pushdown(query, bounds=bounds, time_columns=TIME_COLUMNS, run_start=start, run_end=end)
    model = exp.Subquery(this=_render(pushed, start, end), alias=exp.TableAlias(this=exp.to_identifier("w")))
    clamped = (
        exp.select("*")
        .from_(model)
        .where(
            exp.and_(
                exp.GTE(this=exp.column("ts", "w"), expression=timestamp_literal("", start)),
                exp.LT(this=exp.column("ts", "w"), expression=timestamp_literal("", end)),
            )
        )
    )
    return Counter(execute(clamped, tables={"raw": {"events": rows}}, schema=SCHEMA).rows)


def _runs(query, bounds, rows, cuts) -> Counter:
    edges = [0, *sorted(cuts), HOURS]
    total: Counter = Counter()
    for a, b in zip(edges, edges[1:]):
        total += _run(query, bounds, rows, T0 + a * HOUR, T0 + b * HOUR)
    return total


def _rows(events) -> list[dict]:
    return [{"ts": T0 + timedelta(minutes=m), "id": i, "x": x} for m, i, x in events]


def _analyze(sql: str):
    query = parse_model_sql(sql)
    return query, analyze_query(query, model_name="m", time_column="ts", time_columns=TIME_COLUMNS, interval=HOUR)


events = st.lists(st.tuples(st.integers(-150, HOURS * 60 + 150), st.integers(1, 2), st.integers(1, 5)), max_size=12)
cuts = st.sets(st.integers(1, HOURS - 1))


@pytest.mark.parametrize("name", sorted(ADMITTED))
def test_admitted_models_are_batch_safe_with_the_expected_bound(name):
    sql, (before, after) = ADMITTED[name]
    _, analysis = _analyze(sql)
    assert analysis.safety_class == "FullyBatchSafe", analysis.reasons
    assert analysis.bounds == {"raw.events": SourceBound(before, after)}


@pytest.mark.parametrize("name", sorted(ADMITTED))
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(events=events, cuts=cuts)
def test_any_split_gives_the_table_of_one_full_run(name, events, cuts):
    query, analysis = _analyze(ADMITTED[name][0])
    rows = _rows(events)
    assert _runs(query, analysis.bounds, rows, cuts) == _runs(query, analysis.bounds, rows, set())


@pytest.mark.parametrize("name", sorted(NEEDS_LOOKBACK))
def test_the_derived_lookback_is_necessary(name):
    query, analysis = _analyze(ADMITTED[name][0])
    rows = _rows(NEEDS_LOOKBACK[name])
    no_lookback = {"raw.events": SourceBound(ZERO, ZERO)}
    assert _runs(query, analysis.bounds, rows, {1}) == _runs(query, analysis.bounds, rows, set())
    assert _runs(query, no_lookback, rows, {1}) != _runs(query, no_lookback, rows, set())


def test_a_refused_truncated_lookback_really_differs_when_cut():
    sql = (
        "SELECT a.ts, a.id, COUNT(b.x) AS n FROM raw.events AS a "
        "JOIN raw.events AS b ON b.id = a.id AND b.ts BETWEEN a.ts - INTERVAL '30' MINUTE AND a.ts "
        "WHERE a.ts BETWEEN @start_dt AND @end_dt AND b.ts BETWEEN @start_dt AND @end_dt GROUP BY a.ts, a.id"
    )
    query, analysis = _analyze(sql)
    assert [r.rule for r in analysis.reasons] == ["lookback_truncated"]
    rows = _rows([(50, 1, 1), (70, 1, 2)])
    assert _runs(query, analysis.bounds, rows, {1}) != _runs(query, analysis.bounds, rows, set())


def test_a_start_anchored_filter_is_limited_to_what_it_covers():
    sql = "SELECT ts, id, x FROM raw.events WHERE ts >= @start_dt AND ts < @start_dt + INTERVAL '2' HOUR"
    query, analysis = _analyze(sql)
    assert (analysis.safety_class, analysis.batch_limit) == ("BoundedSafe", 2)
    rows = _rows([(m, 1, 1) for m in range(0, HOURS * 60, 20)])
    one_at_a_time = _runs(query, analysis.bounds, rows, set(range(1, HOURS)))
    assert _runs(query, analysis.bounds, rows, {2, 4}) == one_at_a_time  # runs of 2 intervals
    assert _runs(query, analysis.bounds, rows, {3}) != one_at_a_time  # runs of 3 intervals lose rows


def test_a_refused_count_distinct_without_the_time_column_really_differs_when_cut():
    sql = (
        "SELECT e.ts, e.id, c.ids FROM raw.events AS e CROSS JOIN "
        "(SELECT COUNT(DISTINCT id) AS ids FROM raw.events WHERE ts BETWEEN @start_dt AND @end_dt) AS c "
        "WHERE e.ts BETWEEN @start_dt AND @end_dt"
    )
    query, analysis = _analyze(sql)
    assert sorted(r.rule for r in analysis.reasons) == ["aggregate", "distinct"]
    assert "physical_properties (allow_distinct = true)" in next(
        r.message for r in analysis.reasons if r.rule == "distinct"
    )
    rows = _rows([(10, 1, 1), (70, 2, 1)])
    assert _runs(query, analysis.bounds, rows, {1}) != _runs(query, analysis.bounds, rows, set())
