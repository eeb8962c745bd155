"""The Dagster Component: a dg project adds an incremental_assets project with one defs.yaml."""

from __future__ import annotations

import textwrap

import dagster as dg
from test_dagster import MODELS, SOURCES

from conftest import write_project


def dg_project_files(name: str) -> dict[str, str]:
    """The files of an empty dg project whose package is ``name`` (defs in ``name/defs``)."""
    return {
        "pyproject.toml": f"""
            [project]
            name = "{name}"
            version = "0.1"
            [tool.dg]
            directory_type = "project"
            [tool.dg.project]
            root_module = "{name}"
        """,
        f"{name}/__init__.py": "",
        f"{name}/defs/__init__.py": "",
    }


def load_component(tmp_path, monkeypatch, name: str, attributes: str) -> dg.Definitions:
    """The definitions of a dg project ``name`` whose one defs.yaml loads the test project with ``attributes``."""
    write_project(tmp_path / "shop_models", {"sources.yaml": SOURCES, **MODELS})
    defs_yaml = "type: incremental_assets.IncrementalAssetsComponent\nattributes:\n  project: ../../../../shop_models\n"
    dg_root = write_project(
        tmp_path / name,
        {
            **dg_project_files(name),
            f"{name}/defs/shop/defs.yaml": defs_yaml + textwrap.indent(textwrap.dedent(attributes), "  "),
        },
    )
    monkeypatch.syspath_prepend(str(dg_root))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    return dg.load_from_defs_folder(project_root=dg_root)


def test_defs_yaml_loads_the_project_as_a_component(tmp_path, monkeypatch):
    defs = load_component(tmp_path, monkeypatch, "my_platform", "sensors: false\n")
    keys = {k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys()}
    assert keys == {"raw/events", "s/hourly", "s/daily", "s/weekly", "s/total"}
    daily = defs.resolve_assets_def(dg.AssetKey(["s", "daily"]))
    assert daily.partitions_def.get_first_partition_key() == "2024-01-01"
    assert {s.name for s in defs.schedules} >= {"s__daily_schedule", "s__weekly_schedule"}
    assert not list(defs.sensors or [])


def test_component_yaml_sets_key_prefix_group_tags_and_automation(tmp_path, monkeypatch):
    defs = load_component(
        tmp_path,
        monkeypatch,
        "lake_platform",
        """
        key_prefix: [lake]
        group_name: shop_models
        tags: {team: data}
        automation_condition: on_cron
        sensors: false
    """,
    )
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
