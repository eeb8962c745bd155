"""A Parquet folder source with a bad file: one line naming the source, the file and the column, exit 2,
nothing written; a window whose rows are in other files is not affected by it (each file's time
statistics decide which files a window reads)."""

from __future__ import annotations

from datetime import date, datetime, timezone
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from incremental_assets import delta
from incremental_assets.load.project import load_project
from incremental_assets.orchestration.instance import open_instance

from helpers import cli_output, table_rows

SOURCE = """\
- name: raw.ev
  location: data/ev
  format: parquet
  time_column: ts
"""
MODEL = """
MODEL (name s.d, kind INCREMENTAL_BY_TIME_RANGE (time_column ds), start '2024-01-01');
SELECT CAST(ts AS DATE) AS ds, SUM(v) AS v, COUNT(*) AS n FROM raw.ev WHERE ts BETWEEN @start_dt AND @end_dt GROUP BY 1
"""


def day_file(folder: Path, day: int, *, value_type=pa.int64(), name: str | None = None) -> Path:
    ts = [datetime(2024, 1, day, h, tzinfo=timezone.utc) for h in range(0, 24, 2)]
    values = pa.array([h for h in range(len(ts))]).cast(value_type)
    path = folder / (name or f"day-{day:02d}.parquet")
    pq.write_table(pa.table({"ts": pa.array(ts, pa.timestamp("us", tz="UTC")), "v": values}), path)
    return path


@pytest.fixture
def root(spark, make_project, tmp_path, monkeypatch):
    root = make_project({"sources.yaml": SOURCE, "models/d.sql": MODEL})
    folder = root / "data" / "ev"
    folder.mkdir(parents=True)
    for day in (1, 2, 4):  # a day without any file: 3
        day_file(folder, day)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    return root


def run(root: Path, capsys, *args: str) -> tuple[int, list[str]]:
    code, out = cli_output(root, capsys, "run", "s.d", *args)
    return code, out.splitlines()


def test_a_file_whose_column_changed_type_names_source_file_and_column_and_spares_other_windows(root, capsys):
    bad = day_file(root / "data" / "ev", 5, value_type=pa.float64())
    uri = delta.table_uri(load_project(root).settings.warehouse, "s.d")

    code, lines = run(root, capsys, "--start", "2024-01-01", "--end", "2024-01-06")
    assert code == 2
    assert (
        f"    source raw.ev: file {bad}: column v is DOUBLE in this file, where it is read as bigint "
        f"(fix: rewrite the file with v as bigint, or move it out of {bad.parent})" in lines
    )
    assert not any("Py4J" in line or "at org.apache" in line or "Traceback" in line for line in lines)
    assert not delta.exists(uri)  # nothing written

    # The bad file holds only day 5: days 1-4 read other files and run, the quiet day 3 included.
    code, lines = run(root, capsys, "--start", "2024-01-01", "--end", "2024-01-05")
    assert code == 0, lines
    assert [r[0] for r in table_rows(uri)] == [datetime(2024, 1, d).date() for d in (1, 2, 4)]
    assert all(r[2] == 12 for r in table_rows(uri))


def test_a_file_that_is_not_parquet_or_half_written_is_one_line(root, capsys):
    folder = root / "data" / "ev"
    whole = day_file(folder, 5).read_bytes()
    half = folder / "day-06.parquet"
    half.write_bytes(whole[: len(whole) // 2])  # a file still being copied in
    uri = delta.table_uri(load_project(root).settings.warehouse, "s.d")

    code, lines = run(root, capsys, "--start", "2024-01-01", "--end", "2024-01-03")
    assert code == 2
    assert (
        f"    source raw.ev: file {half} is not a Parquet file, or is not complete yet (fix: move it out of {folder}; "
        "a file still being written is read by a run after it is complete)" in lines
    )
    assert not delta.exists(uri)
    # Dagster's run retries (on in the project's instance) leave it alone: it would fail the same way.
    instance = open_instance(load_project(root).settings.dagster_home)
    assert instance.run_retries_enabled and instance.run_retries_max_retries == 2
    (failed,) = instance.get_runs(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.FAILURE]))
    assert failed.tags.get("dagster/retry_on_asset_or_op_failure") == "false"

    half.write_bytes(day_file(folder, 6, name="tmp.parquet").read_bytes())  # the copy completes
    (folder / "tmp.parquet").unlink()
    assert run(root, capsys, "--start", "2024-01-01", "--end", "2024-01-07")[0] == 0
    assert [r[0] for r in table_rows(uri)] == [datetime(2024, 1, d).date() for d in (1, 2, 4, 5, 6)]


