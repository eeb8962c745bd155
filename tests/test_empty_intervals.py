"""Intervals without rows are ordinary intervals: every run over them succeeds, replaces them with nothing,
is recorded as materialized and reports 0 rows, with or without audits, however the run was launched.

The source is irregular on purpose: quiet night hours, a day without any row in the middle of the data,
and intervals past its end.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import dagster as dg
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from incremental_assets import cli
from incremental_assets.load.project import load_project
from incremental_assets.model.intervals import TimeWindow
from incremental_assets.model.settings import CLOCK_ENV
from incremental_assets.orchestration.build_definitions import build_definitions
from incremental_assets.orchestration.checks import DEFINITION_CHECK
from incremental_assets.orchestration.instance import open_instance
from incremental_assets.orchestration.runner import Runner
from incremental_assets.orchestration.schedules import job_name
from incremental_assets.orchestration.sensors import SENSOR_NAME
from incremental_assets.orchestration.status import model_status

from helpers import EVENTS_SOURCE, table_rows, table_uri, utc

START, END = "dagster/asset_partition_range_start", "dagster/asset_partition_range_end"
ROWS = "dagster/partition_row_count"

HOURLY = """
    MODEL (name s.hourly, kind INCREMENTAL_BY_TIME_RANGE (time_column ts), start '2024-01-01', interval_unit hour,
           audits (not_null(columns := [ts, k]), unique_values(columns := [ts])),
           assertions (accepted_range(column := v, min_v := 0, max_v := 100, blocking := false)));
    SELECT ts, k, v FROM raw.events WHERE ts BETWEEN @start_dt AND @end_dt
"""

# Daily over the hourly model: the hourly -> daily bridge, with blocking and non-blocking audits.
DAILY = """
    MODEL (name s.daily, kind INCREMENTAL_BY_TIME_RANGE (time_column ds), start '2024-01-01',
           audits (not_null(columns := [ds, k]), accepted_range(column := n, min_v := 1, max_v := 24)),
           assertions (forall(criteria := [n > 0], blocking := false)));
    SELECT CAST(ts AS DATE) AS ds, k, COUNT(*) AS n, SUM(v) AS total FROM s.hourly
    WHERE ts BETWEEN @start_dt AND @end_dt GROUP BY CAST(ts AS DATE), k
"""

# Daily straight from the source, without any audit.
PLAIN = """
    MODEL (name s.plain, kind INCREMENTAL_BY_TIME_RANGE (time_column ds), start '2024-01-01');
    SELECT CAST(ts AS DATE) AS ds, COUNT(*) AS n FROM raw.events WHERE ts BETWEEN @start_dt AND @end_dt GROUP BY 1
"""

# Hourly, and never has a row: every window it runs is empty.
LARGE = """
    MODEL (name s.large, kind INCREMENTAL_BY_TIME_RANGE (time_column ts), start '2024-01-01', interval_unit hour,
           audits (not_null(columns := [ts])));
    SELECT ts, v FROM raw.events WHERE ts BETWEEN @start_dt AND @end_dt AND v > 100
