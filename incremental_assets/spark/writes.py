"""One write strategy per kind of write: how a run's rows are conformed, staged and committed.

The executor runs a plan's query and hands the rows to the strategy of the plan's :class:`WriteKind`;
the strategy stages data files with Spark and says which :data:`~incremental_assets.delta.CommitMode`
the one Delta commit uses. Nothing here decides WHAT to run: plans do.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Mapping

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.types import StringType, StructField, StructType
from sqlglot import exp

from incremental_assets import delta
from incremental_assets.model import clock
from incremental_assets.model.intervals import IntervalUnit, TimeWindow
from incremental_assets.model.kinds import IncrementalByTimeRange
from incremental_assets.model.project import Project
from incremental_assets.model.sql_model import SqlModel
from incremental_assets.model.time_formats import strftime_to_spark
from incremental_assets.plan import schema_changes
from incremental_assets.plan.run_plan import RunPlan, WriteKind
from incremental_assets.spark import faults, merge

log = logging.getLogger(__name__)


def spark_partition_expression(model: SqlModel) -> str:
    """Spark SQL for the interval key of each row (the ``ia_interval`` partition value): the model's time
    column read as a timestamp, keyed by :meth:`~incremental_assets.model.intervals.IntervalUnit.partition_key_sql`.

    >>> from incremental_assets.load.model_file import parse_model_file
    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "m.sql"
    >>> _ = p.write_text("MODEL (name a.b, kind INCREMENTAL_BY_TIME_RANGE(time_column ts), start '2024-01-01', "
    ...                  "interval_unit hour); SELECT ts FROM c")
    >>> spark_partition_expression(parse_model_file(p))
    "concat(date_format(CAST(`ts` AS TIMESTAMP), 'yyyy-MM-dd'), 'T', date_format(CAST(`ts` AS TIMESTAMP), 'HH'))"
    """
    kind = model.kind
    assert isinstance(kind, IncrementalByTimeRange)
    # Names and the pattern are quoted by sqlglot, so no header value can end a literal early.
    column = exp.column(kind.time_column, quoted=True).sql("spark")
    pattern = exp.Literal.string(strftime_to_spark(kind.time_format)).sql("spark") if kind.time_format else None
    # A formatted time column may hold numbers (20240503 for '%Y%m%d', as SQLMesh allows): read as their text.
    instant = f"to_timestamp(CAST({column} AS STRING), {pattern})" if pattern else f"CAST({column} AS TIMESTAMP)"
    return model.unit.partition_key_sql(instant)


def same_columns(table: Mapping[str, str], staged: Mapping[str, str]) -> bool:
    """Whether two ``{column: type}`` schemas match (names compared case-insensitively, order ignored).

    >>> same_columns({"Id": "bigint", "v": "string"}, {"v": "string", "id": "bigint"})
    True
    >>> same_columns({"id": "bigint"}, {"id": "int"})
    False
    """
    return {k.lower(): v for k, v in table.items()} == {k.lower(): v for k, v in staged.items()}


def arrow_types(schema: pa.Schema) -> dict[str, str]:
    """An Arrow schema as ``{column: type}`` (what :func:`same_columns` compares)."""
    return {f.name: str(f.type) for f in schema}


def table_types(model: SqlModel, uri: str) -> dict[str, str]:
    """The table's columns and Spark types, without those the kind adds itself (SCD type 2's validity)."""
    managed = {c.lower() for c in getattr(model.kind, "managed_columns", ())}
    # prefer_timestamp_ntz: the Delta schema round-trips to exactly the Spark types that wrote it.
    fields = from_arrow_schema(delta.arrow_schema(uri), prefer_timestamp_ntz=True).fields
    return {f.name: f.dataType.simpleString() for f in fields if f.name.lower() not in managed}


def conform(model: SqlModel, uri: str, df: DataFrame) -> DataFrame:
    """Apply the kind's schema-change policies when the query's schema differs from the table's:
    raise, warn, or select the columns to write (the commit then evolves the Delta schema)."""
    table = table_types(model, uri)
    query = {f.name: f.dataType.simpleString() for f in df.schema.fields}
    if same_columns(table, query):
        return df
    decision = schema_changes.decide(model, table, query)
    for warning in decision.warnings:
        log.warning("%s", warning)
    columns = []
    for col in decision.columns:
        value = F.lit(None) if col.null else F.col(f"`{col.name}`")
        columns.append(value.cast(col.cast).alias(col.name) if col.cast else value)
    return df.select(*columns)


@dataclass(frozen=True)
class Prepared:
    """What :meth:`WriteStrategy.prepare` found: the rows to stage, and whether staging them replaces the
    whole table (an append whose schema changed carries the committed rows along)."""

    rows: DataFrame
    rewrites_table: bool = False


@dataclass(frozen=True)
class Staged:
    """What the run staged so far: returned by :meth:`WriteStrategy.stage` for each plan (folding the
    previous plan's) and by :meth:`WriteStrategy.complete`, read by :meth:`WriteStrategy.commit_mode`."""

    schema: pa.Schema | None  # the Arrow schema of the staged rows (None: a keyed run that changed nothing)
    rewrites_table: bool = False  # see Prepared
    by_day: bool = False  # interval writes: the table's files are cut by day
    columns: StructType | None = None  # interval writes: the staged files' columns, the interval key included
    whole_days: bool = False  # interval writes by day: every file of the window's days is replaced
    copied_from: tuple[str, ...] = ()  # interval writes by day: committed files whose other rows were staged
    buckets: tuple[str, ...] = ()  # keyed writes: the key buckets staged, which the commit replaces
    details: Mapping[str, Any] = field(default_factory=dict)  # keyed writes: rows inserted, updated, closed


@dataclass(frozen=True)
class WriteStrategy(ABC):
    """Stages the rows of one model's plans in one folder and names the commit that publishes them.

    A strategy is frozen: its steps change nothing on it and return what they found as frozen values, which
    the executor hands to the next step. A run calls them in this order:

    1. :meth:`prepare`, for each plan: the query's rows after the kind's schema-change policies (:class:`Prepared`);
    2. :meth:`stage`, for each plan: writes those rows into the staging folder and returns what the plans
       staged so far (:class:`Staged`), given the previous plan's (None for the first plan);
    3. :meth:`complete`, once: stages what else the commit of the run's whole window needs;
    4. :meth:`commit_mode`, once, after the staged schema is kept: the Delta commit that publishes the
       staging folder, or None when there is nothing to commit (the table keeps its version).
    """

    spark: SparkSession
    project: Project
    model: SqlModel
    uri: str
    staging: str
    kind: ClassVar[WriteKind]

    def prepare(self, plan: RunPlan, df: DataFrame) -> Prepared:
        """The rows to stage, after the kind's schema-change policies (default: as the query returned them)."""
        return Prepared(df)

    def stage(self, plan: RunPlan, prepared: Prepared, before: Staged | None) -> Staged:
        """Write a plan's rows into the staging folder (default: as they are, in Spark's files)."""
        staged = _staged_so_far(prepared, before)
        if before is None:
            faults.checkpoint("staging")
        # Spark Connect knows "error", not "errorifexists"
        prepared.rows.write.mode("error" if before is None else "append").parquet(self.staging)
        return staged

    def complete(self, staged: Staged, window: TimeWindow | None) -> Staged:
        """After every plan is staged: stage what else the commit of ``window`` needs (default: nothing)."""
        return staged

    @abstractmethod
    def commit_mode(self, staged: Staged, window: TimeWindow | None) -> delta.CommitMode | None:
        """The commit that publishes what was staged; None: nothing to commit, the table keeps its version."""


def _staged_so_far(prepared: Prepared, before: Staged | None, **found: Any) -> Staged:
    """What the plans staged once ``prepared`` is: the first plan's schema, ``found`` of this plan."""
    if before is None:
        return Staged(to_arrow_schema(prepared.rows.schema, timezone="UTC"), prepared.rewrites_table, **found)
    return replace(before, rewrites_table=before.rewrites_table or prepared.rewrites_table, **found)


class ReplaceTableWrite(WriteStrategy):
    """An unpartitioned table (FULL, materialized VIEW, SEED, a cursor model starting over), replaced whole."""

    kind = WriteKind.REPLACE_TABLE

    def commit_mode(self, staged: Staged, window: TimeWindow | None) -> delta.CommitMode | None:
        return delta.ReplaceTable()


class _IntervalWrite(WriteStrategy):
    """Rows keyed by the interval that holds them (``ia_interval``): one file per interval, or one per day
    on a table cut by day (new tables of hourly models, see :mod:`incremental_assets.delta.tables`)."""

    def files_by_day(self) -> bool:
        """Whether the table's files are cut by day: an existing table's own layout, else the setting's."""
        if delta.exists(self.uri):
            return delta.partitioned_by_day(self.uri)
        return self.model.unit == IntervalUnit.HOUR and self.project.settings.hourly_files == "day"

    def stage(self, plan: RunPlan, prepared: Prepared, before: Staged | None) -> Staged:
        by_day = before.by_day if before is not None else self.files_by_day()
        staged = _staged_so_far(prepared, before, by_day=by_day)
        if before is None:
            faults.checkpoint("staging")
        keyed = prepared.rows.withColumn(delta.PARTITION_COLUMN, F.expr(spark_partition_expression(self.model)))
        column, unit = delta.PARTITION_COLUMN, self.model.unit
        extra: tuple[str, ...] = ()
        if by_day:
            keyed = keyed.withColumn(delta.DAY_COLUMN, F.substring(delta.PARTITION_COLUMN, 1, 10))
            column, unit, extra = delta.DAY_COLUMN, IntervalUnit.DAY, (delta.DAY_COLUMN,)
        # A window inside one partition needs no shuffle; a longer one is grouped by partition.
        one_partition = plan.window is not None and unit.next(unit.floor(plan.window.start)) >= plan.window.end
        keyed = keyed.coalesce(1) if one_partition else keyed.repartition(column)
        keyed.write.mode("error" if before is None else "append").partitionBy(column).parquet(self.staging)
        return replace(staged, columns=_with_text_columns(prepared.rows.schema, delta.PARTITION_COLUMN, *extra))


class ReplaceWindowWrite(_IntervalWrite):
    """Replace exactly the window's intervals; the schema is checked against the table's.

    On a table cut by day, the files holding the window's rows are replaced: those that hold other
    hours too are rewritten, their other rows copied into the staged files (:meth:`complete`)."""

    kind = WriteKind.REPLACE_WINDOW

    def prepare(self, plan: RunPlan, df: DataFrame) -> Prepared:
        return Prepared(conform(self.model, self.uri, df) if delta.exists(self.uri) else df)

    def complete(self, staged: Staged, window: TimeWindow | None) -> Staged:
        if window is None or not staged.by_day or not delta.exists(self.uri):
            return staged
        # A commit that changes the table's columns cannot keep files written with the old ones.
        table = arrow_types(delta.arrow_schema(self.uri))
        whole_days = staged.schema is None or not same_columns(table, arrow_types(staged.schema))
        copied_from = tuple(delta.copied_files(self.uri, window, self.model.unit, whole_days=whole_days))
        staged = replace(staged, whole_days=whole_days, copied_from=copied_from)
        if copied_from:
            copy_other_intervals(self, staged, window)
        return staged

    def commit_mode(self, staged: Staged, window: TimeWindow | None) -> delta.CommitMode | None:
        assert window is not None
        return delta.ReplaceWindow(
            window, self.model.unit, by_day=staged.by_day, whole_days=staged.whole_days, copied_from=staged.copied_from
        )


def _with_text_columns(schema: StructType, *names: str) -> StructType:
    """``schema`` with string columns ``names`` set as ``withColumn`` sets them (in place, else at the end): the
    staged files' columns, known without asking Spark to analyse the keyed rows again.

    >>> from pyspark.sql.types import LongType
    >>> s = StructType([StructField("a", LongType()), StructField("ia_interval", LongType())])
    >>> [f"{f.name}:{f.dataType.simpleString()}" for f in _with_text_columns(s, "ia_interval", "ia_day").fields]
    ['a:bigint', 'ia_interval:string', 'ia_day:string']
    """
    fields = list(schema.fields)
    for name in names:
        column = StructField(name, StringType(), True)
        at = next((i for i, f in enumerate(fields) if f.name.lower() == name.lower()), None)
        if at is None:
            fields.append(column)
        else:
            fields[at] = column
    return StructType(fields)


def copy_other_intervals(strategy: WriteStrategy, staged: Staged, window: TimeWindow) -> None:
    """Stage the committed rows of ``staged.copied_from`` outside ``window``, as the staged rows' columns."""
    assert staged.columns is not None
    first, end = delta.interval_bounds(window, strategy.model.unit)
    schema = from_arrow_schema(delta.arrow_schema(strategy.uri, drop=(delta.DAY_COLUMN,)), prefer_timestamp_ntz=False)
    interval = F.col(delta.PARTITION_COLUMN)
    kept = strategy.spark.read.schema(schema).parquet(*staged.copied_from).where((interval < first) | (interval >= end))
    kept = kept.withColumn(delta.DAY_COLUMN, F.substring(delta.PARTITION_COLUMN, 1, 10))
    present = {c.lower() for c in kept.columns}
    kept = kept.select(
        *[
            (F.col(f"`{f.name}`") if f.name.lower() in present else F.lit(None)).cast(f.dataType).alias(f.name)
            for f in staged.columns.fields
        ]
    )
    kept.coalesce(1).write.mode("append").partitionBy(delta.DAY_COLUMN).parquet(strategy.staging)


class RebuildWrite(_IntervalWrite):
    """An incremental model rebuilt from its start: every interval staged, the whole table replaced."""

    kind = WriteKind.REBUILD

    def commit_mode(self, staged: Staged, window: TimeWindow | None) -> delta.CommitMode | None:
        return delta.ReplaceTable(partitioned=True, by_day=staged.by_day)


class AppendWrite(WriteStrategy):
    """A cursor model's new rows, added to the table; a schema change rewrites the table once."""

    kind = WriteKind.APPEND

    def prepare(self, plan: RunPlan, df: DataFrame) -> Prepared:
        if merge.starts_over(plan, self.model, self.uri):
            return Prepared(df)
        df = conform(self.model, self.uri, df)
        if {c.lower() for c in table_types(self.model, self.uri)} != {c.lower() for c in df.columns}:
            # An append commit cannot add or drop Delta columns: rewrite the table once, old rows first.
            return Prepared(merge.committed_rows(self, self.uri).unionByName(df, allowMissingColumns=True), True)
        return Prepared(df)

    def commit_mode(self, staged: Staged, window: TimeWindow | None) -> delta.CommitMode | None:
        if staged.rewrites_table:
            return delta.ReplaceTable()
        # No new rows: an append would only add a version without files (the cursor stays where it is).
        return delta.Append() if not delta.exists(self.uri) or delta.has_staged_rows(self.staging) else None


class _KeyedWrite(WriteStrategy):
    """Unique-key and SCD type 2 tables: only the key buckets the run changes are staged and replaced."""

    def prepare(self, plan: RunPlan, df: DataFrame) -> Prepared:
        return Prepared(df if merge.starts_over(plan, self.model, self.uri) else conform(self.model, self.uri, df))

    def stage(self, plan: RunPlan, prepared: Prepared, before: Staged | None) -> Staged:
        assert before is None, "a merge-style run is one plan"
        # The query runs once: duplicate check, change detection and the write all see the same rows.
        df = prepared.rows.localCheckpoint()
        schemas: list[pa.Schema] = []

        def stage_rows(rows: DataFrame, column: str) -> None:
            schemas.append(to_arrow_schema(rows.drop(column).schema, timezone="UTC"))
            merge.write_staged(rows, self.staging, column)

        buckets, details = self.merge(plan, df, stage_rows)
        return Staged(schemas[0] if schemas else None, buckets=tuple(buckets or ()), details=details)

    @abstractmethod
    def merge(self, plan: RunPlan, df: DataFrame, stage_rows: merge.Stage) -> tuple[list[str] | None, dict[str, Any]]:
        """Stage the new content of the buckets the run changes; returns those buckets and the row counts."""

    def commit_mode(self, staged: Staged, window: TimeWindow | None) -> delta.CommitMode | None:
        return None if staged.schema is None else delta.ReplaceBuckets(staged.buckets)


class UpsertWrite(_KeyedWrite):
    kind = WriteKind.UPSERT

    def merge(self, plan: RunPlan, df: DataFrame, stage_rows: merge.Stage) -> tuple[list[str] | None, dict[str, Any]]:
        return merge.upsert(self, plan, df, self.uri, stage_rows)


class Scd2Write(_KeyedWrite):
    kind = WriteKind.SCD2

    def merge(self, plan: RunPlan, df: DataFrame, stage_rows: merge.Stage) -> tuple[list[str] | None, dict[str, Any]]:
        execution_time = plan.execution_time or clock.now()
        return merge.scd_type_2(self, plan, df, self.uri, stage_rows, execution_time)


STRATEGIES: dict[WriteKind, type[WriteStrategy]] = {
    cls.kind: cls for cls in (ReplaceWindowWrite, RebuildWrite, ReplaceTableWrite, AppendWrite, UpsertWrite, Scd2Write)
}
