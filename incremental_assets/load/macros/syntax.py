"""SQLMesh macro syntax in SQL text -> sqlglot nodes: ``@name``, ``@name(...)``, ``col_@x``, ``@{x}``.

Every dialect's parser must read the text, so before parsing each macro becomes an identifier no SQL
uses (``@each(`` -> ``__iam_each(``, ``col_@x`` / ``@{x}`` -> ``__iai_x_iai__`` inside the identifier);
after parsing, ``@name`` columns become ``exp.Parameter`` nodes and calls stay ``exp.Anonymous`` nodes
with a marked name; :mod:`~incremental_assets.load.macros.evaluator` expands both. Strings and comments are left alone.

>>> import sqlglot
>>> protect_macros("SELECT @EACH([a], x -> x AS col_@x) FROM @tbl WHERE y = @{v}_z")
'SELECT __iam_EACH([a], x -> __ia_alias( x , col___iai_x_iai__)) FROM __iam_tbl WHERE y = __iai_v_iai___z'
>>> tree = restore_macros(sqlglot.parse_one(protect_macros("SELECT @f(1), @v FROM t")))
>>> [(call_name(e), var_name(e)) for e in tree.selects]
[('f', None), (None, 'v')]
"""

from __future__ import annotations

import re
from typing import Any, Iterator

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError

_NAME = re.compile(r"@([A-Za-z_][A-Za-z0-9_]*)")
_BRACED = re.compile(r"@\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}")
CALL_MARK = "__iam_"
_INTERP = re.compile(r"__iai_([A-Za-z_][A-Za-z0-9_]*?)_iai__")
_WORD = re.compile(r"[A-Za-z0-9_]")
_OPENERS = frozenset("'\"`-/")  # what a string, a quoted name or a comment starts with


def _interp(name: str) -> str:
    return f"__iai_{name}_iai__"


def _skip_quoted(sql: str, i: int) -> int:
    """The index after the string, quoted identifier or comment starting at ``i`` (``i`` if none)."""
    ch = sql[i]
    if ch not in _OPENERS:  # most characters: checked first, as this runs for every character of every query
        return i
    n = len(sql)
    if ch in "'\"`":
        j = i + 1
        while j < n and sql[j] != ch:
            j += 2 if sql[j] == "\\" else 1
        return j + 1
    if sql.startswith("--", i):
        j = sql.find("\n", i)
        return n if j < 0 else j
    if sql.startswith("/*", i):
        j = sql.find("*/", i + 2)
        return n if j < 0 else j + 2
    return i


def protect_macros(sql: str) -> str:
    """Turn each macro outside strings and comments into an identifier every dialect can parse
    (and aliased macro arguments into calls, see :func:`alias_macro_arguments`)."""
    return alias_macro_arguments(clause_operators(statement_ifs(_mark_macros(sql))))


def _mark_macros(sql: str) -> str:
    out: list[str] = []
    i, n = 0, len(sql)
    while i < n:
        j = _skip_quoted(sql, i)
        if j > i:
            out.append(sql[i:j])
            i = j
            continue
        braced = _BRACED.match(sql, i) if sql[i] == "@" else None
        plain = _NAME.match(sql, i) if sql[i] == "@" and not braced else None
        if braced:
            out.append(_interp(braced.group(1)))
            i = braced.end()
        elif plain:
            glued = bool(out) and bool(out[-1]) and _WORD.match(out[-1][-1]) is not None
            out.append(_interp(plain.group(1)) if glued else CALL_MARK + plain.group(1))
            i = plain.end()
        else:
            out.append(sql[i])
            i += 1
    return "".join(out)


def interpolated_names(text: str) -> list[str]:
    """The macro variables spliced into an identifier's text (``col_@x``, ``@{x}_col``)."""
    return [m.lower() for m in _INTERP.findall(text)]


def splice(text: str, values: dict[str, str]) -> str:
    """The identifier text with each spliced variable replaced by its value's text."""
    return _INTERP.sub(lambda m: values[m.group(1).lower()], text)


def _marked(name: str) -> str | None:
    return name[len(CALL_MARK) :] if name.startswith(CALL_MARK) else None


def call_name(node: exp.Expr) -> str | None:
    """The lower-cased macro name of ``@name(...)`` (an ``exp.Anonymous`` with a marked name), else None."""
    if isinstance(node, exp.Anonymous) and isinstance(node.this, str):
        name = _marked(node.this)
        return name.lower() if name else None
    return None


def var_name(node: exp.Expr) -> str | None:
    """The lower-cased name of a macro variable ``@name`` (an ``exp.Parameter``), else None."""
    return node.name.lower() if isinstance(node, exp.Parameter) else None


