"""The first large query after ``incremental-assets spark start`` against a warm one, and where the difference goes.

One project (the example's shop.order_lines, ``BENCH_ORDERS_PER_DAY`` orders a day, 366 days, a 4 GB driver
like section 6). Each turn starts a fresh server, then runs the CLI's year
(``incremental-assets run shop.order_lines --start S --end E``, a fresh process) twice: the first is the
server's first large query ("cold"), the second the same command on the now warm server ("warm"). Around
each command the CPU seconds of the server's JVM are read per thread from ``/proc`` and grouped: the JIT's
compiler threads, the garbage collector's, Spark's task threads, the rest (driver, Connect, RPC). CPU
seconds do not depend on how busy the shared machine is; wall seconds do.

``BENCH_COLD_WARM_UP_DAYS`` (comma-separated, default ``0``): the variants, in turns (``BENCH_REPS`` turns
each, alternating). ``off``: the server started with ``spark start --no-warm-up``. ``0``: ``spark start``
as a user runs it (with its own warm-up, the project's models over their first days, inside
``server_start_s``). N > 0: that, then after the start and before the cold year the same model over its first
N days into a scratch warehouse and Dagster home (the server given as the remote), timed as ``warm_up_s``.
A variant ``N:OPTIONS`` also gives the server's JVM those options (``0:-Xms4g``); ``Nsm`` runs that N-day warm-up
with broadcast joins off (``spark.sql.autoBroadcastJoinThreshold=-1``: every join sort-merged, as a year's large
join is, while a few days' inputs are small enough to be broadcast).
The output file is written after every turn. ``BENCH_COLD_WARM_YEARS`` (default 1): warm years per turn, the
ratio taken against their median (the full runner's section 6 takes three). ``BENCH_COLD_SETTLE_S`` (default
0): seconds to sample the JIT's CPU once a second after the start, before the cold year (is it still
compiling?).

    nice -n 19 .venv/bin/python benchmarks/spark_cold.py --out=FILE

Linux only (``/proc``).
"""

from __future__ import annotations

import collections
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from datetime import date, timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

SETTINGS = "spark:\n  conf:\n    spark.driver.memory: 4g\n"
TICK = os.sysconf("SC_CLK_TCK")
WARM_YEARS = int(os.environ.get("BENCH_COLD_WARM_YEARS", "1"))
SETTLE_S = int(os.environ.get("BENCH_COLD_SETTLE_S", "0"))


def _cli(project: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "incremental_assets.cli", *args, "--project", str(project)]


def _record(project: Path) -> dict:
    return json.loads((project / ".dagster" / "spark-connect.json").read_text())


def _java_pid(project: Path) -> int:
    """The server's JVM: the recorded process (spark-submit execs java) or a member of its process group."""
    leader = _record(project)["pid"]
    group = subprocess.run(["pgrep", "-g", str(leader)], capture_output=True, text=True).stdout.split()
    for pid in [leader, *map(int, group)]:
        if Path(f"/proc/{pid}/comm").read_text().strip() == "java":
            return pid
    raise RuntimeError(f"no JVM in the server's process group {leader}")


def _kind(thread: str) -> str:
    if "Compiler" in thread:
        return "jit"
    if "GC" in thread or "G1" in thread:
        return "gc"
    return "tasks" if thread.startswith("Executor task") else "other"


def thread_cpu(pid: int) -> collections.Counter:
    """CPU seconds (user + system) of the process's threads so far, by kind of thread."""
    out: collections.Counter = collections.Counter()
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended meanwhile
            continue
        out[_kind(name)] += (int(fields[11]) + int(fields[12])) / TICK
    return out


def _settle(pid: int, seconds: int) -> list[float]:
    """The JIT threads' CPU seconds in each of the next ``seconds`` seconds, the server otherwise idle."""
    import time

    spent, last = [], thread_cpu(pid)["jit"]
    for _ in range(seconds):
        time.sleep(1.0)
        now = thread_cpu(pid)["jit"]
        spent.append(round(now - last, 2))
        last = now
    return spent


def _timed(argv: list[str], cwd: Path, env: dict[str, str]) -> float:
    from peer import run

    return run(argv, cwd, env)


SORT_MERGE = '{"spark.sql.autoBroadcastJoinThreshold": "-1"}'


