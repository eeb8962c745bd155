"""Model unit tests in SQLMesh's YAML format (read by :mod:`.model_test_files`), run on Spark with fixture
rows instead of tables.

The query is planned exactly as a run would (macros, leakage clamp, pushdown) with the test's variables and
execution time; each input view is fed the fixture rows (or its fixture query's). Rows compare without regard
to order, on every output column (a column the expected rows leave out is NULL) or, with ``partial: true``,
on the columns the expected rows name.
"""

from __future__ import annotations

import datetime as dt
import difflib
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

from py4j.protocol import Py4JError
from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from sqlglot import exp

from incremental_assets.errors import IncrementalAssetsError, ModelFileError
from incremental_assets.load.model_graph import as_written, inline_embedded
from incremental_assets.load.project import load_project
from incremental_assets.model.intervals import (
    IntervalUnit,
    TimeWindow,
    is_boundary,
    next_boundary,
    to_utc,
)
from incremental_assets.model.kinds import Full
from incremental_assets.model.project import Project
from incremental_assets.model.python_model import PythonModel
from incremental_assets.model.sql_model import SqlModel
from incremental_assets.plan.run_plan import RunPlan, plan_run
from incremental_assets.spark.executor import Executor
from incremental_assets.spark.model_test_files import Fixture, ModelTest, load_model_tests
from incremental_assets.spark.python_models import register_python_rows

__all__ = ["ModelTest", "TestOutcome", "load_model_tests", "run_model_test", "compare"]


@dataclass
class TestOutcome:
    test: ModelTest
    failures: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.failures


# SQLMesh's test window when `vars` gives no start (nor end): 1970-01-01.
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def _window(test: ModelTest, unit: str) -> TimeWindow:
    """The test's window, read as SQLMesh reads ``vars``: an ``end`` that is a date names its last day
    (inclusive), one with a time of day is exclusive (``12:00:00`` stops before noon; ``11:59:59.999999``
    ends after the 11:00 interval); without an end, the start's interval alone."""
    start = to_utc(test.start) if test.start is not None else _EPOCH
    if test.end is None:
        return TimeWindow(start, next_boundary(start, unit) if is_boundary(start, unit) else start)
    end = to_utc(test.end)
    if _is_date(test.end):
        end = end + dt.timedelta(days=1)
    return TimeWindow(start, IntervalUnit.of(unit).ceil(end))


def _is_date(value: Any) -> bool:
    """A ``vars`` value without a time of day: a YAML date, or text such as ``2024-01-02``."""
    if isinstance(value, dt.datetime):
        return False
    return isinstance(value, dt.date) or (isinstance(value, str) and len(value.strip()) <= 10)


class _FixtureExecutor(Executor):
    """Reads every input from the test's rows instead of tables."""

    def __init__(self, spark: SparkSession, project: Project, test: ModelTest):
        super().__init__(spark, project)
        self.test = test

    def _declared(self, name: str) -> dict[str, str]:
        return dict(
            self.project.sources[name].columns if name in self.project.sources else self.project.models[name].columns
        )

    def _schema(self, name: str) -> str | None:
        declared = self._declared(name)
        return ", ".join(f"`{c}` {t}" for c, t in declared.items()) if declared else None

    def register(self, plan: RunPlan, catalog: bool | None = None) -> dict[str, str]:
        if catalog:  # a catalog table among the inputs has its rows from the test too, given with the others
            return {}
        for read in plan.inputs:
            fixture = self.test.inputs.get(read.name)
            if fixture is None and read.name == plan.model:
                self._own_table(read.name).createOrReplaceTempView(read.view)  # SQLMesh: its own table starts empty
                continue
            if fixture is None:
                raise ModelFileError(
                    self.test.path, None, f"test {self.test.name}: no rows given for input {read.name}"
                )
            self._frame(fixture, self._declared(read.name)).createOrReplaceTempView(read.view)
        return {}

    def _frame(self, fixture: Fixture, declared: dict[str, str]) -> DataFrame:
        """A fixture's rows as a table of the declared columns and types (a column it leaves out is NULL)."""
        if fixture.query is not None:
            df = self.spark.sql(fixture.query)
            if not declared:
                return df
            extra = [f"`{c}`" for c in df.columns if c.lower() not in {d.lower() for d in declared}]
            given = {c.lower() for c in df.columns}
            return df.selectExpr(
                *(f"CAST({f'`{c}`' if c.lower() in given else 'NULL'} AS {t}) AS `{c}`" for c, t in declared.items()),
                *extra,
            )
        if declared:
            data = [tuple(_typed_value(r.get(c), t) for c, t in declared.items()) for r in fixture.rows]
            return self.spark.createDataFrame(
                data, "struct<" + ", ".join(f"`{c}`: {t}" for c, t in declared.items()) + ">"
            )
        return self.spark.createDataFrame([{k: _spark_value(v) for k, v in r.items()} for r in fixture.rows])

    def _own_table(self, name: str) -> Any:
        """A self-referencing model's own table, empty: its declared columns, else the expected rows' columns."""
        schema = self._schema(name)
        if schema:
            return self.spark.createDataFrame([], schema)
        if self.test.query is not None and (self.test.query.rows or self.test.query.query):
            return self._frame(self.test.query, {}).limit(0)
        raise ModelFileError(
            self.test.path,
            None,
            f"test {self.test.name}: model {name} reads itself; give its rows as an input or declare its columns",
        )


