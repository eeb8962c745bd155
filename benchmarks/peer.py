"""Against a peer: the same model and data with dbt-spark's microbatch strategy, side by side.

The peer is installed by this module into its own virtual environment (``benchmarks/.peer-venv``,
git-ignored), never as a project dependency: dbt-core 1.10 and dbt-spark 1.10 with the ``session``
method, which runs a local PySpark (the same Spark 4.3 as ours) with Hive support (a Derby metastore in
the dbt project folder). dbt-spark cannot write Delta tables without the Delta JARs, so its table is
partitioned parquet registered in the Hive metastore; ours is a Delta table committed by delta-rs.

Both sides run as a command in a fresh process, as a user would: ``dbt run`` vs ``incremental-assets run``.
The second peer, SQLMesh on its Spark engine, is set up by peer_sqlmesh.py and interleaved here with both.
"""

from __future__ import annotations

import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

from incremental_assets.model.settings import LISTING_JOB_THRESHOLD

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
VENV = HERE / ".peer-venv"
PEER_REQUIREMENTS = [
    "dbt-core~=1.10.0",
    "dbt-spark[session]~=1.10.0",
    "pyspark[connect]==4.3.0",  # the same Spark as ours, and its Connect client (BENCH_DBT_SPARK=server)
]  # dbt-core 1.11+ downloads a binary at install time

DBT_PROJECT = """\
name: bench
version: "1.0"
config-version: 2
profile: bench
model-paths: [models]
macro-paths: [macros]
"""

PROFILES = """\
bench:
  target: dev
  outputs:
    dev:
      type: spark
      method: session
      host: localhost
      schema: "{{ env_var('BENCH_SCHEMA', 'bench') }}"
      server_side_parameters:
{spark}"""

SPARK_CONF = {  # both peers' local Spark, like ours (run.py): 2 cores, a 4 GB driver, UTC, 4 shuffle partitions
    "spark.master": "local[2]",
    "spark.driver.memory": "4g",
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.sources.partitionOverwriteMode": "dynamic",
    LISTING_JOB_THRESHOLD: "100000",  # files or partition folders listed by the driver, as our local Spark does
}

SOURCES = """\
version: 2
sources:
  - name: raw
    schema: raw
    tables:
      - name: orders
        config: {event_time: order_ts}
      - name: order_items
        config: {event_time: order_ts}
      - name: items
"""

# The body of models/staging/order_lines.sql, with dbt's source() references and its microbatch config:
# dbt filters each source by its event_time to the batch, as our pushdown does.
DBT_MODEL = """\
{{ config(materialized='incremental', incremental_strategy='microbatch', event_time='order_date',
          begin='2024-01-01', batch_size='day', partition_by=['order_date'], file_format='parquet') }}
SELECT
  o.order_id, li.line_no, o.order_date, o.customer_id, li.item_id, it.category, li.quantity, it.unit_price,
  CAST(li.quantity * it.unit_price AS DECIMAL(18, 2)) AS revenue, o.status, o.channel
FROM {{ source('raw', 'orders') }} AS o
JOIN {{ source('raw', 'order_items') }} AS li ON li.order_id = o.order_id AND li.order_date = o.order_date
JOIN {{ source('raw', 'items') }} AS it ON it.item_id = li.item_id
WHERE o.status <> 'cancelled'
"""


def spark_yaml(warehouse: Path, home: Path, indent: int) -> str:
    """SPARK_CONF as YAML lines, with the warehouse folder and the Derby metastore's home."""
    conf = {
        **SPARK_CONF,
        "spark.sql.warehouse.dir": str(warehouse),
        "spark.driver.extraJavaOptions": f"-Duser.timezone=UTC -Dderby.system.home={home}",
    }
    return "".join(f'{" " * indent}{key}: "{value}"\n' for key, value in conf.items())


