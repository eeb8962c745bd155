"""A model's body text -> its query AST (macros expanded) and pre/post statements; tables read, output columns.

SQLMesh's macro language is expanded here (:mod:`~incremental_assets.load.macros.evaluator`), so every later
stage sees plain SQL; date macros such as ``@start_ds`` stay ``exp.Parameter`` nodes that
:mod:`incremental_assets.load.macros.render` renders per run. Line numbers are kept relative to the model file.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from incremental_assets.errors import ModelFileError
from incremental_assets.load.macros.evaluator import MacroContext, MacroError, MacroEvaluator, macro_error_location
from incremental_assets.load.macros.syntax import RUNTIME_IF, protect_macros, restore_macros, table_macro, var_name
from incremental_assets.load.macros.window_conditions import (
    MAX_RUNTIME_CHOICES,
    choice_count,
    first_variant,
    runtime_variants,
)
from incremental_assets.load.spark_semantics import NoSparkEquivalent, tilde_as_full_match, with_spark_semantics
from incremental_assets.load.sql_text import parentheses, skip_space_and_comments
from incremental_assets.model.kinds import CURSOR_MACROS
from incremental_assets.model.sql_model import DATE_MACROS, TableReference

# How deep a query may nest. sqlglot, the analysis and the SQL generator recurse over the tree, about two
# Python frames per level of nested parentheses, functions or CASEs, and must still fit under Python's
# 1,000-frame limit when called deep inside a Dagster run (a few hundred frames already): measured,
# 250 levels pass every stage with 250 frames taken, 400 do not. Real queries nest a few dozen levels.
MAX_QUERY_DEPTH = 200
_TOO_DEEP_HINT = "name inner parts in CTEs (WITH x AS (...)), or write long AND/OR/UNION chains as IN lists or joins"


def _deepest_parenthesis(sql: str) -> tuple[int, int]:
    """The deepest nesting of parentheses outside strings and comments, and the (0-based) line it is on."""
    depth = deepest = deepest_at = 0
    for at, ch in parentheses(sql):
        if ch == "(":
            depth += 1
            if depth > deepest:
                deepest, deepest_at = depth, at
        elif ch == ")":
            depth -= 1
    return deepest, sql.count("\n", 0, deepest_at)


def query_depth(query: exp.Expr) -> tuple[float, exp.Expr]:
    """How deep the query's tree nests, and its deepest node (iteratively: any depth can be measured).

    A chain of one operator (``a AND b AND c``, ``UNION ALL`` of many SELECTs) is a left-deep tree that
    costs half the stack of real nesting, so each link of it counts half a level.

    >>> query_depth(sqlglot.parse_one("SELECT (((1)))"))[0]
    5.0
    >>> query_depth(sqlglot.parse_one("SELECT 1 WHERE " + " AND ".join(["a = 1"] * 10)))[0]
    10.0
    """
    deepest, deepest_node = 0.0, query
    stack: list[tuple[exp.Expr, float]] = [(query, 1.0)]
    while stack:
        node, depth = stack.pop()
        if depth > deepest:
            deepest, deepest_node = depth, node
        for child in node.iter_expressions():
            chained = type(child) is type(node) and isinstance(node, (exp.Connector, exp.SetOperation, exp.Binary))
            stack.append((child, depth + (0.5 if chained else 1.0)))
    return deepest, deepest_node


def _line_near(node: exp.Expr | None) -> int | None:
    while node is not None:
        line = node_line(node, 0)
        if line is not None:
            return line
        node = node.parent
    return None


def check_nesting(sql: str, path: str | Path, line_offset: int = 0) -> None:
    """Refuse SQL text nesting parentheses deeper than :data:`MAX_QUERY_DEPTH`, before parsing it."""
    depth, line = _deepest_parenthesis(sql)
    if depth > MAX_QUERY_DEPTH:
        raise ModelFileError(
            path,
            line + 1 + line_offset,
            f"the query nests {depth} parentheses deep; at most {MAX_QUERY_DEPTH} can be analysed",
            hint=_TOO_DEEP_HINT,
        )


def check_tree_depth(tree: exp.Expr, path: str | Path, line_offset: int = 0) -> None:
    """Refuse a parsed query nesting deeper than :data:`MAX_QUERY_DEPTH` (CASEs, operator chains)."""
    depth, deepest = query_depth(tree)
    if depth > MAX_QUERY_DEPTH:
        raise ModelFileError(
            path,
            (_line_near(deepest) or 1) + line_offset,
            f"the query nests {depth:.0f} levels deep; at most {MAX_QUERY_DEPTH} can be analysed",
            hint=_TOO_DEEP_HINT,
        )


@dataclass(frozen=True)
class ModelBody:
    """A model file's statements after its header: the query, and what runs before and after it."""

    query: exp.Query
    pre_statements: tuple[exp.Expr, ...] = ()
    post_statements: tuple[exp.Expr, ...] = ()


