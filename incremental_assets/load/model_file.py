"""SQL models: the kinds as frozen types, and ``parse_model_file(path) -> SqlModel``.

A model file is a SQLMesh-style ``MODEL ( ... );`` header followed by exactly one query. The query is
parsed with sqlglot in the model's dialect (Spark by default) and kept as an AST; SQLMesh macros such as
``@start_ds`` become ``exp.Parameter`` nodes that :mod:`incremental_assets.macros` renders later.

>>> import tempfile, pathlib
>>> p = pathlib.Path(tempfile.mkdtemp()) / "m.sql"
>>> _ = p.write_text("MODEL (name shop.daily, kind FULL);\\nSELECT 1 AS x")
>>> m = parse_model_file(p)
>>> m.name, m.kind.name, m.schema
('shop.daily', 'FULL', 'shop')
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from functools import cached_property
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar, Literal as TypingLiteral, Mapping, Union

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from incremental_assets.audits import Audit, parse_audits
from incremental_assets.errors import ModelFileError, WindowError
from incremental_assets.keyed_kinds import CURSOR_MACROS, KEYED_KINDS, IncrementalByCursor, ScdType2, UniqueKey, key_columns_missing, read_keyed_kind, read_lifecycle
from incremental_assets.header import Call, Items, Literal, Name, Pair, Property, Seq, Value, parse_header, split_model_file
from incremental_assets.time_window import INTERVAL_UNITS, IntervalUnit, floor, to_utc, unit_from_cron

ChangePolicy = TypingLiteral["error", "warn", "allow", "ignore"]
SAFETY_OVERRIDES = frozenset(
    {
        "allow_window_functions",
        "allow_having",
        "allow_limit",
        "allow_subqueries",
        "allow_nondeterministic",
        "allow_distinct",
        "allow_aggregates",
    }
)

# Macros a query may use; each is rendered to a typed literal for the run window.
DATE_MACROS = frozenset(
    f"{edge}_{suffix}"
    for edge in ("start", "end", "execution")
    for suffix in ("ds", "date", "ts", "dt", "epoch", "millis")
) | {"this_model"}


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
    not_in_fingerprint: ClassVar[frozenset[str]] = frozenset({"forward_only", "on_destructive_change", "on_additive_change"})


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


@dataclass(frozen=True)
class TableReference:
    """A table the query reads, by its model or source name, with the line it appears on."""

    name: str
    line: int | None


@dataclass(frozen=True, eq=False)
class SqlModel:
    """A parsed model file: configuration plus the query AST (macros not yet rendered)."""

    name: str
    path: Path
    kind: Kind
    query: exp.Query
    dialect: str = "spark"
    start: datetime | None = None
    end: datetime | None = None
    cron: str | None = None
    interval_unit: IntervalUnit | None = None
    owner: str | None = None
    tags: tuple[str, ...] = ()
    grains: tuple[str, ...] = ()
    description: str | None = None
    column_descriptions: Mapping[str, str] = field(default_factory=dict)
    columns: Mapping[str, str] = field(default_factory=dict)
    enabled: bool = True
    metadata: Mapping[str, str] = field(default_factory=dict)
    references: tuple[TableReference, ...] = ()
    header_line: int = 1
    query_line: int = 1
    lines: Mapping[str, int] = field(default_factory=dict)
    audits: tuple[Audit, ...] = ()
    embeds: tuple[str, ...] = ()  # EMBEDDED models inlined into the query

    @property
    def schema(self) -> str:
        return self.name.rsplit(".", 1)[0] if "." in self.name else "default"

    @property
    def table(self) -> str:
        return self.name.rsplit(".", 1)[-1]

    @property
    def is_incremental(self) -> bool:
        return isinstance(self.kind, IncrementalByTimeRange)

    @property
    def is_merge_style(self) -> bool:
        """Unique key, SCD type 2 or cursor: the table is merged into rather than replaced by window."""
        return isinstance(self.kind, (UniqueKey, ScdType2, IncrementalByCursor))

    @property
    def forward_only(self) -> bool:
        """A changed definition applies to new intervals only; the existing ones are kept."""
        return bool(getattr(self.kind, "forward_only", False))

    @property
    def has_table(self) -> bool:
        """Whether a run writes data (EMBEDDED models and plain views write none)."""
        return not isinstance(self.kind, Embedded) and not (isinstance(self.kind, View) and not self.kind.materialized)

    @property
    def time_column(self) -> str | None:
        return self.kind.time_column if isinstance(self.kind, IncrementalByTimeRange) else None

    @property
    def depends_on(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(r.name for r in self.references))

    def line_of(self, key: str) -> int:
        return self.lines.get(key, self.header_line)

    @cached_property
    def fingerprint(self) -> str:
        """sha256 of what decides the data: the normalized query, the kind and the time layout.

        Owner, tags and descriptions are left out: changing them does not change a single row; so are a
        kind's lifecycle settings (forward_only, on_*_change), which say how a change is applied.
        """
        skip = getattr(self.kind, "not_in_fingerprint", frozenset())
        kind = {k: sorted(v) if isinstance(v, frozenset) else v for k, v in vars(self.kind).items() if k not in skip}
        payload = {
            "query": normalized_sql(self.query),
            "kind": self.kind.name,
            "kind_config": kind,
            "interval_unit": self.interval_unit,
            "start": self.start.isoformat() if self.start else None,
            "columns": dict(self.columns),
            "dialect": "spark",
        }
        return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


def normalized_sql(query: exp.Expression) -> str:
    """The query as canonical Spark SQL: comments and formatting do not change the fingerprint."""
    return query.sql(dialect="spark", comments=False, normalize=True)


# ---------------------------------------------------------------------------------------------------
# Query parsing

_MACRO = re.compile(r"@([A-Za-z_][A-Za-z0-9_]*)")
_PLACEHOLDER = "__ia_macro__"


def _protect_macros(sql: str) -> str:
    """Turn ``@name`` outside strings and comments into an identifier every dialect can parse."""
    out: list[str] = []
    i, n = 0, len(sql)
    while i < n:
        ch = sql[i]
        if ch in "'\"`":
            j = i + 1
            while j < n and sql[j] != ch:
                j += 2 if sql[j] == "\\" else 1
            out.append(sql[i : j + 1])
            i = j + 1
        elif sql.startswith("--", i):
            j = sql.find("\n", i)
            j = n if j < 0 else j
            out.append(sql[i:j])
            i = j
        elif sql.startswith("/*", i):
            j = sql.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(sql[i:j])
            i = j
        elif ch == "@" and (m := _MACRO.match(sql, i)):
            out.append(_PLACEHOLDER + m.group(1))
            i = m.end()
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def _restore_macros(node: exp.Expression) -> exp.Expression:
    if isinstance(node, exp.Column) and not node.table and node.name.startswith(_PLACEHOLDER):
        param = exp.Parameter(this=exp.var(node.name[len(_PLACEHOLDER) :].lower()))
        param.meta.update(node.this.meta)
        return param
    if isinstance(node, (exp.Anonymous,)) and str(node.this).startswith(_PLACEHOLDER):
        return exp.Parameter(this=exp.var(str(node.this)[len(_PLACEHOLDER) :].lower()), expressions=node.expressions)
    return node


def parse_query(
    sql: str, *, dialect: str = "spark", path: str | Path = "<query>", line_offset: int = 0, this_model: str | None = None
) -> exp.Query:
    """Parse exactly one query; macros become ``exp.Parameter`` nodes.

    >>> q = parse_query("SELECT a FROM t WHERE ds BETWEEN @start_ds AND @end_ds")
    >>> sorted(p.name for p in q.find_all(exp.Parameter))
    ['end_ds', 'start_ds']
    """
    try:
        statements = [s for s in sqlglot.parse(_protect_macros(sql), read=dialect) if s is not None]
    except ParseError as exc:
        first = exc.errors[0] if exc.errors else {}
        line = (first.get("line") or 1) + line_offset
        desc = first.get("description") or str(exc)
        raise ModelFileError(path, line, f"cannot parse the query ({dialect}): {desc}", hint="fix the SQL syntax") from None
    except TokenError as exc:
        raise ModelFileError(path, line_offset + 1, f"cannot read the query: {exc}") from None
    if not statements:
        raise ModelFileError(path, line_offset + 1, "the model has no query", hint="write one SELECT after the MODEL header")
    if len(statements) > 1:
        raise ModelFileError(
            path,
            _node_line(statements[1], line_offset) or line_offset + 1,
            f"the model has {len(statements)} statements; a model holds exactly one query",
            hint="move the other statements into their own model files",
        )
    query = statements[0]
    if not isinstance(query, exp.Query):
        raise ModelFileError(
            path, line_offset + 1, f"a model's body must be a query (SELECT / WITH / UNION), found {query.key.upper()}"
        )
    query = query.transform(_restore_macros, copy=False)
    if this_model is not None:
        # `FROM @this_model` reads the model's own table: name it, so analysis sees the self-reference.
        for table in list(query.find_all(exp.Table)):
            if table.name == _PLACEHOLDER + "this_model" and not table.db:
                own = exp.to_table(this_model)
                own.set("alias", table.args.get("alias") or exp.TableAlias(this=exp.to_identifier(own.name)))
                own.this.meta.update(table.this.meta)
                table.replace(own)
    # Carry line numbers relative to the file.
    for node in query.walk():
        if "line" in node.meta:
            node.meta["line"] += line_offset
    for param in query.find_all(exp.Parameter):
        if param.name not in DATE_MACROS | CURSOR_MACROS:
            raise ModelFileError(
                path,
                _node_line(param, 0) or line_offset + 1,
                f"unknown macro @{param.name}",
                hint="use one of " + ", ".join("@" + m for m in sorted(DATE_MACROS)),
            )
    return query  # type: ignore[return-value]


def _node_line(node: exp.Expression, offset: int) -> int | None:
    for sub in node.walk():
        line = sub.meta.get("line")
        if line is not None:
            return line + offset
    return None


def table_references(query: exp.Expression) -> tuple[TableReference, ...]:
    """Tables the query reads (CTE names excluded), lower-cased ``schema.table`` names, in order."""
    cte_names = {cte.alias_or_name.lower() for cte in query.find_all(exp.CTE)}
    refs: list[TableReference] = []
    for table in query.find_all(exp.Table):
        if not table.name:
            continue
        name = table_name(table)
        if not table.db and name in cte_names:
            continue
        refs.append(TableReference(name, table.this.meta.get("line") if table.this else None))
    return tuple(refs)


def table_name(table: exp.Table) -> str:
    parts = [p for p in (table.catalog, table.db, table.name) if p]
    return ".".join(parts).lower()


# ---------------------------------------------------------------------------------------------------
# Header interpretation

KNOWN_PROPERTIES = {
    "name",
    "kind",
    "dialect",
    "start",
    "end",
    "cron",
    "interval_unit",
    "owner",
    "tags",
    "grain",
    "grains",
    "description",
    "column_descriptions",
    "columns",
    "enabled",
}

KNOWN_KINDS = {"INCREMENTAL_BY_TIME_RANGE", "FULL", "VIEW", "SEED", "EMBEDDED"} | KEYED_KINDS
LATER_KINDS = {"EXTERNAL", "INCREMENTAL_UNMANAGED", "MANAGED"}


class _Reader:
    """Interprets header values for one file, raising errors with that file's path and lines."""

    def __init__(self, path: Path):
        self.path = path

    def fail(self, line: int | None, message: str, hint: str | None = None) -> ModelFileError:
        return ModelFileError(self.path, line, message, hint=hint)

    def text(self, v: Value, what: str) -> str:
        if isinstance(v, Literal) and isinstance(v.value, str):
            return v.value
        if isinstance(v, Name):
            return v.value
        raise self.fail(v.line, f"{what} must be a name or a quoted string, found {v.text}")

    def flag(self, v: Value, what: str) -> bool:
        if isinstance(v, Literal) and isinstance(v.value, bool):
            return v.value
        if isinstance(v, (Name, Literal)) and str(getattr(v, "value", "")).lower() in ("true", "false"):
            return str(v.value).lower() == "true"
        raise self.fail(v.line, f"{what} must be true or false, found {v.text}")

    def integer(self, v: Value, what: str, minimum: int = 0) -> int:
        if isinstance(v, Literal) and isinstance(v.value, int) and not isinstance(v.value, bool) and v.value >= minimum:
            return v.value
        raise self.fail(v.line, f"{what} must be a whole number >= {minimum}, found {v.text}")

    def names(self, v: Value, what: str) -> tuple[str, ...]:
        if isinstance(v, Items):
            return tuple(self.text(i, what) for i in v.items)
        return (self.text(v, what),)

    def instant(self, v: Value, what: str) -> datetime:
        if isinstance(v, Literal) and isinstance(v.value, int) and not isinstance(v.value, bool):
            return to_utc(datetime.utcfromtimestamp(v.value / 1000))
        raw = self.text(v, what)
        try:
            return to_utc(raw)
        except WindowError:
            raise self.fail(v.line, f"{what} '{raw}' is not a date", hint="write it as 'YYYY-MM-DD'") from None


