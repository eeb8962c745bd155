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


def _takes(required: str, optional: str = "") -> tuple[frozenset[str], frozenset[str]]:
    return frozenset(required.split()), frozenset(optional.split()) | {"condition"}


_RANGE = "min_v max_v inclusive"

# SQLMesh's built-in audits and the arguments each takes (required, optional); every one takes a
# ``condition`` on the rows it audits, and has a ``<name>_non_blocking`` variant that warns instead.
_BLOCKING: Mapping[str, tuple[frozenset[str], frozenset[str]]] = {
    "not_null": _takes("columns"),
    "unique_values": _takes("columns"),
    "unique_combination_of_columns": _takes("columns"),
    "positive_values": _takes("column"),
    "accepted_range": _takes("column", _RANGE),
    "accepted_values": _takes("column is_in"),
    "not_accepted_values": _takes("column is_in"),
    "number_of_rows": _takes("threshold"),
    "forall": _takes("criteria"),
    "at_least_one": _takes("column"),
    "not_constant": _takes("column"),
    "not_empty_string": _takes("column"),
    "not_null_proportion": _takes("column threshold"),
    "sequential_values": _takes("column", "interval"),
    "mutually_exclusive_ranges": _takes("lower_bound_column upper_bound_column"),
    "valid_uuid": _takes("column"),
    "valid_url": _takes("column"),
    "valid_http_method": _takes("column"),
    "valid_email": _takes("column"),
    "match_regex_pattern_list": _takes("column patterns"),
    "not_match_regex_pattern_list": _takes("column patterns"),
    "match_like_pattern_list": _takes("column patterns"),
    "not_match_like_pattern_list": _takes("column patterns"),
    "z_score": _takes("column threshold"),
    "string_length_between": _takes("column", _RANGE),
    "string_length_equal": _takes("column v"),
    "stddev_in_range": _takes("column", _RANGE),
    "mean_in_range": _takes("column", _RANGE),
}
NON_BLOCKING = "_non_blocking"
BUILTINS: Mapping[str, tuple[frozenset[str], frozenset[str]]] = {
    **_BLOCKING,
    **{name + NON_BLOCKING: takes for name, takes in _BLOCKING.items()},
}
# Arguments that hold a list of SQL fragments.
LIST_ARGUMENTS = frozenset({"columns", "is_in", "criteria", "patterns"})


def builtin_name(name: str) -> str:
    """The built-in audit a name runs: ``not_null_non_blocking`` runs ``not_null`` (and does not block).

    >>> builtin_name("not_null_non_blocking"), builtin_name("not_null"), builtin_name("mine_non_blocking")
    ('not_null', 'not_null', 'mine_non_blocking')
    """
    base = name.removesuffix(NON_BLOCKING)
    return base if base in _BLOCKING else name


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
