"""Memory of the real ``dagster-daemon``, the code server it starts, its run processes and the project's
long-lived Spark Connect server over many simulated hours of automation (issue 27, item 5).

The project, its arrivals and the recompute are the year benchmark's (``year.py``); the daemon, the Spark
server and the settle are the soak's (``tests/test_soak.py``), without its faults. The sensor's clock
(``INCREMENTAL_ASSETS_CLOCK=@FILE``) moves one hour every ``--seconds-per-hour``; each simulated hour the
resident memory (``/proc/<pid>/status`` VmRSS) of every process is sampled, and the Spark server's Java heap
(``jcmd GC.heap_info``: committed and used, no collection). Every ``--detail-every`` hours the JVM's native
memory by category (``jcmd VM.native_memory summary``; the server runs with ``-XX:NativeMemoryTracking=summary``)
and every ``--histogram-every`` hours its live objects (``jcmd GC.class_histogram``, which runs a full
collection first: the heap after it is the live data). At the end the daemon settles and every table is
compared with a pandas recompute.

    .venv/bin/python benchmarks/daemon_memory.py --hours 200 --seconds-per-hour 8 \
        --out benchmarks/results-daemon-memory.json --plot benchmarks/daemon-memory.svg
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(HERE))

import year  # noqa: E402  (the project, its arrivals and the recompute)
from growth import _descendants  # noqa: E402
from svg_axes import plot_area  # noqa: E402

SPARK_CONF_ENV = "INCREMENTAL_ASSETS_SPARK_CONF"
NMT = "-XX:NativeMemoryTracking=summary"
# Spark's status store (jobs, stages, SQL executions kept for the UI and its REST API, also with the UI off)
# and Spark Connect's per-session and per-operation state.
WATCHED = (
    "org.apache.spark.status.JobDataWrapper",
    "org.apache.spark.status.StageDataWrapper",
    "org.apache.spark.status.TaskDataWrapper",
    "org.apache.spark.status.RDDOperationGraphWrapper",
    "org.apache.spark.sql.execution.ui.SQLExecutionUIData",
    "org.apache.spark.sql.execution.ui.SparkPlanGraphWrapper",
    "org.apache.spark.sql.connect.service.ExecuteHolder",
    "org.apache.spark.sql.connect.service.ExecuteInfo",
    "org.apache.spark.sql.connect.service.SessionHolder",
    "org.apache.spark.sql.connect.service.SessionHolderInfo",
    "org.apache.spark.sql.execution.QueryExecution",
    # The listings of files read (Spark's FileStatusCache, one process-wide cache of 250 MB by default).
    "org.apache.hadoop.fs.FileStatus",
    "org.apache.hadoop.fs.LocatedFileStatus",
    "org.apache.hadoop.fs.Path",
    "java.net.URI",
)


def rss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def role(pid: int) -> str:
    """What a process under the daemon is: its code server, a run, or something else (named)."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "gone"
    if " api grpc" in command:
        return "code_server"
    if "spawn_main" in command or "execute_run" in command:
        return "run"
    return "other: " + command[:80]


def processes(daemon_pid: int) -> dict:
    """Resident MB of the daemon and of each process under it, by role; the pids of its code servers."""
    out: dict = {"daemon_mb": round(rss_kb(daemon_pid) / 1024, 1), "code_server_mb": 0.0, "run_mb": 0.0}
    out.update(code_servers=[], runs=0, other_mb=0.0)
    for pid in _descendants(daemon_pid):
        mb, kind = rss_kb(pid) / 1024, role(pid)
        if kind == "code_server":
            out["code_server_mb"] = round(out["code_server_mb"] + mb, 1)
            out["code_servers"].append(pid)
        elif kind == "run":
            out["run_mb"] = round(max(out["run_mb"], mb), 1)
            out["runs"] += 1
        elif kind != "gone":
            out["other_mb"] = round(out["other_mb"] + mb, 1)
    return out


def server_jvm(settings) -> int | None:
    """The Spark server's JVM: the largest process of the server's group (``spark-submit`` execs it)."""
    from incremental_assets.spark.connect_server import read_record

    record = read_record(settings)
    if record is None:
        return None
    return max([record.pid, *_descendants(record.pid)], key=rss_kb)


def jcmd(pid: int, *args: str) -> str:
    done = subprocess.run(["jcmd", str(pid), *args], capture_output=True, text=True, timeout=300)
    return done.stdout


