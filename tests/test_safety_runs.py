"""The analysis at work on Spark: derived lookback is necessary and sufficient, refused models stop with
file:line, downgrade rebuilds in full, execution classes become backfill policies and partition mappings."""

from __future__ import annotations

import dataclasses
import json
import random
from datetime import timedelta

import dagster as dg
import pytest

from incremental_assets import cli, delta
from incremental_assets.analysis import SourceBound
from incremental_assets.errors import UnsafeIncrementalError
from incremental_assets.load.project import load_project
from incremental_assets.model.intervals import TimeWindow, batches
from incremental_assets.orchestration.build_definitions import build_definitions
from incremental_assets.plan.analyses import analyses, analysis_of
from incremental_assets.plan.run_plan import plan_run, plan_window
from incremental_assets.spark.executor import Executor

from helpers import EVENTS_SOURCE, table_rows, utc, write_events

SOURCES = EVENTS_SOURCE

MODELS = {
    # Form A: a 2-hour RANGE frame; the outer WHERE keeps the window's rows, the frame needs 2h before.
    "models/rolling.sql": """
        MODEL (name s.rolling, kind INCREMENTAL_BY_TIME_RANGE (time_column ts), start '2024-01-01', interval_unit hour);
        SELECT ts, k, v3 FROM (
          SELECT ts, k, SUM(v) OVER (PARTITION BY k ORDER BY ts RANGE BETWEEN INTERVAL 2 HOURS PRECEDING
            AND CURRENT ROW) AS v3
          FROM raw.events
        ) AS w
        WHERE ts BETWEEN @start_dt AND @end_dt
    """,
    # Form B: a self-join that looks one day back.
    "models/trailing.sql": """
        MODEL (name s.trailing, kind INCREMENTAL_BY_TIME_RANGE (time_column ds), start '2024-01-01');
        SELECT CAST(a.ts AS DATE) AS ds, a.k, COUNT(*) AS pairs
        FROM raw.events AS a JOIN raw.events AS b ON b.k = a.k AND b.ts BETWEEN a.ts - INTERVAL 1 DAY AND a.ts
        WHERE a.ts BETWEEN @start_dt AND @end_dt
        GROUP BY CAST(a.ts AS DATE), a.k
    """,
    # Form B in DuckDB's dialect, the day back written DATE_ADD of an interval (rewritten for Spark at load).
    "models/trailing_duckdb.sql": """
        MODEL (name s.trailing_duckdb, kind INCREMENTAL_BY_TIME_RANGE (time_column ds), start '2024-01-01',
               dialect duckdb);
        SELECT CAST(a.ts AS DATE) AS ds, a.k, COUNT(*) AS pairs
        FROM raw.events AS a JOIN raw.events AS b
          ON b.k = a.k AND b.ts BETWEEN DATE_ADD(a.ts, INTERVAL -1 DAY) AND a.ts
        WHERE a.ts BETWEEN @start_dt AND @end_dt
        GROUP BY CAST(a.ts AS DATE), a.k
    """,
    "models/daily.sql": """
        MODEL (name s.daily, kind INCREMENTAL_BY_TIME_RANGE (time_column ds), start '2024-01-01');
        SELECT CAST(ts AS DATE) AS ds, COUNT(*) AS n FROM raw.events WHERE ts BETWEEN @start_dt AND @end_dt GROUP BY 1
    """,
    # Reads its own previous interval: PerPartitionOnly.
    "models/cumulative.sql": """
        MODEL (name s.cumulative, kind INCREMENTAL_BY_TIME_RANGE (time_column ds), start '2024-01-01',
               columns (ds DATE, total BIGINT));
        SELECT d.ds, d.n + COALESCE(p.total, 0) AS total
        FROM s.daily AS d
        LEFT JOIN s.cumulative AS p ON p.ds = date_sub(d.ds, 1) AND p.ds BETWEEN @start_date - INTERVAL 1 DAY
          AND @end_date - INTERVAL 1 DAY
        WHERE d.ds BETWEEN @start_ds AND @end_ds
    """,
    # A day plus the next 6 days' upstream rows: BoundedSafe(7).
    "models/weekahead.sql": """
        MODEL (name s.weekahead, kind INCREMENTAL_BY_TIME_RANGE (time_column ds), start '2024-01-01');
        SELECT ds, n FROM s.daily WHERE ds BETWEEN @start_ds AND date_add(@start_ds, 6)
    """,
    # Refused: a numbering over all history.
    "models/numbered.sql": """
        MODEL (name s.numbered, kind INCREMENTAL_BY_TIME_RANGE (time_column ds), start '2024-01-01');
        SELECT CAST(ts AS DATE) AS ds, k,
               ROW_NUMBER() OVER (ORDER BY ts, k) AS rn
        FROM raw.events WHERE ts BETWEEN @start_dt AND @end_dt
    """,
}


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    from conftest import write_project

    root = write_project(tmp_path_factory.mktemp("safety"), {"sources.yaml": SOURCES, **MODELS})
    write_events(root / "data" / "events", utc(2024, 1, 1), 24 * 8, per_hour=2)
    return load_project(root)


