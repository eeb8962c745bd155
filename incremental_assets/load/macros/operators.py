"""SQLMesh's macro operators, each a function of the evaluator and its (expanded) arguments.

``@IF`` and ``@DEF`` see their arguments unexpanded (:data:`LAZY_OPERATORS`); every other operator gets
them expanded, lambdas left as ``exp.Lambda`` for :meth:`MacroEvaluator.apply`.

>>> from incremental_assets.load.macros.evaluator import MacroContext, MacroEvaluator
>>> ev = MacroEvaluator(MacroContext(), "spark")
>>> safe_div(ev, exp.column("a"), exp.column("b")).sql("spark")
'a / NULLIF(b, 0)'
>>> greater_than_one = sqlglot.parse_one("SELECT f(x -> x > 1)").selects[0].expressions[0]
>>> [e.sql() for e in macro_filter(ev, exp.convert([1, 2, 3]), greater_than_one)]
['2', '3']
"""

from __future__ import annotations

import inspect
import typing
from typing import Any, Callable

import sqlglot
from sqlglot import exp
from sqlglot.errors import ExecuteError, ParseError, TokenError

from incremental_assets.load.macros.syntax import (
    CLAUSE_MARK,
    apply_clause,
    protect_macros,
    restore_macros,
    runtime_eval,
    runtime_if,
)
from incremental_assets.model.kinds import CURSOR_MACROS
from incremental_assets.model.sql_model import DATE_MACROS

# The macros whose value is known only when a run's window is: conditions on them are decided per run.
WINDOW_MACROS = frozenset((DATE_MACROS | CURSOR_MACROS) - {"this_model"})

# What a macro yields: one expression, several (spliced into the surrounding list), or nothing.
Value = Any
# The evaluator (:class:`~incremental_assets.load.macros.evaluator.MacroEvaluator`), which imports this module.
MacroEvaluator = Any


class MacroError(Exception):
    """A macro could not be expanded; ``node`` locates it in the model file."""

    def __init__(self, message: str, node: exp.Expr | None = None, *, hint: str | None = None):
        super().__init__(message)
        self.message, self.node, self.hint = message, node, hint


def _items(value: Any) -> list[Any]:
    """A macro argument as a Python list: an ARRAY or tuple's elements, a list, or one item."""
    if isinstance(value, (exp.Array, exp.Tuple)):
        return list(value.expressions)
    if isinstance(value, exp.Paren):
        return [value.this]
    if isinstance(value, list):
        return value
    return [] if value is None else [value]


def _lambda(value: Any, operator: str) -> exp.Lambda:
    if not isinstance(value, exp.Lambda):
        args = "(acc, x) -> acc + x" if operator == "REDUCE" else "x -> x + 1"
        raise MacroError(
            f"@{operator} needs a function such as `{args}` as its last argument",
            value if isinstance(value, exp.Expression) else None,
            hint=f"write @{operator}(items, {args})",
        )
    return value


def shown(node: exp.Expr, dialect: str) -> str:
    """An expression as the user wrote it, date macros as ``@name``."""
    return node.transform(lambda n: exp.var("@" + n.name) if isinstance(n, exp.Parameter) else n).sql(dialect)


def runs_per_window(node: Any) -> bool:
    """Whether an (expanded) expression reads a date or cursor macro, so its value is known per run only."""
    return isinstance(node, exp.Expression) and any(
        isinstance(n, exp.Parameter) and n.name in WINDOW_MACROS for n in node.walk()
    )


