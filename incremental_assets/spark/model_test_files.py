"""Model unit test files (``tests/**/*.yaml``) read as SQLMesh reads them.

```yaml
test_daily_revenue:
  model: shop.daily_revenue
  inputs:
    raw.orders:                       # a list of rows, or {rows: [...]}
      - {order_id: 1, order_ts: 2024-01-01 10:00:00, amount: 5}
    raw.customers:                    # or a query (the model's dialect) whose result is the rows
      query: SELECT 1 AS customer_id
    raw.refunds:                      # or CSV text (csv_settings as pandas.read_csv takes them)
      format: csv
      rows: |
        refund_id,amount
        1,5
  outputs:
    partial: true                     # compare only the columns the expected rows name (else all: left out is NULL)
    query:  [{order_date: 2024-01-01, revenue: 5}]
    ctes:   {paid: [{order_id: 1}]}
  vars: {start: 2024-01-01, end: 2024-01-01, execution_time: 2024-01-02, min_amount: 20}
```

``vars`` other than the test's times (``start``, ``end``, ``execution_time``, ...) are the project's
variables for this test. A test that cannot be read is kept with its problem: it fails alone.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass, field
from io import StringIO
from pathlib import Path
from typing import Any

import sqlglot
import yaml
from sqlglot.errors import SqlglotError

from incremental_assets.errors import ModelFileError, WindowError
from incremental_assets.load.spark_semantics import with_spark_semantics
from incremental_assets.model.intervals import to_utc
from incremental_assets.model.project import Project

# The ``vars`` SQLMesh takes as the test's times (its date macros), never as project variables.
TIME_VARS = frozenset(
    f"{prefix}{suffix}"
    for prefix in ("start", "end", "execution", "latest")
    for suffix in ("", "_time", "_date", "_ds", "_dt", "_dtntz", "_epoch", "_hour", "_millis", "_ts", "_tstz")
)


@dataclass(frozen=True)
class Fixture:
    """Rows a test gives: YAML or CSV rows, or a Spark SQL query whose result is the rows. ``partial``: an
    expected output compares only the columns its rows name (else every column, one left out being NULL)."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    query: str | None = None
    partial: bool = False


@dataclass(frozen=True)
class ModelTest:
    name: str
    path: Path
    model: str
    inputs: dict[str, Fixture] = field(default_factory=dict)
    query: Fixture | None = None
    ctes: dict[str, Fixture] = field(default_factory=dict)
    start: Any = None
    end: Any = None
    execution_time: Any = None
    variables: dict[str, Any] = field(default_factory=dict)
    problem: ModelFileError | None = None  # the test cannot be read: it fails with this line


def _fixture(value: Any, where: tuple[Path, int], what: str, dialect: str, partial: bool = False) -> Fixture:
    """A fixture as SQLMesh writes one: rows, ``{rows: ...}``, ``{query: ...}``, ``{format: csv, rows: text}``,
    ``{path: file}`` (YAML or CSV, relative to the project folder); ``partial: true`` in the mapping."""
    path, line = where
    if not isinstance(value, dict):
        value = {"rows": value}
    rows, query, fmt = value.get("rows"), value.get("query"), value.get("format")
    partial = partial or value.get("partial") is True
    if fmt == "csv":
        text = rows if value.get("path") is None else _file_text(value["path"], path, line, what)
        rows = _csv_rows(text, value.get("csv_settings"), path, line, what)
    elif fmt not in (None, "yaml"):
        raise ModelFileError(path, line, f"{what}: unsupported format {fmt!r}", hint="use yaml or csv")
    elif value.get("path") is not None:
        data = yaml.safe_load(_file_text(value["path"], path, line, what))
        rows = data.get("rows") if isinstance(data, dict) else data
    if query is not None:
        if rows is not None:
            raise ModelFileError(path, line, f"{what}: gives both query and rows", hint="keep one of them")
        return Fixture(query=_spark_sql(query, dialect, path, line, what), partial=partial)
    if rows is None:
        return Fixture(partial=partial)
    if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
        raise ModelFileError(
            path,
            line,
            f"{what} must be a list of rows (column: value mappings), a query or CSV text",
            hint="write `- {id: 1, ts: 2024-01-01}`, `query: SELECT ...` or `format: csv` with `rows: |`",
        )
    return Fixture(rows=[{str(k): v for k, v in row.items()} for row in rows], partial=partial)


