"""Hourly tables cut into one file per day: backfills, replaced hours, crashes, lost files, old tables.

A new table of an hourly model is partitioned by day (``ia_day``; ``ia_interval`` is a plain column of
its files). Every test runs the real CLI on a real Spark session, real Delta tables and a real Dagster
instance, and compares the table with a recompute from scratch of the same source data.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pytest
from deltalake import DeltaTable
from test_crash import killed_run

from incremental_assets import cli, delta
from incremental_assets.errors import StorageError
from incremental_assets.load.project import load_project
from incremental_assets.model.intervals import IntervalUnit, TimeWindow
from incremental_assets.orchestration.instance import open_instance
from incremental_assets.spark.inputs import read_table_window

from helpers import EVENTS_SOURCE, table_rows, utc, write_events

HOURLY = """
MODEL (name s.hourly, kind INCREMENTAL_BY_TIME_RANGE (time_column h), start '2024-01-01', cron '@hourly');
SELECT date_trunc('HOUR', ts) AS h, k, COUNT(*) AS n, SUM(v) AS v FROM raw.events WHERE ts BETWEEN @start_dt AND @end_dt
  GROUP BY 1, 2
"""
PER_HOUR = """
MODEL (name s.per_hour, kind INCREMENTAL_BY_TIME_RANGE (time_column h), start '2024-01-01', cron '@hourly');
SELECT h, SUM(n) AS n, COUNT(*) AS keys FROM s.hourly WHERE h BETWEEN @start_dt AND @end_dt GROUP BY h
"""
FILES = {"sources.yaml": EVENTS_SOURCE, "models/hourly.sql": HOURLY, "models/per_hour.sql": PER_HOUR}
TWO_DAYS = ["--start", "2024-01-01", "--end", "2024-01-03"]
HOUR_5 = ["--start", "2024-01-01T05:00", "--end", "2024-01-01T06:00"]
EVENTS = "data/events"


@pytest.fixture
def root(spark, make_project, tmp_path, monkeypatch):
    root = make_project(FILES)
    write_events(root / EVENTS, utc(2024, 1, 1), 48, per_hour=3)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("INCREMENTAL_ASSETS_HOURLY_FILES", raising=False)
    return root


def uri_of(root: Path, model: str = "s.hourly") -> str:
    return delta.table_uri(load_project(root).settings.warehouse, model)


def run(root: Path, *args: str) -> None:
    assert cli.main(["run", *args, "--project", str(root)]) == 0


def files_per_day(uri: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in delta.snapshot_files(uri):
        assert item.day is not None and item.interval is None
        out[item.day] = out.get(item.day, 0) + 1
    return out


def late_row(root: Path, hour: int) -> None:
    """One more event in ``hour`` of 2024-01-01, appended to the source."""
    ts = pa.array([utc(2024, 1, 1, hour, 59)], pa.timestamp("us", tz="UTC"))
    from deltalake import write_deltalake

    write_deltalake(
        str(root / EVENTS), pa.table({"ts": ts, "k": ["k0"], "v": pa.array([100], pa.int64())}), mode="append"
    )


def recompute(root: Path, tmp_path: Path, *args: str) -> list[tuple]:
    """The table a fresh warehouse and instance compute from the same source data in one run."""
    env = {"INCREMENTAL_ASSETS_WAREHOUSE": str(tmp_path / "fresh-wh"), "DAGSTER_HOME": str(tmp_path / "fresh-home")}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        run(root, "s.hourly", *args)
        return table_rows(delta.table_uri(str(tmp_path / "fresh-wh"), "s.hourly"))
    finally:
        for k, v in saved.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)


def row_counts(instance: dg.DagsterInstance, key: list[str]) -> dict[str, int]:
    """``dagster/partition_row_count`` of each partition's latest materialization."""
    records = instance.fetch_materializations(dg.AssetKey(key), limit=10_000).records
    out: dict[str, int] = {}
    for record in sorted(records, key=lambda r: r.storage_id):
        m = record.asset_materialization
        out[m.partition] = m.metadata["dagster/partition_row_count"].value
    return out


