"""A cheap fingerprint of the files a project is loaded from, to notice an edit without loading it.

It covers, in each project folder, every file under ``models/``, ``macros/``, ``audits/``,
``external_models/`` and ``seeds/``, and the folder's own configuration and code files (``*.yaml``,
``*.yml``, ``*.toml``, ``*.py``: sources.yaml, incremental_assets.yaml, config.yaml, definitions.py).
Only names, sizes and modification times are read (no file is opened), so it can run every few
seconds; data folders, the warehouse and hidden folders (``.dagster``) are not looked at.

>>> import pathlib, tempfile, os
>>> d = pathlib.Path(tempfile.mkdtemp()); (d / "models").mkdir()
>>> _ = (d / "models" / "a.sql").write_text("SELECT 1")
>>> before = project_stamp([d])
>>> _ = (d / "data.csv").write_text("x")  # not a project file
>>> project_stamp([d]) == before
True
>>> _ = (d / "models" / "a.sql").write_text("SELECT 12")
>>> project_stamp([d]) == before
False
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Iterable, Iterator

FOLDERS = ("models", "macros", "audits", "external_models", "seeds")
TOP_LEVEL = (".yaml", ".yml", ".toml", ".py")


def _files(directory: Path) -> Iterator[Path]:
    for entry in sorted(directory.iterdir()) if directory.is_dir() else ():
        if entry.is_file() and entry.suffix in TOP_LEVEL and not entry.name.startswith("."):
            yield entry
    for name in FOLDERS:
        folder = directory / name
        for root, dirs, files in os.walk(folder):
            dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "__pycache__")
            for file in sorted(files):
                if not file.startswith("."):
                    yield Path(root) / file


def project_stamp(directories: Iterable[str | Path]) -> str:
    """A digest of the project's file names, sizes and modification times (nanoseconds)."""
    digest = hashlib.sha256()
    for directory in directories:
        directory = Path(directory)
        for path in _files(directory):
            try:
                st = path.stat()
            except OSError:  # removed while listing: the next stamp sees it gone
                continue
            digest.update(f"{path.relative_to(directory)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return digest.hexdigest()
