"""SQLMesh's built-in audits beyond the basic ones (:mod:`incremental_assets.plan.audit_sql` has those): each
is a Spark query over the audited rows that returns rows when the audit fails, as SQLMesh's does.

A template reads the audited rows as ``__audited`` and its arguments as columns named ``__<argument>``.

>>> from incremental_assets.model.audits import Audit
>>> a = Audit("not_constant", {"column": exp.column("amount")}, None, 1)
>>> AUDITS["not_constant"](a, exp.to_table("t")).sql("spark")
'SELECT 1 FROM (SELECT COUNT(DISTINCT amount) AS distinct_values FROM t) AS counted WHERE distinct_values <= 1'
"""

from __future__ import annotations

from typing import Callable

import sqlglot
from sqlglot import exp

from incremental_assets.model.audits import Audit

# Failing-row queries with one column argument (and the others each names): ``__column`` is the column.
_TEMPLATES = {
    "at_least_one": "SELECT 1 FROM __audited GROUP BY 1 HAVING COUNT(__column) = 0",
    "not_constant": "SELECT 1 FROM (SELECT COUNT(DISTINCT __column) AS distinct_values FROM __audited) AS counted "
    "WHERE distinct_values <= 1",
    "not_empty_string": "SELECT * FROM __audited WHERE __column = ''",
    "not_null_proportion": "SELECT * FROM (SELECT COUNT(*) AS cnt_tot, COUNT(__column) AS cnt_not_null, "
    "COUNT(*) - COUNT(__column) AS cnt_null FROM __audited) AS counted WHERE cnt_not_null <= cnt_tot * __threshold",
    "sequential_values": "SELECT * FROM (SELECT __column, LAG(__column) OVER (ORDER BY __column) AS prv "
    "FROM __audited) AS windowed WHERE NOT (__column = prv + __interval)",
    "valid_uuid": "SELECT * FROM __audited WHERE NOT REGEXP_LIKE(LOWER(__column), "
    "'^[0-9a-f]{8}-[0-9a-f]{4}-[1-5][0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$')",
    "valid_url": "SELECT * FROM __audited WHERE NOT REGEXP_LIKE(__column, '^(https?|ftp)://[^\\\\s/$.?#].[^\\\\s]*$')",
    "valid_http_method": "SELECT * FROM __audited WHERE NOT __column IN "
    "('GET', 'POST', 'PUT', 'DELETE', 'PATCH', 'HEAD', 'OPTIONS', 'TRACE', 'CONNECT')",
    "valid_email": "SELECT * FROM __audited WHERE NOT REGEXP_LIKE(__column, "
    "'^[a-zA-Z0-9_.+-]+@[a-zA-Z0-9-]+\\\\.[a-zA-Z0-9-.]+$')",
    "z_score": "SELECT __column, (__column - mean_value) / NULLIF(stddev_value, 0) AS z_score "
    "FROM __audited CROSS JOIN (SELECT AVG(__column) AS mean_value, STDDEV(__column) AS stddev_value "
    "FROM __audited) AS stats WHERE ABS((__column - mean_value) / NULLIF(stddev_value, 0)) > __threshold",
    "string_length_equal": "SELECT * FROM __audited WHERE LENGTH(__column) <> __v",
    "mutually_exclusive_ranges": "SELECT * FROM (SELECT *, COALESCE(lower_bound <= upper_bound, FALSE) AS lower_ok, "
    "COALESCE(upper_bound <= next_lower_bound, is_last_record, FALSE) AS upper_ok FROM (SELECT "
    "__lower_bound_column AS lower_bound, __upper_bound_column AS upper_bound, LEAD(__lower_bound_column) OVER "
    "(ORDER BY __lower_bound_column, __upper_bound_column) AS next_lower_bound, ROW_NUMBER() OVER "
    "(ORDER BY __lower_bound_column DESC, __upper_bound_column DESC) = 1 AS is_last_record FROM __audited) AS bounds) "
    "AS checked WHERE NOT (lower_ok AND upper_ok)",
}

_DEFAULTS = {"interval": exp.Literal.number(1)}


