"""A run's stdout and stderr: kept in Dagster's compute log files (what the UI shows) and copied on to the
terminal by a thread of the run's process (no ``tail`` processes): every line once, in order, in both."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from unittest import mock

import dagster as dg

from incremental_assets.orchestration.compute_logs import ProjectComputeLogManager, mirrored

from helpers import utc, write_events

SOURCE = """
- name: raw.events
  location: data/events
  format: parquet
  time_column: ts
  columns: {id: bigint, ts: timestamp, v: double}
"""
MODEL = """
MODEL (name s.daily, kind INCREMENTAL_BY_TIME_RANGE (time_column ds), start '2024-01-01');
SELECT CAST(ts AS DATE) AS ds, COUNT(*) AS n FROM raw.events WHERE ts BETWEEN @start_dt AND @end_dt GROUP BY 1
"""


def _lines(path) -> list[str]:
    with open(path, encoding="utf-8") as handle:
        return handle.read().splitlines()


def test_everything_written_while_mirrored_reaches_the_terminal_once_in_order_and_the_file(tmp_path):
    terminal, log = tmp_path / "terminal.txt", str(tmp_path / "step.out")
    saved = os.dup(1)
    with open(terminal, "w") as handle:
        os.dup2(handle.fileno(), 1)
    stdout = open(1, "w", closefd=False)  # a stream on descriptor 1, as a process's own sys.stdout
    try:
        print("before", file=stdout, flush=True)
        with mirrored(stdout, log):
            for i in range(5000):
                print(f"line {i}", file=stdout)
            stdout.flush()
            # a child process started meanwhile writes to the same descriptor
            subprocess.run(["echo", "from a child"], check=True, stdout=1)
            print("last", file=stdout, flush=True)
        print("after", file=stdout, flush=True)
    finally:
        stdout.close()
        os.dup2(saved, 1)
        os.close(saved)
    body = [f"line {i}" for i in range(5000)] + ["from a child", "last"]
    assert _lines(terminal) == ["before", *body, "after"]
    assert _lines(log) == body
    assert not [t for t in threading.enumerate() if t.name == "compute-log-mirror"]


def test_a_terminal_that_went_away_ends_the_copy_not_the_run(tmp_path):
    read, write = os.pipe()
    os.close(read)  # the caller's end is gone: writing to it fails (EPIPE)
    saved = os.dup(2)
    os.dup2(write, 2)
    os.close(write)
    stderr = open(2, "w", closefd=False)
    log = str(tmp_path / "step.err")
    try:
        with mirrored(stderr, log):
            for i in range(100):
                stderr.write(f"warning {i}\n")
            stderr.flush()
    finally:
        stderr.close()
        os.dup2(saved, 2)
        os.close(saved)
    assert _lines(log) == [f"warning {i}" for i in range(100)]


def run_output_kept(home) -> list[str]:
    """The lines the latest run's capture kept in the instance at ``home`` (stdout, then stderr), read as the
    UI reads them; the capture is complete and was made by the project's manager."""
    with mock.patch.dict(os.environ, {"DAGSTER_HOME": str(home)}):  # what its dagster.yaml's classes read
        instance = dg.DagsterInstance.from_config(str(home))
        manager = instance.compute_log_manager
        assert isinstance(manager, ProjectComputeLogManager)
        run = instance.get_runs(limit=1)[0]
        captured = instance.all_logs(run.run_id, of_type=dg.DagsterEventType.LOGS_CAPTURED)
        assert len(captured) == 1
        key = manager.build_log_key_for_run(run.run_id, captured[0].dagster_event.logs_captured_data.file_key)
        assert manager.is_capture_complete(key)
        data = manager.get_log_data(key)
    return ((data.stdout or b"").decode() + (data.stderr or b"").decode()).splitlines()


def test_a_cli_run_s_output_reaches_the_terminal_and_stays_in_the_run_s_compute_log(make_project, tmp_path):
    """The command in its own process starts its local Spark inside the run: the JVM (a child process) writes
    to the run's stderr, which the UI shows and the terminal shows, each line once."""
    root = make_project({"sources.yaml": SOURCE, "models/daily.sql": MODEL})
    write_events(root / "data" / "events", utc(2024, 1, 1), 24 * 2)
    home = tmp_path / "home"
    env = {**os.environ, "DAGSTER_HOME": str(home), "INCREMENTAL_ASSETS_COMMAND_SERVER": "0"}
    ran = subprocess.run(
        [sys.executable, "-m", "incremental_assets.cli", "run", "s.daily", "--start", "2024-01-01", "--end"]
        + ["2024-01-03", "--project", str(root)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ran.returncode == 0 and "1 run(s) succeeded" in ran.stdout, ran.stdout + ran.stderr
    kept = run_output_kept(home)
    # The JVM's own line at its start (Java prints it for the module Spark adds); Spark's notices are off.
    spark_started = [line for line in kept if line.startswith("WARNING: Using incubator modules")]
    assert len(spark_started) == 1, kept
    assert ran.stderr.splitlines().count(spark_started[0]) == 1, ran.stderr
