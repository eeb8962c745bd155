"""The SQL that finds an audit's failing rows: zero rows means the audit passes.

>>> from incremental_assets.load.audits import parse_audits
>>> from incremental_assets.load.header import parse_header
>>> v = parse_header("MODEL (audits (not_null(columns := [a, b])))", "m.sql").properties[0].value
>>> failing_rows_sql(parse_audits(v, "m.sql", origin="audits")[0], "t")
'SELECT * FROM t WHERE a IS NULL OR b IS NULL'
"""

from __future__ import annotations

from datetime import datetime, timezone

import sqlglot
from sqlglot import exp

from incremental_assets.errors import ModelFileError
from incremental_assets.load.macros.render import macro_values
from incremental_assets.model.audits import BUILTINS, Audit, UserAudit, builtin_name
from incremental_assets.model.intervals import TimeWindow
from incremental_assets.model.project import Project
from incremental_assets.plan.builtin_audits import AUDITS as BUILTIN_AUDITS


def _or(conditions: list[exp.Expr]) -> exp.Expr:
    out = conditions[0]
    for c in conditions[1:]:
        out = exp.or_(out, c, copy=False)
    return out


def _duplicates(src: exp.Expr, cols: list[exp.Expr], *, each_column: bool) -> exp.Query:
    """The values of ``cols`` found on more than one row of ``src``: of each column on its own when
    ``each_column`` (SQLMesh's unique_values), else of the columns together."""
    if each_column and len(cols) > 1:
        parts = [
            exp.select(
                exp.Literal.string(c.sql()).as_("column_name"),
                exp.cast(c.copy(), "string").as_("value"),
                exp.Count(this=exp.Star()).as_("duplicates"),
            )
            .from_(src.copy())
            .group_by(c.copy())
            .having(exp.GT(this=exp.Count(this=exp.Star()), expression=exp.Literal.number(1)))
            for c in cols
        ]
        q: exp.Query = parts[0]
        for p in parts[1:]:
            q = exp.union(q, p, distinct=False)
        return q
    return (
        exp.select(*[c.copy() for c in cols], exp.Count(this=exp.Star()).as_("duplicates"))
        .from_(src)
        .group_by(*[c.copy() for c in cols])
        .having(exp.GT(this=exp.Count(this=exp.Star()), expression=exp.Literal.number(1)))
    )


def _audited(audit: Audit, table: str) -> exp.Expr:
    """The rows an audit reads: the table, or those of its rows the audit's ``condition`` keeps."""
    src = exp.to_table(table)
    if "condition" not in audit.args:
        return src
    return exp.select("*").from_(src).where(audit.one("condition").copy()).subquery("audited")


def failing_rows_sql(audit: Audit, table: str, user: UserAudit | None = None, model_name: str | None = None) -> str:
    """Spark SQL returning the rows of ``table`` that break ``audit`` (no rows: it passes)."""
    a = audit.args
    name = builtin_name(audit.name)
    src = _audited(audit, table) if name in BUILTINS else exp.to_table(table)
    select = exp.select("*").from_(src.copy())
    if name in BUILTIN_AUDITS:
        q: exp.Query = BUILTIN_AUDITS[name](audit, src)
    elif name == "not_null":
        q = select.where(_or([exp.Is(this=c.copy(), expression=exp.Null()) for c in audit.many("columns")]))
    elif name in ("unique_values", "unique_combination_of_columns"):
        cols = list(audit.many("columns"))
        q = _duplicates(src, cols, each_column=name == "unique_values")
    elif name == "positive_values":
        q = select.where(exp.LTE(this=audit.one("column").copy(), expression=exp.Literal.number(0)))
    elif name == "accepted_range":
        col = audit.one("column")
        inclusive = str(audit.one("inclusive").sql()).lower() != "false" if "inclusive" in a else True
        conds: list[exp.Expr] = []
        if "min_v" in a:
            conds.append((exp.LT if inclusive else exp.LTE)(this=col.copy(), expression=audit.one("min_v").copy()))
        if "max_v" in a:
            conds.append((exp.GT if inclusive else exp.GTE)(this=col.copy(), expression=audit.one("max_v").copy()))
        q = select.where(_or(conds))
    elif name == "accepted_values":
        col = audit.one("column")
        q = select.where(exp.Not(this=exp.In(this=col.copy(), expressions=[v.copy() for v in audit.many("is_in")])))
    elif name == "number_of_rows":
        # One failing row when the table has fewer rows than the threshold.
        q = (
            exp.select(exp.Count(this=exp.Star()).as_("row_count"))
            .from_(src.copy())
            .having(exp.LT(this=exp.Count(this=exp.Star()), expression=audit.one("threshold").copy()))
        )
    elif name == "forall":
        q = select.where(
            _or(
                [
                    exp.Not(this=exp.Coalesce(this=exp.paren(c.copy()), expressions=[exp.false()]))
                    for c in audit.many("criteria")
                ]
            )
        )
    else:
        assert user is not None, f"unresolved audit {name}"
        return render_user_audit(user, audit, table, model_name)
    return q.sql(dialect="spark")


# An audit runs over the rows of the run's window only: its date macros (``order_ds BETWEEN @start_ds AND
# @end_ds``) select all of them, as SQLMesh's do over the same window.
_ALL_TIME = macro_values(
    TimeWindow(datetime(1970, 1, 1, tzinfo=timezone.utc), datetime(9999, 12, 31, tzinfo=timezone.utc))
)


def render_user_audit(user: UserAudit, audit: Audit, table: str, model_name: str | None = None) -> str:
    """The user audit's query with ``@this_model`` (and the audited model's own name, as SQLMesh reads
    it), its parameters and date macros replaced as AST nodes."""
    tree = sqlglot.parse_one(user.query, dialect="spark")
    values: dict[str, exp.Expr] = {k: sqlglot.parse_one(v, dialect="spark") for k, v in user.defaults.items()}
    for key, v in audit.args.items():
        values[key] = exp.Tuple(expressions=[e.copy() for e in v]) if isinstance(v, tuple) else v

    def swap(node: exp.Expr) -> exp.Expr:
        if isinstance(node, exp.Parameter):
            key = node.name.lower()
            if key == "this_model":
                return exp.to_table(table)
            if key in values:
                return values[key].copy()
            if key in _ALL_TIME:
                return _ALL_TIME[key].copy()
            raise ModelFileError(user.path, None, f"audit {user.name} uses @{key}, which the model does not pass")
        if (
            model_name
            and isinstance(node, exp.Table)
            and ".".join(p for p in (node.db, node.name) if p).lower() == model_name
            and not node.catalog
        ):
            return exp.to_table(table).as_(node.alias) if node.alias else exp.to_table(table)
        return node

    return tree.transform(swap).sql(dialect="spark")


def is_blocking(project: Project, audit: Audit) -> bool:
    """An audit's own flag, else its definition's (user audits), else SQLMesh's default: blocking, but for
    the built-ins' ``*_non_blocking`` variants."""
    if audit.blocking is not None:
        return audit.blocking
    if builtin_name(audit.name) != audit.name and audit.name not in project.audits:
        return False
    user = project.audits.get(audit.name)
    return user.blocking if user is not None else True
