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


@pytest.mark.slow
def test_readmes_sensor_command_turns_on_the_sensor_dg_dev_shows(tmp_path):
    """The README's shell command for the automation sensor acts on the code location `dg dev` serves (a
    sensor's on/off state belongs to its code location's name: `-m incremental_assets.definitions` would
    turn on a sensor of another location, which the UI never shows)."""
    import dagster as dg
    from dagster._core.scheduler.instigation import InstigatorStatus

    text = (REPO / "README.md").read_text()
    found = re.search(r"`DAGSTER_HOME=\$PWD/\.dagster \.venv/bin/(dagster sensor start [^`]+)`", text)
    assert found is not None, "the README's sensor command"
    args = found.group(1).split()
    env = {**os.environ, "PYTHONPATH": str(REPO), "DAGSTER_HOME": str(tmp_path)}
    done = subprocess.run(
        [str(Path(sys.executable).parent / args[0]), *args[1:]],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    location = re.search(r'^code_location_name = "(\w+)"', (REPO / "pyproject.toml").read_text(), re.MULTILINE)[1]
    with dg.DagsterInstance.from_config(str(tmp_path)) as instance:
        on = {
            (s.origin.repository_origin.code_location_origin.location_name, s.name)
            for s in instance.all_instigator_state()
            if s.status == InstigatorStatus.RUNNING
        }
    assert on == {(location, args[3])}, on
