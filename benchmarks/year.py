"""A year of hourly operation of a small project, through the commands a user runs, not in real time.

The project: a Delta source ``raw.events`` (a few rows an hour), an hourly incremental model ``s.hourly``, a
daily model ``s.daily`` above it and an unpartitioned total ``s.total``. One *cycle* is one simulated hour:
the hour's rows are appended to the source (none in an empty hour), every 10th cycle one late row lands in
the hour five hours back, then ``incremental-assets run --auto --end <hour>`` runs in this process (the CLI's
``main``: the project loaded, the Dagster instance opened and the Definitions built, as a cron job does).
Once a simulated day the project's maintenance runs: ``incremental-assets maintain`` when the product has
it, otherwise ``vacuum`` (what exists); which one is recorded.

A full year is 8,760 cycles of a few seconds each: more than a benchmark may take on a small machine. So
the year is run in three phases, said in the results:

  first     ``--first-days`` days of hourly cycles, measured;
  forward   ``--forward-days`` days fast-forwarded through the same commands, one cycle per simulated day
            (``--forward-step-days N``: per N days, the maintenance once per cycle)
            (24 hours appended, late rows as in hourly operation, then one ``run --auto``): the Dagster
            records are the same (one per hour and day), the Delta log gains one commit a day per model
            instead of 24 for the hourly model;
  last      ``--last-days`` days of hourly cycles, measured like the first.

Each measured cycle is cut into phases by timing the product's own functions: ``load`` (the project
read), ``setup`` (Dagster instance and Definitions), ``integrity`` (the integrity check of every model),
``spark`` (the query and its staged files), ``commit`` (the Delta commit), ``dagster`` (the run's Dagster
bookkeeping: a run's time minus its Spark work and commit) and ``planning`` (the rest of the command).
Measured too: the Delta log files a command opens (the process traced by ``strace`` for one cycle early and
one late), active files of the hourly table per day, Dagster storage per partition, the resident memory of
this process and of its Spark JVM, and every table against an independent recompute with pandas.

    .venv/bin/python benchmarks/year.py --first-days 7 --forward-days 351 --last-days 7 --out FILE.json
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
START = datetime(2025, 1, 1, tzinfo=timezone.utc)
HOUR = timedelta(hours=1)
sys.path.insert(0, str(REPO / "tests"))
PHASES = ("load", "setup", "planning", "integrity", "dagster", "spark", "commit")

MODELS = {
    "hourly.sql": """MODEL (name s.hourly, kind INCREMENTAL_BY_TIME_RANGE (time_column h), start '2025-01-01',
  cron '@hourly');
SELECT date_trunc('HOUR', ts) AS h, COUNT(*) AS n, SUM(v) AS v FROM raw.events WHERE ts BETWEEN @start_dt AND @end_dt
  GROUP BY 1
""",
    "daily.sql": """MODEL (name s.daily, kind INCREMENTAL_BY_TIME_RANGE (time_column ds), start '2025-01-01');
SELECT CAST(h AS DATE) AS ds, SUM(n) AS n, SUM(v) AS v FROM s.hourly WHERE h BETWEEN @start_dt AND @end_dt GROUP BY 1
""",
    "total.sql": """MODEL (name s.total, kind FULL);
