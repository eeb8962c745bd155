"""Expand SQLMesh macros on the sqlglot AST: variables, ``@DEF``, operators, lambdas, Python macros.

The expansion happens once, when a model is loaded, so the safety analysis, lookback and pushdown see
the query a macro builds exactly as if it had been written out. Date macros (``@start_ds`` ...) stay
``exp.Parameter`` nodes, rendered per run window by :mod:`incremental_assets.load.macros.render`.

>>> from incremental_assets.load.macros.syntax import protect_macros, restore_macros
>>> import sqlglot
>>> def expand(sql):
...     ev = MacroEvaluator(MacroContext(), "spark")
...     return [s.sql("spark") for s in ev.expand_statements(
...         [restore_macros(t) for t in sqlglot.parse(protect_macros(sql), read="spark")])]
>>> expand("@DEF(n, 2); SELECT @EACH([a, b], c -> c * @n AS @{c}_x) FROM t WHERE ds >= @start_ds")
['SELECT a * 2 AS a_x, b * 2 AS b_x FROM t WHERE ds >= ${start_ds}']
>>> expand("SELECT @IF(1 > 2, x, y), @EVAL(5 + 1) AS six, @REDUCE([p, q], (l, r) -> l AND r) AS b")
['SELECT y, 6 AS six, p AND q AS b']
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from incremental_assets.load.macros.operators import (
    LAZY_OPERATORS,
    MacroError,
    Value,
    call_python_macro,
    evaluate_constant,
    resolve_clauses,
)
from incremental_assets.load.macros.operators import OPERATORS as _SQL_OPERATORS
from incremental_assets.load.macros.relation_macros import RELATION_MACROS
from incremental_assets.load.macros.syntax import (
    CLAUSE_MARK,
    call_name,
    interpolated_names,
    protect_macros,
    restore_macros,
    splice,
    table_macro,
    var_name,
)
from incremental_assets.model.kinds import CURSOR_MACROS
from incremental_assets.model.sql_model import DATE_MACROS

# Every built-in macro by its lower-case name.
OPERATORS: Mapping[str, Callable[..., Value]] = {**_SQL_OPERATORS, **RELATION_MACROS}

# Rendered per run (render.py), so expansion leaves them in place.
RUNTIME_MACROS = frozenset(DATE_MACROS | CURSOR_MACROS)


@dataclass(frozen=True)
class MacroContext:
    """What every model of a project shares: its Python macros, variables and known table schemas."""

    macros: Mapping[str, Callable[..., Any]] = field(default_factory=dict)
    variables: Mapping[str, Any] = field(default_factory=dict)
    schemas: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    macros_dir: Path | None = None


class MacroLocals(dict):
    """``evaluator.locals``: names are case-insensitive and may be given as expressions (``'my_var'``)."""

    @staticmethod
    def _key(key: Any) -> Any:
        if isinstance(key, exp.Expression):
            key = key.name
        return key.lower() if isinstance(key, str) else key

    def __getitem__(self, key: Any) -> Any:
        return super().__getitem__(self._key(key))

    def __setitem__(self, key: Any, value: Any) -> None:
        super().__setitem__(self._key(key), value)

    def __contains__(self, key: object) -> bool:
        return super().__contains__(self._key(key))

    def get(self, key: Any, default: Any = None) -> Any:
        return super().get(self._key(key), default)

    def pop(self, key: Any, *default: Any) -> Any:
        return super().pop(self._key(key), *default)


class MacroEvaluator:
    """The ``evaluator`` a Python macro receives; it also expands a model's statements.

    ``keep`` names the variables left in place as ``exp.Parameter`` for a later stage (date and cursor
    macros, ``@this_model``); ``locals`` holds them as such, so a Python macro can pass them on.
    """

    def __init__(
        self,
        context: MacroContext,
        dialect: str,
        *,
        keep: frozenset[str] = RUNTIME_MACROS,
        runtime_stage: str = "evaluating",
        this_model: str | None = None,
    ):
        self.context = context
        self.dialect = dialect
        self.runtime_stage = runtime_stage
        self.this_model = this_model
        self.keep = keep
        self.locals: dict[str, Any] = MacroLocals({name: exp.Parameter(this=exp.var(name)) for name in keep})
        self.locals["runtime_stage"] = exp.Literal.string(runtime_stage)

    # --- the API Python macros use -------------------------------------------------------------

    def var(self, name: str, default: Any = None) -> Any:
        """A project variable (``variables:`` in config.yaml), or ``default``."""
        return self.context.variables.get(name.lower(), default)

    def columns_to_types(self, name: str | exp.Expr) -> dict[str, exp.DataType]:
        """The columns and types of a table whose columns are known: declared (sources.yaml ``columns``, a model's
        ``columns``) or those a model's query makes (``UNKNOWN`` the type of one sqlglot cannot derive)."""
        key = (name if isinstance(name, str) else name.sql()).replace('"', "").replace("`", "").lower()
        schema = self.context.schemas.get(key)
        if not schema:
            raise MacroError(
                f"the columns of {key} are not known",
                hint=f"declare them: `columns` of {key} in sources.yaml or its MODEL header",
            )
        return {col: exp.DataType.build(dtype, dialect="spark") for col, dtype in schema.items()}

    def parse_one(self, sql: str, into: Any = None, **opts: Any) -> exp.Expr:
        return sqlglot.parse_one(sql, read=opts.get("dialect") or self.dialect, into=into)

    def eval_expression(self, node: Any) -> Any:
        """A constant SQL expression's Python value (``1 + 1`` -> 2, ``'a' IN ('a')`` -> True)."""
        return evaluate_constant(self, node)

    def transform(self, node: exp.Expr) -> Value:
        """Expand every macro in ``node`` (a copy); returns an expression, a list of them, or None."""
        return self.expand(node.copy())

    def send(self, name: str, *args: Any, **kwargs: Any) -> Value:
        """Call a macro by name with already expanded arguments."""
        return self._invoke(name.lower(), list(args), kwargs, None)

    # --- expansion -----------------------------------------------------------------------------

    def needs_expansion(self, statements: list[exp.Expr]) -> bool:
        """Whether any statement holds a macro beyond those kept for later (date macros)."""
        for statement in statements:
            for node in statement.walk():
                if (
                    call_name(node)
                    or table_macro(node) is not None
                    or (isinstance(node, exp.Anonymous) and node.this == CLAUSE_MARK)
                ):
                    return True
                if (var_name(node) or "") not in self.keep | {""} or (
                    isinstance(node, exp.Identifier) and interpolated_names(node.name)
                ):
                    return True
        return False

    def expand_statements(self, statements: list[exp.Expr]) -> list[exp.Expr]:
        """Expand statements in order: ``@DEF`` binds a variable for the ones after it and vanishes."""
        if not self.needs_expansion(statements):
            return statements
        out: list[exp.Expr] = []
        for statement in statements:
            if call_name(statement) == "def":
                self.expand(statement)
                continue
            resolve_clauses(self, statement)
            value = self.expand(statement)
            for item in value if isinstance(value, list) else [value]:
                if item is not None:
                    out.append(self.to_expression(item, statement))
        return out

    def expand(self, node: exp.Expr) -> Value:
        """Expand ``node`` in place and return what replaces it."""
        name = call_name(node)
        if name is not None and isinstance(node, exp.Anonymous):  # a macro call is always one
            return self._call(name, node)
        variable = var_name(node)
        if variable is not None:
            return self._variable(variable, node)
        held = table_macro(node)
        if held is not None and isinstance(node, exp.Table):  # a table macro stands in a table
            return self._table(node, held)
        if isinstance(node, exp.Identifier) and interpolated_names(node.name):
            node.set(
                "this",
                splice(node.name, {v: self._text(self._variable(v, node)) for v in interpolated_names(node.name)}),
            )
            return node
        for key, child in list(node.args.items()):
            if isinstance(child, list):
                node.set(key, self._expand_list(child))
            elif isinstance(child, exp.Expression):
                self._replace_child(node, key, child, self.expand(child))
        return node

    def _expand_list(self, children: list[Any]) -> list[Any]:
        out: list[Any] = []
        for child in children:
            if not isinstance(child, exp.Expression):
                out.append(child)
                continue
            value = self.expand(child)
            for item in value if isinstance(value, list) else [value]:
                if item is not None:
                    out.append(self.to_expression(item, child))
        return out

    def _replace_child(self, parent: exp.Expr, key: str, child: exp.Expr, value: Value) -> None:
        if value is child:
            return
        if value is None or (isinstance(value, list) and not value):
            if isinstance(parent, exp.Connector):
                other = parent.expression if key == "this" else parent.this
                parent.replace(other)
            else:
                parent.set(key, None)
            return
        if isinstance(value, list):
            if len(value) != 1:
                raise MacroError(
                    f"a macro gave {len(value)} values where one is expected",
                    child,
                    hint="use it in a list (SELECT columns, function arguments) or return one value",
                )
            value = value[0]
        parent.set(key, grouped(self.to_expression(value, child), parent, key))

    # --- variables and tables ------------------------------------------------------------------

    def _variable(self, name: str, node: exp.Expr) -> Value:
        if name in self.locals:
            value = self.locals[name]
        elif name in self.context.variables:
            value = python_value(self.context.variables[name])
        else:
            raise MacroError(
                f"unknown macro @{name}",
                node,
                hint="use one of "
                + ", ".join("@" + m for m in sorted(DATE_MACROS))
                + f", or define it with @DEF({name}, value); before the query or under variables in the project config",
            )
        if isinstance(value, exp.Expression):
            return value.copy() if not isinstance(value, exp.Lambda) else value
        if isinstance(value, list):
            return [v.copy() if isinstance(v, exp.Expression) else v for v in value]
        return value

    def _table(self, node: exp.Table, held: exp.Expr) -> Value:
        value = self.expand(held)
        if isinstance(value, list) and len(value) == 1:
            value = value[0]
        alias = node.args.get("alias")
        if isinstance(value, exp.Query):
            inside = isinstance(node.parent, exp.Subquery) and alias is None  # `FROM (@UNION(...)) AS u`
            return value if inside else exp.Subquery(this=value, alias=alias)
        if isinstance(value, exp.Parameter):  # FROM @this_model: named by the loader, rendered per run
            return node
        if isinstance(value, exp.Column):
            value = exp.Table(this=value.this, db=value.args.get("table"), catalog=value.args.get("db"))
        table = value if isinstance(value, exp.Table) else exp.to_table(self._text(value), dialect=self.dialect)
        table.meta.update(held.meta)
        if table.this is not None:
            table.this.meta.update(held.meta)
        if alias is not None:
            table.set("alias", alias)
        return table

    def _text(self, value: Value) -> str:
        """A value as it is spliced into an identifier: a string's content, a column's name, else its SQL."""
        if isinstance(value, list) and len(value) == 1:
            value = value[0]
        if isinstance(value, exp.Literal):
            return value.name
        if isinstance(value, (exp.Column, exp.Identifier, exp.Table)) and not isinstance(value, exp.Dot):
            return (
                value.sql(dialect=self.dialect).replace('"', "").replace("`", "")
                if isinstance(value, exp.Table)
                else value.name
            )
        if isinstance(value, exp.Expression):
            return value.sql(dialect=self.dialect)
        return str(value)

    # --- calls ---------------------------------------------------------------------------------

    def _call(self, name: str, node: exp.Anonymous) -> Value:
        if name in LAZY_OPERATORS:
            return LAZY_OPERATORS[name](self, node, list(node.expressions))
        args, kwargs = self._arguments(node)
        return self._invoke(name, args, kwargs, node)

    def _arguments(self, node: exp.Anonymous) -> tuple[list[Any], dict[str, Any]]:
        args: list[Any] = []
        kwargs: dict[str, Any] = {}
        for arg in node.expressions:
            if isinstance(arg, (exp.PropertyEQ, exp.Kwarg)) and isinstance(arg.this, (exp.Identifier, exp.Column)):
                kwargs[arg.this.name.lower()] = self._single(self.expand(arg.expression), arg)
            elif isinstance(arg, exp.Lambda):
                args.append(arg)
            else:
                args.append(self._single(self.expand(arg), arg))
        return args, kwargs

    def _single(self, value: Value, node: exp.Expr) -> Any:
        if isinstance(value, list):
            return exp.Array(expressions=[self.to_expression(v, node) for v in value])
        return value

    def _invoke(self, name: str, args: list[Any], kwargs: dict[str, Any], node: exp.Expr | None) -> Value:
        local = self.locals.get(name)
        if isinstance(local, exp.Lambda):
            return self.apply(local, args, node)
        if name in self.context.macros:
            return call_python_macro(self, name, self.context.macros[name], args, kwargs, node)
        if name in OPERATORS:
            try:
                return OPERATORS[name](self, *args, **kwargs)
            except MacroError as exc:
                exc.node = exc.node if exc.node is not None else node
                raise
            except TypeError as exc:
                raise MacroError(
                    f"wrong arguments for @{name.upper()}: {exc}", node, hint="see docs/macros.md for its arguments"
                ) from None
        known = sorted(set(OPERATORS) | set(self.context.macros))
        raise MacroError(
            f"unknown macro @{name.upper()}",
            node,
            hint="define it with @macro() in a .py file under macros/, or use one of "
            + ", ".join("@" + k.upper() for k in known),
        )

    def apply(self, function: exp.Lambda, values: list[Any], node: exp.Expr | None = None) -> Value:
        """Call a lambda ``(x, y) -> body`` with ``values`` bound to its arguments."""
        params = [p.name.lower() for p in function.expressions]
        if len(params) != len(values):
            raise MacroError(f"the function takes {len(params)} argument(s), {len(values)} given", node or function)
        body = function.this.copy()
        bindings = dict(zip(params, values))
        body = _bind(body, bindings, self)
        saved = {p: self.locals.get(p, _MISSING) for p in params}
        self.locals.update(bindings)
        try:
            return self.expand(body)
        finally:
            for p, old in saved.items():
                if old is _MISSING:
                    self.locals.pop(p, None)
                else:
                    self.locals[p] = old

    def to_expression(self, value: Any, where: exp.Expr | None = None) -> exp.Expr:
        """A macro's value as an AST node: strings are parsed as SQL, numbers and booleans converted."""
        if isinstance(value, exp.Expression):
            return value
        if isinstance(value, str):
            try:
                return restore_macros(sqlglot.parse_one(protect_macros(value), read=self.dialect))
            except (ParseError, TokenError) as exc:
                raise MacroError(f"a macro returned text that is not SQL: {value!r} ({exc})", where) from None
        try:
            return exp.convert(value)
        except ValueError:
            raise MacroError(
                f"a macro returned {type(value).__name__}, not SQL",
                where,
                hint="return a sqlglot expression, a string of SQL or a list of them",
            ) from None


