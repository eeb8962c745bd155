"""An environment's files: its manifest (``environment.json``, written whole or not at all), the
environments a warehouse holds, their size, and dropping one without touching what production uses.

A production table may reference a file under an environment's folder (a promotion can take an
environment's files into production without copying them): a drop deletes only the files no
production table's Delta log names, in any version it still holds.
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass
from typing import Any, Mapping
from urllib.parse import unquote

from pyarrow import fs as pafs

from incremental_assets.delta.definition import table_names
from incremental_assets.delta.files import filesystem, is_local, local_path
from incremental_assets.delta.tables import open_table, table_uri
from incremental_assets.errors import StorageError
from incremental_assets.model.environment import MANIFEST, env_root, envs_root, manifest_uri


def read_manifest(warehouse: str, name: str) -> dict[str, Any] | None:
    """The environment's manifest (None: the environment has never been built, or its manifest is unreadable)."""
    fs, path = filesystem(manifest_uri(warehouse, name))
    try:
        with fs.open_input_stream(path) as handle:
            value = json.loads(handle.read().decode("utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def write_manifest(warehouse: str, name: str, manifest: Mapping[str, Any]) -> None:
    """Replace the environment's manifest whole (a temporary file renamed over it; one PUT on a store)."""
    data = json.dumps(manifest, indent=2, sort_keys=True).encode()
    uri = manifest_uri(warehouse, name)
    try:
        if is_local(uri):
            path = local_path(uri)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            temporary = f"{path}.{uuid.uuid4().hex[:8]}.tmp"
            with open(temporary, "wb") as handle:
                handle.write(data)
            os.replace(temporary, path)
            return
        fs, path = filesystem(uri)
        with fs.open_output_stream(path) as handle:
            handle.write(data)
    except OSError as exc:
        raise StorageError(f"cannot write the manifest of environment {name} at {uri}: {exc}") from None


def environment_names(warehouse: str) -> list[str]:
    """The environments under the warehouse (folders of ``__env``)."""
    fs, base = filesystem(envs_root(warehouse))
    try:
        infos = fs.get_file_info(pafs.FileSelector(base, allow_not_found=True))
    except OSError as exc:
        raise StorageError(f"cannot list the environments of {warehouse}: {exc}") from None
    return sorted(i.base_name for i in infos if i.type == pafs.FileType.Directory and not i.base_name.startswith("."))


def _files(uri: str) -> list[pafs.FileInfo]:
    fs, base = filesystem(uri)
    try:
        return [
            i
            for i in fs.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True))
            if i.type == pafs.FileType.File
        ]
    except OSError as exc:
        raise StorageError(f"cannot list {uri}: {exc}") from None


def environment_size(warehouse: str, name: str) -> tuple[int, int]:
    """The bytes and the number of files under the environment's folder."""
    files = _files(env_root(warehouse, name))
    return sum(i.size or 0 for i in files), len(files)


def _normal(path: str) -> str:
    return os.path.normpath(unquote(local_path(path)))


def production_references(warehouse: str) -> set[str]:
    """Every data file a production table's Delta log names (added or removed, in any commit the log
    still holds), as normalized paths: what a drop must leave in place."""
    found: set[str] = set()
    for name in table_names(warehouse):
        uri = table_uri(warehouse, name)
        fs, base = filesystem(uri)
        log = f"{base.rstrip('/')}/_delta_log"
        try:
            commits = [
                i
                for i in fs.get_file_info(pafs.FileSelector(log, allow_not_found=True))
                if i.base_name.endswith(".json")
            ]
            for info in commits:
                with fs.open_input_stream(info.path) as handle:
                    lines = handle.read().decode("utf-8").splitlines()
                for line in lines:
                    action = json.loads(line) if line.strip() else {}
                    entry = action.get("add") or action.get("remove")
                    if entry and entry.get("path"):
                        path = unquote(entry["path"])
                        found.add(
                            _normal(path if "://" in path or path.startswith("/") else f"{base.rstrip('/')}/{path}")
                        )
            # the current version's files, also those only a checkpoint names (older commit files past the log retention
            # are gone)
            try:
                found.update(_normal(unquote(f)) for f in open_table(uri).file_uris())
            except StorageError:
                if fs.get_file_info(f"{log}/_last_checkpoint").type != pafs.FileType.NotFound:
                    raise  # files only its checkpoint names cannot be known: nothing is removed
                # without a checkpoint every file the table holds is in a commit file read above
        except (OSError, ValueError) as exc:
            raise StorageError(
                f"cannot read the Delta log of {uri} to check what it references: {exc}; nothing was removed"
            ) from None
    return found


@dataclass(frozen=True)
class Dropped:
    removed: int  # files deleted
    kept: tuple[str, ...]  # files left because a production table references them


def drop_environment(warehouse: str, name: str) -> Dropped:
    """Delete the environment's tables and manifest, except the files a production table references."""
    root = env_root(warehouse, name)
    referenced = production_references(warehouse)
    fs, base = filesystem(root)
    files = _files(root)
    kept = tuple(i.path for i in files if _normal(i.path) in referenced)
    try:
        if not kept:
            fs.delete_dir(base)
            return Dropped(len(files), ())
        for info in files:
            if _normal(info.path) not in referenced:
                fs.delete_file(info.path)
    except OSError as exc:
        raise StorageError(f"cannot remove environment {name} at {root}: {exc}") from None
    if is_local(root):  # folders left empty
        for folder, _, _ in sorted(os.walk(local_path(root)), key=lambda w: -len(w[0])):
            if not os.listdir(folder):
                os.rmdir(folder)
    return Dropped(len(files) - len(kept), kept)


__all__ = [
    "MANIFEST",
    "Dropped",
    "drop_environment",
    "environment_names",
    "environment_size",
    "production_references",
    "read_manifest",
    "write_manifest",
]