def _kind_call(value: Value) -> tuple[str, tuple[Value, ...], int]:
    if isinstance(value, Name):
        return value.value.upper(), (), value.line
    if isinstance(value, Call):
        return value.name.upper(), value.args, value.line
    if isinstance(value, Seq) and len(value.values) == 2 and isinstance(value.values[0], Name) and isinstance(value.values[1], Items):
        return value.values[0].value.upper(), value.values[1].items, value.line
    return "", (), value.line


def _kind_properties(reader: _Reader, args: tuple[Value, ...], kind: str) -> dict[str, tuple[Value, int]]:
    out: dict[str, tuple[Value, int]] = {}
    for arg in args:
        if isinstance(arg, Pair):
            out[arg.key.lower()] = (arg.value, arg.line)
        elif isinstance(arg, Seq) and isinstance(arg.values[0], Name):
            rest = arg.values[1:]
            value = rest[0] if len(rest) == 1 else Seq(rest, arg.line, arg.text)
            out[arg.values[0].value.lower()] = (value, arg.line)
        else:
            raise reader.fail(arg.line, f"cannot read '{arg.text}' in kind {kind}", hint="write kind properties as `key value`")
    return out


def _read_kind(reader: _Reader, prop: Property, metadata: dict[str, str]) -> Kind:
    kind, args, line = _kind_call(prop.value)
    if kind in LATER_KINDS:
        raise reader.fail(line, f"kind {kind} is not supported yet", hint="use INCREMENTAL_BY_TIME_RANGE, FULL or VIEW")
    if kind not in KNOWN_KINDS:
        raise reader.fail(
            line,
            f"unknown kind '{prop.value.text}'",
            hint="use one of " + ", ".join(sorted(KNOWN_KINDS)),
        )
    props = _kind_properties(reader, args, kind)
    if kind in KEYED_KINDS:
        return read_keyed_kind(reader, kind, props, line, metadata)
    if kind == "SEED":
        return _read_seed_kind(reader, props, line)
    if kind == "EMBEDDED":
        for key, (v, _) in props.items():
            metadata[f"kind.{key}"] = v.text
        return Embedded()
    if kind == "FULL":
        for key, (v, _) in props.items():
            metadata[f"kind.{key}"] = v.text
        return Full()
    if kind == "VIEW":
        materialized = False
        for key, (v, _) in props.items():
            if key == "materialized":
                materialized = reader.flag(v, "materialized")
            else:
                metadata[f"kind.{key}"] = v.text
        return View(materialized=materialized)
    # INCREMENTAL_BY_TIME_RANGE
    if "time_column" not in props:
        raise reader.fail(
            line,
            "kind INCREMENTAL_BY_TIME_RANGE needs a time_column",
            hint="add `time_column <column>` (or `time_column (<column>, '<format>')`) inside the kind's parentheses",
        )
    tc_value, tc_line = props.pop("time_column")
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
        elif key in SAFETY_OVERRIDES:
            if reader.flag(v, key):
                overrides.add(key)
        elif key == "safety_overrides":
            for name in reader.names(v, key):
                if name.lower() not in SAFETY_OVERRIDES:
                    raise reader.fail(kline, f"unknown safety override '{name}'", hint="use " + ", ".join(sorted(SAFETY_OVERRIDES)))
                overrides.add(name.lower())
        else:
            metadata[f"kind.{key}"] = v.text
    return IncrementalByTimeRange(**config, safety_overrides=frozenset(overrides))


