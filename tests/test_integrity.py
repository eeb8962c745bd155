"""Dagster's record against the tables: a table that lost rows behind a green record is reported by
`status` and `verify`, and `run --auto` computes exactly the lost intervals again.

Each test damages a real table the way it happens in practice (the newest log file deleted, a data
file deleted, cut off or overwritten, the whole table folder removed) after real runs recorded in a
real Dagster instance, then runs the commands a user runs.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from incremental_assets import cli, delta
from incremental_assets.load.project import load_project

from helpers import EVENTS_SOURCE, cli_output, table_rows, utc, write_events

DAILY = """
MODEL (name s.daily, kind INCREMENTAL_BY_TIME_RANGE (time_column ds), start '2024-01-01');
SELECT CAST(ts AS DATE) AS ds, k, COUNT(*) AS n FROM raw.events WHERE ts BETWEEN @start_dt AND @end_dt GROUP BY 1, 2
"""
TOTAL = """
MODEL (name s.total, kind FULL);
SELECT k, SUM(n) AS n FROM s.daily GROUP BY k
"""
# Three runs, three Delta versions: days 1-2, 3-4, 5-7 (a quiet day 6 with no events at all).
RUNS = [("2024-01-01", "2024-01-03"), ("2024-01-03", "2024-01-05"), ("2024-01-05", "2024-01-08")]


@pytest.fixture
def built(spark, make_project, tmp_path, monkeypatch):
    root = make_project({"sources.yaml": EVENTS_SOURCE, "models/daily.sql": DAILY, "models/total.sql": TOTAL})
    write_events(root / "data" / "events", utc(2024, 1, 1), 24 * 5)
    write_events(root / "data" / "events", utc(2024, 1, 7), 24, mode="append")  # nothing on day 6
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    for start, end in RUNS:
        assert cli.main(["run", "s.daily", "--start", start, "--end", end, "--project", str(root)]) == 0
    assert cli.main(["run", "s.total", "--project", str(root)]) == 0
    project = load_project(root)
    uri = delta.table_uri(project.settings.warehouse, "s.daily")
    return root, uri, table_rows(uri), delta.table_uri(project.settings.warehouse, "s.total")


def files_of(uri: str, day: str) -> list[Path]:
    return sorted((Path(uri) / f"{delta.PARTITION_COLUMN}={day}").rglob("*.parquet")) or sorted(
        Path(f) for f in delta.committed_files(uri) if f"{delta.PARTITION_COLUMN}={day}" in f
    )


def referenced(uri: str, day: str) -> list[Path]:
    return [Path(f.uri.replace("file://", "")) for f in delta.snapshot_files(uri) if f.interval == day]


def recomputed(out: str) -> list[str]:
    """The windows `run` reported running for s.daily."""
    return [line.split("s.daily ", 1)[1].split(":", 1)[0] for line in out.splitlines() if "] s.daily " in line]


def test_a_deleted_newest_log_file_is_reported_and_exactly_its_intervals_recomputed(built, capsys):
    root, uri, clean, _ = built
    newest = sorted((Path(uri) / "_delta_log").glob("*.json"))[-1]
    newest.unlink()  # the table falls back a version: days 5-7 are gone from it
    assert table_rows(uri) != clean

    code, out = cli_output(root, capsys, "status", "s.daily", "--until", "2024-01-08")
    assert code == 1  # what Dagster shows as done is not in the table
    assert "s.daily: NOT IN TABLE: [2024-01-05, 2024-01-08) recorded but absent (table " in out
    assert "is at Delta version 1, behind version 2 that Dagster recorded" in out
    assert "  covered: [2024-01-01, 2024-01-05)" in out and "  lost:    [2024-01-05, 2024-01-08)" in out
    assert "`incremental-assets run --auto` computes those intervals again" in out

    code, out = cli_output(root, capsys, "verify", "s.daily")
    assert code == 1
    assert "s.daily: recorded but not in the table: intervals [2024-01-05, 2024-01-08)" in out
    assert "fix: `incremental-assets run --auto` computes those intervals again" in out

    code, out = cli_output(root, capsys, "run", "s.daily", "--auto", "--end", "2024-01-08")
    assert code == 0
    assert "s.daily: recorded but not in its table: [2024-01-05, 2024-01-08)" in out
    assert recomputed(out) == ["[2024-01-05, 2024-01-08)"]
    assert table_rows(uri) == clean
    # The new commit reuses version 2: the record now names the run that made it, so all is consistent.
    assert cli_output(root, capsys, "verify", "s.daily", "--files")[0] == 0
    assert recomputed(cli_output(root, capsys, "run", "s.daily", "--auto", "--end", "2024-01-08")[1]) == []
    assert cli_output(root, capsys, "status", "--until", "2024-01-08")[0] == 0


def test_a_scoped_run_over_lost_intervals_computes_its_scope_and_says_only_that(built, capsys):
    root, uri, clean, _ = built
    (sorted((Path(uri) / "_delta_log").glob("*.json"))[-1]).unlink()  # days 5-7 lost

    code, out = cli_output(root, capsys, "run", "s.daily", "--start", "2024-01-04", "--end", "2024-01-06")
    assert code == 0 and recomputed(out) == ["[2024-01-04, 2024-01-06)"]
    assert "s.daily: recorded but not in its table: [2024-01-05, 2024-01-06) (" in out and "); computing again" in out
    # The lost days outside the scope are advice, never "computing again".
    assert "s.daily: recorded but not in its table: [2024-01-06, 2024-01-08) (" in out
    assert "not computed by this command: `incremental-assets run --auto` computes those intervals again" in out
    assert "[2024-01-06, 2024-01-08)" not in [line for line in out.splitlines() if line.endswith("computing again")][0]

    code, out = cli_output(root, capsys, "status", "s.daily", "--until", "2024-01-08")
    assert code == 1 and "  lost:    [2024-01-06, 2024-01-08)" in out
    code, out = cli_output(root, capsys, "run", "s.daily", "--auto", "--end", "2024-01-08")
    assert code == 0 and recomputed(out) == ["[2024-01-06, 2024-01-08)"]
    assert table_rows(uri) == clean
    assert cli_output(root, capsys, "status", "s.daily", "--until", "2024-01-08")[0] == 0


def test_an_emptied_newest_log_file_is_named_with_the_fix_that_works(built, capsys):
    root, uri, clean, _ = built
    newest = sorted((Path(uri) / "_delta_log").glob("*.json"))[-1]
    newest.write_text("")
    code, out = cli_output(root, capsys, "status", "s.daily")
    assert code == 2
    assert f"_delta_log/{newest.name}: empty. Nothing was read or written." in out
    assert (
        "or delete that file: the table falls back to the version before it, and `incremental-assets run "
        "--auto` computes again" in out
    )
    assert cli_output(root, capsys, "run", "--auto", "--end", "2024-01-08")[0] == 2  # refuses, writes nothing

    newest.unlink()  # as the message says
    code, out = cli_output(root, capsys, "run", "s.daily", "--auto", "--end", "2024-01-08")
    assert code == 0 and recomputed(out) == ["[2024-01-05, 2024-01-08)"]
    assert table_rows(uri) == clean
    assert cli_output(root, capsys, "verify", "--files")[0] == 0


@pytest.mark.parametrize("damage", ["deleted", "cut off"])
def test_a_damaged_data_file_loses_its_interval_and_run_auto_recomputes_only_it(built, capsys, damage):
    root, uri, clean, _ = built
    victim = referenced(uri, "2024-01-03")[0]
    if damage == "deleted":
        victim.unlink()
    else:
        victim.write_bytes(victim.read_bytes()[:100])

    code, out = cli_output(root, capsys, "status", "s.daily", "--until", "2024-01-08")
    assert "s.daily: NOT IN TABLE: [2024-01-03, 2024-01-04) recorded but absent" in out
    reason = "is missing" if damage == "deleted" else "bytes where the log recorded"
    assert f"file {victim}" in out and reason in out
    assert cli_output(root, capsys, "verify")[0] == 1

    code, out = cli_output(root, capsys, "run", "--auto", "--end", "2024-01-08")
    assert code == 0 and recomputed(out) == ["[2024-01-03, 2024-01-04)"]
    assert table_rows(uri) == clean
    assert cli_output(root, capsys, "verify", "--files")[0] == 0


@pytest.mark.parametrize("tamper", ["garbage", "another interval's file"])
def test_a_data_file_not_what_was_committed_is_found_by_verify_and_recomputed_by_run_auto(built, capsys, tamper):
    """The size the log recorded still matches: the footer recorded at commit tells."""
    root, uri, clean, _ = built
    victim = referenced(uri, "2024-01-02")[0]
    size = victim.stat().st_size
    if tamper == "garbage":
        victim.write_bytes(b"\0" * size)
    else:  # a reader would see 2024-01-04 twice and 2024-01-02 not at all
        other = next(
            f
            for day in ("2024-01-04", "2024-01-03", "2024-01-05")
            for f in referenced(uri, day)
            if f.stat().st_size == size
        )
        shutil.copyfile(other, victim)

    code, out = cli_output(root, capsys, "verify", "s.daily")
    assert code == 1
    assert "s.daily: recorded but not in the table: intervals [2024-01-02, 2024-01-03)" in out
    assert (
        f"file {victim} is not what was committed (its Parquet footer differs from the one recorded at its commit)"
        in out
    )
    assert "fix: `incremental-assets run --auto` computes those intervals again" in out
    if tamper == "garbage":  # a run reading the table names the table's file and the fix, not a source's
        code, out = cli_output(root, capsys, "run", "s.total")
        assert code == 2
        assert f"table of model s.daily: data file {victim} is not the Parquet file that was committed" in out
        assert "`incremental-assets run --auto` computes them again" in out and "source" not in out

    code, out = cli_output(root, capsys, "run", "--auto", "--end", "2024-01-08")
    assert code == 0 and recomputed(out) == ["[2024-01-02, 2024-01-03)"]
    assert table_rows(uri) == clean
    assert cli_output(root, capsys, "verify", "--files")[0] == 0


def test_a_full_table_behind_its_record_is_rebuilt_and_a_removed_table_recomputed(built, capsys):
    root, uri, clean, total = built
    write_events(root / "data" / "events", utc(2024, 1, 1), 24 * 7)  # day 6 gets events now
    assert cli_output(root, capsys, "run", "s.daily", "s.total", "--start", "2024-01-06", "--end", "2024-01-07")[0] == 0
    expected_total = table_rows(total)
    (sorted((Path(total) / "_delta_log").glob("*.json"))[-1]).unlink()
    assert table_rows(total) != expected_total

    code, out = cli_output(root, capsys, "verify", "s.total")
    assert code == 1 and "s.total: recorded but not in the table: its rows" in out
    assert "fix: `incremental-assets run --auto` rebuilds s.total whole" in out

    shutil.rmtree(uri)  # the whole incremental table
    code, out = cli_output(root, capsys, "status", "--until", "2024-01-08")
    assert (
        "s.daily: NOT IN TABLE: [2024-01-01, 2024-01-08) recorded but absent (Dagster records intervals of "
        "s.daily but there is no table" in out
    )
    code, out = cli_output(root, capsys, "run", "--auto", "--end", "2024-01-08")
    assert code == 0
    assert recomputed(out) == ["[2024-01-01, 2024-01-08)"]
    assert table_rows(total) == expected_total
    assert cli_output(root, capsys, "verify", "--files")[0] == 0


def test_recorded_versions_read_per_run_are_what_every_record_says(tmp_path, monkeypatch):
    """The record of each partition (Delta version, writing run) is read once per run, not decoded per
    partition; it must equal decoding every partition's materialization: runs whose partitions share one
    version, a run whose partitions say different versions, and runless (reconciled) materializations."""
    import dagster as dg

    from incremental_assets.orchestration import integrity
    from incremental_assets.orchestration.instance import open_instance

    daily = dg.DailyPartitionsDefinition(start_date="2024-01-01")

    @dg.asset(partitions_def=daily)
    def counted(context):
        version = int(context.run.tags["version"])
        if context.run.tags.get("per_partition"):
            for i, pk in enumerate(context.partition_keys):
                context.add_asset_metadata({"delta_version": version + i}, partition_key=pk)
            return dg.MaterializeResult()
        return dg.MaterializeResult(metadata={"delta_version": version})

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    instance = open_instance(tmp_path / "home")
    job = dg.Definitions(assets=[counted]).resolve_implicit_global_asset_job_def()
    keys = daily.get_partition_keys(current_time=utc(2024, 2, 1))
    for first, last, tags in (
        (0, 9, {"version": "1"}),
        (10, 19, {"version": "2"}),
        (5, 14, {"version": "3", "per_partition": "1"}),
    ):
        run_tags = {
            "dagster/asset_partition_range_start": keys[first],
            "dagster/asset_partition_range_end": keys[last],
            **tags,
        }
        assert job.execute_in_process(instance=instance, tags=run_tags).success
    for pk, version in (("2024-01-03", 7), ("2024-01-20", 8)):  # recorded from the Delta log
        meta = {"delta_version": version, "committed_by_run": f"run-{version}"}
        instance.report_runless_asset_event(dg.AssetMaterialization(asset_key=counted.key, partition=pk, metadata=meta))

    key = counted.key
    ids = sorted(
        set(instance.get_latest_storage_id_by_partition(key, dg.DagsterEventType.ASSET_MATERIALIZATION).values())
    )
    every = sorted(integrity._read(instance, key, ids).values(), key=repr)
    recorded = sorted(integrity._recorded(instance, key, partitioned=True), key=repr)
    assert recorded == every and len(recorded) == 20
    by_partition = {r.partition: r for r in recorded}
    assert by_partition["2024-01-03"].version == 7 and by_partition["2024-01-03"].run_id == "run-7"
    assert (
        by_partition["2024-01-06"].version == 3 and by_partition["2024-01-15"].version == 12
    )  # one run, many versions
    assert by_partition["2024-01-01"].version == 1 and by_partition["2024-01-19"].version == 2
