"""A project in another time zone: its intervals are the days of that zone, whatever the source's time type.

The rows are placed near the edges of the zone's days, where the zone's day and UTC's differ (late evening
in New York is the next day in UTC; early morning in India the previous one), one row per file or Delta commit
so that a reader pruning files by their time statistics decides each row. Days run one at a time through the
CLI must give what pandas gives grouping the rows by their day in the zone, and a late row near a day's edge
must be seen by the automation as new data for the zone's day it belongs to.
"""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import write_deltalake

from incremental_assets import cli, delta
from incremental_assets.load.project import load_project
from incremental_assets.model import clock
from incremental_assets.model.intervals import TimeWindow
from incremental_assets.model.source_time import zone
from incremental_assets.orchestration.source_watch import source_changes

from helpers import table_rows

UTC = timezone.utc
FIRST = date(2025, 3, 1)
DAYS = 3
# Wall times in the project's zone: each day's first and last minutes and its middle; a row without a time.
WALL = [
    datetime(2025, 3, 1, 0, 0),
    datetime(2025, 3, 1, 2, 30),
    datetime(2025, 3, 1, 23, 30),
    datetime(2025, 3, 2, 3, 0),
    datetime(2025, 3, 2, 12, 0),
    datetime(2025, 3, 3, 0, 15),
    datetime(2025, 3, 3, 21, 0),
    None,
]
LATE = datetime(2025, 3, 2, 23, 45)  # arrives after every day ran: New York's 2 March, UTC's 3 March

MODEL = """
MODEL (name s.daily, kind INCREMENTAL_BY_TIME_RANGE (time_column ds), start '2025-03-01', cron '@daily');
SELECT CAST(t AS DATE) AS ds, COUNT(*) AS n, SUM(v) AS v FROM raw.src GROUP BY CAST(t AS DATE)
"""

CASES = [
    ("America/New_York", "parquet", "timestamp_ntz"),
    ("America/New_York", "parquet", "timestamp"),
    ("America/New_York", "delta", "timestamp_ntz"),
    ("America/New_York", "delta", "timestamp"),
    ("America/New_York", "delta_by_day", "timestamp_ntz"),
    ("America/New_York", "csv", "text"),
    ("+05:30", "parquet", "timestamp_ntz"),
    ("+05:30", "delta", "timestamp"),
    ("+05:30", "delta_by_day", "timestamp_ntz"),
]


def column(values: list[datetime | None], time_type: str, tz_name: str) -> pa.Array:
    if time_type == "timestamp":  # the instant the wall time is in the zone
        tz = zone(tz_name)
        return pa.array(
            [v.replace(tzinfo=tz).astimezone(UTC) if v else None for v in values], pa.timestamp("us", "UTC")
        )
    return pa.array(values, pa.timestamp("us"))


def write_rows(location: Path, shape: str, time_type: str, tz_name: str, rows: list[tuple], tag: str) -> None:
    """One file (or Delta commit) per row."""
    for i, (wall, value) in enumerate(rows):
        table = pa.table({"t": column([wall], time_type, tz_name), "v": pa.array([value], pa.int64())})
        if shape == "parquet":
            location.mkdir(parents=True, exist_ok=True)
            pq.write_table(table, location / f"{tag}-{i}.parquet")
        elif shape == "csv":
            location.mkdir(parents=True, exist_ok=True)
            (location / f"{tag}-{i}.csv").write_text(f"t,v\n{wall.isoformat(sep=' ') if wall else ''},{value}\n")
        else:
            if shape == "delta_by_day":
                table = table.append_column("dt", pa.array([wall.date() if wall else None], pa.date32()))
            write_deltalake(
                str(location), table, mode="append", partition_by=["dt"] if shape == "delta_by_day" else None
            )


def expected(rows: list[tuple]) -> list[tuple]:
    """Rows per day of the zone (their wall date), recomputed with pandas."""
    frame = pd.DataFrame({"t": [r[0] for r in rows], "v": [r[1] for r in rows]}).dropna(subset=["t"])
    grouped = frame.groupby(frame.t.dt.date)["v"].agg(["count", "sum"])
    return sorted((day, int(n), int(v)) for day, (n, v) in grouped.iterrows())


