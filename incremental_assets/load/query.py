"""Query text -> one sqlglot AST: macros protected while parsing, tables read, output columns.

SQLMesh macros such as ``@start_ds`` become ``exp.Parameter`` nodes that :mod:`incremental_assets.plan.macros`
renders later; line numbers are kept relative to the model file.
"""

from __future__ import annotations

import re
from pathlib import Path

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from incremental_assets.errors import ModelFileError
from incremental_assets.model.kinds import CURSOR_MACROS
from incremental_assets.model.sql_model import DATE_MACROS, TableReference

_MACRO = re.compile(r"@([A-Za-z_][A-Za-z0-9_]*)")

_PLACEHOLDER = "__ia_macro__"

def _protect_macros(sql: str) -> str:
    """Turn ``@name`` outside strings and comments into an identifier every dialect can parse."""
    out: list[str] = []
    i, n = 0, len(sql)
    while i < n:
        ch = sql[i]
        if ch in "'\"`":
            j = i + 1
            while j < n and sql[j] != ch:
                j += 2 if sql[j] == "\\" else 1
            out.append(sql[i : j + 1])
            i = j + 1
        elif sql.startswith("--", i):
            j = sql.find("\n", i)
            j = n if j < 0 else j
            out.append(sql[i:j])
            i = j
        elif sql.startswith("/*", i):
            j = sql.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(sql[i:j])
            i = j
        elif ch == "@" and (m := _MACRO.match(sql, i)):
            out.append(_PLACEHOLDER + m.group(1))
            i = m.end()
        else:
            out.append(ch)
            i += 1
    return "".join(out)

def _restore_macros(node: exp.Expression) -> exp.Expression:
    if isinstance(node, exp.Column) and not node.table and node.name.startswith(_PLACEHOLDER):
        param = exp.Parameter(this=exp.var(node.name[len(_PLACEHOLDER) :].lower()))
        param.meta.update(node.this.meta)
        return param
    if isinstance(node, (exp.Anonymous,)) and str(node.this).startswith(_PLACEHOLDER):
        return exp.Parameter(this=exp.var(str(node.this)[len(_PLACEHOLDER) :].lower()), expressions=node.expressions)
    return node

def parse_query(
    sql: str, *, dialect: str = "spark", path: str | Path = "<query>", line_offset: int = 0, this_model: str | None = None
) -> exp.Query:
    """Parse exactly one query; macros become ``exp.Parameter`` nodes.

    >>> q = parse_query("SELECT a FROM t WHERE ds BETWEEN @start_ds AND @end_ds")
    >>> sorted(p.name for p in q.find_all(exp.Parameter))
    ['end_ds', 'start_ds']
    """
    try:
        statements = [s for s in sqlglot.parse(_protect_macros(sql), read=dialect) if s is not None]
    except ParseError as exc:
        first = exc.errors[0] if exc.errors else {}
        line = (first.get("line") or 1) + line_offset
        desc = first.get("description") or str(exc)
        raise ModelFileError(path, line, f"cannot parse the query ({dialect}): {desc}", hint="fix the SQL syntax") from None
    except TokenError as exc:
        raise ModelFileError(path, line_offset + 1, f"cannot read the query: {exc}") from None
    if not statements:
        raise ModelFileError(path, line_offset + 1, "the model has no query", hint="write one SELECT after the MODEL header")
    if len(statements) > 1:
        raise ModelFileError(
            path,
            node_line(statements[1], line_offset) or line_offset + 1,
            f"the model has {len(statements)} statements; a model holds exactly one query",
            hint="move the other statements into their own model files",
        )
    query = statements[0]
    if not isinstance(query, exp.Query):
        raise ModelFileError(
            path, line_offset + 1, f"a model's body must be a query (SELECT / WITH / UNION), found {query.key.upper()}"
        )
    query = query.transform(_restore_macros, copy=False)
    if this_model is not None:
        # `FROM @this_model` reads the model's own table: name it, so analysis sees the self-reference.
        for table in list(query.find_all(exp.Table)):
            if table.name == _PLACEHOLDER + "this_model" and not table.db:
                own = exp.to_table(this_model)
                own.set("alias", table.args.get("alias") or exp.TableAlias(this=exp.to_identifier(own.name)))
                own.this.meta.update(table.this.meta)
                table.replace(own)
    # Carry line numbers relative to the file.
    for node in query.walk():
        if "line" in node.meta:
            node.meta["line"] += line_offset
    for param in query.find_all(exp.Parameter):
        if param.name not in DATE_MACROS | CURSOR_MACROS:
            raise ModelFileError(
                path,
                node_line(param, 0) or line_offset + 1,
                f"unknown macro @{param.name}",
                hint="use one of " + ", ".join("@" + m for m in sorted(DATE_MACROS)),
            )
    return query  # type: ignore[return-value]

def node_line(node: exp.Expression, offset: int) -> int | None:
    for sub in node.walk():
        line = sub.meta.get("line")
        if line is not None:
            return line + offset
    return None

def table_references(query: exp.Expression) -> tuple[TableReference, ...]:
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
    """Names of the columns the query outputs, or None when a ``*`` hides them."""
    select = query
    while isinstance(select, exp.SetOperation):
        select = select.left  # type: ignore[assignment]
    if isinstance(select, exp.Subquery):
        select = select.this
    names: list[str] = []
    for projection in select.selects:
        if isinstance(projection, exp.Star) or (isinstance(projection, exp.Column) and isinstance(projection.this, exp.Star)):
            return None
        names.append(projection.alias_or_name.lower())
    return names
