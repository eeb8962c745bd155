"""The project's event log writes a batch of Dagster events in one transaction, and records exactly what
Dagster's own SQLite event log records: the same events, partition status, asset records, tags and check
executions; all of a run's materializations or none when its process dies; each event once when a
batch write fails. Real Dagster instances, real Spark, real CLI processes killed with SIGKILL."""

from __future__ import annotations

import dataclasses
import re
import signal
import sqlite3

import dagster as dg
import pytest
from deltalake import DeltaTable
from test_crash import killed_run

from incremental_assets import cli, delta
from incremental_assets.errors import IncrementalAssetsError
from incremental_assets.model.intervals import TimeWindow
from incremental_assets.orchestration import event_log
from incremental_assets.orchestration.build_definitions import build_definitions
from incremental_assets.orchestration.event_log import BATCH_SIZE_ENV, BatchedSqliteEventLogStorage
from incremental_assets.orchestration.instance import MANAGED_MARK, dagster_yaml, open_instance
from incremental_assets.orchestration.runner import Runner
from incremental_assets.orchestration.status import model_status

from helpers import EVENTS_SOURCE, utc, write_events

HOURLY = """
    MODEL (name s.hourly, kind INCREMENTAL_BY_TIME_RANGE (time_column h), start '2024-01-01', cron '@hourly',
           audits (not_null(columns := [h, n])));
    SELECT date_trunc('HOUR', ts) AS h, COUNT(*) AS n FROM raw.events WHERE ts BETWEEN @start_dt AND @end_dt GROUP BY 1
"""
KEY = dg.AssetKey(["s", "hourly"])
HOURS = [f"2024-01-0{1 + h // 24}-{h % 24:02d}:00" for h in range(48)]


def dagsters_own_event_log(text: str) -> str:
    """The project's dagster.yaml without its event log storage: Dagster's default SQLite event log."""
    body = text.split("\n", 1)[1] if text.startswith(MANAGED_MARK) else text
    plain = re.sub(r"# Dagster's SQLite event log.*?env: DAGSTER_HOME\n", "", body, flags=re.S)
    assert "event_log_storage" not in plain and plain != body
    return plain


def marked(body: str) -> str:
    import hashlib

    return f"{MANAGED_MARK}{hashlib.sha256(body.encode()).hexdigest()[:16]}\n{body}"


@pytest.fixture
def batch_env(monkeypatch):
    """DAGSTER_EVENT_BATCH_SIZE unset for the test and restored after it (opening the project's
    instance sets it for the process)."""
    monkeypatch.setenv(BATCH_SIZE_ENV, "0")
    monkeypatch.delenv(BATCH_SIZE_ENV)


@pytest.fixture
def project(make_project, load_with_home, batch_env):
    root = make_project({"sources.yaml": EVENTS_SOURCE, "models/hourly.sql": HOURLY})
    write_events(root / "data" / "events", utc(2024, 1, 1), 72, per_hour=2)
    return load_with_home(root)


def index_contents(home) -> dict:
    """What the cross-run index holds, without ids, run ids and times (they differ between two runs)."""
    with sqlite3.connect(home / "history" / "runs" / "index.db") as con:
        return {
            "events": sorted(con.execute("SELECT dagster_event_type, asset_key, partition FROM event_logs"), key=repr),
            "tags": sorted(con.execute("SELECT asset_key, key, value FROM asset_event_tags"), key=repr),
            "checks": sorted(
                con.execute("SELECT asset_key, check_name, partition, execution_status FROM asset_check_executions"),
                key=repr,
            ),
            "asset_keys": sorted(
                con.execute(
                    "SELECT asset_key, last_run_id IS NOT NULL, last_materialization IS NOT NULL FROM asset_keys"
                ),
                key=repr,
            ),
        }


def run_log(instance, run_id) -> list[tuple]:
    return [
        (e.dagster_event_type.value, e.dagster_event.partition) for e in instance.all_logs(run_id) if e.is_dagster_event
    ]


def ranged_run(project, home, monkeypatch) -> tuple[dg.DagsterInstance, str, list[str]]:
    """The hourly model over two days (48 partitions) in one run; the asset events stored one at a time."""
    singles: list[str] = []
    original = event_log.SqliteEventLogStorage.store_event

    def store_event(self, event):
        if event.is_dagster_event and event.dagster_event.asset_key is not None:
            singles.append(event.dagster_event_type.value)
        return original(self, event)

    monkeypatch.setattr(event_log.SqliteEventLogStorage, "store_event", store_event)
    project = dataclasses.replace(
        project, settings=dataclasses.replace(project.settings, warehouse=str(home / "warehouse"))
    )
    instance = open_instance(home)
    runner = Runner(project, instance, build_definitions(project))
    report = runner.run([project.model("s.hourly")], start=utc(2024, 1, 1), end=utc(2024, 1, 3))
    assert report.success, [r.error for r in report.records]
    [record] = report.records
    return instance, record.run_id, singles


