"""Every commit path keeps Delta checkpoints at the table's interval and deletes log files past its
log retention; the table still opens at its current version and every reader sees the same rows.

Log files are aged by setting their modification time back (what the retention is measured on), as
the 30 days of a real table's life would.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from incremental_assets import cli, delta
from incremental_assets.delta import checkpoints
from incremental_assets.delta.promote import promote_table
from incremental_assets.errors import DamagedTableError
from incremental_assets.model.intervals import IntervalUnit, TimeWindow, to_utc

from helpers import EVENTS_SOURCE, table_rows, utc, write_events

SCHEMA = pa.schema([("k", pa.string()), ("v", pa.int64())])
DAYS = [f"2024-01-{d:02d}" for d in range(1, 6)]


def stage(uri: str, tag: str, column: str, values: list[str]) -> str:
    """A staging folder as Spark leaves it: one Parquet file per partition."""
    staging = delta.new_staging_dir(uri)
    for value in values:
        folder = Path(staging) / f"{column}={value}"
        folder.mkdir(parents=True)
        pq.write_table(pa.table({"k": [tag, tag], "v": [1, 2]}, schema=SCHEMA), folder / "part-0.parquet")
    return staging


def log_names(uri: str) -> list[str]:
    return sorted(os.listdir(Path(uri) / "_delta_log"))


def checkpointed(uri: str) -> list[int]:
    return [int(n.split(".")[0]) for n in log_names(uri) if n.endswith(".checkpoint.parquet")]


def commit_files(uri: str) -> list[int]:
    return [int(n[:-5]) for n in log_names(uri) if n.endswith(".json") and n[:-5].isdigit()]


def age_log(uri: str, days: int = 31) -> None:
    old = time.time() - days * 86400
    for name in log_names(uri):
        os.utime(Path(uri) / "_delta_log" / name, (old, old))


def last_checkpoint(uri: str) -> int:
    return int(json.loads((Path(uri) / "_delta_log" / "_last_checkpoint").read_text())["version"])


def _window(day: str) -> TimeWindow:
    return TimeWindow(to_utc(day), to_utc(day) + timedelta(days=1))


MODES = {
    "replace_window": lambda i: (
        delta.PARTITION_COLUMN,
        [DAYS[i % 5]],
        delta.ReplaceWindow(_window(DAYS[i % 5]), IntervalUnit.DAY),
    ),
    "replace_buckets": lambda i: (delta.BUCKET_COLUMN, [str(i % 3)], delta.ReplaceBuckets((str(i % 3),))),
    "replace_table": lambda i: ("p", [], delta.ReplaceTable()),
    "append": lambda i: ("p", [], delta.Append()),
}


def _commit(uri: str, kind: str, i: int) -> None:
    column, values, mode = MODES[kind](i)
    staging = stage(uri, f"c{i}", column, values) if values else _unpartitioned(uri, f"c{i}")
    delta.commit_staged(uri, staging, SCHEMA, mode, metadata={"model": "t.x", "run_id": f"run{i}"})


def _unpartitioned(uri: str, tag: str) -> str:
    staging = delta.new_staging_dir(uri)
    Path(staging).mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"k": [tag], "v": [1]}, schema=SCHEMA), Path(staging) / "part-0.parquet")
    return staging


@pytest.mark.parametrize("kind", sorted(MODES))
def test_every_commit_mode_checkpoints_every_ten_versions_and_cleans_the_expired_log(tmp_path, kind):
    uri = str(tmp_path / "t")
    for i in range(25):  # versions 0..24
        _commit(uri, kind, i)
    assert DeltaTable(uri).metadata().configuration == checkpoints.TABLE_PROPERTIES
    assert checkpointed(uri) == [10, 20] and last_checkpoint(uri) == 20
    assert commit_files(uri) == list(range(25))  # nothing is past the retention yet
    rows = table_rows(uri)
    age_log(uri)  # a month later
    for i in range(25, 31):  # versions 25..30: a checkpoint at 30, then the cleanup
        _commit(uri, kind, i)
    # versions 25..29 are younger than the retention: time travel to them needs the checkpoint at 20 and
    # the commits after it, everything older is deleted
    assert checkpointed(uri) == [20, 30] and last_checkpoint(uri) == 30
    assert commit_files(uri) == list(range(20, 31))
    table = DeltaTable(uri)
    assert table.version() == 30
    assert delta.damaged_log_file(uri) is None  # commit files before the checkpoint are legitimately gone
    if kind == "append":
        assert len(table_rows(uri)) == len(rows) + 6
    elif kind == "replace_table":
        assert table_rows(uri) == [("c30", 1)]
    assert [c.version for c in delta.commits(uri)] == list(range(20, 31))  # what the log still holds


def test_a_missing_commit_file_after_the_newest_checkpoint_is_damage_before_it_is_not(tmp_path):
    uri = str(tmp_path / "t")
    for i in range(14):
        _commit(uri, "replace_window", i)
    log = Path(uri) / "_delta_log"
    (log / f"{3:020d}.json").unlink()  # before the checkpoint at 10: a reader never needs it
    assert delta.damaged_log_file(uri) is None
    assert DeltaTable(uri).version() == 13
    (log / f"{11:020d}.json").unlink()
    assert delta.damaged_log_file(uri) == (f"_delta_log/{11:020d}.json", "missing: the log jumps from version 10 to 12")
    for name in range(12):  # also when every commit file before the gap is gone
        (log / f"{name:020d}.json").unlink(missing_ok=True)
    assert delta.damaged_log_file(uri)[0] == f"_delta_log/{11:020d}.json"
    with pytest.raises(DamagedTableError):
        delta.check_log(uri)


def test_a_lost_commit_file_of_the_checkpointed_version_is_written_again_by_the_next_commit(tmp_path):
    uri = str(tmp_path / "t")
    for i in range(11):
        _commit(uri, "replace_window", i)
    rows = table_rows(uri)
    runs = {c.version: c.run_id for c in delta.commits(uri)}
    (Path(uri) / "_delta_log" / f"{10:020d}.json").unlink()  # the checkpoint at 10 still holds the state
    assert DeltaTable(uri).version() == 10 and table_rows(uri) == rows
    # Each remaining commit keeps its own number (delta-rs would number them one higher past the gap).
    assert {c.version: c.run_id for c in delta.commits(uri)} == {v: r for v, r in runs.items() if v != 10}
    _commit(uri, "replace_window", 11)  # delta-rs alone refuses it: "Invalid table version: 10"
    assert DeltaTable(uri).version() == 11 and ("c11", 1) in table_rows(uri) and ("c11", 1) not in rows
    assert (Path(uri) / "_delta_log" / f"{10:020d}.json").exists() and delta.damaged_log_file(uri) is None


def test_definition_only_commits_and_promotions_keep_checkpoints(tmp_path):
    env, prod = str(tmp_path / "env"), str(tmp_path / "prod")
    _commit(env, "replace_window", 0)
    for i in range(12):  # versions 0..11 of production, each the environment's files
        promote_table(env, prod, "t.x", metadata={"run_id": f"promote{i}"})
    assert checkpointed(prod) == [10]
    assert DeltaTable(prod).metadata().configuration == checkpoints.TABLE_PROPERTIES
    age_log(prod)
    for i in range(8):  # versions 12..19 record a new definition each, no data
        assert delta.record_definition(prod, {"fingerprint": f"f{i}", "model": "t.x", "columns": {}}) == 12 + i
    promote_table(env, prod, "t.x", metadata={"run_id": "promote-last"})  # version 20
    assert checkpointed(prod) == [10, 20] and commit_files(prod) == list(range(10, 21))
    assert table_rows(prod) == table_rows(env)


def test_a_table_created_by_another_tool_gets_the_product_interval(tmp_path):
    from deltalake import write_deltalake

    uri = str(tmp_path / "t")
    write_deltalake(uri, pa.table({"k": ["a"], "v": [1]}, schema=SCHEMA), partition_by=None)
    for i in range(10):
        _commit(uri, "append", i)
    assert checkpointed(uri) == [10]


HOURLY = """
MODEL (name s.hourly, kind INCREMENTAL_BY_TIME_RANGE (time_column h), start '2024-01-01', cron '@hourly');
SELECT date_trunc('HOUR', ts) AS h, k, COUNT(*) AS n, SUM(v) AS v FROM raw.events WHERE ts BETWEEN @start_dt AND @end_dt
  GROUP BY 1, 2
