"""A model's query naming what its inputs do not have (a column, a function Spark lacks), said in one line:
the model file, the line that names it, Spark's own sentence (with the names it suggests) and the fix, instead of
Spark's analysed plan.

Spark reports it as ``[UNRESOLVED_COLUMN.WITH_SUGGESTION] A column, variable, or function parameter with name
`fares` cannot be resolved. Did you mean one of the following? [...]. SQLSTATE: 42703; line 5 pos 9;`` followed
by the plan; the line Spark gives is one of the run's generated query, not of the model file, so the name is
looked up in the file.
"""

from __future__ import annotations

import re
from pathlib import Path

from pyspark.sql.types import StructType

from incremental_assets.errors import ModelQueryError
from incremental_assets.model.sql_model import SqlModel

_ANALYSIS = re.compile(
    r"\[(?P<kind>UNRESOLVED_COLUMN|UNRESOLVED_ROUTINE|UNRESOLVED_FIELD)(?:\.\w+)?\]\s*(?P<text>.*?)"
    r"(?:\s*SQLSTATE:\s*\w+)?(?:;\s*line \d+ pos \d+)?;?\s*$"
)
_NAMED = re.compile(r"`([^`]+)`")
_FIX = {
    "UNRESOLVED_COLUMN": "correct the name, or add the column to what the query reads",
    "UNRESOLVED_FIELD": "correct the field's name",
    "UNRESOLVED_ROUTINE": "use a function Spark knows (its SQL reference lists them), or compute the value otherwise",
}


def query_error(exc: BaseException, model: SqlModel) -> ModelQueryError | None:
    """The one-line error for a name in ``model``'s query that Spark cannot resolve (None: not that).

    >>> from incremental_assets.model.kinds import Full
    >>> from sqlglot import exp
    >>> m = SqlModel(name="s.m", kind=Full(), query=exp.select("1"), path=None)
    >>> print(query_error(Exception("[UNRESOLVED_ROUTINE] Cannot resolve routine `LEN` on search path. SQLSTATE: "
    ...     "42883; line 1 pos 7;\\n'Project"), m))  # doctest: +NORMALIZE_WHITESPACE
    <input>: model s.m: Cannot resolve routine `LEN` on search path. (fix: use a function Spark knows (its SQL
    reference lists them), or compute the value otherwise)
    """
    lines = str(exc).strip().splitlines()
    found = _ANALYSIS.search(lines[0]) if lines else None
    if found is None:
        return None
    names = _NAMED.findall(found["text"])
    line = _line_naming(model, names[0].split("`.`")[-1].split(".")[-1]) if names else None
    return ModelQueryError(model.path, line, f"model {model.name}: {found['text'].strip()}", hint=_FIX[found["kind"]])


def check_storable(model: SqlModel, schema: StructType) -> None:
    """Refuse, before anything is written, a column of a type a Delta table cannot store: an INTERVAL (DuckDB
    stores one; Delta has no such type), said in one line with the model file, the column and the fix."""
    for field in schema.fields:
        spelled = field.dataType.simpleString()
        if "interval" in spelled:
            raise ModelQueryError(
                model.path,
                _line_naming(model, field.name),
                f"model {model.name}: column {field.name} is of type {spelled}, which a Delta table cannot store",
                hint=f"cast it before it is written: to a number (seconds, days) or to text (CAST({field.name} "
                "AS VARCHAR))",
            )


def _line_naming(model: SqlModel, name: str) -> int | None:
    """The first line of the model's file, from its query on, that names ``name`` as a word."""
    if model.path is None:
        return None
    try:
        text = Path(model.path).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    word = re.compile(rf"(?<!\w){re.escape(name)}(?!\w)", re.IGNORECASE)
    start = max(model.query_line - 1, 0)
    return next((n for n, line in enumerate(text[start:], start + 1) if word.search(line)), None)
