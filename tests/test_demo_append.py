"""A demo that lives: the example shop's data reaches a given "now" and grows in place, hour by hour, with
quiet hours and late rows; every write is whole for a polling reader; `run --auto` then leaves no gap."""

from __future__ import annotations

import shutil
import subprocess
import sys
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable

from incremental_assets import cli
from incremental_assets.demo import (
    SOURCE_LOCATIONS,
    append_demo_hours,
    generate_demo_data,
    last_complete_hour,
    loaded_until,
    new_hours,
)

from conftest import REPO

UTC = timezone.utc
NOW = datetime(2024, 12, 2, 6, 37, 12, tzinfo=UTC)  # the injected clock: the last complete hour ends 06:00
T0 = datetime(2024, 12, 2, 6, tzinfo=UTC)
ORDERS_PER_DAY = 40


def orders(project: Path, version: int | None = None) -> pa.Table:
    return DeltaTable(project / SOURCE_LOCATIONS["raw.orders"], version=version).to_pyarrow_table().sort_by("order_id")


def items(project: Path) -> pa.Table:
    return DeltaTable(project / SOURCE_LOCATIONS["raw.order_items"]).to_pyarrow_table()


def hour_of(ts: pa.Array) -> list[datetime]:
    return [t.replace(minute=0, second=0, microsecond=0) for t in ts.to_pylist()]


def added(before: pa.Table, after: pa.Table) -> pa.Table:
    return after.filter(pc.invert(pc.is_in(after["order_id"], before["order_id"])))


def signature(table: pa.Table) -> list[tuple]:
    """Orders without their ids (an append numbers them after the existing ones)."""
    return sorted(zip(*(table[c].to_pylist() for c in ("order_ts", "customer_id", "status", "channel"))))


@pytest.fixture
def shop(tmp_path) -> Path:
    generate_demo_data(tmp_path, start=date(2024, 11, 25), orders_per_day=ORDERS_PER_DAY, until=last_complete_hour(NOW))
    return tmp_path


def test_generated_data_reaches_the_last_complete_hour(shop):
    assert last_complete_hour(NOW) == T0 and loaded_until(shop) == T0 and loaded_until(shop, "raw.order_items") == T0
    table = orders(shop)
    ts = table["order_ts"].to_pylist()
    assert min(ts) >= datetime(2024, 11, 25, tzinfo=UTC) and max(ts) < T0
    assert max(ts) >= T0 - timedelta(hours=6)  # the morning of the last day is there, up to its last hour
    # The file sources were written under a temporary name and renamed: no leftovers.
    assert not list((shop / "data" / "raw").glob(".*.tmp"))
    # Cut at an hour, the data is exactly the whole-day data before that hour (same random stream).
    whole = Path(shop.parent / "whole")
    generate_demo_data(whole, start=date(2024, 11, 25), days=8, orders_per_day=ORDERS_PER_DAY)
    expected = orders(whole).filter(pc.less(orders(whole)["order_ts"], pa.scalar(T0, pa.timestamp("us", tz="UTC"))))
    assert signature(table) == signature(expected)


def test_appended_hours_land_in_their_hours_with_quiet_hours_and_late_rows(shop, tmp_path):
    seen_late, seen_quiet = 0, 0
    before = orders(shop)
    on_time_all = []
    versions = DeltaTable(shop / SOURCE_LOCATIONS["raw.orders"]).version()
    start = T0
    for step in range(6):  # six appends of 8 hours: two days, nights included
        result = append_demo_hours(shop, hours=8, orders_per_day=ORDERS_PER_DAY)
        assert (result.start, result.end) == (start, start + timedelta(hours=8))
        after = orders(shop)
        new = added(before, after)
        assert new.num_rows == result.rows["raw.orders"]
        assert (
            DeltaTable(shop / SOURCE_LOCATIONS["raw.orders"]).version() == versions + step + 1
        )  # one commit per append
        hours = hour_of(new["order_ts"])
        on_time = [h for h in hours if result.start <= h < result.end]
        late = [h for h in hours if h < result.start]
        assert len(on_time) + len(late) == new.num_rows, "a row after the append's end"
        assert len(late) == result.late_orders and set(late) == set(result.late_hours)
        assert all(result.start - timedelta(hours=6) <= h for h in late), "late rows are for the hours loaded last"
        # Quiet hours: appended hours without any order, reported as such.
        assert set(result.quiet_hours) == {result.start + timedelta(hours=i) for i in range(8)} - set(on_time)
        seen_late += len(late)
        seen_quiet += len(result.quiet_hours)
        on_time_all.append(
            new.filter(pc.greater_equal(new["order_ts"], pa.scalar(result.start, pa.timestamp("us", tz="UTC"))))
        )
        before, start = after, result.end
    assert seen_late > 0 and seen_quiet > 0, (seen_late, seen_quiet)
    assert loaded_until(shop) == T0 + timedelta(hours=48)

    # The on-time rows are exactly what the days' streams hold for those hours.
    whole = tmp_path / "whole"
    generate_demo_data(whole, start=date(2024, 11, 25), orders_per_day=ORDERS_PER_DAY, until=T0 + timedelta(hours=48))
    reference = orders(whole)
    reference = reference.filter(pc.greater_equal(reference["order_ts"], pa.scalar(T0, pa.timestamp("us", tz="UTC"))))
    assert signature(pa.concat_tables(on_time_all)) == signature(reference)

    # Ids stay unique; every order line belongs to an order, at the order's time.
    table, lines = orders(shop), items(shop)
    assert len(set(table["order_id"].to_pylist())) == table.num_rows
    by_id = dict(zip(table["order_id"].to_pylist(), table["order_ts"].to_pylist()))
    assert all(by_id[o] == t for o, t in zip(lines["order_id"].to_pylist(), lines["order_ts"].to_pylist()))
    assert set(lines["order_id"].to_pylist()) == set(by_id)