_MISSING = object()


def python_value(value: Any) -> Any:
    """A project variable as SQL: strings as string literals (not parsed), numbers, booleans, lists as arrays."""
    return value if isinstance(value, exp.Expression) else exp.convert(value)


_PRECEDENCE: dict[type[exp.Expr], int] = {exp.Mul: 2, exp.Div: 2, exp.IntDiv: 2, exp.Mod: 2, exp.Add: 1, exp.Sub: 1}


def grouped(value: exp.Expr, parent: exp.Expr | None, key: str | None = None) -> exp.Expr:
    """``value`` in parentheses where an operator holds it, so the tree keeps its grouping as SQL text
    (``a * @x`` with ``@x`` = ``b + 1`` is ``a * (b + 1)``)."""
    if parent is None or isinstance(value, exp.Paren):
        return value
    arithmetic = isinstance(parent, exp.Binary) and not isinstance(parent, (exp.Connector, exp.Predicate))
    if isinstance(value, exp.Connector):
        needed = type(value) is not type(parent) and isinstance(parent, (exp.Binary, exp.Unary, exp.Predicate))
    elif isinstance(value, (exp.Predicate, exp.Not)):
        needed = arithmetic or isinstance(parent, (exp.Predicate, exp.Unary)) and not isinstance(parent, exp.Not)
    elif isinstance(value, exp.Binary) and arithmetic:
        mine, theirs = _PRECEDENCE.get(type(value), 0), _PRECEDENCE.get(type(parent), 0)
        needed = not mine or mine < theirs or (mine == theirs and key != "this")
    elif isinstance(value, exp.Binary):
        needed = isinstance(parent, exp.Unary)
    else:
        needed = False
    return exp.Paren(this=value) if needed else value


