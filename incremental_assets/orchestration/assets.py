"""Dagster assets from a project: one asset per model, a spec per source, a Spark resource.

>>> # doctest: +SKIP
>>> defs = build_definitions("path/to/project")
"""

import os
import time
import warnings
from datetime import timezone
from pathlib import Path
from typing import Any, Optional

import dagster as dg
from dagster_pyspark import LazyPySparkResource
from pydantic import PrivateAttr

from incremental_assets import checks, storage
from incremental_assets.errors import WindowError
from incremental_assets.execution import Executor, RunResult, build_spark_session
from incremental_assets.model import IncrementalByTimeRange, SqlModel
from incremental_assets.plan import RunPlan, full_refresh_target, needs_rebuild, plan_rebuild, plan_run, plan_window
from incremental_assets.project import Project, Source, load_project
from incremental_assets.settings import Settings, is_secret, load_settings, redact_url
from incremental_assets.time_window import TimeWindow, ceil, floor, merge, subtract, to_utc
from incremental_assets.translator import ModelTranslator


ALLOW_DOWNGRADE_TAG = "incremental_assets/allow_downgrade"
# ISO-8601 instant a run treats as its execution time (SCD type 2 closes deleted rows at it; macros see it).
EXECUTION_TIME_TAG = "incremental_assets/execution_time"
# A run tagged so rebuilds the model from its start: one commit replacing the whole table.
REBUILD_TAG = "incremental_assets/rebuild"
# The fingerprint the model's table was built with ("" for none), as the launcher read it from the table's
# latest commit: the run does not read it again. Runs launched without it (the Dagster UI) read it themselves.
BUILT_WITH_TAG = "incremental_assets/built_with"


def upstream_wait() -> tuple[int, float]:
    """How long a run waits for upstream runs that rebuild what it reads: retries x seconds (default an hour)."""
    return (
        int(os.environ.get("INCREMENTAL_ASSETS_UPSTREAM_WAIT_RETRIES", "240")),
        float(os.environ.get("INCREMENTAL_ASSETS_UPSTREAM_WAIT_SECONDS", "15")),
    )


class SparkResource(LazyPySparkResource):
    """dagster-pyspark's lazy session resource, extended with Spark Connect (``remote``).

    The session is created on first use and shared by every asset of the process, so a run over many
    intervals or models pays Spark's start-up once.
    """

    remote: Optional[str] = None
    # Credentials (settings whose names look secret, a Connect URL's token) are not part of the
    # resource's config, which Dagster stores and shows: they are read from the project's settings
    # (the environment, or its settings file) when the session starts.
    project_dir: Optional[str] = None
    _session: Any = PrivateAttr(default=None)

    def _init_session(self) -> None:
        if self._spark_session is None:
            conf, remote = dict(self.spark_config), self.remote
            if self.project_dir:
                settings = load_settings(self.project_dir)
                conf.update({k: v for k, v in settings.spark_config().items() if is_secret(k)})
                remote = settings.spark_remote
            self._spark_session = build_spark_session(conf, remote=remote)

    @classmethod
    def from_settings(cls, settings: Settings) -> "SparkResource":
        public = {k: v for k, v in settings.spark_config().items() if not is_secret(k)}
        return cls(spark_config=public, remote=redact_url(settings.spark_remote), project_dir=str(settings.project_dir))


def window_of(context: dg.AssetExecutionContext) -> TimeWindow:
    tw = context.partition_time_window
    return TimeWindow(to_utc(tw.start).astimezone(timezone.utc), to_utc(tw.end).astimezone(timezone.utc))


def materialized_windows(instance: dg.DagsterInstance, key: dg.AssetKey, partitions: dg.TimeWindowPartitionsDefinition) -> list[TimeWindow]:
    """The intervals Dagster has recorded as materialized, merged into ranges."""
    keys = instance.get_materialized_partitions(key)
    windows = []
    for pk in keys:
        try:
            tw = partitions.time_window_for_partition_key(pk)
        except Exception:  # a key of an older partitions definition
            continue
        windows.append(TimeWindow(to_utc(tw.start), to_utc(tw.end)))
    return merge(windows)


