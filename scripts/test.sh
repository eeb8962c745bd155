#!/usr/bin/env bash
# Install what the tests need, then run the whole suite (real Spark, real Delta tables, real Dagster instance).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
exec .venv/bin/python -m pytest "$@"
