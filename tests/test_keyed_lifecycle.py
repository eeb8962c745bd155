"""Lifecycle of the merge-style kinds: full refresh, changed definitions and schema-change policies.

Every test compares the whole Delta table with the exact expected rows and checks the table version,
so a refused change is proven to leave the table as it was.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from test_keyed_kinds import (
    COPY,
    DROP,
    FEED_SOURCE,
    LATEST,
    MENU_SCD,
    MENU_SOURCE,
    UPDATES_SOURCE,
    T,
    append_updates,
    run_model,
    write_feed,
    write_menu,
)

from incremental_assets import cli
from incremental_assets.errors import ModelFileError
from incremental_assets.load.project import load_project
from incremental_assets.plan.rebuild import full_refresh_target
from incremental_assets.plan.run_plan import InputRead, plan_run, view_name
from incremental_assets.spark.executor import Executor

from helpers import table_rows, table_uri, utc


def versions(project, *names: str) -> list[int]:
    return [DeltaTable(table_uri(project, n)).version() for n in names]


def test_full_refresh_replaces_unique_key_and_cursor_tables_in_one_commit_and_refuses_scd2(spark, make_project, capsys):
    root = make_project(
        {
            "sources.yaml": UPDATES_SOURCE + FEED_SOURCE + MENU_SOURCE,
            "models/latest.sql": LATEST,
            "models/copy.sql": COPY,
            "models/menu.sql": MENU_SCD,
        }
    )
    append_updates(root, [("eu", 1, "a", utc(2024, 1, 1, 5)), ("us", 1, "c", utc(2024, 1, 1, 7))])
    write_feed(root, [1, 2, 3])
    write_menu(root, [(1, "Tea", 1.0, "2020-01-01 00:00:00")])
    assert cli.main(["run", "--project", str(root)]) == 0
    project = load_project(root)
    # Changes an incremental run cannot see: a source row rewritten in the past (before the unique-key
    # window) and a payload changed below the cursor.
    write_deltalake(
        str(root / "data" / "updates"),
        pa.table(
            {
                "region": ["eu"],
                "k": pa.array([1], pa.int64()),
                "v": ["A"],
                "ts": pa.array([utc(2024, 1, 1, 5)], pa.timestamp("us", tz="UTC")),
            }
        ),
        mode="overwrite",
    )
    write_deltalake(
        str(root / "data" / "feed"),
        pa.table({"id": pa.array([1, 2], pa.int64()), "payload": ["q1", "q2"]}),
        mode="overwrite",
    )
    before = versions(project, "s.latest", "s.feed_copy", "db.menu_items")
    history = table_rows(table_uri(project, "db.menu_items"), drop=DROP)

    assert cli.main(["run", "s.latest", "s.feed_copy", "--full-refresh", "--project", str(root)]) == 0
    assert versions(project, "s.latest", "s.feed_copy") == [before[0] + 1, before[1] + 1]  # one commit each
    assert table_rows(table_uri(project, "s.latest"), drop=DROP) == [("eu", 1, "A", T("2024-01-01 05:00:00"))]
    assert table_rows(table_uri(project, "s.feed_copy")) == [(1, "q1", True, 0), (2, "q2", True, 0)]
    assert "rebuilt from start, one commit" in capsys.readouterr().out

    # SCD type 2 keeps history the source no longer has: its full refresh is refused, the table unchanged.
    assert cli.main(["run", "db.menu_items", "--full-refresh", "--project", str(root)]) == 1
    out = capsys.readouterr().out
    assert (
        "menu.sql" in out
        and "a full refresh would throw away its history" in out
        and "disable_restatement false" in out
    )
    assert versions(project, "db.menu_items") == [before[2]]
    assert table_rows(table_uri(project, "db.menu_items"), drop=DROP) == history


def test_scd2_full_refresh_with_restatement_enabled_restarts_history_in_one_commit(spark, make_project):
    root = make_project(
        {
            "sources.yaml": MENU_SOURCE,
            "models/menu.sql": MENU_SCD.replace("buckets 4", "buckets 4, disable_restatement false"),
        }
    )
    project = load_project(root)
    name = "db.menu_items"
    write_menu(root, [(1, "Tea", 1.0, "2020-01-01 00:00:00"), (2, "Pie", 2.0, "2020-01-01 00:00:00")])
    run_model(spark, project, name, utc(2020, 1, 1))
    write_menu(root, [(1, "Tea", 1.5, "2020-01-02 00:00:00")])
    run_model(spark, project, name, utc(2020, 1, 3))
    assert len(table_rows(table_uri(project, name), drop=DROP)) == 3
    executor = Executor(spark, project)
    result = executor.execute(
        plan_run(
            project,
            project.model(name),
            None,
            execution_time=utc(2020, 1, 4),
            target=full_refresh_target(project.model(name)),
        )
    )
    assert result.version == 2
    assert table_rows(table_uri(project, name), drop=DROP) == [
        (1, "Tea", 1.5, T("2020-01-02 00:00:00"), T("1970-01-01 00:00:00"), None)
    ]
    # Without the setting the refusal names the file and the kind's line.
    with pytest.raises(ModelFileError, match=r"menu.sql:3.*full refresh would throw away its history"):
        full_refresh_target(
            load_project(make_project({"sources.yaml": MENU_SOURCE, "models/menu.sql": MENU_SCD}, name="p2")).model(
                name
            )
        )


def status_of(root, name: str, capsys) -> str:
    capsys.readouterr()
    assert cli.main(["status", name, "--project", str(root)]) == 0
    return capsys.readouterr().out


def test_changed_unique_key_definition_rebuilds_unless_forward_only_and_scd2_moves_forward(spark, make_project, capsys):
    root = make_project({"sources.yaml": UPDATES_SOURCE, "models/latest.sql": LATEST})
    name = "s.latest"
    append_updates(root, [("eu", 1, "a", utc(2024, 1, 1, 5)), ("us", 1, "c", utc(2024, 1, 1, 7))])
    run_model(spark, load_project(root), name, utc(2024, 1, 2))
    append_updates(root, [("eu", 2, "b", utc(2024, 1, 2, 5))])
    changed = LATEST.replace("SELECT region, k, v,", "SELECT region, k, upper(v) AS v,")
    # forward_only: the new definition applies to new rows only (the window continues where it ended).
    (root / "models" / "latest.sql").write_text(changed.replace("buckets 4", "buckets 4, forward_only true"))
    keep = "s.latest: CHANGED since its table was built; the next run keeps its rows (forward_only)"
    assert keep in status_of(root, name, capsys)
    run_model(spark, load_project(root), name, utc(2024, 1, 3))
    assert "CHANGED" not in status_of(root, name, capsys)
    assert [r[:3] for r in table_rows(table_uri(load_project(root), name), drop=DROP)] == [
        ("eu", 1, "a"),
        ("eu", 2, "B"),
        ("us", 1, "c"),
    ]
    # Not forward_only (the default): a changed definition rebuilds the table from the model's start.
    append_updates(root, [("us", 2, "d", utc(2024, 1, 3, 5))])
    (root / "models" / "latest.sql").write_text(changed.replace("upper(v)", "lower(upper(v)) || '!'"))
    out = status_of(root, name, capsys)
    assert (
        "s.latest: CHANGED since its table was built; the next run rebuilds it from scratch, replacing the "
        "table in one commit" in out
    )
    assert "changed since: the next run rebuilds it" not in out  # said once
    assert cli.main(["status", name, "--json", "--project", str(root)]) == 0
    [row] = json.loads(capsys.readouterr().out)
    assert row["changed"] and row["on_change"].startswith("rebuilds it from scratch")
    project = load_project(root)
    result = run_model(spark, project, name, utc(2024, 1, 4))
    assert result.window.start == utc(2024, 1, 1) and result.details == {"rows_inserted": 4, "rows_updated": 0}
    assert [r[:3] for r in table_rows(table_uri(project, name), drop=DROP)] == [
        ("eu", 1, "a!"),
        ("eu", 2, "b!"),
        ("us", 1, "c!"),
        ("us", 2, "d!"),
    ]

    # SCD type 2 is forward-only by default: a changed definition keeps the history.
    root = make_project({"sources.yaml": MENU_SOURCE, "models/menu.sql": MENU_SCD}, name="scd")
    write_menu(root, [(1, "Tea", 1.0, "2020-01-01 00:00:00")])
    run_model(spark, load_project(root), "db.menu_items", utc(2020, 1, 1))
    (root / "models" / "menu.sql").write_text(MENU_SCD.replace("name::STRING", "upper(name) AS name"))
    write_menu(root, [(1, "Tea", 2.0, "2020-01-02 00:00:00")])
    assert "db.menu_items: CHANGED since its table was built; the next run keeps its rows (forward_only)" in status_of(
        root, "db.menu_items", capsys
    )
    run_model(spark, load_project(root), "db.menu_items", utc(2020, 1, 3))
    assert [r[:3] for r in table_rows(table_uri(load_project(root), "db.menu_items"), drop=DROP)] == [
        (1, "TEA", 2.0),
        (1, "Tea", 1.0),
    ]


def test_unique_key_schema_changes_follow_the_kind_policies(spark, make_project):
    root = make_project({"sources.yaml": UPDATES_SOURCE, "models/latest.sql": LATEST})
    name = "s.latest"
    append_updates(
        root,
        [("eu", 1, "a", utc(2024, 1, 1, 5)), ("us", 1, "c", utc(2024, 1, 1, 7)), ("us", 2, "d", utc(2024, 1, 1, 8))],
    )
    run_model(spark, load_project(root), name, utc(2024, 1, 2))
    add_column = LATEST.replace("v, ts FROM", "v, ts, length(v) AS n FROM").replace(
        "unique_key (region, k)", "unique_key (region, k), forward_only true"
    )

    # ignore: the new column is not written, the table keeps its schema.
    (root / "models" / "latest.sql").write_text(
        add_column.replace("forward_only true", "forward_only true, on_additive_change ignore")
    )
    append_updates(root, [("eu", 1, "a2", utc(2024, 1, 2, 1))])
    run_model(spark, load_project(root), name, utc(2024, 1, 3))
    project = load_project(root)
    assert [r[:3] for r in table_rows(table_uri(project, name), drop=DROP)] == [
        ("eu", 1, "a2"),
        ("us", 1, "c"),
        ("us", 2, "d"),
    ]
    assert "n" not in DeltaTable(table_uri(project, name)).schema().to_arrow().names

    # allow (default): the column is added in the same commit; rows written before read as NULL, in rewritten
    # buckets and in untouched ones alike.
    (root / "models" / "latest.sql").write_text(add_column)
    append_updates(root, [("eu", 2, "bbb", utc(2024, 1, 3, 1))])
    result = run_model(spark, load_project(root), name, utc(2024, 1, 4))
    assert result.details == {"rows_inserted": 1, "rows_updated": 0}
    rows = table_rows(table_uri(project, name), drop=DROP)
    assert [(r[0], r[1], r[2], r[4]) for r in rows] == [
        ("eu", 1, "a2", None),
        ("eu", 2, "bbb", 3),
        ("us", 1, "c", None),
        ("us", 2, "d", None),
    ]
    read = Executor(spark, project).read_model_table(name, InputRead(name, view_name(name), "table", None))[
        0
    ]  # what downstream models see
    assert sorted((r["k"], r["region"], r["n"]) for r in read.collect()) == [
        (1, "eu", None),
        (1, "us", None),
        (2, "eu", 3),
        (2, "us", None),
    ]

    # destructive (a dropped column): refused by default, naming the file, the line and the column; table unchanged.
    version = DeltaTable(table_uri(project, name)).version()
    (root / "models" / "latest.sql").write_text(add_column.replace("v, ts, length(v) AS n", "v, length(v) AS n"))
    append_updates(root, [("eu", 3, "e", utc(2024, 1, 4, 1))])
    with pytest.raises(ModelFileError, match=r"latest\.sql:3.*destructive schema change.*column ts dropped"):
        run_model(spark, load_project(root), name, utc(2024, 1, 5))
    assert (
        DeltaTable(table_uri(project, name)).version() == version
        and table_rows(table_uri(project, name), drop=DROP) == rows
    )


COPY_ALL = """\
MODEL (name s.copy_all, kind INCREMENTAL_BY_CURSOR (cursor id, initial_value 0));
SELECT * FROM raw.feed WHERE id > @last_value
"""


def test_scd2_and_cursor_schema_changes_evolve_or_refuse(spark, make_project):
    root = make_project(
        {"sources.yaml": MENU_SOURCE + FEED_SOURCE, "models/menu.sql": MENU_SCD, "models/copy_all.sql": COPY_ALL}
    )
    name = "db.menu_items"
    write_menu(root, [(1, "Tea", 1.0, "2020-01-01 00:00:00"), (2, "Pie", 2.0, "2020-01-01 00:00:00")])
    run_model(spark, load_project(root), name, utc(2020, 1, 1))
    # A new column: the closed row and the untouched key read NULL, the new version has it.
    (root / "models" / "menu.sql").write_text(
        MENU_SCD.replace("price::DOUBLE,", "price::DOUBLE, price * 2 AS double_price,")
    )
    write_menu(root, [(1, "Tea", 1.5, "2020-01-02 00:00:00"), (2, "Pie", 2.0, "2020-01-01 00:00:00")])
    run_model(spark, load_project(root), name, utc(2020, 1, 3))
    project = load_project(root)
    assert table_rows(table_uri(project, name), drop=DROP) == [
        (1, "Tea", 1.0, T("2020-01-01 00:00:00"), T("1970-01-01 00:00:00"), T("2020-01-02 00:00:00"), None),
        (1, "Tea", 1.5, T("2020-01-02 00:00:00"), T("2020-01-02 00:00:00"), None, 3.0),
        (2, "Pie", 2.0, T("2020-01-01 00:00:00"), T("1970-01-01 00:00:00"), None, None),
    ]
    # Dropping a column is refused: the error names the file and the column, the history is unchanged.
    version = DeltaTable(table_uri(project, name)).version()
    (root / "models" / "menu.sql").write_text(
        MENU_SCD.replace("price::DOUBLE,", "price::DOUBLE,").replace("name::STRING, ", "")
    )
    with pytest.raises(ModelFileError, match=r"menu\.sql.*column (name|double_price) dropped"):
        run_model(spark, load_project(root), name, utc(2020, 1, 4))
    assert DeltaTable(table_uri(project, name)).version() == version

    # A cursor model copying its source's columns: a column the source gains is appended with the
    # next rows (the definition, hence the cursor, is unchanged); rows appended before read NULL.
    write_feed(root, [1, 2])
    run_model(spark, load_project(root), "s.copy_all", utc(2024, 1, 1))
    write_deltalake(
        str(root / "data" / "feed"),
        pa.table({"id": pa.array([3], pa.int64()), "payload": ["p3"], "extra": ["x"]}),
        mode="overwrite",
        schema_mode="overwrite",
    )
    result = run_model(spark, load_project(root), "s.copy_all", utc(2024, 1, 2))
    assert result.write == "append" and result.version == 1
    assert table_rows(table_uri(project, "s.copy_all")) == [(1, "p1", None), (2, "p2", None), (3, "p3", "x")]
    # on_additive_change error refuses the next new column, naming it; the table is unchanged.
    (root / "models" / "copy_all.sql").write_text(
        COPY_ALL.replace("initial_value 0", "initial_value 0, on_additive_change error")
    )
    write_deltalake(
        str(root / "data" / "feed"),
        pa.table({"id": pa.array([4], pa.int64()), "payload": ["p4"], "extra": ["y"], "more": [1]}),
        mode="overwrite",
        schema_mode="overwrite",
    )
    with pytest.raises(ModelFileError, match=r"copy_all\.sql:1.*additive schema change.*new column more"):
        run_model(spark, load_project(root), "s.copy_all", utc(2024, 1, 3))
    assert DeltaTable(table_uri(project, "s.copy_all")).version() == 1


def test_lifecycle_settings_of_merge_kinds_are_checked_and_left_out_of_the_fingerprint(make_project):
    from incremental_assets.load.model_file import parse_model_file

    def parse(kind: str, name: str):
        root = make_project(
            {"models/m.sql": f"MODEL (\n  name s.m,\n  kind {kind}\n);\nSELECT k, v, updated_at FROM t\n"}, name=name
        )
        return parse_model_file(root / "models" / "m.sql")

    with pytest.raises(
        ModelFileError, match="on_additive_change must be error, warn, allow or ignore, found sometimes"
    ) as info:
        parse("INCREMENTAL_BY_UNIQUE_KEY (unique_key k, on_additive_change sometimes)", "bad")
    assert info.value.line == 3
    plain, tuned = (
        parse("SCD_TYPE_2 (unique_key k)", "a"),
        parse(
            "SCD_TYPE_2 (unique_key k, forward_only false, disable_restatement false, on_destructive_change warn)", "b"
        ),
    )
    assert plain.fingerprint == tuned.fingerprint
    assert (plain.forward_only, plain.kind.disable_restatement) == (True, True) and (
        tuned.forward_only,
        tuned.kind.on_destructive_change,
    ) == (False, "warn")
    cursor = parse("INCREMENTAL_BY_CURSOR (cursor k, on_additive_change ignore)", "c")
    assert cursor.kind.on_additive_change == "ignore" and not cursor.metadata.get("kind.on_additive_change")
