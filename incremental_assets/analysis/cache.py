"""Results that do not change between loads, kept in the project's ``.cache/incremental_assets/`` folder.

A result is stored under a key that hashes everything it is computed from (the caller's inputs, the
sqlglot version and the source of the modules computing it), so an edited model, macro or setting, or
an upgrade, makes a new key: an entry is never invalidated, only no longer looked up. One JSON file per
kind of result, read once per load and written once (atomically) when the load added entries; entries
not used by the last load are dropped when they outnumber the used ones. ``INCREMENTAL_ASSETS_CACHE_DIR``
moves the folder; ``off`` turns the cache off. A folder that cannot be written leaves the cache empty.

>>> import tempfile, pathlib
>>> cache = ResultCache(pathlib.Path(tempfile.mkdtemp()), "squares")
>>> cache.get("k"), cache.put("k", 4), cache.save(), ResultCache(cache.folder, "squares").get("k")
(None, 4, None, 4)
"""

from __future__ import annotations

import hashlib
import json
import os
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


def result_key(*parts: Any) -> str:
    """A key hashing JSON-able ``parts``."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


class ResultCache:
    """One kind of result (``name``) in ``folder`` (None: nothing kept)."""

    def __init__(self, folder: Path | None, name: str) -> None:
        self.folder = folder
        self.path = folder / f"{name}.json" if folder else None
        self._stored: dict[str, Any] = {}
        self._used: dict[str, Any] = {}
        self._added = False
        if self.path is not None:
            try:
                self._stored = json.loads(self.path.read_text())
            except (OSError, ValueError):
                self._stored = {}

    def get(self, key: str) -> Any:
        found = self._stored.get(key)
        if found is not None:
            self._used[key] = found
        return found

    def put(self, key: str, value: Any) -> Any:
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
            with os.fdopen(handle, "w") as out:
                json.dump(entries, out, separators=(",", ":"))
            os.replace(temporary, self.path)
        except OSError:
            return
        self._stored, self._added = entries, False
