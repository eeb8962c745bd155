"""The types of a DuckDB query's columns, where the project declares them, so that the rewrites which keep
DuckDB's meaning on Spark (:mod:`~incremental_assets.load.spark_semantics`) apply to columns as they do to
values the query shows the type of.

A DATE column less a DATE is a number of days in DuckDB and an INTERVAL in Spark; a DOUBLE column cast to an
integer is rounded by DuckDB and truncated by Spark; ``LEN`` of a list column is its number of elements. Which
of these a column is, the query does not say: its table's declared columns do (a source's ``columns``, an
external model's). :func:`type_columns` marks each column of the query whose table it can tell and whose type
is declared, in every scope (a derived table's or a CTE's output column gets the type its expression has), and
writes out DuckDB's ``SELECT * REPLACE (...)`` and ``UNION BY NAME``, which Spark lacks, from the known columns;
:func:`shown_type` is the type of an expression with those marks taken into account (and a number written with
a point a DECIMAL, as DuckDB reads it).

>>> import sqlglot
>>> q = sqlglot.parse_one("SELECT o.day - DATE '2024-01-01' AS n, amount FROM (SELECT day, amount "
...                         "FROM raw.orders) AS o", read="duckdb")
>>> type_columns(q, {"raw.orders": {"day": "date", "amount": "decimal(10,2)"}})
>>> [(c.sql(), shown_type(c).sql("duckdb")) for c in q.find_all(exp.Column) if c.type]
[('amount', 'DECIMAL(10, 2)'), ('o.day', 'DATE'), ('day', 'DATE'), ('amount', 'DECIMAL(10, 2)')]
"""

from __future__ import annotations

from collections.abc import Mapping

from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.optimizer.annotate_types import annotate_types
from sqlglot.optimizer.scope import Scope, traverse_scope

# Spark's TIMESTAMP is an instant in the session's zone (UTC here): the wall time DuckDB's TIMESTAMP holds.
_AS_DUCKDB = {exp.DataType.Type.TIMESTAMPTZ: "TIMESTAMP", exp.DataType.Type.TIMESTAMPLTZ: "TIMESTAMP"}

# Functions returning a list, whose type sqlglot leaves unknown (names an older sqlglot lacks are skipped).
_LIST_FUNCTIONS = tuple(
    getattr(exp, name)
    for name in (
        "Array Split RegexpSplit StringToArray ArrayAgg ArrayUniqueAgg ArrayFilter ArrayDistinct ArrayConcat ArraySort "
        "SortArray ArraySlice ArrayCompact ArrayIntersect ArrayRemove ArrayAppend ArrayPrepend Flatten "
        "RegexpExtractAll MapKeys MapValues Transform GenerateDateArray"
    ).split()
    if hasattr(exp, name)
)

# Integer types DuckDB's casts round to (an older sqlglot lacks some names).
INTEGER_TYPES = {
    getattr(exp.DataType.Type, name)
    for name in "TINYINT SMALLINT INT BIGINT HUGEINT UTINYINT USMALLINT UINT UBIGINT".split()
    if hasattr(exp.DataType.Type, name)
}

# The expressions whose translation a column's type decides.
_CHOICES = (exp.Sub, exp.Cast, exp.TryCast, exp.IntDiv, exp.Length, exp.DateBin, exp.Bracket, exp.UnixToTime)


def shown_type(node: exp.Expr, *, columns: bool = True) -> exp.DataType | None:
    """The DuckDB type the query shows ``node`` to have (a cast, a literal, a function's result, and with
    ``columns`` a column :func:`type_columns` marked), if any."""
    copy = node.copy()
    for leaf in list(copy.find_all(exp.Column, exp.Literal)):
        if isinstance(leaf, exp.Column):
            kind = column_type(leaf) if columns else None
        else:
            kind = _decimal(leaf) if isinstance(leaf, exp.Literal) else None
        if kind is None:
            continue
        if leaf is copy:
            return kind
        leaf.replace(exp.Cast(this=exp.Null(), to=kind.copy()))
    try:
        kind = annotate_types(copy, dialect="duckdb").type
    except SqlglotError:
        return None
    return kind if _known(kind) else None


def is_list(node: exp.Expr) -> bool:
    """Whether ``node`` is a list: a function making one, or of a list type it shows."""
    kind = shown_type(node)
    return isinstance(node, _LIST_FUNCTIONS) or kind is not None and kind.this == exp.DataType.Type.ARRAY