def _readable(sql: str, dialect: str) -> str:
    """The text sqlglot parses: macros protected, DuckDB's regular-expression operators spelled out."""
    protected = protect_macros(sql)
    return tilde_as_full_match(protected) if dialect == "duckdb" else protected


def _parse_statements(sql: str, dialect: str, path: str | Path, line_offset: int) -> list[exp.Expr]:
    quiet = logging.getLogger("sqlglot")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # statements sqlglot keeps as raw commands (SET TIME ZONE ...) are fine here
    try:
        statements = [
            restore_macros(s, dialect) for s in sqlglot.parse(_readable(sql, dialect), read=dialect) if s is not None
        ]
    except RecursionError:  # reported where the statement begins: its deepest point is not known
        begins = sql.count("\n", 0, skip_space_and_comments(sql, 0))
        raise ModelFileError(
            path,
            line_offset + 1 + begins,
            f"the query nests too deeply to be parsed; at most {MAX_QUERY_DEPTH} levels can be analysed",
            hint=_TOO_DEEP_HINT,
        ) from None
    except ParseError as exc:
        first = exc.errors[0] if exc.errors else {}
        line = (first.get("line") or 1) + line_offset
        desc = first.get("description") or str(exc)
        if first.get("hint"):  # a macro written where its clause cannot be found
            raise ModelFileError(path, line, desc, hint=first["hint"]) from None
        raise ModelFileError(
            path, line, f"cannot parse the query ({dialect}): {desc}", hint="fix the SQL syntax"
        ) from None
    except TokenError as exc:
        raise ModelFileError(path, line_offset + 1, f"cannot read the query: {exc}") from None
    finally:
        quiet.setLevel(level)
    for statement in statements:
        for node in statement.walk():  # line numbers relative to the file
            if "line" in node.meta:
                node.meta["line"] += line_offset
    return statements


def _expand(
    statements: list[exp.Expr],
    dialect: str,
    path: str | Path,
    line_offset: int,
    macros: MacroContext | None,
    this_model: str | None,
) -> list[exp.Expr]:
    """Expand every macro; a macro's error becomes one file:line error naming the fix."""
    evaluator = MacroEvaluator(macros or MacroContext(), dialect, this_model=this_model)
    try:
        return evaluator.expand_statements(statements)
    except MacroError as exc:
        line = node_line(exc.node, 0) if exc.node is not None else None
        hint = exc.hint
        where = macro_error_location(exc.__cause__, macros.macros_dir if macros else None) if exc.__cause__ else None
        if where:
            hint = f"correct the macro at {where}, or the arguments given to it here"
        raise ModelFileError(path, line or line_offset + 1, exc.message, hint=hint) from None


def parse_statements(
    sql: str, *, dialect: str, path: str | Path, line_offset: int = 0, macros: MacroContext | None = None
) -> list[exp.Expr]:
    """SQL statements outside a model (a config's ``before_all``), parsed and their macros expanded.

    >>> statements = parse_statements("CREATE SCHEMA IF NOT EXISTS raw; SELECT @x", dialect="duckdb", path="c",
    ...                               macros=MacroContext(variables={"x": 1}))
    >>> [s.sql(dialect="spark") for s in statements][0]
    'CREATE SCHEMA IF NOT EXISTS raw'
    """
    check_nesting(sql, path, line_offset)
    return _expand(_parse_statements(sql, dialect, path, line_offset), dialect, path, line_offset, macros, None)