def ensure_venv(venv: Path = VENV, requirements: list[str] = PEER_REQUIREMENTS, command: str = "dbt") -> Path:
    """Create a peer's virtual environment once, installing again when its requirements change (pip's cache
    makes later runs instant); its command's path."""
    exe, installed = venv / "bin" / command, venv / "requirements.txt"
    if not exe.exists() or not installed.exists() or installed.read_text() != "\n".join(requirements):
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", *requirements], check=True)
        installed.write_text("\n".join(requirements))
    return exe


def model_text() -> str:
    """The example's shop.order_lines without its audits (the peers' models run no tests)."""
    text = (REPO / "models" / "staging" / "order_lines.sql").read_text()
    return re.sub(r"\n  audits \(.*?\n  \)", "", text, flags=re.S)


def our_model(project: Path) -> None:
    """Our side: the example's shop.order_lines without its audits (the dbt model runs no tests)."""
    (project / "models").mkdir(parents=True)
    (project / "models" / "order_lines.sql").write_text(model_text())
    shutil.copy(REPO / "sources.yaml", project / "sources.yaml")


def source_links(root: Path, data: Path) -> Path:
    """The generated sources as folders a Hive table can point at (made once per root, shared by the peers)."""
    links = root / "peer-data"
    if links.exists():
        return links
    items = root / "peer-items"
    items.mkdir()
    shutil.copy(data / "raw" / "items.csv", items / "items.csv")
    # The Delta sources were written once (no removed files): their data files are plain parquet.
    links.mkdir()
    (links / "orders").symlink_to(data / "raw" / "orders")
    (links / "order_items").symlink_to(data / "raw" / "order_items")
    (links / "items").symlink_to(items)
    return links


def source_ddl(links: Path) -> list[str]:
    """Spark SQL registering the sources in a Hive metastore: partitioned parquet tables and the items CSV."""
    ddl = ["CREATE DATABASE IF NOT EXISTS raw"]
    for name in ("orders", "order_items"):
        ddl += [
            f"CREATE TABLE IF NOT EXISTS raw.{name} USING parquet LOCATION '{links / name}'",
            f"MSCK REPAIR TABLE raw.{name}",
        ]
    ddl.append(
        "CREATE TABLE IF NOT EXISTS raw.items (item_id BIGINT, name STRING, category STRING, unit_price DECIMAL(10,2)) "
        f"USING csv OPTIONS (header 'true') LOCATION '{links / 'items'}'"
    )
    return ddl


# BENCH_DBT_SPARK=server: dbt-spark's session method on our long-lived Spark Connect server (PySpark's builder
# takes `spark.remote` among the profile's server_side_parameters), its tables in the server's catalog.
DBT_ON_SERVER = os.environ.get("BENCH_DBT_SPARK", "") == "server"
DBT_SERVER_SPARK = (
    "        spark.remote: \"{{ env_var('BENCH_SPARK_REMOTE') }}\"\n"
    '        spark.sql.sources.partitionOverwriteMode: "dynamic"\n'
)


def dbt_project(root: Path, data: Path) -> Path:
    """The dbt project over the same generated files (parquet under the Delta tables, the items CSV)."""
    project = root / "dbt"
    (project / "models").mkdir(parents=True)
    (project / "macros").mkdir()
    (project / "dbt_project.yml").write_text(DBT_PROJECT)
    spark = DBT_SERVER_SPARK if DBT_ON_SERVER else spark_yaml(root / "dbt-warehouse", project, 8)
    (project / "profiles.yml").write_text(PROFILES.replace("{spark}", spark))
    (project / "models" / "sources.yml").write_text(SOURCES)
    (project / "models" / "order_lines.sql").write_text(DBT_MODEL)
    queries = "".join(f'  {{% do run_query("{sql}") %}}\n' for sql in source_ddl(source_links(root, data)))
    (project / "macros" / "setup.sql").write_text("{% macro setup_sources() %}\n" + queries + "{% endmacro %}\n")
    return project