def test_a_backfill_writes_a_file_per_day_and_a_late_row_rewrites_only_its_day(root, tmp_path):
    run(root, "s.hourly", *TWO_DAYS)
    uri = uri_of(root)
    table = DeltaTable(uri)
    assert table.metadata().partition_columns == [delta.DAY_COLUMN]
    assert files_per_day(uri) == {"2024-01-01": 1, "2024-01-02": 1}  # 2 files, not 48
    counts = delta.interval_row_counts(uri)
    assert len(counts) == 48 and set(counts.values()) == {3}  # three keys each hour
    day2 = sorted(f.uri for f in delta.snapshot_files(uri) if f.day == "2024-01-02")

    def hour_5_k0(rows):
        return [r for r in rows if r[0].hour == 5 and r[0].day == 1 and r[1] == "k0"][0][2:]

    n, v = hour_5_k0(table_rows(uri))
    late_row(root, 5)
    run(root, "s.hourly", *HOUR_5)
    rows = table_rows(uri)
    assert rows == recompute(root, tmp_path, *TWO_DAYS)  # the day's 23 other hours kept their rows
    assert hour_5_k0(rows) == (n + 1, v + 100)
    assert sum(1 for r in rows if r[0].day == 1) == 24 * 3
    assert files_per_day(uri) == {"2024-01-01": 2, "2024-01-02": 1}  # the hour and the day's other hours
    assert sorted(f.uri for f in delta.snapshot_files(uri) if f.day == "2024-01-02") == day2  # untouched
    assert DeltaTable(uri).version() == table.version() + 1  # one commit

    instance = open_instance(load_project(root).settings.dagster_home)
    recorded = row_counts(instance, ["s", "hourly"])
    assert len(recorded) == 48 and recorded["2024-01-01-05:00"] == 3 and recorded["2024-01-01-04:00"] == 3
    latest = instance.fetch_materializations(dg.AssetKey(["s", "hourly"]), limit=1).records[0].asset_materialization
    assert (
        latest.partition == "2024-01-01-05:00" and latest.metadata["run_rows_written"].value == 3
    )  # not the 69 copied


def test_an_empty_hour_and_a_reader_of_one_hour(root, tmp_path, spark):
    run(root, "s.hourly", *TWO_DAYS)
    run(root, "s.per_hour", "--start", "2024-01-01T05:00", "--end", "2024-01-01T07:00")
    down = uri_of(root, "s.per_hour")
    assert table_rows(down) == [
        (utc(2024, 1, 1, 5).replace(tzinfo=None), 3, 3),
        (utc(2024, 1, 1, 6).replace(tzinfo=None), 3, 3),
    ]
    # A reader of two hours opens the one day file holding them and keeps exactly their rows.
    rows, files = read_table_window(spark, uri_of(root), TimeWindow(utc(2024, 1, 1, 5), utc(2024, 1, 1, 7)), "hour")
    assert files == 1 and sorted({r["h"].hour for r in rows.collect()}) == [5, 6] and rows.count() == 6
    assert "ia_interval" not in rows.columns and "ia_day" not in rows.columns

    # Hour 7 of day 1 loses its events at the source: replacing it leaves it empty, the day otherwise whole.
    events = DeltaTable(str(root / EVENTS)).to_pyarrow_table()
    hour = pa.compute.hour(events.column("ts"))
    day = pa.compute.day(events.column("ts"))
    keep = pa.compute.invert(pa.compute.and_(pa.compute.equal(hour, 7), pa.compute.equal(day, 1)))
    from deltalake import write_deltalake

    write_deltalake(str(root / EVENTS), events.filter(keep), mode="overwrite")
    run(root, "s.hourly", "--start", "2024-01-01T07:00", "--end", "2024-01-01T08:00")
    uri = uri_of(root)
    counts = delta.interval_row_counts(uri)
    assert "2024-01-01T07" not in counts and len(counts) == 47
    assert table_rows(uri) == recompute(root, tmp_path, *TWO_DAYS)
    instance = open_instance(load_project(root).settings.dagster_home)
    assert row_counts(instance, ["s", "hourly"])["2024-01-01-07:00"] == 0


def test_a_crash_between_staging_and_commit_leaves_the_old_table(root):
    run(root, "s.hourly", *TWO_DAYS)
    uri = uri_of(root)
    old, version = table_rows(uri), DeltaTable(uri).version()
    late_row(root, 5)
    assert killed_run(root, ["s.hourly", *HOUR_5], kill_at="staged") == -signal.SIGKILL
    assert table_rows(uri) == old and DeltaTable(uri).version() == version
    staged = [p for p in Path(uri).glob("run-*") if any(p.rglob("*.parquet"))]
    assert staged  # the day's copy was staged, never committed

    run(root, "s.hourly", *HOUR_5)
    assert len(table_rows(uri)) == len(old) and table_rows(uri) != old


