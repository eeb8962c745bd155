"""The Dagster Component: a dg project adds an incremental_assets project with one defs.yaml."""

from __future__ import annotations

import dagster as dg

from test_dagster import MODELS, SOURCES
from conftest import write_project


def test_defs_yaml_loads_the_project_as_a_component(tmp_path, monkeypatch):
    models = write_project(tmp_path / "shop_models", {"sources.yaml": SOURCES, **MODELS})
    dg_root = write_project(
        tmp_path / "my_platform",
        {
            "pyproject.toml": """
                [project]
                name = "my_platform"
                version = "0.1"
                [tool.dg]
                directory_type = "project"
                [tool.dg.project]
                root_module = "my_platform"
                registry_modules = ["incremental_assets.*"]
            """,
            "my_platform/__init__.py": "",
            "my_platform/defs/__init__.py": "",
            "my_platform/defs/shop/defs.yaml": f"""
                type: incremental_assets.IncrementalAssetsComponent
                attributes:
                  project: ../../../../shop_models
                  sensors: false
            """,
        },
    )
    monkeypatch.syspath_prepend(str(dg_root))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    defs = dg.load_from_defs_folder(project_root=dg_root)
    keys = {k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys()}
    assert keys == {"raw/events", "s/hourly", "s/daily", "s/weekly", "s/total"}
    daily = defs.resolve_assets_def(dg.AssetKey(["s", "daily"]))
    assert daily.partitions_def.get_first_partition_key() == "2024-01-01"
    assert {s.name for s in defs.schedules} >= {"s__daily_schedule", "s__weekly_schedule"}
    assert not list(defs.sensors or [])