SELECT COUNT(*) AS days, SUM(n) AS n, SUM(v) AS v FROM s.daily
""",
}


def make_project(root: Path) -> None:
    (root / "models").mkdir(parents=True, exist_ok=True)
    from helpers import EVENTS_SOURCE  # a Delta source raw.events(ts) of hourly intervals

    (root / "sources.yaml").write_text(EVENTS_SOURCE)
    for name, text in MODELS.items():
        (root / "models" / name).write_text(text)


def hour_rows(index: int) -> int:
    """Rows of the hour ``index`` hours after START: 0 in every 13th hour (an empty hour), else 2-6."""
    return 0 if index % 13 == 7 else 2 + index % 5


def append_rows(events: Path, stamps: list[datetime]) -> None:
    import pyarrow as pa
    from deltalake import write_deltalake

    if not stamps:
        return
    table = pa.table(
        {
            "ts": pa.array(stamps, pa.timestamp("us", tz="UTC")),
            "v": pa.array([int(s.timestamp()) % 97 for s in stamps], pa.int64()),
        }
    )
    write_deltalake(str(events), table, mode="append")


def arrivals(index: int) -> list[datetime]:
    """What lands in the source in cycle ``index``: that hour's rows, and every 10th cycle one late row for
    the hour five hours back."""
    hour = START + index * HOUR
    stamps = [hour + timedelta(minutes=7 * m + 1) for m in range(hour_rows(index))]
    if index % 10 == 9 and index >= 5:
        stamps.append(START + (index - 5) * HOUR + timedelta(minutes=59))
    return stamps


class PhaseClock:
    """Seconds spent in the product's own functions, per cycle: each is wrapped once, in place."""

    def __init__(self) -> None:
        self.spent: dict[str, float] = {}
        self.entered: dict[str, int] = {}

    def wrap(self, owner, attribute: str, phase: str) -> None:
        original = getattr(owner, attribute)
        clock = self

        def timed(*args, **kwargs):
            nested = clock.entered.get(phase, 0)
            clock.entered[phase] = nested + 1
            began = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                clock.entered[phase] -= 1
                if not nested:
                    clock.spent[phase] = clock.spent.get(phase, 0.0) + time.perf_counter() - began

        setattr(owner, attribute, timed)

    def install(self) -> None:
        from incremental_assets import delta
        from incremental_assets.cli import commands
        from incremental_assets.orchestration.runner import Runner
        from incremental_assets.spark.executor import Executor

        self.wrap(commands, "_project", "load")
        self.wrap(commands, "_runner", "setup")
        self.wrap(Runner, "check_integrity", "integrity")
        self.wrap(Runner, "run_window", "run")
        self.wrap(Executor, "execute_together", "spark_commit")
        self.wrap(delta, "commit_staged", "commit")

    def take(self, total: float) -> dict[str, float]:
        s, self.spent = self.spent, {}
        run, work, commit = s.get("run", 0.0), s.get("spark_commit", 0.0), s.get("commit", 0.0)
        known = s.get("load", 0.0) + s.get("setup", 0.0) + s.get("integrity", 0.0) + run
        out = {
            "total": total,
            "load": s.get("load", 0.0),
            "setup": s.get("setup", 0.0),
            "integrity": s.get("integrity", 0.0),
            "dagster": run - work,
            "spark": work - commit,
            "commit": commit,
            "planning": total - known,
        }
        return {k: round(v, 4) for k, v in out.items()}


def rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return 0.0


SPARK_SERVER: list[Path] = []  # the project whose long-lived Spark server runs the year (``--spark-server``)


def jvm_rss_mb() -> float:
    """The Spark JVM's resident memory: this process's local one, or the project's long-lived server."""
    from growth import _descendants

    if SPARK_SERVER:
        from incremental_assets.load.settings import load_settings
        from incremental_assets.spark.connect_server import read_record

        record = read_record(load_settings(SPARK_SERVER[0]))
        pids = [record.pid, *_descendants(record.pid)] if record else []
        return max((rss_mb(p) for p in pids), default=0.0)
    return max((rss_mb(p) for p in _descendants(os.getpid())), default=0.0)


JVM_DETAIL: list[bool] = []  # ``--jvm-detail``: the server JVM's heap each cycle, its native memory and live objects


