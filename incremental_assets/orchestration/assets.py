"""Dagster assets from a project: one asset per model, a spec per source.

The asset body asks what to run (plans, from :mod:`incremental_assets.plan`) and hands it to the Spark
executor; which windows a run covers comes from Dagster (its partition key range).
"""

import inspect
import time
from datetime import timezone
from typing import Any, Iterator

import dagster as dg

from incremental_assets import delta
from incremental_assets.errors import (
    AuditFailedError,
    DamagedTableError,
    DuplicateKeyError,
    ModelFileError,
    ProjectError,
    SelectionError,
    SourceDataError,
    UnsafeIncrementalError,
    WindowError,
)
from incremental_assets.model.intervals import TimeWindow, to_utc
from incremental_assets.model.project import Project, Source
from incremental_assets.model.settings import read_env_settings
from incremental_assets.model.sql_model import SqlModel
from incremental_assets.orchestration import checks, tags
from incremental_assets.orchestration.apply import confirm_unaffected, kept_data_version, stale_partitions, unaffected_downstream
from incremental_assets.orchestration.instance import (
    materialized_windows,
    missing_upstream,
    pending_upstream_runs,
    table_pool,
)
from incremental_assets.orchestration.partition_keys import time_partitions
from incremental_assets.orchestration.resource import SparkResource
from incremental_assets.orchestration.table_metadata import ModelColumns, table_row_count, written_schema
from incremental_assets.orchestration.translator import ModelTranslator
from incremental_assets.plan.analyses import input_bound, run_size
from incremental_assets.plan.rebuild import (
    check_rebuild_window,
    full_refresh_target,
    rebuild_reason,
)
from incremental_assets.plan.run_plan import (
    RunPlan,
    WriteKind,
    plan_rebuild,
    plan_run,
    plan_window,
)
from incremental_assets.spark.executor import Executor, RunResult
from incremental_assets.spark.session import run_project_statements


def upstream_wait() -> tuple[int, float]:
    """How long a run waits for upstream runs that rebuild what it reads: retries x seconds (default an hour)."""
    env = read_env_settings()
    return env.upstream_wait_retries, env.upstream_wait_seconds


def window_of(context: dg.AssetExecutionContext) -> TimeWindow:
    tw = context.partition_time_window
    return TimeWindow(to_utc(tw.start).astimezone(timezone.utc), to_utc(tw.end).astimezone(timezone.utc))


def rebuild_plans(
    context: dg.AssetExecutionContext, project: Project, model: SqlModel, window: TimeWindow | None, translator: ModelTranslator, allow_downgrade: bool
) -> list[RunPlan] | None:
    """Plans rebuilding an incremental model from its start, when the run asks for it (``REBUILD_TAG``)
    or the model's definition changed since its table was built; None for a plain window run."""
    if window is None or not model.is_incremental:
        return None
    run_tags = context.run.tags
    asked = tags.is_set(run_tags, tags.REBUILD_TAG)
    built = None
    if not asked:
        if tags.BUILT_WITH_TAG in run_tags:
            built = run_tags[tags.BUILT_WITH_TAG] or None
        else:
            built = delta.built_with(project.settings.table_location(model.name))
    reason = rebuild_reason(model, asked=asked, built_with=built)
    if reason is None:
        return None
    partitions = translator.get_partitions_def(model)
    partitions = time_partitions(partitions, model.name)
    recorded = materialized_windows(context.instance, translator.get_asset_key(model), partitions)
    check_rebuild_window(model, window, max((w.end for w in recorded), default=window.end), reason)
    if not asked:
        context.log.info(f"{model.name}: definition changed (table built with {str(built)[:12]}, now {model.fingerprint[:12]}): rebuilding from its start")
    return plan_rebuild(project, model, window.end, allow_downgrade=allow_downgrade)


