"""Interop: the example project's Python asset reads a model's table with the ``deltalake`` package, a range
of days in one run (the demo's backfill of years is one run), and is kept up to date by Dagster's declarative
automation, also for days its sensor finds missing on its first tick."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import time
from datetime import date
from decimal import Decimal
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable, write_deltalake

from incremental_assets import delta
from incremental_assets.demo import generate_demo_data
from incremental_assets.orchestration.instance import ACTIVE_RUN_STATUSES, open_instance
from incremental_assets.orchestration.runner import Runner
from incremental_assets.orchestration.staleness import latest_ids

from conftest import REPO
from helpers import stop_session, utc

REVENUE = dg.AssetKey(["analytics", "daily_channel_revenue"])


def _example_definitions(root):
    spec = importlib.util.spec_from_file_location("shop_example_definitions", root / "definitions.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _example(tmp_path, monkeypatch):
    root = tmp_path / "shop"
    shutil.copytree(REPO / "models", root / "models")
    shutil.copy(REPO / "sources.yaml", root / "sources.yaml")
    shutil.copy(REPO / "definitions.py", root / "definitions.py")
    generate_demo_data(root, start=date(2024, 1, 1), days=3, orders_per_day=30)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    return _example_definitions(root)


def _expected(lines, day):
    expected = {}
    for row in lines.filter(pc.equal(lines["order_date"], day)).to_pylist():
        expected[row["channel"]] = expected.get(row["channel"], Decimal(0)) + row["revenue"]
    return expected


def test_python_asset_builds_a_range_of_model_days_in_one_run(tmp_path, monkeypatch):
    example = _example(tmp_path, monkeypatch)
    project, defs = example.project, example.defs
    instance = open_instance(project.settings.dagster_home)
    assert (
        Runner(project, instance, defs)
        .run([project.model("shop.order_lines")], start=utc(2024, 1, 1), end=utc(2024, 1, 4))
        .success
    )

    job = defs.resolve_implicit_global_asset_job_def()
    days = {"dagster/asset_partition_range_start": "2024-01-01", "dagster/asset_partition_range_end": "2024-01-03"}
    assert job.execute_in_process(instance=instance, asset_selection=[REVENUE], tags=days).success
    # one day again: only that day is replaced
    assert job.execute_in_process(instance=instance, asset_selection=[REVENUE], partition_key="2024-01-02").success

    lines = DeltaTable(delta.table_uri(project.settings.warehouse, "shop.order_lines")).to_pyarrow_table()
    out = DeltaTable(f"{project.settings.warehouse}/analytics/daily_channel_revenue").to_pyarrow_table()
    assert sorted({d.isoformat() for d in out.column("order_date").to_pylist()}) == [
        "2024-01-01",
        "2024-01-02",
        "2024-01-03",
    ]
    for day in (date(2024, 1, 1), date(2024, 1, 2), date(2024, 1, 3)):
        got = {r["channel"]: r["revenue"] for r in out.filter(pc.equal(out["order_date"], day)).to_pylist()}
        assert got == _expected(lines, day) and got, day
    assert sorted(instance.get_materialized_partitions(REVENUE)) == ["2024-01-01", "2024-01-02", "2024-01-03"]
    event = instance.get_latest_materialization_event(REVENUE)
    assert event.asset_materialization.partition == "2024-01-02"
    assert (
        event.asset_materialization.metadata["lines_read"].value
        == lines.filter(pc.equal(lines["order_date"], date(2024, 1, 2))).num_rows
    )


def test_days_missing_at_the_sensors_first_tick_are_requested_once(tmp_path, monkeypatch):
    """The demo builds the models before the UI's daemon ever evaluates the Python asset: its first tick
    requests every day the model has and the Python asset lacks, as one request, and never again."""
    example = _example(tmp_path, monkeypatch)
    project, defs = example.project, example.defs
    instance = open_instance(project.settings.dagster_home)
    assert (
        Runner(project, instance, defs)
        .run([project.model("shop.order_lines")], start=utc(2024, 1, 1), end=utc(2024, 1, 3))
        .success
    )
    selection = dg.AssetSelection.assets(REVENUE)
    first = dg.evaluate_automation_conditions(defs=defs, instance=instance, asset_selection=selection)
    assert sorted(first.get_requested_partitions(REVENUE)) == ["2024-01-01", "2024-01-02"]
    again = dg.evaluate_automation_conditions(
        defs=defs, instance=instance, asset_selection=selection, cursor=first.cursor
    )
    assert not again.get_requested_partitions(REVENUE)


def test_python_asset_is_kept_up_to_date_by_the_automation(tmp_path, monkeypatch):
    """Every day of the model materialized (the first time, or again after late rows) is requested for the
    Python asset too, any day and not only the latest, once; the sensor evaluating it runs by default."""
    example = _example(tmp_path, monkeypatch)
    project, defs = example.project, example.defs
    sensor = defs.resolve_sensor_def("python_assets_automation")
    assert sensor.default_status == dg.DefaultSensorStatus.RUNNING
    instance = open_instance(project.settings.dagster_home)
    selection = dg.AssetSelection.assets(REVENUE)

    def tick(cursor):
        result = dg.evaluate_automation_conditions(
            defs=defs, instance=instance, asset_selection=selection, cursor=cursor
        )
        return sorted(result.get_requested_partitions(REVENUE) or []), result.cursor

    requested, cursor = tick(None)
    assert requested == []  # nothing upstream yet
    runner = Runner(project, instance, defs)
    assert runner.run([project.model("shop.order_lines")], start=utc(2024, 1, 1), end=utc(2024, 1, 4)).success
    requested, cursor = tick(cursor)
    assert requested == ["2024-01-01", "2024-01-02", "2024-01-03"]
    requested, cursor = tick(cursor)
    assert requested == []  # each day once
    days = {"dagster/asset_partition_range_start": "2024-01-01", "dagster/asset_partition_range_end": "2024-01-03"}
    job = defs.resolve_implicit_global_asset_job_def()
    assert job.execute_in_process(instance=instance, asset_selection=[REVENUE], tags=days).success
    assert runner.run([project.model("shop.order_lines")], start=utc(2024, 1, 2), end=utc(2024, 1, 3)).success
    # the days' own run and the model day replaced after it are seen by one tick: the later event wins
    requested, cursor = tick(cursor)
    assert requested == ["2024-01-02"]  # a day a month back is kept up as well as the latest
    assert tick(cursor)[0] == []


def _late_order(root, day):
    """One more order (a copy of one of the day's, under a new id) in both sources, as a late event; its id."""
    orders = DeltaTable(str(root / "data/raw/orders")).to_pyarrow_table()
    day_orders = orders.filter(pc.equal(orders["order_date"], day))
    first = day_orders.filter(pc.not_equal(day_orders["status"], "cancelled")).slice(0, 1)
    new_id = pc.max(orders["order_id"]).as_py() + 1
    for source, rows in (
        ("orders", orders),
        ("order_items", DeltaTable(str(root / "data/raw/order_items")).to_pyarrow_table()),
    ):
        late = rows.filter(pc.equal(rows["order_id"], first["order_id"][0]))
        late = late.set_column(
            late.schema.get_field_index("order_id"), "order_id", pa.array([new_id] * late.num_rows, pa.int64())
        )
        write_deltalake(str(root / "data/raw" / source), late, mode="append")
    return new_id


def _wait_for(instance, what, log, seconds=600):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        busy = instance.get_run_records(filters=dg.RunsFilter(statuses=ACTIVE_RUN_STATUSES), limit=1)
        if what() and not busy:
            return
        time.sleep(2)
    raise AssertionError("the daemon did not keep the Python asset up to date:\n" + log.read_text()[-4000:])


@pytest.mark.slow
def test_the_daemon_builds_and_keeps_up_the_python_asset(tmp_path, monkeypatch):
    """The real ``dagster-daemon`` on the example's code location, started after the models were built (as
    after ``scripts/demo.sh``): the Python asset's sensor, on by default, fills every day in one run, then
    recomputes the day a model run replaced after a late order."""
    example = _example(tmp_path, monkeypatch)
    project, defs = example.project, example.defs
    root, home = project.directory, tmp_path / "home"
    instance = open_instance(project.settings.dagster_home)
    runner = Runner(project, instance, defs)
    assert runner.run([project.model("shop.order_lines")], start=utc(2024, 1, 1), end=utc(2024, 1, 4)).success
    days = ["2024-01-01", "2024-01-02", "2024-01-03"]
    log = tmp_path / "daemon.log"
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
    }
    daemon = str(Path(sys.executable).parent / "dagster-daemon")
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [daemon, "run", "-f", str(root / "definitions.py")],
            cwd=root,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        _wait_for(instance, lambda: sorted(instance.get_materialized_partitions(REVENUE)) == days, log)
        runs = instance.get_run_records(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.SUCCESS]))
        assert len(runs) == 1 + 1, [r.dagster_run.tags for r in runs]  # the model's CLI run, then one for all days
        before = latest_ids(instance, REVENUE)
        late = _late_order(root, date(2024, 1, 2))
        assert runner.run([project.model("shop.order_lines")], start=utc(2024, 1, 2), end=utc(2024, 1, 3)).success
        _wait_for(instance, lambda: latest_ids(instance, REVENUE)["2024-01-02"] > before["2024-01-02"], log)
        after = latest_ids(instance, REVENUE)
        assert [d for d in days if after[d] != before[d]] == ["2024-01-02"]
        assert proc.poll() is None, log.read_text()[-4000:]
    finally:
        stop_session(proc)
    failed = instance.get_run_records(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.FAILURE]))
    assert not failed, log.read_text()[-4000:]
    lines = DeltaTable(delta.table_uri(project.settings.warehouse, "shop.order_lines")).to_pyarrow_table()
    assert late in lines.column("order_id").to_pylist()  # day 2's revenue changed upstream
    out_table = DeltaTable(f"{project.settings.warehouse}/analytics/daily_channel_revenue").to_pyarrow_table()
    for day in (date(2024, 1, 1), date(2024, 1, 2), date(2024, 1, 3)):
        got = {r["channel"]: r["revenue"] for r in out_table.filter(pc.equal(out_table["order_date"], day)).to_pylist()}
        assert got == _expected(lines, day) and got, day
