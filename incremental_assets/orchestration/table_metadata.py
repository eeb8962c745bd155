"""What Dagster shows about a model's table: typed columns, column lineage, table name, location, code
links and freshness, under Dagster's own metadata keys (``dagster/column_schema``, ``dagster/table_name``,
``dagster/uri``, ``dagster/code_references``, ``dagster/column_lineage``, ``dagster/row_count``) so the UI
renders them as dagster-dbt's assets are rendered.

Column types come, per model in dependency order, from the header's ``columns``, else the existing Delta
table's schema, else sqlglot's inference over the sources' and upstream models' columns; each model's
types feed its downstream models' inference.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import dagster as dg

from incremental_assets import delta
from incremental_assets.analysis import columns as columns_module
from incremental_assets.analysis.columns import describe_columns
from incremental_assets.errors import StorageError
from incremental_assets.load.cache import ResultCache, cache_folder, code_digest
from incremental_assets.load.macros import render as macros_module
from incremental_assets.load.macros import window_conditions
from incremental_assets.load.macros.render import sample_macros
from incremental_assets.load.macros.window_conditions import first_variant
from incremental_assets.model.project import Project
from incremental_assets.model.sql_model import SqlModel
from incremental_assets.plan import definition as definition_module
from incremental_assets.plan.definition import columns_key

UNKNOWN_TYPE = "unknown"


@dataclass(frozen=True)
class ModelColumns:
    """A model's output columns: name -> type (``unknown`` when no source says), and the upstream
    (table, column) pairs each is computed from; ``stored`` when the types were read from its table."""

    types: Mapping[str, str] = field(default_factory=dict)
    lineage: Mapping[str, tuple[tuple[str, str], ...]] = field(default_factory=dict)
    stored: bool = False


def _stored_types(project: Project, model: SqlModel) -> dict[str, str] | None:
    if not model.has_table:
        return None
    try:
        return delta.column_types(project.settings.table_location(model.name)) or None
    except (StorageError, OSError):  # an unreachable warehouse leaves the inferred types
        return None


def project_columns(project: Project) -> dict[str, ModelColumns]:
    """Every model's columns, upstreams first (see the module docstring for where types come from)."""
    known: dict[str, Mapping[str, str]] = {s.name: dict(s.columns) for s in project.sources.values() if s.columns}
    out: dict[str, ModelColumns] = {}
    cache = ResultCache(cache_folder(project.directory), "columns")
    for model in project.ordered():
        inferred_types, lineage = _inferred(model, known, cache)
        stored = None if model.columns else _stored_types(project, model)
        declared = dict(model.columns) or stored or {}
        names = list(declared) or list(inferred_types)
        types = {n: declared.get(n) or inferred_types.get(n) or UNKNOWN_TYPE for n in names}
        out[model.name] = ModelColumns(types, lineage, stored is not None)
        known[model.name] = types  # sqlglot reads "unknown" as a column of unknown type
    cache.save()
    return out


def _inferred(
    model: SqlModel, known: Mapping[str, Mapping[str, str]], cache: ResultCache
) -> tuple[dict[str, str | None], dict[str, tuple[tuple[str, str], ...]]]:
    """sqlglot's types and lineage of the model's columns, cached under what they are computed from: the
    model's definition (its fingerprint: the query after macros, kind, columns), the macro values, and the
    columns of every table the query reads."""
    key = columns_key(model, known, code_digest(columns_module, window_conditions, definition_module, macros_module))
    found = cache.get(key)
    if found is None:
        inferred = describe_columns(first_variant(model.query), known, macros=sample_macros(model), detail=False)
        found = cache.put(key, [inferred.types, {c: [list(p) for p in pairs] for c, pairs in inferred.lineage.items()}])
    types, lineage = found
    return dict(types), {c: tuple((t, n) for t, n in pairs) for c, pairs in lineage.items()}


def column_schema(types: Mapping[str, str], descriptions: Mapping[str, str]) -> dg.TableSchema:
    return dg.TableSchema(
        columns=[dg.TableColumn(name=n, type=t, description=descriptions.get(n)) for n, t in types.items()]
    )


