"""One write strategy per kind of write: how a run's rows are conformed, staged and committed.

The executor runs a plan's query and hands the rows to the strategy of the plan's :class:`WriteKind`;
the strategy stages data files with Spark and says which :data:`~incremental_assets.delta.CommitMode`
the one Delta commit uses. Nothing here decides WHAT to run: plans do.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.types import StructType
from sqlglot import exp

from incremental_assets import delta
from incremental_assets.model import clock
from incremental_assets.model.intervals import IntervalUnit, TimeWindow
from incremental_assets.model.kinds import IncrementalByTimeRange
from incremental_assets.model.project import Project
from incremental_assets.model.sql_model import SqlModel
from incremental_assets.plan import schema_changes
from incremental_assets.plan.run_plan import RunPlan, WriteKind
from incremental_assets.spark import faults, merge

log = logging.getLogger(__name__)


def spark_partition_expression(model: SqlModel) -> str:
    """Spark SQL for the interval key of each row (the ``ia_interval`` partition value).

    >>> from incremental_assets.load.model_file import parse_model_file
    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "m.sql"
    >>> _ = p.write_text("MODEL (name a.b, kind INCREMENTAL_BY_TIME_RANGE(time_column ts), start '2024-01-01', interval_unit hour); SELECT ts FROM c")
    >>> spark_partition_expression(parse_model_file(p))
    "concat(date_format(CAST(`ts` AS TIMESTAMP), 'yyyy-MM-dd'), 'T', date_format(CAST(`ts` AS TIMESTAMP), 'HH'))"
    """
    kind = model.kind
    assert isinstance(kind, IncrementalByTimeRange)
    # Names and the pattern are quoted by sqlglot, so no header value can end a literal early.
    column = exp.column(kind.time_column, quoted=True).sql("spark")
    pattern = exp.Literal.string(strftime_to_spark(kind.time_format)).sql("spark") if kind.time_format else None
    instant = f"to_timestamp({column}, {pattern})" if pattern else f"CAST({column} AS TIMESTAMP)"
    unit = model.unit
    if unit == "hour":
        return f"concat(date_format({instant}, 'yyyy-MM-dd'), 'T', date_format({instant}, 'HH'))"
    day = f"to_date({instant})"
    start = {
        "day": day,
        "week": f"date_sub({day}, dayofweek({day}) - 1)",  # weeks start on Sunday
        "month": f"trunc({day}, 'MM')",
        "quarter": f"trunc({day}, 'QUARTER')",
        "year": f"trunc({day}, 'YEAR')",
    }[unit]
    return f"date_format({start}, 'yyyy-MM-dd')"


_STRFTIME = {"%Y": "yyyy", "%m": "MM", "%d": "dd", "%H": "HH", "%M": "mm", "%S": "ss", "%f": "SSSSSS", "%j": "DDD", "%y": "yy"}


def strftime_to_spark(fmt: str) -> str:
    """Translate a Python/SQLMesh strftime format into a Spark datetime pattern.

    >>> strftime_to_spark("%Y-%m-%dT%H")
    "yyyy-MM-dd'T'HH"
    """
    out, i = [], 0
    while i < len(fmt):
        token = fmt[i : i + 2]
        if token in _STRFTIME:
            out.append(_STRFTIME[token])
            i += 2
        elif fmt[i].isalpha():
            out.append(f"'{fmt[i]}'")
            i += 1
        else:
            out.append(fmt[i])
            i += 1
    return "".join(out)


def same_schema(table: Mapping[str, str], query: Mapping[str, str]) -> bool:
    """Whether two ``{column: type}`` schemas match (names compared case-insensitively, order ignored)."""
    return {k.lower(): v for k, v in table.items()} == {k.lower(): v for k, v in query.items()}


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
    if same_schema(table, query):
        return df
    decision = schema_changes.decide(model, table, query)
    for warning in decision.warnings:
        log.warning("%s", warning)
    columns = []
    for col in decision.columns:
        value = F.lit(None) if col.null else F.col(f"`{col.name}`")
        columns.append(value.cast(col.cast).alias(col.name) if col.cast else value)
    return df.select(*columns)


@dataclass
class WriteStrategy:
    """Stages the rows of one model's plans in one folder and names the commit that publishes them."""

    spark: SparkSession
    project: Project
    model: SqlModel
    uri: str
    staging: str
    schema: pa.Schema | None = None
    details: dict[str, Any] = field(default_factory=dict)
    kind: ClassVar[WriteKind]

    def prepare(self, plan: RunPlan, df: DataFrame) -> DataFrame:
        """The rows to stage, after the kind's schema-change policies (default: as the query returned them)."""
        return df

    def stage(self, plan: RunPlan, df: DataFrame, *, first: bool) -> None:
        self.schema = self.schema or to_arrow_schema(df.schema, timezone="UTC")
        if first:
            faults.checkpoint("staging")
        # Spark Connect knows "error", not "errorifexists"
        df.write.mode("error" if first else "append").parquet(self.staging)

    def complete(self, window: TimeWindow | None) -> None:
        """After every plan is staged: stage what else the commit of ``window`` needs (default: nothing)."""

    def has_changes(self) -> bool:
        """Whether there is anything to commit (False: the table keeps its version)."""
        return True

    def commit_mode(self, window: TimeWindow | None) -> delta.CommitMode:
        raise NotImplementedError


