"""Carry out a RunPlan on a SparkSession: register the inputs, run the query, write and commit.

Spark writes the data files (executors do the heavy lifting); :mod:`incremental_assets.storage`
commits them with one Delta transaction. Nothing large passes through the Python process.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Mapping

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.types import StructType
from sqlglot import exp

from incremental_assets import faults, merge_writes, schema_changes, storage
from incremental_assets.errors import StorageError
from incremental_assets.keyed_kinds import IncrementalByCursor, ScdType2, UniqueKey
from incremental_assets.model import IncrementalByTimeRange, Seed, SqlModel
from incremental_assets.plan import InputRead, RunPlan, TargetState
from incremental_assets.project import Project, Source
from incremental_assets.seeds import CSV_SETTINGS
from incremental_assets.time_window import TimeWindow, next_boundary

log = logging.getLogger("incremental_assets")


@dataclass(frozen=True)
class RunResult:
    """What one executed plan did: the numbers a materialization reports."""

    model: str
    window: object  # TimeWindow | None
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


def spark_partition_expression(model: SqlModel) -> str:
    """Spark SQL for the interval key of each row (the ``ia_interval`` partition value).

    >>> from incremental_assets.model import parse_model_file
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
    unit = model.interval_unit or "day"
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


class Executor:
    """Runs plans of one project on one SparkSession (shared across intervals and models)."""

    def __init__(self, spark: SparkSession, project: Project):
        self.spark = spark
        self.project = project
        self._swept: set[str] = set()  # tables whose dead runs' staging folders this executor has removed

    # -- inputs -------------------------------------------------------------------------------
    def _empty(self, schema: StructType) -> DataFrame:
        return self.spark.createDataFrame([], schema)

    def read_source(self, source: Source, read: InputRead) -> tuple[DataFrame, str]:
        reader = self.spark.read
        if source.columns and source.format in ("csv", "json"):
            reader = reader.schema(", ".join(f"`{c}` {t}" for c, t in source.columns.items()))
        if source.format == "delta":
            if not storage.exists(source.location):
                raise StorageError(f"source {source.name}: no Delta table at {source.location}")
            files = storage.source_files(source.location, time_column=source.time_column, window=read.window)
            schema = from_arrow_schema(storage.arrow_schema(source.location, drop=()), prefer_timestamp_ntz=False)
            if not files:
                return self._empty(schema), "0 files"
            df = reader.schema(schema).option("basePath", source.location).parquet(*files)
            return df, f"{len(files)} files"
        if source.format == "table":
            return self.spark.table(source.location), "catalog table"
        if source.format == "csv":
            reader = reader.option("header", "true")
            if not source.columns:
                reader = reader.option("inferSchema", "true")
        return reader.format(source.format).load(source.location), source.location

    def read_seed(self, model: SqlModel) -> tuple[DataFrame, str]:
        """A SEED model's CSV with its checked column types (a value Spark cannot parse fails the run)."""
        kind = model.kind
        assert isinstance(kind, Seed)
        reader = self.spark.read.option("header", "true").option("mode", "FAILFAST")
        for key, value in kind.csv_settings:
            reader = reader.option(CSV_SETTINGS[key], value)
        schema = ", ".join(f"`{c}` {t}" for c, t in model.columns.items())
        return reader.schema(schema).csv(kind.location), f"seed {kind.path}"

    def read_model_table(self, name: str, read: InputRead, consumer: str | None = None) -> tuple[DataFrame, str]:
        upstream = self.project.models.get(name)
        uri = storage.table_uri(self.project.settings.warehouse, name)
        if not storage.exists(uri):
            if name == consumer and upstream is not None:
                # A model reading its own previous output: on its first run that output is empty.
                if not upstream.columns:
                    raise StorageError(
                        f"model {name} reads its own table, which does not exist yet: declare its `columns` "
                        "in the MODEL header so the first run can start from an empty table"
                    )
                schema = ", ".join(f"`{c}` {t}" for c, t in upstream.columns.items())
                return self.spark.createDataFrame([], schema), "empty (first run)"
            raise StorageError(f"model {name} has no table yet at {uri}; run it first (select +model to include upstreams)")
        unit = upstream.interval_unit if upstream is not None else None
        files = storage.committed_files(uri, window=read.window, unit=unit)
        schema = from_arrow_schema(storage.arrow_schema(uri), prefer_timestamp_ntz=False)
        if not files:
            return self._empty(schema), "0 files"
        return self.spark.read.schema(schema).parquet(*files), f"{len(files)} files"

    def register(self, plan: RunPlan) -> dict[str, str]:
        """Register every input of ``plan`` as a temporary view; returns what was read per view."""
        described: dict[str, str] = {}
        for read in plan.inputs:
            if read.kind == "view":
                assert read.plan is not None
                described.update(self.register(read.plan))
                df = self.spark.sql(read.plan.sql)
                what = "view"
            elif read.kind == "source":
                df, what = self.read_source(self.project.sources[read.name], read)
            elif read.kind == "seed":
                df, what = self.read_seed(self.project.models[read.name])
            else:
                df, what = self.read_model_table(read.name, read, consumer=plan.model)
            df.createOrReplaceTempView(read.view)
            described[read.view] = f"{read.name}: {what}" + (f", window {read.window}" if read.window else "")
        return described

    def target_state(self, model_name: str) -> TargetState | None:
        """The committed state a merge-style model's next run starts from (None for other kinds)."""
        if not isinstance(self.project.models[model_name].kind, (UniqueKey, ScdType2, IncrementalByCursor)):
            return None
        return merge_writes.target_state(self, model_name)

    # -- run ----------------------------------------------------------------------------------
    @staticmethod
    def table_types(model: SqlModel, uri: str) -> dict[str, str]:
        """The table's columns and Spark types, without those the kind adds itself (SCD type 2's validity)."""
        managed = {c.lower() for c in getattr(model.kind, "managed_columns", ())}
        # prefer_timestamp_ntz: the Delta schema round-trips to exactly the Spark types that wrote it.
        fields = from_arrow_schema(storage.arrow_schema(uri), prefer_timestamp_ntz=True).fields
        return {f.name: f.dataType.simpleString() for f in fields if f.name.lower() not in managed}

    def conform(self, model: SqlModel, uri: str, df: DataFrame) -> DataFrame:
        """Apply the kind's schema-change policies when the query's schema differs from the table's:
        raise, warn, or select the columns to write (the commit then evolves the Delta schema)."""
        table = self.table_types(model, uri)
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

    def _write_staged(self, plan: RunPlan, model: SqlModel, df: DataFrame, staging: str, *, append: bool) -> None:
        writer_mode = "append" if append else "error"  # Spark Connect knows "error", not "errorifexists"
        if plan.write in ("replace_window", "rebuild"):
            keyed = df.withColumn(storage.PARTITION_COLUMN, F.expr(spark_partition_expression(model)))
            # One file per interval: a one-interval window needs no shuffle, a longer one is grouped by interval.
            one_interval = plan.window is not None and next_boundary(plan.window.start, model.interval_unit or "day") >= plan.window.end
            keyed = keyed.coalesce(1) if one_interval else keyed.repartition(storage.PARTITION_COLUMN)
            keyed.write.mode(writer_mode).partitionBy(storage.PARTITION_COLUMN).parquet(staging)
        else:
            df.write.mode(writer_mode).parquet(staging)

    def _stage_keyed(self, plan: RunPlan, df: DataFrame, uri: str, staging: str) -> tuple[Any, list[str] | None, dict[str, Any]]:
        """Stage an upsert or SCD type 2 run's changed buckets; the schema is None when no key changed."""
        # The query runs once: duplicate check, change detection and the write all see the same rows.
        df = df.localCheckpoint()
        staged: list[Any] = []

        def stage(rows: DataFrame, column: str) -> None:
            staged.append(to_arrow_schema(rows.drop(column).schema, timezone="UTC"))
            merge_writes.write_staged(rows, staging, column)

        if plan.write == "upsert":
            buckets, details = merge_writes.upsert(self, plan, df, uri, stage)
        else:
            buckets, details = merge_writes.scd_type_2(self, plan, df, uri, stage, plan.execution_time or datetime.now(timezone.utc))
        return (staged[0] if staged else None), buckets, details

    def sweep(self, uri: str) -> None:
        """Once per table and executor (one per Dagster run), delete the staging folders that killed runs left behind."""
        if uri in self._swept:
            return
        self._swept.add(uri)
        try:
            removed = storage.remove_orphan_staging(uri)
        except (OSError, StorageError) as exc:  # cleanup never fails a run
            log.warning("could not remove dead runs' staging folders in %s: %s", uri, exc)
            return
        if removed:
            log.info("removed %d staging folder(s) of dead runs in %s", len(removed), uri)

    @staticmethod
    def _unchanged(plan: RunPlan, uri: str, inputs: dict[str, str], details: dict[str, Any], began: float) -> RunResult:
        """The result of a run that found nothing to change: no commit, the table's version as it was."""
        seconds = time.perf_counter() - began
        return RunResult(plan.model, plan.window, plan.write, 0, storage.version(uri), 0, 0, plan.sql, seconds, uri, inputs, details)

    def execute(
        self,
        plan: RunPlan,
        *,
        run_id: str | None = None,
        before_commit: Callable[[str], None] | None = None,
    ) -> RunResult:
        """Run a plan and commit its output atomically; returns rows written and the new table version."""
        if plan.write == "view":
            began = time.perf_counter()
            inputs = self.register(plan)
            self.spark.sql(plan.sql).schema  # analysis only: proves the view resolves, reads nothing
            return RunResult(plan.model, None, plan.write, None, None, 0, 0, plan.sql, time.perf_counter() - began, None, inputs)
        return self.execute_together([plan], run_id=run_id, before_commit=before_commit)

    def execute_together(
        self,
        plans: list[RunPlan],
        *,
        run_id: str | None = None,
        before_commit: Callable[[str], None] | None = None,
    ) -> RunResult:
        """Run plans of one model into one staging folder and commit them as ONE Delta transaction.

        A ``rebuild`` replaces the whole table (its schema too); ``replace_window`` replaces the
        window's intervals after checking the schema against the table's; ``replace_table`` replaces
        an unpartitioned table.
        """
        began = time.perf_counter()
        first, last = plans[0], plans[-1]
        model = self.project.models[first.model]
        uri = storage.table_uri(self.project.settings.warehouse, first.model)
        self.sweep(uri)
        staging = storage.new_staging_dir(uri)
        inputs: dict[str, str] = {}
        schema = None
        buckets: list[str] | None = None
        details: dict[str, Any] = {}
        evolved = False  # an append whose schema changed: committed as a rewrite of the whole table
        for i, plan in enumerate(plans):
            inputs.update(self.register(plan))
            if getattr(model, "fetch", None) is not None:
                inputs["fetched"] = f"{merge_writes.register_fetched(self, model, plan.target)} rows from {model.path.name}"
            df = self.spark.sql(plan.sql)
            if plan.write in ("upsert", "scd2", "append") and not merge_writes.starts_over(plan, model, uri):
                df = self.conform(model, uri, df)  # the kind's schema-change policies; the commit evolves the schema
                if plan.write == "append" and {c.lower() for c in self.table_types(model, uri)} != {c.lower() for c in df.columns}:
                    # An append commit cannot add or drop Delta columns: rewrite the table once, old rows first.
                    df = merge_writes.committed_rows(self, uri).unionByName(df, allowMissingColumns=True)
                    evolved = True
            if plan.write in ("upsert", "scd2"):
                assert len(plans) == 1, "a merge-style run is one plan"
                schema, buckets, details = self._stage_keyed(plan, df, uri, staging)
                if schema is None:
                    log.info("%s: no key changed, nothing to commit", plan.model)
                    return self._unchanged(plan, uri, inputs, details, began)
                continue
            if plan.write == "replace_window" and storage.exists(uri):
                df = self.conform(model, uri, df)
            schema = schema or to_arrow_schema(df.schema, timezone="UTC")
            if i == 0:
                faults.checkpoint("staging")
            self._write_staged(plan, model, df, staging, append=i > 0)
        assert schema is not None
        faults.checkpoint("staged")
        if first.write == "append" and not evolved and storage.exists(uri) and not storage.has_staged_rows(staging):
            # No new rows: an append would only add a version without files (the cursor stays where it is).
            storage.discard_staging(uri, staging)
            log.info("%s: no new rows, nothing to commit", first.model)
            cursor = first.target.last_value if first.target else None
            return self._unchanged(first, uri, inputs, {"cursor_before": cursor, "cursor_after": cursor}, began)
        window = TimeWindow(first.window.start, last.window.end) if first.window and last.window else None
        metadata = {
            "model": first.model,
            "fingerprint": first.fingerprint,
            "run_id": run_id or "",
            "write": first.write,
            "window_start": window.start.isoformat() if window else "",
            "window_end": window.end.isoformat() if window else "",
            "committed_at": datetime.now(timezone.utc).isoformat(),
        }
        if isinstance(model.kind, (UniqueKey, ScdType2)):
            metadata["buckets"] = str(model.kind.buckets)
        try:
            if before_commit is not None:
                before_commit(staging)
            result = storage.commit_staged(
                uri,
                staging,
                schema,
                replace_window=window if first.write == "replace_window" else None,
                partitioned=first.write in ("replace_window", "rebuild"),
                unit=model.interval_unit,
                metadata=metadata,
                name=first.model,
                buckets=buckets,
                append=first.write == "append" and not evolved,
            )
        except BaseException:
            storage.discard_staging(uri, staging)  # refused or failed: these files will never be committed
            raise
        faults.checkpoint("committed")
        if isinstance(model.kind, IncrementalByCursor):
            details["cursor_before"] = first.target.last_value if first.target and first.write == "append" else None
            details["cursor_after"] = merge_writes.new_cursor_value(self, uri, first.model)
        seconds = time.perf_counter() - began
        log.info("%s %s (%s): %s rows, version %s, %.2fs", first.model, window or "full", first.write, result.rows, result.version, seconds)
        return RunResult(
            first.model, window, first.write, result.rows, result.version, result.files, result.partitions, last.sql, seconds, uri, inputs, details
        )


def same_schema(table: Mapping[str, str], query: Mapping[str, str]) -> bool:
    """Whether two ``{column: type}`` schemas match (names compared case-insensitively, order ignored)."""
    return {k.lower(): v for k, v in table.items()} == {k.lower(): v for k, v in query.items()}


def build_spark_session(conf: Mapping[str, str], *, remote: str | None = None, app_name: str = "incremental_assets") -> SparkSession:
    """Get or create the process's SparkSession from settings (local, a cluster master, or Spark Connect)."""
    builder = SparkSession.builder.appName(app_name)
    if remote:
        builder = builder.remote(remote)
    for key, value in conf.items():
        if remote and not key.startswith("spark.sql."):
            # A Spark Connect session may only change SQL settings; the rest (master, UI, driver and
            # executor options) belong to the server, which warns on every attempt to set them.
            continue
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    if not remote:
        session.sparkContext.setLogLevel(conf.get("spark.log.level", "ERROR"))
    return session
