"""The long-lived local Spark (``incremental-assets spark start``) against a JVM per command.

One project (the example's shop.order_lines, ``BENCH_ORDERS_PER_DAY`` orders a day, a year of history and
a few new days after it), every figure from this one run:

  in-process   the year as one single run: ``Executor.execute`` on a warm local session in this process
               (the backfill scenario's "single run"; the reference for the CLI's year), in turns with
               the CLI's year so that both see the same machine
  server start ``incremental-assets spark start`` (JVM start and warm-up), paid once
  cli year     ``incremental-assets run shop.order_lines --start S --end E`` for the year, in a fresh process,
               with the server up (and once with it down)
  new day      ``incremental-assets run --auto --end D`` for a day the table does not have yet, in a fresh
               process, with the server up and with it down (a new day each time)

A/B of the CLI's year, in the same turns (the order rotating): without the driver-side file listing of a
local Spark, and without the command's garbage-collector settings (``main`` called as a library would). Before
the turns, one year each way untimed: the server's first large query compiles its code paths (reported as
``cli_year_first_after_start_s``), as the in-process session's earlier queries did.
The CLI's year table is checked equal (rows and revenue of two days) to the in-process one.

One new day, A/B (``BENCH_SPARK_SERVER_BASELINE``, a git commit, default ``a026f9a``; empty: not measured): in
turns with the server up, the order rotating, each a new day: this checkout's command, the command of the product
at that commit (checked out into a temporary folder and put first on ``PYTHONPATH``, same project, same server),
the same command in a process of its own (``INCREMENTAL_ASSETS_COMMAND_SERVER=0``: not handed to the command
server ``spark start`` keeps, so it imports its libraries itself), and the same new day as one in-process
single run on the warm session (``Executor.execute`` of that day).
``BENCH_SPARK_SERVER_PARTS=day`` measures only this (no years, no server-down runs).
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from datetime import date, timedelta
from pathlib import Path

SETTINGS = """\
spark:
  conf:
    spark.driver.memory: 4g
