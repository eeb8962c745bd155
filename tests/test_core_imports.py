"""The pure core (time windows, models, projects, macros, planning) imports no engine."""

import subprocess
import sys

PURE = [
    "incremental_assets.errors",
    "incremental_assets.time_window",
    "incremental_assets.header",
    "incremental_assets.model",
    "incremental_assets.settings",
    "incremental_assets.project",
    "incremental_assets.macros",
    "incremental_assets.plan",
    "incremental_assets.keyed_kinds",
    "incremental_assets.python_models",
    "incremental_assets.seeds",
    "incremental_assets.schema_changes",
]


def test_pure_core_imports_neither_dagster_nor_pyspark():
    code = (
        "import sys\n"
        + "".join(f"import {m}\n" for m in PURE)
        + "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('dagster', 'pyspark', 'deltalake', 'py4j'))\n"
        + "print(','.join(heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "", f"the pure core pulled in engines: {out}"