class ReplaceTableWrite(WriteStrategy):
    """An unpartitioned table (FULL, materialized VIEW, SEED, a cursor model starting over), replaced whole."""

    kind = WriteKind.REPLACE_TABLE

    def commit_mode(self, window: TimeWindow | None) -> delta.CommitMode:
        return delta.ReplaceTable()


class _IntervalWrite(WriteStrategy):
    """Rows keyed by the interval that holds them (``ia_interval``): one file per interval, or one per day
    on a table cut by day (new tables of hourly models, see :mod:`incremental_assets.delta.tables`)."""

    staged_columns: StructType | None = None  # the columns of the staged files, the interval key included

    @functools.cached_property
    def by_day(self) -> bool:
        """Whether the table's files are cut by day: an existing table's own layout, else the setting's."""
        if delta.exists(self.uri):
            return delta.partitioned_by_day(self.uri)
        return self.model.unit == IntervalUnit.HOUR and self.project.settings.hourly_files == "day"

    def stage(self, plan: RunPlan, df: DataFrame, *, first: bool) -> None:
        self.schema = self.schema or to_arrow_schema(df.schema, timezone="UTC")
        if first:
            faults.checkpoint("staging")
        keyed = df.withColumn(delta.PARTITION_COLUMN, F.expr(spark_partition_expression(self.model)))
        column, unit = delta.PARTITION_COLUMN, self.model.unit
        if self.by_day:
            keyed = keyed.withColumn(delta.DAY_COLUMN, F.substring(delta.PARTITION_COLUMN, 1, 10))
            column, unit = delta.DAY_COLUMN, IntervalUnit.DAY
        # A window inside one partition needs no shuffle; a longer one is grouped by partition.
        one_partition = plan.window is not None and unit.next(unit.floor(plan.window.start)) >= plan.window.end
        keyed = keyed.coalesce(1) if one_partition else keyed.repartition(column)
        self.staged_columns = keyed.schema
        keyed.write.mode("error" if first else "append").partitionBy(column).parquet(self.staging)


class ReplaceWindowWrite(_IntervalWrite):
    """Replace exactly the window's intervals; the schema is checked against the table's.

    On a table cut by day, the files holding the window's rows are replaced: those that hold other
    hours too are rewritten, their other rows copied into the staged files (:meth:`complete`)."""

    kind = WriteKind.REPLACE_WINDOW
    whole_days: bool = False
    copied_from: tuple[str, ...] = ()

    def prepare(self, plan: RunPlan, df: DataFrame) -> DataFrame:
        return conform(self.model, self.uri, df) if delta.exists(self.uri) else df

    def complete(self, window: TimeWindow | None) -> None:
        if window is None or not self.by_day or not delta.exists(self.uri):
            return
        # A commit that changes the table's columns cannot keep files written with the old ones.
        self.whole_days = not same_columns(delta.arrow_schema(self.uri), self.schema)
        self.copied_from = tuple(delta.copied_files(self.uri, window, self.model.unit, whole_days=self.whole_days))
        if self.copied_from:
            copy_other_intervals(self, window)

    def commit_mode(self, window: TimeWindow | None) -> delta.CommitMode:
        assert window is not None
        return delta.ReplaceWindow(window, self.model.unit, by_day=self.by_day, whole_days=self.whole_days, copied_from=self.copied_from)


