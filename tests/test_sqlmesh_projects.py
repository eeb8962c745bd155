"""A SQLMesh project folder loads and runs unchanged: config.yaml model defaults and variables, a DuckDB
dialect transpiled to Spark, default kind and start, inclusive date ends, inline audits, Jinja,
external_models.yaml, SEED headers without ';', `$root` paths and `@model` Python models."""

from __future__ import annotations

import csv
import logging
import shutil
import sys
from collections import defaultdict
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from incremental_assets import delta
from incremental_assets.errors import ProjectError
from incremental_assets.load.model_graph import default_starts
from incremental_assets.load.project import load_project
from incremental_assets.load.sqlmesh_config import project_variables
from incremental_assets.load.sqlmesh_shim import real_sqlmesh_installed
from incremental_assets.model.intervals import TimeWindow
from incremental_assets.plan.run_plan import plan_run, plan_window

from helpers import table_rows, utc

PROJECT = Path(__file__).parent / "sqlmesh_project"


@pytest.fixture
def bakery(tmp_path):
    root = tmp_path / "bakery"
    shutil.copytree(PROJECT, root)
    return root


def _sales() -> list[dict]:
    with open(PROJECT / "data" / "sales.csv") as f:
        return list(csv.DictReader(f))


def test_config_defaults_and_sqlmesh_semantics_apply(bakery):
    project = load_project(bakery)
    daily = project.model("bakery.daily_sales")
    assert daily.dialect == "duckdb" and daily.cron == "@daily"
    assert (daily.start, daily.end) == (utc(2024, 1, 1), utc(2024, 1, 4))  # end '2024-01-03' covers that day
    assert project.model("bakery.item_totals").kind.name == "VIEW"  # no kind: SQLMesh's default
    assert project_variables(project) == {"min_quantity": 3}
    assert "WHERE s.quantity >= 3" in project.model("bakery.revenue").query.sql(dialect="spark")  # Jinja with var()
    assert "positive_quantity" in project.audits  # the inline AUDIT block
    assert project.sources["raw.sales"].format == "csv" and project.sources["raw.sales"].columns["quantity"] == "INT"
    assert set(project.models) == {
        "bakery.daily_sales",
        "bakery.daily_units",
        "bakery.item_days",
        "bakery.item_totals",
        "bakery.item_sizes",
        "bakery.prices",
        "bakery.revenue",
    }
    assert project.model("bakery.item_sizes").depends_on == ("bakery.item_totals",)
    assert "sqlmesh" not in sys.modules or real_sqlmesh_installed()  # the served names are gone after loading


