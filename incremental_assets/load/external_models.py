"""SQLMesh's ``external_models.yaml``: the columns of tables no model produces, and where they live.

Read from ``external_models.yaml`` and every YAML file under ``external_models/``. Each entry is
SQLMesh's ``{name, columns, description?, gateway?, dialect?, start?, audits?, ...}``; we also take the keys of a
sources.yaml entry (``location``, ``format``, ``time_column``, ``event_time_column``, ``interval_unit``), since SQLMesh
finds the tables through its gateway and we need to be told where they are. A name declared in ``sources.yaml`` too
takes its location from there and its columns from here when sources.yaml gives none. The format defaults
from the location's suffix (``.csv``, ``.json``, ``.parquet``; otherwise Delta). Column types are in the
project dialect (``model_defaults.dialect``) and become Spark types.

>>> import tempfile, pathlib
>>> d = pathlib.Path(tempfile.mkdtemp()); p = d / "external_models.yaml"
>>> _ = p.write_text("- name: '\\"raw\\".\\"events\\"'\\n  columns: {id: INTEGER, v: TEXT}\\n"
...                  "  location: data/events.parquet\\n")
>>> s = load_external_models(p, d, {}, "duckdb")["raw.events"]
>>> s.format, dict(s.columns)
('parquet', {'id': 'INT', 'v': 'STRING'})
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Mapping

from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from incremental_assets.errors import ModelFileError
from incremental_assets.load.sources import make_source, yaml_entries
from incremental_assets.model.project import Source

log = logging.getLogger(__name__)

EXTERNAL_MODELS_FILE = "external_models.yaml"
EXTERNAL_MODELS_DIR = "external_models"
# SQLMesh's keys for an external model, then where we read it from (SQLMesh finds it through its gateway).
_SQLMESH_KEYS = {
    "name",
    "columns",
    "description",
    "gateway",
    "dialect",
    "start",
    "audits",
    "owner",
    "tags",
    "column_descriptions",
    "kind",
}
_KEYS = _SQLMESH_KEYS | {"location", "format", "time_column", "event_time_column", "interval_unit"}
_SUFFIX_FORMATS = {".csv": "csv", ".json": "json", ".parquet": "parquet"}


@dataclass(frozen=True)
class Unlocated:
    """An external model declared without a location: a model may read it only if a statement
    (``before_all``, a pre-statement) creates it in Spark's catalog."""

    name: str
    path: Path
    line: int
    columns: Mapping[str, str]

    def as_catalog_table(self) -> Source:
        return Source(name=self.name, location=self.name, format="table", columns=self.columns, line=self.line)


def external_model_files(project_dir: Path) -> list[Path]:
    """``external_models.yaml`` and every YAML file under ``external_models/`` (recursively), as SQLMesh reads them."""
    folder = project_dir / EXTERNAL_MODELS_DIR
    nested = (
        sorted(p for p in folder.rglob("*") if p.suffix in (".yaml", ".yml") and p.is_file()) if folder.is_dir() else []
    )
    return [project_dir / EXTERNAL_MODELS_FILE, *nested]


def load_external_models(
    path: Path,
    project_dir: Path,
    sources: Mapping[str, Source],
    dialect: str,
    *,
    gateway: str | None = None,
    unlocated: dict[str, Unlocated] | None = None,
) -> dict[str, Source]:
    """sources.yaml's sources completed by one external models file, plus the externals located there.

    An entry for another ``gateway`` than the selected one is skipped (as SQLMesh does); an entry with no
    location goes to ``unlocated``. ``audits`` and ``start`` are SQLMesh's and not run here.
    """
    out = dict(sources)
    for entry, line in yaml_entries(path, f"{path.name} must be a list of tables"):
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise ModelFileError(
                path, line, "each external model is a mapping with a name", hint="write `- name: raw.orders`"
            )
        unknown = set(entry) - _KEYS
        if unknown:
            raise ModelFileError(
                path,
                line,
                f"unknown key(s) {', '.join(sorted(unknown))} in an external model",
                hint="use " + ", ".join(sorted(_KEYS)),
            )
        if entry.get("gateway") and str(entry["gateway"]).lower() != (gateway or "").lower():
            continue
        name = entry["name"].replace('"', "").replace("`", "").lower()
        columns = _spark_columns(entry.get("columns") or {}, str(entry.get("dialect") or dialect), path, line, name)
        if entry.get("audits"):
            log.info(
                "%s:%s: the audits of external model %s are SQLMesh's checks on its gateway's table and "
                "are not run here",
                path,
                line,
                name,
            )
        if name in out:
            if not out[name].columns:
                out[name] = replace(out[name], columns=columns)
            continue
        if not entry.get("location"):
            if unlocated is not None:
                unlocated[name] = Unlocated(name, path, line, columns)
            continue
        fmt = str(
            entry.get("format") or _SUFFIX_FORMATS.get(Path(str(entry["location"])).suffix.lower(), "delta")
        ).lower()
        out[name] = make_source(entry, name, fmt, columns, project_dir, path, line, what="external model")
    return out


def _spark_columns(columns: object, dialect: str, path: Path, line: int, name: str) -> dict[str, str]:
    if not isinstance(columns, dict):
        raise ModelFileError(
            path, line, f"external model {name}: columns must map names to types", hint="write `columns: {id: INT}`"
        )
    out = {}
    for column, type_text in columns.items():
        try:
            out[str(column).lower()] = exp.DataType.build(str(type_text), dialect=dialect).sql(dialect="spark")
        except (ParseError, TokenError, ValueError):
            raise ModelFileError(
                path, line, f"external model {name}: unknown type '{type_text}' for column {column}"
            ) from None
    return out
