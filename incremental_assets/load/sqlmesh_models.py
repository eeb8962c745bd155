"""SQLMesh Python models: ``@model(name, kind=..., columns=...)`` over ``execute(context, start, end, ...)``.

The declaration becomes an ordinary model whose query selects the declared columns from the rows
``execute`` returns (registered by :mod:`incremental_assets.spark.python_models` as
:data:`PYTHON_ROWS_VIEW` for each run window), so kinds, intervals, audits and writes work exactly as for
SQL models. The kind defaults to FULL (a Python model cannot be a view). Upstream models come from
``depends_on``, else from the names the function passes to ``context.resolve_table`` / ``context.table``.

>>> import tempfile, pathlib
>>> from incremental_assets.load.sqlmesh_shim import ModelSpec
>>> p = pathlib.Path(tempfile.mkdtemp()) / "m.py"
>>> _ = p.write_text("def execute(context, start, end, execution_time, **kw):\\n    return context.fetchdf('SELECT 1')\\n")
>>> m = sqlmesh_python_model(p, ModelSpec("s.py_model", {"columns": {"id": "int"}, "depends_on": ["s.a"]}, print), {})
>>> m.kind.name, dict(m.columns), m.depends_on
('FULL', {'id': 'INT'}, ('s.a',))
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Callable, Mapping

from sqlglot import exp

from incremental_assets.errors import ModelFileError
from incremental_assets.load.model_file import parse_model_file
from incremental_assets.load.sqlmesh_config import header_text
from incremental_assets.load.sqlmesh_shim import ModelSpec, plain
from incremental_assets.model.sql_model import SqlModel, TableReference

PYTHON_ROWS_VIEW = "ia_python_rows"
# @model arguments that are MODEL header properties.
_HEADER_KEYS = ("cron", "start", "end", "owner", "description", "interval_unit", "tags", "grain", "grains", "enabled",
                "audits", "column_descriptions")
_RESOLVED = re.compile(r"""\.(?:resolve_table|table)\(\s*["']([A-Za-z0-9_."]+)["']""")


@dataclass(frozen=True, eq=False)
class SqlmeshPythonModel(SqlModel):
    """A model whose rows come from a Python function called once per run window."""

    execute: Callable[..., Any] | None = None
    source_text: str = ""

    @cached_property
    def fingerprint(self) -> str:
        """The SQL model's fingerprint and the file's text: editing the function is a definition change."""
        return hashlib.sha256((SqlModel.fingerprint.func(self) + self.source_text).encode()).hexdigest()  # type: ignore[attr-defined]


def _kind_text(kind: Any) -> str:
    kind = plain(kind)
    if isinstance(kind, str):
        return kind.upper()
    if isinstance(kind, dict) and kind.get("name"):
        return header_text({**kind, "name": str(kind["name"]).upper()})
    raise ValueError(f"cannot read kind {kind!r}")


def _decorator_line(text: str, name: str) -> int | None:
    """The line of the ``@model`` that names ``name`` (the last one before the name's first mention)."""
    mention = max(text.find(f'"{name}"'), text.find(f"'{name}'"))
    before = text[: mention if mention >= 0 else len(text)]
    at = before.rfind("@model")
    return before.count("\n", 0, at) + 1 if at >= 0 else None


def _header(spec: ModelSpec, dialect: str) -> str:
    kwargs = spec.kwargs
    columns = plain(kwargs.get("columns") or {})
    props = [f"name {spec.name}", f"kind {_kind_text(kwargs.get('kind') or 'FULL')}"]
    if kwargs.get("dialect"):
        props.append(f"dialect {kwargs['dialect']}")
    props += [f"{key} {header_text(plain(kwargs[key]))}" for key in _HEADER_KEYS if kwargs.get(key) is not None]
    props.append("columns (" + ", ".join(f"{c} {t}" for c, t in columns.items()) + ")")
    select = ", ".join(exp.to_identifier(c).sql(dialect=dialect) for c in columns)
    return "MODEL (" + ",\n".join(props) + f");\nSELECT {select} FROM {PYTHON_ROWS_VIEW}"


def sqlmesh_python_model(path: Path, spec: ModelSpec, defaults: Mapping[str, str], dialect: str = "spark") -> SqlmeshPythonModel:
    """One ``@model`` declaration -> a model; errors name the file and the decorator's line."""
    text = path.read_text(encoding="utf-8")
    line = _decorator_line(text, spec.name)
    if not spec.kwargs.get("columns"):
        raise ModelFileError(path, line, f"Python model {spec.name} declares no columns", hint="add columns={'name': 'type', ...} to @model")
    if spec.func is None or not callable(spec.func):
        raise ModelFileError(path, line, f"@model {spec.name} does not decorate a function")
    try:
        model = parse_model_file(path, text=_header(spec, dialect), defaults=defaults, default_dialect=dialect)
    except ModelFileError as exc:
        raise ModelFileError(path, line, f"@model {spec.name}: {exc.message}", hint=exc.hint) from None
    except ValueError as exc:
        raise ModelFileError(path, line, f"@model {spec.name}: {exc}") from None
    depends = plain(spec.kwargs.get("depends_on")) or _RESOLVED.findall(text)
    references = tuple(TableReference(str(d).replace('"', "").lower(), line) for d in dict.fromkeys(depends))
    fields = {k: v for k, v in vars(model).items() if not k.startswith("_") and k != "fingerprint"}
    fields.update(references=references, header_line=line or 1, query_line=line or 1)
    return SqlmeshPythonModel(**fields, execute=spec.func, source_text=text)