"""

TIME_MODELS = {"models/hourly.sql": HOURLY, "models/daily.sql": DAILY, "models/plain.sql": PLAIN}

# 2024-01-01: every hour but the quiet 06:00-08:59; 2024-01-02: nothing; 2024-01-03: every hour; then the data ends.
DAY_1 = [utc(2024, 1, 1, h) for h in range(24) if not 6 <= h < 9]
DAY_3 = [utc(2024, 1, 3, h) for h in range(24)]


def write_stamps(path, stamps: list[datetime], *, mode: str = "overwrite") -> None:
    table = pa.table(
        {
            "ts": pa.array(stamps, pa.timestamp("us", tz="UTC")),
            "k": pa.array([f"k{i % 3}" for i in range(len(stamps))], pa.string()),
            "v": pa.array([i % 7 for i in range(len(stamps))], pa.int64()),
        }
    )
    write_deltalake(str(path), table, mode=mode)


@pytest.fixture
def env(make_project, dagster_env):
    def build(models: dict[str, str] = TIME_MODELS, extra: dict[str, str] | None = None):
        root = make_project({"sources.yaml": EVENTS_SOURCE, **models, **(extra or {})})
        write_stamps(root / "data" / "events", DAY_1 + DAY_3)
        return dagster_env(root)

    return build


def asset_key(name: str) -> dg.AssetKey:
    return dg.AssetKey(name.split("."))


def partition_statuses(defs, instance, name: str, keys: list[str]) -> dict[str, str | None]:
    partitions = defs.resolve_assets_def(asset_key(name)).partitions_def
    statuses = instance.get_status_by_partition(asset_key(name), keys, partitions) or {}
    return {k: (statuses.get(k).value if statuses.get(k) is not None else None) for k in keys}


def hour_keys(start: datetime, end: datetime) -> list[str]:
    out, at = [], start
    while at < end:
        out.append(at.strftime("%Y-%m-%d-%H:%M"))
        at += timedelta(hours=1)
    return out


def day_keys(start: datetime, end: datetime) -> list[str]:
    return [(start + timedelta(days=d)).strftime("%Y-%m-%d") for d in range((end - start).days)]


def materialization(instance, name: str, partition: str | None = None) -> dict:
    """The metadata of the latest materialization of ``name`` (of one partition when given)."""
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=asset_key(name), asset_partitions=[partition] if partition else None), limit=1
    ).records
    assert records, f"{name} {partition or ''} was never materialized"
    return {k: v.value for k, v in records[0].asset_materialization.metadata.items()}


def latest_checks(instance, defs, name: str) -> dict[str, bool]:
    """Whether each of the model's audits passed in its latest evaluation (every audit must have one);
    ``definition_current`` (whether the table holds the current definition) is not an audit of rows."""
    out = {}
    for spec in defs.resolve_assets_def(asset_key(name)).check_specs:
        if spec.name == DEFINITION_CHECK:
            continue
        records = instance.event_log_storage.get_asset_check_execution_history(
            dg.AssetCheckKey(asset_key(name), spec.name), limit=1
        )
        assert records and records[0].event is not None, f"{name}: check {spec.name} was not evaluated"
        evaluation = records[0].event.dagster_event.event_specific_data
        assert evaluation.metadata["failing_rows"].value == 0, (name, spec.name, evaluation.metadata)
        out[spec.name] = evaluation.passed
    return out


def assert_all_checks_passed(instance, defs, name: str, expected: int) -> None:
    passed = latest_checks(instance, defs, name)
    assert len(passed) == expected and all(passed.values()), (name, passed)


def days(rows: list[tuple]) -> set[str]:
    return {str(r[0])[:10] for r in rows}


def test_cli_runs_over_quiet_hours_an_empty_day_and_past_the_end_of_the_data(env, spark, capsys):
    project, instance, defs = env()
    runner = Runner(project, instance, defs)
    hourly, daily, plain = project.model("s.hourly"), project.model("s.daily"), project.model("s.plain")

    # The very first window of a model can be empty: the quiet hours (with audits), a day without rows (without).
    first = runner.run([hourly], start=utc(2024, 1, 1, 6), end=utc(2024, 1, 1, 9))
    assert first.success, [r.error for r in first.records]
    assert [r.rows for r in first.records] == [0]
    assert (
        DeltaTable(table_uri(project, "s.hourly")).file_uris() == []
        and table_rows(table_uri(project, "s.hourly")) == []
    )
    assert_all_checks_passed(instance, defs, "s.hourly", 3)
    empty_day = runner.run([plain], start=utc(2024, 1, 2), end=utc(2024, 1, 3))
    assert empty_day.success and [r.rows for r in empty_day.records] == [0], [r.error for r in empty_day.records]

    # Four days in one command: data, a day without rows, data, and a day past the end of the data.
    report = runner.run([hourly, daily, plain], start=utc(2024, 1, 1), end=utc(2024, 1, 5))
    assert report.success, [r.error for r in report.records]
    for name in ("s.daily", "s.plain"):
        assert set(partition_statuses(defs, instance, name, day_keys(utc(2024, 1, 1), utc(2024, 1, 5))).values()) == {
            "MATERIALIZED"
        }
    assert set(
        partition_statuses(defs, instance, "s.hourly", hour_keys(utc(2024, 1, 1), utc(2024, 1, 5))).values()
    ) == {"MATERIALIZED"}
    for model in (hourly, daily, plain):
        status = model_status(instance, model, since=utc(2024, 1, 1), until=utc(2024, 1, 5), now=utc(2024, 1, 10))
        assert (
            status.gaps == ()
            and status.failed == ()
            and status.covered == (TimeWindow(utc(2024, 1, 1), utc(2024, 1, 5)),)
        ), model.name

    # Each interval reports its own rows, 0 for the empty ones, even within one run over many intervals.
    assert materialization(instance, "s.hourly", "2024-01-01-07:00")[ROWS] == 0
    assert materialization(instance, "s.hourly", "2024-01-01-05:00")[ROWS] == 1
    assert materialization(instance, "s.hourly", "2024-01-02-12:00")[ROWS] == 0
    assert materialization(instance, "s.hourly", "2024-01-04-23:00")[ROWS] == 0
    assert [materialization(instance, "s.daily", d)[ROWS] for d in day_keys(utc(2024, 1, 1), utc(2024, 1, 5))] == [
        3,
        0,
        3,
        0,
    ]
    assert [materialization(instance, "s.plain", d)[ROWS] for d in day_keys(utc(2024, 1, 1), utc(2024, 1, 5))] == [
        1,
        0,
        1,
        0,
    ]

    # The tables hold exactly the days with data.
    assert table_rows(table_uri(project, "s.plain")) == [(utc(2024, 1, 1).date(), 21), (utc(2024, 1, 3).date(), 24)]
    assert days(table_rows(table_uri(project, "s.daily"))) == {"2024-01-01", "2024-01-03"}
    assert len(table_rows(table_uri(project, "s.hourly"))) == 21 + 24
    assert_all_checks_passed(instance, defs, "s.hourly", 3)
    assert_all_checks_passed(instance, defs, "s.daily", 3)

    # A window entirely past the end of the data, alone, from the command line: it succeeds and reports 0 rows;
    # status shows no gap and no disagreement between Dagster and the tables.
    root = str(project.directory)
    assert cli.main(["run", "+s.daily", "--start", "2024-01-05", "--end", "2024-01-06", "--project", root]) == 0
    out = capsys.readouterr().out
    assert (
        "s.hourly [2024-01-05, 2024-01-06): ok, 0 rows" in out and "s.daily [2024-01-05, 2024-01-06): ok, 0 rows" in out
    ), out
    assert "2 run(s) succeeded, 0 failed" in out
    assert materialization(instance, "s.daily", "2024-01-05")["run_rows_written"] == 0
    assert_all_checks_passed(instance, defs, "s.daily", 3)
    assert cli.main(["status", "s.daily", "--since", "2024-01-01", "--until", "2024-01-06", "--project", root]) == 0
    out = capsys.readouterr().out
    assert "5/5 intervals" in out and "gaps:    none" in out and "failed" not in out and "warning" not in out, out


def test_an_interval_that_loses_its_rows_is_replaced_by_nothing_in_one_commit(env, spark):
    project, instance, defs = env()
    runner = Runner(project, instance, defs)
    hourly, daily = project.model("s.hourly"), project.model("s.daily")
    assert runner.run([hourly, daily], start=utc(2024, 1, 1), end=utc(2024, 1, 4)).success
    before = {name: table_rows(table_uri(project, name)) for name in ("s.hourly", "s.daily")}
    versions = {name: DeltaTable(table_uri(project, name)).version() for name in ("s.hourly", "s.daily")}
    assert days(before["s.daily"]) == {"2024-01-01", "2024-01-03"}

    # The source is corrected: 2024-01-03 has no rows any more.
    write_stamps(project.sources["raw.events"].location, DAY_1)

    # Re-run as the UI launches runs: the hourly day as one range run, the daily partition on its own.
    hourly_job = defs.resolve_job_def(job_name(hourly))
    result = hourly_job.execute_in_process(
        instance=instance, tags={START: "2024-01-03-00:00", END: "2024-01-03-23:00"}, raise_on_error=False
    )
    assert result.success
    result = defs.resolve_job_def(job_name(daily)).execute_in_process(
        instance=instance, partition_key="2024-01-03", raise_on_error=False
    )
    assert result.success

    for name in ("s.hourly", "s.daily"):
        table = DeltaTable(table_uri(project, name))
        assert table.version() == versions[name] + 1, f"{name}: the interval must be replaced by exactly one commit"
        commit = table.history(1)[0]
        assert commit["incremental_assets.window_start"].startswith("2024-01-03") and commit["operation"] == "WRITE"
        rows = table_rows(table_uri(project, name))
        assert rows == [r for r in before[name] if str(r[0])[:10] != "2024-01-03"], name  # the neighbours are intact
        assert days(rows) == {"2024-01-01"}
    assert materialization(instance, "s.daily", "2024-01-03")["run_rows_written"] == 0
    assert materialization(instance, "s.daily", "2024-01-03")[ROWS] == 0
    assert materialization(instance, "s.hourly", "2024-01-03-10:00")["run_rows_written"] == 0
    assert partition_statuses(defs, instance, "s.daily", ["2024-01-03"]) == {"2024-01-03": "MATERIALIZED"}
    assert set(
        partition_statuses(defs, instance, "s.hourly", hour_keys(utc(2024, 1, 3), utc(2024, 1, 4))).values()
    ) == {"MATERIALIZED"}
    assert_all_checks_passed(instance, defs, "s.hourly", 3)
    assert_all_checks_passed(instance, defs, "s.daily", 3)


def _launch(defs, instance, request: dg.RunRequest, job: str):
    """Launch a requested run the way the daemon does: the job with the request's tags, in this process."""
    return defs.resolve_job_def(request.job_name or job).execute_in_process(
        instance=instance, tags=request.tags, raise_on_error=False, asset_selection=request.asset_selection
    )


