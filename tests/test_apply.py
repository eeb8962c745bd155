"""`run --auto` applies what `plan` shows: each category recomputes what it says and no more, the tables
equal those of a full run of the edited project, Dagster's own stale status agrees, forward-only keeps
the built intervals' files, a metadata change recomputes nothing, and a plain view is never stale.
Real Spark, Delta and a Dagster instance on SQLite."""

from __future__ import annotations

import json
import os

import dagster as dg
import pytest
from dagster._core.definitions.data_version import CachingStaleStatusResolver, StaleStatus
from dagster._core.loader import LoadingContextForTest

from incremental_assets import cli, delta
from incremental_assets.load.project import load_project
from incremental_assets.orchestration.build_definitions import build_definitions
from incremental_assets.orchestration.instance import open_instance

from helpers import DAILY_KEYS_MODEL, DAILY_TOTALS_MODEL, EVENTS_SOURCE, table_rows, utc, write_events

DAILY = """
MODEL (name s.daily, kind INCREMENTAL_BY_TIME_RANGE (time_column ds{forward}),
  start '2024-01-01', description '{description}');
SELECT CAST(ts AS DATE) AS ds, k, {measure} AS n{extra} FROM raw.events WHERE ts BETWEEN @start_dt AND @end_dt
  GROUP BY 1, 2
"""
TOTALS = DAILY_TOTALS_MODEL
KEYS = DAILY_KEYS_MODEL
SUMMARY = """
MODEL (name s.summary, kind VIEW);
SELECT k, SUM(n) AS n FROM s.daily GROUP BY k
"""
MODELS = ("s.daily", "s.totals", "s.keys")
END = "2024-01-04"


def daily(measure="COUNT(*)", extra="", description="per day", forward="") -> str:
    return DAILY.format(measure=measure, extra=extra, description=description, forward=forward)


def make(base, name, daily_sql, days=3):
    from conftest import write_project

    root = write_project(
        base / name,
        {
            "sources.yaml": EVENTS_SOURCE,
            "models/daily.sql": daily_sql,
            "models/totals.sql": TOTALS,
            "models/keys.sql": KEYS,
            "models/summary.sql": SUMMARY,
        },
    )
    write_events(root / "data" / "events", utc(2024, 1, 1), 24 * days)
    return root


def cli_run(root, *args, capsys=None) -> str:
    code = cli.main(["run", "--project", str(root), *args])
    out = capsys.readouterr().out if capsys else ""
    assert code == 0, out
    return out


def plan(root, capsys) -> dict[str, dict]:
    capsys.readouterr()
    assert cli.main(["plan", "--json", "--project", str(root)]) == 0
    return {m["name"]: m for m in json.loads(capsys.readouterr().out)["models"]}


def instance_of(root):
    return open_instance(load_project(root).settings.dagster_home)


def materializations(root) -> dict[str, int]:
    instance = instance_of(root)
    return {m: len(instance.fetch_materializations(dg.AssetKey(m.split(".")), limit=1000).records) for m in MODELS}


def stale(root, model) -> dict[str, StaleStatus]:
    """Dagster's own stale status of each partition of ``model``, from the resolver the UI uses."""
    instance = instance_of(root)
    defs = build_definitions(load_project(root))
    resolver = CachingStaleStatusResolver(instance, defs.resolve_asset_graph(), LoadingContextForTest(instance))
    key = dg.AssetKey(model.split("."))
    return {
        pk: (resolver.get_status(key, pk), resolver.get_stale_causes(key, pk))
        for pk in sorted(instance.get_materialized_partitions(key))
    }


def statuses(root, model) -> set[StaleStatus]:
    found = stale(root, model)
    return {status for status, _ in found.values()}


def fresh(root) -> dict:
    """Every partition Dagster does not call fresh, with why (empty: all fresh)."""
    return {
        (m, pk): causes
        for m in MODELS
        for pk, (status, causes) in stale(root, m).items()
        if status != StaleStatus.FRESH
    }


def tables(root) -> dict[str, list]:
    warehouse = load_project(root).settings.warehouse
    return {m: table_rows(delta.table_uri(warehouse, m)) for m in MODELS}


def full_run(base, name, daily_sql) -> dict[str, list]:
    """The tables a fresh full run of the edited project gives (its own warehouse and instance)."""
    root = make(base, name, daily_sql)
    home = os.environ["DAGSTER_HOME"]
    os.environ["DAGSTER_HOME"] = str(root / ".dagster")  # its own instance
    try:
        cli_run(root, "--auto", "--end", END)
        return tables(root)
    finally:
        os.environ["DAGSTER_HOME"] = home


@pytest.fixture
def built(spark, tmp_path, monkeypatch):
    root = make(tmp_path, "project", daily())
    monkeypatch.setenv("DAGSTER_HOME", str(root / ".dagster"))
    cli_run(root, "--auto", "--end", END)
    return root


def status(root, capsys) -> str:
    capsys.readouterr()
    assert cli.main(["status", "--project", str(root)]) == 0
    return capsys.readouterr().out


