"""Differential: the SQLMesh-style project of tests/sqlmesh_project, run by real SQLMesh on DuckDB and by us
on Spark and Delta, gives the same rows in every table; SQLMesh passes the project's unit tests too.

SQLMesh (0.236.4, with DuckDB) is installed once into ``tests/.sqlmesh-venv`` (git-ignored), never into our
environment; the test is skipped when it cannot be installed (no package index).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from datetime import date, datetime, timezone
from pathlib import Path

import pytest

from incremental_assets import delta
from incremental_assets.load.project import load_project
from incremental_assets.model.intervals import TimeWindow, last_complete_end
from incremental_assets.plan.run_plan import plan_run, plan_window

from helpers import table_rows
from sqlmesh_venv import VENV, sqlmesh_python, text_rows

pytestmark = [pytest.mark.slow, pytest.mark.sqlmesh]

HERE = Path(__file__).parent
PROJECT = HERE / "sqlmesh_project"

# Run in SQLMesh's venv, in the project folder: the external table, then every model's rows as JSON.
LOAD_SOURCE = """
import duckdb
c = duckdb.connect("bakery.duckdb")
c.execute("CREATE SCHEMA raw")
c.execute("CREATE TABLE raw.sales AS SELECT * FROM read_csv('data/sales.csv', header = true, columns = "
          "{'sale_id': 'INTEGER', 'item': 'TEXT', 'quantity': 'INTEGER', 'sold_at': 'TIMESTAMP'})")
"""
DUMP = """
import duckdb, json, sys
c = duckdb.connect("bakery.duckdb", read_only=True)
rows = {t: c.execute(f"SELECT * FROM bakery.bakery.{t.split('.')[1]}").fetchall() for t in sys.argv[1:]}
print(json.dumps(rows, default=str))
"""


def _sqlmesh_python() -> Path:
    return sqlmesh_python()


def _sqlmesh(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(VENV / "bin" / "sqlmesh"), *args], cwd=root, capture_output=True, text=True, timeout=600)


def test_sqlmesh_and_we_give_the_same_rows(spark, tmp_path):
    from incremental_assets.spark.executor import Executor

    python = _sqlmesh_python()
    theirs_dir, ours_dir = tmp_path / "theirs", tmp_path / "ours"
    shutil.copytree(PROJECT, theirs_dir)
    shutil.copytree(PROJECT, ours_dir)

    subprocess.run([str(python), "-c", LOAD_SOURCE], cwd=theirs_dir, check=True)
    tested = _sqlmesh(theirs_dir, "test")
    assert tested.returncode == 0, tested.stdout + tested.stderr  # SQLMesh passes the project's unit tests
    planned = _sqlmesh(theirs_dir, "plan", "--auto-apply", "--no-prompts")
    assert planned.returncode == 0, planned.stdout + planned.stderr

    project = load_project(ours_dir)
    ex = Executor(spark, project)
    for model in project.ordered():
        if model.is_incremental:
            end = model.end or last_complete_end(
                datetime.now(timezone.utc), model.unit
            )  # as SQLMesh's plan: up to yesterday
            for plan in plan_window(project, model, TimeWindow(model.start, end)):
                ex.execute(plan)
        else:
            ex.execute(plan_run(project, model, None))
    names = [m.name for m in project.ordered()]
    dumped = subprocess.run(
        [str(python), "-c", DUMP, *names], cwd=theirs_dir, capture_output=True, text=True, check=True
    )
    theirs = json.loads(dumped.stdout)

    for name in names:
        model = project.model(name)
        if model.has_table:
            ours = table_rows(delta.table_uri(project.settings.warehouse, name))
        else:  # a view: its rows as a query over the committed tables
            ours = _view_rows(spark, ex, project, model)
        assert text_rows(ours) == text_rows(_parse(theirs[name], ours)), name
    assert len(theirs["bakery.daily_sales"]) == 6  # the inclusive end day is in, the day after is not


def _view_rows(spark, ex, project, model) -> list[tuple]:
    plan = plan_run(project, model, None)
    ex.register(plan)
    return [tuple(r) for r in spark.sql(plan.sql).collect()]


def _parse(rows: list[list], like: list[tuple]) -> list[tuple]:
    """SQLMesh's cells (JSON: dates and timestamps as text) in the Python types of our rows."""
    out = []
    for row in rows:
        cells = []
        for i, value in enumerate(row):
            sample = like[0][i] if like else None
            if isinstance(sample, datetime):
                value = datetime.fromisoformat(value)
            elif isinstance(sample, date):
                value = date.fromisoformat(value[:10])
            cells.append(value)
        out.append(tuple(cells))
    return out


