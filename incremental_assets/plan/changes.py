"""What a change of the project costs: each model's category and the built intervals it recomputes.

The definition each table was built with (kept with the table, see :mod:`.definition`) is compared with
the model's current one. Categories follow SQLMesh (``snapshot/categorizer.py``, ``context_diff.py``):

- ``breaking``: the model's rows change; it and the models reading what changed recompute what is built.
- ``non-breaking``: only columns were added (SQLMesh: only projections inserted into the SELECT). Its own
  table still needs the new columns, so it recomputes its built intervals; its downstream models do not.
- ``forward-only``: a ``forward_only`` model, or ``plan --forward-only``: new intervals only.
- ``metadata``: description, owner, tags, audits, cron, grain, start: nothing is recomputed (a start moved
  earlier leaves the intervals before the old start to compute).
- ``indirect-breaking`` / ``indirect-non-breaking``: a downstream model, by what it reads.

Finer than SQLMesh, which calls every downstream model of a breaking change indirect-breaking: a
downstream model is decided at the column level, from the lineage. It is indirect-breaking only when it
reads (in a projection, or in a filter, join or grouping) an upstream column whose values changed, or
when its own columns would change (a ``*`` over an upstream that gained a column); otherwise
indirect-non-breaking. A changed projection of a model breaks only the output columns computed from it;
a changed filter, join, grouping, CTE or kind breaks every column. When in doubt (no stored definition,
lineage not traceable), breaking.

>>> merged_ranges(["2024-01-01", "2024-01-02", "2024-01-04"], "day")
[('2024-01-01', '2024-01-03'), ('2024-01-04', '2024-01-05')]
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import sqlglot
from sqlglot.errors import SqlglotError

from incremental_assets.model.intervals import IntervalUnit, TimeWindow, format_instant, merge, to_utc
from incremental_assets.model.project import Project
from incremental_assets.model.sql_model import SqlModel

ALL = None  # every column of a model changed (a set of names says which)

BREAKING = "breaking"
NON_BREAKING = "non-breaking"
FORWARD_ONLY = "forward-only"
METADATA = "metadata"
INDIRECT_BREAKING = "indirect-breaking"
INDIRECT_NON_BREAKING = "indirect-non-breaking"
UNCHANGED = "unchanged"


@dataclass(frozen=True)
class TableState:
    """What the model's table says, read from its Delta log only: the fingerprint and definition it was
    built with, and its rows per built interval (``intervals``; None for a table not cut in intervals)."""

    exists: bool = False
    fingerprint: str | None = None
    stored: Mapping[str, Any] | None = None
    intervals: Mapping[str, int] | None = None
    rows: int | None = None


@dataclass(frozen=True)
class ModelChange:
    name: str
    change: str  # added, removed, modified, indirectly modified, unchanged
    category: str
    recompute: tuple[tuple[str | None, str | None], ...] = ()  # [start, end) ranges; (None, None): the whole table
    partitions: int | None = None
    rows: int | None = None
    reasons: tuple[str, ...] = ()
    diff: str | None = None
    columns: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # added / changed / removed column names

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "change": self.change,
            "category": self.category,
            "recompute": [list(r) for r in self.recompute],
            "partitions": self.partitions,
            "rows": self.rows,
            "reasons": list(self.reasons),
            "columns": {k: list(v) for k, v in self.columns.items()},
            "diff": self.diff,
        }


def merged_ranges(keys: Sequence[str], unit: IntervalUnit | str) -> list[tuple[str, str]]:
    """Interval keys (``ia_interval`` values) as merged ``[start, end)`` ranges."""
    unit = IntervalUnit.of(unit)
    windows = [TimeWindow(to_utc(k), unit.next(to_utc(k))) for k in keys]
    return [(format_instant(w.start), format_instant(w.end)) for w in merge(windows)]


def _pretty(sql: str) -> list[str]:
    try:
        return sqlglot.parse_one(sql, read="spark").sql(dialect="spark", pretty=True).splitlines()
    except (SqlglotError, ValueError):
        return [sql]


def query_diff(old: str, new: str, name: str) -> str:
    """A unified diff of two normalized queries, one clause per line."""
    lines = difflib.unified_diff(_pretty(old), _pretty(new), f"{name} (built)", f"{name} (now)", lineterm="", n=2)
    return "\n".join(lines)


def _pairs(values: Any) -> set[tuple[str, str]]:
    return {(str(t).lower(), str(c).lower()) for t, c in values or ()}


def _direct(
    stored: Mapping[str, Any], current: Mapping[str, Any]
) -> tuple[set[str] | None, tuple[str, ...], tuple[str, ...], list[str]]:
    """Which of the model's columns changed (ALL: every one), which were added and removed, and why."""
    old_cols, new_cols = stored.get("columns") or {}, current.get("columns") or {}
    added = tuple(c for c in new_cols if c not in old_cols)
    removed = tuple(c for c in old_cols if c not in new_cols)
    if stored.get("kind") != current.get("kind") or stored.get("settings") != current.get("settings"):
        return ALL, added, removed, ["the kind, its settings or the declared columns changed"]
    if stored.get("shape") is None or stored.get("shape") != current.get("shape"):
        return (
            ALL,
            added,
            removed,
            ["the query changed outside its output columns (FROM, a filter, join, grouping or CTE)"],
        )
    changed = {
        c
        for c, old in old_cols.items()
        if c in new_cols
        and (
            old.get("sql") is None
            or old.get("sql") != new_cols[c].get("sql")
            or _pairs(old.get("reads")) != _pairs(new_cols[c].get("reads"))
        )
    }
    changed |= set(removed)
    reasons = [f"column {c} changed" for c in sorted(changed - set(removed))] + [f"column {c} removed" for c in removed]
    reasons += [f"column {c} added" for c in added]
    return changed, added, removed, reasons