def unaffected_before_rebuild(
    context: dg.AssetExecutionContext, project: Project, model: SqlModel, translator: ModelTranslator
) -> tuple[dict[str, set[str]], str | None]:
    """Before a rebuild for a changed definition commits (the table still holds the previous one): the
    downstream models the plan says it leaves unchanged, each with its partitions already stale, and the
    data version the rebuild keeps when it leaves every model reading it unchanged (see :mod:`.apply`)."""
    if project.settings.environment:
        return {}, None  # an environment's models are rebuilt with what they break; production's records are not its to confirm
    run_tags = context.run.tags
    if tags.BUILT_WITH_TAG in run_tags:
        built = run_tags[tags.BUILT_WITH_TAG] or None
    else:
        built = delta.built_with(project.settings.table_location(model.name))
    if tags.is_set(run_tags, tags.FULL_REFRESH_TAG) or built in (None, model.fingerprint):
        return {}, None  # no change of definition (a full refresh asked): the data may change anywhere
    kept = {name: stale_partitions(context.instance, project, project.models[name], translator) for name in unaffected_downstream(project, model)}
    if kept:
        context.log.info(f"{model.name}: {', '.join(sorted(kept))} read none of its changed columns: not recomputed")
    return kept, kept_data_version(context.instance, project, model, translator, set(kept))


def unpartitioned_plan(context: dg.AssetExecutionContext, project: Project, model: SqlModel, executor: Executor, execution_time: Any) -> RunPlan:
    """The plan of a FULL, VIEW, SEED or merge-style run, from the committed state of its table."""
    target = executor.target_state(model.name)
    if target is not None and tags.is_set(context.run.tags, tags.REBUILD_TAG):
        target = full_refresh_target(model)
        context.log.info(f"{model.name}: full refresh: rebuilding the table from scratch, committed as one transaction")
    elif target is not None and target.exists and target.is_backfill(model):
        context.log.info(f"{model.name}: definition changed since its table was built: rebuilding it from scratch")
    return plan_run(project, model, None, execution_time=execution_time, target=target)


def check_upstreams(context: dg.AssetExecutionContext, project: Project, model: SqlModel, window: TimeWindow | None, translator: ModelTranslator) -> None:
    """Wait (by a retry) for upstream runs rebuilding what this run reads; fail naming upstream intervals
    the window needs that are not materialized (Dagster's backfills do not check outside their range)."""
    pending = pending_upstream_runs(context.instance, project, model, window, translator, context.run_id)
    if pending:
        context.log.info(f"{model.name}: waiting for upstream runs to finish: {'; '.join(pending)}")
        retries, seconds = upstream_wait()
        raise dg.RetryRequested(max_retries=retries, seconds_to_wait=seconds)
    if window is not None:
        missing = missing_upstream(context.instance, project, model, window, translator)
        if missing:
            raise WindowError(upstream_message(context.run.tags, project, model, window, missing, translator))


def upstream_message(run_tags: Any, project: Project, model: SqlModel, window: TimeWindow, missing: list[str], translator: ModelTranslator) -> str:
    """Why a window cannot run yet, in the words of where the run was launched: the CLI's selection
    syntax for a CLI run, assets and partitions to materialize for a run launched in Dagster."""
    head = f"{model.name} {window}: upstream intervals are not materialized: " + "; ".join(missing) + "."
    if run_tags.get(tags.LAUNCHED_BY_TAG) == "cli":
        return head + f" Run them first (incremental-assets run +{model.name})."
    names = [m.split(" ", 1)[0] for m in missing]
    keys = ", ".join(translator.get_asset_key(project.models[n]).to_user_string() for n in names if n in project.models)
    return head + (
        f" Materialize those partitions of {keys} first, or launch this backfill again with the upstream assets"
        " selected too (Dagster runs them first, in dependency order)."
    )


def materialization_metadata(results: list[RunResult], seconds: float) -> dict[str, Any]:
    """What the run did, named as the run's (``run_*``): a run over many intervals records one
    materialization per interval, and these facts are the same in each (each interval's own window and
    row count are added by :func:`report_intervals`)."""
    last = results[-1]
    rows = sum(r.rows or 0 for r in results)
    meta: dict[str, Any] = {
        "write": str(last.write),
        "run_seconds": round(seconds, 3),
        "run_spark_seconds": round(sum(r.seconds for r in results), 3),
        "run_batches": len(results),
        "run_sql": dg.MetadataValue.md(f"```sql\n{last.sql}\n```"),
    }
    if last.window is not None:
        meta["run_window_start"] = results[0].window.start.isoformat()  # type: ignore[union-attr]
        meta["run_window_end"] = last.window.end.isoformat()  # type: ignore[union-attr]
    if last.write != WriteKind.VIEW:
        meta["run_rows_written"] = rows
        meta["run_files_written"] = sum(r.files for r in results)
        meta["delta_version"] = last.version
    for name, value in last.details.items():
        meta[name] = value if value is not None else "none"
    return meta


