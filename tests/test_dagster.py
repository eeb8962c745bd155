"""Dagster: assets, partitions, runs and status through a real instance; the CLI records runs there too."""

from __future__ import annotations

import os
import subprocess
import sys

import dagster as dg
import pytest
from deltalake import DeltaTable

from incremental_assets import cli, delta
from incremental_assets.errors import StorageError
from incremental_assets.model.intervals import TimeWindow
from incremental_assets.orchestration.runner import Runner
from incremental_assets.orchestration.status import model_status

from conftest import REPO
from helpers import EVENTS_SOURCE, table_rows, utc, write_events

SOURCES = EVENTS_SOURCE

MODELS = {
    "models/hourly.sql": """
        MODEL (name s.hourly, kind INCREMENTAL_BY_TIME_RANGE (time_column h), start '2024-01-01', cron '@hourly',
               owner 'ops', tags [ops], description 'Events per hour',
               column_descriptions (h = 'Hour start'));
        SELECT date_trunc('HOUR', ts) AS h, COUNT(*) AS n FROM raw.events WHERE ts BETWEEN @start_dt AND @end_dt
          GROUP BY 1
    """,
    "models/daily.sql": """
        MODEL (name s.daily, kind INCREMENTAL_BY_TIME_RANGE (time_column ds, batch_size 2),
          start '2024-01-01', owner 'a@b.com');
        SELECT CAST(h AS DATE) AS ds, SUM(n) AS n FROM s.hourly WHERE h BETWEEN @start_dt AND @end_dt GROUP BY 1
    """,
    "models/weekly.sql": """
        MODEL (name s.weekly, kind INCREMENTAL_BY_TIME_RANGE (time_column wk), start '2023-12-31', interval_unit week);
        SELECT date_sub(ds, dayofweek(ds) - 1) AS wk, SUM(n) AS n FROM s.daily WHERE ds BETWEEN @start_ds AND @end_ds
          GROUP BY 1
    """,
    "models/total.sql": """
        MODEL (name s.total, kind FULL);
        SELECT SUM(n) AS n FROM s.daily
    """,
}


@pytest.fixture
def env(make_project, dagster_env):
    root = make_project({"sources.yaml": SOURCES, **MODELS})
    write_events(root / "data" / "events", utc(2024, 1, 1), 24 * 14)
    return dagster_env(root)


def test_assets_carry_keys_groups_partitions_and_policies(env):
    project, instance, defs = env
    graph = defs.resolve_asset_graph()
    keys = {k.to_user_string() for k in graph.get_all_asset_keys()}
    assert keys == {"raw/events", "s/hourly", "s/daily", "s/weekly", "s/total"}
    hourly = defs.resolve_assets_def(dg.AssetKey(["s", "hourly"]))
    daily = defs.resolve_assets_def(dg.AssetKey(["s", "daily"]))
    spec = hourly.specs_by_key[dg.AssetKey(["s", "hourly"])]
    assert spec.group_name == "s" and spec.owners == ["team:ops"]
    assert spec.tags == {"ops": "", "dagster/kind/spark": "", "dagster/kind/delta": ""}
    assert spec.description == "Events per hour"
    assert spec.code_version == project.model("s.hourly").fingerprint
    assert spec.metadata["dagster/column_schema"].columns[0].description == "Hour start"
    assert hourly.partitions_def.get_first_partition_key() == "2024-01-01-00:00"
    assert daily.partitions_def.get_first_partition_key() == "2024-01-01"
    assert hourly.backfill_policy == dg.BackfillPolicy.single_run()
    assert daily.backfill_policy == dg.BackfillPolicy.multi_run(2)
    assert defs.resolve_assets_def(dg.AssetKey(["s", "total"])).partitions_def is None
    weekly = defs.resolve_assets_def(dg.AssetKey(["s", "weekly"]))
    assert weekly.partitions_def.get_partition_keys()[:2] == ["2023-12-31", "2024-01-07"]
    assert set(graph.get(dg.AssetKey(["s", "daily"])).parent_entity_keys) == {dg.AssetKey(["s", "hourly"])}


