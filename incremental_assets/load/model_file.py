"""A model file -> :class:`~incremental_assets.model.sql_model.SqlModel`.

A model file is a SQLMesh-style ``MODEL ( ... );`` header followed by exactly one query. The header is
read by :mod:`~incremental_assets.load.header`, the kind by :mod:`~incremental_assets.load.kinds`, the
query by :mod:`~incremental_assets.load.query` (in the model's dialect, Spark by default).

>>> import tempfile, pathlib
>>> p = pathlib.Path(tempfile.mkdtemp()) / "m.sql"
>>> _ = p.write_text("MODEL (name shop.daily, kind FULL);\\nSELECT 1 AS x")
>>> m = parse_model_file(p)
>>> m.name, m.kind.name, m.schema
('shop.daily', 'FULL', 'shop')
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable, Mapping

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from incremental_assets.errors import ModelFileError
from incremental_assets.load.audits import expand_audit_arguments, parse_audits, split_inline_audits
from incremental_assets.load.header import (
    Header,
    Items,
    Literal,
    Name,
    Pair,
    Property,
    Seq,
    SplitFile,
    Value,
    check_file_size,
    parse_header,
    read_utf8,
    split_model_file,
)
from incremental_assets.load.jinja import render_jinja_blocks
from incremental_assets.load.kinds import read_kind
from incremental_assets.load.macros.evaluator import MacroContext, MacroEvaluator
from incremental_assets.load.macros.operators import MacroError
from incremental_assets.load.query import (
    parse_model_body,
    table_references,
)
from incremental_assets.load.query_checks import (
    check_event_time_column,
    check_keyed_kind,
    check_spark_equivalent,
    check_time_column,
)
from incremental_assets.load.reader import HeaderReader
from incremental_assets.load.seeds import read_seed
from incremental_assets.model import clock
from incremental_assets.model.cron import CRON_HINT, cron_problem
from incremental_assets.model.intervals import IntervalUnit, relative_instant, unit_from_cron
from incremental_assets.model.kinds import (
    SAFETY_OVERRIDE_FLAGS,
    IncrementalByTimeRange,
    Kind,
    Seed,
)
from incremental_assets.model.sql_model import SEED_VIEW, SqlModel, TableReference

log = logging.getLogger(__name__)
_NAME = re.compile(r"[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*){0,2}")


def parse_model_file(
    path: str | Path,
    *,
    default_dialect: str = "spark",
    text: str | None = None,
    defaults: Mapping[str, str] | None = None,
    variables: Mapping[str, Any] | None = None,
    macros: MacroContext | None = None,
) -> SqlModel:
    """Read one model file; raise ModelFileError naming the file and line for anything wrong.

    ``defaults`` are header properties (as header text) of the project's ``model_defaults``, applied where
    the header does not set them; a header without ``kind`` is a VIEW, as in SQLMesh. ``variables`` are
    the project's (Jinja blocks read them); ``macros`` holds the project's Python macros and variables the
    body's macros may use.
    """
    path = Path(path)
    if text is None:
        text = read_model_text(path)
    reader = HeaderReader(path)
    split = split_model_file(text, path)
    header = parse_header(split.header_text, path, split.header_line - 1)
    seen = _properties(reader, header)
    defaulted = _apply_defaults(path, header, seen, defaults or {})
    dialect = _dialect(reader, seen, default_dialect)
    name = reader.text(seen["name"].value, "name").lower()
    if not _NAME.fullmatch(name):
        raise reader.fail(seen["name"].line, f"model name '{name}' is not a table name", hint="use schema.table")
    metadata: dict[str, str] = {}
    kind = read_kind(reader, seen["kind"], metadata)
    kind = _physical_overrides(reader, kind, seen.get("physical_properties"))
    values, properties = _read_values(reader, seen, dialect)
    metadata.update(properties)
    values = _header_values(reader, seen, kind, values, defaulted, macros)
    _warn_unused(path, seen)
    body = _read_body(reader, split, (name, kind, seen["kind"].line), dialect, values.get("columns"), variables, macros)
    if body.columns is not None:
        values = {**values, "columns": body.columns}
    _check_query(reader, body, dialect, values, seen, split.query_line)
    return SqlModel(
        name=name,
        path=path,
        kind=body.kind,
        query=body.query,
        dialect=dialect,
        references=body.references,
        metadata=metadata,
        header_line=header.line,
        query_line=split.query_line,
        lines={key: prop.line for key, prop in seen.items()},
        **body.statements,
        inline_audits=body.inline_audits,
        **values,
    )


def model_file_name(path: str | Path, text: str) -> str | None:
    """The model name a file's header gives, read without its query (None: the header does not say):
    a model whose query fails to parse is still known by name, so what reads it is not an unknown table."""
    try:
        split = split_model_file(text, Path(path))
        header = parse_header(split.header_text, Path(path), split.header_line - 1)
        seen = _properties(HeaderReader(Path(path)), header)
        name = HeaderReader(Path(path)).text(seen["name"].value, "name").lower() if "name" in seen else None
    except ModelFileError:
        return None
    return name if name and _NAME.fullmatch(name) else None


@dataclass(frozen=True)
class _Body:
    """What the query part of a model file holds: the kind (a seed's with its CSV's hash), the query, the
    tables it reads, its pre and post statements, its inline audits, and the columns a seed's CSV fixes."""

    kind: Kind
    query: exp.Query
    references: tuple[TableReference, ...] = ()
    statements: Mapping[str, Any] = field(default_factory=dict)
    inline_audits: tuple[Any, ...] = ()
    columns: dict[str, str] | None = None


