"""Results that do not change between loads, kept in the project's ``.cache/incremental_assets/`` folder.

A result is stored under a key that hashes everything it is computed from (the caller's inputs, the
sqlglot version and the source of the modules computing it), so an edited model, macro or setting, or
an upgrade, makes a new key: an entry is never invalidated, only no longer looked up. One JSON file per
kind of result, read once per load and written once (atomically) when the load added entries; entries
not used by the last load are dropped when they outnumber the used ones. ``INCREMENTAL_ASSETS_CACHE_DIR``
moves the folder; ``off`` turns the cache off. A folder that cannot be written leaves the cache empty.

Results that are Python values rather than JSON (a parsed model and its query's syntax tree) are kept
pickled (``pickled=True``: one ``.pickle`` file, each entry unpickled only when looked up; an entry that no
longer unpickles is a miss). Unpickling runs code named in the file, so the folder is trusted as the
project's own ``macros/*.py`` are, which every load imports.

>>> import tempfile, pathlib
>>> cache = ResultCache(pathlib.Path(tempfile.mkdtemp()), "squares")
>>> cache.get("k"), cache.put("k", 4), cache.save(), ResultCache(cache.folder, "squares").get("k")
(None, 4, None, 4)
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import tempfile
from pathlib import Path
from typing import Any

import sqlglot

from incremental_assets.model.settings import read_env_settings

_CODE_DIGESTS: dict[tuple[str, ...], str] = {}


def cache_folder(project_directory: Path) -> Path | None:
    """Where a project's cached results are kept (None: the cache is off)."""
    chosen = read_env_settings().cache_dir
    if chosen and chosen.lower() == "off":
        return None
    return Path(chosen) if chosen else Path(project_directory) / ".cache" / "incremental_assets"


def code_digest(*modules: Any) -> str:
    """The sqlglot version and the source of ``modules``: what a cached result was computed by."""
    names = tuple(m.__name__ for m in modules)
    if names not in _CODE_DIGESTS:
        digest = hashlib.sha256(sqlglot.__version__.encode())
        for module in modules:
            digest.update(Path(module.__file__).read_bytes())
        _CODE_DIGESTS[names] = digest.hexdigest()
    return _CODE_DIGESTS[names]


def package_digest(*packages: Any) -> str:
    """The sqlglot version and the source of every module of ``packages`` (and their subpackages)."""
    names = tuple(p.__name__ for p in packages)
    if names not in _CODE_DIGESTS:
        digest = hashlib.sha256(sqlglot.__version__.encode())
        for package in packages:
            digest.update(folder_digest(Path(package.__file__).parent, "*.py").encode())
        _CODE_DIGESTS[names] = digest.hexdigest()
    return _CODE_DIGESTS[names]


def folder_digest(folder: Path | None, pattern: str = "*") -> str:
    """The names and contents of the files under ``folder`` matching ``pattern`` (subfolders too; hidden
    files and ``__pycache__`` left out); "" for no folder."""
    digest = hashlib.sha256()
    if folder is None or not folder.is_dir():
        return ""
    for path in sorted(folder.rglob(pattern)):
        parts = path.relative_to(folder).parts
        if "__pycache__" in parts or any(p.startswith(".") for p in parts) or not path.is_file():
            continue
        data = path.read_bytes()
        digest.update(f"{'/'.join(parts)}\0{len(data)}\0".encode() + data)
    return digest.hexdigest()


def result_key(*parts: Any) -> str:
    """A key hashing JSON-able ``parts``."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


class ResultCache:
    """One kind of result (``name``) in ``folder`` (None: nothing kept); ``pickled``: any picklable values."""

    def __init__(self, folder: Path | None, name: str, *, pickled: bool = False) -> None:
        self.folder = folder
        self.pickled = pickled
        self.path = folder / f"{name}.{'pickle' if pickled else 'json'}" if folder else None
        self._stored: dict[str, Any] = {}
        self._used: dict[str, Any] = {}
        self._added = False
        if self.path is not None:
            try:
                read = pickle.loads(self.path.read_bytes()) if pickled else json.loads(self.path.read_text())
                self._stored = read if isinstance(read, dict) else {}
            except (OSError, ValueError, pickle.UnpicklingError, EOFError):
                self._stored = {}

    def get(self, key: str) -> Any:
        found = self._stored.get(key)
        if found is not None and self.pickled:
            try:
                value = pickle.loads(found)
            except Exception:  # written by other code (the key names the code, yet): recomputed
                return None
            self._used[key] = found
            return value
        if found is not None:
            self._used[key] = found
        return found

    def put(self, key: str, value: Any) -> Any:
        if self.pickled:
            try:
                self._used[key] = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
            except Exception:  # a value holding something that does not pickle is not kept
                return value
        else:
            self._used[key] = value
        self._added = True
        return value

    def save(self) -> None:
        """Write the entries when this load added some (the unused ones kept while they are the fewer)."""
        if self.path is None or not self._added:
            return
        unused = {k: v for k, v in self._stored.items() if k not in self._used}
        entries = {**unused, **self._used} if len(unused) <= len(self._used) else dict(self._used)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            handle, temporary = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.")
            with os.fdopen(handle, "wb" if self.pickled else "w") as out:
                if self.pickled:
                    pickle.dump(entries, out, protocol=pickle.HIGHEST_PROTOCOL)
                else:
                    json.dump(entries, out, separators=(",", ":"))
            os.replace(temporary, self.path)
        except OSError:
            return
        self._stored, self._added = entries, False