def missing_upstream(
    instance: dg.DagsterInstance, project: Project, model: SqlModel, window: TimeWindow, translator: ModelTranslator
) -> list[str]:
    """Describe upstream intervals the window needs, lookback included, that Dagster has not recorded
    (backfills do not check intervals outside the range they run)."""
    problems = []
    for upstream in project.upstream_models(model):
        if not isinstance(upstream.kind, IncrementalByTimeRange):
            continue
        partitions = translator.get_partitions_def(upstream)
        assert isinstance(partitions, dg.TimeWindowPartitionsDefinition) and upstream.start is not None
        bound = project.input_bound(model.name, upstream.name)
        needed = window.widen(bound.before, bound.after) if bound is not None else window
        unit = upstream.interval_unit or "day"
        need_start = max(floor(needed.start, unit), upstream.start)
        need_end = ceil(needed.end, unit)
        if upstream.end:
            need_end = min(need_end, upstream.end)
        if need_end <= need_start:
            continue
        gaps = subtract(TimeWindow(need_start, need_end), materialized_windows(instance, translator.get_asset_key(upstream), partitions))
        if gaps:
            problems.append(f"{upstream.name} is missing {', '.join(str(g) for g in gaps[:5])}" + (" ..." if len(gaps) > 5 else ""))
    return problems


ACTIVE_RUN_STATUSES = [
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
]


def pending_upstream_runs(
    instance: dg.DagsterInstance, project: Project, model: SqlModel, window: TimeWindow | None, translator: ModelTranslator, own_run_id: str
) -> list[str]:
    """Other runs, queued or running, that are rebuilding upstream data this run would read.

    A sensor or a user may launch an upstream re-run and its downstream runs together; the downstream
    must not read the upstream's old rows while the new ones are being written, so it waits for them.
    """
    keys = {translator.get_asset_key(u): u for u in project.upstream_models(model)}
    if not keys:
        return []
    pending = []
    for record in instance.get_run_records(filters=dg.RunsFilter(statuses=ACTIVE_RUN_STATUSES)):
        run = record.dagster_run
        if run.run_id == own_run_id:
            continue
        for key in set(run.asset_selection or ()) & set(keys):
            upstream = keys[key]
            start, end = run.tags.get("dagster/asset_partition_range_start"), run.tags.get("dagster/asset_partition_range_end")
            partitions = translator.get_partitions_def(upstream)
            if window is not None and start and end and isinstance(partitions, dg.TimeWindowPartitionsDefinition):
                first = partitions.time_window_for_partition_key(start)
                last = partitions.time_window_for_partition_key(end)
                bound = project.input_bound(model.name, upstream.name)
                needed = window.widen(bound.before, bound.after) if bound is not None else window
                if not TimeWindow(to_utc(first.start), to_utc(last.end)).overlaps(needed):
                    continue
            pending.append(f"{upstream.name} in run {run.run_id[:8]} ({run.status.value.lower()})")
    return pending


