"""``restate MODEL --start S --end E``: chosen intervals recomputed (atomic window replacement), then
exactly the downstream intervals that read them, against a full recompute, through a real Dagster
instance on Spark and Delta; the same restatement as one Dagster backfill run by the real daemon."""

from __future__ import annotations

import shutil
import time
from datetime import datetime
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pytest
from dagster._core.execution.backfill import BulkActionStatus
from deltalake import DeltaTable
from test_dagster import MODELS

from incremental_assets import cli
from incremental_assets.errors import IncrementalAssetsError, ModelFileError
from incremental_assets.load.project import load_project
from incremental_assets.model.intervals import TimeWindow
from incremental_assets.orchestration.build_definitions import build_definitions
from incremental_assets.orchestration.instance import open_instance
from incremental_assets.orchestration.runner import Runner
from incremental_assets.orchestration.staleness import latest_ids
from incremental_assets.plan.restate import INTERVALS, REBUILD, WHOLE, plan_restatement

from helpers import EVENTS_SOURCE, automation_daemon, table_rows, utc, write_events

TWO_DAYS = """
    MODEL (name s.two_days, kind INCREMENTAL_BY_TIME_RANGE (time_column ds), start '2024-01-01');
    SELECT d.ds, SUM(p.n) AS n FROM s.daily AS d JOIN s.daily AS p ON p.ds BETWEEN date_sub(d.ds, 1) AND d.ds
    WHERE d.ds BETWEEN @start_ds AND @end_ds AND p.ds BETWEEN date_sub(@start_ds, 1) AND @end_ds GROUP BY d.ds
"""
FILES = {"sources.yaml": EVENTS_SOURCE, **MODELS, "models/two_days.sql": TWO_DAYS}
NOW = utc(2024, 1, 5)
KEYS = ("s.hourly", "s.daily", "s.two_days", "s.total")


def built(root: Path, home: Path, monkeypatch):
    """The project's models materialized up to NOW (the weekly model has no complete week yet)."""
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    project = load_project(root)
    instance = open_instance(project.settings.dagster_home)
    assert Runner(project, instance, build_definitions(project)).run(project.ordered(), auto=True, now=NOW).success
    return project, instance


def ids(instance) -> dict[str, dict[str, int]]:
    return {name: latest_ids(instance, dg.AssetKey(name.split("."))) for name in KEYS}


def files_by_partition(uri: str) -> dict[str, set[str]]:
    actions = pa.table(DeltaTable(uri).get_add_actions(flatten=True)).to_pydict()
    out: dict[str, set[str]] = {}
    column = next(c for c in actions if c.startswith("partition."))  # ia_day for an hourly table, ia_interval otherwise
    for path, part in zip(actions["path"], actions[column]):
        out.setdefault(part, set()).add(path)
    return out


def changed(before: dict, after: dict) -> dict[str, list[str]]:
    return {name: sorted(k for k, sid in after[name].items() if sid != before[name].get(k)) for name in after}


def fresh_tables(root: Path, tmp_path: Path, monkeypatch) -> dict[str, list]:
    """Every table of a copy of the project (same models and source data) computed from scratch."""
    copy = tmp_path / "fresh"
    shutil.copytree(root, copy, ignore=shutil.ignore_patterns("warehouse", ".dagster"))
    project, _ = built(copy, tmp_path / "fresh-home", monkeypatch)
    return {name: table_rows(f"{project.settings.warehouse}/{name.replace('.', '/')}") for name in KEYS}


def test_restate_recomputes_the_chosen_intervals_and_exactly_what_reads_them(
    make_project, tmp_path, monkeypatch, spark, capsys
):
    root = make_project(FILES)
    events = root / "data" / "events"
    write_events(events, utc(2024, 1, 1), 24 * 4)
    project, instance = built(root, tmp_path / "home", monkeypatch)
    warehouse = project.settings.warehouse
    before, hourly_files = ids(instance), files_by_partition(f"{warehouse}/s/hourly")
    # Late rows of 2024-01-02 10:00 arrive; the user restates that day of s.hourly.
    write_events(events, utc(2024, 1, 2, 10, 30), 1, mode="append")
    args = ["restate", "s.hourly", "--start", "2024-01-02", "--end", "2024-01-03", "--project", str(root)]
    assert cli.main([*args, "--dry-run"]) == 0
    shown = capsys.readouterr().out
    assert "s.two_days: [2024-01-02, 2024-01-04): 2 interval(s) (reads s.daily)" in shown, shown
    assert ids(instance) == before  # a dry run recomputes nothing
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    assert out.startswith(shown) and "4 run(s) succeeded, 0 failed" in out, out
    # Dagster: the 24 hours, the day that reads them, the two days whose lookback reads that day, the total.
    assert changed(before, ids(instance)) == {
        "s.hourly": [f"2024-01-02-{h:02d}:00" for h in range(24)],
        "s.daily": ["2024-01-02"],
        "s.two_days": ["2024-01-02", "2024-01-03"],
        "s.total": sorted(before["s.total"]),  # unpartitioned: its one record, once more
    }
    # Delta: the hours outside the window keep their files; the window's were replaced.
    after_files = files_by_partition(f"{warehouse}/s/hourly")
    assert {p: f for p, f in after_files.items() if not p.startswith("2024-01-02")} == {
        p: f for p, f in hourly_files.items() if not p.startswith("2024-01-02")
    }
    assert all(after_files[p].isdisjoint(hourly_files[p]) for p in after_files if p.startswith("2024-01-02"))
    restated = {name: table_rows(f"{warehouse}/{name.replace('.', '/')}") for name in KEYS}
    assert (datetime(2024, 1, 2, 10), 2) in restated["s.hourly"] and restated["s.total"] == [(97,)]
    assert restated == fresh_tables(root, tmp_path, monkeypatch)


