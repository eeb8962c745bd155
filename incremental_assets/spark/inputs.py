"""A plan's inputs as Spark temporary views: sources, upstream model tables, seeds and views.

Tables are read from the committed Delta file list (never by listing the folder, which would return
replaced files too), pruned to the partitions the plan's read window needs.
"""

from __future__ import annotations

import os
from functools import reduce
from typing import cast

from pyspark.sql import Column, DataFrame, DataFrameReader, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructType

from incremental_assets import delta
from incremental_assets.delta.files import source_data_files
from incremental_assets.errors import StorageError
from incremental_assets.load.seeds import CSV_SETTINGS, na_markers
from incremental_assets.model.intervals import TimeWindow
from incremental_assets.model.kinds import MergeKind, Seed
from incremental_assets.model.project import Project, Source
from incremental_assets.model.source_time import EPOCH_FORMATS
from incremental_assets.model.sql_model import SqlModel
from incremental_assets.plan.rebuild import TargetState
from incremental_assets.plan.run_plan import InputRead, RunPlan
from incremental_assets.spark import merge
from incremental_assets.spark.source_files import files_for_window, nanosecond_columns


def read_table_window(
    spark: SparkSession, uri: str, window: TimeWindow | None, unit: str | None
) -> tuple[DataFrame, int]:
    """A model table's committed rows of ``window`` (all without one) and how many files were read.

    Files are pruned by partition; on a table cut by day a window that is not whole days also keeps
    only the rows of its intervals (a filter on ``ia_interval``, pushed down to the Parquet reader)."""
    files = delta.committed_files(uri, window=window, unit=unit)
    schema = from_arrow_schema(delta.arrow_schema(uri), prefer_timestamp_ntz=False)
    if not files:
        return spark.createDataFrame([], schema), 0
    bounds = delta.row_filter(uri, window, unit)
    if bounds is None:
        return spark.read.schema(schema).parquet(*files), len(files)
    keyed = from_arrow_schema(
        delta.arrow_schema(uri, drop=(delta.DAY_COLUMN, delta.BUCKET_COLUMN)), prefer_timestamp_ntz=False
    )
    interval = F.col(delta.PARTITION_COLUMN)
    rows = spark.read.schema(keyed).parquet(*files).where((interval >= bounds[0]) & (interval < bounds[1]))
    return rows.drop(delta.PARTITION_COLUMN), len(files)


NUMERIC_TYPES = ("integer", "long", "short", "byte", "decimal", "double", "float")


def _text_time(source: Source, df: DataFrame) -> DataFrame:
    """The time column of a CSV or JSON source read without declared columns, as its values mean: with a text
    ``time_format``, values that look like numbers (``20240101``, inferred as an integer) stay text; without
    one, text (JSON never infers a time; CSV falls back to text when one value is not a time) is read as a
    timestamp, so the run's window compares times, not text (``2024-01-01T12:00:00Z`` > ``2024-01-01 23:00``
    as text), and a value that is not a time fails the run, named by file and line."""
    column = source.time_column
    if not column or source.columns or column not in df.columns:
        return df
    kind = df.schema[column].dataType.typeName()
    if source.time_format in EPOCH_FORMATS:
        number = "double" if source.time_format == "epoch_seconds" else "long"  # seconds may have a fraction
        return df if kind in NUMERIC_TYPES else df.withColumn(column, F.col(f"`{column}`").cast(number))
    if source.time_format and kind in NUMERIC_TYPES:
        return df.withColumn(column, F.col(f"`{column}`").cast("string"))
    if not source.time_format and kind == "string":
        return df.withColumn(column, F.col(f"`{column}`").cast("timestamp"))
    return df


def _nanoseconds_as_times(df: DataFrame, columns: tuple[tuple[str, bool], ...]) -> DataFrame:
    """Columns Spark read as numbers of nanoseconds (``spark.sql.legacy.parquet.nanosAsLong``) as the times they
    are, to the microsecond (truncated, as Spark keeps times): instants as TIMESTAMP, wall times as TIMESTAMP_NTZ
    (as Spark reads a Parquet timestamp in microseconds), whatever the session's time zone."""
    for name, instant in columns:
        if name not in df.columns:
            continue
        quoted = "`" + name.replace("`", "``") + "`"
        micros = f"({quoted} - pmod({quoted}, 1000)) div 1000"
        epoch = "TIMESTAMP_NTZ'1970-01-01 00:00:00'"
        value = f"timestamp_micros({micros})" if instant else f"timestampadd(MICROSECOND, {micros}, {epoch})"
        df = df.withColumn(name, F.expr(value))
    return df


