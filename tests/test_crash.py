"""Kill the process (SIGKILL) at every stage of a write and prove nothing is lost or mixed.

Each fault is a real `incremental-assets run` in a child process that dies uncleanly (no finally, no
atexit, no Spark shutdown): while Spark writes the staging files, after the files are written and
before the Delta commit, and right after the commit before Dagster records the materialization. After
each one the table is read back whole and must equal the old or the new state of the window; the next
run records a commit Dagster missed from the Delta log instead of computing it again, marks the dead
runs failed, and removes the dead runs' staging folders.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pytest
from deltalake import DeltaTable

from incremental_assets import cli, delta
from incremental_assets.model.intervals import TimeWindow
from incremental_assets.orchestration.instance import open_instance
from incremental_assets.orchestration.status import model_status

from conftest import REPO
from helpers import EVENTS_SOURCE, table_rows, utc, write_events

MODELS = {
    "sources.yaml": EVENTS_SOURCE,
    "models/daily.sql": """
        MODEL (name s.daily, kind INCREMENTAL_BY_TIME_RANGE (time_column h), start '2024-01-01');
        SELECT date_trunc('HOUR', ts) AS h, COUNT(*) AS n FROM raw.events WHERE ts BETWEEN @start_dt AND @end_dt
          GROUP BY 1
    """,
    "models/total.sql": """
        MODEL (name s.total, kind FULL);
        SELECT SUM(n) AS n FROM s.daily
    """,
}

DAY1 = ["--start", "2024-01-01", "--end", "2024-01-02"]
DAY2 = ["--start", "2024-01-02", "--end", "2024-01-03"]


def _child_env(kill_at: str | None) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(REPO), TZ="UTC", INCREMENTAL_ASSETS_SPARK_MASTER="local[1]")
    env.pop("INCREMENTAL_ASSETS_KILL_AT", None)
    if kill_at:
        env["INCREMENTAL_ASSETS_KILL_AT"] = kill_at
    return env


def _kill_group(proc: subprocess.Popen) -> None:
    """The child's JVM dies with it, as in a killed container."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)


