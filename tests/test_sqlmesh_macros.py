"""SQLMesh's macro language on our loader: operators, @DEF, lambdas, interpolation, Python macros from
macros/ (SQLMesh's `@macro()` API without SQLMesh installed), pre/post statements, and the errors.

The project under tests/sqlmesh_projects/macros_demo uses every operator; the slow test runs it with
SQLMesh 0.236 on DuckDB (in its own virtual environment) and with us on Spark, and compares every row.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path

import pytest
from sqlglot import exp

from incremental_assets.cli.commands import main
from incremental_assets.errors import ModelFileError
from incremental_assets.load.project import load_project
from incremental_assets.load.query import parse_model_body
from incremental_assets.model.intervals import TimeWindow
from incremental_assets.plan.run_plan import plan_run

from sqlmesh_venv import installing

DEMO = Path(__file__).parent / "sqlmesh_projects" / "macros_demo"
REPO = Path(__file__).parent.parent


def rendered(body: str, dialect: str = "spark") -> str:
    return parse_model_body(body, dialect=dialect).query.sql("spark")


# -- SQL operators, with SQLMesh's documented renderings ---------------------------------------------


@pytest.mark.parametrize(
    "body, expected",
    [
        (
            "SELECT @EACH([4, 5], x -> CASE WHEN n = x THEN 1 ELSE 0 END AS col_@x) FROM t",
            "SELECT CASE WHEN n = 4 THEN 1 ELSE 0 END AS col_4, CASE WHEN n = 5 THEN 1 ELSE 0 END AS col_5 FROM t",
        ),
        ("SELECT @EACH(['a', 'b'], x -> x AS @{x}_lit) FROM t", "SELECT 'a' AS a_lit, 'b' AS b_lit FROM t"),
        (  # `AS @x` names the column by the value, as `AS @{x}` does
            "SELECT @EACH(['view', 'buy'], s -> COUNT(*) FILTER (WHERE e = s) AS @s) FROM t",
            "SELECT COUNT(*) FILTER(WHERE e = 'view') AS view, COUNT(*) FILTER(WHERE e = 'buy') AS buy FROM t",
        ),
        (
            "@DEF(name, 'total');\nSELECT SUM(a) AS @name, 1 AS \"kept\" FROM t",
            "SELECT SUM(a) AS total, 1 AS `kept` FROM t",
        ),
        (  # an alias naming the lambda's argument is its value too
            "SELECT @EACH([a, b], c -> SUM(c) AS c), @EACH(['x'], s -> 3 AS s), @EACH([a], c -> c AS n) FROM t",
            "SELECT SUM(a) AS a, SUM(b) AS b, 3 AS x, a AS n FROM t",
        ),
        ("@DEF(size, 1);\nSELECT a FROM t WHERE size > @size", "SELECT a FROM t WHERE size > 1"),
        (
            "@DEF(pythag, (x, y) -> sqrt(pow(x, 2) + pow(y, 2)));\nSELECT @pythag(a, b) AS c FROM t",
            "SELECT SQRT(POWER(a, 2) + POWER(b, 2)) AS c FROM t",
        ),
        (
            "@DEF(area, r -> pi() * r * r);\n@DEF(vol, (r, h) -> @area(r) * h);\nSELECT @vol(d / 2, h) AS v FROM t",
            "SELECT PI() * (d / 2) * (d / 2) * h AS v FROM t",
        ),
        ("SELECT col1, @IF(1 > 0, sensitive_col) FROM t", "SELECT col1, sensitive_col FROM t"),
        ("SELECT col1, @IF(1 > 2, sensitive_col) FROM t", "SELECT col1 FROM t"),
        ("SELECT @IF('a' IN ('a', 'b'), x, y) AS z FROM t", "SELECT x AS z FROM t"),
        ("@DEF(x, 1);\nSELECT @EVAL(5 + @x) AS six FROM t", "SELECT 6 AS six FROM t"),
        ("SELECT @EACH(@FILTER([1, 2, 3], x -> x > 1), v -> v) FROM t", "SELECT 2, 3 FROM t"),
        (
            "SELECT a FROM t WHERE @REDUCE(@EACH([c1, c2, c3], x -> x = 1), (x, y) -> x AND y)",
            "SELECT a FROM t WHERE c1 = 1 AND c2 = 1 AND c3 = 1",
        ),
        ("SELECT @REDUCE([a + 1, b], (x, y) -> x * y) AS p FROM t", "SELECT (a + 1) * b AS p FROM t"),
        (
            "SELECT @GENERATE_SURROGATE_KEY(a, b) AS k FROM t",
            "SELECT MD5(CONCAT(COALESCE(CAST(a AS STRING), '_sqlmesh_surrogate_key_null_'), '|', "
            "COALESCE(CAST(b AS STRING), '_sqlmesh_surrogate_key_null_'))) AS k FROM t",
        ),
        (
            "SELECT @SAFE_ADD(a, b) AS s FROM t",
            "SELECT CASE WHEN a IS NULL AND b IS NULL THEN NULL ELSE COALESCE(a, 0) + COALESCE(b, 0) END AS s FROM t",
        ),
        (
            "SELECT @SAFE_SUB(a, b) AS s FROM t",
            "SELECT CASE WHEN a IS NULL AND b IS NULL THEN NULL ELSE COALESCE(a, 0) - COALESCE(b, 0) END AS s FROM t",
        ),
        ("SELECT @SAFE_DIV(a, b) AS s FROM t", "SELECT a / NULLIF(b, 0) AS s FROM t"),
        (
            "SELECT @GENERATE_SURROGATE_KEY(a, hash_function := 'SHA256') AS k FROM t",
            "SELECT SHA2(CONCAT(COALESCE(CAST(a AS STRING), '_sqlmesh_surrogate_key_null_')), 256) AS k FROM t",
        ),
        (
            "SELECT @GENERATE_SURROGATE_KEY(a, hash_function := 'sha512') AS k FROM t",
            "SELECT SHA2(CONCAT(COALESCE(CAST(a AS STRING), '_sqlmesh_surrogate_key_null_')), 512) AS k FROM t",
        ),
        (
            "SELECT @GENERATE_SURROGATE_KEY(a, hash_function := 'SHA1') AS k FROM t",
            "SELECT SHA(CONCAT(COALESCE(CAST(a AS STRING), '_sqlmesh_surrogate_key_null_'))) AS k FROM t",
        ),
        (
            "@DATE_SPINE('week', '2024-01-01', '2024-01-29')",
            "SELECT date_week FROM EXPLODE(SEQUENCE(CAST('2024-01-01' AS DATE), CAST('2024-01-29' AS DATE), "
            "INTERVAL '1' WEEK)) AS _exploded(date_week)",
        ),
        (
            "SELECT date_day FROM (@DATE_SPINE('day', @start_ds, @end_ds)) AS s",
            "SELECT date_day FROM (SELECT date_day FROM EXPLODE(SEQUENCE(CAST(${start_ds} AS DATE), "
            "CAST(${end_ds} AS DATE), INTERVAL '1' DAY)) AS _exploded(date_day)) AS s",
        ),
        (
            "@DEDUPLICATE(raw.e, [id, CAST(ts AS DATE)], ['ts DESC', 'status ASC NULLS LAST'])",
            "SELECT _row.* FROM (SELECT STRUCT(*) AS _row, ROW_NUMBER() OVER (PARTITION BY id, CAST(ts AS DATE) "
            "ORDER BY ts DESC, status ASC NULLS LAST) AS _row_number FROM raw.e) AS _deduplicated "
            "WHERE _row_number = 1",
        ),
        (
            "SELECT @HAVERSINE_DISTANCE(y1, x1, y2, x2, 'mi') AS d FROM t",
            "SELECT 7922 * ASIN(SQRT((POWER(SIN(RADIANS((y2 - y1) / 2)), 2)) + (COS(RADIANS(y1)) * COS(RADIANS(y2)) * "
            "POWER(SIN(RADIANS((x2 - x1) / 2)), 2)))) * 1.0 AS d FROM t",
        ),
        (
            "SELECT day, @PIVOT(status, ['cancelled', 'completed']) FROM t GROUP BY 1",
            "SELECT day, SUM(CASE WHEN status = 'cancelled' THEN 1 ELSE 0 END) AS `cancelled`, "
            "SUM(CASE WHEN status = 'completed' THEN 1 ELSE 0 END) AS `completed` FROM t GROUP BY 1",
        ),
        (
            "SELECT a FROM t WHERE @AND(TRUE, NULL) AND @OR(a = 1, NULL, b = 2)",
            "SELECT a FROM t WHERE TRUE AND (a = 1 OR b = 2)",
        ),
        ("SELECT @SQL('a + 1') AS b FROM t", "SELECT a + 1 AS b FROM t"),
        ("@DEF(tbl, db.events);\nSELECT * FROM @tbl AS e", "SELECT * FROM db.events AS e"),
        ("SELECT @eAcH([a], x -> x) FROM t", "SELECT a FROM t"),
        (
            "@DEF(l, 1);\n@DEF(r, 2);\nSELECT a FROM t @WHERE(@l < @r) a > @l OR b = 2",
            "SELECT a FROM t WHERE a > 1 OR b = 2",
        ),
        ("SELECT a FROM t @WHERE(FALSE) a > 1", "SELECT a FROM t"),
        (
            "SELECT c, COUNT(*) AS n FROM t @GROUP_BY(TRUE) c @HAVING(1 > 2) n > 1 @ORDER_BY(TRUE) c DESC",
            "SELECT c, COUNT(*) AS n FROM t GROUP BY c ORDER BY c DESC",
        ),
        (
            "@WITH(TRUE) all_cities AS (SELECT * FROM city) SELECT * FROM all_cities",
            "WITH all_cities AS (SELECT * FROM city) SELECT * FROM all_cities",
        ),
        (
            "@DEF(flag, 0);\n@WITH(@flag > 0) a AS (SELECT 1 AS x), b AS (SELECT 2 AS x) SELECT * FROM city",
            "SELECT * FROM city",
        ),
        (
            "SELECT * FROM city LEFT OUTER @JOIN(TRUE) country ON city.country = country.name OR country.name IS NULL",
            "SELECT * FROM city LEFT OUTER JOIN country ON city.country = country.name OR country.name IS NULL",
        ),
        (
            "SELECT * FROM city LEFT OUTER @JOIN(1 > 2) country ON city.country = country.name WHERE pop > 1",
            "SELECT * FROM city WHERE pop > 1",
        ),
        ("SELECT * FROM city @LIMIT(TRUE) 10", "SELECT * FROM city LIMIT 10"),
        ("SELECT * FROM city @ORDER_BY(TRUE) pop @LIMIT(FALSE) 10", "SELECT * FROM city ORDER BY pop"),
    ],
)
def test_operators_render_as_sqlmesh_documents(body, expected):
    assert rendered(body) == expected


@pytest.mark.parametrize(
    "body, message",
    [
        ("@DATE_SPINE('hour', '2024-01-01', '2024-01-02')", "@DATE_SPINE has no datepart 'hour'"),
        ("@DATE_SPINE('day', '2024-01-02', '2024-01-01')", "start 2024-01-02 is after its end 2024-01-01"),
        ("@DATE_SPINE('day', '2024/01/01', '2024-01-02')", "must be written YYYY-MM-DD"),
        ("@DEDUPLICATE(t, id, ['ts'])", "partition_by must be a list"),
        ("@DEDUPLICATE(t, [id], [])", "order_by must be a non-empty list"),
    ],
)
def test_relation_macros_refuse_what_sqlmesh_refuses(body, message):
    with pytest.raises(ModelFileError, match=message):
        parse_model_body(body, dialect="duckdb")


def test_resolve_template_names_the_models_schema_and_table(make_project):
    root = make_project(
        {
            "models/m.sql": "MODEL (name s.m, kind FULL);\n"
            "SELECT @RESOLVE_TEMPLATE('s3://b/@{schema_name}/@{table_name}') AS loc, 1 AS x FROM @RESOLVE_TEMPLATE("
            "'@{schema_name}.src', mode := 'table')",
            "models/src.sql": "MODEL (name s.src, kind FULL);\nSELECT 1 AS x",
        }
    )
    sql = load_project(root).model("s.m").query.sql("spark")
    assert sql == "SELECT 's3://b/s/m' AS loc, 1 AS x FROM s.src", sql


def test_relation_macros_and_hashes_give_sqlmeshs_rows_on_spark(spark, make_project):
    import hashlib

    from incremental_assets.spark.executor import Executor

    from helpers import table_rows

    root = make_project(
        {
            "models/src.sql": "MODEL (name s.src, kind FULL);\nSELECT * FROM VALUES (1, 10, DATE'2024-05-01', 'a'), "
            "(2, 10, DATE'2024-05-02', 'b'), (3, 20, DATE'2024-05-01', NULL), (4, 20, DATE'2024-05-01', 'c') "
            "AS v(id, account, day, tag)",
            "models/dedup.sql": "MODEL (name s.dedup, kind FULL, dialect duckdb);\n"
            "@DEDUPLICATE(s.src, [account], ['day DESC', 'tag'])",
            "models/keys.sql": "MODEL (name s.keys, kind FULL, dialect duckdb);\nSELECT id, "
            "@GENERATE_SURROGATE_KEY(id, tag, hash_function := 'SHA256') AS k256, @GENERATE_SURROGATE_KEY(id) AS k5 "
            "FROM s.src",
            "models/spine.sql": "MODEL (name s.spine, kind FULL, dialect duckdb);\n"
            "SELECT 'week' AS part, date_week AS d FROM (@DATE_SPINE('week', '2024-01-01', '2024-01-29')) AS w "
            "UNION ALL SELECT 'month', date_month FROM (@DATE_SPINE('month', '2024-01-15', '2024-04-15')) AS m "
            "UNION ALL SELECT 'quarter', date_quarter FROM (@DATE_SPINE('quarter', '2024-01-01', '2024-12-31')) AS q "
            "UNION ALL SELECT 'year', date_year FROM (@DATE_SPINE('year', '2023-06-01', '2025-06-01')) AS y",
        }
    )
    project = load_project(root)
    executor = Executor(spark, project)
    out = {
        name: table_rows(executor.execute(plan_run(project, project.model(name), None)).table)
        for name in ("s.src", "s.dedup", "s.keys", "s.spine")
    }
    # duckdb orders NULLs last ascending: account 20's first row by day DESC, tag is 4 ('c'), not 3 (NULL)
    assert sorted(out["s.dedup"]) == [(2, 10, date(2024, 5, 2), "b"), (4, 20, date(2024, 5, 1), "c")]
    key = lambda text, h: h(text.encode()).hexdigest()  # noqa: E731
    assert sorted(out["s.keys"])[2] == (3, key("3|_sqlmesh_surrogate_key_null_", hashlib.sha256), key("3", hashlib.md5))
    spine = sorted(out["s.spine"])
    assert [d.isoformat() for p, d in spine if p == "week"] == [
        "2024-01-01",
        "2024-01-08",
        "2024-01-15",
        "2024-01-22",
        "2024-01-29",
    ]
    assert [d.isoformat() for p, d in spine if p == "month"] == ["2024-01-15", "2024-02-15", "2024-03-15", "2024-04-15"]
    assert [d.isoformat() for p, d in spine if p == "quarter"] == [
        "2024-01-01",
        "2024-04-01",
        "2024-07-01",
        "2024-10-01",
    ]
    assert [d.isoformat() for p, d in spine if p == "year"] == ["2023-06-01", "2024-06-01", "2025-06-01"]


def test_date_macros_inside_operators_stay_for_the_run_window():
    body = (
        "@DEF(cols, [a, b]);\nSELECT ds, @EACH(@cols, c -> SUM(c) AS @{c}_sum) FROM s.t WHERE ds BETWEEN "
        "@start_ds AND @end_ds GROUP BY ds"
    )
    query = parse_model_body(body).query
    assert sorted(p.name for p in query.find_all(exp.Parameter)) == ["end_ds", "start_ds"]
    assert [s.alias for s in query.selects] == ["", "a_sum", "b_sum"]


def test_statements_split_around_the_query():
    body = parse_model_body(
        "@DEF(n, 2);\nSET spark.sql.shuffle.partitions = 3;\nCACHE TABLE c AS SELECT 1 AS one;\nSELECT @n "
        "AS n FROM t;\nUNCACHE TABLE c"
    )
    assert body.query.sql("spark") == "SELECT 2 AS n FROM t"
    assert [s.sql("spark") for s in body.pre_statements] == [
        "SET spark.sql.shuffle.partitions = 3",
        "CACHE TABLE c AS SELECT 1 AS one",
    ]
    assert [s.sql("spark") for s in body.post_statements] == ["UNCACHE TABLE c"]


# -- the demo project: Python macros, typed arguments, cross-imports, the shim ------------------------


@pytest.fixture
def demo(tmp_path):
    root = tmp_path / "macros_demo"
    shutil.copytree(DEMO, root, ignore=shutil.ignore_patterns("*.duckdb", "warehouse", "__pycache__", ".cache", "logs"))
    return root


def test_python_macros_from_the_macros_folder_expand_without_sqlmesh(demo):
    assert "sqlmesh" not in sys.modules
    project = load_project(demo)
    facts = project.model("shop.order_facts").query
    sql = facts.sql("spark")
    for piece in (
        "42 AS plus_one",
        "id * 10 AS id_times_ten",
        "UPPER(customer) AS loud_customer",
        "CASE WHEN status = 'open' THEN 1 ELSE 0 END AS is_open",
        "'amount + 1' AS amount_sql",
        "id * 3 AS tripled",
    ):
        assert piece in sql, piece
    assert "sqlmesh" not in sys.modules and "macros" not in sys.modules  # nothing left behind
    assert project.model("shop.order_facts").depends_on == ("shop.orders",)


def test_a_python_macro_passes_date_macros_on_to_the_run_window(demo):
    project = load_project(demo)
    plan = plan_run(project, project.model("shop.daily"), TimeWindow.parse("2024-01-02", "2024-01-04"))
    assert "ds BETWEEN '2024-01-02' AND '2024-01-03'" in plan.query.sql("spark")


def test_an_installed_sqlmesh_is_set_aside_while_macros_load_and_put_back(demo, monkeypatch):
    fake = type(sys)("sqlmesh")
    fake.macro = "not ours"
    monkeypatch.setitem(sys.modules, "sqlmesh", fake)
    project = load_project(demo)
    assert "42 AS plus_one" in project.model("shop.order_facts").query.sql("spark")
    assert sys.modules["sqlmesh"] is fake


def test_macro_hiding_an_unsafe_construct_is_still_refused(make_project):
    root = make_project(
        {
            "macros/unsafe.py": "from sqlmesh import macro\n\n@macro()\ndef ranked(evaluator, col):\n    return "
            "f'ROW_NUMBER() "
            "OVER (ORDER BY {col})'\n",
            "models/m.sql": "MODEL (name s.m, kind INCREMENTAL_BY_TIME_RANGE(time_column ds), start '2024-01-01');\n"
            "SELECT ds, @ranked(ds) AS rn FROM s.src WHERE ds BETWEEN @start_ds AND @end_ds",
            "sources.yaml": "- name: s.src\n  location: data/src\n  format: parquet\n  time_column: ds\n  "
            "interval_unit: "
            "day\n",
        }
    )
    from incremental_assets.plan.analyses import analysis_of

    project = load_project(root)
    analysis = analysis_of(project, "s.m")
    assert analysis.safety_class == "Refused"
    assert any("ROW_NUMBER" in r.message.upper() or r.rule.startswith("window") for r in analysis.reasons), (
        analysis.reasons
    )


def test_a_limit_made_by_a_clause_operator_is_refused_like_a_limit(make_project):
    from incremental_assets.plan.analyses import analysis_of

    root = make_project(
        {
            "models/m.sql": "MODEL (name s.m, kind INCREMENTAL_BY_TIME_RANGE(time_column ds), start '2024-01-01');\n"
            "@DEF(sample, TRUE);\nSELECT ds FROM s.src WHERE ds BETWEEN @start_ds AND @end_ds\n@LIMIT(@sample) 5",
            "sources.yaml": "- name: s.src\n  location: data/src\n  format: parquet\n  time_column: ds\n  "
            "interval_unit: "
            "day\n",
        }
    )
    analysis = analysis_of(load_project(root), "s.m")
    assert analysis.safety_class == "Refused" and [r.rule for r in analysis.reasons] == ["limit"], analysis.reasons


# -- conditions on the run window: decided per run, every branch analysed ------------------------------

WINDOWED = (
    "MODEL (name s.m, kind INCREMENTAL_BY_TIME_RANGE(time_column ds), start '2024-01-01');\n"
    "SELECT ds, @IF(@start_ds >= '2024-01-03', amount * 2, amount) AS amount, @EVAL(@start_epoch / 86400) AS day_no\n"
    "FROM s.src WHERE ds BETWEEN @start_ds AND @end_ds\n@ORDER_BY(@start_ds = '2024-01-02') ds{extra}"
)


def _windowed(make_project, extra=""):
    return make_project(
        {
            "models/m.sql": WINDOWED.format(extra=extra),
            "sources.yaml": "- name: s.src\n  location: data/src\n  format: parquet\n  time_column: ds\n  "
            "interval_unit: "
            "day\n",
        }
    )


def test_macro_conditions_on_the_run_window_are_decided_per_run(make_project):
    project = load_project(_windowed(make_project))
    model = project.model("s.m")
    sql = {
        d: plan_run(project, model, TimeWindow.parse(d, f"2024-01-0{int(d[-1]) + 1}")).query.sql("spark")
        for d in ("2024-01-01", "2024-01-02", "2024-01-03")
    }
    assert (
        "amount AS amount, CAST(19723.0 AS DOUBLE) AS day_no" in sql["2024-01-01"]
        and "ORDER BY" not in sql["2024-01-01"]
    ), sql
    assert "ORDER BY ds" in sql["2024-01-02"] and "CAST(19724.0 AS DOUBLE) AS day_no" in sql["2024-01-02"], sql
    assert "amount * 2 AS amount" in sql["2024-01-03"] and "ORDER BY" not in sql["2024-01-03"], sql


def test_every_branch_of_a_window_condition_is_analysed_and_runs_cover_one_interval(make_project):
    from incremental_assets.plan.analyses import analysis_of, run_size

    project = load_project(_windowed(make_project))
    analysis = analysis_of(project, "s.m")
    assert analysis.safety_class == "PerPartitionOnly" and "window_condition" in [r.rule for r in analysis.reasons]
    assert run_size(project, project.model("s.m")) == 1
    # a LIMIT only runs from 2024-03-01 on make still refuses the model
    refused = analysis_of(load_project(_windowed(make_project, extra="\n@LIMIT(@start_ds >= '2024-03-01') 5")), "s.m")
    assert refused.safety_class == "Refused" and [r.rule for r in refused.reasons] == ["limit"], refused.reasons


def test_a_window_condition_that_cannot_be_evaluated_names_the_model_file(make_project):
    root = make_project({"models/m.sql": "MODEL (name s.m, kind FULL);\nSELECT @IF(@start_dt > 'soon', 1, 2) AS x"})
    project = load_project(root)
    with pytest.raises(ModelFileError) as err:
        plan_run(project, project.model("s.m"), None)
    assert err.value.path == str(root / "models" / "m.sql") and "cannot evaluate" in err.value.message, (
        err.value.render()
    )
    assert "@start_ds with 'YYYY-MM-DD' text" in err.value.hint


def test_a_statement_under_a_window_condition_runs_only_when_it_holds(make_project):
    root = make_project(
        {
            "models/m.sql": "MODEL (name s.m, kind FULL);\nSELECT 1 AS x;\n@IF(@execution_ds >= '2024-01-01', "
            "CACHE TABLE "
            "t);\n"
            "@IF(@execution_ds < '2024-01-01', UNCACHE TABLE t);"
        }
    )
    project = load_project(root)
    plan = plan_run(project, project.model("s.m"), None)
    assert [s.sql("spark") for s in plan.post_statements] == ["CACHE TABLE t"]


# -- errors: one line, file:line, the fix, exit code 2 ------------------------------------------------

MACRO_FILE = (
    "from sqlmesh import macro\n\n@macro()\ndef boom(evaluator):\n    raise ValueError('no good')\n\n"
    "@macro()\ndef one(evaluator, x: int):\n    return x\n"
)


@pytest.mark.parametrize(
    "body, line, message, hint",
    [
        ("SELECT\n  @nope(1) AS x", 3, "unknown macro @NOPE", "macros/"),
        ("SELECT @boom() AS x", 2, "macro @BOOM raised ValueError: no good", "macros/m.py:5"),
        ("SELECT @one(1, 2) AS x", 2, "wrong arguments for @ONE", "@ONE(x)"),
        ("SELECT @EACH([1], 3) AS x", 2, "@EACH needs a function", "x -> x + 1"),
        (
            "SELECT @EACH(@FILTER([1, 2], v -> @start_ds > '2024'), v -> v) AS x",
            2,
            "`@start_ds > '2024'` depends on the run window",
            "@IF, @EVAL or a clause operator",
        ),
        (
            "SELECT a FROM t\n@JOIN(TRUE) u USING (k)",
            3,
            "@JOIN(condition) needs a join with an ON condition",
            "join with ON",
        ),
        (
            "SELECT a, @IF(@start_ds > '2024-01-02', b) FROM t",
            2,
            "the query's columns depend on the run window",
            "same columns",
        ),
        (
            "SELECT a\nFROM @IF(@start_ds < '2024-06-01', s.old, s.new)",
            3,
            "a table chosen by a condition on the run window",
            "UNION ALL",
        ),
        ("SELECT @undefined AS x", 2, "unknown macro @undefined", "@DEF(undefined, value)"),
        ("@DEF(x);\nSELECT 1 AS x", 2, "@DEF takes a name and a value", "@DEF(name, value)"),
        ("SELECT @STAR(s.nothing) FROM t", 2, "the columns of s.nothing are not known", "sources.yaml"),
        ("SET x = 1", 2, "a model's body must hold a query", "SELECT"),
    ],
)
def test_macro_errors_name_file_line_and_fix_with_exit_code_2(make_project, capsys, body, line, message, hint):
    root = make_project({"macros/m.py": MACRO_FILE, "models/m.sql": "MODEL (name s.m, kind FULL);\n" + body + "\n"})
    with pytest.raises(ModelFileError) as err:
        _first_error(root)
    e = err.value
    assert e.path == str(root / "models" / "m.sql") and e.line == line, e.render()
    assert message in e.message and hint in (e.hint or ""), e.render()
    assert main(["validate", "--project", str(root)]) == 2
    out = capsys.readouterr().err
    assert "Traceback" not in out and f"m.sql:{line}: {message}" in out


def _first_error(root: Path) -> None:
    from incremental_assets.errors import ProjectError

    try:
        load_project(root)
    except ProjectError as exc:
        raise exc.errors[0] from None


def test_a_broken_macros_file_is_one_error_naming_its_line(make_project, capsys):
    root = make_project(
        {
            "macros/bad.py": "from sqlmesh import macro\nfrom sqlmesh.core.dialect import parse\n",
            "models/m.sql": "MODEL (name s.m, kind FULL);\nSELECT 1 AS x\n",
        }
    )
    assert main(["validate", "--project", str(root)]) == 2
    out = capsys.readouterr().err
    assert f"{root / 'macros' / 'bad.py'}:2: sqlmesh.core.dialect is not available" in out and "Traceback" not in out


# -- pre/post statements run on Spark ---------------------------------------------------------------


def test_pre_statements_run_before_the_query_and_post_statements_after_the_write(spark, make_project):
    from incremental_assets.spark.executor import Executor

    from helpers import table_rows

    root = make_project(
        {
            "models/m.sql": """\
            MODEL (name s.m, kind FULL);
            @DEF(zone, 'America/New_York');
            SET TIME ZONE 'America/New_York';
            SELECT id, current_timezone() AS tz, @zone AS expected FROM VALUES (1), (2) AS v(id);
            CREATE OR REPLACE TEMPORARY VIEW s_m_after AS SELECT COUNT(*) AS n FROM @this_model;
            SET TIME ZONE 'UTC';
            """,
        }
    )
    project = load_project(root)
    plan = plan_run(project, project.model("s.m"), None)
    assert "SET TIME ZONE 'America/New_York';\nSELECT" in plan.render()
    result = Executor(spark, project).execute(plan)
    assert result.rows == 2
    assert table_rows(result.table) == [
        (1, "America/New_York", "America/New_York"),
        (2, "America/New_York", "America/New_York"),
    ]
    assert spark.sql("SELECT n FROM s_m_after").collect()[0][0] == 2  # the post-statement saw the written table
    assert spark.conf.get("spark.sql.session.timeZone") == "UTC"


def test_create_or_replace_table_statements_replace_the_table_on_every_run(spark, make_project):
    """Spark's session catalog has no REPLACE TABLE AS SELECT: the table is dropped and created (aside and
    renamed when the query reads the table it replaces), on every run."""
    from incremental_assets.spark.executor import Executor

    root = make_project(
        {
            "models/m.sql": """\
            MODEL (name s.m, kind FULL);
            SELECT id FROM VALUES (1), (2) AS v(id);
            CREATE SCHEMA IF NOT EXISTS ops_replace;
            CREATE OR REPLACE TABLE ops_replace.snap AS SELECT * FROM @this_model;
            CREATE OR REPLACE TABLE ops_replace.twice AS SELECT id * 2 AS id FROM ops_replace.snap;
            CREATE OR REPLACE TABLE ops_replace.twice AS SELECT id + 1 AS id FROM ops_replace.twice;
            """,
        }
    )
    project = load_project(root)
    try:
        for _ in range(2):
            Executor(spark, project).execute(plan_run(project, project.model("s.m"), None))
            assert sorted(r[0] for r in spark.sql("SELECT id FROM ops_replace.snap").collect()) == [1, 2]
            assert sorted(r[0] for r in spark.sql("SELECT id FROM ops_replace.twice").collect()) == [3, 5]
    finally:
        spark.sql("DROP SCHEMA IF EXISTS ops_replace CASCADE")


def test_a_failing_statement_names_the_model_file_and_line(spark, make_project):
    from incremental_assets.errors import StorageError
    from incremental_assets.spark.executor import Executor

    root = make_project(
        {"models/m.sql": "MODEL (name s.m, kind FULL);\nSELECT 1 AS x;\nDROP TABLE no_such_table_here;\n"}
    )
    project = load_project(root)
    with pytest.raises(StorageError, match=r"m\.sql:3: the post-statement `DROP TABLE no_such_table_here` failed"):
        Executor(spark, project).execute(plan_run(project, project.model("s.m"), None))


# -- against SQLMesh itself -------------------------------------------------------------------------

SQLMESH_VENV = REPO / "benchmarks" / ".sqlmesh-venv"
SQLMESH_SCRIPT = """
import json, sys
from sqlmesh import Context
ctx = Context(paths=sys.argv[1])
ctx.plan(auto_apply=True, no_prompts=True)
out = {}
for name in sys.argv[2:]:
    df = ctx.fetchdf(f"SELECT * FROM {name}")
    out[name] = {"columns": list(df.columns), "rows": json.loads(df.to_json(orient="values", date_format="iso"))}
