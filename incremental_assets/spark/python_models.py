"""SQLMesh Python models on Spark: call ``execute`` for a run window and register what it returns.

``execute(context, start, end, execution_time, **kwargs)`` gets SQLMesh's arguments: ``start`` the window's
first instant, ``end`` its last (SQLMesh's inclusive end), ``execution_time`` the run's time. The context
offers what SQLMesh's ``ExecutionContext`` does for reading: ``resolve_table(name)`` / ``table(name)`` give
the temporary view the run registered for an upstream model, ``fetchdf(sql)`` runs Spark SQL and returns
pandas, ``var(name, default)`` reads a config variable, ``spark`` is the session. The function may return a
pandas or Spark DataFrame, a pyarrow Table, or yield several of them; the rows are registered as the view
the model's query reads, with the declared column types.
"""

from __future__ import annotations

import inspect
from datetime import datetime, timedelta, timezone
from typing import Any, Iterable

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from incremental_assets.errors import StorageError
from incremental_assets.load.sqlmesh_models import PYTHON_ROWS_VIEW, SqlmeshPythonModel
from incremental_assets.model.project import Project
from incremental_assets.plan.run_plan import RunPlan, view_name


class ExecutionContext:
    """What a Python model's ``execute`` reads through: upstream tables, SQL, variables."""

    def __init__(self, spark: SparkSession, project: Project, model: SqlmeshPythonModel):
        self.spark = spark
        self._project = project
        self._model = model

    def resolve_table(self, name: str) -> str:
        key = name.replace('"', "").replace("`", "").lower()
        if key not in self._model.depends_on:
            raise StorageError(
                f"model {self._model.name} ({self._model.path}) reads {key}, which it does not depend on: "
                "add it to depends_on=[...] in @model"
            )
        return view_name(key)

    table = resolve_table

    def fetchdf(self, sql: Any) -> Any:
        return self.spark.sql(sql if isinstance(sql, str) else sql.sql(dialect="spark")).toPandas()

    def var(self, name: str, default: Any = None) -> Any:
        return self._project.variables.get(name.lower(), default)


def _frames(result: Any) -> Iterable[Any]:
    if result is None:
        return []
    if inspect.isgenerator(result) or isinstance(result, (list, tuple)):
        return [r for r in result if r is not None]
    return [result]


def _spark_frame(spark: SparkSession, value: Any, schema: str) -> DataFrame:
    if isinstance(value, DataFrame):
        return value
    if isinstance(value, pa.Table):
        value = value.to_pandas()
    if len(value) == 0:
        return spark.createDataFrame([], schema)
    names = [c.split("`")[1] for c in schema.split(", ")]
    return spark.createDataFrame(value[names] if hasattr(value, "columns") else value, schema=schema)


def register_python_rows(spark: SparkSession, project: Project, model: SqlmeshPythonModel, plan: RunPlan) -> str:
    """Call the model's function for the plan's window; register its rows as the model's input view."""
    assert model.execute is not None
    window = plan.window
    start = window.start if window else (model.start or datetime(1970, 1, 1, tzinfo=timezone.utc))
    end = window.end - timedelta(microseconds=1) if window else (plan.execution_time or datetime.now(timezone.utc))
    execution_time = plan.execution_time or datetime.now(timezone.utc)
    context = ExecutionContext(spark, project, model)
    try:
        result = model.execute(context, start=start, end=end, execution_time=execution_time)
        frames = list(_frames(result))
    except StorageError:
        raise
    except Exception as exc:  # the user's code: say which model and file raised
        raise StorageError(f"model {model.name} ({model.path}): execute raised {type(exc).__name__}: {exc}") from exc
    schema = ", ".join(f"`{c}` {t}" for c, t in model.columns.items())
    df = spark.createDataFrame([], schema)
    for frame in frames:
        df = df.unionByName(_spark_frame(spark, frame, schema).selectExpr(*(f"CAST(`{c}` AS {t}) AS `{c}`" for c, t in model.columns.items())))
    df.createOrReplaceTempView(PYTHON_ROWS_VIEW)
    return f"{len(frames)} frame(s) from {model.path.name}"
