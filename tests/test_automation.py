"""Schedules from cron and sensors on new source data, evaluated with Dagster's test utilities."""

from __future__ import annotations

import dagster as dg
import pytest

from incremental_assets.orchestration.definitions import build_definitions
from incremental_assets.load.project import load_project
from incremental_assets.orchestration.instance import open_instance
from incremental_assets.orchestration.runner import Runner

from helpers import utc, write_events
from test_dagster import MODELS, SOURCES

START, END = "dagster/asset_partition_range_start", "dagster/asset_partition_range_end"


@pytest.fixture
def env(make_project, tmp_path, monkeypatch):
    root = make_project({"sources.yaml": SOURCES, **MODELS})
    write_events(root / "data" / "events", utc(2024, 1, 1), 24 * 3)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    project = load_project(root)
    return project, open_instance(project.settings.dagster_home), build_definitions(project)


def _tick(defs, instance, name, when):
    schedule = next(s for s in defs.schedules if s.name == name)
    data = schedule.evaluate_tick(dg.build_schedule_context(instance=instance, scheduled_execution_time=when))
    return [(r.tags[START], r.tags[END]) for r in data.run_requests or []], data.skip_message


def test_schedules_follow_cron_and_request_only_missing_complete_intervals(env, spark):
    project, instance, defs = env
    names = {s.name: s.cron_schedule for s in defs.schedules}
    assert names == {"s__hourly_schedule": "0 * * * *", "s__daily_schedule": "0 0 * * *", "s__weekly_schedule": "0 0 * * 0"}
    # At 2024-01-03 00:00 two days are complete: one run for both, not the day in progress.
    assert _tick(defs, instance, "s__daily_schedule", utc(2024, 1, 3))[0] == [("2024-01-01", "2024-01-02")]
    # The first week [2023-12-31, 2024-01-07) is complete only on the Sunday after it.
    assert _tick(defs, instance, "s__weekly_schedule", utc(2024, 1, 6, 23))[0] == []
    assert _tick(defs, instance, "s__weekly_schedule", utc(2024, 1, 7))[0] == [("2023-12-31", "2023-12-31")]
    assert _tick(defs, instance, "s__weekly_schedule", utc(2024, 1, 14))[0] == [("2023-12-31", "2024-01-07")]
    runner = Runner(project, instance, defs)
    assert runner.run([project.model("s.hourly")], start=utc(2024, 1, 1, 5), end=utc(2024, 1, 2)).success
    # The hourly schedule at 2024-01-02 02:00 asks for the gap before and the two hours after the run.
    requests, _ = _tick(defs, instance, "s__hourly_schedule", utc(2024, 1, 2, 2))
    assert requests == [("2024-01-01-00:00", "2024-01-01-04:00"), ("2024-01-02-00:00", "2024-01-02-01:00")]
    assert runner.run([project.model("s.hourly")], start=utc(2024, 1, 1), end=utc(2024, 1, 2, 2)).success
    requests, skipped = _tick(defs, instance, "s__hourly_schedule", utc(2024, 1, 2, 2))
    assert requests == [] and "every complete interval" in skipped


def _sense(defs, instance, name, cursor):
    sensor = next(s for s in defs.sensors if s.name == name)
    data = sensor.evaluate_tick(dg.build_sensor_context(instance=instance, cursor=cursor, definitions=defs))
    return {(r.asset_selection[0].to_user_string(), r.tags[START], r.tags[END]): r.run_key for r in data.run_requests}, data.cursor


def test_sensor_requests_exactly_the_intervals_new_delta_versions_touch(env):
    project, instance, defs = env
    events = project.sources["raw.events"].location
    requests, cursor = _sense(defs, instance, "raw__events_new_data", None)
    assert requests == {} and cursor == "0"
    # Late data for 2024-01-02 10:00-11:59 arrives as one new Delta version.
    write_events(events, utc(2024, 1, 2, 10), 2, mode="append")
    requests, cursor = _sense(defs, instance, "raw__events_new_data", "0")
    assert cursor == "1"
    assert set(requests) == {
        ("s/hourly", "2024-01-02-10:00", "2024-01-02-11:00"),
        ("s/daily", "2024-01-02", "2024-01-02"),
        ("s/weekly", "2023-12-31", "2023-12-31"),
    }
    # Evaluated again from the same cursor: the same run keys, so Dagster launches nothing twice.
    again, _ = _sense(defs, instance, "raw__events_new_data", "0")
    assert again == requests
    # Nothing new: no requests.
    assert _sense(defs, instance, "raw__events_new_data", "1")[0] == {}
    # Data for a later day and for an old one: both days; their two adjacent weeks in one run.
    write_events(events, utc(2024, 1, 9, 23), 1, mode="append")
    write_events(events, utc(2024, 1, 1, 0), 1, mode="append")
    requests, cursor = _sense(defs, instance, "raw__events_new_data", "1")
    assert cursor == "3"
    assert {k for k in requests if k[0] != "s/hourly"} == {
        ("s/daily", "2024-01-01", "2024-01-01"), ("s/daily", "2024-01-09", "2024-01-09"),
        ("s/weekly", "2023-12-31", "2024-01-07"),
    }


def test_sensor_on_a_file_source_requests_the_intervals_of_new_files(make_project, tmp_path, monkeypatch):
    import os

    import pyarrow as pa
    import pyarrow.parquet as pq

    root = make_project({
        "sources.yaml": "- name: raw.drops\n  location: data/drops\n  format: parquet\n  time_column: ts\n  interval_unit: hour\n",
        "models/daily.sql": """
            MODEL (name s.drops_daily, kind INCREMENTAL_BY_TIME_RANGE (time_column ds), start '2024-01-01');
            SELECT CAST(ts AS DATE) AS ds, COUNT(*) AS n FROM raw.drops WHERE ts BETWEEN @start_dt AND @end_dt GROUP BY 1
        """,
    })
    folder = root / "data" / "drops"
    folder.mkdir(parents=True)

    def drop(name, *stamps, mtime):
        path = folder / name
        pq.write_table(pa.table({"ts": pa.array(list(stamps), pa.timestamp("us", tz="UTC"))}), path)
        os.utime(path, (mtime, mtime))

    drop("a.parquet", utc(2024, 1, 1, 3), utc(2024, 1, 2, 4), mtime=1_000_000)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    project = load_project(root)
    instance = open_instance(project.settings.dagster_home)
    defs = build_definitions(project)
    requests, cursor = _sense(defs, instance, "raw__drops_new_data", None)
    assert requests == {} and float(cursor) == 1_000_000
    # A new file with late rows for 2024-01-05 and 2024-01-07: exactly those days.
    drop("b.parquet", utc(2024, 1, 5, 1), utc(2024, 1, 7, 23), mtime=1_000_100)
    requests, cursor = _sense(defs, instance, "raw__drops_new_data", cursor)
    assert set(requests) == {("s/drops_daily", "2024-01-05", "2024-01-05"), ("s/drops_daily", "2024-01-07", "2024-01-07")}
    assert float(cursor) == 1_000_100
    assert _sense(defs, instance, "raw__drops_new_data", cursor)[0] == {}
