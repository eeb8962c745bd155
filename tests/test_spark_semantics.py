"""A DuckDB query keeps its meaning on Spark: date differences counting boundaries, days of the week, ISO weeks
and GROUPING of several columns give DuckDB's own values (real DuckDB, in SQLMesh's venv, is the oracle)."""

from __future__ import annotations

import json
import subprocess

import pytest

from incremental_assets.load.query import parse_model_body

from sqlmesh_venv import sqlmesh_python, text_rows

pytestmark = [pytest.mark.sqlmesh]

PAIRS = [
    ("2024-01-01 09:00:00", "2024-01-05 00:00:00"),
    ("2024-01-02 23:30:00", "2024-01-05 00:10:00"),
    ("2023-12-31 23:59:59", "2024-03-01 00:00:00"),
    ("2024-02-29 12:00:00", "2024-02-25 08:00:00"),  # backwards: negative
    ("2024-01-07 10:00:00", "2024-01-08 10:00:00"),  # a Sunday, then a Monday
]
QUERY = """
SELECT
  a, b,
  DATE_DIFF('day', a, b) AS days,
  DATE_DIFF('hour', a, b) AS hours,
  DATE_DIFF('minute', a, b) AS minutes,
  DATE_DIFF('month', a, b) AS months,
  DATE_DIFF('year', a, b) AS years,
  DATE_DIFF('day', CAST(a AS DATE), CAST(b AS DATE)) AS date_days,
  DAYOFWEEK(a) AS dow,
  ISODOW(a) AS isodow,
  DATE_PART('dow', a) AS part_dow,
  DATE_PART('isodow', a) AS part_isodow,
  EXTRACT(dow FROM a) AS extract_dow,
  WEEK(a) AS week,
  DAYNAME(a) AS day_name,
  MONTHNAME(b) AS month_name,
  EPOCH(a) AS epoch,
  EXTRACT(epoch FROM b) AS extract_epoch,
  REGEXP_FULL_MATCH(CAST(a AS TEXT), '2024-0[12].*') AS full_match
FROM t
"""
AGGREGATE = (
    "SELECT QUANTILE_CONT(DATE_DIFF('hour', a, b), 0.25) AS q1, QUANTILE_CONT(DATE_DIFF('hour', a, b), 0.5) AS q2 "
    "FROM t"
)
ROLLUP = "SELECT g, h, COUNT(*) AS n, GROUPING(g, h) AS gid, GROUPING(g) AS gg FROM t2 GROUP BY ROLLUP (g, h)"
GROUPS = [("x", "p"), ("x", "q"), ("y", "p")]

DUCKDB = """
import duckdb, json, sys
pairs, groups, query, rollup, aggregate = json.loads(sys.stdin.read())
c = duckdb.connect()
c.execute("CREATE TABLE t (a TIMESTAMP, b TIMESTAMP)")
c.executemany("INSERT INTO t VALUES (?, ?)", pairs)
c.execute("CREATE TABLE t2 (g TEXT, h TEXT)")
c.executemany("INSERT INTO t2 VALUES (?, ?)", groups)
print(json.dumps([c.execute(q).fetchall() for q in (query, rollup, aggregate)], default=str))
"""


def test_duckdb_functions_give_duckdb_s_values_on_spark(spark):
    python = sqlmesh_python()
    done = subprocess.run(
        [str(python), "-c", DUCKDB],
        input=json.dumps([PAIRS, GROUPS, QUERY, ROLLUP, AGGREGATE]),
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    theirs, theirs_rollup, theirs_aggregate = json.loads(done.stdout)

    spark.createDataFrame(PAIRS, "a string, b string").selectExpr(
        "CAST(a AS TIMESTAMP) AS a", "CAST(b AS TIMESTAMP) AS b"
    ).createOrReplaceTempView("t")
    spark.createDataFrame(GROUPS, "g string, h string").createOrReplaceTempView("t2")
    ours = spark.sql(parse_model_body(QUERY, dialect="duckdb").query.sql("spark")).collect()
    ours_rollup = spark.sql(parse_model_body(ROLLUP, dialect="duckdb").query.sql("spark")).collect()

    assert text_rows(ours) == text_rows(theirs)
    assert text_rows(ours_rollup) == text_rows(theirs_rollup)
    ours_aggregate = spark.sql(parse_model_body(AGGREGATE, dialect="duckdb").query.sql("spark")).collect()
    assert text_rows(ours_aggregate) == text_rows(theirs_aggregate)
