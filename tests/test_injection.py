"""Crafted dates, partition keys, formats and test variables cannot inject SQL: each attempt fails with
a clear error before anything runs, or is rendered as one harmless literal; the table stays intact."""

from __future__ import annotations

import re

import dagster as dg
import pytest
import sqlglot
from deltalake import DeltaTable
from sqlglot import exp

from incremental_assets import cli, delta
from incremental_assets.errors import ModelFileError
from incremental_assets.load.project import load_project
from incremental_assets.model.intervals import TimeWindow
from incremental_assets.orchestration.build_definitions import build_definitions
from incremental_assets.orchestration.instance import open_instance
from incremental_assets.plan.run_plan import plan_run
from incremental_assets.spark.model_tests import load_model_tests
from incremental_assets.spark.writes import spark_partition_expression

from helpers import EVENTS_SOURCE, table_rows, utc, write_events

ATTACK = "2024-01-01'; DROP TABLE s.daily; --"
MODEL = """
MODEL (name s.daily, kind INCREMENTAL_BY_TIME_RANGE (time_column h), start '2024-01-01');
SELECT date_trunc('HOUR', ts) AS h, COUNT(*) AS n FROM raw.events WHERE ts BETWEEN @start_dt AND @end_dt GROUP BY 1
"""


def test_crafted_dates_and_partition_keys_are_refused_and_the_table_is_intact(
    spark, make_project, tmp_path, monkeypatch, capsys
):
    root = make_project({"sources.yaml": EVENTS_SOURCE, "models/daily.sql": MODEL})
    write_events(root / "data" / "events", utc(2024, 1, 1), 48)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    assert cli.main(["run", "s.daily", "--start", "2024-01-01", "--end", "2024-01-02", "--project", str(root)]) == 0
    project = load_project(root)
    uri = delta.table_uri(project.settings.warehouse, "s.daily")
    before, version = table_rows(uri), DeltaTable(uri).version()
    capsys.readouterr()

    for args in (
        ["--start", ATTACK, "--end", "2024-01-02"],
        ["--start", "2024-01-01", "--end", "2024-01-02 00:00' OR '1'='1"],
    ):
        assert cli.main(["run", "s.daily", *args, "--project", str(root)]) == 2
        assert "is not a date or timestamp; write it as YYYY-MM-DD" in capsys.readouterr().err
        assert cli.main(["render", "s.daily", *args, "--project", str(root)]) == 2
        assert "is not a date or timestamp" in capsys.readouterr().err

    instance = open_instance(project.settings.dagster_home)
    job = build_definitions(project).resolve_implicit_global_asset_job_def()
    with pytest.raises(dg.DagsterUnknownPartitionError):
        job.execute_in_process(instance=instance, partition_key=ATTACK, raise_on_error=False)
    tags = {"dagster/asset_partition_range_start": ATTACK, "dagster/asset_partition_range_end": "2024-01-01"}
    with pytest.raises((dg.DagsterError, ValueError), match="does not match format|partition"):
        job.execute_in_process(instance=instance, tags=tags, raise_on_error=False)
    assert table_rows(uri) == before and DeltaTable(uri).version() == version


def test_a_crafted_time_format_stays_one_literal(make_project):
    """A format with quotes (from a model header) cannot end its literal in the clamp or the partition key."""
    root = make_project(
        {
            "sources.yaml": EVENTS_SOURCE,
            "models/a.sql": """
            MODEL (name s.a, kind INCREMENTAL_BY_TIME_RANGE (time_column (ds, "%Y-%m-%d' OR '1'='1")),
              start '2024-01-01');
            SELECT CAST(ts AS STRING) AS ds FROM raw.events WHERE ts BETWEEN @start_dt AND @end_dt
        """,
        }
    )
    project = load_project(root)
    model = project.model("s.a")
    sql = plan_run(project, model, TimeWindow(utc(2024, 1, 1), utc(2024, 1, 2))).sql
    outer = sqlglot.parse_one(sql, read="spark")
    clamp = outer.args["where"].this
    assert isinstance(clamp, exp.And) and not list(clamp.find_all(exp.Or))  # still exactly start <= ds < end
    assert {lit.this for lit in clamp.find_all(exp.Literal)} == {"2024-01-01' OR '1'='1", "2024-01-02' OR '1'='1"}
    partition = sqlglot.parse_one(spark_partition_expression(model), read="spark")
    assert not list(partition.find_all(exp.EQ)) and not list(partition.find_all(exp.Or))
    assert any(lit.this.endswith("'1'='1") for lit in partition.find_all(exp.Literal))  # inside the pattern literal


def test_unit_test_variables_must_be_dates(make_project):
    root = make_project(
        {
            "sources.yaml": EVENTS_SOURCE,
            "models/daily.sql": MODEL,
            "tests/test_daily.yaml": f"""
            test_daily:
              model: s.daily
              inputs:
                raw.events: [{{ts: 2024-01-01 01:00:00, k: a, v: 1}}]
              outputs:
                query: [{{n: 1}}]
              vars:
                start: "{ATTACK}"
        """,
        }
    )
    (test,) = load_model_tests(load_project(root))  # the test fails alone with its problem
    assert isinstance(test.problem, ModelFileError)
    assert re.search(
        r"test_daily.yaml:1: test test_daily: vars.start: .* is not a date or timestamp", str(test.problem)
    )
