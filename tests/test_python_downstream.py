"""Interop: the example project's Python asset reads a model's partitions through dagster-deltalake's IO
manager, with nothing custom: the model assets name their partition column (``partition_expr``)."""

from __future__ import annotations

import importlib.util
import shutil
from datetime import date
from decimal import Decimal

import dagster as dg
import pyarrow.compute as pc
from deltalake import DeltaTable

from incremental_assets import delta
from incremental_assets.demo import generate_demo_data
from incremental_assets.orchestration.instance import open_instance
from incremental_assets.orchestration.runner import Runner

from conftest import REPO
from helpers import utc

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


def test_python_asset_reads_one_model_partition_through_the_deltalake_io_manager(tmp_path, monkeypatch):
    example = _example(tmp_path, monkeypatch)
    project, defs = example.project, example.defs
    instance = open_instance(project.settings.dagster_home)
    assert (
        Runner(project, instance, defs)
        .run([project.model("shop.order_lines")], start=utc(2024, 1, 1), end=utc(2024, 1, 4))
        .success
    )

    job = defs.resolve_implicit_global_asset_job_def()
    for day in ("2024-01-02", "2024-01-03"):
        result = job.execute_in_process(instance=instance, asset_selection=[REVENUE], partition_key=day)
        assert result.success

    lines = DeltaTable(delta.table_uri(project.settings.warehouse, "shop.order_lines")).to_pyarrow_table()
    out = DeltaTable(f"{project.settings.warehouse}/analytics/daily_channel_revenue").to_pyarrow_table()
    assert sorted({d.isoformat() for d in out.column("order_date").to_pylist()}) == ["2024-01-02", "2024-01-03"]
    for day in (date(2024, 1, 2), date(2024, 1, 3)):
        day_lines = lines.filter(pc.equal(lines["order_date"], day))
        expected = {}
        for row in day_lines.to_pylist():
            expected[row["channel"]] = expected.get(row["channel"], Decimal(0)) + row["revenue"]
        got = {r["channel"]: r["revenue"] for r in out.filter(pc.equal(out["order_date"], day)).to_pylist()}
        assert got == expected and got, day
    event = instance.get_latest_materialization_event(REVENUE)
    assert event.asset_materialization.partition == "2024-01-03"
    assert (
        event.asset_materialization.metadata["lines_read"].value
        == lines.filter(pc.equal(lines["order_date"], date(2024, 1, 3))).num_rows
    )


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
    assert runner.run([project.model("shop.order_lines")], start=utc(2024, 1, 2), end=utc(2024, 1, 3)).success
    requested, cursor = tick(cursor)
    assert requested == ["2024-01-02"]  # a day a month back is kept up as well as the latest
