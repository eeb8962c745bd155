"""The definition a table was built with (see :mod:`incremental_assets.plan.definition`), kept in the
table's own folder so any later load, on any machine, can compare it with the model's current one.

Where it lives, and why there: ``<table>/_incremental_assets/definition-<fingerprint>.json``.

- Not in each commit's info: that would repeat a few kilobytes in every commit of the log (an hourly
  model writes thousands), and a log cleanup would lose it.
- Not in the table properties: delta-rs writes them only at creation or in a commit of their own, so
  they could not change in the commit that writes the data, and an extra commit would become the
  table's latest one, which is where its fingerprint is read.
- A file named by the fingerprint is as good as atomic with the data: it is written (whole: a rename on
  a local disk, one object PUT on a store) under the table's writer lock BEFORE the commit, and the
  commit records that fingerprint. Whatever commit is the latest, the definition it names was complete
  before it landed. After the commit the definitions of other fingerprints are removed, so a table keeps
  one copy, not one per commit. A folder starting with ``_`` is never taken for data by Delta readers
  nor removed by a Delta vacuum.

A table built before definitions were kept has none: :func:`stored_definition` returns None.
"""

from __future__ import annotations

import json
import os
import uuid
from typing import Any, Mapping

from pyarrow import fs as pafs

from incremental_assets.delta.files import filesystem, is_local, local_path
from incremental_assets.delta.stats import interval_row_counts, row_count
from incremental_assets.delta.tables import built_with, exists, table_uri
from incremental_assets.errors import DamagedTableError, StorageError
from incremental_assets.model.project import Project
from incremental_assets.plan.changes import TableState

DEFINITION_DIR = "_incremental_assets"


def _name(fingerprint: str) -> str:
    return f"definition-{fingerprint}.json"


def _folder(uri: str) -> str:
    return f"{uri.rstrip('/')}/{DEFINITION_DIR}"


def write_definition(uri: str, definition: Mapping[str, Any]) -> None:
    """Keep ``definition`` (which names its fingerprint) with the table, whole or not at all."""
    data = json.dumps(definition, sort_keys=True, separators=(",", ":")).encode()
    name = _name(str(definition["fingerprint"]))
    try:
        if is_local(uri):
            folder = local_path(_folder(uri))
            os.makedirs(folder, exist_ok=True)
            temporary = os.path.join(folder, f".{name}.{uuid.uuid4().hex[:8]}")
            with open(temporary, "wb") as handle:
                handle.write(data)
            os.replace(temporary, os.path.join(folder, name))
            return
        fs, base = filesystem(_folder(uri))
        with fs.open_output_stream(f"{base}/{name}") as handle:
            handle.write(data)
    except OSError as exc:
        raise StorageError(f"cannot keep the definition of table {uri}: {exc}") from None


def keep_only(uri: str, fingerprint: str) -> None:
    """Remove the definitions of other fingerprints than the one the table's latest commit names."""
    fs, base = filesystem(_folder(uri))
    try:
        infos = fs.get_file_info(pafs.FileSelector(base, allow_not_found=True))
        for info in infos:
            name = info.path.rsplit("/", 1)[-1]
            if name.startswith("definition-") and name != _name(fingerprint):
                fs.delete_file(info.path)
    except OSError:
        pass  # an old definition left behind costs a few kilobytes and is never read


def stored_definition(uri: str, fingerprint: str | None) -> dict[str, Any] | None:
    """The definition the table was built with, by the fingerprint its latest commit names (None: no
    table, or built before definitions were kept, or the file is unreadable)."""
    if not fingerprint:
        return None
    fs, base = filesystem(_folder(uri))
    try:
        with fs.open_input_stream(f"{base}/{_name(fingerprint)}") as handle:
            value = json.loads(handle.read().decode("utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) and value.get("fingerprint") == fingerprint else None


def table_names(warehouse: str) -> list[str]:
    """The model names of the Delta tables under ``warehouse`` (``<schema>/<table>`` folders holding a
    Delta log), also of tables no model of the project writes any more."""
    fs, base = filesystem(warehouse)
    base = base.rstrip("/")
    try:
        schemas = [
            i
            for i in fs.get_file_info(pafs.FileSelector(base, allow_not_found=True))
            if i.type == pafs.FileType.Directory
        ]
        found = []
        for schema in schemas:
            if schema.base_name.startswith((".", "_")):
                continue
            for table in fs.get_file_info(pafs.FileSelector(schema.path, allow_not_found=True)):
                if (
                    table.type == pafs.FileType.Directory
                    and fs.get_file_info(f"{table.path}/_delta_log").type == pafs.FileType.Directory
                ):
                    found.append(f"{schema.base_name}.{table.base_name}")
    except OSError as exc:
        raise StorageError(f"cannot list the tables of {warehouse}: {exc}") from None
    return sorted(found)


def table_state(uri: str, *, by_interval: bool, counts: bool = True) -> TableState:
    """What a model's table says for a plan, from its Delta log (and, on a table cut by day, its
    ``ia_interval`` column): nothing is written. Without ``counts``, only its definition is read (no
    intervals, no rows): enough to categorise changes."""
    if not exists(uri):
        return TableState()
    fingerprint = built_with(uri)
    return TableState(
        exists=True,
        fingerprint=fingerprint,
        stored=stored_definition(uri, fingerprint),
        intervals=interval_row_counts(uri) if by_interval and counts else None,
        rows=row_count(uri) if counts else None,
    )


def production_tables(project: Project, *, counts: bool = True) -> dict[str, TableState]:
    """What each model's production table says, for a plan (environments are planned against these too);
    ``counts=False`` reads no statistics. A damaged table is named with its model."""
    warehouse = project.settings.warehouse
    out = {}
    for model in project.ordered():
        if not model.has_table:
            continue
        try:
            out[model.name] = table_state(
                table_uri(warehouse, model.name), by_interval=model.is_incremental, counts=counts
            )
        except DamagedTableError as exc:
            raise exc.of_model(model.name) from None
    return out
