"""Schedules from cron, and the automation sensor, evaluated with Dagster's own evaluation APIs on a real
instance, the requested runs executed as Dagster runs: what arrives is computed once, upstreams first."""

from __future__ import annotations

import os
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_dagster import MODELS, SOURCES

from incremental_assets.load.project import load_project
from incremental_assets.model import clock
from incremental_assets.model.settings import CLOCK_ENV
from incremental_assets.orchestration import sensors
from incremental_assets.orchestration.build_definitions import build_definitions
from incremental_assets.orchestration.instance import open_instance
from incremental_assets.orchestration.runner import Runner
from incremental_assets.orchestration.sensors import SENSOR_NAME

from helpers import table_rows, utc, write_events

START, END = "dagster/asset_partition_range_start", "dagster/asset_partition_range_end"


@pytest.fixture
def env(make_project, dagster_env):
    root = make_project({"sources.yaml": SOURCES, **MODELS})
    write_events(root / "data" / "events", utc(2024, 1, 1), 24 * 3)
    return dagster_env(root)


def _tick(defs, instance, name, when):
    schedule = next(s for s in defs.schedules if s.name == name)
    data = schedule.evaluate_tick(dg.build_schedule_context(instance=instance, scheduled_execution_time=when))
    return [(r.tags[START], r.tags[END]) for r in data.run_requests or []], data.skip_message


def test_schedules_follow_cron_and_request_only_missing_complete_intervals(env, spark):
    project, instance, defs = env
    names = {s.name: s.cron_schedule for s in defs.schedules}
    assert names == {
        "s__hourly_schedule": "0 * * * *",
        "s__daily_schedule": "0 0 * * *",
        "s__weekly_schedule": "0 0 * * 0",
        "maintenance_compact_schedule": "15 * * * *",
        "maintenance_vacuum_schedule": "0 3 * * *",  # the defaults
    }
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


class Automation:
    """The project's automation sensor ticked at chosen instants, its run requests executed in order."""

    def __init__(self, defs: dg.Definitions, instance: dg.DagsterInstance, monkeypatch):
        self.defs, self.instance, self.monkeypatch = defs, instance, monkeypatch
        # The runs of a tick run here one after another: each tick requests only what is ready, as with a
        # dagster.yaml whose queue has no slots for runs that wait for the runs requested with them. Those
        # runs (the project's queue) are in test_sensor_decisions.py and test_daemon_automation.py.
        monkeypatch.setattr(sensors, "runs_may_follow", lambda instance: False)
        self.cursor: str | None = None
        self.requested: list[tuple[str, str | None, str | None, str]] = []
        self.failed: list[str] = []
        self.run_defs: dg.Definitions | None = None  # what the launched runs import, when not the sensor's

    def reload(self, defs: dg.Definitions) -> None:
        self.defs = defs  # a definition changed: new code, same instance and cursor

    def sense(self, when: datetime, cursor: str | None = ...) -> dg.SensorExecutionData:  # type: ignore[assignment]
        self.monkeypatch.setenv(CLOCK_ENV, when.isoformat())
        sensor = next(s for s in self.defs.sensors if s.name == SENSOR_NAME)
        context = dg.build_sensor_context(
            instance=self.instance, cursor=self.cursor if cursor is ... else cursor, definitions=self.defs
        )
        return sensor.evaluate_tick(context)

    def tick(self, when: datetime, *, run: bool = True) -> list[tuple[str, str | None, str | None]]:
        data = self.sense(when)
        self.cursor = data.cursor
        requests = data.run_requests or []
        # A run of several models (one window, upstream first) is named by all of them: "s/daily+s/total".
        keys = [
            ("+".join(k.to_user_string() for k in r.asset_selection or ()), r.tags.get(START), r.tags.get(END))
            for r in requests
        ]
        self.requested += [(*k, r.run_key) for k, r in zip(keys, requests)]
        if run:
            job = (self.run_defs or self.defs).resolve_implicit_global_asset_job_def()
            for request, key in zip(requests, keys):
                result = job.execute_in_process(
                    instance=self.instance,
                    asset_selection=request.asset_selection,
                    tags=request.tags,
                    raise_on_error=False,
                )
                if not result.success:
                    self.failed.append(f"{key} at {when}")
        self.last_skip = data.skip_message
        return keys

    def settle(self, when: datetime, limit: int = 8) -> list[tuple[str, str | None, str | None]]:
        """Tick until nothing is requested; everything requested on the way."""
        seen = []
        for _ in range(limit):
            keys = self.tick(when)
            if not keys:
                return seen
            seen += keys
        raise AssertionError(f"still requesting after {limit} ticks: {keys}")


