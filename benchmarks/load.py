"""Load: a backfill of thousands of hourly intervals across a chain of three models, in one command.

    PYTHONPATH=. .venv/bin/python benchmarks/load.py                 # 2,000 hours (about 83 days)
    LOAD_HOURS=4000 LOAD_PER_HOUR=20 PYTHONPATH=. .venv/bin/python benchmarks/load.py

The chain raw.events -> load.hourly -> load.enriched -> load.daily_from_hours (all hourly intervals,
each FullyBatchSafe, so one single-run backfill per model) runs through the CLI's Runner against a real
Dagster instance. Reported: wall time per model, peak RSS (VmHWM) of the Python process and of the
Spark JVM, Delta versions, and whether the result equals one-shot plain Spark SQL over the whole source.
Output is JSON on stdout (also written to benchmarks/load-results.json).
"""

from __future__ import annotations

import json
import os
import resource
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from helpers import EVENTS_SOURCE  # noqa: E402

HOURS = int(os.environ.get("LOAD_HOURS", "2000"))
PER_HOUR = int(os.environ.get("LOAD_PER_HOUR", "12"))
START = datetime(2024, 1, 1, tzinfo=timezone.utc)

MODELS = {
    "models/hourly.sql": """MODEL (name load.hourly, kind INCREMENTAL_BY_TIME_RANGE (time_column h), start '2024-01-01',
  interval_unit hour);
SELECT date_trunc('HOUR', ts) AS h, k, COUNT(*) AS n, SUM(v) AS v FROM raw.events WHERE ts BETWEEN @start_dt AND @end_dt
  GROUP BY 1, 2
""",
    "models/enriched.sql": """MODEL (name load.enriched, kind INCREMENTAL_BY_TIME_RANGE (time_column h),
  start '2024-01-01', interval_unit hour);
SELECT h, k, n, v, v * 1.0 / n AS mean_v, upper(k) AS key_label FROM load.hourly WHERE h BETWEEN @start_dt AND @end_dt
""",
    "models/totals.sql": """MODEL (name load.totals, kind INCREMENTAL_BY_TIME_RANGE (time_column h), start '2024-01-01',
  interval_unit hour);
SELECT h, SUM(n) AS n, SUM(v) AS v, MAX(mean_v) AS max_mean FROM load.enriched WHERE h BETWEEN @start_dt AND @end_dt
  GROUP BY h
""",
}


def vm_hwm_mb(pid: int) -> float | None:
    """Peak resident set size of a process (VmHWM), in MB."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def jvm_pid() -> int | None:
    """The Spark driver JVM started by this process (a child running java)."""
    me = os.getpid()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            if ppid == me and "java" in (proc / "cmdline").read_bytes().decode(errors="replace"):
                return int(proc.name)
        except (OSError, ValueError, IndexError):
            continue
    return None


def main() -> dict:
    import pyarrow as pa
    from deltalake import write_deltalake

    from incremental_assets import delta
    from incremental_assets.load.project import load_project
    from incremental_assets.orchestration.build_definitions import build_definitions
    from incremental_assets.orchestration.instance import open_instance
    from incremental_assets.orchestration.runner import Runner
    from incremental_assets.orchestration.status import model_status
    from incremental_assets.spark.session import build_spark_session

    from helpers import table_rows

    root = Path(tempfile.mkdtemp(prefix="ia-load-"))
    (root / "models").mkdir()
    (root / "sources.yaml").write_text(EVENTS_SOURCE)
    for rel, text in MODELS.items():
        (root / rel).write_text(text)
    n = HOURS * PER_HOUR
    ts = [START + timedelta(seconds=i * 3600 // PER_HOUR) for i in range(n)]
    write_deltalake(
        str(root / "data" / "events"),
        pa.table(
            {
                "ts": pa.array(ts, pa.timestamp("us", tz="UTC")),
                "k": pa.array([f"k{i % 5}" for i in range(n)]),
                "v": pa.array([i % 97 for i in range(n)], pa.int64()),
            }
        ),
    )
    os.environ["DAGSTER_HOME"] = str(root / ".dagster")
    project = load_project(root)
    instance = open_instance(project.settings.dagster_home)
    runner = Runner(project, instance, build_definitions(project))
    end = START + timedelta(hours=HOURS)
    began = time.perf_counter()
    report = runner.run(project.select("+load.totals"), start=START, end=end)
    wall = time.perf_counter() - began
    jvm = jvm_pid()
    figures = {
        "hours": HOURS,
        "source_rows": n,
        "models": 3,
        "intervals_total": 3 * HOURS,
        "runs": [
            {"model": r.model, "window": str(r.window), "ok": r.success, "seconds": round(r.seconds, 1), "rows": r.rows}
            for r in report.records
        ],
        "wall_seconds": round(wall, 1),
        "python_peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "jvm_peak_rss_mb": round(vm_hwm_mb(jvm), 1) if jvm else None,
    }
    status = model_status(instance, project.model("load.totals"), until=end, now=end)
    figures["intervals_recorded_last_model"] = status.intervals_done
    figures["gaps_last_model"] = [str(g) for g in status.gaps]
    # Correctness: the chain's result equals the same computation done once by plain Spark SQL.
    spark = build_spark_session(project.settings.spark_config())
    spark.read.format("parquet").load(delta.source_files(str(root / "data" / "events"))).createOrReplaceTempView("ev")
    expected = spark.sql(
        "SELECT h, SUM(n) AS n, SUM(v) AS v, MAX(v * 1.0 / n) AS max_mean FROM ("
        "SELECT date_trunc('HOUR', ts) AS h, k, COUNT(*) AS n, SUM(v) AS v FROM ev GROUP BY 1, 2) GROUP BY h"
    ).collect()
    from helpers import normalize

    want = sorted(normalize(tuple(r)) for r in expected)
    got = table_rows(delta.table_uri(project.settings.warehouse, "load.totals"))
    figures["result_rows"] = len(got)
    figures["equals_one_shot"] = [tuple(map(str, r)) for r in got] == [tuple(map(str, r)) for r in want]
    figures["success"] = report.success and figures["equals_one_shot"] and not figures["gaps_last_model"]
    return figures


if __name__ == "__main__":
    os.environ.setdefault("TZ", "UTC")
    time.tzset()
    result = main()
    text = json.dumps(result, indent=2)
    print(text)
    (HERE / "load-results.json").write_text(text + "\n")
    sys.exit(0 if result["success"] else 1)