def evaluate_constant(evaluator: MacroEvaluator, node: Any) -> Any:
    """A constant SQL expression's Python value, computed by sqlglot's executor."""
    if not isinstance(node, exp.Expression):
        return node
    if any(isinstance(n, exp.Parameter) for n in node.walk()):
        raise MacroError(
            f"`{shown(node, evaluator.dialect)}` depends on the run window, which this macro cannot wait for",
            node,
            hint="decide on the run window with @IF, @EVAL or a clause operator (@WHERE(...) ...), which are "
            "evaluated per run, "
            "or compare date macros in the SQL itself (WHERE ds >= @start_ds)",
        )
    try:
        from sqlglot.executor import execute

        return execute(exp.select(exp.alias_(node.copy(), "v"))).rows[0][0]
    except (ExecuteError, ParseError, TokenError, KeyError, TypeError, ValueError, ArithmeticError) as exc:
        raise MacroError(
            f"cannot evaluate `{shown(node, evaluator.dialect)}` while loading: {exc}",
            node,
            hint="use constants, @DEF variables and project variables only",
        ) from None


def _constant(evaluator: MacroEvaluator, node: Any) -> exp.Expr:
    value = evaluate_constant(evaluator, node)
    return exp.null() if value is None else exp.convert(value)


# --- lazy operators: @IF and @DEF --------------------------------------------------------------


def macro_if(evaluator: MacroEvaluator, node: exp.Expr, args: list[exp.Expr]) -> Value:
    """``@IF(condition, then[, else])``: only the chosen branch is expanded; no else gives nothing."""
    if len(args) not in (2, 3):
        raise MacroError(
            f"@IF takes a condition and one or two values, {len(args)} argument(s) given",
            node,
            hint="write @IF(condition, value_if_true[, value_if_false])",
        )
    condition = evaluator.expand(args[0])
    if isinstance(condition, list):
        condition = condition[0] if condition else exp.false()
    if runs_per_window(condition):
        branches = [_branch(evaluator, arg) for arg in args[1:]]
        return runtime_if(condition, branches[0], branches[1] if len(branches) == 2 else [])
    chosen = args[1] if evaluate_constant(evaluator, condition) else (args[2] if len(args) == 3 else None)
    return None if chosen is None else evaluator.expand(chosen)


def _branch(evaluator: MacroEvaluator, arg: exp.Expr) -> list[exp.Expr]:
    value = evaluator.expand(arg)
    return [evaluator.to_expression(v, arg) for v in (value if isinstance(value, list) else [value]) if v is not None]


def macro_def(evaluator: MacroEvaluator, node: exp.Expr, args: list[exp.Expr]) -> Value:
    """``@DEF(name, value)``: binds ``@name`` for the statements after it (a lambda defines a macro)."""
    if len(args) != 2 or not isinstance(args[0], (exp.Column, exp.Identifier, exp.Literal, exp.Parameter)):
        raise MacroError("@DEF takes a name and a value", node, hint="write @DEF(name, value); before the query")
    value = args[1] if isinstance(args[1], exp.Lambda) else evaluator.expand(args[1])
    evaluator.locals[args[0].name.lower()] = value
    return None


LAZY_OPERATORS: dict[str, Callable[[MacroEvaluator, exp.Expr, list[exp.Expr]], Value]] = {
    "if": macro_if,
    "def": macro_def,
}


# --- list operators ----------------------------------------------------------------------------


def macro_each(evaluator: MacroEvaluator, items: Any, function: Any) -> list[Any]:
    """``@EACH(items, x -> ...)``: the function applied to every item."""
    fn = _lambda(function, "EACH")
    return [evaluator.apply(fn, [item]) for item in _items(items)]


def macro_filter(evaluator: MacroEvaluator, items: Any, function: Any) -> list[Any]:
    """``@FILTER(items, x -> condition)``: the items for which the condition holds."""
    fn = _lambda(function, "FILTER")
    return [item for item in _items(items) if evaluate_constant(evaluator, evaluator.apply(fn, [item]))]


def macro_reduce(evaluator: MacroEvaluator, items: Any, function: Any) -> Value:
    """``@REDUCE(items, (acc, x) -> ...)``: the items folded left to right."""
    fn = _lambda(function, "REDUCE")
    values = _items(items)
    if not values:
        return None
    acc = values[0]
    for item in values[1:]:
        acc = evaluator.apply(fn, [acc, item])
    return acc


