"""SEED models' CSV files: column types (declared or inferred), validated row by row, and a content hash.

Pure Python (the csv module): a bad value is reported with the CSV file and its line before Spark ever
reads the file, and the content hash makes a changed CSV change the model's fingerprint.

Values are read as SQLMesh reads them (with pandas): the markers pandas reads as missing (an empty value,
``NA``, ``N/A``, ``null``, ``None``, ``nan``, ... and ``na_values`` of the kind's ``csv_settings``) are
NULL, and a column's type is inferred from its other values: BIGINT, DOUBLE, BOOLEAN, else STRING (a
date stays text, as in SQLMesh: declare the column's type for a DATE); a column of markers only is DOUBLE.

>>> import tempfile, pathlib
>>> p = pathlib.Path(tempfile.mkdtemp()) / "x.csv"
>>> _ = p.write_text("id,name,day,score\\n1,a,2024-01-01,N/A\\n,b,2024-01-02,\\n")
>>> read_seed(p).columns
{'id': 'BIGINT', 'name': 'STRING', 'day': 'STRING', 'score': 'DOUBLE'}
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import re
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any, Callable, Mapping

from incremental_assets.errors import ModelFileError

# Options of `csv_settings (...)` in the kind, with their Spark reader names (None: applied to the values read).
CSV_SETTINGS = {
    "delimiter": "sep",
    "quotechar": "quote",
    "escapechar": "escape",
    "na_values": None,
    "keep_default_na": None,
}
# The values pandas reads as missing by default (its STR_NA_VALUES), so SQLMesh's seeds have NULL there.
DEFAULT_NA = frozenset(
    (
        *("", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN"),
        *("<NA>", "N/A", "NA", "NULL", "NaN", "None", "n/a", "nan", "null"),
    )
)


def na_markers(settings: Mapping[str, str], column: str) -> frozenset[str]:
    """The values of ``column`` read as NULL, as pandas' ``na_values`` and ``keep_default_na`` say: the
    defaults unless ``keep_default_na`` is false, with the ``na_values`` given for every column (a list) or
    for this one (a mapping of column to list; stored as JSON text in the kind's csv_settings).

    >>> sorted(na_markers({"na_values": '{"a": ["-"]}', "keep_default_na": "false"}, "a"))
    ['-']
    >>> "NA" in na_markers({}, "a"), "NA" in na_markers({"keep_default_na": "false"}, "a")
    (True, False)
    """
    markers = DEFAULT_NA if settings.get("keep_default_na", "true") != "false" else frozenset()
    extra = json.loads(settings.get("na_values", "[]"))
    if isinstance(extra, dict):
        extra = extra.get(column, [])
    return markers | frozenset(extra)


@dataclass(frozen=True)
class SeedFile:
    columns: dict[str, str]  # name -> Spark SQL type, in file order
    content_hash: str
    rows: int


def _parse_int(v: str) -> int:
    if re.fullmatch(r"[+-]?\d+", v) is None or not -(2**63) <= int(v) < 2**63:
        raise ValueError(v)
    return int(v)


def _parse_float(v: str) -> float:
    if "_" in v:  # Python reads 1_000; pandas and Spark do not
        raise ValueError(v)
    return float(v)


def _parse_bool(v: str) -> bool:
    if v.lower() not in ("true", "false"):
        raise ValueError(v)
    return v.lower() == "true"


def _parse_date(v: str) -> date:
    if len(v) != 10:  # fromisoformat also takes the basic form 20240101
        raise ValueError(v)
    return date.fromisoformat(v)


def _parse_timestamp(v: str) -> datetime:
    if re.match(r"\d{4}-\d{2}-\d{2}", v) is None:  # fromisoformat also takes 20240101T1000, Spark does not
        raise ValueError(v)
    return datetime.fromisoformat(v.replace("Z", "+00:00"))


# Spark SQL type -> parser of one CSV value (a bad value raises ValueError, or ArithmeticError for decimals).
# DECIMAL(p, s) and TIMESTAMP_* are looked up by their prefix; a type not here (strings, ...) Spark parses itself.
_PARSERS: dict[str, Callable[[str], object]] = {
    **dict.fromkeys(("TINYINT", "SMALLINT", "INT", "BIGINT", "LONG", "INTEGER", "SHORT", "BYTE"), _parse_int),
    **dict.fromkeys(("FLOAT", "DOUBLE", "REAL"), _parse_float),
    "DECIMAL": Decimal,
    "BOOLEAN": _parse_bool,
    "DATE": _parse_date,
    "TIMESTAMP": _parse_timestamp,
}
# Inference tries the narrowest type first; every value of a column must fit. Dates and times stay text, as
# pandas reads them for SQLMesh.
_INFERENCE = ("BIGINT", "DOUBLE", "BOOLEAN")


def _fits(parse: Callable[[str], object], value: str) -> bool:
    try:
        parse(value)
    except (ValueError, ArithmeticError):
        return False
    return True


def _checker(spark_type: str) -> Callable[[str], object] | None:
    t = spark_type.upper()
    for prefix in ("DECIMAL", "TIMESTAMP"):
        if t.startswith(prefix):
            t = prefix
    return _PARSERS.get(t)


def read_seed(
    path: Path, settings: Mapping[str, str] | None = None, declared: Mapping[str, str] | None = None
) -> SeedFile:
    """Read and check a seed CSV; raise ModelFileError naming the CSV file and line of a bad row."""
    settings = settings or {}
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ModelFileError(path, None, f"cannot read the seed file: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ModelFileError(path, None, "the seed file is not UTF-8 text") from None
    records = _records(path, text, settings)
    if not records:
        raise ModelFileError(path, 1, "the seed file is empty", hint="the first line must name the columns")
    names = [h.strip().lower() for h in records[0][1]]
    if not names or any(not n for n in names):
        raise ModelFileError(
            path, 1, "the header line has an empty column name", hint="name every column on the first line"
        )
    if declared and list(declared) != names:
        raise ModelFileError(
            path,
            1,
            f"the seed's columns ({', '.join(names)}) differ from the model's declared columns ({', '.join(declared)})",
            hint="make the CSV header and the MODEL `columns` list name the same columns in the same order",
        )
    rows = records[1:]
    for line, record in rows:
        if len(record) != len(names):
            raise ModelFileError(path, line, f"the row has {len(record)} values, the header names {len(names)} columns")
    # Each column's values that are not missing (a marker is NULL, as is a blank value of a typed column).
    values = [
        [(line, r[i]) for line, r in rows if r[i] not in na_markers(settings, name) and r[i].strip()]
        for i, name in enumerate(names)
    ]
    columns = _declared_columns(path, values, declared) if declared else _inferred_columns(values, names, bool(rows))
    return SeedFile(columns, hashlib.sha256(raw).hexdigest(), len(rows))


def _csv_reader(text: str, settings: Mapping[str, str], strict: bool = False) -> Any:
    return csv.reader(
        io.StringIO(text),
        delimiter=settings.get("delimiter", ","),
        quotechar=settings.get("quotechar", '"'),
        escapechar=settings.get("escapechar"),
        strict=strict,
    )


def _records(path: Path, text: str, settings: Mapping[str, str]) -> list[tuple[int, list[str]]]:
    """The records of a seed CSV, each with the line it starts on (a quoted value may span lines); a line
    that is not CSV, or a quote never closed (pandas fails there too), is an error naming its line."""
    reader = _csv_reader(text, settings)
    records: list[tuple[int, list[str]]] = []
    end = 0
    try:
        for record in reader:
            if record:  # a blank line is no row
                records.append((end + 1, record))
            end = reader.line_num
    except csv.Error as exc:
        raise ModelFileError(path, end + 1, f"the line cannot be read as CSV: {exc}") from None
    try:
        for _ in _csv_reader(text, settings, strict=True):
            pass
    except csv.Error as exc:  # the lenient reader took the rest of the file as the quoted value
        if "unexpected end of data" in str(exc) and records:
            raise ModelFileError(
                path,
                records[-1][0],
                "a quoted value opened on this line is never closed",
                hint='close the quote (a quoted value may span lines; a quote inside one is written twice: "")',
            ) from None
    return records


def _declared_columns(path: Path, values: list[list[tuple[int, str]]], declared: Mapping[str, str]) -> dict[str, str]:
    """The declared column types, once every value of the rows fits its column's type."""
    columns = {n: t.upper() for n, t in declared.items()}
    for (name, spark_type), column_values in zip(columns.items(), values):
        parse = _checker(spark_type)
        if parse is None:
            continue
        for line, value in column_values:
            if not _fits(parse, value.strip()):
                raise ModelFileError(
                    path,
                    line,
                    f"value '{value.strip()}' of column {name} is not a {spark_type}",
                    hint="fix the value or the column's declared type",
                )
    return columns


def _inferred_columns(values: list[list[tuple[int, str]]], names: list[str], any_rows: bool) -> dict[str, str]:
    """Each column's type: the first type of the inference order all its values fit, else STRING; a column
    of missing values only is DOUBLE, as pandas reads it (without rows, STRING)."""
    columns = {}
    for name, column_values in zip(names, values):
        texts = [v.strip() for _, v in column_values]
        if not texts:
            columns[name] = "DOUBLE" if any_rows else "STRING"
            continue
        columns[name] = next((t for t in _INFERENCE if all(_fits(_PARSERS[t], v) for v in texts)), "STRING")
    return columns
