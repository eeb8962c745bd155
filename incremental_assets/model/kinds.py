"""What a model's kind IS: one frozen configuration type per kind, and the names that tie them together.

Kinds form one discriminated union (:data:`Kind`); :class:`KindName` names them as written in a MODEL
header. Each kind says which of its fields stay out of the model's fingerprint (``not_in_fingerprint``:
settings that say how a change is applied, not what is computed). Reading kinds from files lives in
:mod:`incremental_assets.load.kinds`.

Keyed tables (unique key and SCD type 2) are partitioned by a hash bucket of the key, so a run rewrites
only the buckets its rows touch, and the whole history of one key lives in one bucket.

>>> UniqueKey(("id",)).name, ScdType2(("id",)).by, IncrementalByCursor("ts").name
('INCREMENTAL_BY_UNIQUE_KEY', 'time', 'INCREMENTAL_BY_CURSOR')
>>> KindName("FULL") is KindName.FULL, Full.name
(True, 'FULL')
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any, ClassVar, Literal, Union


class KindName(str, Enum):
    """The kinds a MODEL header may name: SQLMesh's in SQLMesh's order, then ours (SQLMesh's
    ``ModelKindName``, served to a project's Python files, is made from this list in that order)."""

    INCREMENTAL_BY_TIME_RANGE = "INCREMENTAL_BY_TIME_RANGE"
    INCREMENTAL_BY_UNIQUE_KEY = "INCREMENTAL_BY_UNIQUE_KEY"
    SCD_TYPE_2 = "SCD_TYPE_2"
    SCD_TYPE_2_BY_TIME = "SCD_TYPE_2_BY_TIME"
    SCD_TYPE_2_BY_COLUMN = "SCD_TYPE_2_BY_COLUMN"
    FULL = "FULL"
    VIEW = "VIEW"
    EMBEDDED = "EMBEDDED"
    SEED = "SEED"
    INCREMENTAL_BY_CURSOR = "INCREMENTAL_BY_CURSOR"  # OndatraSQL's, not SQLMesh's

    def __str__(self) -> str:
        return self.value


# The constructs the safety analysis refuses on partial data, each with the kind flag that admits it
# (the one list: the analysis reports its rules by these names, the loader accepts these flags).
SAFETY_OVERRIDES: dict[str, str] = {
    "window_function": "allow_window_functions",
    "aggregate": "allow_aggregates",
    "having": "allow_having",
    "distinct": "allow_distinct",
    "limit": "allow_limit",
    "nondeterministic": "allow_nondeterministic",
    "subquery": "allow_subqueries",
}
SAFETY_OVERRIDE_FLAGS = frozenset(SAFETY_OVERRIDES.values())

KEYED_KINDS = frozenset(
    {
        KindName.INCREMENTAL_BY_UNIQUE_KEY,
        KindName.SCD_TYPE_2,
        KindName.SCD_TYPE_2_BY_TIME,
        KindName.SCD_TYPE_2_BY_COLUMN,
        KindName.INCREMENTAL_BY_CURSOR,
    }
)

# Macros of cursor models: the high-water mark read back from the committed table.
CURSOR_MACROS = frozenset({"last_value", "initial_value", "is_backfill"})

DEFAULT_BUCKETS = 16

MAX_BUCKETS = 1024

# How a definition or schema change is applied: not part of what the model computes.
LIFECYCLE_SETTINGS = frozenset({"forward_only", "on_destructive_change", "on_additive_change"})

CHANGE_POLICIES = ("error", "warn", "allow", "ignore")


@dataclass(frozen=True)
class MatchedUpdate:
    """One ``WHEN MATCHED [AND condition] THEN UPDATE SET col = expr, ...`` clause (Spark SQL over
    ``source.`` and ``target.`` columns)."""

    condition: str | None
    assignments: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class UniqueKey:
    """Upsert by key: rows whose key is in the run's output replace the stored row, others are inserted.

    ``when_matched`` (SQLMesh's property) says how a matched row is updated instead: the first clause
    whose condition holds sets its columns, the others keep the stored values; no clause holds: unchanged.
    """

    unique_key: tuple[str, ...]
    buckets: int = DEFAULT_BUCKETS
    when_matched: tuple[MatchedUpdate, ...] = ()
    forward_only: bool = False
    on_destructive_change: str = "error"
    on_additive_change: str = "allow"
    name: ClassVar[str] = "INCREMENTAL_BY_UNIQUE_KEY"
    not_in_fingerprint: ClassVar[frozenset[str]] = LIFECYCLE_SETTINGS


@dataclass(frozen=True)
class ScdType2:
    """History of each key with valid_from (inclusive) / valid_to (exclusive, NULL for the current row).

    ``by="time"`` detects a change by a newer ``updated_at_name``; ``by="column"`` by any difference in
    ``columns`` (empty: every column but the key).
    """

    unique_key: tuple[str, ...]
    by: Literal["time", "column"] = "time"
    updated_at_name: str = "updated_at"
    valid_from_name: str = "valid_from"
    valid_to_name: str = "valid_to"
    columns: tuple[str, ...] = ()
    invalidate_hard_deletes: bool = False  # SQLMesh's default: a key missing from the source stays current
    execution_time_as_valid_from: bool = False
    updated_at_as_valid_from: bool = False
    buckets: int = DEFAULT_BUCKETS
    # History cannot be recomputed from a snapshot source: a changed definition applies to new changes
    # only (forward_only), and --full-refresh is refused unless disable_restatement is false.
    forward_only: bool = True
    disable_restatement: bool = True
    on_destructive_change: str = "error"
    on_additive_change: str = "allow"
    name: ClassVar[str] = "SCD_TYPE_2"
    not_in_fingerprint: ClassVar[frozenset[str]] = LIFECYCLE_SETTINGS | {"disable_restatement"}

    @property
    def managed_columns(self) -> tuple[str, str]:
        """Columns the kind adds to the query's output."""
        return (self.valid_from_name, self.valid_to_name)


@dataclass(frozen=True)
class IncrementalByCursor:
    """Append what is new since the high-water mark MAX(cursor) of the committed table."""

    cursor: str
    initial_value: str | int | float | None = None
    on_destructive_change: str = "error"
    on_additive_change: str = "allow"
    name: ClassVar[str] = "INCREMENTAL_BY_CURSOR"
    not_in_fingerprint: ClassVar[frozenset[str]] = LIFECYCLE_SETTINGS


ChangePolicy = Literal["error", "warn", "allow", "ignore"]


@dataclass(frozen=True)
class IncrementalByTimeRange:
    """Rows belong to time intervals; each run replaces exactly the intervals of its window."""

    time_column: str
    time_format: str | None = None
    batch_size: int | None = None
    lookback: int | None = None
    forward_only: bool = False
    on_destructive_change: ChangePolicy = "error"
    on_additive_change: ChangePolicy = "allow"
    safety_overrides: frozenset[str] = frozenset()
    name: ClassVar[str] = "INCREMENTAL_BY_TIME_RANGE"
    not_in_fingerprint: ClassVar[frozenset[str]] = frozenset(
        {"forward_only", "on_destructive_change", "on_additive_change"}
    )


@dataclass(frozen=True)
class Full:
    """Rebuilt from scratch on every run, replaced atomically."""

    name: ClassVar[str] = "FULL"


@dataclass(frozen=True)
class View:
    """A query consumers read through; no data is written unless materialized."""

    materialized: bool = False
    name: ClassVar[str] = "VIEW"


@dataclass(frozen=True)
class Seed:
    """A CSV file loaded as a table, replaced whole (atomically) whenever its content changes."""

    path: str  # as written in the kind
    location: str = ""  # the resolved file (left out of the fingerprint: moving the project rebuilds nothing)
    csv_settings: tuple[tuple[str, str], ...] = ()
    content_hash: str = ""
    name: ClassVar[str] = "SEED"
    not_in_fingerprint: ClassVar[frozenset[str]] = frozenset({"location"})


@dataclass(frozen=True)
class Embedded:
    """No table of its own: its query is inlined into every model that reads it."""

    name: ClassVar[str] = "EMBEDDED"


Kind = Union[IncrementalByTimeRange, Full, View, Seed, Embedded, UniqueKey, ScdType2, IncrementalByCursor]
MergeKind = (UniqueKey, ScdType2, IncrementalByCursor)  # merged into, not replaced by window


def key_columns_missing(kind: UniqueKey | ScdType2 | IncrementalByCursor, outputs: list[str]) -> list[str]:
    """Columns the kind needs that the query does not output.

    >>> key_columns_missing(ScdType2(("id",)), ["id", "name"])
    ['updated_at']
    """
    if isinstance(kind, IncrementalByCursor):
        needed: tuple[str, ...] = (kind.cursor,)
    elif isinstance(kind, ScdType2):
        needed = kind.unique_key + ((kind.updated_at_name,) if kind.by == "time" else ()) + kind.columns
    else:
        needed = kind.unique_key + tuple(c for clause in kind.when_matched for c, _ in clause.assignments)
    return [c for c in dict.fromkeys(needed) if c not in outputs]


def describe_write(kind: Any) -> str | None:
    """How a merge-style kind writes, in one line for ``explain`` (None for other kinds).

    >>> describe_write(UniqueKey(("a", "b"), buckets=8))
    'upsert by unique key (a, b); table partitioned into 8 key buckets, a run rewrites only the buckets it touches'
    """
    if isinstance(kind, UniqueKey):
        return (
            f"upsert by unique key ({', '.join(kind.unique_key)}); table partitioned into {kind.buckets} key "
            "buckets, a run rewrites only the buckets it touches"
        )
    if isinstance(kind, ScdType2):
        change = (
            f"a newer {kind.updated_at_name}"
            if kind.by == "time"
            else "a change in " + (", ".join(kind.columns) or "any column")
        )
        deletes = (
            "deleted keys closed at execution time" if kind.invalidate_hard_deletes else "deleted keys stay current"
        )
        return (
            f"SCD type 2 history by ({', '.join(kind.unique_key)}): {change} closes the current row; "
            f"{kind.valid_from_name} / {kind.valid_to_name} columns; {deletes}; {kind.buckets} key buckets"
        )
    if isinstance(kind, IncrementalByCursor):
        start = f", initial value {kind.initial_value!r}" if kind.initial_value is not None else ""
        return (
            f"append rows past the cursor MAX({kind.cursor}) of the committed table{start}; starts over when "
            "the definition changes"
        )
    return None
