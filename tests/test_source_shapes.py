"""Every common source shape and time type reads right: a daily model over each (Parquet, CSV, JSON as one
file, a folder and Hive-style ``key=value`` folders; Delta unpartitioned and partitioned by a date) with the
time column typed date, timestamp, timestamp without time zone, text ``'%Y-%m-%d'`` or epoch milliseconds, run in
chunks with a late row arriving in between, equals an independent pandas recompute of the source.

The data is irregular on purpose: a day with an empty file, a day without rows between others, rows
at midnight and one microsecond before it, rows without a time, and a late row for a day already run
(the automation's detection of new source data must name that day, whatever the shape).
"""

from __future__ import annotations

import json
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import write_deltalake

from incremental_assets import cli, delta
from incremental_assets.errors import SourceDataError
from incremental_assets.load.project import load_project
from incremental_assets.model.intervals import TimeWindow
from incremental_assets.orchestration.source_watch import source_changes
from incremental_assets.plan.run_plan import plan_window
from incremental_assets.spark.executor import Executor

from helpers import table_rows

UTC = timezone.utc
START, END = datetime(2025, 3, 1, tzinfo=UTC), datetime(2025, 3, 7, tzinfo=UTC)
FIRST_RUN = TimeWindow(START, datetime(2025, 3, 4, tzinfo=UTC))
LAST_RUN = TimeWindow(FIRST_RUN.end, END)


def window(first: int, end: int) -> TimeWindow:
    return TimeWindow(at(first), at(end))


def at(day: int, hour: int = 0, minute: int = 0, second: int = 0, micro: int = 0) -> datetime:
    return datetime(2025, 3, day, hour, minute, second, micro, tzinfo=UTC)


# Day 3 has an empty file (in the shapes with one file per day), day 4 no rows at all; a row without a
# time; the boundaries of a day on both sides; a row before the model's start.
ROWS = [
    (datetime(2025, 2, 28, 23, tzinfo=UTC), 1000),
    (at(1), 1),
    (at(1, 13, 30), 2),
    (at(1, 23, 59, 59, 999999), 4),
    (at(2, 6), 8),
    (at(2, 18, 15), 16),
    (None, 32),
    (at(5, 0, 0, 1), 64),
    (at(5, 22), 128),
    (at(6, 12), 256),
]
EMPTY_DAY = date(2025, 3, 3)
LATE = [(at(2, 12), 512)]  # arrives after the first runs, for a day already run

TIME_TYPES = ("date", "timestamp", "timestamp_ntz", "text", "epoch_millis")
SHAPES = (
    "parquet_file",
    "parquet_folder",
    "parquet_hive",
    "csv_file",
    "csv_folder",
    "csv_hive",
    "json_file",
    "json_folder",
    "json_hive",
    "delta",
    "delta_partitioned",
)

MODEL = """
MODEL (name s.daily, kind INCREMENTAL_BY_TIME_RANGE (time_column ds), start '2025-03-01', cron '@daily');
SELECT CAST(t AS DATE) AS ds, COUNT(*) AS n, SUM(v) AS v FROM raw.src GROUP BY CAST(t AS DATE)
"""


def model_sql(time_type: str) -> str:
    """The daily model; a time in epoch milliseconds made a timestamp first, as a user writes it."""
    return (
        MODEL.replace("CAST(t AS DATE)", "CAST(TIMESTAMP_MILLIS(t) AS DATE)") if time_type == "epoch_millis" else MODEL
    )


