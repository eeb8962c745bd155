"""An event-time column inside day partitions: a source partitioned by ``event_date`` holding ``event_ts``.

Frames and joins over ``event_ts`` derive their bound in event time (30 minutes), read whole
``event_date`` partitions around it, and give, day by day, in chunks or at once, and after late rows
are recomputed where they land, exactly the rows of the query over all the data (computed here in
plain Python). A model declaring its own event-time column is read the same way downstream.
"""

from __future__ import annotations

import dataclasses
import json
from collections import defaultdict
from datetime import datetime, timedelta

import dagster as dg
import pyarrow as pa
import pytest
import sqlglot
from deltalake import write_deltalake

from incremental_assets import cli, delta
from incremental_assets.analysis import SourceBound
from incremental_assets.errors import ProjectError
from incremental_assets.load.project import load_project
from incremental_assets.model.intervals import TimeWindow, batches
from incremental_assets.orchestration.build_definitions import build_definitions
from incremental_assets.orchestration.source_watch import source_changes, touched_by_sources
from incremental_assets.plan.analyses import analyses, analysis_of
from incremental_assets.plan.frames import navigation_frames
from incremental_assets.plan.run_plan import plan_run, plan_window
from incremental_assets.spark.executor import Executor

from helpers import table_rows, utc

SOURCES = """\
- name: raw.clicks
  location: data/clicks
  format: delta
  time_column: event_date
  event_time_column: event_ts
  interval_unit: day
"""

MODELS = {
    # Form A: the previous click of the key within 30 minutes (a click at 00:10 finds 23:55 of the day before).
    "models/gaps.sql": """
        MODEL (
          name s.gaps,
          kind INCREMENTAL_BY_TIME_RANGE (time_column event_date),
          start '2024-01-01',
          event_time_column event_ts
        );
        SELECT k, event_date, event_ts, v,
          LAG(v) OVER (PARTITION BY k ORDER BY event_ts RANGE BETWEEN INTERVAL '30 minutes' PRECEDING
            AND CURRENT ROW) AS prev_v
        FROM raw.clicks
    """,
    # Form B: a self-join on the event time, the clicks of the 30 minutes before each click.
    "models/recent.sql": """
        MODEL (name s.recent, kind INCREMENTAL_BY_TIME_RANGE (time_column event_date), start '2024-01-01');
        SELECT a.k, a.event_date, a.event_ts, COUNT(b.v) AS recent, SUM(b.v) AS recent_v
        FROM raw.clicks AS a
        LEFT JOIN raw.clicks AS b
          ON b.k = a.k AND b.event_ts >= a.event_ts - INTERVAL '30' MINUTE AND b.event_ts < a.event_ts
        GROUP BY a.k, a.event_date, a.event_ts
    """,
    # Downstream of a model, through the event-time column that model declares.
    "models/chained.sql": """
        MODEL (name s.chained, kind INCREMENTAL_BY_TIME_RANGE (time_column event_date), start '2024-01-01');
        SELECT k, event_date, event_ts,
          SUM(v) OVER (PARTITION BY k ORDER BY event_ts RANGE BETWEEN INTERVAL '20 minutes' PRECEDING
            AND CURRENT ROW) AS v20,
          prev_v
        FROM s.gaps
    """,
}
ORDER = ("s.gaps", "s.recent", "s.chained")
WHOLE = TimeWindow(utc(2024, 1, 1), utc(2024, 1, 6))

# (key, event time, value); 2024-01-03 has no clicks at all.
CLICKS = [
    ("k0", datetime(2024, 1, 1, 10, 0), 1),
    ("k0", datetime(2024, 1, 1, 23, 55), 2),
    ("k1", datetime(2024, 1, 1, 23, 40), 3),
    ("k2", datetime(2024, 1, 1, 12, 0), 4),
    ("k2", datetime(2024, 1, 1, 12, 20), 5),
    ("k0", datetime(2024, 1, 2, 0, 10), 6),  # 15 minutes after 23:55 the day before
    ("k1", datetime(2024, 1, 2, 0, 20), 7),  # 40 minutes after 23:40: no predecessor in the frame
    ("k0", datetime(2024, 1, 2, 0, 30), 8),
    ("k2", datetime(2024, 1, 2, 23, 50), 9),
    ("k2", datetime(2024, 1, 4, 0, 15), 10),  # the day before is empty: nothing in reach
    ("k0", datetime(2024, 1, 4, 0, 5), 11),
    ("k0", datetime(2024, 1, 4, 23, 59), 12),
    ("k0", datetime(2024, 1, 5, 0, 1), 13),
    ("k1", datetime(2024, 1, 5, 0, 25), 14),
]
# Arriving after the first backfill, minutes before midnight: each reaches into the next day.
LATE = [("k0", datetime(2024, 1, 1, 23, 58), 20), ("k1", datetime(2024, 1, 4, 23, 57), 21)]