def same_columns(table: pa.Schema, staged: pa.Schema | None) -> bool:
    """Whether staged files have the table's columns and types (names compared case-insensitively)."""
    return staged is not None and sorted((f.name.lower(), str(f.type)) for f in table) == sorted((f.name.lower(), str(f.type)) for f in staged)


def copy_other_intervals(strategy: _IntervalWrite, window: TimeWindow) -> None:
    """Stage the committed rows of ``strategy.copied_from`` outside ``window``, as the staged rows' columns."""
    assert strategy.staged_columns is not None
    first, end = delta.interval_bounds(window, strategy.model.unit)
    schema = from_arrow_schema(delta.arrow_schema(strategy.uri, drop=(delta.DAY_COLUMN,)), prefer_timestamp_ntz=False)
    interval = F.col(delta.PARTITION_COLUMN)
    kept = strategy.spark.read.schema(schema).parquet(*strategy.copied_from).where((interval < first) | (interval >= end))
    kept = kept.withColumn(delta.DAY_COLUMN, F.substring(delta.PARTITION_COLUMN, 1, 10))
    present = {c.lower() for c in kept.columns}
    kept = kept.select(
        *[(F.col(f"`{f.name}`") if f.name.lower() in present else F.lit(None)).cast(f.dataType).alias(f.name) for f in strategy.staged_columns.fields]
    )
    kept.coalesce(1).write.mode("append").partitionBy(delta.DAY_COLUMN).parquet(strategy.staging)


class RebuildWrite(_IntervalWrite):
    """An incremental model rebuilt from its start: every interval staged, the whole table replaced."""

    kind = WriteKind.REBUILD

    def commit_mode(self, window: TimeWindow | None) -> delta.CommitMode:
        return delta.ReplaceTable(partitioned=True, by_day=self.by_day)


class AppendWrite(WriteStrategy):
    """A cursor model's new rows, added to the table; a schema change rewrites the table once."""

    kind = WriteKind.APPEND
    evolved: bool = False

    def prepare(self, plan: RunPlan, df: DataFrame) -> DataFrame:
        if merge.starts_over(plan, self.model, self.uri):
            return df
        df = conform(self.model, self.uri, df)
        if {c.lower() for c in table_types(self.model, self.uri)} != {c.lower() for c in df.columns}:
            # An append commit cannot add or drop Delta columns: rewrite the table once, old rows first.
            self.evolved = True
            return merge.committed_rows(self, self.uri).unionByName(df, allowMissingColumns=True)
        return df

    def has_changes(self) -> bool:
        # No new rows: an append would only add a version without files (the cursor stays where it is).
        return self.evolved or not delta.exists(self.uri) or delta.has_staged_rows(self.staging)

    def commit_mode(self, window: TimeWindow | None) -> delta.CommitMode:
        return delta.ReplaceTable() if self.evolved else delta.Append()


class _KeyedWrite(WriteStrategy):
    """Unique-key and SCD type 2 tables: only the key buckets the run changes are staged and replaced."""

    buckets: list[str] | None = None

    def prepare(self, plan: RunPlan, df: DataFrame) -> DataFrame:
        return df if merge.starts_over(plan, self.model, self.uri) else conform(self.model, self.uri, df)

    def stage(self, plan: RunPlan, df: DataFrame, *, first: bool) -> None:
        assert first, "a merge-style run is one plan"
        # The query runs once: duplicate check, change detection and the write all see the same rows.
        df = df.localCheckpoint()
        staged: list[pa.Schema] = []

        def stage_rows(rows: DataFrame, column: str) -> None:
            staged.append(to_arrow_schema(rows.drop(column).schema, timezone="UTC"))
            merge.write_staged(rows, self.staging, column)

        self.buckets, self.details = self.merge(plan, df, stage_rows)
        self.schema = staged[0] if staged else None

    def merge(self, plan: RunPlan, df: DataFrame, stage_rows: merge.Stage) -> tuple[list[str] | None, dict[str, Any]]:
        raise NotImplementedError

    def has_changes(self) -> bool:
        return self.schema is not None

    def commit_mode(self, window: TimeWindow | None) -> delta.CommitMode:
        return delta.ReplaceBuckets(tuple(self.buckets or ()))


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
