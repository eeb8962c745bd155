"""Benchmark runner: every figure is a ratio measured side by side in one run, median of repetitions.

    .venv/bin/python benchmarks/run.py                     # all scenarios, default sizes (over an hour when busy)
    .venv/bin/python benchmarks/run.py --quick             # every scenario on small data, 1 repetition (smoke)
    .venv/bin/python benchmarks/run.py scale incremental   # some scenarios
    BENCH_ORDERS_PER_DAY=20000 BENCH_REPS=5 .venv/bin/python benchmarks/run.py incremental

Scenarios:
  scale        load + analyse + build Definitions for 100 / 1,000 / 5,000 generated models (subprocess each)
  incremental  one new day vs a full refresh of shop.order_lines, at three history sizes
  backfill     a year as one single-run window vs the bare query written by plain Spark (the floor),
               vs 365 one-day runs (one process, one Spark session)
  overhead     one small interval through each layer (Executor, Dagster run, CLI, dagster CLI, Spark
               Connect) as ratios to the bare query; the cost of each extra interval in one command
  spark_server the project's long-lived Spark Connect server (`incremental-assets spark start`): one new day
               (`run --auto`) with it up vs down, the CLI's year backfill vs the in-process single run; one
               new day against an earlier commit's command and the in-process run (BENCH_SPARK_SERVER_BASELINE;
               BENCH_SPARK_SERVER_PARTS=day: only that)
  automation   new data to every downstream model recomputed by the real dagster-daemon and the automation sensor
               (BENCH_BEFORE=DIR: the product in that checkout measured alongside, side by side)
  bookkeeping  the same data as a daily and as an hourly model, 90 days, `run --auto` each: Dagster's default
               SQLite event log and one file per hour (before), the project's batched event log with one file
               per hour, and with one file per day (after), side by side (BENCH_BOOKKEEPING_REPS)
  growth       the same year at 1x, 5x and 10x the orders a day (BENCH_GROWTH_FACTORS): CLI backfill and one new
               day in fresh processes, peak memory of Python and of the Spark JVM
  changes      one column added to shop.order_lines after a year: `run --auto` of the product before the
               column-level plan (BENCH_CHANGES_BASELINE, a git commit) and of this checkout, time and Spark work
  log_history  the integrity check and opening a table at 10 / 100 / 1,000 / 3,000 commits of an hourly table
               (BENCH_LOG_SIZES): checkpoints and a check from its last look against the whole log read each time
  year         a year of hourly operation (append, late and empty hours, `run --auto --end <hour>`, daily maintenance):
               the first and last week hourly, the months between fast-forwarded a day a cycle; cost per cycle
               by phase, Delta log files read, files per day, Dagster storage, memory, tables vs a recompute
               (BENCH_YEAR_DAYS=first,forward,last; BENCH_YEAR_STEP_DAYS=N fast-forwards N days a cycle;
               plot: benchmarks/year-cost-per-cycle.svg)
  peer         dbt-spark microbatch (installed into benchmarks/.peer-venv) and SQLMesh on Spark
               (benchmarks/.sqlmesh-venv)
               (BENCH_OURS_SPARK_SERVER=1: our side on its long-lived Spark Connect server)
               vs our CLI: daily run, backfill (BENCH_PEERS=dbt,sqlmesh chooses the peers)

Results are printed and written to benchmarks/results.json (--quick: results-quick.json; --out=FILE: there);
RESULTS.md and its plots are written from them by benchmarks/report.py.
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

QUICK = "--quick" in sys.argv
REPS = int(os.environ.get("BENCH_REPS", "1" if QUICK else "3"))
ORDERS_PER_DAY = int(os.environ.get("BENCH_ORDERS_PER_DAY", "300" if QUICK else "5000"))
HISTORY_SIZES = (7, 14, 28) if QUICK else (91, 182, 366)
BACKFILL_DAYS = 14 if QUICK else 366
PEER_DAYS = 7 if QUICK else 365
SCALE_SIZES = ["20", "100"] if QUICK else ["100", "1000", "5000"]


def median_time(fn, reps: int = REPS) -> float:
    times = []
    for _ in range(reps):
        began = time.perf_counter()
        fn()
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def example_project(root: Path, days: int, orders_per_day: int):
    from incremental_assets.demo import generate_demo_data
    from incremental_assets.load.project import load_project

    shutil.copytree(REPO / "models", root / "models")
    shutil.copy(REPO / "sources.yaml", root / "sources.yaml")
    generate_demo_data(root, start=date(2024, 1, 1), days=days, orders_per_day=orders_per_day)
    return load_project(root)


def spark_session():
    from incremental_assets.model.settings import Settings
    from incremental_assets.spark.session import build_spark_session

    # A project's local Spark (local[2], 4 shuffle partitions, UTC, ...) with the benchmarks' 4 GB driver.
    settings = Settings(project_dir=REPO, warehouse=str(REPO / "warehouse"), spark_conf={"spark.driver.memory": "4g"})
    return build_spark_session(settings.spark_config(), app_name="incremental_assets_bench")


def scenario_scale() -> dict:
    import project_scale

    return {"sizes": project_scale.main(SCALE_SIZES, reps=REPS)}


def scenario_incremental(spark) -> dict:
    from incremental_assets.model.intervals import TimeWindow, utc
    from incremental_assets.plan.run_plan import plan_run
    from incremental_assets.spark.executor import Executor

    rows = []
    for days in HISTORY_SIZES:
        with tempfile.TemporaryDirectory() as tmp:
            project = example_project(Path(tmp), days, ORDERS_PER_DAY)
            model = project.model("shop.order_lines")
            ex = Executor(spark, project)
            end = utc(2024, 1, 1) + (utc(2024, 1, 2) - utc(2024, 1, 1)) * days
            full = TimeWindow(utc(2024, 1, 1), end)
            last_day = TimeWindow(end - (utc(2024, 1, 2) - utc(2024, 1, 1)), end)
            ex.execute(plan_run(project, model, full))  # warm-up, and the table exists
            t_full = median_time(lambda: ex.execute(plan_run(project, model, full)))
            t_day = median_time(lambda: ex.execute(plan_run(project, model, last_day)))
            row = {
                "days": days,
                "orders_per_day": ORDERS_PER_DAY,
                "full_refresh_s": round(t_full, 2),
                "one_new_day_s": round(t_day, 2),
                "ratio_day_to_full": round(t_day / t_full, 4),
            }
            print(
                f"incremental: {days} days: full refresh {t_full:.2f}s, one new day {t_day:.2f}s, ratio "
                f"1/{t_full / t_day:.1f}",
                flush=True,
            )
            rows.append(row)
    return {"rows": rows}


def scenario_backfill(spark) -> dict:
    from pyspark.sql import functions as F

    from incremental_assets.model.intervals import TimeWindow, batches, utc
    from incremental_assets.plan.run_plan import plan_run
    from incremental_assets.spark.executor import Executor

    days = BACKFILL_DAYS
    with tempfile.TemporaryDirectory() as tmp:
        project = example_project(Path(tmp), days, ORDERS_PER_DAY)
        model = project.model("shop.order_lines")
        first = utc(2024, 1, 1)
        year = TimeWindow(first, first + (utc(2024, 1, 2) - first) * days)
        counter = iter(range(10**6))

        def fresh():
            wh = Path(tmp) / f"wh{next(counter)}"
            return dataclasses.replace(project, settings=dataclasses.replace(project.settings, warehouse=str(wh)))

        def framework():
            p = fresh()
            Executor(spark, p).execute(plan_run(p, p.model(model.name), year))

        def floor():
            # The same query, inputs registered the same way, written by a plain partitioned parquet write.
            plan = plan_run(project, model, year)
            ex = Executor(spark, project)
            ex.register(plan)
            df = spark.sql(plan.sql).withColumn("day", F.col("order_date"))
            df.repartition("day").write.partitionBy("day").parquet(str(Path(tmp) / f"floor{next(counter)}"))

        framework()
        floor()  # warm-up both paths
        t_single, t_floor = [], []
        for rep in range(REPS):  # interleaved, so a change in the machine's load hits both alike
            for fn, out in (
                ((framework, t_single), (floor, t_floor)) if rep % 2 == 0 else ((floor, t_floor), (framework, t_single))
            ):
                began = time.perf_counter()
                fn()
                out.append(time.perf_counter() - began)
        single, floor_s = statistics.median(t_single), statistics.median(t_floor)
        print(
            f"backfill: {days} days single run {single:.2f}s vs floor {floor_s:.2f}s: {single / floor_s:.2f}x",
            flush=True,
        )

        # One-day runs in one process (one session). BENCH_PER_INTERVAL_DAYS < days measures the first N
        # intervals only and scales their time to the whole range (reported as such): on a loaded machine
        # 365 runs take longer than a session may spend.
        measured_days = min(days, int(os.environ.get("BENCH_PER_INTERVAL_DAYS", str(days))))

        def per_interval():
            p = fresh()
            ex = Executor(spark, p)
            for day in batches(year, "day", 1)[:measured_days]:
                ex.execute(plan_run(p, p.model(model.name), day))

        t_measured = median_time(per_interval, reps=1)
        t_per = t_measured * days / measured_days
        print(
            f"backfill: {measured_days} one-day runs (one session) {t_measured:.2f}s, "
            f"{t_measured / measured_days:.2f}s each; "
            f"{days} runs: {t_per:.1f}s vs one single run {single:.2f}s: {t_per / single:.1f}x",
            flush=True,
        )
    return {
        "days": days,
        "orders_per_day": ORDERS_PER_DAY,
        "reps": REPS,
        "single_run_s": round(single, 2),
        "floor_s": round(floor_s, 2),
        "single_run_over_floor": round(single / floor_s, 3),
        "per_interval_measured_runs": measured_days,
        "per_interval_measured_s": round(t_measured, 2),
        "per_interval_runs_s": round(t_per, 2),
        "per_interval_over_single_run": round(t_per / single, 2),
        "per_interval_over_floor": round(t_per / floor_s, 2),
    }


def scenario_overhead(spark) -> dict:
    import overhead

    with tempfile.TemporaryDirectory() as tmp:
        return overhead.scenario_overhead(spark, Path(tmp), reps=REPS, orders_per_day=ORDERS_PER_DAY)


def scenario_spark_server(spark) -> dict:
    from spark_server import scenario_spark_server as run

    with tempfile.TemporaryDirectory() as tmp:
        return run(spark, Path(tmp), days=BACKFILL_DAYS, reps=REPS, orders_per_day=ORDERS_PER_DAY)


def scenario_automation() -> dict:
    from automation import scenario_automation as run

    # BENCH_BEFORE: a checkout of the previous version, measured alongside in the same invocation.
    return run(orders_per_day=ORDERS_PER_DAY // 10, days=8 if QUICK else 37, before=os.environ.get("BENCH_BEFORE"))


def scenario_growth() -> dict:
    import growth

    factors = (1, 2) if QUICK else tuple(int(f) for f in os.environ.get("BENCH_GROWTH_FACTORS", "1,5,10").split(","))
    with tempfile.TemporaryDirectory() as tmp:
        return growth.scenario_growth(Path(tmp), days=PEER_DAYS, orders_per_day=ORDERS_PER_DAY, factors=factors)


def scenario_bookkeeping(spark) -> dict:
    import bookkeeping

    with tempfile.TemporaryDirectory() as tmp:
        days = int(os.environ.get("BENCH_BOOKKEEPING_DAYS", "7" if QUICK else "90"))
        reps = int(os.environ.get("BENCH_BOOKKEEPING_REPS", str(REPS)))
        return bookkeeping.scenario_bookkeeping(spark, Path(tmp), days=days, reps=reps)


def scenario_changes() -> dict:
    import changes

    with tempfile.TemporaryDirectory() as tmp:
        reps = int(os.environ.get("BENCH_CHANGES_REPS", str(REPS)))
        return changes.scenario_changes(Path(tmp), days=BACKFILL_DAYS, orders_per_day=ORDERS_PER_DAY, reps=reps)


def scenario_log_history() -> dict:
    import log_history

    sizes = os.environ.get("BENCH_LOG_SIZES", "10,100,300" if QUICK else "10,100,1000,3000")
    return log_history.scenario_log_history(tuple(int(n) for n in sizes.split(",")), reps=REPS)


def scenario_year() -> dict:
    import year

    default = "1,2,1" if QUICK else "7,351,7"
    first, forward, last = (int(n) for n in os.environ.get("BENCH_YEAR_DAYS", default).split(","))
    plot = HERE / ("year-cost-per-cycle-quick.svg" if QUICK else "year-cost-per-cycle.svg")
    step = int(os.environ.get("BENCH_YEAR_STEP_DAYS", "1"))
    return year.scenario_year(first_days=first, forward_days=forward, last_days=last, plot=plot, step_days=step)


def scenario_peer() -> dict:
    import peer

    with tempfile.TemporaryDirectory() as tmp:
        # dbt's 365-batch backfill takes minutes per repetition: BENCH_PEER_BACKFILL_REPS=1 measures it once.
        backfill_reps = int(os.environ.get("BENCH_PEER_BACKFILL_REPS", str(REPS)))
        return peer.scenario_peer(
            Path(tmp), days=PEER_DAYS, reps=REPS, orders_per_day=ORDERS_PER_DAY, backfill_reps=backfill_reps
        )


def machine() -> dict:
    import dagster
    import deltalake
    import pyspark
    import sqlglot

    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        "?",
    )
    return {
        "cpus": os.cpu_count(),
        "cpu_model": cpu,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "memory_gb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "java": subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()[0],
        "versions": {
            "pyspark": pyspark.__version__,
            "deltalake": deltalake.__version__,
            "dagster": dagster.__version__,
            "sqlglot": sqlglot.__version__,
        },
    }


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def main(argv: list[str]) -> None:
    if "-h" in argv or "--help" in argv:
        print(__doc__)
        return
    unknown = [a for a in argv if a.startswith("-") and a != "--quick" and not a.startswith("--out=")]
    if unknown:
        raise SystemExit(f"unknown option {unknown[0]}; see benchmarks/run.py --help")
    chosen = [a for a in argv if not a.startswith("--")] or [
        "scale",
        "incremental",
        "backfill",
        "overhead",
        "bookkeeping",
        "spark_server",
        "automation",
        "changes",
        "log_history",
        "peer",
        "growth",
        "year",
    ]
    results: dict = {
        "machine": machine(),
        "command": "benchmarks/run.py " + " ".join(argv),
        "environment": {k: v for k, v in os.environ.items() if k.startswith("BENCH_")},  # the scenarios' settings
        "reps": REPS,
        "orders_per_day": ORDERS_PER_DAY,
        "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "load_average_at_start": load_average(),
    }
    chosen_out = [a.split("=", 1)[1] for a in argv if a.startswith("--out=")]
    out = Path(chosen_out[0]) if chosen_out else HERE / ("results-quick.json" if QUICK else "results.json")
    spark = (
        spark_session()
        if any(s in ("incremental", "backfill", "overhead", "bookkeeping", "spark_server") for s in chosen)
        else None
    )
    scenarios = {
        "scale": scenario_scale,
        "incremental": lambda: scenario_incremental(spark),
        "backfill": lambda: scenario_backfill(spark),
        "overhead": lambda: scenario_overhead(spark),
        "bookkeeping": lambda: scenario_bookkeeping(spark),
        "automation": scenario_automation,
        "spark_server": lambda: scenario_spark_server(spark),
        "changes": scenario_changes,
        "log_history": scenario_log_history,
        "peer": scenario_peer,
        "growth": scenario_growth,
        "year": scenario_year,
    }
    failed = []
    for name in chosen:
        if name not in scenarios:
            raise SystemExit(f"unknown scenario {name}; known: {', '.join(scenarios)}")
        if name == "peer" and spark is not None:
            spark.stop()  # the peer's and our CLI's JVMs get the machine's memory and cores to themselves
            spark = None
        began = time.perf_counter()
        try:
            results[name] = scenarios[name]()
        except Exception as exc:  # one broken scenario must not lose the figures of the others
            results[name] = {"error": f"{type(exc).__name__}: {exc}"[:4000]}
            failed.append(name)
            print(f"{name} FAILED: {exc}", flush=True)
        results[name]["load_average_after"] = load_average()
        results[name]["scenario_seconds"] = round(time.perf_counter() - began, 1)
        # Written after every scenario (merged into the previous file): a long run keeps what it measured.
        previous = json.loads(out.read_text()) if out.exists() else {}
        previous.update(results, finished=time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()))
        out.write_text(json.dumps(previous, indent=2) + "\n")
    print(f"written {out}")
    if failed:
        raise SystemExit(f"failed scenarios: {', '.join(failed)}")


if __name__ == "__main__":
    main(sys.argv[1:])
