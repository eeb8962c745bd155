"""`dg` in a subprocess: the repository is a dg project, and `dg scaffold defs` knows the Component."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from test_component import dg_project_files

from conftest import REPO, write_project

DG = str(Path(sys.executable).parent / "dg")


def dg(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("DAGSTER_HOME", "INCREMENTAL_ASSETS_PROJECT")}
    return subprocess.run([DG, *args], cwd=cwd, capture_output=True, text=True, timeout=300, env=env)


def test_dg_lists_and_checks_the_example_project():
    listed = dg("list", "defs", "--json", cwd=REPO)
    assert listed.returncode == 0, listed.stderr[-2000:]
    defs = json.loads(listed.stdout)
    keys = {a["asset_key"] for a in defs["assets"]}
    assert {"shop/order_lines", "shop/daily_channel_orders", "raw/orders", "analytics/daily_channel_revenue"} <= keys
    sources = {a["asset_key"]: a.get("source") for a in defs["assets"]}
    assert sources["shop/order_lines"].endswith("models/staging/order_lines.sql:1")
    assert {s["name"] for s in defs["sensors"]} == {"incremental_assets_automation", "python_assets_automation"}
    checked = dg("check", "defs", cwd=REPO)
    assert checked.returncode == 0 and "All definitions loaded successfully" in checked.stdout + checked.stderr, (
        checked.stderr[-2000:]
    )


def test_dg_scaffold_defs_creates_a_working_component(tmp_path):
    root = write_project(
        tmp_path / "my_platform",
        {
            **dg_project_files("my_platform"),
            "my_platform/definitions.py": """
                from pathlib import Path

                import dagster as dg


                @dg.definitions
                def defs():
                    return dg.load_from_defs_folder(project_root=Path(__file__).parent.parent)
            """,
        },
    )
    listed = dg("list", "components", "--json", cwd=root)
    assert "incremental_assets.IncrementalAssetsComponent" in listed.stdout, listed.stderr[-2000:]
    made = dg("scaffold", "defs", "incremental_assets.IncrementalAssetsComponent", "my_models", cwd=root)
    assert made.returncode == 0, made.stderr[-2000:]
    folder = root / "my_platform" / "defs" / "my_models"
    assert "type: incremental_assets.IncrementalAssetsComponent" in (folder / "defs.yaml").read_text()
    assert (folder / "models" / "numbers.sql").exists()
    # The translator settings a user adds to the YAML take effect.
    (folder / "defs.yaml").write_text(
        textwrap.dedent("""
        type: incremental_assets.IncrementalAssetsComponent
        attributes:
          project: .
          key_prefix: [lake]
          group_name: starter_models
          sensors: false
    """)
    )
    checked = dg("check", "defs", cwd=root)
    assert checked.returncode == 0, checked.stderr[-2000:]
    defs = json.loads(dg("list", "defs", "--json", cwd=root).stdout)
    assert [(a["asset_key"], a["group_name"]) for a in defs["assets"]] == [("lake/starter/numbers", "starter_models")]
    assert defs["sensors"] == []
