"""The query's output columns: the type of each, and which upstream columns each is computed from.

Both come from one pass of sqlglot's optimizer over the known schemas of the tables the query reads
(sources declare theirs; upstream models have theirs inferred first, or read from their tables):

>>> import sqlglot
>>> q = sqlglot.parse_one("SELECT o.id, SUM(o.qty * 2) AS units, 'x' AS tag FROM raw.orders AS o GROUP BY 1", read="spark")
>>> cols = describe_columns(q, {"raw.orders": {"id": "bigint", "qty": "int"}})
>>> cols.types
{'id': 'bigint', 'units': 'bigint', 'tag': 'string'}
>>> cols.lineage["units"]
(('raw.orders', 'qty'),)
>>> cols.lineage["tag"]
()

A column whose type sqlglot cannot derive (a function it does not know) has type None; a query the
optimizer cannot resolve (a ``*`` over an unknown table) describes no column at all.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.lineage import lineage
from sqlglot.optimizer.annotate_types import annotate_types
from sqlglot.optimizer.qualify import qualify
from sqlglot.optimizer.scope import build_scope

# Spark SQL functions whose result type sqlglot leaves unknown, and the type Spark gives them.
_KNOWN_RESULTS: dict[type[exp.Expression], str] = {exp.TimestampTrunc: "timestamp", exp.DateTrunc: "timestamp"}


@dataclass(frozen=True)
class Columns:
    """Output columns in query order: their types (None: unknown) and their upstream (table, column) pairs."""

    types: Mapping[str, str | None] = field(default_factory=dict)
    lineage: Mapping[str, tuple[tuple[str, str], ...]] = field(default_factory=dict)


def nested_schema(tables: Mapping[str, Mapping[str, str]]) -> dict:
    """``{"db.table": {col: type}}`` as sqlglot's nested schema mapping (``{"db": {"table": {...}}}``)."""
    out: dict = {}
    for name, columns in tables.items():
        if not columns:
            continue  # a table of unknown columns: as if it were not given
        parts = name.lower().split(".")
        level = out
        for part in parts[:-1]:
            level = level.setdefault(part, {})
        level[parts[-1]] = {c.lower(): t for c, t in columns.items()}
    return out


def type_name(data_type: exp.DataType | None) -> str | None:
    """A sqlglot type in Spark SQL's lower-case spelling (``decimal(18,2)``), None when unknown.

    >>> type_name(exp.DataType.build("DECIMAL(18, 2)")), type_name(exp.DataType.build("UNKNOWN"))
    ('decimal(18,2)', None)
    """
    if data_type is None or data_type.this in (exp.DataType.Type.UNKNOWN, exp.DataType.Type.NULL):
        return None
    return data_type.sql("spark").lower().replace(", ", ",")


def _read_tables(query: exp.Expression) -> set[str]:
    return {".".join(p.name for p in t.parts).lower() for t in query.find_all(exp.Table)}


def _projection_type(projection: exp.Expression) -> str | None:
    value = projection.this if isinstance(projection, exp.Alias) else projection
    known = type_name(projection.type)
    if known is None:
        for kind, name in _KNOWN_RESULTS.items():
            if isinstance(value, kind):
                return name
    return known


def _sources_of(column: str, query: exp.Query, schema: dict, scope, dialect: str) -> tuple[tuple[str, str], ...]:
    node = lineage(column, query, schema=schema, dialect=dialect, scope=scope, trim_selects=False, copy=False)
    found: dict[tuple[str, str], None] = {}
    for step in node.walk():
        if isinstance(step.source, exp.Table) and not step.downstream and isinstance(step.expression, exp.Table):
            table = ".".join(p.name for p in step.source.parts).lower()
            found[(table, step.name.split(".")[-1].lower())] = None
    return tuple(found)


def describe_columns(
    query: exp.Expression,
    tables: Mapping[str, Mapping[str, str]],
    *,
    dialect: str = "spark",
    macros: Mapping[str, exp.Expression] | None = None,
) -> Columns:
    """Types and lineage of the output columns of ``query`` over ``tables`` (only the tables it reads
    are looked up); ``macros`` give macro values (typed literals), any other macro is NULL."""
    values = macros or {}
    schema = nested_schema({t: tables[t] for t in _read_tables(query) if t in tables})
    query = query.transform(lambda n: values.get(n.name, exp.Null()).copy() if isinstance(n, exp.Parameter) else n)
    try:
        qualified = qualify(query, schema=schema, dialect=dialect, validate_qualify_columns=False, quote_identifiers=False)
        annotated = annotate_types(qualified, schema=schema, dialect=dialect)
        if not isinstance(annotated, exp.Query) or any(isinstance(s, exp.Star) for s in annotated.selects):
            return Columns()
        types = {s.alias_or_name.lower(): _projection_type(s) for s in annotated.selects}
        scope = build_scope(annotated)
        sources = {name: _sources_of(name, annotated, schema, scope, dialect) for name in types}
    except (SqlglotError, KeyError, ValueError, RecursionError):
        return Columns()
    return Columns(types, sources)