def _seed_value(text: Column, spark_type: str, markers: frozenset[str]) -> Column:
    """A seed column's value: NULL for a missing-value marker (Spark reads an empty value as NULL: a text
    column keeps it as '' when '' is no marker) or a blank value of a typed column, else the text cast."""
    if spark_type.upper() in ("STRING", "VARCHAR", "TEXT") or spark_type.upper().startswith(("VARCHAR", "CHAR")):
        value = text if "" in markers else F.coalesce(text, F.lit(""))
        return F.when(value.isin(*sorted(markers)), None).otherwise(value) if markers else value
    missing = F.trim(text) == "" if not markers else text.isin(*sorted(markers)) | (F.trim(text) == "")
    return F.when(missing, None).otherwise(text.cast(spark_type))


class Inputs:
    """Reads and registers the inputs of a project's plans on one SparkSession."""

    def __init__(self, spark: SparkSession, project: Project):
        self.spark = spark
        self.project = project

    def _empty(self, schema: StructType) -> DataFrame:
        return self.spark.createDataFrame([], schema)

    def read_source(self, source: Source, read: InputRead) -> tuple[DataFrame, str]:
        reader = self.spark.read
        if source.columns and source.format in ("csv", "json"):
            reader = reader.schema(", ".join(f"`{c}` {t}" for c, t in source.columns.items()))
        if source.format == "delta":
            if not delta.exists(source.location):
                raise StorageError(f"source {source.name}: no Delta table at {source.location}")
            files, arrow = delta.source_files(
                source.location,
                time_column=source.time_column,
                window=read.window,
                time_format=source.time_format,
                tz=self.project.settings.zone,
            )
            # A timestamp without time zone stays one, as Spark reads it from Parquet: wall time in the session's zone.
            schema = from_arrow_schema(arrow, prefer_timestamp_ntz=True)
            if not files:
                return self._empty(schema), "0 files"
            df = reader.schema(schema).option("basePath", source.location).parquet(*files)
            return df, f"{len(files)} files"
        if (
            source.format == "parquet"
            and source.time_column
            and read.window is not None
            and delta.is_local(source.location)
        ):
            return self._parquet_window(source, read.window)
        if source.in_catalog:
            return self.spark.table(source.location), "catalog table"
        if source.format == "parquet" and delta.is_local(source.location):
            location = source.location.removeprefix("file://")
            reader = self.spark.read.option("basePath", location) if os.path.isdir(location) else self.spark.read
            files = source_data_files(location)
            if any(nanosecond_columns(path) for path in files):
                return _text_time(source, self._parquet(reader, files)), source.location
        if source.format in ("csv", "json"):
            # A malformed line or a value of the wrong type fails the run (named by file), never a silent NULL row.
            reader = reader.option("mode", "FAILFAST")
        if source.format == "csv":
            reader = reader.options(**source.csv.spark_options())
            if not source.columns:
                reader = reader.option("inferSchema", "true")
        return _text_time(source, reader.format(source.format).load(source.location)), source.location

    def _parquet_window(self, source: Source, window: TimeWindow) -> tuple[DataFrame, str]:
        """A Parquet source (one file or a folder) read from only the files whose time statistics overlap
        ``window``; a folder's ``key=value`` subfolders stay columns."""
        location = source.location.removeprefix("file://")
        files, total, sample = files_for_window(
            location,
            source.time_column or "",
            window,
            time_format=source.time_format,
            tz=self.project.settings.zone,
        )
        reader = self.spark.read.option("basePath", location) if os.path.isdir(location) else self.spark.read
        if files or sample is None:
            return self._parquet(reader, files or [location]), f"{len(files)} of {total} files"
        # No file holds rows of the window: its columns are those of a file whose footer reads.
        return self._empty(self._parquet(reader, [sample]).schema), f"0 of {total} files"

    def _parquet(self, reader: DataFrameReader, paths: list[str]) -> DataFrame:
        """Parquet files (or one folder) as one DataFrame. Spark reads a timestamp in nanoseconds (pandas' default)
        as a number: each file's footer says which columns hold them, and the files read alike are read together
        and their columns turned into times; files that differ are read apart and put together by name."""
        groups: dict[tuple[tuple[str, bool], ...], list[str]] = {}
        for path in paths:
            groups.setdefault(nanosecond_columns(path), []).append(path)
        frames = [_nanoseconds_as_times(reader.parquet(*group), columns) for columns, group in groups.items()]
        return reduce(lambda left, right: left.unionByName(right, allowMissingColumns=True), frames)

    def read_seed(self, model: SqlModel) -> tuple[DataFrame, str]:
        """A SEED model's CSV as SQLMesh reads it: its values as text (a quoted value may span lines, a quote
        in one is written twice), the missing-value markers NULL, the others cast to the checked column types
        (the checks ran when the project was loaded, naming the file and line of a bad value)."""
        kind = model.kind
        assert isinstance(kind, Seed)
        settings = dict(kind.csv_settings)
        reader = self.spark.read.options(header="true", mode="FAILFAST", multiLine="true")
        # Without an escapechar a backslash is a character, as pandas reads it (Spark's default escapes with it).
        reader = reader.option("escape", settings.get("escapechar", settings.get("quotechar", '"')))
        for key, value in settings.items():
            if CSV_SETTINGS[key] is not None:
                reader = reader.option(str(CSV_SETTINGS[key]), value)
        text = reader.schema(", ".join(f"`{c}` STRING" for c in model.columns)).csv(kind.location)
        values = [_seed_value(F.col(f"`{c}`"), t, na_markers(settings, c)).alias(c) for c, t in model.columns.items()]
        return text.select(*values), f"seed {kind.path}"

    def read_model_table(self, name: str, read: InputRead, consumer: str | None = None) -> tuple[DataFrame, str]:
        upstream = self.project.models.get(name)
        uri = self.project.settings.table_location(name)
        if not delta.exists(uri):
            if name == consumer and upstream is not None:
                # A model reading its own previous output: on its first run that output is empty.
                if not upstream.columns:
                    raise StorageError(
                        f"model {name} reads its own table, which does not exist yet: declare its `columns` "
                        "in the MODEL header so the first run can start from an empty table"
                    )
                schema = ", ".join(f"`{c}` {t}" for c, t in upstream.columns.items())
                return self.spark.createDataFrame([], schema), "empty (first run)"
            raise StorageError(f"model {name} has no table yet at {uri}; materialize it (and what it reads) first")
        unit = upstream.interval_unit if upstream is not None else None
        df, files = read_table_window(self.spark, uri, read.window, unit)
        return df, f"{files} files"

    def register(self, plan: RunPlan, catalog: bool | None = None) -> dict[str, str]:
        """Register the inputs of ``plan`` as temporary views; returns what was read per view. ``catalog``:
        only the tables and views of Spark's catalog (True), every input but those (False), all (None)."""
        described: dict[str, str] = {}
        for read in plan.inputs:
            source = self.project.sources.get(read.name) if read.kind == "source" else None
            if catalog is not None and catalog != (source is not None and source.in_catalog):
                continue
            if read.kind == "view":
                assert read.plan is not None
                described.update(self.register(read.plan))
                df = self.spark.sql(read.plan.sql)
                described[read.view] = _described(read, "view")
            else:
                df = self._input_frame(plan, read, described)
            df.createOrReplaceTempView(read.view)
        return described

    def query_frame(self, plan: RunPlan, described: dict[str, str]) -> DataFrame:
        """On Spark Connect, the plan's query as one lazy DataFrame whose inputs are bound to the query alone
        (no temporary view registered, no round trip before the query runs); what each input read goes into
        ``described``. For a plan without statements, whose inputs are all outside Spark's catalog."""
        from pyspark.sql.connect.dataframe import DataFrame as ConnectFrame
        from pyspark.sql.connect.plan import SQL, SubqueryAlias
        from pyspark.sql.connect.session import SparkSession as ConnectSession

        bound = []
        for read in plan.inputs:
            if read.kind == "view":
                assert read.plan is not None
                df = self.query_frame(read.plan, described)
                described[read.view] = _described(read, "view")
            else:
                df = self._input_frame(plan, read, described)
            bound.append(SubqueryAlias(cast(ConnectFrame, df)._plan, read.view))
        return cast(DataFrame, ConnectFrame(SQL(plan.sql, [], {}, bound), cast(ConnectSession, self.spark)))

    def _input_frame(self, plan: RunPlan, read: InputRead, described: dict[str, str]) -> DataFrame:
        """One input of ``plan`` (not a view) as a DataFrame; what it read goes into ``described``."""
        source = self.project.sources.get(read.name) if read.kind == "source" else None
        if source is not None:
            df, what = self.read_source(source, read)
        elif read.kind == "seed":
            df, what = self.read_seed(self.project.models[read.name])
        else:
            df, what = self.read_model_table(read.name, read, consumer=plan.model)
        described[read.view] = _described(read, what)
        return df

    def target_state(self, model_name: str) -> TargetState | None:
        """The committed state a merge-style model's next run starts from (None for other kinds)."""
        if not isinstance(self.project.models[model_name].kind, MergeKind):
            return None
        return merge.target_state(self, model_name)


def _described(read: InputRead, what: str) -> str:
    """What a run's input read, as the run's inputs list it."""
    return f"{read.name}: {what}" + (f", window {read.window}" if read.window else "")
