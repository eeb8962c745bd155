"""The ``kind`` property of a MODEL header -> one kind value of :mod:`incremental_assets.model.kinds`.

Property names are SQLMesh's (time_column, batch_size, lookback, unique_key, updated_at_name,
valid_from_name, valid_to_name, columns, invalidate_hard_deletes, execution_time_as_valid_from,
updated_at_as_valid_from) and OndatraSQL's for the cursor (cursor, initial_value).
"""

from __future__ import annotations

import json
import logging
from typing import Any, Callable

from incremental_assets.load.header import Call, Items, Literal, Name, Pair, Property, Seq, Value
from incremental_assets.load.materializations import GROUP as MATERIALIZATIONS_GROUP
from incremental_assets.load.materializations import find_materialization
from incremental_assets.load.reader import HeaderReader
from incremental_assets.load.seeds import CSV_SETTINGS
from incremental_assets.model.kinds import (
    CHANGE_POLICIES,
    KEYED_KINDS,
    MAX_BUCKETS,
    SAFETY_OVERRIDE_FLAGS,
    Embedded,
    Full,
    IncrementalByCursor,
    IncrementalByTimeRange,
    Kind,
    KindName,
    MatchedUpdate,
    ScdType2,
    Seed,
    UniqueKey,
    View,
)

KNOWN_KINDS = frozenset(k.value for k in KindName)
LATER_KINDS = {"EXTERNAL", "INCREMENTAL_UNMANAGED", "MANAGED", "INCREMENTAL_BY_PARTITION"}
log = logging.getLogger(__name__)
KindProperties = dict[str, tuple[Value, int]]  # {key: (value, line)} as written inside the kind's parentheses


def read_kind(reader: HeaderReader, prop: Property, metadata: dict[str, str]) -> Kind:
    """The kind named by a ``kind`` property; properties no kind knows go to ``metadata`` as ``kind.<key>``."""
    name, args, line = _kind_call(prop.value)
    if name == "CUSTOM":
        return _custom_kind(reader, _kind_properties(reader, args, name), line, metadata)
    if name in LATER_KINDS:
        raise reader.fail(line, f"kind {name} is not supported yet", hint="use INCREMENTAL_BY_TIME_RANGE, FULL or VIEW")
    if name not in KNOWN_KINDS:
        raise reader.fail(
            line, f"unknown kind '{prop.value.text}'", hint="use one of " + ", ".join(sorted(KNOWN_KINDS))
        )
    kind = KindName(name)
    props = _kind_properties(reader, args, name)
    if kind in KEYED_KINDS:
        return read_keyed_kind(reader, name, props, line, metadata)
    return _READERS[kind](reader, props, line, metadata)


def _custom_kind(reader: HeaderReader, props: KindProperties, line: int, metadata: dict[str, str]) -> Full:
    """SQLMesh's CUSTOM kind names a Python class that writes through SQLMesh's engine adapter (any SQL
    on the target engine, its own create and delete). Here every write is staged by Spark and committed
    to Delta once, under the table's lock, so such a class has nothing it could run on, except one whose
    writes provably replace the whole table with the model's query: that is a FULL model, and runs as one
    (said once in the log). The class is found and judged from its source, never imported
    (:mod:`incremental_assets.load.materializations`)."""
    if "materialization" not in props:
        raise reader.fail(
            line,
            "kind CUSTOM needs a materialization",
            hint="write kind CUSTOM (materialization 'name'), or use a built-in kind",
        )
    value, mline = props.pop("materialization")
    name = reader.text(value, "materialization")
    folders = [parent / "materializations" for parent in list(reader.path.parents)[:4]]
    found = find_materialization(name, folders)
    if found is None:
        raise reader.fail(
            mline,
            f"kind CUSTOM runs materialization '{name}', which was found neither among the installed "
            f"'{MATERIALIZATIONS_GROUP}' entry points nor in a materializations/ folder of the project",
            hint="install the package that provides it (as SQLMesh needs too), or use a built-in kind: " + _INSTEAD,
        )
    where = f"class {found.class_name} in {found.path}:{found.line}" + (f", {found.origin}" if found.origin else "")
    if found.problem:
        raise reader.fail(
            mline,
            f"kind CUSTOM runs materialization '{name}' ({where}), which cannot run here: {found.problem}; "
            "only a class whose insert just replaces the table with the model's query runs (as FULL): other writes "
            "go through SQLMesh's engine adapter, which does not exist here",
            hint="use the built-in kind that writes the same way: " + _INSTEAD,
        )
    log.warning(
        "%s:%s: kind CUSTOM materialization '%s' (%s) only replaces the table with the model's query, so "
        "it runs as FULL",
        reader.path,
        mline,
        name,
        where,
    )
    _rest_to_metadata(props, metadata)
    return Full()


