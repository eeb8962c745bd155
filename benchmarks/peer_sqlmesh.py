"""Against a second peer: the same model and data with SQLMesh on its Spark engine.

SQLMesh is installed by this module into its own virtual environment (``benchmarks/.sqlmesh-venv``,
git-ignored; it pins its own sqlglot, so it can share neither ours nor dbt's), never as a project
dependency, with the same PySpark as ours. Its gateway is a local PySpark session (``type: spark``: SQLMesh
starts it with Hive support, a Derby metastore in the project folder) and a DuckDB state connection (SQLMesh
keeps its state out of Spark). The sources are the same generated files as the dbt side's, registered as
Hive tables before the timing starts and declared to SQLMesh as external models.

The model is ours, header and query unchanged but without its audits: both tools read the same
``INCREMENTAL_BY_TIME_RANGE`` header. SQLMesh writes a parquet table partitioned by the time column with
``INSERT OVERWRITE`` (dynamic partition overwrite) in its physical schema, behind a view; ours is a Delta
table committed by delta-rs.

``BENCH_SQLMESH_SPARK=server`` (with ``BENCH_OURS_SPARK_SERVER=1``): SQLMesh's gateway is our long-lived Spark
Connect server instead of a PySpark of its own (``spark.remote`` in its Spark config: its ``type: spark``
connection builds ``SparkSession.builder.config(...).getOrCreate()``, which PySpark 4 turns into a Connect
session), so both sides run on the same warm JVM and neither starts one per command. The server's catalog
is shared: each repetition's physical tables get their own schema (``physical_schema_mapping``).
"""

from __future__ import annotations

import json
import os
import subprocess
from datetime import date, timedelta
from pathlib import Path

import peer
from peer import HERE, model_text, peer_env, run, source_ddl, source_links, spark_yaml

VENV = HERE / ".sqlmesh-venv"
REQUIREMENTS = ["sqlmesh~=0.236.0", "pyspark[connect]==4.3.0"]  # the same Spark as ours, and its Connect client
ON_SERVER = os.environ.get("BENCH_SQLMESH_SPARK", "") == "server"
REMOTE: list[str] = []  # our server's URL, set by the runner once it is up (ON_SERVER)

CONFIG = """\
gateways:
  spark:
    connection:
      type: spark
      config:
{spark}    state_connection:
      type: duckdb
      database: "{home}/state.duckdb"
default_gateway: spark
{mapping}model_defaults:
  dialect: spark
"""

# The sources' columns as SQLMesh external models (what `sqlmesh create_external_models` writes).
EXTERNAL_MODELS = """\
- name: raw.orders
  columns: {order_id: BIGINT, customer_id: BIGINT, order_ts: TIMESTAMP, order_date: DATE, status: STRING,
            channel: STRING}
- name: raw.order_items
  columns: {order_id: BIGINT, line_no: INT, item_id: BIGINT, quantity: INT, order_ts: TIMESTAMP, order_date: DATE}
- name: raw.items
  columns: {item_id: BIGINT, name: STRING, category: STRING, unit_price: 'DECIMAL(10,2)'}
"""

# Run in SQLMesh's venv: open the project's context (its gateway) and run SQL; print the last query's rows.
SQL_SCRIPT = """\
import json, sys
from sqlmesh import Context
context = Context(paths=[sys.argv[1]])
statements = json.loads(sys.argv[2])
for sql in statements[:-1]:
    context.engine_adapter.execute(sql)
print(json.dumps(context.fetchdf(statements[-1]).astype(str).values.tolist()))
"""


def ensure_venv() -> Path:
    return peer.ensure_venv(VENV, REQUIREMENTS, "sqlmesh")


def sqlmesh_project(root: Path, data: Path, tag: str = "r0") -> Path:
    """The SQLMesh project over the same generated files: config, external models, the model. One per
    backfill repetition (its own metastore, warehouse and state), as the dbt side has one schema per repetition."""
    project = root / f"sqlmesh-{tag}"
    (project / "models").mkdir(parents=True)
    warehouse = root / f"sqlmesh-warehouse-{tag}"
    spark, mapping = spark_yaml(warehouse, project, 8), ""
    if ON_SERVER:  # the same server as ours; the session settings the local gateway has, its catalog shared
        spark = f'        spark.remote: "{REMOTE[0]}"\n        spark.sql.sources.partitionOverwriteMode: "dynamic"\n'
        mapping = f'physical_schema_mapping:\n  "^shop$": "sqlmesh_{tag}"\n'
    (project / "config.yaml").write_text(
        CONFIG.replace("{spark}", spark).replace("{home}", str(project)).replace("{mapping}", mapping)
    )
    (project / "external_models.yaml").write_text(EXTERNAL_MODELS)
    (project / "models" / "order_lines.sql").write_text(model_text())
    source_links(root, data)
    return project


