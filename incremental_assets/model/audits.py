"""Audits (SQLMesh) and assertions (Vulcan) as typed values.

Each audit is a query over the rows a run just wrote that returns the rows that break it; zero rows
means the audit passes (:mod:`incremental_assets.plan.audit_sql` writes that query).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal as TypingLiteral
from typing import Mapping

from sqlglot import exp

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
    args: Mapping[str, exp.Expr | tuple[exp.Expr, ...]]
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

    def one(self, key: str) -> exp.Expr:
        """The SQL fragment of an argument that holds one (``column``, ``min_v``, ``threshold`` ...)."""
        value = self.args[key]
        if isinstance(value, tuple):
            raise TypeError(f"audit {self.name}: {key} holds a list, not one value")
        return value

    def many(self, key: str) -> tuple[exp.Expr, ...]:
        """The SQL fragments of an argument that holds a list (``columns``, ``is_in``, ``criteria``)."""
        value = self.args[key]
        return value if isinstance(value, tuple) else (value,)


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