def _file_text(name: Any, path: Path, line: int, what: str) -> str:
    """A fixture file named by ``path:``, relative to the project folder (the one holding ``tests/``)."""
    folder = next((p.parent for p in path.parents if p.name == "tests"), path.parent)
    try:
        return (folder / str(name)).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ModelFileError(path, line, f"{what}: cannot read {name}: {exc}") from None


def _csv_rows(text: Any, settings: Any, path: Path, line: int, what: str) -> list[dict[str, Any]]:
    """CSV text read as SQLMesh reads it (pandas, with ``csv_settings`` as its options); empty cells are NULL."""
    import pandas as pd

    if not isinstance(text, str):
        raise ModelFileError(path, line, f"{what}: format csv needs the rows as text", hint="write `rows: |`")
    try:
        frame = pd.read_csv(StringIO(text), **dict(settings or {}))
    except (ValueError, TypeError) as exc:
        raise ModelFileError(path, line, f"{what}: invalid CSV: {str(exc).strip().splitlines()[0]}") from None
    return [{str(k): _plain(v) for k, v in row.items()} for row in frame.to_dict(orient="records")]


def _plain(value: Any) -> Any:
    """A pandas cell as a Python value: NaN is NULL, numpy scalars are Python numbers."""
    if isinstance(value, float) and math.isnan(value):
        return None
    return value.item() if hasattr(value, "item") else value


def _spark_sql(query: Any, dialect: str, path: Path, line: int, what: str) -> str:
    """A fixture query written in ``dialect``, as Spark SQL with that dialect's meaning."""
    try:
        tree = sqlglot.parse_one(str(query), read=dialect)
        return with_spark_semantics(tree, dialect).sql(dialect="spark")
    except SqlglotError as exc:
        raise ModelFileError(path, line, f"{what}: invalid query: {str(exc).strip().splitlines()[0]}") from None


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
    """Every test in ``<project>/tests/**/*.yaml`` of each project folder (files whose entries name a ``model``);
    a test that cannot be read, or a file that is not YAML, is one test with its problem."""
    tests = []
    roots = [folder / "tests" for folder in (project.directories or (project.directory,))]
    for root, path in [(root, path) for root in roots for path in sorted(root.rglob("*.yaml"))]:
        if _in_nested_project(path, root):
            continue
        try:
            data, lines = _read_yaml(path)
        except ModelFileError as exc:
            tests.append(ModelTest(path.name, path, "", problem=exc))
            continue
        if (
            not isinstance(data, dict)
            or not data
            or not all(isinstance(v, dict) and "model" in v for v in data.values())
        ):
            continue
        for name, body in data.items():
            line = lines.get(str(name), 1)
            try:
                tests.append(_model_test(project, str(name), body, path, line))
            except ModelFileError as exc:
                tests.append(ModelTest(str(name), path, str(body["model"]).lower(), problem=exc))
    return tests


def _model_test(project: Project, name: str, body: dict, path: Path, line: int) -> ModelTest:
    model = str(body["model"]).lower()
    if model not in project.models:
        raise ModelFileError(path, line, f"test {name}: no model named {model}")
    dialect = project.models[model].dialect or "spark"
    outputs = _mapping(body.get("outputs"), path, line, f"test {name}: outputs")
    vars_ = {str(k).lower(): v for k, v in _mapping(body.get("vars"), path, line, f"test {name}: vars").items()}
    inputs = _mapping(body.get("inputs"), path, line, f"test {name}: inputs")
    ctes = _mapping(outputs.get("ctes"), path, line, f"test {name}: outputs.ctes")
    partial = outputs.get("partial") is True
    for key in ("start", "end", "execution_time"):
        if vars_.get(key) is not None:
            try:
                to_utc(vars_[key] if isinstance(vars_[key], (dt.date, str)) else str(vars_[key]))
            except WindowError as exc:
                raise ModelFileError(path, line, f"test {name}: vars.{key}: {exc}") from None
    where = (path, line)
    return ModelTest(
        name,
        path,
        model,
        {str(k).lower(): _fixture(v, where, f"test {name}: input {k}", dialect) for k, v in inputs.items()},
        _fixture(outputs["query"], where, f"test {name}: outputs.query", dialect, partial)
        if "query" in outputs
        else None,
        {str(k).lower(): _fixture(v, where, f"test {name}: cte {k}", dialect, partial) for k, v in ctes.items()},
        vars_.get("start"),
        vars_.get("end"),
        vars_.get("execution_time"),
        {k: v for k, v in vars_.items() if k not in TIME_VARS},
    )
