#!/usr/bin/env bash
# The main job on the embedded default (local Spark, Delta warehouse in ./warehouse, Dagster home in ./.dagster):
# install, generate the example shop's data from the models' start up to the last complete hour before now,
# backfill every model (so no interval is missing), print the interval status.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
ia=.venv/bin/incremental-assets
# The example models start on 2024-01-01 (hourly_orders on 2024-12-01): the data starts there too, so no
# interval is empty by construction. DEMO_START moves it (earlier intervals are then empty, not missing).
START="${DEMO_START:-2024-01-01}"
ORDERS="${DEMO_ORDERS_PER_DAY:-200}"
echo "== generating source data from ${START} up to the last complete hour (${ORDERS} orders/day) into ./data"
$ia demo-data --start "$START" --until now --orders-per-day "$ORDERS"
echo "== validating the models"
$ia validate
echo "== backfilling every model: only the missing intervals, up to the last complete one"
$ia run --auto
# The example's Python asset (definitions.py) downstream of shop.order_lines: every complete day in one run,
# with Dagster's own command, on the same instance.
LAST_DAY="$(date -u -d yesterday +%F)"
echo "== building the Python asset analytics/daily_channel_revenue for 2024-01-01...${LAST_DAY}"
DAGSTER_HOME="$PWD/.dagster" VIRTUAL_ENV="$PWD/.venv" .venv/bin/dg launch \
  --assets analytics/daily_channel_revenue --partition-range "2024-01-01...${LAST_DAY}"
echo "== interval status"
$ia status
cat <<TXT

Done. The tables are Delta tables under ./warehouse; runs are recorded in ./.dagster.
Open the UI (same instance, so the CLI runs above are there; the command also starts the daemon that
runs the queue, the sensors and the schedules), with the project's long-lived Spark up first so the runs
the daemon launches share one JVM (stop it with: $ia spark stop):
  $ia spark start
  source .venv/bin/activate && DAGSTER_HOME=$PWD/.dagster dg dev -h 127.0.0.1 -p 3000
Then watch new data arrive (README, "Watch the automation pick up new data"):
  $ia demo-data --append --hours 1 --orders-per-day $ORDERS     # or: --append  (up to now)
TXT
