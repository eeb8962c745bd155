"""The public API: result types, durations, overrides, and what analyze_query promises about its input."""

from __future__ import annotations

import dataclasses
import pickle
import re
from datetime import timedelta

import pytest
from analysis_sql import parse_model_sql
from hypothesis import given
from hypothesis import strategies as st

from incremental_assets.analysis import Analysis, Reason, SourceBound, analyze_query, describe_bound, iso_duration

SOURCES = {"raw.events": "ts", "dim.users": None}


def _analyze(sql: str, **kwargs) -> Analysis:
    options = {"model_name": "m.model", "time_column": "ts", "time_columns": SOURCES, "interval": timedelta(hours=1)}
    return analyze_query(parse_model_sql(sql), **{**options, **kwargs})


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (timedelta(0), "PT0S"),
        (timedelta(minutes=30), "PT30M"),
        (timedelta(days=1), "P1D"),
        (timedelta(days=7), "P7D"),
        (timedelta(hours=36), "PT36H"),
        (timedelta(hours=1, minutes=30, seconds=5), "PT1H30M5S"),
        (timedelta(milliseconds=1500), "PT1.5S"),
    ],
)
def test_iso_durations(value, text):
    assert iso_duration(value) == text


_ISO = re.compile(r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:([\d.]+)S)?)?")


@given(st.integers(min_value=0, max_value=400 * 24 * 3600))
def test_iso_durations_read_back_to_the_same_length(seconds):
    text = iso_duration(timedelta(seconds=seconds))
    days, hours, minutes, secs = _ISO.fullmatch(text).groups()
    total = timedelta(days=int(days or 0), hours=int(hours or 0), minutes=int(minutes or 0), seconds=float(secs or 0))
    assert total == timedelta(seconds=seconds)
    assert text in ("PT0S",) or not text.endswith(("T", "P"))


def test_describe_bound():
    assert describe_bound(SourceBound(timedelta(minutes=30), timedelta(days=1))) == {"before": "PT30M", "after": "P1D"}


def test_results_are_frozen():
    analysis = _analyze("SELECT ts FROM raw.events WHERE ts BETWEEN @start_dt AND @end_dt")
    with pytest.raises(dataclasses.FrozenInstanceError):
        analysis.safety_class = "Refused"  # type: ignore[misc]
    with pytest.raises(TypeError):
        analysis.bounds["raw.events"] = None  # type: ignore[index]
    assert analysis == _analyze("SELECT ts FROM raw.events WHERE ts BETWEEN @start_dt AND @end_dt")
    assert not analysis.refused and analysis.batch_limit is None
    assert pickle.loads(pickle.dumps(analysis)) == analysis  # Dagster may ship it to another process


def test_analysis_does_not_modify_the_query():
    query = parse_model_sql("WITH c AS (SELECT * FROM raw.events) SELECT c.ts FROM c JOIN c AS d ON d.ts = c.ts")
    before = query.copy()
    analyze_query(query, model_name="m", time_column="ts", time_columns=SOURCES, interval=timedelta(hours=1))
    assert query == before


def test_unknown_override_is_an_error():
    with pytest.raises(ValueError, match="allow_windows"):
        _analyze("SELECT ts FROM raw.events", overrides=frozenset({"allow_windows"}))


def test_refusals_are_ordered_by_line_and_name_the_construct():
    analysis = _analyze("SELECT ts,\n  RAND() AS r\nFROM raw.events\nWHERE ts BETWEEN @start_dt AND @end_dt\nLIMIT 5")
    assert analysis.refused
    assert [(r.rule, r.line) for r in analysis.reasons] == [("nondeterministic", 2), ("limit", 5)]
    assert "RAND()" in analysis.reasons[0].message and "allow_nondeterministic" in analysis.reasons[0].message
    assert all(isinstance(r, Reason) for r in analysis.reasons)


def test_lookback_refusal_names_the_source():
    analysis = _analyze(
        "SELECT e.ts FROM raw.events AS e JOIN raw.clicks AS c ON c.id = e.id WHERE e.ts BETWEEN @start_dt AND @end_dt",
        time_columns={**SOURCES, "raw.clicks": "clicked_at"},
    )
    assert [r.rule for r in analysis.reasons] == ["lookback_underivable"]
    assert "raw.clicks" in analysis.reasons[0].message and "clicked_at" in analysis.reasons[0].message


def test_bounds_union_over_references_of_the_same_table():
    analysis = _analyze(
        "SELECT a.ts FROM raw.events AS a "
        "JOIN raw.events AS b ON b.ts BETWEEN a.ts - INTERVAL 2 HOURS AND a.ts "
        "JOIN raw.events AS c ON c.ts BETWEEN a.ts AND a.ts + INTERVAL 15 MINUTES "
        "WHERE a.ts BETWEEN @start_dt AND @end_dt"
    )
    assert dict(analysis.bounds) == {"raw.events": SourceBound(timedelta(hours=2), timedelta(minutes=15))}


def test_declared_lookback_is_counted_in_intervals():
    sql = "SELECT ts, LAG(ts) OVER (PARTITION BY id ORDER BY ts) AS prev FROM raw.events"
    daily = _analyze(sql, declared_lookback=3, interval=timedelta(days=1))
    monthly = _analyze(sql, declared_lookback=1, interval=timedelta(days=31))
    assert daily.bounds["raw.events"] == SourceBound(timedelta(days=3), timedelta(0))
    assert monthly.bounds["raw.events"] == SourceBound(timedelta(days=31), timedelta(0))
    assert _analyze(sql).refused


@pytest.mark.parametrize(
    ("condition", "before"),
    [
        ("ts >= DATE_ADD(@start_dt, INTERVAL -7 DAY)", timedelta(days=7)),
        ("ts >= CAST(@start_ds AS DATE) - INTERVAL 7 DAY", timedelta(days=7)),
        ("ts >= @start_dt - INTERVAL '2 hours'", timedelta(hours=2)),
        ("ts >= DATE_ADD(@start_dt, INTERVAL '-1 day -30 minutes')", timedelta(days=1, minutes=30)),
        ("CAST(ts AS DATE) >= CAST(@start_ds AS DATE) - INTERVAL 1 MONTH", timedelta(days=31)),
    ],
)
def test_a_duckdb_model_s_lookback_is_read_from_its_query_as_the_loader_leaves_it(condition, before):
    """DuckDB's date arithmetic, which the loader rewrites to keep DuckDB's types on Spark, still reads as a
    shift of the window's start: the source is read that far back."""
    from incremental_assets.load.query import parse_model_body

    query = parse_model_body(
        f"SELECT ts, user_id FROM raw.events WHERE {condition} AND ts < @end_dt", dialect="duckdb"
    ).query
    analysis = analyze_query(
        query,
        model_name="m.model",
        time_column="ts",
        time_columns=SOURCES,
        interval=timedelta(days=1),
        dialect="duckdb",
    )
    assert analysis.bounds["raw.events"] is not None
    assert analysis.bounds["raw.events"].before >= before, analysis
