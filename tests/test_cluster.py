"""Beyond one machine, proven on this one: the example project's backfill through a real Spark standalone
cluster (a master and two workers, separate JVMs), through a Spark Connect server, and with Dagster's
storage on a real PostgreSQL server; every Delta table must equal the same backfill run in local mode.

Each backfill is the CLI in a subprocess (only environment variables differ), so the session-wide local
SparkSession of the other tests is never touched. Select these tests with ``-m cluster``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from cluster.services import (
    LOOPBACK,
    connect_server,
    java_available,
    postgres_server,
    postgres_unavailable_reason,
    spark_env,
    standalone_cluster,
)
from deltalake import DeltaTable

from conftest import REPO
from helpers import normalize

pytestmark = pytest.mark.cluster

# 20 days of data from 2024-11-18; the backfill runs 2024-11-01 .. 2024-12-08 so that every model has
# intervals with data and intervals without: daily (37), hourly (168), weekly (5), monthly (1), FULL, VIEW.
DATA = ["demo-data", "--start", "2024-11-18", "--days", "20", "--orders-per-day", "15"]
BACKFILL = ["run", "--auto", "--start", "2024-11-01", "--end", "2024-12-08"]
MODELS = 9
CLI_TIMEOUT = 900

# What the examples in deploy/ pass through INCREMENTAL_ASSETS_SPARK_CONF for a standalone cluster:
# small executors (two 1-core, 1 GiB workers) and a driver reachable on loopback.
CLUSTER_CONF = {
    "spark.executor.memory": "512m",
    "spark.executor.cores": "1",
    "spark.cores.max": "2",
    "spark.driver.host": LOOPBACK,
    "spark.driver.bindAddress": LOOPBACK,
    "spark.sql.shuffle.partitions": "4",
}


def require(condition: bool, reason: str) -> None:
    """Skip when this machine cannot run the test; in CI (CI=true) that is a failure, never a skip."""
    if condition:
        return
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"CI must be able to run this test: {reason}")
    pytest.skip(reason)


@pytest.fixture(autouse=True)
def _needs_java():
    require(java_available(), "no Java runtime: Spark needs Java 17 (apt-get install openjdk-17-jre-headless)")


def cli(project: Path, args: list[str], env: dict[str, str], *, log: Path) -> str:
    """Run ``incremental-assets`` in a subprocess; its output goes to ``log`` and is returned."""
    began = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "incremental_assets.cli", *args],
        cwd=project,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT,
    )
    output = done.stdout + done.stderr
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(output)
    print(f"{' '.join(args[:2])}: {time.perf_counter() - began:.1f}s (log {log})")
    assert done.returncode == 0, f"incremental-assets {' '.join(args)} failed ({done.returncode}):\n{output[-6000:]}"
    return output


def run_env(base: Path, warehouse: Path, home: Path, **settings: str) -> dict[str, str]:
    env = spark_env(base)
    env.update(INCREMENTAL_ASSETS_WAREHOUSE=str(warehouse), DAGSTER_HOME=str(home), **settings)
    return env


def delta_tables(warehouse: Path) -> dict[str, list[tuple]]:
    """Every Delta table under the warehouse (``schema.table``), as sorted rows of its current version."""
    tables = {}
    for log_dir in sorted(warehouse.rglob("_delta_log")):
        table_dir = log_dir.parent
        name = ".".join(table_dir.relative_to(warehouse).parts)
        data = DeltaTable(str(table_dir)).to_pyarrow_table()
        tables[name] = sorted(normalize(tuple(r.values())) for r in data.to_pylist())
    return tables


def assert_backfill(output: str) -> None:
    assert f"{MODELS} run(s) succeeded, 0 failed" in output, output[-3000:]


def assert_same_tables(got: dict[str, list[tuple]], expected: dict[str, list[tuple]], how: str) -> None:
    assert sorted(got) == sorted(expected), f"{how}: tables differ from the local run"
    for name, rows in expected.items():
        assert got[name] == rows, (
            f"{how}: table {name} differs from the local run ({len(got[name])} vs {len(rows)} rows)"
        )


@pytest.fixture(scope="module")
def example(tmp_path_factory) -> Path:
    """The example project (models/, sources.yaml) with 20 days of generated data, in a temp folder."""
    root = tmp_path_factory.mktemp("cluster") / "project"
    root.mkdir()
    shutil.copytree(REPO / "models", root / "models")
    shutil.copy(REPO / "sources.yaml", root / "sources.yaml")
    cli(root, DATA, run_env(root.parent, root / "warehouse", root / ".dagster"), log=root.parent / "demo-data.log")
    return root


@pytest.fixture(scope="module")
def local_tables(example) -> dict[str, list[tuple]]:
    """The reference: the same backfill on the embedded default (local Spark, SQLite instance)."""
    base = example.parent / "local"
    warehouse = base / "warehouse"
    env = run_env(base, warehouse, base / "dagster_home", INCREMENTAL_ASSETS_SPARK_MASTER="local[2]")
    assert_backfill(cli(example, BACKFILL, env, log=base / "run.log"))
    tables = delta_tables(warehouse)
    # Every model but the view has a table, and every table has rows: the comparisons below mean something.
    assert len(tables) == MODELS - 1, sorted(tables)
    assert all(tables.values()), {name: len(rows) for name, rows in tables.items()}
    return tables


def test_backfill_on_a_standalone_cluster_equals_local(example, local_tables, tmp_path):
    with standalone_cluster(tmp_path / "spark", workers=2, cores=1, memory="1g") as cluster:
        warehouse = tmp_path / "warehouse"
        env = run_env(
            tmp_path,
            warehouse,
            tmp_path / "dagster_home",
            INCREMENTAL_ASSETS_SPARK_MASTER=cluster.master_url,
            INCREMENTAL_ASSETS_SPARK_CONF=json.dumps(CLUSTER_CONF),
        )
        output = cli(example, BACKFILL, env, log=tmp_path / "run.log")
        assert_backfill(output)
        state = cluster.state()
        executor_logs = cluster.executor_logs()
        assert state["aliveworkers"] == 2, state

    # The run was an application of this master, and its executors (one per worker) ran the tasks.
    apps = state["completedapps"] + state["activeapps"]
    assert [a["name"] for a in apps] == ["incremental_assets"], apps
    assert all(len(logs) == 1 for logs in executor_logs.values()), executor_logs
    tasks = {
        worker: sum(log.read_text(errors="replace").count("Running task") for log in logs)
        for worker, logs in executor_logs.items()
    }
    print(f"tasks run per worker's executor: {tasks}")
    assert all(n > 0 for n in tasks.values()), f"each worker's executor must have run tasks: {tasks}"
    assert_same_tables(delta_tables(warehouse), local_tables, "standalone cluster")


def test_backfill_through_spark_connect_equals_local(example, local_tables, tmp_path):
    try:
        from pyspark.sql.connect.utils import check_dependencies

        check_dependencies()
    except ImportError as exc:  # a broken install, not a machine that cannot run this: fail
        pytest.fail(f"pyspark's Spark Connect client needs more packages (the project's test extras list them): {exc}")

    server_conf = {
        # The server is the driver: the static settings the local session would get at start-up.
        "spark.driver.extraJavaOptions": "-Duser.timezone=UTC",
        "spark.executor.extraJavaOptions": "-Duser.timezone=UTC",
        "spark.sql.session.timeZone": "UTC",
    }
    with connect_server(tmp_path / "spark", master="local[2]", conf=server_conf) as server:
        warehouse = tmp_path / "warehouse"
        env = run_env(tmp_path, warehouse, tmp_path / "dagster_home", INCREMENTAL_ASSETS_SPARK_REMOTE=server.url)
        # The client must be pure Python: with no Spark distribution to launch, a local JVM could not start.
        env["SPARK_HOME"] = str(tmp_path / "no-spark-here")
        output = cli(example, BACKFILL, env, log=tmp_path / "run.log")
        assert_backfill(output)
        server.service.check_alive()

    # The server's event log records the SQL it ran, writing into this warehouse.
    events = "".join(p.read_text(errors="replace") for p in server.event_log_dir.rglob("*") if p.is_file())
    assert "SparkListenerSQLExecutionStart" in events and str(warehouse) in events, (
        "the Connect server ran nothing for this run"
    )
    assert_same_tables(delta_tables(warehouse), local_tables, "Spark Connect")


def test_backfill_with_dagster_storage_on_postgres(example, local_tables, tmp_path):
    reason = postgres_unavailable_reason()
    require(reason is None, reason or "")
    import dagster_postgres  # noqa: F401  (a test extra: missing means a broken install, which fails here)

    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(REPO / "deploy" / "dagster.yaml", home / "dagster.yaml")
    config = yaml.safe_load((home / "dagster.yaml").read_text())
    assert "postgres" in config["storage"], "deploy/dagster.yaml must keep Dagster's storage on Postgres"

    with postgres_server() as pg:
        warehouse = tmp_path / "warehouse"
        env = run_env(tmp_path, warehouse, home, INCREMENTAL_ASSETS_SPARK_MASTER="local[2]", **pg.env())
        output = cli(example, BACKFILL, env, log=tmp_path / "run.log")
        assert_backfill(output)
        status = json.loads(
            cli(
                example,
                ["status", "--since", "2024-11-01", "--until", "2024-12-08", "--json"],
                env,
                log=tmp_path / "status.log",
            )
        )

        # Runs, materializations and partition status are in Postgres, not in SQLite files under DAGSTER_HOME.
        runs = dict(pg.query("SELECT status, COUNT(*) FROM runs GROUP BY status"))
        materialized = pg.query(
            "SELECT asset_key, COUNT(DISTINCT partition) FROM event_logs WHERE dagster_event_type = "
            "'ASSET_MATERIALIZATION' "
            "GROUP BY asset_key ORDER BY asset_key"
        )
        tables = {name for (name,) in pg.query("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}

    assert runs == {"SUCCESS": MODELS}, runs
    assert {"runs", "event_logs", "asset_keys", "jobs", "instigators"} <= tables, (
        tables
    )  # run, event and schedule storage
    assert not list(home.rglob("*.db")), f"SQLite files under DAGSTER_HOME: {list(home.rglob('*.db'))}"
    partitions = {json.loads(key)[-1]: count for key, count in materialized}
    assert partitions == {
        "order_lines": 37,
        "daily_customer_revenue": 37,
        "hourly_orders": 168,
        "daily_channel_orders": 7,
        "monthly_country_revenue": 1,
        "weekly_category_revenue": 5,
        "customers": 0,
        "customer_lifetime": 0,
        "category_summary": 0,
    }, partitions
    by_model = {s["model"]: s for s in status}
    for name in (
        "shop.order_lines",
        "shop.hourly_orders",
        "shop.weekly_category_revenue",
        "shop.monthly_country_revenue",
    ):
        assert (
            by_model[name]["gaps"] == []
            and by_model[name]["intervals_done"] == by_model[name]["intervals_expected"] > 0
        ), by_model[name]
    assert_same_tables(delta_tables(warehouse), local_tables, "Postgres storage")
