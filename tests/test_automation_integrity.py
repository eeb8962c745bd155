"""The automation sensor looks at the tables on every tick: an interval Dagster records that its table lost
(a deleted log or data file) fails the model's ``in_table`` check with the cause and is requested again;
a damaged log gets no run on top of it. Real instance, real tables, the sensor's own evaluation, the
requested runs executed as Dagster runs."""

from __future__ import annotations

import time
from pathlib import Path

import dagster as dg
import pytest
from test_automation import Automation, env  # noqa: F401 (the fixture)
from test_dagster import MODELS, SOURCES

from incremental_assets import delta
from incremental_assets.load.project import load_project
from incremental_assets.orchestration.build_definitions import build_definitions
from incremental_assets.orchestration.instance import ACTIVE_RUN_STATUSES, open_instance
from incremental_assets.orchestration.runner import Runner
from incremental_assets.orchestration.watch import INTEGRITY_CHECK, ROTATION_PER_TICK

from helpers import automation_daemon, table_rows, utc, write_events

NOW = utc(2024, 1, 3, 6)


def checks(data) -> dict[str, tuple[bool, str]]:
    """The ``in_table`` evaluations a tick reported: asset -> (passed, status)."""
    return {
        e.asset_key.to_user_string(): (e.passed, str(e.metadata["status"].value))
        for e in data.asset_events or []
        if getattr(e, "check_name", None) == INTEGRITY_CHECK
    }


class Watched(Automation):
    """The sensor ticked, its check evaluations kept (the daemon records them on the asset)."""

    def sense(self, when, cursor=...):  # type: ignore[override]
        data = super().sense(when, cursor)
        self.seen = checks(data)
        self.latest = {**getattr(self, "latest", {}), **self.seen}  # what the asset's check shows
        return data


def built(env, monkeypatch):  # noqa: F811
    project, instance, defs = env
    auto = Watched(defs, instance, monkeypatch)
    auto.settle(NOW)
    # Late rows for two hours: one more commit of s.hourly, the one the tests lose.
    write_events(project.sources["raw.events"].location, utc(2024, 1, 2, 10), 2, mode="append")
    auto.settle(NOW)
    uris = {name: delta.table_uri(project.settings.warehouse, name) for name in ("s.hourly", "s.daily", "s.total")}
    return auto, uris, {name: table_rows(uri) for name, uri in uris.items()}


def test_a_deleted_newest_log_file_fails_the_check_and_its_intervals_are_computed_again(env, monkeypatch, spark):  # noqa: F811
    auto, uris, clean = built(env, monkeypatch)
    newest = sorted((Path(uris["s.hourly"]) / "_delta_log").glob("*.json"))[-1]
    newest.unlink()  # the table falls back a version: the two late hours are gone, Dagster still shows them green
    assert table_rows(uris["s.hourly"]) != clean["s.hourly"]

    # The next tick sees the log changed, checks that table, says why, and requests exactly what it lost.
    assert auto.tick(NOW, run=False) == [("s/hourly", "2024-01-02-10:00", "2024-01-02-11:00")]
    passed, status = auto.seen["s/hourly"]
    assert not passed and "recorded but not in its table: [2024-01-02 10:00, 2024-01-02 12:00)" in status
    assert "behind version" in status
    auto.tick(NOW)  # the same request, executed
    # Then the daily model reads those hours again, and the check passes once the table holds them.
    auto.settle(NOW)
    assert auto.failed == []
    assert {name: table_rows(uri) for name, uri in uris.items()} == clean
    assert auto.latest["s/hourly"] == (True, "every interval Dagster records is in the table")