def table_macro(node: exp.Expr) -> exp.Expr | None:
    """The macro standing in a table position (``FROM @name``, ``FROM @name(...)``), else None."""
    if not isinstance(node, exp.Table) or node.db:
        return None
    inner = node.this
    if isinstance(inner, exp.Identifier) and (name := _marked(inner.name)):
        return _with_meta(exp.Parameter(this=exp.var(name.lower())), inner)
    return inner if call_name(inner) else None


def _alias_name(name: str) -> exp.Identifier:
    """The alias ``name``; ``AS @x`` names the column by the value of ``x``, as ``AS @{x}`` does."""
    macro = _marked(name)
    return exp.to_identifier(_interp(macro.lower()) if macro else name)


def _restore(node: exp.Expr) -> exp.Expr:
    if isinstance(node, exp.Anonymous) and node.this == ALIAS_MARK and len(node.expressions) == 2:
        expression, alias = node.expressions
        return exp.Alias(this=restore_macros(expression), alias=_alias_name(alias.name))
    if isinstance(node, exp.Alias) and isinstance(node.args.get("alias"), exp.Identifier) and _marked(node.alias):
        node.set("alias", _alias_name(node.alias))
    if isinstance(node, exp.Column) and not node.table and (name := _marked(node.name)):
        return _with_meta(exp.Parameter(this=exp.var(name.lower())), node.this)
    return node


def _with_meta(new: exp.Expr, old: exp.Expr) -> exp.Expr:
    new.meta.update(old.meta)
    if "line" not in new.meta:
        line = next((n.meta["line"] for n in old.walk() if "line" in n.meta), None)
        if line is not None:
            new.meta["line"] = line
    return new


def restore_macros(tree: exp.Expr, dialect: str | None = None) -> exp.Expr:
    """Turn the protected ``@name`` columns of :func:`protect_macros` into ``exp.Parameter`` nodes;
    calls stay ``exp.Anonymous`` nodes with a marked name (see :func:`call_name`)."""
    tree = tree.transform(_restore, copy=False)
    for node in list(tree.find_all(exp.Anonymous)):
        if node.this == STATEMENT_MARK and node.expressions and isinstance(node.expressions[0], exp.Literal):
            text = bytes.fromhex(node.expressions[0].name).decode()
            statement = restore_macros(sqlglot.parse_one(text, read=dialect), dialect)
            for inner in statement.walk():
                inner.meta.pop("line", None)
            statement.meta.update(node.meta)
            node.replace(statement)
    return tree


def has_macros(tree: exp.Expr) -> bool:
    return any(call_name(n) or isinstance(n, exp.Parameter) or table_macro(n) is not None for n in tree.walk())


# --- `expr AS alias` inside macro arguments ---------------------------------------------------------
# SQL parsers accept an alias only in a projection, but SQLMesh lets a macro argument carry one
# (`@EACH(xs, x -> x + 1 AS y)`): such arguments are rewritten to `__ia_alias(expr, y)` before parsing.

ALIAS_MARK = "__ia_alias"
_AS = re.compile(r"(?i)(?<![A-Za-z0-9_])AS(?![A-Za-z0-9_])")
_ARROW = "->"


def _code_positions(sql: str, start: int = 0) -> Iterator[int]:
    """The positions of ``sql`` from ``start`` that are code: outside strings, quoted names and comments."""
    i = start
    while i < len(sql):
        j = _skip_quoted(sql, i)
        if j > i:
            i = j
            continue
        yield i
        i += 1


def _groups(sql: str) -> list[Any]:
    """The text as nested lists: strings for flat text, a list per bracketed group."""
    root: list[Any] = []
    stack, start = [root], 0
    for i in _code_positions(sql):
        if sql[i] in "([":
            child: list[Any] = []
            stack[-1].extend([sql[start : i + 1], child])
            stack.append(child)
            start = i + 1
        elif sql[i] in ")]" and len(stack) > 1:
            stack[-1].append(sql[start:i])
            stack.pop()
            start = i
    stack[-1].append(sql[start:])
    return root


_OPENS_CALL = re.compile(CALL_MARK + r"[A-Za-z0-9_]*\($")


def _render(items: list[Any], macro: bool) -> str:
    """The text back, macro call arguments holding a top-level ``AS`` rewritten."""
    args = _split_args(items)
    return ",".join(_aliased(arg) for arg in args) if macro else ",".join(args)


def _split_args(items: list[Any]) -> list[str]:
    """The group's text split at its top-level commas (nested groups rendered first)."""
    args, current = [], ""
    for k, item in enumerate(items):
        if isinstance(item, list):
            opener = items[k - 1] if k else ""
            current += _render(item, isinstance(opener, str) and _OPENS_CALL.search(opener) is not None)
            continue
        parts = item.split(",")
        for part in parts[:-1]:
            args.append(current + part)
            current = ""
        current += parts[-1]
    args.append(current)
    return args


