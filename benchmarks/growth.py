"""Growth with the data: the same year of ``shop.order_lines`` at 1x and at ``factor`` x the orders a day.

Each size is its own project (the example's model without audits, a 4 GB driver). Every figure is a CLI
command in a fresh process, as a user runs it, on the embedded default (local Spark started by the command):

  year     ``incremental-assets run shop.order_lines --start S --end E``: the year as one run
  new day  ``incremental-assets run --auto --end D``: the day after the year, on top of it

While a command runs its process tree is sampled every 0.2 s: the peak resident memory of the Python
process (``VmHWM``) and of the Spark driver JVM it starts (the largest ``VmHWM`` among its descendants).
The driver's collections are logged (``-Xlog:gc``): the largest heap left after a collection is what the
JVM really held, where its resident peak also counts garbage a 4 GB heap lets pile up before collecting.
At the largest size the year runs once more with a 1 GB driver: it must finish, in about the same time.
What growth should look like: the year's time linear in its rows (seconds per million rows flat), memory
flat (Spark streams the rows; nothing is collected to the driver or to Python), the new day flat.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from datetime import date, timedelta
from pathlib import Path

SETTINGS = """\
spark:
  conf:
    spark.driver.memory: {memory}
    spark.driver.extraJavaOptions: -Duser.timezone=UTC -Xlog:gc:file={gc_log}