def rebuild_plans(
    context: dg.AssetExecutionContext, project: Project, model: SqlModel, window: TimeWindow | None, translator: ModelTranslator, allow_downgrade: bool
) -> list[RunPlan] | None:
    """Plans rebuilding an incremental model from its start, when the run asks for it (``REBUILD_TAG``)
    or the model's definition changed since its table was built; None for a plain window run.

    A rebuild must cover every interval Dagster has recorded, from the model's start: it replaces the
    whole table, and a shorter one would drop intervals that stay recorded as done."""
    if window is None or not model.is_incremental:
        return None
    tags = context.run.tags
    asked = tags.get(REBUILD_TAG, "").lower() == "true"
    built = None
    if not asked:
        if BUILT_WITH_TAG in tags:
            built = tags[BUILT_WITH_TAG] or None
        else:
            built = storage.built_with(storage.table_uri(project.settings.warehouse, model.name))
        if not needs_rebuild(model, built):
            return None
    partitions = translator.get_partitions_def(model)
    assert isinstance(partitions, dg.TimeWindowPartitionsDefinition) and model.start is not None
    recorded = materialized_windows(context.instance, translator.get_asset_key(model), partitions)
    covered_end = max((w.end for w in recorded), default=window.end)
    if window.start != model.start or window.end < covered_end:
        reason = "a full refresh was asked" if asked else f"model {model.name} changed since its table was built"
        raise WindowError(
            f"{reason}: it is rebuilt from its start, so the run must cover [{model.start.date()}, {covered_end.date()}) at least, "
            f"not {window}. Run `incremental-assets run {model.name} --full-refresh` (or --auto), or backfill all its partitions; "
            "set forward_only true in the kind to keep the existing intervals instead."
        )
    if not asked:
        context.log.info(f"{model.name}: definition changed (table built with {str(built)[:12]}, now {model.fingerprint[:12]}): rebuilding from its start")
    return plan_rebuild(project, model, window.end, allow_downgrade=allow_downgrade)


def materialization_metadata(results: list[RunResult], seconds: float) -> dict[str, Any]:
    last = results[-1]
    rows = sum(r.rows or 0 for r in results)
    meta: dict[str, Any] = {
        "write": last.write,
        "duration_seconds": round(seconds, 3),
        "spark_seconds": round(sum(r.seconds for r in results), 3),
        "batches": len(results),
        "sql": dg.MetadataValue.md(f"```sql\n{last.sql}\n```"),
    }
    if last.window is not None:
        meta["window_start"] = results[0].window.start.isoformat()  # type: ignore[union-attr]
        meta["window_end"] = last.window.end.isoformat()  # type: ignore[union-attr]
    if last.write != "view":
        meta["rows_written"] = rows
        meta["delta_version"] = last.version
        meta["files_written"] = sum(r.files for r in results)
        meta["table_uri"] = dg.MetadataValue.path(last.table or "")
        if last.write == "replace_table":
            meta["dagster/row_count"] = rows
    for name, value in last.details.items():
        meta[name] = value if value is not None else "none"
    return meta