def test_a_ranged_run_records_what_dagsters_own_event_log_records_in_batches(project, tmp_path, monkeypatch, spark):
    own_home, home = tmp_path / "own", tmp_path / "home"
    own_home.mkdir()
    (own_home / "dagster.yaml").write_text(dagsters_own_event_log(dagster_yaml(1)))
    monkeypatch.setenv("DAGSTER_HOME", str(own_home))
    own, own_run, own_singles = ranged_run(project, own_home, monkeypatch)
    assert type(own.event_log_storage).__name__ == "SqliteEventLogStorage"
    assert own_singles.count("ASSET_MATERIALIZATION") == 48  # Dagster's default: every event on its own

    monkeypatch.setenv("DAGSTER_HOME", str(home))
    instance, run_id, singles = ranged_run(project, home, monkeypatch)
    assert isinstance(instance.event_log_storage, BatchedSqliteEventLogStorage)
    # Planned and materialized events of all 48 partitions reached the storage as batches.
    assert "ASSET_MATERIALIZATION" not in singles and "ASSET_MATERIALIZATION_PLANNED" not in singles

    record = instance.get_asset_records([KEY])[0]
    assert sorted(instance.get_materialized_partitions(KEY)) == HOURS == sorted(own.get_materialized_partitions(KEY))
    partitions_def = build_definitions(project).resolve_assets_def(KEY).partitions_def
    status = instance.get_status_by_partition(KEY, HOURS, partitions_def)
    assert set(status.values()) == {dg.AssetPartitionStatus.MATERIALIZED}
    assert status == own.get_status_by_partition(KEY, HOURS, partitions_def)
    # The asset record points at the last partition's materialization, as Dagster's own does.
    latest = instance.fetch_materializations(KEY, limit=1).records[0]
    entry = record.asset_entry
    assert entry.last_materialization_record.storage_id == latest.storage_id and latest.partition_key == HOURS[-1]
    assert entry.last_run_id == run_id
    assert own.get_asset_records([KEY])[0].asset_entry.last_materialization_record.partition_key == HOURS[-1]
    # Every index Dagster keeps holds the same rows; the run's own log holds the same events in order.
    assert index_contents(home) == index_contents(own_home)
    assert len(index_contents(home)["events"]) >= 96 and index_contents(home)["checks"]
    assert run_log(instance, run_id) == run_log(own, own_run)
    records = instance.get_records_for_run(run_id, limit=10_000).records
    assert len(run_log(instance, run_id)) == len({r.storage_id for r in records if r.event_log_entry.is_dagster_event})


def test_a_run_killed_while_recording_records_none_of_its_partitions_then_all(project, spark, capsys):
    root = project.directory
    uri = delta.table_uri(project.settings.warehouse, "s.hourly")
    instance = open_instance(project.settings.dagster_home)
    window = ["s.hourly", "--start", "2024-01-01", "--end", "2024-01-03"]

    # Killed before its commit: no partition is recorded, the window shows as failed.
    assert killed_run(root, window, kill_at="staged") == -signal.SIGKILL
    assert not delta.exists(uri) and instance.get_materialized_partitions(KEY) == set()

    # Killed half way through writing its 48 materializations: none of them is recorded, not some.
    assert killed_run(root, window, kill_at="recording") == -signal.SIGKILL
    assert DeltaTable(uri).version() == 0 and len(DeltaTable(uri).to_pyarrow_table()) == 48
    assert instance.get_materialized_partitions(KEY) == set()
    planned = instance.get_latest_planned_materialization_info(KEY, HOURS[-1])
    assert planned is not None  # the run's planned partitions were recorded when it started

    capsys.readouterr()
    assert cli.main(["status", "s.hourly", "--until", "2024-01-03", "--project", str(root)]) == 0
    assert "that Dagster has not recorded" in capsys.readouterr().out
    # The next run records the commit from the Delta log, all 48 partitions at once, nothing recomputed.
    assert cli.main(["run", "s.hourly", "--auto", "--end", "2024-01-03", "--project", str(root)]) == 0
    assert (
        "s.hourly: recorded 48 interval(s) in [2024-01-01, 2024-01-03) from Delta version 0" in capsys.readouterr().out
    )
    assert DeltaTable(uri).version() == 0
    assert sorted(instance.get_materialized_partitions(KEY)) == HOURS
    status = model_status(instance, project.model("s.hourly"), until=utc(2024, 1, 3), now=utc(2024, 1, 3))
    assert (
        status.covered == (TimeWindow(utc(2024, 1, 1), utc(2024, 1, 3)),)
        and status.gaps == ()
        and status.in_progress == ()
    )


