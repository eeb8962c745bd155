"""The query's output columns: the type of each, and which upstream columns each is computed from.

Both come from one pass of sqlglot's optimizer over the known schemas of the tables the query reads
(sources declare theirs; upstream models have theirs inferred first, or read from their tables):

>>> import sqlglot
>>> q = sqlglot.parse_one("SELECT o.id, SUM(o.qty * 2) AS units, 'x' AS tag FROM raw.orders AS o GROUP BY 1",
...                       read="spark")
>>> cols = describe_columns(q, {"raw.orders": {"id": "bigint", "qty": "int"}})
>>> cols.types
{'id': 'bigint', 'units': 'bigint', 'tag': 'string'}
>>> cols.lineage["units"]
(('raw.orders', 'qty'),)
>>> cols.lineage["tag"]
()

Filters, joins and grouping read columns too, and a change to what they read changes every row:

>>> q = sqlglot.parse_one("SELECT o.id FROM raw.orders AS o WHERE o.qty > 1", read="spark")
>>> cols = describe_columns(q, {"raw.orders": {"id": "bigint", "qty": "int"}})
>>> cols.filters, cols.expressions
((('raw.orders', 'qty'),), {'id': 'o.id'})

A column whose type sqlglot cannot derive (a function it does not know) has type None; a query the
optimizer cannot resolve (a ``*`` over an unknown table) describes no column at all.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.lineage import lineage
from sqlglot.optimizer.scope import Scope, build_scope, traverse_scope

from incremental_assets.load.column_types import output_types, typed_query


@dataclass(frozen=True)
class Columns:
    """Output columns in query order: their types (None: unknown) and their upstream (table, column) pairs.

    ``filters`` are the upstream columns WHERE, JOIN, GROUP BY, HAVING and QUALIFY read in any scope
    (None: one could not be traced to a table); ``expressions`` each output column's outer projection
    as canonical SQL; ``shape`` the query without its outer projections (the whole query when adding a
    projection can change the rows: DISTINCT, a generator such as EXPLODE, a set operation)."""

    types: Mapping[str, str | None] = field(default_factory=dict)
    lineage: Mapping[str, tuple[tuple[str, str], ...]] = field(default_factory=dict)
    filters: tuple[tuple[str, str], ...] | None = None
    expressions: Mapping[str, str] = field(default_factory=dict)
    shape: str | None = None


def _sources_of(column: str, query: exp.Query, schema: dict, scope, dialect: str) -> tuple[tuple[str, str], ...]:
    node = lineage(column, query, schema=schema, dialect=dialect, scope=scope, trim_selects=False, copy=False)
    found: dict[tuple[str, str], None] = {}
    for step in node.walk():
        if isinstance(step.source, exp.Table) and not step.downstream and isinstance(step.expression, exp.Table):
            table = ".".join(p.name for p in step.source.parts).lower()
            found[(table, step.name.split(".")[-1].lower())] = None
    return tuple(found)


def describe_columns(
    query: exp.Expr,
    tables: Mapping[str, Mapping[str, str]],
    *,
    dialect: str = "spark",
    macros: Mapping[str, exp.Expr] | None = None,
    detail: bool = True,
) -> Columns:
    """Types and lineage of the output columns of ``query`` over ``tables`` (only the tables it reads
    are looked up); ``macros`` give macro values (typed literals), any other macro is NULL. Without
    ``detail``, only the types and the lineage (``filters``, ``expressions`` and ``shape`` left empty)."""
    typed = typed_query(query, tables, dialect=dialect, macros=macros)
    if typed is None:
        return Columns()
    annotated, schema = typed
    try:
        types = output_types(annotated)
        scope = build_scope(annotated)
        sources = {name: _sources_of(name, annotated, schema, scope, dialect) for name in types}
        if not detail:
            return Columns(types, sources)
        filters = _filter_reads(annotated)
        expressions, shape = _projections_and_shape(annotated)
    except (SqlglotError, KeyError, ValueError, RecursionError):
        return Columns()
    return Columns(types, sources, filters, expressions, shape)


_FILTER_CLAUSES = ("where", "joins", "group", "having", "qualify")


def _base_columns(scope: Scope, alias: str, name: str, depth: int = 0) -> set[tuple[str, str]] | None:
    """The table columns a column of ``alias`` in ``scope`` is computed from (None: not traceable)."""
    source = scope.sources.get(alias)
    if isinstance(source, exp.Table):
        return {(".".join(p.name for p in source.parts).lower(), name.lower())}
    if not isinstance(source, Scope) or not isinstance(source.expression, exp.Select) or depth > 32:
        return None
    projection = next((s for s in source.expression.selects if s.alias_or_name.lower() == name.lower()), None)
    if projection is None:
        return None
    found: set[tuple[str, str]] = set()
    for column in projection.find_all(exp.Column):
        inner = _base_columns(source, column.table, column.name, depth + 1)
        if inner is None:
            return None
        found |= inner
    return found


def _filter_reads(query: exp.Expr) -> tuple[tuple[str, str], ...] | None:
    found: set[tuple[str, str]] = set()
    for scope in traverse_scope(query):
        for clause in _FILTER_CLAUSES:
            nodes = scope.expression.args.get(clause) or []
            for node in nodes if isinstance(nodes, list) else [nodes]:
                for column in node.find_all(exp.Column):
                    if isinstance(column.parent, exp.Table):
                        continue
                    # Unqualified: the columns of a table of unknown columns, unambiguous when it is the only one.
                    alias = column.table or (next(iter(scope.sources)) if len(scope.sources) == 1 else "")
                    base = _base_columns(scope, alias, column.name)
                    if base is None:
                        return None
                    found |= base
    return tuple(sorted(found))


def _projections_and_shape(query: exp.Query) -> tuple[dict[str, str], str]:
    """Each outer projection as canonical SQL, and the query without them (see :class:`Columns`)."""
    expressions = {s.alias_or_name.lower(): s.unalias().sql(dialect="spark", comments=False) for s in query.selects}
    whole = query.sql(dialect="spark", comments=False)
    if not isinstance(query, exp.Select) or query.args.get("distinct"):
        return expressions, whole
    generators = (exp.Explode, exp.Posexplode, exp.Inline)
    if any(s.find(*generators) for s in query.selects):
        return expressions, whole
    grouped = bool(query.args.get("group")) or any(
        not a.find_ancestor(exp.Window) for s in query.selects for a in s.find_all(exp.AggFunc)
    )
    placeholder = query.copy().select(exp.Literal.number(1), append=False)
    # Whether the query aggregates decides its rows: an added aggregate column must not turn a
    # row-per-input query into one row, so the shape says it.
    return expressions, f"{placeholder.sql(dialect='spark', comments=False)} /* grouped={grouped} */"
