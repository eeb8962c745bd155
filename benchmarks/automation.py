"""Data arrival to the last downstream model recomputed, by Dagster alone: the real ``dagster-daemon`` with
the automation sensor on, the embedded default (local Spark, SQLite Dagster home, the run queue).

The example shop holds data up to 23:00 of a Saturday and every model is materialized (``run --auto``).
The daemon starts with the automation sensor on; then the last hour of that Saturday arrives (one append
of orders and order lines). The clock the sensor sees is the following midnight, so the new hour
completes the day and the week: measured is the time until every model is settled again (nothing
queued or running, and the automation finds nothing more to do), and the runs it took.

Measured twice in one invocation: with every run starting its own JVM (the embedded default as installed),
and with the project's long-lived Spark Connect server up (``incremental-assets spark start``, untimed),
which the daemon's runs then share, with the command server `spark start` keeps next to it (where the
project's run launcher starts the daemon's runs, in a version that has one).
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
# The code measured: this checkout, or another one (``BENCH_CODE``, e.g. a checkout of the previous
# version) run with this benchmark, so that both are measured side by side in one invocation.
REPO = Path(os.environ.get("BENCH_CODE") or HERE.parent).resolve()
sys.path[:0] = [str(REPO), str(REPO / "tests")]

CLOCK = datetime(2024, 12, 8, tzinfo=timezone.utc)
# Which variants run: ``server_down`` (a JVM per run), ``server_up`` (the long-lived Spark and, in a version
# that has it, the command server ``spark start`` keeps next to it, where the project's launcher starts runs).
VARIANTS = [
    v for v in os.environ.get("BENCH_AUTOMATION_VARIANTS", "server_down,server_up").split(",") if v
]  # a Sunday midnight: the Saturday and its week complete


def settled(project, instance, marker_key, partition: str, marker_before: int) -> bool:
    import dagster as dg

    from incremental_assets.orchestration.instance import ACTIVE_RUN_STATUSES
    from incremental_assets.orchestration.sensors import evaluate
    from incremental_assets.orchestration.staleness import latest_ids
    from incremental_assets.orchestration.translator import ModelTranslator

    if latest_ids(instance, marker_key).get(partition, 0) <= marker_before:
        return False
    if instance.get_run_records(filters=dg.RunsFilter(statuses=ACTIVE_RUN_STATUSES), limit=1):
        return False
    decision = evaluate(project, ModelTranslator(), instance, None, CLOCK)
    return not decision.requests and not decision.waiting


def scenario_automation(*, orders_per_day: int, days: int = 37, before: str | None = None) -> dict:
    """The latency with and without the long-lived Spark server, side by side; each in its own process (a
    process holds either a local Spark session or a Spark Connect one, not both). With ``before`` (a
    checkout of another version), that version's code is measured the same way, in the same invocation."""
    import json
    import subprocess

    from peer import fresh_env

    figures = {}
    codes = [("before", before)] if before else []
    for label, code in [*codes, ("after", str(HERE.parent))]:
        for variant in VARIANTS:
            done = subprocess.run(
                [sys.executable, __file__, str(orders_per_day), str(days), variant],
                capture_output=True,
                text=True,
                env={**fresh_env(), "BENCH_CODE": code},
            )  # each variant its own project and Dagster home
            if done.returncode != 0:
                raise RuntimeError(f"automation {variant} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
            name = f"{label} {variant}"
            figures[name] = json.loads(done.stdout[done.stdout.index("{") :])
            for arrival in ("new_hour", "late_rows"):
                got = figures[name][arrival]
                print(f"{name} {arrival}: {got['arrival_to_settled_seconds']}s, {got['runs']} runs", flush=True)
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
        return {"code": str(REPO), "spark_server": server, **_measure(root, project, orders_per_day)}


@contextlib.contextmanager
def spark_server(settings):
    from incremental_assets.spark.connect_server import start_server, stop_server, warm_up

    record, _ = start_server(settings)
    try:
        warm_up(record.url)
        _start_command_server(settings, record.pid)
        yield record
    finally:
        stop_server(settings)  # the command server ends with it


def _start_command_server(settings, spark_pid: int) -> None:
    """What `spark start` does next to the server, in a version that has a command server."""
    try:
        from incremental_assets.cli.command_server import start
        from incremental_assets.spark.connect_server import state_dir
    except ImportError:
        return
    if start(Path(settings.project_dir).resolve(), spark_pid, state_dir(settings)) is None:
        raise RuntimeError("the command server did not start")


LATE_HOUR = datetime(2024, 12, 3, 10, tzinfo=timezone.utc)  # a Tuesday: its hour, day and week are complete


def append_late_orders(root: Path, orders_per_day: int, count: int = 3) -> int:
    """``count`` late orders for ``LATE_HOUR`` (loaded days ago), appended to the order sources in one
    commit each; the sources still reach where they did."""
    from deltalake import DeltaTable, write_deltalake

    from incremental_assets.demo.sources import (
        loaded_until,
        loaded_until_commit,
        location,
        next_order_id,
        saved_shop,
    )

    shop = saved_shop(root, 7)
    batch = shop.orders_for_day(
        LATE_HOUR.date(), orders_per_day, late_after=2_000_000, hour=LATE_HOUR.hour, count=count
    )
    existing = DeltaTable(location(root, "raw.orders")).to_pyarrow_dataset()
    orders, order_items = batch.to_tables(first_order_id=next_order_id(existing))
    reach = loaded_until_commit(loaded_until(root))
    for name, table in (("raw.order_items", order_items), ("raw.orders", orders)):
        write_deltalake(
            location(root, name), table, mode="append", partition_by=["order_date"], commit_properties=reach
        )
    return orders.num_rows + order_items.num_rows


def _measure(root: Path, project, orders_per_day: int) -> dict:
    from deltalake import DeltaTable

    from incremental_assets.demo import append_demo_hours
    from incremental_assets.orchestration.build_definitions import build_definitions
    from incremental_assets.orchestration.instance import open_instance
    from incremental_assets.orchestration.runner import Runner
    from incremental_assets.orchestration.sensors import AutomationCursor

    from helpers import automation_daemon

    instance = open_instance(project.settings.dagster_home, project.settings.max_concurrent_runs)
    began = time.perf_counter()
    assert Runner(project, instance, build_definitions(project)).run(project.ordered(), auto=True, now=CLOCK).success
    backfill = time.perf_counter() - began
    sources = {
        s.name: f"v{DeltaTable(s.location).version()}"
        for s in project.sources.values()
        if s.format == "delta" and s.time_column
    }
    cursor = AutomationCursor(sources=sources).dump()
    out: dict = {"backfill_seconds": round(backfill, 1)}
    with automation_daemon(root, project.settings.dagster_home, CLOCK, root / "daemon.log", cursor) as daemon:
        time.sleep(3)
        out["new_hour"] = _arrival(
            root,
            project,
            instance,
            daemon,
            "2024-12-07-23:00",
            lambda: append_demo_hours(root, hours=1, orders_per_day=orders_per_day).rows,
        )
        time.sleep(3)
        out["late_rows"] = _arrival(
            root,
            project,
            instance,
            daemon,
            LATE_HOUR.strftime("%Y-%m-%d-%H:%M"),
            lambda: append_late_orders(root, orders_per_day),
        )
    return out


def _arrival(root: Path, project, instance, daemon, partition: str, append) -> dict:
    """Data arrives (``append``); the time until every model is settled again, ``partition`` of
    ``shop.hourly_orders`` materialized anew among them, and the runs the daemon launched for it."""
    import dagster as dg

    from incremental_assets.orchestration.staleness import latest_ids

    marker = dg.AssetKey(["shop", "hourly_orders"])
    before = latest_ids(instance, marker).get(partition, 0)
    automation = dg.RunsFilter(tags={"incremental_assets/launched_by": "automation"})
    runs_before = {r.dagster_run.run_id for r in instance.get_run_records(filters=automation)}
    arrived, arrived_at = time.perf_counter(), time.time()
    appended = append()
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        if daemon.poll() is not None:
            raise RuntimeError((root / "daemon.log").read_text()[-3000:])
        if settled(project, instance, marker, partition, before):
            break
        time.sleep(0.5)
    else:
        raise RuntimeError("not settled in 15 minutes:\n" + (root / "daemon.log").read_text()[-3000:])
    elapsed = time.perf_counter() - arrived
    records = [r for r in instance.get_run_records(filters=automation) if r.dagster_run.run_id not in runs_before]
    failed = [r.dagster_run.run_id for r in records if r.dagster_run.status != dg.DagsterRunStatus.SUCCESS]
    if failed:
        raise RuntimeError(f"automation runs failed: {failed}")
    return {
        "arrival_to_settled_seconds": round(elapsed, 1),
        "runs": len(records),
        "rows_appended": appended,
        "runs_computed": _computed(instance, records, arrived_at),
    }


def _computed(instance, records, arrived_at: float) -> list[dict]:
    """Each run, first launched first: its assets and range, when it was requested, started and ended
    (seconds after the arrival), its steps' spans, and each (model, partition) it materialized, to check
    none is twice."""
    import dagster as dg

    out = []
    for record in sorted(records, key=lambda r: r.create_timestamp.timestamp()):
        run = record.dagster_run
        events = instance.get_records_for_run(run.run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION).records
        out.append(
            {
                "assets": sorted(k.to_user_string() for k in run.asset_selection or ()),
                "range": run.tags.get("dagster/asset_partition_range_start", "full")
                + ".."
                + run.tags.get("dagster/asset_partition_range_end", ""),
                "requested": round(record.create_timestamp.timestamp() - arrived_at, 1),
                "started": round((record.start_time or 0) - arrived_at, 1),
                "ended": round((record.end_time or 0) - arrived_at, 1),
                "materialized": sorted(
                    f"{e.event_log_entry.dagster_event.asset_key.to_user_string()}"
                    f"@{e.event_log_entry.dagster_event.partition or 'full'}"
                    for e in events
                ),
                "steps": _steps(instance, run.run_id, arrived_at),
            }
        )
    return out


def _steps(instance, run_id: str, arrived_at: float) -> dict[str, str]:
    """Each step of a run: when it started and ended, seconds after the arrival (``start-end``)."""
    import dagster as dg

    spans: dict[str, list[float]] = {}
    for kind in (dg.DagsterEventType.STEP_START, dg.DagsterEventType.STEP_SUCCESS, dg.DagsterEventType.STEP_FAILURE):
        for record in instance.get_records_for_run(run_id, of_type=kind).records:
            entry = record.event_log_entry
            spans.setdefault(entry.step_key or "?", []).append(entry.timestamp - arrived_at)
    return {step: "-".join(f"{t:.1f}" for t in sorted(times)) for step, times in sorted(spans.items())}


if __name__ == "__main__":
    import json

    orders, days = (int(sys.argv[1]), int(sys.argv[2])) if len(sys.argv) > 2 else (200, 37)
    before = os.environ.get("BENCH_BEFORE")  # a checkout of the previous version, measured alongside
    if len(sys.argv) > 3:  # one variant, as the scenario runs it
        print(
            json.dumps(one_arrival(orders_per_day=orders, days=days, server=sys.argv[3] == "server_up"), indent=2),
            flush=True,
        )
        # The backfill's Spark Connect session outlives its server (stopped above): at a normal exit its
        # client would retry the stopped server for minutes before giving up.
        os._exit(0)
    else:
        print(json.dumps(scenario_automation(orders_per_day=orders, days=days, before=before), indent=2))