"""


LISTING_JOB_DEFAULT = '{"spark.sql.sources.parallelPartitionDiscovery.threshold": "32"}'  # Spark's own default
PLAIN_MAIN = (
    "import sys; from incremental_assets.cli.commands import main; sys.exit(main())"  # the collector as Python sets it
)


def _cli(project: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "incremental_assets.cli", *args, "--project", str(project)]


class _InProcess:
    """The year as one single run on this process's warm session (the reference for the CLI's year)."""

    def __init__(self, spark, project_dir: Path, warehouse: Path, start: date, end: date):
        import dataclasses

        from incremental_assets.load.project import load_project
        from incremental_assets.model.intervals import TimeWindow, utc
        from incremental_assets.plan.run_plan import plan_run
        from incremental_assets.spark.executor import Executor

        project = load_project(project_dir)
        self.project = dataclasses.replace(
            project, settings=dataclasses.replace(project.settings, warehouse=str(warehouse))
        )
        self.model = self.project.model("shop.order_lines")
        self.executor = Executor(spark, self.project)
        self.plan_run = plan_run
        self.days_after = 0
        self.year = TimeWindow(utc(start.year, start.month, start.day), utc(end.year, end.month, end.day))
        self.executor.execute(
            plan_run(self.project, self.model, TimeWindow(self.year.start, self.year.start + timedelta(days=1)))
        )

    def day_run(self, day: date) -> float:
        """One new day (the day after the table's last one) as one single run, as the CLI's new day runs it."""
        from incremental_assets.model.intervals import TimeWindow, utc

        start = utc(day.year, day.month, day.day)
        began = time.perf_counter()
        self.executor.execute(self.plan_run(self.project, self.model, TimeWindow(start, start + timedelta(days=1))))
        return time.perf_counter() - began

    def next_day(self) -> date:
        """The day after the in-process table's last one (the year, then each new day run here)."""
        self.days_after += 1
        return (self.year.end + timedelta(days=self.days_after - 1)).date()

    def year_run(self) -> float:
        began = time.perf_counter()
        self.executor.execute(self.plan_run(self.project, self.model, self.year))
        seconds = time.perf_counter() - began
        print(f"spark-server: in-process single run of the year {seconds:.2f}s", flush=True)
        return seconds


def _summary(
    in_process: list[float], cli_year: list[float], year_down: float, day_up: list[float], day_down: list[float]
) -> dict:
    med = statistics.median
    return {
        "in_process_year_s": round(med(in_process), 2),
        "cli_year_server_up_s": round(med(cli_year), 2),
        "cli_year_server_up_over_in_process": round(med(cli_year) / med(in_process), 2),
        "cli_year_server_down_s": round(year_down, 2),
        "new_day_server_up_s": round(med(day_up), 2),
        "new_day_server_down_s": round(med(day_down), 2),
        "new_day_down_over_up": round(med(day_down) / med(day_up), 2),
        "every_run_s": {
            "in_process": [round(t, 2) for t in in_process],
            "cli_year_up": [round(t, 2) for t in cli_year],
            "new_day_up": [round(t, 2) for t in day_up],
            "new_day_down": [round(t, 2) for t in day_down],
        },
    }


BASELINE = os.environ.get("BENCH_SPARK_SERVER_BASELINE", "a026f9a")
DAY_ONLY = os.environ.get("BENCH_SPARK_SERVER_PARTS", "") == "day"


def _one_day_ab(one_new_day, single_run: _InProcess, env: dict[str, str], baseline: Path | None, reps: int) -> dict:
    """One new day in turns, the order rotating: this checkout's command, the baseline's command (same project
    and server), and the same day as one in-process single run. Medians and every run, in seconds."""
    variants = {"in_process": None, "cli": env, "cli_own_process": {**env, "INCREMENTAL_ASSETS_COMMAND_SERVER": "0"}}
    if baseline is not None:
        variants["baseline"] = {**env, "PYTHONPATH": str(baseline)}
    one_new_day(env)  # untimed: the first small job after the year
    times: dict[str, list[float]] = {name: [] for name in variants}
    for rep in range(reps):
        names = list(variants)
        for name in names[rep % len(names) :] + names[: rep % len(names)]:
            if name == "in_process":
                times[name].append(single_run.day_run(single_run.next_day()))
            else:
                times[name].append(one_new_day(variants[name]))
            print(f"spark-server: one new day, server up ({name}) {times[name][-1]:.2f}s", flush=True)
    med = {name: round(statistics.median(runs), 2) for name, runs in times.items()}
    out = {f"new_day_ab_{name}_s": value for name, value in med.items()}
    out["new_day_ab_cli_over_in_process"] = round(med["cli"] / med["in_process"], 2)
    out["new_day_ab_cli_over_own_process"] = round(med["cli"] / med["cli_own_process"], 2)
    if baseline is not None:
        out["new_day_ab_baseline"] = BASELINE
        out["new_day_ab_cli_over_baseline"] = round(med["cli"] / med["baseline"], 2)
    out["new_day_ab_every_run_s"] = {name: [round(t, 2) for t in runs] for name, runs in times.items()}
    return out


def _checkout(commit: str, into: Path) -> Path:
    from changes import _checkout as checkout

    return checkout(commit, into)


def scenario_spark_server(spark, root: Path, *, days: int, reps: int, orders_per_day: int) -> dict:
    from peer import fresh_env, our_day_totals, our_model, run

    from incremental_assets.demo import generate_demo_data

    project = root / "project"
    our_model(project)
    (project / "incremental_assets.yaml").write_text(SETTINGS)
    new_days = 2 * reps + 3 * reps + 1
    generate_demo_data(project, start=date(2024, 1, 1), days=days + new_days, orders_per_day=orders_per_day)
    start, end = date(2024, 1, 1), date(2024, 1, 1) + timedelta(days=days)
    figures: dict = {"days": days, "orders_per_day": orders_per_day, "reps": reps}

    single_run = _InProcess(spark, project, root / "wh-inproc", start, end)  # warmed up on one day
    env = fresh_env()
    year = ["run", "shop.order_lines", "--start", start.isoformat(), "--end", end.isoformat()]
    new_day = iter(range(1, new_days + 1))
    baseline = _checkout(BASELINE, Path(tempfile.mkdtemp(dir=root)) / "baseline") if BASELINE else None

    def one_new_day(variant_env: dict[str, str] = env) -> float:
        until = end + timedelta(days=next(new_day))
        return run(_cli(project, "run", "--auto", "--end", until.isoformat()), project, variant_env)

    figures["server_start_s"] = round(run(_cli(project, "spark", "start"), project, env), 2)
    try:
        # The server's first large query compiles its code paths (the in-process session has done so in
        # the warm-up and any scenario before): one year each, untimed for the ratio, reported on its own.
        figures["cli_year_first_after_start_s"] = round(run(_cli(project, *year), project, env), 2)
        single_run.year_run()
        if DAY_ONLY:
            figures.update(_one_day_ab(one_new_day, single_run, env, baseline, reps))
            return figures
        variants = {  # the CLI's year as shipped, and without each of two start-up changes (A/B)
            "cli": env,
            "listing_job": {**env, "INCREMENTAL_ASSETS_SPARK_CONF": LISTING_JOB_DEFAULT},  # Spark's listing by a job
            "gc_settings": env,  # the collector's defaults: main called as a library would
        }
        times: dict[str, list[float]] = {name: [] for name in variants}
        in_process = []
        for rep in range(reps):  # side by side, in turns, the order rotating; each replaces the year in one commit
            in_process.append(single_run.year_run())
            names = list(variants)
            for name in names[rep % len(names) :] + names[: rep % len(names)]:
                argv = (
                    [sys.executable, "-c", PLAIN_MAIN, *year, "--project", str(project)]
                    if name == "gc_settings"
                    else _cli(project, *year)
                )
                times[name].append(run(argv, project, variants[name]))
                print(f"spark-server: CLI year backfill, server up ({name}) {times[name][-1]:.2f}s", flush=True)
        cli_year = times.pop("cli")
        without = times
        day_up = []
        for _ in range(reps):
            day_up.append(one_new_day())
            print(f"spark-server: one new day (run --auto), server up {day_up[-1]:.2f}s", flush=True)
        figures.update(_one_day_ab(one_new_day, single_run, env, baseline, reps))
    finally:
        run(_cli(project, "spark", "stop"), project, env)
    day_down = []
    for _ in range(reps):
        day_down.append(one_new_day())
        print(f"spark-server: one new day (run --auto), server down {day_down[-1]:.2f}s", flush=True)
    year_down = run(_cli(project, *year), project, env)
    print(f"spark-server: CLI year backfill, server down {year_down:.2f}s", flush=True)

    last = end - timedelta(days=1)
    ours, reference = our_day_totals(str(project / "warehouse"), last), our_day_totals(str(root / "wh-inproc"), last)
    if ours != reference:
        raise RuntimeError(f"the CLI's table differs from the in-process one: {ours} vs {reference}")
    figures.update(_summary(in_process, cli_year, year_down, day_up, day_down), tables_checked_equal=ours)
    figures["cli_year_without_s"] = {name: round(statistics.median(runs), 2) for name, runs in without.items()}
    figures["every_run_s"]["cli_year_without"] = {name: [round(t, 2) for t in runs] for name, runs in without.items()}
    print(
        f"spark-server: new day {figures['new_day_server_up_s']}s up vs "
        f"{figures['new_day_server_down_s']}s down; CLI year "
        f"{figures['cli_year_server_up_s']}s = {figures['cli_year_server_up_over_in_process']}x the "
        "in-process single run",
        flush=True,
    )
    return figures
