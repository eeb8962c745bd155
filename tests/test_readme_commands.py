"""The README's UI command is the one Dagster recommends (`dg dev`), and `dg` in this repository resolves
the code location it serves: the example project's models and its Python asset."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

DG = Path(sys.executable).parent / "dg"


def test_readme_opens_the_ui_with_dg_dev():
    text = (REPO / "README.md").read_text()
    command = re.search(r"^DAGSTER_HOME=\S+ (.+?)\s+#", text, re.MULTILINE)
    assert command is not None and command.group(1) == "dg dev -h 127.0.0.1 -p 3000"
    assert "`dagster dev -h 127.0.0.1" in text  # still named, for project folders that are not dg projects


@pytest.mark.slow
def test_dg_resolves_the_code_location_dg_dev_serves(tmp_path):
    env = {
        **os.environ,
        "VIRTUAL_ENV": str(Path(sys.executable).parent.parent),
        "PYTHONPATH": str(REPO),
        "DAGSTER_HOME": str(tmp_path),
    }
    done = subprocess.run(
        [str(DG), "list", "defs", "--json"], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    keys = {a["asset_key"] for a in json.loads(done.stdout)["assets"]}
    assert {"analytics/daily_channel_revenue", "shop/order_lines", "raw/orders"} <= keys
