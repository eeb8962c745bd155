"""DuckDB's ``range`` and ``generate_series`` (a date spine, a run of numbers) as Spark expressions giving
DuckDB's rows.

As a table (``FROM range(a, b, step) AS t(day)``) each is one column, named by the alias, else ``range`` or
``generate_series``; as a value, a list. ``range`` leaves out its end, ``generate_series`` keeps it; both are
empty when the start lies past the end, and a series of DATEs (with an INTERVAL step) is one of TIMESTAMPs.
sqlglot writes them as Spark's ``EXPLODE(SEQUENCE(...))`` with the column unnamed, the alias in a form Spark
refuses, a DATE series of DATEs and, for ``range`` of times, a comparison of the step with 0 Spark refuses.
Here the table is ``(SELECT EXPLODE(<list>) AS column) AS alias``. A descending series (a negative step) and
one whose bounds read another table's columns stay as sqlglot writes them.

>>> import sqlglot
>>> q = sqlglot.parse_one("SELECT day FROM range(DATE '2024-01-01', DATE '2024-01-03', INTERVAL 1 DAY) AS s(day)",
...                       read="duckdb")
>>> series_tables(q)
>>> for node in list(q.find_all(exp.GenerateSeries)):
...     _ = node.replace(series(node) or node)
>>> q.sql("spark")
"SELECT day FROM (SELECT EXPLODE(FILTER(IF(CAST(CAST('2024-01-01' AS DATE) AS TIMESTAMP) <= \
CAST(CAST('2024-01-03' AS DATE) AS TIMESTAMP), SEQUENCE(CAST(CAST('2024-01-01' AS DATE) AS TIMESTAMP), \
CAST(CAST('2024-01-03' AS DATE) AS TIMESTAMP), INTERVAL '1' DAY), ARRAY()), __iam_v -> __iam_v < \
CAST(CAST('2024-01-03' AS DATE) AS TIMESTAMP))) AS day) AS s"
"""

from __future__ import annotations

from sqlglot import exp

from incremental_assets.load.duckdb_functions import filled
from incremental_assets.load.duckdb_types import shown_type

_SEQUENCE = "IF(__0 <= __1, SEQUENCE(__0, __1, __2), ARRAY())"


def series_tables(query: exp.Expr) -> None:
    """Each ``range`` / ``generate_series`` read as a table in ``query`` made a subquery of one named column
    exploding the series; in place."""
    for table in list(query.find_all(exp.Table)):
        made = table.this
        if not isinstance(made, exp.GenerateSeries) or not _translatable(made) or made.find(exp.Column):
            continue
        alias = table.args.get("alias")
        default = "range" if made.args.get("is_end_exclusive") else "generate_series"
        columns = alias.columns if alias is not None else []
        column = columns[0].copy() if columns else exp.to_identifier(default)
        name = alias.this.copy() if alias is not None and alias.this else exp.to_identifier(default)
        rows = exp.select(exp.alias_(exp.Explode(this=made.copy()), column)).subquery(name)
        table.replace(rows)


def series(node: exp.GenerateSeries) -> exp.Expr | None:
    """DuckDB's series as a Spark list (None: kept as sqlglot writes it)."""
    if not _translatable(node):
        return None
    start, end = node.args["start"], node.args["end"]
    step = node.args.get("step") or exp.Literal.number(1)
    if any(_is_date(bound) for bound in (start, end)):  # DuckDB's series of DATEs holds TIMESTAMPs
        start, end = exp.cast(start.copy(), "TIMESTAMP"), exp.cast(end.copy(), "TIMESTAMP")
    listed = filled(_SEQUENCE, [start, end, step])
    if node.args.get("is_end_exclusive"):
        listed = filled("FILTER(__0, __iam_v -> __iam_v < __1)", [listed, end])
    return listed


def _translatable(node: exp.GenerateSeries) -> bool:
    step = node.args.get("step")
    descending = isinstance(step, exp.Neg) or isinstance(step, exp.Literal) and step.name.startswith("-")
    return not descending and node.args.get("start") is not None and node.args.get("end") is not None


def _is_date(value: exp.Expr) -> bool:
    kind = shown_type(value)
    return kind is not None and kind.this == exp.DataType.Type.DATE
