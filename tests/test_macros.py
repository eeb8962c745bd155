"""Macro values per interval unit, with SQLMesh's inclusive ends, rendered as typed literals."""

from datetime import datetime, timezone

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


def test_epoch_and_millis_are_typed_as_sqlmesh_renders_them():
    # SQLMesh: *_epoch is whole milliseconds / 1000, a DOUBLE (not 6 decimals); *_millis whole milliseconds
    v = values_sql(TimeWindow(utc(2024, 5, 1), utc(2024, 5, 2)))
    assert v["start_epoch"] == "CAST(1714521600.0 AS DOUBLE)"
    assert v["end_epoch"] == "CAST(1714607999.999 AS DOUBLE)"
    assert v["start_millis"] == "1714521600000"
    assert v["end_millis"] == "1714607999999"
    assert v["execution_ds"] == "'2030-01-01'"
    assert v["execution_epoch"] == "CAST(1893456000.0 AS DOUBLE)"


def test_hour_tstz_dtntz_and_latest_macros_as_sqlmesh_renders_them():
    v = {
        k: x.sql("spark")
        for k, x in macro_values(
            TimeWindow(utc(2024, 5, 1, 6), utc(2024, 5, 1, 7)),
            execution_time=datetime(2024, 5, 3, 1, 2, 3, tzinfo=timezone.utc),
        ).items()
    }
    assert (v["start_hour"], v["end_hour"], v["execution_hour"]) == ("6", "6", "1")
    assert v["start_tstz"] == "'2024-05-01 06:00:00+00:00'"
    assert v["end_tstz"] == "'2024-05-01 06:59:59.999999+00:00'"
    assert v["execution_tstz"] == "'2024-05-03 01:02:03+00:00'"
    assert v["start_dtntz"] == "CAST('2024-05-01 06:00:00' AS TIMESTAMP)"
    assert v["end_dtntz"] == "CAST('2024-05-01 06:59:59.999999' AS TIMESTAMP)"
    assert v["execution_dtntz"] == "CAST('2024-05-03 01:02:03' AS TIMESTAMP)"
    assert v["latest_ds"] == v["execution_ds"] == "'2024-05-03'"


def test_new_date_macros_are_known_to_a_model_and_rendered_per_run(spark):
    q = parse_query(
        "SELECT @start_hour AS sh, @end_hour AS eh, @start_dtntz AS sd, @start_tstz AS st, @end_epoch AS ee, "
        "@start_epoch AS se, @latest_ds AS l"
    )
    row = spark.sql(render_macros(q, TimeWindow(utc(2024, 5, 1), utc(2024, 5, 2))).sql("spark"))
    assert dict(row.dtypes) == {
        "sh": "int",
        "eh": "int",
        "sd": "timestamp",
        "st": "string",
        "ee": "double",
        "se": "double",
        "l": "string",
    }
    r = row.collect()[0]
    assert (r.sh, r.eh, r.st, r.ee, r.se) == (0, 23, "2024-05-01 00:00:00+00:00", 1714607999.999, 1714521600.0)


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