def _typed_value(v: Any, spark_type: str) -> Any:
    """A YAML value for a column of a declared type (YAML reads ``1.23`` as a float, ``'1'`` for text as 1)."""
    if v is None:
        return None
    kind = spark_type.strip().lower()
    if kind.startswith("decimal"):
        return Decimal(str(v))
    if kind in ("string", "varchar", "text") or kind.startswith(("varchar", "char")):
        return str(v)
    if kind in ("double", "float") and isinstance(v, int) and not isinstance(v, bool):
        return float(v)
    if kind in ("int", "integer", "bigint", "smallint", "tinyint") and isinstance(v, float) and v.is_integer():
        return int(v)  # a CSV column with an empty cell is read as floats
    return _spark_value(v)


def _spark_value(v: Any) -> Any:
    if isinstance(v, str):
        for parse in (dt.datetime.fromisoformat,):
            try:
                parsed = parse(v)
                return parsed.date() if len(v) == 10 else parsed
            except ValueError:
                pass
    return v


def _norm(v: Any) -> str:
    if isinstance(v, (Decimal, float)) or isinstance(v, int) and not isinstance(v, bool):
        return repr(round(float(v), 6))
    if isinstance(v, dt.datetime):
        return v.replace(tzinfo=None).isoformat(sep=" ")
    if isinstance(v, dt.date):
        return v.isoformat()
    if isinstance(v, str):
        try:
            return _norm(_spark_value(v)) if _spark_value(v) is not v else v
        except Exception:
            return v
    return repr(v)


def compare(
    what: str,
    expected: list[dict[str, Any]],
    actual: list[dict[str, Any]],
    columns: list[str] | None = None,
    partial: bool = False,
) -> str | None:
    """None when the rows match (any order); else a unified diff of the rows. Compared are the output's
    ``columns`` (of its rows when not given), one the expected rows leave out being NULL, as SQLMesh compares
    them; with ``partial``, only the columns the expected rows name."""
    columns = list(columns) if columns is not None else list(dict.fromkeys(c for r in actual for c in r))
    named = list(dict.fromkeys(c for r in expected for c in r))
    missing = [c for c in named if columns and c not in columns]
    if missing:
        return f"{what}: the output has no column(s) {', '.join(missing)}; it has {', '.join(columns)}"
    cols = (named or columns) if partial else (columns or named)

    def lines(rows):
        return sorted("  ".join(f"{c}={_norm(r.get(c))}" for c in cols) for r in rows)

    want, got = lines(expected), lines(actual)
    if want == got:
        return None
    diff = "\n".join(difflib.unified_diff(want, got, "expected", "actual", lineterm="", n=len(want) + len(got)))
    left_out = [c for c in cols if c not in named] if expected else []
    note = (
        f" (the expected rows leave out {', '.join(left_out)}: compared as NULL; `partial: true` compares only"
        " the columns given)"
        if left_out
        else ""
    )
    return f"{what}: rows differ{note}\n{diff}"


