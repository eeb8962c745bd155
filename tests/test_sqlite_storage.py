"""The project's instance opens Dagster's own SQLite databases (runs, schedules, event log index, each run's
log) without reading Dagster's schema scripts when they are set up, and creates new ones exactly as
Dagster's default storage does: same files, same tables and indexes, same schema revision. An instance
written by Dagster's default storage keeps its history. Real Dagster instances, no Spark."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import dagster as dg
import pytest
from alembic.script import ScriptDirectory
from dagster._core.remote_origin import GrpcServerCodeLocationOrigin, RemoteInstigatorOrigin, RemoteRepositoryOrigin
from dagster._core.scheduler.instigation import InstigatorState, InstigatorStatus, InstigatorType
from dagster._core.storage.sql import get_alembic_config
from test_event_log import counted, run_range

from incremental_assets.orchestration import sqlite_storage
from incremental_assets.orchestration.event_log import BATCH_SIZE_ENV, BatchedSqliteEventLogStorage
from incremental_assets.orchestration.instance import LEGACY_DAGSTER_YAMLS, open_instance
from incremental_assets.orchestration.sqlite_storage import ProjectSqliteRunStorage, ProjectSqliteScheduleStorage

DATABASES = ("history/runs.db", "schedules/schedules.db", "history/runs/index.db")


@pytest.fixture(autouse=True)
def batch_env(monkeypatch):
    monkeypatch.setenv(BATCH_SIZE_ENV, "0")
    monkeypatch.delenv(BATCH_SIZE_ENV)


def schema(path) -> tuple:
    """A SQLite database's tables and indexes (their SQL), journal mode and schema revision."""
    with sqlite3.connect(path) as con:
        objects = sorted(con.execute("SELECT type, name, tbl_name, sql FROM sqlite_master"), key=repr)
        return (
            objects,
            con.execute("PRAGMA journal_mode").fetchall(),
            con.execute("SELECT * FROM alembic_version").fetchall(),
        )


def dagster_default_home(path, monkeypatch):
    """An instance folder as Dagster's default storage (an earlier version's dagster.yaml) writes it."""
    path.mkdir()
    (path / "dagster.yaml").write_text(LEGACY_DAGSTER_YAMLS[0])
    monkeypatch.setenv("DAGSTER_HOME", str(path))
    return dg.DagsterInstance.from_config(str(path))


def instigator(name: str) -> InstigatorState:
    origin = RemoteRepositoryOrigin(GrpcServerCodeLocationOrigin(host="localhost", port=1, location_name="loc"), "repo")
    return InstigatorState(RemoteInstigatorOrigin(origin, name), InstigatorType.SENSOR, InstigatorStatus.RUNNING)


def test_new_databases_are_what_dagsters_default_storage_creates(tmp_path, monkeypatch):
    theirs = dagster_default_home(tmp_path / "theirs", monkeypatch)
    theirs_run = run_range(theirs, 0, 3)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "ours"))
    ours = open_instance(tmp_path / "ours")
    assert isinstance(ours.run_storage, ProjectSqliteRunStorage) and isinstance(
        ours.schedule_storage, ProjectSqliteScheduleStorage
    )
    assert isinstance(ours.event_log_storage, BatchedSqliteEventLogStorage)
    ours_run = run_range(ours, 0, 3)
    for rel in DATABASES:
        assert schema(tmp_path / "ours" / rel) == schema(tmp_path / "theirs" / rel), rel
    # A run's own event log database: created and stamped without Dagster's set-up, the same schema.
    assert schema(tmp_path / "ours" / "history" / "runs" / f"{ours_run}.db") == schema(
        tmp_path / "theirs" / "history" / "runs" / f"{theirs_run}.db"
    )
    head = sqlite_storage.migration_scripts().get_current_head()
    assert schema(tmp_path / "ours" / "history" / "runs.db")[2] == [(head,)]
    assert (
        head
        == ScriptDirectory.from_config(
            get_alembic_config(sqlite_storage.sqlite_run_storage.__file__)
        ).get_current_head()
    )


