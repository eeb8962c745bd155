"""The ``spark`` resource every model asset uses: one lazily started session per process, and what a
model's run does with it (:meth:`SparkResource.materialize`).

A run checks its upstream intervals, asks :mod:`incremental_assets.plan` what to run (a rebuild from the
model's start, the windows Dagster's partition key range covers, or one unpartitioned run), hands the
plans to the Spark executor with the model's audits, and reports what it committed.
"""

import contextlib
import os
import time
from datetime import timezone
from typing import Any, Iterator, Optional

import dagster as dg
from dagster_pyspark import LazyPySparkResource
from pydantic import PrivateAttr

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
from incremental_assets.load.settings import load_settings
from incremental_assets.model.intervals import TimeWindow, to_utc
from incremental_assets.model.project import Project
from incremental_assets.model.settings import Settings, is_secret, read_env_settings, redact_url
from incremental_assets.model.sql_model import SqlModel
from incremental_assets.orchestration import checks, tags
from incremental_assets.orchestration.apply import (
    confirm_unaffected,
    kept_data_version,
    new_data_windows,
    partitions_reading,
    stale_partitions,
    unaffected_downstream,
)
from incremental_assets.orchestration.instance import materialized_windows, missing_upstream, pending_upstream_runs
from incremental_assets.orchestration.partition_keys import time_partitions
from incremental_assets.orchestration.run_coordinator import OWN_SPARK_AFTER_UPSTREAM, SPARK_TAG
from incremental_assets.orchestration.table_metadata import table_row_count, written_schema
from incremental_assets.orchestration.translator import ModelTranslator
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
from incremental_assets.spark.connect_server import spark_remote
from incremental_assets.spark.executor import Executor, RunResult
from incremental_assets.spark.session import SparkSession, build_spark_session, run_project_statements


class SparkResource(LazyPySparkResource):
    """dagster-pyspark's lazy session resource, extended with Spark Connect (``remote``).

    The session is created on first use and shared by every asset of the process, so a run over many
    intervals or models pays Spark's start-up once; with the project's Spark Connect server up
    (``incremental-assets spark start``) it pays none.
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
                # The project's running Spark Connect server, when no remote is configured (checked when
                # the session starts, so a server started after `dagster dev` is used by the next run).
                remote = spark_remote(settings)
            self._spark_session = build_spark_session(conf, remote=remote)

    def materialize(
        self, context: dg.AssetExecutionContext, project: Project, model: SqlModel, translator: ModelTranslator
    ) -> Iterator[dg.MaterializeResult]:
        """Run ``model`` over the partitions ``context`` names (the whole model when unpartitioned) and
        report it: upstream intervals waited for or refused, a changed definition rebuilt from its start,
        the model's audits as its asset checks. An error a retry cannot fix is not retried (:data:`FINAL_ERRORS`)."""
        if context.run.tags.get(SPARK_TAG) == OWN_SPARK_AFTER_UPSTREAM:
            _behind_the_runs_it_follows()
        yield from _not_retried_when_final(context, run_model(context, self.spark_session, project, model, translator))

    @classmethod
    def from_settings(cls, settings: Settings) -> "SparkResource":
        public = {k: v for k, v in settings.spark_config().items() if not is_secret(k)}
        return cls(spark_config=public, remote=redact_url(settings.spark_remote), project_dir=str(settings.project_dir))


FOLLOWER_NICENESS = 5


def _behind_the_runs_it_follows() -> None:
    """A run that waits for upstream runs starts its own Spark while they compute: at a lower CPU priority,
    which its JVM inherits, so that its start takes the CPU their work leaves (it computes after them)."""
    if os.getpriority(os.PRIO_PROCESS, 0) == 0:
        with contextlib.suppress(OSError):
            os.nice(FOLLOWER_NICENESS)


UPSTREAM_LOOK_SECONDS = 0.25  # how often a run waiting for upstream runs looks at them


def upstream_wait() -> tuple[int, float]:
    """How long a run waits for upstream runs that rebuild what it reads: tries x seconds (default an hour)."""
    env = read_env_settings()
    return env.upstream_wait_retries, env.upstream_wait_seconds


def window_of(context: dg.AssetExecutionContext) -> TimeWindow:
    tw = context.partition_time_window
    return TimeWindow(to_utc(tw.start).astimezone(timezone.utc), to_utc(tw.end).astimezone(timezone.utc))


