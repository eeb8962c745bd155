"""Maintenance: compaction of small files (no row changes, nothing recorded), vacuum, the purge of old runs,
from the CLI and as Dagster jobs on the project's schedules.

Real Spark, real Delta tables and a real Dagster instance: hourly cycles of ``run --auto`` with empty and
late hours, then maintenance, then everything a user relies on checked again.
"""

from __future__ import annotations

import importlib
import json
import threading
import time
from datetime import datetime, timedelta
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from incremental_assets import cli, delta
from incremental_assets.load.project import load_project
from incremental_assets.orchestration.build_definitions import build_definitions
from incremental_assets.orchestration.instance import open_instance
from incremental_assets.orchestration.maintenance import JOB_NAMES, purge_runs
from incremental_assets.orchestration.sensors import SENSOR_NAME

from helpers import EVENTS_SOURCE, utc

compact_module = importlib.import_module("incremental_assets.delta.compact")

HOURLY = """
MODEL (name s.hourly, kind INCREMENTAL_BY_TIME_RANGE (time_column h), start '2024-01-01', cron '@hourly');
SELECT date_trunc('HOUR', ts) AS h, k, COUNT(*) AS n, SUM(v) AS v FROM raw.events WHERE ts BETWEEN @start_dt AND @end_dt
  GROUP BY 1, 2
"""
DAILY = """
MODEL (name s.daily, kind INCREMENTAL_BY_TIME_RANGE (time_column d), start '2024-01-01', cron '@daily');
SELECT date_trunc('DAY', h) AS d, SUM(n) AS n FROM s.hourly WHERE h BETWEEN @start_dt AND @end_dt GROUP BY 1
"""
FILES = {"sources.yaml": EVENTS_SOURCE, "models/hourly.sql": HOURLY, "models/daily.sql": DAILY}
EVENTS = "data/events"
EMPTY_HOURS = {utc(2024, 1, 1, 20), utc(2024, 1, 1, 21)}
MODELS = ("s.hourly", "s.daily")


def events(start: datetime, hours: int, *, minute: int = 0, mode: str = "append") -> pa.Table:
    ts = [start + timedelta(hours=h, minutes=minute + m * 20) for h in range(hours) for m in range(3)]
    ts = [t for t in ts if t.replace(minute=0) not in EMPTY_HOURS]
    return pa.table(
        {
            "ts": pa.array(ts, pa.timestamp("us", tz="UTC")),
            "k": [f"k{i % 3}" for i in range(len(ts))],
            "v": pa.array([i % 7 for i in range(len(ts))], pa.int64()),
        }
    )


@pytest.fixture
def root(spark, make_project, tmp_path, monkeypatch):
    root = make_project(FILES)
    write_deltalake(str(root / EVENTS), events(utc(2024, 1, 1), 36), mode="overwrite")
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("INCREMENTAL_ASSETS_HOURLY_FILES", raising=False)
    return root


def main(root: Path, *args: str) -> int:
    return cli.main([*args, "--project", str(root)])


def uri_of(root: Path, model: str = "s.hourly") -> str:
    return delta.table_uri(load_project(root).settings.warehouse, model)