NANOS_SOURCES = """\
- name: raw.ev
  location: data/ev
  format: parquet
  time_column: ts
- name: raw.one
  location: data/one.parquet
  format: parquet
"""
NANOS_DAILY = """
MODEL (name s.d, kind INCREMENTAL_BY_TIME_RANGE (time_column ds), start '2024-01-01');
SELECT CAST(ts AS DATE) AS ds, COUNT(*) AS n, SUM(v) AS v, MAX(ts) AS last_ts, MAX(seen) AS last_seen
FROM raw.ev WHERE ts BETWEEN @start_dt AND @end_dt GROUP BY 1
"""
NANOS_FULL = "MODEL (name s.f, kind FULL);\nSELECT ts, seen, v FROM raw.one\n"


def _pandas_day(day: int, hours: tuple[int, ...]):
    """A day's rows as pandas holds them: wall times to the nanosecond, and an instant column."""
    import pandas as pd

    ts = pd.to_datetime([f"2024-01-{day:02d} {h:02d}:00:00.123456789" for h in hours], format="ISO8601")
    return pd.DataFrame({"ts": ts, "seen": (ts + pd.Timedelta(minutes=5)).tz_localize("UTC"), "v": list(hours)})


@pytest.mark.parametrize("zone", ["UTC", "America/New_York"])
def test_parquet_that_pandas_wrote_in_nanoseconds_reads_as_the_same_file_in_microseconds(
    make_project, spark, tmp_path, monkeypatch, capsys, zone
):
    """pandas writes timestamps in nanoseconds by default, which Spark reads only as numbers: the same frames
    written by pandas as it does by default and in microseconds give the same tables, in any project zone, for
    a folder read by window (one file in microseconds among them, a day without a file), a single file read
    whole, wall times and instants; and the rows are pandas' own, to the microsecond."""
    import pandas as pd

    days = {1: (0, 5, 23), 2: (3,), 4: (1, 2)}  # no file for day 3; day 4 written in microseconds either way
    tables = {}
    for how in ("default", "micros"):
        root = make_project(
            {
                "sources.yaml": NANOS_SOURCES,
                "models/d.sql": NANOS_DAILY,
                "models/f.sql": NANOS_FULL,
                "incremental_assets.yaml": f"timezone: {zone}\n",
            },
            name=how,
        )
        folder = root / "data" / "ev"
        folder.mkdir(parents=True)
        for day, hours in days.items():
            micros = how == "micros" or day == 4
            options = {"coerce_timestamps": "us", "allow_truncated_timestamps": True} if micros else {}
            _pandas_day(day, hours).to_parquet(folder / f"day-{day}.parquet", **options)
        one = root / "data" / "one.parquet"
        options = {"coerce_timestamps": "us", "allow_truncated_timestamps": True} if how == "micros" else {}
        _pandas_day(7, (6, 7)).to_parquet(one, **options)
        assert pq.read_schema(one).field("ts").type.unit == ("us" if how == "micros" else "ns")
        monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / how / "home"))
        code, out = cli_output(root, capsys, "run", "--start", "2024-01-01", "--end", "2024-01-05")
        assert code == 0, out
        warehouse = load_project(root).settings.warehouse
        tables[how] = {name: table_rows(delta.table_uri(warehouse, name)) for name in ("s.d", "s.f")}

    assert tables["default"] == tables["micros"]
    if zone != "UTC":
        return
    frame = pd.concat([_pandas_day(day, hours) for day, hours in days.items()])
    frame["ts"] = frame["ts"].dt.floor("us")
    frame["seen"] = frame["seen"].dt.floor("us").dt.tz_localize(None)
    grouped = frame.groupby(frame["ts"].dt.date).agg(
        n=("v", "size"), v=("v", "sum"), t=("ts", "max"), s=("seen", "max")
    )
    expected = [(d, r.n, r.v, r.t.to_pydatetime(), r.s.to_pydatetime()) for d, r in grouped.iterrows()]
    assert tables["default"]["s.d"] == expected
    one = _pandas_day(7, (6, 7))
    assert tables["default"]["s.f"] == sorted(
        (t.floor("us").to_pydatetime(), s.floor("us").tz_localize(None).to_pydatetime(), v)
        for t, s, v in zip(one["ts"], one["seen"], one["v"])
    )


