"""SQLMesh Python models, macros and audits as SQLMesh's own examples write them: ``@model`` audits in every
form, ``column_descriptions``, kind classes with a time-column format, ``is_sql`` entrypoints, tables named
through module constants, keyword-only ``execute``, a FULL model reading its own table, ``decimal(7, 2)``
columns, Jinja macros of ``macros/*.sql``, macro calls in audit arguments, inline audits of a SEED file, and
YAML unit tests of Python models."""

from __future__ import annotations

import shutil
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

import pytest
from sqlglot import exp

from incremental_assets import delta
from incremental_assets.errors import ProjectError
from incremental_assets.load.project import load_project
from incremental_assets.load.python_models import load_python_models
from incremental_assets.model.intervals import TimeWindow
from incremental_assets.plan.run_plan import plan_run, plan_window

from helpers import table_rows, utc

PROJECT = Path(__file__).parent / "sqlmesh_python_project"
EXAMPLES = Path("/tmp/sqlmesh-examples-0.236.4")


@pytest.fixture
def shop(tmp_path):
    root = tmp_path / "shop"
    shutil.copytree(PROJECT, root)
    return root


def test_python_models_macros_and_audits_load_as_sqlmesh_reads_them(shop):
    project = load_project(shop)
    orders = project.model("shop.orders")
    assert (orders.kind.time_column, orders.kind.time_format) == ("order_ds", "%Y-%m-%d")
    assert dict(orders.columns)["amount"] == "DECIMAL(7, 2)"
    assert orders.column_descriptions == {"amount": "What the order cost"}
    assert orders.depends_on == ("shop.items",)  # context.resolve_table(ITEMS), ITEMS a module constant
    audits = {a.name: a for a in orders.audits}
    assert [c.sql() for c in audits["not_null"].args["columns"]] == ["order_id", "item"]
    assert [v.sql() for v in audits["accepted_values"].args["is_in"]] == ["'apple'", "'pear'"]
    assert "assert_amounts_not_negative" in project.audits  # audits/shop/*.sql: subfolders load too
    counts = project.model("shop.order_counts")
    assert set(counts.depends_on) == {"shop.order_counts", "shop.orders"}  # a FULL Python model reading itself
    totals = project.model("shop.item_totals")  # is_sql: the entrypoint's SQL text, in the project's dialect
    assert totals.depends_on == ("shop.orders",) and [a.name for a in totals.audits] == ["not_null_items"]
    daily = project.model("shop.daily_orders")
    assert {p.name for p in daily.query.find_all(exp.Parameter)} == {
        "start_ds",
        "end_ds",
    }  # the macro's window, for each run
    assert [s.sql() for s in daily.pre_statements] == ["SELECT 1"]  # @noop() returns a SELECT: still a pre-statement
    assert project.model("shop.labelled").query.sql(dialect="spark") == "SELECT item AS name, 1 AS one FROM shop.items"
    items = project.model("shop.items")
    price_above = next(a for a in items.audits if a.name == "price_above")
    assert price_above.args["threshold"].sql() == "0"  # @lowest_price() evaluated when the model loads
    assert {"price_above", "named_items"} <= set(project.audits)  # both inline AUDIT blocks of the SEED file


@pytest.mark.parametrize(
    "file, text, expected",
    [
        (
            "models/orders.py",
            ("context.resolve_table(ITEMS)", "context.resolve_table(ITEMS + unknown_name)"),
            "models/orders.py:28: cannot tell which table context.resolve_table(ITEMS + unknown_name) "
            "reads when the file loads",
        ),
        (
            "models/item_totals.py",
            ("return 'SELECT", "raise ValueError('no table'); return 'SELECT"),
            "models/item_totals.py:7: @model shop.item_totals: entrypoint raised ValueError: no table",
        ),
        (
            "models/orders.py",
            ('"not_null", {', '"not_null", "columns", {'),
            "models/orders.py:14: @model shop.orders: audits: an audit is a name, a (name, {arguments}) tuple",
        ),
        ("macros/jinja_macros.sql", ("{{ y }}", "{{ y }"), "macros/jinja_macros.sql:1: cannot read the Jinja macros"),
    ],
)
def test_a_broken_python_model_or_macro_is_one_line_naming_file_and_line(shop, file, text, expected):
    path = shop / file
    path.write_text(path.read_text().replace(*text))
    with pytest.raises(ProjectError) as err:
        load_project(shop)
    assert any(str(e).startswith(f"{shop}/{expected}") for e in err.value.errors), str(err.value)


