"""Audit and assertion declarations in a MODEL header, and ``audits/*.sql`` files -> Audit values.

Built-ins are checked when the model loads (unknown names are resolved against the project's
``audits/*.sql`` when the project loads), so a typo fails with the file and line.

>>> from incremental_assets.load.header import parse_header
>>> v = parse_header("MODEL (audits (not_null(columns := [a, b])))", "m.sql").properties[0].value
>>> [a.name for a in parse_audits(v, "m.sql", origin="audits")]
['not_null']
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Callable

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError

from incremental_assets.errors import ModelFileError
from incremental_assets.load.header import (
    Call,
    Items,
    Literal,
    Name,
    Pair,
    Value,
    check_file_size,
    parse_header,
    read_utf8,
    split_model_file,
)
from incremental_assets.load.macros.syntax import call_name, protect_macros, restore_macros
from incremental_assets.load.query import check_nesting, check_tree_depth
from incremental_assets.model.audits import BUILTINS, LIST_ARGUMENTS, Audit, Origin, UserAudit, builtin_name


def _expr(value: Value, path: str | Path) -> exp.Expr:
    try:
        return restore_macros(sqlglot.parse_one(protect_macros(value.text), dialect="spark"), "spark")
    except ParseError as e:
        raise ModelFileError(path, value.line, f"cannot parse '{value.text}' as SQL: {e}") from None


def _exprs(value: Value, path: str | Path) -> tuple[exp.Expr, ...]:
    if isinstance(value, Items):
        return tuple(_expr(v, path) for v in value.items)
    return (_expr(value, path),)


def _check_builtin_arguments(name: str, args: dict[str, Value], line: int, path: str | Path, origin: Origin) -> None:
    """Raise when a built-in audit misses an argument it needs, or is given one it does not take."""
    required, optional = BUILTINS[name]
    missing = required - args.keys()
    if missing:
        raise ModelFileError(
            path,
            line,
            f"{origin}: {name} needs {', '.join(sorted(missing))}",
            hint=f"e.g. {_example(name)}",
        )
    unknown = args.keys() - required - optional
    if unknown:
        raise ModelFileError(
            path,
            line,
            f"{origin}: {name} does not take {', '.join(sorted(unknown))}",
            hint=f"e.g. {_example(name)}",
        )
    if builtin_name(name) == "accepted_range" and not ({"min_v", "max_v"} & args.keys()):
        raise ModelFileError(path, line, f"{origin}: accepted_range needs min_v or max_v", hint=_example(name))
    if builtin_name(name) == "number_of_rows":
        t = args["threshold"]
        if not (isinstance(t, Literal) and isinstance(t.value, int) and not isinstance(t.value, bool)):
            raise ModelFileError(
                path, t.line, f"{origin}: number_of_rows threshold must be a whole number, found {t.text}"
            )


def parse_audits(value: Value, path: str | Path, *, origin: Origin) -> tuple[Audit, ...]:
    """Typed audits from the value of an ``audits (...)`` / ``assertions (...)`` header property."""
    items = value.items if isinstance(value, Items) else (value,)
    audits = []
    for item in items:
        if isinstance(item, Name):
            item = Call(item.value, (), item.line, item.text)
        if not isinstance(item, Call):
            raise ModelFileError(
                path, item.line, f"{origin}: expected a call such as not_null(columns := [id]), found {item.text}"
            )
        name = item.name.lower()
        args: dict[str, Value] = {}
        for arg in item.args:
            if not isinstance(arg, Pair):
                raise ModelFileError(
                    path, arg.line, f"{origin}: {name} takes named arguments (name := value), found {arg.text}"
                )
            args[arg.key.lower()] = arg.value
        blocking: bool | None = None
        if "blocking" in args:
            b = args.pop("blocking")
            if not (isinstance(b, (Literal, Name)) and str(b.value).lower() in ("true", "false")):
                raise ModelFileError(path, b.line, f"{origin}: blocking must be true or false, found {b.text}")
            blocking = str(b.value).lower() == "true"
        typed: dict[str, exp.Expr | tuple[exp.Expr, ...]] = {}
        if name in BUILTINS:
            _check_builtin_arguments(name, args, item.line, path, origin)
        for key, v in args.items():
            typed[key] = _exprs(v, path) if key in LIST_ARGUMENTS else _expr(v, path)
        audits.append(Audit(name, typed, blocking, item.line, origin, item.text))
    seen: dict[str, int] = {}
    for a in audits:
        if a.check_name in seen:
            raise ModelFileError(
                path, a.line, f"{origin}: {a.text} is declared twice (first on line {seen[a.check_name]})"
            )
        seen[a.check_name] = a.line
    return tuple(audits)


def expand_audit_arguments(audits: tuple[Audit, ...], expand: Callable[[exp.Expr], exp.Expr]) -> tuple[Audit, ...]:
    """The audits with every macro call in their arguments (``threshold := @limit()``) replaced by its
    value when the model loads, as SQLMesh renders audit arguments; date macros stay for the run."""

    def one(value: exp.Expr) -> exp.Expr:
        return expand(value) if any(call_name(n) for n in value.walk()) else value

    out = []
    for audit in audits:
        args = {k: tuple(one(x) for x in v) if isinstance(v, tuple) else one(v) for k, v in audit.args.items()}
        out.append(replace(audit, args=args))
    return tuple(out)


def _example(name: str) -> str:
    name = builtin_name(name)
    return {
        "not_null": "not_null(columns := [id, ts])",
        "unique_values": "unique_values(columns := [id])",
        "unique_combination_of_columns": "unique_combination_of_columns(columns := [a, b])",
        "positive_values": "positive_values(column := amount)",
        "accepted_range": "accepted_range(column := q, min_v := 1, max_v := 5)",
        "accepted_values": "accepted_values(column := status, is_in := ('a', 'b'))",
        "number_of_rows": "number_of_rows(threshold := 1)",
        "forall": "forall(criteria := [a > 0, b IS NOT NULL])",
        "not_accepted_values": "not_accepted_values(column := status, is_in := ('void'))",
        "not_null_proportion": "not_null_proportion(column := email, threshold := 0.9)",
        "mutually_exclusive_ranges": "mutually_exclusive_ranges(lower_bound_column := a, upper_bound_column := b)",
        "string_length_equal": "string_length_equal(column := code, v := 3)",
        "match_regex_pattern_list": "match_regex_pattern_list(column := c, patterns := ('^a', 'b$'))",
    }.get(name, f"{name}(column := c)")


def parse_audit_file(path: Path) -> list[UserAudit]:
    """``AUDIT (name x[, blocking false][, defaults (k = v)]); SELECT ...`` (several per file allowed)."""
    check_file_size(path)
    return parse_audit_text(read_utf8(path), path)


_AUDIT_START = re.compile(r"(?:^|(?<=;))(\s*(?:--[^\n]*\n\s*)*)AUDIT\s*\(", re.IGNORECASE)


def _statement_end(text: str, i: int) -> int:
    """The index just past the ``;`` ending the statement at ``i`` (quotes and comments skipped), or the end."""
    n, depth = len(text), 0
    while i < n:
        ch = text[i]
        if ch in "'\"`":
            j = text.find(ch, i + 1)
            i = n if j < 0 else j + 1
            continue
        if text.startswith("--", i) or text.startswith("/*", i):
            j = text.find("\n" if ch == "-" else "*/", i + 2)
            i = n if j < 0 else j + (1 if ch == "-" else 2)
            continue
        depth += (ch == "(") - (ch == ")")
        if ch == ";" and depth <= 0:
            return i + 1
        i += 1
    return n


def split_inline_audits(text: str, path: Path, line_offset: int = 0) -> tuple[str, list[UserAudit]]:
    """Take ``AUDIT (...); SELECT ...;`` blocks out of a model body.

    Returns the body with each block blanked (its lines kept, so later lines keep their numbers) and the
    audits it defined, which the model's ``audits`` property then names like ``audits/*.sql`` ones.
    """
    audits: list[UserAudit] = []
    pos = 0
    blanked = text  # blocks blanked in a copy: the ';' before the next block must still be seen
    while (match := _AUDIT_START.search(text, pos)) is not None:
        start = match.start() + len(match.group(1))
        end = _statement_end(text, _statement_end(text, start))
        block = text[start:end]
        lines_before = line_offset + text.count("\n", 0, start)
        audits += parse_audit_text("\n" * lines_before + block, path)
        blanked = blanked[:start] + re.sub(r"[^\n]", " ", block) + blanked[end:]
        pos = end
    return blanked, audits


def parse_audit_text(text: str, path: Path) -> list[UserAudit]:
    """The audits of an audit file's text."""
    out = []
    rest, offset = text, 0
    while rest.strip():
        start = re.search(r"\bAUDIT\s*\(", rest, flags=re.IGNORECASE)
        if start is None:
            break
        body = "MODEL" + rest[start.end() - 1 :]
        split = split_model_file(body, path)
        header = parse_header(
            split.header_text, path, offset + rest.count("\n", 0, start.start()) + split.header_line - 1
        )
        props = {p.key: p for p in header.properties}
        if "name" not in props:
            raise ModelFileError(path, header.line, "the AUDIT header has no name", hint="AUDIT (name my_audit);")
        query = split.query_text
        nxt = re.search(r"\bAUDIT\s*\(", query, flags=re.IGNORECASE)
        consumed = len(query) if nxt is None else nxt.start()
        sql = query[:consumed].strip().rstrip(";")
        blocking = True
        if "blocking" in props:
            blocking = str(getattr(props["blocking"].value, "value", "true")).lower() == "true"
        defaults = {}
        if "defaults" in props and isinstance(props["defaults"].value, Items):
            defaults = {i.key.lower(): i.value.text for i in props["defaults"].value.items if isinstance(i, Pair)}
        check_nesting(sql, path, header.line)
        try:
            check_tree_depth(sqlglot.parse_one(sql, dialect="spark"), path, header.line)
        except RecursionError:
            raise ModelFileError(path, header.line, "the audit query nests too deeply to be parsed") from None
        except ParseError as e:
            raise ModelFileError(path, header.line, f"audit query does not parse: {e}") from None
        name = str(props["name"].value.text).lower()
        out.append(UserAudit(name, sql, path, blocking, defaults))
        offset += body.count("\n", 0, len(body)) - query[consumed:].count("\n") if nxt is not None else 0
        rest = query[consumed:]
    return out