def write_clicks(path, clicks, mode="overwrite") -> None:
    table = pa.table(
        {
            "k": pa.array([c[0] for c in clicks]),
            "event_date": pa.array([c[1].date() for c in clicks], pa.date32()),
            "event_ts": pa.array([c[1] for c in clicks], pa.timestamp("us", tz="UTC")),
            "v": pa.array([c[2] for c in clicks], pa.int64()),
        }
    )
    write_deltalake(str(path), table, mode=mode, partition_by=["event_date"])


def expected(clicks) -> dict[str, list[tuple]]:
    """The three models over all clicks, computed without Spark."""
    by_key = defaultdict(list)
    for k, ts, v in sorted(clicks, key=lambda c: (c[0], c[1])):
        by_key[k].append((ts, v))
    gaps, recent, chained = [], [], []
    for k, rows in by_key.items():
        for i, (ts, v) in enumerate(rows):
            prev = rows[i - 1][1] if i and rows[i - 1][0] >= ts - timedelta(minutes=30) else None
            gaps.append((k, ts.date(), ts, v, prev))
            before = [w for t, w in rows if ts - timedelta(minutes=30) <= t < ts]
            recent.append((k, ts.date(), ts, len(before), sum(before) if before else None))
            v20 = sum(w for t, w in rows if ts - timedelta(minutes=20) <= t <= ts)
            chained.append((k, ts.date(), ts, v20, prev))
    return {"s.gaps": sorted(gaps), "s.recent": sorted(recent), "s.chained": sorted(chained)}


@pytest.fixture
def project(make_project):
    root = make_project({"sources.yaml": SOURCES, **MODELS})
    write_clicks(root / "data" / "clicks", CLICKS)
    return load_project(root)


def with_warehouse(project, path):
    return dataclasses.replace(project, settings=dataclasses.replace(project.settings, warehouse=str(path)))


def run(spark, project, name, windows):
    ex = Executor(spark, project)
    for window in windows:
        for plan in plan_window(project, project.model(name), window):
            ex.execute(plan)


def tables(project) -> dict[str, list[tuple]]:
    return {name: table_rows(delta.table_uri(project.settings.warehouse, name)) for name in ORDER}


def test_bounds_are_derived_in_event_time_and_read_whole_partitions(project):
    for name in ORDER:
        assert analysis_of(project, name).safety_class == "FullyBatchSafe", analysis_of(project, name).reasons
    gaps = analysis_of(project, "s.gaps").bounds["raw.clicks"]
    assert (gaps.before, gaps.after, gaps.column, gaps.partition_column) == (
        timedelta(minutes=30),
        timedelta(0),
        "event_ts",
        "event_date",
    )
    chained = analysis_of(project, "s.chained").bounds["s.gaps"]
    assert (chained.before, chained.column, chained.partition_column) == (
        timedelta(minutes=20),
        "event_ts",
        "event_date",
    )

    plan = plan_run(project, project.model("s.gaps"), TimeWindow(utc(2024, 1, 2), utc(2024, 1, 3)))
    (read,) = plan.inputs
    assert read.window == TimeWindow(
        utc(2024, 1, 1), utc(2024, 1, 3)
    )  # 30 minutes before = the previous day's partition
    assert "event_date >= CAST('2024-01-01 00:00:00' AS TIMESTAMP)" in plan.sql
    assert "event_date < CAST('2024-01-03 00:00:00' AS TIMESTAMP)" in plan.sql
    assert "event_ts >= CAST('2024-01-01 23:30:00' AS TIMESTAMP)" in plan.sql
    assert "event_ts < CAST('2024-01-03 00:00:00' AS TIMESTAMP)" in plan.sql
    # The output is still clamped on the model's own time (partition) column.
    assert "__window.event_date >= CAST('2024-01-02 00:00:00' AS TIMESTAMP)" in plan.sql


