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
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import yaml
from pyspark.sql import SparkSession
from sqlglot import exp

from incremental_assets.errors import ModelFileError
from incremental_assets.execution import Executor
from incremental_assets.plan import RunPlan, plan_run
from incremental_assets.project import Project
from incremental_assets.time_window import TimeWindow, is_boundary, next_boundary, to_utc


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


def _rows(value: Any) -> list[dict[str, Any]]:
    if isinstance(value, dict) and "rows" in value:
        value = value["rows"]
    return list(value or [])


def load_model_tests(project: Project) -> list[ModelTest]:
    """Every test in ``<project>/tests/**/*.yaml`` (files whose entries name a ``model``)."""
    tests = []
    for path in sorted((project.directory / "tests").rglob("*.yaml")):
        data = yaml.safe_load(path.read_text()) or {}
        if not isinstance(data, dict) or not all(isinstance(v, dict) and "model" in v for v in data.values()):
            continue
        for name, body in data.items():
            model = str(body["model"]).lower()
            if model not in project.models:
                raise ModelFileError(path, None, f"test {name}: no model named {model}")
            outputs = body.get("outputs") or {}
            vars_ = body.get("vars") or {}
            tests.append(
                ModelTest(
                    name, path, model,
                    {str(k).lower(): _rows(v) for k, v in (body.get("inputs") or {}).items()},
                    _rows(outputs["query"]) if "query" in outputs else None,
                    {str(k).lower(): _rows(v) for k, v in (outputs.get("ctes") or {}).items()},
                    vars_.get("start"), vars_.get("end"),
                )
            )
    return tests


def _window(test: ModelTest, unit: str) -> TimeWindow:
    start = to_utc(test.start)
    end = to_utc(test.end if test.end is not None else test.start)
    # SQLMesh's `end` names the last interval (inclusive): the window ends after it.
    if is_boundary(end, unit):
        end = next_boundary(end, unit)
    return TimeWindow(start, end)


class _FixtureExecutor(Executor):
    """Reads every input from the test's rows instead of tables."""

    def __init__(self, spark: SparkSession, project: Project, test: ModelTest):
        super().__init__(spark, project)
        self.test = test

    def _schema(self, name: str) -> str | None:
        declared = self.project.sources[name].columns if name in self.project.sources else self.project.models[name].columns
        return ", ".join(f"`{c}` {t}" for c, t in declared.items()) if declared else None

    def register(self, plan: RunPlan) -> dict[str, str]:
        for read in plan.inputs:
            rows = self.test.inputs.get(read.name)
            if rows is None:
                raise ModelFileError(self.test.path, None, f"test {self.test.name}: no rows given for input {read.name}")
            schema = self._schema(read.name)
            if schema:
                cols = [c.split("`")[1] for c in schema.split(", ")]
                data = [tuple(_spark_value(r.get(c)) for c in cols) for r in rows]
                df = self.spark.createDataFrame(data, "struct<" + ", ".join(f"{c}: {t.split(' ', 1)[1]}" for c, t in zip(cols, schema.split(", "))) + ">")
            else:
                df = self.spark.createDataFrame([{k: _spark_value(v) for k, v in r.items()} for r in rows])
            df.createOrReplaceTempView(read.view)
        return {}


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
    model = project.models[test.model]
    window = _window(test, model.interval_unit or "day") if model.is_incremental and test.start is not None else None
    plan = plan_run(project, model, window, execution_time=window.end if window else None, allow_downgrade=True)
    executor = _FixtureExecutor(spark, project, test)
    outcome = TestOutcome(test)
    executor.register(plan)
    if test.query is not None:
        actual = [r.asDict() for r in spark.sql(plan.sql).collect()]
        problem = compare("query", test.query, actual)
        if problem:
            outcome.failures.append(problem)
    ctes = {c.alias_or_name.lower(): c for c in plan.query.find_all(exp.CTE)}
    for name, expected in test.ctes.items():
        if name not in ctes:
            outcome.failures.append(f"cte {name}: the query has no CTE of that name (it has {', '.join(ctes) or 'none'})")
            continue
        with_ = plan.query.args.get("with") or plan.query.args.get("with_")
        probe = exp.select("*").from_(name)
        probe.set("with" if "with" in plan.query.args else "with_", with_.copy() if with_ else None)
        actual = [r.asDict() for r in spark.sql(probe.sql(dialect="spark")).collect()]
        problem = compare(f"cte {name}", expected, actual)
        if problem:
            outcome.failures.append(problem)
    return outcome