def sql(project: Path, statements: list[str]) -> list[list[str]]:
    """Run SQL through the project's gateway in a fresh process (SQLMesh's venv); the last statement's rows."""
    done = subprocess.run(
        [str(VENV / "bin" / "python"), "-c", SQL_SCRIPT, str(project), json.dumps(statements)],
        cwd=project,
        env=peer_env(),
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"SQL through SQLMesh failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
    return json.loads(done.stdout.strip().splitlines()[-1])


def commands(start: date, end: date) -> tuple[list[str], list[str]]:
    """What a SQLMesh user runs. The backfill: the first ``plan`` of the model, applied, "now" being the end
    of the data (SQLMesh refuses --start/--end on a production plan without restatement, and its default
    batch_size fills the whole range in one query). The day: a restatement of the last day in production,
    the equivalent of our run of a window that is already there (``sqlmesh run`` would find nothing missing)."""
    last = end - timedelta(days=1)
    backfill = ["plan", "--auto-apply", "--no-prompts", "--execution-time", end.isoformat()]
    day = [
        "plan",
        "--auto-apply",
        "--no-prompts",
        "--restate-model",
        "shop.order_lines",
        "--start",
        last.isoformat(),
        "--end",
        last.isoformat(),
        "--execution-time",
        end.isoformat(),
    ]
    return backfill, day


def prepared_project(root: Path, data: Path, tag: str) -> Path:
    """The tag's project, its sources registered in its metastore (the first time, before any timing)."""
    project = root / f"sqlmesh-{tag}"
    if not project.exists():
        project = sqlmesh_project(root, data, tag)
        sql(project, [*source_ddl(source_links(root, data)), "SELECT count(*) FROM raw.orders"])
    return project


def side(root: Path, data: Path, start: date, end: date):
    """The (backfill, day) timed commands of the runner, each taking the repetition's tag."""
    exe = ensure_venv()
    backfill, day = commands(start, end)
    return (
        lambda tag: run([str(exe), *backfill], prepared_project(root, data, tag), peer_env()),
        lambda tag: run([str(exe), *day], prepared_project(root, data, tag), peer_env()),
    )


def new_day_run(root: Path, data: Path, end: date) -> float:
    """``sqlmesh run``, SQLMesh's daily command, on a truly new day: a project backfilled (untimed) up to the
    day before the last, then the timed run that finds the last day missing and fills it."""
    exe = ensure_venv()
    project = prepared_project(root, data, "daily")
    last = end - timedelta(days=1)
    run([str(exe), "plan", "--auto-apply", "--no-prompts", "--execution-time", last.isoformat()], project, peer_env())
    return run([str(exe), "run", "--end", last.isoformat()], project, peer_env())  # a date as end: the whole day


def description() -> str:
    done = subprocess.run(
        [
            str(VENV / "bin" / "python"),
            "-c",
            "import sqlmesh, pyspark; print(sqlmesh.__version__, pyspark.__version__)",
        ],
        env=peer_env(),
        capture_output=True,
        text=True,
        check=True,
    )
    sqlmesh_version, pyspark_version = done.stdout.split()
    where = (
        f"our long-lived Spark Connect server through PySpark {pyspark_version}'s Connect client"
        if ON_SERVER
        else f"local PySpark {pyspark_version} with a Derby Hive metastore"
    )
    return (
        f"SQLMesh {sqlmesh_version} (Spark engine, {where}, DuckDB state; "
        "INCREMENTAL_BY_TIME_RANGE, parquet partitioned by day, INSERT OVERWRITE)"
    )


def check_against_ours(root: Path, warehouse: str, last: date, tags: tuple[str, ...] = ("r0", "daily")) -> dict:
    """Rows and revenue per checked day in ours and in each SQLMesh project's table (the first repetition's,
    the one filled by ``sqlmesh run``); raises when they differ."""
    from peer import our_day_totals

    ours = our_day_totals(warehouse, last)
    days = [date.fromisoformat(d) for d in ours]
    listed = ", ".join(f"DATE'{d.isoformat()}'" for d in days)
    query = (
        f"SELECT CAST(order_date AS STRING), count(*), CAST(sum(revenue) AS STRING) FROM shop.order_lines "
        f"WHERE order_date IN ({listed}) GROUP BY order_date"
    )
    for tag in tags:
        theirs = {
            day: {"rows": int(n), "revenue": revenue} for day, n, revenue in sql(root / f"sqlmesh-{tag}", [query])
        }
        if theirs != ours:
            raise RuntimeError(f"SQLMesh's table ({tag}) differs from ours: {theirs} vs {ours}")
    print(f"peer: SQLMesh's tables ({', '.join(tags)}) equal ours on {', '.join(ours)}: {ours}", flush=True)
    return ours
