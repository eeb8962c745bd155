"""Dagster assets from a project: one asset per model, a spec per source.

What a model's asset is comes from the translator (:meth:`~.translator.ModelTranslator.get_asset_spec`);
what its run does, from the ``spark`` resource (:meth:`~.resource.SparkResource.materialize`), for the
windows Dagster's partition key range covers.

Each model's asset is the ``AssetsDefinition`` that ``@dg.asset`` would make of its spec (the same op name,
inputs, outputs, pool, checks and backfill policy), built from Dagster's definition classes directly: the
decorator inspects the body's signature and type hints again for every model, which a project of
thousands of models pays for at every load.
"""

import functools
from typing import Any, Iterator, Mapping

import dagster as dg
from dagster._core.definitions.input import InputDefinition  # an op's ins may be given as definitions

from incremental_assets.model.project import Project
from incremental_assets.model.sql_model import SqlModel
from incremental_assets.orchestration.instance import table_pool
from incremental_assets.orchestration.table_metadata import ModelColumns
from incremental_assets.orchestration.translator import ModelTranslator
from incremental_assets.plan.analyses import run_size


def build_model_asset(
    project: Project, model: SqlModel, translator: ModelTranslator, columns: ModelColumns | None = None
) -> dg.AssetsDefinition:
    """The model's asset: the translator's spec, check specs and backfill policy, one concurrency pool
    per table, and a body that asks the ``spark`` resource to run the model."""
    spec = translator.get_asset_spec(project, model, columns)
    checks = {check.get_python_identifier(): check for check in translator.get_check_specs(project, model, spec.key)}
    inputs = {_input_name(dep.asset_key): dep.asset_key for dep in spec.deps}

    def _materialize(context: dg.AssetExecutionContext, _inputs: Mapping[str, Any]) -> Iterator[dg.MaterializeResult]:
        spark: Any = context.resources.spark
        yield from spark.materialize(context, project, model, translator)

    op = dg.OpDefinition(
        compute_fn=_materialize,
        name=spec.key.to_python_identifier(),
        description=spec.description,
        ins={name: _upstream_input(name) for name in inputs},  # type: ignore[misc]  # reason: OpDefinition takes an In or its definition (it checks which)
        outs={"result": dg.Out(code_version=spec.code_version), **{name: _CHECK_OUT for name in checks}},
        required_resource_keys={"spark"},
        pool=table_pool(model.name),
        code_version=spec.code_version,
    )
    return dg.AssetsDefinition(
        keys_by_input_name=inputs,
        keys_by_output_name={"result": spec.key},
        node_def=op,
        specs=[spec],
        check_specs_by_output_name=checks,
        backfill_policy=translator.get_backfill_policy(model, run_size(project, model)),
        can_subset=False,
    )


@functools.lru_cache(maxsize=65536)
def _upstream_input(name: str) -> InputDefinition:
    """The input of an upstream asset named ``name``, made once for every model reading it (each definition of a
    Nothing input resolves its type again)."""
    return dg.In(dg.Nothing).to_definition(name)


_CHECK_OUT = dg.Out(dagster_type=None, is_required=True)


def _input_name(key: dg.AssetKey) -> str:
    """The input ``@dg.asset`` names an upstream asset's (``deps``) by."""
    return "_".join(key.path).replace("-", "_").replace(".", "_")