def test_new_and_late_data_rerun_exactly_the_touched_intervals_then_downstream_in_order(env, monkeypatch, spark):
    project, instance, defs = env
    auto = Automation(defs, instance, monkeypatch)
    now = utc(2024, 1, 3, 6)
    # First tick: every missing complete interval, upstreams before the models that read them (the FULL
    # total, which reads only the daily model, in the daily model's run, after it).
    assert auto.tick(now) == [("s/hourly", "2024-01-01-00:00", "2024-01-03-05:00")]
    assert auto.tick(now) == [("s/daily+s/total", "2024-01-01", "2024-01-02")]
    assert auto.tick(now) == [] and auto.last_skip
    assert auto.failed == []

    # Late rows for 2024-01-02 10:00-11:59 arrive as one new Delta version: those two hours, then that day.
    write_events(project.sources["raw.events"].location, utc(2024, 1, 2, 10), 2, mode="append")
    cursor = auto.cursor
    assert auto.tick(now, run=False) == [("s/hourly", "2024-01-02-10:00", "2024-01-02-11:00")]
    # Evaluated again from the same cursor: the same run key, so Dagster launches nothing twice.
    again = auto.sense(now, cursor)
    assert [r.run_key for r in again.run_requests] == [auto.requested[-1][3]]
    auto.cursor = cursor
    assert auto.tick(now) == [("s/hourly", "2024-01-02-10:00", "2024-01-02-11:00")]
    # The daily model reads those hours: only its 2024-01-02 is stale; the FULL total follows in its run.
    assert auto.tick(now) == [("s/daily+s/total", "2024-01-02", "2024-01-02")]
    assert auto.tick(now) == []
    assert auto.failed == []


def test_a_source_without_a_time_column_reruns_its_whole_readers_when_a_file_comes_or_goes(
    make_project, dagster_env, monkeypatch, spark
):
    keys = "- name: raw.keys\n  location: data/keys\n  format: csv\n"
    labels = "MODEL (name s.labels, kind FULL);\nSELECT label, COUNT(*) AS n FROM raw.keys GROUP BY label\n"
    root = make_project({"sources.yaml": SOURCES + keys, **MODELS, "models/labels.sql": labels})
    write_events(root / "data" / "events", utc(2024, 1, 1), 24 * 3)
    folder = root / "data" / "keys"
    folder.mkdir(parents=True)
    (folder / "a.csv").write_text("k,label\nk0,red\nk1,blue\n")
    project, instance, defs = dagster_env(root)
    auto = Automation(defs, instance, monkeypatch)
    now = utc(2024, 1, 3, 6)
    assert Counter(k[0] for k in auto.settle(now))["s/labels"] == 1
    assert auto.tick(now) == []

    def labels_table() -> dict[str, int]:
        return dict(table_rows(f"{project.settings.warehouse}/s/labels"))

    # A file of keys and late rows arrive together: the hours they touch and the keys' reader, in one tick.
    (folder / "b.csv").write_text("k,label\nk2,red\n")
    write_events(project.sources["raw.events"].location, utc(2024, 1, 2, 10), 1, mode="append")
    assert sorted(auto.tick(now), key=str) == [
        ("s/hourly", "2024-01-02-10:00", "2024-01-02-10:00"),
        ("s/labels", None, None),
    ]
    assert labels_table() == {"red": 2, "blue": 1}
    assert auto.tick(now) == [("s/daily+s/total", "2024-01-02", "2024-01-02")]
    assert auto.tick(now) == []
    # A file removed: the reader again, once.
    (folder / "a.csv").unlink()
    assert auto.tick(now) == [("s/labels", None, None)]
    assert auto.tick(now) == []
    assert labels_table() == {"red": 1}
    assert auto.failed == []