def test_schedule_ticks_that_catch_up_past_the_end_of_the_data_succeed(env, spark):
    project, instance, defs = env()
    # The schedules tick on 2024-01-06: two days of the five have rows, the last two are past the end of the data.
    when = utc(2024, 1, 6)
    for model in (project.model("s.hourly"), project.model("s.daily"), project.model("s.plain")):
        schedule = next(s for s in defs.schedules if s.name == model.name.replace(".", "__") + "_schedule")
        data = schedule.evaluate_tick(dg.build_schedule_context(instance=instance, scheduled_execution_time=when))
        assert data.run_requests, (model.name, data.skip_message)
        for request in data.run_requests:
            result = _launch(defs, instance, request, job_name(model))
            assert result.success, (model.name, request.tags)
        again = schedule.evaluate_tick(dg.build_schedule_context(instance=instance, scheduled_execution_time=when))
        assert not again.run_requests and "every complete interval" in again.skip_message
    assert set(partition_statuses(defs, instance, "s.hourly", hour_keys(utc(2024, 1, 1), when)).values()) == {
        "MATERIALIZED"
    }
    assert partition_statuses(defs, instance, "s.daily", day_keys(utc(2024, 1, 1), when)) == {
        d: "MATERIALIZED" for d in day_keys(utc(2024, 1, 1), when)
    }
    assert [materialization(instance, "s.plain", d)[ROWS] for d in day_keys(utc(2024, 1, 1), when)] == [1, 0, 1, 0, 0]
    assert table_rows(table_uri(project, "s.plain")) == [(utc(2024, 1, 1).date(), 21), (utc(2024, 1, 3).date(), 24)]
    assert_all_checks_passed(instance, defs, "s.hourly", 3)
    assert_all_checks_passed(instance, defs, "s.daily", 3)