def test_the_project_runs_on_spark_with_sqlmesh_results(spark, bakery):
    from incremental_assets.spark.executor import Executor

    project = load_project(bakery)
    ex = Executor(spark, project)
    for model in project.ordered():
        if model.is_incremental:
            plans = plan_window(project, model, TimeWindow(model.start, model.end or utc(2024, 1, 4)))
            assert (plans[0].window.start, plans[-1].window.end) == (
                utc(2024, 1, 1),
                utc(2024, 1, 4),
            )  # the last day is in
            for plan in plans:
                ex.execute(plan)
        else:
            ex.execute(plan_run(project, model, None))
    warehouse = project.settings.warehouse

    daily: dict[tuple, list[int]] = defaultdict(lambda: [0, 0])
    for row in _sales():
        day = datetime.fromisoformat(row["sold_at"]).date()
        if day <= datetime(2024, 1, 3).date():
            daily[(day, row["item"])][0] += int(row["quantity"])
            daily[(day, row["item"])][1] += 1
    assert table_rows(delta.table_uri(warehouse, "bakery.daily_sales")) == sorted(
        (d, i, q, n) for (d, i), (q, n) in daily.items()
    )

    prices = {r["item"]: float(r["price"]) for r in csv.DictReader(open(PROJECT / "seeds" / "prices.csv"))}
    revenue: dict[str, float] = defaultdict(float)
    for (_, item), (quantity, _) in daily.items():
        if quantity >= 3:
            revenue[item] += quantity * prices[item]
    assert table_rows(delta.table_uri(warehouse, "bakery.revenue")) == sorted(
        (i, round(r, 2)) for i, r in revenue.items()
    )

    totals: dict[str, int] = defaultdict(int)
    for (_, item), (quantity, _) in daily.items():
        totals[item] += quantity
    expected = sorted((i, q, "large" if q >= 8 else "small") for i, q in totals.items())
    assert table_rows(delta.table_uri(warehouse, "bakery.item_sizes")) == expected

    from incremental_assets.spark.audits import evaluate, read_committed

    daily_model = project.model("bakery.daily_sales")  # its inline AUDIT block, on the committed rows
    rows = read_committed(spark, project, daily_model, None)
    (outcome,) = evaluate(spark, project, daily_model, rows, list(daily_model.audits))
    assert outcome.audit.name == "positive_quantity" and outcome.failing_rows == 0
    (outcome,) = evaluate(
        spark, project, daily_model, rows.withColumn("quantity", rows.quantity - 3), list(daily_model.audits)
    )
    assert outcome.failing_rows == sum(1 for quantity, _ in daily.values() if quantity <= 3)

    units: dict = defaultdict(int)
    for (day, _), (quantity, _) in daily.items():
        units[day] += quantity
    assert table_rows(delta.table_uri(warehouse, "bakery.daily_units")) == sorted(
        units.items()
    )  # the incremental Python model


def test_config_yaml_reads_environment_variables_like_sqlmesh(bakery, monkeypatch):
    path = bakery / "config.yaml"
    path.write_text(path.read_text().replace("min_quantity: 3", "min_quantity: {{ env_var('BAKERY_MIN', 4) }}"))
    assert load_project(bakery).variables == {"min_quantity": 4}
    monkeypatch.setenv("BAKERY_MIN", "7")
    assert load_project(bakery).variables == {"min_quantity": 7}


def test_config_py_is_read_without_sqlmesh_installed(bakery):
    (bakery / "config.yaml").unlink()
    (bakery / "config.py").write_text(
        "from sqlmesh.core.config import Config, ModelDefaultsConfig, GatewayConfig, DuckDBConnectionConfig\n"
        "config = Config(\n"
        "    gateways={'local': GatewayConfig(connection=DuckDBConnectionConfig(database='b.duckdb'))},\n"
        "    model_defaults=ModelDefaultsConfig(dialect='duckdb', start='2024-01-02', cron='@daily'),\n"
        "    variables={'MIN_QUANTITY': 5},\n"
        ")\n"
    )
    project = load_project(bakery)
    assert project.model("bakery.daily_sales").start == utc(2024, 1, 2)
    assert project.variables == {"min_quantity": 5}
    assert "WHERE s.quantity >= 5" in project.model("bakery.revenue").query.sql(dialect="spark")


def test_an_incremental_model_without_any_start_takes_sqlmesh_default(make_project):
    root = make_project(
        {
            "sources.yaml": "- {name: raw.e, location: data/e, format: delta, time_column: ts}\n",
            "models/a.sql": "MODEL (name s.a, kind INCREMENTAL_BY_TIME_RANGE (time_column ts), start '2023-06-01');\n"
            "SELECT ts FROM raw.e WHERE ts BETWEEN @start_ts AND @end_ts",
            "models/b.sql": "MODEL (name s.b, kind INCREMENTAL_BY_TIME_RANGE (time_column ts));\n"
            "SELECT ts FROM s.a WHERE ts BETWEEN @start_ts AND @end_ts",
            "models/c.sql": "MODEL (name s.c, kind INCREMENTAL_BY_TIME_RANGE (time_column ts));\n"
            "SELECT ts FROM raw.e WHERE ts BETWEEN @start_ts AND @end_ts",
        }
    )
    project = load_project(root)
    assert project.model("s.b").start == utc(2023, 6, 1)  # its upstream's start
    c = project.model("s.c")
    yesterday = (datetime.now(c.start.tzinfo) - timedelta(days=1)).date()
    assert c.start.date() == yesterday and c.derived_start  # the last complete interval
    later = default_starts({"s.c": c}, now=c.start + timedelta(days=30))
    assert later["s.c"].fingerprint == c.fingerprint  # a derived start is not a definition change