def heap_info(pid: int) -> dict:
    """Committed and used Java heap and metaspace, MB, without a collection."""
    text = jcmd(pid, "GC.heap_info")
    out = {}
    heap = re.search(r"heap\s+total (\d+)K, used (\d+)K", text)
    if heap:
        out["heap_committed_mb"], out["heap_used_mb"] = (round(int(g) / 1024, 1) for g in heap.groups())
    meta = re.search(r"Metaspace\s+used (\d+)K, committed (\d+)K", text)
    if meta:
        out["metaspace_used_mb"], out["metaspace_committed_mb"] = (round(int(g) / 1024, 1) for g in meta.groups())
    return out


def native_memory(pid: int) -> dict:
    """Committed MB per category of the JVM's native memory tracking (empty when it is off)."""
    text = jcmd(pid, "VM.native_memory", "summary")
    out = {}
    for name, committed in re.findall(r"^(?:-\s+)?([A-Z][\w ]*?) \(reserved=\d+KB, committed=(\d+)KB", text, re.M):
        out[name.strip()] = round(int(committed) / 1024, 1)
    total = re.search(r"Total: reserved=\d+KB, committed=(\d+)KB", text)
    if total:
        out["Total"] = round(int(total.group(1)) / 1024, 1)
    return out


def class_histogram(pid: int, top: int = 40) -> dict:
    """Live objects after a full collection: the watched classes' counts, the largest classes, the total."""
    rows = []
    for line in jcmd(pid, "GC.class_histogram").splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[0].endswith(":") and parts[1].isdigit():
            rows.append((parts[3], int(parts[1]), int(parts[2])))
        elif parts[:1] == ["Total"]:
            total = (int(parts[1]), int(parts[2]))
    counts = {name: n for name, n, _ in rows}
    return {
        "live_mb": round(total[1] / 1048576, 1) if rows else None,
        "watched": {name.rsplit(".", 1)[1]: counts.get(name, 0) for name in WATCHED},
        "largest": [(name, n, round(b / 1048576, 2)) for name, n, b in sorted(rows, key=lambda r: -r[2])[:top]],
    }


def with_nmt(conf_json: str | None) -> str:
    """The project's Spark settings from the environment plus native memory tracking on the driver."""
    from incremental_assets.model.settings import DEFAULT_SPARK_CONF

    conf = json.loads(conf_json) if conf_json else {}
    options = conf.get("spark.driver.extraJavaOptions", DEFAULT_SPARK_CONF["spark.driver.extraJavaOptions"])
    conf["spark.driver.extraJavaOptions"] = f"{options} {NMT}".strip()
    return json.dumps(conf)


def command_server(settings) -> int | None:
    """The command server `spark start` keeps next to the Spark server (where the daemon's runs start)."""
    from incremental_assets.orchestration.command_socket import read_record
    from incremental_assets.spark.connect_server import state_dir

    record = read_record(state_dir(settings))
    return int(record["pid"]) if record else None


def sample(
    hour: int, began: float, daemon_pid: int, jvm: int | None, detail: bool, histogram: bool, commands: int | None
) -> dict:
    point = {"hour": hour, "wall_s": round(time.perf_counter() - began, 1), **processes(daemon_pid)}
    point["spark_mb"] = round(rss_kb(jvm) / 1024, 1) if jvm else 0.0
    point["command_server_mb"] = round(rss_kb(commands) / 1024, 1) if commands else 0.0
    for pid in _descendants(commands) if commands else []:  # its copies running the daemon's runs
        point["run_mb"] = round(max(point["run_mb"], rss_kb(pid) / 1024), 1)
        point["runs"] += 1
    if jvm:
        point.update(heap_info(jvm))
        if detail:
            point["native"] = native_memory(jvm)
        if histogram:
            point["histogram"] = class_histogram(jvm)
    return point


