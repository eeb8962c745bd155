"""`run --auto --end <hour>` from cron, every hour, as a user runs it instead of the automation sensor: new
hours, empty hours and late rows in a Delta source and late files in a file source; after every cycle
each table equals a recompute from the sources with pandas. The sensor and `run --auto` share what they
noticed: a late row computed by one is not computed again by the other."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable, write_deltalake
from test_automation import Automation

from incremental_assets import cli, delta
from incremental_assets.load.project import load_project
from incremental_assets.orchestration.build_definitions import build_definitions
from incremental_assets.orchestration.instance import open_instance

from helpers import table_rows, utc

SOURCES = """\
- name: raw.events
  location: data/events
  format: delta
  time_column: ts
  interval_unit: hour
- name: raw.clicks
  location: data/clicks
  format: parquet
  time_column: ts
  interval_unit: hour
"""
MODELS = {
    "models/hourly.sql": """
        MODEL (name s.hourly, kind INCREMENTAL_BY_TIME_RANGE (time_column h), start '2025-06-01', cron '@hourly');
        SELECT date_trunc('HOUR', ts) AS h, COUNT(*) AS n, SUM(v) AS v FROM raw.events WHERE ts BETWEEN @start_dt
          AND @end_dt GROUP BY 1
    """,
    "models/daily.sql": """
        MODEL (name s.daily, kind INCREMENTAL_BY_TIME_RANGE (time_column ds), start '2025-06-01');
        SELECT CAST(h AS DATE) AS ds, SUM(n) AS n, SUM(v) AS v FROM s.hourly WHERE h BETWEEN @start_dt AND @end_dt
          GROUP BY 1
    """,
    "models/clicks.sql": """
        MODEL (name s.clicks, kind INCREMENTAL_BY_TIME_RANGE (time_column h), start '2025-06-01', cron '@hourly');
        SELECT date_trunc('HOUR', ts) AS h, COUNT(*) AS c FROM raw.clicks WHERE ts BETWEEN @start_dt AND @end_dt
          GROUP BY 1
    """,
}
FIRST = utc(2025, 6, 1, 18)  # the first cycle's hour: the source holds every hour of the day before it


def _events(path: Path, stamps: list[datetime]) -> None:
    table = pa.table(
        {
            "ts": pa.array(stamps, pa.timestamp("us", tz="UTC")),
            "v": pa.array([s.minute + s.hour for s in stamps], pa.int64()),
        }
    )
    write_deltalake(str(path), table, mode="append")


def _clicks(folder: Path, name: str, stamps: list[datetime]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"ts": pa.array(stamps, pa.timestamp("us", tz="UTC"))}), folder / name)


def _recompute(root: Path, end: datetime, *, with_clicks: bool = True) -> dict[str, list[tuple]]:
    """Every table as pandas computes it from the sources: complete hours (and days) before ``end``."""
    events = DeltaTable(str(root / "data" / "events")).to_pandas()
    files = sorted((root / "data" / "clicks").glob("*.parquet")) if with_clicks else []
    clicks = (
        pd.concat([pd.read_parquet(p) for p in files])
        if files
        else pd.DataFrame({"ts": pd.Series([], dtype="datetime64[us, UTC]")})
    )
    cut = pd.Timestamp(end)
    events, clicks = events[events.ts < cut], clicks[clicks.ts < cut]
    events = events.assign(h=events.ts.dt.floor("h"))
    hourly = events.groupby("h").agg(n=("v", "size"), v=("v", "sum")).reset_index()
    days = hourly.assign(ds=hourly.h.dt.date)
    days = days[days.h < pd.Timestamp(end.replace(hour=0))]
    daily = days.groupby("ds").agg(n=("n", "sum"), v=("v", "sum")).reset_index()
    by_hour = clicks.assign(h=clicks.ts.dt.floor("h")).groupby("h").size().reset_index(name="c")

    def rows(frame: pd.DataFrame) -> list[tuple]:
        out = []
        for record in frame.itertuples(index=False):
            out.append(
                tuple(
                    v.tz_convert(None).to_pydatetime()
                    if isinstance(v, pd.Timestamp)
                    else int(v)
                    if not hasattr(v, "year")
                    else v
                    for v in record
                )
            )
        return sorted(out)

    out = {"s.hourly": rows(hourly), "s.daily": rows(daily), "s.clicks": rows(by_hour)}
    return out if with_clicks else {k: v for k, v in out.items() if k != "s.clicks"}


def _tables(warehouse: str) -> dict[str, list[tuple]]:
    uris = {name: delta.table_uri(warehouse, name) for name in ("s.hourly", "s.daily", "s.clicks")}
    return {
        name: table_rows(uri) if delta.exists(uri) else [] for name, uri in uris.items()
    }  # no complete day yet: no table


def _run_auto(root: Path, capsys, end: datetime) -> str:
    capsys.readouterr()
    assert cli.main(["run", "--auto", "--end", end.isoformat(), "--project", str(root)]) == 0, capsys.readouterr()
    return capsys.readouterr().out


def test_hourly_run_auto_from_cron_keeps_every_table_equal_to_a_recompute_with_late_rows_and_files(
    make_project, tmp_path, monkeypatch, capsys, spark
):
    root = make_project({"sources.yaml": SOURCES, **MODELS})
    events, clicks = root / "data" / "events", root / "data" / "clicks"
    _events(events, [utc(2025, 6, 1, h, 10) for h in range(18)])
    _clicks(clicks, "c0.parquet", [utc(2025, 6, 1, h, 20) for h in range(0, 18, 3)])
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    project = load_project(root)
    late_said = []
    for cycle in range(12):
        hour = FIRST + timedelta(hours=cycle)
        if hour.hour % 4 != 1:  # every fourth hour has no events at all
            _events(events, [hour + timedelta(minutes=5), hour + timedelta(minutes=35)])
        if cycle % 3 == 0:
            _clicks(clicks, f"c{cycle + 1}.parquet", [hour + timedelta(minutes=7)])
        if cycle in (4, 8, 11):  # a late row for an hour five hours back (already computed)
            _events(events, [hour - timedelta(hours=5, minutes=-50)])
        if cycle == 6:  # a late file of clicks for an hour five hours back
            _clicks(
                clicks, "late.parquet", [hour - timedelta(hours=5, minutes=-1), hour - timedelta(hours=5, minutes=-2)]
            )
        end = hour + timedelta(hours=1)
        out = _run_auto(root, capsys, end)
        late_said += [line for line in out.splitlines() if "new source data in" in line]
        assert _tables(project.settings.warehouse) == _recompute(root, end), f"cycle {cycle}, --end {end}"

    # Each late hour was recomputed once, in the cycle its row arrived; the day above it followed.
    assert late_said == [
        "s.hourly: new source data in [2025-06-01 17:00, 2025-06-01 18:00) since computed; computing again",
        "s.clicks: new source data in [2025-06-01 19:00, 2025-06-01 20:00) since computed; computing again",
        "s.hourly: new source data in [2025-06-01 21:00, 2025-06-01 22:00) since computed; computing again",
        "s.hourly: new source data in [2025-06-02, 2025-06-02 01:00) since computed; computing again",
    ]


def test_a_late_row_computed_by_run_auto_is_not_computed_again_by_the_sensor_nor_the_other_way(
    make_project, tmp_path, monkeypatch, capsys, spark
):
    root = make_project({"sources.yaml": SOURCES, **{k: v for k, v in MODELS.items() if "clicks" not in k}})
    (root / "sources.yaml").write_text(SOURCES.split("- name: raw.clicks")[0])
    events = root / "data" / "events"
    _events(events, [utc(2025, 6, 1, h, 10) for h in range(24)])
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    project = load_project(root)
    end = utc(2025, 6, 2)
    _run_auto(root, capsys, end)
    auto = Automation(build_definitions(project), open_instance(project.settings.dagster_home), monkeypatch)
    assert auto.tick(end) == [] and auto.last_skip == "every model is up to date"

    # run --auto first: the sensor then has nothing to do.
    _events(events, [utc(2025, 6, 1, 9, 40)])
    assert "s.hourly: new source data in [2025-06-01 09:00, 2025-06-01 10:00)" in _run_auto(root, capsys, end)
    assert auto.tick(end) == [] and auto.last_skip == "every model is up to date"

    # The sensor first (its run executed): `run --auto` then computes nothing.
    _events(events, [utc(2025, 6, 1, 3, 40)])
    assert auto.tick(end) == [("s/hourly", "2025-06-01-03:00", "2025-06-01-03:00")]
    assert auto.tick(end) == [("s/daily", "2025-06-01", "2025-06-01")]
    out = _run_auto(root, capsys, end)
    assert "new source data" not in out and "0 run(s) succeeded" in out

    # Noticed by the sensor but its run not launched yet (or failed): still pending for `run --auto`.
    _events(events, [utc(2025, 6, 1, 5, 40)])
    assert auto.tick(end, run=False) == [("s/hourly", "2025-06-01-05:00", "2025-06-01-05:00")]
    assert "s.hourly: new source data in [2025-06-01 05:00, 2025-06-01 06:00)" in _run_auto(root, capsys, end)
    assert auto.tick(end) == []
    assert auto.failed == []
    tables = {name: table_rows(delta.table_uri(project.settings.warehouse, name)) for name in ("s.hourly", "s.daily")}
    assert tables == _recompute(root, end, with_clicks=False)


def test_an_old_sensor_cursor_hands_its_watermarks_and_pending_windows_to_the_shared_record(
    make_project, tmp_path, monkeypatch
):
    from incremental_assets.orchestration.source_watch import read_state

    root = make_project(
        {"sources.yaml": SOURCES.split("- name: raw.clicks")[0], "models/hourly.sql": MODELS["models/hourly.sql"]}
    )
    _events(root / "data" / "events", [utc(2025, 6, 1, h, 10) for h in range(6)])
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    project = load_project(root)
    instance = open_instance(project.settings.dagster_home)
    old = json.dumps(
        {
            "version": 2,
            "sources": {"raw.events": "v0"},
            "pending": {"s.hourly": [["2025-06-01T02:00:00+00:00", "2025-06-01T03:00:00+00:00"]]},
        }
    )
    auto = Automation(build_definitions(project), instance, monkeypatch)
    auto.cursor = old
    _events(root / "data" / "events", [utc(2025, 6, 1, 4, 50)])  # version 1: new data the old cursor had not seen
    data = auto.sense(utc(2025, 6, 1, 6))
    assert json.loads(data.cursor)["version"] == 3 and "sources" not in json.loads(data.cursor)
    state = read_state(instance, project)
    assert state.sources == {"raw.events": "v1"}
    assert [str(w) for e in state.touched["s.hourly"] for w in e.windows] == [
        "[2025-06-01 02:00, 2025-06-01 03:00)",
        "[2025-06-01 04:00, 2025-06-01 05:00)",
    ]


def test_new_delta_data_is_read_from_the_commits_after_the_watermark_and_compaction_is_not_new_data(tmp_path):
    path = tmp_path / "events"
    for hour in (1, 2, 3):  # versions 0, 1, 2
        _events(path, [utc(2025, 6, 1, hour, 10)])
    assert delta.changed_time_ranges(str(path), 1, "ts") == (2, [(utc(2025, 6, 1, 3, 10), utc(2025, 6, 1, 3, 10))])
    # A compaction rewrites the files (dataChange false): no new data.
    DeltaTable(str(path)).optimize.compact()
    assert delta.changed_time_ranges(str(path), 2, "ts") == (3, [])
    _events(path, [utc(2025, 6, 1, 4, 10)])  # version 4
    assert delta.changed_time_ranges(str(path), 3, "ts") == (4, [(utc(2025, 6, 1, 4, 10), utc(2025, 6, 1, 4, 10))])
    # The commits after the watermark cleaned up behind a checkpoint: every file of the snapshot that may
    # be new counts (more recomputed than needed, nothing missed).
    table = DeltaTable(str(path))
    table.create_checkpoint()
    for version in range(4):
        (path / "_delta_log" / f"{version:020d}.json").unlink()
    version, ranges = delta.changed_time_ranges(str(path), 1, "ts")
    assert version == 4
    assert all(any(lo <= utc(2025, 6, 1, h, 10) <= hi for lo, hi in ranges) for h in (2, 3, 4))


def test_a_delta_source_without_a_commit_since_the_watermark_is_not_opened(tmp_path, monkeypatch):
    from incremental_assets.model.project import Source
    from incremental_assets.orchestration import source_watch

    path = tmp_path / "events"
    source = Source(name="raw.events", location=str(path), format="delta", time_column="ts", interval_unit="hour")
    _events(path, [utc(2025, 6, 1, 1, 10)])  # version 0
    marker, windows, _ = source_watch.source_changes(source, None)
    assert (marker, windows) == ("v0", []) and delta.still_at(str(path), 0)

    opened: list[str] = []
    real = delta.exists
    monkeypatch.setattr(delta, "exists", lambda uri: opened.append(uri) or real(uri))
    assert source_watch.source_changes(source, "v0")[:2] == ("v0", []) and opened == []  # two stat calls
    _events(path, [utc(2025, 6, 1, 2, 10)])  # version 1: read as before
    assert not delta.still_at(str(path), 0)
    marker, windows, _ = source_watch.source_changes(source, "v0")
    assert marker == "v1" and [(w.start, w.end) for w in windows] == [(utc(2025, 6, 1, 2), utc(2025, 6, 1, 3))]
    assert opened == [str(path)]
    # The table written again from scratch, back at version 0: noticed, not taken for "nothing new".
    import shutil

    shutil.rmtree(path)
    _events(path, [utc(2025, 6, 1, 3, 10)])
    assert not delta.still_at(str(path), 1)
    assert source_watch.source_changes(source, "v1")[0] == "v0"