def _run(spark, project, execution_time):
    from incremental_assets.spark.executor import Executor

    ex = Executor(spark, project)
    for model in project.ordered():
        if model.is_incremental:
            for plan in plan_window(
                project, model, TimeWindow(utc(2024, 1, 1), utc(2024, 1, 4)), execution_time=execution_time
            ):
                ex.execute(plan)
        else:
            ex.execute(plan_run(project, model, None, execution_time=execution_time))


def test_python_models_run_on_spark_as_sqlmesh_calls_them(spark, shop):
    from incremental_assets.spark.audits import evaluate, read_committed

    project = load_project(shop)
    now = datetime(2024, 1, 5, 13, 30, tzinfo=timezone.utc)
    _run(spark, project, now)
    warehouse = project.settings.warehouse
    orders = table_rows(delta.table_uri(warehouse, "shop.orders"))
    assert orders == [
        (day * 10 + n, item, Decimal(amount), f"2024-01-0{day}")
        for day in (1, 2, 3)
        for n, item, amount in ((0, "apple", "1.50"), (1, "pear", "4.50"))
    ]
    assert table_rows(delta.table_uri(warehouse, "shop.daily_orders")) == [(f"2024-01-0{d}", 2) for d in (1, 2, 3)]
    assert table_rows(delta.table_uri(warehouse, "shop.item_totals")) == [
        ("apple", Decimal("4.50")),
        ("pear", Decimal("13.50")),
    ]
    # FULL: the last complete interval of its cron (@daily) ends 2024-01-05 00:00; the first run reads itself empty
    day_end = datetime(2024, 1, 5)
    assert table_rows(delta.table_uri(warehouse, "shop.order_counts")) == [(1, 6, datetime(2024, 1, 4).date(), day_end)]
    from incremental_assets.spark.executor import Executor

    Executor(spark, project).execute(
        plan_run(project, project.model("shop.order_counts"), None, execution_time=now + timedelta(days=1))
    )
    assert table_rows(delta.table_uri(warehouse, "shop.order_counts")) == [
        (2, 6, datetime(2024, 1, 5).date(), day_end + timedelta(days=1))
    ]

    model = project.model("shop.orders")
    rows = read_committed(spark, project, model, None)
    assert all(o.passed for o in evaluate(spark, project, model, rows, list(model.audits)))
    broken = evaluate(spark, project, model, rows.withColumn("amount", -rows.amount), list(model.audits))
    assert {o.audit.name: o.failing_rows for o in broken}[
        "assert_amounts_not_negative"
    ] == 6  # @start_ds..@end_ds and its own name
    items = project.model("shop.items")
    outcomes = evaluate(spark, project, items, read_committed(spark, project, items, None), list(items.audits))
    assert [(o.audit.name, o.failing_rows) for o in outcomes] == [("price_above", 0), ("named_items", 0)]


def test_yaml_unit_tests_run_python_models_and_fail_in_one_line(spark, shop):
    from incremental_assets.spark.model_tests import load_model_tests, run_model_test

    project = load_project(shop)
    tests = {t.name: t for t in load_model_tests(project)}
    assert run_model_test(spark, project, tests["test_orders"]).failures == []
    (failure,) = run_model_test(spark, project, tests["test_order_counts_fails"]).failures
    assert failure.startswith("query: rows differ") and "orders=1" in failure
    path = shop / "models" / "orders.py"
    path.write_text(path.read_text().replace("rows = []", "rows = 1 / 0"))
    project = load_project(shop)
    (failure,) = run_model_test(spark, project, tests["test_orders"]).failures
    assert failure == f"cannot run: model shop.orders ({path}): execute raised ZeroDivisionError: division by zero"


