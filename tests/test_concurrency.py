"""Concurrent writers of one table: no lost update, no duplicate rows; a blocked writer waits, then
replaces, or fails naming the holder. delta-rs alone cannot arbitrate the first write of a window."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from deltalake.transaction import AddAction

from incremental_assets import delta
from incremental_assets.delta import lock as writer_lock_module
from incremental_assets.errors import StorageError
from incremental_assets.load.project import load_project
from incremental_assets.model.intervals import IntervalUnit, TimeWindow, to_utc
from incremental_assets.plan.run_plan import plan_run
from incremental_assets.spark.executor import Executor

from helpers import EVENTS_SOURCE, all_at_once, table_rows, utc, write_events

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
    return delta.commit_staged(
        uri, staging, SCHEMA, delta.ReplaceWindow(window(day, days), IntervalUnit.DAY), metadata={"model": "t.x"}
    )


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
        action = AddAction(
            rel, path.stat().st_size, {delta.PARTITION_COLUMN: DAY}, 0, True, json.dumps({"numRecords": 3})
        )
        table.create_write_transaction(
            [action],
            mode="overwrite",
            schema=table.schema(),
            partition_by=[delta.PARTITION_COLUMN],
            partition_filters=[(delta.PARTITION_COLUMN, "=", DAY)],
        )
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
    assert rows in (
        [
            (
                "a",
                0,
            ),
            ("a", 1),
            ("a", 2),
        ],
        [("b", 0), ("b", 1), ("b", 2)],
    )
    assert sorted(r.version for r in results) == [round_ % 2, round_ % 2 + 1]


def test_two_writers_of_different_windows_at_once_both_land(tmp_path):
    uri = str(tmp_path / "t")
    commit(uri, stage(uri, "old", ["2023-12-31"]), "2023-12-31")
    jobs = [
        lambda d=d, s=stage(uri, d, [d]): commit(uri, s, d)
        for d in ("2024-01-01", "2024-01-02", "2024-01-03", "2024-01-04")
    ]
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
        with pytest.raises(
            StorageError,
            match=r"being written by run 1234 of t.x \(pid \d+ on .*waited 0s.*INCREMENTAL_ASSETS_LOCK_TIMEOUT",
        ):
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


class Holders:
    """Who holds the lock right now: the most at once, and everyone who ever held it."""

    def __init__(self):
        self._guard = threading.Lock()
        self.now: list[str] = []
        self.most = 0
        self.held: list[str] = []

    def hold(
        self, uri: str, name: str, seconds: float, timeout: float = 10, until: threading.Event | None = None
    ) -> None:
        with delta.writer_lock(uri, owner=name, timeout=timeout):
            with self._guard:
                self.now.append(name)
                self.most = max(self.most, len(self.now))
                self.held.append(name)
            if until is not None:
                until.wait(10)
            time.sleep(seconds)
            with self._guard:
                self.now.remove(name)


class PauseAt:
    """Stop the thread named ``who`` the first time it reaches lock step ``step``, until ``go`` is set."""

    def __init__(self, who: str, step: str):
        self.who, self.step = who, step
        self.reached, self.go = threading.Event(), threading.Event()

    def __call__(self, step: str) -> None:
        if step == self.step and threading.current_thread().name == self.who and not self.reached.is_set():
            self.reached.set()
            assert self.go.wait(10)


def dead_pid() -> int:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)  # a pid that is certainly gone
    return pid


def write_dead_lock(uri: str, **record) -> Path:
    lock = Path(uri) / delta.LOCK_FILE
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.write_text(
        json.dumps({"pid": dead_pid(), "host": delta.host_tag(), "hostname": "here", "owner": "killed run", **record})
    )
    return lock


# Which steps a writer reaches when the lock is left by a dead writer, free, or held by a live one.
PAUSES = [("dead", step) for step in writer_lock_module.STEPS] + [
    ("free", "prepared"),
    ("live", "prepared"),
    ("live", "opened"),
]


@pytest.mark.parametrize("holder,step", PAUSES)
def test_a_writer_paused_at_any_step_of_taking_the_lock_never_holds_it_with_another(
    tmp_path, monkeypatch, holder, step
):
    """Issue 17: writer A judged a dead writer's lock stale and paused; B took the lock over; A resumed
    and moved B's live lock aside: both committed. Each writer here is a thread that skips the
    in-process lock, so the lock file alone must keep them apart, exactly as between processes."""
    uri = str(tmp_path / "t")
    monkeypatch.setattr(writer_lock_module, "_thread_lock", lambda path: threading.Lock())
    pause = PauseAt("A", step)
    monkeypatch.setattr(writer_lock_module, "_step_hook", pause)
    holders = Holders()
    threads = []
    if holder == "dead":
        write_dead_lock(uri)
    if holder == "live":
        threads.append(threading.Thread(target=holders.hold, args=(uri, "C", 1.0), name="C"))
        threads[-1].start()
        while not holders.held:
            time.sleep(0.01)
    threads.append(threading.Thread(target=holders.hold, args=(uri, "A", 0.2), name="A"))
    threads[-1].start()
    assert pause.reached.wait(5), f"writer A never reached step {step}"
    threads.append(threading.Thread(target=holders.hold, args=(uri, "B", 0.3), name="B"))
    threads[-1].start()
    time.sleep(0.3)  # B takes the lock now if it can
    pause.go.set()
    for t in threads:
        t.join(20)
    assert holders.most == 1, f"{holders.most} writers held the lock at once"
    assert sorted(holders.held) == sorted(["A", "B"] + (["C"] if holder == "live" else []))
    assert os.listdir(uri) == []  # the dead writer's lock, the prepared and moved-aside files: all gone


def test_a_writer_that_opened_a_lock_just_before_its_holder_released_it_never_disturbs_the_next_holder(
    tmp_path, monkeypatch
):
    """A opens C's lock file and pauses; C releases; B publishes its own lock; A resumes and finds C's
    file free (flock-ed by nobody): it must see that the path names another file now, and leave B's
    lock alone, so that D, arriving later, waits for B."""
    uri = str(tmp_path / "t")
    monkeypatch.setattr(writer_lock_module, "_thread_lock", lambda path: threading.Lock())
    at_open, at_move = PauseAt("A", "opened"), PauseAt("A", "moved")
    monkeypatch.setattr(writer_lock_module, "_step_hook", lambda step: (at_open(step), at_move(step)))
    holders = Holders()
    c_done, b_done = threading.Event(), threading.Event()
    threads = {
        name: threading.Thread(target=holders.hold, args=(uri, name, 0.05), kwargs=kw, name=name)
        for name, kw in (("C", {"until": c_done}), ("A", {}), ("B", {"until": b_done}), ("D", {}))
    }
    threads["C"].start()
    while not holders.held:
        time.sleep(0.01)
    threads["A"].start()
    assert at_open.reached.wait(5)
    c_done.set()
    threads["C"].join(5)
    threads["B"].start()
    while len(holders.held) < 2:
        time.sleep(0.01)
    at_open.go.set()
    at_move.reached.wait(1)  # the old take-over moved B's live lock aside here
    threads["D"].start()
    time.sleep(0.3)  # D takes the lock now if it can
    at_move.go.set()
    b_done.set()
    for t in threads.values():
        t.join(20)
    assert holders.most == 1, f"{holders.most} writers held the lock at once"
    assert sorted(holders.held) == ["A", "B", "C", "D"]


def test_threads_of_one_process_take_turns(tmp_path):
    uri = str(tmp_path / "t")
    holders = Holders()
    threads = [threading.Thread(target=holders.hold, args=(uri, f"w{i}", 0.02)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert holders.most == 1 and len(holders.held) == 8


HOLD_IN_CHILD = """
import os, sys, time
from incremental_assets.delta import writer_lock
with writer_lock(sys.argv[1], owner="child run"):
    print("held", flush=True)
    time.sleep(60)