# --- scalar operators --------------------------------------------------------------------------


def macro_eval(evaluator: MacroEvaluator, value: Any) -> exp.Expr:
    """``@EVAL(expr)``: a constant expression computed while loading (``@EVAL(5 + 1)`` -> 6), or per run
    when it reads the run window."""
    if runs_per_window(value):
        return runtime_eval(value)
    return _constant(evaluator, value)


def macro_sql(evaluator: MacroEvaluator, text: Any, into: Any = None) -> Value:
    """``@SQL('...')``: the text parsed as SQL (its own macros expanded)."""
    sql = text.name if isinstance(text, exp.Literal) else evaluator._text(text)
    try:
        tree = restore_macros(sqlglot.parse_one(protect_macros(sql), read=evaluator.dialect))
    except (ParseError, TokenError) as exc:
        raise MacroError(
            f"@SQL got text that is not SQL: {sql!r} ({exc})", text if isinstance(text, exp.Expression) else None
        ) from None
    return evaluator.expand(tree)


def _logical(evaluator: MacroEvaluator, args: tuple[Any, ...], join: Callable[..., exp.Expr]) -> Value:
    kept = [a for a in args if not isinstance(a, exp.Null) and a is not None]
    return join(*kept) if kept else None


def macro_and(evaluator: MacroEvaluator, *args: Any) -> Value:
    """``@AND(a, b, ...)``: the operands joined by AND, NULLs left out."""
    return _logical(evaluator, args, exp.and_)


def macro_or(evaluator: MacroEvaluator, *args: Any) -> Value:
    """``@OR(a, b, ...)``: the operands joined by OR, NULLs left out."""
    return _logical(evaluator, args, exp.or_)


def _safe(args: tuple[Any, ...], op: type[exp.Binary]) -> exp.Expr:
    all_null = exp.and_(*(exp.Is(this=a.copy(), expression=exp.null()) for a in args))
    total: exp.Expr = exp.func("COALESCE", args[0].copy(), exp.Literal.number(0))
    for a in args[1:]:
        total = op(this=total, expression=exp.func("COALESCE", a.copy(), exp.Literal.number(0)))
    return exp.Case(ifs=[exp.If(this=all_null, true=exp.null())], default=total)


def safe_add(evaluator: MacroEvaluator, *args: Any) -> exp.Expr:
    """``@SAFE_ADD(a, b, ...)``: NULLs count as 0; NULL when every operand is NULL."""
    return _safe(args, exp.Add)


def safe_sub(evaluator: MacroEvaluator, *args: Any) -> exp.Expr:
    """``@SAFE_SUB(a, b, ...)``: NULLs count as 0; NULL when every operand is NULL."""
    return _safe(args, exp.Sub)


def safe_div(evaluator: MacroEvaluator, numerator: Any, denominator: Any) -> exp.Expr:
    """``@SAFE_DIV(a, b)``: ``a / NULLIF(b, 0)``."""
    return exp.Div(this=numerator, expression=exp.func("NULLIF", denominator, exp.Literal.number(0)))


def generate_surrogate_key(evaluator: MacroEvaluator, *fields: Any, hash_function: Any = None) -> exp.Expr:
    """``@GENERATE_SURROGATE_KEY(a, b, ...[, hash_function := 'MD5'])``: the hex digest of the fields as text,
    '|'-separated, NULLs marked; SHA256/SHA512 (and SHA224/SHA384) are Spark's ``SHA2(x, bits)``."""
    parts: list[exp.Expr] = []
    for i, field in enumerate(fields):
        if i:
            parts.append(exp.Literal.string("|"))
        text = exp.cast(field, exp.DataType.build("TEXT"))
        parts.append(exp.func("COALESCE", text, exp.Literal.string("_sqlmesh_surrogate_key_null_")))
    name = str(hash_function.name if isinstance(hash_function, exp.Expression) else (hash_function or "MD5"))
    return hash_call(evaluator, name, exp.func("CONCAT", *parts))


