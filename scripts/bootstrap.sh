#!/usr/bin/env bash
# Create .venv in the repository (once) and install the package with its test extras into it.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
stamp=.venv/.installed-$(cat pyproject.toml | sha256sum | cut -c1-16)
if [ ! -f "$stamp" ]; then
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet -e '.[test]'
  rm -f .venv/.installed-* && touch "$stamp"
fi
if ! command -v java >/dev/null 2>&1; then
  echo "Java 17 is required by Spark: install a JDK 17 (e.g. apt-get install openjdk-17-jre-headless)" >&2
  exit 1
fi