def test_relative_starts_count_from_the_load_time_as_in_sqlmesh(make_project, monkeypatch):
    from dataclasses import replace

    from incremental_assets.model.intervals import relative_instant

    root = make_project(
        {
            "config.yaml": "model_defaults:\n  dialect: duckdb\n  start: 2 weeks ago\n",
            "sources.yaml": "- {name: raw.e, location: data/e, format: delta, time_column: ts}\n",
            "models/a.sql": "MODEL (name s.a, kind INCREMENTAL_BY_TIME_RANGE (time_column ts), cron '@monthly', "
            "start '1 "
            "year ago');\n"
            "SELECT ts FROM raw.e WHERE ts BETWEEN @start_ts AND @end_ts",
            "models/b.sql": "MODEL (name s.b, kind INCREMENTAL_BY_TIME_RANGE (time_column ts));\n"
            "SELECT ts FROM raw.e WHERE ts BETWEEN @start_ts AND @end_ts",
            "models/c.sql": "MODEL (name s.c, kind INCREMENTAL_BY_TIME_RANGE (time_column ts), start 'yesterday');\n"
            "SELECT ts FROM raw.e WHERE ts BETWEEN @start_ts AND @end_ts",
        }
    )
    project = load_project(root)
    now = datetime.now(utc(2024, 1, 1).tzinfo)
    a, b, c = project.model("s.a"), project.model("s.b"), project.model("s.c")
    year_ago = relative_instant("1 year ago", now)
    assert a.start == year_ago.replace(day=1) and a.relative_start == "1 year ago"  # floored to its month
    assert b.start == relative_instant("2 weeks ago", now) and b.start.date() == (now - timedelta(days=14)).date()
    assert c.start.date() == (now - timedelta(days=1)).date() and c.start.hour == 0
    assert (
        replace(c, start=c.start - timedelta(days=3)).fingerprint == c.fingerprint
    )  # the next day's load is no change
    (root / "models" / "c.sql").write_text(
        "MODEL (name s.c, kind INCREMENTAL_BY_TIME_RANGE (time_column ts), start 'last spring');\nSELECT ts FROM raw.e"
    )
    with pytest.raises(ProjectError) as err:
        load_project(root)
    assert "c.sql:1: start 'last spring' is not a date" in str(err.value) and "'1 year ago'" in str(err.value)


REPLACE_ONLY = """\
from sqlmesh import CustomMaterialization


class MyFull(CustomMaterialization):
    \"\"\"Rebuilds the table.\"\"\"

    NAME = "my_full"

    def insert(self, table_name, query_or_df, model, is_first_insert, render_kwargs, **kwargs):
        assert is_first_insert in (True, False)
        self._replace_query_for_model(model, table_name, query_or_df, render_kwargs)

    def create(self, table_name, model, is_table_deployable, render_kwargs, skip_grants, **kwargs):
        super().create(table_name, model, is_table_deployable, render_kwargs, skip_grants, **kwargs)
"""
CUSTOM_MODEL = (
    "MODEL (\n  name s.m,\n  kind CUSTOM (materialization 'my_full', materialization_properties ('k' = 'v'))\n);\n"
)