def soak(root: Path, hours: int, seconds_per_hour: float, detail_every: int, histogram_every: int) -> dict:
    """The daemon and the server over ``hours`` simulated hours, sampled every hour; then settle and check."""
    import dagster as dg
    from deltalake import DeltaTable
    from test_soak import cli, settle, spark_server, status

    from incremental_assets.load.project import load_project
    from incremental_assets.orchestration.decisions import AutomationCursor
    from incremental_assets.orchestration.instance import open_instance

    from helpers import automation_daemon

    root.mkdir(parents=True)
    year.make_project(root)
    events, clock_file, log = root / "data" / "events", root / "clock.txt", root / "daemon.log"
    for i in range(24):  # day one: the history the daemon starts from
        year.append_rows(events, year.arrivals(i))
    project = load_project(root)
    settings = project.settings
    samples: list[dict] = []
    with spark_server(root, settings):
        built = cli(root, "run", "--auto", "--end", (year.START + 24 * year.HOUR).isoformat())
        assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
        instance = open_instance(Path(settings.dagster_home))
        clock_file.write_text((year.START + 24 * year.HOUR).isoformat())
        cursor = AutomationCursor(sources={"raw.events": f"v{DeltaTable(str(events)).version()}"}).dump()
        jvm, commands = server_jvm(settings), command_server(settings)
        with automation_daemon(root, Path(settings.dagster_home), f"@{clock_file}", log, cursor) as daemon:
            began, index = time.perf_counter(), 24
            for n in range(hours + 1):
                if n:
                    year.append_rows(events, year.arrivals(index))
                    index += 1
                    clock_file.write_text((year.START + index * year.HOUR).isoformat())
                    time.sleep(max(0.0, began + n * seconds_per_hour - time.perf_counter()))
                point = sample(n, began, daemon.pid, jvm, n % detail_every == 0, n % histogram_every == 0, commands)
                point["runs_total"] = instance.get_runs_count()
                samples.append(point)
                print(json.dumps({k: v for k, v in point.items() if k not in ("native", "histogram")}), flush=True)
            now = year.START + index * year.HOUR
            settle(project, instance, now, daemon, log, timeout=1800)
            settled = sample(hours, began, daemon.pid, jvm, True, True, commands)
            settled["runs_total"] = instance.get_runs_count()
            runs = instance.get_run_records(
                filters=dg.RunsFilter(tags={"incremental_assets/launched_by": "automation"})
            )
            failed = [r.dagster_run.run_id for r in runs if r.dagster_run.status != dg.DagsterRunStatus.SUCCESS]
            verdicts = status(root, now)
            recompute = year.recompute_matches(root, Path(settings.warehouse), now)
            server_flags = jcmd(jvm, "VM.flags") if jvm else ""
    problems = {m["model"]: m for m in verdicts if any(m.get(f) for f in ("failed", "gaps", "stale", "lost"))}
    heap = re.search(r"MaxHeapSize=(\d+)", server_flags)
    return {
        "hours": hours,
        "seconds_per_hour": seconds_per_hour,
        "wall_s": round(time.perf_counter() - began, 1),
        "server_max_heap_mb": round(int(heap.group(1)) / 1048576) if heap else None,
        "automation_runs": len(runs),
        "failed_runs": failed,
        "status_problems": problems,
        "recompute": recompute,
        "samples": samples,
        "settled": settled,
    }


def trend(points: list[tuple[int, float]]) -> dict:
    """First, last, min, max; growth per 100 hours (least squares) over all hours and over each half."""

    def slope(pts: list[tuple[int, float]]) -> float | None:
        if len(pts) < 2:
            return None
        mx, my = sum(x for x, _ in pts) / len(pts), sum(y for _, y in pts) / len(pts)
        var = sum((x - mx) ** 2 for x, _ in pts)
        return round(100 * sum((x - mx) * (y - my) for x, y in pts) / var, 1) if var else None

    ys = [y for _, y in points]
    half = len(points) // 2
    return {
        "first": ys[0],
        "last": ys[-1],
        "min": min(ys),
        "max": max(ys),
        "per_100h": slope(points),
        "per_100h_first_half": slope(points[:half]),
        "per_100h_second_half": slope(points[half:]),
    }


SERIES = {
    "daemon_mb": "#1f77b4",
    "code_server_mb": "#2ca02c",
    "command_server_mb": "#17becf",
    "spark_mb": "#d62728",
    "heap_committed_mb": "#ff7f0e",
    "heap_used_mb": "#9467bd",
}
PLOTTED = {  # label: colour, the value of a sample (None: not plotted there)
    "daemon": ("#1f77b4", lambda s: s.get("daemon_mb")),
    "a code server (when one runs)": (
        "#2ca02c",
        lambda s: s["code_server_mb"] if len(s["code_servers"]) == 1 else None,
    ),
    "command server": ("#17becf", lambda s: s.get("command_server_mb")),
    "Spark server RSS": ("#d62728", lambda s: s.get("spark_mb")),
    "its Java heap committed": ("#ff7f0e", lambda s: s.get("heap_committed_mb")),
    "JIT code": ("#8c564b", lambda s: s.get("native", {}).get("Code")),
    "live heap (after full GC)": ("#9467bd", lambda s: s.get("histogram", {}).get("live_mb")),
}


