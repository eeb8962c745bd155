"""Model lifecycle: a changed definition rebuilds the model from its start in one commit (unless
forward_only), Dagster flags it and its downstream stale, schema changes follow on_additive_change /
on_destructive_change, `run --full-refresh` rebuilds a selection, and a killed rebuild loses nothing."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import dagster as dg
import pytest
from dagster._core.definitions.data_version import CachingStaleStatusResolver, StaleCauseCategory, StaleStatus
from dagster._core.loader import LoadingContextForTest
from deltalake import DeltaTable

from incremental_assets import cli, delta
from incremental_assets.errors import ModelFileError
from incremental_assets.load.project import load_project
from incremental_assets.model.intervals import TimeWindow
from incremental_assets.orchestration.runner import Runner
from incremental_assets.orchestration.status import model_status
from incremental_assets.plan.run_plan import plan_run, plan_window
from incremental_assets.spark.executor import Executor

from conftest import REPO
from helpers import EVENTS_SOURCE, table_rows, table_uri, utc, write_events

DAILY = """
MODEL (name s.daily, kind INCREMENTAL_BY_TIME_RANGE (time_column ds{options}),
  start '2024-01-01', description 'per day');
SELECT CAST(ts AS DATE) AS ds, k, {measure} AS n FROM raw.events WHERE ts BETWEEN @start_dt AND @end_dt GROUP BY 1, 2
"""
COPY = """
MODEL (name s.copy, kind INCREMENTAL_BY_TIME_RANGE (time_column ds), start '2024-01-01');
SELECT ds, SUM(n) AS n FROM s.daily WHERE ds BETWEEN @start_ds AND @end_ds GROUP BY ds
"""
TOTAL = """
MODEL (name s.total, kind FULL);
SELECT k, SUM(n) AS n FROM s.daily GROUP BY k
"""
DAY = {f"2024-01-0{d}": d for d in range(1, 8)}


def daily(measure: str = "COUNT(*)", options: str = "", description: str = "per day") -> str:
    return DAILY.format(measure=measure, options=options).replace("'per day'", repr(description))


def expected_daily(days, factor: int = 1, hours_per_day: int = 24):
    """Rows of s.daily for the given days (1-based January days) of write_events data: k0..k2 by hour."""
    from datetime import date

    rows = []
    for d in days:
        hours = range((d - 1) * hours_per_day, d * hours_per_day)
        for k in ("k0", "k1", "k2"):
            rows.append((date(2024, 1, d), k, factor * sum(1 for h in hours if f"k{h % 3}" == k)))
    return sorted(rows)


@pytest.fixture
def env(spark, make_project, dagster_env):
    # `spark`: the runs' Spark resource gets the session's one SparkSession instead of starting a JVM.
    root = make_project(
        {"sources.yaml": EVENTS_SOURCE, "models/daily.sql": daily(), "models/copy.sql": COPY, "models/total.sql": TOTAL}
    )
    write_events(root / "data" / "events", utc(2024, 1, 1), 24 * 7)

    def load():
        project, instance, defs = dagster_env(root)
        return project, instance, defs, Runner(project, instance, defs)

    return root, load


def stale(instance, defs, name: str, partition: str | None):
    resolver = CachingStaleStatusResolver(instance, defs.resolve_asset_graph(), LoadingContextForTest(instance))
    key = dg.AssetKey(name.split("."))
    return resolver.get_status(key, partition), {c.category for c in resolver.get_stale_causes(key, partition)}


def count_fingerprint_reads(monkeypatch) -> list[str]:
    """The tables whose built-with fingerprint is read (delta.built_with still does the reading)."""
    reads: list[str] = []
    real = delta.built_with

    def built_with(uri: str) -> str | None:
        reads.append(uri)
        return real(uri)

    monkeypatch.setattr(delta, "built_with", built_with)
    return reads


def test_a_changed_model_is_rebuilt_from_its_start_in_one_commit_and_flagged_stale(env, capsys, monkeypatch):
    root, load = env
    project, instance, defs, runner = load()
    reads = count_fingerprint_reads(monkeypatch)
    assert runner.run(project.select("s.daily+"), start=utc(2024, 1, 1), end=utc(2024, 1, 4)).success
    # Once per incremental model: each Dagster run gets it from its launcher instead of reading it again.
    assert reads == [table_uri(project, "s.daily"), table_uri(project, "s.copy")]
    assert table_rows(table_uri(project, "s.daily")) == expected_daily([1, 2, 3])
    assert stale(instance, defs, "s.daily", "2024-01-02")[0] == StaleStatus.FRESH

    # Only the description changes: same fingerprint, nothing to rebuild.
    (root / "models" / "daily.sql").write_text(daily(description="rows per day"))
    project, instance, defs, runner = load()
    assert not model_status(
        instance,
        project.model("s.daily"),
        built_with=delta.built_with(table_uri(project, "s.daily")),
        now=utc(2024, 1, 4),
    ).changed

    # The query changes: the model is stale in Dagster (code version); status says what gets rebuilt.
    (root / "models" / "daily.sql").write_text(daily(measure="COUNT(*) * 10"))
    project, instance, defs, runner = load()
    status, causes = stale(instance, defs, "s.daily", "2024-01-02")
    assert status == StaleStatus.STALE and StaleCauseCategory.CODE in causes
    st = model_status(
        instance,
        project.model("s.daily"),
        built_with=delta.built_with(table_uri(project, "s.daily")),
        now=utc(2024, 1, 4),
    )
    assert st.changed and st.rebuild == TimeWindow(utc(2024, 1, 1), utc(2024, 1, 4))
    assert cli.main(["status", "s.daily", "--until", "2024-01-04", "--project", str(root)]) == 0
    assert (
        "s.daily: CHANGED since its table was built; the next run rebuilds [2024-01-01, 2024-01-04)"
        in capsys.readouterr().out
    )

    # A run of one new day rebuilds every recorded day too, in ONE commit.
    version = DeltaTable(table_uri(project, "s.daily")).version()
    reads.clear()
    report = runner.run([project.model("s.daily")], start=utc(2024, 1, 4), end=utc(2024, 1, 5))
    assert report.success and len(report.records) == 1
    assert reads == [table_uri(project, "s.daily")], "the rebuild reads the table's fingerprint once"
    assert report.records[0].window == TimeWindow(utc(2024, 1, 1), utc(2024, 1, 5))
    assert DeltaTable(table_uri(project, "s.daily")).version() == version + 1
    assert table_rows(table_uri(project, "s.daily")) == expected_daily([1, 2, 3, 4], factor=10)
    last = DeltaTable(table_uri(project, "s.daily")).history(1)[0]
    assert (
        last["incremental_assets.write"] == "rebuild"
        and last["incremental_assets.fingerprint"] == project.model("s.daily").fingerprint
    )
    assert stale(instance, defs, "s.daily", "2024-01-02")[0] == StaleStatus.FRESH
    event = instance.get_latest_materialization_event(dg.AssetKey(["s", "daily"]))
    assert event.asset_materialization.metadata["fingerprint"].value == project.model("s.daily").fingerprint
    # The downstream read the old rows: its input changed, so it is flagged stale until it runs again.
    status, causes = stale(instance, defs, "s.copy", "2024-01-02")
    assert status == StaleStatus.STALE and StaleCauseCategory.DATA in causes
    # Dagster does not track an unpartitioned model reading a partitioned one: status tells both.
    assert cli.main(["status", "--until", "2024-01-05", "--project", str(root)]) == 0
    out = capsys.readouterr().out
    assert "s.copy: STALE: s.daily changed after [2024-01-01, 2024-01-04) were computed" in out
    assert "s.total: STALE: s.daily changed since this table was written" in out
    assert runner.run([project.model("s.copy")], start=utc(2024, 1, 1), end=utc(2024, 1, 4)).success
    assert stale(instance, defs, "s.copy", "2024-01-02")[0] == StaleStatus.FRESH
    assert cli.main(["status", "s.copy", "--until", "2024-01-05", "--project", str(root)]) == 0
    assert "STALE" not in capsys.readouterr().out
    assert not model_status(
        instance,
        project.model("s.daily"),
        built_with=delta.built_with(table_uri(project, "s.daily")),
        now=utc(2024, 1, 5),
    ).changed

    # A partial backfill of a changed model from Dagster itself is refused: it would mix definitions.
    (root / "models" / "daily.sql").write_text(daily(measure="COUNT(*) * 100"))
    project, instance, defs, runner = load()
    record = runner.run_window(project.model("s.daily"), TimeWindow(utc(2024, 1, 2), utc(2024, 1, 3)))
    assert not record.success and "rebuilt from its start" in record.error and "--full-refresh" in record.error
    assert table_rows(table_uri(project, "s.daily")) == expected_daily([1, 2, 3, 4], factor=10)


def test_forward_only_keeps_existing_intervals_and_uses_the_new_query_for_new_ones(env):
    root, load = env
    (root / "models" / "daily.sql").write_text(daily(options=", forward_only true"))
    project, instance, defs, runner = load()
    assert runner.run([project.model("s.daily")], start=utc(2024, 1, 1), end=utc(2024, 1, 3)).success
    (root / "models" / "daily.sql").write_text(daily(measure="COUNT(*) * 10", options=", forward_only true"))
    project, instance, defs, runner = load()
    built = delta.built_with(table_uri(project, "s.daily"))
    assert built != project.model("s.daily").fingerprint
    assert not model_status(instance, project.model("s.daily"), built_with=built, now=utc(2024, 1, 4)).changed
    report = runner.run([project.model("s.daily")], start=utc(2024, 1, 3), end=utc(2024, 1, 4))
    assert report.success and report.records[0].window == TimeWindow(utc(2024, 1, 3), utc(2024, 1, 4))
    assert table_rows(table_uri(project, "s.daily")) == sorted(expected_daily([1, 2]) + expected_daily([3], factor=10))
    # --full-refresh still rebuilds everything with the current definition.
    assert cli.main(["run", "s.daily", "s.total", "--full-refresh", "--end", "2024-01-04", "--project", str(root)]) == 0
    assert table_rows(table_uri(project, "s.daily")) == expected_daily([1, 2, 3], factor=10)
    assert table_rows(table_uri(project, "s.total")) == sorted((k, 240) for k in ("k0", "k1", "k2"))


# -- schema changes (forward_only models keep their table, so its schema meets the new query) ---------

WITH_TOTAL = "COUNT(*) AS n, SUM(v) AS total FROM raw.events WHERE ts BETWEEN @start_dt AND @end_dt GROUP BY 1, 2\n"


def schema_model(
    policy: str = "",
    select: str = "COUNT(*) AS n FROM raw.events WHERE ts BETWEEN @start_dt AND @end_dt GROUP BY 1, 2\n",
) -> str:
    return (
        f"MODEL (name s.daily, kind INCREMENTAL_BY_TIME_RANGE (time_column ds, forward_only true{policy}), "
        "start '2024-01-01');\n"
        f"SELECT CAST(ts AS DATE) AS ds, k, {select}"
    )


def run_days(spark, root, text: str, first: int, last: int):
    (root / "models" / "daily.sql").write_text(text)
    p = load_project(root)
    ex = Executor(spark, p)
    for plan in plan_window(p, p.model("s.daily"), TimeWindow(utc(2024, 1, first), utc(2024, 1, last + 1))):
        ex.execute(plan)
    return p


def columns(p) -> dict[str, str]:
    return {f.name: str(f.type) for f in delta.arrow_schema(table_uri(p, "s.daily"))}


@pytest.fixture
def schema_project(make_project):
    root = make_project(
        {
            "sources.yaml": EVENTS_SOURCE,
            "models/total.sql": TOTAL.replace("SUM(n) AS n", "SUM(n) AS n, MAX(total) AS top"),
        }
    )
    write_events(root / "data" / "events", utc(2024, 1, 1), 24 * 4)
    return root


def test_additive_change_allowed_by_default_evolves_the_table_in_the_same_commit(spark, schema_project):
    root = schema_project
    p = run_days(
        spark,
        root,
        schema_model(
            select="CAST(COUNT(*) AS INT) AS n FROM raw.events WHERE ts BETWEEN @start_dt AND @end_dt GROUP BY 1, 2\n"
        ),
        1,
        2,
    )
    version = DeltaTable(table_uri(p, "s.daily")).version()
    # A new column and int -> bigint widening, both additive.
    p = run_days(spark, root, schema_model(select=WITH_TOTAL), 3, 3)
    assert DeltaTable(table_uri(p, "s.daily")).version() == version + 1
    assert columns(p) == {"ds": "date32[day]", "k": "string", "n": "int64", "total": "int64"}
    rows = table_rows(table_uri(p, "s.daily"))
    assert [r[3] for r in rows if r[0].day < 3] == [None] * 6 and all(r[3] is not None for r in rows if r[0].day == 3)
    # Spark reads the table's mixed data files (old ones lack total and hold n as int) through a downstream model.
    Executor(spark, p).execute(plan_run(p, p.model("s.total"), None))
    totals = table_rows(table_uri(p, "s.total"))
    assert [r[1] for r in totals] == [24, 24, 24] and all(r[2] is not None for r in totals)


@pytest.mark.parametrize(
    "policy, outcome",
    [
        ("on_additive_change error", "error"),
        ("on_additive_change warn", "evolved"),
        ("on_additive_change ignore", "kept"),
    ],
)
def test_additive_change_policies(spark, schema_project, caplog, policy, outcome):
    root = schema_project
    run_days(spark, root, schema_model(", " + policy), 1, 1)
    if outcome == "error":
        with pytest.raises(ModelFileError) as err:
            run_days(spark, root, schema_model(", " + policy, WITH_TOTAL), 2, 2)
        text = str(err.value)
        assert (
            "daily.sql:1" in text
            and "additive schema change" in text
            and "new column total" in text
            and "on_additive_change" in text
        )
        return
    with caplog.at_level(logging.WARNING, logger="incremental_assets"):
        p = run_days(spark, root, schema_model(", " + policy, WITH_TOTAL), 2, 2)
    if outcome == "evolved":
        assert "total" in columns(p) and any(
            "additive schema change applied: new column total" in r.getMessage() for r in caplog.records
        )
    else:
        assert list(columns(p)) == ["ds", "k", "n"] and len(table_rows(table_uri(p, "s.daily"))) == 6


@pytest.mark.parametrize("policy", ["", "on_destructive_change allow", "on_destructive_change ignore"])
def test_destructive_change_policies(spark, schema_project, policy):
    root = schema_project
    run_days(spark, root, schema_model(select=WITH_TOTAL), 1, 1)
    dropped = schema_model(
        ", " + policy if policy else "",
        "SUM(v) AS total FROM raw.events WHERE ts BETWEEN @start_dt AND @end_dt GROUP BY 1, 2\n",
    )
    if not policy:  # the default is error
        with pytest.raises(
            ModelFileError, match=r"daily.sql:1.*destructive schema change.*column n dropped.*on_destructive_change"
        ):
            run_days(spark, root, dropped, 2, 2)
        return
    p = run_days(spark, root, dropped, 2, 2)
    rows = table_rows(table_uri(p, "s.daily"))
    if policy.endswith("allow"):
        assert list(columns(p)) == ["ds", "k", "total"] and len(rows) == 6
    else:  # ignore: the table keeps n; the new rows hold NULL there
        assert list(columns(p)) == ["ds", "k", "n", "total"]
        assert [r[2] for r in rows if r[0].day == 2] == [None] * 3 and [r[2] for r in rows if r[0].day == 1] == [
            8,
            8,
            8,
        ]
    # Narrowing a type cannot be applied in place, even when destructive changes are allowed.
    narrowed = schema_model(
        ", " + policy,
        "CAST(SUM(v) AS INT) AS total FROM raw.events WHERE ts BETWEEN @start_dt AND @end_dt GROUP BY 1, 2\n",
    )
    if policy.endswith("allow"):
        with pytest.raises(ModelFileError, match="cannot change column types in place"):
            run_days(spark, root, narrowed, 3, 3)


# -- crashes: a killed rebuild leaves the previous table (FULL, SEED and materialized VIEW: test_kinds) ---


def cli_in_subprocess(root, args, kill_at: str) -> int:
    env = {
        **os.environ,
        "INCREMENTAL_ASSETS_KILL_AT": kill_at,
        "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
    }
    code = "import sys; from incremental_assets.cli import main; sys.exit(main(sys.argv[1:]))"
    done = subprocess.run(
        [sys.executable, "-c", code, *args, "--project", str(root)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return done.returncode


def test_a_killed_rebuild_leaves_the_previous_table_whole(env):
    root, load = env
    project, instance, defs, runner = load()
    assert runner.run(project.select("s.daily"), start=utc(2024, 1, 1), end=utc(2024, 1, 4)).success
    before = table_rows(table_uri(project, "s.daily"))
    version = DeltaTable(table_uri(project, "s.daily")).version()

    # The changed model's rebuild is killed with every file staged: the old table stays, whole.
    (root / "models" / "daily.sql").write_text(daily(measure="COUNT(*) * 10"))
    assert cli_in_subprocess(root, ["run", "s.daily", "--auto", "--end", "2024-01-04"], "staged") == -9
    assert DeltaTable(table_uri(project, "s.daily")).version() == version
    assert table_rows(table_uri(project, "s.daily")) == before
    from pathlib import Path

    staged = [f for d in Path(table_uri(project, "s.daily")).glob("run-*") for f in d.rglob("*.parquet")]
    assert len(staged) >= 4, "the kill came before the rebuild's files were staged"

    # The next run rebuilds the changed model for good.
    project, instance, defs, runner = load()
    assert runner.run([project.model("s.daily")], auto=True, end=utc(2024, 1, 4)).success
    assert table_rows(table_uri(project, "s.daily")) == expected_daily([1, 2, 3], factor=10)


def test_schema_changes_are_classified_like_delta_type_widening(tmp_path):
    from incremental_assets.load.model_file import parse_model_file
    from incremental_assets.plan.schema_changes import compare, decide, is_widening

    assert [
        is_widening(a, b)
        for a, b in [("int", "bigint"), ("float", "double"), ("date", "timestamp"), ("decimal(10,2)", "decimal(12,2)")]
    ] == [True] * 4
    assert [
        is_widening(a, b)
        for a, b in [("bigint", "int"), ("int", "string"), ("decimal(10,2)", "decimal(10,3)"), ("double", "float")]
    ] == [False] * 4
    diff = compare({"ds": "date", "n": "bigint", "old": "string"}, {"ds": "date", "n": "int", "new": "string"})
    assert (
        diff.added == ("new",)
        and diff.dropped == ("old",)
        and diff.retyped == (("n", "bigint", "int"),)
        and diff.additive
        and diff.destructive
    )
    path = tmp_path / "m.sql"
    path.write_text(schema_model(", on_additive_change ignore, on_destructive_change ignore"))
    decision = decide(
        parse_model_file(path),
        {"ds": "date", "k": "string", "n": "bigint"},
        {"ds": "date", "k": "string", "n": "int", "extra": "double"},
    )
    # ignore + ignore: exactly the table's columns, in its order, the narrowed one cast back.
    assert [(c.name, c.cast, c.null) for c in decision.columns] == [
        ("ds", None, False),
        ("k", None, False),
        ("n", "bigint", False),
    ]
