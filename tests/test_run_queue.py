"""A queue, not a stampede: the project's Dagster instance queues runs with a limit that fits the machine,
and writers of one table are serialised by Dagster's pools (waiting shows as queued or blocked, never as
retries). Real DagsterInstance, real CLI runs, and the real ``dagster-daemon`` for queued runs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import dagster as dg
import pytest

from incremental_assets import cli
from incremental_assets.load.project import load_project
from incremental_assets.load.settings import default_max_concurrent_runs, default_runs_on_server, load_settings
from incremental_assets.orchestration.build_definitions import build_definitions
from incremental_assets.orchestration.instance import (
    LEGACY_DAGSTER_YAMLS,
    dagster_yaml,
    ensure_instance_config,
    instance_config_owner,
    open_instance,
    register_table_pools,
    table_pool,
)
from incremental_assets.orchestration.run_coordinator import OWN_SPARK, SPARK_TAG, ProjectRunCoordinator
from incremental_assets.orchestration.runner import Runner
from incremental_assets.orchestration.tags import AFTER_UPSTREAM_TAG

from conftest import REPO
from helpers import EVENTS_SOURCE, utc, write_events

MODELS = {
    "models/total.sql": """
        MODEL (name s.total, kind FULL, cron '@daily');
        SELECT COUNT(*) AS n, SUM(v) AS v FROM raw.events
    """,
    "models/daily.sql": """
        MODEL (name s.daily, kind INCREMENTAL_BY_TIME_RANGE (time_column ds), start '2024-01-01');
        SELECT CAST(ts AS DATE) AS ds, COUNT(*) AS n FROM raw.events WHERE ts BETWEEN @start_dt AND @end_dt GROUP BY 1
    """,
}


@pytest.fixture
def project_dir(make_project, tmp_path, monkeypatch):
    root = make_project({"sources.yaml": EVENTS_SOURCE, **MODELS})
    write_events(root / "data" / "events", utc(2024, 1, 1), 24 * 3)
    for name in ("DAGSTER_HOME", "INCREMENTAL_ASSETS_MAX_CONCURRENT_RUNS"):
        monkeypatch.delenv(name, raising=False)
    return root


def concurrency(instance: dg.DagsterInstance):
    """Runs at once that do work, runs at once that start their own Spark, each pool's limit, the pools'
    granularity. Runs that wait for upstream runs queued with them have as many slots again of their own."""
    config = instance.get_concurrency_config()
    queue = config.run_queue_config

    def limit_of(key: str, value: str) -> list[int]:
        return [t["limit"] for t in queue.tag_concurrency_limits if t["key"] == key and t["value"] == value]

    working = limit_of(AFTER_UPSTREAM_TAG, "false")
    assert working and limit_of(AFTER_UPSTREAM_TAG, "true") == working
    return (
        *working,
        *limit_of(SPARK_TAG, OWN_SPARK),
        config.pool_config.default_pool_limit,
        config.pool_config.pool_granularity.value,
    )


# -- the instance: a queue with the configured limit --------------------------------------------------


def test_default_limit_fits_the_machine():
    assert default_max_concurrent_runs("local[2]", cores=2) == 1  # this machine: one Spark run at a time
    assert default_max_concurrent_runs("local[2]", cores=8) == 4
    assert default_max_concurrent_runs("local[*]", cores=8) == 1
    assert default_max_concurrent_runs("local[4]", cores=2) == 1  # never 0
    assert default_max_concurrent_runs("spark://h:7077", cores=8) == 4
    # With the long-lived Spark up a run starts no JVM: one per core, at least two.
    assert [default_runs_on_server(cores) for cores in (1, 2, 8)] == [2, 2, 8]


def test_instance_queues_runs_with_the_configured_limit(project_dir, monkeypatch):
    settings = load_settings(project_dir)
    assert settings.max_concurrent_runs == default_max_concurrent_runs("local[2]")
    assert settings.max_concurrent_runs_on_server == default_runs_on_server()
    instance = open_instance(
        settings.dagster_home, settings.max_concurrent_runs, settings.max_concurrent_runs_on_server
    )
    assert isinstance(instance.run_coordinator, ProjectRunCoordinator)
    # A queued run starts within a second of a slot freeing: automation chains wait less.
    assert instance.run_coordinator.dequeue_interval_seconds == 1
    # Runs that start their own Spark: the limit; all runs that do work (those on the long-lived Spark): the
    # larger one.
    both = max(settings.max_concurrent_runs, settings.max_concurrent_runs_on_server)
    assert concurrency(instance) == (both, settings.max_concurrent_runs, 1, "op")
    queue = instance.get_concurrency_config().run_queue_config
    assert queue.max_concurrent_runs == 2 * both  # as many again for runs waiting for upstream runs
    # Slots of a run that ended without freeing them (killed worker) are freed by the daemon.
    assert instance.run_monitoring_enabled and instance.run_monitoring_settings["free_slots_after_run_end_seconds"] > 0

    # The settings file sets it; the environment overrides the file.
    (project_dir / "incremental_assets.yaml").write_text("max_concurrent_runs: 3\nmax_concurrent_runs_on_server: 5\n")
    assert (
        load_settings(project_dir).max_concurrent_runs,
        load_settings(project_dir).max_concurrent_runs_on_server,
    ) == (3, 5)
    monkeypatch.setenv("INCREMENTAL_ASSETS_MAX_CONCURRENT_RUNS", "2")
    monkeypatch.setenv("INCREMENTAL_ASSETS_MAX_CONCURRENT_RUNS_ON_SERVER", "4")
    settings = load_settings(project_dir)
    assert (settings.max_concurrent_runs, settings.max_concurrent_runs_on_server) == (2, 4)
    # Through the CLI (every command that opens the instance keeps its dagster.yaml in step).
    assert cli.main(["status", "--project", str(project_dir)]) == 0
    instance = dg.DagsterInstance.from_config(str(settings.dagster_home))
    assert isinstance(instance.run_coordinator, ProjectRunCoordinator)
    assert concurrency(instance) == (4, 2, 1, "op")
    # Fewer on the server than without it: the larger limit holds for all runs.
    monkeypatch.setenv("INCREMENTAL_ASSETS_MAX_CONCURRENT_RUNS_ON_SERVER", "1")
    assert cli.main(["status", "--project", str(project_dir)]) == 0
    assert concurrency(dg.DagsterInstance.from_config(str(settings.dagster_home))) == (2, 2, 1, "op")

    for variable in ("INCREMENTAL_ASSETS_MAX_CONCURRENT_RUNS", "INCREMENTAL_ASSETS_MAX_CONCURRENT_RUNS_ON_SERVER"):
        for bad in ("0", "-1", "two"):
            monkeypatch.setenv(variable, bad)
            with pytest.raises(Exception, match=f"{variable} must be a whole number"):
                load_settings(project_dir)
        monkeypatch.setenv(variable, "2")
    (project_dir / "incremental_assets.yaml").write_text("max_concurrent_runs_on_server: many\n")
    monkeypatch.delenv("INCREMENTAL_ASSETS_MAX_CONCURRENT_RUNS_ON_SERVER")
    with pytest.raises(Exception, match="max_concurrent_runs_on_server must be a whole number"):
        load_settings(project_dir)


def test_a_product_written_dagster_yaml_is_upgraded_an_edited_one_is_kept(tmp_path, capsys):
    # An older version's file (DefaultRunCoordinator, no queue) is recognised by its exact text.
    home = tmp_path / "old"
    home.mkdir()
    (home / "dagster.yaml").write_text(LEGACY_DAGSTER_YAMLS[0])
    instance = open_instance(home, 2)
    assert isinstance(instance.run_coordinator, ProjectRunCoordinator) and concurrency(instance)[1] == 2
    # Still the product's: a new limit rewrites it; the same limit leaves it untouched.
    assert ensure_instance_config(home, 3) == "updated" and "limit: 3" in (home / "dagster.yaml").read_text()
    assert ensure_instance_config(home, 3) == "current"

    # Edited in any way (here: a comment and another limit), the file is the user's: never rewritten.
    edited = (home / "dagster.yaml").read_text().replace("limit: 3", "limit: 5  # ours")
    (home / "dagster.yaml").write_text(edited)
    assert instance_config_owner(edited) == "user"
    instance = open_instance(home, 1)
    assert (home / "dagster.yaml").read_text() == edited and concurrency(instance)[1] == 5

    # A user's own file without a queue is kept too, with a note on how to get the queue.
    mine = "# mine\ntelemetry:\n  enabled: false\n"
    (home / "dagster.yaml").write_text(mine)
    capsys.readouterr()
    open_instance(home, 1)
    assert (home / "dagster.yaml").read_text() == mine
    assert "does not queue runs" in capsys.readouterr().err

    # The product's file is exactly what instance_config_owner recognises.
    assert instance_config_owner(dagster_yaml(4)) == "product"
    assert not list(home.glob(".dagster.yaml.*.tmp"))  # written via a temporary name, renamed into place


def test_deploy_dagster_yaml_queues_runs_and_limits_each_table_to_one_writer():
    import yaml

    config = yaml.safe_load((REPO / "deploy" / "dagster.yaml").read_text())
    assert config["run_coordinator"]["class"] == "QueuedRunCoordinator"
    assert config["concurrency"]["runs"]["max_concurrent_runs"] >= 1
    assert config["concurrency"]["pools"] == {"granularity": "op", "default_limit": 1}


def test_every_model_asset_is_in_its_table_pool(project_dir):
    project = load_project(project_dir)
    defs = build_definitions(project)
    for name in ("s.total", "s.daily"):
        assets_def = defs.resolve_assets_def(dg.AssetKey(name.split(".")))
        assert assets_def.op.pool == table_pool(name) == f"table/{name}"


# -- CLI runs: in process, same pool slots, still recorded -----------------------------------------


def test_a_cli_run_waits_for_its_table_and_is_recorded(project_dir):
    project = load_project(project_dir)
    instance = open_instance(project.settings.dagster_home, 2)
    runner = Runner(project, instance, build_definitions(project))
    model = project.model("s.total")
    pool = table_pool(model.name)
    storage = instance.event_log_storage
    assert storage.supports_global_concurrency_limits

    # Another writer holds the table's slot (as a daemon-launched run would).
    storage.initialize_concurrency_limit_to_default(pool)
    assert storage.claim_concurrency_slot(pool, "another-run", "s__total").is_claimed
    result: dict = {}
    thread = threading.Thread(target=lambda: result.update(record=runner.run_window(model, None)), daemon=True)
    began = time.time()
    thread.start()
    try:
        deadline = time.time() + 60
        blocked = []
        while time.time() < deadline and not blocked:
            time.sleep(0.5)
            runs = instance.get_runs(filters=dg.RunsFilter(tags={"incremental_assets/launched_by": "cli"}))
            blocked = [
                e
                for r in runs
                for e in instance.all_logs(r.run_id)
                if "blocked by limit for pool table/s.total" in (e.message or "")
            ]
        assert blocked, "the CLI run did not wait for the table's pool"
        time.sleep(3)
        assert thread.is_alive(), "the CLI run went ahead while another writer held the table"
        assert instance.get_latest_materialization_event(dg.AssetKey(["s", "total"])) is None
    finally:
        storage.free_concurrency_slots_for_run("another-run")
    thread.join(timeout=180)
    assert not thread.is_alive()
    record = result["record"]
    assert record.success, record.error
    waited = time.time() - began
    run = instance.get_run_by_id(record.run_id)
    assert run.status == dg.DagsterRunStatus.SUCCESS and run.tags["incremental_assets/launched_by"] == "cli"
    # The slot is released when the run ends, and the CLI's run is in the instance the UI reads.
    assert storage.get_concurrency_info(pool).active_slot_count == 0
    assert instance.get_latest_materialization_event(dg.AssetKey(["s", "total"])).run_id == record.run_id
    print(f"CLI run waited for the pool, then succeeded; {waited:.1f}s in all")


# -- queued runs with the real daemon -------------------------------------------------------------


def _stop(proc: subprocess.Popen) -> None:
    """Stop a dagster process we started, by its pid: SIGINT (it ignores SIGTERM in the background), then kill."""
    if proc.poll() is not None:
        return
    os.kill(proc.pid, signal.SIGINT)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def _step_span(instance: dg.DagsterInstance, run_id: str) -> tuple[float, float]:
    events = [e for e in instance.all_logs(run_id) if e.is_dagster_event]
    start = min(e.timestamp for e in events if e.dagster_event.event_type_value == "STEP_START")
    end = max(e.timestamp for e in events if e.dagster_event.event_type_value in ("STEP_SUCCESS", "STEP_FAILURE"))
    return start, end


@pytest.mark.slow
def test_two_queued_runs_of_one_table_never_overlap_with_the_real_daemon(project_dir, tmp_path):
    project = load_project(project_dir)
    home = project.settings.dagster_home
    # Room for two runs at once: only the table's pool may keep them apart.
    instance = open_instance(home, 2)
    # As the CLI does on its first use: the queue then knows the table's pool before any run claimed it.
    assert table_pool("s.total") in register_table_pools(instance, project)
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "INCREMENTAL_ASSETS_PROJECT": str(project_dir),
        "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
    }
    dagster = [sys.executable, "-m", "dagster"]
    # Two runs writing s.total, requested before the daemon is up: both wait in the queue.
    for n in (1, 2):
        subprocess.run(
            [
                *dagster,
                "job",
                "launch",
                "-m",
                "incremental_assets.definitions",
                "-j",
                "s__total_job",
                "--tags",
                json.dumps({"request": str(n)}),
            ],
            cwd=project_dir,
            env=env,
            check=True,
            capture_output=True,
            timeout=180,
        )
    runs = instance.get_runs(filters=dg.RunsFilter(job_name="s__total_job"))
    assert len(runs) == 2 and {r.status for r in runs} == {dg.DagsterRunStatus.QUEUED}

    log = open(tmp_path / "daemon.log", "w")
    daemon = subprocess.Popen(
        [str(Path(sys.executable).parent / "dagster-daemon"), "run", "-m", "incremental_assets.definitions"],
        cwd=project_dir,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    seen: list[tuple[str, ...]] = []
    began = time.time()
    try:
        deadline = time.time() + 300
        while time.time() < deadline:
            statuses = tuple(
                sorted(r.status.value for r in instance.get_runs(filters=dg.RunsFilter(job_name="s__total_job")))
            )
            if not seen or seen[-1] != statuses:
                seen.append(statuses)
            if all(s in ("SUCCESS", "FAILURE", "CANCELED") for s in statuses):
                break
            assert daemon.poll() is None, (tmp_path / "daemon.log").read_text()[-3000:]
            time.sleep(0.5)
    finally:
        _stop(daemon)
        log.close()
    elapsed = time.time() - began
    runs = instance.get_runs(filters=dg.RunsFilter(job_name="s__total_job"))
    assert [r.status for r in runs] == [dg.DagsterRunStatus.SUCCESS] * 2, (
        seen,
        (tmp_path / "daemon.log").read_text()[-3000:],
    )

    # Queued without the long-lived Spark: each run starts its own, within max_concurrent_runs.
    assert {r.tags.get(SPARK_TAG) for r in runs} == {OWN_SPARK}
    assert {r.tags.get(AFTER_UPSTREAM_TAG) for r in runs} == {"false"}  # runs that do work (see concurrency())
    # The steps that wrote the table never overlapped.
    spans = sorted(_step_span(instance, r.run_id) for r in runs)
    assert spans[0][1] <= spans[1][0], spans
    # The second writer waited visibly: queued while the first ran, or its step blocked by the table's
    # pool; never a retry, never a failure with a stack trace.
    logs = {r.run_id: list(instance.all_logs(r.run_id)) for r in runs}
    kinds = {e.dagster_event.event_type_value for entries in logs.values() for e in entries if e.is_dagster_event}
    assert not kinds & {"STEP_UP_FOR_RETRY", "STEP_RESTARTED", "STEP_FAILURE", "RUN_FAILURE"}
    blocked = any(
        "blocked by limit for pool table/s.total" in (e.message or "") for entries in logs.values() for e in entries
    )
    queued_while_running = any("QUEUED" in s and ("STARTED" in s or "STARTING" in s) for s in seen)
    assert blocked or queued_while_running, seen
    print(
        f"statuses seen: {seen}; step spans "
        f"{[(round(a - began, 1), round(b - began, 1)) for a, b in spans]}; {elapsed:.0f}s"
    )


def test_a_run_that_waits_for_upstream_runs_starts_its_spark_behind_theirs():
    """A follower's process (and the JVM it starts) runs at a lower CPU priority once its step begins."""
    code = textwrap.dedent(
        """
        import os, subprocess
        from incremental_assets.orchestration.resource import FOLLOWER_NICENESS, _behind_the_runs_it_follows
        _behind_the_runs_it_follows()
        _behind_the_runs_it_follows()  # once per process, however many of its steps begin
        child = subprocess.run(["sh", "-c", "cut -d' ' -f19 /proc/self/stat"], capture_output=True, text=True)
        print(os.getpriority(os.PRIO_PROCESS, 0), child.stdout.strip(), FOLLOWER_NICENESS)
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    own, child, wanted = done.stdout.split()
    assert own == child == wanted == "5"