def rebuild_plans(
    context: dg.AssetExecutionContext,
    project: Project,
    model: SqlModel,
    window: TimeWindow | None,
    translator: ModelTranslator,
    allow_downgrade: bool,
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
        context.log.info(
            f"{model.name}: definition changed (table built with {str(built)[:12]}, now {model.fingerprint[:12]}): "
            "rebuilding from its start"
        )
    return plan_rebuild(project, model, window.end, allow_downgrade=allow_downgrade)


def unaffected_before_rebuild(
    context: dg.AssetExecutionContext, project: Project, model: SqlModel, translator: ModelTranslator
) -> tuple[dict[str, set[str]], str | None]:
    """Before a rebuild for a changed definition commits (the table still holds the previous one): the
    downstream models the plan says it leaves unchanged, each with its partitions already stale, and the
    data version the rebuild keeps when it leaves every model reading it unchanged (see :mod:`.apply`)."""
    if project.settings.environment:
        # An environment's models are rebuilt with what they break; production's records are not its to confirm.
        return {}, None
    run_tags = context.run.tags
    if tags.BUILT_WITH_TAG in run_tags:
        built = run_tags[tags.BUILT_WITH_TAG] or None
    else:
        built = delta.built_with(project.settings.table_location(model.name))
    if tags.is_set(run_tags, tags.FULL_REFRESH_TAG) or built in (None, model.fingerprint):
        return {}, None  # no change of definition (a full refresh asked): the data may change anywhere
    # Late rows the rebuild reads too change the intervals they land in, whatever the definition changed.
    new_data = new_data_windows(context.instance, project, model, translator)
    if new_data is None:
        return {}, None
    kept = {}
    for name in unaffected_downstream(project, model):
        reader = project.models[name]
        reached = partitions_reading(project, translator, reader, model, new_data) if new_data else set()
        if reached is not None:  # else it reads the model whole: the new rows reach it
            kept[name] = stale_partitions(context.instance, project, reader, translator) | reached
    if kept:
        context.log.info(f"{model.name}: {', '.join(sorted(kept))} read none of its changed columns: not recomputed")
    return kept, None if new_data else kept_data_version(context.instance, project, model, translator, set(kept))


def unpartitioned_plan(
    context: dg.AssetExecutionContext, project: Project, model: SqlModel, executor: Executor, execution_time: Any
) -> RunPlan:
    """The plan of a FULL, VIEW, SEED or merge-style run, from the committed state of its table."""
    target = executor.target_state(model.name)
    if target is not None and tags.is_set(context.run.tags, tags.REBUILD_TAG):
        target = full_refresh_target(model)
        context.log.info(f"{model.name}: full refresh: rebuilding the table from scratch, committed as one transaction")
    elif target is not None and target.exists and target.is_backfill(model):
        context.log.info(f"{model.name}: definition changed since its table was built: rebuilding it from scratch")
    end = to_utc(context.run.tags[tags.END_TAG]) if context.run.tags.get(tags.END_TAG) else None
    return plan_run(project, model, None, execution_time=execution_time, target=target, end=end)


def check_upstreams(
    context: dg.AssetExecutionContext,
    project: Project,
    model: SqlModel,
    window: TimeWindow | None,
    translator: ModelTranslator,
) -> None:
    """Wait for upstream runs rebuilding what this run reads: look again every quarter second for the wait's
    seconds, then by a retry of the step (the wait's retries); fail naming upstream intervals the window
    needs that are not materialized (Dagster's backfills do not check outside their range)."""
    done: set[tuple[str, dg.AssetKey]] = set()  # upstream steps found finished: not read again while waiting
    pending = pending_upstream_runs(context.instance, project, model, window, translator, context.run_id, done)
    if pending:
        context.log.info(f"{model.name}: waiting for upstream runs to finish: {'; '.join(pending)}")
        retries, seconds = upstream_wait()
        began = time.monotonic()
        while pending and time.monotonic() - began < seconds:
            time.sleep(UPSTREAM_LOOK_SECONDS)
            pending = pending_upstream_runs(context.instance, project, model, window, translator, context.run_id, done)
        if pending:
            raise dg.RetryRequested(max_retries=retries)
        context.log.info(f"{model.name}: the upstream runs finished ({time.monotonic() - began:.1f} s)")
    if window is not None:
        missing = missing_upstream(context.instance, project, model, window, translator)
        if missing:
            raise WindowError(upstream_message(context.run.tags, project, model, window, missing, translator))


def upstream_message(
    run_tags: Any,
    project: Project,
    model: SqlModel,
    window: TimeWindow,
    missing: list[str],
    translator: ModelTranslator,
) -> str:
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
    if last.window is not None and (first := results[0].window) is not None:
        meta["run_window_start"] = first.start.isoformat()
        meta["run_window_end"] = last.window.end.isoformat()
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


# What a run fails on the same way every time until its input changes (a model, a source file, an audit,
# upstream intervals not there yet): not retried by Dagster's run retries. Anything else (a Spark server
# that went away, a killed run worker) is.
FINAL_ERRORS = (
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


def _not_retried_when_final(
    context: dg.AssetExecutionContext, steps: Iterator[dg.MaterializeResult]
) -> Iterator[dg.MaterializeResult]:
    try:
        yield from steps
    except FINAL_ERRORS:
        context.instance.add_run_tags(context.run_id, {tags.RETRY_ON_FAILURE_TAG: "false"})
        raise


def run_model(
    context: dg.AssetExecutionContext,
    spark: SparkSession,
    project: Project,
    model: SqlModel,
    translator: ModelTranslator,
) -> Iterator[dg.MaterializeResult]:
    """One asset execution of ``model``: check upstreams, plan, execute with the audits, report."""
    began = time.perf_counter()
    # A whole-table model in a run over a window (it reads models the run computes first) has no window.
    partitioned = context.assets_def.partitions_def is not None
    window = (
        window_of(context) if partitioned and (context.has_partition_key_range or context.has_partition_key) else None
    )
    check_upstreams(context, project, model, window, translator)
    executor = Executor(spark, project)
    plans, kept, data_version = run_plans(context, project, model, window, translator, executor)
    auditor = checks.WindowAuditor(spark, project, model, context.asset_key, context)
    results = execute_plans(context, executor, auditor, model, plans, window)
    run_project_statements(spark, project, "after_all")
    meta = run_metadata(model, plans, results, time.perf_counter() - began)
    if window is not None and model.is_incremental:
        report_intervals(context, model, results)
    check_results = run_check_results(project, model, context.asset_key, auditor, plans, window)
    version = dg.DataVersion(data_version) if data_version else None
    yield dg.MaterializeResult(metadata=meta, check_results=check_results, data_version=version)
    # The rebuild is recorded now: downstream models it leaves unchanged are confirmed after it.
    for line in confirm_unaffected(context.instance, project, model, translator, kept):
        context.log.info(line)


def run_plans(
    context: dg.AssetExecutionContext,
    project: Project,
    model: SqlModel,
    window: TimeWindow | None,
    translator: ModelTranslator,
    executor: Executor,
) -> tuple[list[RunPlan], dict[str, set[str]], str | None]:
    """What the run executes (a rebuild from the model's start, the window's plans, or one unpartitioned
    plan) and, before a rebuild of a changed definition, what :func:`unaffected_before_rebuild` finds."""
    allow_downgrade = tags.is_set(context.run.tags, tags.ALLOW_DOWNGRADE_TAG)
    run_tags = context.run.tags
    execution_time = to_utc(run_tags[tags.EXECUTION_TIME_TAG]) if run_tags.get(tags.EXECUTION_TIME_TAG) else None
    plans = rebuild_plans(context, project, model, window, translator, allow_downgrade)
    kept, data_version = unaffected_before_rebuild(context, project, model, translator) if plans else ({}, None)
    if not plans and window:
        plans = plan_window(project, model, window, allow_downgrade=allow_downgrade, execution_time=execution_time)
    elif not plans:
        plans = [unpartitioned_plan(context, project, model, executor, execution_time)]
    return plans, kept, data_version


def execute_plans(
    context: dg.AssetExecutionContext,
    executor: Executor,
    auditor: checks.WindowAuditor,
    model: SqlModel,
    plans: list[RunPlan],
    window: TimeWindow | None,
) -> list[RunResult]:
    """A rebuild's plans committed as one transaction, other plans one commit each; blocking audits
    before each commit."""
    if plans[0].write == WriteKind.REBUILD:
        context.log.info(f"{model.name}: rebuilding {window} in {len(plans)} run(s), committed as one transaction")
        return [executor.execute_together(plans, run_id=context.run_id, before_commit=auditor.before_commit(window))]
    results = []
    for plan in plans:
        if plan.downgraded:
            context.log.warning(
                f"{model.name} is refused by the safety analysis: rebuilding {plan.window} in full (allow downgrade)"
            )
        context.log.info(f"{model.name}: running {plan.window or 'full'}")
        results.append(executor.execute(plan, run_id=context.run_id, before_commit=auditor.before_commit(plan.window)))
    return results


def run_metadata(model: SqlModel, plans: list[RunPlan], results: list[RunResult], seconds: float) -> dict[str, Any]:
    """The materialization's metadata: what the run did, the table after it, the definition it ran."""
    meta = materialization_metadata(results, seconds)
    meta.update(table_facts(model, results[-1]))
    meta["fingerprint"] = model.fingerprint
    if plans[-1].execution_time is not None:  # what the clock and the date macros read (a cron tick is due after it)
        meta["execution_time"] = plans[-1].execution_time.isoformat()
    if plans[-1].safety_class:
        downgraded = " (downgraded to a full refresh)" if plans[-1].downgraded else ""
        meta["safety_class"] = plans[-1].safety_class + downgraded
    return meta


def run_check_results(
    project: Project,
    model: SqlModel,
    key: dg.AssetKey,
    auditor: checks.WindowAuditor,
    plans: list[RunPlan],
    window: TimeWindow | None,
) -> list[dg.AssetCheckResult]:
    """The audits' results (the non-blocking ones run now, on the committed rows) and ``definition_current``."""
    check_results = auditor.results(window, view_sql=plans[-1].sql if plans[-1].write == WriteKind.VIEW else None)
    if model.has_table:
        # A run commits its own fingerprint, except a forward_only model's window run (its table keeps the older one).
        table = project.settings.table_location(model.name)
        built = delta.built_with(table) if model.forward_only else model.fingerprint
        check_results.append(checks.definition_result(key, model, built))
    return check_results
