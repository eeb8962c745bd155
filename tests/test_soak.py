"""Soak: the real ``dagster-daemon`` with the automation sensor and the project's long-lived Spark Connect
server keep a small project right for many simulated hours while faults are injected.

A Delta source gets one hour of rows every few seconds (an empty hour now and then, a late row for the hour
five hours back every 10th hour) and the sensor's clock (``INCREMENTAL_ASSETS_CLOCK=@FILE``) moves to the
hour's end. Along the way: a run of the daemon is killed (SIGKILL), a half-written parquet file lands in
the source's folder (a writer that died), the Spark server is killed and started again. Once the clock
stops, the daemon must settle with no failed interval left, no duplicate row, nothing lost, and every table
equal to a recompute with pandas. Then a commit file of the hourly table is deleted and the soak goes on:
the daemon must notice and recompute what it held.

The short variant (a dozen hours, ~10 minutes on 2 busy cores) runs with the suite and kills the Spark server
between runs; the long one kills it while a run uses it (that run waits on its Spark Connect client's retries,
~10 minutes, holding the run queue, before it fails). The long one is opt-in:
``pytest -m soak tests/test_soak.py`` or ``INCREMENTAL_ASSETS_SOAK_HOURS=N``. Every process (daemon, runs,
Spark server) is stopped by its PID, also when the soak fails.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import dagster as dg
import pytest
from deltalake import DeltaTable

from conftest import REPO
from helpers import automation_daemon, stop_session

sys.path.insert(0, str(REPO / "benchmarks"))

import year  # noqa: E402  (the benchmark's project, arrivals and recompute: one definition of each)

from incremental_assets.load.project import load_project  # noqa: E402
from incremental_assets.orchestration.decisions import AutomationCursor  # noqa: E402
from incremental_assets.orchestration.instance import ACTIVE_RUN_STATUSES, open_instance  # noqa: E402
from incremental_assets.orchestration.run_launcher import WORKER_PID_TAG  # noqa: E402
from incremental_assets.orchestration.sensors import evaluate  # noqa: E402
from incremental_assets.orchestration.translator import ModelTranslator  # noqa: E402
from incremental_assets.spark import connect_server as server  # noqa: E402

SHORT_HOURS = 12
SECONDS_PER_HOUR = float(os.environ.get("INCREMENTAL_ASSETS_SOAK_SECONDS_PER_HOUR", "4"))


@dataclass
class Soak:
    """What the soak saw: the verdicts after the first settle, the faults' evidence, and after the log fault."""

    hours: int
    root: Path
    status: list[dict] = field(default_factory=list)
    recompute: dict = field(default_factory=dict)
    failed_runs: list[str] = field(default_factory=list)
    killed_runs: list[str] = field(default_factory=list)
    forked_runs: int = 0  # runs the project's launcher started in the command server
    killed_forked: bool = False  # the run killed was one of them: the daemon's run monitoring failed it
    server_restarted: bool = False
    bad_file: Path | None = None
    deleted_commit: str | None = None
    status_after_log_fault: list[dict] = field(default_factory=list)
    recorded: dict = field(
        default_factory=dict
    )  # per model, the partitions this process sees materialized, after each settle
    recompute_after_log_fault: dict = field(default_factory=dict)
    log: str = ""
    seconds: dict = field(default_factory=dict)  # wall time of each stage


