"""Python models on Spark (:class:`~incremental_assets.model.python_model.PythonModel`): call the model's
function for a run and register what it returns as the view its query reads (:func:`register_python_rows`).

A source model's ``fetch`` is called with the committed cursor (:func:`register_fetched`). A SQLMesh model's
``execute`` (:func:`register_executed`) is called as SQLMesh calls it, with keyword arguments only:
``context``, ``start`` (the window's first instant), ``end`` (its last: SQLMesh's inclusive end),
``execution_time`` (and its old name ``latest``) and the project's variables; a function without
``**kwargs`` gets the ones it names. A model without a run window (FULL) gets the last complete interval of
its cron: ``end`` just before, and ``execution_time`` at, that interval's end. The context offers what
SQLMesh's ``ExecutionContext`` does for reading: ``resolve_table(name)`` / ``table(name)`` give the
temporary view the run registered for an upstream model (or for the model's own table: empty on its first
run), ``fetchdf(sql)`` runs a query on Spark and returns pandas (SQL text in the model's dialect or a
sqlglot expression), ``engine_adapter`` (dialect ``spark``, ``fetchdf``, ``execute``), ``var(name,
default)`` reads a config variable, ``spark`` is the session. The function may return a pandas or Spark
DataFrame, a pyarrow Table, or yield several of them; the rows are registered as the view the model's query
reads, with the declared column types.
"""

from __future__ import annotations

import inspect
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Iterable

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema
from sqlglot import exp, parse_one

from incremental_assets import delta
from incremental_assets.errors import StorageError
from incremental_assets.load.python_models import FETCHED_VIEW, PythonSourceModel, call_fetch
from incremental_assets.load.sqlmesh_models import PYTHON_ROWS_VIEW, SqlmeshPythonModel
from incremental_assets.model import clock
from incremental_assets.model.kinds import IncrementalByCursor
from incremental_assets.model.project import Project
from incremental_assets.model.python_model import PythonModel
from incremental_assets.model.sql_model import SqlModel
from incremental_assets.plan.rebuild import TargetState
from incremental_assets.plan.run_plan import RunPlan, view_name
from incremental_assets.spark.merge import Session

SPARK = "spark"


class EngineAdapter:
    """``context.engine_adapter``: the engine the model runs on, Spark, as far as reading goes."""

    dialect = SPARK

    def __init__(self, context: ExecutionContext):
        self._context = context

    def fetchdf(self, query: Any, quote_identifiers: bool = False) -> Any:
        return self._context.fetchdf(query, quote_identifiers=quote_identifiers)

    def execute(self, query: Any, quote_identifiers: bool = False, **_kwargs: Any) -> None:
        self._context.spark.sql(self._context.spark_sql(query, quote_identifiers))


class ExecutionContext:
    """What a Python model's ``execute`` reads through: upstream tables, SQL, variables."""

    def __init__(self, spark: SparkSession, project: Project, model: SqlmeshPythonModel):
        self.spark = spark
        self._project = project
        self._model = model
        self.engine_adapter = EngineAdapter(self)

    def resolve_table(self, model_name: str) -> str:
        key = str(model_name).replace('"', "").replace("`", "").lower()
        if key not in self._model.depends_on:
            raise StorageError(
                f"model {self._model.name} ({self._model.path}) reads {key}, which it does not depend on: "
                "add it to depends_on=[...] in @model"
            )
        return view_name(key)

    table = resolve_table

    def spark_sql(self, query: Any, quote_identifiers: bool = False) -> str:
        """A query as Spark SQL: an expression as is, SQL text read in the model's dialect."""
        if not isinstance(query, exp.Expression):
            query = parse_one(str(query), read=self._model.dialect or SPARK)
        return query.sql(dialect=SPARK, identify=quote_identifiers)

    def fetchdf(self, query: Any, quote_identifiers: bool = False) -> Any:
        return self.spark.sql(self.spark_sql(query, quote_identifiers)).toPandas()

    def var(self, name: str, default: Any = None) -> Any:
        return self._project.variables.get(name.lower(), default)

    blueprint_var = var

    @property
    def gateway(self) -> str:
        return SPARK


def _frames(result: Any) -> Iterable[Any]:
    if result is None:
        return []
    if inspect.isgenerator(result) or isinstance(result, (list, tuple)):
        return [r for r in result if r is not None]
    return [result]


_LOOSE = {"f": "double", "i": "bigint", "u": "bigint", "b": "boolean", "M": "timestamp"}


def _spark_frame(spark: SparkSession, value: Any, columns: dict[str, str], schema: str) -> DataFrame:
    """Rows as a Spark frame with the declared column names; numbers and times keep pandas' type here
    (a float column into ``decimal(7, 2)`` or ``int``) and the caller casts them to the declared types."""
    if isinstance(value, DataFrame):
        return value
    if isinstance(value, pa.Table):
        value = value.to_pandas()
    if not hasattr(value, "columns"):
        return spark.createDataFrame(value, schema=schema)
    if len(value) == 0:
        return spark.createDataFrame([], schema)
    missing = [c for c in columns if c not in value.columns]
    if missing:
        raise ValueError(
            f"the rows have no column(s) {', '.join(missing)} (they have {', '.join(map(str, value.columns))})"
        )
    value = value[list(columns)]
    loose = ", ".join(f"`{c}` {_LOOSE.get(value[c].dtype.kind, t)}" for c, t in columns.items())
    rows = value.astype(object).where(value.notna(), None).itertuples(index=False, name=None)
    return spark.createDataFrame([tuple(_python_value(v) for v in row) for row in rows], schema=loose)


