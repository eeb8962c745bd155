"""SQLMesh Python models: ``@model(name, kind=..., columns=...)`` over ``execute(context, start, end, ...)``.

The declaration becomes an ordinary model whose query selects the declared columns from the rows
``execute`` returns (registered by :mod:`incremental_assets.spark.python_models` as
:data:`PYTHON_ROWS_VIEW` for each run window), so kinds, intervals, audits and writes work exactly as for
SQL models. The kind defaults to FULL (a Python model cannot be a view). Upstream models come from
``depends_on``, else from the names the function passes to ``context.resolve_table`` / ``context.table``.

>>> import tempfile, pathlib
>>> from incremental_assets.load.sqlmesh_shim import ModelSpec
>>> p = pathlib.Path(tempfile.mkdtemp()) / "m.py"
>>> _ = p.write_text("def execute(context, start, end, execution_time, **kw):\\n"
...                  "    return context.fetchdf('SELECT 1')\\n")
>>> m = sqlmesh_python_model(p, ModelSpec("s.py_model", {"columns": {"id": "int"}, "depends_on": ["s.a"]}, print), {})
>>> m.kind.name, dict(m.columns), m.depends_on
('FULL', {'id': 'INT'}, ('s.a',))
"""

from __future__ import annotations

import ast
import hashlib
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import Any, Callable, Mapping

from sqlglot import exp

from incremental_assets.errors import ModelFileError
from incremental_assets.load.macros.evaluator import MacroContext, MacroEvaluator
from incremental_assets.load.model_file import parse_model_file
from incremental_assets.load.sqlmesh_config import header_text
from incremental_assets.load.sqlmesh_shim import ModelSpec, model_kind_name, plain
from incremental_assets.load.text import read_utf8
from incremental_assets.model.python_model import PythonModel
from incremental_assets.model.sql_model import SqlModel, TableReference

PYTHON_ROWS_VIEW = "ia_python_rows"
# @model arguments that are MODEL header properties.
_HEADER_KEYS = ("cron", "start", "end", "owner", "description", "interval_unit", "tags", "grain", "grains", "enabled")


@dataclass(frozen=True, eq=False)
class SqlmeshPythonModel(PythonModel):
    """A model whose rows come from a Python function called once per run window."""

    execute: Callable[..., Any] | None = None

    function_name = "execute"
    rows_view = PYTHON_ROWS_VIEW
    reads_tables = True

    @cached_property
    def fingerprint(self) -> str:
        """The SQL model's fingerprint and the file's text: editing the function is a definition change."""
        return hashlib.sha256((SqlModel.fingerprint.func(self) + self.source_text).encode()).hexdigest()  # type: ignore[attr-defined]  # reason: mypy types a cached_property on the class as its value


def _kind_name(kind: Any) -> str:
    """The kind's name: ``"FULL"``, ``dict(name=...)``, or a kind class (``IncrementalByTimeRangeKind(...)``)."""
    if isinstance(kind, str):
        return kind.upper()
    name = kind.get("name") if isinstance(kind, dict) else getattr(kind, "name", None)
    if name:
        return str(getattr(name, "value", name)).upper()
    squashed = type(kind).__name__.upper().removesuffix("KIND")
    for known in model_kind_name():
        if known.value.replace("_", "") == squashed:
            return known.value
    raise ValueError(f"cannot read kind {kind!r}")


def _kind_text(kind: Any) -> str:
    name = _kind_name(kind)
    fields = plain(kind)
    if not isinstance(fields, dict):
        return name
    fields = {k: v for k, v in fields.items() if k != "name"}
    time_column = fields.get("time_column")
    if isinstance(time_column, dict):  # TimeColumn(column=..., format=...)
        fields["time_column"] = (
            (time_column["column"], time_column["format"]) if time_column.get("format") else time_column["column"]
        )
    return header_text({"name": name, **fields})


def _sql_value(value: Any, dialect: str) -> str:
    """An audit argument as SQL, converted as SQLMesh's decorator does (a list is a tuple)."""
    if not isinstance(value, exp.Expression):
        value = exp.convert(tuple(value) if isinstance(value, list) else value)
    return value.sql(dialect=dialect)