def fresh_env() -> dict[str, str]:
    """This environment without the project settings or Dagster home a caller may have set: a command then
    uses its own project's defaults."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("INCREMENTAL_ASSETS_", "DAGSTER_HOME"))}


def run(argv: list[str], cwd: Path, env: dict[str, str]) -> float:
    began = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - began
    if done.returncode != 0:
        raise RuntimeError(
            f"{' '.join(argv[:3])} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
    return seconds


def peer_env() -> dict[str, str]:
    """A peer's environment: its own venv's Spark and packages, not ours."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    env.pop("SPARK_HOME", None)
    return env


def checked_days(last: date) -> list[date]:
    """The days whose rows and revenue are compared across the tables: the last one, and 2024-03-20 (the
    day RESULTS.md quotes) when the range holds it."""
    return sorted({last, date(2024, 3, 20)} if date(2024, 3, 20) < last else {last})


def our_day_totals(warehouse: str, last: date) -> dict[str, dict]:
    """``{day: {rows, revenue}}`` of our shop.order_lines table for the checked days."""
    import pyarrow.compute as pc
    from deltalake import DeltaTable

    from incremental_assets.delta.tables import PARTITION_COLUMN, table_uri

    days = checked_days(last)
    # Only the checked days' partitions are read (the table is partitioned by day), not the year.
    partitions = [(PARTITION_COLUMN, "in", [d.isoformat() for d in days])]
    table = DeltaTable(table_uri(warehouse, "shop.order_lines")).to_pyarrow_table(
        partitions=partitions, columns=["order_date", "revenue"]
    )
    totals = {}
    for day in days:
        revenue = table.filter(pc.equal(table["order_date"], day))["revenue"]
        totals[day.isoformat()] = {"rows": len(revenue), "revenue": str(sum(revenue.to_pylist()))}
    return totals


def check_dbt_against_ours(warehouse: str, dbt_table: Path, last: date) -> dict:
    """The dbt table's partitions of the checked days (plain parquet files, one folder per day) against ours;
    raises when they differ."""
    import pyarrow.dataset as ds

    ours = our_day_totals(warehouse, last)
    theirs = {}
    for day in ours:
        revenue = ds.dataset(dbt_table / f"order_date={day}", format="parquet").to_table(columns=["revenue"])["revenue"]
        theirs[day] = {"rows": len(revenue), "revenue": str(sum(revenue.to_pylist()))}
    if theirs != ours:
        raise RuntimeError(f"dbt's table differs from ours: {theirs} vs {ours}")
    print(f"peer: dbt's table equals ours on {', '.join(ours)}: {ours}", flush=True)
    return ours


def _server_env(root: Path) -> dict[str, str]:
    """Our server's settings: the peers' Spark (local[2], a 4 GB driver), its record under one state folder."""
    return {
        **os.environ,
        "DAGSTER_HOME": str(root / "dagster-server"),
        "INCREMENTAL_ASSETS_SPARK_CONF": '{"spark.driver.memory": "4g"}',
    }


def start_our_server(project: Path, root: Path) -> str:
    """``incremental-assets spark start`` for our side (untimed, once); its URL, which every timed command of
    ours is given as its Spark Connect remote (each repetition has its own Dagster home)."""
    import json

    cli = [sys.executable, "-m", "incremental_assets.cli", "spark"]
    seconds = run(cli + ["start", "--project", str(project)], project, _server_env(root))
    done = subprocess.run(
        cli + ["status", "--json", "--project", str(project)],
        cwd=project,
        env=_server_env(root),
        capture_output=True,
        text=True,
        check=True,
    )
    url = json.loads(done.stdout)["url"]
    print(f"peer: our Spark Connect server started in {seconds:.1f}s: {url}", flush=True)
    return url


def stop_our_server(project: Path, root: Path) -> None:
    run(
        [sys.executable, "-m", "incremental_assets.cli", "spark", "stop", "--project", str(project)],
        project,
        _server_env(root),
    )