def _header_values(
    reader: HeaderReader,
    seen: Mapping[str, Property],
    kind: Kind,
    values: Mapping[str, Any],
    defaulted: set[str],
    macros: MacroContext | None,
) -> dict[str, Any]:
    """The header's values completed: audit arguments expanded, end after start (a date-only end
    inclusive), a relative start kept as written, and a time-partitioned model's interval layout."""
    values = dict(values)
    if values.get("audits"):
        values["audits"] = _expanded_audits(reader, seen, values["audits"], macros)
    values = _start_and_end(reader, seen, values)
    if "start" in values and isinstance(start := seen["start"].value, (Literal, Name)) and is_relative_time(start):
        values["relative_start"] = str(start.value).strip()
    if isinstance(kind, IncrementalByTimeRange):
        values = _time_layout(reader, seen, values, defaulted)
    return values


def _read_body(
    reader: HeaderReader,
    split: SplitFile,
    model: tuple[str, Kind, int],
    dialect: str,
    columns: Mapping[str, str] | None,
    variables: Mapping[str, Any] | None,
    macros: MacroContext | None,
) -> _Body:
    """The query part of the model ``(name, kind, line of the kind)``, its Jinja blocks rendered and its
    inline audits split off: a seed's select from its CSV, or the parsed query with its statements."""
    name, kind, kind_line = model
    path, offset = reader.path, split.query_line - 1
    text = render_jinja_blocks(split.query_text, path, variables or {}, offset, macros.macros_dir if macros else None)
    text, inline_audits = split_inline_audits(text, path, offset)
    if isinstance(kind, Seed):
        seed, query, seed_columns = _seed_query(reader, kind, columns, text, kind_line)
        return _Body(seed, query, inline_audits=tuple(inline_audits), columns=seed_columns)
    if macros is None and variables:
        macros = MacroContext(variables={str(k).lower(): v for k, v in variables.items()})
    parsed = parse_model_body(text, dialect=dialect, path=path, line_offset=offset, this_model=name, macros=macros)
    statements = {"pre_statements": parsed.pre_statements, "post_statements": parsed.post_statements}
    return _Body(kind, parsed.query, table_references(parsed.query), statements, tuple(inline_audits))


def _check_query(
    reader: HeaderReader, body: _Body, dialect: str, values: Mapping[str, Any], seen: Mapping[str, Property], line: int
) -> None:
    """The query against its header: a Spark equivalent, the time, event time and key columns among its outputs."""
    if dialect != "spark":
        check_spark_equivalent(reader, body.query, dialect, line)
    if isinstance(body.kind, IncrementalByTimeRange):
        check_time_column(reader, body.query, body.kind.time_column, seen["kind"].line, values.get("columns", {}))
    check_event_time_column(reader, body.query, body.kind, values, seen)
    check_keyed_kind(reader, body.query, body.kind, seen["kind"].line)


