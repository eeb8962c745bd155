"""Merge-style kinds end to end on Spark and Delta: upsert by key, SCD type 2, cursor appends.

Each test runs a model several times over changing source data and compares the whole table with the
exact expected rows (as any Delta reader sees them).
"""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from incremental_assets import delta
from incremental_assets.errors import DuplicateKeyError, ModelFileError, StorageError
from incremental_assets.load.project import load_project
from incremental_assets.plan.run_plan import plan_run
from incremental_assets.spark.executor import Executor

from helpers import table_rows, table_uri, utc

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
    invalidate_hard_deletes true,
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
            "price": pa.array([r[2] for r in rows], pa.float64()),
            "updated_at": pa.array(
                [utc(*map(int, r[3].replace("-", " ").replace(":", " ").split())) for r in rows],
                pa.timestamp("us", tz="UTC"),
            ),
        }
    )
    write_deltalake(str(root / "data" / "menu"), table, mode="overwrite")


def run_model(spark, project, name: str, execution_time: datetime):
    executor = Executor(spark, project)
    plan = plan_run(
        project, project.model(name), None, execution_time=execution_time, target=executor.target_state(name)
    )
    return executor.execute(plan)


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
    assert table_rows(table_uri(project, "db.menu_items"), drop=DROP) == [
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
    assert table_rows(table_uri(project, "db.menu_items"), drop=DROP) == [
        (1, "Chicken Sandwich", 10.99, T("2020-01-01 00:00:00"), epoch, T("2020-01-02 00:00:00")),
        (1, "Chicken Sandwich", 12.99, T("2020-01-02 00:00:00"), T("2020-01-02 00:00:00"), none),
        (2, "Cheeseburger", 8.99, T("2020-01-01 00:00:00"), epoch, T("2020-01-02 02:00:00")),
        (3, "French Fries", 4.99, T("2020-01-01 00:00:00"), epoch, none),
        # a key never seen before starts at 1970-01-01, as on the first run (SQLMesh's engine)
        (4, "Milkshake", 3.99, T("2020-01-02 00:00:00"), epoch, none),
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
    assert table_rows(table_uri(project, "db.menu_items"), drop=DROP) == sorted(
        [
            (1, "Chicken Sandwich", 10.99, T("2020-01-01 00:00:00"), epoch, T("2020-01-02 00:00:00")),
            (
                1,
                "Chicken Sandwich",
                12.99,
                T("2020-01-02 00:00:00"),
                T("2020-01-02 00:00:00"),
                T("2020-01-03 00:00:00"),
            ),
            (1, "Chicken Sandwich", 14.99, T("2020-01-03 00:00:00"), T("2020-01-03 00:00:00"), none),
            (2, "Cheeseburger", 8.99, T("2020-01-01 00:00:00"), epoch, T("2020-01-02 02:00:00")),
            (2, "Cheeseburger", 8.99, T("2020-01-03 00:00:00"), T("2020-01-03 00:00:00"), none),
            (3, "French Fries", 4.99, T("2020-01-01 00:00:00"), epoch, none),
            (4, "Milkshake", 3.99, T("2020-01-02 00:00:00"), epoch, T("2020-01-03 00:00:00")),
            (4, "Chocolate Milkshake", 3.99, T("2020-01-03 00:00:00"), T("2020-01-03 00:00:00"), none),
        ]
    )
    # A run with no change commits nothing; a key re-inserted with its old updated_at starts where it ended.
    version = DeltaTable(table_uri(project, "db.menu_items")).version()
    assert run_model(spark, project, "db.menu_items", utc(2020, 1, 4)).version == version
    assert DeltaTable(table_uri(project, "db.menu_items")).version() == version


def test_scd_type_2_current_versions_take_the_source_value_of_a_null_column_as_sqlmesh(spark, make_project):
    """SQLMesh writes each current version back with COALESCE(stored, source) in every column: a NULL takes
    the source's value, in a version kept (same updated_at) and in one the run closes (checked on SQLMesh
    0.236.4 with DuckDB, both kinds)."""
    by_column = "MODEL (name db.menu_cols, kind SCD_TYPE_2_BY_COLUMN (unique_key id, columns [name]));\n"
    root = make_project(
        {
            "sources.yaml": MENU_SOURCE,
            "models/menu.sql": MENU_SCD,
            "models/cols.sql": by_column + "SELECT id::INT, name::STRING, price::DOUBLE FROM stg.current_menu_items",
        }
    )
    project = load_project(root)
    write_menu(root, [(i, n, None, "2020-01-01 00:00:00") for i, n in [(1, "Soup"), (2, "Tea"), (3, "Pie")]])
    for name in ("db.menu_items", "db.menu_cols"):
        run_model(spark, project, name, utc(2020, 1, 1, 1))
    write_menu(
        root,
        [
            (1, "Soup", 5.0, "2020-01-01 00:00:00"),
            (2, "Tea", 2.5, "2020-01-02 00:00:00"),
            (3, "Cake", 4.0, "2020-01-01 00:00:00"),
        ],
    )
    for name in ("db.menu_items", "db.menu_cols"):
        run_model(spark, project, name, utc(2020, 1, 2, 2))
    epoch, day1, day2, ran = (
        T("1970-01-01 00:00:00"),
        T("2020-01-01 00:00:00"),
        T("2020-01-02 00:00:00"),
        T("2020-01-02 02:00:00"),
    )
    assert table_rows(table_uri(project, "db.menu_items"), drop=DROP) == [
        (1, "Soup", 5.0, day1, epoch, None),  # same updated_at: no new version, the NULL filled
        (2, "Tea", 2.5, day1, epoch, day2),  # the closed version too
        (2, "Tea", 2.5, day2, day2, None),
        (3, "Pie", 4.0, day1, epoch, None),  # a stored value stays (the name), a NULL is filled
    ]
    assert table_rows(table_uri(project, "db.menu_cols"), drop=DROP) == [
        (1, "Soup", 5.0, epoch, None),
        (2, "Tea", 2.5, epoch, None),
        (3, "Cake", 4.0, ran, None),
        (3, "Pie", 4.0, epoch, ran),
    ]


NAIVE_SOURCE = """\
- name: raw.naive
  location: data/naive
  format: delta
"""
NAIVE_MODELS = {
    "models/last.sql": """
        MODEL (name s.last_by_grp, kind INCREMENTAL_BY_UNIQUE_KEY (unique_key grp));
        SELECT grp, id AS last_id, ts AS last_ts FROM raw.naive
        QUALIFY ROW_NUMBER() OVER (PARTITION BY grp ORDER BY ts DESC) = 1
    """,
    "models/hist.sql": """
        MODEL (name s.grp_history, kind SCD_TYPE_2 (unique_key grp, updated_at_name ts));
        SELECT grp, id, ts FROM raw.naive QUALIFY ROW_NUMBER() OVER (PARTITION BY grp ORDER BY ts DESC) = 1
    """,
}


def test_timestamps_without_time_zone_keep_their_type_through_every_merge(spark, make_project):
    """A source's naive timestamps are TIMESTAMP_NTZ in Spark: the rows a merge reads back and writes again
    keep that type, so the third and later runs still match the table (they failed as a destructive change
    from timestamp to timestamp_ntz)."""
    root = make_project({"sources.yaml": NAIVE_SOURCE, **NAIVE_MODELS})
    project = load_project(root)

    def add(rows: list[tuple]) -> None:
        table = pa.table(
            {
                "grp": [r[0] for r in rows],
                "id": pa.array([r[1] for r in rows], pa.int64()),
                "ts": pa.array([datetime.fromisoformat(r[2]) for r in rows], pa.timestamp("us")),
            }
        )
        write_deltalake(str(root / "data" / "naive"), table, mode="append")

    add([("a", 1, "2024-01-01 09:00:00"), ("b", 2, "2024-01-01 10:00:00")])
    for day, rows in enumerate(
        ([("a", 3, "2024-01-02 08:00:00")], [("b", 4, "2024-01-03 07:00:00")], [("c", 5, "2024-01-04 06:00:00")]),
        start=1,
    ):
        for name in NAIVE_MODELS_NAMES:
            run_model(spark, project, name, utc(2024, 1, day + 1))
        add(rows)
    for name in NAIVE_MODELS_NAMES:
        run_model(spark, project, name, utc(2024, 1, 5))
        types = {f.name: f.type.type for f in DeltaTable(table_uri(project, name)).schema().fields}
        assert types["last_ts" if name == "s.last_by_grp" else "ts"] == "timestamp_ntz", (name, types)
    assert table_rows(table_uri(project, "s.last_by_grp"), drop=DROP) == [
        ("a", 3, datetime(2024, 1, 2, 8)),
        ("b", 4, datetime(2024, 1, 3, 7)),
        ("c", 5, datetime(2024, 1, 4, 6)),
    ]
    epoch = datetime(1970, 1, 1)
    assert table_rows(table_uri(project, "s.grp_history"), drop=DROP) == [
        ("a", 1, datetime(2024, 1, 1, 9), epoch, datetime(2024, 1, 2, 8)),
        ("a", 3, datetime(2024, 1, 2, 8), datetime(2024, 1, 2, 8), None),
        ("b", 2, datetime(2024, 1, 1, 10), epoch, datetime(2024, 1, 3, 7)),
        ("b", 4, datetime(2024, 1, 3, 7), datetime(2024, 1, 3, 7), None),
        ("c", 5, datetime(2024, 1, 4, 6), epoch, None),
    ]


NAIVE_MODELS_NAMES = ("s.last_by_grp", "s.grp_history")


UPDATES_SOURCE = """\
- name: raw.updates
  location: data/updates
  format: delta
  time_column: ts
  interval_unit: day
"""

LATEST = """\
MODEL (
  name s.latest,
  kind INCREMENTAL_BY_UNIQUE_KEY (unique_key (region, k), buckets 4),
  start '2024-01-01'
);
SELECT region, k, v, ts FROM raw.updates WHERE ts BETWEEN @start_dt AND @end_dt
"""


def append_updates(root, rows: list[tuple]) -> None:
    table = pa.table(
        {
            "region": [r[0] for r in rows],
            "k": pa.array([r[1] for r in rows], pa.int64()),
            "v": [r[2] for r in rows],
            "ts": pa.array([r[3] for r in rows], pa.timestamp("us", tz="UTC")),
        }
    )
    write_deltalake(str(root / "data" / "updates"), table, mode="append")


def test_unique_key_upserts_composite_keys_reading_only_new_source_rows(spark, make_project):
    root = make_project({"sources.yaml": UPDATES_SOURCE, "models/latest.sql": LATEST})
    project = load_project(root)
    name, day = "s.latest", lambda d, h=0: T(f"2024-01-{d:02d} {h:02d}:00:00")
    append_updates(
        root,
        [("eu", 1, "a", utc(2024, 1, 1, 5)), ("eu", 2, "b", utc(2024, 1, 1, 6)), ("us", 1, "c", utc(2024, 1, 1, 7))],
    )
    first = run_model(spark, project, name, utc(2024, 1, 2))
    assert first.details == {"rows_inserted": 3, "rows_updated": 0} and first.window.end == utc(2024, 1, 2)
    assert DeltaTable(table_uri(project, name)).metadata().partition_columns == ["ia_bucket"]

    # Day 2: (eu, 1) changes, (us, 2) is new; the day-1 rows are not read again (the window starts where run 1 ended).
    append_updates(root, [("eu", 1, "a2", utc(2024, 1, 2, 1)), ("us", 2, "d", utc(2024, 1, 2, 2))])
    second = run_model(spark, project, name, utc(2024, 1, 3))
    assert second.details == {"rows_inserted": 1, "rows_updated": 1}
    assert table_rows(table_uri(project, name), drop=DROP) == [
        ("eu", 1, "a2", day(2, 1)),
        ("eu", 2, "b", day(1, 6)),
        ("us", 1, "c", day(1, 7)),
        ("us", 2, "d", day(2, 2)),
    ]

    # Day 3: every key but one changes; an old row re-appearing in the source outside the window is ignored.
    append_updates(
        root,
        [("eu", 2, "b3", utc(2024, 1, 3, 1)), ("us", 1, "c3", utc(2024, 1, 3, 2)), ("us", 2, "d3", utc(2024, 1, 3, 3))],
    )
    third = run_model(spark, project, name, utc(2024, 1, 4))
    assert third.details == {"rows_inserted": 0, "rows_updated": 3}
    assert table_rows(table_uri(project, name), drop=DROP) == [
        ("eu", 1, "a2", day(2, 1)),
        ("eu", 2, "b3", day(3, 1)),
        ("us", 1, "c3", day(3, 2)),
        ("us", 2, "d3", day(3, 3)),
    ]
    assert DeltaTable(table_uri(project, name)).version() == 2

    # Two rows for one key: an error naming the key, nothing committed.
    append_updates(root, [("eu", 1, "x", utc(2024, 1, 4, 1)), ("eu", 1, "y", utc(2024, 1, 4, 2))])
    with pytest.raises(DuplicateKeyError, match=r"region='eu', k=1 \(2 rows\)") as info:
        run_model(spark, project, name, utc(2024, 1, 5))
    assert "latest.sql" in str(info.value)
    assert DeltaTable(table_uri(project, name)).version() == 2


SCD_BY_COLUMN = """\
MODEL (
  name s.prices,
  kind SCD_TYPE_2_BY_COLUMN (unique_key id, columns [price], valid_from_name since, valid_to_name until, buckets 2)
);
SELECT id, name, price FROM raw.prices
"""

PRICES_SOURCE = """\
- name: raw.prices
  location: data/prices
  format: delta
"""


def test_scd_type_2_by_column_tracks_changes_of_the_listed_columns_only(spark, make_project):
    root = make_project({"sources.yaml": PRICES_SOURCE, "models/prices.sql": SCD_BY_COLUMN})
    project = load_project(root)

    def write(rows):
        write_deltalake(
            str(root / "data" / "prices"),
            pa.table({"id": [r[0] for r in rows], "name": [r[1] for r in rows], "price": [r[2] for r in rows]}),
            mode="overwrite",
        )

    epoch = T("1970-01-01 00:00:00")
    write([(1, "tea", 2.0), (2, "coffee", 3.0)])
    run_model(spark, project, "s.prices", utc(2024, 1, 1))
    # A renamed item is not a change (name is not compared); a new price closes the old row at execution time.
    write([(1, "green tea", 2.0), (2, "coffee", 3.5), (3, "juice", 4.0)])
    run_model(spark, project, "s.prices", utc(2024, 1, 2))
    # 3 is deleted (it stays current: invalidate_hard_deletes is false by default, as SQLMesh's), 2 changes again.
    write([(1, "green tea", 2.0), (2, "coffee", 4.0)])
    run_model(spark, project, "s.prices", utc(2024, 1, 3))
    assert table_rows(table_uri(project, "s.prices"), drop=DROP) == [
        (1, "tea", 2.0, epoch, None),
        (2, "coffee", 3.0, epoch, T("2024-01-02 00:00:00")),
        (2, "coffee", 3.5, T("2024-01-02 00:00:00"), T("2024-01-03 00:00:00")),
        (2, "coffee", 4.0, T("2024-01-03 00:00:00"), None),
        (3, "juice", 4.0, T("2024-01-02 00:00:00"), None),
    ]
    # Another bucket count would separate a key's new rows from its old ones: refused until rebuilt.
    (root / "models" / "prices.sql").write_text(SCD_BY_COLUMN.replace("buckets 2", "buckets 3"))
    with pytest.raises(StorageError, match="written with 2 key buckets, the model now says 3"):
        run_model(spark, load_project(root), "s.prices", utc(2024, 1, 4))


FEED_SOURCE = """\
- name: raw.feed
  location: data/feed
  format: delta
"""

COPY = """\
MODEL (name s.feed_copy, kind INCREMENTAL_BY_CURSOR (cursor id, initial_value 0));
SELECT id, payload, @is_backfill AS backfill, @last_value AS seen FROM raw.feed WHERE id > @last_value
"""


def write_feed(root, ids: list[int]) -> None:
    write_deltalake(
        str(root / "data" / "feed"),
        pa.table({"id": pa.array(ids, pa.int64()), "payload": [f"p{i}" for i in ids]}),
        mode="overwrite",
    )


def test_cursor_appends_what_is_new_and_derives_the_cursor_from_the_table(spark, make_project, capsys):
    root = make_project({"sources.yaml": FEED_SOURCE, "models/copy.sql": COPY})
    project = load_project(root)
    name = "s.feed_copy"
    write_feed(root, [1, 2, 3])
    first = run_model(spark, project, name, utc(2024, 1, 1))
    assert first.write == "replace_table" and first.details == {"cursor_before": None, "cursor_after": "3"}
    write_feed(root, [1, 2, 3, 4, 5])
    second = run_model(spark, project, name, utc(2024, 1, 2))
    assert second.write == "append" and second.details == {"cursor_before": "3", "cursor_after": "5"}
    write_feed(root, [1, 2, 3, 4, 5, 6])
    # A commit that fails leaves table and cursor as they were: the next run fetches the same rows again.
    executor = Executor(spark, project)

    def fail(_staging):
        raise RuntimeError("commit refused")

    with pytest.raises(RuntimeError):
        executor.execute(
            plan_run(project, project.model(name), None, target=executor.target_state(name)), before_commit=fail
        )
    assert executor.target_state(name).last_value == "5"
    third = run_model(spark, project, name, utc(2024, 1, 3))
    assert third.details == {"cursor_before": "5", "cursor_after": "6"}
    assert table_rows(table_uri(project, name)) == [
        (1, "p1", True, 0),
        (2, "p2", True, 0),
        (3, "p3", True, 0),
        (4, "p4", False, 3),
        (5, "p5", False, 3),
        (6, "p6", False, 5),
    ]

    # A changed definition starts over from the initial value and replaces the table.
    (root / "models" / "copy.sql").write_text(COPY.replace("payload,", "upper(payload) AS payload,"))
    from incremental_assets import cli

    assert cli.main(["status", name, "--project", str(root)]) == 0
    assert (
        "s.feed_copy: CHANGED since its table was built; the next run starts over from the initial value"
        in capsys.readouterr().out
    )
    project = load_project(root)
    fourth = run_model(spark, project, name, utc(2024, 1, 4))
    assert fourth.write == "replace_table"
    assert [r[:3] for r in table_rows(table_uri(project, name))] == [(i, f"P{i}", True) for i in range(1, 7)]


class FakeApi:
    """A small external system: orders with increasing ids, served page by page after a given id."""

    def __init__(self):
        self.orders: list[dict] = []
        self.calls: list[tuple] = []

    def add(self, *ids: int) -> None:
        self.orders += [{"order_id": i, "amount": float(i * 10)} for i in ids]

    def since(self, last_id: int) -> list[dict]:
        return [o for o in self.orders if o["order_id"] > last_id]


API = FakeApi()

PYTHON_MODEL = """\
from test_keyed_kinds import API

MODEL = {"name": "raw_api.orders", "kind": "INCREMENTAL_BY_CURSOR", "cursor": "order_id", "initial_value": 0,
         "columns": {"order_id": "BIGINT", "amount": "DOUBLE"}}


def fetch(last_value, is_backfill):
    API.calls.append((last_value, is_backfill))
    return API.since(last_value)
"""


def test_python_source_function_is_called_with_the_committed_cursor(spark, make_project):
    root = make_project(
        {
            "models/orders.py": PYTHON_MODEL,
            "models/big.sql": "MODEL (name s.big, kind FULL);\nSELECT order_id FROM raw_api.orders WHERE amount > 15\n",
        }
    )
    project = load_project(root)
    assert project.model("raw_api.orders").kind.cursor == "order_id"
    API.orders.clear(), API.calls.clear()
    API.add(1, 2)
    run_model(spark, project, "raw_api.orders", utc(2024, 1, 1))
    API.add(3)
    run_model(spark, project, "raw_api.orders", utc(2024, 1, 2))
    version = DeltaTable(table_uri(project, "raw_api.orders")).version()
    folders = sorted(Path(table_uri(project, "raw_api.orders")).iterdir())
    empty = run_model(spark, project, "raw_api.orders", utc(2024, 1, 3))  # nothing new: nothing to commit
    assert DeltaTable(table_uri(project, "raw_api.orders")).version() == version, (
        "a run with no new rows adds no Delta version"
    )
    assert empty.rows == 0 and empty.version == version and empty.details == {"cursor_before": "3", "cursor_after": "3"}
    assert sorted(Path(table_uri(project, "raw_api.orders")).iterdir()) == folders  # its staging folder is gone
    API.add(4, 5)
    fourth = run_model(spark, project, "raw_api.orders", utc(2024, 1, 4))
    assert fourth.version == version + 1 and fourth.details == {"cursor_before": "3", "cursor_after": "5"}
    assert API.calls == [(0, True), (2, False), (3, False), (3, False)]
    assert table_rows(table_uri(project, "raw_api.orders")) == [(i, float(i * 10)) for i in range(1, 6)]
    run_model(spark, project, "s.big", utc(2024, 1, 4))
    assert table_rows(table_uri(project, "s.big")) == [(i,) for i in range(2, 6)]


@pytest.mark.parametrize(
    "kind, message",
    [
        ("INCREMENTAL_BY_UNIQUE_KEY (unique_key id)", "needs column(s) id"),
        ("SCD_TYPE_2 (unique_key k)", "needs column(s) updated_at"),
        ("SCD_TYPE_2_BY_COLUMN (unique_key k)", "needs `columns`"),
        ("INCREMENTAL_BY_CURSOR (initial_value 1)", "needs a cursor column"),
        ("INCREMENTAL_BY_UNIQUE_KEY (buckets 4)", "needs a unique_key"),
        (
            "INCREMENTAL_BY_UNIQUE_KEY (unique_key k, when_matched (WHEN NOT MATCHED THEN INSERT *))",
            "when_matched supports WHEN MATCHED",
        ),
        (
            "INCREMENTAL_BY_UNIQUE_KEY (unique_key k, when_matched (WHEN MATCHED THEN UPDATE SET target.w = 1))",
            "needs column(s) w",
        ),
        ("SCD_TYPE_2 (unique_key k, columns [v])", "`columns` belongs to SCD_TYPE_2_BY_COLUMN"),
    ],
)
def test_bad_merge_kinds_name_file_and_line(make_project, kind, message):
    root = make_project({"models/m.sql": f"MODEL (\n  name s.m,\n  kind {kind}\n);\nSELECT k, v FROM t\n"})
    with pytest.raises(ModelFileError, match=re.escape(message)) as info:
        from incremental_assets.load.model_file import parse_model_file

        parse_model_file(root / "models" / "m.sql")
    assert info.value.line == 3


def test_cursor_macros_belong_to_cursor_models(make_project):
    from incremental_assets.load.model_file import parse_model_file

    root = make_project({"models/m.sql": "MODEL (name s.m, kind FULL);\nSELECT k FROM t\nWHERE k > @last_value\n"})
    with pytest.raises(ModelFileError, match="@last_value is a macro of INCREMENTAL_BY_CURSOR") as info:
        parse_model_file(root / "models" / "m.sql")
    assert info.value.line == 3


CRASH_RUN = """\
import sys
from incremental_assets.spark.executor import Executor
from incremental_assets.spark.session import build_spark_session
from incremental_assets.plan.run_plan import plan_run
from incremental_assets.load.project import load_project
from incremental_assets.model.settings import DEFAULT_SPARK_CONF
from incremental_assets.model.intervals import to_utc

root, name, when = sys.argv[1:4]
spark = build_spark_session({**DEFAULT_SPARK_CONF, "spark.master": "local[1]", "spark.sql.shuffle.partitions": "1"})
project = load_project(root)
executor = Executor(spark, project)
plan = plan_run(project, project.model(name), None, execution_time=to_utc(when), target=executor.target_state(name))
executor.execute(plan)
print("finished")
"""


@pytest.mark.parametrize(
    "write, stage",
    # One JVM start each: the bucket-replacing commit (upsert and SCD type 2 share it) killed before and
    # after it, and the cursor append killed before it (the cursor must not move).
    [("upsert", "staged"), ("scd2", "committed"), ("append", "staged")],
)
def test_a_killed_run_leaves_the_previous_table_or_the_new_one_whole(spark, make_project, write, stage):
    """SIGKILLed after staging (the previous version stays intact) or right after the commit (the new version whole)."""
    import os
    import signal
    import subprocess
    import sys

    models = {
        "upsert": ("s.latest", LATEST, UPDATES_SOURCE),
        "scd2": ("db.menu_items", MENU_SCD, MENU_SOURCE),
        "append": ("s.feed_copy", COPY, FEED_SOURCE),
    }
    name, sql, source = models[write]
    root = make_project({"sources.yaml": source, "models/m.sql": sql})
    project = load_project(root)
    change = {
        "upsert": (
            lambda: append_updates(root, [("eu", 1, "a", utc(2024, 1, 1, 5))]),
            lambda: append_updates(root, [("eu", 1, "b", utc(2024, 1, 2, 5)), ("eu", 2, "c", utc(2024, 1, 2, 6))]),
        ),
        "scd2": (
            lambda: write_menu(root, [(1, "Tea", 1.0, "2020-01-01 00:00:00"), (2, "Pie", 2.0, "2020-01-01 00:00:00")]),
            lambda: write_menu(root, [(1, "Tea", 1.5, "2020-01-02 00:00:00")]),
        ),
        "append": (lambda: write_feed(root, [1, 2]), lambda: write_feed(root, [1, 2, 3])),
    }[write]
    change[0]()
    run_model(spark, project, name, utc(2024, 1, 2))
    before = table_rows(table_uri(project, name), drop=DROP)
    change[1]()
    env = {
        **os.environ,
        "INCREMENTAL_ASSETS_KILL_AT": stage,
        "PYTHONPATH": str(Path(delta.__file__).parent.parent.parent),
    }
    done = subprocess.run(
        [sys.executable, "-c", CRASH_RUN, str(root), name, "2024-01-03T00:00:00+00:00"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr[-2000:]
    assert any(
        p.name.startswith("run-") for p in Path(table_uri(project, name)).iterdir()
    )  # the killed run had staged files
    after = table_rows(table_uri(project, name), drop=DROP)
    if stage == "staged":
        assert after == before and DeltaTable(table_uri(project, name)).version() == 0
    else:
        assert DeltaTable(table_uri(project, name)).version() == 1 and after != before
        # The committed state is the complete new one: the same run in-process on a copy gives the same rows.
        expected = {
            "scd2": [
                (1, "Tea", 1.0, T("2020-01-01 00:00:00"), T("1970-01-01 00:00:00"), T("2020-01-02 00:00:00")),
                (1, "Tea", 1.5, T("2020-01-02 00:00:00"), T("2020-01-02 00:00:00"), None),
                (2, "Pie", 2.0, T("2020-01-01 00:00:00"), T("1970-01-01 00:00:00"), T("2024-01-03 00:00:00")),
            ],
            "append": [(1, "p1", True, 0), (2, "p2", True, 0), (3, "p3", False, 2)],
        }[write]
        assert after == expected
        assert Executor(spark, project).target_state(name).exists


def test_cli_runs_merge_kinds_as_dagster_materializations(spark, make_project, capsys):
    from incremental_assets import cli

    root = make_project(
        {
            "sources.yaml": MENU_SOURCE + FEED_SOURCE,
            "models/menu.sql": MENU_SCD,
            "models/copy.sql": COPY,
            "models/orders.py": PYTHON_MODEL,
        }
    )
    API.orders.clear(), API.calls.clear()
    API.add(1)
    write_menu(root, [(1, "Tea", 1.0, "2020-01-01 00:00:00"), (2, "Pie", 2.0, "2020-01-01 00:00:00")])
    write_feed(root, [1, 2, 3])
    assert cli.main(["validate", "--project", str(root)]) == 0
    assert cli.main(["explain", "db.menu_items", "--project", str(root)]) == 0
    out = capsys.readouterr().out
    assert "write:           SCD type 2 history by (id): a newer updated_at closes the current row" in out
    assert "not applicable" in out
    assert cli.main(["run", "--project", str(root)]) == 0
    write_menu(root, [(1, "Tea", 1.5, "2020-01-02 00:00:00")])
    write_feed(root, [1, 2, 3, 4, 5])
    API.add(2, 3)
    assert cli.main(["run", "--project", str(root)]) == 0
    out = capsys.readouterr().out
    assert "3 run(s) succeeded, 0 failed" in out
    assert cli.main(["status", "--project", str(root)]) == 0
    out = capsys.readouterr().out
    assert (
        "db.menu_items (SCD_TYPE_2): last materialized" in out
        and "rows_inserted 1, rows_closed 2, delta_version 1" in out
    )
    assert (
        "s.feed_copy (INCREMENTAL_BY_CURSOR): last materialized" in out
        and "run_rows_written 2, cursor_after 5, delta_version 1" in out
    )
    assert "raw_api.orders (INCREMENTAL_BY_CURSOR): last materialized" in out and "cursor_after 3" in out
    assert API.calls == [(0, True), (1, False)]
    # Nothing new: a run that changes nothing commits nothing, and its record still matches the table.
    assert cli.main(["run", "s.feed_copy", "--project", str(root)]) == 0
    capsys.readouterr()
    assert cli.main(["status", "--project", str(root)]) == 0
    assert "other runs" not in capsys.readouterr().out
    project = load_project(root)
    rows = table_rows(table_uri(project, "db.menu_items"), drop=DROP)
    assert [(r[0], r[2], r[5] is None) for r in rows] == [(1, 1.0, False), (1, 1.5, True), (2, 2.0, False)]

    # A Dagster run tagged with an execution time closes deleted keys at that time (replays, tests).
    import dagster as dg

    from incremental_assets.orchestration.build_definitions import build_definitions
    from incremental_assets.orchestration.instance import open_instance
    from incremental_assets.orchestration.tags import EXECUTION_TIME_TAG

    write_menu(root, [(2, "Pie", 2.0, "2020-01-05 00:00:00")])
    job = build_definitions(project).resolve_implicit_global_asset_job_def()
    result = job.execute_in_process(
        instance=open_instance(project.settings.dagster_home),
        asset_selection=[dg.AssetKey(["db", "menu_items"])],
        tags={EXECUTION_TIME_TAG: "2020-01-04T12:00:00+00:00"},
    )
    assert result.success
    closed = [r for r in table_rows(table_uri(project, "db.menu_items"), drop=DROP) if r[0] == 1 and r[2] == 1.5]
    assert closed[0][5] == T("2020-01-04 12:00:00")


def test_scd_type_2_options_keep_deleted_keys_and_start_history_at_updated_at(spark, make_project):
    sql = MENU_SCD.replace("buckets 4", "buckets 2, invalidate_hard_deletes false, updated_at_as_valid_from true")
    root = make_project({"sources.yaml": MENU_SOURCE, "models/menu.sql": sql})
    project = load_project(root)
    write_menu(root, [(1, "Tea", 1.0, "2020-01-01 00:00:00"), (2, "Pie", 2.0, "2020-01-01 06:00:00")])
    run_model(spark, project, "db.menu_items", utc(2020, 1, 1, 12))
    write_menu(root, [(1, "Tea", 1.5, "2020-01-02 00:00:00")])  # Pie disappears from the source
    run_model(spark, project, "db.menu_items", utc(2020, 1, 2, 12))
    write_menu(root, [(1, "Tea", 1.5, "2020-01-02 00:00:00"), (2, "Pie", 2.5, "2020-01-03 00:00:00")])
    run_model(spark, project, "db.menu_items", utc(2020, 1, 3, 12))
    assert table_rows(table_uri(project, "db.menu_items"), drop=DROP) == [
        (1, "Tea", 1.0, T("2020-01-01 00:00:00"), T("2020-01-01 00:00:00"), T("2020-01-02 00:00:00")),
        (1, "Tea", 1.5, T("2020-01-02 00:00:00"), T("2020-01-02 00:00:00"), None),
        (2, "Pie", 2.0, T("2020-01-01 06:00:00"), T("2020-01-01 06:00:00"), T("2020-01-03 00:00:00")),
        (2, "Pie", 2.5, T("2020-01-03 00:00:00"), T("2020-01-03 00:00:00"), None),
    ]


def test_timestamp_cursor_is_rendered_as_a_typed_literal(spark, make_project):
    sql = """\
    MODEL (name s.recent, kind INCREMENTAL_BY_CURSOR (cursor ts, initial_value '2024-01-01 06:00:00'));
    SELECT region, k, v, ts FROM raw.updates WHERE ts > @last_value
    """
    root = make_project({"sources.yaml": UPDATES_SOURCE, "models/recent.sql": sql})
    project = load_project(root)
    append_updates(root, [("eu", 1, "a", utc(2024, 1, 1, 5)), ("eu", 2, "b", utc(2024, 1, 1, 7))])
    first = run_model(spark, project, "s.recent", utc(2024, 1, 2))
    assert "ts > '2024-01-01 06:00:00'" in first.sql and first.details["cursor_after"] == "2024-01-01 07:00:00"
    append_updates(root, [("eu", 3, "c", utc(2024, 1, 1, 7, 30)), ("us", 4, "d", utc(2024, 1, 2))])
    second = run_model(spark, project, "s.recent", utc(2024, 1, 3))
    assert "ts > CAST('2024-01-01 07:00:00' AS TIMESTAMP)" in second.sql
    assert [r[1] for r in table_rows(table_uri(project, "s.recent"))] == [2, 3, 4]


def test_unique_key_when_matched_updates_only_what_its_clauses_say(spark, make_project):
    sql = LATEST.replace(
        "buckets 4)",
        "buckets 4, when_matched (WHEN MATCHED AND source.v = 'skip' THEN UPDATE SET target.ts = source.ts\n"
        "  WHEN MATCHED THEN UPDATE SET target.v = concat(target.v, '+', source.v)))",
    )
    root = make_project({"sources.yaml": UPDATES_SOURCE, "models/latest.sql": sql})
    project = load_project(root)
    assert len(project.model("s.latest").kind.when_matched) == 2
    append_updates(root, [("eu", 1, "a", utc(2024, 1, 1, 5)), ("eu", 2, "b", utc(2024, 1, 1, 6))])
    run_model(spark, project, "s.latest", utc(2024, 1, 2))
    append_updates(
        root,
        [
            ("eu", 1, "a2", utc(2024, 1, 2, 1)),
            ("eu", 2, "skip", utc(2024, 1, 2, 2)),
            ("us", 3, "c", utc(2024, 1, 2, 3)),
        ],
    )
    second = run_model(spark, project, "s.latest", utc(2024, 1, 3))
    assert second.details == {"rows_inserted": 1, "rows_updated": 2}
    assert table_rows(table_uri(project, "s.latest"), drop=DROP) == [
        ("eu", 1, "a+a2", T("2024-01-01 05:00:00")),
        ("eu", 2, "b", T("2024-01-02 02:00:00")),
        ("us", 3, "c", T("2024-01-02 03:00:00")),
    ]


def test_a_unique_key_model_reads_up_to_each_command_s_end(spark, make_project, monkeypatch, tmp_path, capsys):
    """Past data replayed command by command (``run --auto --end``): each run reads from where the last one
    ended up to the command's end, as SQLMesh's ``run --end`` (before, every run after the first read from
    the wall clock of the previous one, so rows of the past were never read again)."""
    from helpers import cli_output

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    root = make_project(
        {
            "sources.yaml": "- {name: raw.events, location: data/events, format: delta, time_column: ts}\n",
            "models/last.sql": """
                MODEL (name s.last_by_grp, kind INCREMENTAL_BY_UNIQUE_KEY (unique_key grp));
                SELECT grp, id AS last_id, ts AS last_ts FROM raw.events WHERE ts BETWEEN @start_dt AND @end_dt
                QUALIFY ROW_NUMBER() OVER (PARTITION BY grp ORDER BY ts DESC) = 1
            """,
        }
    )

    def add(rows: list[tuple]) -> None:
        table = pa.table(
            {
                "id": pa.array([r[0] for r in rows], pa.int64()),
                "grp": [r[1] for r in rows],
                "ts": pa.array([r[2] for r in rows], pa.timestamp("us", tz="UTC")),
            }
        )
        write_deltalake(str(root / "data" / "events"), table, mode="append")

    add([(1, "a", utc(2024, 1, 1, 9)), (2, "a", utc(2024, 1, 2, 23, 30)), (3, "b", utc(2024, 1, 3))])
    code, out = cli_output(root, capsys, "run", "--auto", "--end", "2024-01-03")
    assert code == 0, out
    project = load_project(root)
    assert [r[:2] for r in table_rows(table_uri(project, "s.last_by_grp"))] == [("a", 2)]
    assert delta.last_commit_metadata(table_uri(project, "s.last_by_grp"))["window_end"].startswith("2024-01-03")

    add([(4, "b", utc(2024, 1, 4, 10))])
    code, out = cli_output(root, capsys, "run", "--auto", "--end", "2024-01-05")
    assert code == 0, out
    assert [r[:2] for r in table_rows(table_uri(project, "s.last_by_grp"))] == [("a", 2), ("b", 4)]