def scenario_peer(root: Path, *, days: int, reps: int, orders_per_day: int, backfill_reps: int | None = None) -> dict:
    """Daily incremental run and a ``days``-day backfill: each peer (BENCH_PEERS, default dbt and sqlmesh)
    vs incremental-assets, every side as a command in a fresh process, repetitions interleaved."""
    from datetime import date, timedelta

    from incremental_assets.demo import generate_demo_data

    peers = [p.strip() for p in os.environ.get("BENCH_PEERS", "dbt,sqlmesh").split(",") if p.strip()]
    unknown = set(peers) - {"dbt", "sqlmesh"}
    if unknown:
        raise ValueError(f"BENCH_PEERS: unknown peer(s) {', '.join(sorted(unknown))}; known: dbt, sqlmesh")
    ours = root / "ours"
    our_model(ours)
    generate_demo_data(ours, start=date(2024, 1, 1), days=days, orders_per_day=orders_per_day)
    start, end = date(2024, 1, 1), date(2024, 1, 1) + timedelta(days=days)
    last = end - timedelta(days=1)
    backfill_reps = backfill_reps or reps

    cli = [sys.executable, "-m", "incremental_assets.cli", "run", "shop.order_lines", "--project", str(ours)]

    server_url: str | None = None  # BENCH_OURS_SPARK_SERVER=1: our side on its long-lived Spark (started below)

    def ours_env(tag: str) -> dict[str, str]:
        env = {
            **os.environ,
            "INCREMENTAL_ASSETS_WAREHOUSE": str(root / f"wh-{tag}"),
            "DAGSTER_HOME": str(root / f"dagster-{tag}"),
        }
        return {**env, "INCREMENTAL_ASSETS_SPARK_REMOTE": server_url} if server_url else env

    # Each side: (backfill of [start, end), one day [last, end) on top of it), both taking the repetition's tag.
    sides = {
        "ours": (
            lambda tag: run(cli + ["--start", start.isoformat(), "--end", end.isoformat()], ours, ours_env(tag)),
            lambda tag: run(cli + ["--start", last.isoformat(), "--end", end.isoformat()], ours, ours_env(tag)),
        )
    }
    result: dict = {"days": days, "orders_per_day": orders_per_day, "reps": reps, "backfill_reps": backfill_reps}
    if "dbt" in peers:
        dbt = ensure_venv()
        project = dbt_project(root, ours / "data")
        dbt_env = {**peer_env(), "DBT_PROFILES_DIR": str(project), "DBT_SEND_ANONYMOUS_USAGE_STATS": "false"}
        if not DBT_ON_SERVER:  # else once our server is up, in its catalog
            run([str(dbt), "run-operation", "setup_sources"], project, dbt_env)

        def dbt_run(tag: str, since: date) -> float:
            window = ["--event-time-start", since.isoformat(), "--event-time-end", end.isoformat()]
            return run(
                [str(dbt), "run", "--select", "order_lines", *window],
                project,
                {**dbt_env, "BENCH_SCHEMA": f"bench_{tag}"},
            )

        sides["dbt"] = (lambda tag: dbt_run(tag, start), lambda tag: dbt_run(tag, last))
        result["peer"] = "dbt-core 1.10 + dbt-spark 1.10 (session method, microbatch, batch_size day, parquet" + (
            ", on our long-lived Spark Connect server, its in-memory catalog)"
            if DBT_ON_SERVER
            else " + Hive metastore)"
        )
    if "sqlmesh" in peers:
        import peer_sqlmesh

        sides["sqlmesh"] = peer_sqlmesh.side(root, ours / "data", start, end)
        result["peer_sqlmesh"] = peer_sqlmesh.description()

    on_server = ("sqlmesh" in peers and peer_sqlmesh.ON_SERVER) or ("dbt" in peers and DBT_ON_SERVER)
    if on_server and os.environ.get("BENCH_OURS_SPARK_SERVER") != "1":
        raise ValueError("BENCH_SQLMESH_SPARK / BENCH_DBT_SPARK=server use our server: set BENCH_OURS_SPARK_SERVER=1")
    times: dict[str, dict[str, list[float]]] = {who: {"backfill": [], "day": []} for who in sides}
    if os.environ.get("BENCH_OURS_SPARK_SERVER") == "1":
        server_url = start_our_server(ours, root)
        if "sqlmesh" in peers and peer_sqlmesh.ON_SERVER:
            peer_sqlmesh.REMOTE[:] = [server_url]
            result["sqlmesh_spark"] = server_url
        if "dbt" in peers and DBT_ON_SERVER:
            dbt_env["BENCH_SPARK_REMOTE"] = server_url
            run([str(dbt), "run-operation", "setup_sources"], project, dbt_env)
            result["dbt_spark"] = server_url
        # The server's first large query compiles its code paths for every side that shares the server: one
        # year of ours, untimed for the ratios (it would fall on whoever goes first), reported on its own.
        first = sides["ours"][0]("first")
        result["backfill_ours_first_after_start_s"] = round(first, 2)
        print(f"peer: {days}-day backfill, ours, the server's first large query (untimed): {first:.1f}s", flush=True)
    try:
        for rep in range(reps):
            # Later repetitions (past backfill_reps) re-run only the new day on the first backfill's tables.
            tag = f"r{rep}" if rep < backfill_reps else "r0"
            # Alternate who goes first so drift in the machine's load hits every side alike.
            order = list(sides) if rep % 2 == 0 else list(reversed(sides))
            for phase, index in (("backfill", 0), ("day", 1)):
                if phase == "backfill" and rep >= backfill_reps:
                    continue
                for who in order:
                    times[who][phase].append(sides[who][index](tag))
                    label = f"{days}-day backfill" if phase == "backfill" else "one new day"
                    print(f"peer: {label}, {who}: {times[who][phase][-1]:.1f}s", flush=True)
        if "dbt" in peers:
            # On our server dbt's tables are in its catalog's folder (the project's warehouse/_spark_catalog).
            warehouse = ours / "warehouse" / "_spark_catalog" if DBT_ON_SERVER else root / "dbt-warehouse"
            result["dbt_check"] = check_dbt_against_ours(
                ours_env("r0")["INCREMENTAL_ASSETS_WAREHOUSE"], warehouse / "bench_r0.db" / "order_lines", last
            )
        if "sqlmesh" in peers:
            # Once, after the repetitions: the daily `sqlmesh run` on a day the table does not have yet.
            sqlmesh_run = peer_sqlmesh.new_day_run(root, ours / "data", end)
            print(f"peer: one new day, sqlmesh run: {sqlmesh_run:.1f}s", flush=True)
            result["sqlmesh_check"] = peer_sqlmesh.check_against_ours(
                root, ours_env("r0")["INCREMENTAL_ASSETS_WAREHOUSE"], last
            )
    finally:
        if server_url:
            stop_our_server(ours, root)
    if server_url:
        result["ours_spark"] = (
            "the project's long-lived Spark Connect server (incremental-assets spark start), local[2], 4 GB driver"
        )
    med = statistics.median
    result["backfill_ours_s"] = round(med(times["ours"]["backfill"]), 2)
    for who in peers:
        result[f"backfill_{who}_s"] = round(med(times[who]["backfill"]), 2)
        result[f"backfill_{who}_over_ours"] = round(med(times[who]["backfill"]) / med(times["ours"]["backfill"]), 2)
    result["day_ours_s"] = round(med(times["ours"]["day"]), 2)
    for who in peers:
        result[f"day_{who}_s"] = round(med(times[who]["day"]), 2)
        result[f"day_{who}_over_ours"] = round(med(times[who]["day"]) / med(times["ours"]["day"]), 2)
    if "sqlmesh" in peers:
        result["day_sqlmesh_run_s"] = round(sqlmesh_run, 2)
        result["day_sqlmesh_run_over_ours"] = round(sqlmesh_run / med(times["ours"]["day"]), 2)
    print(
        "peer: "
        + ", ".join(
            f"{who}/ours backfill {result[f'backfill_{who}_over_ours']}x, one day {result[f'day_{who}_over_ours']}x"
            for who in peers
        ),
        flush=True,
    )
    return result
