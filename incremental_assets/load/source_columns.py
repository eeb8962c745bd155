"""The columns of a file source that declares none, read from its data: a Parquet file's footer, a Delta
table's log. Only their types are read, never a row.

A DuckDB model's meaning can depend on a column's type (``day - other_day`` is a number of days between
DATEs; ``CAST(x AS INT)`` rounds a DOUBLE), and DuckDB knows the type from the file. So where a source gives
no ``columns``, the loader asks here before it chooses a translation
(:func:`~incremental_assets.load.column_types.with_model_types`). CSV and JSON sources hold no types, and a
catalog table is Spark's to describe: they give none.

Types are Spark SQL's spelling (``bigint``, ``decimal(10,2)``, ``array<int>``); a type with none
(a time of day, an interval) is ``unknown``, and a Hive-style partition folder's key (``day=2024-01-01/``)
is a column of unknown type at the end, as Spark reads it. A folder is described by its first data file in
name order (skipping hidden and ``_``-prefixed entries, as Spark does); a file whose footer does not read is
passed over for the next. What was read is kept while the file (or the table's log) stays the same.

>>> import tempfile, pyarrow as pa, pyarrow.parquet as pq
>>> folder = Path(tempfile.mkdtemp())
>>> (folder / "day=2024-01-01").mkdir()
>>> table = pa.table({"id": pa.array([1], pa.int32()), "at": pa.array([0], pa.timestamp("us")),
...                   "tags": pa.array([["a"]])})
>>> pq.write_table(table, folder / "day=2024-01-01" / "part-0.parquet")
>>> file_source_columns(str(folder), "parquet")
{'id': 'int', 'at': 'timestamp', 'tags': 'array<string>', 'day': 'unknown'}
"""

from __future__ import annotations

import functools
import json
import os
import re
from pathlib import Path
from typing import Any

# How a column of unknown type is written (as model columns write it).
_UNKNOWN = "unknown"
# Delta's primitive type names that Spark SQL spells otherwise.
_DELTA_NAMES = {
    "long": "bigint",
    "integer": "int",
    "short": "smallint",
    "byte": "tinyint",
    "timestamp_ntz": "timestamp",
}
_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint(\.\d+\.\d+)?\.parquet$")
# How many of a folder's files are tried for a footer that reads.
_FOOTERS_TRIED = 3
# Arrow's flat types as Spark reads them from Parquet: the pyarrow.types check, and Spark's name.
_ARROW_NAMES = (
    ("is_boolean", "boolean"), ("is_int8", "tinyint"), ("is_int16", "smallint"), ("is_uint8", "smallint"),
    ("is_int32", "int"), ("is_uint16", "int"), ("is_int64", "bigint"), ("is_uint32", "bigint"),
    ("is_uint64", "decimal(20,0)"), ("is_float16", "float"), ("is_float32", "float"), ("is_float64", "double"),
    ("is_string", "string"), ("is_large_string", "string"), ("is_binary", "binary"), ("is_large_binary", "binary"),
    ("is_date", "date"), ("is_timestamp", "timestamp"),
)  # fmt: skip


def file_source_columns(location: str, format: str) -> dict[str, str] | None:
    """``{column: Spark SQL type}`` of the Parquet or Delta source at ``location`` (a local path), in the order
    Spark reads them; None when it cannot be told (another format, no data yet, an unreadable footer or log)."""
    path = location.removeprefix("file://")
    if "://" in path:
        return None  # an object store: not read at load
    try:
        if format == "delta":
            return _delta_columns(Path(path))
        if format == "parquet":
            return _parquet_columns(Path(path))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return None


def _parquet_columns(path: Path) -> dict[str, str] | None:
    for file in _first_data_files(path, _FOOTERS_TRIED):
        stat = file.stat()
        found = _footer_columns(str(file), stat.st_size, stat.st_mtime_ns)
        if found is not None:
            keys = [part.split("=", 1)[0] for part in file.relative_to(path).parent.parts if "=" in part]
            return {**found, **{key: _UNKNOWN for key in keys if key not in found}}
    return None


