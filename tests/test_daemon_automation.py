"""The real ``dagster-daemon`` on the project's instance: turn the automation sensor on with new hours to
fill, late data just appended and a file of keys rewritten, and see the chain hourly -> daily -> weekly, the
FULL total and the FULL reader of the keys materialized and recomputed, upstreams first, no failed run."""

from __future__ import annotations

import time

import dagster as dg
import pytest
from deltalake import DeltaTable
from test_dagster import MODELS, SOURCES

from incremental_assets.load.project import load_project
from incremental_assets.orchestration import tags
from incremental_assets.orchestration.build_definitions import build_definitions
from incremental_assets.orchestration.decisions import AutomationCursor
from incremental_assets.orchestration.instance import ACTIVE_RUN_STATUSES, open_instance
from incremental_assets.orchestration.run_coordinator import OWN_SPARK_AFTER_UPSTREAM, SPARK_TAG
from incremental_assets.orchestration.runner import Runner
from incremental_assets.orchestration.staleness import latest_ids

from helpers import automation_daemon, table_rows, utc, write_events

NOW = utc(2024, 1, 8, 6)


@pytest.mark.slow
def test_the_daemon_recomputes_late_data_through_the_chain(make_project, tmp_path, monkeypatch, spark):
    keys = "- name: raw.keys\n  location: data/keys.csv\n  format: csv\n"
    labels = "MODEL (name s.labels, kind FULL);\nSELECT label, COUNT(*) AS n FROM raw.keys GROUP BY label\n"
    root = make_project({"sources.yaml": SOURCES + keys, **MODELS, "models/labels.sql": labels})
    events = root / "data" / "events"
    write_events(events, utc(2024, 1, 1), 24 * 7 + 6)
    (root / "data" / "keys.csv").write_text("k,label\nk0,red\nk1,blue\n")
    home = tmp_path / "home"
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    project = load_project(root)
    instance = open_instance(project.settings.dagster_home)
    # Everything materialized up to 2024-01-07 22:00; the daemon's clock says 2024-01-08 06:00.
    assert (
        Runner(project, instance, build_definitions(project))
        .run(project.ordered(), auto=True, now=utc(2024, 1, 7, 22))
        .success
    )
    before = {name: latest_ids(instance, dg.AssetKey(name.split("."))) for name in ("s.hourly", "s.daily", "s.weekly")}
    total_before = instance.fetch_materializations(dg.AssetKey(["s", "total"]), limit=1).records[0].storage_id
    labels_before = instance.fetch_materializations(dg.AssetKey(["s", "labels"]), limit=1).records[0].storage_id
    # The sensor watches the source from its current version on (its first tick would also take it).
    cursor = AutomationCursor(sources={"raw.events": f"v{DeltaTable(str(events)).version()}"}).dump()
    # Late rows for 2024-01-02 10:00 arrive, and the file of keys is rewritten with one key more.
    write_events(events, utc(2024, 1, 2, 10, 30), 1, mode="append")
    (root / "data" / "keys.csv").write_text("k,label\nk0,red\nk1,blue\nk2,red\n")
    arrived = time.perf_counter()
    with automation_daemon(root, home, NOW, tmp_path / "daemon.log", cursor) as daemon:
        deadline = time.monotonic() + 420
        done = False
        while time.monotonic() < deadline and not done:
            time.sleep(1)
            assert daemon.poll() is None, (tmp_path / "daemon.log").read_text()[-4000:]
            records = instance.fetch_materializations(dg.AssetKey(["s", "total"]), limit=1).records
            labelled = instance.fetch_materializations(dg.AssetKey(["s", "labels"]), limit=1).records
            weekly = latest_ids(instance, dg.AssetKey(["s", "weekly"])).get("2023-12-31", 0)
            busy = instance.get_run_records(filters=dg.RunsFilter(statuses=ACTIVE_RUN_STATUSES), limit=1)
            done = (
                bool(records)
                and records[0].storage_id > total_before
                and weekly > before["s.weekly"]["2023-12-31"]
                and bool(labelled)
                and labelled[0].storage_id > labels_before
                and not busy
            )
        elapsed = time.perf_counter() - arrived
        assert done, "the chain was not recomputed:\n" + (tmp_path / "daemon.log").read_text()[-4000:]

    runs = instance.get_run_records(filters=dg.RunsFilter(tags={"incremental_assets/launched_by": "automation"}))
    assert runs and all(r.dagster_run.status == dg.DagsterRunStatus.SUCCESS for r in runs), [
        (r.dagster_run.run_id, r.dagster_run.status) for r in runs
    ]
    after = {name: latest_ids(instance, dg.AssetKey(name.split("."))) for name in ("s.hourly", "s.daily", "s.weekly")}
    changed = {name: sorted(k for k, sid in after[name].items() if sid != before[name].get(k)) for name in after}
    # The new complete hours, days and week, and exactly the hour the late rows touched, the day that
    # reads it (the week reads both: it is new anyway).
    new_hours = [f"2024-01-0{d}-{h:02d}:00" for d, h in [(7, 22), (7, 23), *((8, h) for h in range(6))]]
    assert changed == {
        "s.hourly": ["2024-01-02-10:00", *new_hours],
        "s.daily": ["2024-01-02", "2024-01-07"],
        "s.weekly": ["2023-12-31"],
    }
    assert table_rows(f"{project.settings.warehouse}/s/total") == [(24 * 7 + 1,)]
    assert sorted(table_rows(f"{project.settings.warehouse}/s/labels")) == [("blue", 1), ("red", 2)]
    labels_runs = instance.fetch_materializations(dg.AssetKey(["s", "labels"]), limit=10).records
    assert len([r for r in labels_runs if r.storage_id > labels_before]) == 1  # the rewrite, once

    # Each run starts a Spark of its own (no long-lived Spark): the days were requested with the hours they
    # read, and their runs started (their JVMs starting) while the hours' runs still ran, outside the limit
    # of one run with a Spark of its own at a time. Two runs of the days write one table: the second stays
    # queued until the first ended (one writer a table), and may then start after the hours.
    def assets(record) -> set[str]:
        return {key.to_user_string() for key in record.dagster_run.asset_selection or ()}

    followers = sorted(
        (r for r in runs if r.dagster_run.tags.get(tags.AFTER_UPSTREAM_TAG) == "true"), key=lambda r: r.start_time or 0
    )
    hours_ended = max(r.end_time or 0 for r in runs if "s/hourly" in assets(r))
    timeline = sorted(
        (r.create_timestamp.timestamp(), r.start_time, r.end_time, sorted(assets(r)), r.dagster_run.tags.get(SPARK_TAG))
        for r in runs
    )
    assert followers and all("s/daily" in assets(r) for r in followers), [assets(r) for r in followers]
    assert {r.dagster_run.tags[SPARK_TAG] for r in followers} == {OWN_SPARK_AFTER_UPSTREAM}
    assert all(r.create_timestamp.timestamp() < hours_ended for r in followers), f"a later tick: {timeline}"
    for before, follower in zip([None, *followers], followers):
        started = follower.start_time or 0
        behind_its_table = before is not None and started >= (before.end_time or 0)
        assert started < hours_ended or behind_its_table, f"a day's run waited for the hours' slot: {timeline}"
    print(f"daemon start with new hours and late data to every model settled: {elapsed:.1f}s with {len(runs)} runs")