def test_a_full_model_reading_the_clock_runs_again_once_its_cron_ticked(make_project, dagster_env, monkeypatch, spark):
    dated = "MODEL (name s.dated, kind FULL);\nSELECT COUNT(*) AS n, current_timestamp() AS at FROM raw.events\n"
    root = make_project({"sources.yaml": SOURCES, **MODELS, "models/dated.sql": dated})
    write_events(root / "data" / "events", utc(2024, 1, 1), 24 * 3)
    project, instance, defs = dagster_env(root)
    auto = Automation(defs, instance, monkeypatch)

    def settle(when: datetime) -> list[str]:
        with clock.pinned(when):  # the runs' execution time too
            return [k[0] for k in auto.settle(when)]

    assert settle(utc(2024, 1, 3, 6)).count("s/dated") == 1
    assert "s/dated" not in settle(utc(2024, 1, 3, 23, 59))  # nothing it reads changed, its cron did not tick
    # Its cron (none given: daily) ticked: once, with the tick as its reason; then not again that day.
    when = utc(2024, 1, 4, 0, 10)
    with clock.pinned(when):
        requests = auto.sense(when).run_requests or []
    reasons = [
        r.tags["incremental_assets/reason"]
        for r in requests
        if "s/dated" in [k.to_user_string() for k in r.asset_selection or ()]
    ]
    assert reasons == ["its cron (@daily) ticked at 2024-01-04 00:00 UTC since its last run"]
    assert settle(when).count("s/dated") == 1
    assert "s/dated" not in settle(utc(2024, 1, 4, 12))
    assert auto.failed == []


def test_a_changed_definition_rebuilds_the_model_then_every_downstream_interval(env, monkeypatch, spark):
    project, instance, defs = env
    auto = Automation(defs, instance, monkeypatch)
    now = utc(2024, 1, 3, 6)
    auto.settle(now)
    root = project.directory
    hourly = root / "models" / "hourly.sql"
    hourly.write_text(hourly.read_text().replace("COUNT(*) AS n", "COUNT(*) * 2 AS n"))
    project = load_project(root)
    auto.reload(build_definitions(project))
    assert auto.tick(now) == [("s/hourly", "2024-01-01-00:00", "2024-01-03-05:00")]
    assert auto.tick(now) == [("s/daily+s/total", "2024-01-01", "2024-01-02")]
    assert auto.tick(now) == []
    assert auto.failed == []
    assert table_rows(f"{project.settings.warehouse}/s/total") == [(2 * 48,)]


def test_an_old_cursor_and_a_half_written_file_are_skipped_with_a_reason(make_project, tmp_path, monkeypatch, spark):
    root = make_project(
        {
            "sources.yaml": "- name: raw.drops\n  location: data/drops\n  format: parquet\n  time_column: ts\n  "
            "interval_unit: hour\n",
            "models/daily.sql": """
            MODEL (name s.drops_daily, kind INCREMENTAL_BY_TIME_RANGE (time_column ds), start '2024-01-01');
            SELECT CAST(ts AS DATE) AS ds, COUNT(*) AS n FROM raw.drops WHERE ts BETWEEN @start_dt AND @end_dt
              GROUP BY 1
        """,
        }
    )
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
    auto = Automation(build_definitions(project), instance, monkeypatch)
    auto.cursor = "17"  # what the per-source sensors of an older version kept
    now = utc(2024, 1, 8)
    assert auto.tick(now) == [("s/drops_daily", "2024-01-01", "2024-01-07")]
    assert auto.tick(now) == [] and "every model is up to date" in auto.last_skip
    # A file still being written cannot be read: skipped with a reason, read when it is whole.
    (folder / "b.parquet").write_bytes(b"PAR1 half")
    os.utime(folder / "b.parquet", (1_000_100, 1_000_100))
    assert auto.tick(now) == [] and "not readable yet" in auto.last_skip
    drop("b.parquet", utc(2024, 1, 5, 1), utc(2024, 1, 7, 23), mtime=1_000_200)
    assert set(auto.tick(now)) == {
        ("s/drops_daily", "2024-01-05", "2024-01-05"),
        ("s/drops_daily", "2024-01-07", "2024-01-07"),
    }
    assert auto.tick(now) == []
    assert auto.failed == []
    assert table_rows(f"{project.settings.warehouse}/s/drops_daily") == [
        (datetime(2024, 1, 1).date(), 1),
        (datetime(2024, 1, 2).date(), 1),
        (datetime(2024, 1, 5).date(), 1),
        (datetime(2024, 1, 7).date(), 1),
    ]


