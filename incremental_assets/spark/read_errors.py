"""A data file Spark could not read, said in one line: which source (or model table), which file, which
column, and what to do, instead of a Java stack trace.

Spark reports a file it cannot read as ``[FAILED_READ_FILE.*] Encountered error while reading file
<path>`` with the cause after it: a column whose type in the file is not the one the source is read with,
or a file that is not Parquet at all (a stray file, or one still being written). A CSV or JSON source is
read strictly (a malformed record fails the run); Spark does not always name the file then (a JSON line
that does not parse while the schema is inferred, a text time that does not cast), so the record is
found in the source's files (see :mod:`.text_records`). A SEED's CSV that Spark cannot read is checked
again as the project load checks it, which names the file and the line.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from incremental_assets.delta.files import is_local, source_data_files
from incremental_assets.errors import ModelFileError, SourceDataError
from incremental_assets.load.seeds import read_seed
from incremental_assets.model.kinds import Seed
from incremental_assets.model.project import Project
from incremental_assets.spark.text_records import bad_record

_FILE = re.compile(r"(?:reading file|for file:?)\s+(\S+?)\.?(?:\s|$)")
_TYPE = re.compile(
    r"Parquet column \[(?P<column>[^\]]+)\]\. Expected Spark type (?P<expected>\S+), actual Parquet type "
    r"(?P<actual>[A-Za-z0-9_()]+)"
)
_NUMBER_TIME = re.compile(
    r'Cannot resolve "\(`?(?P<column>[^`\s]+)`? >=? CAST\(.*? AS TIMESTAMP\)\)" due to data type mismatch.*?'
    r'\("(?P<type>TINYINT|SMALLINT|INT|BIGINT|FLOAT|DOUBLE|DECIMAL[^"]*)" and "TIMESTAMP"\)'
)
_NOT_PARQUET = re.compile(r"is not a Parquet file|Could not read footer|CANNOT_READ_FILE_FOOTER|Expected magic number")


def unreadable_input(exc: BaseException, project: Project) -> SourceDataError | None:
    """The one-line error for a Spark failure to read a source's or a model table's file (None: not that)."""
    text = str(exc)
    if "TIMESTAMP(NANOS" in text:
        return _nanoseconds(project)
    number = _NUMBER_TIME.search(text)
    if number is not None:
        return _number_time(project, number["column"].lower(), number["type"])
    found = _FILE.search(text)
    if found is None:
        return bad_record(text, project) or (_seed_error(project, None, text) if "CAST_INVALID_INPUT" in text else None)
    path = found.group(1).removeprefix("file://").removeprefix("file:")
    if any(_is_seed(project, model, path) for model in project.models):
        return _seed_error(project, path, text)
    owner, folder = _owner_of(path, project)
    if owner.startswith("table of model "):
        return _damaged_table(owner, path)
    source = project.sources.get(owner.removeprefix("source "))
    if source is not None and source.format in ("csv", "json"):
        return bad_record(text, project, source=source, path=path) or SourceDataError(
            f"{owner}: file {path} cannot be read as {source.format.upper()} (fix: correct the file or "
            f"move it out of {folder})"
        )
    mismatch = _TYPE.search(text)
    if mismatch is not None:
        column, expected, actual = mismatch.group("column"), mismatch.group("expected"), mismatch.group("actual")
        return SourceDataError(
            f"{owner}: file {path}: column {column} is {actual} in this file, where it is read as {expected} "
            f"(fix: rewrite the file with {column} as {expected}, or move it out of {folder})"
        )
    if _NOT_PARQUET.search(text) or not _footer_reads(path):
        return SourceDataError(
            f"{owner}: file {path} is not a Parquet file, or is not complete yet "
            f"(fix: move it out of {folder}; a file still being written is read by a run after it is complete)"
        )
    cause = next((line.split(": ", 1)[-1] for line in text.splitlines() if line.startswith("Caused by:")), None)
    if cause is None:
        return None
    return SourceDataError(
        f"{owner}: file {path} cannot be read: {cause.strip()[:300]} (fix: replace or move the file out of {folder})"
    )


def _is_seed(project: Project, model: str, path: str | None) -> bool:
    kind = project.models[model].kind
    return isinstance(kind, Seed) and (path is None or os.path.realpath(kind.location) == os.path.realpath(path))


def _seed_error(project: Project, path: str | None, text: str) -> SourceDataError | None:
    """A SEED's CSV Spark could not read (``path``; None: a value that did not cast, of any seed), checked
    again as the project load checks it: the file's line and the fix; else Spark's cause, never Parquet."""
    for name in [m for m in project.models if _is_seed(project, m, path)]:
        model = project.models[name]
        kind = model.kind
        assert isinstance(kind, Seed)
        try:
            read_seed(Path(kind.location), dict(kind.csv_settings))
            read_seed(Path(kind.location), dict(kind.csv_settings), model.columns)
        except ModelFileError as exc:
            return SourceDataError(f"seed of model {name}: {exc}")
        if path is not None:
            cause = next((line.split(": ", 1)[-1] for line in text.splitlines() if "Caused by:" in line), "")
            return SourceDataError(
                f"seed of model {name}: file {path} cannot be read as CSV{': ' + cause.strip()[:300] if cause else ''}"
                " (fix: correct the file: each row has the header's number of values, a quoted value may span "
                'lines and a quote inside it is written twice: "")'
            )
    return None


def _number_time(project: Project, column: str, kind: str) -> SourceDataError | None:
    """A time column holding numbers, read without a format saying what they count."""
    source = next((s for s in project.sources.values() if s.time_column == column and not s.time_format), None)
    if source is None:
        return None
    return SourceDataError(
        f"source {source.name}: time column {column} holds numbers ({kind}), which a window cannot compare with "
        f"times (fix: say what they count in sources.yaml: `time_column_format: epoch_seconds` (or epoch_millis, "
        f"epoch_micros), or `'%Y%m%d'` for numbers such as 20250301)"
    )


NANOS_FIX = (
    "write it in microseconds, e.g. pandas `df.to_parquet(path, coerce_timestamps='us', "
    "allow_truncated_timestamps=True)` or pyarrow `pq.write_table(table, path, coerce_timestamps='us')`"
)


def _nanoseconds(project: Project) -> SourceDataError:
    """Spark reads no Parquet timestamp in nanoseconds (pandas writes them so by default) and does not say
    which file has one: the first local Parquet source file with such a column is named."""
    for source in project.sources.values():
        if source.format != "parquet" or not is_local(source.location):
            continue
        for path in source_data_files(source.location):
            try:
                schema = pq.read_schema(path)
            except (OSError, pa.ArrowException):
                continue
            for field in schema:
                if pa.types.is_timestamp(field.type) and field.type.unit == "ns":
                    return SourceDataError(
                        f"source {source.name}: file {path}: column {field.name} holds timestamps in nanoseconds, "
                        f"which Spark cannot read (fix: {NANOS_FIX})"
                    )
    return SourceDataError(
        f"a Parquet input holds timestamps in nanoseconds, which Spark cannot read (fix: {NANOS_FIX})"
    )


def _damaged_table(owner: str, path: str) -> SourceDataError:
    """A model table's data file that cannot be read: the table was damaged (the file is ours, written by a
    run), so the fix is to compute its intervals again, not to edit a source file."""
    what = (
        "is missing"
        if not os.path.exists(path)
        else "is not the Parquet file that was committed"
        if not _footer_reads(path)
        else "cannot be read"
    )
    return SourceDataError(
        f"{owner}: data file {path} {what}: the table lost rows it recorded "
        "(fix: `incremental-assets verify` names the lost intervals; `incremental-assets run --auto` "
        "computes them again)"
    )


def _footer_reads(path: str) -> bool:
    """Whether a local file's Parquet footer can be read (a cut-off copy's cannot)."""
    try:
        pq.read_metadata(path)
    except (OSError, pa.ArrowException):
        return not os.path.exists(path)  # a file gone meanwhile is not said to be damaged
    return True


def _owner_of(path: str, project: Project) -> tuple[str, str]:
    """Who a file belongs to (a source or a model's table) and the folder it lives in."""
    best = None
    for source in project.sources.values():
        location = source.location.removeprefix("file://").rstrip("/")
        if path == location:  # a one-file source
            return f"source {source.name}", os.path.dirname(location)
        if path.startswith(location + "/") and (best is None or len(location) > len(best[1])):
            best = (f"source {source.name}", location)
    for model in project.models.values():
        location = project.settings.table_location(model.name).removeprefix("file://").rstrip("/")
        if path.startswith(location + "/") and (best is None or len(location) > len(best[1])):
            best = (f"table of model {model.name}", location)
    return best or ("input", path.rsplit("/", 1)[0])
