"""SQLMesh's Jinja blocks in a model file, rendered when the file loads.

``JINJA_QUERY_BEGIN; ... JINJA_END;`` (the query) and ``JINJA_STATEMENT_BEGIN; ... JINJA_END;`` (a pre- or
post-statement) are rendered with jinja2, then read like any other SQL. The run window is not known when
a file loads, so ``{{ start_ds }}``, ``{{ end_ts }}``, ... render to the macros ``@start_ds``, ... which the
run renders as typed literals (a quoted ``'{{ start_ds }}'`` too); ``{{ var('name', default) }}`` renders
the project variable as a SQL literal, and ``{{ this_model }}`` the model's own table. The
``{% macro name(...) %}`` definitions of the project's ``macros/**/*.sql`` are callable in every block, as in
SQLMesh.

>>> text = "JINJA_QUERY_BEGIN;\\nSELECT {{ var('n') }} AS n WHERE ds = '{{ start_ds }}'\\nJINJA_END;"
>>> print(render_jinja_blocks(text, "m.sql", {"n": 3}))
<BLANKLINE>
SELECT 3 AS n WHERE ds = @start_ds
<BLANKLINE>
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Mapping

from incremental_assets.errors import ModelFileError
from incremental_assets.load.text import read_utf8
from incremental_assets.model.sql_model import DATE_MACROS

_BLOCK = re.compile(r"JINJA_(QUERY|STATEMENT)_BEGIN\s*;(.*?)JINJA_END\s*;?", re.IGNORECASE | re.DOTALL)
_QUOTED_MACRO = re.compile(r"'@(" + "|".join(sorted(DATE_MACROS, key=len, reverse=True)) + r")'")


def _sql_literal(value: Any) -> str:
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, (int, float)):
        return str(value)
    if value is None:
        return "NULL"
    return "'" + str(value).replace("'", "''") + "'"


def _project_macros(env: Any, macros_dir: Path | None) -> dict[str, Any]:
    """The Jinja macros of ``macros/**/*.sql`` by name; all files share one namespace, so macros call
    each other across files."""
    import jinja2

    files = sorted(macros_dir.rglob("*.sql")) if macros_dir is not None and macros_dir.is_dir() else []
    out: dict[str, Any] = {}
    for path in files:
        text = read_utf8(path)
        if "{%" not in text:
            continue
        try:
            module = env.from_string(text, globals=out).module
        except jinja2.TemplateError as exc:
            raise ModelFileError(path, getattr(exc, "lineno", None), f"cannot read the Jinja macros: {exc}") from None
        out.update((name, getattr(module, name)) for name in dir(module) if not name.startswith("_"))
    return out


def render_jinja_blocks(
    text: str, path: str | Path, variables: Mapping[str, Any], line_offset: int = 0, macros_dir: Path | None = None
) -> str:
    """The model body with every Jinja block rendered; lines outside the blocks keep their numbers."""
    if "JINJA_" not in text.upper():
        return text
    try:
        import jinja2
    except ImportError:
        raise ModelFileError(
            path, line_offset + 1, "the model uses Jinja blocks and jinja2 is not installed", hint="pip install jinja2"
        ) from None

    def var(name: str, default: Any = None) -> str:
        return _sql_literal(variables.get(str(name).lower(), default))

    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    context: dict[str, Any] = _project_macros(env, macros_dir)
    context.update({name: "@" + name for name in DATE_MACROS})
    context["var"] = var

    def render(match: re.Match[str]) -> str:
        line = line_offset + text.count("\n", 0, match.start()) + 1
        try:
            rendered = env.from_string(match.group(2)).render(**context)
        except jinja2.TemplateError as exc:
            raise ModelFileError(
                path, line + (getattr(exc, "lineno", 1) or 1) - 1, f"cannot render the Jinja block: {exc}"
            ) from None
        rendered = _QUOTED_MACRO.sub(lambda m: "@" + m.group(1), rendered)
        if match.group(1).upper() == "STATEMENT":
            rendered = rendered.rstrip().rstrip(";") + ";"
        return rendered

    return _BLOCK.sub(render, text)