"""


def test_a_live_holder_is_never_taken_over_however_old_its_lock(tmp_path):
    uri = str(tmp_path / "t")
    child = subprocess.Popen([sys.executable, "-c", HOLD_IN_CHILD, uri], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "held"
        lock = Path(uri) / delta.LOCK_FILE
        day_ago = time.time() - 86400
        os.utime(lock, (day_ago, day_ago))  # far past any age limit
        with pytest.raises(StorageError, match=rf"being written by child run \(pid {child.pid} on"):
            with delta.writer_lock(uri, timeout=0.5):
                pass
        assert json.loads(lock.read_text())["pid"] == child.pid  # still the child's lock
    finally:
        child.kill()
        child.wait()
    with delta.writer_lock(uri, timeout=1):  # killed: its lock is taken over at once
        pass


def test_a_lock_from_another_host_is_taken_over_only_once_its_heartbeat_stops(tmp_path, monkeypatch):
    uri = str(tmp_path / "t")
    monkeypatch.setenv(delta.LOCK_TIMEOUT_ENV, "0.3")
    commit(uri, stage(uri, "old", [DAY]), DAY)
    lock = write_dead_lock(uri, host="0ther0st", hostname="worker-2", owner="run 77 of t.x")
    with pytest.raises(
        StorageError,
        match=r"run 77 of t.x .* on worker-2.*another host is taken over once its holder has not "
        r"touched it for 10 minutes",
    ):
        with delta.writer_lock(uri, timeout=0.2):
            pass
    nine_minutes_ago = time.time() - 540
    os.utime(lock, (nine_minutes_ago, nine_minutes_ago))
    with pytest.raises(StorageError, match="run 77 of t.x"):
        commit(uri, stage(uri, "new", [DAY]), DAY)
    eleven_minutes_ago = time.time() - 660
    os.utime(lock, (eleven_minutes_ago, eleven_minutes_ago))
    commit(uri, stage(uri, "new", [DAY]), DAY)
    assert {r[0] for r in table_rows(uri)} == {"new"} and not lock.exists()


def test_a_holder_keeps_its_lock_fresh_while_it_holds_it(tmp_path, monkeypatch):
    uri = str(tmp_path / "t")
    monkeypatch.setattr(writer_lock_module, "HEARTBEAT_SECONDS", 0.05)
    lock = Path(uri) / delta.LOCK_FILE
    with delta.writer_lock(uri):
        hour_ago = time.time() - 3600
        os.utime(lock, (hour_ago, hour_ago))
        time.sleep(0.3)
        assert time.time() - lock.stat().st_mtime < 5


RACER = """
import os, signal, sys, threading
from incremental_assets.delta import writer_lock
uri, rounds, crash = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "crash"
counter, inside = os.path.join(uri, "counter"), os.path.join(uri, "inside")
def work():
    for _ in range(rounds):
        with writer_lock(uri, owner=f"racer {os.getpid()}", timeout=60):
            if crash:  # die holding the lock: no finally runs
                os.kill(os.getpid(), signal.SIGKILL)
            try:
                os.close(os.open(inside, os.O_CREAT | os.O_EXCL))
            except FileExistsError:
                print("both held the lock", flush=True)
            with open(counter) as f:
                n = int(f.read())
            with open(counter, "w") as f:
                f.write(str(n + 1))
            os.remove(inside)