SHA2_BITS = {"SHA2": 256, "SHA224": 224, "SHA256": 256, "SHA384": 384, "SHA512": 512}


def hash_call(evaluator: MacroEvaluator, name: str, text: exp.Expr) -> exp.Expr:
    """A hash function of ``text`` giving a hex string on Spark: MD5, SHA-1, SHA-2 by width, else ``name(text)``.

    >>> hash_call(None, "sha256", exp.column("x")).sql("spark"), hash_call(None, "MD5", exp.column("x")).sql("spark")
    ('SHA2(x, 256)', 'MD5(x)')
    """
    upper = name.upper()
    if upper in SHA2_BITS:
        return exp.SHA2(this=text, length=exp.Literal.number(SHA2_BITS[upper]))
    if upper in ("MD5", "MD5_DIGEST"):
        return exp.MD5(this=text)
    if upper in ("SHA", "SHA1"):
        return exp.SHA(this=text)
    return exp.func(name, text, dialect=evaluator.dialect if evaluator is not None else None)


def haversine_distance(
    evaluator: MacroEvaluator, lat1: Any, lon1: Any, lat2: Any, lon2: Any, unit: Any = None
) -> exp.Expr:
    """``@HAVERSINE_DISTANCE(lat1, lon1, lat2, lon2[, 'mi' | 'km'])``: great-circle distance (earth: 7922 mi across)."""
    unit_name = unit.name.lower() if isinstance(unit, exp.Expression) else str(unit or "mi").lower()
    factors = {"mi": "1.0", "km": "1.60934"}
    if unit_name not in factors:
        raise MacroError(
            f"@HAVERSINE_DISTANCE has no unit '{unit_name}'",
            unit if isinstance(unit, exp.Expression) else None,
            hint="use 'mi' or 'km'",
        )
    template = (
        "7922 * ASIN(SQRT((POWER(SIN(RADIANS((__lat2 - __lat1) / 2)), 2)) + "
        "(COS(RADIANS(__lat1)) * COS(RADIANS(__lat2)) * POWER(SIN(RADIANS((__lon2 - __lon1) / 2)), 2)))) * "
        + factors[unit_name]
    )
    values = {"__lat1": lat1, "__lon1": lon1, "__lat2": lat2, "__lon2": lon2}
    tree = sqlglot.parse_one(template)
    return tree.transform(lambda n: values[n.name].copy() if isinstance(n, exp.Column) and n.name in values else n)


def _flag(value: Any, default: bool) -> bool:
    if value is None:
        return default
    if isinstance(value, exp.Boolean):
        return bool(value.this)
    if isinstance(value, exp.Expression):
        return value.name.lower() in ("true", "1")
    return bool(value)


def _word(value: Any, default: str = "") -> str:
    if value is None:
        return default
    return value.name if isinstance(value, exp.Expression) else str(value)


def pivot(
    evaluator: MacroEvaluator,
    column: Any,
    values: Any,
    alias: Any = None,
    agg: Any = None,
    cmp: Any = None,
    prefix: Any = None,
    suffix: Any = None,
    then_value: Any = None,
    else_value: Any = None,
    quote: Any = None,
    distinct: Any = None,
) -> list[exp.Expr]:
    """``@PIVOT(column, [values], ...)``: one ``AGG(CASE WHEN column = value THEN 1 ELSE 0 END)`` per value."""
    out: list[exp.Expr] = []
    operator = _word(cmp, "=")
    for value in _items(values):
        test = sqlglot.parse_one(f"__c {operator} __v").transform(
            lambda n, v=value: (
                column.copy()
                if isinstance(n, exp.Column) and n.name == "__c"
                else (v.copy() if isinstance(n, exp.Column) and n.name == "__v" else n)
            )
        )
        case = exp.Case(
            ifs=[exp.If(this=test, true=then_value.copy() if then_value is not None else exp.Literal.number(1))]
        )
        case.set("default", else_value.copy() if else_value is not None else exp.Literal.number(0))
        inner: exp.Expr = exp.Distinct(expressions=[case]) if _flag(distinct, False) else case
        projection: exp.Expr = exp.func(_word(agg, "SUM"), inner, dialect=evaluator.dialect)
        if _flag(alias, True):
            name = f"{_word(prefix)}{evaluator._text(value)}{_word(suffix)}"
            projection = exp.alias_(projection, exp.to_identifier(name, quoted=_flag(quote, True)))
        out.append(projection)
    return out


