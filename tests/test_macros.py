"""Macro values per interval unit, with SQLMesh's inclusive ends, rendered as typed literals."""

import pytest
from sqlglot import exp

from incremental_assets.load.macros.render import clamp_to_window, macro_values, render_macros
from incremental_assets.load.query import parse_query
from incremental_assets.model.intervals import TimeWindow, next_boundary, utc


def values_sql(window):
    return {k: v.sql("spark") for k, v in macro_values(window, execution_time=utc(2030, 1, 1)).items()}


@pytest.mark.parametrize(
    "unit, start, start_ds, end_ds, end_dt",
    [
        ("hour", utc(2024, 3, 10, 23), "2024-03-10", "2024-03-10", "2024-03-10 23:59:59.999999"),
        ("day", utc(2024, 2, 29), "2024-02-29", "2024-02-29", "2024-02-29 23:59:59.999999"),
        ("week", utc(2023, 12, 31), "2023-12-31", "2024-01-06", "2024-01-06 23:59:59.999999"),
        ("month", utc(2024, 2, 1), "2024-02-01", "2024-02-29", "2024-02-29 23:59:59.999999"),
        ("quarter", utc(2024, 10, 1), "2024-10-01", "2024-12-31", "2024-12-31 23:59:59.999999"),
        ("year", utc(2024, 1, 1), "2024-01-01", "2024-12-31", "2024-12-31 23:59:59.999999"),
    ],
)
def test_macro_values_per_unit_have_inclusive_ends(unit, start, start_ds, end_ds, end_dt):
    v = values_sql(TimeWindow(start, next_boundary(start, unit)))
    assert v["start_ds"] == f"'{start_ds}'"
    assert v["end_ds"] == f"'{end_ds}'"
    assert v["end_date"] == f"CAST('{end_ds}' AS DATE)"
    assert v["end_dt"] == f"CAST('{end_dt}' AS TIMESTAMP)"
    assert v["end_ts"] == f"'{end_dt}'"


def test_epoch_and_millis():
    v = values_sql(TimeWindow(utc(2024, 1, 1), utc(2024, 1, 2)))
    assert v["start_epoch"] == "1704067200"
    assert v["end_epoch"] == "1704153599.999999"
    assert v["start_millis"] == "1704067200000"
    assert v["end_millis"] == "1704153599999"
    assert v["execution_ds"] == "'2030-01-01'"


def test_rendered_macros_are_typed_literal_nodes_not_text():
    q = parse_query("SELECT * FROM t WHERE d BETWEEN @start_date AND @end_date AND ts >= @start_dt")
    rendered = render_macros(q, TimeWindow(utc(2024, 1, 1), utc(2024, 1, 8)))
    casts = list(rendered.find_all(exp.Cast))
    assert {c.to.this for c in casts} == {exp.DataType.Type.DATE, exp.DataType.Type.TIMESTAMP}
    assert not list(rendered.find_all(exp.Parameter))
    assert q.find(exp.Parameter) is not None, "the model's own AST must stay unrendered"


def test_between_start_and_end_covers_exactly_the_window(spark):
    window = TimeWindow(utc(2024, 1, 1), utc(2024, 1, 3))
    q = parse_query(
        "SELECT COUNT(*) AS n FROM VALUES (TIMESTAMP'2023-12-31 23:59:59.999999'), (TIMESTAMP'2024-01-01 00:00:00'),"
        " (TIMESTAMP'2024-01-02 23:59:59.999999'), (TIMESTAMP'2024-01-03 00:00:00') AS v(ts)"
        " WHERE ts BETWEEN @start_dt AND @end_dt"
    )
    assert spark.sql(render_macros(q, window).sql("spark")).collect()[0].n == 2
    d = parse_query(
        "SELECT COUNT(*) AS n FROM VALUES (DATE'2023-12-31'), (DATE'2024-01-01'), (DATE'2024-01-02'), "
        "(DATE'2024-01-03') AS v(d)"
        " WHERE d BETWEEN @start_ds AND @end_ds"
    )
    assert spark.sql(render_macros(d, window).sql("spark")).collect()[0].n == 2


def test_clamp_uses_the_time_format_for_string_columns():
    q = parse_query("SELECT ds FROM t")
    sql = clamp_to_window(q, "ds", TimeWindow(utc(2024, 1, 1), utc(2024, 1, 2)), time_format="%Y%m%d").sql("spark")
    assert "__window.ds >= '20240101' AND __window.ds < '20240102'" in sql
