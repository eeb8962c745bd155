"""sources.yaml -> Source values: tables no model produces (SQLMesh's EXTERNAL models).

The YAML reading (:func:`yaml_entries`) and the making of one source (:func:`make_source`) are shared
with SQLMesh's ``external_models.yaml`` (:mod:`~incremental_assets.load.external_models`).
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from incremental_assets.errors import ModelFileError
from incremental_assets.load.text import read_utf8, yaml_compose, yaml_error, yaml_value
from incremental_assets.model.intervals import INTERVAL_UNITS
from incremental_assets.model.project import SOURCE_FORMATS, CsvSettings, Source
from incremental_assets.model.source_time import EPOCH_FORMATS

_SOURCE_KEYS = {
    "name",
    "location",
    "format",
    "columns",
    "time_column",
    "time_column_format",
    "event_time_column",
    "interval_unit",
    "description",
    "csv_settings",
}
# The encodings Spark's CSV reader takes, by Python's name for them (latin-1 is iso8859-1).
_ENCODINGS = ("utf-8", "iso-8859-1", "us-ascii", "utf-16", "utf-16be", "utf-16le", "utf-32")
_PYTHON_NAMES = {"iso8859-1": "iso-8859-1", "ascii": "us-ascii", "utf-16-be": "utf-16be", "utf-16-le": "utf-16le"}


# csv_settings of a CSV source: each key with the check its value passes and what it must be.
_CSV_KEYS = {
    "delimiter": (
        lambda v: isinstance(v, str) and len(v) == 1,
        "one character, e.g. ';', or \"\\t\" for a tab (in double quotes)",
    ),
    "quotechar": (lambda v: isinstance(v, str) and len(v) == 1, "one character, e.g. '\"'"),
    "escapechar": (lambda v: isinstance(v, str) and len(v) == 1, "one character, e.g. '\\\\'"),
    "header": (lambda v: isinstance(v, bool), "true or false"),
    "encoding": (lambda v: isinstance(v, str) and _encoding(v) is not None, "one of " + ", ".join(_ENCODINGS)),
}


def _node_line(node: yaml.Node) -> int:
    return node.start_mark.line + 1


def yaml_entries(path: Path, not_a_list: str, *, under: str | None = None) -> list[tuple[Any, int]]:
    """The entries of a YAML list file with the line each starts on (None for an entry that is not a
    mapping; a top-level ``under:`` key may hold the list); errors name the file and line, ``not_a_list``
    is the message when the file holds no list."""
    if not path.is_file():
        return []
    try:
        root = yaml_compose(read_utf8(path))
    except yaml.YAMLError as exc:
        raise yaml_error(path, exc) from None
    if root is None:
        return []
    if under and isinstance(root, yaml.MappingNode) and any(k.value == under for k, _ in root.value):
        root = next(v for k, v in root.value if k.value == under)
    if not isinstance(root, yaml.SequenceNode):
        raise ModelFileError(path, _node_line(root), not_a_list, hint="start each entry with `- name: raw.orders`")
    return [(yaml_value(node) if isinstance(node, yaml.MappingNode) else None, _node_line(node)) for node in root.value]


def make_source(
    entry: dict,
    name: str,
    fmt: str,
    columns: dict[str, str],
    project_dir: Path,
    path: Path,
    line: int,
    *,
    what: str = "source",
) -> Source:
    """One source from its entry: format and interval unit checked, a relative location made absolute."""
    if fmt not in SOURCE_FORMATS:
        raise ModelFileError(
            path, line, f"{what} {name}: unknown format '{fmt}'", hint="use one of " + ", ".join(SOURCE_FORMATS)
        )
    unit = entry.get("interval_unit")
    if unit is not None and str(unit).lower() not in INTERVAL_UNITS:
        raise ModelFileError(
            path, line, f"{what} {name}: unknown interval_unit '{unit}'", hint="use one of " + ", ".join(INTERVAL_UNITS)
        )
    location = str(entry["location"])
    if fmt != "table" and "://" not in location and not Path(location).is_absolute():
        location = str((project_dir / location).resolve())
    time_column = entry.get("time_column")
    return Source(
        name=name,
        location=location,
        format=fmt,
        columns=columns,
        time_column=str(time_column).lower() if time_column else None,
        interval_unit=str(unit).lower() if unit else ("day" if time_column else None),
        line=line,
        event_time_column=read_event_time_column(entry, path, line, name),
        time_format=read_time_format(entry, path, line, name),
        csv=read_csv_settings(entry, fmt, path, line, name),
    )


def load_sources(path: Path, project_dir: Path) -> dict[str, Source]:
    """Read sources.yaml: a list of {name, location, format, columns?, time_column?, event_time_column?, ...}."""
    sources: dict[str, Source] = {}
    for entry, line in yaml_entries(path, "sources.yaml must be a list of sources", under="sources"):
        if not isinstance(entry, dict):
            raise ModelFileError(path, line, "each source must be a mapping with name, location and format")
        unknown = set(entry) - _SOURCE_KEYS
        if unknown:
            raise ModelFileError(
                path,
                line,
                f"unknown key(s) {', '.join(sorted(unknown))} in a source",
                hint="use name, location, format, columns, time_column, time_column_format, event_time_column, "
                "interval_unit, csv_settings",
            )
        for key in ("name", "location", "format"):
            if not entry.get(key) or not isinstance(entry.get(key), str):
                raise ModelFileError(path, line, f"source is missing '{key}'", hint=f"add `{key}: ...` to the entry")
        for key in ("name", "location", "time_column", "event_time_column"):
            if "\x00" in str(entry.get(key) or ""):
                raise ModelFileError(path, line, f"source {key} contains a NUL character")
        name = entry["name"].lower()
        if name in sources:
            raise ModelFileError(path, line, f"source {name} is declared twice (first on line {sources[name].line})")
        columns = {str(k).lower(): str(v) for k, v in _columns(entry.get("columns") or {}, path, line, name).items()}
        sources[name] = make_source(entry, name, entry["format"].lower(), columns, project_dir, path, line)
    return sources


def read_event_time_column(entry: dict, path: Path, line: int, name: str) -> str | None:
    """The event-time column: a finer time of each row, of which ``time_column`` is the truncation."""
    value = entry.get("event_time_column")
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ModelFileError(
            path,
            line,
            f"source {name}: event_time_column must be a column name",
            hint="write `event_time_column: event_ts`",
        )
    if not entry.get("time_column"):
        raise ModelFileError(
            path,
            line,
            f"source {name}: event_time_column {value} needs a time_column (the partition column it is truncated to)",
            hint="add `time_column: event_date` (and `interval_unit: day`), the column whose value is the event "
            "time truncated to the unit",
        )
    if value.lower() == str(entry["time_column"]).lower():
        raise ModelFileError(
            path,
            line,
            f"source {name}: event_time_column and time_column are both {value}",
            hint="remove event_time_column",
        )
    return value.lower()


def read_time_format(entry: dict, path: Path, line: int, name: str) -> str | None:
    """The strftime format of a text time column (``time_column_format: '%Y-%m-%d'``).

    >>> read_time_format({"time_column": "ds", "time_column_format": "%Y-%m-%d"}, Path("sources.yaml"), 1, "raw.a")
    '%Y-%m-%d'
    """
    value = entry.get("time_column_format")
    if value is None:
        return None
    if not entry.get("time_column"):
        raise ModelFileError(
            path, line, f"source {name}: time_column_format needs a time_column", hint="add `time_column: ds`"
        )
    if value in EPOCH_FORMATS:
        return value
    if not isinstance(value, str) or "%" not in value:
        raise ModelFileError(
            path,
            line,
            f"source {name}: time_column_format {value!r} is not a strftime format",
            hint="write the format of the text, e.g. `time_column_format: '%Y-%m-%d'`, or for a number counting "
            "from 1970 epoch_seconds, epoch_millis or epoch_micros",
        )
    try:
        datetime(2024, 1, 2, 3, 4, 5).strftime(value)
    except ValueError:
        raise ModelFileError(
            path, line, f"source {name}: time_column_format {value!r} is not a strftime format", hint="e.g. '%Y-%m-%d'"
        ) from None
    return value


def read_csv_settings(entry: dict, fmt: str, path: Path, line: int, name: str) -> CsvSettings:
    """How a CSV source's files are written: ``csv_settings: {delimiter: ';', quotechar: "'", escapechar: '\\',
    header: false, encoding: latin-1}`` (the defaults: comma, double quote, a header line, UTF-8).

    >>> read_csv_settings({"csv_settings": {"delimiter": ";"}}, "csv", Path("sources.yaml"), 1, "raw.a").delimiter
    ';'
    """
    value = entry.get("csv_settings")
    if value is None:
        return CsvSettings()
    if fmt != "csv":
        raise ModelFileError(
            path, line, f"source {name}: csv_settings is for a CSV source, not {fmt}", hint="remove csv_settings"
        )
    if not isinstance(value, dict):
        raise ModelFileError(
            path, line, f"source {name}: csv_settings must be a mapping", hint="write `csv_settings: {delimiter: ';'}`"
        )
    for key, setting in value.items():
        if key not in _CSV_KEYS:
            raise ModelFileError(
                path, line, f"source {name}: unknown csv_settings key {key!r}", hint="use " + ", ".join(_CSV_KEYS)
            )
        valid, wanted = _CSV_KEYS[key]
        if not valid(setting):
            raise ModelFileError(
                path, line, f"source {name}: csv_settings {key} is {setting!r}", hint=f"{key} must be {wanted}"
            )
    if "encoding" in value:
        value = {**value, "encoding": _encoding(value["encoding"])}
    return CsvSettings(**value)


def _encoding(name: str) -> str | None:
    """Spark's name for an encoding (``latin-1``: ``iso-8859-1``); None for one it does not read."""
    import codecs

    try:
        canonical = codecs.lookup(name).name
    except LookupError:
        return None
    spark_name = _PYTHON_NAMES.get(canonical, canonical)
    return spark_name if spark_name in _ENCODINGS else None


def _columns(columns: object, path: Path, line: int, name: str) -> dict:
    """A source's ``columns``: a mapping of names to types, or a list of one-entry mappings."""
    if isinstance(columns, list):
        try:
            columns = {str(k): str(v) for item in columns for k, v in dict(item).items()}
        except (TypeError, ValueError):
            raise ModelFileError(path, line, f"source {name}: columns must map names to types") from None
    if not isinstance(columns, dict):
        raise ModelFileError(
            path, line, f"source {name}: columns must map names to types", hint="write `columns: {id: bigint}`"
        )
    return columns