def arrow_time(values: list[datetime | None], time_type: str) -> pa.Array:
    if time_type == "date":
        return pa.array([v.date() if v else None for v in values], pa.date32())
    if time_type == "timestamp":
        return pa.array(values, pa.timestamp("us", tz="UTC"))
    if time_type == "timestamp_ntz":
        return pa.array([v.replace(tzinfo=None) if v else None for v in values], pa.timestamp("us"))
    if time_type == "epoch_millis":
        return pa.array([epoch_millis(v) for v in values], pa.int64())
    if time_type == "timestamp_ns":  # pandas' default unit
        return pa.array(values, pa.timestamp("ns", tz="UTC"))
    if time_type == "timestamp_ntz_ns":
        return pa.array([v.replace(tzinfo=None) if v else None for v in values], pa.timestamp("ns"))
    return pa.array([v.strftime("%Y-%m-%d") if v else None for v in values], pa.string())


def epoch_millis(value: datetime | None) -> int | None:
    """Milliseconds since 1970 (rows at one microsecond past a boundary land on it: the day still counts)."""
    return None if value is None else (value - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(milliseconds=1)


def text_time(value: datetime | None, time_type: str) -> str | None:
    """How a CSV or JSON file writes the time: ISO-8601, with an offset for a timestamp with time zone."""
    if value is None:
        return None
    if time_type in ("date", "text"):
        return value.strftime("%Y-%m-%d")
    if time_type == "timestamp":
        return value.isoformat(timespec="microseconds").replace("+00:00", "Z")
    return value.replace(tzinfo=None).isoformat(sep=" ", timespec="microseconds")


def partition_column(time_type: str) -> str:
    """A shape cut by day is cut by the time column itself when it is a date, else by a date column beside it."""
    return "t" if time_type == "date" else "dt"


def table_of(rows: list, time_type: str, *, with_day: bool = False) -> pa.Table:
    columns = {"t": arrow_time([r[0] for r in rows], time_type), "v": pa.array([r[1] for r in rows], pa.int64())}
    if with_day and time_type != "date":
        columns["dt"] = pa.array([r[0].date() if r[0] else None for r in rows], pa.date32())
    return pa.table(columns)


def write_text_file(path: Path, fmt: str, rows: list, time_type: str, *, drop_time: bool = False) -> None:
    records = [
        {"t": epoch_millis(t) if time_type == "epoch_millis" else text_time(t, time_type), "v": v} for t, v in rows
    ]
    if drop_time:
        records = [{"v": r["v"]} for r in records]
    path.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "json":
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
    else:
        header = list(records[0]) if records else (["v"] if drop_time else ["t", "v"])
        lines = [",".join(header)] + [",".join("" if r[k] is None else str(r[k]) for k in header) for r in records]
        path.write_text("\n".join(lines) + "\n")


def by_day(rows: list) -> dict[date | None, list]:
    days: dict[date | None, list] = {EMPTY_DAY: []}
    for row in rows:
        days.setdefault(row[0].date() if row[0] else None, []).append(row)
    return days


def write_file(path: Path, fmt: str, rows: list, time_type: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "parquet":
        pq.write_table(table_of(rows, time_type), path)
    else:
        write_text_file(path, fmt, rows, time_type)


def write_source(location: Path, shape: str, time_type: str, rows: list, *, late: bool = False) -> None:
    """Write ``rows`` in ``shape``; with ``late``, add them as a late arrival (an append, a new file, or the
    one file rewritten in place with them added)."""
    fmt = shape.split("_")[0]
    if fmt == "delta":
        partitioned = shape == "delta_partitioned"
        table = table_of(rows, time_type, with_day=partitioned)
        write_deltalake(
            str(location),
            table,
            mode="append" if late else "error",
            partition_by=[partition_column(time_type)] if partitioned else None,
        )
    elif shape.endswith("_file"):
        write_file(location, fmt, (ROWS + LATE) if late else rows, time_type)
    elif shape.endswith("_folder"):
        for day, group in [("late", rows)] if late else by_day(rows).items():
            write_file(location / f"part-{day or 'null'}.{fmt}", fmt, group, time_type)
    else:  # hive: key=value folders by day (the NULL day in Spark's and Hive's default partition)
        key = partition_column(time_type)
        for day, group in by_day(rows).items():
            folder = location / f"{key}={day or '__HIVE_DEFAULT_PARTITION__'}"
            name = f"{'late' if late else 'part'}.{fmt}"
            if fmt == "parquet":
                table = table_of(group, time_type)
                folder.mkdir(parents=True, exist_ok=True)
                pq.write_table(table.drop_columns(["t"]) if key == "t" else table, folder / name)
            else:
                write_text_file(folder / name, fmt, group, time_type, drop_time=key == "t")


def sources_yaml(shape: str, time_type: str) -> str:
    fmt = shape.split("_")[0]
    location = "data/src" + (f".{fmt}" if shape.endswith("_file") else "")
    text = f"- name: raw.src\n  location: {location}\n  format: {fmt}\n  time_column: t\n"
    if time_type == "text":
        text += "  time_column_format: '%Y-%m-%d'\n"
    if time_type == "epoch_millis":
        text += "  time_column_format: epoch_millis\n"
    return text


def expected(rows: list, end: datetime = END) -> list[tuple]:
    """The model's table recomputed with pandas: rows per UTC day in [start, end) and the sum of v."""
    frame = pd.DataFrame({"t": [r[0] for r in rows], "v": [r[1] for r in rows]}).dropna(subset=["t"])
    frame = frame[(frame.t >= START) & (frame.t < end)]
    grouped = frame.groupby(frame.t.map(lambda t: t.date()))["v"].agg(["count", "sum"])
    return sorted((day, int(n), int(v)) for day, (n, v) in grouped.iterrows())


def make(make_project, shape: str, time_type: str) -> tuple[Path, Path]:
    root = make_project(
        {"sources.yaml": sources_yaml(shape, time_type), "models/daily.sql": model_sql(time_type)},
        name=f"{shape}-{time_type}",
    )
    location = root / ("data/src" + (f".{shape.split('_')[0]}" if shape.endswith("_file") else ""))
    write_source(location, shape, time_type, ROWS)
    return root, location


def late_windows(source, marker: str, shape: str) -> list[TimeWindow]:
    """What the automation sees of the late row: its day (a one-file source rewritten in place: every day
    the file holds, the late one among them)."""
    _, changed, note = source_changes(source, marker)
    assert note is None
    late_day = window(2, 3)
    assert any(w.start <= late_day.start and late_day.end <= w.end for w in changed), changed
    if not shape.endswith("_file"):
        assert changed == [late_day]
    return [late_day]


@pytest.mark.parametrize("time_type", TIME_TYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_a_daily_model_over_each_shape_and_time_type_equals_pandas(spark, make_project, shape, time_type):
    """Three runs: the first days, the day a late row arrived for, the rest."""
    root, location = make(make_project, shape, time_type)
    project = load_project(root)
    source, model = project.sources["raw.src"], project.model("s.daily")
    marker = source_changes(source, None)[0]
    executor = Executor(spark, project)
    uri = delta.table_uri(project.settings.warehouse, model.name)

    for plan in plan_window(project, model, FIRST_RUN):
        executor.execute(plan)
    assert table_rows(uri) == expected(ROWS, FIRST_RUN.end)

    write_source(location, shape, time_type, LATE, late=True)
    for run in [*late_windows(source, marker, shape), LAST_RUN]:
        for plan in plan_window(project, model, run):
            executor.execute(plan)
    assert table_rows(uri) == expected(ROWS + LATE)


@pytest.mark.parametrize("time_type", ["timestamp_ns", "timestamp_ntz_ns"])
@pytest.mark.parametrize("shape", [shape for shape in SHAPES if shape.startswith("parquet")])
def test_parquet_with_times_in_nanoseconds_as_pandas_writes_them_equals_pandas(spark, make_project, shape, time_type):
    """Timestamps in nanoseconds, with and without a time zone, in every Parquet shape: the same three runs."""
    test_a_daily_model_over_each_shape_and_time_type_equals_pandas(spark, make_project, shape, time_type)


@pytest.mark.parametrize(
    "shape, time_type",
    [
        ("parquet_file", "timestamp_ntz"),
        ("delta", "timestamp_ntz"),
        ("json_hive", "text"),
    ],
)
def test_the_cli_runs_a_shape_in_windows_and_with_auto(
    spark, make_project, tmp_path, monkeypatch, capsys, shape, time_type
):
    """The command a user types: a window, then ``--auto`` up to an end, then the late day again."""
    root, location = make(make_project, shape, time_type)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    project = load_project(root)
    source = project.sources["raw.src"]
    marker = source_changes(source, None)[0]
    uri = delta.table_uri(project.settings.warehouse, "s.daily")

    def run(*args: str) -> None:
        code = cli.main(["run", "s.daily", *args, "--project", str(root)])
        out = capsys.readouterr()
        assert code == 0, out.out + out.err

    run("--start", "2025-03-01", "--end", "2025-03-03")
    run("--auto", "--end", "2025-03-05")
    assert table_rows(uri) == expected(ROWS, at(5))
    write_source(location, shape, time_type, LATE, late=True)
    late = late_windows(source, marker, shape)[0]
    run("--start", late.start.date().isoformat(), "--end", late.end.date().isoformat())
    run("--auto", "--end", END.date().isoformat())
    assert table_rows(uri) == expected(ROWS + LATE)


BAD = {
    "json_folder": (
        "part-x.json",
        '{"t": "2025-03-01", "v": 1}\n{"t": "2025-03-01", "v": \n',
        "line 2 is not a complete JSON record (fix: correct or remove that line)",
    ),
    "csv_file": (
        None,
        "t,v\n2025-03-01 10:00:00,1\n2025-03-01 11:00:00,abc\n",
        "line 3: column v holds 'abc', which is not a double (fix: correct the value, or declare the "
        "column's type in sources.yaml)",
    ),
    "csv_folder": (
        "part-x.csv",
        "t,v\n2025-03-01 10:00:00,1\nsoon,2\n",
        "line 3: column t holds 'soon', which is not a timestamp "
        "(fix: correct the value, or declare the column's type and its time_column_format in sources.yaml)",
    ),
    "parquet_file": (
        None,
        "PAR1 not really",
        "is not a Parquet file, or is not complete yet (fix: move it out of {folder}; "
        "a file still being written is read by a run after it is complete)",
    ),
}


@pytest.mark.parametrize("shape", sorted(BAD))
def test_a_bad_record_is_one_line_naming_source_file_line_and_column(spark, make_project, shape):
    name, content, message = BAD[shape]
    root, location = make(make_project, shape, "timestamp_ntz")
    bad = location / name if name else location
    bad.write_text(content)
    project = load_project(root)
    model = project.model("s.daily")
    line = f"source raw.src: file {bad} " + message.format(folder=bad.parent)
    with pytest.raises(SourceDataError) as failed:
        for plan in plan_window(project, model, FIRST_RUN):
            Executor(spark, project).execute(plan)
    assert str(failed.value) == line
    assert not delta.exists(delta.table_uri(project.settings.warehouse, model.name))


def test_a_csv_text_time_that_looks_like_a_number_is_read_as_its_format_says(
    spark, make_project, monkeypatch, tmp_path, capsys
):
    """``20240101`` with ``time_column_format '%Y%m%d'``: the CSV reader infers an integer; the source's format
    says text, so it is read as text (before: Spark's internal error)."""
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    source = (
        "- {name: raw.events, location: data/events.csv, format: csv, time_column: ds, time_column_format: '%Y%m%d'}\n"
    )
    model = """
        MODEL (name s.daily, kind INCREMENTAL_BY_TIME_RANGE (time_column day), start '2024-01-01');
        SELECT CAST(TO_TIMESTAMP(ds, 'yyyyMMdd') AS DATE) AS day, COUNT(*) AS n, SUM(amount) AS amount
        FROM raw.events WHERE ds BETWEEN DATE_FORMAT(@start_ds, 'yyyyMMdd') AND DATE_FORMAT(@end_ds, 'yyyyMMdd')
        GROUP BY 1
    """
    root = make_project({"sources.yaml": source, "models/daily.sql": model})
    (root / "data").mkdir()
    (root / "data" / "events.csv").write_text("ds,amount\n20240101,1.0\n20240102,2.0\n20240102,0.5\n")
    capsys.readouterr()
    code = cli.main(["run", "--auto", "--end", "2024-01-03", "--project", str(root)])
    out = capsys.readouterr()
    assert code == 0, out.out + out.err
    uri = delta.table_uri(load_project(root).settings.warehouse, "s.daily")
    assert [(r[0], r[1], r[2]) for r in table_rows(uri)] == [(date(2024, 1, 1), 1, 1.0), (date(2024, 1, 2), 2, 2.5)]


DAILY_AMOUNT = """
MODEL (name s.daily, kind INCREMENTAL_BY_TIME_RANGE (time_column ds), start '2024-01-01');
SELECT CAST(ts AS DATE) AS ds, COUNT(*) AS n, SUM(amount) AS amount FROM raw.events
WHERE ts BETWEEN @start_ts AND @end_ts GROUP BY 1
"""


def test_iso_times_in_json_or_csv_text_are_compared_as_times(spark, make_project, monkeypatch, tmp_path, capsys):
    """JSON never infers a time: ``2024-01-01T12:00:00Z`` stayed text and the window compared text ('T' after
    ' '), dropping rows depending on how the windows were cut. A CSV value that is not a time (which turns the
    inferred column into text) fails the run with one line naming file, line and column, exit 2."""
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    rows = [("2024-01-01T12:00:00Z", 1.0), ("2024-01-02T12:00:00Z", 2.0), ("2024-01-03T23:30:00+00:00", 4.0)]
    json_root = make_project(
        {
            "sources.yaml": "- {name: raw.events, location: data/events.json, format: json, time_column: ts}\n",
            "models/daily.sql": DAILY_AMOUNT,
        },
        name="json",
    )
    (json_root / "data").mkdir()
    (json_root / "data" / "events.json").write_text("".join(json.dumps({"ts": t, "amount": a}) + "\n" for t, a in rows))
    expected = [(date(2024, 1, 1), 1, 1.0), (date(2024, 1, 2), 1, 2.0), (date(2024, 1, 3), 1, 4.0)]
    uri = delta.table_uri(load_project(json_root).settings.warehouse, "s.daily")
    for args in (["--auto", "--end", "2024-01-04"], ["s.daily", "--start", "2024-01-01", "--end", "2024-01-02"]):
        capsys.readouterr()
        code = cli.main(["run", *args, "--project", str(json_root)])
        out = capsys.readouterr()
        assert code == 0, out.out + out.err
        assert [(r[0], r[1], r[2]) for r in table_rows(uri)] == expected

    csv_root = make_project(
        {
            "sources.yaml": "- {name: raw.events, location: data/events.csv, format: csv, time_column: ts}\n",
            "models/daily.sql": DAILY_AMOUNT,
        },
        name="csv",
    )
    (csv_root / "data").mkdir()
    lines = "".join(f"{t},{a}\n" for t, a in rows)
    (csv_root / "data" / "events.csv").write_text("ts,amount\n" + lines + "not-a-time,8.0\n")
    capsys.readouterr()
    code = cli.main(["run", "--auto", "--end", "2024-01-04", "--project", str(csv_root)])
    out = capsys.readouterr()
    text = out.out + out.err
    assert code == 2, text
    assert "events.csv" in text and "line 5" in text and "not-a-time" in text, text
    assert "Traceback" not in text and "at org.apache" not in text
    assert not delta.exists(delta.table_uri(load_project(csv_root).settings.warehouse, "s.daily"))
