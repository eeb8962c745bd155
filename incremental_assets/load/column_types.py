"""The types of a query's output columns, from sqlglot's type annotation over the known columns of the
tables it reads; and so the columns of models that declare none, as ``@STAR`` and ``@UNION`` read them.

A model without a ``columns`` list has the columns its query makes, typed as its dialect types them
(SQLMesh's rule): its inputs' columns are known first (sources and models declaring them, seeds, models
inferred the same way), so a chain of models resolves in dependency order.

>>> import sqlglot
>>> q = sqlglot.parse_one("SELECT o.id, SUM(o.qty) AS units, 'x' AS tag, f(o.id) AS odd FROM raw.orders AS o")
>>> query_types(q, {"raw.orders": {"id": "bigint", "qty": "int"}})
{'id': 'bigint', 'units': 'bigint', 'tag': 'string', 'odd': None}

A column whose type sqlglot cannot derive (a function it does not know) has type None; a query whose
columns cannot be resolved (a ``*`` over a table of unknown columns) has none at all:

>>> query_types(sqlglot.parse_one("SELECT * FROM raw.elsewhere"), {}) is None
True
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path

from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.optimizer.annotate_types import annotate_types
from sqlglot.optimizer.qualify import qualify

from incremental_assets.errors import ModelFileError
from incremental_assets.load.cache import ResultCache, code_digest, result_key
from incremental_assets.load.duckdb_types import has_untyped_choice
from incremental_assets.load.macros import render, window_conditions
from incremental_assets.load.macros.evaluator import MacroContext
from incremental_assets.load.macros.window_conditions import first_variant
from incremental_assets.model.project import closure
from incremental_assets.model.sql_model import SqlModel

# How a column of unknown type is written in a table's columns (sqlglot reads it back as such).
UNKNOWN_TYPE = "unknown"

# Spark SQL functions whose result type sqlglot leaves unknown, and the type Spark gives them.
_KNOWN_RESULTS: dict[type[exp.Expr], str] = {exp.TimestampTrunc: "timestamp", exp.DateTrunc: "timestamp"}


def nested_schema(tables: Mapping[str, Mapping[str, str]], dialect: str = "spark") -> dict:
    """``{"db.table": {col: type}}`` (Spark SQL types) as sqlglot's nested schema mapping
    (``{"db": {"table": {...}}}``), the types written in ``dialect``."""
    out: dict = {}
    for name, columns in tables.items():
        if not columns:
            continue  # a table of unknown columns: as if it were not given
        parts = name.lower().split(".")
        level = out
        for part in parts[:-1]:
            level = level.setdefault(part, {})
        level[parts[-1]] = {c.lower(): _in_dialect(t, dialect) for c, t in columns.items()}
    return out


def _in_dialect(spark_type: str, dialect: str) -> str:
    if dialect == "spark":
        return spark_type
    try:
        return exp.DataType.build(spark_type, dialect="spark").sql(dialect)
    except (SqlglotError, ValueError):
        return UNKNOWN_TYPE


def type_name(data_type: exp.DataType | None) -> str | None:
    """A sqlglot type in Spark SQL's lower-case spelling (``decimal(18,2)``), None when unknown.

    >>> type_name(exp.DataType.build("DECIMAL(18, 2)")), type_name(exp.DataType.build("UNKNOWN"))
    ('decimal(18,2)', None)
    """
    if data_type is None or data_type.this in (exp.DataType.Type.UNKNOWN, exp.DataType.Type.NULL):
        return None
    return data_type.sql("spark").lower().replace(", ", ",")


def read_tables(query: exp.Expr) -> set[str]:
    """The names of the tables a query reads, lower case."""
    return {".".join(p.name for p in t.parts).lower() for t in query.find_all(exp.Table)}


def typed_query(
    query: exp.Expr,
    tables: Mapping[str, Mapping[str, str]],
    *,
    dialect: str = "spark",
    macros: Mapping[str, exp.Expr] | None = None,
) -> tuple[exp.Query, dict] | None:
    """``query`` qualified and its types annotated over the columns of ``tables`` it reads, with the
    nested schema used; ``macros`` give macro values (typed literals), any other macro is NULL. None when
    the optimizer cannot resolve it or a ``*`` is left in its output."""
    values = macros or {}
    schema = nested_schema({t: tables[t] for t in read_tables(query) if t in tables}, dialect)
    query = query.transform(lambda n: values.get(n.name, exp.Null()).copy() if isinstance(n, exp.Parameter) else n)
    try:
        qualified = qualify(
            query, schema=schema, dialect=dialect, validate_qualify_columns=False, quote_identifiers=False
        )
        annotated = annotate_types(qualified, schema=schema, dialect=dialect)
    except (SqlglotError, KeyError, ValueError, RecursionError):
        return None
    if not isinstance(annotated, exp.Query) or any(isinstance(s, exp.Star) for s in annotated.selects):
        return None
    return annotated, schema


def output_types(annotated: exp.Query) -> dict[str, str | None]:
    """The type of each output column of a query :func:`typed_query` annotated (None: unknown)."""
    return {s.alias_or_name.lower(): _projection_type(s) for s in annotated.selects}


def query_types(
    query: exp.Expr,
    tables: Mapping[str, Mapping[str, str]],
    *,
    dialect: str = "spark",
    macros: Mapping[str, exp.Expr] | None = None,
) -> dict[str, str | None] | None:
    """The type of each output column of ``query`` (None: unknown), None when its columns are not known."""
    typed = typed_query(query, tables, dialect=dialect, macros=macros)
    return None if typed is None else output_types(typed[0])


def _projection_type(projection: exp.Expr) -> str | None:
    value = projection.this if isinstance(projection, exp.Alias) else projection
    known = type_name(projection.type)
    if known is None:
        for kind, name in _KNOWN_RESULTS.items():
            if isinstance(value, kind):
                return name
    return known


class ModelColumns:
    """The columns of models, worked out once per load and kept between loads (in ``folder``, None: not
    kept) under what they are computed from: the model's definition and dialect, the columns of what it
    reads, and the code."""

    def __init__(self, folder: Path | None) -> None:
        self.cache = ResultCache(folder, "model_columns")
        self._made: dict[str, dict[str, str] | None] = {}

    def of(self, models: Mapping[str, SqlModel], known: Mapping[str, Mapping[str, str]]) -> dict[str, dict[str, str]]:
        """The columns of every model whose columns are known: its declared ones, else those its query makes
        (a column of unknown type as ``unknown``) over the columns of what it reads (``known``: the sources'
        declared columns, and the models'); a model whose query's columns cannot be resolved is left out."""
        out: dict[str, dict[str, str] | None] = {}
        for name in upstream_first(models):
            model = models[name]
            inputs = {t: c for t in model.depends_on if (c := known.get(t) or out.get(t))}
            out[name] = self._columns(model, inputs)
        return {name: columns for name, columns in out.items() if columns}

    def save(self) -> None:
        self.cache.save()

    def _columns(self, model: SqlModel, inputs: Mapping[str, Mapping[str, str]]) -> dict[str, str] | None:
        if model.columns:
            return dict(model.columns)
        if model.query is None:
            return None
        key = result_key(
            code_digest(sys.modules[__name__], render, window_conditions),
            [model.fingerprint, model.name, model.dialect, model.start, model.unit.name, model.is_incremental],
            sorted((t, sorted(c.items())) for t, c in inputs.items()),
        )
        if key not in self._made:
            found = self.cache.get(key)
            if found is None:
                types = query_types(
                    first_variant(model.query), inputs, dialect=model.dialect, macros=render.sample_macros(model)
                )
                found = self.cache.put(
                    key, [None if types is None else {c: t or UNKNOWN_TYPE for c, t in types.items()}]
                )
            self._made[key] = found[0]
        return self._made[key]


def with_model_types(
    models: dict[str, SqlModel],
    columns: ModelColumns,
    macros: MacroContext,
    parse: Callable[..., list[SqlModel]],
    source_columns: Callable[[str], Mapping[str, str] | None],
) -> None:
    """Each model file whose DuckDB query a column type of the tables it reads would translate otherwise
    (``date_col - date_col``, ``CAST(double_col AS INT)``) parsed again, upstream first, knowing those types:
    the models' (declared or worked out from their queries) and, for a source declaring no columns,
    ``source_columns(name)`` (read from its files); in place."""
    for name in upstream_first(models):
        model = models[name]
        if model.path.suffix != ".sql" or not _has_choice(model):
            continue
        inputs: dict[str, Mapping[str, str]] = {}
        if any(t in models for t in model.depends_on):
            known = columns.of(ancestors(models, name), macros.schemas)
            inputs = {t: known[t] for t in model.depends_on if t in known and t not in macros.schemas}
        for table in model.depends_on:
            if table not in models and table not in macros.schemas and (found := source_columns(table)):
                inputs[table] = found
        if not inputs:
            continue
        try:
            again = parse(model.path, macros=replace(macros, schemas={**inputs, **macros.schemas}))
        except (ModelFileError, SqlglotError):
            continue  # the first parse stands
        models.update((m.name, m) for m in again if m.name in models)


def needs_model_types(model: SqlModel, models: Mapping[str, SqlModel]) -> bool:
    """Whether ``model`` is a DuckDB model reading another of ``models`` whose query still holds a translation a
    column's type would decide (:func:`~incremental_assets.load.duckdb_types.has_untyped_choice`)."""
    return any(t in models for t in model.depends_on) and _has_choice(model)


def _has_choice(model: SqlModel) -> bool:
    return model.dialect == "duckdb" and model.query is not None and has_untyped_choice(model.query)


def ancestors(models: Mapping[str, SqlModel], name: str) -> dict[str, SqlModel]:
    """The models ``name`` reads, directly or through others (itself left out)."""
    reached = closure(name, lambda n: [r for r in models[n].depends_on if r in models])
    return {n: models[n] for n in reached if n != name}


def upstream_first(models: Mapping[str, SqlModel]) -> list[str]:
    """The models' names, each after the models it reads (a cycle's models in any order, none left out).

    >>> from pathlib import Path
    >>> from incremental_assets.model.kinds import Full
    >>> from incremental_assets.model.sql_model import TableReference
    >>> def m(name, *reads):
    ...     query = exp.select("1")
    ...     return SqlModel(name, Path(), Full(), query, references=tuple(TableReference(r, 1) for r in reads))
    >>> upstream_first({"c": m("c", "b"), "b": m("b", "a", "raw.x"), "a": m("a", "c")})
    ['a', 'b', 'c']
    """
    order: list[str] = []
    seen: set[str] = set()
    for root in models:
        stack = [(root, iter(models[root].depends_on))] if root not in seen else []
        seen.add(root)
        while stack:
            name, reads = stack[-1]
            after = next((r for r in reads if r in models and r not in seen), None)
            if after is None:
                order.append(name)
                stack.pop()
            else:
                seen.add(after)
                stack.append((after, iter(models[after].depends_on)))
    return order