def parse_model_body(
    sql: str,
    *,
    dialect: str = "spark",
    path: str | Path = "<query>",
    line_offset: int = 0,
    this_model: str | None = None,
    macros: MacroContext | None = None,
) -> ModelBody:
    """Parse a model's statements, expand its macros, and split them around the one query.

    Statements before the query (``@DEF``, ``SET``, ``CACHE TABLE`` ...) are its pre-statements, those after
    it post-statements, as in SQLMesh.

    >>> body = parse_model_body("@DEF(n, 3); SET x = 1; SELECT @n AS n FROM t; ANALYZE TABLE t COMPUTE STATISTICS")
    >>> body.query.sql(), [s.sql() for s in body.pre_statements], len(body.post_statements)
    ('SELECT 3 AS n FROM t', ['SET x = 1'], 1)
    """
    check_nesting(sql, path, line_offset)
    statements = _parse_statements(sql, dialect, path, line_offset)
    for statement in statements:
        check_tree_depth(statement, path, 0)
    for statement in statements:  # the query is the statement written as one (SQLMesh): a macro statement
        if isinstance(statement, exp.Query):  # expanding to a SELECT stays a pre- or post-statement
            statement.meta["model_query"] = True
    statements = _expand(statements, dialect, path, line_offset, macros, this_model)
    at = _query_index(statements, path, line_offset)
    query = statements[at]
    assert isinstance(query, exp.Query)  # _query_index returns the position of a Query statement
    check_tree_depth(query, path, 0)
    if this_model is not None:
        _name_this_model(query, this_model)
    name_outputs(query)  # before the Spark rewrites: names come from the expressions as written
    try:  # what counts or numbers differently in Spark keeps the dialect's meaning
        with_spark_semantics(query, dialect, macros.schemas if macros is not None else None)
    except NoSparkEquivalent as exc:
        raise ModelFileError(path, node_line(exc.node, 0) or line_offset + 1, str(exc), hint=exc.hint) from None
    for param in query.find_all(exp.Parameter):
        if param.name not in DATE_MACROS | CURSOR_MACROS:
            raise ModelFileError(
                path,
                node_line(param, 0) or line_offset + 1,
                f"unknown macro @{param.name}",
                hint="use one of " + ", ".join("@" + m for m in sorted(DATE_MACROS)),
            )
    _check_runtime_choices(query, path, line_offset)
    return ModelBody(query, tuple(statements[:at]), tuple(statements[at + 1 :]))


# Generators whose several output columns one alias cannot name (Spark refuses it).
# (an older sqlglot, such as the 30.8 SQLMesh pins, has no Stack)
_MULTI_COLUMN_GENERATORS = tuple(getattr(exp, n) for n in ("Posexplode", "Inline", "Stack") if hasattr(exp, n))


def name_outputs(query: exp.Expr) -> exp.Expr:
    """Name every unaliased projection of every SELECT as SQLMesh does (sqlglot's ``qualify_outputs``):
    the name it shows (``CAST(x AS DATE)`` is ``x``, a literal its text), else ``_col_<i>`` with ``i``
    its position among all the SELECT's projections, not Spark's generated name (``(amount * 2)``). A
    plain column and a literal keep the name Spark gives them too; in place, returned. (A ``*`` counts as
    one projection: SQLMesh expands it first when it knows the columns, so an unnamed projection after a
    ``*`` may be numbered differently there.)

    >>> q = sqlglot.parse_one("SELECT a, amount * 2, CAST(d AS DATE), UPPER(s) AS u, F(x) FROM t")
    >>> name_outputs(q).sql()
    'SELECT a, amount * 2 AS _col_1, CAST(d AS DATE) AS d, UPPER(s) AS u, F(x) AS _col_4 FROM t'
    """
    for select in list(query.find_all(exp.Select)):
        for i, projection in enumerate(list(select.expressions)):
            if isinstance(projection, (exp.Alias, exp.Aliases, exp.Column, exp.QueryTransform)):
                continue
            if projection.is_star or isinstance(projection, _MULTI_COLUMN_GENERATORS):
                continue
            if isinstance(projection, exp.Anonymous) and str(projection.this).lower() == RUNTIME_IF:
                continue  # a condition on the run window: the branch chosen per run names it
            if isinstance(projection, (exp.Subquery, exp.Literal)) and projection.output_name:
                continue  # Spark names a literal by its text too
            name = projection.output_name or f"_col_{i}"
            if isinstance(projection, exp.Subquery):
                projection.set("alias", exp.TableAlias(this=exp.to_identifier(name)))
            else:
                projection.replace(exp.alias_(projection.copy(), name))
    return query


def _query_index(statements: list[exp.Expr], path: str | Path, line_offset: int) -> int:
    """Where the model's one query is among its expanded statements: the statement written as a query
    when there is one such, else the only query; a model without a query or with several is refused."""
    queries = [i for i, s in enumerate(statements) if isinstance(s, exp.Query)]
    written = [i for i in queries if statements[i].meta.get("model_query")]
    queries = written if len(written) == 1 else queries
    if not queries:
        if statements:
            raise ModelFileError(
                path,
                node_line(statements[0], 0) or line_offset + 1,
                f"a model's body must hold a query (SELECT / WITH / UNION), found only {statements[0].key.upper()}",
                hint="write one SELECT after the MODEL header",
            )
        raise ModelFileError(
            path, line_offset + 1, "the model has no query", hint="write one SELECT after the MODEL header"
        )
    if len(queries) > 1:
        raise ModelFileError(
            path,
            node_line(statements[queries[1]], 0) or line_offset + 1,
            f"the model has {len(queries)} queries; a model holds exactly one",
            hint="move the other queries into their own model files",
        )
    return queries[0]