def test_backfill_across_upstreams_records_intervals_and_metadata(env):
    project, instance, defs = env
    runner = Runner(project, instance, defs)
    lines = []
    report = runner.run(
        project.select("+s.weekly"), start=utc(2023, 12, 31), end=utc(2024, 1, 14), progress=lines.append
    )
    assert report.success, [r.error for r in report.records]
    # hourly 1 run (single_run); daily batch_size 2 -> 7 runs over 13 days (starts at 2024-01-01); weekly 1 run
    assert [r.model for r in report.records] == ["s.hourly"] + ["s.daily"] * 7 + ["s.weekly"]
    assert lines[-1].startswith("[") and "intervals" in lines[-1] and "s.weekly" in lines[-1]
    wh = project.settings.warehouse
    assert table_rows(delta.table_uri(wh, "s.weekly")) == [
        (utc(2023, 12, 31).date(), 24 * 6),
        (utc(2024, 1, 7).date(), 24 * 7),
    ]
    status = model_status(instance, project.model("s.daily"), now=utc(2024, 1, 20))
    assert status.covered == (TimeWindow(utc(2024, 1, 1), utc(2024, 1, 14)),)
    assert status.gaps == (TimeWindow(utc(2024, 1, 14), utc(2024, 1, 20)),)
    event = instance.get_latest_materialization_event(dg.AssetKey(["s", "weekly"]))
    meta = event.asset_materialization.metadata
    assert meta["run_rows_written"].value == 2 and meta["delta_version"].value == 0
    assert (
        meta["run_window_start"].value == "2023-12-31T00:00:00+00:00"
        and meta["run_window_end"].value == "2024-01-14T00:00:00+00:00"
    )
    assert "SELECT" in meta["run_sql"].value and "__window.wk" in meta["run_sql"].value


def test_downstream_refuses_when_upstream_intervals_are_missing(env):
    project, instance, defs = env
    runner = Runner(project, instance, defs)
    runner.run([project.model("s.hourly")], start=utc(2024, 1, 1), end=utc(2024, 1, 2))
    report = runner.run([project.model("s.daily")], start=utc(2024, 1, 1), end=utc(2024, 1, 3))
    failed = [r for r in report.records if not r.success]
    assert failed and "s.hourly is missing [2024-01-02, 2024-01-03)" in failed[0].error


def test_failed_commit_keeps_table_and_recorded_intervals(env, monkeypatch):
    project, instance, defs = env
    runner = Runner(project, instance, defs)
    assert runner.run([project.model("s.hourly")], start=utc(2024, 1, 1), end=utc(2024, 1, 2)).success
    uri = delta.table_uri(project.settings.warehouse, "s.hourly")
    before = table_rows(uri)

    def broken(*args, **kwargs):
        raise StorageError("simulated commit failure")

    monkeypatch.setattr(delta, "commit_staged", broken)
    report = runner.run([project.model("s.hourly")], start=utc(2024, 1, 1, 12), end=utc(2024, 1, 3))
    assert not report.success and "simulated commit failure" in report.records[0].error
    assert DeltaTable(uri).version() == 0 and table_rows(uri) == before
    status = model_status(instance, project.model("s.hourly"), now=utc(2024, 1, 3))
    # Nothing new is recorded as materialized; the earlier intervals keep their data and their record.
    assert status.covered == (TimeWindow(utc(2024, 1, 1), utc(2024, 1, 2)),), "a failed run must not record intervals"
    assert status.failed == (TimeWindow(utc(2024, 1, 1, 12), utc(2024, 1, 3)),)
    assert status.gaps == (TimeWindow(utc(2024, 1, 2), utc(2024, 1, 3)),)


def test_auto_fills_only_the_gaps(env):
    project, instance, defs = env
    runner = Runner(project, instance, defs)
    runner.run([project.model("s.hourly")], start=utc(2024, 1, 3), end=utc(2024, 1, 4))
    report = runner.run([project.model("s.hourly")], auto=True, end=utc(2024, 1, 6), now=utc(2024, 2, 1))
    assert [str(r.window) for r in report.records] == ["[2024-01-01, 2024-01-03)", "[2024-01-04, 2024-01-06)"]
    status = model_status(instance, project.model("s.hourly"), until=utc(2024, 1, 6), now=utc(2024, 2, 1))
    assert status.gaps == () and status.intervals_done == 24 * 5