# -- a week of hourly appends, driven by the automation alone ----------------------------------------

WEEK_SOURCES = """\
- name: raw.events
  location: data/events
  format: delta
  time_column: ts
  interval_unit: hour
- name: raw.clicks
  location: data/clicks
  format: parquet
  time_column: ts
  interval_unit: hour
"""

WEEK_MODELS = {
    "models/hourly.sql": """
        MODEL (name s.hourly, kind INCREMENTAL_BY_TIME_RANGE (time_column h), start '2024-01-01', cron '@hourly');
        SELECT date_trunc('HOUR', ts) AS h, COUNT(*) AS n, SUM(v) AS v FROM raw.events WHERE ts BETWEEN @start_dt
          AND @end_dt GROUP BY 1
    """,
    "models/daily.sql": """
        MODEL (name s.daily, kind INCREMENTAL_BY_TIME_RANGE (time_column ds), start '2024-01-01');
        SELECT CAST(h AS DATE) AS ds, SUM(n) AS n, SUM(v) AS v FROM s.hourly WHERE h BETWEEN @start_dt AND @end_dt
          GROUP BY 1
    """,
    "models/weekly.sql": """
        MODEL (name s.weekly, kind INCREMENTAL_BY_TIME_RANGE (time_column wk), start '2023-12-31', interval_unit week);
        SELECT date_sub(ds, dayofweek(ds) - 1) AS wk, SUM(n) AS n FROM s.daily WHERE ds BETWEEN @start_ds AND @end_ds
          GROUP BY 1
    """,
    "models/both.sql": """
        MODEL (name s.both, kind INCREMENTAL_BY_TIME_RANGE (time_column ds), start '2024-01-01');
        SELECT ds, SUM(e) AS events, SUM(c) AS clicks FROM (
            SELECT CAST(ts AS DATE) AS ds, 1 AS e, 0 AS c FROM raw.events WHERE ts BETWEEN @start_dt AND @end_dt
            UNION ALL
            SELECT CAST(ts AS DATE) AS ds, 0 AS e, 1 AS c FROM raw.clicks WHERE ts BETWEEN @start_dt AND @end_dt
        ) AS u GROUP BY ds
    """,
    "models/total.sql": """
        MODEL (name s.total, kind FULL);
        SELECT SUM(n) AS n, SUM(v) AS v FROM s.daily
    """,
}


def _events(path: Path, stamps: list[datetime]) -> None:
    table = pa.table(
        {
            "ts": pa.array(stamps, pa.timestamp("us", tz="UTC")),
            "k": pa.array([f"k{i % 3}" for i in range(len(stamps))]),
            "v": pa.array([(s.hour * 7 + s.day) % 11 for s in stamps], pa.int64()),
        }
    )
    from deltalake import write_deltalake

    write_deltalake(str(path), table, mode="append")