@pytest.fixture
def session_zone(spark):
    """The CLI sets the session's zone to the project's; the suite's shared session goes back to UTC."""
    yield
    spark.conf.set("spark.sql.session.timeZone", "UTC")


@pytest.mark.parametrize("tz_name, shape, time_type", CASES)
def test_days_of_a_project_in_another_zone_hold_that_zone_s_days(
    spark, session_zone, make_project, tmp_path, monkeypatch, capsys, tz_name, shape, time_type
):
    fmt = "delta" if shape.startswith("delta") else shape
    root = make_project(
        {
            "incremental_assets.yaml": f"timezone: '{tz_name}'\n",
            "sources.yaml": f"- name: raw.src\n  location: data/src\n  format: {fmt}\n  time_column: t\n",
            "models/daily.sql": MODEL,
        },
        name=f"{shape}-{time_type}-{tz_name.replace('/', '_')}",
    )
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    location = root / "data" / "src"
    rows = [(wall, 2**i) for i, wall in enumerate(WALL)]
    write_rows(location, shape, time_type, tz_name, rows, "part")
    project = load_project(root)
    source = project.sources["raw.src"]
    marker = source_changes(source, None, zone(tz_name))[0]
    uri = delta.table_uri(project.settings.warehouse, "s.daily")

    def run(day: date) -> None:
        args = ["--start", day.isoformat(), "--end", (day + timedelta(days=1)).isoformat()]
        code = cli.main(["run", "s.daily", *args, "--project", str(root)])
        out = capsys.readouterr()
        assert code == 0, out.out + out.err

    for offset in range(DAYS):
        run(FIRST + timedelta(days=offset))
    assert table_rows(uri) == expected(rows)

    late = [(LATE, 1024)]
    write_rows(location, shape, time_type, tz_name, late, "late")
    _, changed, note = source_changes(source, marker, zone(tz_name))
    assert note is None
    late_day = datetime(2025, 3, 2, tzinfo=UTC)
    assert changed == [TimeWindow(late_day, late_day + timedelta(days=1))]
    run(late_day.date())
    assert table_rows(uri) == expected(rows + late)


def test_a_day_of_a_zone_behind_utc_runs_once_it_is_over_there(
    spark, session_zone, make_project, tmp_path, monkeypatch, capsys
):
    """At 01:00 UTC on 2 March it is 20:00 on 1 March in New York: that day is still open and ``run --auto``
    leaves it; at 05:00 UTC it is over and runs, with its rows of the evening (UTC's 2 March)."""
    root = make_project(
        {
            "incremental_assets.yaml": "timezone: America/New_York\n",
            "sources.yaml": "- name: raw.src\n  location: data/src\n  format: parquet\n  time_column: t\n",
            "models/daily.sql": MODEL,
        },
        name="zone-behind-utc",
    )
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    rows = [(datetime(2025, 3, 1, 9), 1), (datetime(2025, 3, 1, 19, 30), 2)]
    write_rows(root / "data" / "src", "parquet", "timestamp_ntz", "America/New_York", rows, "part")
    uri = delta.table_uri(load_project(root).settings.warehouse, "s.daily")

    def auto(at: datetime) -> str:
        with clock.pinned(at):
            code = cli.main(["run", "s.daily", "--auto", "--project", str(root)])
            out = capsys.readouterr()
            assert code == 0, out.out + out.err
            assert cli.main(["status", "s.daily", "--project", str(root)]) == 0
            return capsys.readouterr().out

    status = auto(datetime(2025, 3, 2, 1, tzinfo=UTC))
    assert not delta.exists(uri) or table_rows(uri) == []
    assert "2025-03-01" not in status, status  # no gap yet: the day is open
    auto(datetime(2025, 3, 2, 5, 30, tzinfo=UTC))
    assert table_rows(uri) == [(date(2025, 3, 1), 2, 3)]