def test_cli_validate_render_run_status(env, capsys):
    project, instance, defs = env
    root = str(project.directory)
    assert cli.main(["validate", "--project", root]) == 0
    assert "4 models, 1 sources: valid" in capsys.readouterr().out
    assert cli.main(["render", "s.daily", "--start", "2024-01-02", "--end", "2024-01-03", "--project", root]) == 0
    assert "CAST('2024-01-02 23:59:59.999999' AS TIMESTAMP)" in capsys.readouterr().out
    assert cli.main(["run", "+s.daily", "--start", "2024-01-01", "--end", "2024-01-03", "--project", root]) == 0
    out = capsys.readouterr().out
    assert "s.hourly [2024-01-01, 2024-01-03): ok, 48 rows" in out and "2 run(s) succeeded, 0 failed" in out
    assert cli.main(["status", "s.daily", "--until", "2024-01-05", "--project", root]) == 0
    out = capsys.readouterr().out
    assert "covered: [2024-01-01, 2024-01-03)" in out and "gaps:    [2024-01-03, 2024-01-05)" in out
    # The runs are in the same instance the UI reads.
    runs = instance.get_runs()
    assert len(runs) == 2 and all(r.tags.get("incremental_assets/launched_by") == "cli" for r in runs)
    assert cli.main(["run", "s.daily", "--start", "2024-01-01", "--end", "2024-01-03T12:00", "--project", root]) == 2
    assert "not on day boundaries" in capsys.readouterr().err


def test_workspace_yaml_loads_the_example_project():
    env = {**os.environ, "DAGSTER_HOME": ""}
    env.pop("DAGSTER_HOME")
    done = subprocess.run(
        [sys.executable, "-m", "dagster", "definitions", "validate", "-w", "workspace.yaml"],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    code = (
        "from incremental_assets.definitions import defs\n"
        "g = defs.resolve_asset_graph()\n"
        "for k in sorted(g.get_all_asset_keys()):\n"
        "    a = defs.resolve_assets_def(k) if g.get(k).is_materializable else None\n"
        "    p = a.partitions_def if a else None\n"
        "    print(k.to_user_string(), p.get_first_partition_key() if p else '-')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True, timeout=300
    ).stdout
    listed = dict(line.split() for line in out.strip().splitlines())
    assert listed["shop/order_lines"] == "2024-01-01"
    assert listed["shop/hourly_orders"] == "2024-12-01-00:00"
    assert listed["shop/weekly_category_revenue"] == "2024-01-07"
    assert listed["shop/monthly_country_revenue"] == "2024-01-01"
    assert listed["shop/customers"] == "-" and listed["shop/category_summary"] == "-"
    assert listed["raw/orders"] == "-"
    assert len([k for k in listed if k.startswith("shop/")]) == 9


def test_downstream_waits_while_an_upstream_rerun_is_pending(env, monkeypatch):
    """A sensor launches an upstream re-run and its downstream together: the downstream must not read
    the upstream's old rows meanwhile. It waits (retries) while the upstream run is queued or running."""
    project, instance, defs = env
    runner = Runner(project, instance, defs)
    assert runner.run(project.select("+s.daily"), start=utc(2024, 1, 1), end=utc(2024, 1, 3)).success
    daily_uri = delta.table_uri(project.settings.warehouse, "s.daily")
    version = DeltaTable(daily_uri).version()
    queued = dg.DagsterRun(
        job_name="__ASSET_JOB",
        run_id="f" * 8 + "-0000-0000-0000-000000000000",
        status=dg.DagsterRunStatus.STARTED,
        asset_selection=frozenset({dg.AssetKey(["s", "hourly"])}),
        tags={
            "dagster/asset_partition_range_start": "2024-01-02-00:00",
            "dagster/asset_partition_range_end": "2024-01-02-23:00",
        },
    )
    instance.add_run(queued)
    monkeypatch.setenv("INCREMENTAL_ASSETS_UPSTREAM_WAIT_RETRIES", "1")
    monkeypatch.setenv("INCREMENTAL_ASSETS_UPSTREAM_WAIT_SECONDS", "0")
    report = runner.run([project.model("s.daily")], start=utc(2024, 1, 2), end=utc(2024, 1, 3))
    assert not report.success, "the downstream ran while its upstream was being rebuilt"
    assert DeltaTable(daily_uri).version() == version
    logs = [e.message for e in instance.all_logs(report.records[0].run_id) if e.message]
    assert any("waiting for upstream runs to finish: s.hourly in run ffffffff (started)" in m for m in logs)
    # A pending upstream run for other intervals does not hold this window back.
    report = runner.run([project.model("s.daily")], start=utc(2024, 1, 1), end=utc(2024, 1, 2))
    assert report.success
    # Once the upstream run is over, the window runs.
    instance.report_run_failed(queued)
    assert runner.run([project.model("s.daily")], start=utc(2024, 1, 2), end=utc(2024, 1, 3)).success