def test_a_time_column_of_numbers_without_a_format_names_source_column_and_the_fix(
    make_project, spark, tmp_path, monkeypatch, capsys
):
    """Epoch seconds read as the time column without saying so: one line with the formats that say it, exit 2;
    with ``time_column_format: epoch_seconds`` the same files run."""
    sources = "- name: raw.ev\n  location: data/ev\n  format: parquet\n  time_column: ts\n"
    model = MODEL.replace("CAST(ts AS DATE)", "CAST(TIMESTAMP_SECONDS(ts) AS DATE)").replace(
        "WHERE ts BETWEEN @start_dt AND @end_dt ", ""
    )
    root = make_project({"sources.yaml": sources, "models/d.sql": model})
    (root / "data" / "ev").mkdir(parents=True)
    seconds = [int(datetime(2024, 1, 1, h, tzinfo=timezone.utc).timestamp()) for h in (1, 23)]
    pq.write_table(pa.table({"ts": pa.array(seconds, pa.int64()), "v": [1, 2]}), root / "data" / "ev" / "a.parquet")
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))

    code, out = run(root, capsys, "--start", "2024-01-01", "--end", "2024-01-02")
    assert code == 2, out
    assert (
        "    source raw.ev: time column ts holds numbers (BIGINT), which a window cannot compare with times (fix: say "
        "what they count in sources.yaml: `time_column_format: epoch_seconds` (or epoch_millis, epoch_micros), or "
        "`'%Y%m%d'` for numbers such as 20250301)" in out
    ), out
    (root / "sources.yaml").write_text(sources + "  time_column_format: epoch_seconds\n")
    code, out = run(root, capsys, "--start", "2024-01-01", "--end", "2024-01-02")
    assert code == 0, out
    assert table_rows(delta.table_uri(load_project(root).settings.warehouse, "s.d")) == [(date(2024, 1, 1), 3, 2)]


def test_a_file_s_footer_is_read_once_while_the_file_stays_the_same(tmp_path, monkeypatch):
    """Which columns hold nanoseconds is read from a footer once per version of a file: a second read of the
    same file asks the file system only, and a file written again (a half-written file completed) is read
    again."""
    from incremental_assets.spark import source_files

    path = tmp_path / "part.parquet"
    path.write_bytes(b"PAR1 half-written")
    reads = []
    real = pq.read_schema
    monkeypatch.setattr(source_files.pq, "read_schema", lambda p: reads.append(p) or real(p))
    assert source_files.nanosecond_columns(str(path)) == ()
    at = datetime(2024, 1, 1, 12, tzinfo=timezone.utc)
    table = pa.table({"ts": pa.array([at], pa.timestamp("ns", tz="UTC")), "wall": pa.array([at], pa.timestamp("ns"))})
    pq.write_table(table, path)
    for _ in range(3):
        assert source_files.nanosecond_columns(str(path)) == (("ts", True), ("wall", False))
    assert len(reads) == 2, reads
