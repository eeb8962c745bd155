"""SEED models' CSV files: column types (declared or inferred), validated row by row, and a content hash.

Pure Python (the csv module): a bad value is reported with the CSV file and its line before Spark ever
reads the file, and the content hash makes a changed CSV change the model's fingerprint.

>>> import tempfile, pathlib
>>> p = pathlib.Path(tempfile.mkdtemp()) / "x.csv"
>>> _ = p.write_text("id,name,day\\n1,a,2024-01-01\\n2,b,2024-01-02\\n")
>>> read_seed(p).columns
{'id': 'BIGINT', 'name': 'STRING', 'day': 'DATE'}
"""

from __future__ import annotations

import csv
import hashlib
import io
import re
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Callable, Mapping

from incremental_assets.errors import ModelFileError

# Options of `csv_settings (...)` in the kind, with their Spark reader names.
CSV_SETTINGS = {"delimiter": "sep", "quotechar": "quote", "escapechar": "escape"}


@dataclass(frozen=True)
class SeedFile:
    columns: dict[str, str]  # name -> Spark SQL type, in file order
    content_hash: str
    rows: int


def _parse_int(v: str) -> int:
    if re.fullmatch(r"[+-]?\d+", v) is None:
        raise ValueError(v)
    return int(v)


def _parse_bool(v: str) -> bool:
    if v.lower() not in ("true", "false"):
        raise ValueError(v)
    return v.lower() == "true"


def _parse_date(v: str) -> date:
    if len(v) != 10:  # fromisoformat also takes the basic form 20240101
        raise ValueError(v)
    return date.fromisoformat(v)


def _parse_timestamp(v: str) -> datetime:
    return datetime.fromisoformat(v.replace("Z", "+00:00"))


# Spark SQL type -> parser of one CSV value (a bad value raises ValueError, or ArithmeticError for decimals).
# DECIMAL(p, s) and TIMESTAMP_* are looked up by their prefix; a type not here (strings, ...) Spark parses itself.
_PARSERS: dict[str, Callable[[str], object]] = {
    **dict.fromkeys(("TINYINT", "SMALLINT", "INT", "BIGINT", "LONG", "INTEGER", "SHORT", "BYTE"), _parse_int),
    **dict.fromkeys(("FLOAT", "DOUBLE", "REAL"), float),
    "DECIMAL": Decimal,
    "BOOLEAN": _parse_bool,
    "DATE": _parse_date,
    "TIMESTAMP": _parse_timestamp,
}
# Inference tries the narrowest type first; every value of a column must fit.
_INFERENCE = ("BIGINT", "DOUBLE", "BOOLEAN", "DATE", "TIMESTAMP")


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
    reader = csv.reader(
        io.StringIO(text),
        delimiter=settings.get("delimiter", ","),
        quotechar=settings.get("quotechar", '"'),
        escapechar=settings.get("escapechar"),
    )
    try:
        header = next(reader)
    except StopIteration:
        raise ModelFileError(path, 1, "the seed file is empty", hint="the first line must name the columns") from None
    names = [h.strip().lower() for h in header]
    if not names or any(not n for n in names):
        raise ModelFileError(
            path, 1, "the header line has an empty column name", hint="name every column on the first line"
        )
    if declared:
        if list(declared) != names:
            raise ModelFileError(
                path,
                1,
                f"the seed's columns ({', '.join(names)}) differ from the model's declared columns "
                f"({', '.join(declared)})",
                hint="make the CSV header and the MODEL `columns` list name the same columns in the same order",
            )
    rows: list[tuple[int, list[str]]] = []
    for record in reader:
        line = reader.line_num
        if not record or all(not v.strip() for v in record):
            continue
        if len(record) != len(names):
            raise ModelFileError(path, line, f"the row has {len(record)} values, the header names {len(names)} columns")
        rows.append((line, record))
    columns = _declared_columns(path, rows, declared) if declared else _inferred_columns(rows, names)
    return SeedFile(columns, hashlib.sha256(raw).hexdigest(), len(rows))


def _declared_columns(path: Path, rows: list[tuple[int, list[str]]], declared: Mapping[str, str]) -> dict[str, str]:
    """The declared column types, once every value of the rows fits its column's type."""
    columns = {n: t.upper() for n, t in declared.items()}
    for i, (name, spark_type) in enumerate(columns.items()):
        parse = _checker(spark_type)
        if parse is None:
            continue
        for line, record in rows:
            value = record[i].strip()
            if value and not _fits(parse, value):
                raise ModelFileError(
                    path,
                    line,
                    f"value '{value}' of column {name} is not a {spark_type}",
                    hint="fix the value or the column's declared type",
                )
    return columns


def _inferred_columns(rows: list[tuple[int, list[str]]], names: list[str]) -> dict[str, str]:
    """Each column's type: the first type of the inference order all its values fit, else STRING."""
    columns = {}
    for i, name in enumerate(names):
        values = [r[i].strip() for _, r in rows if r[i].strip()]
        columns[name] = next((t for t in _INFERENCE if values and all(_fits(_PARSERS[t], v) for v in values)), "STRING")
    return columns