HOURLY_ASSET = dg.HourlyPartitionsDefinition(start_date="2024-01-01-00:00")


@dg.asset(partitions_def=HOURLY_ASSET, backfill_policy=dg.BackfillPolicy.single_run())
def counted(context) -> dg.MaterializeResult:
    return dg.MaterializeResult(metadata={"partitions": len(context.partition_keys)})


def run_range(instance, first: int, last: int) -> str:
    job = dg.Definitions(assets=[counted]).resolve_implicit_global_asset_job_def()
    keys = HOURLY_ASSET.get_partition_keys(current_time=utc(2024, 2, 1))
    result = job.execute_in_process(
        instance=instance,
        tags={"dagster/asset_partition_range_start": keys[first], "dagster/asset_partition_range_end": keys[last]},
    )
    assert result.success
    return result.run_id


def test_a_failed_batch_write_stores_each_event_once(tmp_path, monkeypatch, batch_env):
    instance = open_instance(tmp_path / "home")
    failures = []
    original = BatchedSqliteEventLogStorage._store_asset_event_tags

    def fail_once(self, conn, events, ids):
        if not failures:
            failures.append(len(events))
            raise sqlite3.OperationalError("database is locked")
        return original(self, conn, events, ids)

    monkeypatch.setattr(BatchedSqliteEventLogStorage, "_store_asset_event_tags", fail_once)
    run_id = run_range(instance, 0, 23)
    assert failures == [24]  # the planned events' batch failed; Dagster stored them one by one instead
    kinds = [e.dagster_event_type.value for e in instance.all_logs(run_id) if e.is_dagster_event]
    assert kinds.count("ASSET_MATERIALIZATION_PLANNED") == 24 and kinds.count("ASSET_MATERIALIZATION") == 24
    planned = instance.get_event_records(
        dg.EventRecordsFilter(dg.DagsterEventType.ASSET_MATERIALIZATION_PLANNED, asset_key=counted.key)
    )
    assert len(planned) == 24 and len(instance.get_materialized_partitions(counted.key)) == 24


def test_materializations_without_a_run_are_recorded_as_one_batch(tmp_path, monkeypatch, batch_env):
    """What promote and reconcile record: a month of hourly partitions in one write of the event log,
    each partition materialized with its own metadata, the latest record the last one given."""
    from incremental_assets.orchestration.instance import report_materializations

    instance = open_instance(tmp_path / "home")
    batches = []
    original = BatchedSqliteEventLogStorage.store_event_batch
    monkeypatch.setattr(
        BatchedSqliteEventLogStorage,
        "store_event_batch",
        lambda self, events: (batches.append(len(events)), original(self, events)),
    )
    keys = [f"2024-01-{1 + h // 24:02d}-{h % 24:02d}:00" for h in range(744)]
    report_materializations(
        instance, [dg.AssetMaterialization(asset_key=KEY, partition=k, metadata={"n": i}) for i, k in enumerate(keys)]
    )
    assert batches == [744]
    assert instance.get_materialized_partitions(KEY) == set(keys)
    latest = instance.get_latest_materialization_event(KEY).asset_materialization
    assert latest.partition == keys[-1] and latest.metadata["n"].value == 743


def test_the_instance_keeps_its_history_when_its_dagster_yaml_gains_the_batched_event_log(
    tmp_path, monkeypatch, batch_env
):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    (home / "dagster.yaml").write_text(marked(dagsters_own_event_log(dagster_yaml(1))))  # what earlier versions wrote
    before = dg.DagsterInstance.from_config(str(home))
    first = run_range(before, 0, 9)
    before.dispose()

    instance = open_instance(home, 1)  # upgrades the product's file in place
    assert (home / "dagster.yaml").read_text() == dagster_yaml(1)
    assert isinstance(instance.event_log_storage, BatchedSqliteEventLogStorage)
    assert instance.get_run_by_id(first) is not None and len(instance.get_materialized_partitions(counted.key)) == 10
    run_range(instance, 10, 19)
    assert len(instance.get_materialized_partitions(counted.key)) == 20
    assert int(__import__("os").environ[BATCH_SIZE_ENV]) > 0