def test_sensor_requested_ranges_with_quiet_hours_succeed(env, spark, monkeypatch):
    project, instance, defs = env({**TIME_MODELS, "models/large.sql": LARGE})
    runner = Runner(project, instance, defs)
    models = [project.model(n) for n in ("s.hourly", "s.large", "s.daily", "s.plain")]
    assert runner.run(models, start=utc(2024, 1, 1), end=utc(2024, 1, 6)).success
    monkeypatch.setenv(CLOCK_ENV, utc(2024, 1, 6).isoformat())
    sensor = next(s for s in defs.sensors if s.name == SENSOR_NAME)
    cursor = sensor.evaluate_tick(dg.build_sensor_context(instance=instance, definitions=defs)).cursor

    # New data for 2024-01-05 at 01:00 and 05:00 only, in one file: the hours between are quiet.
    write_stamps(project.sources["raw.events"].location, [utc(2024, 1, 5, 1), utc(2024, 1, 5, 5)], mode="append")
    data = sensor.evaluate_tick(dg.build_sensor_context(instance=instance, cursor=cursor, definitions=defs))
    # A run may hold several models (same partitions and window): each of them is requested.
    requested = {(k.to_user_string(), r.tags[START], r.tags[END]) for r in data.run_requests for k in r.asset_selection}

    def covers(model: str) -> bool:
        return any(m == model and lo <= "2024-01-05-01:00" and hi >= "2024-01-05-05:00" for m, lo, hi in requested)

    assert covers("s/large"), requested  # a model whose whole range is empty
    assert covers("s/hourly"), requested  # quiet hours inside the range
    order = {key.to_user_string(): i for i, key in enumerate(asset_key(m.name) for m in models)}
    for request in sorted(data.run_requests, key=lambda r: min(order[k.to_user_string()] for k in r.asset_selection)):
        result = _launch(defs, instance, request, "")
        assert result.success, request.tags

    assert [
        materialization(instance, "s.hourly", k)[ROWS] for k in hour_keys(utc(2024, 1, 5, 1), utc(2024, 1, 5, 6))
    ] == [1, 0, 0, 0, 1]
    assert [
        materialization(instance, "s.large", k)[ROWS] for k in hour_keys(utc(2024, 1, 5, 1), utc(2024, 1, 5, 6))
    ] == [0] * 5
    assert materialization(instance, "s.large", "2024-01-05-03:00")["run_rows_written"] == 0
    assert materialization(instance, "s.plain", "2024-01-05")[ROWS] == 1
    assert (utc(2024, 1, 5).date(), 2) in table_rows(table_uri(project, "s.plain"))
    assert table_rows(table_uri(project, "s.large")) == []
    assert set(partition_statuses(defs, instance, "s.large", hour_keys(utc(2024, 1, 1), utc(2024, 1, 6))).values()) == {
        "MATERIALIZED"
    }
    for name, checks in (("s.hourly", 3), ("s.large", 1), ("s.daily", 3)):
        assert_all_checks_passed(instance, defs, name, checks)


