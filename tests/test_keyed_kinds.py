"""Merge-style kinds end to end on Spark and Delta: upsert by key, SCD type 2, cursor appends.

Each test runs a model several times over changing source data and compares the whole table with the
exact expected rows (as any Delta reader sees them).
"""

from __future__ import annotations

from datetime import datetime

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from incremental_assets import storage
from incremental_assets.errors import DuplicateKeyError, ModelFileError
from incremental_assets.execution import Executor
from incremental_assets.plan import plan_run
from incremental_assets.project import load_project

from helpers import table_rows, utc

MENU_SOURCE = """\
- name: stg.current_menu_items
  location: data/menu
  format: delta
"""

MENU_SCD = """\
MODEL (
  name db.menu_items,
  kind SCD_TYPE_2 (
    unique_key id,
    buckets 4
  )
);
SELECT id::INT, name::STRING, price::DOUBLE, updated_at::TIMESTAMP
FROM stg.current_menu_items
"""

DROP = ("ia_bucket",)


def T(text: str) -> datetime:
    return datetime.fromisoformat(text)


def write_menu(root, rows: list[tuple]) -> None:
    table = pa.table(
        {
            "id": pa.array([r[0] for r in rows], pa.int32()),
            "name": [r[1] for r in rows],
            "price": [r[2] for r in rows],
            "updated_at": pa.array([utc(*map(int, r[3].replace("-", " ").replace(":", " ").split())) for r in rows], pa.timestamp("us", tz="UTC")),
        }
    )
    write_deltalake(str(root / "data" / "menu"), table, mode="overwrite")


def run_model(spark, project, name: str, execution_time: datetime):
    executor = Executor(spark, project)
    plan = plan_run(project, project.model(name), None, execution_time=execution_time, target=executor.target_state(name))
    return executor.execute(plan)


def uri(project, name: str) -> str:
    return storage.table_uri(project.settings.warehouse, name)


def test_scd_type_2_matches_the_worked_example_row_for_row(spark, make_project):
    root = make_project({"sources.yaml": MENU_SOURCE, "models/menu.sql": MENU_SCD})
    project = load_project(root)
    first = [
        (1, "Chicken Sandwich", 10.99, "2020-01-01 00:00:00"),
        (2, "Cheeseburger", 8.99, "2020-01-01 00:00:00"),
        (3, "French Fries", 4.99, "2020-01-01 00:00:00"),
    ]
    write_menu(root, first)
    run_model(spark, project, "db.menu_items", utc(2020, 1, 1, 1))
    epoch, none = T("1970-01-01 00:00:00"), None
    assert table_rows(uri(project, "db.menu_items"), drop=DROP) == [
        (1, "Chicken Sandwich", 10.99, T("2020-01-01 00:00:00"), epoch, none),
        (2, "Cheeseburger", 8.99, T("2020-01-01 00:00:00"), epoch, none),
        (3, "French Fries", 4.99, T("2020-01-01 00:00:00"), epoch, none),
    ]

    write_menu(
        root,
        [
            (1, "Chicken Sandwich", 12.99, "2020-01-02 00:00:00"),
            (3, "French Fries", 4.99, "2020-01-01 00:00:00"),
            (4, "Milkshake", 3.99, "2020-01-02 00:00:00"),
        ],
    )
    second = run_model(spark, project, "db.menu_items", utc(2020, 1, 2, 2))
    assert second.details == {"rows_inserted": 2, "rows_closed": 2}
    assert table_rows(uri(project, "db.menu_items"), drop=DROP) == [
        (1, "Chicken Sandwich", 10.99, T("2020-01-01 00:00:00"), epoch, T("2020-01-02 00:00:00")),
        (1, "Chicken Sandwich", 12.99, T("2020-01-02 00:00:00"), T("2020-01-02 00:00:00"), none),
        (2, "Cheeseburger", 8.99, T("2020-01-01 00:00:00"), epoch, T("2020-01-02 02:00:00")),
        (3, "French Fries", 4.99, T("2020-01-01 00:00:00"), epoch, none),
        (4, "Milkshake", 3.99, T("2020-01-02 00:00:00"), T("2020-01-02 00:00:00"), none),
    ]

    write_menu(
        root,
        [
            (1, "Chicken Sandwich", 14.99, "2020-01-03 00:00:00"),
            (2, "Cheeseburger", 8.99, "2020-01-03 00:00:00"),
            (3, "French Fries", 4.99, "2020-01-01 00:00:00"),
            (4, "Chocolate Milkshake", 3.99, "2020-01-03 00:00:00"),
        ],
    )
    run_model(spark, project, "db.menu_items", utc(2020, 1, 3, 2))
    assert table_rows(uri(project, "db.menu_items"), drop=DROP) == sorted([
        (1, "Chicken Sandwich", 10.99, T("2020-01-01 00:00:00"), epoch, T("2020-01-02 00:00:00")),
        (1, "Chicken Sandwich", 12.99, T("2020-01-02 00:00:00"), T("2020-01-02 00:00:00"), T("2020-01-03 00:00:00")),
        (1, "Chicken Sandwich", 14.99, T("2020-01-03 00:00:00"), T("2020-01-03 00:00:00"), none),
        (2, "Cheeseburger", 8.99, T("2020-01-01 00:00:00"), epoch, T("2020-01-02 02:00:00")),
        (2, "Cheeseburger", 8.99, T("2020-01-03 00:00:00"), T("2020-01-03 00:00:00"), none),
        (3, "French Fries", 4.99, T("2020-01-01 00:00:00"), epoch, none),
        (4, "Milkshake", 3.99, T("2020-01-02 00:00:00"), T("2020-01-02 00:00:00"), T("2020-01-03 00:00:00")),
        (4, "Chocolate Milkshake", 3.99, T("2020-01-03 00:00:00"), T("2020-01-03 00:00:00"), none),
    ])
    # A run with no change commits nothing; a key re-inserted with its old updated_at starts where it ended.
    version = DeltaTable(uri(project, "db.menu_items")).version()
    assert run_model(spark, project, "db.menu_items", utc(2020, 1, 4)).version == version
    assert DeltaTable(uri(project, "db.menu_items")).version() == version
