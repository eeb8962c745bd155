"""The merge-style kinds: INCREMENTAL_BY_UNIQUE_KEY, SCD_TYPE_2 (by time / by column), INCREMENTAL_BY_CURSOR.

Pure configuration types and their header reader; :mod:`incremental_assets.model` dispatches to
:func:`read_keyed_kind` for these kind names. Property names are SQLMesh's (unique_key, updated_at_name,
valid_from_name, valid_to_name, columns, invalidate_hard_deletes, execution_time_as_valid_from,
updated_at_as_valid_from) and OndatraSQL's for the cursor (cursor, initial_value).

Keyed tables (unique key and SCD type 2) are partitioned by a hash bucket of the key, so a run rewrites
only the buckets its rows touch, and the whole history of one key lives in one bucket.

>>> UniqueKey(("id",)).name, ScdType2(("id",)).by, IncrementalByCursor("ts").name
('INCREMENTAL_BY_UNIQUE_KEY', 'time', 'INCREMENTAL_BY_CURSOR')
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

KEYED_KINDS = frozenset({"INCREMENTAL_BY_UNIQUE_KEY", "SCD_TYPE_2", "SCD_TYPE_2_BY_TIME", "SCD_TYPE_2_BY_COLUMN", "INCREMENTAL_BY_CURSOR"})
# Macros of cursor models: the high-water mark read back from the committed table.
CURSOR_MACROS = frozenset({"last_value", "initial_value", "is_backfill"})
DEFAULT_BUCKETS = 16
MAX_BUCKETS = 1024


# How a definition or schema change is applied: not part of what the model computes.
LIFECYCLE_SETTINGS = frozenset({"forward_only", "on_destructive_change", "on_additive_change"})
CHANGE_POLICIES = ("error", "warn", "allow", "ignore")


def read_lifecycle(reader: Any, key: str, value: Any, line: int, config: dict[str, Any], *, flags: tuple[str, ...] = ("forward_only",)) -> bool:
    """Read a lifecycle setting into ``config``; False when ``key`` is not one."""
    if key in flags:
        config[key] = reader.flag(value, key)
    elif key in ("on_destructive_change", "on_additive_change"):
        policy = reader.text(value, key).lower()
        if policy not in CHANGE_POLICIES:
            raise reader.fail(line, f"{key} must be error, warn, allow or ignore, found {value.text}")
        config[key] = policy
    else:
        return False
    return True


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
    invalidate_hard_deletes: bool = True
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


def read_keyed_kind(reader: Any, kind: str, props: dict, line: int, metadata: dict[str, str]) -> UniqueKey | ScdType2 | IncrementalByCursor:
    """Build the kind from its properties (``{key: (Value, line)}``); ``reader`` is model.py's _Reader."""
    if kind == "INCREMENTAL_BY_CURSOR":
        return _read_cursor(reader, props, line, metadata)
    if "unique_key" not in props:
        raise reader.fail(line, f"kind {kind} needs a unique_key", hint="add `unique_key id` or `unique_key (a, b)` inside the kind's parentheses")
    value, _ = props.pop("unique_key")
    config: dict[str, Any] = {"unique_key": tuple(n.lower() for n in reader.names(value, "unique_key"))}
    if "buckets" in props:
        bvalue, bline = props.pop("buckets")
        config["buckets"] = reader.integer(bvalue, "buckets", minimum=1)
        if config["buckets"] > MAX_BUCKETS:
            raise reader.fail(bline, f"buckets must be at most {MAX_BUCKETS}, found {config['buckets']}")
    if kind == "INCREMENTAL_BY_UNIQUE_KEY":
        if "when_matched" in props:
            config["when_matched"] = read_when_matched(reader, *props.pop("when_matched"))
        _read_lifecycle_props(reader, props, config)
        _rest_to_metadata(props, metadata)
        return UniqueKey(**config)
    config["by"] = "column" if kind == "SCD_TYPE_2_BY_COLUMN" else "time"
    for key in ("updated_at_name", "valid_from_name", "valid_to_name"):
        if key in props:
            config[key] = reader.text(props.pop(key)[0], key).lower()
    for key in ("invalidate_hard_deletes", "execution_time_as_valid_from", "updated_at_as_valid_from"):
        if key in props:
            config[key] = reader.flag(props.pop(key)[0], key)
    if "columns" in props:
        cvalue, cline = props.pop("columns")
        if config["by"] != "column":
            raise reader.fail(cline, "`columns` belongs to SCD_TYPE_2_BY_COLUMN", hint="use kind SCD_TYPE_2_BY_COLUMN to compare columns")
        names = tuple(n.lower() for n in reader.names(cvalue, "columns"))
        config["columns"] = () if names == ("*",) else names
    elif config["by"] == "column":
        raise reader.fail(line, "kind SCD_TYPE_2_BY_COLUMN needs `columns`", hint="add `columns [name, price]` or `columns *`")
    _read_lifecycle_props(reader, props, config, flags=("forward_only", "disable_restatement"))
    _rest_to_metadata(props, metadata)
    return ScdType2(**config)