def build_model_asset(project: Project, model: SqlModel, translator: ModelTranslator) -> dg.AssetsDefinition:
    deps = []
    for name in model.depends_on:
        if name == model.name:
            continue
        if name in project.models:
            upstream = project.models[name]
            bound = project.input_bound(model.name, name)
            deps.append(
                dg.AssetDep(translator.get_asset_key(upstream), partition_mapping=translator.get_partition_mapping(model, upstream, bound))
            )
        else:
            deps.append(dg.AssetDep(translator.get_source_key(project.sources[name])))
    key = translator.get_asset_key(model)

    @dg.asset(
        key=key,
        deps=deps,
        group_name=translator.get_group_name(model),
        description=translator.get_description(model),
        owners=translator.get_owners(model),
        tags=translator.get_tags(model),
        kinds=translator.get_kinds(model),
        code_version=translator.get_code_version(model),
        partitions_def=translator.get_partitions_def(model),
        backfill_policy=translator.get_backfill_policy(model, project.analysis(model.name)),
        metadata=translator.get_metadata(model),
        check_specs=checks.check_specs(project, model, key),
    )
    def _materialize(context: dg.AssetExecutionContext, spark: SparkResource) -> dg.MaterializeResult:
        began = time.perf_counter()
        window = window_of(context) if context.has_partition_key_range or context.has_partition_key else None
        pending = pending_upstream_runs(context.instance, project, model, window, translator, context.run_id)
        if pending:
            context.log.info(f"{model.name}: waiting for upstream runs to finish: {'; '.join(pending)}")
            retries, seconds = upstream_wait()
            raise dg.RetryRequested(max_retries=retries, seconds_to_wait=seconds)
        if window is not None:
            missing = missing_upstream(context.instance, project, model, window, translator)
            if missing:
                raise WindowError(
                    f"{model.name} {window}: upstream intervals are not materialized: " + "; ".join(missing)
                    + ". Run them first (select +" + model.name + ")."
                )
        allow_downgrade = context.run.tags.get(ALLOW_DOWNGRADE_TAG, "").lower() == "true"
        execution_time = to_utc(context.run.tags[EXECUTION_TIME_TAG]) if context.run.tags.get(EXECUTION_TIME_TAG) else None
        executor = Executor(spark.spark_session, project)
        plans = rebuild_plans(context, project, model, window, translator, allow_downgrade)
        if not plans and window:
            plans = plan_window(project, model, window, allow_downgrade=allow_downgrade, execution_time=execution_time)
        elif not plans:
            target = executor.target_state(model.name)
            if target is not None and context.run.tags.get(REBUILD_TAG, "").lower() == "true":
                target = full_refresh_target(model)
                context.log.info(f"{model.name}: full refresh: rebuilding the table from scratch, committed as one transaction")
            elif target is not None and target.exists and target.is_backfill(model):
                context.log.info(f"{model.name}: definition changed since its table was built: rebuilding it from scratch")
            plans = [plan_run(project, model, None, execution_time=execution_time, target=target)]
        auditor = checks.WindowAuditor(spark.spark_session, project, model, key, context)
        results = []
        if plans[0].write == "rebuild":
            context.log.info(f"{model.name}: rebuilding {window} in {len(plans)} run(s), committed as one transaction")
            results.append(executor.execute_together(plans, run_id=context.run_id, before_commit=auditor.before_commit(window)))
        else:
            for plan in plans:
                if plan.downgraded:
                    context.log.warning(f"{model.name} is refused by the safety analysis: rebuilding {plan.window} in full (allow downgrade)")
                context.log.info(f"{model.name}: running {plan.window or 'full'}")
                results.append(executor.execute(plan, run_id=context.run_id, before_commit=auditor.before_commit(plan.window)))
        meta = materialization_metadata(results, time.perf_counter() - began)
        meta["fingerprint"] = model.fingerprint
        if plans[-1].safety_class:
            meta["safety_class"] = plans[-1].safety_class + (" (downgraded to a full refresh)" if plans[-1].downgraded else "")
        check_results = auditor.results(window, view_sql=plans[-1].sql if plans[-1].write == "view" else None)
        return dg.MaterializeResult(metadata=meta, check_results=check_results)

    return _materialize


def build_source_spec(source: Source, translator: ModelTranslator) -> dg.AssetSpec:
    meta: dict[str, Any] = {"format": source.format, "location": dg.MetadataValue.path(source.location)}
    if source.time_column:
        meta["time_column"] = source.time_column
        meta["interval_unit"] = source.interval_unit
    if source.columns:
        meta["dagster/column_schema"] = dg.TableSchema(columns=[dg.TableColumn(n, t) for n, t in source.columns.items()])
    return dg.AssetSpec(key=translator.get_source_key(source), group_name="sources", metadata=meta, kinds={source.format})


def build_definitions(
    project: Project | str | Path | None = None, *, translator: ModelTranslator | None = None, **extra: Any
) -> dg.Definitions:
    """Definitions for a project: model assets, source specs and the ``spark`` resource."""
    if not isinstance(project, Project):
        project = load_project(project or os.environ.get("INCREMENTAL_ASSETS_PROJECT") or os.getcwd())
    translator = translator or ModelTranslator()
    assets: list[Any] = [build_source_spec(s, translator) for s in project.sources.values()]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dg.BetaWarning)  # backfill_policy is beta; we rely on it knowingly
        assets += [build_model_asset(project, m, translator) for m in project.ordered()]
    from incremental_assets.schedules import build_schedules, model_jobs
    from incremental_assets.sensors import build_sensors

    jobs = model_jobs(project, translator)
    extra.setdefault("schedules", build_schedules(project, translator, jobs))
    extra.setdefault("sensors", build_sensors(project, translator, jobs))
    return dg.Definitions(
        assets=assets,
        resources={"spark": SparkResource.from_settings(project.settings)},
        executor=dg.in_process_executor,
        **extra,
    )

