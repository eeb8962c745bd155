"""Data arrival to the last downstream model recomputed, by Dagster alone: the real ``dagster-daemon`` with
the automation sensor on, the embedded default (local Spark, SQLite Dagster home, the run queue).

The example shop holds data up to 23:00 of a Saturday and every model is materialized (``run --auto``).
The daemon starts with the automation sensor on; then the last hour of that Saturday arrives (one append
of orders and order lines). The clock the sensor sees is the following midnight, so the new hour
completes the day and the week: measured is the time until every model is settled again (nothing
queued or running, and the automation finds nothing more to do), and the runs it took.

Measured twice in one invocation: with every run starting its own JVM (the embedded default as installed),
and with the project's long-lived Spark Connect server up (``incremental-assets spark start``, untimed),
which the daemon's runs then share.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import time
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "tests"))

CLOCK = datetime(2024, 12, 8, tzinfo=timezone.utc)  # a Sunday midnight: the Saturday and its week complete


def settled(project, instance, translator, marker_key, marker_before) -> bool:
    import dagster as dg

    from incremental_assets.orchestration.instance import ACTIVE_RUN_STATUSES
    from incremental_assets.orchestration.sensors import evaluate
    from incremental_assets.orchestration.staleness import latest_ids

    if latest_ids(instance, marker_key).get("2024-12-07-23:00", 0) <= marker_before:
        return False
    if instance.get_run_records(filters=dg.RunsFilter(statuses=ACTIVE_RUN_STATUSES), limit=1):
        return False
    decision = evaluate(project, translator, instance, None, CLOCK)
    return not decision.requests and not decision.waiting


def scenario_automation(*, orders_per_day: int, days: int = 37) -> dict:
    """The latency with and without the long-lived Spark server, side by side; each in its own process (a
    process holds either a local Spark session or a Spark Connect one, not both)."""
    import json
    import subprocess

    from peer import fresh_env

    figures = {}
    for variant in ("server_down", "server_up"):
        done = subprocess.run(
            [sys.executable, __file__, str(orders_per_day), str(days), variant],
            capture_output=True,
            text=True,
            env=fresh_env(),
        )  # each variant its own project and Dagster home
        if done.returncode != 0:
            raise RuntimeError(f"automation {variant} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        figures[variant] = json.loads(done.stdout[done.stdout.index("{") :])
        print(
            f"automation ({variant}): {figures[variant]['arrival_to_settled_seconds']}s, "
            f"{figures[variant]['runs']} runs",
            flush=True,
        )
    return figures


def one_arrival(*, orders_per_day: int, days: int, server: bool) -> dict:
    import shutil

    from incremental_assets.demo import generate_demo_data
    from incremental_assets.load.project import load_project

    root = Path(tempfile.mkdtemp(prefix="bench-automation-"))
    shutil.copytree(REPO / "models", root / "models")
    shutil.copy(REPO / "sources.yaml", root / "sources.yaml")
    start = date(2024, 12, 7) - timedelta(days=days - 1)
    generate_demo_data(
        root,
        start=start,
        days=days,
        orders_per_day=orders_per_day,
        until=datetime(2024, 12, 7, 23, tzinfo=timezone.utc),
    )
    project = load_project(root)
    with spark_server(project.settings) if server else contextlib.nullcontext():
        return {"spark_server": server, **_measure(root, project, orders_per_day)}


@contextlib.contextmanager
def spark_server(settings):
    from incremental_assets.spark.connect_server import start_server, stop_server, warm_up

    record, _ = start_server(settings)
    try:
        warm_up(record.url)
        yield record
    finally:
        stop_server(settings)


def _measure(root: Path, project, orders_per_day: int) -> dict:
    import dagster as dg
    from deltalake import DeltaTable

    from incremental_assets.demo import append_demo_hours
    from incremental_assets.orchestration.build_definitions import build_definitions
    from incremental_assets.orchestration.instance import open_instance
    from incremental_assets.orchestration.runner import Runner
    from incremental_assets.orchestration.sensors import AutomationCursor
    from incremental_assets.orchestration.staleness import latest_ids
    from incremental_assets.orchestration.translator import ModelTranslator

    from helpers import automation_daemon

    instance = open_instance(project.settings.dagster_home, project.settings.max_concurrent_runs)
    began = time.perf_counter()
    assert Runner(project, instance, build_definitions(project)).run(project.ordered(), auto=True, now=CLOCK).success
    backfill = time.perf_counter() - began
    translator = ModelTranslator()
    marker = dg.AssetKey(["shop", "hourly_orders"])
    before = latest_ids(instance, marker).get("2024-12-07-23:00", 0)
    sources = {
        s.name: f"v{DeltaTable(s.location).version()}"
        for s in project.sources.values()
        if s.format == "delta" and s.time_column
    }
    cursor = AutomationCursor(sources=sources).dump()
    runs_before = len(
        instance.get_run_records(filters=dg.RunsFilter(tags={"incremental_assets/launched_by": "automation"}))
    )
    with automation_daemon(root, project.settings.dagster_home, CLOCK, root / "daemon.log", cursor) as daemon:
        time.sleep(3)
        arrived = time.perf_counter()
        appended = append_demo_hours(root, hours=1, orders_per_day=orders_per_day)
        deadline = time.monotonic() + 900
        while time.monotonic() < deadline:
            if daemon.poll() is not None:
                raise RuntimeError((root / "daemon.log").read_text()[-3000:])
            if settled(project, instance, translator, marker, before):
                break
            time.sleep(0.5)
        else:
            raise RuntimeError("not settled in 15 minutes:\n" + (root / "daemon.log").read_text()[-3000:])
        elapsed = time.perf_counter() - arrived
    records = instance.get_run_records(filters=dg.RunsFilter(tags={"incremental_assets/launched_by": "automation"}))
    runs = records[: len(records) - runs_before]
    failed = [r.dagster_run.run_id for r in runs if r.dagster_run.status != dg.DagsterRunStatus.SUCCESS]
    if failed:
        raise RuntimeError(f"automation runs failed: {failed}")
    durations = sorted((r.end_time or 0) - (r.start_time or 0) for r in runs)
    return {
        "arrival_to_settled_seconds": round(elapsed, 1),
        "runs": len(runs),
        "run_seconds_median": round(durations[len(durations) // 2], 1) if durations else None,
        "rows_appended": appended.rows,
        "backfill_seconds": round(backfill, 1),
        "models": sorted(
            {
                r.dagster_run.tags.get("dagster/asset_partition_range_start", "full")
                + " "
                + ",".join(k.to_user_string() for k in (r.dagster_run.asset_selection or ()))
                for r in runs
            }
        ),
    }


if __name__ == "__main__":
    import json

    orders, days = (int(sys.argv[1]), int(sys.argv[2])) if len(sys.argv) > 2 else (200, 37)
    if len(sys.argv) > 3:  # one variant, as the scenario runs it
        print(
            json.dumps(one_arrival(orders_per_day=orders, days=days, server=sys.argv[3] == "server_up"), indent=2),
            flush=True,
        )
        # The backfill's Spark Connect session outlives its server (stopped above): at a normal exit its
        # client would retry the stopped server for minutes before giving up.
        os._exit(0)
    else:
        print(json.dumps(scenario_automation(orders_per_day=orders, days=days), indent=2))
