"""String helpers shared by other macro files (imported as `macros.text`)."""

from sqlglot import exp


def shout(expression: exp.Expression) -> exp.Expression:
    return exp.Upper(this=expression)