def with_warehouse(project, path):
    return dataclasses.replace(project, settings=dataclasses.replace(project.settings, warehouse=str(path)))


def build(spark, project, name, windows, warehouse, analysis=None):
    p = with_warehouse(project, warehouse)
    if analysis is not None:
        analyses(p)[name] = analysis
    ex = Executor(spark, p)
    for window in windows:
        for plan in plan_window(p, p.model(name), window):
            ex.execute(plan)
    return table_rows(delta.table_uri(str(warehouse), name))


def random_split(window: TimeWindow, unit: str, rng: random.Random) -> list[TimeWindow]:
    parts = batches(window, unit, 1)
    cuts = sorted(rng.sample(range(1, len(parts)), k=min(len(parts) - 1, rng.randint(1, 6))))
    edges = [0] + cuts + [len(parts)]
    return [TimeWindow(parts[a].start, parts[b - 1].end) for a, b in zip(edges, edges[1:])]


@pytest.mark.parametrize("name, unit", [("s.rolling", "hour"), ("s.trailing", "day"), ("s.trailing_duckdb", "day")])
def test_derived_lookback_is_sufficient_and_necessary(spark, project, tmp_path, name, unit):
    whole = (
        TimeWindow(utc(2024, 1, 2), utc(2024, 1, 6)) if unit == "day" else TimeWindow(utc(2024, 1, 2), utc(2024, 1, 3))
    )
    expected = build(spark, project, name, [whole], tmp_path / "whole")
    assert expected
    rng = random.Random(7)
    for attempt in range(2):
        split = random_split(whole, unit, rng)
        assert build(spark, project, name, split, tmp_path / f"split{attempt}") == expected, f"split {split} differs"
    # Without the derived lookback (bounds forced to zero), the same split gives a different table.
    analysis = analysis_of(project, name)
    zero = {n: (SourceBound(timedelta(0), timedelta(0)) if b is not None else None) for n, b in analysis.bounds.items()}
    per_interval = batches(whole, unit, 1)
    crippled = dataclasses.replace(analysis, bounds=zero)
    assert build(spark, project, name, per_interval, tmp_path / "nolookback", analysis=crippled) != expected


def test_pushdown_reads_only_the_bounded_rows(spark, project):
    plan = plan_run(project, project.model("s.trailing"), TimeWindow(utc(2024, 1, 3), utc(2024, 1, 4)))
    (read,) = [r for r in plan.inputs if r.name == "raw.events"]
    assert read.window == TimeWindow(utc(2024, 1, 2), utc(2024, 1, 4))
    assert plan.sql.count("ts >= CAST('2024-01-02 00:00:00' AS TIMESTAMP)") == 2  # both references of the self-join


def test_per_partition_model_runs_one_interval_at_a_time_in_order(spark, project, tmp_path):
    p = with_warehouse(project, tmp_path)
    window = TimeWindow(utc(2024, 1, 1), utc(2024, 1, 5))
    assert analysis_of(project, "s.cumulative").safety_class == "PerPartitionOnly"
    plans = plan_window(p, p.model("s.cumulative"), window)
    assert [pl.window for pl in plans] == batches(window, "day", 1)
    ex = Executor(spark, p)
    for plan in plan_window(p, p.model("s.daily"), window):
        ex.execute(plan)
    for plan in plans:
        ex.execute(plan)
    assert [r[1] for r in table_rows(delta.table_uri(str(tmp_path), "s.cumulative"))] == [48, 96, 144, 192]