print(json.dumps(out))
"""
MODELS = [
    "shop.orders",
    "shop.order_facts",
    "shop.by_customer",
    "shop.daily",
    "shop.windowed",
    "shop.recent",
    "shop.top_customers",
]


def _sqlmesh_python() -> Path:
    python = SQLMESH_VENV / "bin" / "python"
    with installing():
        if not python.exists():
            subprocess.run([sys.executable, "-m", "venv", str(SQLMESH_VENV)], check=True)
            done = subprocess.run(
                [str(SQLMESH_VENV / "bin" / "pip"), "install", "-q", "sqlmesh~=0.236.0", "duckdb"], check=False
            )
            if done.returncode != 0:
                shutil.rmtree(SQLMESH_VENV, ignore_errors=True)
                pytest.skip("SQLMesh could not be installed from the package index")
    return python


def _canonical(value):
    if isinstance(value, (float, Decimal)):
        return round(float(value), 6)
    if isinstance(value, (date, datetime)):
        return value.isoformat()[:10]
    if isinstance(value, str) and len(value) >= 10 and value[4:5] == "-" and value[7:8] == "-" and value[:4].isdigit():
        return value[:10]
    return value


def _rows(rows) -> list[tuple]:
    return sorted((tuple(_canonical(v) for v in row) for row in rows), key=repr)


@pytest.mark.slow
def test_the_demo_project_gives_sqlmesh_rows_on_spark(spark, demo, tmp_path):
    from deltalake import DeltaTable

    from incremental_assets.spark.executor import Executor

    from helpers import table_rows

    python = _sqlmesh_python()
    theirs_dir = tmp_path / "theirs"
    shutil.copytree(demo, theirs_dir)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    done = subprocess.run(
        [str(python), "-c", SQLMESH_SCRIPT, str(theirs_dir), *MODELS],
        cwd=theirs_dir,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    theirs = json.loads(done.stdout.strip().splitlines()[-1])

    project = load_project(demo)
    executor = Executor(spark, project)
    for name in project.order:
        model = project.model(name)
        # one interval per run, as SQLMesh runs shop.windowed (batch_size 1): its @IF / @EVAL read the window
        windows = (
            [TimeWindow.parse(f"2024-01-0{d}", f"2024-01-0{d + 1}") for d in range(1, 5)]
            if model.is_incremental
            else [None]
        )
        for window in windows:
            result = executor.execute(plan_run(project, model, window))
        columns = [f.name for f in DeltaTable(result.table).schema().fields if f.name != "ia_interval"]
        assert columns == theirs[name]["columns"], name
        assert theirs[name]["rows"] and _rows(table_rows(result.table)) == _rows(theirs[name]["rows"]), name


def test_if_statements_run_only_when_their_condition_holds_and_keep_later_lines():
    body = parse_model_body(
        "SELECT 1 AS x FROM t;\n"
        "@IF(@runtime_stage = 'evaluating',\n  ALTER TABLE t SET TBLPROPERTIES ('owner' = 'me'));\n"
        "@IF(1 > 2, DROP TABLE t);\n"
        "@IF(\n  1 < 2,\n  CACHE TABLE t\n);",
    )
    assert [s.sql("spark") for s in body.post_statements] == [
        "ALTER TABLE t SET TBLPROPERTIES ('owner'='me')",
        "CACHE TABLE t",
    ]
    with pytest.raises(ModelFileError) as err:
        parse_model_body(
            "SELECT 1 AS x FROM t;\n@IF(\n  1 < 2,\n  CACHE TABLE t\n);\nCACHE TABLE u AS SELECT\n  @nope AS y",
            path="m.sql",
        )
    assert err.value.line == 7 and "unknown macro @nope" in err.value.message, err.value.render()


def test_star_and_union_use_the_declared_source_columns_and_macros_read_locals(make_project):
    root = make_project(
        {
            "sources.yaml": "- name: raw.a\n  location: data/a\n  format: parquet\n  columns: {id: BIGINT, name: "
            "STRING, "
            "amount: DOUBLE}\n"
            "- name: raw.b\n  location: data/b\n  format: parquet\n  columns: {id: BIGINT, name: INT, "
            "amount: DOUBLE}\n",
            "macros/m.py": "from sqlmesh import macro\n\n@macro()\ndef local_value(evaluator, name):\n    return "
            "evaluator.locals[name]\n",
            "models/star.sql": "MODEL (name s.star, kind FULL);\n@DEF(Limit_Value, 7);\n"
            "SELECT @STAR(raw.a, a, [amount], 'src_'), @local_value('limit_value') AS lim FROM raw.a AS a",
            "models/both.sql": "MODEL (name s.both, kind FULL);\nSELECT * FROM (@UNION('all', raw.a, raw.b)) AS u",
        }
    )
    project = load_project(root)
    assert project.model("s.star").query.sql("spark") == (
        "SELECT CAST(`a`.`id` AS BIGINT) AS `src_id`, CAST(`a`.`name` AS STRING) AS `src_name`, 7 AS lim "
        "FROM raw.a AS a"
    )
    both = project.model("s.both")
    assert both.query.sql("spark") == (
        "SELECT * FROM (SELECT CAST(id AS BIGINT) AS id, CAST(amount AS DOUBLE) AS amount FROM raw.a "
        "UNION ALL SELECT CAST(id AS BIGINT) AS id, CAST(amount AS DOUBLE) AS amount FROM raw.b) AS u"
    )
    assert both.depends_on == ("raw.a", "raw.b")


def test_star_and_union_over_models_use_their_declared_columns_whatever_the_file_order(make_project):
    """As over sources: a model's MODEL header ``columns`` are what @STAR and @UNION read, also when the model
    reading them is in a file read before the model's own."""
    root = make_project(
        {
            "sources.yaml": "- name: raw.events\n  location: data/events\n  format: parquet\n",
            "models/a_star.sql": "MODEL (name s.star, kind FULL);\n"
            "SELECT @STAR(s.z_base, b, exclude := [grp]) FROM s.z_base AS b",
            "models/a_union.sql": "MODEL (name s.u, kind FULL);\n@UNION('all', s.z_base, s.z_base)",
            "models/z_base.sql": "MODEL (name s.z_base, kind FULL, columns (id INT, grp TEXT));\n"
            "SELECT id, grp FROM raw.events",
        }
    )
    project = load_project(root)
    assert project.model("s.star").query.sql("spark") == "SELECT CAST(`b`.`id` AS INT) AS `id` FROM s.z_base AS b"
    union = project.model("s.u")
    assert union.query.sql("spark") == (
        "SELECT CAST(id AS INT) AS id, CAST(grp AS STRING) AS grp FROM s.z_base "
        "UNION ALL SELECT CAST(id AS INT) AS id, CAST(grp AS STRING) AS grp FROM s.z_base"
    )
    assert union.depends_on == ("s.z_base",)


