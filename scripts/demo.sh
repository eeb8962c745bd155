#!/usr/bin/env bash
# The main job on the embedded default (local Spark, Delta warehouse in ./warehouse, Dagster home in ./.dagster):
# install, generate a year of the example shop's data, backfill every model, print the interval status.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
ia=.venv/bin/incremental-assets
DAYS="${DEMO_DAYS:-366}"
ORDERS="${DEMO_ORDERS_PER_DAY:-200}"
echo "== generating ${DAYS} days of source data (${ORDERS} orders/day) into ./data"
$ia demo-data --days "$DAYS" --orders-per-day "$ORDERS"
echo "== validating the models"
$ia validate
echo "== backfilling every model: only the missing intervals up to 2025-01-01"
$ia run --auto --end 2025-01-01
echo "== interval status"
$ia status --until 2025-01-01
cat <<TXT

Done. The tables are Delta tables under ./warehouse; runs are recorded in ./.dagster.
Open the UI (same instance, so the CLI runs above are there):
  DAGSTER_HOME=$PWD/.dagster .venv/bin/dagster dev -h 127.0.0.1 -p 3000
TXT
