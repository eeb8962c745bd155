"""Carry out a RunPlan on a SparkSession: register the inputs, run the query, stage and commit.

Spark writes the data files (executors do the heavy lifting) through the write strategy of the plan's
kind of write (:mod:`.writes`); :mod:`incremental_assets.delta` commits them with one Delta transaction.
Nothing large passes through the Python process.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import pyarrow as pa
from pyspark.sql import SparkSession

from incremental_assets import delta
from incremental_assets.errors import StorageError
from incremental_assets.model import clock
from incremental_assets.model.intervals import TimeWindow
from incremental_assets.model.kinds import IncrementalByCursor, ScdType2, UniqueKey
from incremental_assets.model.project import Project
from incremental_assets.model.python_model import PythonModel
from incremental_assets.model.sql_model import SqlModel
from incremental_assets.plan.run_plan import InputRead, RunPlan, WriteKind, view_name
from incremental_assets.spark import faults, merge
from incremental_assets.spark.inputs import Inputs
from incremental_assets.spark.python_models import register_python_rows
from incremental_assets.spark.query_errors import check_storable, query_error
from incremental_assets.spark.read_errors import unreadable_input
from incremental_assets.spark.session import is_connect, run_project_statements, spark_steps
from incremental_assets.spark.writes import STRATEGIES, Staged, WriteStrategy

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunResult:
    """What one executed plan did: the numbers a materialization reports."""

    model: str
    window: TimeWindow | None
    write: str
    rows: int | None
    version: int | None
    files: int
    partitions: int
    sql: str
    seconds: float
    table: str | None = None
    inputs: Mapping[str, str] = field(default_factory=dict)
    details: Mapping[str, Any] = field(default_factory=dict)  # merge-style kinds: rows inserted/updated/closed, cursor
    interval_rows: Mapping[str, int] = field(default_factory=dict)  # rows written per interval key (absent: none)


class Executor(Inputs):
    """Runs plans of one project on one SparkSession (shared across intervals and models)."""

    def __init__(self, spark: SparkSession, project: Project):
        super().__init__(spark, project)
        self._swept: set[str] = set()  # tables whose dead runs' staging folders this executor has removed

    def sweep(self, uri: str) -> None:
        """Once per table and executor (one per Dagster run), delete the staging folders killed runs left behind."""
        if uri in self._swept:
            return
        self._swept.add(uri)
        try:
            removed = delta.remove_orphan_staging(uri)
        except (OSError, StorageError) as exc:  # cleanup never fails a run
            log.warning("could not remove dead runs' staging folders in %s: %s", uri, exc)
            return
        if removed:
            log.info("removed %d staging folder(s) of dead runs in %s", len(removed), uri)

    def execute(
        self,
        plan: RunPlan,
        *,
        run_id: str | None = None,
        before_commit: Callable[[str], None] | None = None,
    ) -> RunResult:
        """Run a plan and commit its output atomically; returns rows written and the new table version."""
        run_project_statements(self.spark, self.project, "before_all")
        if plan.write == WriteKind.VIEW:
            began = time.perf_counter()
            inputs = self.register_around_statements(plan)
            self.spark.sql(plan.sql).schema  # analysis only: proves the view resolves, reads nothing
            self.run_statements(plan, plan.post_statements, "post")
            return RunResult(
                plan.model, None, plan.write, None, None, 0, 0, plan.sql, time.perf_counter() - began, None, inputs
            )
        return self.execute_together([plan], run_id=run_id, before_commit=before_commit)

    def execute_together(
        self,
        plans: list[RunPlan],
        *,
        run_id: str | None = None,
        before_commit: Callable[[str], None] | None = None,
    ) -> RunResult:
        """Run plans of one model into one staging folder and commit them as ONE Delta transaction,
        by the write strategy of their kind of write (:mod:`.writes`)."""
        run_project_statements(self.spark, self.project, "before_all")
        began = time.perf_counter()
        first, last = plans[0], plans[-1]
        model = self.project.models[first.model]
        uri = self.project.settings.table_location(first.model)
        self.sweep(uri)
        strategy = STRATEGIES[first.write](self.spark, self.project, model, uri, delta.new_staging_dir(uri))
        inputs: dict[str, str] = {}
        window = TimeWindow(first.window.start, last.window.end) if first.window and last.window else None
        try:
            staged = strategy.complete(self._stage(strategy, plans, inputs), window)
        except Exception as exc:
            delta.discard_staging(uri, strategy.staging)  # and the table's folder, when it holds no table yet
            unreadable = unreadable_input(exc, self.project) or query_error(exc, model)
            if unreadable is None:
                raise
            raise unreadable from None
        if staged.schema is not None:  # an empty window stages no file: its readers still see its columns
            delta.keep_staged_schema(strategy.staging, staged.schema)
        faults.checkpoint("staged")
        mode = strategy.commit_mode(staged, window)
        if mode is None or staged.schema is None:
            delta.discard_staging(uri, strategy.staging)
            log.info("%s: nothing changed, nothing to commit", first.model)
            self.run_statements(last, last.post_statements, "post")
            return self._unchanged(first, uri, inputs, self._unchanged_details(staged, first), began)
        result = self._commit(strategy, staged.schema, mode, first, window, run_id, before_commit)
        if result.files == 0:
            delta.discard_staging(uri, strategy.staging)  # nothing in it was committed (a window with no rows)
        self.run_statements(last, last.post_statements, "post")
        details = {**staged.details, **self._cursor_details(model, first, uri)}
        seconds = time.perf_counter() - began
        where = f"{first.model} {window or 'full'} ({first.write})"
        log.info("%s: %s rows, version %s, %.2fs", where, result.rows, result.version, seconds)
        return RunResult(
            first.model,
            window,
            first.write,
            result.rows,
            result.version,
            result.files,
            result.partitions,
            last.sql,
            seconds,
            uri,
            inputs,
            details,
            result.interval_rows,
        )

    def _cursor_details(self, model: SqlModel, first: RunPlan, uri: str) -> dict[str, Any]:
        """A cursor model's run details: its cursor before the run (an append) and after it."""
        if not isinstance(model.kind, IncrementalByCursor):
            return {}
        before = first.target.last_value if first.target and first.write == WriteKind.APPEND else None
        return {"cursor_before": before, "cursor_after": merge.new_cursor_value(self, uri, first.model)}

    def _stage(self, strategy: WriteStrategy, plans: list[RunPlan], inputs: dict[str, str]) -> Staged:
        """Run each plan's query and stage its rows, in order; records what each read in ``inputs``."""
        model = strategy.model
        staged: Staged | None = None
        for plan in plans:
            if self._query_bound(model, plan):
                rows = self.query_frame(plan, inputs)
            else:
                inputs.update(self.register_around_statements(plan, lambda: register_python_rows(self, model, plan)))
                rows = self.spark.sql(plan.sql)
            check_storable(model, rows.schema)
            staged = strategy.stage(plan, strategy.prepare(plan, rows), staged)
        if staged is None:
            raise ValueError("a run stages at least one plan")
        return staged

    def _query_bound(self, model: SqlModel, plan: RunPlan) -> bool:
        """Whether the plan's query is sent with its inputs bound to it (:meth:`query_frame`): on Spark Connect, for
        a SQL model's plan without statements (which may name the inputs' views) reading nothing of the catalog."""
        return (
            is_connect(self.spark)
            and not isinstance(model, PythonModel)
            and not plan.pre_statements
            and not plan.post_statements
            and not any(read.kind == "source" and self.project.sources[read.name].in_catalog for read in plan.inputs)
        )

    def register_around_statements(
        self, plan: RunPlan, more: Callable[[], dict[str, str]] | None = None
    ) -> dict[str, str]:
        """The plan's inputs registered and its pre-statements run: the tables and views of Spark's catalog
        among the inputs after them, as the statements leave them (they may drop and create them)."""
        inputs = self.register(plan, catalog=False)
        inputs.update(more() if more else {})
        self.run_statements(plan, plan.pre_statements, "pre")
        inputs.update(self.register(plan, catalog=True))
        return inputs

    def run_statements(self, plan: RunPlan, statements: tuple[Any, ...], when: str) -> None:
        """A model's pre-statements (before its query) or post-statements (after its write), in order.

        Post-statements see the model's committed table as the view ``@this_model`` stands for.
        """
        if not statements:
            return
        model = self.project.models[plan.model]
        if when == "post" and model.has_table and delta.exists(self.project.settings.table_location(plan.model)):
            own = InputRead(plan.model, view_name(plan.model), "table", None)
            self.read_model_table(plan.model, own)[0].createOrReplaceTempView(own.view)
        for statement in statements:
            sql = statement.sql(dialect="spark")
            try:
                for step in spark_steps(statement):
                    self.spark.sql(step).collect()
            except Exception as exc:  # Spark's error, told with the model file and the statement
                line = statement.meta.get("line") or next(
                    (n.meta["line"] for n in statement.walk() if "line" in n.meta), None
                )
                where = f"{model.path}:{line}" if line else str(model.path)
                message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                raise StorageError(f"{where}: the {when}-statement `{sql}` failed: {message}") from exc

    def _commit(
        self,
        strategy: WriteStrategy,
        schema: pa.Schema,
        mode: delta.CommitMode,
        first: RunPlan,
        window: TimeWindow | None,
        run_id: str | None,
        before_commit: Callable[[str], None] | None,
    ) -> delta.CommitResult:
        """The one Delta commit of a run, with what it did recorded in the commit's own metadata."""
        metadata = {
            "model": first.model,
            "fingerprint": first.fingerprint,
            "run_id": run_id or "",
            "write": str(first.write),
            "window_start": window.start.isoformat() if window else "",
            "window_end": window.end.isoformat() if window else "",
            "committed_at": clock.wall_time().isoformat(),
        }
        if isinstance(strategy.model.kind, (UniqueKey, ScdType2)):
            metadata["buckets"] = str(strategy.model.kind.buckets)
        try:
            if before_commit is not None:
                before_commit(strategy.staging)
            result = delta.commit_staged(
                strategy.uri,
                strategy.staging,
                schema,
                mode,
                metadata=metadata,
                name=first.model,
                definition=first.definition,
            )
        except BaseException:
            delta.discard_staging(
                strategy.uri, strategy.staging
            )  # refused or failed: these files will never be committed
            raise
        faults.checkpoint("committed")
        return result

    @staticmethod
    def _unchanged_details(staged: Staged, first: RunPlan) -> dict[str, Any]:
        if first.write == WriteKind.APPEND:
            cursor = first.target.last_value if first.target else None
            return {"cursor_before": cursor, "cursor_after": cursor}
        return dict(staged.details)

    @staticmethod
    def _unchanged(plan: RunPlan, uri: str, inputs: dict[str, str], details: dict[str, Any], began: float) -> RunResult:
        """The result of a run that found nothing to change: no commit; its rows are those of the table's
        newest run commit, recorded with that commit's run (what the integrity check matches)."""
        seconds = time.perf_counter() - began
        version, committed_by = delta.last_run_commit(uri)
        if committed_by:
            details = {**details, "committed_by_run": committed_by}
        return RunResult(plan.model, plan.window, plan.write, 0, version, 0, 0, plan.sql, seconds, uri, inputs, details)