"""


def test_spark_writes_and_day_file_rewrites_keep_checkpoints_and_read_alike(spark, make_project, tmp_path, monkeypatch):
    """Real runs: hours appended to a table cut by day, a late hour rewriting its day file; with a
    checkpoint every 2 commits the log is cleaned and Spark reads what deltalake reads. (Merges commit
    by key bucket: see the commit modes above.)"""
    monkeypatch.setattr(
        checkpoints, "TABLE_PROPERTIES", {**checkpoints.TABLE_PROPERTIES, "delta.checkpointInterval": "2"}
    )
    root = make_project({"sources.yaml": EVENTS_SOURCE, "models/hourly.sql": HOURLY})
    events = root / "data/events"
    write_events(events, utc(2024, 1, 1), 1, per_hour=2)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    warehouse = root / "warehouse"
    uris = {m: delta.table_uri(str(warehouse), m) for m in ("s.hourly",)}

    def run(start: str, end: str) -> None:
        assert cli.main(["run", "--start", start, "--end", end, "--project", str(root)]) == 0

    for hour in range(3):  # versions 0, 1, 2 of each table: each hour's events arrive, then its run
        if hour:
            write_events(events, utc(2024, 1, 1, hour), 1, per_hour=2, mode="append")
        run(f"2024-01-01T0{hour}:00", f"2024-01-01T0{hour + 1}:00")
    write_events(events, utc(2024, 1, 1, 1, 30), 1, mode="append")  # a late event
    run("2024-01-01T01:00", "2024-01-01T02:00")  # version 3: the late hour rewrites the day's file, a merge
    for uri in uris.values():
        assert checkpointed(uri) == [2], (uri, log_names(uri))
        age_log(uri)
    write_events(events, utc(2024, 1, 1, 3), 1, per_hour=2, mode="append")
    run("2024-01-01T03:00", "2024-01-01T04:00")  # version 4: a checkpoint, the log before it deleted
    for name, uri in uris.items():
        assert checkpointed(uri) == [4] and commit_files(uri) == [4], name
        assert DeltaTable(uri).version() == 4
        from_spark = sorted(
            tuple(r)
            for r in spark.read.parquet(*DeltaTable(uri).file_uris())
            .drop("ia_interval", "ia_day", "ia_bucket")
            .collect()
        )
        assert table_rows(uri, drop=("ia_interval", "ia_day", "ia_bucket")) == from_spark and from_spark
    assert cli.main(["verify", "--project", str(root)]) == 0


# -- the integrity check from where it last looked -------------------------------------------------


@pytest.fixture
def history(tmp_path):
    """An hourly table of 30 commits (one tiny file each), each recorded in Dagster, checked once."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from log_history import History

    table = History(tmp_path / "p")
    for _ in range(30):
        table.add_hour()
    assert table.check().ok
    return table