def test_a_lost_day_file_is_24_lost_hours_and_only_they_are_recomputed(root, capsys):
    run(root, "s.hourly", *TWO_DAYS)
    uri = uri_of(root)
    clean = table_rows(uri)
    victim = [Path(f.uri.removeprefix("file://")) for f in delta.snapshot_files(uri) if f.day == "2024-01-02"]
    assert len(victim) == 1
    victim[0].unlink()

    capsys.readouterr()
    assert (
        cli.main(["status", "s.hourly", "--until", "2024-01-03", "--project", str(root)]) == 1
    )  # recorded hours absent from the table
    out = capsys.readouterr().out
    assert "s.hourly: NOT IN TABLE: [2024-01-02, 2024-01-03) recorded but absent" in out, out
    assert "s.hourly (hour): 24/48 intervals up to 2024-01-03" in out and "lost:    [2024-01-02, 2024-01-03)" in out
    assert cli.main(["run", "s.hourly", "--auto", "--end", "2024-01-03", "--project", str(root)]) == 0
    ran = [line for line in capsys.readouterr().out.splitlines() if "] s.hourly " in line]
    assert len(ran) == 1 and "[24/24 intervals" in ran[0] and "s.hourly [2024-01-02, 2024-01-03): ok" in ran[0], ran
    assert table_rows(uri) == clean


def test_a_table_with_one_file_per_hour_keeps_its_layout(root, tmp_path, monkeypatch):
    monkeypatch.setenv("INCREMENTAL_ASSETS_HOURLY_FILES", "hour")
    run(root, "s.hourly", *TWO_DAYS)
    uri = uri_of(root)
    assert DeltaTable(uri).metadata().partition_columns == [delta.PARTITION_COLUMN]
    assert len(delta.snapshot_files(uri)) == 48

    monkeypatch.delenv("INCREMENTAL_ASSETS_HOURLY_FILES")  # the default is a file per day, for new tables only
    late_row(root, 5)
    run(root, "s.hourly", *HOUR_5)
    assert DeltaTable(uri).metadata().partition_columns == [delta.PARTITION_COLUMN]
    assert len(delta.snapshot_files(uri)) == 48
    assert table_rows(uri) == recompute(root, tmp_path, *TWO_DAYS)
    run(root, "s.per_hour", "--start", "2024-01-01T05:00", "--end", "2024-01-01T06:00")
    assert table_rows(uri_of(root, "s.per_hour")) == [(utc(2024, 1, 1, 5).replace(tzinfo=None), 4, 3)]
    assert DeltaTable(uri_of(root, "s.per_hour")).metadata().partition_columns == [delta.DAY_COLUMN]  # a new table


def test_a_replace_refuses_when_the_files_it_copied_were_replaced_meanwhile(root):
    run(root, "s.hourly", *TWO_DAYS)
    uri = uri_of(root)
    window = TimeWindow(utc(2024, 1, 1, 6), utc(2024, 1, 1, 7))
    before = tuple(delta.copied_files(uri, window, IntervalUnit.HOUR, whole_days=False))
    assert len(before) == 1  # the day's file holds hour 6 and 23 others
    run(root, "s.hourly", *HOUR_5)  # another run rewrote that file since `before` was read
    staging = delta.new_staging_dir(uri)
    Path(staging).mkdir()
    mode = delta.ReplaceWindow(window, IntervalUnit.HOUR, by_day=True, copied_from=before)
    version = DeltaTable(uri).version()
    with pytest.raises(StorageError, match="another run replaced hours of the days of"):
        delta.commit_staged(uri, staging, delta.arrow_schema(uri), mode, metadata={"model": "s.hourly"})
    assert DeltaTable(uri).version() == version


def test_a_new_hour_is_added_without_rewriting_its_day(root, tmp_path, spark):
    run(root, "s.hourly", "--start", "2024-01-01", "--end", "2024-01-01T12:00")
    uri = uri_of(root)
    (morning,) = [f.uri for f in delta.snapshot_files(uri)]
    run(root, "s.hourly", "--start", "2024-01-01T12:00", "--end", "2024-01-01T13:00")
    files = sorted(f.uri for f in delta.snapshot_files(uri))
    assert len(files) == 2 and morning in files  # the morning's file is kept as it is: nothing copied
    noon, count = read_table_window(spark, uri, TimeWindow(utc(2024, 1, 1, 12), utc(2024, 1, 1, 13)), "hour")
    assert count == 1 and noon.count() == 3  # pruned to the new hour's file by the hours each file holds
    assert table_rows(uri) == recompute(root, tmp_path, "--start", "2024-01-01", "--end", "2024-01-01T13:00")