def star(
    evaluator: MacroEvaluator,
    relation: Any,
    alias: Any = None,
    exclude: Any = None,
    prefix: Any = None,
    suffix: Any = None,
    quote_identifiers: Any = None,
    except_: Any = None,
) -> list[exp.Expr]:
    """``@STAR(relation[, alias, [excluded], prefix, suffix])``: every column, cast to its type; not cast at
    all when the type of one of them is unknown (as SQLMesh)."""
    skipped = {_word(e).lower() for e in _items(exclude if exclude is not None else except_)}
    columns = {
        n: t for n, t in evaluator.columns_to_types(_relation_name(relation)).items() if n.lower() not in skipped
    }
    table = _word(alias) if alias is not None and _word(alias) else None
    quoted = _flag(quote_identifiers, True)
    cast = all(_known(dtype) for dtype in columns.values())
    out = []
    for name, dtype in columns.items():
        column = exp.column(
            exp.to_identifier(name, quoted=quoted), table=exp.to_identifier(table, quoted=quoted) if table else None
        )
        value = exp.cast(column, dtype) if cast else column
        out.append(exp.alias_(value, exp.to_identifier(f"{_word(prefix)}{name}{_word(suffix)}", quoted=quoted)))
    return out


def _known(dtype: exp.DataType) -> bool:
    return not dtype.is_type(exp.DataType.Type.UNKNOWN)


def _relation_name(relation: Any) -> str:
    if isinstance(relation, exp.Table):
        return ".".join(p for p in (relation.db, relation.name) if p)
    if isinstance(relation, exp.Column):
        return ".".join(p for p in (relation.table, relation.name) if p)
    return _word(relation)


def union(evaluator: MacroEvaluator, kind: Any, *tables: Any) -> exp.Expr:
    """``@UNION('all' | 'distinct', t1, t2, ...)``: the columns all tables share (same name and type), each
    cast to its type (a column of unknown type as it is)."""
    how = _word(kind).lower()
    if how not in ("all", "distinct"):
        raise MacroError(
            f"@UNION's first argument is 'all' or 'distinct', not {how!r}",
            kind if isinstance(kind, exp.Expression) else None,
        )
    schemas = [(t, evaluator.columns_to_types(_relation_name(t))) for t in tables]
    first = schemas[0][1]
    shared = [c for c, dtype in first.items() if all(s.get(c) == dtype for _, s in schemas[1:])]
    selects = [
        exp.select(
            *(exp.alias_(exp.cast(exp.column(c), first[c]) if _known(first[c]) else exp.column(c), c) for c in shared)
        ).from_(t.copy() if isinstance(t, exp.Table) else _relation_name(t))
        for t, _ in schemas
    ]
    query: exp.Expr = selects[0]
    for select in selects[1:]:
        query = exp.union(query, select, distinct=how == "distinct")
    return query


def macro_var(evaluator: MacroEvaluator, name: Any, default: Any = None) -> Value:
    """``@VAR('name'[, default])``: a project variable."""
    value = evaluator.var(_word(name), None)
    return default if value is None else (value if isinstance(value, exp.Expression) else exp.convert(value))