def test_explain_shows_the_bound_and_its_column(project, capsys):
    assert cli.main(["explain", "s.gaps", "--json", "--project", str(project.directory)]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["sources"]["raw.clicks"] == {
        "before": "PT30M",
        "after": "PT0S",
        "column": "event_ts",
        "partitions": {"column": "event_date", "unit": "day", "before": 1, "after": 0},
    }
    assert cli.main(["explain", "s.chained", "--json", "--project", str(project.directory)]) == 0
    assert json.loads(capsys.readouterr().out)["sources"]["s.gaps"]["column"] == "event_ts"
    assert cli.main(["explain", "s.gaps", "--project", str(project.directory)]) == 0
    assert (
        "reads raw.clicks: before PT30M, after PT0S on event_ts (whole event_date partitions: 1 before, 0 after)"
        in capsys.readouterr().out
    )


def test_lookback_in_event_time_becomes_a_one_day_partition_mapping(project, tmp_path, monkeypatch):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    graph = build_definitions(project).resolve_asset_graph()
    mapping = graph.get_partition_mapping(dg.AssetKey(["s", "chained"]), dg.AssetKey(["s", "gaps"]))
    assert mapping == dg.TimeWindowPartitionMapping(start_offset=-1, end_offset=0)


def test_day_by_day_in_chunks_and_at_once_equal_the_query_over_all_data(spark, project, tmp_path):
    want = expected(CLICKS)
    assert want["s.gaps"][1][4] is None and any(
        r[2] == datetime(2024, 1, 2, 0, 10) and r[4] == 2 for r in want["s.gaps"]
    )
    splits = {
        "days": batches(WHOLE, "day", 1),
        "chunks": [TimeWindow(utc(2024, 1, 1), utc(2024, 1, 3)), TimeWindow(utc(2024, 1, 3), utc(2024, 1, 6))],
        "once": [WHOLE],
    }
    for label, windows in splits.items():
        p = with_warehouse(project, tmp_path / label)
        for name in ORDER:
            run(spark, p, name, windows)
        assert tables(p) == want, label

    # Without the derived bound the same days lose the rows just before midnight.
    p = with_warehouse(project, tmp_path / "unbounded")
    analysis = analysis_of(p, "s.gaps")
    analyses(p)["s.gaps"] = dataclasses.replace(
        analysis, bounds={"raw.clicks": SourceBound(timedelta(0), timedelta(0))}
    )
    run(spark, p, "s.gaps", splits["days"])
    assert table_rows(delta.table_uri(p.settings.warehouse, "s.gaps")) != want["s.gaps"]


def test_late_rows_recompute_the_days_they_reach(spark, project, tmp_path):
    p = with_warehouse(project, tmp_path / "w")
    for name in ORDER:
        run(spark, p, name, batches(WHOLE, "day", 1))
    source = p.sources["raw.clicks"]
    marker, _, _ = source_changes(source, None)
    write_clicks(p.directory / "data" / "clicks", LATE, mode="append")
    # The new files' partitions (no statistics: the time column is the partition column) are the late days.
    _, late_days, _ = source_changes(source, marker)
    assert late_days == [TimeWindow(utc(2024, 1, 1), utc(2024, 1, 2)), TimeWindow(utc(2024, 1, 4), utc(2024, 1, 5))]
    now = utc(2024, 1, 10)
    touched = touched_by_sources(p, {"raw.clicks": late_days}, now)
    # A late click at 23:58 reaches 30 minutes into the next day: that day is recomputed too.
    assert list(touched["s.gaps"]) == [
        TimeWindow(utc(2024, 1, 1), utc(2024, 1, 3)),
        TimeWindow(utc(2024, 1, 4), utc(2024, 1, 6)),
    ]
    for name in ("s.gaps", "s.recent"):
        run(spark, p, name, touched[name])
    downstream = touched_by_sources(p, {"s.gaps": touched["s.gaps"]}, now)
    run(spark, p, "s.chained", downstream["s.chained"])
    assert tables(p) == expected(CLICKS + LATE)


def test_event_time_declarations_are_checked(make_project, capsys):
    bad_source = SOURCES.replace("  time_column: event_date\n", "")
    root = make_project({"sources.yaml": bad_source, **MODELS}, name="bad_source")
    with pytest.raises(ProjectError) as err:
        load_project(root)
    assert "sources.yaml:1" in str(err.value) and "needs a time_column" in str(err.value)

    full = "MODEL (name s.full, kind FULL, event_time_column ts);\nSELECT 1 AS ts"
    root = make_project({"models/full.sql": full}, name="bad_kind")
    assert cli.main(["validate", "--project", str(root)]) == 2
    out = capsys.readouterr().err
    assert "full.sql:1" in out and "event_time_column ts needs a time column" in out

    missing = MODELS["models/gaps.sql"].replace("event_time_column event_ts", "event_time_column clicked_at")
    root = make_project({"sources.yaml": SOURCES, "models/gaps.sql": missing}, name="bad_column")
    assert cli.main(["validate", "--project", str(root)]) == 2
    out = capsys.readouterr().err
    assert "gaps.sql:5" in out and "'clicked_at' is not an output column" in out


def test_physical_properties_spelling_loads_in_sqlmesh_and_here(make_project):
    spelled = MODELS["models/gaps.sql"].replace(
        "event_time_column event_ts", "physical_properties (event_time_column = 'event_ts')"
    )
    root = make_project({"sources.yaml": SOURCES, "models/gaps.sql": spelled})
    project = load_project(root)
    assert project.event_time_of("s.gaps") == ("event_ts", "day")
    assert project.event_time_of("raw.clicks") == ("event_ts", "day")


def test_a_frame_over_an_undeclared_column_is_refused_naming_it(make_project, capsys):
    plain = SOURCES.replace("  event_time_column: event_ts\n", "")
    undeclared = (
        MODELS["models/gaps.sql"]
        .replace("start '2024-01-01',", "start '2024-01-01'")
        .replace("event_time_column event_ts", "")
    )
    root = make_project({"sources.yaml": plain, "models/gaps.sql": undeclared})
    assert cli.main(["validate", "--project", str(root)]) == 1
    out = capsys.readouterr().err
    assert "gaps.sql:8" in out and "RANGE frame over event_ts of raw.clicks" in out
    assert "`event_time_column: event_ts` in its sources.yaml entry" in out


def test_lag_and_lead_with_a_range_frame_see_only_rows_inside_it(spark):
    minutes = [("a", 0, 1), ("a", 10, 2), ("a", 45, 3), ("a", 50, 4), ("b", 5, 5)]
    spark.createDataFrame(
        [(k, datetime(2024, 1, 1) + timedelta(minutes=m), v) for k, m, v in minutes], "k string, ts timestamp, v bigint"
    ).createOrReplaceTempView("navigation")
    sql = """
        SELECT k, ts,
          LAG(v) OVER (PARTITION BY k ORDER BY ts RANGE BETWEEN INTERVAL '30' MINUTE PRECEDING
            AND CURRENT ROW) AS lag_asc,
          LEAD(v, 1, -1) OVER (PARTITION BY k ORDER BY ts RANGE BETWEEN CURRENT ROW
            AND INTERVAL '30' MINUTE FOLLOWING) AS lead_asc,
          LAG(v) OVER (PARTITION BY k ORDER BY ts DESC RANGE BETWEEN INTERVAL '30' MINUTE PRECEDING
            AND CURRENT ROW) AS lag_desc
        FROM navigation
    """
    rewritten = navigation_frames(sqlglot.parse_one(sql, read="spark")).sql("spark")
    got = sorted(
        (r.k, int((r.ts - datetime(2024, 1, 1)).total_seconds() // 60), r.lag_asc, r.lead_asc, r.lag_desc)
        for r in spark.sql(rewritten).collect()
    )
    assert got == [
        ("a", 0, None, 2, 2),
        ("a", 10, 1, -1, None),  # the next row is 35 minutes later: outside both frames
        ("a", 45, None, 4, 4),
        ("a", 50, 3, -1, None),
        ("b", 5, None, -1, None),
    ]
