"""The command server ``incremental-assets spark start`` keeps next to the project's Spark: commands are handed
to it and run in a forked copy with their libraries imported, exactly as in a process of their own (output,
exit code, environment, working directory), signals and a killed caller included; a caller of other code
runs on its own; the server ends with the Spark server. Every server is stopped by its PID at the end.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_compute_logs import run_output_kept
from test_spark_server import TIMEOUT, clean_env, gone, run_cli, server_project, stopped_at_end

from incremental_assets.cli import command_server
from incremental_assets.delta import table_uri
from incremental_assets.delta.lock import writer_lock
from incremental_assets.orchestration import command_socket
from incremental_assets.spark import connect_server as server

from helpers import automation_daemon, table_rows

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A two-model project, its Spark server and command server started by the CLI; both stopped at the end."""
    root = server_project(tmp_path_factory.mktemp("command-server") / "project", 24 * 3)
    with stopped_at_end(root) as settings:
        started = run_cli(root, "spark", "start", "--no-warm-up")
        assert started.returncode == 0, started.stdout + started.stderr
        record = command_server.read_record(server.state_dir(settings))
        assert record is not None and f"command server: pid {record['pid']}" in started.stdout, started.stdout
        assert record["socket"] == str(command_socket.socket_path(root))
        yield root, settings, int(record["pid"])


def served_lines(settings) -> list[str]:
    """The server's log: one line per command it ran (PID, exit code, seconds, arguments)."""
    log = server.state_dir(settings) / command_server.LOG_FILE
    return [line for line in log.read_text().splitlines() if ": exit " in line]