_INSTEAD = (
    "FULL for replace_query, INCREMENTAL_BY_TIME_RANGE for insert_overwrite_by_time_partition, "
    "INCREMENTAL_BY_UNIQUE_KEY for merge, SCD_TYPE_2 for history, or a Python model (@model with execute) "
    "for processing of your own; see docs/sqlmesh.md"
)


def _kind_call(value: Value) -> tuple[str, tuple[Value, ...], int]:
    if isinstance(value, Name):
        return value.value.upper(), (), value.line
    if isinstance(value, Call):
        return value.name.upper(), value.args, value.line
    if (
        isinstance(value, Seq)
        and len(value.values) == 2
        and isinstance(value.values[0], Name)
        and isinstance(value.values[1], Items)
    ):
        return value.values[0].value.upper(), value.values[1].items, value.line
    return "", (), value.line


def _kind_properties(reader: HeaderReader, args: tuple[Value, ...], kind: str) -> KindProperties:
    out: KindProperties = {}
    for arg in args:
        if isinstance(arg, Pair):
            out[arg.key.lower()] = (arg.value, arg.line)
        elif isinstance(arg, Seq) and isinstance(arg.values[0], Name):
            rest = arg.values[1:]
            value = rest[0] if len(rest) == 1 else Seq(rest, arg.line, arg.text)
            out[arg.values[0].value.lower()] = (value, arg.line)
        else:
            raise reader.fail(
                arg.line, f"cannot read '{arg.text}' in kind {kind}", hint="write kind properties as `key value`"
            )
    return out


def _read_embedded(reader: HeaderReader, props: KindProperties, line: int, metadata: dict[str, str]) -> Embedded:
    _rest_to_metadata(props, metadata)
    return Embedded()


def _read_full(reader: HeaderReader, props: KindProperties, line: int, metadata: dict[str, str]) -> Full:
    _rest_to_metadata(props, metadata)
    return Full()


def _read_view(reader: HeaderReader, props: KindProperties, line: int, metadata: dict[str, str]) -> View:
    materialized = reader.flag(props.pop("materialized")[0], "materialized") if "materialized" in props else False
    _rest_to_metadata(props, metadata)
    return View(materialized=materialized)


def _read_time_range(
    reader: HeaderReader, props: KindProperties, line: int, metadata: dict[str, str]
) -> IncrementalByTimeRange:
    if "time_column" not in props:
        raise reader.fail(
            line,
            "kind INCREMENTAL_BY_TIME_RANGE needs a time_column",
            hint="add `time_column <column>` (or `time_column (<column>, '<format>')`) inside the kind's parentheses",
        )
    tc_value, _ = props.pop("time_column")
    time_format = None
    if isinstance(tc_value, Items) and len(tc_value.items) in (1, 2):
        column = reader.text(tc_value.items[0], "time_column")
        if len(tc_value.items) == 2:
            time_format = reader.text(tc_value.items[1], "time_column format")
    else:
        column = reader.text(tc_value, "time_column")
    config: dict[str, Any] = {"time_column": column.lower(), "time_format": time_format}
    overrides: set[str] = set()
    for key, (v, kline) in props.items():
        if key == "batch_size":
            config["batch_size"] = reader.integer(v, "batch_size", minimum=1)
        elif key == "lookback":
            config["lookback"] = reader.integer(v, "lookback")
        elif read_lifecycle(reader, key, v, kline, config):
            pass
        elif key in SAFETY_OVERRIDE_FLAGS:
            if reader.flag(v, key):
                overrides.add(key)
        elif key == "safety_overrides":
            for name in reader.names(v, key):
                if name.lower() not in SAFETY_OVERRIDE_FLAGS:
                    raise reader.fail(
                        kline,
                        f"unknown safety override '{name}'",
                        hint="use " + ", ".join(sorted(SAFETY_OVERRIDE_FLAGS)),
                    )
                overrides.add(name.lower())
        else:
            metadata[f"kind.{key}"] = v.text
    return IncrementalByTimeRange(**config, safety_overrides=frozenset(overrides))