def killed_run(
    root: Path, args: list[str], *, kill_at: str | None = None, when_staging_has_files: str | None = None
) -> int:
    """Run the CLI in a child process that is killed at a stage; returns its exit code (-9 when killed)."""
    command = [sys.executable, "-m", "incremental_assets.cli", "run", *args, "--project", str(root)]
    proc = subprocess.Popen(
        command,
        env=_child_env(kill_at),
        cwd=root,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        if when_staging_has_files:
            table = Path(when_staging_has_files)
            before = {p.name for p in table.glob("run-*")}
            deadline = time.monotonic() + 120
            while proc.poll() is None and time.monotonic() < deadline:
                fresh = [p for p in table.glob("run-*") if p.name not in before]
                if any(f.is_file() for p in fresh for f in p.rglob("*")):
                    os.killpg(proc.pid, signal.SIGKILL)  # Spark is writing this run's files
                    break
                time.sleep(0.002)
        proc.wait(timeout=180)
    finally:
        _kill_group(proc)
    return proc.returncode


@pytest.fixture
def project(make_project, load_with_home):
    root = make_project(MODELS)
    write_events(root / "data" / "events", utc(2024, 1, 1), 48, per_hour=2)
    return load_with_home(root)


def _staging_dirs(uri: str) -> set[str]:
    return {p.name for p in Path(uri).glob("run-*")}


def test_kills_at_every_stage_leave_old_or_new_state_and_are_reconciled(project, spark, capsys):
    root = project.directory
    uri = delta.table_uri(project.settings.warehouse, "s.daily")
    instance = open_instance(project.settings.dagster_home)
    key = dg.AssetKey(["s", "daily"])

    assert cli.main(["run", "s.daily", *DAY1, "--project", str(root)]) == 0
    old = table_rows(uri)
    assert old == [(utc(2024, 1, 1, h).replace(tzinfo=None), 2) for h in range(24)]
    write_events(root / "data" / "events", utc(2024, 1, 1), 48, per_hour=3)  # a re-run now writes 3 per hour
    new_day1 = [(utc(2024, 1, 1, h).replace(tzinfo=None), 3) for h in range(24)]
    version = DeltaTable(uri).version()

    # 1. Killed while Spark writes the staging files of a re-run of day 1.
    code = killed_run(root, ["s.daily", *DAY1], when_staging_has_files=uri)
    assert code == -signal.SIGKILL
    assert table_rows(uri) in (old, new_day1)  # the whole window, old or new: never a mix
    assert table_rows(uri) == old and DeltaTable(uri).version() == version

    # 2. Killed after every file is written, before the commit.
    assert killed_run(root, ["s.daily", *DAY1], kill_at="staged") == -signal.SIGKILL
    assert table_rows(uri) == old and DeltaTable(uri).version() == version
    orphans = delta.orphan_staging_dirs(uri)
    assert len(orphans) >= 1 and any(Path(o).rglob("*.parquet") for o in orphans)
    # Readers use the committed file list: the orphaned files are never read.
    assert not any("/" + Path(o).name + "/" in f for o in orphans for f in delta.committed_files(uri))

    # 3. Killed right after committing day 2, before Dagster records it.
    assert killed_run(root, ["s.daily", *DAY2], kill_at="committed") == -signal.SIGKILL
    committed = DeltaTable(uri).version()
    assert committed == version + 1
    new_day2 = [(utc(2024, 1, 2, h).replace(tzinfo=None), 3) for h in range(24)]
    assert table_rows(uri) == old + new_day2
    assert not any(pk.startswith("2024-01-02") for pk in instance.get_materialized_partitions(key))

    # 4. The FULL write path: killed right after committing, before Dagster records it.
    total = delta.table_uri(project.settings.warehouse, "s.total")
    assert killed_run(root, ["s.total"], kill_at="committed") == -signal.SIGKILL
    assert table_rows(total) == [(2 * 24 + 3 * 24,)]
    assert instance.get_latest_materialization_event(dg.AssetKey(["s", "total"])) is None

    capsys.readouterr()
    assert cli.main(["status", "s.daily", "--project", str(root)]) == 0
    out = capsys.readouterr().out
    assert (
        f"warning: Delta version {committed} holds 1 interval(s) in [2024-01-02, 2024-01-03) that Dagster "
        "has not recorded" in out
    )
    # `status` itself marks the killed runs failed: none of their intervals shows as running.
    assert "  running:" not in out and "  failed:  [2024-01-01, 2024-01-03)" in out
    assert instance.get_runs(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED])) == []

    # The next --auto run records the commits from the Delta log instead of recomputing them.
    assert cli.main(["run", "s.daily", "s.total", "--auto", "--end", "2024-01-03", "--project", str(root)]) == 0
    out = capsys.readouterr().out
    assert f"s.daily: recorded 1 interval(s) in [2024-01-02, 2024-01-03) from Delta version {committed}" in out
    assert "s.total: recorded full table from Delta version 0" in out
    assert "0 run(s) succeeded, 0 failed" in out  # nothing recomputed
    assert DeltaTable(uri).version() == committed and DeltaTable(total).version() == 0
    status = model_status(instance, project.model("s.daily"), until=utc(2024, 1, 3), now=utc(2024, 1, 3))
    assert status.gaps == () and status.in_progress == ()
    assert status.covered == (TimeWindow(utc(2024, 1, 1), utc(2024, 1, 3)),)
    event = instance.get_latest_materialization_event(key)
    assert event.asset_materialization.metadata["reconciled_from"].value == f"Delta version {committed}"
    # The killed runs no longer show as running: their process is gone.
    killed = instance.get_runs(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.FAILURE]))
    assert len(killed) == 4
    assert instance.get_runs(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED])) == []

    # A later run of the table removes the dead runs' staging folders; the committed ones stay.
    assert cli.main(["run", "s.daily", *DAY1, "--project", str(root)]) == 0
    assert table_rows(uri) == new_day1 + new_day2
    assert delta.orphan_staging_dirs(uri) == []
    assert not {Path(o).name for o in orphans} & _staging_dirs(uri)
    referenced = {f.split("/run-", 1)[1].split("/", 1)[0] for f in delta.committed_files(uri)}
    assert {"run-" + r for r in referenced} <= _staging_dirs(uri)
