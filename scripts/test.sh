#!/usr/bin/env bash
# Install what the tests need, then run the whole suite (real Spark, real Delta tables, real Dagster instance).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
# Format, lint and types first: they take seconds and name the line to fix.
.venv/bin/ruff format --check --quiet .
.venv/bin/ruff check --quiet .
.venv/bin/mypy
# Java, PostgreSQL server binaries (the cluster tests start their own servers on 127.0.0.1).
bash scripts/ci-services.sh
# Debian's chromium for the end-to-end UI test.
PYTHON=.venv/bin/python sh scripts/ci-browser.sh
# Two test processes side by side, each with its own SparkSession and a whole test file at a time
# (TEST_WORKERS=0: every test in this one process).
exec .venv/bin/python -m pytest -n "${TEST_WORKERS:-2}" --dist loadfile "$@"