def _read_seed_kind(reader: _Reader, props: dict[str, tuple[Value, int]], line: int) -> Seed:
    from incremental_assets.seeds import CSV_SETTINGS

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
                    getattr(pair, "line", sline), f"cannot read csv setting '{pair.text}'", hint="use " + ", ".join(f"{k} = ','" for k in CSV_SETTINGS)
                )
            settings.append((pair.key.lower(), reader.text(pair.value, pair.key)))
    for key, (_, kline) in props.items():
        raise reader.fail(kline, f"unknown property '{key}' in kind SEED", hint="use path and csv_settings")
    # Relative to the model file, or to a folder above it (the project folder for `seeds/x.csv`).
    for folder in (reader.path.parent, *reader.path.parent.parents):
        if (folder / path).is_file():
            return Seed(path, str((folder / path).resolve()), tuple(settings))
    raise reader.fail(line, f"seed file '{path}' does not exist", hint="give the CSV's path relative to the project folder or the model file")


def _read_columns(reader: _Reader, v: Value, dialect: str) -> dict[str, str]:
    if not isinstance(v, Items) or v.bracket != "(":
        raise reader.fail(v.line, "columns must be a list like (id INT, ds DATE)")
    out: dict[str, str] = {}
    for item in v.items:
        if not isinstance(item, Seq) or not isinstance(item.values[0], Name):
            raise reader.fail(item.line, f"cannot read column '{item.text}'", hint="write `name TYPE`")
        col = item.values[0].value.lower()
        type_text = item.text[len(item.values[0].text) :].strip()
        try:
            dtype = exp.DataType.build(type_text, dialect=dialect)
        except (ParseError, TokenError, ValueError):
            raise reader.fail(item.line, f"unknown type '{type_text}' for column {col}") from None
        out[col] = dtype.sql(dialect="spark")
    return out


