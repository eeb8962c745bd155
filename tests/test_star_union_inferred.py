"""@STAR and @UNION over models that declare no columns: the columns are those the model's query makes, typed
as its dialect types them, as SQLMesh works them out (its renderings are quoted in the tests); the slow test
runs such a project with SQLMesh on DuckDB and with us on Spark and compares the rows."""

from __future__ import annotations

import json
import subprocess

import pytest

from incremental_assets.cli.commands import main
from incremental_assets.errors import ModelFileError, ProjectError
from incremental_assets.load.project import load_project
from incremental_assets.model.intervals import TimeWindow
from incremental_assets.plan.run_plan import plan_run, plan_window

from helpers import table_rows
from sqlmesh_venv import sqlmesh_python, text_rows

DUCKDB_CONFIG = "model_defaults:\n  dialect: duckdb\n"


def _sql(root, name: str) -> str:
    return load_project(root).model(name).query.sql("spark")


def _duckdb(make_project, models: dict[str, str], files: dict[str, str] | None = None):
    """A DuckDB project of FULL models ``{name: query}``, their files read in this order, and ``files``."""
    written = {f"models/m{i:02d}.sql": f"MODEL (name {n}, kind FULL);\n{q}" for i, (n, q) in enumerate(models.items())}
    return make_project({"config.yaml": DUCKDB_CONFIG, **written, **(files or {})})


def test_star_reads_the_columns_an_upstream_models_query_makes(make_project):
    root = _duckdb(make_project, {"s.a": "SELECT 1 AS x, 'k' AS y", "s.b": "SELECT @STAR(s.a) FROM s.a"})
    # SQLMesh: SELECT CAST("a"."x" AS INT) AS "x", CAST("a"."y" AS TEXT) AS "y" FROM "s"."a" AS "a"
    assert _sql(root, "s.b") == "SELECT CAST(`x` AS INT) AS `x`, CAST(`y` AS STRING) AS `y` FROM s.a"
    assert main(["validate", "--project", str(root)]) == 0


def test_star_arguments_and_a_chain_of_models_load_in_dependency_order_whatever_the_file_order(make_project):
    """c reads @STAR(s.b) and b @STAR(s.a): b's columns are known once a's are, c's once b's are."""
    models = {
        "s.c": "SELECT @STAR(s.b, alias := bb, exclude := [y], prefix := 'p_', suffix := '_s', "
        "quote_identifiers := FALSE) FROM s.b AS bb",
        "s.b": "SELECT @STAR(s.a) FROM s.a",
        "s.a": "SELECT 1 AS x, 'k' AS y, CAST('2024-01-01' AS DATE) AS d, 2.5::DOUBLE AS f, v / 2 AS half FROM s.src",
    }
    sources = "- name: s.src\n  location: data/src\n  format: parquet\n  columns: {v: INT}\n"
    root = _duckdb(make_project, models, {"sources.yaml": sources})
    # SQLMesh: CAST("bb"."x" AS INT) AS "p_x_s", CAST("bb"."d" AS DATE) AS "p_d_s", CAST("bb"."f" AS DOUBLE) ...
    assert _sql(root, "s.c") == (
        "SELECT CAST(bb.x AS INT) AS p_x_s, CAST(bb.d AS DATE) AS p_d_s, CAST(bb.f AS DOUBLE) AS p_f_s, "
        "CAST(bb.half AS DOUBLE) AS p_half_s FROM s.b AS bb"
    )


def test_union_keeps_the_columns_every_relation_has_with_the_same_inferred_type(make_project):
    models = {
        "s.a": "SELECT 1 AS x, 'k' AS y, 1.5 AS f, 7 AS only_a",
        "s.a3": "SELECT 1::BIGINT AS x, 'k' AS y, 2.5 AS f",
        "s.u": "@UNION('distinct', s.a, s.a3)",
    }
    # x is an INT in s.a, a BIGINT in s.a3: SQLMesh leaves it out too
    assert _sql(_duckdb(make_project, models), "s.u") == (
        "SELECT CAST(y AS STRING) AS y, CAST(f AS DOUBLE) AS f FROM s.a "
        "UNION SELECT CAST(y AS STRING) AS y, CAST(f AS DOUBLE) AS f FROM s.a3"
    )


def test_a_column_of_unknown_type_leaves_star_uncast_and_union_selects_it_as_it_is(make_project):
    models = {
        "s.a": "SELECT 1 AS x, no_such_function(1) AS u",
        "s.b": "SELECT @STAR(s.a) FROM s.a",
        "s.b2": "SELECT @STAR(s.a, exclude := [u]) FROM s.a",
        "s.u": "@UNION('all', s.a, s.a)",
    }
    project = load_project(_duckdb(make_project, models))
    # SQLMesh: SELECT "a"."x" AS "x", "a"."u" AS "u" FROM "s"."a" AS "a" (no casts when one type is unknown)
    assert project.model("s.b").query.sql("spark") == "SELECT `x` AS `x`, `u` AS `u` FROM s.a"
    assert project.model("s.b2").query.sql("spark") == "SELECT CAST(`x` AS INT) AS `x` FROM s.a"
    # SQLMesh writes CAST(u AS UNKNOWN), which no engine runs
    assert project.model("s.u").query.sql("spark") == (
        "SELECT CAST(x AS INT) AS x, u AS u FROM s.a UNION ALL SELECT CAST(x AS INT) AS x, u AS u FROM s.a"
    )


