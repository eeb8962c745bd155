"""A daemon's tick of the automation sensor that finds nothing to launch watches until the daemon's next look:
new source data (a Delta commit, a new, rewritten or growing file), a run queued or ended, or the hour turning
makes it plan again at once, so runs are requested a moment after the news, not at the next look 5 s on."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from dagster._core.utils import make_new_run_id
from test_dagster import MODELS

from incremental_assets.model.settings import CLOCK_ENV, SENSOR_WATCH_ENV
from incremental_assets.orchestration.sensors import SENSOR_NAME
from incremental_assets.orchestration.tick_watch import CLOCK, RUNS, TickWatch, from_daemon

from helpers import EVENTS_SOURCE, utc, write_events

CLICKS_SOURCE = """\
- name: raw.clicks
  location: data/clicks
  format: parquet
  time_column: ts
  interval_unit: hour
"""


def _clicks(path, start: datetime, hours: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    ts = [start + timedelta(hours=h) for h in range(hours)]
    pq.write_table(pa.table({"ts": pa.array(ts, pa.timestamp("us", tz="UTC"))}), path)


@pytest.fixture
def env(make_project, dagster_env):
    root = make_project(
        {"sources.yaml": EVENTS_SOURCE + CLICKS_SOURCE, "models/hourly.sql": MODELS["models/hourly.sql"]}
    )
    write_events(root / "data" / "events", utc(2024, 1, 1), 3)
    _clicks(root / "data" / "clicks" / "day=2024-01-01" / "a.parquet", utc(2024, 1, 1), 3)
    return root, *dagster_env(root)


def _news(watch: TickWatch, change) -> str | None:
    """What a watch reports after ``change`` is made (None: nothing within 3 s)."""
    seen = watch.look()
    change()
    changed, _ = watch.wait(seen, time.monotonic() + 3)
    return changed


def test_each_kind_of_news_ends_the_wait_and_nothing_else_does(env):
    root, project, instance, _ = env
    clock = [utc(2024, 1, 1, 0, 30)]
    watch = TickWatch(project, instance, lambda: clock[0])
    clicks = root / "data" / "clicks"

    began = time.monotonic()
    assert watch.wait(watch.look(), began + 1.0)[0] is None  # nothing happens: it waits until the end
    assert time.monotonic() - began >= 0.8

    assert _news(watch, lambda: write_events(root / "data" / "events", utc(2024, 1, 1, 3), 1, mode="append")) == (
        "raw.events"
    )
    assert _news(watch, lambda: _clicks(clicks / "day=2024-01-01" / "b.parquet", utc(2024, 1, 1, 3), 1)) == "raw.clicks"
    # The same file rewritten with more rows (or still being written) is news too.
    assert _news(watch, lambda: _clicks(clicks / "day=2024-01-01" / "b.parquet", utc(2024, 1, 1, 3), 2)) == "raw.clicks"
    # Two sources written one after another are reported together, once the looks hold still.
    seen = watch.look()
    write_events(root / "data" / "events", utc(2024, 1, 1, 4), 1, mode="append")
    later = threading.Timer(0.3, lambda: _clicks(clicks / "day=2024-01-01" / "c.parquet", utc(2024, 1, 1, 4), 1))
    later.start()
    try:
        assert watch.wait(seen, time.monotonic() + 3)[0] == "raw.clicks, raw.events"
    finally:
        later.join()
    # A tick's first look: nothing to compare with on the first tick; a source changed since the last tick's
    # last look is reported once it holds still; nothing changed, nothing reported.
    assert watch.first_look({})[0] is None
    last = watch.look()
    write_events(root / "data" / "events", utc(2024, 1, 1, 5), 1, mode="append")
    later = threading.Timer(0.2, lambda: _clicks(clicks / "day=2024-01-01" / "d.parquet", utc(2024, 1, 1, 5), 1))
    later.start()
    try:
        changed, last = watch.first_look(last)
    finally:
        later.join()
    assert changed == "raw.clicks, raw.events"
    assert watch.first_look(last)[0] is None
    # Files Spark does not read are not.
    assert _news(watch, lambda: (clicks / "_SUCCESS").write_text("")) is None
    assert _news(watch, lambda: (clicks / "day=2024-01-01" / ".b.parquet.crc").write_text("x")) is None
    # A run started (or ending) and the hour turning; minutes passing within the hour are not.
    run = dg.DagsterRun(job_name="some_job", run_id=make_new_run_id(), status=dg.DagsterRunStatus.STARTED)
    assert _news(watch, lambda: instance.add_run(run)) == RUNS
    assert _news(watch, lambda: instance.report_run_canceled(run)) == RUNS
    assert _news(watch, lambda: clock.__setitem__(0, utc(2024, 1, 1, 0, 59))) is None
    assert _news(watch, lambda: clock.__setitem__(0, utc(2024, 1, 1, 1))) == CLOCK


def _daemon_context(instance, defs, cursor=None) -> dg.SensorEvaluationContext:
    """A context as the daemon's tick builds it: its captured logs named after the tick's id."""
    return dg.SensorEvaluationContext(
        instance_ref=None, instance=instance, definitions=defs, cursor=cursor, log_key=["repo", SENSOR_NAME, "17"]
    )


def test_a_daemon_tick_plans_again_when_the_hour_turns_and_others_do_not_wait(env, monkeypatch, tmp_path):
    _, _, instance, defs = env
    sensor = next(s for s in defs.sensors if s.name == SENSOR_NAME)
    pinned = tmp_path / "clock"
    pinned.write_text(utc(2024, 1, 1, 0, 30).isoformat())
    monkeypatch.setenv(CLOCK_ENV, f"@{pinned}")
    monkeypatch.setenv(SENSOR_WATCH_ENV, "6")

    # Outside the daemon (a test's context, the UI's test button) an evaluation does not watch.
    assert not from_daemon(dg.build_sensor_context(instance=instance, definitions=defs))
    began = time.monotonic()
    outside = sensor.evaluate_tick(dg.build_sensor_context(instance=instance, definitions=defs))
    assert not outside.run_requests and time.monotonic() - began < 6

    # The daemon's tick at 00:30 has no complete hour to compute; the hour turns 0.5 s into it.
    assert from_daemon(_daemon_context(instance, defs))
    turn = threading.Timer(0.5, lambda: pinned.write_text(utc(2024, 1, 1, 1, 30).isoformat()))
    turn.start()
    try:
        data = sensor.evaluate_tick(_daemon_context(instance, defs, outside.cursor))
    finally:
        turn.join()
    ranges = [
        (r.tags["dagster/asset_partition_range_start"], r.tags["dagster/asset_partition_range_end"])
        for r in data.run_requests
    ]
    assert ranges == [("2024-01-01-00:00", "2024-01-01-00:00")]

    # Nothing new: the tick watches until its time is up, then says why it launched nothing.
    monkeypatch.setenv(SENSOR_WATCH_ENV, "2")
    instance.add_run(dg.DagsterRun(job_name="j", run_id=make_new_run_id(), status=dg.DagsterRunStatus.CANCELED))
    pinned.write_text(utc(2024, 1, 1, 0, 40).isoformat())
    began = time.monotonic()
    idle = sensor.evaluate_tick(_daemon_context(instance, defs, data.cursor))
    assert not idle.run_requests and idle.skip_message and time.monotonic() - began >= 1.5