def test_an_instance_written_by_dagsters_default_storage_keeps_its_history(tmp_path, monkeypatch):
    home = tmp_path / "home"
    before = dagster_default_home(home, monkeypatch)
    first = run_range(before, 0, 9)
    before.schedule_storage.add_instigator_state(instigator("new_data"))
    before.dispose()

    instance = open_instance(home)  # the product's dagster.yaml replaces the earlier one; same databases
    assert isinstance(instance.run_storage, ProjectSqliteRunStorage)
    assert instance.get_run_by_id(first) is not None
    assert [s.instigator_name for s in instance.schedule_storage.all_instigator_state()] == ["new_data"]
    second = run_range(instance, 10, 19)
    assert len(instance.get_run_records()) == 2 and instance.get_run_by_id(second).is_success
    instance.dispose()
    # and back: Dagster's default storage reads what the project's instance wrote
    (home / "dagster.yaml").write_text(LEGACY_DAGSTER_YAMLS[0])
    again = dg.DagsterInstance.from_config(str(home))
    assert again.get_run_by_id(second).is_success and len(again.get_run_records()) == 2


def test_a_database_without_a_schema_revision_is_left_to_dagsters_set_up(tmp_path, monkeypatch):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    open_instance(tmp_path / "home").dispose()
    runs_db = tmp_path / "home" / "history" / "runs.db"
    conn_string = f"sqlite:///{runs_db}"
    assert sqlite_storage.is_set_up(conn_string, "runs", "instance_info")
    assert not sqlite_storage.is_set_up(conn_string, "no_such_table")
    assert not sqlite_storage.is_set_up(f"sqlite:///{tmp_path / 'absent.db'}")
    with sqlite3.connect(runs_db) as con:  # as SQLAlchemy 2.0 left databases before Dagster stamped them
        con.execute("DROP TABLE alembic_version")
    assert not sqlite_storage.is_set_up(conn_string, "runs")
    instance = open_instance(tmp_path / "home")  # Dagster's own set-up stamps it again
    assert sqlite_storage.is_set_up(conn_string, "runs", "instance_info")
    assert instance.get_run_records() == []


def test_opening_a_set_up_instance_and_running_reads_no_schema_scripts(tmp_path, monkeypatch):
    from dagster._core.storage.event_log.sqlite import sqlite_event_log
    from dagster._core.storage.runs.sqlite import sqlite_run_storage
    from dagster._core.storage.schedules.sqlite import sqlite_schedule_storage

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    run_range(open_instance(tmp_path / "home"), 0, 1)  # creates every database
    checks = []
    for module in (sqlite_event_log, sqlite_run_storage, sqlite_schedule_storage):
        original = module.check_alembic_revision
        monkeypatch.setattr(module, "check_alembic_revision", lambda *a, _o=original: checks.append(1) or _o(*a))
    sqlite_storage.migration_scripts.cache_clear()
    instance = open_instance(tmp_path / "home")
    run_id = run_range(instance, 2, 3)  # a new run: its event log database is a copy of the instance's empty one
    assert checks == [] and sqlite_storage.migration_scripts.cache_info().misses == 0
    assert instance.get_run_by_id(run_id).is_success and len(instance.get_materialized_partitions(counted.key)) == 4


OPEN_WHEN_TOLD = """
import os, sys, time
from incremental_assets.orchestration.instance import open_instance
home, flags = sys.argv[1], sys.argv[2]
open(os.path.join(flags, f"ready-{os.getpid()}"), "w").close()
while not os.path.exists(os.path.join(flags, "go")):
    time.sleep(0.005)
open_instance(home).get_run_records(limit=1)
"""