# Run in SQLMesh's venv: with the real package installed, the loader's shim steps aside and the `@model`
# declarations are read from SQLMesh's own registry.
READ_REAL = """
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("shim", sys.argv[1])
shim = sys.modules["shim"] = importlib.util.module_from_spec(spec); spec.loader.exec_module(shim)
sys.path.insert(0, sys.argv[2])
out = {"installed": shim.real_sqlmesh_installed(), "models": []}
for path in sys.argv[3:]:
    s = importlib.util.spec_from_file_location("m_" + path.rsplit("/", 1)[-1][:-3], path)
    m = importlib.util.module_from_spec(s)
    with shim.sqlmesh_names():
        s.loader.exec_module(m)
    specs = shim.real_model_specs(m.__name__)
    out["models"] += [[x.name, shim.plain(x.kwargs.get("kind")), shim.plain(x.kwargs.get("columns"))] for x in specs]
    out["real_classes"] = type(sys.modules["sqlmesh"]).__name__ == "module"
print(json.dumps(out))
"""


def test_an_installed_sqlmesh_serves_its_own_names():
    python = _sqlmesh_python()
    shim = Path(__file__).parents[1] / "incremental_assets" / "load" / "sqlmesh_shim.py"
    files = [str(PROJECT / "models" / "item_sizes.py"), str(PROJECT / "models" / "daily_units.py")]
    done = subprocess.run(
        [str(python), "-c", READ_REAL, str(shim), str(PROJECT), *files], capture_output=True, text=True, check=True
    )
    out = json.loads(done.stdout)
    assert out["installed"] and out["real_classes"]
    assert out["models"] == [
        ["bakery.item_sizes", "FULL", {"item": "text", "quantity": "int", "size": "text"}],
        [
            "bakery.daily_units",
            {"name": "INCREMENTAL_BY_TIME_RANGE", "time_column": "ds"},
            {"ds": "date", "units": "int"},
        ],
    ]


def test_the_override_a_refusal_names_loads_in_sqlmesh_and_here(tmp_path):
    """A refusal's fix, written into the MODEL header as it says, admits the model here and SQLMesh loads the file."""
    import re

    from incremental_assets.plan.analyses import analysis_of

    _sqlmesh_python()  # the test is skipped when SQLMesh's venv cannot be made
    header = "name s.run_users,\n  kind INCREMENTAL_BY_TIME_RANGE (time_column viewed_at),\n  start '2024-01-01'"
    body = (
        "SELECT p.viewed_at, p.user_id, r.users FROM raw.page_views AS p\n"
        "CROSS JOIN (SELECT COUNT(DISTINCT user_id) AS users FROM raw.page_views\n"
        "            WHERE viewed_at BETWEEN @start_dt AND @end_dt) AS r\n"
        "WHERE p.viewed_at BETWEEN @start_dt AND @end_dt\n"
    )
    (tmp_path / "models").mkdir()
    (tmp_path / "sources.yaml").write_text(
        "- {name: raw.page_views, location: data/pv, format: delta, time_column: viewed_at}\n"
    )
    (tmp_path / "config.yaml").write_text(
        "gateways: {local: {connection: {type: duckdb, database: db.duckdb}}}\ndefault_gateway: local\n"
        "model_defaults: {dialect: spark}\n"
    )
    model = tmp_path / "models" / "run_users.sql"
    model.write_text(f"MODEL (\n  {header}\n);\n{body}")
    refused = analysis_of(load_project(tmp_path), "s.run_users")
    fixes = [re.search(r"`physical_properties \((\w+ = true)\)`", r.message) for r in refused.reasons]
    assert sorted(r.rule for r in refused.reasons) == ["aggregate", "distinct"] and all(fixes)
    model.write_text(
        f"MODEL (\n  {header},\n  physical_properties ({', '.join(f.group(1) for f in fixes)})\n);\n{body}"
    )
    admitted = analysis_of(load_project(tmp_path), "s.run_users")
    assert (admitted.safety_class, admitted.batch_limit) == ("PerPartitionOnly", 1)
    rendered = _sqlmesh(tmp_path, "render", "s.run_users")
    assert rendered.returncode == 0 and "COUNT(DISTINCT" in rendered.stdout, rendered.stdout + rendered.stderr