def _audits_text(audits: Any, dialect: str) -> str:
    """``audits=[name, (name, {arg: value}), {"name": name, arg: value}]`` as a header ``audits (...)``."""
    calls = []
    for entry in audits if isinstance(audits, (list, tuple)) else [audits]:
        if isinstance(entry, str):
            calls.append(entry)
            continue
        if isinstance(entry, dict):
            name, args = entry.get("name"), {k: v for k, v in entry.items() if k != "name"}
        elif isinstance(entry, (list, tuple)) and len(entry) == 2 and isinstance(entry[1], dict):
            name, args = entry
        else:
            raise ValueError(
                f"audits: an audit is a name, a (name, {{arguments}}) tuple or a dict with a name, found {entry!r}"
            )
        calls.append(f"{name}(" + ", ".join(f"{k} := {_sql_value(v, dialect)}" for k, v in args.items()) + ")")
    return "(" + ", ".join(calls) + ")"


def _descriptions_text(descriptions: Any) -> str:
    return "(" + ", ".join(f"{c} = {header_text(str(d))}" for c, d in plain(descriptions).items()) + ")"


def _decorator_line(text: str, name: str) -> int | None:
    """The line of the ``@model`` that names ``name`` (the last one before the name's first mention)."""
    mention = max(text.find(f'"{name}"'), text.find(f"'{name}'"))
    before = text[: mention if mention >= 0 else len(text)]
    at = before.rfind("@model")
    return before.count("\n", 0, at) + 1 if at >= 0 else None


def _header(spec: ModelSpec, dialect: str) -> str:
    """The ``MODEL (...)`` header the declaration stands for."""
    kwargs = spec.kwargs
    props = [f"name {spec.name}", f"kind {_kind_text(kwargs.get('kind') or 'FULL')}"]
    if kwargs.get("dialect"):
        props.append(f"dialect {kwargs['dialect']}")
    props += [f"{key} {header_text(plain(kwargs[key]))}" for key in _HEADER_KEYS if kwargs.get(key) is not None]
    if kwargs.get("audits"):
        props.append(f"audits {_audits_text(kwargs['audits'], dialect)}")
    if kwargs.get("column_descriptions"):
        props.append(f"column_descriptions {_descriptions_text(kwargs['column_descriptions'])}")
    columns = plain(kwargs.get("columns") or {})
    if columns:
        props.append("columns (" + ", ".join(f"{c} {t}" for c, t in columns.items()) + ")")
    return "MODEL (" + ",\n".join(props) + ");\n"


class _Variables:
    """``context`` / ``evaluator`` while a table name is resolved at load time: only ``var`` works."""

    def __init__(self, variables: Mapping[str, Any]):
        self._variables = variables

    def var(self, name: str, default: Any = None) -> Any:
        return self._variables.get(str(name).lower(), default)

    blueprint_var = var


def resolved_tables(path: Path, text: str, env: Mapping[str, Any], variables: Mapping[str, Any]) -> list[str]:
    """The tables the file passes to ``context.resolve_table`` / ``context.table``, as SQLMesh infers them:
    each first argument evaluated with the module's globals (a literal, a constant, ``context.var(...)``)."""
    found = []
    for node in ast.walk(ast.parse(text)):
        func = getattr(node, "func", None)
        if not (isinstance(node, ast.Call) and isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)):
            continue
        if func.value.id != "context" or func.attr not in ("table", "resolve_table"):
            continue
        arg = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "model_name"), None)
        if arg is None:
            continue
        try:
            value = eval(compile(ast.Expression(arg), str(path), "eval"), dict(env), {"context": _Variables(variables)})  # noqa: S307 - the user's own constant
        except Exception:
            raise ModelFileError(
                path,
                node.lineno,
                f"cannot tell which table context.{func.attr}({ast.unparse(arg)}) reads when the file loads",
                hint="pass a table name, a module constant or context.var(...), or list the tables in "
                "depends_on=[...] of @model",
            ) from None
        found.append(str(value))
    return found