"""
GC_PAUSE = re.compile(r"Pause .*?(\d+)M->(\d+)M\((\d+)M\)")


def heap_after_gc_mb(log: Path) -> int | None:
    """The largest heap the driver JVM still held after a collection (its live data at most), from its GC log."""
    if not log.exists():
        return None
    after = [int(m.group(2)) for m in GC_PAUSE.finditer(log.read_text())]
    return max(after, default=None)


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        tree.setdefault(int(fields[1]), []).append(int(entry))
    return tree


def _hwm_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _descendants(pid: int) -> list[int]:
    tree, found, todo = _children(), [], [pid]
    while todo:
        for child in tree.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def sampled_run(argv: list[str], cwd: Path, env: dict[str, str]) -> dict:
    """Run a command; its wall time, the peak memory of its Python process and of its JVM, and the JVM's
    largest heap after a collection (the project's settings log the driver's collections to gc.log)."""
    gc_log = cwd / "gc.log"
    gc_log.unlink(missing_ok=True)
    began = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peaks = {"python": 0.0, "jvm": 0.0}

    def sample() -> None:
        while proc.poll() is None:
            peaks["python"] = max(peaks["python"], _hwm_mb(proc.pid))
            peaks["jvm"] = max([peaks["jvm"], *(_hwm_mb(p) for p in _descendants(proc.pid))])
            time.sleep(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, err = proc.communicate()
    seconds = time.perf_counter() - began
    sampler.join()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:4])} failed ({proc.returncode}):\n{out[-3000:]}\n{err[-3000:]}")
    return {
        "seconds": round(seconds, 2),
        "python_peak_mb": round(peaks["python"]),
        "jvm_peak_mb": round(peaks["jvm"]),
        "jvm_heap_after_gc_peak_mb": heap_after_gc_mb(gc_log),
    }


def _rows(warehouse: Path) -> int:
    from deltalake import DeltaTable

    from incremental_assets.delta.tables import table_uri

    return DeltaTable(table_uri(str(warehouse), "shop.order_lines")).to_pyarrow_dataset().count_rows()


def one_size(
    root: Path, *, days: int, orders_per_day: int, driver: str = "4g", small_driver: str | None = None
) -> dict:
    from peer import fresh_env, our_model

    from incremental_assets.demo import generate_demo_data

    project = root / f"orders-{orders_per_day}"
    our_model(project)
    settings = project / "incremental_assets.yaml"
    settings.write_text(SETTINGS.format(memory=driver, gc_log=project / "gc.log"))
    began = time.perf_counter()
    generate_demo_data(project, start=date(2024, 1, 1), days=days + 1, orders_per_day=orders_per_day)
    generated = time.perf_counter() - began
    start, end = date(2024, 1, 1), date(2024, 1, 1) + timedelta(days=days)
    env = fresh_env()
    cli = [sys.executable, "-m", "incremental_assets.cli"]
    year_argv = cli + [
        "run",
        "shop.order_lines",
        "--start",
        start.isoformat(),
        "--end",
        end.isoformat(),
        "--project",
        str(project),
    ]
    year = sampled_run(year_argv, project, env)
    rows = _rows(project / "warehouse")
    day = sampled_run(
        cli + ["run", "--auto", "--end", (end + timedelta(days=1)).isoformat(), "--project", str(project)], project, env
    )
    day_rows = _rows(project / "warehouse") - rows
    result = {
        "orders_per_day": orders_per_day,
        "generate_s": round(generated, 1),
        "year": year,
        "year_rows": rows,
        "year_s_per_million_rows": round(year["seconds"] / rows * 1e6, 2),
        "new_day": day,
        "new_day_rows": day_rows,
    }
    if small_driver:  # the year again (replaced in one commit) with a quarter of the driver's memory
        settings.write_text(SETTINGS.format(memory=small_driver, gc_log=project / "gc.log"))
        result["year_small_driver"] = {"driver_memory": small_driver, **sampled_run(year_argv, project, env)}
        print(
            f"growth: {orders_per_day} orders/day: year again with a {small_driver} driver "
            f"{result['year_small_driver']['seconds']}s",
            flush=True,
        )
    print(
        f"growth: {orders_per_day} orders/day: year {year['seconds']}s for {rows} rows "
        f"({result['year_s_per_million_rows']} s per million), python {year['python_peak_mb']} MB, "
        f"jvm {year['jvm_peak_mb']} MB (heap after GC {year['jvm_heap_after_gc_peak_mb']} MB); new day "
        f"{day['seconds']}s ({day_rows} rows)",
        flush=True,
    )
    return result


def scenario_growth(root: Path, *, days: int, orders_per_day: int, factors: tuple[int, ...]) -> dict:
    """Every size in turn; the marginal cost between sizes (seconds per extra million rows) is what shows
    linearity, since each command also pays a fixed start-up."""
    driver = os.environ.get("BENCH_GROWTH_DRIVER_MEMORY", "4g")  # every size's driver; 1g shows the bound directly
    sizes = [
        one_size(
            root,
            days=days,
            orders_per_day=orders_per_day * f,
            driver=driver,
            small_driver="1g" if f == factors[-1] and driver != "1g" else None,
        )
        for f in factors
    ]
    base = sizes[0]
    steps = []
    for before, after in zip(sizes, sizes[1:]):
        extra_rows = after["year_rows"] - before["year_rows"]
        steps.append(
            {
                "from_orders_per_day": before["orders_per_day"],
                "to_orders_per_day": after["orders_per_day"],
                "year_s_per_extra_million_rows": round(
                    (after["year"]["seconds"] - before["year"]["seconds"]) / extra_rows * 1e6, 2
                ),
            }
        )
    largest = sizes[-1]
    return {
        "days": days,
        "factors": list(factors),
        "driver_memory": driver,
        "sizes": sizes,
        "marginal": steps,
        "rows_ratio": round(largest["year_rows"] / base["year_rows"], 2),
        "year_time_ratio": round(largest["year"]["seconds"] / base["year"]["seconds"], 2),
        "new_day_time_ratio": round(largest["new_day"]["seconds"] / base["new_day"]["seconds"], 2),
        "python_peak_ratio": round(largest["year"]["python_peak_mb"] / max(base["year"]["python_peak_mb"], 1), 2),
        "jvm_peak_ratio": round(largest["year"]["jvm_peak_mb"] / max(base["year"]["jvm_peak_mb"], 1), 2),
        "jvm_heap_after_gc_ratio": round(
            largest["year"]["jvm_heap_after_gc_peak_mb"] / max(base["year"]["jvm_heap_after_gc_peak_mb"], 1), 2
        )
        if largest["year"]["jvm_heap_after_gc_peak_mb"] and base["year"]["jvm_heap_after_gc_peak_mb"]
        else None,
    }
