"""Against a peer: the same model and data with dbt-spark's microbatch strategy, side by side.

The peer is installed by this module into its own virtual environment (``benchmarks/.peer-venv``,
git-ignored), never as a project dependency: dbt-core 1.10 and dbt-spark 1.10 with the ``session``
method, which runs a local PySpark (the same Spark 4.3 as ours) with Hive support (a Derby metastore in
the dbt project folder). dbt-spark cannot write Delta tables without the Delta JARs, so its table is
partitioned parquet registered in the Hive metastore; ours is a Delta table committed by delta-rs.

Both sides run as a command in a fresh process, as a user would: ``dbt run`` vs ``incremental-assets run``.
"""

from __future__ import annotations

import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
VENV = HERE / ".peer-venv"
PEER_REQUIREMENTS = ["dbt-core~=1.10.0", "dbt-spark[session]~=1.10.0"]  # dbt-core 1.11+ downloads a binary at install time

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
        spark.master: "local[2]"
        spark.driver.memory: "4g"
        spark.ui.enabled: "false"
        spark.sql.shuffle.partitions: "4"
        spark.sql.session.timeZone: "UTC"
        spark.sql.sources.partitionOverwriteMode: "dynamic"
        spark.sql.warehouse.dir: "{warehouse}"
        spark.driver.extraJavaOptions: "-Duser.timezone=UTC -Dderby.system.home={home}"
"""

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

SETUP_MACRO = """\
{% macro setup_sources(data) %}
  {% do run_query("CREATE DATABASE IF NOT EXISTS raw") %}
  {% for name in ["orders", "order_items"] %}
    {% do run_query("CREATE TABLE IF NOT EXISTS raw." ~ name ~ " USING parquet LOCATION '" ~ data ~ "/" ~ name ~ "'") %}
    {% do run_query("MSCK REPAIR TABLE raw." ~ name) %}
  {% endfor %}
  {% do run_query("CREATE TABLE IF NOT EXISTS raw.items (item_id BIGINT, name STRING, category STRING, unit_price DECIMAL(10,2)) USING csv OPTIONS (header 'true') LOCATION '" ~ data ~ "/items'") %}
{% endmacro %}
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


def ensure_venv() -> Path:
    """Create the peer's virtual environment once (pip's cache makes later runs instant)."""
    dbt = VENV / "bin" / "dbt"
    if not dbt.exists():
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        subprocess.run([str(VENV / "bin" / "pip"), "install", "-q", *PEER_REQUIREMENTS], check=True)
    return dbt


def our_model(project: Path) -> None:
    """Our side: the example's shop.order_lines without its audits (the dbt model runs no tests)."""
    text = (REPO / "models" / "staging" / "order_lines.sql").read_text()
    text = re.sub(r"\n  audits \(.*?\n  \)", "", text, flags=re.S)
    (project / "models").mkdir(parents=True)
    (project / "models" / "order_lines.sql").write_text(text)
    shutil.copy(REPO / "sources.yaml", project / "sources.yaml")


def dbt_project(root: Path, data: Path) -> Path:
    """The dbt project over the same generated files (parquet under the Delta tables, the items CSV)."""
    project = root / "dbt"
    (project / "models").mkdir(parents=True)
    (project / "macros").mkdir()
    (project / "dbt_project.yml").write_text(DBT_PROJECT)
    (project / "profiles.yml").write_text(PROFILES.replace("{warehouse}", str(root / "dbt-warehouse")).replace("{home}", str(project)))
    (project / "models" / "sources.yml").write_text(SOURCES)
    (project / "models" / "order_lines.sql").write_text(DBT_MODEL)
    (project / "macros" / "setup.sql").write_text(SETUP_MACRO)
    items = root / "dbt-items"
    items.mkdir()
    shutil.copy(data / "raw" / "items.csv", items / "items.csv")
    # The Delta sources were written once (no removed files): their data files are plain parquet.
    links = root / "dbt-data"
    links.mkdir()
    (links / "orders").symlink_to(data / "raw" / "orders")
    (links / "order_items").symlink_to(data / "raw" / "order_items")
    (links / "items").symlink_to(items)
    return project


def run(argv: list[str], cwd: Path, env: dict[str, str]) -> float:
    began = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - began
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:3])} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return seconds