@pytest.mark.parametrize("round_", [1, 2])
def test_processes_opening_a_new_instance_at_once_leave_it_usable(tmp_path, monkeypatch, round_):
    """Eight commands starting together on a new instance folder (the CLI, the UI and the daemon do): one
    sets each database up, the others wait for it; every database carries one schema revision and the
    instance records runs afterwards."""
    import os
    import subprocess
    import sys
    import time

    home, flags = tmp_path / "home", tmp_path / "flags"
    flags.mkdir()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1]), os.environ.get("PYTHONPATH", "")]),
    }
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", OPEN_WHEN_TOLD, str(home), str(flags)], env=env, stderr=subprocess.PIPE, text=True
        )
        for _ in range(8)
    ]
    try:
        deadline = time.monotonic() + 120
        while (
            len(list(flags.glob("ready-*"))) < len(procs)
            and time.monotonic() < deadline
            and all(p.poll() is None for p in procs)
        ):
            time.sleep(0.05)
        (flags / "go").touch()
        errors = [p.communicate(timeout=120)[1] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert [p.returncode for p in procs] == [0] * 8, [e.strip().splitlines()[-1:] for e in errors if e.strip()]
    for database in DATABASES:
        with sqlite3.connect(home / database) as con:
            assert len(con.execute("SELECT * FROM alembic_version").fetchall()) == 1, database
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    run_id = run_range(open_instance(home), 0, 1)
    assert open_instance(home).get_run_by_id(run_id).is_success


def test_a_run_opens_each_database_once_and_watchers_still_see_its_events(tmp_path, monkeypatch):
    """A process keeps its connections to the index, the run storage, the schedule storage and each run's
    own database; a write to a run's database touches its file, so Dagster's live view of a run (a watch on
    that file) sees every event as it is written, and a read does not (the watch reads on each touch)."""
    import os
    import threading

    import sqlalchemy

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    instance = open_instance(tmp_path / "home")
    run_range(instance, 0, 1)
    opened: list[str] = []
    original = sqlalchemy.create_engine

    def counting(url, *args, **kwargs):
        opened.append(Path(str(url)).name)
        return original(url, *args, **kwargs)

    from dagster._core.storage.event_log.sqlite import sqlite_event_log
    from dagster._core.storage.runs.sqlite import sqlite_run_storage

    for module in (sqlite_storage.db, sqlite_event_log, sqlite_run_storage):
        monkeypatch.setattr(module, "create_engine", counting)
    run_id = run_range(instance, 2, 5)
    assert sorted(opened) == [f"{run_id}.db"], opened  # the new run's database, once
    runs = tmp_path / "home" / "history" / "runs"
    with sqlite3.connect(runs / "index.db") as con:
        assert con.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    with sqlite_storage.pooled_engine(f"sqlite:///{runs / 'index.db'}").connect() as c:
        # NORMAL: commits wait for the disk at checkpoints only
        assert c.exec_driver_sql("PRAGMA synchronous").fetchone() == (1,)
    touched = os.stat(runs / f"{run_id}.db").st_mtime_ns
    assert len(instance.all_logs(run_id)) > 10 and os.stat(runs / f"{run_id}.db").st_mtime_ns == touched

    # A watch on a run (what the UI's live log uses) is told of events written after it started watching.
    seen: list[str] = []
    arrived = threading.Event()
    storage = instance.event_log_storage
    new_run = instance.create_run_for_job(dg.Definitions(assets=[counted]).resolve_implicit_global_asset_job_def())
    storage.watch(new_run.run_id, None, lambda event, cursor: seen.append(event.message) or arrived.set())
    try:
        instance.report_engine_event("watched", new_run)
        assert arrived.wait(30), "the watch saw no event"
    finally:
        storage.end_watch(new_run.run_id, next(iter(storage._watchers[new_run.run_id]), None))
    assert "watched" in seen


def test_a_pooled_database_replaced_or_deleted_is_opened_anew(tmp_path):
    path = tmp_path / "x.db"

    def database(value: int) -> None:
        partial = tmp_path / "partial.db"
        with sqlite3.connect(partial) as con:
            con.execute("PRAGMA journal_mode=WAL")
            con.execute("CREATE TABLE t (v INTEGER)")
            con.execute("INSERT INTO t VALUES (?)", (value,))
        con.close()
        partial.replace(path)

    def value() -> list:
        with sqlite_storage.pooled_engine(f"sqlite:///{path}").connect() as conn:
            return [row[0] for row in conn.exec_driver_sql("SELECT v FROM t")]

    database(1)
    first = sqlite_storage.pooled_engine(f"sqlite:///{path}")
    assert value() == [1] and sqlite_storage.pooled_engine(f"sqlite:///{path}") is first
    database(2)  # another file at the path: the open connection would still read the old one
    assert value() == [2] and sqlite_storage.pooled_engine(f"sqlite:///{path}") is not first
    path.unlink()
    with pytest.raises(Exception, match="no such table"):
        value()