def test_an_instance_opened_with_another_dagster_home_is_refused(tmp_path, monkeypatch, batch_env):
    open_instance(tmp_path / "a")
    open_instance(tmp_path / "b")
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "a"))
    with pytest.raises(IncrementalAssetsError, match=f"set DAGSTER_HOME={tmp_path / 'b'}"):
        dg.DagsterInstance.from_config(str(tmp_path / "b"))


def postgres_contents(server, database: str) -> dict:
    conn = server.connect(database)
    try:
        with conn.cursor() as cur:
            out = {}
            for name, sql in (
                (
                    "events",
                    "SELECT dagster_event_type, asset_key, partition FROM event_logs WHERE asset_key IS NOT NULL",
                ),
                # values: data versions from run ids (the asset has no code version)
                ("tags", "SELECT asset_key, key FROM asset_event_tags"),
                (
                    "asset_keys",
                    "SELECT asset_key, last_run_id IS NOT NULL, last_materialization IS NOT NULL FROM asset_keys",
                ),
            ):
                cur.execute(sql)
                out[name] = sorted(cur.fetchall(), key=repr)
            return out
    finally:
        conn.close()


@pytest.mark.cluster
def test_the_batched_postgres_event_log_records_what_dagster_postgres_records(tmp_path, monkeypatch, batch_env):
    import sys

    from conftest import REPO

    sys.path.insert(0, str(REPO / "benchmarks"))
    from bookkeeping import postgres_home
    from cluster.services import postgres_server, postgres_unavailable_reason

    if postgres_unavailable_reason():
        pytest.skip(postgres_unavailable_reason())
    from incremental_assets.orchestration.event_log_postgres import BatchedPostgresEventLogStorage

    with postgres_server() as server:
        runs = {}
        for name in ("dagster-postgres", "ours"):
            home = postgres_home(server, tmp_path / name, name.replace("-", "_"), name)
            monkeypatch.setenv("DAGSTER_HOME", str(home))
            with dg.DagsterInstance.from_config(str(home)) as instance:
                assert isinstance(instance.event_log_storage, BatchedPostgresEventLogStorage) == (name == "ours")
                run_id = run_range(instance, 0, 47)
                status = instance.get_status_by_partition(counted.key, HOURS, HOURLY_ASSET)
                record = instance.get_asset_records([counted.key])[0].asset_entry
                latest = instance.fetch_materializations(counted.key, limit=1).records[0]
                runs[name] = (
                    sorted(instance.get_materialized_partitions(counted.key)),
                    status,
                    record.last_materialization_record.storage_id == latest.storage_id,
                    latest.partition_key,
                    record.last_run_id == run_id,
                    postgres_contents(server, name.replace("-", "_")),
                )
        assert runs["ours"] == runs["dagster-postgres"]
        partitions, status, latest_is_last, last_key, *_ = runs["ours"]
        assert partitions == HOURS and set(status.values()) == {dg.AssetPartitionStatus.MATERIALIZED}
        assert latest_is_last and last_key == HOURS[-1]


def test_a_new_runs_database_is_a_copy_of_one_set_up_as_dagster_sets_it_up(tmp_path, batch_env):
    """Each run's database is copied from an empty one made once per instance: the same tables, indexes,
    schema revision and journal mode as Dagster's own set-up of a run's database; each run's events in it."""
    from dagster._core.storage.event_log.sqlite.sqlite_event_log import SqliteEventLogStorage

    instance = open_instance(tmp_path / "home")
    runs = [run_range(instance, 0, 1), run_range(instance, 2, 3)]
    template = tmp_path / "home" / "history" / event_log.TEMPLATE_NAME
    assert template.exists()
    dagsters = SqliteEventLogStorage(str(tmp_path / "plain"))
    with dagsters.run_connection("r"):  # Dagster's own set-up of a run's database
        pass

    def layout(path) -> tuple:
        with sqlite3.connect(path) as conn:
            return (
                sorted(conn.execute("SELECT type, name, sql FROM sqlite_master")),
                conn.execute("SELECT version_num FROM alembic_version").fetchall(),
                conn.execute("PRAGMA journal_mode").fetchall(),
            )

    expected = layout(tmp_path / "plain" / "r.db")
    for run_id in runs:
        assert layout(tmp_path / "home" / "history" / "runs" / f"{run_id}.db") == expected
        kinds = [e.dagster_event_type.value for e in instance.all_logs(run_id) if e.is_dagster_event]
        assert kinds.count("ASSET_MATERIALIZATION") == 2 and kinds[-1] == "PIPELINE_SUCCESS"
    assert sorted(p.name for p in (tmp_path / "home" / "history" / "runs").iterdir() if p.suffix == ".db") == sorted(
        [*(f"{r}.db" for r in runs), "index.db"]
    )