def _read_seed(reader: HeaderReader, props: KindProperties, line: int, metadata: dict[str, str]) -> Seed:
    if "path" not in props:
        raise reader.fail(line, "kind SEED needs a path", hint="write kind SEED (path 'seeds/name.csv')")
    path = reader.text(props.pop("path")[0], "path")
    settings: list[tuple[str, str]] = []
    if "csv_settings" in props:
        value, sline = props.pop("csv_settings")
        pairs = value.items if isinstance(value, Items) else (value,)
        for pair in pairs:
            if not isinstance(pair, Pair) or pair.key.lower() not in CSV_SETTINGS:
                raise reader.fail(
                    getattr(pair, "line", sline),
                    f"cannot read csv setting '{pair.text}'",
                    hint="use delimiter = ';', quotechar = '\"', escapechar = '\\\\', na_values = ['-'] "
                    "or keep_default_na = false",
                )
            settings.append((pair.key.lower(), _csv_setting(reader, pair)))
    if "batch_size" in props:  # SQLMesh's insert batching: Spark reads the CSV in one go
        metadata["kind.batch_size"] = str(reader.integer(props.pop("batch_size")[0], "batch_size", minimum=1))
    for key, (_, kline) in props.items():
        raise reader.fail(kline, f"unknown property '{key}' in kind SEED", hint="use path, csv_settings and batch_size")
    # `$root/...` is SQLMesh's project folder: look for the rest above the model file.
    path = path[len("$root/") :] if path.startswith("$root/") else path
    # Relative to the model file, or to a folder above it (the project folder for `seeds/x.csv`).
    for folder in (reader.path.parent, *reader.path.parent.parents):
        if (folder / path).is_file():
            return Seed(path, str((folder / path).resolve()), tuple(settings))
    raise reader.fail(
        line,
        f"seed file '{path}' does not exist",
        hint="give the CSV's path relative to the project folder or the model file",
    )


def _csv_setting(reader: HeaderReader, pair: Pair) -> str:
    """One csv setting of a SEED as text: ``keep_default_na`` true or false, ``na_values`` a list for every
    column (``['-', 'n.a.']``) or per column (``(a := ['-'], b := ['?'])``) as JSON, the others as written."""
    key = pair.key.lower()
    if key == "keep_default_na":
        return str(reader.flag(pair.value, key)).lower()
    if key != "na_values":
        return reader.text(pair.value, pair.key)
    items = pair.value.items if isinstance(pair.value, Items) else (pair.value,)
    if items and all(isinstance(i, Pair) for i in items):
        return json.dumps({i.key.lower(): _na_list(reader, i.value) for i in items if isinstance(i, Pair)})
    return json.dumps(_na_list(reader, pair.value))


def _na_list(reader: HeaderReader, value: Value) -> list[str]:
    """The values of an ``na_values`` list as the texts they match (a number also as pandas writes it)."""
    out: list[str] = []
    for item in value.items if isinstance(value, Items) else (value,):
        if isinstance(item, Literal) and isinstance(item.value, (int, float)) and not isinstance(item.value, bool):
            number = float(item.value)
            out += [str(item.value), repr(number)] + ([str(int(number))] if number.is_integer() else [])
        else:
            out.append(reader.text(item, "na_values"))
    return sorted(set(out))