def parse_model_file(path: str | Path, *, default_dialect: str = "spark", text: str | None = None) -> SqlModel:
    """Read one model file; raise ModelFileError naming the file and line for anything wrong."""
    path = Path(path)
    if text is None:
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise ModelFileError(path, None, "the file is not UTF-8 text") from None
    reader = _Reader(path)
    split = split_model_file(text, path)
    header = parse_header(split.header_text, path, split.header_line - 1)

    seen: dict[str, Property] = {}
    for prop in header.properties:
        if prop.key in seen:
            raise reader.fail(prop.line, f"property '{prop.key}' is given twice (first on line {seen[prop.key].line})")
        seen[prop.key] = prop
    if "name" not in seen:
        raise reader.fail(header.line, "the MODEL header has no name", hint="add `name schema.table`")
    if "kind" not in seen:
        raise reader.fail(header.line, "the MODEL header has no kind", hint="add `kind FULL` or another kind")

    metadata: dict[str, str] = {}
    values: dict[str, Any] = {}
    dialect = default_dialect
    if "dialect" in seen:
        dialect = reader.text(seen["dialect"].value, "dialect").lower()
        try:
            sqlglot.Dialect.get_or_raise(dialect)
        except ValueError:
            raise reader.fail(seen["dialect"].line, f"unknown SQL dialect '{dialect}'", hint="use spark, duckdb, bigquery, snowflake, ...") from None

    name = reader.text(seen["name"].value, "name").lower()
    if not re.fullmatch(r"[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*){0,2}", name):
        raise reader.fail(seen["name"].line, f"model name '{name}' is not a table name", hint="use schema.table")
    kind = _read_kind(reader, seen["kind"], metadata)

    for key, prop in seen.items():
        v = prop.value
        if key in ("name", "kind", "dialect"):
            continue
        if key in ("start", "end"):
            values[key] = reader.instant(v, key)
        elif key == "cron":
            values["cron"] = reader.text(v, "cron")
        elif key == "interval_unit":
            unit = reader.text(v, "interval_unit").lower()
            if unit not in INTERVAL_UNITS:
                raise reader.fail(prop.line, f"unknown interval_unit '{unit}'", hint="use one of " + ", ".join(INTERVAL_UNITS))
            values["interval_unit"] = unit
        elif key == "owner":
            values["owner"] = reader.text(v, "owner")
        elif key == "tags":
            values["tags"] = reader.names(v, "tags")
        elif key in ("grain", "grains"):
            values["grains"] = tuple(n.lower() for n in reader.names(v, key))
        elif key == "description":
            values["description"] = reader.text(v, "description")
        elif key == "column_descriptions":
            if not isinstance(v, Items) or not all(isinstance(i, Pair) for i in v.items):
                raise reader.fail(prop.line, "column_descriptions must look like (col = 'text', ...)")
            values["column_descriptions"] = {i.key.lower(): reader.text(i.value, i.key) for i in v.items}  # type: ignore[union-attr]
        elif key == "columns":
            values["columns"] = _read_columns(reader, v, dialect)
        elif key == "enabled":
            values["enabled"] = reader.flag(v, "enabled")
        elif key in ("audits", "assertions"):
            values["audits"] = values.get("audits", ()) + parse_audits(v, path, origin=key)
        else:
            metadata[key] = v.text

    if isinstance(kind, IncrementalByTimeRange):
        unit = values.get("interval_unit")
        if unit is None and values.get("cron"):
            unit = unit_from_cron(values["cron"])
            if unit is None:
                raise reader.fail(
                    seen["cron"].line,
                    f"cannot derive an interval unit from cron '{values['cron']}'",
                    hint="add `interval_unit day` (or hour, week, month, quarter, year)",
                )
        values["interval_unit"] = unit or "day"
        if "start" not in values:
            raise reader.fail(
                header.line,
                f"incremental model {name} has no start",
                hint="add `start 'YYYY-MM-DD'`: intervals are counted from it",
            )
        start = values["start"]
        if floor(start, values["interval_unit"]) != start:
            raise reader.fail(
                seen["start"].line,
                f"start {start.date().isoformat()} is not on a {values['interval_unit']} boundary",
                hint=f"use {floor(start, values['interval_unit']).date().isoformat()} (weeks start on Sunday)",
            )

    if isinstance(kind, Seed):
        kind, query = _seed_query(reader, kind, values, split.query_text, seen["kind"].line)
        references: tuple[TableReference, ...] = ()
    else:
        query = parse_query(split.query_text, dialect=dialect, path=path, line_offset=split.query_line - 1, this_model=name)
        references = table_references(query)
    if isinstance(kind, IncrementalByTimeRange):
        _check_time_column(reader, query, kind.time_column, seen["kind"].line, values.get("columns", {}))
    _check_keyed_kind(reader, query, kind, seen["kind"].line)

    lines = {key: prop.line for key, prop in seen.items()}
    return SqlModel(
        name=name,
        path=path,
        kind=kind,
        query=query,
        dialect=dialect,
        references=references,
        metadata=metadata,
        header_line=header.line,
        query_line=split.query_line,
        lines=lines,
        **values,
    )