def test_run_auto_recomputes_by_category_and_dagster_agrees(built, tmp_path, capsys):
    root = built
    before = materializations(root)
    # An added column: s.daily is rebuilt; no model reads it: nothing else is recomputed, nothing stale.
    (root / "models" / "daily.sql").write_text(daily(extra=", MAX(v) AS top"))
    assert {m: c["category"] for m, c in plan(root, capsys).items() if m in MODELS} == {
        "s.daily": "non-breaking",
        "s.totals": "indirect-non-breaking",
        "s.keys": "indirect-non-breaking",
    }
    cli_run(root, "s.daily", "--auto", "--end", END)
    assert fresh(root) == {}  # Dagster: the downstream partitions are not stale (data version kept)
    out = status(root, capsys)
    assert "STALE" not in out, out  # ours neither, and the plain view s.summary over s.daily never is
    cli_run(root, "--auto", "--end", END)
    after = materializations(root)
    assert {m: after[m] - before[m] for m in MODELS} == {"s.daily": 3, "s.totals": 0, "s.keys": 0}
    assert fresh(root) == {}
    assert {c["category"] for c in plan(root, capsys).values()} == {"unchanged"}
    assert tables(root) == full_run(tmp_path, "full1", daily(extra=", MAX(v) AS top"))

    # n changes: s.totals reads it (indirect-breaking), s.keys does not (indirect-non-breaking).
    (root / "models" / "daily.sql").write_text(daily(measure="SUM(v)", extra=", MAX(v) AS top"))
    cli_run(root, "s.daily", "--auto", "--end", END)
    assert statuses(root, "s.totals") == {StaleStatus.STALE}
    out = status(root, capsys)
    assert "s.totals: STALE" in out and "s.keys: STALE" not in out, out
    before = materializations(root)
    cli_run(root, "--auto", "--end", END)
    after = materializations(root)
    assert {m: after[m] - before[m] for m in MODELS} == {"s.daily": 0, "s.totals": 3, "s.keys": 0}
    assert statuses(root, "s.totals") == statuses(root, "s.daily") == {StaleStatus.FRESH}
    assert {c["category"] for c in plan(root, capsys).values()} == {"unchanged"}
    assert tables(root) == full_run(tmp_path, "full2", daily(measure="SUM(v)", extra=", MAX(v) AS top"))


def test_forward_only_keeps_built_intervals_and_metadata_recomputes_nothing(built, capsys):
    root = built
    warehouse = load_project(root).settings.warehouse
    uri = delta.table_uri(warehouse, "s.daily")
    old_files = sorted(delta.committed_files(uri))
    before = materializations(root)
    # A description only: nothing recomputed, and the plan is clean afterwards.
    (root / "models" / "daily.sql").write_text(daily(description="events per key and day"))
    assert plan(root, capsys)["s.daily"]["category"] == "metadata"
    cli_run(root, "--auto", "--end", END)
    assert materializations(root) == before
    assert {c["category"] for c in plan(root, capsys).values()} == {"unchanged"}
    assert delta.stored_definition(uri, delta.built_with(uri))["metadata"]["description"] == "events per key and day"

    # n changes, forward-only for this run, and a fourth day arrives.
    (root / "models" / "daily.sql").write_text(daily(measure="SUM(v)", description="events per key and day"))
    # (appended: rewriting the whole source would be new data for the built days too, recomputed by run --auto)
    write_events(root / "data" / "events", utc(2024, 1, 4), 24, mode="append")
    cli_run(root, "--auto", "--forward-only", "--end", "2024-01-05")
    after = materializations(root)
    assert {m: after[m] - before[m] for m in MODELS} == {"s.daily": 1, "s.totals": 1, "s.keys": 1}  # the new day only
    assert set(old_files) <= set(delta.committed_files(uri))  # the built intervals' files are untouched
    rows = {(str(r[0]), r[1]): r[2] for r in table_rows(uri)}
    assert rows[("2024-01-01", "k0")] == 8  # COUNT(*) as built
    assert rows[("2024-01-04", "k0")] == sum(i % 7 for i in range(24) if i % 3 == 0)  # SUM(v) for the new day
    assert {c["category"] for c in plan(root, capsys).values()} == {"unchanged"}
    assert statuses(root, "s.totals") == statuses(root, "s.keys") == {StaleStatus.FRESH}  # downstream not restated


def test_a_rebuild_that_reads_late_rows_leaves_the_downstream_intervals_they_reach_to_recompute(built, tmp_path):
    """A definition change that no downstream model reads, applied while late rows wait in the source: the
    rebuild reads them too, so the downstream intervals they reach are recomputed, not confirmed as current."""
    root = built
    late = utc(2024, 1, 2, 5, 30)  # two rows of a built day, appended (k0, k1)
    write_events(root / "data" / "events", late, 2, mode="append")
    edited = daily(extra=", MAX(v) AS top")  # a new column: s.totals and s.keys read none of the changed ones
    (root / "models" / "daily.sql").write_text(edited)
    cli_run(root, "--auto", "--end", END)
    cli_run(root, "--auto", "--end", END)

    recomputed = make(tmp_path, "recomputed", edited)
    write_events(recomputed / "data" / "events", late, 2, mode="append")
    home = os.environ["DAGSTER_HOME"]
    os.environ["DAGSTER_HOME"] = str(recomputed / ".dagster")
    try:
        cli_run(recomputed, "--auto", "--end", END)
    finally:
        os.environ["DAGSTER_HOME"] = home
    assert tables(root) == tables(recomputed)