def test_the_integrity_check_reads_only_the_commits_after_the_version_it_last_checked(history, monkeypatch):
    from incremental_assets.delta import log_tail
    from incremental_assets.orchestration import integrity_since

    history.add_hour()
    history.add_hour()
    read = []
    real = log_tail.read_entry
    monkeypatch.setattr(integrity_since, "read_entry", lambda uri, v: read.append(v) or real(uri, v))
    monkeypatch.setattr(log_tail, "read_entry", lambda uri, v: read.append(v) or real(uri, v))
    found = history.check()
    assert found.ok and found.table_version == 31 and found.recorded_version == 31
    assert sorted(read) == [29, 30, 31]  # the commit it remembered (still the same?) and the two new ones
    assert integrity_since.remembered(history.instance, history.uri).version == 31


def test_the_integrity_check_from_its_last_look_still_catches_a_deleted_newest_commit(history):
    history.add_hour()  # version 30, checkpointed
    history.add_hour()
    (Path(history.uri) / "_delta_log" / f"{31:020d}.json").unlink()
    found = history.check()
    assert not found.ok and found.table_version == 30 and "behind version 31" in found.problems[0]
    assert [(w.start.day, w.start.hour) for w in found.lost] == [(2, 7)]  # the 32nd hour
    assert not history.check().ok  # said again by the next command (it looks at everything)


