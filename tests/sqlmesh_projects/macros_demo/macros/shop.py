from macros.text import shout
from sqlglot import exp

from sqlmesh import SQL, macro
from sqlmesh.core.macros import MacroEvaluator


@macro()
def plus_one(evaluator: MacroEvaluator, value: int) -> int:
    return value + 1


@macro()
def scaled(evaluator, column, factor):
    return column * factor


@macro("Loud")
def loud_name(evaluator, column: exp.Column):
    return shout(column)


@macro()
def in_window(evaluator, column):
    return column.between(evaluator.locals["start_ds"], evaluator.locals["end_ds"])


@macro()
def flags(evaluator, column: str, values: list[str]):
    return [f"CASE WHEN {column} = '{v}' THEN 1 ELSE 0 END AS is_{v}" for v in values]


@macro()
def as_text(evaluator, expression: SQL) -> str:
    return f"'{expression}'"


@macro()
def dialect_name(evaluator) -> str:
    return f"'{evaluator.dialect}'"