def test_refused_model_names_file_and_line_and_downgrade_rebuilds(spark, project, tmp_path, capsys):
    model = project.model("s.numbered")
    with pytest.raises(UnsafeIncrementalError) as err:
        plan_run(project, model, TimeWindow(utc(2024, 1, 2), utc(2024, 1, 3)))
    text = str(err.value)
    assert f"{model.path}:3: [window_function]" in text and "--allow-downgrade" in text
    assert cli.main(["validate", "--project", str(project.directory)]) == 1
    errors = capsys.readouterr().err
    assert "models/numbered.sql:3: error: s.numbered: [window_function]" in errors
    # Downgrade: one rebuild from the model's start, equal to running the query over everything.
    p = with_warehouse(project, tmp_path)
    plans = plan_window(p, model, TimeWindow(utc(2024, 1, 2), utc(2024, 1, 4)), allow_downgrade=True)
    assert len(plans) == 1 and plans[0].downgraded and plans[0].window == TimeWindow(utc(2024, 1, 1), utc(2024, 1, 4))
    Executor(spark, p).execute(plans[0])
    rows = table_rows(delta.table_uri(str(tmp_path), "s.numbered"))
    assert sorted(r[2] for r in rows) == list(range(1, 3 * 48 + 1))


def test_classes_become_backfill_policies_and_lookback_becomes_partition_mapping(project, tmp_path, monkeypatch):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    defs = build_definitions(project)
    policy = lambda n: defs.resolve_assets_def(dg.AssetKey(n.split("."))).backfill_policy  # noqa: E731
    assert policy("s.daily") == dg.BackfillPolicy.single_run()
    assert policy("s.weekahead") == dg.BackfillPolicy.multi_run(7)
    assert policy("s.cumulative") == dg.BackfillPolicy.multi_run(1)
    graph = defs.resolve_asset_graph()
    cumulative = dg.AssetKey(["s", "cumulative"])
    mapping = graph.get_partition_mapping(cumulative, dg.AssetKey(["s", "daily"]))
    assert mapping == dg.TimeWindowPartitionMapping()
    ahead = graph.get_partition_mapping(dg.AssetKey(["s", "weekahead"]), dg.AssetKey(["s", "daily"]))
    assert ahead == dg.TimeWindowPartitionMapping(start_offset=0, end_offset=6)