def column_lineage(
    lineage: Mapping[str, Sequence[tuple[str, str]]], key_of: Callable[[str], dg.AssetKey | None]
) -> dg.TableColumnLineage | None:
    """``dagster/column_lineage``: each output column's upstream asset columns (tables without an asset left out)."""
    deps: dict[str, list[dg.TableColumnDep]] = {}
    for column, sources in lineage.items():
        found = [
            dg.TableColumnDep(asset_key=key, column_name=name)
            for table, name in sources
            if (key := key_of(table)) is not None
        ]
        if found:
            deps[column] = found
    return dg.TableColumnLineage(deps_by_column=deps) if deps else None


def code_references(model: SqlModel) -> dg.CodeReferencesMetadataValue:
    """The model file at its header's line: the UI opens it (or its page on the git host, see :func:`link_to_git`)."""
    path = os.path.realpath(model.path)  # as Path.resolve, without building a Path per model
    return dg.CodeReferencesMetadataValue(
        code_references=[
            dg.LocalFileCodeReference(file_path=path, line_number=model.header_line, label=os.path.basename(path))
        ]
    )


def table_row_count(uri: str | None) -> int | None:
    """The table's row count from its Delta log (None when the log alone cannot say)."""
    if not uri:
        return None
    try:
        return delta.row_count(uri)
    except (StorageError, OSError):
        return None


def written_schema(uri: str | None, descriptions: Mapping[str, str]) -> dg.TableSchema | None:
    """The columns the table holds now, with their types, as a materialization reports them."""
    if not uri:
        return None
    try:
        types = delta.column_types(uri)
    except (StorageError, OSError):
        return None
    return column_schema(types, descriptions) if types else None


# -- links to the project's git host ---------------------------------------------------------------

_REMOTE = re.compile(
    r"^(?:https?://(?:[^@/]+@)?|ssh://(?:[^@/]+@)?|[^@/]+@)(?P<host>[^/:]+)(?::\d+)?[:/](?P<path>.+?)(?:\.git)?/?$"
)


def web_url(remote: str) -> str | None:
    """The web address of a git remote (``git@github.com:org/repo.git`` -> ``https://github.com/org/repo``);
    None for a remote that is a local folder.

    >>> web_url("git@github.com:acme/shop.git"), web_url("https://gitlab.com/acme/shop"), web_url("/srv/repo")
    ('https://github.com/acme/shop', 'https://gitlab.com/acme/shop', None)
    """
    found = _REMOTE.match(remote.strip())
    return f"https://{found['host']}/{found['path']}" if found else None


def _git(directory: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(directory), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 and done.stdout.strip() else None


def git_location(directory: Path) -> tuple[str, str, Path] | None:
    """(web address, branch, work tree root) of the git repository holding ``directory``, when it has a
    remote on a git host (``origin``, else the first one); None otherwise."""
    root = _git(directory, "rev-parse", "--show-toplevel")
    remotes = (_git(directory, "remote") or "").split()
    if root is None or not remotes:
        return None
    remote = _git(directory, "remote", "get-url", "origin" if "origin" in remotes else remotes[0])
    url = web_url(remote) if remote else None
    # the branch checked out, else (a detached checkout) the commit
    branch = _git(directory, "symbolic-ref", "--short", "HEAD") or _git(directory, "rev-parse", "HEAD")
    if url is None or branch is None:
        return None
    return url, branch, Path(root)


def link_to_git(assets: list[Any], directory: Path) -> list[Any]:
    """Model files linked to their page on the git host (as dagster-dbt's ``link_code_references_to_git``),
    when the project is in a git repository with such a remote; the assets unchanged otherwise."""
    location = git_location(directory)
    if location is None:
        return assets
    url, branch, root = location
    mapping = dg.AnchorBasedFilePathMapping(local_file_anchor=root, file_anchor_path_in_repository="")
    return list(dg.link_code_references_to_git(assets, git_url=url, git_branch=branch, file_path_mapping=mapping))