def _python_value(value: Any) -> Any:
    """pandas' and numpy's scalars (``Timestamp``, ``int64``) as the Python values Spark accepts."""
    if hasattr(value, "to_pydatetime"):
        return value.to_pydatetime()
    if hasattr(value, "item") and type(value).__module__ == "numpy":
        return value.item()
    return value


def execute_arguments(model: SqlmeshPythonModel, plan: RunPlan, variables: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments of ``execute`` for a run, as SQLMesh gives them."""
    execution_time = plan.execution_time or clock.now()
    window = plan.window
    if window is not None:
        start, end = window.start, window.end
    else:  # FULL: the last complete interval of the model's cron
        end = model.unit.floor(execution_time)
        start, execution_time = model.start or datetime(1970, 1, 1, tzinfo=timezone.utc), end
    given = {
        **variables,
        "start": start,
        "end": end - timedelta(microseconds=1),
        "execution_time": execution_time,
        "latest": execution_time,
    }
    assert model.execute is not None
    params = inspect.signature(model.execute).parameters
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        given = {k: v for k, v in given.items() if k in params}
    return given


def register_python_rows(session: Session, model: SqlModel, plan: RunPlan) -> dict[str, str]:
    """For a model whose rows come from Python, call its function for the plan's run and register the rows as
    the view its query reads; returns what was read, as a run's inputs name it. Nothing for other models."""
    if not isinstance(model, PythonModel):
        return {}
    input_name, register = _REGISTER[model.function_name]
    return {input_name: register(session, model, plan)}


def register_executed(session: Session, model: SqlmeshPythonModel, plan: RunPlan) -> str:
    """Call the model's ``execute`` for the plan's window; register its rows as the model's input view."""
    assert model.execute is not None
    spark, project = session.spark, session.project
    context = ExecutionContext(spark, project, model)
    columns = dict(model.columns)
    schema = ", ".join(f"`{c}` {t}" for c, t in columns.items())
    try:
        result = model.execute(context=context, **execute_arguments(model, plan, dict(project.variables or {})))
        frames = list(_frames(result))
        df = spark.createDataFrame([], schema)
        for frame in frames:
            df = df.unionByName(
                _spark_frame(spark, frame, columns, schema).selectExpr(
                    *(f"CAST(`{c}` AS {t}) AS `{c}`" for c, t in columns.items())
                )
            )
    except StorageError:
        raise
    except Exception as exc:  # the user's code: say which model and file raised, in one line
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise StorageError(
            f"model {model.name} ({model.path}): execute raised {type(exc).__name__}: {message}"
        ) from None
    df.createOrReplaceTempView(PYTHON_ROWS_VIEW)
    return f"{len(frames)} frame(s) from {model.path.name}"


def register_fetched(session: Session, model: PythonSourceModel, plan: RunPlan) -> str:
    """Call a Python source model's fetch with the committed cursor and register its rows for the query."""
    return f"{_fetched_rows(session, model, plan.target)} rows from {model.path.name}"


def _fetched_rows(executor: Session, model: PythonSourceModel, target: TargetState | None) -> int:
    """How many rows ``fetch`` returned, registered as the model's input view."""
    kind = model.kind
    assert isinstance(kind, IncrementalByCursor)
    target = target or TargetState()
    backfill = target.is_backfill(model)
    last: Any = kind.initial_value
    if not backfill and target.last_value is not None and target.value_type:
        last = executor.spark.range(1).select(F.lit(target.last_value).cast(target.value_type)).take(1)[0][0]
    rows = call_fetch(model, last, kind.initial_value, backfill)
    schema: Any = ", ".join(f"`{c}` {t}" for c, t in model.columns.items()) or None
    uri = executor.project.settings.table_location(model.name)
    if schema is None and delta.exists(uri):
        schema = from_arrow_schema(delta.arrow_schema(uri), prefer_timestamp_ntz=False)
    if isinstance(rows, pa.Table):
        rows = rows.to_pandas()
    if rows is None or len(rows) == 0:
        if schema is None:
            raise StorageError(
                f"model {model.name} ({model.path}): fetch returned no rows and the table does not exist yet; "
                "declare 'columns' in MODEL so an empty first run has a schema"
            )
        df = executor.spark.createDataFrame([], schema)
    else:
        df = executor.spark.createDataFrame(rows, schema=schema)
    df.createOrReplaceTempView(FETCHED_VIEW)
    return 0 if rows is None else len(rows)


# The function each kind of Python model is called through: what a run's inputs name its rows, and the call.
_REGISTER: dict[str, tuple[str, Callable[[Session, Any, RunPlan], str]]] = {
    PythonSourceModel.function_name: ("fetched", register_fetched),
    SqlmeshPythonModel.function_name: ("python", register_executed),
}