def read_when_matched(reader: Any, value: Any, line: int) -> tuple[MatchedUpdate, ...]:
    """Parse ``(WHEN MATCHED [AND cond] THEN UPDATE SET target.col = expr, ...) ...`` with sqlglot.

    >>> class R:
    ...     def fail(self, line, message, hint=None): return ValueError(message)
    >>> class V: text = "(WHEN MATCHED THEN UPDATE SET target.n = COALESCE(source.n, target.n))"
    >>> read_when_matched(R(), V(), 1)
    (MatchedUpdate(condition=None, assignments=(('n', 'COALESCE(source.n, target.n)'),)),)
    """
    import sqlglot
    from sqlglot import exp
    from sqlglot.errors import ParseError, TokenError

    text = value.text.strip()
    if text.startswith("(") and text.endswith(")"):
        text = text[1:-1]
    hint = "write `when_matched (WHEN MATCHED [AND <condition>] THEN UPDATE SET target.<col> = <expr>, ...)`"
    try:
        merge = sqlglot.parse_one(f"MERGE INTO target USING source ON TRUE {text}", read="spark")
    except (ParseError, TokenError) as exc:
        raise reader.fail(line, f"cannot read when_matched: {exc}", hint=hint) from None
    whens = merge.args.get("whens")
    clauses = []
    for when in whens.expressions if whens is not None else []:
        then = when.args.get("then")
        if not when.args.get("matched") or not isinstance(then, exp.Update):
            raise reader.fail(line, f"when_matched supports WHEN MATCHED ... THEN UPDATE SET, found `{when.sql('spark')}`", hint=hint)
        assignments = []
        for eq in then.expressions:
            if not isinstance(eq, exp.EQ) or not isinstance(eq.this, exp.Column):
                raise reader.fail(line, f"cannot read the assignment `{eq.sql('spark')}` in when_matched", hint=hint)
            assignments.append((eq.this.name.lower(), eq.expression.sql("spark")))
        condition = when.args.get("condition")
        clauses.append(MatchedUpdate(condition.sql("spark") if condition is not None else None, tuple(assignments)))
    if not clauses:
        raise reader.fail(line, "when_matched has no WHEN MATCHED clause", hint=hint)
    return tuple(clauses)


def _read_cursor(reader: Any, props: dict, line: int, metadata: dict[str, str]) -> IncrementalByCursor:
    key = "cursor" if "cursor" in props else "cursor_column" if "cursor_column" in props else None
    if key is None:
        raise reader.fail(line, "kind INCREMENTAL_BY_CURSOR needs a cursor column", hint="add `cursor updated_at` inside the kind's parentheses")
    cursor = reader.text(props.pop(key)[0], key).lower()
    initial: str | int | float | None = None
    if "initial_value" in props:
        ivalue, _ = props.pop("initial_value")
        raw = getattr(ivalue, "value", None)
        initial = raw if isinstance(raw, (int, float)) and not isinstance(raw, bool) else reader.text(ivalue, "initial_value")
    config: dict[str, Any] = {}
    _read_lifecycle_props(reader, props, config, flags=())
    _rest_to_metadata(props, metadata)
    return IncrementalByCursor(cursor, initial, **config)


def _read_lifecycle_props(reader: Any, props: dict, config: dict[str, Any], *, flags: tuple[str, ...] = ("forward_only",)) -> None:
    for key in list(props):
        value, line = props[key]
        if read_lifecycle(reader, key, value, line, config, flags=flags):
            del props[key]


def _rest_to_metadata(props: dict, metadata: dict[str, str]) -> None:
    for key, (value, _) in props.items():
        metadata[f"kind.{key}"] = value.text


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
        return f"upsert by unique key ({', '.join(kind.unique_key)}); table partitioned into {kind.buckets} key buckets, a run rewrites only the buckets it touches"
    if isinstance(kind, ScdType2):
        change = f"a newer {kind.updated_at_name}" if kind.by == "time" else "a change in " + (", ".join(kind.columns) or "any column")
        deletes = "deleted keys closed at execution time" if kind.invalidate_hard_deletes else "deleted keys stay current"
        return (
            f"SCD type 2 history by ({', '.join(kind.unique_key)}): {change} closes the current row; "
            f"{kind.valid_from_name} / {kind.valid_to_name} columns; {deletes}; {kind.buckets} key buckets"
        )
    if isinstance(kind, IncrementalByCursor):
        start = f", initial value {kind.initial_value!r}" if kind.initial_value is not None else ""
        return f"append rows past the cursor MAX({kind.cursor}) of the committed table{start}; starts over when the definition changes"
    return None
