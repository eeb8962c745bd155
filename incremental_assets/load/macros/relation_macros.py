"""SQLMesh's macros that build a relation or name one: ``@DATE_SPINE``, ``@DEDUPLICATE``, ``@RESOLVE_TEMPLATE``.

>>> from incremental_assets.load.macros.evaluator import MacroContext, MacroEvaluator
>>> ev = MacroEvaluator(MacroContext(), "spark")
>>> date_spine(ev, exp.Literal.string("quarter"), exp.Literal.string("2024-01-01"),
...            exp.Literal.string("2024-12-31")).sql("spark")  # doctest: +NORMALIZE_WHITESPACE
"SELECT date_quarter FROM EXPLODE(SEQUENCE(CAST('2024-01-01' AS DATE), CAST('2024-12-31' AS DATE),
  INTERVAL '3' MONTH)) AS _exploded(date_quarter)"
>>> deduplicate(ev, exp.to_table("raw.e"), exp.Array(expressions=[exp.column("id")]),
...             exp.Array(expressions=[exp.Literal.string("ts DESC")])).sql("spark")
'SELECT _row.* FROM (SELECT STRUCT(*) AS _row, ROW_NUMBER() OVER (PARTITION BY id ORDER BY ts DESC) AS _row_number \
FROM raw.e) AS _deduplicated WHERE _row_number = 1'
"""

from __future__ import annotations

from datetime import date
from typing import Any, Callable

from sqlglot import exp
from sqlglot.errors import ParseError

from incremental_assets.load.macros.operators import MacroError, MacroEvaluator, _items, _word

DATE_PARTS = ("day", "week", "month", "quarter", "year")


def _as_node(value: Any) -> exp.Expr | None:
    return value if isinstance(value, exp.Expression) else None


def _spine_date(evaluator: MacroEvaluator, value: Any, which: str) -> tuple[exp.Expr, date | None]:
    """A spine edge as SQL (a 'YYYY-MM-DD' text or a date macro cast to DATE) and its date when written out."""
    if isinstance(value, exp.Literal) and value.is_string:
        try:
            day = date.fromisoformat(value.name)
        except ValueError:
            raise MacroError(
                f"@DATE_SPINE's {which} date must be written YYYY-MM-DD, found '{value.name}'",
                value,
                hint="e.g. @DATE_SPINE('day', '2024-01-01', '2024-01-31')",
            ) from None
        return exp.cast(value.copy(), exp.DataType.build("DATE")), day
    if isinstance(value, exp.Parameter):  # a date macro (@start_ds ...), a text or a date per run
        return exp.cast(value.copy(), exp.DataType.build("DATE")), None
    if not isinstance(value, exp.Expression):
        return exp.cast(exp.Literal.string(str(value)), exp.DataType.build("DATE")), None
    return value.copy(), None


def date_spine(evaluator: MacroEvaluator, datepart: Any, start_date: Any, end_date: Any) -> exp.Expr:
    """``@DATE_SPINE('day' | 'week' | 'month' | 'quarter' | 'year', start, end)``: one row per step from
    ``start`` to ``end`` (both included, as SQLMesh's), in a column ``date_<datepart>``; steps count from
    ``start`` (a week is 7 days on, a quarter 3 months)."""
    part = _word(datepart).lower()
    if part not in DATE_PARTS:
        raise MacroError(
            f"@DATE_SPINE has no datepart '{part}'",
            _as_node(datepart),
            hint="use 'day', 'week', 'month', 'quarter' or 'year'",
        )
    start, first = _spine_date(evaluator, start_date, "start")
    end, last = _spine_date(evaluator, end_date, "end")
    if first is not None and last is not None and first > last:
        raise MacroError(
            f"@DATE_SPINE's start {first} is after its end {last}",
            _as_node(start_date),
            hint="give the earlier date first",
        )
    amount, unit = (3, "month") if part == "quarter" else (1, part)
    step = exp.Interval(this=exp.Literal.string(str(amount)), unit=exp.var(unit.upper()))
    column = f"date_{part}"
    spine = exp.Unnest(
        expressions=[exp.GenerateDateArray(start=start, end=end, step=step)],
        alias=exp.TableAlias(this=exp.to_identifier("_exploded"), columns=[exp.to_identifier(column)]),
    )
    return exp.select(column).from_(spine)