def _expanded_audits(
    reader: HeaderReader, seen: Mapping[str, Property], audits: tuple[Any, ...], macros: MacroContext | None
) -> tuple[Any, ...]:
    """Audit arguments with their macro calls evaluated (the project's Python macros)."""
    evaluator = MacroEvaluator(macros or MacroContext(), "spark", runtime_stage="loading")
    line = seen["audits"].line if "audits" in seen else None

    def expand(node: exp.Expr) -> exp.Expr:
        try:
            value = evaluator.transform(node)
            return evaluator.to_expression(value[0] if isinstance(value, list) and len(value) == 1 else value, node)
        except MacroError as exc:
            raise reader.fail(line, f"audits: {exc.message}", hint=exc.hint) from None

    return expand_audit_arguments(audits, expand)


def _start_and_end(reader: HeaderReader, seen: Mapping[str, Property], values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` with the end checked after the start; a date-only end is inclusive, as in SQLMesh: the
    whole day is in."""
    inclusive = "end" in values and _is_date_only(seen["end"].value)
    if "start" in values and "end" in values and values["end"] + timedelta(days=inclusive) <= values["start"]:
        raise reader.fail(
            seen["end"].line,
            f"end {values['end'].isoformat()} is not after start {values['start'].isoformat()}: the model "
            "would have no interval",
            hint="set end after start, or remove end (the model then runs up to the present)",
        )
    return {**values, "end": values["end"] + timedelta(days=1)} if inclusive else dict(values)


def read_model_text(path: Path) -> str:
    """A model file's text: at most :data:`MAX_MODEL_FILE_BYTES`, UTF-8."""
    check_file_size(path)
    return read_utf8(path)


def _properties(reader: HeaderReader, header: Header) -> dict[str, Property]:
    """The header's properties by key; each at most once, name and kind required."""
    seen: dict[str, Property] = {}
    for prop in header.properties:
        if prop.key in seen:
            raise reader.fail(prop.line, f"property '{prop.key}' is given twice (first on line {seen[prop.key].line})")
        seen[prop.key] = prop
    if "name" not in seen:
        raise reader.fail(header.line, "the MODEL header has no name", hint="add `name schema.table`")
    return seen


def _apply_defaults(path: Path, header: Header, seen: dict[str, Property], defaults: Mapping[str, str]) -> set[str]:
    """Fill properties the header does not set from model_defaults; no kind at all is a VIEW.

    Returns the keys that were filled in.
    """
    filled: set[str] = set()
    for key, text in {**defaults, "kind": defaults.get("kind", "VIEW")}.items():
        if key in seen:
            continue
        try:
            (prop,) = parse_header(f"MODEL ({key} {text})", "model_defaults").properties
        except ModelFileError as exc:
            raise ModelFileError(
                path, header.line, f"model_defaults {key} '{text}' cannot be read: {exc.message}"
            ) from None
        seen[key] = replace(prop, line=header.line, value=_at_line(prop.value, header.line))
        filled.add(key)
    return filled


def _at_line(value: Value, line: int) -> Value:
    return replace(value, line=line)


# Header properties with no effect here: said once per model file, never dropped in silence.
_UNUSED = {
    "signals": "signals are not evaluated: intervals run when Dagster schedules them (use sensors for readiness)",
    "partitioned_by": "partitioned_by is not applied: Delta tables are laid out by the time column of incremental "
    "models",
    "allow_partials": "allow_partials is not applied: only complete intervals run",
    "storage_format": "storage_format is not applied: every table is Delta",
    "table_format": "table_format is not applied: every table is Delta",
    "physical_properties": "physical_properties other than event_time_column and the safety overrides (allow_...) "
    "are not applied",
    "session_properties": "session_properties are not applied: set Spark conf in incremental_assets.yaml",
}


def _warn_unused(path: Path, seen: Mapping[str, Property]) -> None:
    for key, why in _UNUSED.items():
        if key in seen:
            log.warning("%s:%s: %s", path, seen[key].line, why)


def is_relative_time(value: Value) -> bool:
    """Whether a header value is a relative time (``'1 year ago'``), which moves with the load time."""
    return (
        isinstance(value, (Literal, Name))
        and isinstance(value.value, str)
        and relative_instant(value.value, clock.now()) is not None
    )


_DATE_ONLY = re.compile(r"\d{4}-\d{2}-\d{2}")


def _is_date_only(value: Value) -> bool:
    return (
        isinstance(value, Literal) and isinstance(value.value, str) and bool(_DATE_ONLY.fullmatch(value.value.strip()))
    )


def _dialect(reader: HeaderReader, seen: Mapping[str, Property], default: str) -> str:
    if "dialect" not in seen:
        return default
    dialect = reader.text(seen["dialect"].value, "dialect").lower()
    try:
        sqlglot.Dialect.get_or_raise(dialect)
    except ValueError:
        raise reader.fail(
            seen["dialect"].line, f"unknown SQL dialect '{dialect}'", hint="use spark, duckdb, bigquery, snowflake, ..."
        ) from None
    return dialect


def _interval_unit(reader: HeaderReader, prop: Property) -> IntervalUnit:
    unit = reader.text(prop.value, "interval_unit").lower()
    if unit not in IntervalUnit._value2member_map_:
        raise reader.fail(
            prop.line, f"unknown interval_unit '{unit}'", hint="use one of " + ", ".join(u.value for u in IntervalUnit)
        )
    return IntervalUnit(unit)


def _cron(reader: HeaderReader, prop: Property) -> str:
    """The cron as written, once it is known to fire (the scheduler only ever sees valid ones)."""
    cron = reader.text(prop.value, "cron")
    problem = cron_problem(cron)
    if problem:
        raise reader.fail(prop.line, f"invalid cron '{cron}': {problem}", hint=CRON_HINT)
    return cron


def _column_descriptions(reader: HeaderReader, prop: Property) -> dict[str, str]:
    v = prop.value
    if not isinstance(v, Items) or not all(isinstance(i, Pair) for i in v.items):
        raise reader.fail(prop.line, "column_descriptions must look like (col = 'text', ...)")
    return {i.key.lower(): reader.text(i.value, i.key) for i in v.items if isinstance(i, Pair)}


# How each known header property becomes a SqlModel field: (field, reader). Unknown properties are
# kept as metadata; name, kind and dialect are read first.
_PROPERTY_READERS: dict[str, tuple[str, Callable[[HeaderReader, Property, str], Any]]] = {
    "start": ("start", lambda r, p, d: r.instant(p.value, "start")),
    "end": ("end", lambda r, p, d: r.instant(p.value, "end")),
    "cron": ("cron", lambda r, p, d: _cron(r, p)),
    "interval_unit": ("interval_unit", lambda r, p, d: _interval_unit(r, p)),
    "owner": ("owner", lambda r, p, d: r.text(p.value, "owner")),
    "tags": ("tags", lambda r, p, d: r.names(p.value, "tags")),
    "grain": ("grains", lambda r, p, d: tuple(n.lower() for n in r.names(p.value, "grain"))),
    "grains": ("grains", lambda r, p, d: tuple(n.lower() for n in r.names(p.value, "grains"))),
    "description": ("description", lambda r, p, d: r.text(p.value, "description")),
    "column_descriptions": ("column_descriptions", lambda r, p, d: _column_descriptions(r, p)),
    "columns": ("columns", lambda r, p, d: _read_columns(r, p.value, d)),
    "enabled": ("enabled", lambda r, p, d: r.flag(p.value, "enabled")),
    # Ours, not SQLMesh's: the event time of each row, of which the kind's time_column is the truncation.
    "event_time_column": ("event_time_column", lambda r, p, d: r.text(p.value, "event_time_column").lower()),
}


def _read_values(
    reader: HeaderReader, seen: Mapping[str, Property], dialect: str
) -> tuple[dict[str, Any], dict[str, str]]:
    """The header's values by SqlModel field, and its other properties as text (the model's metadata)."""
    values: dict[str, Any] = {}
    metadata: dict[str, str] = {}
    for key, prop in seen.items():
        if key in ("name", "kind", "dialect"):
            continue
        if key in _PROPERTY_READERS:
            field, read = _PROPERTY_READERS[key]
            values[field] = read(reader, prop, dialect)
        elif key in ("audits", "assertions"):
            values["audits"] = values.get("audits", ()) + parse_audits(
                prop.value, reader.path, origin="audits" if key == "audits" else "assertions"
            )
        else:
            metadata[key] = prop.value.text
    physical = _physical_event_time(reader, seen.get("physical_properties"))
    if physical is not None:
        values.setdefault("event_time_column", physical)
    return values, metadata


def _physical_overrides(reader: HeaderReader, kind: Any, prop: Property | None) -> Any:
    """``physical_properties (allow_distinct = true)``: safety overrides in a spelling SQLMesh loads too
    (it refuses unknown properties in the kind)."""
    if prop is None or not isinstance(prop.value, Items) or not isinstance(kind, IncrementalByTimeRange):
        return kind  # other kinds are never cut into intervals: nothing to admit
    on = {
        item.key.lower()
        for item in prop.value.items
        if isinstance(item, Pair)
        and item.key.lower() in SAFETY_OVERRIDE_FLAGS
        and reader.flag(item.value, item.key.lower())
    }
    return replace(kind, safety_overrides=kind.safety_overrides | on) if on else kind


def _physical_event_time(reader: HeaderReader, prop: Property | None) -> str | None:
    """``physical_properties (event_time_column = 'event_ts')``: the spelling a file SQLMesh loads too may use."""
    if prop is None or not isinstance(prop.value, Items):
        return None
    for item in prop.value.items:
        if isinstance(item, Pair) and item.key.lower() == "event_time_column":
            return reader.text(item.value, "event_time_column").lower()
    return None


def _time_layout(
    reader: HeaderReader, seen: Mapping[str, Property], values: Mapping[str, Any], defaulted: set[str]
) -> dict[str, Any]:
    """``values`` with an incremental model's interval unit (given, derived from cron, or a day), its
    aligned start and end.

    Without a start, the project loader derives one (:func:`incremental_assets.load.model_graph.default_starts`).
    A start from model_defaults is floored to the unit; an end is rounded up to the unit, so the interval
    holding the last instant is in.
    """
    unit = values.get("interval_unit")
    if unit is None and values.get("cron"):
        unit = unit_from_cron(values["cron"])
        if unit is None:
            raise reader.fail(
                seen["cron"].line,
                f"cannot derive an interval unit from cron '{values['cron']}'",
                hint="add `interval_unit day` (or hour, week, month, quarter, year)",
            )
    unit = IntervalUnit.of(unit)
    layout: dict[str, Any] = {**values, "interval_unit": unit}
    cron_unit = unit_from_cron(values["cron"]) if values.get("cron") else None
    if cron_unit is not None and IntervalUnit.of(cron_unit).nominal < unit.nominal:
        # An interval is complete once per unit: a schedule that fires more often finds nothing new to
        # process on most ticks, or recomputes an unfinished interval from partial data (SQLMesh refuses it too).
        raise reader.fail(
            seen["cron"].line,
            f"cron '{values['cron']}' fires every {cron_unit}, more often than the model's {unit} intervals complete",
            hint="use a cron at most as frequent as the intervals, e.g. cron "
            f"'{_CRON_ALIAS.get(unit.value, unit.cron)}', "
            f"or interval_unit {cron_unit} to cut {cron_unit} intervals",
        )
    if values.get("end") is not None:
        layout["end"] = unit.ceil(values["end"])
    if "start" not in values:
        return layout
    start = values["start"]
    if "start" in defaulted or "relative_start" in values:
        layout["start"] = unit.floor(start)
    elif unit.floor(start) != start:
        raise reader.fail(
            seen["start"].line,
            f"start {start.date().isoformat()} is not on a {unit} boundary",
            hint=f"use {unit.floor(start).date().isoformat()} (weeks start on Sunday)",
        )
    return layout


_CRON_ALIAS = {
    "hour": "@hourly",
    "day": "@daily",
    "week": "@weekly",
    "month": "@monthly",
    "quarter": "@quarterly",
    "year": "@yearly",
}


def _read_columns(reader: HeaderReader, v: Value, dialect: str) -> dict[str, str]:
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


def _seed_query(
    reader: HeaderReader, kind: Seed, columns: Mapping[str, str] | None, query_text: str, line: int
) -> tuple[Seed, exp.Query, dict[str, str]]:
    """Check the CSV (types, row shapes) against the declared ``columns``: the seed's kind (with the CSV's
    hash), the select of its columns from the seed's view, and the model's columns."""
    if query_text.strip().strip(";").strip():
        raise reader.fail(
            line,
            "a SEED model has no query: its rows come from the CSV file",
            hint="remove the query after the MODEL header",
        )
    seed = read_seed(Path(kind.location), dict(kind.csv_settings), columns)
    query = exp.select(*(exp.column(c, quoted=True) for c in seed.columns)).from_(SEED_VIEW)
    return Seed(kind.path, kind.location, kind.csv_settings, seed.content_hash), query, seed.columns