OPERATORS: dict[str, Callable[..., Value]] = {
    "each": macro_each,
    "filter": macro_filter,
    "reduce": macro_reduce,
    "eval": macro_eval,
    "sql": macro_sql,
    "and": macro_and,
    "or": macro_or,
    "safe_add": safe_add,
    "safe_sub": safe_sub,
    "safe_div": safe_div,
    "generate_surrogate_key": generate_surrogate_key,
    "haversine_distance": haversine_distance,
    "pivot": pivot,
    "star": star,
    "union": union,
    "var": macro_var,
}


# --- Python macros -----------------------------------------------------------------------------


def call_python_macro(
    evaluator: MacroEvaluator,
    name: str,
    function: Callable[..., Any],
    args: list[Any],
    kwargs: dict[str, Any],
    node: exp.Expr | None,
) -> Value:
    """Call a user's ``@macro()`` function, its arguments converted as its annotations ask."""
    try:
        bound = inspect.signature(function).bind(evaluator, *args, **kwargs)
    except TypeError as exc:
        raise MacroError(
            f"wrong arguments for @{name.upper()}: {exc}",
            node,
            hint=f"call it as @{name.upper()}{_signature(function)}",
        ) from None
    hints = _hints(function)
    for key, value in list(bound.arguments.items())[1:]:
        if key in hints:
            bound.arguments[key] = _coerce(evaluator, value, hints[key], name, node)
    try:
        result = function(*bound.args, **bound.kwargs)
    except MacroError:
        raise
    except Exception as exc:
        error = MacroError(
            f"macro @{name.upper()} raised {type(exc).__name__}: {exc}", node, hint="correct the macro or its arguments"
        )
        error.__cause__ = exc
        raise error from exc
    return result if isinstance(result, list) else (None if result is None else evaluator.to_expression(result, node))


def _signature(function: Callable[..., Any]) -> str:
    params = list(inspect.signature(function).parameters.values())[1:]
    return "(" + ", ".join(p.name for p in params) + ")"


def _hints(function: Callable[..., Any]) -> dict[str, Any]:
    try:
        return typing.get_type_hints(function)
    except Exception:  # annotations naming what is not importable: take the arguments as expressions
        return {}


def _coerce(evaluator: MacroEvaluator, value: Any, hint: Any, name: str, node: exp.Expr | None) -> Any:
    """An argument as the annotation asks: int, float, bool, str, SQL text, list[...] or an expression type."""
    origin = typing.get_origin(hint)
    if origin in (list, tuple):
        (inner, *_rest) = typing.get_args(hint) or (Any,)
        items = [_coerce(evaluator, v, inner, name, node) for v in _items(value)]
        return items if origin is list else tuple(items)
    if origin is typing.Union:
        options = [h for h in typing.get_args(hint) if h is not type(None)]
        return _coerce(evaluator, value, options[0], name, node) if len(options) == 1 else value
    if not isinstance(value, exp.Expression) or hint is Any:
        return value
    if getattr(hint, "__name__", "") == "SQL":
        return hint(value.sql(evaluator.dialect))
    if hint in (int, float):
        return hint(evaluate_constant(evaluator, value))
    if hint is bool:
        return bool(evaluate_constant(evaluator, value))
    if hint is str:
        return (
            value.name if isinstance(value, (exp.Literal, exp.Column, exp.Identifier)) else value.sql(evaluator.dialect)
        )
    return value


def resolve_clauses(evaluator: MacroEvaluator, statement: exp.Expr) -> None:
    """Keep or drop each clause written with a clause operator (``@WHERE(condition) ...``), in place."""
    for marker in [n for n in statement.find_all(exp.Anonymous) if n.this == CLAUSE_MARK]:
        condition = evaluator.expand(marker.expressions[0]) if marker.expressions else exp.true()
        condition = condition[0] if isinstance(condition, list) else condition
        if runs_per_window(condition):  # decided per run (window_conditions)
            marker.set("expressions", [condition])
            continue
        apply_clause(marker, bool(evaluate_constant(evaluator, condition)))
