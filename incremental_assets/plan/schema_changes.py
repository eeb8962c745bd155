"""Schema changes of incremental tables: classify them and decide, per the kind's policies, what to write.

Pure: schemas are ``{column: Spark type}`` mappings (``DataType.simpleString()``), so the rules are
testable without Spark. Additive changes are new columns and type widenings that old data files can
still be read as (int -> bigint, float -> double, a wider decimal, date -> timestamp); destructive
changes are dropped columns (a rename is a drop plus an add), narrowings and incompatible type changes.

>>> d = compare({"a": "int", "b": "string"}, {"a": "bigint", "c": "double"})
>>> d.added, d.dropped, d.widened, d.retyped
(('c',), ('b',), (('a', 'int', 'bigint'),), ())
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping

from incremental_assets.errors import ModelFileError
from incremental_assets.model.sql_model import SqlModel
from incremental_assets.plan.rebuild import ASK_FULL_REFRESH

_INTEGRAL = ["tinyint", "smallint", "int", "bigint"]
_DECIMAL = re.compile(r"decimal\((\d+),\s*(\d+)\)")


def is_widening(old: str, new: str) -> bool:
    """Whether data files holding ``old`` can be read as ``new`` without loss.

    >>> is_widening("int", "bigint"), is_widening("bigint", "int"), is_widening("int", "string")
    (True, False, False)
    """
    if old in _INTEGRAL and new in _INTEGRAL:
        return _INTEGRAL.index(new) > _INTEGRAL.index(old)
    if old in ("tinyint", "smallint", "int", "float") and new == "double":
        return True
    if old == "date" and new in ("timestamp", "timestamp_ntz"):
        return True
    a, b = _DECIMAL.fullmatch(old), _DECIMAL.fullmatch(new)
    if a and b:
        (p1, s1), (p2, s2) = (int(a[1]), int(a[2])), (int(b[1]), int(b[2]))
        return (p2, s2) != (p1, s1) and s2 >= s1 and p2 - s2 >= p1 - s1
    return False


@dataclass(frozen=True)
class SchemaDiff:
    added: tuple[str, ...] = ()
    dropped: tuple[str, ...] = ()
    widened: tuple[tuple[str, str, str], ...] = ()  # (column, old type, new type)
    retyped: tuple[tuple[str, str, str], ...] = ()  # narrowed or incompatible

    @property
    def additive(self) -> bool:
        return bool(self.added or self.widened)

    @property
    def destructive(self) -> bool:
        return bool(self.dropped or self.retyped)

    def describe_additive(self) -> str:
        return "; ".join(
            [f"new column {c}" for c in self.added] + [f"{c} widened from {o} to {n}" for c, o, n in self.widened]
        )

    def describe_destructive(self) -> str:
        return "; ".join(
            [f"column {c} dropped (or renamed)" for c in self.dropped]
            + [f"{c} changed from {o} to {n}" for c, o, n in self.retyped]
        )


def compare(table: Mapping[str, str], query: Mapping[str, str]) -> SchemaDiff:
    """How the query's output schema differs from the table's (column names compared case-insensitively)."""
    old = {k.lower(): v.lower() for k, v in table.items()}
    new = {k.lower(): v.lower() for k, v in query.items()}
    added = tuple(c for c in new if c not in old)
    dropped = tuple(c for c in old if c not in new)
    widened: list[tuple[str, str, str]] = []
    retyped: list[tuple[str, str, str]] = []
    for c in new:
        if c in old and old[c] != new[c]:
            (widened if is_widening(old[c], new[c]) else retyped).append((c, old[c], new[c]))
    return SchemaDiff(added, dropped, tuple(widened), tuple(retyped))


@dataclass(frozen=True)
class Column:
    """One output column: its name and, when the table keeps its type, the type to cast to.
    ``null`` columns are dropped ones the table keeps (written as NULL)."""

    name: str
    cast: str | None = None
    null: bool = False


@dataclass(frozen=True)
class SchemaDecision:
    columns: tuple[Column, ...]
    warnings: tuple[str, ...] = ()


def decide(model: SqlModel, table: Mapping[str, str], query: Mapping[str, str]) -> SchemaDecision:
    """The columns to write under the kind's on_additive_change / on_destructive_change.

    error: raise, naming the model file, the columns and the fix; warn: evolve the table and warn;
    allow: evolve the table; ignore: keep the table's schema (new columns are not written, dropped
    ones are written as NULL, changed types are cast back to the table's).
    """
    diff = compare(table, query)
    additive = str(getattr(model.kind, "on_additive_change", "allow"))
    destructive = str(getattr(model.kind, "on_destructive_change", "error"))
    warnings: list[str] = []
    line = model.line_of("kind")
    for present, policy, what, setting, text in (
        (diff.destructive, destructive, "destructive", "on_destructive_change", diff.describe_destructive),
        (diff.additive, additive, "additive", "on_additive_change", diff.describe_additive),
    ):
        if not present:
            continue
        if policy == "error":
            raise ModelFileError(
                model.path,
                line,
                f"model {model.name}: {what} schema change against the existing table: {text()}",
                hint=f"set {setting} warn or allow in the kind to evolve the table, ignore to keep its schema, "
                f"or rebuild the model with {ASK_FULL_REFRESH}",
            )
        if policy == "warn":
            warnings.append(f"model {model.name}: {what} schema change applied: {text()}")
    if destructive in ("warn", "allow") and diff.retyped:
        raise ModelFileError(
            model.path,
            line,
            f"model {model.name}: cannot change column types in place ({diff.describe_destructive()}): "
            "the existing data files keep their types",
            hint=f"rebuild the model with {ASK_FULL_REFRESH}, "
            "or set on_destructive_change ignore to keep the table's types",
        )
    old = {k.lower(): v.lower() for k, v in table.items()}
    widened = {c: o for c, o, _ in diff.widened}
    retyped = {c: o for c, o, _ in diff.retyped}
    columns: list[Column] = []
    for name in query:
        c = name.lower()
        if c in diff.added and additive == "ignore":
            continue
        if c in widened and additive == "ignore":
            columns.append(Column(name, cast=widened[c]))
        elif c in retyped:  # only reachable with ignore
            columns.append(Column(name, cast=retyped[c]))
        else:
            columns.append(Column(name))
    if destructive == "ignore":
        columns += [Column(c, cast=old[c], null=True) for c in diff.dropped]
    if {c.name.lower() for c in columns} == set(old):
        columns.sort(key=lambda col: list(old).index(col.name.lower()))
    return SchemaDecision(tuple(columns), tuple(warnings))
