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


def test_component_yaml_sets_key_prefix_group_tags_and_automation(tmp_path, monkeypatch):
    write_project(tmp_path / "shop_models", {"sources.yaml": SOURCES, **MODELS})
    dg_root = write_project(
        tmp_path / "lake_platform",
        {
            "pyproject.toml": """
                [project]
                name = "lake_platform"
                version = "0.1"
                [tool.dg]
                directory_type = "project"
                [tool.dg.project]
                root_module = "lake_platform"
            """,
            "lake_platform/__init__.py": "",
            "lake_platform/defs/__init__.py": "",
            "lake_platform/defs/shop/defs.yaml": """
                type: incremental_assets.IncrementalAssetsComponent
                attributes:
                  project: ../../../../shop_models
                  key_prefix: [lake]
                  group_name: shop_models
                  tags: {team: data}
                  automation_condition: on_cron
                  sensors: false
            """,
        },
    )
    monkeypatch.syspath_prepend(str(dg_root))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    defs = dg.load_from_defs_folder(project_root=dg_root)
    keys = {k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys()}
    assert keys == {"lake/raw/events", "lake/s/hourly", "lake/s/daily", "lake/s/weekly", "lake/s/total"}
    daily = defs.resolve_assets_def(dg.AssetKey(["lake", "s", "daily"]))
    spec = daily.specs_by_key[daily.key]
    assert spec.group_name == "shop_models" and spec.tags["team"] == "data"
    assert spec.automation_condition is not None and "cron" in spec.automation_condition.get_label().lower()
    assert {d.asset_key for d in spec.deps} == {dg.AssetKey(["lake", "s", "hourly"])}
    # Column lineage points at the prefixed upstream keys too.
    lineage = spec.metadata["dagster/column_lineage"].deps_by_column
    assert all(dep.asset_key.path[0] == "lake" for deps in lineage.values() for dep in deps)