def read_lifecycle(
    reader: HeaderReader,
    key: str,
    value: Any,
    line: int,
    config: dict[str, Any],
    *,
    flags: tuple[str, ...] = ("forward_only",),
) -> bool:
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


def read_keyed_kind(
    reader: HeaderReader, kind: str, props: dict, line: int, metadata: dict[str, str]
) -> UniqueKey | ScdType2 | IncrementalByCursor:
    """Build the kind from its properties (``{key: (Value, line)}``); ``reader`` is model.py's HeaderReader."""
    if kind == "INCREMENTAL_BY_CURSOR":
        return _read_cursor(reader, props, line, metadata)
    if "unique_key" not in props:
        raise reader.fail(
            line,
            f"kind {kind} needs a unique_key",
            hint="add `unique_key id` or `unique_key (a, b)` inside the kind's parentheses",
        )
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
            raise reader.fail(
                cline,
                "`columns` belongs to SCD_TYPE_2_BY_COLUMN",
                hint="use kind SCD_TYPE_2_BY_COLUMN to compare columns",
            )
        names = tuple(n.lower() for n in reader.names(cvalue, "columns"))
        config["columns"] = () if names == ("*",) else names
    elif config["by"] == "column":
        raise reader.fail(
            line, "kind SCD_TYPE_2_BY_COLUMN needs `columns`", hint="add `columns [name, price]` or `columns *`"
        )
    _read_lifecycle_props(reader, props, config, flags=("forward_only", "disable_restatement"))
    _rest_to_metadata(props, metadata)
    return ScdType2(**config)


def read_when_matched(reader: HeaderReader, value: Any, line: int) -> tuple[MatchedUpdate, ...]:
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
            raise reader.fail(
                line, f"when_matched supports WHEN MATCHED ... THEN UPDATE SET, found `{when.sql('spark')}`", hint=hint
            )
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


def _read_cursor(reader: HeaderReader, props: dict, line: int, metadata: dict[str, str]) -> IncrementalByCursor:
    key = "cursor" if "cursor" in props else "cursor_column" if "cursor_column" in props else None
    if key is None:
        raise reader.fail(
            line,
            "kind INCREMENTAL_BY_CURSOR needs a cursor column",
            hint="add `cursor updated_at` inside the kind's parentheses",
        )
    cursor = reader.text(props.pop(key)[0], key).lower()
    initial: str | int | float | None = None
    if "initial_value" in props:
        ivalue, _ = props.pop("initial_value")
        raw = getattr(ivalue, "value", None)
        initial = (
            raw if isinstance(raw, (int, float)) and not isinstance(raw, bool) else reader.text(ivalue, "initial_value")
        )
    config: dict[str, Any] = {}
    _read_lifecycle_props(reader, props, config, flags=())
    _rest_to_metadata(props, metadata)
    return IncrementalByCursor(cursor, initial, **config)


def _read_lifecycle_props(
    reader: HeaderReader, props: dict, config: dict[str, Any], *, flags: tuple[str, ...] = ("forward_only",)
) -> None:
    for key in list(props):
        value, line = props[key]
        if read_lifecycle(reader, key, value, line, config, flags=flags):
            del props[key]


def _rest_to_metadata(props: dict, metadata: dict[str, str]) -> None:
    for key, (value, _) in props.items():
        metadata[f"kind.{key}"] = value.text


_READERS: dict[KindName, Callable[[HeaderReader, KindProperties, int, dict[str, str]], Kind]] = {
    KindName.INCREMENTAL_BY_TIME_RANGE: _read_time_range,
    KindName.FULL: _read_full,
    KindName.VIEW: _read_view,
    KindName.SEED: _read_seed,
    KindName.EMBEDDED: _read_embedded,
}