def _first_data_files(path: Path, count: int) -> list[Path]:
    """Up to ``count`` data files of a one-file or folder source, in name order, depth first."""
    if path.is_file():
        return [path]
    found: list[Path] = []
    for folder, folders, files in os.walk(path):
        folders[:] = sorted(f for f in folders if not f.startswith((".", "_")))
        found += [Path(folder) / f for f in sorted(files) if not f.startswith((".", "_"))][: count - len(found)]
        if len(found) >= count:
            break
    return found


@functools.lru_cache(maxsize=1024)
def _footer_columns(file: str, size: int, mtime_ns: int) -> dict[str, str] | None:
    import pyarrow as pa  # only a load that needs a source's types pays for it
    import pyarrow.parquet as pq

    try:
        schema = pq.read_schema(file)
    except (OSError, pa.ArrowException):
        return None
    return {field.name: _arrow_type(field.type) for field in schema}


def _arrow_type(kind: Any) -> str:
    """An Arrow type in Spark SQL's spelling (as Spark reads it from Parquet); ``unknown`` where Spark has none."""
    import pyarrow as pa

    t = pa.types
    if t.is_dictionary(kind):
        return _arrow_type(kind.value_type)
    if t.is_list(kind) or t.is_large_list(kind) or t.is_fixed_size_list(kind):
        return f"array<{_arrow_type(kind.value_type)}>"
    if t.is_map(kind):
        return f"map<{_arrow_type(kind.key_type)},{_arrow_type(kind.item_type)}>"
    if t.is_struct(kind):
        return (
            "struct<"
            + ",".join(f"{kind.field(i).name}:{_arrow_type(kind.field(i).type)}" for i in range(kind.num_fields))
            + ">"
        )
    if t.is_decimal(kind):
        return f"decimal({kind.precision},{kind.scale})"
    return next((name for check, name in _ARROW_NAMES if getattr(t, check)(kind)), _UNKNOWN)


def _delta_columns(table: Path) -> dict[str, str] | None:
    """The columns of the latest schema the table's log holds: the newest commit with a ``metaData`` action
    after the last checkpoint, else the checkpoint's."""
    log = table / "_delta_log"
    names = os.listdir(log)
    commits = sorted(int(n[:-5]) for n in names if n.endswith(".json") and n[:-5].isdigit())
    checkpoints: dict[int, list[str]] = {}
    for name in names:
        if match := _CHECKPOINT.match(name):
            checkpoints.setdefault(int(match.group(1)), []).append(name)
    last = max(checkpoints, default=-1)
    if not commits and last < 0:
        return None
    schema = _schema_string(str(log), tuple(v for v in commits if v > last), tuple(sorted(checkpoints.get(last, []))))
    return None if schema is None else _delta_struct(json.loads(schema))


@functools.lru_cache(maxsize=256)
def _schema_string(log: str, commits: tuple[int, ...], checkpoint: tuple[str, ...]) -> str | None:
    for version in reversed(commits):
        with open(os.path.join(log, f"{version:020d}.json"), encoding="utf-8") as lines:
            for line in lines:
                action = json.loads(line) if line.strip() else {}
                if "metaData" in action:
                    return action["metaData"]["schemaString"]
    import pyarrow as pa
    import pyarrow.parquet as pq

    for part in checkpoint:
        try:
            rows = pq.read_table(os.path.join(log, part), columns=["metaData"]).column("metaData").to_pylist()
        except (OSError, pa.ArrowException):
            return None
        for row in rows:
            if row and row.get("schemaString"):
                return row["schemaString"]
    return None


def _delta_struct(schema: dict) -> dict[str, str]:
    return {field["name"]: _delta_type(field["type"]) for field in schema["fields"]}


def _delta_type(kind: str | dict) -> str:
    """A type of a Delta schema (JSON) in Spark SQL's spelling.

    >>> _delta_type({"type": "array", "elementType": "long", "containsNull": True}), _delta_type("decimal(10,2)")
    ('array<bigint>', 'decimal(10,2)')
    """
    if isinstance(kind, str):
        return _DELTA_NAMES.get(kind, kind)
    if kind["type"] == "array":
        return f"array<{_delta_type(kind['elementType'])}>"
    if kind["type"] == "map":
        return f"map<{_delta_type(kind['keyType'])},{_delta_type(kind['valueType'])}>"
    fields = ",".join(f"{name}:{kind}" for name, kind in _delta_struct(kind).items())
    return f"struct<{fields}>"
