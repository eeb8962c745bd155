"""Model unit tests in SQLMesh's YAML format, run on Spark with fixture rows instead of tables.

```yaml
test_daily_revenue:
  model: shop.daily_revenue
  inputs:
    raw.orders:                       # a list of rows, or {rows: [...]}
      - {order_id: 1, order_ts: 2024-01-01 10:00:00, amount: 5}
  outputs:
    query:  [{order_date: 2024-01-01, revenue: 5}]
    ctes:   {paid: [{order_id: 1}]}
  vars: {start: 2024-01-01, end: 2024-01-01}   # SQLMesh's inclusive end
```

The query is planned exactly as a run would (macros, leakage clamp, pushdown); each input view is fed
the fixture rows. Rows compare without regard to order, on the columns the expected rows name.
"""

from __future__ import annotations

import datetime as dt
import difflib
from dataclasses import dataclass, field, replace
from decimal import Decimal
from pathlib import Path
from typing import Any

import yaml
from py4j.protocol import Py4JError
from pyspark.errors import AnalysisException
from pyspark.sql import SparkSession
from sqlglot import exp

from incremental_assets.errors import IncrementalAssetsError, ModelFileError, WindowError
from incremental_assets.load.model_graph import as_written, inline_embedded
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
from incremental_assets.spark.python_models import register_python_rows


@dataclass(frozen=True)
class ModelTest:
    name: str
    path: Path
    model: str
    inputs: dict[str, list[dict[str, Any]]]
    query: list[dict[str, Any]] | None
    ctes: dict[str, list[dict[str, Any]]]
    start: Any = None
    end: Any = None


@dataclass
class TestOutcome:
    test: ModelTest
    failures: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.failures


def _rows(value: Any, path: Path, line: int, what: str) -> list[dict[str, Any]]:
    """Fixture rows: a list of mappings, or ``{rows: [...]}``."""
    if isinstance(value, dict) and "rows" in value:
        value = value["rows"]
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(row, dict) for row in value):
        raise ModelFileError(
            path,
            line,
            f"{what} must be a list of rows (column: value mappings)",
            hint="write `- {id: 1, ts: 2024-01-01}`",
        )
    return value