def _clicks(folder: Path, name: str, stamps: list[datetime]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{name}.tmp"
    pq.write_table(pa.table({"ts": pa.array(stamps, pa.timestamp("us", tz="UTC"))}), tmp)
    tmp.rename(folder / name)


def _week_plan(hour: datetime) -> int:
    """Rows of raw.events in one hour: quiet nights, and no rows at all on 2024-01-03."""
    if hour.date() == datetime(2024, 1, 3).date() or 1 <= hour.hour <= 4:
        return 0
    return 1 + (hour.hour % 3)


@pytest.mark.slow
def test_a_week_of_hourly_appends_is_computed_once_each_and_equals_a_full_recompute(
    make_project, tmp_path, monkeypatch, spark
):
    root = make_project({"sources.yaml": WEEK_SOURCES, **WEEK_MODELS})
    events, clicks = root / "data" / "events", root / "data" / "clicks"
    _events(events, [utc(2024, 1, 1, 0, 5)])
    _clicks(clicks, "c0.parquet", [utc(2024, 1, 1, 0, 7)])
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    project = load_project(root)
    instance = open_instance(project.settings.dagster_home)
    auto = Automation(build_definitions(project), instance, monkeypatch)
    changed_definition = False
    hour = utc(2024, 1, 1, 1)
    end = utc(2024, 1, 8, 3)
    tick = 0
    while hour < end:
        # Six hours of data arrive between ticks; each hour is its own Delta version (several per tick).
        for h in range(6):
            at = hour + timedelta(hours=h)
            stamps = [at + timedelta(minutes=10 * i) for i in range(_week_plan(at))]
            if stamps:
                _events(events, stamps)
            if at.hour % 4 == 0:
                _clicks(clicks, f"c{int(at.timestamp())}.parquet", [at + timedelta(minutes=1)])
        tick += 1
        if tick % 9 == 0:
            # Late rows for an hour two days back, in both sources at once.
            late = hour - timedelta(days=2, hours=3)
            if late >= utc(2024, 1, 1) and _week_plan(late.replace(hour=12)):  # the day without rows stays without
                _events(events, [late + timedelta(minutes=30)])
                _clicks(clicks, f"late{tick}.parquet", [late + timedelta(minutes=31)])
        hour += timedelta(hours=6)
        if not changed_definition and hour >= utc(2024, 1, 5, 12):
            hourly = root / "models" / "hourly.sql"
            hourly.write_text(hourly.read_text().replace("SUM(v) AS v", "SUM(v) * 10 AS v"))
            project = load_project(root)
            auto.reload(build_definitions(project))
            changed_definition = True
        auto.settle(hour)

    assert auto.failed == []
    assert changed_definition
    # No (model, interval) requested twice for the same reason at the same state.
    keys = Counter(r[3] for r in auto.requested)
    assert [k for k, n in keys.items() if n > 1] == []

    # Every table equals a full recompute from scratch over the same data, by the CLI's runner.
    fresh = make_project({"sources.yaml": WEEK_SOURCES, **WEEK_MODELS}, name="fresh")
    (fresh / "models" / "hourly.sql").write_text((root / "models" / "hourly.sql").read_text())
    os.symlink(root / "data", fresh / "data")
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "fresh-home"))
    again = load_project(fresh)
    fresh_instance = open_instance(again.settings.dagster_home)
    report = Runner(again, fresh_instance, build_definitions(again)).run(again.ordered(), auto=True, now=hour)
    assert report.success
    for name in ("s.hourly", "s.daily", "s.weekly", "s.both", "s.total"):
        table = name.replace(".", "/")
        assert table_rows(f"{project.settings.warehouse}/{table}") == table_rows(
            f"{again.settings.warehouse}/{table}"
        ), name
    # The day without rows is recorded as done and holds no row; the quiet hours likewise.
    days = {row[0] for row in table_rows(f"{project.settings.warehouse}/s/daily")}
    assert datetime(2024, 1, 3).date() not in days and datetime(2024, 1, 4).date() in days
    hourly_keys = instance.get_materialized_partitions(dg.AssetKey(["s", "hourly"]))
    assert "2024-01-03-12:00" in hourly_keys and "2024-01-02-02:00" in hourly_keys
    print(f"{len(auto.requested)} runs over {tick} ticks")