def test_explain_json(project, capsys):
    assert cli.main(["explain", "s.trailing", "--json", "--project", str(project.directory)]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["safety_class"] == "FullyBatchSafe"
    assert info["sources"] == {"raw.events": {"before": "P1D", "after": "PT0S", "column": "ts"}}
    assert info["partitions"]["interval_unit"] == "day" and info["backfill_policy"].startswith("single run")
    assert cli.main(["explain", "s.trailing_duckdb", "--json", "--project", str(project.directory)]) == 0
    assert json.loads(capsys.readouterr().out)["sources"] == {
        "raw.events": {"before": "P1D", "after": "PT0S", "column": "ts"}
    }
    assert cli.main(["explain", "s.rolling", "--json", "--project", str(project.directory)]) == 0
    assert json.loads(capsys.readouterr().out)["sources"]["raw.events"] == {
        "before": "PT2H",
        "after": "PT0S",
        "column": "ts",
    }
    assert cli.main(["explain", "s.weekahead", "--json", "--project", str(project.directory)]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["safety_class"] == "BoundedSafe(7)" and info["reasons"][0]["rule"] == "window_relative"


PAGE_VIEWS = {
    "sources.yaml": """
        - name: raw.page_views
          location: data/page_views
          format: delta
          time_column: viewed_at
          interval_unit: hour
    """,
    # The everyday metric: distinct users per day, admitted without an override. The source is read
    # 12 hours before the window, so each run also computes a partial earlier day, which the clamp drops.
    "models/daily_users.sql": """
        MODEL (name s.daily_users, kind INCREMENTAL_BY_TIME_RANGE (time_column view_date), start '2024-01-01');
        SELECT CAST(viewed_at AS DATE) AS view_date, COUNT(DISTINCT user_id) AS users, COUNT(*) AS views
        FROM raw.page_views
        WHERE viewed_at BETWEEN @start_dt - INTERVAL 12 HOUR AND @end_dt
        GROUP BY CAST(viewed_at AS DATE)
        HAVING COUNT(DISTINCT user_id) > 1
    """,
    # Distinct users over the whole run: not aligned with the day, so refused...
    "models/run_users.sql": """
        MODEL (name s.run_users, kind INCREMENTAL_BY_TIME_RANGE (time_column viewed_at), start '2024-01-01');
        SELECT p.viewed_at, p.user_id, r.users
        FROM raw.page_views AS p
        CROSS JOIN (SELECT COUNT(DISTINCT user_id) AS users FROM raw.page_views WHERE viewed_at BETWEEN @start_dt
          AND @end_dt) AS r
        WHERE p.viewed_at BETWEEN @start_dt AND @end_dt
    """,
    # ... unless admitted in the spelling the refusal names (one SQLMesh loads too): one day per run.
    "models/run_users_admitted.sql": """
        MODEL (
          name s.run_users_admitted,
          kind INCREMENTAL_BY_TIME_RANGE (time_column viewed_at),
          start '2024-01-01',
          physical_properties (allow_distinct = true, allow_aggregates = true)
        );
        SELECT p.viewed_at, p.user_id, r.users
        FROM raw.page_views AS p
        CROSS JOIN (SELECT COUNT(DISTINCT user_id) AS users FROM raw.page_views WHERE viewed_at BETWEEN @start_dt
          AND @end_dt) AS r
        WHERE p.viewed_at BETWEEN @start_dt AND @end_dt
    """,
}


@pytest.fixture(scope="module")
def page_views(tmp_path_factory):
    import pyarrow as pa
    from deltalake import write_deltalake

    from conftest import write_project

    root = write_project(tmp_path_factory.mktemp("page_views"), PAGE_VIEWS)
    rng = random.Random(11)
    # Users come back on other days; how many distinct ones a day has varies.
    views = sorted(
        (utc(2024, 1, 1) + timedelta(days=day, minutes=rng.randrange(24 * 60)), rng.randrange(1, 8 + 4 * day))
        for day in range(7)
        for _ in range(30)
    )
    write_deltalake(
        str(root / "data" / "page_views"),
        pa.table(
            {
                "viewed_at": pa.array([t for t, _ in views], pa.timestamp("us", tz="UTC")),
                "user_id": pa.array([u for _, u in views], pa.int64()),
            }
        ),
    )
    return load_project(root), views


def test_daily_count_distinct_is_admitted_and_two_chunks_equal_one_full_run(spark, page_views, tmp_path):
    project, views = page_views
    analysis = analysis_of(project, "s.daily_users")
    assert (analysis.safety_class, analysis.reasons) == ("FullyBatchSafe", ())
    whole = TimeWindow(utc(2024, 1, 2), utc(2024, 1, 7))
    expected = build(spark, project, "s.daily_users", [whole], tmp_path / "whole")
    chunks = [TimeWindow(utc(2024, 1, 2), utc(2024, 1, 4)), TimeWindow(utc(2024, 1, 4), utc(2024, 1, 7))]
    assert build(spark, project, "s.daily_users", chunks, tmp_path / "chunks") == expected
    # And the table is the recount over all the data, day by day.
    recount = {}
    for t, user in views:
        if whole.start <= t < whole.end:
            recount.setdefault(t.date(), []).append(user)
    assert expected == sorted((day, len(set(users)), len(users)) for day, users in recount.items())


def test_unaligned_count_distinct_is_refused_naming_an_override_sqlmesh_loads(page_views):
    project, _ = page_views
    (reason,) = [r for r in analysis_of(project, "s.run_users").reasons if r.rule == "distinct"]
    assert (
        reason.line == 4 and "set `physical_properties (allow_distinct = true)` in the MODEL header" in reason.message
    )
    admitted = analysis_of(project, "s.run_users_admitted")
    assert (admitted.safety_class, admitted.batch_limit) == ("PerPartitionOnly", 1)