def table_facts(model: SqlModel, result: RunResult) -> dict[str, Any]:
    """The table after the run, from its Delta log: location, row count and the columns it holds."""
    if result.table is None:
        return {}
    meta: dict[str, Any] = {"dagster/uri": result.table, "dagster/table_name": model.name}
    count = table_row_count(result.table)
    if count is not None:
        meta["dagster/row_count"] = count
    schema = written_schema(result.table, model.column_descriptions)
    if schema is not None:
        meta["dagster/column_schema"] = schema
    return meta


def report_intervals(context: dg.AssetExecutionContext, model: SqlModel, results: list[RunResult]) -> None:
    """Each partition's own window and row count (``dagster/partition_row_count``, 0 for an interval
    without rows): a run over many intervals records one materialization per interval, each with its own."""
    partitions = context.assets_def.partitions_def
    partitions = time_partitions(partitions, model.name)
    rows: dict[str, int] = {}
    for result in results:
        rows.update(result.interval_rows)
    for pk in context.partition_keys:
        own = partitions.time_window_for_partition_key(pk)
        start, end = to_utc(own.start), to_utc(own.end)
        context.add_asset_metadata(
            {
                "window_start": start.isoformat(),
                "window_end": end.isoformat(),
                "dagster/partition_row_count": rows.get(model.unit.partition_key(start), 0),
            },
            partition_key=pk,
        )


def model_deps(project: Project, model: SqlModel, translator: ModelTranslator) -> list[dg.AssetDep]:
    """The asset's dependencies: upstream models (with partition mappings that include the lookback) and sources."""
    deps = []
    for name in model.depends_on:
        if name == model.name:
            continue
        if name in project.models:
            upstream = project.models[name]
            mapping = translator.get_partition_mapping(model, upstream, input_bound(project, model.name, name))
            deps.append(dg.AssetDep(translator.get_asset_key(upstream), partition_mapping=mapping))
        else:
            deps.append(dg.AssetDep(translator.get_source_key(project.sources[name])))
    return deps


def spec_metadata(project: Project, model: SqlModel, translator: ModelTranslator, columns: ModelColumns | None) -> dict[str, object]:
    """The asset's metadata: the model's properties and its table's (name, location, columns, lineage, code)."""

    def key_of(table: str) -> dg.AssetKey | None:  # only the tables this model reads are looked up
        if table in project.models:
            return translator.get_asset_key(project.models[table])
        return translator.get_source_key(project.sources[table]) if table in project.sources else None

    uri = project.settings.table_location(model.name)
    return {**translator.get_metadata(model), **translator.get_table_metadata(model, uri, columns, key_of)}


# What a run fails on the same way every time until its input changes (a model, a source file, an audit,
# upstream intervals not there yet): not retried by Dagster's run retries. Anything else (a Spark server
# that went away, a killed run worker) is.
FINAL_ERRORS = (
    AuditFailedError, DamagedTableError, DuplicateKeyError, ModelFileError, ProjectError, SelectionError, SourceDataError,
    UnsafeIncrementalError, WindowError,
)


def _not_retried_when_final(context: dg.AssetExecutionContext, steps: Iterator[dg.MaterializeResult]) -> Iterator[dg.MaterializeResult]:
    try:
        yield from steps
    except FINAL_ERRORS:
        context.instance.add_run_tags(context.run_id, {tags.RETRY_ON_FAILURE_TAG: "false"})
        raise