# -- every other kind, over a source without rows ------------------------------------------------

FEED_SOURCE = """\
- name: raw.feed
  location: data/feed
  format: delta
"""

AUDITS = "audits (not_null(columns := [k])), assertions (unique_values(columns := [k], blocking := false))"
OTHER_KINDS = {
    "models/full.sql": f"MODEL (name s.full, kind FULL, {AUDITS});\nSELECT k, SUM(v) AS v FROM raw.feed GROUP BY k",
    "models/mat.sql": f"MODEL (name s.mat, kind VIEW (materialized true), {AUDITS});\nSELECT k, COUNT(*) AS n FROM "
    "raw.feed "
    "GROUP BY k",
    "models/seed.sql": "MODEL (name s.seed, kind SEED (path 'seeds/none.csv'), columns (k STRING, label STRING), "
    f"{AUDITS});",
    "models/uk.sql": "MODEL (name s.uk, kind INCREMENTAL_BY_UNIQUE_KEY (unique_key k, buckets 2), start '2024-01-01', "
    f"{AUDITS});\n"
    "SELECT k, MAX(v) AS v FROM raw.feed GROUP BY k",
    "models/scd.sql": f"MODEL (name s.scd, kind SCD_TYPE_2 (unique_key k, buckets 2), {AUDITS});\n"
    "SELECT k, MAX(v) AS v, MAX(updated_at) AS updated_at FROM raw.feed GROUP BY k",
    "models/cursor.sql": f"MODEL (name s.cursor, kind INCREMENTAL_BY_CURSOR (cursor id, initial_value 0), {AUDITS});\n"
    "SELECT id, k, v FROM raw.feed WHERE id > @last_value",
    "seeds/none.csv": "k,label\n",
}


