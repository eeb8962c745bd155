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


def test_a_non_blocking_builtin_warns_and_the_window_commits(env, spark):
    project, instance, defs = env
    daily = project.directory / "models" / "daily.sql"
    daily.write_text(
        daily.read_text().replace(
            "accepted_range(column := n, min_v := 1, max_v := 24)",
            "accepted_range_non_blocking(column := n, max_v := 10), not_constant(column := n, condition := n > 100)",
        )
    )
    project = load_project(project.directory)
    defs = build_definitions(project)
    key = dg.AssetKey(["s", "daily"])
    specs = {s.name: s for s in defs.resolve_assets_def(key).check_specs}
    assert not specs["accepted_range_non_blocking__n"].blocking and specs["not_constant__n"].blocking
    report = Runner(project, instance, defs).run([project.model("s.daily")], start=utc(2024, 1, 1), end=utc(2024, 1, 2))
    assert not report.success, "not_constant over no rows (the condition keeps none) fails, as in SQLMesh"
    daily.write_text(daily.read_text().replace(", not_constant(column := n, condition := n > 100)", ""))
    project = load_project(project.directory)
    defs = build_definitions(project)
    said: list[str] = []
    report = Runner(project, instance, defs).run(
        [project.model("s.daily")], start=utc(2024, 1, 1), end=utc(2024, 1, 2), progress=said.append
    )
    assert report.success, [r.error for r in report.records]
    # The command says so, as SQLMesh warns of a non-blocking audit's failure: the window is ok, with a warning.
    [line] = [text for text in said if "s.daily" in text and ": ok" in text]
    assert line.splitlines()[1].strip() == (
        "warning: non-blocking audit accepted_range_non_blocking(column := n, max_v := 10) found 1 failing row(s); "
        "the rows were committed"
    ), line
    warned = _evaluations(instance, key, "accepted_range_non_blocking__n")[0]
    assert not warned.passed and warned.severity == dg.AssetCheckSeverity.WARN
    assert table_rows(delta.table_uri(project.settings.warehouse, "s.daily")) == [(utc(2024, 1, 1).date(), 24, 0)]


BUILTIN_CASES = [
    # (audit as a model declares it, rows it finds failing over ROWS; SQLMesh's built-in semantics)
    ("not_null_non_blocking(columns := (tag))", 1),
    ("at_least_one(column := tag)", 0),
    ("at_least_one(column := tag, condition := id = 3)", 1),
    ("not_constant(column := amount)", 0),
    ("not_constant(column := amount, condition := id < 3)", 1),
    ("not_accepted_values(column := amount, is_in := (0, 50))", 1),
    ("not_empty_string(column := tag)", 1),
    ("not_null_proportion(column := tag, threshold := 0.5)", 0),
    ("not_null_proportion(column := tag, threshold := 0.8)", 1),
    ("sequential_values(column := id)", 0),
    ("sequential_values(column := id, interval := 2)", 3),
    ("mutually_exclusive_ranges(lower_bound_column := lo, upper_bound_column := hi)", 1),
    ("valid_uuid(column := uuid)", 1),
    ("valid_url(column := url)", 1),
    ("valid_email(column := email)", 1),
    ("valid_http_method(column := method)", 1),
    ("match_regex_pattern_list(column := email, patterns := ('^a', '^b'))", 2),
    ("not_match_regex_pattern_list(column := email, patterns := ('@x\\.com$'))", 2),
    ("match_like_pattern_list(column := tag, patterns := ('c%', 'a%'))", 1),
    ("not_match_like_pattern_list(column := tag, patterns := ('%a%'))", 2),
    ("z_score(column := amount, threshold := 1)", 1),
    ("string_length_between(column := tag, min_v := 1, max_v := 4)", 1),
    ("string_length_between(column := tag, max_v := 4, inclusive := false)", 2),
    ("string_length_equal(column := tag, v := 4)", 1),
    ("stddev_in_range(column := amount, max_v := 10)", 1),
    ("mean_in_range(column := amount, min_v := 10, max_v := 20)", 0),
    ("accepted_range_non_blocking(column := amount, max_v := 20)", 1),
    ("unique_values(columns := (amount), condition := id <> 4)", 1),
    ("number_of_rows(threshold := 4, condition := id > 1)", 1),
]


def test_every_builtin_audit_finds_the_rows_sqlmesh_finds(spark):
    from incremental_assets.load.audits import parse_audits
    from incremental_assets.load.header import parse_header
    from incremental_assets.plan.audit_sql import failing_rows_sql

    spark.sql(
        "SELECT * FROM VALUES "
        "(1, 10, 'card', 'a@x.com', 'GET', 'https://x.com/a', '123e4567-e89b-12d3-a456-426614174000', 1, 3), "
        "(2, 10, 'cash', 'b@y.org', 'POST', 'ftp://files.y.org', '123E4567-E89B-42D3-A456-426614174000', 3, 5), "
        "(3, 10, NULL, 'nobody', 'FETCH', 'notaurl', 'zzz', 4, 4), "
        "(4, 50, '', 'c@x.com', 'PUT', 'http://z.io', '00000000-0000-1000-8000-000000000000', 5, 9) "
        "AS v(id, amount, tag, email, method, url, uuid, lo, hi)"
    ).createOrReplaceTempView("audited_rows")
    wrong = []
    for text, failing in BUILTIN_CASES:
        header = parse_header(f"MODEL (audits ({text}))", "m.sql").properties[0].value
        (audit,) = parse_audits(header, "m.sql", origin="audits")
        sql = failing_rows_sql(audit, "audited_rows")
        found = spark.sql(sql).count()
        if found != failing:
            wrong.append((text, found, sql))
    assert not wrong, "\n".join(map(str, wrong))