@pytest.mark.skipif(not (EXAMPLES / "sushi").is_dir(), reason="SQLMesh's examples are not unpacked")
def test_sushi_python_models_load_unchanged():
    root = EXAMPLES / "sushi"
    models = {
        m.name: m
        for f in ("items.py", "order_items.py", "orders.py", "raw_marketing.py")
        for m in load_python_models(root / "models" / f, root=root, dialect="duckdb")
    }
    assert set(models["sushi.order_items"].depends_on) == {"sushi.orders", "sushi.items"}  # ITEMS = "sushi.items"
    assert [a.name for a in models["sushi.items"].audits] == [
        "accepted_values",
        "not_null",
        "assert_items_price_exceeds_threshold",
    ]
    assert models["sushi.raw_marketing"].depends_on == ("sushi.raw_marketing",)
    assert models["sushi.raw_marketing"].column_descriptions == {"customer_id": "Unique identifier of the customer"}


@pytest.mark.skipif(not (EXAMPLES / "wursthall").is_dir(), reason="SQLMesh's examples are not unpacked")
def test_wursthall_loads_unchanged(tmp_path):
    pytest.importorskip("faker")
    root = tmp_path / "wursthall"
    shutil.copytree(EXAMPLES / "wursthall", root)
    project = load_project(root)
    order_f = project.model("db.order_f")
    assert (order_f.kind.time_column, order_f.kind.time_format) == ("order_ds", "%Y-%m-%d")
    assert dict(order_f.columns)["order_total"] == "DECIMAL(7, 2)" and order_f.depends_on == (
        "db.item_d",
        "db.order_item_f",
    )


def test_the_test_command_reports_a_failing_python_model_in_one_line(spark, shop, capfd):
    from incremental_assets import cli

    path = shop / "models" / "orders.py"
    path.write_text(path.read_text().replace("SELECT item, price FROM", "SELECT nope, price FROM"))
    assert cli.main(["test", "--project", str(shop)]) == 1
    out, err = capfd.readouterr()
    assert f"    cannot run: model shop.orders ({path}): execute raised AnalysisException: [UNRESOLVED_COLUMN" in out
    assert "0 passed, 2 failed" in out
    for text in (out, err):
        assert "Traceback" not in text and "\tat org.apache" not in text and "at org.apache.spark" not in text, text


def test_a_models_package_imported_from_elsewhere_does_not_hide_the_projects_own(make_project, monkeypatch):
    """A process that already imported another folder's ``models`` package (another project, the working
    directory) still loads this project's ``from models.src.shared import ...``, and gets the other back."""
    import sys

    other = make_project({"models/__init__.py": "", "models/elsewhere.py": "X = 1\n"}, name="other")
    monkeypatch.syspath_prepend(str(other))
    monkeypatch.delitem(sys.modules, "models", raising=False)
    import models as theirs

    root = make_project(
        {
            "models/__init__.py": "",
            "models/src/__init__.py": "",
            "models/src/shared.py": "COLUMNS = {'x': 'int'}\n",
            "models/src/numbers.py": (
                "import pandas as pd\nfrom sqlmesh import model\nfrom models.src.shared import COLUMNS\n\n"
                "@model('s.numbers', kind='FULL', columns=COLUMNS)\n"
                "def execute(context, start, end, execution_time, **kwargs):\n    return pd.DataFrame({'x': [1]})\n"
            ),
        }
    )
    project = load_project(root)
    assert dict(project.model("s.numbers").columns) == {"x": "INT"}
    assert sys.modules["models"] is theirs
    monkeypatch.delitem(sys.modules, "models")