def test_append_up_to_now_and_nothing_to_append(shop):
    result = append_demo_hours(shop, now=NOW + timedelta(hours=3))
    assert (result.start, result.end, result.hours) == (T0, T0 + timedelta(hours=3), 3)
    version = DeltaTable(shop / SOURCE_LOCATIONS["raw.orders"]).version()
    again = append_demo_hours(shop, now=NOW + timedelta(hours=3, minutes=20))
    assert again.hours == 0 and again.rows["raw.orders"] == 0
    assert DeltaTable(shop / SOURCE_LOCATIONS["raw.orders"]).version() == version  # no empty commit
    with pytest.raises(ValueError, match="not on an hour boundary"):
        append_demo_hours(shop, until=NOW + timedelta(hours=5))


def test_append_stops_at_the_clock_unless_ahead(shop):
    result = append_demo_hours(shop, hours=6, now=NOW + timedelta(hours=2), orders_per_day=ORDERS_PER_DAY)
    assert (result.end, result.asked_end) == (T0 + timedelta(hours=2), T0 + timedelta(hours=6))
    assert loaded_until(shop) == T0 + timedelta(hours=2)
    assert max(orders(shop)["order_ts"].to_pylist()) < T0 + timedelta(hours=2)  # no order from the future
    ahead = append_demo_hours(shop, hours=6, now=NOW + timedelta(hours=2), orders_per_day=ORDERS_PER_DAY, ahead=True)
    assert (ahead.end, ahead.asked_end) == (T0 + timedelta(hours=8), None) and loaded_until(shop) == T0 + timedelta(
        hours=8
    )