def build_model_asset(project: Project, model: SqlModel, translator: ModelTranslator, columns: ModelColumns | None = None) -> dg.AssetsDefinition:
    key = translator.get_asset_key(model)
    decorate = dg.asset(
        key=key,
        deps=model_deps(project, model, translator),
        group_name=translator.get_group_name(model),
        description=translator.get_description(model),
        owners=translator.get_owners(model),
        tags=translator.get_tags(model),
        kinds=translator.get_kinds(model),
        code_version=translator.get_code_version(model),
        partitions_def=translator.get_partitions_def(model),
        backfill_policy=translator.get_backfill_policy(model, run_size(project, model)),
        metadata=spec_metadata(project, model, translator, columns),
        freshness_policy=translator.get_freshness_policy(model),
        automation_condition=translator.get_automation_condition(model),
        check_specs=checks.check_specs(project, model, key),
        pool=table_pool(model.name),
    )

    def _materialize(context: dg.AssetExecutionContext, spark: SparkResource) -> Iterator[dg.MaterializeResult]:
        yield from _not_retried_when_final(context, _compute(context, spark))

    def _compute(context: dg.AssetExecutionContext, spark: SparkResource) -> Iterator[dg.MaterializeResult]:
        began = time.perf_counter()
        window = window_of(context) if context.has_partition_key_range or context.has_partition_key else None
        check_upstreams(context, project, model, window, translator)
        allow_downgrade = tags.is_set(context.run.tags, tags.ALLOW_DOWNGRADE_TAG)
        execution_time = to_utc(context.run.tags[tags.EXECUTION_TIME_TAG]) if context.run.tags.get(tags.EXECUTION_TIME_TAG) else None
        executor = Executor(spark.spark_session, project)
        plans = rebuild_plans(context, project, model, window, translator, allow_downgrade)
        kept, data_version = unaffected_before_rebuild(context, project, model, translator) if plans else ({}, None)
        if not plans and window:
            plans = plan_window(project, model, window, allow_downgrade=allow_downgrade, execution_time=execution_time)
        elif not plans:
            plans = [unpartitioned_plan(context, project, model, executor, execution_time)]
        auditor = checks.WindowAuditor(spark.spark_session, project, model, key, context)
        results = []
        if plans[0].write == WriteKind.REBUILD:
            context.log.info(f"{model.name}: rebuilding {window} in {len(plans)} run(s), committed as one transaction")
            results.append(executor.execute_together(plans, run_id=context.run_id, before_commit=auditor.before_commit(window)))
        else:
            for plan in plans:
                if plan.downgraded:
                    context.log.warning(f"{model.name} is refused by the safety analysis: rebuilding {plan.window} in full (allow downgrade)")
                context.log.info(f"{model.name}: running {plan.window or 'full'}")
                results.append(executor.execute(plan, run_id=context.run_id, before_commit=auditor.before_commit(plan.window)))
        run_project_statements(spark.spark_session, project, "after_all")
        meta = materialization_metadata(results, time.perf_counter() - began)
        meta.update(table_facts(model, results[-1]))
        meta["fingerprint"] = model.fingerprint
        if plans[-1].safety_class:
            meta["safety_class"] = plans[-1].safety_class + (" (downgraded to a full refresh)" if plans[-1].downgraded else "")
        if window is not None and model.is_incremental:
            report_intervals(context, model, results)
        check_results = auditor.results(window, view_sql=plans[-1].sql if plans[-1].write == WriteKind.VIEW else None)
        if model.has_table:
            # A run commits its own fingerprint, except a forward_only model's window run (its table keeps the older one).
            built = delta.built_with(project.settings.table_location(model.name)) if model.forward_only else model.fingerprint
            check_results.append(checks.definition_result(key, model, built))
        yield dg.MaterializeResult(metadata=meta, check_results=check_results, data_version=dg.DataVersion(data_version) if data_version else None)
        # The rebuild is recorded now: downstream models it leaves unchanged are confirmed after it.
        for line in confirm_unaffected(context.instance, project, model, translator, kept):
            context.log.info(line)

    # Every model's function has the same signature: given, Dagster need not inspect it again per model.
    _materialize.__signature__ = _signature(_materialize)  # type: ignore[attr-defined]
    return decorate(_materialize)


_SIGNATURES: list[inspect.Signature] = []


def _signature(function: Any) -> inspect.Signature:
    if not _SIGNATURES:
        _SIGNATURES.append(inspect.signature(function))
    return _SIGNATURES[0]


def build_source_spec(source: Source, translator: ModelTranslator) -> dg.AssetSpec:
    meta: dict[str, Any] = {
        "format": source.format,
        "location": dg.MetadataValue.path(source.location),
        "dagster/table_name": source.name,
        "dagster/uri": source.location,
    }
    if source.time_column:
        meta["time_column"] = source.time_column
        meta["interval_unit"] = source.interval_unit
    if source.columns:
        meta["dagster/column_schema"] = dg.TableSchema(columns=[dg.TableColumn(n, t) for n, t in source.columns.items()])
    return dg.AssetSpec(key=translator.get_source_key(source), group_name="sources", metadata=meta, kinds={source.format})
