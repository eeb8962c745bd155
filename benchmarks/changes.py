"""What a change of a model costs: one column added to ``shop.order_lines`` after a year of history.

The example shop (``models/``, a year of demo data) is built by ``incremental-assets run --auto --end E``
(untimed), then ``shop.order_lines`` gains one column at the end of its SELECT (a non-breaking change: no
model below it reads the new column) and ``run --auto --end E`` runs again: that second command is
measured, as a user runs it (a fresh process, its own Dagster home and warehouse).

Two code versions do the same, repetitions interleaved: ``before`` is the product at ``BENCH_CHANGES_BASELINE``
(a git commit, checked out into a temporary folder and put first on ``PYTHONPATH``), where any change of a
model rebuilds it and restates every downstream interval that read it; ``after`` is this checkout, which
applies the plan (the changed model is rebuilt; a model that reads no changed column recomputes nothing).

Spark work is read from Spark's own event log of the measured command (``spark.eventLog.enabled``): jobs,
tasks, the executors' run time, bytes read and written. Dagster's work is the number of materializations the
command recorded, per model.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from datetime import date, timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
BASELINE = os.environ.get("BENCH_CHANGES_BASELINE", "9d35809")
ADDED = "  o.channel,\n  CAST(li.quantity * it.unit_price * 0.2 AS DECIMAL(18, 2)) AS tax\nFROM raw.orders AS o"


def _checkout(commit: str, into: Path) -> Path:
    """The product at ``commit``, as files (no git metadata), for ``PYTHONPATH``."""
    into.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", commit, "incremental_assets"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def _project(root: Path, days: int, orders_per_day: int, data: Path) -> Path:
    shutil.copytree(REPO / "models", root / "models")
    shutil.copy(REPO / "sources.yaml", root / "sources.yaml")
    os.symlink(data, root / "data")
    return root


def _spark_work(events: Path) -> dict:
    """Jobs, tasks, executor run time and bytes of the one Spark application logged under ``events``."""
    logs = sorted(events.iterdir(), key=lambda p: p.stat().st_mtime)
    jobs = tasks = run_ms = read = written = 0
    for line in logs[-1].read_text().splitlines():
        event = json.loads(line)
        kind = event.get("Event")
        if kind == "SparkListenerJobStart":
            jobs += 1
        elif kind == "SparkListenerTaskEnd":
            tasks += 1
            metrics = event.get("Task Metrics") or {}
            run_ms += metrics.get("Executor Run Time", 0)
            read += (metrics.get("Input Metrics") or {}).get("Bytes Read", 0)
            written += (metrics.get("Output Metrics") or {}).get("Bytes Written", 0)
    return {
        "spark_jobs": jobs,
        "spark_tasks": tasks,
        "executor_run_s": round(run_ms / 1000, 1),
        "bytes_read_mb": round(read / 2**20, 1),
        "bytes_written_mb": round(written / 2**20, 1),
    }


def _materializations(home: Path, since: float) -> dict[str, int]:
    os.environ["DAGSTER_HOME"] = str(home)
    import dagster as dg

    with dg.DagsterInstance.get() as instance:
        out = {}
        for key in instance.get_asset_keys():
            count, cursor = 0, None
            while True:
                page = instance.fetch_materializations(
                    dg.AssetRecordsFilter(asset_key=key, after_timestamp=since), limit=10_000, cursor=cursor
                )
                count += len(page.records)
                if not page.has_more:
                    break
                cursor = page.cursor
            out["/".join(key.path)] = count
        return {k: v for k, v in sorted(out.items()) if v}


def _run(code: Path | None, project: Path, end: str, events: Path) -> tuple[float, list[str]]:
    env = dict(os.environ)
    env.pop("DAGSTER_HOME", None)
    if code is not None:
        env["PYTHONPATH"] = str(code)
    env["INCREMENTAL_ASSETS_SPARK_CONF"] = json.dumps(
        {
            "spark.eventLog.enabled": "true",
            "spark.eventLog.dir": events.as_uri(),
            "spark.eventLog.rolling.enabled": "false",
            "spark.eventLog.compress": "false",
        }
    )
    began = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "incremental_assets.cli", "run", "--auto", "--end", end, "--project", str(project)],
        env=env,
        capture_output=True,
        text=True,
        cwd=project,
    )  # not this checkout: `-m` puts the cwd first on sys.path
    seconds = time.perf_counter() - began
    if done.returncode != 0:
        raise RuntimeError(f"run --auto failed ({done.returncode}): {done.stdout[-2000:]} {done.stderr[-2000:]}")
    return seconds, [line for line in done.stdout.splitlines() if line.startswith("[")]


def one(code: Path | None, root: Path, days: int, orders_per_day: int, data: Path) -> dict:
    project = _project(root, days, orders_per_day, data)
    end = (date(2024, 1, 1) + timedelta(days=days)).isoformat()
    events = root / "spark-events"
    events.mkdir()
    setup, _ = _run(code, project, end, events)
    path = project / "models" / "staging" / "order_lines.sql"
    text = path.read_text()
    assert "  o.channel\nFROM raw.orders AS o" in text, "the example's order_lines no longer ends with o.channel"
    path.write_text(text.replace("  o.channel\nFROM raw.orders AS o", ADDED))
    since = time.time()
    seconds, runs = _run(code, project, end, events)
    return {
        "setup_s": round(setup, 1),
        "change_s": round(seconds, 2),
        "runs": runs,
        **_spark_work(events),
        "materializations": _materializations(project / ".dagster", since),
    }


def scenario_changes(tmp: Path, *, days: int, orders_per_day: int, reps: int) -> dict:
    from incremental_assets.demo import generate_demo_data

    data_root = tmp / "data-project"
    data_root.mkdir()
    generate_demo_data(data_root, start=date(2024, 1, 1), days=days, orders_per_day=orders_per_day)
    baseline = _checkout(BASELINE, tmp / "baseline")
    runs: dict[str, list[dict]] = {"before": [], "after": []}
    for rep in range(reps):
        order = ("before", "after") if rep % 2 == 0 else ("after", "before")
        for variant in order:
            code = baseline if variant == "before" else None
            row = one(code, tmp / f"{variant}{rep}", days, orders_per_day, data_root / "data")
            print(
                f"changes: {variant} rep {rep}: run --auto after the column was added {row['change_s']:.1f}s, "
                f"{row['spark_jobs']} Spark jobs, {row['spark_tasks']} tasks, executors {row['executor_run_s']}s, "
                f"materializations {sum(row['materializations'].values())}",
                flush=True,
            )
            runs[variant].append(row)
            shutil.rmtree(tmp / f"{variant}{rep}", ignore_errors=True)
    before = statistics.median(r["change_s"] for r in runs["before"])
    after = statistics.median(r["change_s"] for r in runs["after"])
    print(
        f"changes: one column added to shop.order_lines over {days} days: run --auto {before:.1f}s before, "
        f"{after:.1f}s after "
        f"({before / after:.2f}x faster)",
        flush=True,
    )
    return {
        "days": days,
        "orders_per_day": orders_per_day,
        "baseline": BASELINE,
        "reps": reps,
        "before_s": round(before, 2),
        "after_s": round(after, 2),
        "speedup": round(before / after, 2),
        "runs": runs,
    }
