"""Where a year's backfill spends its Spark time: the same query over the same inputs, written five ways.

One project (the example's shop.order_lines without its audits, ``BENCH_ORDERS_PER_DAY`` orders a day, 366 days),
one local Spark built from the product's default settings (local[2], 4 GB driver), the year's plan rendered
and its inputs registered as a run does; then, in turns (the order rotating, ``BENCH_REPS`` turns):

* ``query``: the query alone, its rows discarded (Spark's ``noop`` writer): reading and joining;
* ``few_files``: a plain parquet write, one file per task, no partition folders;
* ``one_file_per_day``: repartitioned by day and written partitioned by day (one file per day, the layout a
  table of ours has: each interval its own files, so one interval can be replaced alone);
* ``files_per_task_per_day``: written partitioned by day without repartitioning (every task writes a file
  into each day it holds; what an ``INSERT OVERWRITE`` into a day-partitioned table does, SQLMesh's write);
* ``ours``: ``Executor.execute`` of the year (the staged write as ``one_file_per_day``, plus the Delta commit).

    .venv/bin/python benchmarks/year_write.py --out=FILE

Each variant's wall seconds per turn and their medians; the files each wrote.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import statistics
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

DAYS = 366
REPS = int(os.environ.get("BENCH_REPS", "3"))
ORDERS_PER_DAY = int(os.environ.get("BENCH_ORDERS_PER_DAY", "5000"))


def _files(folder: Path) -> int:
    return sum(1 for _ in folder.rglob("*.parquet")) if folder.exists() else 0


def measure(root: Path) -> dict:
    from peer import our_model
    from pyspark.sql import functions as F

    from incremental_assets.demo import generate_demo_data
    from incremental_assets.load.project import load_project
    from incremental_assets.model.intervals import TimeWindow, utc
    from incremental_assets.model.settings import DEFAULT_SPARK_CONF
    from incremental_assets.plan.run_plan import plan_run
    from incremental_assets.spark.executor import Executor
    from incremental_assets.spark.session import build_spark_session
    from incremental_assets.spark.writes import spark_partition_expression

    our_model(root)
    generate_demo_data(root, start=date(2024, 1, 1), days=DAYS, orders_per_day=ORDERS_PER_DAY)
    project = load_project(root)
    model = project.model("shop.order_lines")
    first = utc(2024, 1, 1)
    year = TimeWindow(first, utc(2025, 1, 1))
    conf = {
        **DEFAULT_SPARK_CONF,
        "spark.master": "local[2]",
        "spark.driver.memory": "4g",
        "spark.sql.warehouse.dir": str(root / "catalog"),
    }
    spark = build_spark_session(conf)
    counter = itertools.count()
    written: dict[str, int] = {}

    def rows():
        plan = plan_run(project, model, year)
        Executor(spark, project).register(plan)
        return spark.sql(plan.sql).withColumn("ia_interval", F.expr(spark_partition_expression(model)))

    def out(name: str) -> Path:
        return root / f"{name}-{next(counter)}"

    def query():
        rows().write.format("noop").mode("overwrite").save()

    def few_files():
        rows().write.parquet(str(folder := out("few")))
        written["few_files"] = _files(folder)

    def one_file_per_day():
        rows().repartition("ia_interval").write.partitionBy("ia_interval").parquet(str(folder := out("per-day")))
        written["one_file_per_day"] = _files(folder)

    def files_per_task_per_day():
        rows().write.partitionBy("ia_interval").parquet(str(folder := out("per-task")))
        written["files_per_task_per_day"] = _files(folder)

    def ours():
        p = dataclasses.replace(project, settings=dataclasses.replace(project.settings, warehouse=str(out("wh"))))
        Executor(spark, p).execute(plan_run(p, p.model(model.name), year))

    variants = {
        "query": query,
        "few_files": few_files,
        "one_file_per_day": one_file_per_day,
        "files_per_task_per_day": files_per_task_per_day,
        "ours": ours,
    }
    for fn in variants.values():  # warm-up: every path once, untimed
        fn()
    times: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    for turn in range(REPS):
        for name in names[turn % len(names) :] + names[: turn % len(names)]:
            began = time.perf_counter()
            variants[name]()
            times[name].append(round(time.perf_counter() - began, 2))
        print(f"year_write: turn {turn + 1}: " + ", ".join(f"{n} {t[-1]:.2f}s" for n, t in times.items()), flush=True)
    spark.stop()
    medians = {name: round(statistics.median(t), 2) for name, t in times.items()}
    return {
        "days": DAYS,
        "orders_per_day": ORDERS_PER_DAY,
        "reps": REPS,
        "median_s": medians,
        "every_turn_s": times,
        "files": written,
        "ratio_to_query": {name: round(s / medians["query"], 2) for name, s in medians.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="year-write-") as tmp:
        result = measure(Path(tmp))
    result["load_average"] = os.getloadavg()[0]
    print(json.dumps(result, indent=2))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
