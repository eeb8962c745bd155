"""Per-run overhead: one small interval through each layer, as ratios to the bare query.

bare        the rendered query with the same registered inputs, written by a plain parquet write
executor    Executor.execute in this process (pushdown, partition key, staging write, Delta commit)
dagster     an in-process Dagster run (what every CLI interval is): Runner.run_window
cli         `incremental-assets run` in a fresh process: Python, Dagster, JVM start-up included
dagster_cli `dagster asset materialize` in a fresh process (the run launched through Dagster's own CLI)
connect     `incremental-assets run` in a fresh process against a long-lived Spark Connect server
per extra   a CLI run over 1 vs 8 one-day batches: the cost of each extra interval in one command
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import time
from datetime import date, timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

DAYS = 30


def _timed(argv: list[str], env: dict[str, str], cwd: Path) -> float:
    from peer import run

    return run(argv, cwd, env)


def per_interval_project(root: Path) -> Path:
    """The example project with shop.order_lines cut into one-day batches (batch_size 1)."""
    project = root / "batched"
    shutil.copytree(root / "models", project / "models")
    shutil.copy(REPO / "sources.yaml", project / "sources.yaml")
    model = project / "models" / "order_lines.sql"
    model.write_text(
        model.read_text().replace("time_column order_date\n", "time_column order_date,\n    batch_size 1\n", 1)
    )
    (project / "data").symlink_to(root / "data")
    return project


def scenario_overhead(spark, root: Path, *, reps: int, orders_per_day: int, connect: bool = True) -> dict:
    import dataclasses

    from peer import our_model

    from incremental_assets.demo import generate_demo_data
    from incremental_assets.load.project import load_project
    from incremental_assets.model.intervals import TimeWindow, utc
    from incremental_assets.orchestration.build_definitions import build_definitions
    from incremental_assets.orchestration.instance import open_instance
    from incremental_assets.orchestration.runner import Runner
    from incremental_assets.plan.run_plan import plan_run
    from incremental_assets.spark.executor import Executor

    our_model(root)  # shop.order_lines alone, without its audits: the bare query runs none either
    generate_demo_data(root, start=date(2024, 1, 1), days=DAYS, orders_per_day=orders_per_day)
    project = load_project(root)
    project = dataclasses.replace(
        project, settings=dataclasses.replace(project.settings, warehouse=str(root / "wh-inproc"))
    )
    model = project.model("shop.order_lines")
    day = date(2024, 1, 1) + timedelta(days=DAYS - 1)
    window = TimeWindow(utc(day.year, day.month, day.day), utc(day.year, day.month, day.day) + timedelta(days=1))
    ex = Executor(spark, project)
    counter = iter(range(10**6))

    def bare():
        plan = plan_run(project, model, window)
        ex.register(plan)
        spark.sql(plan.sql).coalesce(1).write.parquet(str(root / f"bare{next(counter)}"))

    def executor():
        ex.execute(plan_run(project, model, window))

    instance = open_instance(root / "dagster-inproc")
    runner = Runner(project, instance, build_definitions(project))

    def dagster_run():
        record = runner.run_window(model, window)
        assert record.success, record.error

    med = statistics.median
    figures: dict[str, float] = {}
    for fn in (bare, executor, dagster_run):  # warm-up: the session, the table, the instance
        fn()
    for name, fn in (("bare", bare), ("executor", executor), ("dagster", dagster_run)):
        times = []
        for _ in range(reps):
            began = time.perf_counter()
            fn()
            times.append(time.perf_counter() - began)
        figures[name] = med(times)
        print(f"overhead: {name} {figures[name]:.2f}s", flush=True)

    base_env = {
        **os.environ,
        "INCREMENTAL_ASSETS_WAREHOUSE": str(root / "wh-cli"),
        "DAGSTER_HOME": str(root / "dagster-cli"),
    }
    one_day = ["--start", day.isoformat(), "--end", (day + timedelta(days=1)).isoformat()]
    cli = [sys.executable, "-m", "incremental_assets.cli", "run", "shop.order_lines", "--project", str(root)]
    _timed(cli + one_day, base_env, root)  # the table exists: every measured run replaces one day
    figures["cli"] = med([_timed(cli + one_day, base_env, root) for _ in range(reps)])
    print(f"overhead: cli {figures['cli']:.2f}s", flush=True)

    dagster_cli = [
        str(Path(sys.executable).parent / "dagster"),
        "asset",
        "materialize",
        "-m",
        "incremental_assets.definitions",
        "--select",
        "shop/order_lines",
        "--partition",
        day.isoformat(),
    ]
    env = {**base_env, "INCREMENTAL_ASSETS_PROJECT": str(root)}
    figures["dagster_cli"] = med([_timed(dagster_cli, env, root) for _ in range(reps)])
    print(f"overhead: dagster asset materialize {figures['dagster_cli']:.2f}s", flush=True)

    # One command over 1 vs 8 intervals (one Dagster run each, one Spark session for the command).
    batched = per_interval_project(root)
    eight = ["--start", (day - timedelta(days=7)).isoformat(), "--end", (day + timedelta(days=1)).isoformat()]
    cli_b = [sys.executable, "-m", "incremental_assets.cli", "run", "shop.order_lines", "--project", str(batched)]
    env_b = {
        **os.environ,
        "INCREMENTAL_ASSETS_WAREHOUSE": str(root / "wh-batched"),
        "DAGSTER_HOME": str(root / "dagster-batched"),
    }
    _timed(cli_b + eight, env_b, root)
    t1 = med([_timed(cli_b + one_day, env_b, root) for _ in range(reps)])
    t8 = med([_timed(cli_b + eight, env_b, root) for _ in range(reps)])
    figures["cli_1_interval"] = t1
    figures["cli_8_intervals"] = t8
    figures["cli_per_extra_interval"] = (t8 - t1) / 7
    print(
        f"overhead: cli 1 interval {t1:.2f}s, 8 intervals {t8:.2f}s: {(t8 - t1) / 7:.2f}s per extra interval",
        flush=True,
    )

    if connect:
        sys.path.insert(0, str(REPO / "tests"))
        from cluster.services import connect_server

        conf = {
            "spark.driver.extraJavaOptions": "-Duser.timezone=UTC",
            "spark.executor.extraJavaOptions": "-Duser.timezone=UTC",
            "spark.sql.session.timeZone": "UTC",
            "spark.driver.memory": "2g",
            "spark.sql.shuffle.partitions": "4",
        }
        with connect_server(root / "connect", master="local[2]", conf=conf) as server:
            env_c = {
                **os.environ,
                "INCREMENTAL_ASSETS_WAREHOUSE": str(root / "wh-connect"),
                "DAGSTER_HOME": str(root / "dagster-connect"),
                "INCREMENTAL_ASSETS_SPARK_REMOTE": server.url,
            }
            _timed(cli + one_day, env_c, root)  # the server's first queries warm its JVM
            figures["connect_cli"] = med([_timed(cli + one_day, env_c, root) for _ in range(reps)])
        print(f"overhead: cli through Spark Connect {figures['connect_cli']:.2f}s", flush=True)

    ratios = {
        k: round(v / figures["bare"], 2) for k, v in figures.items() if k not in ("bare", "cli_per_extra_interval")
    }
    return {
        "days": DAYS,
        "orders_per_day": orders_per_day,
        "reps": reps,
        "seconds": {k: round(v, 2) for k, v in figures.items()},
        "ratio_to_bare": ratios,
    }
