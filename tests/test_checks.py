"""Audits and assertions as asset checks: blocking ones stop the window before the Delta commit."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest
from deltalake import DeltaTable

from incremental_assets import delta
from incremental_assets.errors import ProjectError
from incremental_assets.load.project import load_project
from incremental_assets.model.intervals import TimeWindow
from incremental_assets.orchestration.build_definitions import build_definitions
from incremental_assets.orchestration.runner import Runner
from incremental_assets.orchestration.status import model_status
from incremental_assets.orchestration.watch import INTEGRITY_CHECK

from helpers import EVENTS_SOURCE, table_rows, utc, write_events

SOURCES = EVENTS_SOURCE

DAILY = """
    MODEL (name s.daily, kind INCREMENTAL_BY_TIME_RANGE (time_column ds), start '2024-01-01',
           audits (not_null(columns := [ds, n]), accepted_range(column := n, min_v := 1, max_v := 24)),
           assertions (forall(criteria := [v_min >= 0, n > 0], blocking := false), few_events(blocking := false)));
    SELECT CAST(ts AS DATE) AS ds, COUNT(*) AS n, MIN(v) AS v_min FROM raw.events
    WHERE ts BETWEEN @start_dt AND @end_dt GROUP BY 1
"""

TOTAL = """
    MODEL (name s.downstream, kind INCREMENTAL_BY_TIME_RANGE (time_column ds), start '2024-01-01');
    SELECT ds, n FROM s.daily WHERE ds BETWEEN @start_ds AND @end_ds
"""

USER_AUDIT = """
    AUDIT (name few_events, defaults (most = 20));
    SELECT * FROM @this_model WHERE n > @most
"""


@pytest.fixture
def env(make_project, dagster_env):
    root = make_project(
        {
            "sources.yaml": SOURCES,
            "models/daily.sql": DAILY,
            "models/downstream.sql": TOTAL,
            "audits/few.sql": USER_AUDIT,
        }
    )
    # Day 1: 24 events (ok); day 2: 48 events, which breaks the blocking accepted_range (max 24).
    write_events(root / "data" / "events", utc(2024, 1, 1), 24)
    write_events(root / "data" / "events", utc(2024, 1, 2), 24, per_hour=2, mode="append")
    return dagster_env(root)


def _evaluations(instance, key, name):
    records = instance.event_log_storage.get_asset_check_execution_history(dg.AssetCheckKey(key, name), limit=10)
    return [r.event.dagster_event.event_specific_data for r in records if r.event is not None]


def test_checks_pass_warn_and_block(env, spark):
    project, instance, defs = env
    key = dg.AssetKey(["s", "daily"])
    specs = {s.name: s for s in defs.resolve_assets_def(key).check_specs}
    assert specs["accepted_range__n"].blocking and specs["not_null__ds_n"].blocking
    assert not specs["few_events"].blocking and not specs["forall"].blocking

    runner = Runner(project, instance, defs)
    ok = runner.run(
        [project.model("s.daily"), project.model("s.downstream")], start=utc(2024, 1, 1), end=utc(2024, 1, 2)
    )
    assert ok.success, [r.error for r in ok.records]
    passed = _evaluations(instance, key, "accepted_range__n")[0]
    assert passed.passed and passed.metadata["failing_rows"].value == 0

    # Day 2 breaks the blocking range check: the run fails, nothing is committed, downstream is skipped.
    uri = delta.table_uri(project.settings.warehouse, "s.daily")
    version = DeltaTable(uri).version()
    bad = runner.run(
        [project.model("s.daily"), project.model("s.downstream")], start=utc(2024, 1, 2), end=utc(2024, 1, 3)
    )
    assert not bad.success
    assert "accepted_range" in bad.records[0].error and "48" in bad.records[0].error
    assert bad.records[1].error == "skipped: an upstream model failed"
    assert DeltaTable(uri).version() == version
    assert table_rows(uri) == [(utc(2024, 1, 1).date(), 24, 0)]
    status = model_status(instance, project.model("s.daily"), until=utc(2024, 1, 3), now=utc(2024, 1, 10))
    assert status.covered == (TimeWindow(utc(2024, 1, 1), utc(2024, 1, 2)),)
    failed = _evaluations(instance, key, "accepted_range__n")[0]
    assert not failed.passed and failed.metadata["failing_rows"].value == 1
    assert "48" in str(failed.metadata["sample"].value)
    # The downstream model saw nothing of day 2.
    assert table_rows(delta.table_uri(project.settings.warehouse, "s.downstream")) == [(utc(2024, 1, 1).date(), 24)]


def test_non_blocking_failures_warn_but_commit(env, spark, tmp_path):
    project, instance, defs = env
    # A user audit with a tighter limit: non-blocking, so day 1 (24 > 10) is committed with a warning.
    (project.directory / "audits" / "few.sql").write_text(
        "AUDIT (name few_events, defaults (most = 10));\nSELECT * FROM @this_model WHERE n > @most\n"
    )
    project = load_project(project.directory)
    defs = build_definitions(project)
    report = Runner(project, instance, defs).run([project.model("s.daily")], start=utc(2024, 1, 1), end=utc(2024, 1, 2))
    assert report.success, [r.error for r in report.records]
    warned = _evaluations(instance, dg.AssetKey(["s", "daily"]), "few_events")[0]
    assert not warned.passed and warned.severity == dg.AssetCheckSeverity.WARN
    assert warned.metadata["failing_rows"].value == 1 and "'n': '24'" in str(warned.metadata["sample"].value)
    assert _evaluations(instance, dg.AssetKey(["s", "daily"]), "forall")[0].passed


def test_bad_audits_name_file_and_line(make_project):
    root = make_project({"sources.yaml": SOURCES, "models/daily.sql": DAILY.replace("min_v := 1, ", "low := 1, ")})
    with pytest.raises(ProjectError) as err:
        load_project(root)
    assert "daily.sql:2: audits: accepted_range does not take low" in str(err.value)
    root = make_project({"sources.yaml": SOURCES, "models/daily.sql": DAILY}, name="no_audit_file")
    with pytest.raises(ProjectError) as err:
        load_project(root)
    assert "daily.sql:3: unknown audit 'few_events'" in str(err.value)


def test_in_table_check_runs_on_demand_for_the_chosen_models_only(env, spark):
    """``in_table`` of every model is one definition: executing one model's check (the UI's "Execute") runs
    that check alone, passes on an intact table and fails, with the cause, once the table lost its log."""
    project, instance, defs = env
    report = Runner(project, instance, defs).run([project.model("s.daily")], start=utc(2024, 1, 1), end=utc(2024, 1, 2))
    assert report.success, [r.error for r in report.records]
    daily = dg.AssetCheckKey(dg.AssetKey(["s", "daily"]), INTEGRITY_CHECK)
    assert (
        dg.AssetCheckKey(dg.AssetKey(["s", "downstream"]), INTEGRITY_CHECK)
        in defs.resolve_asset_graph().asset_check_keys
    )

    def execute() -> list:
        job = defs.resolve_implicit_global_asset_job_def().get_subset(
            asset_selection=set(), asset_check_selection={daily}
        )
        result = job.execute_in_process(instance=instance, raise_on_error=False)
        return [e.event_specific_data for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"]

    [passed] = execute()
    assert passed.asset_check_key == daily and passed.passed
    uri = delta.table_uri(project.settings.warehouse, "s.daily")
    for log in (Path(uri) / "_delta_log").glob("*.json"):
        log.unlink()
    [failed] = execute()
    assert failed.asset_check_key == daily and not failed.passed
    assert "fix" in failed.metadata and str(failed.metadata["status"].value)