def jvm_detail(*, native: bool = False, live: bool = False) -> dict:
    """With ``--jvm-detail`` and ``--spark-server``: the server JVM's Java heap (committed, used; no collection);
    ``native``: its native memory by category (the server started with ``-XX:NativeMemoryTracking=summary``);
    ``live``: its live objects (``GC.class_histogram``, a full collection first), then the heap again."""
    if not (JVM_DETAIL and SPARK_SERVER):
        return {}
    from daemon_memory import class_histogram, heap_info, native_memory, server_jvm

    from incremental_assets.load.settings import load_settings

    pid = server_jvm(load_settings(SPARK_SERVER[0]))
    if pid is None:
        return {}
    out: dict = {"jvm_heap": heap_info(pid), "at_utc": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    if native:
        out["jvm_native"] = native_memory(pid)
    if live:
        out["jvm_live"] = class_histogram(pid)
        out["jvm_heap_after_full_gc"] = heap_info(pid)
        out["jvm_rss_mb_after_full_gc"] = jvm_rss_mb()
        out["jvm_native_after_full_gc"] = native_memory(pid)
    return out


@contextlib.contextmanager
def traced_opens(out: Path):
    """Every file this process (all its threads) opens meanwhile, written by strace to ``out``."""
    tracer = subprocess.Popen(
        ["strace", "-f", "-qq", "-e", "trace=openat,open", "-p", str(os.getpid()), "-o", str(out)],
        stderr=subprocess.DEVNULL,
    )
    time.sleep(1.0)  # attached to every thread
    try:
        yield
    finally:
        time.sleep(0.2)
        tracer.terminate()
        tracer.wait(timeout=30)


def delta_log_reads(trace: Path) -> dict:
    """Files under ``_delta_log`` opened, per table: every open and the distinct files."""
    per_table: dict[str, list[str]] = {}
    for line in trace.read_text(errors="replace").splitlines():
        if "_delta_log/" not in line or "= -1" in line:
            continue
        path = line.split('"')[1] if '"' in line else ""
        table = path.split("/_delta_log/")[0].rsplit("/", 2)
        per_table.setdefault("/".join(table[-2:]), []).append(path)
    return {t: {"opens": len(p), "files": len(set(p))} for t, p in sorted(per_table.items())}


def command(argv: list[str]) -> int:
    from incremental_assets.cli.commands import main

    # Each command finds its project's Dagster home as a new process would: opening an instance sets
    # DAGSTER_HOME in this process, which would otherwise point the next project's commands at it.
    os.environ.pop("DAGSTER_HOME", None)
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        code = main(argv)
    if code != 0:
        raise RuntimeError(f"incremental-assets {' '.join(argv)} exited {code}:\n{printed.getvalue()[-3000:]}")
    return code


def maintenance_command(root: Path) -> list[str]:
    """``maintain`` when this checkout has it, otherwise ``vacuum`` (the maintenance that exists)."""
    probe = subprocess.run(
        [sys.executable, "-m", "incremental_assets.cli", "maintain", "--help"], capture_output=True, text=True
    )
    return ["maintain", "--project", str(root)] if probe.returncode == 0 else ["vacuum", "--project", str(root)]


def table_state(uri: str) -> dict:
    from deltalake import DeltaTable

    log = Path(uri) / "_delta_log"
    t = DeltaTable(uri)
    return {
        "version": t.version(),
        "active_files": len(t.file_uris()),
        "log_commits": len(list(log.glob("*.json"))),
        "log_checkpoints": len(list(log.glob("*.checkpoint*.parquet"))),
    }


def dagster_size(home: Path) -> int:
    return sum(p.stat().st_size for p in home.rglob("*") if p.is_file())


def recompute_matches(root: Path, warehouse: Path, end: datetime) -> dict:
    """Each table against pandas over the source: the hours before ``end``, the days complete by then."""
    import pandas as pd
    from deltalake import DeltaTable

    src = DeltaTable(str(root / "data" / "events")).to_pandas()
    src["ts"] = pd.to_datetime(src["ts"], utc=True)
    src = src[src["ts"] < pd.Timestamp(end)]
    hourly = src.assign(h=src["ts"].dt.floor("h")).groupby("h").agg(n=("v", "size"), v=("v", "sum")).reset_index()
    days_end = pd.Timestamp(end).floor("D")
    daily_src = hourly[hourly["h"] < days_end]
    daily = daily_src.assign(ds=daily_src["h"].dt.date).groupby("ds").agg(n=("n", "sum"), v=("v", "sum")).reset_index()

    def rows(frame, cols):
        return sorted(
            tuple(str(x) if i == 0 else int(x) for i, x in enumerate(r)) for r in frame[cols].itertuples(index=False)
        )

    def table(name):
        return DeltaTable(str(warehouse / "s" / name)).to_pandas()

    got_h = table("hourly")
    got_h["h"] = pd.to_datetime(got_h["h"], utc=True)
    got_d = table("daily")
    got_t = table("total")
    expected = {
        "s.hourly": rows(hourly, ["h", "n", "v"]),
        "s.daily": rows(daily, ["ds", "n", "v"]),
        "s.total": [(str(len(daily)), int(daily["n"].sum()), int(daily["v"].sum()))],
    }
    got = {
        "s.hourly": rows(got_h, ["h", "n", "v"]),
        "s.daily": rows(got_d, ["ds", "n", "v"]),
        "s.total": rows(got_t, ["days", "n", "v"]),
    }
    out = {}
    for name in expected:
        want, have = set(expected[name]), set(got[name])
        out[name] = {
            "equal": want == have and len(got[name]) == len(set(got[name])),
            "rows": len(got[name]),
            "missing_or_wrong": len(want - have),
            "extra_or_wrong": len(have - want),
            "duplicates": len(got[name]) - len(have),
            "example_wrong": sorted(want - have)[:3],
        }
    return out


def summary(cycles: list[dict]) -> dict:
    measured = [c for c in cycles if not c.get("traced")]
    return (
        {p: round(statistics.median(c["cost"][p] for c in measured), 3) for p in ("total", *PHASES)} if measured else {}
    )


def run_year(
    root: Path, *, first_days: int, forward_days: int, last_days: int, step_days: int = 1, side_by_side: bool = False
) -> dict:
    from incremental_assets.load.project import load_project

    make_project(root)
    events = root / "data" / "events"
    project = load_project(root)
    warehouse = Path(project.settings.warehouse)
    home = Path(project.settings.dagster_home)
    maintain = maintenance_command(root)
    clock = PhaseClock()
    clock.install()
    cycles: list[dict] = []
    days: list[dict] = []
    traces: dict[str, dict] = {}
    maintenance: list[float] = []
    forward: list[dict] = []
    began = time.perf_counter()

    def end_of_day(hour_end: datetime) -> None:
        t0 = time.perf_counter()
        command(maintain)
        maintenance.append(round(time.perf_counter() - t0, 3))
        state = table_state(str(warehouse / "s" / "hourly"))
        day = (hour_end - START).days
        days.append(
            {
                "day": day,
                **state,
                "files_per_day": round(state["active_files"] / day, 2),
                "daily_log_commits": table_state(str(warehouse / "s" / "daily"))["log_commits"],
                "dagster_bytes": dagster_size(home),
                "dagster_bytes_per_partition": round(dagster_size(home) / (day * 24 + day), 1),
                "rss_mb": rss_mb(os.getpid()),
                "jvm_rss_mb": jvm_rss_mb(),
                **jvm_detail(native=True),
            }
        )

    def hourly_cycle(index: int, phase: str, trace: str | None = None) -> None:
        append_rows(events, arrivals(index))
        hour_end = START + (index + 1) * HOUR
        t0 = time.perf_counter()
        with traced_opens(root / f"trace-{trace}.txt") if trace else contextlib.nullcontext():
            t_cmd = time.perf_counter()
            command(["run", "--auto", "--end", hour_end.isoformat(), "--project", str(root)])
            total = time.perf_counter() - t_cmd
        cost = clock.take(total)
        if trace:
            traces[trace] = {
                "cycle": index + 1,
                "delta_log": delta_log_reads(root / f"trace-{trace}.txt"),
                "seconds_traced": round(time.perf_counter() - t0, 2),
            }
        cycles.append(
            {
                "cycle": index + 1,
                "phase": phase,
                "cost": cost,
                "rss_mb": rss_mb(os.getpid()),
                "jvm_rss_mb": jvm_rss_mb(),
                **jvm_detail(),
                **({"traced": True} if trace else {}),
            }
        )
        if hour_end.hour == 0:
            end_of_day(hour_end)
        print(f"year: cycle {index + 1} ({phase}) {cost['total']:.2f}s", flush=True)

    def young_cycle(project: Path, young_index: int) -> None:
        append_rows(project / "data" / "events", arrivals(young_index))
        hour_end = START + (young_index + 1) * HOUR
        t_cmd = time.perf_counter()
        command(["run", "--auto", "--end", hour_end.isoformat(), "--project", str(project)])
        cost = clock.take(time.perf_counter() - t_cmd)
        cycles.append({"cycle": young_index + 1, "phase": "young", "cost": cost})
        if hour_end.hour == 0:
            command([maintain[0], "--project", str(project)])
        print(f"year: cycle {young_index + 1} (young) {cost['total']:.2f}s", flush=True)

    # Day one is the history the hourly operation starts from (untimed): every model has its table.
    for i in range(24):
        append_rows(events, arrivals(i))
    command(["run", "--auto", "--end", (START + 24 * HOUR).isoformat(), "--project", str(root)])
    clock.take(0.0)
    index = 24
    for n in range(first_days * 24):
        hourly_cycle(index, "first", trace="first" if n == min(30, first_days * 12) else None)
        index += 1
    for done in range(0, forward_days, step_days):
        days_now = min(step_days, forward_days - done)
        t0 = time.perf_counter()
        for i in range(index, index + 24 * days_now):
            append_rows(events, arrivals(i))
        index += 24 * days_now
        t_run = time.perf_counter()
        command(["run", "--auto", "--end", (START + index * HOUR).isoformat(), "--project", str(root)])
        # ``seconds`` includes the appends: delta-rs reads the source's whole snapshot for each append (one
        # file per hour, thousands by the end), the benchmark's own data generator, not the product.
        forward.append(
            {
                "day": index // 24,
                "days": days_now,
                "seconds": round(time.perf_counter() - t0, 2),
                "run_seconds": round(time.perf_counter() - t_run, 2),
            }
        )
        clock.take(0.0)
        end_of_day(START + index * HOUR)
        print(
            f"year: forward day {index // 24} {forward[-1]['seconds']:.1f}s "
            f"(run --auto {forward[-1]['run_seconds']:.1f}s)",
            flush=True,
        )
    jvm_before_last = {"jvm_rss_mb": jvm_rss_mb(), **jvm_detail(native=True, live=True)}
    young = root.parent / "young" if side_by_side else None
    if young is not None:  # a project one day old, its cycles run in turn with the old one's (same load, same JVM)
        make_project(young)
        for i in range(24):
            append_rows(young / "data" / "events", arrivals(i))
        command(["run", "--auto", "--end", (START + 24 * HOUR).isoformat(), "--project", str(young)])
        clock.take(0.0)
    for n in range(last_days * 24):
        hourly_cycle(index, "last", trace="last" if n == max(0, last_days * 24 - 20) else None)
        if young is not None:
            young_cycle(young, 24 + n)
        index += 1
    end = START + index * HOUR
    first = summary([c for c in cycles if c["phase"] == "first"][3:])  # the first cycles warm the JVM up
    last = summary([c for c in cycles if c["phase"] == "last"])
    young_cycles = summary([c for c in cycles if c["phase"] == "young"][3:])
    return {
        "what_ran": {
            "first_hourly_days": first_days,
            "forward_days": forward_days,
            "forward_days_per_cycle": step_days,
            "last_hourly_days": last_days,
            "hourly_cycles": len(cycles),
            "simulated_hours": index,
            "history_before_first": "day one, one run --auto (untimed)",
            "maintenance": " ".join(maintain[:1]),
            "maintain_available": maintain[0] == "maintain",
            "spark": "the project's long-lived Spark server (spark start)"
            if SPARK_SERVER
            else "local, in this process (the embedded default)",
        },
        "seconds": round(time.perf_counter() - began, 1),
        "median_cycle_first": first,
        "median_cycle_last": last,
        "last_over_first": round(last["total"] / first["total"], 3) if first and last else None,
        "median_cycle_young_beside_last": young_cycles,
        "last_over_young_side_by_side": round(last["total"] / young_cycles["total"], 3)
        if young_cycles and last
        else None,
        "delta_log_reads": traces,
        "days": days,
        "forward_seconds_per_day_median": statistics.median(f["seconds"] / f.get("days", 1) for f in forward)
        if forward
        else None,
        "forward": forward,
        "maintenance_seconds_median": statistics.median(maintenance) if maintenance else None,
        "recompute": recompute_matches(root, warehouse, end),
        **(
            {
                "jvm_before_last": jvm_before_last,
                "jvm_after_last": {"jvm_rss_mb": jvm_rss_mb(), **jvm_detail(native=True, live=True)},
            }
            if JVM_DETAIL
            else {}
        ),
        "cycles": cycles,
    }


def svg_plot(result: dict, out: Path) -> None:
    """Cost per cycle against cycle number: three panels on one time axis cut twice, the first hourly days,
    the fast-forwarded days (seconds per one-day cycle divided by 24, per simulated hour) and the last hourly
    days; the integrity check of each hourly cycle in green."""
    cycles = [c for c in result["cycles"] if not c.get("traced")]
    forward = result.get("forward", [])
    points = {
        "first": [(c["cycle"], c["cost"]["total"], c["cost"]["integrity"]) for c in cycles if c["phase"] == "first"],
        "forward": [
            (f["day"] * 24, f.get("run_seconds", f["seconds"]) / (24 * f.get("days", 1)), None) for f in forward
        ],
        "last": [(c["cycle"], c["cost"]["total"], c["cost"]["integrity"]) for c in cycles if c["phase"] == "last"],
    }
    young = [c["cost"]["total"] for c in result["cycles"] if c["phase"] == "young"]
    beside = [(x, y, None) for (x, _, _), y in zip(points["last"], young)]  # each after the old cycle it ran beside
    panels = [(name, pts) for name, pts in points.items() if pts]
    if not panels:
        return
    w, h, pad, gap = 780, 330, 50, 16
    top = max(max(y for _, pts in panels for _, y, _ in pts), max(young, default=0.0)) * 1.1
    width = (w - 2 * pad - gap * (len(panels) - 1)) / len(panels)

    def py(y: float) -> float:
        return h - pad - y / top * (h - 2 * pad)

    colours = {"first": "#1f77b4", "forward": "#7f7f7f", "last": "#d62728"}
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="11">',
        f'<rect width="{w}" height="{h}" fill="white"/>',
    ]
    for frac in (0, 0.25, 0.5, 0.75, 1):
        parts.append(f'<text x="{pad - 6}" y="{py(top * frac) + 4:.1f}" text-anchor="end">{top * frac:.1f}</text>')
        parts.append(
            f'<line x1="{pad}" y1="{py(top * frac):.1f}" x2="{w - pad}" y2="{py(top * frac):.1f}" stroke="#ddd"/>'
        )
    for i, (name, pts) in enumerate(panels):
        left = pad + i * (width + gap)
        x0, x1 = min(p[0] for p in pts), max(p[0] for p in pts)

        def px(x: float) -> float:
            return left + (x - x0) / max(1, x1 - x0) * width

        parts.append(f'<line x1="{left}" y1="{h - pad}" x2="{left + width}" y2="{h - pad}" stroke="black"/>')
        parts.append(f'<line x1="{left}" y1="{pad}" x2="{left}" y2="{h - pad}" stroke="black"/>')
        parts += [
            f'<text x="{px(x):.1f}" y="{h - pad + 14}" text-anchor="{a}">{x}</text>'
            for x, a in ((x0, "start"), (x1, "end"))
        ]
        label = {
            "first": "first hourly cycles",
            "forward": "fast-forward: run --auto per cycle of days, s per simulated hour",
            "last": "last hourly cycles",
        }[name]
        parts.append(
            f'<text x="{left + width / 2:.1f}" y="{pad - 8}" text-anchor="middle" fill="{colours[name]}">{label}</text>'
        )
        for x, y, _ in beside if name == "last" else []:
            parts.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="2" fill="#ff7f0e"/>')
        for x, y, integrity in pts:
            parts.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="2" fill="{colours[name]}"/>')
            if integrity is not None:
                parts.append(f'<circle cx="{px(x):.1f}" cy="{py(integrity):.1f}" r="1.3" fill="#2ca02c"/>')
    parts += [
        f'<text x="{w / 2}" y="{h - 14}" text-anchor="middle">cycle (simulated hour since 2025-01-01); '
        "green: the integrity check; orange: a day-one project beside the last days</text>",
        f'<text x="14" y="{h / 2}" transform="rotate(-90 14 {h / 2})" text-anchor="middle">'
        "seconds per cycle (run --auto)</text>",
        "</svg>",
    ]
    out.write_text("\n".join(parts) + "\n")