def test_restating_a_forward_only_model_rewrites_only_the_chosen_intervals_with_its_new_query(
    make_project, tmp_path, monkeypatch, spark, capsys
):
    daily = MODELS["models/daily.sql"].replace("batch_size 2", "batch_size 2, forward_only true")
    root = make_project({**FILES, "models/daily.sql": daily})
    write_events(root / "data" / "events", utc(2024, 1, 1), 24 * 4)
    project, instance = built(root, tmp_path / "home", monkeypatch)
    old = dict(table_rows(f"{project.settings.warehouse}/s/daily"))
    (root / "models" / "daily.sql").write_text(daily.replace("SUM(n) AS n", "SUM(n) * 10 AS n"))
    assert cli.main(["restate", "s.daily", "--start", "2024-01-03", "--end", "2024-01-04", "--project", str(root)]) == 0
    new = dict(table_rows(f"{project.settings.warehouse}/s/daily"))
    assert {str(d): n for d, n in new.items()} == {
        str(d): n * 10 if str(d) == "2024-01-03" else n for d, n in old.items()
    }
    assert "s.two_days [2024-01-03, 2024-01-05): ok" in capsys.readouterr().out
    assert dict(table_rows(f"{project.settings.warehouse}/s/two_days"))[datetime(2024, 1, 4).date()] == 24 * 10 + 24


def test_bad_restatements_exit_2_with_one_line(make_project, tmp_path, monkeypatch, capsys):
    root = make_project(FILES)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    cases = {
        ("s.nope", "2024-01-02", "2024-01-03"): "no model named 's.nope'",
        ("s.hourly", "2024-01-03", "2024-01-02"): "--start 2024-01-03 must be before --end 2024-01-02",
        ("s.hourly", "2023-06-01", "2024-01-02"): "is outside its range [2024-01-01,",
        ("s.daily", "2024-01-02 05:00", "2024-01-03"): "is not on day boundaries",
        ("s.hourly", "2024-01-02", "2099-01-01"): "is outside its range",
    }
    for (model, start, end), message in cases.items():
        assert cli.main(["restate", model, "--start", start, "--end", end, "--project", str(root)]) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1 and "Traceback" not in err, err


SCD = """
    MODEL (name s.history, kind SCD_TYPE_2_BY_COLUMN (unique_key k, columns [n]{extra}));
    SELECT k, SUM(n) AS n FROM (SELECT 'all' AS k, n FROM s.daily) GROUP BY k
"""
KEYED = """
    MODEL (name s.latest, kind INCREMENTAL_BY_UNIQUE_KEY (unique_key ds));
    SELECT ds, n FROM s.daily
"""


def planned(project, chosen, window, done=None):
    done = done or {}
    return plan_restatement(
        project,
        [project.model(n) for n in chosen],
        window,
        available_end=lambda m: utc(2024, 2, 1),
        materialized=lambda m: done.get(
            m.name, [TimeWindow(utc(2023, 12, 31), utc(2024, 1, 14))] if m.is_incremental else True
        ),
        built_with=lambda m: None,
    )


