"""A SQLMesh project's own config and project files load unchanged: config.py with SQLMesh's classes and
enums (no SQLMesh installed), external models (file, folder, gateways), before_all / after_all run on
Spark, several folders as one project; a SQLMesh name we do not provide fails the load with its line."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from incremental_assets import delta
from incremental_assets.cli.commands import main
from incremental_assets.errors import ProjectError
from incremental_assets.load.project import load_project
from incremental_assets.load.settings import load_settings
from incremental_assets.model.settings import CATALOG_DIR_KEY
from incremental_assets.plan.run_plan import plan_run

from helpers import table_rows

EXAMPLES = Path("/tmp/sqlmesh-examples-0.236.4")
MODEL = {"models/a.sql": "MODEL (name s.a, kind FULL); SELECT 1 AS x"}

SUSHI_LIKE_CONFIG = """\
import os
from sqlmesh.core.config.common import VirtualEnvironmentMode, TableNamingConvention
from sqlmesh.core.config import (AutoCategorizationMode, BigQueryConnectionConfig, CategorizerConfig, Config,
    DuckDBConnectionConfig, EnvironmentSuffixTarget, GatewayConfig, ModelDefaultsConfig, PlanConfig)
from sqlmesh.core.config.linter import LinterConfig
from sqlmesh.core.notification_target import SlackApiNotificationTarget, BasicSMTPNotificationTarget
from sqlmesh.core.user import User, UserRole
from sqlmesh.utils.date import to_ds

model_defaults = ModelDefaultsConfig(dialect="duckdb", start=to_ds("2024-01-05 10:00:00"))
config = Config(
    gateways={"duckdb": GatewayConfig(connection=DuckDBConnectionConfig())}, default_gateway="duckdb",
    model_defaults=model_defaults, linter=LinterConfig(enabled=False, rules=["noselectstar"]),
    before_all=["CREATE SCHEMA IF NOT EXISTS raw"],
    plan=PlanConfig(auto_categorize_changes=CategorizerConfig(sql=AutoCategorizationMode.SEMI)),
)
bq = Config(gateways={"bq": GatewayConfig(connection=BigQueryConnectionConfig())}, model_defaults=model_defaults)
dev_only = config.copy(update={"virtual_environment_mode": VirtualEnvironmentMode.DEV_ONLY,
                               "plan": PlanConfig(auto_categorize_changes=CategorizerConfig.all_full())})
suffix = config.model_copy(update={"environment_suffix_target": EnvironmentSuffixTarget.CATALOG})
hashed = config.copy(update={"physical_table_naming_convention": TableNamingConvention.HASH_MD5})
approvers = Config(users=[User(username="admin", roles=[UserRole.REQUIRED_APPROVER],
    notification_targets=[SlackApiNotificationTarget(notify_on=["apply_start"], token=os.getenv("NO_TOKEN"))])],
    notification_targets=[BasicSMTPNotificationTarget(notify_on=["run_failure"], host="h")])