def files_per_day(uri: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in delta.snapshot_files(uri):
        out[item.day or item.interval or ""] = out.get(item.day or item.interval or "", 0) + 1
    return out


def rows_by_interval(uri: str) -> dict[str, list]:
    out: dict[str, list] = {}
    for row in DeltaTable(uri).to_pyarrow_table().to_pylist():
        out.setdefault(row["ia_interval"], []).append(
            tuple(sorted((k, str(v)) for k, v in row.items() if k != "ia_day"))
        )
    return {k: sorted(v) for k, v in out.items()}


def materializations(instance: dg.DagsterInstance) -> int:
    return sum(len(instance.fetch_materializations(dg.AssetKey(m.split(".")), limit=10_000).records) for m in MODELS)


def hourly_cycles(root: Path) -> None:
    """A first run up to 18:00, then one ``run --auto`` per hour to 02:00 the next day, a late row for
    01:00 of the first day arriving on the way (rewritten by a scoped run) and two empty hours."""
    assert main(root, "run", "--auto", "--end", "2024-01-01T18:00") == 0
    for hour in range(19, 27):
        if hour == 23:
            write_deltalake(str(root / EVENTS), events(utc(2024, 1, 1, 1), 1, minute=7), mode="append")
            assert main(root, "run", "s.hourly", "--start", "2024-01-01T01:00", "--end", "2024-01-01T02:00") == 0
        assert main(root, "run", "--auto", "--end", (utc(2024, 1, 1) + timedelta(hours=hour)).isoformat()) == 0


def only_data_change_false(uri: str, version: int) -> bool:
    with open(f"{uri}/_delta_log/{version:020d}.json", encoding="utf-8") as handle:
        actions = [json.loads(line) for line in handle if line.strip()]
    files = [a.get("add") or a.get("remove") for a in actions if "add" in a or "remove" in a]
    return bool(files) and all(f["dataChange"] is False for f in files)


def test_hourly_cycles_then_maintenance_leave_one_file_per_complete_day_and_every_table_as_it_was(
    root, capsys, monkeypatch
):
    hourly_cycles(root)
    uri, daily = uri_of(root), uri_of(root, "s.daily")
    instance = open_instance(load_project(root).settings.dagster_home)
    before = {m: rows_by_interval(uri_of(root, m)) for m in MODELS}
    recorded, runs = materializations(instance), instance.get_runs_count()
    assert files_per_day(uri)["2024-01-01"] > 3  # a backfill file (rewritten by the late hour), then one per hour
    day_two = files_per_day(uri)["2024-01-02"]
    defs = build_definitions(root)
    sensor = next(s for s in defs.sensors if s.name == SENSOR_NAME)
    monkeypatch.setenv("INCREMENTAL_ASSETS_CLOCK", "2024-01-02T02:00:00+00:00")
    cursor = sensor.evaluate_tick(dg.build_sensor_context(instance=instance, definitions=defs)).cursor

    assert main(root, "maintain", "--compact", "--dry-run") == 0
    assert "(dry run) s.hourly: compacted" in capsys.readouterr().out and files_per_day(uri)["2024-01-01"] > 3
    version = DeltaTable(uri).version()
    assert main(root, "maintain", "--compact") == 0
    assert "s.hourly: compacted" in capsys.readouterr().out
    # The complete day is one file; the day still being filled is left alone; no row of any interval changed.
    assert files_per_day(uri) == {"2024-01-01": 1, "2024-01-02": day_two}
    assert DeltaTable(uri).version() == version + 1 and only_data_change_false(uri, version + 1)
    assert {m: rows_by_interval(uri_of(root, m)) for m in MODELS} == before
    assert delta.built_with(uri) == load_project(root).model("s.hourly").fingerprint
    # Nothing recorded, nothing to run, nothing for the sensor; verify and status green.
    assert materializations(instance) == recorded
    assert main(root, "verify") == 0 and main(root, "status") == 0
    assert main(root, "run", "--auto", "--end", "2024-01-02T02:00") == 0
    assert instance.get_runs_count() == runs and materializations(instance) == recorded
    assert not sensor.evaluate_tick(
        dg.build_sensor_context(instance=instance, cursor=cursor, definitions=defs)
    ).run_requests
    monkeypatch.delenv("INCREMENTAL_ASSETS_CLOCK")
    capsys.readouterr()

    # A late hour rewrites the compacted day; the Dagster job compacts it again, holding the table's pool.
    write_deltalake(str(root / EVENTS), events(utc(2024, 1, 1, 6), 1, minute=9), mode="append")
    assert main(root, "run", "s.hourly", "--start", "2024-01-01T06:00", "--end", "2024-01-01T07:00") == 0
    assert main(root, "run", "s.hourly", "--start", "2024-01-01T08:00", "--end", "2024-01-01T09:00") == 0
    assert files_per_day(uri)["2024-01-01"] > 1
    before = {m: rows_by_interval(uri_of(root, m)) for m in MODELS}
    recorded = materializations(instance)
    job = defs.resolve_job_def(JOB_NAMES["compact"])
    storage = instance.event_log_storage  # a run writing s.hourly holds its table's pool: the job waits for it
    assert storage.claim_concurrency_slot("table/s.hourly", "writer", "s__hourly").is_claimed
    done: list = []
    worker = threading.Thread(target=lambda: done.append(job.execute_in_process(instance=instance).success))
    worker.start()
    time.sleep(4)
    assert not done and files_per_day(uri)["2024-01-01"] > 1
    storage.free_concurrency_slot_for_step("writer", "s__hourly")
    worker.join(120)
    assert done == [True]
    assert files_per_day(uri)["2024-01-01"] == 1 and {m: rows_by_interval(uri_of(root, m)) for m in MODELS} == before
    assert materializations(instance) == recorded and main(root, "verify") == 0
    assert files_per_day(daily) == {"2024-01-01": 1}

    # The compacted file's content is recorded as a run's are: another file's bytes in its place are found.
    active = {Path(u.removeprefix("file://")) for u in DeltaTable(uri).file_uris()}
    (compacted,) = [p for p in Path(uri).glob("compact-*/**/*.parquet") if p in active]
    other = next(p for p in Path(uri).rglob("*.parquet") if p.stat().st_size != compacted.stat().st_size)
    data = other.read_bytes()
    compacted.write_bytes((data * (compacted.stat().st_size // len(data) + 1))[: compacted.stat().st_size])
    assert main(root, "verify") == 1
    assert "not what was committed" in capsys.readouterr().out


def test_a_compaction_whose_files_a_writer_replaced_meanwhile_commits_nothing_and_loses_nothing(
    root, monkeypatch, capsys
):
    assert main(root, "run", "--auto", "--end", "2024-01-01T02:00") == 0
    for hour in (3, 4):
        assert main(root, "run", "--auto", "--end", f"2024-01-01T0{hour}:00") == 0
    uri = uri_of(root)
    assert main(root, "run", "--auto", "--end", "2024-01-02T00:00") == 0
    rewrite = compact_module._rewrite

    def a_writer_meanwhile(*args, **kwargs):
        added = rewrite(*args, **kwargs)
        assert main(root, "run", "s.hourly", "--start", "2024-01-01T03:00", "--end", "2024-01-01T04:00") == 0
        return added

    monkeypatch.setattr(compact_module, "_rewrite", a_writer_meanwhile)
    result = delta.compact(uri, days={"2024-01-01"})
    version, before = DeltaTable(uri).version(), rows_by_interval(uri)
    assert result.skipped and result.version is None and "replaced some of those files" in result.summary()
    assert not list(Path(uri).glob("compact-*/**/*.parquet"))  # the rewritten file is gone, the table's are all there
    assert main(root, "verify", "--files") == 0
    monkeypatch.setattr(compact_module, "_rewrite", rewrite)
    assert delta.compact(uri, days={"2024-01-01"}).version == version + 1
    assert rows_by_interval(uri) == before and files_per_day(uri) == {"2024-01-01": 1}


def test_maintenance_jobs_and_schedules_follow_the_setting_and_purge_keeps_each_partitions_latest_run(
    root, tmp_path, capsys
):
    (root / "incremental_assets.yaml").write_text(
        'maintenance: {compact: "5 * * * *", vacuum: null, purge_runs: "0 4 * * 0", run_retention_days: 3}\n'
    )
    defs = build_definitions(root)
    schedules = {s.name: s for s in defs.schedules}
    assert schedules["maintenance_compact_schedule"].cron_schedule == "5 * * * *"
    assert (
        "maintenance_vacuum_schedule" not in schedules
        and schedules["maintenance_purge_runs_schedule"].cron_schedule == "0 4 * * 0"
    )
    assert schedules["maintenance_compact_schedule"].default_status == dg.DefaultScheduleStatus.RUNNING
    assert {JOB_NAMES["vacuum"], JOB_NAMES["purge_runs"]} <= {j.name for j in defs.resolve_all_job_defs()}

    assert main(root, "run", "--auto", "--end", "2024-01-01T06:00") == 0
    for _ in range(2):  # the same hour twice: the first run's record of it is superseded
        assert main(root, "run", "s.hourly", "--start", "2024-01-01T02:00", "--end", "2024-01-01T03:00") == 0
    instance = open_instance(load_project(root).settings.dagster_home)
    runs = [r.run_id for r in instance.get_runs()]
    superseded = runs[1]
    assert main(root, "maintain", "--purge-runs", "--older-than-days", "1", "--dry-run") == 0
    assert "would delete 0 run(s)" in capsys.readouterr().out  # nothing is that old
    result = purge_runs(instance, timedelta(0), now=datetime.now().astimezone() + timedelta(seconds=1))
    assert result.runs == (superseded,) and result.kept == len(runs) - 1
    assert instance.get_run_by_id(superseded) is None
    assert main(root, "verify") == 0 and main(root, "status") == 0
    assert main(root, "run", "--auto", "--end", "2024-01-01T06:00") == 0
    assert instance.get_runs_count() == len(runs) - 1  # nothing looks missing after the purge
    assert main(root, "maintain", "--vacuum") == 0


def test_a_bad_maintenance_setting_names_the_file_and_the_fix(make_project, capsys):
    root = make_project({**FILES, "incremental_assets.yaml": "maintenance:\n  compact: every hour\n"})
    assert main(root, "validate") == 2
    err = capsys.readouterr().err
    assert "incremental_assets.yaml:1: maintenance.compact must be a cron or null" in err and "fix: e.g." in err