def run_model_test(spark: SparkSession, project: Project, test: ModelTest) -> TestOutcome:
    """Run one test; anything that stops it (a test that cannot be read, an unsupported model, a Spark error)
    is its failure alone, in one line."""
    if test.problem is not None:
        return TestOutcome(test, [f"invalid test: {test.problem.render()}"])
    try:
        return _run_model_test(spark, project, test)
    except (IncrementalAssetsError, AnalysisException, Py4JError) as exc:
        message = (
            exc.message
            if isinstance(exc, ModelFileError)
            else (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        )
        return TestOutcome(test, [f"cannot run: {message}"])
    except Exception as exc:  # anything else the model's own code raised: one line, never a traceback
        first = (str(exc).strip().splitlines() or [""])[0]
        return TestOutcome(test, [f"cannot run: {type(exc).__name__}: {first}"])


def _with_variables(project: Project, test: ModelTest) -> Project:
    """The project as the test sees it: its ``vars`` (other than its times) override the config's variables,
    in every macro (``@VAR('x')``, ``@x``) and in Python models."""
    if not test.variables:
        return project
    folders = project.directories or (project.directory,)
    return load_project(list(folders), settings=project.settings, variables=test.variables)


def _frozen_clock(plan: RunPlan, execution_time: dt.datetime) -> RunPlan:
    """The plan with CURRENT_DATE / CURRENT_TIMESTAMP read as the test's execution time, as SQLMesh renders them."""
    instant = execution_time.astimezone(dt.timezone.utc).isoformat(sep=" ")  # its offset: whatever the session zone
    values: dict[type, tuple[str, str]] = {
        exp.CurrentDate: (instant[:10], "DATE"),
        exp.CurrentTimestamp: (instant, "TIMESTAMP"),
        exp.CurrentDatetime: (instant, "TIMESTAMP"),
    }

    def freeze(node: exp.Expr) -> exp.Expr:
        text, kind = values.get(type(node), ("", ""))
        return exp.cast(exp.Literal.string(text), kind) if kind else node

    return replace(plan, query=plan.query.transform(freeze))


def _embedded_as_inputs(project: Project, model: SqlModel, test: ModelTest) -> tuple[Project, SqlModel]:
    """The project as SQLMesh tests ``model``: an EMBEDDED model the test gives rows for is one of its inputs
    (read as a table), not inlined; the others stay inlined (their inputs' rows given instead)."""
    given = {name for name in model.embeds if name in test.inputs}
    if not given:
        return project, model
    written = {name: as_written(m) for name, m in project.models.items()}
    written.update({name: replace(written[name], kind=Full()) for name in given})
    inlined = inline_embedded(written)
    models = {**project.models, **{name: inlined[name] for name in (*given, model.name)}}
    return replace(project, models=models), models[model.name]


def _test_plan(project: Project, test: ModelTest) -> tuple[Project, SqlModel, RunPlan]:
    """The tested model's run as the test asks: its variables, window and execution time."""
    project = _with_variables(project, test)
    model = project.models[test.model]
    if isinstance(model, SqlModel):
        project, model = _embedded_as_inputs(project, model, test)
    window = _window(test, model.unit) if model.is_incremental else None
    if window is not None:
        # SQLMesh runs a test's window whatever the model's start and end.
        model = replace(model, start=min(model.start or window.start, model.unit.floor(window.start)), end=None)
        project = replace(project, models={**project.models, model.name: model})
    execution_time = to_utc(str(test.execution_time)) if test.execution_time is not None else None
    plan = plan_run(
        project, model, window, execution_time=execution_time or (window.end if window else None), allow_downgrade=True
    )
    return project, model, _frozen_clock(plan, execution_time) if execution_time else plan


def _expected(spark: SparkSession, fixture: Fixture) -> list[dict[str, Any]]:
    """An expected output's rows: as written, or its query's result."""
    if fixture.query is not None:
        return [r.asDict() for r in spark.sql(fixture.query).collect()]
    return fixture.rows


def _check(spark: SparkSession, what: str, fixture: Fixture, sql: str) -> str | None:
    df = spark.sql(sql)
    return compare(what, _expected(spark, fixture), [r.asDict() for r in df.collect()], df.columns, fixture.partial)


def _run_model_test(spark: SparkSession, project: Project, test: ModelTest) -> TestOutcome:
    project, model, plan = _test_plan(project, test)
    executor = _FixtureExecutor(spark, project, test)
    outcome = TestOutcome(test)
    executor.register(plan)
    if isinstance(model, PythonModel) and model.reads_tables:  # its function reads the fixture views
        register_python_rows(executor, model, plan)
    if test.query is not None:
        problem = _check(spark, "query", test.query, plan.sql)
        if problem:
            outcome.failures.append(problem)
    ctes = {c.alias_or_name.lower(): c for c in plan.query.find_all(exp.CTE)}
    for name, expected in test.ctes.items():
        if name not in ctes:
            outcome.failures.append(
                f"cte {name}: the query has no CTE of that name (it has {', '.join(ctes) or 'none'})"
            )
            continue
        # The WITH that defines the CTE (an incremental query's is inside the window clamp).
        with_ = ctes[name].parent
        probe = exp.select("*").from_(name)
        probe.set(
            "with_" if "with_" in exp.Select.arg_types else "with",
            with_.copy() if isinstance(with_, exp.With) else None,
        )
        problem = _check(spark, f"cte {name}", expected, probe.sql(dialect="spark"))
        if problem:
            outcome.failures.append(problem)
    return outcome