def test_project_variables_render_as_values_by_name_and_with_var():
    from incremental_assets.load.macros.evaluator import MacroContext

    context = MacroContext(variables={"str_var": "cat", "int_var": 1, "list_var": [1, 2]})
    body = "SELECT @STR_VAR AS s, @VAR('int_var') AS i, @VAR('missing', 0) AS m, @EACH(@list_var, x -> x * 10) FROM t"
    assert (
        parse_model_body(body, macros=context).query.sql("spark")
        == "SELECT 'cat' AS s, 1 AS i, 0 AS m, 1 * 10 AS _col_3, 2 * 10 AS _col_4 FROM t"
    )


def test_unaliased_projections_are_named_as_sqlmesh_names_them():
    """SQLMesh names an unaliased expression ``_col_<position among all projections>`` (a cast of a column
    keeps the column's name), where Spark would name it ``(amount * 2)``: downstream models select ``_col_0``."""
    from incremental_assets.load.query import output_columns

    body = "SELECT amount * 2, UPPER(status), CAST(paid_at AS DATE), account_id, 'x', t.* FROM raw.payments AS t"
    assert output_columns(parse_model_body(body, dialect="duckdb").query) is None  # a * hides the columns
    query = parse_model_body(body.replace(", t.*", ""), dialect="duckdb").query
    assert output_columns(query) == ["_col_0", "_col_1", "paid_at", "account_id", "x"]
    assert query.sql("spark").startswith("SELECT amount * 2 AS _col_0, UPPER(status) AS _col_1, CAST(paid_at")
    nested = "WITH c AS (SELECT amount + 1 FROM raw.payments) SELECT _col_0 AS a FROM c"
    assert "amount + 1 AS _col_0" in parse_model_body(nested, dialect="duckdb").query.sql("spark")
    pivot = "SELECT account_id, @PIVOT(status, ['paid'], alias := FALSE) FROM raw.payments GROUP BY account_id"
    assert output_columns(parse_model_body(pivot, dialect="duckdb").query) == ["account_id", "_col_1"]