def deduplicate(evaluator: MacroEvaluator, relation: Any, partition_by: Any, order_by: Any) -> exp.Expr:
    """``@DEDUPLICATE(relation, [partition columns], ['col DESC', ...])``: the first row of each partition in the
    given order, every column of ``relation`` (SQLMesh's ``QUALIFY ROW_NUMBER() ... = 1``, as a subquery Spark
    reads)."""
    usage = "e.g. @DEDUPLICATE(raw.events, [user_id, CAST(ts AS DATE)], ['ts DESC', 'status ASC'])"
    if not isinstance(partition_by, (exp.Array, exp.Tuple, exp.Paren, list)):
        raise MacroError("@DEDUPLICATE's partition_by must be a list of columns", _as_node(partition_by), hint=usage)
    texts = [_word(item) for item in _items(order_by)]
    if not isinstance(order_by, (exp.Array, exp.Tuple, exp.Paren, list)) or not texts:
        raise MacroError(
            "@DEDUPLICATE's order_by must be a non-empty list of texts such as 'ts DESC NULLS LAST'",
            _as_node(order_by),
            hint=usage,
        )
    order: list[exp.Expr] = []
    for text in texts:
        try:
            ordered = evaluator.parse_one(text, into=exp.Ordered)
        except ParseError:
            raise MacroError(f"@DEDUPLICATE cannot read the order '{text}'", _as_node(order_by), hint=usage) from None
        expanded = evaluator.transform(ordered)
        order.append(expanded[0] if isinstance(expanded, list) else expanded)
    window = exp.Window(
        this=exp.RowNumber(),
        partition_by=[p.copy() for p in _items(partition_by)],
        order=exp.Order(expressions=order),
    )
    source = relation.copy() if isinstance(relation, exp.Table) else exp.to_table(_table_text(relation))
    return _first_rows(evaluator, source, window)


def _first_rows(evaluator: MacroEvaluator, source: exp.Table, window: exp.Window) -> exp.Expr:
    """The rows of ``source`` whose row number in ``window`` is 1, with the columns of ``source`` only: by
    name when they are declared, else carried in a struct (Spark's QUALIFY-free form would add a column)."""
    try:
        columns = list(evaluator.columns_to_types(_table_text(source)))
    except MacroError:
        columns = []
    numbered = exp.alias_(window, "_row_number")
    if columns:
        inner = exp.select(exp.Star(), numbered).from_(source)
        projection: list[exp.Expr] = [exp.column(exp.to_identifier(c)) for c in columns]
    else:
        inner = exp.select(exp.alias_(exp.func("STRUCT", exp.Star()), "_row"), numbered).from_(source)
        projection = [exp.Column(this=exp.Star(), table=exp.to_identifier("_row"))]
    return exp.select(*projection).from_(inner.subquery("_deduplicated")).where(exp.column("_row_number").eq(1))


def _table_text(relation: Any) -> str:
    if isinstance(relation, exp.Table):
        return ".".join(p for p in (relation.catalog, relation.db, relation.name) if p)
    if isinstance(relation, exp.Column):
        return ".".join(p for p in (relation.catalog, relation.db, relation.table, relation.name) if p)
    return _word(relation)


def resolve_template(evaluator: MacroEvaluator, template: Any, mode: Any = None) -> exp.Expr:
    """``@RESOLVE_TEMPLATE('s3://b/@{catalog_name}/@{schema_name}/@{table_name}'[, mode := 'table'])``: the
    template with the model's catalog, schema and table name put in, as text (or as a table name)."""
    text = _word(template)
    if not evaluator.this_model:
        return exp.Literal.string(text)
    table = exp.to_table(evaluator.this_model)
    resolved = (
        text.replace("@{catalog_name}", table.catalog)
        .replace("@{schema_name}", table.db)
        .replace("@{table_name}", table.name)
    )
    if _word(mode, "literal").lower() == "table":
        return exp.to_table(resolved, dialect=evaluator.dialect)
    return exp.Literal.string(resolved)


RELATION_MACROS: dict[str, Callable[..., exp.Expr]] = {
    "date_spine": date_spine,
    "deduplicate": deduplicate,
    "resolve_template": resolve_template,
}
