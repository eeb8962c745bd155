"""Audits (SQLMesh) and assertions (Vulcan) as typed configs, and the SQL that finds their failing rows.

Each audit is a query over the rows a run just wrote that returns the rows that break it; zero rows
means the audit passes. Built-ins are checked when the model loads (unknown names are resolved against
the project's ``audits/*.sql`` when the project loads), so a typo fails with the file and line.

>>> from incremental_assets.header import parse_header
>>> v = parse_header("MODEL (audits (not_null(columns := [a, b])))", "m.sql").properties[0].value
>>> [a.name for a in parse_audits(v, "m.sql", origin="audits")]
['not_null']
>>> failing_rows_sql(parse_audits(v, "m.sql", origin="audits")[0], "t")
'SELECT * FROM t WHERE a IS NULL OR b IS NULL'
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal as TypingLiteral, Mapping

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError

from incremental_assets.errors import ModelFileError
from incremental_assets.header import Call, Items, Literal, Name, Pair, Value, parse_header, split_model_file

Origin = TypingLiteral["audits", "assertions"]

# Built-in audits and the arguments each takes (required, optional).
BUILTINS: Mapping[str, tuple[frozenset[str], frozenset[str]]] = {
    "not_null": (frozenset({"columns"}), frozenset()),
    "unique_values": (frozenset({"columns"}), frozenset()),
    "unique_combination_of_columns": (frozenset({"columns"}), frozenset()),
    "positive_values": (frozenset({"column"}), frozenset()),
    "accepted_range": (frozenset({"column"}), frozenset({"min_v", "max_v", "inclusive"})),
    "accepted_values": (frozenset({"column", "is_in"}), frozenset()),
    "number_of_rows": (frozenset({"threshold"}), frozenset()),
    "forall": (frozenset({"criteria"}), frozenset()),
}


@dataclass(frozen=True)
class Audit:
    """One audit a model declares: a built-in or a user-defined SQL audit, with its arguments.

    ``args`` hold SQL fragments (column names, literals, boolean expressions) as sqlglot expressions.
    """

    name: str
    args: Mapping[str, exp.Expression | tuple[exp.Expression, ...]]
    blocking: bool | None  # None: the audit's own default (built-ins and SQLMesh audits block)
    line: int
    origin: Origin = "audits"
    text: str = ""

    @property
    def check_name(self) -> str:
        """A Dagster check name: the audit name plus a short tag of its arguments, unique per model."""
        cols = self.args.get("columns") or self.args.get("column")
        if isinstance(cols, tuple):
            suffix = "_".join(c.sql() for c in cols)
        elif isinstance(cols, exp.Expression):
            suffix = cols.sql()
        else:
            suffix = ""
        raw = f"{self.name}__{suffix}" if suffix else self.name
        return re.sub(r"[^A-Za-z0-9_]", "_", raw)[:80]


@dataclass(frozen=True)
class UserAudit:
    """An ``audits/*.sql`` file: ``AUDIT (name x, blocking true); SELECT ...`` where rows are failures.

    The query reads the audited rows as ``@this_model`` and may use ``@column``-style parameters that
    the model passes as arguments.
    """

    name: str
    query: str
    path: Path
    blocking: bool = True
    defaults: Mapping[str, str] = field(default_factory=dict)


def _expr(value: Value, path: str | Path) -> exp.Expression:
    try:
        return sqlglot.parse_one(value.text, dialect="spark")
    except ParseError as e:
        raise ModelFileError(path, value.line, f"cannot parse '{value.text}' as SQL: {e}") from None


def _exprs(value: Value, path: str | Path) -> tuple[exp.Expression, ...]:
    if isinstance(value, Items):
        return tuple(_expr(v, path) for v in value.items)
    return (_expr(value, path),)


def parse_audits(value: Value, path: str | Path, *, origin: Origin) -> tuple[Audit, ...]:
    """Typed audits from the value of an ``audits (...)`` / ``assertions (...)`` header property."""
    items = value.items if isinstance(value, Items) else (value,)
    audits = []
    for item in items:
        if isinstance(item, Name):
            item = Call(item.value, (), item.line, item.text)
        if not isinstance(item, Call):
            raise ModelFileError(path, item.line, f"{origin}: expected a call such as not_null(columns := [id]), found {item.text}")
        name = item.name.lower()
        args: dict[str, Value] = {}
        for arg in item.args:
            if not isinstance(arg, Pair):
                raise ModelFileError(path, arg.line, f"{origin}: {name} takes named arguments (name := value), found {arg.text}")
            args[arg.key.lower()] = arg.value
        blocking: bool | None = None
        if "blocking" in args:
            b = args.pop("blocking")
            if not (isinstance(b, (Literal, Name)) and str(b.value).lower() in ("true", "false")):
                raise ModelFileError(path, b.line, f"{origin}: blocking must be true or false, found {b.text}")
            blocking = str(b.value).lower() == "true"
        typed: dict[str, exp.Expression | tuple[exp.Expression, ...]] = {}
        if name in BUILTINS:
            required, optional = BUILTINS[name]
            missing = required - args.keys()
            if missing:
                raise ModelFileError(path, item.line, f"{origin}: {name} needs {', '.join(sorted(missing))}", hint=f"e.g. {_example(name)}")
            unknown = args.keys() - required - optional
            if unknown:
                raise ModelFileError(path, item.line, f"{origin}: {name} does not take {', '.join(sorted(unknown))}", hint=f"e.g. {_example(name)}")
            if name == "accepted_range" and not ({"min_v", "max_v"} & args.keys()):
                raise ModelFileError(path, item.line, f"{origin}: accepted_range needs min_v or max_v", hint=_example(name))
            if name == "number_of_rows":
                t = args["threshold"]
                if not (isinstance(t, Literal) and isinstance(t.value, int) and not isinstance(t.value, bool)):
                    raise ModelFileError(path, t.line, f"{origin}: number_of_rows threshold must be a whole number, found {t.text}")
        for key, v in args.items():
            typed[key] = _exprs(v, path) if key in ("columns", "is_in", "criteria") else _expr(v, path)
        audits.append(Audit(name, typed, blocking, item.line, origin, item.text))
    seen: dict[str, int] = {}
    for a in audits:
        if a.check_name in seen:
            raise ModelFileError(path, a.line, f"{origin}: {a.text} is declared twice (first on line {seen[a.check_name]})")
        seen[a.check_name] = a.line
    return tuple(audits)


def _example(name: str) -> str:
    return {
        "not_null": "not_null(columns := [id, ts])",
        "unique_values": "unique_values(columns := [id])",
        "unique_combination_of_columns": "unique_combination_of_columns(columns := [a, b])",
        "positive_values": "positive_values(column := amount)",
        "accepted_range": "accepted_range(column := q, min_v := 1, max_v := 5)",
        "accepted_values": "accepted_values(column := status, is_in := ('a', 'b'))",
        "number_of_rows": "number_of_rows(threshold := 1)",
        "forall": "forall(criteria := [a > 0, b IS NOT NULL])",
    }.get(name, name)


def _or(conditions: list[exp.Expression]) -> exp.Expression:
    out = conditions[0]
    for c in conditions[1:]:
        out = exp.or_(out, c, copy=False)
    return out


def failing_rows_sql(audit: Audit, table: str, user: UserAudit | None = None) -> str:
    """Spark SQL returning the rows of ``table`` that break ``audit`` (no rows: it passes)."""
    src = exp.to_table(table)
    a = audit.args
    select = exp.select("*").from_(src)
    name = audit.name
    if name == "not_null":
        q = select.where(_or([exp.Is(this=c.copy(), expression=exp.Null()) for c in a["columns"]]))  # type: ignore[union-attr]
    elif name in ("unique_values", "unique_combination_of_columns"):
        cols = list(a["columns"])  # type: ignore[arg-type]
        if name == "unique_values" and len(cols) > 1:
            # SQLMesh's unique_values checks each column on its own.
            parts = [
                exp.select(exp.Literal.string(c.sql()).as_("column_name"), exp.cast(c.copy(), "string").as_("value"), exp.Count(this=exp.Star()).as_("duplicates"))
                .from_(src.copy()).group_by(c.copy()).having(exp.GT(this=exp.Count(this=exp.Star()), expression=exp.Literal.number(1)))
                for c in cols
            ]
            q = parts[0]
            for p in parts[1:]:
                q = exp.union(q, p, distinct=False)
        else:
            q = (
                exp.select(*[c.copy() for c in cols], exp.Count(this=exp.Star()).as_("duplicates"))
                .from_(src).group_by(*[c.copy() for c in cols])
                .having(exp.GT(this=exp.Count(this=exp.Star()), expression=exp.Literal.number(1)))
            )
    elif name == "positive_values":
        q = select.where(exp.LTE(this=a["column"].copy(), expression=exp.Literal.number(0)))  # type: ignore[union-attr]
    elif name == "accepted_range":
        col = a["column"]
        inclusive = str(a["inclusive"].sql()).lower() != "false" if "inclusive" in a else True  # type: ignore[union-attr]
        conds: list[exp.Expression] = []
        if "min_v" in a:
            conds.append((exp.LT if inclusive else exp.LTE)(this=col.copy(), expression=a["min_v"].copy()))  # type: ignore[union-attr]
        if "max_v" in a:
            conds.append((exp.GT if inclusive else exp.GTE)(this=col.copy(), expression=a["max_v"].copy()))  # type: ignore[union-attr]
        q = select.where(_or(conds))
    elif name == "accepted_values":
        col = a["column"]
        q = select.where(exp.Not(this=exp.In(this=col.copy(), expressions=[v.copy() for v in a["is_in"]])))  # type: ignore[union-attr]
    elif name == "number_of_rows":
        # One failing row when the table has fewer rows than the threshold.
        q = exp.select(exp.Count(this=exp.Star()).as_("row_count")).from_(src).having(
            exp.LT(this=exp.Count(this=exp.Star()), expression=a["threshold"].copy())  # type: ignore[union-attr]
        )
    elif name == "forall":
        q = select.where(_or([exp.Not(this=exp.Coalesce(this=exp.paren(c.copy()), expressions=[exp.false()])) for c in a["criteria"]]))  # type: ignore[union-attr]
    else:
        assert user is not None, f"unresolved audit {name}"
        return render_user_audit(user, audit, table)
    return q.sql(dialect="spark")


def render_user_audit(user: UserAudit, audit: Audit, table: str) -> str:
    """The user audit's query with ``@this_model`` and its parameters replaced as AST nodes."""
    tree = sqlglot.parse_one(user.query, dialect="spark")
    values: dict[str, exp.Expression] = {k: sqlglot.parse_one(v, dialect="spark") for k, v in user.defaults.items()}
    for key, v in audit.args.items():
        values[key] = exp.Tuple(expressions=[e.copy() for e in v]) if isinstance(v, tuple) else v

    def swap(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Parameter):
            key = node.name.lower()
            if key == "this_model":
                return exp.to_table(table)
            if key in values:
                return values[key].copy()
            raise ModelFileError(user.path, None, f"audit {user.name} uses @{key}, which the model does not pass")
        return node

    return tree.transform(swap).sql(dialect="spark")


def parse_audit_file(path: Path) -> list[UserAudit]:
    """``AUDIT (name x[, blocking false][, defaults (k = v)]); SELECT ...`` (several per file allowed)."""
    text = path.read_text()
    out = []
    rest, offset = text, 0
    while rest.strip():
        start = re.search(r"\bAUDIT\s*\(", rest, flags=re.IGNORECASE)
        if start is None:
            break
        body = "MODEL" + rest[start.end() - 1 :]
        split = split_model_file(body, path)
        header = parse_header(split.header_text, path, offset + rest.count("\n", 0, start.start()) + split.header_line - 1)
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
        try:
            sqlglot.parse_one(sql, dialect="spark")
        except ParseError as e:
            raise ModelFileError(path, header.line, f"audit query does not parse: {e}") from None
        name = str(props["name"].value.text).lower()
        out.append(UserAudit(name, sql, path, blocking, defaults))
        offset += body.count("\n", 0, len(body)) - query[consumed:].count("\n") if nxt is not None else 0
        rest = query[consumed:]
    return out