def test_star_over_every_kind_of_upstream_model(make_project):
    """An incremental model (its date macros typed as SQLMesh renders them), a VIEW, an EMBEDDED model, a SEED
    and an external model."""
    root = make_project(
        {
            "config.yaml": DUCKDB_CONFIG,
            "external_models.yaml": "- name: raw.events\n  columns: {id: INTEGER, ts: TIMESTAMP}\n"
            "  location: data/events.parquet\n",
            "seeds/prices.csv": "item,price\na,1.5\n",
            "models/prices.sql": "MODEL (name s.prices, kind SEED (path '../seeds/prices.csv'));",
            "models/daily.sql": "MODEL (name s.daily, kind INCREMENTAL_BY_TIME_RANGE (time_column ds), "
            "start '2024-01-01');\nSELECT CAST(ts AS DATE) AS ds, COUNT(*) AS n, @start_ds AS sds, @start_dt AS sdt "
            "FROM raw.events WHERE ts BETWEEN @start_dt AND @end_dt GROUP BY 1",
            "models/view.sql": "MODEL (name s.v, kind VIEW);\nSELECT id, CURRENT_DATE AS today FROM raw.events",
            "models/emb.sql": "MODEL (name s.e, kind EMBEDDED);\nSELECT id * 2 AS id2 FROM s.v",
            "models/z.sql": "MODEL (name s.z, kind FULL);\nSELECT @STAR(s.daily, alias := d), @STAR(s.v, alias := v), "
            "@STAR(s.e, alias := e), @STAR(s.prices, alias := p), @STAR(raw.events, alias := r, prefix := 'r_') "
            "FROM s.daily AS d, s.v AS v, s.e AS e, s.prices AS p, raw.events AS r",
        }
    )
    selects = _sql(root, "s.z").split(" FROM ")[0]
    assert selects == (
        "SELECT CAST(`d`.`ds` AS DATE) AS `ds`, CAST(`d`.`n` AS BIGINT) AS `n`, CAST(`d`.`sds` AS STRING) AS `sds`, "
        "CAST(`d`.`sdt` AS TIMESTAMP) AS `sdt`, CAST(`v`.`id` AS INT) AS `id`, CAST(`v`.`today` AS DATE) AS `today`, "
        "CAST(`e`.`id2` AS INT) AS `id2`, CAST(`p`.`item` AS STRING) AS `item`, CAST(`p`.`price` AS DOUBLE) AS "
        "`price`, CAST(`r`.`id` AS INT) AS `r_id`, CAST(`r`.`ts` AS TIMESTAMP_NTZ) AS `r_ts`"
    )


def test_star_over_a_model_whose_columns_cannot_be_worked_out_names_file_line_and_fix(make_project, capsys):
    sources = "- name: raw.events\n  location: data/events\n  format: parquet\n"
    models = {"s.a": "SELECT * FROM raw.events", "s.b": "SELECT @STAR(s.a) FROM s.a"}
    root = _duckdb(make_project, models, {"sources.yaml": sources})
    with pytest.raises(ProjectError) as err:
        load_project(root)
    [error] = [e for e in err.value.errors if isinstance(e, ModelFileError)]
    assert (error.path, error.line) == (str(root / "models" / "m01.sql"), 2)
    assert "the columns of s.a are not known" in error.message and "MODEL header" in (error.hint or "")
    assert main(["validate", "--project", str(root)]) == 2
    assert "m01.sql:2: the columns of s.a are not known (fix: declare them" in capsys.readouterr().err


def test_the_worked_out_columns_are_kept_between_loads_and_follow_an_edit(make_project, monkeypatch):
    from incremental_assets.load import column_types

    monkeypatch.delenv("INCREMENTAL_ASSETS_CACHE_DIR", raising=False)
    root = _duckdb(make_project, {"s.a": "SELECT 1 AS x", "s.b": "SELECT @STAR(s.a) FROM s.a"})
    load_project(root)
    worked_out = []
    counted = column_types.query_types
    monkeypatch.setattr(column_types, "query_types", lambda *a, **k: worked_out.append(1) or counted(*a, **k))
    assert _sql(root, "s.b") == "SELECT CAST(`x` AS INT) AS `x` FROM s.a" and worked_out == []
    (root / "models" / "m00.sql").write_text("MODEL (name s.a, kind FULL);\nSELECT 'k' AS x")
    assert _sql(root, "s.b") == "SELECT CAST(`x` AS STRING) AS `x` FROM s.a" and worked_out == [1]


