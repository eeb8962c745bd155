"""What a Dagster user sees of a model: typed columns, column lineage, table name, Delta location, code
links, freshness on the asset; per-partition windows and row counts (equal to the Delta table's) on every
materialization; messages phrased for where the run was launched."""

from __future__ import annotations

import subprocess
from datetime import timedelta

import dagster as dg
import pytest
from dagster._core.definitions.metadata.metadata_set import TableMetadataSet, UriMetadataSet
from dagster._core.definitions.metadata.source_code import CodeReferencesMetadataSet

from incremental_assets import delta
from incremental_assets.errors import ModelFileError
from incremental_assets.load.project import load_project
from incremental_assets.orchestration.build_definitions import build_definitions
from incremental_assets.orchestration.runner import Runner
from incremental_assets.orchestration.translator import ModelTranslator

from helpers import table_rows, utc, write_events

SOURCES = """\
- name: raw.events
  location: data/events
  format: delta
  time_column: ts
  interval_unit: hour
  columns: {ts: timestamp, k: string, v: bigint}
"""

MODELS = {
    "models/hourly.sql": """
        MODEL (name s.hourly, kind INCREMENTAL_BY_TIME_RANGE (time_column h), start '2024-01-01', cron '@hourly',
               column_descriptions (h = 'Hour start'));
        SELECT date_trunc('HOUR', ts) AS h, k, COUNT(*) AS n, SUM(v) AS total FROM raw.events
        WHERE ts BETWEEN @start_dt AND @end_dt GROUP BY 1, 2
    """,
    "models/daily.sql": """
        -- the header starts on line 2: code references point at it
        MODEL (name s.daily, kind INCREMENTAL_BY_TIME_RANGE (time_column ds), start '2024-01-01', cron '@daily',
               freshness '6 hours');
        SELECT CAST(h AS DATE) AS ds, k, SUM(n) AS n, CAST(SUM(total) AS DOUBLE) / SUM(n) AS mean_v
        FROM s.hourly WHERE h BETWEEN @start_dt AND @end_dt GROUP BY 1, 2
    """,
    "models/total.sql": """
        MODEL (name s.total, kind FULL, freshness off);
        SELECT k, SUM(n) AS n FROM s.daily GROUP BY k
    """,
}

HOURLY, DAILY, TOTAL = dg.AssetKey(["s", "hourly"]), dg.AssetKey(["s", "daily"]), dg.AssetKey(["s", "total"])


@pytest.fixture
def env(make_project, dagster_env):
    root = make_project({"sources.yaml": SOURCES, **MODELS})
    write_events(root / "data" / "events", utc(2024, 1, 1), 24 * 3, per_hour=3)
    return dagster_env(root)


def spec(defs: dg.Definitions, key: dg.AssetKey) -> dg.AssetSpec:
    return defs.resolve_assets_def(key).specs_by_key[key]


def test_spec_shows_types_table_location_code_lineage_and_freshness(env):
    project, _, defs = env
    daily = spec(defs, DAILY)
    table = TableMetadataSet.extract(daily.metadata)  # read back as Dagster's UI reads it
    assert table.table_name == "s.daily"
    assert {c.name: c.type for c in table.column_schema.columns} == {
        "ds": "date",
        "k": "string",
        "n": "bigint",
        "mean_v": "double",
    }
    hourly_schema = TableMetadataSet.extract(spec(defs, HOURLY).metadata).column_schema
    assert [(c.name, c.type, c.description) for c in hourly_schema.columns][0] == ("h", "timestamp", "Hour start")
    assert UriMetadataSet.extract(daily.metadata).uri == delta.table_uri(project.settings.warehouse, "s.daily")
    (ref,) = CodeReferencesMetadataSet.extract(daily.metadata).code_references.code_references
    assert ref.file_path == str(project.model("s.daily").path.resolve()) and ref.line_number == 2
    lineage = table.column_lineage.deps_by_column
    assert lineage["n"] == [dg.TableColumnDep(asset_key=HOURLY, column_name="n")]
    assert {(d.asset_key, d.column_name) for d in lineage["mean_v"]} == {(HOURLY, "total"), (HOURLY, "n")}
    assert TableMetadataSet.extract(spec(defs, HOURLY).metadata).column_lineage.deps_by_column["total"] == [
        dg.TableColumnDep(asset_key=dg.AssetKey(["raw", "events"]), column_name="v")
    ]
    assert daily.metadata["partition_expr"] == "ds"
    # Freshness: the hourly model's from its cron, the daily one's from its header, none for `freshness off`.
    hourly_policy = spec(defs, HOURLY).freshness_policy
    assert hourly_policy.fail_window.to_timedelta() == timedelta(hours=2)
    assert daily.freshness_policy.fail_window.to_timedelta() == timedelta(hours=6)
    assert spec(defs, TOTAL).freshness_policy is None


def test_bad_freshness_names_the_file_and_line(make_project, tmp_path, monkeypatch):
    root = make_project(
        {
            "sources.yaml": SOURCES,
            "models/m.sql": "MODEL (\n  name s.m,\n  kind FULL,\n  freshness 'soon'\n);\nSELECT 1 AS x\n",
        }
    )
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    with pytest.raises(ModelFileError) as raised:
        build_definitions(load_project(root))
    assert "m.sql:4: freshness 'soon' is not a duration" in str(raised.value) and "freshness '6 hours'" in str(
        raised.value
    )