def test_a_deleted_data_file_is_found_by_the_rotation_within_a_few_ticks(env, monkeypatch, spark):  # noqa: F811
    auto, uris, clean = built(env, monkeypatch)
    victim = next(
        Path(f.uri.removeprefix("file://")) for f in delta.snapshot_files(uris["s.daily"]) if f.interval == "2024-01-01"
    )
    victim.unlink()  # the log does not change: only the rotation looks at this table

    found = []
    for _ in range(-(-3 // ROTATION_PER_TICK)):  # every table with a log, in turn
        found += auto.tick(NOW)
        if "s/daily" in auto.seen:
            break
    # The day is requested again, with the FULL model that reads it in the same run.
    assert found == [("s/daily+s/total", "2024-01-01", "2024-01-01")]
    passed, status = auto.seen["s/daily"]
    assert not passed and f"file {victim} is missing" in status
    auto.settle(NOW)
    assert {name: table_rows(uri) for name, uri in uris.items()} == clean and auto.failed == []
    assert auto.latest["s/daily"] == (True, "every interval Dagster records is in the table")


def test_a_damaged_log_gets_no_run_on_top_of_it(env, monkeypatch, spark):  # noqa: F811
    auto, uris, clean = built(env, monkeypatch)
    newest = sorted((Path(uris["s.hourly"]) / "_delta_log").glob("*.json"))[-1]
    newest.write_text("")
    # New source data for s.hourly arrives too: still nothing is launched on the damaged table.
    requested = auto.tick(utc(2024, 1, 3, 8), run=False)
    assert not [r for r in requested if r[0] == "s/hourly"]
    passed, status = auto.seen["s/hourly"]
    assert not passed and f"_delta_log/{newest.name}: empty" in status


@pytest.mark.slow
def test_the_daemon_repairs_a_deleted_log_file_and_the_check_shows_it(make_project, tmp_path, monkeypatch, spark):
    """The real daemon: the newest commit file of s.hourly is deleted while Dagster shows its hours green;
    the sensor's check fails with the cause, the lost hours and what reads them are computed again, the
    check passes, every table equals what was there before."""
    root = make_project({"sources.yaml": SOURCES, **MODELS})
    write_events(root / "data" / "events", utc(2024, 1, 1), 24 * 7 + 6)
    home = tmp_path / "home"
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    project = load_project(root)
    instance = open_instance(project.settings.dagster_home)
    runner = Runner(project, instance, build_definitions(project))
    for now in (utc(2024, 1, 7, 20), utc(2024, 1, 8, 6)):  # the second run's hours are the newest commit
        assert runner.run(project.ordered(), auto=True, now=now).success
    uris = {
        name: delta.table_uri(project.settings.warehouse, name)
        for name in ("s.hourly", "s.daily", "s.weekly", "s.total")
    }
    clean = {name: table_rows(uri) for name, uri in uris.items()}
    sorted((Path(uris["s.hourly"]) / "_delta_log").glob("*.json"))[-1].unlink()
    assert table_rows(uris["s.hourly"]) != clean["s.hourly"]
    check = dg.AssetCheckKey(dg.AssetKey(["s", "hourly"]), INTEGRITY_CHECK)

    def history() -> list:
        """The check's evaluations, oldest first."""
        records = reversed(instance.event_log_storage.get_asset_check_execution_history(check, limit=20))
        return [r.evaluation for r in records if hasattr(r.evaluation, "passed")]

    with automation_daemon(root, home, utc(2024, 1, 8, 6), tmp_path / "daemon.log") as daemon:
        deadline, done, quiet_since = time.monotonic() + 420, False, None
        while time.monotonic() < deadline and not done:
            time.sleep(2)
            assert daemon.poll() is None, (tmp_path / "daemon.log").read_text()[-4000:]
            outcomes = [e.passed for e in history()]
            busy = instance.get_run_records(filters=dg.RunsFilter(statuses=ACTIVE_RUN_STATUSES), limit=1)
            repaired = (
                False in outcomes
                and outcomes[-1] is True
                and not busy
                and table_rows(uris["s.hourly"]) == clean["s.hourly"]
            )
            # Settled: still so after a whole tick of the sensor (what the last run changed may launch more).
            runs_now = len(instance.get_run_records())
            if not repaired or quiet_since is None or quiet_since[1] != runs_now:
                quiet_since = (time.monotonic(), runs_now) if repaired else None
            done = quiet_since is not None and time.monotonic() - quiet_since[0] >= 12
        assert done, "not repaired:\n" + (tmp_path / "daemon.log").read_text()[-4000:]
    failed = next(e for e in history() if not e.passed)
    assert "recorded but not in its table: [2024-01-07 20:00, 2024-01-08 06:00)" in str(failed.metadata["status"].value)
    runs = instance.get_run_records(filters=dg.RunsFilter(tags={"incremental_assets/launched_by": "automation"}))
    assert runs and all(r.dagster_run.status == dg.DagsterRunStatus.SUCCESS for r in runs), _failures(instance, runs)
    assert {name: table_rows(uri) for name, uri in uris.items()} == clean


def _failures(instance: dg.DagsterInstance, runs) -> str:
    """Each run that did not succeed: its models, range, status and the error its events carry."""
    out = []
    for record in runs:
        run = record.dagster_run
        if run.status == dg.DagsterRunStatus.SUCCESS:
            continue
        errors = [
            str(e.dagster_event.event_specific_data)[:1500]
            for e in instance.all_logs(run.run_id)
            if e.dagster_event is not None and e.dagster_event.is_failure
        ]
        out.append(f"{run.job_name} {dict(run.tags)} {run.status}: {errors}")
    return "\n".join(out)