SEED_VIEW = "__ia_seed"


def _seed_query(reader: _Reader, kind: Seed, values: dict[str, Any], query_text: str, line: int) -> tuple[Seed, exp.Query]:
    """Check the CSV (types, row shapes), fix the model's columns, and select them from the seed's view."""
    from incremental_assets.seeds import read_seed

    if query_text.strip().strip(";").strip():
        raise reader.fail(line, "a SEED model has no query: its rows come from the CSV file", hint="remove the query after the MODEL header")
    seed = read_seed(Path(kind.location), dict(kind.csv_settings), values.get("columns"))
    values["columns"] = seed.columns
    query = exp.select(*(exp.column(c, quoted=True) for c in seed.columns)).from_(SEED_VIEW)
    return Seed(kind.path, kind.location, kind.csv_settings, seed.content_hash), query


def output_columns(query: exp.Query) -> list[str] | None:
    """Names of the columns the query outputs, or None when a ``*`` hides them."""
    select = query
    while isinstance(select, exp.SetOperation):
        select = select.left  # type: ignore[assignment]
    if isinstance(select, exp.Subquery):
        select = select.this
    names: list[str] = []
    for projection in select.selects:
        if isinstance(projection, exp.Star) or (isinstance(projection, exp.Column) and isinstance(projection.this, exp.Star)):
            return None
        names.append(projection.alias_or_name.lower())
    return names