def test_the_plan_follows_lookbacks_units_recorded_intervals_and_kinds(make_project):
    root = make_project({**FILES, "models/history.sql": SCD.format(extra=""), "models/latest.sql": KEYED})
    project = load_project(root)
    day = TimeWindow(utc(2024, 1, 2), utc(2024, 1, 3))
    r = planned(project, ["s.hourly"], TimeWindow(utc(2024, 1, 2, 23), utc(2024, 1, 3)))
    got = {i.model.name: (i.how, [str(w) for w in i.windows]) for i in r.models}
    # One hour reaches its day, the two days reading that day, the week holding it, and the unpartitioned models.
    assert got == {
        "s.hourly": (INTERVALS, ["[2024-01-02 23:00, 2024-01-03)"]),
        "s.daily": (INTERVALS, ["[2024-01-02, 2024-01-03)"]),
        "s.two_days": (INTERVALS, ["[2024-01-02, 2024-01-04)"]),
        "s.weekly": (INTERVALS, ["[2023-12-31, 2024-01-07)"]),
        "s.total": (WHOLE, []),
        "s.latest": (REBUILD, []),
    }, got
    assert r.skipped == (
        "s.history: not restated: SCD_TYPE_2 keeps its history (disable_restatement); its next run adds "
        "what changed as new versions",
    )
    # Only intervals already materialized downstream are recomputed.
    r = planned(
        project, ["s.daily"], day, {"s.two_days": [TimeWindow(utc(2024, 1, 1), utc(2024, 1, 3))], "s.weekly": []}
    )
    assert {i.model.name: [str(w) for w in i.windows] for i in r.models if i.how == INTERVALS} == {
        "s.daily": ["[2024-01-02, 2024-01-03)"],
        "s.two_days": ["[2024-01-02, 2024-01-03)"],
    }
    # An SCD type 2 model chosen is refused unless its kind allows restatement.
    with pytest.raises(ModelFileError, match="restating it would throw away its history"):
        planned(project, ["s.history"], day)
    (root / "models" / "history.sql").write_text(SCD.format(extra=", disable_restatement false"))
    assert [(i.model.name, i.how) for i in planned(load_project(root), ["s.history"], day).models] == [
        ("s.history", REBUILD)
    ]


def test_a_changed_model_that_is_not_forward_only_is_refused(make_project):
    project = load_project(make_project(FILES))
    with pytest.raises(IncrementalAssetsError, match="s.daily changed since its table was built"):
        plan_restatement(
            project,
            [project.model("s.hourly")],
            TimeWindow(utc(2024, 1, 2), utc(2024, 1, 3)),
            available_end=lambda m: utc(2024, 2, 1),
            materialized=lambda m: [TimeWindow(utc(2024, 1, 1), utc(2024, 1, 5))],
            built_with=lambda m: "0" * 64 if m.name == "s.daily" else None,
        )


@pytest.mark.slow
def test_restate_as_one_dagster_backfill_run_by_the_daemon(make_project, tmp_path, monkeypatch, spark, capsys):
    root = make_project(FILES)
    events = root / "data" / "events"
    write_events(events, utc(2024, 1, 1), 24 * 4)
    home = tmp_path / "home"
    project, instance = built(root, home, monkeypatch)
    before = ids(instance)
    write_events(events, utc(2024, 1, 2, 10, 30), 1, mode="append")
    assert (
        cli.main(
            [
                "restate",
                "s.hourly",
                "--start",
                "2024-01-02",
                "--end",
                "2024-01-03",
                "--backfill",
                "--project",
                str(root),
            ]
        )
        == 0
    )
    backfill_id = capsys.readouterr().out.split("submitted Dagster backfill ")[1].split()[0]
    assert ids(instance) == before  # submitted, not run
    log = tmp_path / "daemon.log"
    with automation_daemon(root, home, NOW, log, sensor=False) as daemon:
        deadline = time.monotonic() + 480
        while time.monotonic() < deadline:
            backfill = instance.get_backfill(backfill_id)
            if backfill.status != BulkActionStatus.REQUESTED:
                break
            assert daemon.poll() is None, log.read_text()[-4000:]
            time.sleep(2)
    assert backfill.status == BulkActionStatus.COMPLETED_SUCCESS, (backfill.status, log.read_text()[-4000:])
    runs = instance.get_run_records(filters=dg.RunsFilter(tags={"dagster/backfill": backfill_id}))
    # One run per asset: each policy is a single run over its range (the total is unpartitioned).
    assert sorted(next(iter(r.dagster_run.asset_selection)).to_user_string() for r in runs) == [
        "s/daily",
        "s/hourly",
        "s/total",
        "s/two_days",
    ]
    assert changed(before, ids(instance)) == {
        "s.hourly": [f"2024-01-02-{h:02d}:00" for h in range(24)],
        "s.daily": ["2024-01-02"],
        "s.two_days": ["2024-01-02", "2024-01-03"],
        "s.total": sorted(before["s.total"]),
    }
    restated = {name: table_rows(f"{project.settings.warehouse}/{name.replace('.', '/')}") for name in KEYS}
    assert restated == fresh_tables(root, tmp_path, monkeypatch)
