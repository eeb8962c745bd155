#!/bin/sh
# Installs what the end-to-end UI test drives: Debian's chromium and the Python playwright package.
set -e
if ! command -v chromium >/dev/null 2>&1; then
  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium
fi
PYTHON="${PYTHON:-python}"
"$PYTHON" -c "import playwright" 2>/dev/null || "$PYTHON" -m pip install -q playwright