def _check_time_column(reader: _Reader, query: exp.Query, column: str, line: int, declared: Mapping[str, str]) -> None:
    names = output_columns(query)
    if names is None:
        if declared and column not in declared:
            raise reader.fail(line, f"time_column '{column}' is not among the declared columns")
        return
    if column not in names:
        raise reader.fail(
            line,
            f"time_column '{column}' is not an output column of the query (outputs: {', '.join(names)})",
            hint=f"select the time column, e.g. `... AS {column}`, or name the right column in the kind",
        )


def _check_keyed_kind(reader: _Reader, query: exp.Query, kind: Kind, line: int) -> None:
    """Key, cursor and SCD columns must be outputs; cursor macros belong to cursor models only."""
    if not isinstance(kind, IncrementalByCursor):
        for param in query.find_all(exp.Parameter):
            if param.name in CURSOR_MACROS:
                raise reader.fail(
                    _node_line(param, 0) or line,
                    f"@{param.name} is a macro of INCREMENTAL_BY_CURSOR models",
                    hint="use kind INCREMENTAL_BY_CURSOR (cursor <column>) or a date macro",
                )
    if not isinstance(kind, (UniqueKey, ScdType2, IncrementalByCursor)):
        return
    names = output_columns(query)
    missing = key_columns_missing(kind, names) if names is not None else []
    if missing:
        raise reader.fail(
            line,
            f"kind {kind.name} needs column(s) {', '.join(missing)}, which the query does not output (outputs: {', '.join(names or [])})",
            hint="select them, or name the right columns in the kind",
        )
    if isinstance(kind, ScdType2) and names is not None:
        clash = [c for c in (kind.valid_from_name, kind.valid_to_name) if c in names]
        if clash:
            raise reader.fail(line, f"the query outputs {', '.join(clash)}, which SCD_TYPE_2 adds itself", hint="rename the column or set valid_from_name / valid_to_name")
