"""Concurrent writers of one table: no lost update, no duplicate rows; a blocked writer waits, then
replaces, or fails naming the holder. delta-rs alone cannot arbitrate the first write of a window."""

from __future__ import annotations

import json
import os
import threading
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from deltalake.transaction import AddAction

from incremental_assets import delta
from incremental_assets.errors import StorageError
from incremental_assets.spark.executor import Executor
from incremental_assets.plan.run_plan import plan_run
from incremental_assets.load.project import load_project
from incremental_assets.model.intervals import IntervalUnit, TimeWindow, to_utc

from helpers import EVENTS_SOURCE, table_rows, utc, write_events

SCHEMA = pa.schema([("k", pa.string()), ("v", pa.int64())])
DAY = "2024-01-01"


def stage(uri: str, tag: str, days: list[str], rows: int = 3) -> str:
    """A staging folder as Spark leaves it: one parquet file per interval partition."""
    staging = delta.new_staging_dir(uri)
    for day in days:
        folder = Path(staging) / f"{delta.PARTITION_COLUMN}={day}"
        folder.mkdir(parents=True)
        pq.write_table(pa.table({"k": [tag] * rows, "v": list(range(rows))}, schema=SCHEMA), folder / "part-0.parquet")
    return staging


def window(day: str, days: int = 1) -> TimeWindow:
    start = to_utc(day)
    return TimeWindow(start, start + timedelta(days=days))


def commit(uri: str, staging: str, day: str, days: int = 1) -> delta.CommitResult:
    return delta.commit_staged(uri, staging, SCHEMA, delta.ReplaceWindow(window(day, days), IntervalUnit.DAY), metadata={"model": "t.x"})


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


def test_delta_rs_alone_lets_two_first_writes_of_a_window_both_land(tmp_path):
    """Why the guard exists: two writers that read the table before either commits, and find the
    window empty, both commit (optimistic concurrency sees no conflict): every row twice."""
    uri = str(tmp_path / "t")
    commit(uri, stage(uri, "seed", ["2023-12-31"]), "2023-12-31")
    a, b = stage(uri, "a", [DAY]), stage(uri, "b", [DAY])
    snapshots = [DeltaTable(uri), DeltaTable(uri)]
    for table, staging in zip(snapshots, (a, b)):
        path = next(Path(staging).rglob("*.parquet"))
        rel = str(path.relative_to(uri))
        action = AddAction(rel, path.stat().st_size, {delta.PARTITION_COLUMN: DAY}, 0, True, json.dumps({"numRecords": 3}))
        table.create_write_transaction([action], mode="overwrite", schema=table.schema(), partition_by=[delta.PARTITION_COLUMN],
                                       partition_filters=[(delta.PARTITION_COLUMN, "=", DAY)])
    assert len([r for r in table_rows(uri) if r[0] in ("a", "b")]) == 6  # 3 rows, twice


@pytest.mark.parametrize("round_", range(5))
def test_two_writers_of_the_same_window_at_once_leave_one_whole_result(tmp_path, round_):
    uri = str(tmp_path / "t")
    if round_ % 2:  # half the rounds on an existing table, half racing to create it
        commit(uri, stage(uri, "old", [DAY]), DAY)
    a, b = stage(uri, "a", [DAY]), stage(uri, "b", [DAY])
    results = all_at_once(lambda: commit(uri, a, DAY), lambda: commit(uri, b, DAY))
    assert all(isinstance(r, delta.CommitResult) for r in results), results  # the later one waited, then replaced
    rows = table_rows(uri)
    assert rows in ([("a", 0, ), ("a", 1), ("a", 2)], [("b", 0), ("b", 1), ("b", 2)])
    assert sorted(r.version for r in results) == [round_ % 2, round_ % 2 + 1]


def test_two_writers_of_different_windows_at_once_both_land(tmp_path):
    uri = str(tmp_path / "t")
    commit(uri, stage(uri, "old", ["2023-12-31"]), "2023-12-31")
    jobs = [lambda d=d, s=stage(uri, d, [d]): commit(uri, s, d) for d in ("2024-01-01", "2024-01-02", "2024-01-03", "2024-01-04")]
    results = all_at_once(*jobs)
    assert all(isinstance(r, delta.CommitResult) for r in results), results
    keys = {r[0] for r in table_rows(uri)}
    assert keys == {"old", "2024-01-01", "2024-01-02", "2024-01-03", "2024-01-04"}
    assert len(table_rows(uri)) == 15


def test_a_held_lock_makes_a_writer_wait_then_fail_naming_the_holder(tmp_path, monkeypatch):
    uri = str(tmp_path / "t")
    commit(uri, stage(uri, "old", [DAY]), DAY)
    monkeypatch.setenv(delta.LOCK_TIMEOUT_ENV, "0.3")
    with delta.writer_lock(uri, owner="run 1234 of t.x"):
        with pytest.raises(StorageError, match=r"being written by run 1234 of t.x \(pid \d+ on .*waited 0s.*INCREMENTAL_ASSETS_LOCK_TIMEOUT"):
            commit(uri, stage(uri, "new", [DAY]), DAY)
    assert {r[0] for r in table_rows(uri)} == {"old"}
    commit(uri, stage(uri, "new", [DAY]), DAY)  # released: the next writer proceeds
    assert {r[0] for r in table_rows(uri)} == {"new"}


def test_a_lock_left_by_a_killed_process_is_taken_over(tmp_path):
    uri = str(tmp_path / "t")
    commit(uri, stage(uri, "old", [DAY]), DAY)
    dead = os.fork()
    if dead == 0:
        os._exit(0)
    os.waitpid(dead, 0)  # a pid that is certainly gone
    lock = Path(uri) / delta.LOCK_FILE
    lock.write_text(json.dumps({"pid": dead, "host": delta.host_tag(), "hostname": "here", "owner": "killed run"}))
    commit(uri, stage(uri, "new", [DAY]), DAY)
    assert {r[0] for r in table_rows(uri)} == {"new"} and not lock.exists()


MODEL = """
MODEL (name s.daily, kind INCREMENTAL_BY_TIME_RANGE (time_column h), start '2024-01-01');
SELECT date_trunc('HOUR', ts) AS h, k, v FROM raw.events WHERE ts BETWEEN @start_dt AND @end_dt
"""


def test_spark_runs_of_the_same_and_of_different_windows_at_once(spark, make_project):
    """Whole executions on the shared session: the same window twice and two other windows, together."""
    root = make_project({"sources.yaml": EVENTS_SOURCE, "models/daily.sql": MODEL})
    write_events(root / "data" / "events", utc(2024, 1, 1), 72)
    project = load_project(root)
    model = project.model("s.daily")
    day1, day2, day3 = (TimeWindow(utc(2024, 1, d), utc(2024, 1, d + 1)) for d in (1, 2, 3))
    executor = Executor(spark, project)
    plans = [plan_run(project, model, w) for w in (day1, day1, day2, day3)]
    results = all_at_once(*[lambda p=p: executor.execute(p) for p in plans])
    assert all(not isinstance(r, Exception) for r in results), results
    uri = delta.table_uri(project.settings.warehouse, "s.daily")
    rows = table_rows(uri)
    assert len(rows) == 72 and len(set(rows)) == 72  # every hour of three days once: no duplicate, none lost
