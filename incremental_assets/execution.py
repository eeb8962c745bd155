"""Carry out a RunPlan on a SparkSession: register the inputs, run the query, write and commit.

Spark writes the data files (executors do the heavy lifting); :mod:`incremental_assets.storage`
commits them with one Delta transaction. Nothing large passes through the Python process.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Callable, Mapping

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.types import StructType
from sqlglot import exp

from incremental_assets import faults, storage
from incremental_assets.errors import StorageError
from incremental_assets.model import IncrementalByTimeRange, SqlModel
from incremental_assets.plan import InputRead, RunPlan
from incremental_assets.project import Project, Source
from incremental_assets.time_window import next_boundary

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
            else:
                df, what = self.read_model_table(read.name, read, consumer=plan.model)
            df.createOrReplaceTempView(read.view)
            described[read.view] = f"{read.name}: {what}" + (f", window {read.window}" if read.window else "")
        return described

    # -- run ----------------------------------------------------------------------------------
    _swept: set[str] = set()  # tables whose dead staging folders this process has already removed

    def sweep(self, uri: str) -> None:
        """Once per table and process, delete the staging folders that killed runs left behind."""
        if uri in Executor._swept:
            return
        Executor._swept.add(uri)
        try:
            removed = storage.remove_orphan_staging(uri)
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
        began = time.perf_counter()
        model = self.project.models[plan.model]
        inputs = self.register(plan)
        df = self.spark.sql(plan.sql)
        if plan.write == "view":
            df.schema  # analysis only: proves the view resolves, reads nothing
            return RunResult(plan.model, None, plan.write, None, None, 0, 0, plan.sql, time.perf_counter() - began, None, inputs)

        uri = storage.table_uri(self.project.settings.warehouse, plan.model)
        self.sweep(uri)
        staging = storage.new_staging_dir(uri)
        schema = to_arrow_schema(df.schema, timezone="UTC")
        if plan.write == "replace_window":
            keyed = df.withColumn(storage.PARTITION_COLUMN, F.expr(spark_partition_expression(model)))
            # One file per interval: a one-interval window needs no shuffle, a longer one is grouped by interval.
            one_interval = plan.window is not None and next_boundary(plan.window.start, model.interval_unit or "day") >= plan.window.end
            keyed = keyed.coalesce(1) if one_interval else keyed.repartition(storage.PARTITION_COLUMN)
            faults.checkpoint("staging")
            keyed.write.partitionBy(storage.PARTITION_COLUMN).parquet(staging)
        else:
            faults.checkpoint("staging")
            df.write.parquet(staging)
        faults.checkpoint("staged")
        metadata = {
            "model": plan.model,
            "fingerprint": plan.fingerprint,
            "run_id": run_id or "",
            "window_start": plan.window.start.isoformat() if plan.window else "",
            "window_end": plan.window.end.isoformat() if plan.window else "",
            "committed_at": datetime.now(timezone.utc).isoformat(),
        }
        try:
            if before_commit is not None:
                before_commit(staging)
            result = storage.commit_staged(
                uri,
                staging,
                schema,
                replace_window=plan.window if plan.write == "replace_window" else None,
                unit=model.interval_unit,
                metadata=metadata,
                name=plan.model,
            )
        except BaseException:
            storage.discard_staging(uri, staging)  # refused or failed: these files will never be committed
            raise
        faults.checkpoint("committed")
        seconds = time.perf_counter() - began
        log.info("%s %s: %s rows, version %s, %.2fs", plan.model, plan.window or "full", result.rows, result.version, seconds)
        return RunResult(
            plan.model, plan.window, plan.write, result.rows, result.version, result.files, result.partitions, plan.sql, seconds, uri, inputs
        )


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