def type_columns(query: exp.Expr, schemas: Mapping[str, Mapping[str, str]]) -> None:
    """Mark, in place, each column of ``query`` with its declared type: ``schemas`` maps a table's name
    (``db.table``) to its columns' Spark SQL types. A column whose table is not clear (an unqualified name two
    tables could hold) or not declared stays unmarked."""
    tables = {name.lower(): dict(columns) for name, columns in schemas.items()}
    if not tables:
        return
    try:
        scopes = traverse_scope(query)  # a derived table's scope comes before the scopes reading it
    except (SqlglotError, KeyError, ValueError, RecursionError):
        return
    for scope in scopes:
        if isinstance(scope.expression, exp.Select):
            _expand_replacing_stars(scope, tables)
        for column in scope.columns:
            kind = _column_type(scope, column, tables)
            if kind is not None:
                column.type = kind


def column_type(column: exp.Column) -> exp.DataType | None:
    """The type :func:`type_columns` marked ``column`` with, if any."""
    kind = column.type
    return kind if kind is not None and _known(kind) else None


def _decimal(literal: exp.Literal) -> exp.DataType | None:
    """DuckDB's type of a number written with a point and no exponent: a DECIMAL of its digits (``1.5`` is
    DECIMAL(2,1); sqlglot reads it as a DOUBLE)."""
    text = literal.this
    if literal.is_string or "." not in text or not text.replace(".", "", 1).isdigit():
        return None
    whole, fraction = text.split(".")
    digits = len(whole.lstrip("0")) + len(fraction)
    if digits > 38:
        return None
    return exp.DataType.build(f"DECIMAL({max(digits, 1)}, {len(fraction)})")


def _known(kind: exp.DataType | None) -> bool:
    return kind is not None and kind.this not in (exp.DataType.Type.UNKNOWN, exp.DataType.Type.NULL)


def _column_type(scope: Scope, column: exp.Column, tables: Mapping[str, Mapping[str, str]]) -> exp.DataType | None:
    name = column.name.lower()
    if column.table:
        source = scope.sources.get(column.table)
    else:
        held = [_names(s, tables) for s in scope.sources.values()]
        if any(names is None for names in held):
            return None  # a source of unknown columns might hold it
        owners = [
            s for s, names in zip(scope.sources.values(), held) if names is not None and name in map(str.lower, names)
        ]
        source = owners[0] if len(owners) == 1 else None
    if isinstance(source, exp.Table):
        declared = {c.lower(): t for c, t in tables.get(_table_name(source), {}).items()}.get(name)
        return None if declared is None else _duckdb_type(declared)
    if isinstance(source, Scope) and isinstance(source.expression, exp.Select):
        for projection in source.expression.selects:
            if projection.alias_or_name.lower() == name:
                return shown_type(projection.unalias())
    return None


def _names(source: exp.Expr | Scope | None, tables: Mapping[str, Mapping[str, str]]) -> list[str] | None:
    """The names of the columns a scope's source holds, in order, None when unknown."""
    if isinstance(source, exp.Table):
        columns = tables.get(_table_name(source))
        return None if columns is None else list(columns)
    if isinstance(source, Scope) and isinstance(source.expression, exp.Select):
        if any(isinstance(p, exp.Star) or p.is_star for p in source.expression.selects):
            return None
        return [p.alias_or_name for p in source.expression.selects]
    return None


def _expand_replacing_stars(scope: Scope, tables: Mapping[str, Mapping[str, str]]) -> None:
    """DuckDB's ``SELECT * REPLACE (expr AS col)`` (and ``t.* ...``), which Spark lacks, written as the source's
    columns in order with ``col`` replaced, where the source's columns are known; in place."""
    select = scope.expression
    projections: list[exp.Expr] = []
    for projection in select.expressions:
        star = projection.this if isinstance(projection, exp.Column) else projection
        if not isinstance(star, exp.Star) or not star.args.get("replace"):
            projections.append(projection)
            continue
        single = next(iter(scope.selected_sources)) if len(scope.selected_sources) == 1 else None
        alias = projection.table if isinstance(projection, exp.Column) else single
        names = _names(scope.sources.get(alias), tables) if alias else None
        if names is None:
            projections.append(projection)
            continue
        excluded = {c.name.lower() for c in star.args.get("except_") or star.args.get("except") or []}
        replaced = {r.alias.lower(): r for r in star.args["replace"]}
        for name in names:
            if name.lower() not in excluded:
                projections.append(
                    replaced[name.lower()].copy() if name.lower() in replaced else exp.column(name, alias)
                )
    if projections != select.expressions:
        select.set("expressions", projections)
        scope.clear_cache()  # its columns are the new projections


