"""Dagster assets from a project: one asset per model, a spec per source.

What a model's asset is comes from the translator (:meth:`~.translator.ModelTranslator.get_asset_spec`);
what its run does, from the ``spark`` resource (:meth:`~.resource.SparkResource.materialize`), for the
windows Dagster's partition key range covers.
"""

import inspect
from typing import Any, Iterator

import dagster as dg

from incremental_assets.model.project import Project
from incremental_assets.model.sql_model import SqlModel
from incremental_assets.orchestration.instance import table_pool
from incremental_assets.orchestration.resource import SparkResource
from incremental_assets.orchestration.table_metadata import ModelColumns
from incremental_assets.orchestration.translator import ModelTranslator
from incremental_assets.plan.analyses import run_size


def build_model_asset(
    project: Project, model: SqlModel, translator: ModelTranslator, columns: ModelColumns | None = None
) -> dg.AssetsDefinition:
    """The model's asset: the translator's spec, check specs and backfill policy, one concurrency pool
    per table, and a body that asks the ``spark`` resource to run the model."""
    spec = translator.get_asset_spec(project, model, columns)
    decorate = dg.asset(
        **asset_arguments(spec),
        backfill_policy=translator.get_backfill_policy(model, run_size(project, model)),
        check_specs=translator.get_check_specs(project, model, spec.key),
        pool=table_pool(model.name),
    )

    def _materialize(context: dg.AssetExecutionContext, spark: SparkResource) -> Iterator[dg.MaterializeResult]:
        yield from spark.materialize(context, project, model, translator)

    # Every model's function has the same signature: given, Dagster need not inspect it again per model.
    _materialize.__signature__ = _signature(_materialize)  # type: ignore[attr-defined]  # reason: inspect reads it; typing has no such attribute
    return decorate(_materialize)


def asset_arguments(spec: dg.AssetSpec) -> dict[str, Any]:
    """``dg.asset``'s arguments for one spec (a ``multi_asset`` of it would name the op and its output otherwise)."""
    kind_tags = {f"dagster/kind/{kind}" for kind in spec.kinds}
    return {
        "key": spec.key,
        "deps": spec.deps,
        "description": spec.description,
        "metadata": spec.metadata,
        "group_name": spec.group_name,
        "code_version": spec.code_version,
        "automation_condition": spec.automation_condition,
        "owners": spec.owners,
        "tags": {name: value for name, value in spec.tags.items() if name not in kind_tags},
        "kinds": spec.kinds,
        "partitions_def": spec.partitions_def,
        "freshness_policy": spec.freshness_policy,
    }


_SIGNATURES: list[inspect.Signature] = []


def _signature(function: Any) -> inspect.Signature:
    if not _SIGNATURES:
        _SIGNATURES.append(inspect.signature(function))
    return _SIGNATURES[0]
