"""Benchmark runner: every figure is a ratio measured side by side in one run, median of repetitions.

    .venv/bin/python benchmarks/run.py                     # all scenarios, default sizes
    .venv/bin/python benchmarks/run.py scale incremental   # some scenarios
    BENCH_ORDERS_PER_DAY=20000 .venv/bin/python benchmarks/run.py incremental

Scenarios:
  scale        load + analyse + build Definitions for 100 / 1,000 / 5,000 generated models (subprocess each)
  incremental  one new day vs a full refresh of shop.order_lines, at three history sizes
  backfill     a year as one single-run window vs the bare query written by plain Spark (the floor),
               and 30 one-interval runs vs one 30-interval run

Results are printed and written to benchmarks/results.json; RESULTS.md is written by hand from them.
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

REPS = int(os.environ.get("BENCH_REPS", "3"))
ORDERS_PER_DAY = int(os.environ.get("BENCH_ORDERS_PER_DAY", "5000"))


def median_time(fn, reps: int = REPS) -> float:
    times = []
    for _ in range(reps):
        began = time.perf_counter()
        fn()
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def example_project(root: Path, days: int, orders_per_day: int):
    from incremental_assets.demo import generate_demo_data
    from incremental_assets.project import load_project

    shutil.copytree(REPO / "models", root / "models")
    shutil.copy(REPO / "sources.yaml", root / "sources.yaml")
    generate_demo_data(root, start=date(2024, 1, 1), days=days, orders_per_day=orders_per_day)
    return load_project(root)


def spark_session():
    from incremental_assets.execution import build_spark_session
    from incremental_assets.settings import DEFAULT_SPARK_CONF

    conf = dict(DEFAULT_SPARK_CONF)
    conf.update({"spark.master": "local[2]", "spark.driver.memory": "4g", "spark.sql.shuffle.partitions": "4"})
    return build_spark_session(conf, app_name="incremental_assets_bench")


def scenario_scale() -> dict:
    import project_scale

    return {"sizes": project_scale.main(["100", "1000", "5000"])}


def scenario_incremental(spark) -> dict:
    from incremental_assets.execution import Executor
    from incremental_assets.plan import plan_run
    from incremental_assets.time_window import TimeWindow, utc

    rows = []
    for days in (91, 182, 366):
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
            row = {"days": days, "orders_per_day": ORDERS_PER_DAY, "full_refresh_s": round(t_full, 2),
                   "one_new_day_s": round(t_day, 2), "ratio_day_to_full": round(t_day / t_full, 4)}
            print(f"incremental: {days} days: full refresh {t_full:.2f}s, one new day {t_day:.2f}s, ratio 1/{t_full / t_day:.1f}", flush=True)
            rows.append(row)
    return {"rows": rows}


def scenario_backfill(spark) -> dict:
    from pyspark.sql import functions as F

    from incremental_assets.execution import Executor
    from incremental_assets.plan import plan_run
    from incremental_assets.time_window import TimeWindow, batches, utc

    with tempfile.TemporaryDirectory() as tmp:
        project = example_project(Path(tmp), 366, ORDERS_PER_DAY)
        model = project.model("shop.order_lines")
        year = TimeWindow(utc(2024, 1, 1), utc(2025, 1, 1))
        counter = iter(range(10**6))

        def framework():
            wh = Path(tmp) / f"wh{next(counter)}"
            p = dataclasses.replace(project, settings=dataclasses.replace(project.settings, warehouse=str(wh)))
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
        t_floor = median_time(floor)
        t_single = median_time(framework)
        print(f"backfill: 366 days single run {t_single:.2f}s vs floor {t_floor:.2f}s: {t_single / t_floor:.2f}x", flush=True)

        month = TimeWindow(utc(2024, 6, 1), utc(2024, 7, 1))

        def per_interval():
            wh = Path(tmp) / f"wh{next(counter)}"
            p = dataclasses.replace(project, settings=dataclasses.replace(project.settings, warehouse=str(wh)))
            ex = Executor(spark, p)
            for day in batches(month, "day", 1):
                ex.execute(plan_run(p, p.model(model.name), day))

        def one_run():
            wh = Path(tmp) / f"wh{next(counter)}"
            p = dataclasses.replace(project, settings=dataclasses.replace(project.settings, warehouse=str(wh)))
            Executor(spark, p).execute(plan_run(p, p.model(model.name), month))

        t_per = median_time(per_interval, reps=1)
        t_one = median_time(one_run)
        print(f"backfill: 30 one-day runs {t_per:.2f}s vs one 30-day run {t_one:.2f}s: {t_per / t_one:.1f}x", flush=True)
    return {
        "year_single_run_s": round(t_single, 2),
        "year_floor_s": round(t_floor, 2),
        "single_run_over_floor": round(t_single / t_floor, 3),
        "month_per_interval_s": round(t_per, 2),
        "month_one_run_s": round(t_one, 2),
        "per_interval_over_one_run": round(t_per / t_one, 2),
    }


def machine() -> dict:
    return {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "memory_gb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "java": subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()[0],
    }


def main(argv: list[str]) -> None:
    chosen = argv or ["scale", "incremental", "backfill"]
    results: dict = {"machine": machine(), "command": "benchmarks/run.py " + " ".join(argv), "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
    spark = spark_session() if any(s != "scale" for s in chosen) else None
    for name in chosen:
        if name == "scale":
            results["scale"] = scenario_scale()
        elif name == "incremental":
            results["incremental"] = scenario_incremental(spark)
        elif name == "backfill":
            results["backfill"] = scenario_backfill(spark)
        else:
            raise SystemExit(f"unknown scenario {name}")
    out = HERE / "results.json"
    previous = json.loads(out.read_text()) if out.exists() else {}
    previous.update({k: v for k, v in results.items()})
    out.write_text(json.dumps(previous, indent=2) + "\n")
    print(f"written {out}")


if __name__ == "__main__":
    main(sys.argv[1:])