def _fill(template: str, audit: Audit, src: exp.Expr) -> exp.Query:
    def value(node: exp.Expr) -> exp.Expr:
        if isinstance(node, exp.Column) and not node.table and node.name.startswith("__"):
            key = node.name[2:]
            return (audit.one(key) if key in audit.args else _DEFAULTS[key]).copy()
        if isinstance(node, exp.Table) and node.name == "__audited":
            return src.copy()
        return node

    query = sqlglot.parse_one(template, dialect="spark").transform(value)
    assert isinstance(query, exp.Query)
    return query


def _templated(template: str) -> Callable[[Audit, exp.Expr], exp.Query]:
    return lambda audit, src: _fill(template, audit, src)


def _range(measure: Callable[[Audit], exp.Expr], audit: Audit) -> exp.Expr | None:
    """The condition a value breaks: below ``min_v`` or above ``max_v`` (at them too when not inclusive)."""
    inclusive = audit.one("inclusive").sql().lower() != "false" if "inclusive" in audit.args else True
    checks: list[exp.Expr] = []
    if "min_v" in audit.args:
        checks.append((exp.LT if inclusive else exp.LTE)(this=measure(audit), expression=audit.one("min_v").copy()))
    if "max_v" in audit.args:
        checks.append((exp.GT if inclusive else exp.GTE)(this=measure(audit), expression=audit.one("max_v").copy()))
    return exp.or_(*checks) if checks else None


def _column(audit: Audit) -> exp.Expr:
    return audit.one("column").copy()


def _string_length_between(audit: Audit, src: exp.Expr) -> exp.Query:
    broken = _range(lambda a: exp.Length(this=_column(a)), audit)
    return exp.select("*").from_(src.copy()).where(broken if broken is not None else exp.false())


def _aggregate_in_range(function: str) -> Callable[[Audit, exp.Expr], exp.Query]:
    def query(audit: Audit, src: exp.Expr) -> exp.Query:
        measured = exp.select(exp.alias_(exp.func(function, _column(audit)), "measured")).from_(src.copy())
        broken = _range(lambda _: exp.column("measured"), audit)
        return (
            exp.select("*").from_(measured.subquery("aggregated")).where(broken if broken is not None else exp.false())
        )

    return query


def _patterns(match: Callable[[exp.Expr, exp.Expr], exp.Expr], negate: bool, every: bool) -> Callable[..., exp.Query]:
    """Rows breaking a pattern list: matching none of them (``every``, negated matches ANDed) or any of them."""

    def query(audit: Audit, src: exp.Expr) -> exp.Query:
        tests = [match(_column(audit), p.copy()) for p in audit.many("patterns")]
        tests = [exp.Not(this=t) if negate else t for t in tests]
        return exp.select("*").from_(src.copy()).where(exp.and_(*tests) if every else exp.or_(*tests))

    return query


def _regexp(column: exp.Expr, pattern: exp.Expr) -> exp.Expr:
    return exp.RegexpLike(this=column, expression=pattern)


def _like(column: exp.Expr, pattern: exp.Expr) -> exp.Expr:
    return exp.Like(this=column, expression=pattern)


def _not_accepted_values(audit: Audit, src: exp.Expr) -> exp.Query:
    values = [v.copy() for v in audit.many("is_in")]
    return exp.select("*").from_(src.copy()).where(exp.In(this=_column(audit), expressions=values))


AUDITS: dict[str, Callable[[Audit, exp.Expr], exp.Query]] = {
    **{name: _templated(template) for name, template in _TEMPLATES.items()},
    "not_accepted_values": _not_accepted_values,
    "string_length_between": _string_length_between,
    "stddev_in_range": _aggregate_in_range("STDDEV"),
    "mean_in_range": _aggregate_in_range("AVG"),
    "match_regex_pattern_list": _patterns(_regexp, negate=True, every=True),
    "not_match_regex_pattern_list": _patterns(_regexp, negate=False, every=False),
    "match_like_pattern_list": _patterns(_like, negate=True, every=True),
    "not_match_like_pattern_list": _patterns(_like, negate=False, every=False),
}
