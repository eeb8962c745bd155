"""Parse test SQL the way the framework does: SQLMesh macros become ``exp.Parameter`` nodes."""

from __future__ import annotations

import re

import sqlglot
from sqlglot import exp

_MACRO = re.compile(r"@(\w+)")
_PLACEHOLDER = "__macro_"


def parse_model_sql(sql: str, dialect: str = "spark") -> exp.Expression:
    """Parse one query; ``@start_ds`` and friends (and ``@this_model``) become Parameter nodes.

    Test SQL keeps macros out of string literals, so a plain substitution is enough here.
    """
    protected = _MACRO.sub(lambda m: _PLACEHOLDER + m.group(1), sql)
    query = sqlglot.parse_one(protected, read=dialect)

    def restore(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Column) and not node.table and node.name.startswith(_PLACEHOLDER):
            param = exp.Parameter(this=exp.var(node.name[len(_PLACEHOLDER) :].lower()))
            param.meta.update(node.this.meta)
            return param
        if isinstance(node, exp.Table) and not node.db and node.name.startswith(_PLACEHOLDER):
            param = exp.Parameter(this=exp.var(node.name[len(_PLACEHOLDER) :].lower()))
            param.meta.update(node.this.meta)
            node.set("this", param)
        return node

    return query.transform(restore)