def _warm_up(project: Path, env: dict[str, str], start: date, days: int, sort_merge: bool = False) -> float:
    scratch = Path(tempfile.mkdtemp(dir=project.parent))
    remote = f"sc://127.0.0.1:{_record(project)['port']}"
    scratch_env = {
        **env,
        "INCREMENTAL_ASSETS_SPARK_REMOTE": remote,
        "INCREMENTAL_ASSETS_WAREHOUSE": str(scratch / "warehouse"),
        "DAGSTER_HOME": str(scratch / "dagster"),
        **({"INCREMENTAL_ASSETS_SPARK_CONF": SORT_MERGE} if sort_merge else {}),
    }
    until = (start + timedelta(days=days)).isoformat()
    try:
        return _timed(
            _cli(project, "run", "shop.order_lines", "--start", start.isoformat(), "--end", until), project, scratch_env
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def one_turn(
    project: Path, env: dict[str, str], year: list[str], start: date, warm_up_days: int | None, sort_merge: bool = False
) -> dict:
    """A fresh server, its cold year and a warm year; wall seconds and the JVM's CPU seconds by thread kind.
    ``warm_up_days`` None: ``spark start --no-warm-up``; else ``spark start`` (with its own warm-up), then
    this benchmark's warm-up of the model's first N days when N > 0."""
    flags = ["--no-warm-up"] if warm_up_days is None else []
    turn: dict = {"server_start_s": round(_timed(_cli(project, "spark", "start", *flags), project, env), 2)}
    try:
        pid = _java_pid(project)
        if warm_up_days:
            turn["warm_up_s"] = round(_warm_up(project, env, start, warm_up_days, sort_merge), 2)
        before = thread_cpu(pid)
        turn["at_start_cpu_s"] = {k: round(v, 1) for k, v in before.items()}
        if SETTLE_S:
            turn["jit_cpu_after_start_s"] = _settle(pid, SETTLE_S)
            before = thread_cpu(pid)
        for label in ("cold", *(f"warm{i}" for i in range(WARM_YEARS))):
            wall = _timed(_cli(project, *year), project, env)
            after = thread_cpu(pid)
            cpu = {k: round(after[k] - before[k], 1) for k in after}
            turn[label] = {"wall_s": round(wall, 2), "cpu_s": cpu, "cpu_total_s": round(sum(cpu.values()), 1)}
            before = after
            print(f"spark-cold: {label} year {wall:.1f}s wall, JVM CPU {turn[label]['cpu_total_s']}s {cpu}", flush=True)
        turn["warm"] = {
            what: statistics.median(turn[f"warm{i}"][what] for i in range(WARM_YEARS))
            for what in ("wall_s", "cpu_total_s")
        }
    finally:
        _timed(_cli(project, "spark", "stop"), project, env)
    turn["load_average"] = round(os.getloadavg()[0], 1)
    return turn


def main(argv: list[str]) -> None:
    from peer import fresh_env, our_model

    from incremental_assets.demo import generate_demo_data

    reps = int(os.environ.get("BENCH_REPS", "2"))
    days, orders = 366, int(os.environ.get("BENCH_ORDERS_PER_DAY", "5000"))
    # "off": `spark start --no-warm-up`; N: `spark start`, then (N > 0) the model's first N days
    variants = [v.strip() for v in os.environ.get("BENCH_COLD_WARM_UP_DAYS", "0").split(",")]
    out = next((Path(a.split("=", 1)[1]) for a in argv if a.startswith("--out=")), HERE / "results-spark-cold.json")
    figures: dict = {"days": days, "orders_per_day": orders, "load_average_start": round(os.getloadavg()[0], 1)}
    figures["variants"] = {f"warm_up_days_{v}": {"turns": []} for v in variants}
    with tempfile.TemporaryDirectory() as tmp:
        project = Path(tmp) / "project"
        our_model(project)
        (project / "incremental_assets.yaml").write_text(SETTINGS)
        start = date(2024, 1, 1)
        generate_demo_data(project, start=start, days=days, orders_per_day=orders)
        end = (start + timedelta(days=days)).isoformat()
        year = ["run", "shop.order_lines", "--start", start.isoformat(), "--end", end]
        for _ in range(reps):
            for v in variants:
                variant = figures["variants"][f"warm_up_days_{v}"]
                days, _, java = v.partition(":")  # "0:-Xms4g": the server's JVM also given those options
                options = f"    spark.driver.extraJavaOptions: -Duser.timezone=UTC {java}\n" if java else ""
                (project / "incremental_assets.yaml").write_text(SETTINGS + options)
                days_or_off = None if days == "off" else int(days.removesuffix("sm"))
                turn = one_turn(project, fresh_env(), year, start, days_or_off, sort_merge=days.endswith("sm"))
                variant["turns"].append(turn)
                variant.update(_ratios(variant["turns"]))
                out.write_text(json.dumps(figures, indent=2) + "\n")
    print(f"spark-cold: {json.dumps({k: _ratios(v['turns']) for k, v in figures['variants'].items()})}; written {out}")


def _ratios(turns: list[dict]) -> dict:
    med = statistics.median
    ratios = {
        f"cold_over_warm_{what[:-2]}": round(
            med(t["cold"][what] for t in turns) / med(t["warm"][what] for t in turns), 2
        )
        for what in ("wall_s", "cpu_total_s")
    }
    ratios["per_turn_cold_over_warm_wall"] = [round(t["cold"]["wall_s"] / t["warm"]["wall_s"], 2) for t in turns]
    return ratios


if __name__ == "__main__":
    main(sys.argv[1:])