def test_the_integrity_check_from_its_last_look_catches_a_version_reused_by_another_run(history):
    (Path(history.uri) / "_delta_log" / f"{29:020d}.json").unlink()
    (Path(history.uri) / "_delta_log" / "_last_checkpoint").unlink(missing_ok=True)
    history.add_hour()  # commits version 29 again, for another hour; Dagster's record of version 29 names another run
    found = history.check()
    assert not found.ok and "written by other runs" in found.problems[0]


def test_the_integrity_check_from_its_last_look_catches_a_deleted_new_data_file(history):
    history.add_hour()
    newest = [f for f in delta.snapshot_files(history.uri) if "2024-01-02T06" in f.uri][0]
    Path(newest.uri.removeprefix("file://")).unlink()  # the file of the hour just committed
    found = history.check()
    assert not found.ok and "missing" in found.problems[0]
    assert [(w.start.day, w.start.hour) for w in found.lost] == [(2, 6)]


def test_the_integrity_check_from_its_last_look_finds_a_resized_old_file_within_a_round_of_samples(
    history, monkeypatch
):
    from incremental_assets.orchestration import integrity_since

    monkeypatch.setattr(integrity_since, "SAMPLE", 8)  # 30 files: every file stat'ed within 4 checks
    oldest = [f for f in delta.snapshot_files(history.uri) if "2024-01-01T00" in f.uri][0]
    with open(oldest.uri.removeprefix("file://"), "ab") as handle:
        handle.write(b"x")
    seen = [history.check() for _ in range(4)]
    assert any(not found.ok for found in seen)
    lost = next(found for found in seen if not found.ok)
    assert "bytes where the log recorded" in lost.problems[0] and [(w.start.day, w.start.hour) for w in lost.lost] == [
        (1, 0)
    ]


# -- commits Dagster missed, from the commits after the last look ---------------------------------


def test_commits_dagster_missed_are_found_from_the_commits_after_the_last_look(history, monkeypatch):
    from incremental_assets.orchestration import reconcile

    def missed():
        return reconcile.unrecorded_commits(history.instance, history.project, history.model, history.translator)

    assert missed() == []  # the first look reads the whole log, and marks where it stands
    assert reconcile.remembered_mark(history.instance, history.uri).version == 29
    history.add_hour()
    history.add_hour(record=False)  # version 31: committed, but the process died before recording it
    history.add_hour()
    whole_log = []
    real_commits = delta.commits
    monkeypatch.setattr(delta, "commits", lambda uri: whole_log.append(uri) or real_commits(uri))
    hour_31 = history.partitions.get_partition_key_for_timestamp(utc(2024, 1, 2, 7).timestamp())
    assert [(m.version, m.partitions) for m in missed()] == [(31, (hour_31,))]
    assert whole_log == []  # only the commit files after version 29 were read
    assert reconcile.remembered_mark(history.instance, history.uri).version == 29  # not past what is missed

    assert [
        m.version for m in reconcile.reconcile(history.instance, history.project, history.model, history.translator)
    ] == [31]
    assert reconcile.remembered_mark(history.instance, history.uri).version == 32
    # Nothing committed since: neither the log nor Dagster's materialized intervals (every one of them) is read.
    listed = []
    real_listing = history.instance.get_materialized_partitions
    monkeypatch.setattr(
        history.instance, "get_materialized_partitions", lambda key: listed.append(key) or real_listing(key)
    )
    assert missed() == [] and whole_log == [] and listed == []

    # Dagster's records of the model wiped: the whole log is read again, and every hour found in it.
    history.instance.wipe_assets([history.key])
    assert [m.version for m in missed()] == list(range(33))
    assert whole_log == [history.uri]