threads = [threading.Thread(target=work) for _ in range(2)]
for t in threads:
    t.start()
for t in threads:
    t.join()
"""


def test_many_processes_and_threads_racing_with_crashing_holders_never_hold_the_lock_twice(tmp_path):
    uri = tmp_path / "t"
    uri.mkdir()
    (uri / "counter").write_text("0")
    write_dead_lock(str(uri))
    rounds, racers = 15, 4
    argv = [[str(uri), str(rounds), "ok"]] * racers + [[str(uri), "1", "crash"]] * 3
    children = [subprocess.Popen([sys.executable, "-c", RACER, *a], stdout=subprocess.PIPE, text=True) for a in argv]
    try:
        outputs = [child.communicate(timeout=120)[0] for child in children]
    finally:
        for child in children:
            if child.poll() is None:
                os.kill(child.pid, signal.SIGKILL)
                child.wait()
    assert [c.returncode for c in children] == [0] * racers + [-signal.SIGKILL] * 3
    assert "both held" not in "".join(outputs)
    assert (uri / "counter").read_text() == str(racers * 2 * rounds)  # no update lost
    with delta.writer_lock(str(uri), timeout=1):  # a writer that crashed last left its lock: taken over at once
        pass
    assert sorted(os.listdir(uri)) == ["counter"]  # no lock, prepared or moved-aside file is left behind


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