"""


def test_a_config_py_with_sqlmesh_classes_enums_and_copies_loads(make_project):
    root = make_project(
        {
            "config.py": SUSHI_LIKE_CONFIG,
            "models/a.sql": "MODEL (name s.a, kind INCREMENTAL_BY_TIME_RANGE (time_column ds)); SELECT "
            "CAST('2024-01-05' "
            "AS DATE) AS ds",
        }
    )
    project = load_project(root)
    assert project.model("s.a").start.isoformat() == "2024-01-05T00:00:00+00:00"  # to_ds computed as SQLMesh does
    assert project.before_all == ("CREATE SCHEMA IF NOT EXISTS raw",)


@pytest.mark.parametrize(
    ("source", "line", "name"),
    [
        (
            "import os\nfrom sqlmesh.core.config import Config, NoSuchConfig\nconfig = Config()\n",
            2,
            "sqlmesh.core.config.NoSuchConfig",
        ),
        (
            "import sqlmesh.utils.date\n\nconfig = sqlmesh.utils.date.to_somewhere('x')\n",
            3,
            "sqlmesh.utils.date.to_somewhere",
        ),
        ("from sqlmesh.core.scheduler import Scheduler\nconfig = 1\n", 1, "sqlmesh.core.scheduler"),
    ],
)
def test_a_sqlmesh_name_the_stand_in_lacks_fails_the_load_with_file_line_and_name(make_project, source, line, name):
    root = make_project({"config.py": source, **MODEL})
    with pytest.raises(ProjectError) as err:
        load_project(root)
    assert str(err.value).startswith(f"{root / 'config.py'}:{line}: {name} is not available")


def test_external_models_file_and_folder_with_sqlmesh_keys_and_gateways(make_project):
    root = make_project(
        {
            "config.yaml": "gateways: {local: {connection: {type: duckdb}}, prod: {connection: {type: duckdb}}}\n"
            "default_gateway: local\nmodel_defaults: {dialect: duckdb}\n",
            "external_models.yaml": "- name: raw.unread\n  description: no model reads it\n  dialect: duckdb\n  "
            "start: 1 week ago\n"
            "  audits: [{name: not_null, columns: '[id]'}]\n  columns: {id: int}\n",
            "external_models/deep/events.yaml": "- name: raw.events\n  columns: {id: int, v: text}\n  location: "
            "data/events.parquet\n",
            "external_models/prod.yaml": "- name: prod_raw.only_prod\n  gateway: prod\n  columns: {id: int}\n  "
            "location: "
            "data/p.parquet\n"
            "- name: raw.local_only\n  gateway: LOCAL\n  columns: {id: int}\n  location: data/l.parquet\n",
            "models/a.sql": "MODEL (name s.a, kind FULL); SELECT id, v FROM raw.events",
        }
    )
    project = load_project(root)
    assert dict(project.sources["raw.events"].columns) == {
        "id": "INT",
        "v": "STRING",
    }  # read from the folder, recursively
    assert (
        "raw.local_only" in project.sources and "prod_raw.only_prod" not in project.sources
    )  # another gateway's: skipped
    assert "raw.unread" not in project.sources  # no location, read by no model: no error
    (root / "models" / "b.sql").write_text("MODEL (name s.b, kind FULL);\nSELECT id\nFROM raw.unread")
    with pytest.raises(ProjectError) as err:
        load_project(root)
    assert str(err.value) == (
        f"{root / 'models' / 'b.sql'}:3: model s.b reads external model raw.unread, which does not say "
        "where its data lives "
        "(fix: add `location: <path or URI>` (and `format:`) to its entry at "
        f"{root / 'external_models.yaml'}:1, or create it in before_all)"
    )


STATEMENTS_PROJECT = {
    "config.yaml": """\
        model_defaults: {dialect: duckdb}
        before_all:
          - CREATE SCHEMA IF NOT EXISTS cfg_raw
          - CREATE OR REPLACE VIEW cfg_raw.demographics AS (SELECT @one() AS customer_id, '00000' AS zip)
        after_all:
          - CREATE OR REPLACE VIEW cfg_after AS SELECT @one() + 1 AS two
        """,
    "macros/__init__.py": "from sqlmesh import macro\n\n@macro()\ndef one(evaluator):\n    return 1\n",
    "models/customers.sql": """\
        MODEL (name s.customers, kind FULL);
        SELECT d.customer_id, d.zip, z.n FROM cfg_raw.demographics AS d CROSS JOIN cfg_raw.zips AS z
        """,
    "models/zips.sql": """\
        MODEL (name s.zips, kind FULL);
        CREATE OR REPLACE VIEW cfg_raw.zips AS SELECT 7 AS n;
        SELECT 1 AS x
        """,
}


def test_before_all_runs_on_spark_before_the_models_and_their_objects_are_readable(spark, make_project):
    from incremental_assets.spark.executor import Executor
    from incremental_assets.spark.session import run_project_statements

    project = load_project(make_project(STATEMENTS_PROJECT))
    assert project.sources["cfg_raw.demographics"].format == "table"  # a catalog view: no sources.yaml entry needed
    executor = Executor(spark, project)
    executor.execute(plan_run(project, project.model("s.zips"), None))  # its pre-statement creates cfg_raw.zips
    executor.execute(plan_run(project, project.model("s.customers"), None))
    assert table_rows(delta.table_uri(project.settings.warehouse, "s.customers")) == [(1, "00000", 7)]
    run_project_statements(spark, project, "after_all")
    assert spark.sql("SELECT two FROM cfg_after").collect()[0].two == 2


def _zips_model(n: int) -> str:
    return f"""\
        MODEL (name s.zip_of, kind FULL);
        CREATE SCHEMA IF NOT EXISTS pre_raw;
        DROP VIEW IF EXISTS pre_raw.zips;
        CREATE VIEW pre_raw.zips AS (SELECT {n} AS n);
        SELECT z.n FROM pre_raw.zips AS z
        """


def test_pre_statements_that_drop_and_create_the_view_the_model_reads_run_again(spark, make_project):
    """As sushi's customers.sql: the statements drop and create the catalog view (not the run's temporary view
    of it, which a second run would then find already made as a table of the catalog), and the query reads
    the view as they left it."""
    from incremental_assets.spark.executor import Executor

    root = make_project({"config.yaml": "model_defaults: {dialect: duckdb}\n", "models/zips.sql": _zips_model(7)})
    uri = delta.table_uri(load_settings(root).warehouse, "s.zip_of")
    for n in (7, 7, 8):
        (root / "models" / "zips.sql").write_text(textwrap.dedent(_zips_model(n)))
        project = load_project(root)
        Executor(spark, project).execute(plan_run(project, project.model("s.zip_of"), None))
        assert table_rows(uri) == [(n,)]
    assert spark.sql("SELECT n FROM pre_raw.zips").collect()[0].n == 8


def test_spark_keeps_its_catalog_under_the_warehouse(make_project):
    root = make_project(MODEL)
    settings = load_settings(root)
    assert settings.spark_config()[CATALOG_DIR_KEY] == settings.warehouse + "/_spark_catalog"


MULTI = {
    "repo_1/config.yaml": "project: repo_1\nmodel_defaults: {dialect: duckdb}\nvariables: {who: one}\n",
    "repo_1/macros/__init__.py": "from sqlmesh import macro\n\n@macro()\ndef dup(evaluator):\n    return "
    "\"'repo_1'\"\n",
    "repo_1/models/a.sql": "MODEL (name bronze.a, kind FULL);\nSELECT 1 AS col_a, @dup() AS dup, @VAR('who') AS who",
    "repo_2/config.yaml": "project: repo_2\nmodel_defaults: {dialect: duckdb, owner: team_2}\nvariables: {who: two}\n",
    "repo_2/macros/__init__.py": "from sqlmesh import macro\n\n@macro()\ndef dup(evaluator):\n    return "
    "\"'repo_2'\"\n",
    "repo_2/models/d.sql": "MODEL (name silver.d, kind FULL);\nSELECT col_a, @dup() AS dup, @VAR('who') AS who "
    "FROM bronze.a",
}


def test_several_folders_load_as_one_project_each_with_its_own_config(make_project, capsys):
    root = make_project(MULTI)
    project = load_project([root / "repo_1", root / "repo_2"])
    a, d = project.model("bronze.a"), project.model("silver.d")
    assert "'repo_1' AS dup, 'one' AS who" in a.query.sql() and "'repo_2' AS dup, 'two' AS who" in d.query.sql()
    assert d.depends_on == ("bronze.a",) and d.owner == "team_2" and a.owner is None
    assert project.settings.warehouse == str(root / "repo_1" / "warehouse")
    assert main(["validate", "--project", str(root / "repo_1"), "--project", str(root / "repo_2")]) == 0
    assert "repo_2/models/d.sql" in capsys.readouterr().out


examples = pytest.mark.skipif(not EXAMPLES.is_dir(), reason="SQLMesh's examples are not unpacked here")


@examples
def test_sqlmesh_multi_example_loads_as_one_project():
    project = load_project([EXAMPLES / "multi" / "repo_1", EXAMPLES / "multi" / "repo_2"])
    assert sorted(project.models) == ["bronze.a", "bronze.b", "silver.c", "silver.d", "silver.e"]
    assert project.before_all == (
        "CREATE TABLE IF NOT EXISTS before_1 AS SELECT 1",
        "CREATE TABLE IF NOT EXISTS before_2 AS SELECT 2",
    )


@examples
def test_sqlmesh_sushi_example_gets_past_config_and_external_models():
    with pytest.raises(ProjectError) as err:  # what remains are Python models, Jinja macros and custom kinds
        load_project(EXAMPLES / "sushi")
    text = str(err.value)
    for fixed in ("config.py", "external_models", "raw.demographics", "not available"):
        assert fixed not in text, text


def test_a_name_in_the_gateways_default_catalog_names_the_model(make_project):
    """SQLMesh prefixes every model with the gateway's default catalog; generated SQL (ibis.to_sql) writes
    `local.s.a`: it reads model s.a. A catalog that is not the default stays an unknown table."""
    root = make_project(
        {
            "config.yaml": "gateways:\n  g:\n    connection:\n      type: duckdb\n      catalogs:\n        local: "
            "data/l.duckdb\nmodel_defaults:\n  dialect: duckdb\n",
            **MODEL,
            "models/b.sql": "MODEL (name s.b, kind FULL); SELECT x FROM local.s.a",
        }
    )
    project = load_project(root)
    assert project.model("s.b").depends_on == ("s.a",)
    assert "local" not in project.model("s.b").query.sql(dialect="spark")
    (root / "models" / "c.sql").write_text("MODEL (name s.c, kind FULL); SELECT x FROM other.s.a")
    with pytest.raises(ProjectError, match="other.s.a"):
        load_project(root)


@pytest.mark.parametrize(
    "kind, expected",
    [
        ("FULL", "FULL"),
        ("view", "VIEW"),
        ("{name: INCREMENTAL_BY_TIME_RANGE, time_column: ds}", "INCREMENTAL_BY_TIME_RANGE"),
    ],
)
def test_a_default_kind_in_config_yaml_is_the_kind_of_models_without_one(make_project, kind, expected):
    root = make_project(
        {
            "config.yaml": f"model_defaults:\n  dialect: duckdb\n  start: '2024-01-01'\n  kind: {kind}\n",
            "models/m.sql": "MODEL (name s.m);\nSELECT CAST('2024-01-01' AS DATE) AS ds, 1 AS n",
            "models/f.sql": "MODEL (name s.f, kind FULL);\nSELECT 1 AS n",
        }
    )
    project = load_project(root)
    assert project.model("s.m").kind.name == expected
    assert project.model("s.f").kind.name == "FULL"