def write_feed(root, rows: list[tuple[int, str, int]]) -> None:
    table = pa.table(
        {
            "id": pa.array([r[0] for r in rows], pa.int64()),
            "k": pa.array([r[1] for r in rows], pa.string()),
            "v": pa.array([r[2] for r in rows], pa.int64()),
            "updated_at": pa.array([utc(2024, 1, 1, r[0] % 24) for r in rows], pa.timestamp("us", tz="UTC")),
        }
    )
    write_deltalake(str(root / "data" / "feed"), table, mode="overwrite")


def test_every_other_kind_succeeds_over_a_source_without_rows(make_project, tmp_path, monkeypatch, spark):
    root = make_project({"sources.yaml": FEED_SOURCE, **OTHER_KINDS})
    write_feed(root, [])
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    project = load_project(root)
    instance, defs = open_instance(project.settings.dagster_home), build_definitions(project)
    runner = Runner(project, instance, defs)
    names = ["s.full", "s.mat", "s.seed", "s.uk", "s.scd", "s.cursor"]
    models = [project.model(n) for n in names]

    report = runner.run(models)
    assert report.success, [(r.model, r.error) for r in report.records]
    for name in names:
        assert materialization(instance, name)["run_rows_written"] == 0, name
        assert table_rows(table_uri(project, name), drop=("ia_bucket",)) == [], name
        assert_all_checks_passed(instance, defs, name, 2)

    # Rows arrive, then the source is emptied again: the rebuilt kinds end up empty, in one commit each.
    write_feed(root, [(1, "a", 5), (2, "b", 7)])
    assert runner.run(models).success
    assert table_rows(table_uri(project, "s.full")) == [("a", 5), ("b", 7)]
    assert [r[:2] for r in table_rows(table_uri(project, "s.scd"), drop=("ia_bucket",))] == [("a", 5), ("b", 7)]
    versions = {name: DeltaTable(table_uri(project, name)).version() for name in names}
    write_feed(root, [])
    # Launched as the UI does (no CLI in between): the FULL model alone, from the asset job.
    job = defs.resolve_implicit_global_asset_job_def()
    result = job.execute_in_process(instance=instance, asset_selection=[asset_key("s.full")], raise_on_error=False)
    assert result.success
    report = runner.run([m for m in models if m.name != "s.full"])
    assert report.success, [(r.model, r.error) for r in report.records]
    for name in ("s.full", "s.mat"):
        assert table_rows(table_uri(project, name)) == [], name
        assert DeltaTable(table_uri(project, name)).version() == versions[name] + 1, name
        assert materialization(instance, name)["run_rows_written"] == 0
    # Upserts and cursor appends of nothing change nothing; the history keeps its rows.
    assert [r[:2] for r in table_rows(table_uri(project, "s.uk"), drop=("ia_bucket",))] == [("a", 5), ("b", 7)]
    assert [r[:3] for r in table_rows(table_uri(project, "s.cursor"))] == [(1, "a", 5), (2, "b", 7)]
    assert DeltaTable(table_uri(project, "s.cursor")).version() == versions["s.cursor"]
    assert materialization(instance, "s.cursor")["run_rows_written"] == 0
    for name in names:
        assert instance.get_latest_materialization_event(asset_key(name)) is not None
        assert_all_checks_passed(instance, defs, name, 2)
