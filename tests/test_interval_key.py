"""The interval key of a row is the same whether Python or Spark computes it: a run stages rows under the
key Spark computes, and plans, commits and partition metadata look them up under the key Python computes."""

from datetime import timedelta

import pytest
from pyspark.sql import functions as F

from incremental_assets.model.intervals import IntervalUnit, utc


def instants():
    """Instants over three years, 7h13m apart (every hour of the day, every weekday, leap day and year ends
    crossed), and the last microsecond before a few boundaries."""
    out = [utc(2023, 1, 1) + timedelta(hours=7, minutes=13) * i for i in range(3700)]
    edges = [utc(2024, 1, 1), utc(2024, 3, 1), utc(2024, 4, 1), utc(2024, 12, 29), utc(2024, 3, 3, 5)]
    return out + [e - timedelta(microseconds=1) for e in edges] + edges


@pytest.mark.parametrize("unit", list(IntervalUnit))
def test_spark_and_python_give_each_instant_the_same_interval_key(spark, unit):
    times = instants()
    rows = spark.createDataFrame([(i, t) for i, t in enumerate(times)], "i int, ts timestamp")
    keyed = rows.select("i", F.expr(unit.partition_key_sql("ts")).alias("key")).collect()
    spark_keys = {r["i"]: r["key"] for r in keyed}
    python_keys = {i: unit.partition_key(t) for i, t in enumerate(times)}
    differ = {times[i].isoformat(): (spark_keys[i], k) for i, k in python_keys.items() if spark_keys[i] != k}
    assert not differ, f"{unit}: Spark and Python keys differ (Spark, Python): {dict(list(differ.items())[:5])}"
    assert len(set(python_keys.values())) > 1  # the instants span several intervals of every unit
