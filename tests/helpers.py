"""Small helpers shared by the Spark tests: sources as Delta tables, tables read back as sorted rows."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

EVENTS_SOURCE = """\
- name: raw.events
  location: data/events
  format: delta
  time_column: ts
  interval_unit: hour
"""


def write_events(path, start: datetime, hours: int, *, per_hour: int = 1, mode: str = "overwrite") -> None:
    """A time-series Delta source: ``per_hour`` events each hour from ``start``, keys k0..k2."""
    ts = [start + timedelta(hours=h, minutes=m * (60 // per_hour)) for h in range(hours) for m in range(per_hour)]
    table = pa.table(
        {
            "ts": pa.array(ts, pa.timestamp("us", tz="UTC")),
            "k": pa.array([f"k{i % 3}" for i in range(len(ts))]),
            "v": pa.array([i % 7 for i in range(len(ts))], pa.int64()),
        }
    )
    write_deltalake(str(path), table, mode=mode)


def table_rows(uri: str, *, drop=("ia_interval", "ia_day")) -> list[tuple]:
    """Every row of the current Delta version, as sorted tuples (what any Delta reader sees)."""
    t = DeltaTable(uri).to_pyarrow_table()
    t = t.select([c for c in t.column_names if c not in drop])
    return sorted(normalize(tuple(r.values())) for r in t.to_pylist())


def normalize(row: tuple) -> tuple:
    """Aware datetimes as naive UTC, so rows from Delta readers and from Spark's collect() compare equal."""
    return tuple(
        v.astimezone(timezone.utc).replace(tzinfo=None) if isinstance(v, datetime) and v.tzinfo else v for v in row
    )


def table_uri(project, name: str) -> str:
    """Where a model's Delta table lives in the project's warehouse."""
    from incremental_assets import delta

    return delta.table_uri(project.settings.warehouse, name)


def cli_output(root: Path, capsys, *args: str) -> tuple[int, str]:
    """``incremental-assets ARGS --project ROOT`` in this process: its exit code and all it printed."""
    from incremental_assets import cli

    capsys.readouterr()
    code = cli.main([*args, "--project", str(root)])
    out = capsys.readouterr()
    return code, out.out + out.err


def utc(*args) -> datetime:
    return datetime(*args, tzinfo=timezone.utc)


@contextlib.contextmanager
def automation_daemon(
    root: Path, home: Path, clock: datetime | str, log: Path, cursor: str | None = None, *, sensor: bool = True
):
    """The real ``dagster-daemon`` on a project's instance with the automation sensor on (its cursor set
    to ``cursor`` first, when given; left off with ``sensor=False``), the sensor's clock at ``clock`` (an
    instant, or ``@FILE``: the instant in that file, read every tick).
    Stopped with every process it started (its own session), also when the caller fails."""
    from incremental_assets.model.settings import CLOCK_ENV
    from incremental_assets.orchestration.sensors import SENSOR_NAME

    repo = Path(__file__).resolve().parent.parent
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "INCREMENTAL_ASSETS_PROJECT": str(root),
        CLOCK_ENV: clock if isinstance(clock, str) else clock.isoformat(),
        "PYTHONPATH": str(repo) + os.pathsep + os.environ.get("PYTHONPATH", ""),
    }
    location = ["-m", "incremental_assets.definitions"]
    commands = [["sensor", "start", SENSOR_NAME, *location]] if sensor else []
    if cursor is not None:
        commands.append(["sensor", "cursor", SENSOR_NAME, "--set", cursor, *location])
    for args in commands:
        done = subprocess.run(
            [sys.executable, "-m", "dagster", *args], cwd=root, env=env, capture_output=True, text=True, timeout=300
        )
        if done.returncode != 0:
            raise RuntimeError(f"dagster {' '.join(args[:2])} failed: {done.stdout[-2000:]}{done.stderr[-2000:]}")
    with open(log, "w") as out:
        daemon = str(Path(sys.executable).parent / "dagster-daemon")
        proc = subprocess.Popen(
            [daemon, "run", *location], cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            yield proc
        finally:
            stop_session(proc)


def stop_session(proc: subprocess.Popen) -> None:
    """A process started in a session of its own, and every process it started: SIGINT, then SIGKILL;
    what is left of its group once it exited (a run's Spark JVM) is killed too."""
    for sig, wait in ((signal.SIGINT, 30), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            break
        except subprocess.TimeoutExpired:
            continue
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def all_at_once(*jobs) -> list:
    """Start every job together (a barrier) and return each result or exception."""
    barrier = threading.Barrier(len(jobs))
    out: list = [None] * len(jobs)

    def go(i, job):
        barrier.wait()
        try:
            out[i] = job()
        except Exception as exc:  # reported to the test
            out[i] = exc

    threads = [threading.Thread(target=go, args=(i, job)) for i, job in enumerate(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


# Two models downstream of a daily model s.daily(ds, k, n): one reads n, the other only ds and k.
DAILY_TOTALS_MODEL = """
MODEL (name s.totals, kind INCREMENTAL_BY_TIME_RANGE (time_column ds), start '2024-01-01');
SELECT ds, SUM(n) AS n FROM s.daily WHERE ds BETWEEN @start_ds AND @end_ds GROUP BY ds
"""
DAILY_KEYS_MODEL = """
MODEL (name s.keys, kind INCREMENTAL_BY_TIME_RANGE (time_column ds), start '2024-01-01');
SELECT ds, k FROM s.daily WHERE ds BETWEEN @start_ds AND @end_ds
"""
