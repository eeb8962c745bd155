"""Rows taken away from a source, and files that arrive keeping an older modification time, reach the models
through ``run --auto`` as new rows do: a data file removed from a folder, a file moved or copied in with its
old time (``mv`` from a staging folder, ``cp -p``, ``rsync -a``), a Delta commit that only removes files."""

from __future__ import annotations

import os
import time
from datetime import datetime

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable, write_deltalake

from incremental_assets.load.project import load_project

from helpers import cli_output, table_rows, table_uri

FOLDER_SOURCE = """
- name: raw.events
  location: data/events
  format: parquet
  time_column: ts
"""
DELTA_SOURCE = """
- name: raw.events
  location: data/events
  format: delta
  time_column: ts
"""
MODELS = {
    "models/daily.sql": """
        MODEL (name s.daily, kind INCREMENTAL_BY_TIME_RANGE (time_column ds), start '2024-01-01');
        SELECT CAST(ts AS DATE) AS ds, COUNT(*) AS n, SUM(amount) AS amount FROM raw.events
        WHERE ts BETWEEN @start_ts AND @end_ts GROUP BY 1
    """,
    "models/total.sql": """
        MODEL (name s.total, kind FULL);
        SELECT COUNT(*) AS n, SUM(amount) AS amount FROM raw.events
    """,
}


def _day_file(path, day: int, amount: float, rows: int = 1) -> None:
    table = pa.table(
        {"ts": pa.array([datetime(2024, 1, day, 12)] * rows, pa.timestamp("us")), "amount": [amount] * rows}
    )
    pq.write_table(table, path)


def _tables(root) -> tuple[list, list]:
    project = load_project(root)
    daily = [(str(r[0]), r[1], r[2]) for r in table_rows(table_uri(project, "s.daily"))]
    return daily, table_rows(table_uri(project, "s.total"))


def _auto(root, capsys) -> str:
    code, out = cli_output(root, capsys, "run", "--auto", "--end", "2024-01-04")
    assert code == 0, out
    return out


def test_a_removed_file_and_one_moved_in_with_an_older_time_reach_every_reader(
    spark, make_project, monkeypatch, tmp_path, capsys
):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    root = make_project({"sources.yaml": FOLDER_SOURCE, **MODELS})
    folder = root / "data" / "events"
    folder.mkdir(parents=True)
    for day in (1, 2, 3):
        _day_file(folder / f"day{day}.parquet", day, float(day))
    _auto(root, capsys)
    assert _tables(root) == ([("2024-01-01", 1, 1.0), ("2024-01-02", 1, 2.0), ("2024-01-03", 1, 3.0)], [(3, 6.0)])

    # A bad file withdrawn: its day and the total lose its rows.
    (folder / "day2.parquet").unlink()
    out = _auto(root, capsys)
    assert "1 file(s) removed" in out, out
    assert _tables(root) == ([("2024-01-01", 1, 1.0), ("2024-01-03", 1, 3.0)], [(2, 4.0)])

    # The corrected file, written earlier to a staging folder, moved in keeping its modification time (older
    # than the newest file the watch has seen).
    staging = root / "staging"
    staging.mkdir()
    _day_file(staging / "day2-fixed.parquet", 2, 50.0, rows=2)
    old = time.time() - 3600
    os.utime(staging / "day2-fixed.parquet", (old, old))
    os.replace(staging / "day2-fixed.parquet", folder / "day2-fixed.parquet")
    _auto(root, capsys)
    assert _tables(root) == (
        [("2024-01-01", 1, 1.0), ("2024-01-02", 2, 100.0), ("2024-01-03", 1, 3.0)],
        [(4, 104.0)],
    )
    # Nothing changed since: nothing runs.
    out = _auto(root, capsys)
    assert "s.total: nothing it reads changed since its last run" in out, out

    # A file the watch has read is withdrawn: only the intervals of its rows are computed again.
    (folder / "day2-fixed.parquet").unlink()
    out = _auto(root, capsys)
    daily_runs = [line for line in out.splitlines() if "] s.daily [" in line]
    assert len(daily_runs) == 1 and "s.daily [2024-01-02, 2024-01-03)" in daily_runs[0], out
    assert _tables(root) == ([("2024-01-01", 1, 1.0), ("2024-01-03", 1, 3.0)], [(2, 4.0)])


def test_a_delta_commit_that_only_removes_files_reaches_every_reader(
    spark, make_project, monkeypatch, tmp_path, capsys
):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    root = make_project({"sources.yaml": DELTA_SOURCE, **MODELS})
    location = str(root / "data" / "events")
    table = pa.table(
        {
            "ts": pa.array([datetime(2024, 1, d, 12) for d in (1, 2, 3)], pa.timestamp("us")),
            "amount": [1.0, 2.0, 3.0],
            "dt": ["2024-01-01", "2024-01-02", "2024-01-03"],
        }
    )
    write_deltalake(location, table, partition_by=["dt"])
    _auto(root, capsys)
    assert _tables(root)[1] == [(3, 6.0)]

    DeltaTable(location).delete("dt = '2024-01-02'")  # one remove action, no add
    _auto(root, capsys)
    assert _tables(root) == ([("2024-01-01", 1, 1.0), ("2024-01-03", 1, 3.0)], [(2, 4.0)])