def _check_runtime_choices(query: exp.Expr, path: str | Path, line_offset: int) -> None:
    """Conditions on the run window: few enough to analyse every combination, and none changing the columns."""
    for node in query.find_all(exp.Anonymous):
        if str(node.this).lower() == RUNTIME_IF and isinstance(node.parent, exp.Table):
            raise ModelFileError(
                path,
                node_line(node, 0) or line_offset + 1,
                "a table chosen by a condition on the run window (FROM @IF(@start_ds ..., a, b)): the "
                "tables a model reads must be known when it loads",
                hint="read both tables with UNION ALL, each filtered by the condition (WHERE @start_ds < "
                "'2024-06-01'), or make two models",
            )
    count = choice_count(query)
    if count > MAX_RUNTIME_CHOICES:
        raise ModelFileError(
            path,
            node_line(query, 0) or line_offset + 1,
            f"the query holds {count} macro conditions on the run window; at most {MAX_RUNTIME_CHOICES} "
            "can be analysed (every combination is)",
            hint="compare date macros in the SQL itself (CASE WHEN @start_ds >= '2024-02-01' THEN ... END) for "
            "the others",
        )
    if count:
        shapes = {tuple(_named_outputs(v) or ()) for v in runtime_variants(query)}
        if len(shapes) > 1:
            raise ModelFileError(
                path,
                node_line(query, 0) or line_offset + 1,
                "the query's columns depend on the run window ("
                + " / ".join(", ".join(s) for s in sorted(shapes))
                + "): a table keeps one set of columns",
                hint="give every branch of @IF the same columns, e.g. @IF(cond, a, NULL) AS x",
            )


def _name_this_model(query: exp.Expr, this_model: str) -> None:
    """`FROM @this_model` reads the model's own table: name it, so analysis sees the self-reference."""
    for table in list(query.find_all(exp.Table)):
        held = table_macro(table)
        if held is not None and var_name(held) == "this_model":
            own = exp.to_table(this_model)
            own.set("alias", table.args.get("alias") or exp.TableAlias(this=exp.to_identifier(own.name)))
            for part in own.parts:  # where the macro was written, not where the name's own parse put it
                part.meta.clear()
                part.meta.update(table.this.meta)
            table.replace(own)


def parse_query(
    sql: str,
    *,
    dialect: str = "spark",
    path: str | Path = "<query>",
    line_offset: int = 0,
    this_model: str | None = None,
    macros: MacroContext | None = None,
) -> exp.Query:
    """Parse exactly one query, macros expanded; date macros become ``exp.Parameter`` nodes.

    >>> q = parse_query("SELECT a FROM t WHERE ds BETWEEN @start_ds AND @end_ds")
    >>> sorted(p.name for p in q.find_all(exp.Parameter))
    ['end_ds', 'start_ds']
    """
    body = parse_model_body(
        sql, dialect=dialect, path=path, line_offset=line_offset, this_model=this_model, macros=macros
    )
    extra = body.pre_statements + body.post_statements
    if extra:
        raise ModelFileError(
            path,
            node_line(extra[0], 0) or line_offset + 1,
            f"the model has {len(extra) + 1} statements; only one query is expected here",
            hint="keep only the query",
        )
    return body.query


def node_line(node: exp.Expr | None, offset: int) -> int | None:
    if node is None:
        return None
    for sub in node.walk():
        line = sub.meta.get("line")
        if line is not None:
            return line + offset
    return None


def table_references(query: exp.Expr) -> tuple[TableReference, ...]:
    """Tables the query reads (CTE names excluded), lower-cased ``schema.table`` names, in order."""
    cte_names = {cte.alias_or_name.lower() for cte in query.find_all(exp.CTE)}
    refs: list[TableReference] = []
    for table in query.find_all(exp.Table):
        if not table.name:
            continue
        name = table_name(table)
        if not table.db and name in cte_names:
            continue
        refs.append(TableReference(name, table.this.meta.get("line") if table.this else None))
    return tuple(refs)


def table_name(table: exp.Table) -> str:
    parts = [p for p in (table.catalog, table.db, table.name) if p]
    return ".".join(parts).lower()


def output_columns(query: exp.Query) -> list[str] | None:
    """Names of the columns the query outputs, or None when a ``*`` hides them (the same for every run
    window: a query whose columns depend on it is refused when it loads)."""
    return _named_outputs(first_variant(query))


def _named_outputs(query: exp.Expr) -> list[str] | None:
    select = query
    while isinstance(select, exp.SetOperation):
        select = select.left
    if isinstance(select, exp.Subquery):
        select = select.this
    if not isinstance(select, exp.Selectable):  # what a query or its branch always is
        return None
    names: list[str] = []
    for projection in select.selects:
        if isinstance(projection, exp.Star) or (
            isinstance(projection, exp.Column) and isinstance(projection.this, exp.Star)
        ):
            return None
        names.append(projection.alias_or_name.lower())
    return names
