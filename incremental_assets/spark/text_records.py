"""A malformed record of a CSV or JSON source, found in its files: the source, the file, the line and the
column, for the one-line error a failed read becomes.

Spark reads these sources with ``mode FAILFAST`` and reports the first bad record by its parsed values
(``[MALFORMED_RECORD_IN_PARSING]``, the cause ``For input string: "abc"``) or, for a text time column
compared with a window, by the value alone (``[CAST_INVALID_INPUT] The value 'x' ...``). The record is
looked up in the source's local files, reading at most ``SCAN_LIMIT`` bytes.
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

from incremental_assets.delta.files import source_data_files
from incremental_assets.errors import SourceDataError
from incremental_assets.model.project import Project, Source

SCAN_LIMIT = 64 * 1024 * 1024
_MALFORMED = re.compile(r"MALFORMED_RECORD_IN_PARSING|JsonParseException|JsonEOFException")
_BAD_NUMBER = re.compile(r'For input string: "(?P<value>[^"]*)"')
_BAD_CAST = re.compile(r"The value '(?P<value>[^']*)' of the type \"STRING\" cannot be cast to \"(?P<type>\w+)\"")


def bad_record(
    text: str, project: Project, *, source: Source | None = None, path: str | None = None
) -> SourceDataError | None:
    """The one-line error for a malformed CSV/JSON record named in Spark's error ``text`` (None: not that)."""
    cast = _BAD_CAST.search(text)
    if not _MALFORMED.search(text) and cast is None:
        return None
    number = _BAD_NUMBER.search(text)
    value = cast["value"] if cast else number["value"] if number else None
    candidates = (
        [source] if source is not None else [s for s in project.sources.values() if s.format in ("csv", "json")]
    )
    for candidate in candidates:
        for file in [path] if path else source_data_files(candidate.location):
            found = _locate(Path(file), candidate, value)
            if found is None:
                continue
            line, column = found
            where = f"source {candidate.name}: file {file} line {line}"
            if value is None:
                return SourceDataError(
                    f"{where} is not a complete {candidate.format.upper()} record (fix: correct or remove that line)"
                )
            wanted = f"a {cast['type'].lower()}" if cast else "a number"
            return SourceDataError(
                f"{where}: column {column} holds {value!r}, which is not {wanted} "
                f"(fix: correct the value, or declare the column's type"
                + (" and its time_column_format" if column == candidate.time_column else "")
                + " in sources.yaml)"
            )
    if cast is not None and source is not None:  # a value of this source's, past what was scanned
        names = source.name
        return SourceDataError(
            f"{names}: a value {cast['value']!r} cannot be read as {cast['type'].lower()} "
            "(fix: correct it in the source's files, or declare the column's type and its "
            "time_column_format in sources.yaml)"
        )
    return None


def _locate(path: Path, source: Source, value: str | None) -> tuple[int, str | None] | None:
    """(line, column) of the first record of ``path`` that does not parse (``value`` None) or holds ``value``."""
    settings = source.csv
    try:
        if path.stat().st_size > SCAN_LIMIT:
            return None
        lines = path.read_text(encoding=settings.encoding, errors="replace").splitlines()
    except (OSError, LookupError):
        return None
    if source.format == "json":
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError:
                if value is None:
                    return number, None
                continue
            if value is not None and isinstance(record, dict):
                column = next((k for k, v in record.items() if str(v) == value), None)
                if column is not None:
                    return number, column
        return None
    rows = list(
        csv.reader(lines, delimiter=settings.delimiter, quotechar=settings.quotechar, escapechar=settings.escapechar)
    )
    header = (rows[0] if rows else []) if settings.header else list(source.columns)
    for number, row in enumerate(rows[1:] if settings.header else rows, 2 if settings.header else 1):
        if value is None and len(row) != len(header):
            return number, None
        if value is not None and value in row:
            index = row.index(value)
            return number, header[index] if index < len(header) else None
    return None