def _entrypoint_sql(path: Path, spec: ModelSpec, line: int | None, dialect: str, macros: MacroContext | None) -> str:
    """An ``is_sql=True`` model's query: what ``entrypoint(evaluator)`` returns when the project loads."""
    evaluator = MacroEvaluator(macros or MacroContext(), dialect, runtime_stage="loading", this_model=spec.name)
    if spec.func is None:
        raise ModelFileError(path, line, f"@model {spec.name}: no entrypoint function")
    try:
        result = spec.func(evaluator)
    except ModelFileError:
        raise
    except Exception as exc:  # the user's code: name the model and what it raised
        message = getattr(exc, "message", None) or str(exc)
        raise ModelFileError(
            path, line, f"@model {spec.name}: entrypoint raised {type(exc).__name__}: {message}"
        ) from None
    if isinstance(result, exp.Expression):  # macro variables left for the run (@start_ds) stay macros in the text
        as_macro = result.transform(lambda n: exp.var(f"@{n.name}") if isinstance(n, exp.Parameter) else n)
        return as_macro.sql(dialect=dialect)
    if isinstance(result, str):
        return result
    raise ModelFileError(
        path,
        line,
        f"@model {spec.name}: an is_sql entrypoint returns SQL text or a sqlglot expression, found "
        f"{type(result).__name__}",
    )


def _statements(values: Any, dialect: str) -> str:
    return "".join(
        f"{v.sql(dialect=dialect) if isinstance(v, exp.Expression) else str(v).rstrip().rstrip(';')};\n"
        for v in values or ()
    )


def _model_body(path: Path, spec: ModelSpec, line: int | None, dialect: str, macros: MacroContext | None) -> str:
    """The SQL after the header: an SQL model's statements around the query its entrypoint returns, or for
    a Python model a SELECT of its declared columns from the rows its function returns."""
    kwargs = spec.kwargs
    if kwargs.get("is_sql"):
        model_dialect = str(kwargs.get("dialect") or dialect)
        query = _entrypoint_sql(path, spec, line, model_dialect, macros)
        body = _statements(kwargs.get("pre_statements"), model_dialect) + query.rstrip().rstrip(";") + ";\n"
        return body + _statements(kwargs.get("post_statements"), model_dialect)
    if not kwargs.get("columns"):
        raise ModelFileError(
            path,
            line,
            f"Python model {spec.name} declares no columns",
            hint="add columns={'name': 'type', ...} to @model",
        )
    return (
        "SELECT "
        + ", ".join(exp.to_identifier(c).sql(dialect=dialect) for c in plain(kwargs["columns"]))
        + f" FROM {PYTHON_ROWS_VIEW}"
    )


def sqlmesh_python_model(
    path: Path,
    spec: ModelSpec,
    defaults: Mapping[str, str],
    dialect: str = "spark",
    *,
    macros: MacroContext | None = None,
) -> SqlModel:
    """One ``@model`` declaration -> a model; errors name the file and the decorator's line.

    An ``is_sql=True`` declaration is an SQL model: its entrypoint runs once, when the project loads (runtime
    stage ``loading``), and returns the query (SQL text in the model's dialect or a sqlglot expression)."""
    text = read_utf8(path)
    line = _decorator_line(text, spec.name)
    kwargs = spec.kwargs
    if spec.func is None or not callable(spec.func):
        raise ModelFileError(path, line, f"@model {spec.name} does not decorate a function")
    body = _model_body(path, spec, line, dialect, macros)
    variables = macros.variables if macros else {}
    try:
        model = parse_model_file(
            path,
            text=_header(spec, dialect) + body,
            defaults=defaults,
            default_dialect=dialect,
            variables=variables,
            macros=macros,
        )
    except ModelFileError as exc:
        raise ModelFileError(path, line, f"@model {spec.name}: {exc.message}", hint=exc.hint) from None
    except ValueError as exc:
        raise ModelFileError(path, line, f"@model {spec.name}: {exc}") from None
    audits = tuple(replace(a, line=line or 1) for a in model.audits)  # the header is ours: point at the decorator
    if kwargs.get("is_sql"):
        return replace(model, header_line=line or 1, query_line=line or 1, audits=audits, lines={})
    depends = plain(kwargs.get("depends_on"))
    if depends is None:
        depends = resolved_tables(path, text, spec.func.__globals__, variables)
    references = tuple(
        TableReference(str(d).replace('"', "").replace("`", "").lower(), line) for d in dict.fromkeys(depends)
    )
    fields = {k: v for k, v in vars(model).items() if not k.startswith("_") and k != "fingerprint"}
    fields.update(references=references, header_line=line or 1, query_line=line or 1, audits=audits, lines={})
    return SqlmeshPythonModel(**fields, execute=spec.func, source_text=text)