def test_run_auto_after_a_changed_upstream_recomputes_every_downstream_interval(env, capsys, spark):
    from incremental_assets import cli

    project, instance, defs = env
    now = utc(2024, 1, 3)
    assert Runner(project, instance, defs).run(project.ordered(), auto=True, now=now).success
    root = project.directory
    hourly = root / "models" / "hourly.sql"
    hourly.write_text(hourly.read_text().replace("COUNT(*) AS n", "COUNT(*) * 2 AS n"))
    project = load_project(root)
    defs = build_definitions(project)
    report = Runner(project, instance, defs).run(project.ordered(), auto=True, now=now)
    assert report.success
    ran = [(r.model, str(r.window) if r.window else "full") for r in report.records]
    assert ran == [
        ("s.hourly", "[2024-01-01, 2024-01-03)"),  # rebuilt from its start, one commit
        ("s.daily", "[2024-01-01, 2024-01-03)"),  # stale: batch_size 2
        ("s.total", "full"),
    ]
    assert table_rows(f"{project.settings.warehouse}/s/daily") == [
        (datetime(2024, 1, 1).date(), 48),
        (datetime(2024, 1, 2).date(), 48),
    ]
    assert table_rows(f"{project.settings.warehouse}/s/total") == [(96,)]
    # Nothing is stale any more, and status says so.
    assert cli.main(["status", "--until", "2024-01-03", "--project", str(root)]) == 0
    assert "STALE" not in capsys.readouterr().out


def test_the_automation_sensor_marks_a_killed_cli_run_failed(env):
    import socket
    import subprocess

    from dagster._core.storage.dagster_run import DagsterRun

    from incremental_assets.orchestration import tags

    project, instance, defs = env
    gone = subprocess.Popen(["true"])
    gone.wait()
    alive = subprocess.Popen(["sleep", "120"])  # a live process: its run must stay as it is
    try:
        runs = {}
        for name, pid in (("dead", gone.pid), ("alive", alive.pid)):
            run = DagsterRun(
                job_name="__ASSET_JOB",
                status=dg.DagsterRunStatus.STARTED,
                tags={tags.PID_TAG: str(pid), tags.HOST_TAG: socket.gethostname(), tags.LAUNCHED_BY_TAG: "cli"},
            )
            runs[name] = instance.add_run(run).run_id
        sensor = next(s for s in defs.sensors if s.name == SENSOR_NAME)
        sensor.evaluate_tick(dg.build_sensor_context(instance=instance, definitions=defs))
    finally:
        alive.kill()
        alive.wait()
    assert instance.get_run_by_id(runs["dead"]).status == dg.DagsterRunStatus.FAILURE
    assert instance.get_run_by_id(runs["alive"]).status == dg.DagsterRunStatus.STARTED
    messages = [e.message for e in instance.all_logs(runs["dead"])]
    assert any(f"(pid {gone.pid}) died without finishing it" in m for m in messages)