def _mapping(value: Any, path: Path, line: int, what: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ModelFileError(path, line, f"{what} must be a mapping")
    return value


def _read_yaml(path: Path) -> tuple[Any, dict[str, int]]:
    """The file's data and the line of each top-level key; YAML errors name their line."""
    try:
        text = path.read_text(encoding="utf-8")
        node = yaml.compose(text)
        data = yaml.safe_load(text)
    except UnicodeDecodeError:
        raise ModelFileError(path, None, "the file is not UTF-8 text") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        line = mark.line + 1 if mark else (1 if isinstance(exc, yaml.reader.ReaderError) else None)
        raise ModelFileError(path, line, f"invalid YAML: {getattr(exc, 'problem', None) or exc}") from None
    lines = {}
    if isinstance(node, yaml.MappingNode):
        lines = {str(k.value): k.start_mark.line + 1 for k, _ in node.value}
    return data, lines


def _in_nested_project(path: Path, root: Path) -> bool:
    """Whether a file lies in another project folder (one with its own models/) under ``root``."""
    return any((folder / "models").is_dir() for folder in path.parents if folder != root and root in folder.parents)


def load_model_tests(project: Project) -> list[ModelTest]:
    """Every test in ``<project>/tests/**/*.yaml`` of each project folder (files whose entries name a ``model``)."""
    tests = []
    roots = [folder / "tests" for folder in (project.directories or (project.directory,))]
    for root, path in [(root, path) for root in roots for path in sorted(root.rglob("*.yaml"))]:
        if _in_nested_project(path, root):
            continue
        data, lines = _read_yaml(path)
        if (
            not isinstance(data, dict)
            or not data
            or not all(isinstance(v, dict) and "model" in v for v in data.values())
        ):
            continue
        for name, body in data.items():
            line = lines.get(str(name), 1)
            model = str(body["model"]).lower()
            if model not in project.models:
                raise ModelFileError(path, line, f"test {name}: no model named {model}")
            outputs = _mapping(body.get("outputs"), path, line, f"test {name}: outputs")
            vars_ = _mapping(body.get("vars"), path, line, f"test {name}: vars")
            inputs = _mapping(body.get("inputs"), path, line, f"test {name}: inputs")
            ctes = _mapping(outputs.get("ctes"), path, line, f"test {name}: outputs.ctes")
            for key in ("start", "end"):
                if vars_.get(key) is not None:
                    try:
                        to_utc(vars_[key] if isinstance(vars_[key], (dt.date, str)) else str(vars_[key]))
                    except WindowError as exc:
                        raise ModelFileError(path, line, f"test {name}: vars.{key}: {exc}") from None
            tests.append(
                ModelTest(
                    str(name),
                    path,
                    model,
                    {str(k).lower(): _rows(v, path, line, f"test {name}: input {k}") for k, v in inputs.items()},
                    _rows(outputs["query"], path, line, f"test {name}: outputs.query") if "query" in outputs else None,
                    {str(k).lower(): _rows(v, path, line, f"test {name}: cte {k}") for k, v in ctes.items()},
                    vars_.get("start"),
                    vars_.get("end"),
                )
            )
    return tests


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
            rows = self.test.inputs.get(read.name)
            if rows is None and read.name == plan.model:
                self._own_table(read.name).createOrReplaceTempView(read.view)  # SQLMesh: its own table starts empty
                continue
            if rows is None:
                raise ModelFileError(
                    self.test.path, None, f"test {self.test.name}: no rows given for input {read.name}"
                )
            declared = self._declared(read.name)
            if declared:
                data = [tuple(_typed_value(r.get(c), t) for c, t in declared.items()) for r in rows]
                df = self.spark.createDataFrame(
                    data, "struct<" + ", ".join(f"`{c}`: {t}" for c, t in declared.items()) + ">"
                )
            else:
                df = self.spark.createDataFrame([{k: _spark_value(v) for k, v in r.items()} for r in rows])
            df.createOrReplaceTempView(read.view)
        return {}

    def _own_table(self, name: str) -> Any:
        """A self-referencing model's own table, empty: its declared columns, else the expected rows' columns."""
        schema = self._schema(name)
        if schema:
            return self.spark.createDataFrame([], schema)
        if self.test.query:
            return self.spark.createDataFrame(
                [{k: _spark_value(v) for k, v in r.items()} for r in self.test.query]
            ).limit(0)
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


def compare(what: str, expected: list[dict[str, Any]], actual: list[dict[str, Any]]) -> str | None:
    """None when the rows match (any order, expected columns only); else a unified diff of the rows."""
    cols = list(dict.fromkeys(c for r in expected for c in r)) or list(dict.fromkeys(c for r in actual for c in r))
    missing = [c for c in cols if actual and c not in actual[0]]
    if missing:
        return f"{what}: the output has no column(s) {', '.join(missing)}; it has {', '.join(actual[0])}"

    def lines(rows):
        return sorted("  ".join(f"{c}={_norm(r.get(c))}" for c in cols) for r in rows)

    want, got = lines(expected), lines(actual)
    if want == got:
        return None
    diff = "\n".join(difflib.unified_diff(want, got, "expected", "actual", lineterm="", n=len(want) + len(got)))
    return f"{what}: rows differ\n{diff}"


def run_model_test(spark: SparkSession, project: Project, test: ModelTest) -> TestOutcome:
    """Run one test; anything that stops it (an unsupported model, a Spark error) is its failure alone."""
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


def _run_model_test(spark: SparkSession, project: Project, test: ModelTest) -> TestOutcome:
    model = project.models[test.model]
    if isinstance(model, SqlModel):
        project, model = _embedded_as_inputs(project, model, test)
    window = _window(test, model.unit) if model.is_incremental else None
    if window is not None:
        # SQLMesh runs a test's window whatever the model's start and end.
        model = replace(model, start=min(model.start or window.start, model.unit.floor(window.start)), end=None)
        project = replace(project, models={**project.models, model.name: model})
    plan = plan_run(project, model, window, execution_time=window.end if window else None, allow_downgrade=True)
    executor = _FixtureExecutor(spark, project, test)
    outcome = TestOutcome(test)
    executor.register(plan)
    if isinstance(model, PythonModel) and model.reads_tables:  # its function reads the fixture views
        register_python_rows(executor, model, plan)
    if test.query is not None:
        actual = [r.asDict() for r in spark.sql(plan.sql).collect()]
        problem = compare("query", test.query, actual)
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
        actual = [r.asDict() for r in spark.sql(probe.sql(dialect="spark")).collect()]
        problem = compare(f"cte {name}", expected, actual)
        if problem:
            outcome.failures.append(problem)
    return outcome