def summarise(result: dict) -> dict:
    samples = result["samples"]
    out = {}
    for name in (*SERIES, "run_mb", "metaspace_committed_mb"):
        points = [(s["hour"], s[name]) for s in samples if s.get(name)]
        if points:
            out[name] = trend(points)
    # The daemon starts a new code server every minute or so and stops the old one once it is replaced: the
    # sum counts two while they overlap; one alone is what a code server holds.
    single = [(s["hour"], s["code_server_mb"]) for s in samples if len(s["code_servers"]) == 1]
    if single:
        out["code_server_mb_when_one"] = trend(single)
        out["code_servers_seen"] = len({pid for s in samples for pid in s["code_servers"]})
    native = [(s["hour"], s["native"]) for s in samples if s.get("native")]
    if native:
        first, last = native[0][1], native[-1][1]
        out["native_committed_mb_first_last"] = {k: (first.get(k), last[k]) for k in last}
    return out


def svg_plot(result: dict, out: Path) -> None:
    """Resident MB of each process (and the server's Java heap) against simulated hour."""
    samples = result["samples"]
    w, h, pad = 780, 340, 55
    top = max(value(s) or 0 for s in samples for _, value in PLOTTED.values()) * 1.1
    last = max(s["hour"] for s in samples) or 1
    px, py, parts = plot_area(w, h, pad, last, top)
    for frac in (0, 0.25, 0.5, 0.75, 1):
        y = py(top * frac)
        parts.append(f'<text x="{pad - 6}" y="{y + 4:.1f}" text-anchor="end">{top * frac:.0f}</text>')
        parts.append(f'<line x1="{pad}" y1="{y:.1f}" x2="{w - pad}" y2="{y:.1f}" stroke="#ddd"/>')
    for x in sorted({0, last // 4, last // 2, 3 * last // 4, last}):
        parts.append(f'<text x="{px(x):.1f}" y="{h - pad + 14}" text-anchor="middle">{x}</text>')
    for i, (label, (colour, value)) in enumerate(PLOTTED.items()):
        points = [(px(s["hour"]), py(y)) for s in samples if (y := value(s))]
        if not points:
            continue
        if len(points) <= 12:  # a few samples: dots
            parts += [f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{colour}"/>' for x, y in points]
        else:
            line = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
            parts.append(f'<polyline points="{line}" fill="none" stroke="{colour}" stroke-width="1.3"/>')
        parts.append(f'<text x="{pad + 5 + (i % 3) * 220}" y="{12 + (i // 3) * 14}" fill="{colour}">{label}</text>')
    parts += [
        f'<text x="{w / 2}" y="{h - 14}" text-anchor="middle">simulated hour of the daemon\'s automation</text>',
        f'<text x="14" y="{h / 2}" transform="rotate(-90 14 {h / 2})" text-anchor="middle">MB (RSS; heap: Java)</text>',
        "</svg>",
    ]
    out.write_text("\n".join(parts) + "\n")


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hours", type=int, default=200)
    parser.add_argument("--seconds-per-hour", type=float, default=8.0)
    parser.add_argument("--detail-every", type=int, default=10, help="hours between native memory summaries")
    parser.add_argument("--histogram-every", type=int, default=50, help="hours between class histograms")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--plot", type=Path)
    parser.add_argument("--summarise", action="store_true", help="only the summary and plot again, from --out")
    args = parser.parse_args(argv)
    if args.summarise:
        result = json.loads(args.out.read_text())
        result["summary"] = summarise(result)
        args.out.write_text(json.dumps(result, indent=1) + "\n")
        if args.plot:
            svg_plot(result, args.plot)
        print(json.dumps(result["summary"], indent=1))
        return
    os.environ.pop("DAGSTER_HOME", None)  # the project's own home, as its CLI commands and daemon use
    conf = os.environ.get(SPARK_CONF_ENV)
    os.environ[SPARK_CONF_ENV] = with_nmt(conf)
    root = Path(tempfile.mkdtemp(prefix="daemon-memory-")) / "project"
    result = soak(root, args.hours, args.seconds_per_hour, args.detail_every, args.histogram_every)
    result["spark_conf_from_environment"] = conf
    result["summary"] = summarise(result)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    if args.plot:
        svg_plot(result, args.plot)
    with contextlib.suppress(OSError):
        import shutil

        shutil.rmtree(root.parent)
    print(json.dumps({k: v for k, v in result.items() if k not in ("samples", "settled")}, indent=1), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