def test_the_setting_names_its_file_and_fix(tmp_path):
    from incremental_assets.errors import ModelFileError
    from incremental_assets.load.settings import load_settings

    (tmp_path / "incremental_assets.yaml").write_text("warehouse: w\nhourly_files: minute\n")
    with pytest.raises(ModelFileError) as err:
        load_settings(tmp_path, environ={})
    assert str(err.value).startswith(f"{tmp_path / 'incremental_assets.yaml'}:2: hourly_files must be day or hour")
    assert load_settings(tmp_path, environ={"INCREMENTAL_ASSETS_HOURLY_FILES": "hour"}).hourly_files == "hour"
    (tmp_path / "other").mkdir()
    assert load_settings(tmp_path / "other", environ={}).hourly_files == "day"


def test_a_new_column_on_a_replaced_hour_rewrites_its_day_with_the_new_columns(root):
    forward_only = HOURLY.replace("(time_column h)", "(time_column h, forward_only true)")
    (root / "models" / "hourly.sql").write_text(forward_only)
    run(root, "s.hourly", *TWO_DAYS)
    uri = uri_of(root)
    version = DeltaTable(uri).version()
    (root / "models" / "hourly.sql").write_text(forward_only.replace("SUM(v) AS v", "SUM(v) AS v, MAX(v) AS top"))
    run(root, "s.hourly", *HOUR_5)
    assert DeltaTable(uri).version() == version + 1
    assert [f.name for f in delta.arrow_schema(uri)] == ["h", "k", "n", "v", "top"]
    rows = table_rows(uri)
    assert len(rows) == 48 * 3
    assert all((r[4] is not None) == (r[0].day == 1 and r[0].hour == 5) for r in rows)  # older rows read NULL
    assert files_per_day(uri) == {"2024-01-01": 2, "2024-01-02": 1}


def test_a_blocking_audit_sees_the_replaced_hour_only_not_the_copied_hours(root, capsys):
    run(root, "s.hourly", *TWO_DAYS)
    # Each key once per hour: over a whole day the keys repeat, so this fails if copied hours are audited.
    audited = HOURLY.replace("(time_column h)", "(time_column h, forward_only true)").replace(
        "cron '@hourly')", "cron '@hourly', audits (unique_values(columns := [k])))"
    )
    (root / "models" / "hourly.sql").write_text(audited)
    late_row(root, 5)
    run(root, "s.hourly", *HOUR_5)
    counts = delta.interval_row_counts(uri_of(root))
    assert counts["2024-01-01T05"] == 3 and len(counts) == 48
    # Over two hours of one day the keys do repeat: the audit blocks the commit.
    capsys.readouterr()
    assert (
        cli.main(
            ["run", "s.hourly", "--start", "2024-01-01T05:00", "--end", "2024-01-01T07:00", "--project", str(root)]
        )
        == 1
    )
    assert "blocking audit failed, nothing was committed" in capsys.readouterr().out


@pytest.mark.parametrize("layout", ["day", "hour"])
def test_a_changed_model_is_rebuilt_in_the_layout_its_table_has(root, tmp_path, monkeypatch, layout):
    monkeypatch.setenv("INCREMENTAL_ASSETS_HOURLY_FILES", layout)
    run(root, "s.hourly", *TWO_DAYS)
    uri = uri_of(root)
    columns = DeltaTable(uri).metadata().partition_columns
    monkeypatch.setenv(
        "INCREMENTAL_ASSETS_HOURLY_FILES", "hour" if layout == "day" else "day"
    )  # the setting applies to new tables only
    (root / "models" / "hourly.sql").write_text(HOURLY.replace("SUM(v) AS v", "SUM(v) * 2 AS v"))
    run(root, "s.hourly", "--auto", "--end", "2024-01-03")
    assert (
        DeltaTable(uri).metadata().partition_columns
        == columns
        == [delta.DAY_COLUMN if layout == "day" else delta.PARTITION_COLUMN]
    )
    assert table_rows(uri) == recompute(root, tmp_path, *TWO_DAYS)
    assert len(delta.snapshot_files(uri)) == (2 if layout == "day" else 48)
