"""The analysis package is pure: importing and running it loads neither dagster nor pyspark."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import sys
from datetime import timedelta
import sqlglot
from incremental_assets.analysis import analyze_query, pushdown
q = sqlglot.parse_one("SELECT ts FROM raw.e", read="spark")
analyze_query(q, model_name="m", time_column="ts", time_columns={"raw.e": "ts"}, interval=timedelta(hours=1))
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("dagster", "pyspark", "py4j", "deltalake"))
print(",".join(heavy))
"""


def test_analysis_imports_no_engine():
    result = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "", f"the analysis pulled in: {result.stdout.strip()}"


def test_the_probe_would_notice_an_engine_import():
    # Guard against a probe that cannot fail: the same check does see pyspark once it is imported.
    probe = PROBE.replace("import sqlglot\n", "import sqlglot\nimport pyspark\n", 1)
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert "pyspark" in result.stdout