def _aliased(arg: str) -> str:
    masked = _mask_nested(arg)
    found = list(_AS.finditer(masked))
    if not found:
        return arg
    cut = found[-1]
    arrow = masked.rfind(_ARROW, 0, cut.start())
    head, body = (arg[: arrow + 2], arg[arrow + 2 : cut.start()]) if arrow >= 0 else ("", arg[: cut.start()])
    return f"{head} {ALIAS_MARK}({body}, {arg[cut.end() :].strip()})"


def _mask_nested(text: str) -> str:
    """``text`` with everything inside brackets, strings and comments blanked (same length)."""
    out, depth = [" "] * len(text), 0
    for i in _code_positions(text):
        ch = text[i]
        depth -= ch in ")]"
        if depth == 0 or ch in "()[]":
            out[i] = ch
        depth += ch in "(["
    return "".join(out)


def alias_macro_arguments(sql: str) -> str:
    """Rewrite ``expr AS alias`` arguments of protected macro calls so any dialect parses them.

    >>> alias_macro_arguments("SELECT __iam_each(xs, x -> CAST(x AS INT) AS y), CAST(z AS INT)")
    'SELECT __iam_each(xs, x -> __ia_alias( CAST(x AS INT) , y)), CAST(z AS INT)'
    """
    if CALL_MARK not in sql:
        return sql
    return _render(_groups(sql), False)


# --- `@IF(condition, statement);` as a pre/post-statement -------------------------------------------
# The statement argument (`ALTER TABLE ...`) is no expression any parser reads as an argument: it is
# carried as `__ia_statement('<hex of its text>')` and parsed on its own when restored.

STATEMENT_MARK = "__ia_statement"
_STATEMENT_IF = re.compile(r"\s*" + CALL_MARK + r"if\s*\(", re.IGNORECASE)
_STATEMENT_WORDS = re.compile(
    r"\s*(ALTER|ANALYZE|CACHE|COMMENT|CREATE|DELETE|DROP|GRANT|INSERT|MERGE|MSCK|OPTIMIZE|REFRESH|REVOKE|SET|"
    r"TRUNCATE|UNCACHE|UPDATE|USE|VACUUM)\b",
    re.IGNORECASE,
)


def _top_level(sql: str, start: int, stops: str) -> list[int]:
    """Positions of ``stops`` characters outside strings, comments and brackets, from ``start`` until
    the bracket open at ``start`` closes (its position is the last item)."""
    found: list[int] = []
    depth = 0
    for i in _code_positions(sql, start):
        ch = sql[i]
        if ch in ")]" and depth == 0:
            return found + [i]
        depth += (ch in "([") - (ch in ")]")
        if depth == 0 and ch in stops:
            found.append(i)
    return found + [len(sql)]


def statement_ifs(sql: str) -> str:
    """Wrap the statement arguments of statement-level ``@IF(...)`` calls (text already marked).

    >>> statement_ifs("SELECT 1; __iam_IF(1 > 0, ALTER TABLE t SET x = 'a');")
    "SELECT 1; __iam_IF(1 > 0, __ia_statement('414c544552205441424c452074205345542078203d20276127'));"
    """
    if CALL_MARK not in sql:
        return sql
    out, pos = [], 0
    for end in _top_level(sql, 0, ";"):
        segment = sql[pos:end]
        match = _STATEMENT_IF.match(segment)
        if match:
            segment = _wrap_statement_args(segment, match.end())
        out.append(segment + sql[end : end + 1])
        pos = end + 1
    return "".join(out)


def _wrap_statement_args(segment: str, open_at: int) -> str:
    cuts = _top_level(segment, open_at, ",")
    bounds = [open_at, *[c + 1 for c in cuts[:-1]]]
    pieces = [segment[:open_at]]
    for k, (begin, stop) in enumerate(zip(bounds, cuts)):
        arg = segment[begin:stop]
        if k and _STATEMENT_WORDS.match(arg):
            arg = f" {STATEMENT_MARK}('{arg.strip().encode().hex()}')" + "\n" * arg.count(
                "\n"
            )  # lines after it keep their numbers
        pieces.append(arg + segment[stop : stop + 1])
    return "".join(pieces) + segment[cuts[-1] + 1 :]


# --- clause operators: `@WHERE(condition) a = 1`, `@HAVING`, `@GROUP_BY`, `@ORDER_BY`, `@LIMIT`, `@WITH`, `@JOIN` --
# Each becomes its clause with a marker in it (`WHERE __ia_clause(condition) AND a = 1`, `LIMIT
# __ia_clause(condition) + 10`, a first CTE `__ia_clause_cte AS (SELECT __ia_clause(condition))`, a join's
# `ON __ia_clause(condition) AND ...`); expansion keeps the clause without the marker when the condition
# holds, and drops the whole clause (a join with its side, every CTE of the WITH) when it does not.