def _reads(
    definition: Mapping[str, Any] | None,
) -> tuple[Mapping[str, set[tuple[str, str]]], set[tuple[str, str]] | None]:
    """Per output column the upstream columns it reads, and what filters read (None: not traceable)."""
    if not definition or not definition.get("columns"):
        return {}, None
    filters = definition.get("filters")
    return {c: _pairs(v.get("reads")) for c, v in definition["columns"].items()}, None if filters is None else _pairs(
        filters
    )


def _indirect(
    model: SqlModel,
    current: Mapping[str, Any] | None,
    stored: Mapping[str, Any] | None,
    changed: Mapping[str, set[str] | None],
) -> tuple[set[str] | None, list[str]]:
    """The columns of an unchanged model that read a changed upstream column (ALL: every one)."""
    upstream = {u.lower(): changed[u.lower()] for u in model.depends_on if u.lower() in changed}
    if not upstream:
        return set(), []
    by_column, filters = _reads(current)
    if filters is None:
        return ALL, [f"reads {', '.join(sorted(upstream))}, and which of their columns it reads cannot be traced"]
    if stored and current is not None and set(stored.get("columns") or {}) != set(current.get("columns") or {}):
        return ALL, ["its own columns change with its upstream's (a * over a changed model)"]

    def hit(pairs: set[tuple[str, str]]) -> set[tuple[str, str]]:
        return {(t, c) for t, c in pairs if t in upstream and ((cols := upstream[t]) is ALL or c in cols)}

    if hit(filters):
        return ALL, [f"filters, joins or groups on {', '.join(sorted(f'{t}.{c}' for t, c in hit(filters)))}"]
    out = {c for c, pairs in by_column.items() if hit(pairs)}
    reasons = [
        f"column {c} reads {', '.join(sorted(f'{t}.{col}' for t, col in hit(by_column[c])))}" for c in sorted(out)
    ]
    if not out:
        reasons = [f"reads no changed column of {', '.join(sorted(upstream))}"]
    return out, reasons


def _recompute(
    model: SqlModel, state: TableState
) -> tuple[tuple[tuple[str | None, str | None], ...], int | None, int | None]:
    """Every built interval of the model's table (merged), their number and rows: what a rebuild recomputes."""
    if not state.exists:
        return (), None, None
    if state.intervals is None or not model.is_incremental:
        return ((None, None),), None, state.rows
    keys = sorted(state.intervals)
    return tuple(merged_ranges(keys, model.unit)), len(keys), sum(state.intervals.values())