def _cli(project: Path, *args: str) -> str:
    """The installed command, as a user runs it."""
    done = subprocess.run(
        [str(Path(sys.executable).parent / "incremental-assets"), "demo-data", "--project", str(project), *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.strip()


def test_cli_append_never_runs_ahead_of_the_clock_unless_asked(tmp_path):
    clock = last_complete_hour()
    behind = clock - timedelta(hours=2)
    generate_demo_data(tmp_path, start=clock.date() - timedelta(days=2), orders_per_day=ORDERS_PER_DAY, until=behind)
    out = _cli(tmp_path, "--append", "--hours", "6")
    reached = loaded_until(tmp_path)
    assert reached in (clock, clock + timedelta(hours=1)) and reached <= last_complete_hour()  # the clock may strike
    written = int((reached - behind).total_seconds() // 3600)
    assert f"appended {written} hour(s)" in out, out
    assert f"the other {6 - written} hour(s) asked" in out and "would be in the future" in out, out
    assert "--allow-future" in out and len(out.splitlines()) <= 2, out

    out = _cli(tmp_path, "--append", "--hours", "3")
    if loaded_until(tmp_path) == reached:  # the clock did not strike in between
        assert "nothing to append" in out and "the other 3 hour(s) asked" in out, out
    reached = loaded_until(tmp_path)
    assert "appended 6 hour(s)" in _cli(tmp_path, "--append", "--hours", "6", "--allow-future")
    assert loaded_until(tmp_path) == reached + timedelta(hours=6)


def test_an_append_interrupted_between_its_commits_is_completed_not_repeated(shop, monkeypatch):
    real = new_hours.write_deltalake

    def crash_on_orders(path, *args, **kwargs):
        if str(path).endswith("orders") and not str(path).endswith("order_items"):
            raise OSError("killed")
        return real(path, *args, **kwargs)

    monkeypatch.setattr(new_hours, "write_deltalake", crash_on_orders)
    with pytest.raises(OSError):
        append_demo_hours(shop, hours=5, orders_per_day=ORDERS_PER_DAY)
    monkeypatch.setattr(new_hours, "write_deltalake", real)
    assert loaded_until(shop) == T0 and loaded_until(shop, "raw.order_items") == T0 + timedelta(hours=5)
    lines_before = items(shop).num_rows
    result = append_demo_hours(shop, hours=5, orders_per_day=ORDERS_PER_DAY)
    assert loaded_until(shop) == loaded_until(shop, "raw.order_items") == result.end
    assert items(shop).num_rows == lines_before  # the order lines were already there: not appended twice
    table, lines = orders(shop), items(shop)
    assert set(lines["order_id"].to_pylist()) == set(table["order_id"].to_pylist())
    keys = list(zip(lines["order_id"].to_pylist(), lines["line_no"].to_pylist()))
    assert len(keys) == len(set(keys))


def test_cli_appends_hours(shop, capsys):
    assert (
        cli.main(
            ["demo-data", "--project", str(shop), "--append", "--hours", "4", "--orders-per-day", str(ORDERS_PER_DAY)]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "appended 4 hour(s) [2024-12-02 06:00, 2024-12-02 10:00)" in out and "quiet hours" in out
    assert cli.main(["demo-data", "--project", str(shop), "--append", "--until", "2024-12-02T12:00"]) == 0
    assert loaded_until(shop) == datetime(2024, 12, 2, 12, tzinfo=UTC)
    assert cli.main(["demo-data", "--project", str(shop), "--append", "--hours", "2", "--until", "now"]) == 2


# -- the demo project end to end: generate to "now", append, run --auto, nothing missing -----------


@pytest.mark.slow
def test_run_auto_after_appends_leaves_no_missing_partition(tmp_path, monkeypatch):
    from incremental_assets import delta
    from incremental_assets.load.project import load_project
    from incremental_assets.orchestration.instance import open_instance
    from incremental_assets.orchestration.status import model_status

    for name in ("DAGSTER_HOME", "INCREMENTAL_ASSETS_WAREHOUSE", "INCREMENTAL_ASSETS_MAX_CONCURRENT_RUNS"):
        monkeypatch.delenv(name, raising=False)
    root = tmp_path / "shop"
    shutil.copytree(REPO / "models", root / "models")
    shutil.copy(REPO / "sources.yaml", root / "sources.yaml")
    assert (
        cli.main(
            [
                "demo-data",
                "--project",
                str(root),
                "--start",
                "2024-01-01",
                "--until",
                T0.isoformat(),
                "--orders-per-day",
                "15",
            ]
        )
        == 0
    )
    assert cli.main(["run", "--project", str(root), "--auto", "--end", T0.isoformat()]) == 0
    appended = append_demo_hours(root, hours=22, orders_per_day=15)  # 06:00 to 04:00 the next day: the night included
    assert appended.quiet_hours, "no quiet hour in the appended night"
    t1 = appended.end
    assert cli.main(["run", "--project", str(root), "--auto", "--end", t1.isoformat()]) == 0

    project = load_project(root)
    instance = open_instance(project.settings.dagster_home)
    for model in project.models.values():
        if model.is_incremental:
            status = model_status(instance, model, until=t1, now=t1)
            assert not status.gaps and not status.failed, (model.name, status.gaps, status.failed)
            assert status.intervals_done >= status.intervals_expected > 0, model.name
    # The hourly model holds each new hour's orders (quiet hours: none), as the source has them.
    hourly = DeltaTable(delta.table_uri(project.settings.warehouse, "shop.hourly_orders")).to_pyarrow_table()
    counts: dict[datetime, int] = {}
    for hour, n in zip(hourly["order_hour"].to_pylist(), hourly["orders"].to_pylist()):
        hour = hour.replace(tzinfo=UTC) if hour.tzinfo is None else hour
        counts[hour] = counts.get(hour, 0) + n
    source = orders(root)
    source_hours = hour_of(source["order_ts"])
    for i in range(appended.hours):
        hour = appended.start + timedelta(hours=i)
        assert counts.get(hour, 0) == source_hours.count(hour), hour
    for hour in appended.quiet_hours:
        assert hour not in counts
    assert np.sum([counts.get(appended.start + timedelta(hours=i), 0) for i in range(appended.hours)]) > 0