def test_finding_dead_runs_staging_folders_reads_the_log_only_for_a_folder_not_marked_committed(history, monkeypatch):
    from incremental_assets.delta import staging

    monkeypatch.setattr(staging, "_run_gone", lambda name, older_than, now: True)  # as if every run were over
    whole_log = []
    real_commits = staging.commits
    monkeypatch.setattr(staging, "commits", lambda uri: whole_log.append(uri) or real_commits(uri))
    folders = sorted(Path(history.uri).glob("run-*"))
    hour_3 = next(p.parent for p in Path(history.uri).glob(f"run-*/{delta.PARTITION_COLUMN}=2024-01-01T03*"))
    assert len(folders) == 30 and all(
        (f / staging.COMMITTED_MARK).exists() for f in folders
    )  # each commit marks its folder
    assert delta.orphan_staging_dirs(history.uri) == [] and whole_log == []

    (hour_3 / staging.COMMITTED_MARK).unlink()  # committed before marks existed (or the mark was lost)
    history.add_hour()  # version 30 replaces nothing: folder 3's files are still live
    dead = Path(history.uri) / f"run-20240101T000000-{delta.host_tag()}-999999-deadbeef"
    (dead / f"{delta.PARTITION_COLUMN}=2024-01-01T05").mkdir(parents=True)
    (dead / f"{delta.PARTITION_COLUMN}=2024-01-01T05" / "part-0.parquet").write_bytes(b"PAR1")
    assert delta.orphan_staging_dirs(history.uri) == [str(dead)] and whole_log == [history.uri]
    shutil.rmtree(dead)
    assert delta.orphan_staging_dirs(history.uri) == [] and whole_log == [
        history.uri
    ]  # hour 3's folder is live: no log read

    # A folder whose files a later commit replaced, unmarked: the log is read once and the folder marked.
    history.hours = 3
    history.add_hour()  # hour 3 again: its first folder's file is replaced
    assert delta.orphan_staging_dirs(history.uri) == [] and whole_log == [history.uri] * 2
    assert (hour_3 / staging.COMMITTED_MARK).read_text() == "3"
    assert delta.orphan_staging_dirs(history.uri) == [] and whole_log == [history.uri] * 2


def test_a_command_opens_each_table_log_once_and_again_after_any_commit(tmp_path):
    """Within one command a table's snapshot is reused while it is the latest; a commit by this process, by
    another writer, or a rewritten newest commit file make the next open read the log again."""
    uri = str(tmp_path / "t")
    for i in range(3):
        _commit(uri, "replace_window", i)
    assert delta.open_table(uri) is not delta.open_table(uri)  # outside a command: every open reads the log
    with delta.one_snapshot_per_table():
        first = delta.open_table(uri)
        assert delta.open_table(uri) is first and delta.version(uri) == 2
        _commit(uri, "replace_window", 3)  # the commit path's own opens see the new version too
        after = delta.open_table(uri)
        assert after is not first and after.version() == 3 and delta.open_table(uri) is after
        DeltaTable(uri).create_write_transaction([], mode="append", schema=after.schema())  # another writer
        assert delta.version(uri) == 4
        latest = delta.open_table(uri)
        assert latest.version() == 4 and delta.open_table(uri) is latest
        (Path(uri) / "_delta_log" / f"{4:020d}.json").write_text("")  # the newest commit file damaged in place
        assert delta.open_table(uri) is not latest