def _bind(body: exp.Expr, bindings: Mapping[str, Any], evaluator: MacroEvaluator) -> exp.Expr:
    """Put the lambda's argument values where its body names them (columns, identifiers, tables)."""

    def value_of(name: str, node: exp.Expr) -> exp.Expr:
        value = bindings[name]
        if isinstance(value, list):
            return exp.Array(expressions=[evaluator.to_expression(v, node) for v in value])
        return grouped(evaluator.to_expression(value, node).copy(), node.parent, node.arg_key)

    def replace(node: exp.Expr) -> exp.Expr:
        if isinstance(node, exp.Column) and not node.table and node.name.lower() in bindings:
            return value_of(node.name.lower(), node)
        if isinstance(node, exp.Table) and not node.db and node.name.lower() in bindings:
            table = exp.to_table(evaluator._text(bindings[node.name.lower()]), dialect=evaluator.dialect)
            table.set("alias", node.args.get("alias"))
            return table
        if isinstance(node, exp.Identifier) and node.arg_key == "alias" and isinstance(node.parent, exp.Alias):
            if node.name.lower() in bindings:  # `c -> SUM(c) AS c` names each column by its value
                return exp.to_identifier(evaluator._text(bindings[node.name.lower()]))
            return node
        if (
            isinstance(node, exp.Identifier)
            and node.name.lower() in bindings
            and node.arg_key != "alias"
            and not isinstance(node.parent, (exp.TableAlias, exp.Column, exp.Table, exp.Dot))
        ):
            return value_of(node.name.lower(), node)
        return node

    if isinstance(body, exp.Identifier) and body.name.lower() in bindings:
        return value_of(body.name.lower(), body)
    return body.transform(replace, copy=False)


def macro_error_location(exc: BaseException, macros_dir: Path | None) -> str | None:
    """``macros/x.py:LINE`` of the deepest frame of a Python macro's exception inside the project's macros/."""
    if macros_dir is None:
        return None
    found = None
    for frame in traceback.extract_tb(exc.__traceback__):
        try:
            if Path(frame.filename).resolve().is_relative_to(macros_dir.resolve()):
                found = f"{frame.filename}:{frame.lineno}"
        except (OSError, ValueError):
            continue
    return found