def cli(root: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    env.pop("DAGSTER_HOME", None)
    return subprocess.run(
        [sys.executable, "-m", "incremental_assets.cli", *args, "--project", str(root)],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_processes(root: Path) -> list[int]:
    """The run workers of this project's daemon alive now: the copies of the project's command server that run
    them (the project's launcher while `spark start` keeps it), else the processes its code server starts
    (multiprocessing's ``spawn_main``; ``dagster api execute_run`` with other launchers)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                command = Path(f"/proc/{entry}/cmdline").read_bytes()
                if b"command_process" in command and str(root).encode() in command:
                    parent = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1]
                    if b"command_process" in Path(f"/proc/{parent}/cmdline").read_bytes():
                        found.append(int(entry))  # a forked copy, not the server itself
                elif (b"spawn_main" in command or b"execute_run" in command) and str(root).encode() in Path(
                    f"/proc/{entry}/environ"
                ).read_bytes():
                    found.append(int(entry))
    return found


def settle(project, instance, clock: datetime, daemon, log: Path, timeout: float = 900) -> None:
    """Until nothing is queued or running and a tick at ``clock`` would launch nothing, twice in a row."""
    quiet = 0
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert daemon.poll() is None, log.read_text()[-4000:]
        busy = instance.get_run_records(filters=dg.RunsFilter(statuses=ACTIVE_RUN_STATUSES), limit=1)
        decision = None if busy else evaluate(project, ModelTranslator(), instance, None, clock)
        quiet = quiet + 1 if decision is not None and not decision.requests and not decision.waiting else 0
        if quiet >= 3:
            return
        time.sleep(4)
    raise AssertionError("the daemon did not settle:\n" + log.read_text()[-4000:])


def status(root: Path, until: datetime) -> list[dict]:
    done = cli(root, "status", "--json", "--until", until.isoformat())
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return json.loads(done.stdout)


def recorded(project, instance) -> dict[str, list[str]]:
    """The partitions Dagster records as materialized per partitioned model, first and last and how many."""
    out = {}
    for model in project.ordered():
        keys = (
            sorted(instance.get_materialized_partitions(ModelTranslator().get_asset_key(model))) if model.start else []
        )
        out[model.name] = [keys[0], keys[-1], str(len(keys))] if keys else []
    return out


@contextlib.contextmanager
def spark_server(root: Path, settings):
    """The project's Spark Connect server, started by the CLI; stopped by its PID whatever happens."""
    started = cli(root, "spark", "start", "--no-warm-up")  # the warm-up has its own tests; the soak is long enough
    assert started.returncode == 0, started.stderr[-2000:]
    try:
        yield
    finally:
        record = server.read_record(settings)
        with contextlib.suppress(Exception):
            server.stop_server(settings, timeout=30)
        if record is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(record.pid, signal.SIGKILL)


def soak(root: Path, hours: int, *, mid_run: bool) -> Soak:
    """``mid_run``: the Spark server is killed while a run uses it (else between runs)."""
    root.mkdir(parents=True)
    year.make_project(root)
    events = root / "data" / "events"
    for i in range(24):  # day one: the history the daemon starts from
        year.append_rows(events, year.arrivals(i))
    project = load_project(root)
    settings = project.settings
    home = Path(settings.dagster_home)
    result = Soak(hours, root)
    clock_file = root / "clock.txt"
    log = root / "daemon.log"
    kill_at, bad_at, server_at = hours // 4, hours // 2, (3 * hours) // 4
    began = time.perf_counter()

    def stage(name: str) -> None:
        result.seconds[name] = round(time.perf_counter() - began - sum(result.seconds.values()), 1)

    with spark_server(root, settings):
        built = cli(root, "run", "--auto", "--end", (year.START + 24 * year.HOUR).isoformat())
        assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
        stage("server and day one")
        instance = open_instance(home)
        clock_file.write_text((year.START + 24 * year.HOUR).isoformat())
        cursor = AutomationCursor(sources={"raw.events": f"v{DeltaTable(str(events)).version()}"}).dump()
        with automation_daemon(root, home, f"@{clock_file}", log, cursor) as daemon:
            index = 24
            try:
                for n in range(hours):
                    year.append_rows(events, year.arrivals(index))
                    index += 1
                    clock_file.write_text((year.START + index * year.HOUR).isoformat())
                    if n == kill_at:  # a run of the daemon killed mid-way
                        # A worker that finished before the kill is missed: the next one is taken.
                        deadline = time.monotonic() + 180
                        while not result.killed_runs and time.monotonic() < deadline:
                            workers = run_processes(root)
                            if not workers:
                                time.sleep(0.1)
                                continue
                            time.sleep(0.4)  # into the run (a run of one hour takes about a second)
                            with contextlib.suppress(ProcessLookupError):
                                os.kill(workers[0], signal.SIGKILL)
                                result.killed_runs.append(str(workers[0]))
                    if n == bad_at:  # a writer died half-way through a data file of the source
                        whole = next(events.glob("*.parquet")).read_bytes()
                        result.bad_file = events / "part-00000-dead-writer-c000.snappy.parquet"
                        result.bad_file.write_bytes(whole[: len(whole) // 2])
                    if n == server_at:  # the Spark server dies; started again a little later
                        deadline = time.monotonic() + 300
                        started = dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED])
                        while (
                            bool(instance.get_run_records(filters=started, limit=1)) != mid_run
                            and time.monotonic() < deadline
                        ):
                            time.sleep(
                                0.2
                            )  # during a run, or between runs (a run in flight waits minutes on its client's retries)
                        record = server.read_record(settings)
                        if record is not None:  # None: the server is gone already; it is started again all the same
                            with contextlib.suppress(ProcessLookupError):
                                os.killpg(record.pid, signal.SIGKILL)
                        time.sleep(SECONDS_PER_HOUR)
                        again = cli(root, "spark", "start", "--no-warm-up")
                        assert again.returncode == 0, again.stderr[-2000:]
                        result.server_restarted = True
                    time.sleep(SECONDS_PER_HOUR)
                stage("hours with faults")
                now = year.START + index * year.HOUR
                settle(project, instance, now, daemon, log)
                stage("settle")
                result.status = status(root, now)
                result.recorded["settled"] = recorded(project, instance)
                result.recompute = year.recompute_matches(root, Path(settings.warehouse), now)
                runs = instance.get_run_records(
                    filters=dg.RunsFilter(tags={"incremental_assets/launched_by": "automation"})
                )
                result.failed_runs = [
                    r.dagster_run.run_id for r in runs if r.dagster_run.status != dg.DagsterRunStatus.SUCCESS
                ]
                result.forked_runs = sum(WORKER_PID_TAG in r.dagster_run.tags for r in runs)
                result.killed_forked = any(r.dagster_run.tags.get(WORKER_PID_TAG) in result.killed_runs for r in runs)

                # A commit file of the hourly table deleted: what it added is gone from the table.
                commits = sorted((Path(settings.warehouse) / "s" / "hourly" / "_delta_log").glob("*.json"))
                result.deleted_commit = commits[-1].name
                commits[-1].unlink()
                for _ in range(3):
                    year.append_rows(events, year.arrivals(index))
                    index += 1
                    clock_file.write_text((year.START + index * year.HOUR).isoformat())
                    time.sleep(SECONDS_PER_HOUR)
                now = year.START + index * year.HOUR
                settle(project, instance, now, daemon, log)
                time.sleep(30)  # a few more ticks: time to notice what is lost
                settle(project, instance, now, daemon, log)
                result.status_after_log_fault = status(root, now)
                result.recorded["after the log fault"] = recorded(project, instance)
                result.recompute_after_log_fault = year.recompute_matches(root, Path(settings.warehouse), now)
                stage("log fault and settle")
            finally:
                result.log = log.read_text()[-6000:] if log.exists() else ""
                stop_session(daemon)
    return result


def soak_hours(request) -> int:
    if request.param == "short":
        return SHORT_HOURS
    chosen = os.environ.get("INCREMENTAL_ASSETS_SOAK_HOURS")
    if not chosen and "soak" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("the long soak is opt-in: pytest -m soak, or INCREMENTAL_ASSETS_SOAK_HOURS=N")
    return int(chosen or 24 * 7)


@pytest.fixture(scope="module", params=["short", pytest.param("long", marks=pytest.mark.soak)])
def soaked(request, tmp_path_factory) -> Soak:
    hours = soak_hours(request)
    root = tmp_path_factory.mktemp(f"soak-{request.param}") / "project"
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("DAGSTER_HOME", raising=False)  # the project's own home, as its CLI commands and daemon use
        result = soak(root, hours, mid_run=request.param == "long")
    seen = {k: v for k, v in result.__dict__.items() if k != "log"}
    (root.parent / "soak.json").write_text(json.dumps(seen, indent=2, default=str))  # for a look after a failure
    return result


def _problems(report: list[dict], *fields: str) -> dict:
    return {m["model"]: {f: m[f] for f in fields if m[f]} for m in report if any(m[f] for f in fields)}


def test_no_failed_interval_is_left_unrecovered(soaked):
    assert soaked.killed_runs, "no run of the daemon was caught running to be killed"
    # The daemon's runs started in the command server `spark start` keeps, the killed one among them: the
    # run monitoring learnt from the project's launcher that its process was gone, and the retry recovered it.
    assert soaked.forked_runs > 0 and soaked.killed_forked
    assert _problems(soaked.status, "failed", "gaps", "stale") == {}, (soaked.recorded, soaked.log)


def test_nothing_is_lost_and_nothing_doubled(soaked):
    assert _problems(soaked.status, "lost", "integrity") == {}
    assert {name: r["duplicates"] for name, r in soaked.recompute.items()} == {
        "s.hourly": 0,
        "s.daily": 0,
        "s.total": 0,
    }


def test_every_table_equals_a_recompute(soaked):
    assert soaked.server_restarted and soaked.bad_file is not None and soaked.bad_file.exists()
    assert {name: r["equal"] for name, r in soaked.recompute.items()} == {
        "s.hourly": True,
        "s.daily": True,
        "s.total": True,
    }, soaked.recompute


def test_a_deleted_commit_file_is_noticed_and_recomputed_by_the_daemon(soaked):
    assert soaked.deleted_commit is not None
    assert _problems(soaked.status_after_log_fault, "lost", "failed", "gaps") == {}, (soaked.recorded, soaked.log)
    assert {name: r["equal"] for name, r in soaked.recompute_after_log_fault.items()} == {
        "s.hourly": True,
        "s.daily": True,
        "s.total": True,
    }, soaked.recompute_after_log_fault