def children_of(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def test_a_command_runs_in_the_server_as_in_its_own_process(served, tmp_path):
    root, settings, pid = served
    ran = run_cli(root, "run", "s.hourly", "s.daily", "--start", "2024-01-01", "--end", "2024-01-03")
    assert ran.returncode == 0 and "2 run(s) succeeded, 0 failed" in ran.stdout, ran.stdout + ran.stderr
    assert [row[1] for row in table_rows(table_uri(settings.warehouse, "s.daily"))] == [72, 72]
    run_output_kept(settings.dagster_home)  # the copy's run captured its output as the UI reads it
    assert _wait_for(lambda: len(served_lines(settings)) == 1), served_lines(settings)
    lines = served_lines(settings)
    assert ": exit 0 after " in lines[0] and lines[0].endswith(f"--project {root}"), lines

    # The same output and exit code as the command's own process, for each of: a plain command, the
    # caller's environment (another warehouse: every recorded interval is lost there, exit 1), a model that
    # does not exist (exit 2, one line on stderr), and the working directory standing for --project.
    elsewhere = clean_env(INCREMENTAL_ASSETS_WAREHOUSE=str(tmp_path / "empty-warehouse"))
    for args, env in (
        (["status"], clean_env()),
        (["status"], elsewhere),
        (["status", "no.such_model"], clean_env()),
    ):
        handed = run_cli(root, *args, env=env)
        own = run_cli(root, *args, env={**env, "INCREMENTAL_ASSETS_COMMAND_SERVER": "0"})
        assert (handed.returncode, handed.stdout, handed.stderr) == (own.returncode, own.stdout, own.stderr), args
    assert run_cli(root, "status", env=elsewhere).returncode == 1
    missing = run_cli(root, "status", "no.such_model")
    assert missing.returncode == 2 and missing.stderr.startswith("error: no model named 'no.such_model'")
    in_folder = subprocess.run(
        [sys.executable, "-m", "incremental_assets.cli", "status", "s.daily"],
        cwd=root,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert in_folder.returncode == 0 and "s.daily (day): 2/" in in_folder.stdout, in_folder.stdout + in_folder.stderr
    # Five status commands above went through the server, the three with the switch off did not.
    assert _wait_for(lambda: len(served_lines(settings)) == 1 + 3 + 2 + 1), served_lines(settings)
    assert ": exit 0 after " in served_lines(settings)[-1] and served_lines(settings)[-1].endswith("status s.daily")
    assert not gone(pid)


def _blocked_run(root: Path, settings) -> tuple[subprocess.Popen, int]:
    """A `run` of s.hourly that waits for the table's writer lock (held by the test): the caller and the
    server's copy running it."""
    caller = subprocess.Popen(
        [sys.executable, "-m", "incremental_assets.cli", "run", "s.hourly", "--start", "2024-01-03", "--end"]
        + ["2024-01-04", "--project", str(root)],
        env=clean_env(INCREMENTAL_ASSETS_LOCK_TIMEOUT="120"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    serving = int(command_server.read_record(server.state_dir(settings))["pid"])
    deadline = time.monotonic() + 60
    while not (copies := children_of(serving)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert copies, "the server forked no copy for the command"
    time.sleep(3)  # well into the run: planning done, waiting for the lock
    assert caller.poll() is None
    return caller, copies[0]


def test_signals_reach_the_command_and_a_killed_caller_takes_it_along(served):
    root, settings, _ = served
    before = table_rows(table_uri(settings.warehouse, "s.hourly"))
    with writer_lock(table_uri(settings.warehouse, "s.hourly"), owner="test", timeout=0):
        caller, copy = _blocked_run(root, settings)
        try:
            # Ctrl-C, long before the lock's 120 s: the run stops as a failed run, as in a process of its own.
            caller.send_signal(signal.SIGINT)
            out, err = caller.communicate(timeout=60)
        finally:
            caller.kill()
        assert caller.returncode == 1 and "FAILED" in out and "0 run(s) succeeded, 1 failed" in out, out + err
        assert "Traceback" not in err, err
        assert _wait_gone(copy)
        assert _wait_for(lambda: ": exit 1 after " in served_lines(settings)[-1]), served_lines(settings)[-3:]

        caller, copy = _blocked_run(root, settings)
        caller.kill()  # SIGKILL: the caller can pass nothing on
        caller.wait(timeout=30)
        assert _wait_gone(copy), "the command outlived its killed caller"
        assert _wait_for(lambda: ": exit -9 after " in served_lines(settings)[-1]), served_lines(settings)[-3:]
    assert table_rows(table_uri(settings.warehouse, "s.hourly")) == before  # nothing half-written


def _wait_for(condition, seconds: float = 15.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def _wait_gone(pid: int) -> bool:
    return _wait_for(lambda: gone(pid))


def test_a_caller_of_other_code_runs_on_its_own_and_the_server_goes_on(served):
    root, settings, pid = served
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
        client.connect(str(command_socket.socket_path(root)))
        request = {"argv": ["status"], "cwd": str(root), "env": clean_env(), "umask": 0o22, "path": sys.path}
        payload = json.dumps({**request, "code": "another copy of the package"}).encode()
        socket.send_fds(client, [b"R"], [0, 1, 2])
        client.sendall(command_socket.HEADER.pack(len(payload)) + payload)
        assert client.makefile().readline() == "other code\n"
    served_before = len(served_lines(settings))
    assert run_cli(root, "status").returncode == 0
    assert not gone(pid) and _wait_for(lambda: len(served_lines(settings)) == served_before + 1)


def test_a_socket_folder_others_may_enter_is_not_trusted(tmp_path):
    folder = tmp_path / "sockets"
    folder.mkdir(mode=0o700)
    assert command_socket.own_folder(folder)
    folder.chmod(0o755)
    assert not command_socket.own_folder(folder)
    assert not command_socket.own_folder(tmp_path / "absent")


def test_queued_runs_on_the_long_lived_spark_run_side_by_side(served, tmp_path, monkeypatch):
    """With the Spark server up, the real daemon starts two queued runs of two tables at once, although the
    project lets only one run with a Spark of its own run at a time: each run is tagged ``server`` when it
    is queued, and both run in copies of the command server."""
    import dagster as dg
    from test_run_queue import _step_span

    from incremental_assets.orchestration.run_coordinator import ON_SERVER, SPARK_TAG
    from incremental_assets.orchestration.run_launcher import WORKER_PID_TAG

    root, settings, _ = served
    limits = {"INCREMENTAL_ASSETS_MAX_CONCURRENT_RUNS": "1", "INCREMENTAL_ASSETS_MAX_CONCURRENT_RUNS_ON_SERVER": "2"}
    env = clean_env(
        DAGSTER_HOME=str(settings.dagster_home),
        INCREMENTAL_ASSETS_PROJECT=str(root),
        PYTHONPATH=str(Path(__file__).resolve().parents[1]) + os.pathsep + os.environ.get("PYTHONPATH", ""),
        **limits,
    )
    # The instance's dagster.yaml with these limits, and the two days the runs below read built.
    ran = run_cli(root, "run", "s.hourly", "s.daily", "--start", "2024-01-01", "--end", "2024-01-03", env=env)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    # Two runs of two tables (an hour done before, a day whose hours are all done), queued before the daemon is up.
    launched = []
    for job, partition in (("s__hourly_job", "2024-01-01-05:00"), ("s__daily_job", "2024-01-02")):
        tags = json.dumps({"dagster/partition": partition, "test": "side-by-side"})
        done = subprocess.run(
            [sys.executable, "-m", "dagster", "job", "launch", "-m", "incremental_assets.definitions", "-j", job]
            + ["--tags", tags],
            cwd=root,
            env=env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        launched.append(job)
    monkeypatch.setenv("DAGSTER_HOME", str(settings.dagster_home))  # what the instance's dagster.yaml reads
    instance = dg.DagsterInstance.from_config(str(settings.dagster_home))
    side_by_side = dg.RunsFilter(tags={"test": "side-by-side"})
    runs = instance.get_runs(filters=side_by_side)
    assert sorted(r.job_name for r in runs) == sorted(launched)
    assert {r.status for r in runs} == {dg.DagsterRunStatus.QUEUED} and {r.tags[SPARK_TAG] for r in runs} == {ON_SERVER}

    # The real daemon (no sensor), stopped with every process it started.
    with automation_daemon(
        root, settings.dagster_home, "2024-01-04T00:00:00+00:00", tmp_path / "daemon.log", sensor=False
    ):
        finished = _wait_for(lambda: all(r.is_finished for r in instance.get_runs(filters=side_by_side)), 300)
    runs = instance.get_runs(filters=side_by_side)
    assert finished and {r.status for r in runs} == {dg.DagsterRunStatus.SUCCESS}, (
        [(r.job_name, r.status) for r in runs],
        (tmp_path / "daemon.log").read_text()[-3000:],
    )
    assert all(WORKER_PID_TAG in r.tags for r in runs)  # each ran in a copy of the command server
    (a_start, a_end), (b_start, b_end) = (_step_span(instance, r.run_id) for r in runs)
    assert a_start < b_end and b_start < a_end, "the two runs' steps did not overlap"


def test_the_automation_requests_the_days_with_the_hours_they_wait_for(served, tmp_path, monkeypatch):
    """With the Spark server up, the real daemon and sensor: a day of events arrives (an hour without any) and
    a late row for an hour two days back. The sensor requests the two hours' runs and, in the same tick, the
    runs of the two days, which wait in their runs for the hours they read; every run succeeds, each
    interval is computed once, and the days equal a recompute from the source."""
    import dagster as dg
    from deltalake import DeltaTable

    from incremental_assets.orchestration import tags
    from incremental_assets.orchestration.decisions import AutomationCursor
    from incremental_assets.orchestration.instance import ACTIVE_RUN_STATUSES
    from incremental_assets.orchestration.run_coordinator import ON_SERVER, SPARK_TAG

    from helpers import utc, write_events

    root, settings, _ = served
    env = clean_env(
        DAGSTER_HOME=str(settings.dagster_home),
        PYTHONPATH=str(Path(__file__).resolve().parents[1]) + os.pathsep + os.environ.get("PYTHONPATH", ""),
    )
    # Every hour and day to 2024-01-03 computed (whatever the tests before left failed or missing).
    ran = run_cli(root, "run", "s.hourly", "s.daily", "--start", "2024-01-01", "--end", "2024-01-04", env=env)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    events = root / "data" / "events"
    cursor = AutomationCursor(sources={"raw.events": f"v{DeltaTable(str(events)).version()}"}).dump()
    # The next day arrives (05:00 without events), and a late row for 2024-01-02 10:00.
    write_events(events, utc(2024, 1, 4), 5, per_hour=3, mode="append")
    write_events(events, utc(2024, 1, 4, 6), 18, per_hour=3, mode="append")
    write_events(events, utc(2024, 1, 2, 10, 40), 1, mode="append")

    monkeypatch.setenv("DAGSTER_HOME", str(settings.dagster_home))
    instance = dg.DagsterInstance.from_config(str(settings.dagster_home))
    automation = dg.RunsFilter(tags={tags.LAUNCHED_BY_TAG: "automation"})
    assert instance.get_runs(filters=automation) == []
    with automation_daemon(root, settings.dagster_home, "2024-01-05T00:00:00+00:00", tmp_path / "daemon.log", cursor):

        def settled() -> bool:
            runs = instance.get_runs(filters=automation)
            busy = instance.get_runs(filters=dg.RunsFilter(statuses=ACTIVE_RUN_STATUSES))
            return len(runs) >= 4 and not busy

        done = _wait_for(settled, 300)
    log = (tmp_path / "daemon.log").read_text()[-4000:]
    records = instance.get_run_records(filters=automation)
    assert done and {r.dagster_run.status for r in records} == {dg.DagsterRunStatus.SUCCESS}, (
        [(r.dagster_run.asset_selection, r.dagster_run.status) for r in records],
        log,
    )
    by_range = {
        (next(iter(r.dagster_run.asset_selection or ())).to_user_string(), *tags.range_of(r.dagster_run.tags)): r
        for r in records
    }
    hours = {("s/hourly", "2024-01-02-10:00", "2024-01-02-10:00"), ("s/hourly", "2024-01-04-00:00", "2024-01-04-23:00")}
    days = {("s/daily", "2024-01-02", "2024-01-02"), ("s/daily", "2024-01-04", "2024-01-04")}
    assert set(by_range) == hours | days and len(records) == 4, sorted(by_range)
    # The days were requested with the hours (before either hour's run ended), tagged to wait for them.
    first_end = min(by_range[h].end_time or 0 for h in hours)
    for day in days:
        run = by_range[day]
        assert run.dagster_run.tags[tags.AFTER_UPSTREAM_TAG] == "true" and run.dagster_run.tags[SPARK_TAG] == ON_SERVER
        assert run.create_timestamp.timestamp() < first_end, f"{day} was requested by a later tick"
    # Each interval computed once by the automation, the days after the hours they read: equal to a recompute.
    ran_here = {r.dagster_run.run_id for r in records}
    for key, partitions in (
        ("s/hourly", ["2024-01-02-10:00", *(f"2024-01-04-{h:02d}:00" for h in range(24))]),
        ("s/daily", ["2024-01-02", "2024-01-04"]),
    ):
        asset = dg.AssetKey(key.split("/"))
        for partition in partitions:
            found = instance.fetch_materializations(
                dg.AssetRecordsFilter(asset_key=asset, asset_partitions=[partition]), limit=10
            ).records
            assert len([m for m in found if m.run_id in ran_here]) == 1, (key, partition)
    source = DeltaTable(str(events)).to_pandas()
    counts = source.groupby(source["ts"].dt.date).size()
    daily = {row[0]: row[1] for row in table_rows(table_uri(settings.warehouse, "s.daily"))}
    assert {d: daily[d] for d in counts.index} == counts.to_dict()


def test_the_command_server_ends_with_the_spark_server(served):
    root, settings, pid = served
    stopped = run_cli(root, "spark", "stop")
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert _wait_gone(pid) and command_server.read_record(server.state_dir(settings)) is None
    assert not command_socket.socket_path(root).exists()
    served_before = len(served_lines(settings))
    own = run_cli(root, "status")  # runs in its own process now, with a local Spark where it needs one
    assert own.returncode == 0, own.stdout + own.stderr
    assert len(served_lines(settings)) == served_before
    # A server whose Spark server is killed (not stopped) goes too.
    again = run_cli(root, "spark", "start", "--no-warm-up")
    assert again.returncode == 0, again.stdout + again.stderr
    spark, commands = server.read_record(settings), command_server.read_record(server.state_dir(settings))
    assert spark and commands and int(commands["pid"]) != pid
    os.killpg(spark.pid, signal.SIGKILL)
    assert _wait_gone(int(commands["pid"]))