def test_a_custom_kind_whose_class_only_replaces_the_table_runs_as_full(spark, make_project, caplog):
    from incremental_assets.spark.executor import Executor

    root = make_project(
        {
            "materializations/full.py": REPLACE_ONLY,
            "models/m.sql": CUSTOM_MODEL + "SELECT 1 AS x UNION ALL SELECT 2 AS x",
        }
    )
    with caplog.at_level(logging.WARNING):
        project = load_project(root)
    model = project.model("s.m")
    assert model.kind.name == "FULL" and model.metadata["kind.materialization_properties"] == "('k' = 'v')"
    said = [r.getMessage() for r in caplog.records if "kind CUSTOM" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith(
        f"{root / 'models' / 'm.sql'}:3: kind CUSTOM materialization 'my_full' (class MyFull in "
    ), said
    assert f"{root / 'materializations' / 'full.py'}:4)" in said[0] and said[0].endswith("so it runs as FULL"), said
    uri = delta.table_uri(project.settings.warehouse, "s.m")
    for day in (2, 3):  # each run replaces the table: the rows are the query's, once
        Executor(spark, project).execute(plan_run(project, model, None, execution_time=utc(2024, 1, day)))
        assert table_rows(uri) == [(1,), (2,)]


def test_a_custom_kind_names_its_materialization_file_and_what_to_use_instead(make_project, capsys):
    from incremental_assets.cli.commands import main

    said_of = "full.py:11: insert"
    writes = {
        "self.adapter.execute(f'INSERT INTO {table_name} SELECT 1')": f"{said_of} calls self.adapter.execute(...)",
        "self.adapter.insert_append(table_name, query_or_df)": f"{said_of} calls self.adapter.insert_append(...)",
        "self.adapter.replace_query(table_name, 'SELECT 1 AS x')": (
            f"{said_of} calls self.adapter.replace_query(...) with `'SELECT 1 AS x'` as the query"
        ),
        "for q in [query_or_df]: self.adapter.replace_query(table_name, q)": f"{said_of} runs `for q in [query_or_df]:",
    }
    for write, said in writes.items():
        root = make_project(
            {
                "materializations/full.py": REPLACE_ONLY.replace(
                    "self._replace_query_for_model(model, table_name, query_or_df, render_kwargs)", write
                ),
                "models/m.sql": CUSTOM_MODEL + "SELECT 1 AS x",
            }
        )
        assert main(["validate", "--project", str(root)]) == 2
        err = capsys.readouterr().err
        assert (
            "Traceback" not in err and "m.sql:3: kind CUSTOM runs materialization 'my_full' (class MyFull in " in err
        ), err
        assert "materializations/full.py:4), which cannot run here: " + said in err, err
        assert "FULL for replace_query" in err and "Python model" in err, err
    (root / "materializations" / "full.py").unlink()
    assert main(["validate", "--project", str(root)]) == 2
    err = capsys.readouterr().err
    assert (
        "m.sql:3: kind CUSTOM runs materialization 'my_full', which was found neither among the installed "
        "'sqlmesh.materializations' entry points nor in a materializations/ folder of the project "
        "(fix: install the package that provides it" in err
    ), err


@pytest.mark.parametrize(
    "change, said",
    [
        ("", None),
        ("    def delete(self, name, **kwargs):\n        super().delete(name, **kwargs)\n", None),
        (
            "    def migrate(self, *args, **kwargs):\n        pass\n",
            "full.py:16: class MyFull defines method migrate besides NAME, insert, create and delete",
        ),
        (
            "    def delete(self, name, **kwargs):\n        self.adapter.drop_table(name)\n",
            "full.py:17: delete calls self.adapter.drop_table(...)",
        ),
        (
            "    def delete(self, name, **kwargs):\n        super().create(name)\n",
            "full.py:17: delete calls super().create(...)",
        ),
        ("    extra = 1\n", "full.py:16: class MyFull defines a statement besides"),
        (
            "class Other(dict, CustomMaterialization):\n    NAME = 'MY_FULL'\n",
            "full.py:16: class Other does not subclass sqlmesh's CustomMaterialization alone",
        ),
    ],
)
def test_only_a_class_whose_every_write_replaces_the_table_with_the_query_counts_as_full(tmp_path, change, said):
    from incremental_assets.load.materializations import find_materialization

    folder = tmp_path / "materializations"
    folder.mkdir()
    (folder / "full.py").write_text(REPLACE_ONLY + "\n" + change)
    found = find_materialization("my_full", [folder])
    assert (found.problem or "").startswith(said or ""), found.problem
    assert (found.problem is None) == (said is None)


def test_a_custom_materialization_of_an_installed_package_is_read_without_importing_it(
    make_project, tmp_path, monkeypatch, caplog
):
    site = tmp_path / "site"
    never = "raise RuntimeError('imported')\n"  # importing the package would fail the load
    for rel, text in {
        "tinymat/__init__.py": never,
        "tinymat/kinds/__init__.py": never,
        "tinymat/kinds/full.py": never + REPLACE_ONLY.replace("my_full", "pkg_full"),
        "tinymat/kinds/append.py": never
        + REPLACE_ONLY.replace("my_full", "pkg_append").replace(
            "self._replace_query_for_model(model, table_name, query_or_df, render_kwargs)",
            "self.adapter.insert_append(table_name, query_or_df)",
        ),
        "tinymat-0.1.dist-info/METADATA": "Metadata-Version: 2.1\nName: tinymat\nVersion: 0.1\n",
        "tinymat-0.1.dist-info/entry_points.txt": "[sqlmesh.materializations]\n"
        "full = tinymat.kinds.full:MyFull\nappend = tinymat.kinds.append:MyFull\n",
    }.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(text)
    monkeypatch.syspath_prepend(str(site))
    root = make_project({"models/m.sql": CUSTOM_MODEL.replace("my_full", "PKG_FULL") + "SELECT 1 AS x"})
    with caplog.at_level(logging.WARNING):
        assert load_project(root).model("s.m").kind.name == "FULL"
    assert f"(class MyFull in {site / 'tinymat' / 'kinds' / 'full.py'}:5, installed package tinymat)" in caplog.text
    assert "tinymat" not in sys.modules
    (root / "models" / "m.sql").write_text(CUSTOM_MODEL.replace("my_full", "pkg_append") + "SELECT 1 AS x")
    with pytest.raises(ProjectError) as err:
        load_project(root)
    assert (
        "m.sql:3: kind CUSTOM runs materialization 'pkg_append' (class MyFull in "
        f"{site / 'tinymat' / 'kinds' / 'append.py'}:5, "
        "installed package tinymat), which cannot run here: append.py:12: insert calls self.adapter.insert_append(...)"
        in str(err.value)
    )


def test_helper_python_files_are_not_models_and_bad_model_files_name_their_line(bakery):
    (bakery / "models" / "broken.py").write_text(
        "from sqlmesh import model\n\n\n@model('bakery.broken', kind='FULL')\ndef execute(context, start, "
        "end, execution_time):\n    return None\n"
    )
    with pytest.raises(ProjectError) as err:
        load_project(bakery)
    assert (
        str(err.value)
        == f"{bakery / 'models' / 'broken.py'}:4: Python model bakery.broken declares no columns (fix: add "
        "columns={'name': 'type', ...} to @model)"
    )


def test_an_external_model_without_location_asks_for_one(bakery):
    (bakery / "sources.yaml").unlink()
    (bakery / "external_models.yaml").write_text("- name: raw.sales\n  columns: {sale_id: INTEGER}\n")
    with pytest.raises(ProjectError) as err:
        load_project(bakery)
    assert "reads external model raw.sales, which does not say where its data lives" in str(err.value)
    assert f"to its entry at {bakery / 'external_models.yaml'}:1" in str(err.value)
    (bakery / "sources.yaml").write_text("- {name: raw.sales, location: data/sales.csv, format: csv}\n")
    assert load_project(bakery).sources["raw.sales"].columns == {
        "sale_id": "INT"
    }  # location from sources.yaml, columns from here
    (bakery / "sources.yaml").unlink()
    (bakery / "external_models.yaml").write_text(
        "- name: raw.sales\n  columns: {sale_id: INTEGER}\n  location: data/sales.csv\n"
    )
    assert load_project(bakery).sources["raw.sales"].format == "csv"  # or the location given here


def test_ignored_properties_are_said(bakery, caplog):
    path = bakery / "models" / "item_totals.sql"
    path.write_text(
        path.read_text().replace(
            "name bakery.item_totals", "name bakery.item_totals,\n  partitioned_by item,\n  signals [ready()]"
        )
    )
    with caplog.at_level(logging.WARNING):
        load_project(bakery)
    assert (
        f"{path}:3: partitioned_by is not applied" in caplog.text
        and f"{path}:4: signals are not evaluated" in caplog.text
    )


def test_scd_type_2_validity_columns_take_the_type_of_updated_at(spark, make_project):
    from incremental_assets.spark.executor import Executor

    root = make_project(
        {
            "models/dim.sql": "MODEL (name s.dim, kind SCD_TYPE_2_BY_TIME (unique_key id));\n"
            "SELECT 1 AS id, 'a' AS v, CAST('2024-01-01 10:00:00' AS TIMESTAMP_NTZ) AS updated_at",
        }
    )
    project = load_project(root)
    Executor(spark, project).execute(plan_run(project, project.model("s.dim"), None, execution_time=utc(2024, 1, 2)))
    schema = {f.name: str(f.type) for f in delta.arrow_schema(delta.table_uri(project.settings.warehouse, "s.dim"))}
    assert (
        schema["updated_at"] == schema["valid_from"] == schema["valid_to"] == "timestamp[us]"
    )  # no time zone, like updated_at


RUNNING = """\
MODEL (
  name bakery.running_units,
  kind INCREMENTAL_BY_TIME_RANGE (time_column ds),
  columns (ds DATE, item TEXT, units INTEGER)
);
SELECT s.ds, s.item, (s.quantity + COALESCE(p.units, 0))::INTEGER AS units
FROM bakery.daily_sales AS s
LEFT JOIN bakery.running_units AS p
  ON p.item = s.item AND p.ds = s.ds - INTERVAL 1 DAY
WHERE s.ds BETWEEN @start_ds AND @end_ds
"""

MORE_TESTS = """\
a_test_with_a_missing_input:
  model: bakery.revenue
  inputs:
    bakery.daily_sales: [{ds: '2024-01-01', item: bread, quantity: 3, sales: 1}]
  outputs:
    query: [{item: bread, revenue: 10.5}]

test_self_reference_starts_empty:
  model: bakery.running_units
  inputs:
    bakery.daily_sales: [{ds: '2024-01-02', item: bread, quantity: 4, sales: 1}]
  outputs:
    query: [{ds: '2024-01-02', item: bread, units: 4}]
  vars: {start: '2024-01-02', end: '2024-01-02'}
"""


def test_sqlmesh_unit_tests_run_and_one_failure_does_not_stop_the_others(spark, bakery, capsys):
    from incremental_assets import cli

    (bakery / "models" / "running_units.sql").write_text(RUNNING)
    (bakery / "tests" / "more.yaml").write_text(MORE_TESTS)
    assert cli.main(["test", "--project", str(bakery)]) == 1
    out = capsys.readouterr().out
    assert (
        "FAIL a_test_with_a_missing_input (bakery.revenue, more.yaml)\n    cannot run: test "
        "a_test_with_a_missing_input: no rows given for input bakery.prices" in out
    )
    for name in (
        "test_self_reference_starts_empty",
        "test_one_day_and_its_cte",
        "test_without_vars_the_window_is_1970_01_01",
        "test_revenue_counts_days_with_enough_units",
    ):
        assert f"ok   {name} (" in out
    assert "4 passed, 1 failed" in out


def test_blueprints_make_one_model_per_entry(make_project):
    root = make_project(
        {
            "sources.yaml": "- {name: raw.acme_orders, location: data/a, format: delta}\n"
            "- {name: raw.globex_orders, location: data/g, format: delta}\n",
            "models/orders.sql": "MODEL (\n  name @{customer}.orders,\n  kind FULL,\n  blueprints (\n"
            "    (customer := acme, min_amount := 10),\n    (customer := globex, min_amount := 25)\n  )\n);\n"
            "SELECT id, amount FROM raw.@{customer}_orders WHERE amount >= @min_amount",
        }
    )
    project = load_project(root)
    assert sorted(project.models) == ["acme.orders", "globex.orders"]
    globex = project.model("globex.orders")
    assert globex.depends_on == ("raw.globex_orders",) and "amount >= 25" in globex.query.sql(dialect="spark")
    assert globex.references[0].line == 9 and globex.line_of("kind") == 3  # lines stay those of the file


def test_a_monthly_model_covers_the_month_holding_its_inclusive_end(make_project):
    root = make_project(
        {
            "sources.yaml": "- {name: raw.e, location: data/e, format: delta, time_column: ts}\n",
            "models/m.sql": "MODEL (name s.m, kind INCREMENTAL_BY_TIME_RANGE (time_column ts), start '2025-01-01',\n"
            "  end '2025-03-31', interval_unit month);\nSELECT ts FROM raw.e WHERE ts BETWEEN @start_ts AND @end_ts",
        }
    )
    model = load_project(root).model("s.m")
    assert (model.start, model.end) == (utc(2025, 1, 1), utc(2025, 4, 1))


def test_a_duckdb_construct_without_spark_equivalent_names_file_and_line(bakery):
    path = bakery / "models" / "item_totals.sql"
    path.write_text(
        path.read_text().replace(
            "FROM bakery.daily_sales", "FROM bakery.daily_sales AS s\nASOF JOIN bakery.prices AS p USING (item)"
        )
    )
    with pytest.raises(ProjectError) as err:
        load_project(bakery)
    assert str(err.value).startswith(f"{path}:7: an ASOF join (duckdb) has no Spark equivalent (fix: ")


def test_status_reports_the_inclusive_last_day_as_a_gap(bakery):
    import dagster as dg

    from incremental_assets.orchestration.status import model_status
    from incremental_assets.orchestration.translator import ModelTranslator

    model = load_project(bakery).model("bakery.daily_sales")
    key = ModelTranslator().get_asset_key(model)
    with dg.DagsterInstance.ephemeral() as instance:
        for day in ("2024-01-01", "2024-01-02"):
            instance.report_runless_asset_event(dg.AssetMaterialization(asset_key=key, partition=day))
        status = model_status(instance, model, now=utc(2024, 6, 1))
    assert status.expected == TimeWindow(utc(2024, 1, 1), utc(2024, 1, 4))
    assert status.gaps == (TimeWindow(utc(2024, 1, 3), utc(2024, 1, 4)),)


def test_a_refused_construct_inside_an_embedded_model_names_the_embedded_file(make_project):
    from incremental_assets.errors import UnsafeIncrementalError

    root = make_project(
        {
            "sources.yaml": "- {name: raw.e, location: data/e, format: delta, time_column: ts}\n",
            "models/distinct_keys.sql": "MODEL (name s.distinct_keys, kind EMBEDDED);\n\nSELECT DISTINCT k FROM raw.e",
            "models/m.sql": "MODEL (name s.m, kind INCREMENTAL_BY_TIME_RANGE (time_column ts), start '2024-01-01');\n"
            "SELECT e.ts, e.k FROM raw.e AS e JOIN s.distinct_keys AS d ON d.k = e.k WHERE e.ts BETWEEN "
            "@start_ts AND @end_ts",
        }
    )
    project = load_project(root)
    with pytest.raises(UnsafeIncrementalError) as err:
        plan_run(project, project.model("s.m"), TimeWindow(utc(2024, 1, 1), utc(2024, 1, 2)))
    assert f"{root / 'models' / 'distinct_keys.sql'}:3: [distinct]" in str(err.value)
