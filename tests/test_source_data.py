"""Defined behaviour for awkward source data (docs/reliability.md): NULL times are never written, rows
before the model's start are never read into a window, duplicate rows pass through once per run (a re-run
replaces, never adds), and a source whose schema drifts adds columns but cannot silently change or drop one."""

from __future__ import annotations

from datetime import datetime, timezone

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from incremental_assets import delta
from incremental_assets.errors import ModelFileError
from incremental_assets.load.project import load_project
from incremental_assets.model.intervals import TimeWindow
from incremental_assets.orchestration.status import windows_to_run
from incremental_assets.orchestration.translator import ModelTranslator
from incremental_assets.plan.run_plan import plan_run
from incremental_assets.spark.executor import Executor

from helpers import EVENTS_SOURCE, table_rows, utc


def day(d: int) -> TimeWindow:
    return TimeWindow(utc(2024, 1, d), utc(2024, 1, d + 1))


def events(rows: list[tuple], **extra) -> pa.Table:
    columns = {
        "ts": pa.array([r[0] for r in rows], pa.timestamp("us", tz="UTC")),
        "k": pa.array([r[1] for r in rows]),
        "v": pa.array([r[2] for r in rows], pa.int64()),
    }
    columns.update(extra)
    return pa.table(columns)


def naive(value: datetime) -> datetime:
    return value.astimezone(timezone.utc).replace(tzinfo=None)


def test_null_times_rows_before_start_and_duplicate_rows(spark, make_project):
    root = make_project(
        {
            "sources.yaml": EVENTS_SOURCE,
            "models/copy.sql": """
            MODEL (name s.copy, kind INCREMENTAL_BY_TIME_RANGE (time_column ts), start '2024-01-01');
            SELECT ts, k, v FROM raw.events
        """,
        }
    )
    t1 = utc(2024, 1, 1, 3)
    write_deltalake(
        str(root / "data" / "events"),
        events(
            [
                (t1, "a", 1),
                (t1, "a", 1),  # a duplicate row
                (None, "n", 2),  # no time
                (utc(2023, 12, 31, 23), "early", 3),  # before the model's start
                (utc(2024, 1, 2, 1), "b", 4),
            ]
        ),
    )
    project = load_project(root)
    model = project.model("s.copy")
    # A requested window reaching before the start is cut at the start.
    assert windows_to_run(
        None, model, start=utc(2023, 12, 30), end=utc(2024, 1, 3), auto=False, translator=ModelTranslator()
    ) == [TimeWindow(utc(2024, 1, 1), utc(2024, 1, 3))]
    executor = Executor(spark, project)
    uri = delta.table_uri(project.settings.warehouse, "s.copy")
    for _ in range(2):  # a re-run of the same window replaces it: duplicates are not multiplied
        executor.execute(plan_run(project, model, TimeWindow(utc(2024, 1, 1), utc(2024, 1, 3))))
        assert table_rows(uri) == [(naive(t1), "a", 1), (naive(t1), "a", 1), (datetime(2024, 1, 2, 1), "b", 4)]
    partitions = set(
        pa.table(DeltaTable(uri).get_add_actions(flatten=True))
        .column(f"partition.{delta.PARTITION_COLUMN}")
        .to_pylist()
    )
    assert partitions == {"2024-01-01", "2024-01-02"}  # no NULL partition


def test_schema_drift_of_a_source(spark, make_project):
    root = make_project(
        {
            "sources.yaml": EVENTS_SOURCE,
            "models/wide.sql": """
            MODEL (name s.wide, kind INCREMENTAL_BY_TIME_RANGE (time_column ts), start '2024-01-01');
            SELECT * FROM raw.events WHERE ts BETWEEN @start_dt AND @end_dt
        """,
        }
    )
    path = str(root / "data" / "events")
    rows = [(utc(2024, 1, d, 1), f"k{d}", d) for d in (1, 2, 3)]
    write_deltalake(path, events(rows))
    project = load_project(root)
    model = project.model("s.wide")
    executor = Executor(spark, project)
    uri = delta.table_uri(project.settings.warehouse, "s.wide")
    executor.execute(plan_run(project, model, day(1)))

    # A new column: the table gains it; intervals written before read it as NULL.
    write_deltalake(path, events(rows, note=pa.array(["x", "y", "z"])), mode="overwrite", schema_mode="overwrite")
    executor.execute(plan_run(project, model, day(2)))
    assert table_rows(uri) == [(datetime(2024, 1, 1, 1), "k1", 1, None), (datetime(2024, 1, 2, 1), "k2", 2, "y")]
    version = DeltaTable(uri).version()

    # A changed type or a dropped column: refused, the table unchanged, the fix named.
    write_deltalake(
        path,
        events(rows, note=pa.array(["x", "y", "z"])).set_column(2, "v", pa.array(["1", "2", "3"])),
        mode="overwrite",
        schema_mode="overwrite",
    )
    with pytest.raises(
        ModelFileError, match="destructive schema change.*v changed from bigint to string.*on_destructive_change"
    ):
        executor.execute(plan_run(project, model, day(3)))
    write_deltalake(path, events(rows), mode="overwrite", schema_mode="overwrite")
    with pytest.raises(ModelFileError, match="destructive schema change.*note"):
        executor.execute(plan_run(project, model, day(3)))
    assert DeltaTable(uri).version() == version and len(table_rows(uri)) == 2
    # The refused windows' files are deleted at once: only committed runs' folders remain.
    committed = {f.split("/run-", 1)[1].split("/", 1)[0] for f in delta.committed_files(uri)}
    assert {p.name for p in (root / "warehouse" / "s" / "wide").glob("run-*")} == {"run-" + c for c in committed}