# -- against SQLMesh itself -------------------------------------------------------------------------

PROJECT = {
    "config.yaml": "gateways:\n  local:\n    connection:\n      type: duckdb\n      database: db.duckdb\n"
    "default_gateway: local\nmodel_defaults:\n  dialect: duckdb\n",
    "seeds/prices.csv": "item,price\na,1.5\nb,2.25\n",
    "models/prices.sql": "MODEL (name s.prices, kind SEED (path '../seeds/prices.csv'));",
    "models/z_orders.sql": "MODEL (name s.orders, kind FULL);\n"
    "SELECT CAST(id AS INT) AS id, CAST(item AS TEXT) AS item, CAST(qty AS INT) AS qty, CAST(ds AS DATE) AS ds, "
    "qty / 4 AS quarter FROM (VALUES (1, 'a', 2, '2024-01-01'), (2, 'b', 3, '2024-01-02'), (3, 'a', 1, "
    "'2024-01-02')) AS t(id, item, qty, ds)",
    "models/y_daily.sql": "MODEL (name s.daily, kind INCREMENTAL_BY_TIME_RANGE (time_column ds), start '2024-01-01', "
    "end '2024-01-02');\nSELECT ds, item, SUM(qty) AS qty, COUNT(*) AS n, @start_ds AS sds FROM s.orders "
    "WHERE ds BETWEEN @start_ds AND @end_ds GROUP BY ds, item",
    "models/x_recent.sql": "MODEL (name s.recent, kind VIEW);\n"
    "SELECT CAST(id AS BIGINT) AS id, item, qty * 2 AS qty FROM s.orders",
    "models/w_big.sql": "MODEL (name s.big, kind EMBEDDED);\nSELECT id, item, qty FROM s.orders WHERE qty > 1",
    # read before the models they read: each waits for the columns of its upstream
    "models/a_chain.sql": "MODEL (name s.chain, kind FULL);\nSELECT @STAR(s.star_orders) FROM s.star_orders",
    "models/b_star.sql": "MODEL (name s.star_orders, kind FULL);\n"
    "SELECT @STAR(s.orders, alias := o, exclude := [quarter], prefix := 'o_') FROM s.orders AS o",
    "models/c_mix.sql": "MODEL (name s.mix, kind FULL);\nSELECT @STAR(s.daily, alias := d), "
    "@STAR(s.prices, alias := p, prefix := 'p_') FROM s.daily AS d JOIN s.prices AS p ON d.item = p.item",
    "models/d_union.sql": "MODEL (name s.unioned, kind FULL);\n@UNION('all', s.recent, s.big)",
    "models/e_big.sql": "MODEL (name s.from_big, kind FULL);\nSELECT @STAR(s.big, alias := b) FROM s.big AS b",
}
COMPARED = ["s.chain", "s.star_orders", "s.mix", "s.unioned", "s.from_big"]
SQLMESH_ROWS = """
import json, sys
from sqlmesh import Context
ctx = Context(paths=".")
ctx.plan(auto_apply=True, no_prompts=True)
out = {}
for name in sys.argv[1:]:
    cursor = ctx.engine_adapter.cursor
    cursor.execute(f"SELECT * FROM {name}")
    out[name] = {"columns": [d[0] for d in cursor.description], "rows": cursor.fetchall()}
print(json.dumps(out, default=str))
"""


@pytest.mark.slow
@pytest.mark.sqlmesh
def test_star_and_union_over_undeclared_models_give_sqlmeshs_columns_and_rows(spark, make_project):
    from deltalake import DeltaTable

    from incremental_assets.spark.executor import Executor

    python = sqlmesh_python()
    theirs_dir = make_project(PROJECT, name="theirs")
    ours_dir = make_project(PROJECT, name="ours")
    done = subprocess.run(
        [str(python), "-c", SQLMESH_ROWS, *COMPARED], cwd=theirs_dir, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    theirs = json.loads(done.stdout.strip().splitlines()[-1])

    project = load_project(ours_dir)
    executor = Executor(spark, project)
    for model in project.ordered():
        if model.is_incremental:
            for plan in plan_window(project, model, TimeWindow.parse("2024-01-01", "2024-01-03")):
                executor.execute(plan)
        else:
            executor.execute(plan_run(project, model, None))
    for name in COMPARED:
        table = executor.execute(plan_run(project, project.model(name), None)).table
        columns = [f.name for f in DeltaTable(table).schema().fields if f.name != "ia_interval"]
        assert columns == theirs[name]["columns"], name
        assert theirs[name]["rows"] and text_rows(table_rows(table)) == text_rows(theirs[name]["rows"]), name