def _table_name(table: exp.Table) -> str:
    return ".".join(p.name for p in table.parts).lower()


def _duckdb_type(spark_type: str) -> exp.DataType | None:
    try:
        kind = exp.DataType.build(spark_type, dialect="spark")
    except (SqlglotError, ValueError):
        return None
    return exp.DataType.build(_AS_DUCKDB[kind.this]) if kind.this in _AS_DUCKDB else kind


def unions_by_name(query: exp.Expr, schemas: Mapping[str, Mapping[str, str]]) -> None:
    """DuckDB's ``a UNION [ALL] BY NAME b``, which Spark lacks, as a plain UNION of both sides' columns matched by
    name (case aside): ``a``'s in order, then those only ``b`` has, each side NULL for a column it lacks; in place.
    A side's columns are its projections' names, or a ``SELECT *`` of one table whose columns ``schemas`` know;
    a union whose sides' columns are not known so stays as written (Spark refuses it).

    >>> import sqlglot
    >>> q = sqlglot.parse_one("SELECT y, x FROM a UNION ALL BY NAME SELECT * FROM b", read="duckdb")
    >>> unions_by_name(q, {"b": {"X": "int", "z": "int"}})
    >>> q.sql("spark")
    'SELECT __l.y AS y, __l.x AS x, NULL AS z FROM (SELECT y, x FROM a) AS __l UNION ALL SELECT NULL AS y, \
__r.X AS x, __r.z AS z FROM (SELECT * FROM b) AS __r'
    """
    tables = {name.lower(): dict(columns) for name, columns in schemas.items()}
    for union in reversed(list(query.find_all(exp.Union))):
        if not union.args.get("by_name"):
            continue
        left, right = _output_names(union.this, tables), _output_names(union.expression, tables)
        if left is None or right is None:
            continue
        held = {n.lower() for n in left}
        names = left + [n for n in right if n.lower() not in held]
        union.set("this", _in_order(union.this, left, names, "__l"))
        union.set("expression", _in_order(union.expression, right, names, "__r"))
        union.set("by_name", None)


def _output_names(query: exp.Expr, tables: Mapping[str, Mapping[str, str]]) -> list[str] | None:
    query = query.unnest() if isinstance(query, exp.Subquery) else query
    if isinstance(query, exp.SetOperation):
        return _output_names(query.this, tables)
    if not isinstance(query, exp.Select):
        return None
    if any(isinstance(p, exp.Star) or p.is_star for p in query.selects):
        source = getattr(query.args.get("from_"), "this", None)
        if len(query.selects) != 1 or query.args.get("joins") or not isinstance(source, exp.Table):
            return None
        columns = tables.get(_table_name(source))
        return None if columns is None else list(columns)
    names = [p.alias_or_name for p in query.selects]
    return names if all(names) else None


def _in_order(query: exp.Query, have: list[str], names: list[str], alias: str) -> exp.Query:
    """``query`` giving the columns ``names`` in order (NULL for one it lacks), from its columns ``have``."""
    if [h.lower() for h in have] == [n.lower() for n in names] and not any(p.is_star for p in query.selects):
        return query
    own = {h.lower(): h for h in have}
    columns = [exp.alias_(exp.column(own[n.lower()], alias) if n.lower() in own else exp.Null(), n) for n in names]
    return exp.select(*columns).from_(query.subquery(alias))


def has_untyped_choice(query: exp.Expr) -> bool:
    """Whether ``query`` (as the rewrites left it) still holds an expression whose translation a column's type
    would decide, over a column of unknown type: ``-`` of two columns, a cast to an integer, ``//``, ``LEN``,
    ``TIME_BUCKET``, ``EPOCH_MS``, ``x[i]`` / ``x[a:b]`` (a list's or a text's), or a ``* REPLACE (...)``.

    >>> import sqlglot
    >>> [has_untyped_choice(sqlglot.parse_one(sql)) for sql in ("SELECT a - b, c FROM t", "SELECT a + 1 FROM t")]
    [True, False]
    """
    if any(star.args.get("replace") for star in query.find_all(exp.Star)):
        return True  # SELECT * REPLACE (...) is written out once the columns are known
    for node in query.find_all(*_CHOICES):
        if isinstance(node, (exp.Cast, exp.TryCast)) and node.to.this not in INTEGER_TYPES:
            continue
        if isinstance(node, exp.Bracket):
            node = node.this
        elif isinstance(node, exp.Sub) and not all(s.find(exp.Column) for s in (node.this, node.expression)):
            continue
        if any(not _known(column.type) for column in node.find_all(exp.Column)):
            return True
    return False
