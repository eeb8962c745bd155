"""incremental_assets: SQL models in a folder become Dagster assets run on Spark, stored as Delta tables.

The public API is imported lazily, so importing the pure core (model, load, analysis, plan) never
pulls in Dagster or Spark. The stages, in the order data flows::

    model/          what a model IS: kinds, models, intervals, audits, settings (pure values)
    load/           files -> models: header, query, macros, kinds, seeds, Python models, sources, project
    analysis/       pure sqlglot passes: safety, lookback, pushdown, classification
    plan/           (project, model, window) -> RunPlan; rebuild decisions, schema changes
    delta/          the only deltalake user: tables, staging, commit modes, lock, vacuum
    spark/          the only pyspark user: session, inputs, write strategies, executor, audits, tests
    orchestration/  Dagster: translator, assets, checks, schedules, sensors, instance, runner
    cli/            the ``incremental-assets`` command
"""

from typing import Any

__all__ = ["IncrementalAssetsComponent", "ModelTranslator", "build_definitions", "load_project"]

_PUBLIC = {
    "IncrementalAssetsComponent": "incremental_assets.orchestration.component",
    "ModelTranslator": "incremental_assets.orchestration.translator",
    "build_definitions": "incremental_assets.orchestration.build_definitions",
    "load_project": "incremental_assets.load.project",
}


def __getattr__(name: str) -> Any:
    if name in _PUBLIC:
        import importlib

        return getattr(importlib.import_module(_PUBLIC[name]), name)
    raise AttributeError(f"module 'incremental_assets' has no attribute {name!r}")


def __dir__() -> list[str]:
    # `dg` lists a registry module's components from dir(module): the lazy names must be in it.
    return sorted(set(globals()) | set(__all__))
