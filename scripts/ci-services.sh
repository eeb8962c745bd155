#!/usr/bin/env bash
# What the cluster tests (pytest -m cluster, tests/test_cluster.py) need beyond the project's Python
# packages, installed when missing on a fresh Debian machine:
#   - a Java 17 runtime (Spark's master, workers, Connect server and drivers);
#   - PostgreSQL's server binaries (initdb, pg_ctl) and runuser (to run the server as `postgres` when
#     we are root).
# Nothing is left running: each test starts its own Spark processes and its own throwaway PostgreSQL
# cluster on 127.0.0.1 and stops them. Idempotent, quiet and quick when everything is there.
# Runs as root in CI (no stdin); elsewhere it uses `sudo -n` when it has to install something.
set -euo pipefail
cd "$(dirname "$0")/.."

has_postgres_server() {
  command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1 && return 0
  compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null
}

missing=()
command -v java >/dev/null 2>&1 || missing+=(openjdk-17-jre-headless)
has_postgres_server || missing+=(postgresql)
command -v runuser >/dev/null 2>&1 || missing+=(util-linux)

if ((${#missing[@]})); then
  if [ "$(id -u)" -eq 0 ]; then
    sudo=()
  elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    sudo=(sudo -n)
  else
    echo "ci-services: need ${missing[*]} but cannot install them (not root, no passwordless sudo)" >&2
    exit 1
  fi
  echo "ci-services: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update -qq </dev/null
  # Debian's postinst creates and (where it can) starts a default cluster on port 5432; the tests
  # never use it, they make their own on a free port.
  "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" </dev/null >/dev/null
  has_postgres_server || { echo "ci-services: PostgreSQL server binaries still missing after install" >&2; exit 1; }
fi

# The Python side (dagster-postgres, the Spark Connect client's grpc/protobuf/zstandard packages) comes
# with the project's test extras; install them if this venv predates them.
if [ -x .venv/bin/python ] && ! .venv/bin/python -c "import dagster_postgres, grpc_status, google.rpc, zstandard" 2>/dev/null; then
  echo "ci-services: installing the test extras into .venv"
  .venv/bin/python -m pip install --quiet -e '.[test]'
fi

java_version=$(java -version 2>&1 | head -n1)
pg_bin=$(command -v initdb 2>/dev/null || compgen -G "/usr/lib/postgresql/*/bin/initdb" | sort -V | tail -n1)
echo "ci-services: ready (${java_version}; $("$pg_bin" --version))"