def scenario_peer(root: Path, *, days: int, reps: int, backfill_reps: int | None = None) -> dict:
    """Daily incremental run and a ``days``-day backfill: dbt-spark microbatch vs incremental-assets."""
    from datetime import date, timedelta

    from incremental_assets.demo import generate_demo_data

    dbt = ensure_venv()
    ours = root / "ours"
    our_model(ours)
    orders_per_day = int(os.environ.get("BENCH_ORDERS_PER_DAY", "5000"))
    generate_demo_data(ours, start=date(2024, 1, 1), days=days, orders_per_day=orders_per_day)
    project = dbt_project(root, ours / "data")
    start, end = date(2024, 1, 1), date(2024, 1, 1) + timedelta(days=days)
    last = end - timedelta(days=1)

    dbt_env = {**os.environ, "DBT_PROFILES_DIR": str(project), "DBT_SEND_ANONYMOUS_USAGE_STATS": "false"}
    dbt_env.pop("PYTHONPATH", None)
    dbt_env.pop("SPARK_HOME", None)
    run([str(dbt), "run-operation", "setup_sources", "--args", f"{{data: '{root / 'dbt-data'}'}}"], project, dbt_env)
    cli = [sys.executable, "-m", "incremental_assets.cli", "run", "shop.order_lines", "--project", str(ours)]

    def ours_env(tag: str) -> dict[str, str]:
        return {**os.environ, "INCREMENTAL_ASSETS_WAREHOUSE": str(root / f"wh-{tag}"), "DAGSTER_HOME": str(root / f"dagster-{tag}")}

    def dbt_tag_env(tag: str) -> dict[str, str]:
        return {**dbt_env, "BENCH_SCHEMA": f"bench_{tag}"}

    dbt_window = ["--event-time-start", start.isoformat(), "--event-time-end", end.isoformat()]
    dbt_day = ["--event-time-start", last.isoformat(), "--event-time-end", end.isoformat()]
    our_window = ["--start", start.isoformat(), "--end", end.isoformat()]
    our_day = ["--start", last.isoformat(), "--end", end.isoformat()]

    backfill_ours, backfill_dbt, day_ours, day_dbt = [], [], [], []
    for rep in range(reps):
        tag = f"r{rep}"
        # Alternate who goes first so drift in the machine's load hits both sides alike.
        pair = [("ours", lambda: run(cli + our_window, ours, ours_env(tag))),
                ("dbt", lambda: run([str(dbt), "run", "--select", "order_lines", *dbt_window], project, dbt_tag_env(tag)))]
        if rep >= (backfill_reps or reps):  # later repetitions re-run only the new day on the first backfill's tables
            tag = "r0"
            pair = []
        for who, fn in pair if rep % 2 == 0 else reversed(pair):
            (backfill_ours if who == "ours" else backfill_dbt).append(fn())
            print(f"peer: {days}-day backfill, {who}: {(backfill_ours if who == 'ours' else backfill_dbt)[-1]:.1f}s", flush=True)
        pair = [("ours", lambda: run(cli + our_day, ours, ours_env(tag))),
                ("dbt", lambda: run([str(dbt), "run", "--select", "order_lines", *dbt_day], project, dbt_tag_env(tag)))]
        for who, fn in pair if rep % 2 == 0 else reversed(pair):
            (day_ours if who == "ours" else day_dbt).append(fn())
            print(f"peer: one new day, {who}: {(day_ours if who == 'ours' else day_dbt)[-1]:.1f}s", flush=True)
    med = statistics.median
    result = {
        "days": days,
        "orders_per_day": orders_per_day,
        "reps": reps,
        "backfill_reps": backfill_reps or reps,
        "peer": "dbt-core 1.10 + dbt-spark 1.10 (session method, microbatch, batch_size day, parquet + Hive metastore)",
        "backfill_ours_s": round(med(backfill_ours), 2),
        "backfill_dbt_s": round(med(backfill_dbt), 2),
        "backfill_dbt_over_ours": round(med(backfill_dbt) / med(backfill_ours), 2),
        "day_ours_s": round(med(day_ours), 2),
        "day_dbt_s": round(med(day_dbt), 2),
        "day_dbt_over_ours": round(med(day_dbt) / med(day_ours), 2),
    }
    print(f"peer: backfill dbt/ours {result['backfill_dbt_over_ours']}x, one day dbt/ours {result['day_dbt_over_ours']}x", flush=True)
    return result