def test_code_references_link_to_the_git_host(env):
    project, _, _ = env
    root = project.directory
    for args in (["init", "-q", "-b", "main"], ["remote", "add", "origin", "git@github.com:acme/shop.git"]):
        subprocess.run(["git", "-C", str(root), *args], check=True)
    defs = build_definitions(load_project(root))
    (ref,) = CodeReferencesMetadataSet.extract(spec(defs, DAILY).metadata).code_references.code_references
    assert ref.url == "https://github.com/acme/shop/tree/main/models/daily.sql#L2"


class SalesTranslator(ModelTranslator):
    """A user's translator that changes the spec as a whole: one tag more, its own group."""

    def get_asset_spec(self, project, model, columns=None):
        spec = super().get_asset_spec(project, model, columns)
        return spec.merge_attributes(tags={"team": "sales"}).replace_attributes(group_name="sales")


def test_a_translator_overriding_get_asset_spec_changes_the_assets_and_they_still_run(env):
    project, instance, default_defs = env
    defs = build_definitions(project, translator=SalesTranslator())
    for key in (HOURLY, DAILY, TOTAL):
        ours, default = spec(defs, key), spec(default_defs, key)
        assert ours.tags == {**default.tags, "team": "sales"} and ours.group_name == "sales" != default.group_name
        assert (ours.deps, ours.metadata, ours.code_version, ours.partitions_def) == (
            default.deps,
            default.metadata,
            default.code_version,
            default.partitions_def,
        )
    assert defs.resolve_assets_def(DAILY).check_keys == default_defs.resolve_assets_def(DAILY).check_keys
    runner = Runner(project, instance, defs, SalesTranslator())
    report = runner.run([project.model("s.hourly")], start=utc(2024, 1, 1), end=utc(2024, 1, 1, 3))
    assert report.success, [r.error for r in report.records]
    assert set(_materializations(instance, HOURLY)) == {"2024-01-01-00:00", "2024-01-01-01:00", "2024-01-01-02:00"}


def _materializations(instance: dg.DagsterInstance, key: dg.AssetKey) -> dict[str | None, dict]:
    records = instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=key), limit=1000).records
    out: dict[str | None, dict] = {}
    for record in reversed(records):  # oldest first: the newest per partition wins
        m = record.asset_materialization
        out[m.partition] = {k: v.value for k, v in m.metadata.items()}
    return out


def test_each_partition_carries_its_own_window_and_row_count(env):
    project, instance, defs = env
    report = Runner(project, instance, defs).run(project.select("+s.total"), start=utc(2024, 1, 1), end=utc(2024, 1, 3))
    assert report.success, [r.error for r in report.records]
    daily_uri = delta.table_uri(project.settings.warehouse, "s.daily")
    per_interval = delta.interval_row_counts(daily_uri)
    events = _materializations(instance, DAILY)
    assert set(events) == {"2024-01-01", "2024-01-02"}
    for day, meta in events.items():
        assert meta["window_start"] == f"{day}T00:00:00+00:00"
        assert meta["window_end"] == (utc(*map(int, day.split("-"))) + timedelta(days=1)).isoformat()
        assert meta["dagster/partition_row_count"] == per_interval[day] == 3  # three keys a day
        assert (
            meta["run_window_start"] == "2024-01-01T00:00:00+00:00"
            and meta["run_window_end"] == "2024-01-03T00:00:00+00:00"
        )
        assert meta["run_rows_written"] == 6 and "SELECT" in meta["run_sql"]
        assert meta["dagster/row_count"] == len(table_rows(daily_uri)) == 6
        assert {c.name: c.type for c in meta["dagster/column_schema"].columns} == {
            "ds": "date",
            "k": "string",
            "n": "bigint",
            "mean_v": "double",
        }
        assert meta["dagster/uri"] == daily_uri and meta["delta_version"] == delta.version(daily_uri)
    hourly = _materializations(instance, HOURLY)
    counts = delta.interval_row_counts(delta.table_uri(project.settings.warehouse, "s.hourly"))
    partitions = defs.resolve_assets_def(HOURLY).partitions_def
    unit = project.model("s.hourly").unit
    interval_key = {pk: unit.partition_key(partitions.time_window_for_partition_key(pk).start) for pk in hourly}
    assert len(hourly) == 48 and sum(counts.values()) == 48 * 3
    assert all(hourly[pk]["dagster/partition_row_count"] == counts[interval_key[pk]] == 3 for pk in hourly)
    total = _materializations(instance, TOTAL)[None]
    assert total["dagster/row_count"] == 3 and "window_start" not in total


def test_missing_upstream_message_speaks_dagster_in_dagster_and_cli_in_the_cli(env):
    project, instance, defs = env
    job = defs.resolve_implicit_global_asset_job_def()
    result = job.execute_in_process(
        instance=instance, asset_selection=[DAILY], partition_key="2024-01-02", raise_on_error=False
    )
    assert not result.success
    (failure,) = [e for e in result.all_events if e.is_step_failure]
    message = (
        failure.step_failure_data.error.cause.message
        if failure.step_failure_data.error.cause
        else failure.step_failure_data.error.message
    )
    assert "s.hourly is missing [2024-01-02, 2024-01-03)" in message
    assert "Materialize those partitions of s/hourly first" in message and "select +" not in message
    cli_report = Runner(project, instance, defs).run(
        [project.model("s.daily")], start=utc(2024, 1, 2), end=utc(2024, 1, 3)
    )
    assert "incremental-assets run +s.daily" in cli_report.records[0].error