def scenario_year(*, first_days: int, forward_days: int, last_days: int, plot: Path, step_days: int = 1) -> dict:
    """The year in a process of its own (its own project, Dagster home and Spark); the plot written to ``plot``."""
    import tempfile

    from peer import fresh_env

    with tempfile.TemporaryDirectory(prefix="bench-year-") as tmp:
        out = Path(tmp) / "year.json"
        done = subprocess.run(
            [
                sys.executable,
                __file__,
                "--first-days",
                str(first_days),
                "--forward-days",
                str(forward_days),
                "--last-days",
                str(last_days),
                "--forward-step-days",
                str(step_days),
                "--out",
                str(out),
                "--plot",
                str(plot),
            ],
            env=fresh_env(),
            cwd=tmp,
        )
        if done.returncode != 0:
            raise RuntimeError(f"year failed ({done.returncode})")
        return json.loads(out.read_text())


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--first-days", type=int, default=7)
    parser.add_argument("--forward-days", type=int, default=351)
    parser.add_argument("--last-days", type=int, default=7)
    parser.add_argument(
        "--forward-step-days", type=int, default=1, help="simulated days per fast-forward cycle (one run --auto each)"
    )
    parser.add_argument(
        "--side-by-side",
        action="store_true",
        help="during the last days, a project one day old runs a cycle after each of the old one's "
        "(the ratio under equal load)",
    )
    parser.add_argument(
        "--spark-server",
        action="store_true",
        help="run the year's commands on the project's long-lived Spark server (`spark start`); its memory is "
        "the JVM's recorded each day",
    )
    parser.add_argument(
        "--jvm-detail",
        action="store_true",
        help="with --spark-server: the server JVM's Java heap each cycle (jcmd GC.heap_info), its native memory "
        "each day, and before and after the last days with its live objects (jcmd GC.class_histogram); start "
        "the server with -XX:NativeMemoryTracking=summary in spark.driver.extraJavaOptions for the native memory",
    )
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--plot", type=Path, default=HERE / "year-cost-per-cycle.svg")
    args = parser.parse_args(argv)
    if args.spark_server and args.side_by_side:
        parser.error("--side-by-side runs its day-one project on a local Spark: not with --spark-server")
    sys.path.insert(0, str(HERE))
    import tempfile

    if args.jvm_detail:
        JVM_DETAIL.append(True)

    root = Path(tempfile.mkdtemp(prefix="year-project-")) / "project"
    if args.spark_server:
        make_project(root)
        command(["spark", "start", "--project", str(root)])
        SPARK_SERVER.append(root)
    try:
        result = run_year(
            root,
            first_days=args.first_days,
            forward_days=args.forward_days,
            last_days=args.last_days,
            step_days=args.forward_step_days,
            side_by_side=args.side_by_side,
        )
    finally:
        if SPARK_SERVER:
            command(["spark", "stop", "--project", str(root)])
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    svg_plot(result, args.plot)
    shutil.rmtree(root.parent, ignore_errors=True)
    print(json.dumps({k: v for k, v in result.items() if k not in ("cycles", "days")}, indent=2), flush=True)
    os._exit(0)  # the local Spark's shutdown hooks add nothing to the figures


if __name__ == "__main__":
    main(sys.argv[1:])