def plan_changes(
    project: Project,
    current: Mapping[str, Mapping[str, Any]],
    tables: Mapping[str, TableState],
    *,
    forward_only: bool = False,
    removed: Sequence[str] = (),
) -> list[ModelChange]:
    """Each model's change and category, upstreams first, then the tables no model writes (``removed``).

    ``current`` holds the models' current definitions, ``tables`` what each model's table says."""
    changed: dict[str, set[str] | None] = {}  # model -> its columns whose values change
    forward: set[str] = set()  # models whose change applies to new intervals only
    meta: set[str] = set()  # models whose change is metadata only
    out: list[ModelChange] = []
    for model in project.ordered():
        key, state, definition = model.name.lower(), tables.get(model.name, TableState()), current.get(model.name)
        is_forward = forward_only or model.forward_only
        if not model.has_table:
            cols, reasons = _indirect(model, definition, None, changed)
            if cols is ALL or cols:
                changed[key] = cols
                if _upstream_forward(model, changed, forward):
                    forward.add(key)  # a view passes a forward-only change on as it is
            out.append(ModelChange(model.name, "unchanged", UNCHANGED, reasons=(_NO_TABLE,)))
            continue
        if not state.exists:
            changed[key] = ALL
            out.append(ModelChange(model.name, "added", BREAKING, reasons=(_NO_TABLE_YET,)))
            continue
        if state.fingerprint != model.fingerprint:
            out.append(_modified(model, state, definition, is_forward, changed, forward))
            continue
        cols, reasons = _indirect(model, definition, state.stored, changed)
        metadata = _metadata_changed(state, definition)
        if cols is ALL or cols:
            changed[key] = cols
            if is_forward or _upstream_forward(model, changed, forward):
                forward.add(key)
            out.append(_indirectly_modified(model, state, reasons, forward=key in forward))
        elif reasons:
            changed[key] = set()  # its downstream models are indirectly modified too, and read nothing changed
            if is_forward or _upstream_forward(model, changed, forward):
                forward.add(key)
            category = METADATA if metadata else INDIRECT_NON_BREAKING
            out.append(ModelChange(model.name, "indirectly modified", category, reasons=tuple(reasons)))
        elif metadata:
            meta.add(key)
            out.append(ModelChange(model.name, "modified", METADATA, reasons=(_ONLY_METADATA,)))
        elif any(u.lower() in meta for u in model.depends_on):
            meta.add(key)  # as SQLMesh: downstream of a metadata change, a metadata change itself
            upstream = ", ".join(sorted(u for u in model.depends_on if u.lower() in meta))
            out.append(
                ModelChange(model.name, "indirectly modified", METADATA, reasons=(f"{upstream} changed only metadata",))
            )
        else:
            reasons_ = () if state.stored is not None else ("built before definitions were kept with tables",)
            out.append(ModelChange(model.name, "unchanged", UNCHANGED, reasons=reasons_))
    out.extend(ModelChange(name, "removed", BREAKING, reasons=(_NO_MODEL,)) for name in removed)
    return out


_NO_TABLE = "no table (a plain view or an embedded model): nothing stored, nothing to recompute"
_NO_TABLE_YET = "no table yet: built from its start by the next run"
_ONLY_METADATA = "only metadata changed (description, owner, tags, audits, cron, grain, start)"
_NO_MODEL = "a table exists, no model writes it any more: the table is kept"


def _upstream_forward(model: SqlModel, changed: Mapping[str, Any], forward: set[str]) -> bool:
    """As SQLMesh: a change reaching a model from upstream applies forward only when every changed model it
    reads applies forward only (a forward-only change beside a breaking one recomputes what is built)."""
    parents = [u.lower() for u in model.depends_on if u.lower() in changed]
    return bool(parents) and all(p in forward for p in parents)


def _metadata_changed(state: TableState, definition: Mapping[str, Any] | None) -> bool:
    """Whether the metadata kept with the table differs from the model's current metadata."""
    return (
        state.stored is not None
        and definition is not None
        and state.stored.get("metadata") != definition.get("metadata")
    )


def _indirectly_modified(model: SqlModel, state: TableState, reasons: Sequence[str], *, forward: bool) -> ModelChange:
    """The change of a model whose own definition is the same but whose upstream columns changed: kept
    intervals when the change applies forward only, else its built intervals recomputed."""
    if forward:
        return ModelChange(
            model.name,
            "indirectly modified",
            FORWARD_ONLY,
            reasons=tuple(reasons) + ("forward-only: built intervals are kept",),
        )
    recompute, partitions, rows = _recompute(model, state)
    return ModelChange(
        model.name, "indirectly modified", INDIRECT_BREAKING, recompute, partitions, rows, tuple(reasons)
    )


def _modified(
    model: SqlModel,
    state: TableState,
    definition: Mapping[str, Any] | None,
    is_forward: bool,
    changed: dict,
    forward: set,
) -> ModelChange:
    """A model whose fingerprint differs from its table's."""
    key = model.name.lower()
    diff = None
    if state.stored is None or definition is None:
        cols, columns, reasons = (
            ALL,
            {},
            ["its table was built before definitions were kept with tables: treated as breaking"],
        )
    else:
        cols, added, removed, reasons = _direct(state.stored, definition)
        if cols is not ALL and not cols and not added:
            cols, reasons = (
                ALL,
                [
                    "the definition changed in a way the comparison cannot place (a Python model, a "
                    "statement): treated as breaking"
                ],
            )
        columns = {
            k: v for k, v in (("added", added), ("removed", removed), ("changed", tuple(sorted(cols or ())))) if v
        }
        if state.stored.get("query") != definition.get("query"):
            diff = query_diff(str(state.stored.get("query")), str(definition.get("query")), model.name)
    changed[key] = cols
    if is_forward:
        forward.add(key)
        reason = "forward_only model" if model.forward_only else "plan --forward-only"
        return ModelChange(
            model.name,
            "modified",
            FORWARD_ONLY,
            reasons=(*reasons, f"{reason}: built intervals are kept, new ones use the new definition"),
            diff=diff,
            columns=columns,
        )
    recompute, partitions, rows = _recompute(model, state)
    category = BREAKING if cols is ALL or cols else NON_BREAKING
    return ModelChange(model.name, "modified", category, recompute, partitions, rows, tuple(reasons), diff, columns)