CLAUSE_MARK = "__ia_clause"
CLAUSE_CTE = "__ia_clause_cte"
_CLAUSES = {
    "where": "WHERE {} AND ",
    "having": "HAVING {} AND ",
    "group_by": "GROUP BY {}, ",
    "order_by": "ORDER BY {}, ",
    "limit": "LIMIT {} + ",
    "with": "WITH " + CLAUSE_CTE + " AS (SELECT {}), ",
    "join": "JOIN ",
}
_CLAUSE = re.compile(CALL_MARK + r"(where|having|group_by|order_by|limit|with|join)\s*\(", re.IGNORECASE)
_ON = re.compile(r"(?i)(?<![A-Za-z0-9_])ON(?![A-Za-z0-9_])")


def clause_operators(sql: str) -> str:
    """Rewrite clause operators into their clause holding a marker (text already marked).

    >>> clause_operators("SELECT a FROM t __iam_WHERE(1 > 0) a = 1")
    'SELECT a FROM t WHERE __ia_clause(1 > 0) AND a = 1'
    >>> clause_operators("SELECT a FROM t LEFT __iam_JOIN(x) u ON t.k = u.k __iam_LIMIT(x) 5")
    'SELECT a FROM t LEFT JOIN u ON __ia_clause(x) AND t.k = u.k LIMIT __ia_clause(x) + 5'
    """
    out, pos = [], 0
    for match in _CLAUSE.finditer(sql):
        if match.start() < pos:
            continue
        close = _top_level(sql, match.end(), "")[-1]
        marker = f"{CLAUSE_MARK}({sql[match.end() : close]})"
        operator = match.group(1).lower()
        out.append(sql[pos : match.start()] + _CLAUSES[operator].format(marker).rstrip(" "))
        out.append(" ")
        pos = close + 1
        while pos < len(sql) and sql[pos] == " ":
            pos += 1
        if operator == "join":
            on = _join_condition(sql, pos, sql.count("\n", 0, match.start()) + 1)
            out.append(sql[pos:on] + f" {marker} AND")
            pos = on
    out.append(sql[pos:])
    return "".join(out)


def _join_condition(sql: str, start: int, line: int) -> int:
    """Where the condition of the join starting at ``start`` begins (after its top-level ``ON``)."""
    masked = _mask_nested(sql[start:])
    stop = masked.find(";")
    found = _ON.search(masked, 0, len(masked) if stop < 0 else stop)
    if found is None:
        message = (
            "@JOIN(condition) needs a join with an ON condition (USING and CROSS joins cannot be made conditional)"
        )
        hint = "join with ON (e.g. @JOIN(cond) u ON t.k = u.k), or put the condition in the ON clause of a plain join"
        raise ParseError(message, errors=[{"description": message, "line": line, "hint": hint}])
    return start + found.end()


def apply_clause(marker: exp.Expr, keep: bool) -> None:
    """Keep a clause operator's clause without its marker, or drop the whole clause, in place.

    >>> tree = sqlglot.parse_one("SELECT a FROM t LIMIT __ia_clause(x) + 5")
    >>> apply_clause(next(n for n in tree.find_all(exp.Anonymous)), True); tree.sql()
    'SELECT a FROM t LIMIT 5'
    """
    holder = marker.parent
    if isinstance(holder, exp.Ordered):
        marker, holder = holder, holder.parent
    if isinstance(holder, exp.And):
        clause: exp.Expr | None = holder.find_ancestor(exp.Where, exp.Having, exp.Join)
    elif isinstance(holder, exp.Add):
        clause = holder.find_ancestor(exp.Limit)
    elif isinstance(holder, exp.Select) and (cte := marker.find_ancestor(exp.CTE)) is not None:
        clause = holder.find_ancestor(exp.With)
        marker = cte
    else:
        clause = holder
    if not keep:
        if clause is not None:
            clause.pop()
    elif isinstance(holder, (exp.And, exp.Add)) and holder.this is marker:
        holder.replace(holder.expression)
    else:
        marker.pop()


# --- conditions on the run window, resolved per run (see window_conditions) ----------------------------

RUNTIME_IF = "__ia_runtime_if"
RUNTIME_EVAL = "__ia_runtime_eval"


def runtime_if(condition: exp.Expr, then: list[exp.Expr], otherwise: list[exp.Expr]) -> exp.Anonymous:
    """``@IF`` whose condition needs the run window: the condition and both branches, expanded."""
    return exp.Anonymous(
        this=RUNTIME_IF, expressions=[condition, exp.Tuple(expressions=then), exp.Tuple(expressions=otherwise)]
    )


def runtime_eval(expression: exp.Expr) -> exp.Anonymous:
    """``@EVAL`` of an expression that needs the run window, computed per run."""
    return exp.Anonymous(this=RUNTIME_EVAL, expressions=[expression])