def test_an_edited_model_file_is_planned_on_the_next_tick_with_its_category_and_what_each_model_waits_for(
    env, monkeypatch, spark
):
    """The definitions stay those loaded before the edit (no reload): the sensor sees the files."""
    from dagster._core.storage.dagster_run import DagsterRun

    from incremental_assets.orchestration import tags as run_tags
    from incremental_assets.orchestration.checks import DEFINITION_CHECK

    project, instance, defs = env
    auto = Automation(defs, instance, monkeypatch)
    now = utc(2024, 1, 3, 6)
    auto.settle(now)
    assert auto.tick(now) == [] and auto.last_skip == "every model is up to date"
    hourly = project.directory / "models" / "hourly.sql"
    text = hourly.read_text()

    # A broken edit launches nothing and says where the file is wrong.
    hourly.write_text(text.replace("GROUP BY 1", "GROUP BY 1 )"))
    assert auto.tick(now) == []
    assert "the edited project does not load" in auto.last_skip and "hourly.sql:" in auto.last_skip

    # A breaking edit and a new model: the edited model is rebuilt, in the same tick; the new model is
    # not known to the running code location yet and waits for it to reload.
    hourly.write_text(text.replace("COUNT(*) AS n", "COUNT(*) * 2 AS n"))
    (project.directory / "models" / "extra.sql").write_text(
        "MODEL (name s.extra, kind FULL);\nSELECT COUNT(*) AS n FROM raw.events"
    )
    data = auto.sense(now)
    auto.cursor = data.cursor
    assert [(r.asset_selection[0].to_user_string(), r.tags[START], r.tags[END]) for r in data.run_requests] == [
        ("s/hourly", "2024-01-01-00:00", "2024-01-03-05:00")
    ]
    request = data.run_requests[0]
    assert "definition changed" in request.tags[run_tags.REASON_TAG]
    # The changed mark at asset level: a failed definition_current check carrying the plan's category.
    (mark,) = data.asset_events
    assert (mark.asset_key, mark.check_name, mark.passed) == (dg.AssetKey(["s", "hourly"]), DEFINITION_CHECK, False)
    assert mark.metadata["category"].value == "breaking"
    # Reported once per definition.
    assert auto.sense(now).asset_events == []

    # While the rebuild runs, every tick says what each model waits for, never "up to date".
    run = DagsterRun(
        job_name=request.job_name,
        status=dg.DagsterRunStatus.STARTED,
        asset_selection=frozenset(request.asset_selection),
        tags={
            **request.tags,
            run_tags.PID_TAG: str(os.getpid()),
            run_tags.HOST_TAG: __import__("socket").gethostname(),
        },
    )
    run_id = instance.add_run(run).run_id
    assert auto.tick(now, run=False) == []
    skip = auto.last_skip
    assert f"s.hourly: rebuilding in run {run_id[:8]}" in skip
    assert f"s.daily waits for s.hourly: rebuilding in run {run_id[:8]}" in skip
    assert "s.total waits for s.daily" in skip
    assert "s.extra is new: waits for the code location to reload" in skip
    assert "up to date" not in skip
    instance.delete_run(run_id)

    # The rebuild itself reports the check passed; then the downstream models follow. The runs import
    # the code afresh; the sensor keeps its definitions.
    (project.directory / "models" / "extra.sql").unlink()
    auto.run_defs = build_definitions(load_project(project.directory))
    assert auto.tick(now) == [("s/hourly", "2024-01-01-00:00", "2024-01-03-05:00")]
    records = instance.event_log_storage.get_asset_check_execution_history(
        dg.AssetCheckKey(dg.AssetKey(["s", "hourly"]), DEFINITION_CHECK), limit=1
    )
    assert records[0].event.dagster_event.event_specific_data.passed
    assert auto.tick(now) == [("s/daily+s/total", "2024-01-01", "2024-01-02")]
    assert auto.tick(now) == [] and auto.last_skip == "every model is up to date"
    assert auto.failed == []
    assert table_rows(f"{project.settings.warehouse}/s/total") == [(2 * 48,)]


def test_a_clock_pinned_ahead_of_the_machines_is_refused_with_the_fix_and_nothing_launched(env, monkeypatch):
    """Dagster's partitions end at the machine's clock: runs of intervals after it would fail, and be requested
    again on every tick. The sensor says so and launches nothing; a past instant plans as before."""
    from incremental_assets.model import clock

    project, instance, defs = env
    auto = Automation(defs, instance, monkeypatch)
    ahead = clock.wall_time() + timedelta(days=2)
    data = auto.sense(ahead)
    assert not data.run_requests
    assert CLOCK_ENV in data.skip_message and "ahead of this machine's clock" in data.skip_message
    assert "fix: set" in data.skip_message
    assert data.cursor is None  # the cursor is kept as it was
    assert auto.tick(utc(2024, 1, 3, 6), run=False) == [("s/hourly", "2024-01-01-00:00", "2024-01-03-05:00")]
