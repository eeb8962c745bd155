"""incremental_assets: SQL models in a folder become Dagster assets run on Spark, stored as Delta tables.

The public API is imported lazily, so importing the pure core (models, windows, analysis) never pulls
in Dagster or Spark.
"""

from typing import Any

__all__ = ["IncrementalAssetsComponent", "ModelTranslator", "build_definitions", "load_project"]


def __getattr__(name: str) -> Any:
    if name == "IncrementalAssetsComponent":
        from incremental_assets.component import IncrementalAssetsComponent

        return IncrementalAssetsComponent
    if name == "ModelTranslator":
        from incremental_assets.translator import ModelTranslator

        return ModelTranslator
    if name == "build_definitions":
        from incremental_assets.assets import build_definitions

        return build_definitions
    if name == "load_project":
        from incremental_assets.project import load_project

        return load_project
    raise AttributeError(f"module 'incremental_assets' has no attribute {name!r}")
